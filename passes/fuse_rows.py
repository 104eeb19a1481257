"""``latch-fuse-rows``: a run of small generics that each work row by row over the same rows
becomes one kernel, a thread per row running them one after another (stage 'kernels',
before ``convert-linalg-to-parallel-loops``).

An MoE router is a chain of tiny ops over ``[tokens, experts]``: the rounding of the
router's logits, the softmax's row max, its sum of exponentials, the probabilities, the
top-1 and top-2 choices with their masks, the gates written into ``[tokens, 2]`` slots and
renormalized — each its own launch of a few microseconds (TinyMoE B2: 19 launches a layer
between the router product's split-K sum and the routing ranks, 4 us each alone, most of
them on the update's critical path).  They cannot fuse as linalg ops (a row
reduction's result is read broadcast by the next op), but every one of them reads and
writes the rows it works on only: row ``r`` of the probabilities needs row ``r`` of the row
max, nothing else.  So one thread can run all of them for one row, in program order, with
the intermediate buffers still written (other kernels may read them) — but read back by the
same thread that wrote them, so no barrier and no other launch is needed.

A **run** is a sequence of ``linalg.generic`` ops on buffers, adjacent in their block except
for allocations, views and constants between them (no memory effects), each with

* static shapes; a *row loop*: the parallel loop every output's first index is (after
  latch-wrap-host-compute's loop ordering it need not be the first loop), of the same trip
  count ``N`` (the rows) in every op of the run; at
  most ``max-row-work`` iterations of its other loops (a row's work) and at most
  ``max-elements`` iterations in all (this is for latency-bound kernels, not for passes over
  memory, which keep their vectorized launches), a body of ``arith``/``math`` ops, loads
  and ``linalg.index``, and no attribute besides the standard three (and
  ``latch.loops_ordered``);
* every buffer some op of the run writes accessed, by every op of the run, only at row ``r``
  of its allocation at row loop index ``r``: the indexing map's first result is the row
  loop, no other result uses it, and the view's first dimension steps whole rows of the
  allocation (its stride is the allocation's row size, its other extents stay inside one
  row); not a function argument, not a buffer latch-nonfinite-checks marked;
* a written allocation whose planned arena slot shares bytes with another buffer of the run
  (the memory plan let buffers with disjoint lifetimes share them: another row's thread
  could overwrite what this one still reads) loses its slot: the launch schedule gives an
  allocation without ``latch.offset`` a slot of its own after the planned arena (these
  buffers are small: TinyMoE B2's arena grows by 0.7 MB).

The run becomes one ``scf.parallel`` over the rows at the place of its last op, whose body
runs each op's other loops as ``scf.for`` nests in loop order, a loop of one trip as its
index 0; a reduction combines each output element's terms in the order the op's own kernel
does (the same bits).  Each op's own launch had a thread per element (or per row, for a
reduction); the fused kernel has a thread per row doing every op's row work one after
another — hence the small ``max-row-work``: the split-K sum before the router's chain (48
iterations a row) stays a launch of its own.

Options: ``max-row-work`` (default 16), ``max-elements`` (default 1048576).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-fuse-rows)'``
"""
from __future__ import annotations

import dataclasses
import math
import re

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.buffer_views import NO_MEMORY_EFFECTS, arena_span, root, slots_overlap
from latch.passes.generic_body import (clone_body_ops, index_constant, indices, load_inputs,
                                       loop_ranges, segments)

_STANDARD_ATTRS = {"indexing_maps", "iterator_types", "operandSegmentSizes",
                   "latch.loops_ordered"}
_BODY_DIALECTS = ("arith", "math")


def _attribute_names(op) -> list:
    return [getattr(a, "name", a) for a in op.attributes]


@dataclasses.dataclass
class _Member:
    op: object
    rows: int
    work: int
    row_loop: int
    maps: list
    ranges: list
    n_in: int


