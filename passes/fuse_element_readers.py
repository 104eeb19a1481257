"""``latch-fuse-element-readers``: a parallel loop that reads, element for element, what the
parallel loop right before it stored runs in that loop's threads (stage 'kernels', after
``latch-register-accumulators``).

Elementwise linalg ops fuse into their consumers on tensors, but a reduction's reader does
not fuse into the reduction, and a reader that sees the reduction's output through a
reshape does not fuse with it by rows either (latch-fuse-rows wants one row loop).
TinyMoE's routing rank is one: the rank of each (token, choice) slot is a sum over the
experts written as ``[64, 64]`` (the blocked scan's shape), and the next op reads it
flattened as ``[4096]`` to decide which slots are kept and where they go — two launches on
the update's critical path in every layer, the second a few microseconds of latency for
4096 elements.

After ``convert-linalg-to-parallel-loops`` both are ``scf.parallel`` loops with one
thread per element.  When

* the second loop ``P2`` is the next op after ``P1`` but for allocations, views and
  constants (which move in front of ``P1``);
* ``P1`` stores into the buffer ``B`` once, directly in its body, at indices that are its
  induction variables (in any order) visiting every element of ``B`` once; ``B`` is a
  whole allocation or a view of all of it with the identity layout;
* every access of ``P2`` to ``B``'s allocation is a load through a view ``V`` of all of it
  (identity layout, the same element type) at ``P2``'s induction variables in order, which
  run from 0 to ``V``'s shape in steps of one;
* ``P2`` touches no other buffer that ``P1`` writes, ``P2`` writes no buffer that ``P1``
  reads or writes (planned arena slots that overlap count as the same buffer; not ``B``
  either: a kernel storing one buffer twice would have latch-nonfinite-checks check the
  first value too, which a later op may have made finite), and holds only loads, stores,
  pure ``arith``/``math``/``index`` ops and ``scf.for``/``scf.if``;

then ``P2``'s body moves into ``P1``'s after the store: its induction variables become the
row-major position of ``P1``'s element in ``B`` split over ``V``'s shape, and its loads of
``B`` the value just stored.  Each thread of ``P1`` thus computes one element of ``B`` and
then ``P2``'s work on that same element; no thread reads what another wrote.  The store
stays (later ops may read ``B``).

**Row readers** (option ``rows``, on by default).  When ``P2`` instead reads whole rows of
``B`` — its loads of ``B`` (through ``B`` itself, not a reshape) index the leading
dimensions with ``P2``'s induction variables in order, which run over those dimensions,
and the trailing ones with anything — ``P1`` moves into ``P2``: each thread of ``P2`` first
runs ``P1``'s iterations of its row (``scf.for`` loops over ``P1``'s other induction
variables, with ``P1``'s bounds), then its own body, whose loads of ``B`` now read what the
same thread just stored.  The other conditions are those above.  TinyMoE's router is one:
its logits are a split-K product whose partial sums a ``[2048, 8]`` loop adds up (one
thread an element), and the softmax and top-2 choice read each token's 8 logits (one
thread a token) — a launch on every layer's critical path.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-fuse-element-readers)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.buffer_views import INERT, covers, may_share_bytes, root, whole_view
from latch.passes.generic_body import delinearize, index_constant
from latch.passes.register_accumulators import nested_ops

_PURE = ("arith.", "math.", "index.")
_ALLOWED = ("memref.load", "memref.store", "scf.for", "scf.if", "scf.yield", "scf.reduce")
_MOVABLE = tuple(n for n in INERT if n != "memref.dealloc")


@dataclasses.dataclass(frozen=True)
class FuseElementReaders(ModulePass):
    name = "latch-fuse-element-readers"
    summary = ("a parallel loop reading element for element what the parallel loop before "
               "it stored runs in that loop's threads")

    rows: bool = True

    def apply(self, module) -> None:
        for f in function_definitions(module):
            ops = [_op(o) for o in f.regions[0].blocks[0].operations]
            k = 0
            while k < len(ops):
                first = ops[k]
                at = k + 1
                while at < len(ops) and ops[at].name in _MOVABLE:
                    at += 1
                if first.name != "scf.parallel" or at >= len(ops):
                    k += 1
                elif _fuse(first, ops[at], ops[k + 1:at]):
                    # the ops between went in front of P1, P2 is gone: P1 may fuse again
                    ops = ops[:k] + ops[k + 1:at] + [first] + ops[at + 1:]
                    k += at - k - 1
                elif self.rows and _fuse_rows(first, ops[at], ops[k + 1:at]):
                    # the ops between went in front of P1, P1 is gone: P2 may fuse next
                    ops = ops[:k] + ops[k + 1:at] + ops[at:]
                    k = at - 1
                else:
                    k += 1


def _stored_buffer(p1, p2):
    """(P1's one store into the one buffer P2 touches of those P1 writes, the buffer it
    stores into, its indices, the loads of P2 from that buffer's allocation) when ``P1`` and
    ``P2`` may fuse as far as the buffers they share go (module docstring): nested ops
    allowed, the store covering a whole view, ``P2`` writing nothing ``P1`` touches and
    touching nothing else ``P1`` writes; else None."""
    from mlir import ir

    if p2.name != "scf.parallel" or len(p1.results) or len(p2.results):
        return None
    inner1, inner2 = nested_ops(p1), nested_ops(p2)
    stores1 = [o for o in inner1 if o.name == "memref.store"]
    if any(o.name not in _ALLOWED and not o.name.startswith(_PURE) for o in inner1 + inner2):
        return None
    reads1 = [o.operands[0] for o in inner1 if o.name == "memref.load"]
    writes1 = [o.operands[1] for o in stores1]
    # the buffer P2 reads of those P1 writes: exactly one, read only
    shared = {root(v) for v in writes1} & \
        {root(o.operands[0] if o.name == "memref.load" else o.operands[1])
         for o in inner2 if o.name in ("memref.load", "memref.store")}
    if len(shared) != 1:
        return None
    (base,) = shared
    mine = [o for o in stores1 if root(o.operands[1]) == base]
    if len(mine) != 1 or _op(mine[0].parent) != p1:
        return None
    store = mine[0]
    buf, where = store.operands[1], list(store.operands[2:])
    if not whole_view(buf) or not covers(p1, where, ir.MemRefType(buf.type).shape):
        return None
    loads = []
    for o in inner2:
        if o.name == "memref.store":
            v = o.operands[1]
            if any(may_share_bytes(v, w) for w in reads1 + writes1):
                return None
        elif o.name == "memref.load":
            v = o.operands[0]
            if root(v) == base:
                loads.append(o)
            elif any(may_share_bytes(v, w) for w in writes1):
                return None
    if not loads or len({str(o.operands[0].type) for o in loads}) != 1:
        return None
    return store, buf, where, loads


def _fuse(p1, p2, between) -> bool:
    from mlir import ir

    found = _stored_buffer(p1, p2)
    if found is None:
        return False
    store, buf, where, loads = found
    body1, body2 = p1.regions[0].blocks[0], p2.regions[0].blocks[0]
    ivs2 = list(body2.arguments)
    for o in loads:
        v = o.operands[0]
        if not whole_view(v) or list(o.operands[1:]) != ivs2 or \
                not covers(p2, ivs2, ir.MemRefType(v.type).shape):
            return False
    # move the allocations, views and constants between the loops in front of P1
    for o in between:
        o.move_before(p1)
    terminator = _op(list(body1.operations)[-1])
    with ir.InsertionPoint(terminator), p2.location:
        shape = list(ir.MemRefType(buf.type).shape)
        linear = None
        for d, idx in enumerate(where):
            if linear is None:
                linear = idx
            else:
                scaled = ir.Operation.create("arith.muli", [idx.type],
                                             [linear, index_constant(shape[d])]).result
                linear = ir.Operation.create("arith.addi", [idx.type], [scaled, idx]).result
        view_shape = list(ir.MemRefType(loads[0].operands[0].type).shape)
        dims = [None] * len(view_shape)
        delinearize(linear, list(reversed(range(len(view_shape)))), view_shape, dims)
    for o in [_op(x) for x in body2.operations][:-1]:          # all but scf.reduce
        o.move_before(terminator)
    for iv, value in zip(ivs2, dims):
        iv.replace_all_uses_with(value)
    stored = store.operands[0]
    for load in loads:
        load.results[0].replace_all_uses_with(stored)
        load.erase()
    p2.erase()
    return True


def _fuse_rows(p1, p2, between) -> bool:
    """P1 into P2 when P2 reads whole rows of what P1 stored (module docstring)."""
    from mlir import ir
    from mlir.dialects import scf

    found = _stored_buffer(p1, p2)
    if found is None:
        return False
    _, buf, where, loads = found
    body1, body2 = p1.regions[0].blocks[0], p2.regions[0].blocks[0]
    ivs1, ivs2 = list(body1.arguments), list(body2.arguments)
    shape = list(ir.MemRefType(buf.type).shape)
    m = len(ivs2)
    if not 0 < m < len(where) or not covers(p2, ivs2, shape[:m]) or \
            any(o.operands[0] != buf or list(o.operands[1:1 + m]) != ivs2 for o in loads):
        return False
    # P1's iterations of P2's row: its induction variables of B's leading dimensions are
    # P2's, the others loop with P1's bounds (the order of P1's loops, the first outermost)
    row = {where[d]: ivs2[d] for d in range(m)}
    n = len(ivs1)
    operands = list(p1.operands)
    for o in between:
        o.move_before(p1)
    first = _op(list(body2.operations)[0])
    value, innermost = {}, None         # innermost: the yield of the innermost loop
    with p1.location:
        for k, iv in enumerate(ivs1):
            if iv in row:
                value[iv] = row[iv]
                continue
            with ir.InsertionPoint(first if innermost is None else innermost):
                loop = scf.ForOp(operands[k], operands[n + k], operands[2 * n + k])
            with ir.InsertionPoint(loop.body):
                innermost = scf.YieldOp([])
            value[iv] = loop.induction_variable
    for o in [_op(x) for x in body1.operations][:-1]:          # all but scf.reduce
        o.move_before(innermost)
    for iv in ivs1:
        iv.replace_all_uses_with(value[iv])
    p1.erase()
    return True
