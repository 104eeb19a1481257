"""``latch-map-parallel-loops``: every top-level ``scf.parallel`` with static bounds becomes a
one-dimensional ``gpu.launch`` over its flattened iteration space.

``convert-linalg-to-parallel-loops`` leaves one ``scf.parallel`` per linalg op.  Mapping its
loops one-to-one onto thread and block dimensions (``scf-parallel-loop-tiling`` with a 32×8
tile + ``gpu-map-parallel-loops``) wastes most threads whenever a loop is short: a 1-D loop
gets 32-thread blocks, a ``[2048, 1]`` loop runs one thread of every 32 (the size-1 loop is
mapped to ``threadIdx.x``), and a ``[2, 12, 1024, 1]`` loop similar.  Here the iteration
space is numbered linearly instead — the first loop varying fastest, so after
latch-wrap-host-compute's ordering (the unit-stride dimension first) consecutive threads
touch consecutive addresses — and blocks of ``T`` threads cover it (``T`` is the product of
the ``block`` shape, default 32,8 → 256): thread ``i = blockIdx.x * T + threadIdx.x`` runs
iteration ``i`` if ``i < total``,
with the loop indices recovered by division and remainder by the (constant) trip counts.

**Several iterations per thread.**  A kernel of one iteration per thread spends its time
starting and retiring blocks rather than moving bytes when the body is a few loads and a
store (on the H200 a [32768, 32768] f32 fill ran at 1.7 TB/s, 40% of copy bandwidth).  When
the body is straight-line code (loads, stores, arithmetic) and the iteration space is large —
``E`` (``per-thread``, default 4; else 2) divides the iterations into whole blocks and still
leaves at least ``min-blocks`` blocks (default 2048, two waves of 8 resident blocks on each of
132 SMs) — each block covers ``E * T`` consecutive iterations and thread ``t`` of block ``b``
runs iterations ``b * E * T + e * T + t`` for ``e < E``: each of the ``E`` steps is a
coalesced sweep of the block's threads.  The loads of all ``E`` iterations are issued before
their arithmetic and stores (``E`` loads in flight per thread instead of one), which is
legal when no iteration reads what another one writes: every load from an allocation the
body stores to reads exactly the stored element (the same memref and indices — an in-place
elementwise update); otherwise the iterations run one after another.

**Vector lanes** (``vector``, default on; ``passes/vector_lanes.py``).  When the fastest
loop walks the contiguous last dimension of every buffer the body touches, each of those
iterations becomes ``V`` consecutive ones (16 bytes of the narrowest element: 4 for f32, 8
for bf16, 8 for bf16 read with f32 — but at most 16 bytes of every element stored,
``whole-stores``, so a bf16 gradient beside f32 state stored takes 4; ``narrow-lanes=false``:
16 bytes of the widest): one
``vector.load``/``vector.store`` per buffer instead of ``V`` scalar accesses,
the arithmetic cloned per lane, lane-independent values (other loops' index math, a
per-row scale, a fill's constant) computed once.  The iteration space is then counted in
vectors, and the several-per-thread sweeps above apply to vectors.

**Guarded loads** (``guard-loads``, default on; :func:`guarded_loads`).  A load read only
as ``select(c, x, 0)``, where ``c`` does not depend on the fastest loop (so it holds for a
whole vector, and for the consecutive threads of a warp), is issued only where ``c`` holds
(``scf.if c { load } else { 0 }``); the ops computing ``c`` come first (with several
iterations a thread: every iteration's condition, then every iteration's loads).
latch-form-contraction-kernels writes such selects into the elementwise kernels between
the expert products (``c``: the row is before its expert's extent,
``empty_rows.skip_row_loads``), so the capacity rows no token took cost their stores alone.

Loops with non-constant bounds or a nested ``scf.parallel`` are left to the upstream passes
that follow in ``latch-form-kernels``.  Options: ``block`` (thread-block shape, default
``32,8``; its product is the number of threads per block), ``per-thread`` (most iterations
per thread, 1 for one), ``min-blocks``, ``vector`` (bool, default true), ``narrow-lanes``
(bool, default true), ``whole-stores`` (bool, default true), ``guard-loads`` (bool,
default true).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-map-parallel-loops)'``
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import (ModulePass, float_constant, function_definitions, int_constant,
                               operation as _op)
from latch.passes.buffer_views import root
from latch.passes.generic_body import (clone_body_ops, compare, delinearize, flat_launch,
                                       guarded_value, index_constant, zero_of)
from latch.passes.vector_lanes import LaneEmitter, vector_width

_MAX_GRID_X = 2 ** 31 - 1


def _nested_parallel(op) -> bool:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = _op(inner)
                if inner.name == "scf.parallel" or _nested_parallel(inner):
                    return True
    return False


@dataclasses.dataclass(frozen=True)
class MapParallelLoops(ModulePass):
    name = "latch-map-parallel-loops"
    summary = ("top-level scf.parallel loops with static bounds -> 1-D gpu.launch over the "
               "flattened iteration space (first loop fastest)")

    block: tuple[int, ...] = (32, 8)
    per_thread: int = 4
    min_blocks: int = 2048
    vector: bool = True
    narrow_lanes: bool = True
    whole_stores: bool = True
    guard_loads: bool = True

    def apply(self, module) -> None:
        threads = math.prod(self.block)
        if threads <= 0:
            return
        for func_op in function_definitions(module):
            for inner in list(func_op.regions[0].blocks[0].operations):
                inner = _op(inner)
                if inner.name == "scf.parallel":
                    _map(inner, threads, self.per_thread, self.min_blocks, self.vector,
                         self.narrow_lanes, self.whole_stores, self.guard_loads)


# ops a straight-line body may hold for several iterations per thread
_PURE_PREFIXES = ("arith.", "math.", "index.")


def _straight_line(ops) -> bool:
    return all(not o.regions and (o.name in ("memref.load", "memref.store")
                                  or o.name.startswith(_PURE_PREFIXES)) for o in ops)


def _per_thread(total: int, threads: int, most: int, min_blocks: int) -> int:
    """Iterations per thread: the largest of ``most``, ``most / 2``, … (> 1) that splits
    ``total`` into whole blocks, at least ``min_blocks`` of them; else 1."""
    e = most
    while e > 1:
        if total % (threads * e) == 0 and total // (threads * e) >= min_blocks:
            return e
        e //= 2
    return 1


def _loads_first(ops) -> bool:
    """Whether the loads of several iterations of the straight-line body ``ops`` may all be
    issued before any of their stores: every load from an allocation that the body stores
    to reads the element it stores (same memref, same index values), before storing it."""
    for i, ld in enumerate(ops):
        if ld.name != "memref.load":
            continue
        mem, idx = ld.operands[0], list(ld.operands)[1:]
        for j, st in enumerate(ops):
            if st.name != "memref.store" or root(st.operands[1]) != root(mem):
                continue
            if j < i or st.operands[1] != mem or list(st.operands)[2:] != idx:
                return False                 # another element, or a read after the write
    return True


def _load_slice(ops) -> list:
    """The loads of ``ops`` and the ops their operands are computed by, in body order."""
    needed, slice_ = set(), []
    for op in reversed(ops):
        if op.name == "memref.load" or any(r in needed for r in op.results):
            slice_.append(op)
            for v in op.operands:
                needed.add(v)
    return slice_[::-1]


def _is_zero(v) -> bool:
    """Whether ``v`` is an ``arith.constant`` 0 (integer or float, either sign)."""
    return int_constant(v) == 0 or float_constant(v) == 0.0


def guarded_loads(ops, iv) -> tuple[dict, list]:
    """({load result: condition}, the ops computing the conditions, in body order) for the
    loads of the straight-line body ``ops`` that are read only as ``select(c, load, 0)``
    with ``c`` computed in the body without the fastest loop's index ``iv``, another such
    load or a load of a buffer the body stores to (the conditions move to the front of the
    body: latch-form-contraction-kernels' elementwise readers of expert rows, ``c`` is
    ``row < extent``).  Such a load need only be issued where ``c`` holds: elsewhere its
    select yields the 0 whatever it read."""
    producer = {r: o for o in ops for r in o.results}
    stored = {root(o.operands[1]) for o in ops if o.name == "memref.store"}

    def slice_of(v) -> list | None:
        seen, order, todo = set(), [], [v]
        while todo:
            x = todo.pop()
            if x == iv:
                return None
            o = producer.get(x)
            if o is None or o in seen:
                continue
            if o.name == "memref.load" and root(o.operands[0]) in stored:
                return None               # it may not move before the body's stores
            seen.add(o)
            order.append(o)
            todo.extend(o.operands)
        return order

    found = {}
    for o in ops:
        if o.name != "memref.load":
            continue
        uses = list(o.results[0].uses)
        if len(uses) != 1:
            continue
        sel = _op(uses[0].owner)
        if sel.name != "arith.select" or uses[0].operand_number != 1 or \
                not _is_zero(sel.operands[2]):
            continue
        cond = sel.operands[0]
        ops_of = slice_of(cond)
        if ops_of is not None:
            found[o.results[0]] = (cond, ops_of)
    loads = {producer[r] for r in found}
    guards, needed = {}, set()
    for r, (cond, ops_of) in found.items():
        if any(x in loads for x in ops_of):
            continue                      # a condition from a guarded load: not first
        guards[r] = cond
        needed.update(ops_of)
    return guards, [o for o in ops if o in needed]


def _clone_guarded(ops, mapping: dict, guards: dict) -> None:
    """``clone_body_ops(ops, mapping, ())`` with the loads of ``guards`` issued only where
    their condition holds (:func:`guarded_loads`)."""
    for op in ops:
        if op.name == "memref.load" and op.results[0] in guards:
            cond = guards[op.results[0]]

            def load_one(op=op):
                new = op.clone()
                for i, operand in enumerate(list(new.operands)):
                    new.operands[i] = mapping.get(operand, operand)
                return new.results[0]
            mapping[op.results[0]] = guarded_value(mapping.get(cond, cond), load_one,
                                              op.results[0].type)
            continue
        clone_body_ops([op], mapping, ())


def _guard_in_place(load, cond) -> None:
    """Put the load ``load`` (in place in a launch body) under ``scf.if cond``."""
    from mlir import ir
    from mlir.dialects import scf

    t = load.results[0].type
    with ir.InsertionPoint(load), load.location:
        branch = scf.IfOp(cond, [t], has_else=True)
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([zero_of(t)])
    load.results[0].replace_all_uses_with(branch.results[0])
    with ir.InsertionPoint(branch.then_block), load.location:
        anchor = scf.YieldOp([load.results[0]])
    load.move_before(anchor)


def _map(par, threads: int, most: int = 1, min_blocks: int = 0, vector: bool = False,
         narrow: bool = True, whole_stores: bool = True, guard_loads: bool = True) -> None:
    from mlir import ir
    from mlir.dialects import scf

    seg = list(ir.DenseI32ArrayAttr(par.attributes["operandSegmentSizes"]))
    n = seg[0]
    if seg[3] != 0 or _nested_parallel(par):
        return
    operands = list(par.operands)
    lbs, ubs, steps = operands[:n], operands[n:2 * n], operands[2 * n:3 * n]
    bounds = [(int_constant(lo), int_constant(hi), int_constant(st))
              for lo, hi, st in zip(lbs, ubs, steps)]
    if any(None in b for b in bounds) or any(st <= 0 for _, _, st in bounds):
        return
    counts = [max(0, -(-(hi - lo) // st)) for lo, hi, st in bounds]
    total = math.prod(counts)
    if total == 0:
        par.erase()
        return
    body = par.regions[0].blocks[0]
    ops = [_op(o) for o in body.operations if _op(o).name != "scf.reduce"]
    straight = _straight_line(ops)
    guards, conditions = guarded_loads(ops, body.arguments[0]) if straight and guard_loads \
        else ({}, [])
    if guards:           # the conditions first: the loads they guard wait for them
        kept = set(conditions)
        anchor = next(o for o in ops if o not in kept)
        for o in conditions:
            o.move_before(anchor)
        ops = [_op(o) for o in body.operations if _op(o).name != "scf.reduce"]
        conditions = [o for o in ops if o in kept]
    lanes = vector_width(ops, body.arguments[0], counts[0], *bounds[0][::2], narrow=narrow,
                         whole_stores=whole_stores) if straight and vector else 1
    if lanes > 1:        # the fastest loop counted in vectors of `lanes` iterations
        counts = [counts[0] // lanes] + counts[1:]
        bounds = [(0, counts[0], 1)] + bounds[1:]
        total //= lanes
    block_threads = min(threads, -(-total // 32) * 32)
    per = _per_thread(total, block_threads, most, min_blocks) if straight else 1
    blocks = -(-total // (block_threads * per))
    if blocks > _MAX_GRID_X:
        return
    index = ir.IndexType.get()

    def body_map(ivs) -> dict:
        if lanes > 1:    # the first lane's index of the fastest loop
            ivs = [ir.Operation.create("arith.muli", [index],
                                       [ivs[0], index_constant(lanes)]).result, *ivs[1:]]
        return dict(zip(body.arguments, ivs))

    def emitter(m):
        return LaneEmitter(body.arguments[0], m, lanes, guards) if lanes > 1 else None

    if per > 1:
        with ir.InsertionPoint(par), par.location:
            _, end, linear = flat_launch(blocks, block_threads, span=block_threads * per)
        with ir.InsertionPoint(end), par.location:
            maps = []
            ivs = _induction_values(linear, bounds, counts)
            for e in range(per):
                if e and counts[0] % (block_threads * per) == 0:
                    # the block's span lies within one row of the first loop: only its index moves
                    step = index_constant(e * block_threads * bounds[0][2])
                    ivs_e = [ir.Operation.create("arith.addi", [index], [ivs[0], step]).result,
                             *ivs[1:]]
                elif e:
                    lin = ir.Operation.create("arith.addi", [index],
                                              [linear, index_constant(e * block_threads)]).result
                    ivs_e = _induction_values(lin, bounds, counts)
                else:
                    ivs_e = ivs
                maps.append(body_map(ivs_e))
            first = _load_slice(ops) if _loads_first(ops) else []
            # every iteration's conditions, then every iteration's loads, then the rest
            # (iterations one after another when their loads may not go first)
            phases = [conditions, [o for o in first if o not in conditions],
                      [o for o in ops if o not in first and o not in conditions]] \
                if first else [ops]
            emitters = [emitter(m) for m in maps]
            for phase in phases:
                for m, em in zip(maps, emitters):
                    em.emit(phase) if em else _clone_guarded(phase, m, guards)
        par.erase()
        return
    with ir.InsertionPoint(par), par.location:
        _, end, linear = flat_launch(blocks, block_threads)
    guard = None
    if total % block_threads:
        with ir.InsertionPoint(end), par.location:
            guard = scf.IfOp(compare("ult", linear, index_constant(total)))
    inside = ir.InsertionPoint(guard.then_block) if guard else ir.InsertionPoint(end)
    if lanes > 1:
        with inside, par.location:
            em = emitter(body_map(_induction_values(linear, bounds, counts)))
            em.emit(ops)
            if guard:
                scf.YieldOp([])
        par.erase()
        return
    with inside, par.location:
        ivs = _induction_values(linear, bounds, counts)
        anchor = scf.YieldOp([]) if guard else end
    for arg, iv in zip(body.arguments, ivs):
        arg.replace_all_uses_with(iv)
    for inner in list(body.operations):
        inner = _op(inner)
        if inner.name == "scf.reduce":
            continue
        inner.move_before(_op(anchor))
        if inner.name == "memref.load" and inner.results[0] in guards:
            _guard_in_place(inner, guards[inner.results[0]])
    par.erase()


def _induction_values(linear, bounds, counts) -> list:
    """The loop indices of iteration number ``linear`` (first loop fastest), with the loops'
    lower bounds and steps applied."""
    from mlir import ir

    index = ir.IndexType.get()
    ivs = [None] * len(bounds)
    delinearize(linear, list(range(len(bounds))), counts, ivs)
    for k, (lo, _, st) in enumerate(bounds):
        v = ivs[k]
        if st != 1:
            v = ir.Operation.create("arith.muli", [index], [v, index_constant(st)]).result
        if lo != 0:
            v = ir.Operation.create("arith.addi", [index], [v, index_constant(lo)]).result
        ivs[k] = v
    return ivs