def _member(op, max_row_work: int, max_elements: int):
    """A :class:`_Member` for ``op`` when it may join a run (module docstring), else None."""
    from mlir import ir

    if op.name != "linalg.generic" or op.results or \
            not set(_attribute_names(op)) <= _STANDARD_ATTRS:
        return None
    iters = [str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])]
    maps, ranges = loop_ranges(op)
    if any(r is None or r <= 0 for r in ranges):
        return None
    n_in, _ = segments(op)
    firsts = {m.results[0] for m in maps[n_in:] if m.results}
    if len(firsts) != 1 or len(maps[n_in:]) != sum(1 for m in maps[n_in:] if m.results):
        return None
    first = firsts.pop()
    if not isinstance(first, ir.AffineDimExpr):
        return None
    row_loop = ir.AffineDimExpr(first).position
    if "parallel" not in iters[row_loop]:
        return None
    for v in op.operands:
        if isinstance(v.type, ir.ShapedType) and (
                not isinstance(v.type, ir.MemRefType) or
                not ir.MemRefType(v.type).has_static_shape):
            return None
    work = math.prod(ranges) // ranges[row_loop]
    if work > max_row_work or ranges[row_loop] * work > max_elements:
        return None
    block = op.regions[0].blocks[0]
    for inner in block.operations:
        inner = _op(inner)
        if inner.regions:
            return None
        if inner.name.split(".")[0] in _BODY_DIALECTS or \
                inner.name in ("linalg.index", "linalg.yield", "memref.load"):
            continue
        return None
    return _Member(op, ranges[row_loop], work, row_loop, maps, ranges, n_in)


def _strides_and_offset(t):
    """(strides, offset) of a memref type with a static layout, else None."""
    strides, offset = t.get_strides_and_offset()
    if not t.is_static_stride_or_offset(offset) or \
            not all(t.is_static_stride_or_offset(s) for s in strides):
        return None
    return list(strides), offset


def _row_mapped(v, m, row_loop: int, rows: int) -> bool:
    """Whether operand ``v`` indexed by map ``m`` touches, at row loop index ``r``, only
    row ``r`` of its allocation."""
    from mlir import ir

    if not m.results or not isinstance(m.results[0], ir.AffineDimExpr) or \
            ir.AffineDimExpr(m.results[0]).position != row_loop:
        return False
    name = re.compile(rf"\bd{row_loop}\b")
    if any(name.search(str(e)) for e in list(m.results)[1:]):
        return False
    base = root(v)
    bt, vt = ir.MemRefType(base.type), ir.MemRefType(v.type)
    if not bt.has_static_shape or not bt.shape or bt.shape[0] != rows or not vt.shape or \
            vt.shape[0] != rows:
        return False
    row = math.prod(bt.shape[1:])
    layout = _strides_and_offset(vt)
    base_layout = _strides_and_offset(bt)
    if layout is None or base_layout is None or base_layout[1] != 0 or \
            base_layout[0][0] != row:
        return False
    strides, offset = layout
    reach = offset + sum((n - 1) * s for n, s in zip(vt.shape[1:], strides[1:]))
    return strides[0] == row and 0 <= offset and reach < max(row, 1)


def _written(member) -> list:
    return list(member.op.operands)[member.n_in:]


def _accesses(member) -> list:
    """(buffer, indexing map or None for a load in the body) of each memref ``member``
    reads or writes."""
    from mlir import ir

    out = [(v, m) for v, m in zip(member.op.operands, member.maps)
           if isinstance(v.type, ir.MemRefType)]
    for inner in member.op.regions[0].blocks[0].operations:
        inner = _op(inner)
        if inner.name == "memref.load":
            out.append((inner.operands[0], None))
    return out


def _writable(v) -> bool:
    """Whether the run may write buffer ``v``: an allocation of the function that no pass
    marked (a state buffer's last writer is checked for NaN by latch-nonfinite-checks)."""
    base = root(v)
    if hasattr(base.owner, "arguments"):
        return False
    return not any(a.startswith("latch.") and a != "latch.offset"
                   for a in _attribute_names(_op(base.owner)))


def _shared_slots(members: list):
    """None when ``members`` may not run as one kernel; else the written allocations whose
    planned arena slots share bytes with another buffer of the run (each gets a slot of its
    own: :func:`_unshare`)."""
    written = {}
    for m in members:
        for v in _written(m):
            if not _writable(v):
                return None
            written[root(v)] = v
    roots = {}
    for m in members:
        for v, amap in _accesses(m):
            base = root(v)
            roots[base] = v
            if base in written and (amap is None or not _row_mapped(v, amap, m.row_loop,
                                                                    m.rows)):
                return None
    spans = {b: arena_span(v) for b, v in roots.items()}
    return [b for b in written
            if any(other != b and slots_overlap(spans[b], span) for other, span in spans.items())]


def _unshare(allocations) -> None:
    """Take the memory plan's slot away from each allocation: the launch schedule gives an
    allocation without one a slot of its own after the planned arena."""
    for base in allocations:
        del _op(base.owner).attributes["latch.offset"]


def _emit(members: list) -> None:
    """One ``scf.parallel`` over the rows running every member's other loops as ``scf.for``
    nests, at the place of the last member; the members are erased."""
    from mlir import ir
    from mlir.dialects import scf

    last = members[-1].op
    index = ir.IndexType.get()
    with ir.InsertionPoint(last), last.location:
        lo, one = index_constant(0), index_constant(1)
        par = ir.Operation.create(
            "scf.parallel", [], operands=[lo, index_constant(members[0].rows), one],
            attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0])},
            regions=1)
        body = par.regions[0].blocks.append(index)
    with ir.InsertionPoint(body), last.location:
        term = ir.Operation.create("scf.reduce", [], operands=[], regions=0)
    row = body.arguments[0]
    for m in members:
        op = m.op
        with ir.InsertionPoint(term), op.location:
            dims = [None] * len(m.ranges)
            dims[m.row_loop] = row
            ip = ir.InsertionPoint(term)
            for d in [d for d in range(len(m.ranges)) if d != m.row_loop]:
                if m.ranges[d] == 1:
                    with ip:
                        dims[d] = index_constant(0)
                    continue
                with ip:
                    loop = scf.ForOp(index_constant(0), index_constant(m.ranges[d]),
                                     index_constant(1))
                dims[d] = loop.induction_variable
                with ir.InsertionPoint(loop.body):
                    ip = ir.InsertionPoint(scf.YieldOp([]))
            with ip:
                _emit_body(op, m, dims)
        op.erase()


def _emit_body(op, m, dims) -> None:
    """The body of generic ``op`` at loop indices ``dims``: inputs (and the outputs it
    reads) loaded, body cloned, yielded values stored."""
    from mlir import ir

    block = op.regions[0].blocks[0]
    operands = list(op.operands)
    mapping: dict = {}
    load_inputs(block, operands[:m.n_in], m.maps[:m.n_in], dims, mapping)
    outs = operands[m.n_in:]
    for k, out in enumerate(outs):
        arg = block.arguments[m.n_in + k]
        if any(True for _ in arg.uses):
            elt = ir.MemRefType(out.type).element_type
            mapping[arg] = ir.Operation.create(
                "memref.load", [elt], [out] + indices(m.maps[m.n_in + k], dims)).result
    body = [_op(o) for o in block.operations]
    clone_body_ops(body[:-1], mapping, dims)
    for k, (out, y) in enumerate(zip(outs, body[-1].operands)):
        ir.Operation.create("memref.store", [], [mapping.get(y, y), out] +
                            indices(m.maps[m.n_in + k], dims))


@dataclasses.dataclass(frozen=True)
class FuseRows(ModulePass):
    name = "latch-fuse-rows"
    summary = ("run adjacent small row-by-row generics over the same rows as one kernel, a "
               "thread per row")
    max_row_work: int = 16
    max_elements: int = 1 << 20

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            runs, run = [], []
            for op in [_op(o) for o in func_op.regions[0].blocks[0].operations]:
                if op.name in NO_MEMORY_EFFECTS:
                    continue                   # no memory effects: a run goes on past them
                member = _member(op, self.max_row_work, self.max_elements)
                if member is not None and run and member.rows == run[0].rows and \
                        _shared_slots(run + [member]) is not None:
                    run.append(member)
                    continue
                runs.append(run)
                run = [member] if member is not None and \
                    _shared_slots([member]) is not None else []
            runs.append(run)
            for run in runs:
                if len(run) >= 2:
                    _unshare(_shared_slots(run))
                    _emit(run)
