"""Row reductions as cooperative GPU kernels (part of ``latch-wrap-host-compute``).

A ``linalg.generic`` with parallel *and* reduction loops (a softmax's row max and row sum, a
norm weight's gradient summed over all tokens, a count per expert) would otherwise become
one thread per output element, each running the whole reduction loop alone, with the
accumulator loaded from and stored to memory on every iteration: 2,048 threads each
walking a 32,768-long vocabulary row take milliseconds.  Here each output element gets a
group of threads instead.  Which group depends on the largest input's unit-stride
dimension:

* **Rows** (that dimension is walked by a reduction loop: a softmax's row max): a
  **warp** (32 lanes; 8 warps, i.e. 8 outputs, per 256-thread block) per output when the
  reduction has fewer than ``_BLOCK_MIN`` elements: lane ``l`` combines elements
  ``l, l + 32, ...`` in a register, then five ``gpu.shuffle xor`` steps combine the lanes
  (rows under 256 elements: a group of 4 to 16 lanes, about 8 elements a lane, several
  outputs a warp, :func:`short_row_lanes`);
  a **block** of 256 threads for longer reductions: thread ``t`` combines elements
  ``t, t + 256, ...``, then ``gpu.all_reduce`` combines the block.  Reduction elements are
  numbered with the last reduction loop varying fastest, so consecutive lanes read
  consecutive addresses.  Lane / thread 0 combines the total with the output's initial
  value and stores it.
* **Columns** (that dimension is walked by a parallel loop: a norm weight's gradient, the
  sum over 2,048 tokens of a ``[2, 1024, 768]`` product): a warp per output would read 32
  addresses a whole row apart on every load.  Instead a block of ``W x R`` threads covers
  ``W`` consecutive outputs (``W`` elements of the input = one 32-byte sector;
  ``threadIdx.x``), and its ``R`` rows of threads (``threadIdx.y``) split the reduction:
  thread ``(x, y)`` combines elements ``y, y + R, ...`` of output ``x``, so every load of
  a warp covers whole sectors.  The ``R`` partial results meet in workgroup memory and are
  combined by a tree (``log2 R`` halving steps with ``gpu.barrier``); row 0 combines the
  total with the output's initial value.

Each thread's strided loop is unrolled ``_UNROLL`` times (the same elements in the same
order, one accumulator chain: the loads of the copies are independent, so several are in
flight at once instead of one load per loop trip), with a remainder loop when the trip
count does not divide; ``few-rows-unroll`` times (a ``latch-wrap-host-compute`` option, off
by default: its one TinyMoE kernel's gain not established on an H100) when a block per output leaves most SMs idle (fewer blocks than
``FEW_BLOCKS``: the kernel's loads in flight are those few blocks').  Loop indices are recovered from linear numbers with ``affine.apply``
(see :func:`_split`), so the divisors stay compile-time constants of the kernel.  The combining order is fixed by the shapes, so results are
deterministic (a tree instead of a left-to-right chain: at least as accurate).

Matched: not a contraction (``latch-form-contraction-kernels`` tiles those), one output,
static shapes, an output map that uses only parallel loops, no input aliasing the output,
at least ``_MIN_ELEMENTS`` reduction elements, and a body of one of two forms:

* an f32 output and a yielded value ``combine(acc, e)`` — ``addf``, ``maximumf``,
  ``minimumf``, ``maxnumf`` or ``minnumf`` — with ``acc`` (the output element) used nowhere
  else;
* an i8 output holding an i1 (``latch-wrap-host-compute`` widens i1 buffers): the body
  yields ``extui(combine(trunci(acc), e))`` with ``combine`` one of ``andi``, ``ori``,
  ``xori`` on i1 (torch's ``all``/``any``: a masked softmax's "whole row is -inf" test),
  ``acc`` read only by the ``trunci``.  Partial results stay i1 in the loop and travel as
  i32 through shuffles, ``gpu.all_reduce and/or/xor`` and workgroup memory.

Anything else keeps the one-thread-per-output loops.

**Finished in the same launch** (:func:`_finalizer`): when the next op is an all-parallel
generic reading only the totals, element for element (RMSNorm's ``rsqrt(sum / n + eps)``),
the lane that stores a total also applies that op's body and stores into its output (its
allocation moved in front of the launch): one launch fewer for every norm (TinyMoE B2: 17,
on the critical path).

**Rows read in the same launch** (:func:`_row_reader`, option ``row-readers``): when the
op after that (or after the reduction) is an all-parallel generic over the reduction's own
loops reading the totals at each row — RMSNorm's ``x * rstd * w``, a launch that read the
whole of ``x`` again — the warps run it too: the lane that stores a total hands the stored
value to its group (``gpu.shuffle idx``), each lane computes the finished value from it
(the same bits as the stored one) and walks its chunks of the row (``v * lane, v * (lane +
group), ...``), the row's other inputs read again from memory while the warp's own reads
of them are still in L1 or L2, its outputs stored a vector a chunk.  Another launch fewer
for every norm, and a read of ``x`` from memory fewer.  The reader may accumulate into one
of its inputs in place (RMSNorm's backward: ``dx += g * w * rstd - x * rstd^3 * sum / n``
into the residual stream's gradient, after the row sums of ``g * w * x``): each lane reads
its chunk of that buffer before it stores it.  Ops right after the reader that read
only its output, at the element it writes, into buffers of their own (:func:`_followers`:
that gradient rounded to bf16 for the next product, a copy of the normalized rows) run in
the same lanes on the value just computed: a launch fewer each, and no read of the row.

**Rows written in the same launch** (:func:`_row_writer`, option ``row-writers``): the
elementwise op that writes the reduction's input just before it — the residual add, or the
MoE's combine of the experts' rows, before RMSNorm — runs in the warps as well: each lane
computes its chunk of the row (``LaneEmitter``: a gather's rows read as vectors), stores
it and combines it at once; the reader (same chunks, same lanes) reads back only what its
own lane stored.
"""
from __future__ import annotations

import dataclasses
import math
import re

from latch.passes.base import element_bits, operation as _op
from latch.passes.buffer_views import hoist_definition, root as _root
from latch.passes.forward_loads import LOADS, STORES, forward_loads, pure
from latch.passes.form_contraction_kernels import match_contraction, zeroing_ops, \
    zeroing_value
from latch.passes.generic_body import (accumulation, all_parallel, apply_body,
                                       clone_body_ops, compare, guarded_launch,
                                       index_constant, indexing_maps, indices, load_inputs,
                                       loop_ranges, pure_function_of_input, scalar_body,
                                       segments, top_allocation)

# combining op -> (gpu.all_reduce operation, identity)
_COMBINERS = {
    "arith.addf": ("add", 0.0),
    "arith.maximumf": ("maximumf", -math.inf),
    "arith.minimumf": ("minimumf", math.inf),
    "arith.maxnumf": ("maxnumf", -math.inf),
    "arith.minnumf": ("minnumf", math.inf),
}
# combining op on i1 (stored as i8) -> (gpu.all_reduce operation on i32, identity)
_LOGICAL = {
    "arith.andi": ("and", 1),
    "arith.ori": ("or", 0),
    "arith.xori": ("xor", 0),
}
_MIN_ELEMENTS = 32      # shorter reductions stay one loop per thread
_BLOCK_MIN = 4096       # from here on a whole block per output element
_BLOCK = 256
_WARP = 32
_PER_LANE = 8           # elements a lane of a short row's group combines (short_row_lanes)
_UNROLL = 4             # copies of the body per trip of a thread's strided loop
_SECTOR_BITS = 256      # 32 bytes: a column tile is this wide in the input ...
COLUMN_BYTES = _SECTOR_BITS // 8   # ... by default (latch-wrap-host-compute's column-bytes)
_COLUMN_THREADS = 1024  # at most this many threads per column-tile block
_COLUMN_PER_THREAD = 8  # aim for at least this many elements per thread
#: column tiles: the block slots of the GPU (two 1024-thread blocks on each of the H200's
#: 132 SMs) the slices of the reduction should fill in whole waves (column_splits) ...
_COLUMN_SPLIT_BLOCKS = 264
#: ... and each thread keeps at least this many elements of its slice
_COLUMN_SPLIT_MIN = 32


@dataclasses.dataclass
class RowReduction:
    """A matched row reduction.  ``acc`` is the body value the combining op reads as the
    accumulator (the output's block argument, or the ``trunci`` of it for an i1 in i8);
    ``skip`` the body ops that are not cloned besides the yield (that ``trunci`` and the
    ``extui`` of the result); ``column`` the parallel loop that walks the largest input's
    unit-stride dimension (column tiles), or None (a group of threads per output)."""
    comb: object
    acc: object
    skip: tuple
    logical: bool
    par: list
    red: list
    maps: list
    ranges: list
    column: int | None = None
    column_bits: int = 32
    column_map: object = None


def _logical_accumulation(op):
    """(acc's trunci result, the combining op, (trunci, extui)) if the body yields
    ``extui(combine(trunci(acc), e))`` on i1 with ``acc`` (i8) read only by the trunci,
    the trunci read only by the combining op and ``e`` not the trunci; else None."""
    from mlir import ir

    i1 = ir.IntegerType.get_signless(1)
    i8 = ir.IntegerType.get_signless(8)
    block = op.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    if any(o.regions for o in body):
        return None
    acc = block.arguments[len(block.arguments) - 1]
    if acc.type != i8:
        return None
    yld = body[-1]
    if yld.name != "linalg.yield" or len(yld.operands) != 1:
        return None

    def producer(v):
        owner = v.owner
        return None if hasattr(owner, "arguments") else _op(owner)

    ext = producer(yld.operands[0])
    if ext is None or ext.name != "arith.extui" or ext.operands[0].type != i1:
        return None
    comb = producer(ext.operands[0])
    if comb is None or comb.name not in _LOGICAL or len(comb.operands) != 2 or \
            sum(1 for _ in comb.results[0].uses) != 1:
        return None
    uses = list(acc.uses)
    if len(uses) != 1:
        return None
    trunc = _op(uses[0].owner)
    if trunc.name != "arith.trunci" or trunc.results[0].type != i1:
        return None
    t = trunc.results[0]
    if sum(1 for _ in t.uses) != 1:
        return None
    a, b = comb.operands[0], comb.operands[1]
    if (a == t) == (b == t):
        return None
    return t, comb, (trunc, ext)


def _unit_stride_input(op, maps, n_in):
    """(loop walking the unit-stride dimension of the largest memref input, its element
    bits, its map), or None when that dimension is not walked by one loop."""
    from mlir import ir

    best, size = None, -1
    for v, m in zip(list(op.operands)[:n_in], maps):
        if not isinstance(v.type, ir.MemRefType):
            continue
        t = ir.MemRefType(v.type)
        if t.rank == 0:
            continue
        n = math.prod(t.shape)
        if n > size:
            size = n
            best = (v, t, m)
    if best is None:
        return None
    v, t, m = best
    try:
        strides, _ = t.get_strides_and_offset()
    except (ValueError, TypeError):
        return None
    unit = [k for k, (n, s) in enumerate(zip(t.shape, strides)) if s == 1 and n > 1]
    if not unit:
        return None
    expr = m.results[unit[-1]]
    if not isinstance(expr, ir.AffineDimExpr):
        return None
    return ir.AffineDimExpr(expr).position, element_bits(t.element_type), m


def match_row_reduction(op):
    """A :class:`RowReduction` if ``op`` is a row reduction this module can turn into a
    cooperative kernel, else None."""
    from mlir import ir

    if op.name != "linalg.generic" or len(op.regions) != 1:
        return None
    its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    par = [i for i, t in enumerate(its) if "parallel" in t]
    red = [i for i, t in enumerate(its) if "reduction" in t]
    if not par or not red or len(par) + len(red) != len(its):
        return None
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    if seg[1] != 1:
        return None
    operands = list(op.operands)
    out = operands[-1]
    if not isinstance(out.type, ir.MemRefType):
        return None
    out_elt = str(ir.MemRefType(out.type).element_type)
    if out_elt not in ("f32", "i8"):
        return None
    for v in operands:
        if isinstance(v.type, ir.MemRefType) and not ir.MemRefType(v.type).has_static_shape:
            return None
    out_root = _root(out)
    if any(isinstance(v.type, ir.MemRefType) and _root(v) == out_root for v in operands[:-1]):
        return None
    maps, ranges = loop_ranges(op)
    if any(r is None for r in ranges):
        return None
    for expr in maps[-1].results:
        if isinstance(expr, ir.AffineDimExpr):
            if ir.AffineDimExpr(expr).position in red:
                return None
        elif not isinstance(expr, ir.AffineConstantExpr):
            return None
    if math.prod(ranges[d] for d in red) < _MIN_ELEMENTS:
        return None
    if match_contraction(op) is not None:
        return None              # a matmul: latch-form-contraction-kernels tiles it
    if out_elt == "f32":
        found = accumulation(op)
        if found is None or found[2].name not in _COMBINERS:
            return None
        info = RowReduction(found[2], found[1], (), False, par, red, maps, ranges)
    else:
        found = _logical_accumulation(op)
        if found is None:
            return None
        info = RowReduction(found[1], found[0], found[2], True, par, red, maps, ranges)
    stride = _unit_stride_input(op, maps, seg[0])
    if stride is not None and stride[0] in par:
        info.column, info.column_bits, info.column_map = stride
    return info


def cooperative_row_reductions(body, finish: bool = True, chunks: bool = True,
                               few_rows_unroll: int = 0, whole_waves: bool = True,
                               column_bytes: int = COLUMN_BYTES,
                               row_readers: bool = True, row_writers: bool = True,
                               in_place_readers: bool = True, fold_zeros: bool = True,
                               loads_first: bool = True, whole_rows: bool = True,
                               held_rows: bool = False) -> int:
    """Replace every matching row reduction in ``body`` (a function body) by a cooperative
    ``gpu.launch`` (with ``finish``, its elementwise reader too: :func:`_finalizer`, and
    with ``row_readers`` also the next op reading the totals row by row:
    :func:`_row_reader`, in place into one of its inputs with ``in_place_readers``, and
    with ``row_writers`` the op before it that writes the reduction's input:
    :func:`_row_writer`; with ``fold_zeros`` totals zero-filled right before the reduction
    (:func:`~latch.passes.form_contraction_kernels.zeroing_ops`) start from the constant and
    the fill goes; ``few_rows_unroll``, ``whole_rows``: see :func:`_unroll_of`;
    ``loads_first``: see :func:`_loads_before_stores`; ``held_rows``: a reader of rows
    walked whole takes the first pass's loads (passes/forward_loads.py); ``whole_waves``: see
    :func:`column_splits`; ``column_bytes``: :func:`column_tile`); returns how many were
    replaced.  Row reductions first, then column reductions (a column reduction between a
    row reduction and its writer may move after their launch: :func:`_row_writer`)."""
    n = 0
    ops = [_op(o) for o in body.operations]
    erased = set()
    for k, op in enumerate(ops):
        if k in erased:
            continue
        found = match_row_reduction(op)
        if found is None or found.column is not None:
            continue
        at = _finalizer(op, found, ops, k) if finish else None
        reader = _row_reader(op, found, ops, k, at, in_place_readers) \
            if finish and row_readers else None
        writer = _row_writer(op, found, ops, k, at, reader, chunks, erased) \
            if finish and row_writers else None
        if at is not None:
            hoist_definition(ops[at].operands[1], op)
        if reader is not None:
            hoist_definition(list(ops[reader.at].operands)[-1], op)
            for f, _ in reader.followers:
                hoist_definition(list(f.operands)[-1], op)
        # totals filled with zeros right before (nothing reading them since): each row's
        # total starts from the constant, and the fill (with the copy it went through) goes
        zeroing = zeroing_ops(op, list(op.operands)[-1]) if fold_zeros else None
        _emit(op, found, ops[at] if at is not None else None, chunks, few_rows_unroll,
              reader, writer, zeroing_value(zeroing) if zeroing else None,
              loads_first, whole_rows, held_rows)
        for o in zeroing or ():
            erased.update([i for i, x in enumerate(ops) if i not in erased and x == o])
            o.erase()
        for j in (at, reader.at if reader is not None else None,
                  writer.at if writer is not None else None,
                  *(j for _, j in (reader.followers if reader is not None else ()))):
            if j is not None:
                ops[j].erase()
                erased.add(j)
        for o in (writer.deferred if writer is not None else ()):
            o.move_before(op)                       # right after the new launch
        op.erase()
        erased.add(k)
        n += 1
    for op in [_op(o) for o in body.operations]:
        found = match_row_reduction(op)
        if found is not None and found.column is not None:
            _emit_columns(op, found, whole_waves, column_bytes)
            op.erase()
            n += 1
    return n


def _finalizer(op, info, ops, k):
    """The position in ``ops`` of the op that finishes reduction ``ops[k] = op`` when its
    warp or block can do it: the next op (allocations, views and constants aside) is an
    all-parallel generic whose one input is the reduction's output, read element for
    element (the same map as its own output, a permutation, the same shape), with a body of
    scalar ``arith``/``math`` code — RMSNorm's ``rsqrt(sum / n + eps)`` —, whose output is
    an allocation (or views of one) that can move in front of the reduction and shares no
    bytes with the reduction's operands (the memory plan may have given it the slot of an
    input whose last reader is the reduction).  Then the lane that stores a total also
    stores ``finish(total)`` into the finishing op's output (one launch fewer; the totals
    are still written, for the backward's readers).  None otherwise."""
    from mlir import ir

    from latch.passes.buffer_views import (arena_span, defined_by_views, memrefs_used,
                                           next_memory_op, slots_overlap)

    if info.logical:
        return None
    out = list(op.operands)[-1]
    at = next_memory_op(ops, k)
    if at is None:
        return None
    fin = ops[at]
    if fin.name != "linalg.generic" or fin.results or segments(fin) != (1, 1) or \
            fin.operands[0] != out or \
            not all_parallel(fin):
        return None
    maps = indexing_maps(fin)
    result = fin.operands[1]
    if maps[0] != maps[1] or not maps[0].is_permutation or \
            ir.MemRefType(result.type).shape != ir.MemRefType(out.type).shape or \
            not pure_function_of_input(fin):
        return None
    if not defined_by_views(result, ops[k + 1:at]):
        return None
    span = arena_span(result)
    for v in memrefs_used(op):          # operands and buffers the body loads from
        if _root(v) == _root(result) or slots_overlap(span, arena_span(v)):
            return None
    return at


@dataclasses.dataclass
class RowReader:
    """A row reduction's elementwise reader finished in its launch (:func:`_row_reader`):
    ``at`` its position in the block's ops, ``totals`` {input number: 0 for the reduction's
    output, 1 for the finishing op's}, ``v`` the consecutive elements a lane takes at once,
    ``loops`` the reduction's loop that each of its loops is."""
    op: object
    at: int
    totals: dict
    v: int
    loops: tuple
    #: the reader's own readers run by the same lanes (:func:`_followers`): (op, position)
    followers: list = dataclasses.field(default_factory=list)


def _row_reader(op, info, ops, k, fin_at, in_place: bool = True):
    """A :class:`RowReader` when the warps of reduction ``ops[k] = op`` (finished by
    ``ops[fin_at]``, or None) can also run the next op (allocations, views and constants
    aside): an all-parallel generic over the reduction's own loops (the same trip counts,
    in any order: :func:`_same_loops`) that reads the totals (the reduction's output or the finishing op's) at
    each row as the reduction writes them, and other buffers at any index — RMSNorm's
    ``x * rsqrt(sum / n + eps) * w``, which reads the rows the reduction just read.  Each
    lane then reads the totals from a register and walks its part of the row (the row is in
    L1 or L2: the same warp read it a moment ago) instead of a launch reading the whole
    tensor again.  Required besides: a body of ``arith``/``math`` ops (and ``linalg.index``)
    not reading its output element; an output written element for element (a permutation)
    that shares no bytes with a buffer the reduction or the reader reads or the totals
    (other warps may not have read their rows yet), except an input that is the output
    itself read at the element it writes (``dx += ...`` in place); its allocation movable in
    front of the reduction; everything else the reader uses defined before the reduction;
    a warp (or a group of lanes) per row with no row shared by two groups of a warp
    (:func:`_emit`'s clamped rows).  None otherwise."""
    from mlir import ir

    from latch.passes.buffer_views import (defined_by_views, may_share_bytes, memrefs_used,
                                           next_memory_op)
    from latch.passes.vector_lanes import aligned_chunks, chunk_width

    n_red = math.prod(info.ranges[d] for d in info.red)
    n_out = math.prod(info.ranges[d] for d in info.par)
    if info.logical or n_red >= _BLOCK_MIN:
        return None
    group = short_row_lanes(n_red)
    if n_out % (_BLOCK // group) and group < _WARP:
        return None
    at = next_memory_op(ops, fin_at if fin_at is not None else k)
    if at is None:
        return None
    g = ops[at]
    if g.name != "linalg.generic" or g.results or len(g.regions) != 1 or \
            segments(g)[1] != 1 or \
            not all_parallel(g):
        return None
    maps, ranges = loop_ranges(g)
    totals = [list(op.operands)[-1]]
    if fin_at is not None:
        totals.append(ops[fin_at].operands[1])
    operands = list(g.operands)
    ins, res = operands[:-1], operands[-1]
    if not isinstance(res.type, ir.MemRefType) or not ir.MemRefType(res.type).has_static_shape \
            or not maps[-1].is_permutation:
        return None
    body = scalar_body(g, also=("linalg.index",))
    if body is None:
        return None
    between = ops[k + 1:at]
    for o in body:
        for x in o.operands:                # values from outside: defined before the launch
            if not hasattr(x.owner, "arguments") and _op(x.owner) in between:
                return None
    read = {}
    for j, x in enumerate(ins):
        if not isinstance(x.type, ir.MemRefType):
            if not hasattr(x.owner, "arguments") and _op(x.owner) in between:
                return None
            continue
        if not ir.MemRefType(x.type).has_static_shape or not defined_by_views(x, between):
            return None
        if any(x == t for t in totals):
            read[j] = next(i for i, t in enumerate(totals) if x == t)
        elif any(may_share_bytes(x, t) for t in totals):
            return None
    if not read or not defined_by_views(res, between):
        return None
    # an input that is the output itself, read at the element written (an accumulation in
    # place, the residual stream's gradient ``dx += ...``): each lane reads its chunk of it
    # before storing the chunk, as the reader's own launch did
    same = {j for j, x in enumerate(ins)
            if in_place and x == res and str(maps[j]) == str(maps[-1]) and j not in read}
    reads = memrefs_used(op) + [x for j, x in enumerate(ins)
                                if isinstance(x.type, ir.MemRefType) and j not in same]
    if any(may_share_bytes(res, x) for x in reads + totals):
        return None
    red_ins = list(op.operands)[:-1]
    shared = [(maps[j], info.maps[i]) for j, x in enumerate(ins)
              for i, y in enumerate(red_ins) if j not in read and x == y]
    loops = _same_loops(ranges, info.ranges,
                        [(maps[j], info.maps[-1]) for j in read] + shared)
    if loops is None:
        return None
    last = loops.index(info.red[-1])
    v = chunk_width(g, maps, ranges, last)
    results = [str(e) for e in maps[-1].results]
    followers = _followers(ops, k, at, g, reads + totals)
    outs = [res] + [list(f.operands)[-1] for f, _ in followers]
    while v > 1 and (n_red % (group * v) or results[-1] != f"d{last}" or
                     not all(aligned_chunks(ir.MemRefType(o.type), v) for o in outs)):
        v //= 2
    return RowReader(g, at, read, v, loops, followers)


def _followers(ops, k, at, reader, read) -> list:
    """[(op, position)] of the ops right after ``reader = ops[at]``, the reader of reduction
    ``ops[k]`` (allocations, views and constants aside), that read nothing but the reader's
    output, at the element the reader writes, and write a buffer of their own at that
    element: the residual stream's gradient rounded to bf16 for the next product, after
    RMSNorm's backward accumulated it.  The lanes that compute an element of the reader
    apply their bodies to it and store theirs, so the rounding needs no launch nor a read
    of the f32 row.  Required: an all-parallel
    ``linalg.generic`` over the reader's loops (the same trip counts, one input and one
    output, both with the reader's output map), a body of ``arith``/``math`` ops of its
    input element (other values defined before the reduction), an output that can move in
    front of the reduction and shares no bytes with the reader's output or anything the
    reduction or the reader reads (``read``)."""
    from mlir import ir

    from latch.passes.buffer_views import defined_by_views, may_share_bytes, next_memory_op

    res = list(reader.operands)[-1]
    out_map = str(indexing_maps(reader)[-1])
    _, ranges = loop_ranges(reader)
    found, last, taken = [], at, [res]
    while True:
        nxt = next_memory_op(ops, last)
        if nxt is None:
            return found
        f = ops[nxt]
        if f.name != "linalg.generic" or f.results or len(f.regions) != 1 or \
                segments(f) != (1, 1) or not all_parallel(f):
            return found
        maps, f_ranges = loop_ranges(f)
        src, out = list(f.operands)
        if src != res or f_ranges != ranges or str(maps[0]) != out_map or \
                str(maps[1]) != out_map or not isinstance(out.type, ir.MemRefType):
            return found
        body = scalar_body(f)
        if body is None or any(not hasattr(x.owner, "arguments") and
                               _op(x.owner) in ops[k + 1:nxt]
                               for o in body for x in o.operands):
            return found
        if not defined_by_views(out, ops[k + 1:nxt]) or \
                any(may_share_bytes(out, x) for x in read + taken):
            return found
        found.append((f, nxt))
        taken.append(out)
        last = nxt


def _same_loops(ranges, red_ranges, want):
    """The reduction loop each loop of another op over ``ranges`` is (a tuple; the identity
    first), such that the trip counts agree and each pair ``(map of the op, map of the
    reduction)`` in ``want`` addresses the same elements (a reader reading the totals at the
    reduction's output indices and a buffer both read at the same elements; a writer
    writing the reduction's input where the reduction reads it); None when no assignment
    fits (latch-wrap-host-compute may have ordered the two ops' loops differently)."""
    import itertools

    n = len(ranges)
    if n != len(red_ranges) or sorted(ranges) != sorted(red_ranges):
        return None
    dim = re.compile(r"\bd(\d+)\b")
    for perm in itertools.permutations(range(n)):
        if any(ranges[i] != red_ranges[perm[i]] for i in range(n)):
            continue
        if all([dim.sub(lambda m: f"d{perm[int(m.group(1))]}", str(e)) for e in a.results] ==
               [str(e) for e in b.results] for a, b in want):
            return perm
    return None


@dataclasses.dataclass
class RowWriter:
    """The elementwise op that writes a row reduction's input, run by the reduction's
    warps (:func:`_row_writer`): ``at`` its position in the block's ops, ``x`` the
    reduction's input number it writes, ``loops`` the reduction's loop that each of its
    loops is, ``v`` the consecutive elements a lane takes at once (the reduction's and its
    reader's too)."""
    op: object
    at: int
    x: int
    loops: tuple
    v: int
    #: ops between the writer and the reduction that read what the writer writes (a
    #: column reduction over it: the norm weight's gradient), moved after the launch
    deferred: list = dataclasses.field(default_factory=list)


_WRITER_SKIP = 4   # memory ops between a writer and its reduction it may move past


def _row_writer(op, info, ops, k, fin_at, reader, chunks: bool, gone=frozenset()):
    """A :class:`RowWriter` when the warps of reduction ``ops[k] = op`` (finished by
    ``ops[fin_at]`` and read by ``reader``, or None) can also run the elementwise op that
    writes its input — the residual add before RMSNorm, ``x = x + attn @ w_out`` or the
    MoE's combine of the experts' rows, whose launch wrote ``x`` for the norm's launch to
    read it back.  Each lane computes its chunks of the row, stores them and combines them
    at once; the reader then reads back exactly the chunks the same lane stored (the same
    ``v``, the same lanes).  The writer is the last op before the reduction touching memory
    but for at most ``_WRITER_SKIP`` ops (the totals' zero fill and its copy) that share
    no bytes with anything the writer touches; an all-parallel generic over the reduction's
    loops writing the reduction's input (a permutation map) where the reduction reads it;
    a body of ``arith``/``math``, ``linalg.index`` and loads (a gather's rows: loads along
    the row's loop become vector loads, :class:`~latch.passes.vector_lanes.LaneEmitter`)
    of buffers the launch does not write; its inputs, read at its own indices, share no
    bytes with the input it writes (or are it, read at the same element) nor with any
    buffer the launch writes; a warp or group of lanes per row with no clamped rows, and
    chunks of at least 2 elements.  ``gone``: the positions of ``ops`` already replaced
    (a launch now: the search stops there).  None otherwise."""
    from mlir import ir

    from latch.passes.buffer_views import (NO_MEMORY_EFFECTS, arena_span, may_share_bytes,
                                           memrefs_used)
    from latch.passes.vector_lanes import aligned_chunks, lane_loads

    n_red = math.prod(info.ranges[d] for d in info.red)
    n_out = math.prod(info.ranges[d] for d in info.par)
    if info.logical or n_red >= _BLOCK_MIN or not chunks:
        return None
    group = short_row_lanes(n_red)
    if n_out % (_BLOCK // group) and group < _WARP:
        return None
    red_ins = list(op.operands)[:-1]
    skipped, j = [], k - 1
    while j >= 0:
        if j in gone:
            return None
        o = ops[j]
        if o.name in NO_MEMORY_EFFECTS:
            j -= 1
            continue
        if o.name == "linalg.generic" and not o.results and segments(o)[1] == 1 and \
                any(list(o.operands)[-1] == y for y in red_ins):
            break
        skipped.append(o)
        if len(skipped) > _WRITER_SKIP:
            return None
        j -= 1
    if j < 0:
        return None
    p = ops[j]
    operands = list(p.operands)
    ins, x = operands[:-1], operands[-1]
    xs = [i for i, y in enumerate(red_ins) if y == x]
    if len(xs) != 1 or len(p.regions) != 1 or \
            any(may_share_bytes(y, x) for i, y in enumerate(red_ins) if i != xs[0]) or \
            not all_parallel(p):
        return None
    maps, ranges = loop_ranges(p)
    if any(r is None for r in ranges) or not maps[-1].is_permutation:
        return None
    loops = _same_loops(ranges, info.ranges, [(maps[-1], info.maps[xs[0]])])
    if loops is None:
        return None
    block = p.regions[0].blocks[0]
    body = scalar_body(p, also=("linalg.index", "memref.load"))
    if body is None or _rounds_a_product(p, body, ops, j, gone):
        return None
    loaded = [o.operands[0] for o in body if o.name == "memref.load"]
    last = loops.index(info.red[-1])
    # the buffers the launch writes: the writer's output, the totals, the finished
    # totals, the reader's output
    written = [x, list(op.operands)[-1]]
    if fin_at is not None:
        written.append(ops[fin_at].operands[1])
    if reader is not None:
        written.append(list(reader.op.operands)[-1])
    xspan = arena_span(x)
    for i, y in enumerate(ins):
        if not isinstance(y.type, ir.MemRefType):
            continue
        if not ir.MemRefType(y.type).has_static_shape:
            return None
        if may_share_bytes(y, x):      # in place: the same element of the same layout
            if arena_span(y) != xspan or y.type != x.type or maps[i] != maps[-1]:
                return None
        if any(may_share_bytes(y, w) for w in written[1:]):
            return None
    for y in loaded:
        if any(may_share_bytes(y, w) for w in written):
            return None
    if reader is not None:              # it reads back x only where the same lane wrote it
        for y in list(reader.op.operands)[:-1]:
            if isinstance(y.type, ir.MemRefType) and may_share_bytes(y, x) and y != x:
                return None
    touched = [y for y in operands + loaded if isinstance(y.type, ir.MemRefType)]
    launch_writes = written + [list(f.operands)[-1] for f, _ in
                               (reader.followers if reader is not None else ())]
    launch_uses = touched + list(op.operands) + launch_writes + \
        [y for y in (list(reader.op.operands) if reader is not None else [])]
    deferred = []
    for i, o in enumerate(skipped):         # skipped[:i]: the ops between o and the reduction
        if any(may_share_bytes(a, b) for a in memrefs_used(o) for b in touched):
            if not _deferrable(o, x, launch_uses, launch_writes) or \
                    any(may_share_bytes(a, b) for later in skipped[:i]
                        for a in memrefs_used(later) for b in memrefs_used(o)):
                return None
            deferred.append(o)
    # chunks: the reduction's, its reader's and the writer's accesses along the row
    v = _row_chunk(op, info, group)
    if reader is not None:
        v = min(v, reader.v)
    dim = f"d{last}"
    along = []
    for i, (y, m) in enumerate(zip(ins, maps)):
        results = [str(e) for e in m.results]
        uses = [r for r in results if re.search(rf"\b{dim}\b", r)]
        if not uses:
            continue
        if results[-1] != dim or len(uses) > 1 or not isinstance(y.type, ir.MemRefType):
            return None
        along.append(i)
    vector_loads = lane_loads(body, [block.arguments[i] for i in along], last)
    if vector_loads is None:
        return None
    mts = [ir.MemRefType(y.type) for y in [ins[i] for i in along] + vector_loads + [x]]
    while v > 1 and not all(aligned_chunks(mt, v) for mt in mts):
        v //= 2
    if v < 2 or str(maps[-1].results[-1]) != dim:
        return None
    if reader is not None:
        reader.v = v
    return RowWriter(p, j, xs[0], loops, v, deferred)


def _rounds_a_product(p, body, ops, j, gone) -> bool:
    """Whether the would-be writer ``p = ops[j]`` only rounds (``truncf``) the output of a
    product: latch-form-contraction-kernels makes the product's kernel write that rounding
    itself (``_narrowing_reader``), so taking it into the norm's launch would make the
    product write f32 for the launch to read and round — more bytes, no launch fewer.
    ``gone``: positions of ``ops`` already replaced by launches (not products)."""
    from latch.passes.buffer_views import may_share_bytes, memrefs_used

    maps = indexing_maps(p)
    if [o.name for o in body] != ["arith.truncf"] or segments(p)[0] != 1 or \
            str(maps[0]) != str(maps[1]):      # a transposing rounding stays a writer
        return False
    src = list(p.operands)[0]
    for i in range(j - 1, -1, -1):
        if i in gone:
            continue
        o = ops[i]
        if any(may_share_bytes(src, y) for y in memrefs_used(o)):
            return o.name == "linalg.generic" and match_contraction(o) is not None and \
                may_share_bytes(src, list(o.operands)[-1])
    return False


def _deferrable(o, x, launch_uses, launch_writes) -> bool:
    """Whether ``o``, an op between a row reduction's writer and the reduction that reads
    ``x`` (the writer's output), may run after their launch instead: a ``linalg.generic``
    with one output (a column reduction over ``x``: the norm weight's gradient) whose
    output shares no bytes with anything the launch reads or writes and whose inputs share
    none with anything the launch writes but ``x`` — so that it reads the same values after
    the launch, and the launch the same before it."""
    from mlir import ir

    from latch.passes.buffer_views import may_share_bytes

    if o.name != "linalg.generic" or o.results or segments(o)[1] != 1 or \
            any(_op(b).name != "linalg.yield" and _op(b).name.split(".")[0] not in
                ("arith", "math") for b in o.regions[0].blocks[0].operations):
        return False
    operands = list(o.operands)
    ins, out = operands[:-1], operands[-1]
    if any(may_share_bytes(out, y) for y in launch_uses):
        return False
    return not any(isinstance(y.type, ir.MemRefType) and may_share_bytes(y, w)
                   for y in ins for w in launch_writes if w != x)


# -- pieces shared by both forms ----------------------------------------------------------

def _partial_type(info):
    from mlir import ir

    return ir.IntegerType.get_signless(1) if info.logical else ir.F32Type.get()


def _identity(info):
    from mlir import ir

    t = _partial_type(info)
    if info.logical:
        attr = ir.IntegerAttr.get(t, _LOGICAL[info.comb.name][1])
    else:
        attr = ir.FloatAttr.get(t, _COMBINERS[info.comb.name][1])
    return ir.Operation.create("arith.constant", [t], attributes={"value": attr}).result


def _split(linear, loops, ranges, dims) -> None:
    """Like :func:`delinearize` (``loops`` first fastest), but each index is one
    ``affine.apply`` (``(linear floordiv stride) mod range``): the trip counts stay in the
    maps, so they are constants of the kernel after outlining and ``lower-affine``
    (shifts and masks for powers of two).  ``arith`` constants inside a ``gpu.launch`` are
    hoisted into the host function by the greedy rewrites that run before outlining and
    become kernel parameters: every division would then be a run-time 64-bit division."""
    from mlir import ir

    index = ir.IndexType.get()
    d0 = ir.AffineDimExpr.get(0)
    stride = 1
    for n, d in enumerate(loops):
        e = d0 if stride == 1 else ir.AffineFloorDivExpr.get(
            d0, ir.AffineConstantExpr.get(stride))
        if n < len(loops) - 1:
            e = ir.AffineModExpr.get(e, ir.AffineConstantExpr.get(ranges[d]))
        if e == d0:
            dims[d] = linear
        else:
            amap = ir.AffineMap.get(1, 0, [e])
            dims[d] = ir.Operation.create(
                "affine.apply", [index], [linear],
                attributes={"map": ir.AffineMapAttr.get(amap)}).result
        stride *= ranges[d]


def _body_ops(op, info) -> list:
    """The body ops of row reduction ``op`` that each element runs (``info.skip`` aside)."""
    skip = set(info.skip)
    body_ops = [o for o in (_op(x) for x in op.regions[0].blocks[0].operations)][:-1]
    return [o for o in body_ops if o not in skip]


def _element_fn(op, info, dims):
    """A function (reduction index value k, partial) -> new partial that emits the body at
    the parallel indices already in ``dims`` and reduction element ``k`` (the last
    reduction loop fastest)."""
    ins = list(op.operands)[:-1]
    block = op.regions[0].blocks[0]
    body_ops = _body_ops(op, info)

    def element(k, partial):
        here = list(dims)
        _split(k, info.red[::-1], info.ranges, here)
        mapping = {}
        load_inputs(block, ins, info.maps, here, mapping)
        mapping[info.acc] = partial
        clone_body_ops(body_ops, mapping, here)
        return mapping[info.comb.results[0]]

    return element


def _chunk_fn(op, info, dims, v: int, writer: RowWriter | None = None):
    """Like :func:`_element_fn`, for the ``v`` consecutive reduction elements from ``k`` (a
    multiple of ``v``; :func:`latch.passes.vector_lanes.chunk_width` holds for the last
    reduction loop): the inputs read along that loop as one vector load each, the others
    once, the elements combined in order; the input ``writer`` writes computed and stored
    by :func:`_write_chunk` instead of loaded."""
    from latch.passes.vector_lanes import lane_of, load_chunk, read_along

    ins = list(op.operands)[:-1]
    block = op.regions[0].blocks[0]
    body_ops = _body_ops(op, info)
    made = {writer.x} if writer is not None else set()
    along = read_along(ins, info.maps, f"d{info.red[-1]}") - made

    def chunk(k, partial):
        here = list(dims)
        _split(k, info.red[::-1], info.ranges, here)
        shared = {}
        load_inputs(block, ins, info.maps, here, shared,
                    only=set(range(len(ins))) - along - made)
        vectors = load_chunk(block, ins, info.maps, here, v, along)
        written = _write_chunk(writer, info, here, v) if writer is not None else None
        for u in range(v):
            mapping = dict(shared)
            mapping.update(lane_of(vectors, u))
            if written is not None:
                mapping[block.arguments[writer.x]] = written[u]
            mapping[info.acc] = partial
            clone_body_ops(body_ops, mapping, here)
            partial = mapping[info.comb.results[0]]
        return partial

    return chunk


def _write_chunk(writer: RowWriter, info, here, v: int) -> list:
    """Compute and store the writer's ``v`` consecutive elements at the reduction's loop
    indices ``here`` (the chunk's first): its inputs along the row one vector load each,
    the others once, its body for the ``v`` lanes
    (:class:`~latch.passes.vector_lanes.LaneEmitter`: a gather's loads along the row
    become vector loads), one vector store; returns the ``v`` values."""
    from latch.passes.vector_lanes import emit_lanes, load_chunk, read_along, store_chunk

    p = writer.op
    operands = list(p.operands)
    ins, x = operands[:-1], operands[-1]
    maps = indexing_maps(p)
    block = p.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    at = [here[d] for d in writer.loops]
    last = writer.loops.index(info.red[-1])
    along = read_along(ins, maps, f"d{last}")
    mapping = {}
    load_inputs(block, ins, maps, at, mapping, only=set(range(len(ins))) - along)
    vectors = load_chunk(block, ins, maps, at, v, along)
    values = emit_lanes(body[:-1], body[-1].operands[0], mapping, vectors, at, last, v)
    store_chunk(values, x, indices(maps[-1], at))
    return values


def _strided_partial(start, n: int, step: int, init, element, unroll: int = _UNROLL,
                     loads_first: bool = False, inline: bool = False):
    """Combine elements ``start, start + step, ... < n`` (in that order, one chain) into
    ``init``: a loop unrolled ``unroll`` times over the part every thread walks the same
    number of times, then a remainder loop.  With ``init`` None nothing is carried
    (``element(k, None)`` returns None: a loop of stores).  ``loads_first``: the unrolled
    copies' loads ahead of their stores (:func:`_loads_before_stores`).  ``inline``, when
    the unrolled copies are every element (``n == step * unroll``, ``0 <= start <
    step``: one trip for every thread): the copies straight in the current block, no loop
    (so that :func:`~latch.passes.forward_loads.forward_loads` sees them)."""
    from mlir import ir
    from mlir.dialects import scf

    index = ir.IndexType.get()
    per = step * unroll
    n_main = (n // per) * per
    acc = init
    carried = [] if init is None else [init]
    if inline and n == per:
        return _unrolled(ir.InsertionPoint.current.block, start, step, unroll, acc, element,
                         loads_first)
    if n_main:
        loop = scf.ForOp(start, index_constant(n_main), index_constant(per), carried)
        with ir.InsertionPoint(loop.body):
            a = _unrolled(loop.body, loop.induction_variable, step, unroll,
                          loop.inner_iter_args[0] if carried else None, element, loads_first)
            scf.YieldOp([a] if carried else [])
        acc = loop.results[0] if carried else None
    if n_main < n:
        lo = start if not n_main else ir.Operation.create(
            "arith.addi", [index], [start, index_constant(n_main)]).result
        loop = scf.ForOp(lo, index_constant(n), index_constant(step),
                         [acc] if carried else [])
        with ir.InsertionPoint(loop.body):
            a = element(loop.induction_variable,
                        loop.inner_iter_args[0] if carried else None)
            scf.YieldOp([a] if carried else [])
        acc = loop.results[0] if carried else None
    return acc


def _unrolled(block, k, step: int, unroll: int, acc, element, loads_first: bool):
    """``unroll`` copies of ``element`` at ``k, k + step, ...`` appended to ``block`` (the
    current insertion point's), combined into ``acc`` in order; with ``loads_first`` the
    copies' loads moved ahead of their stores (:func:`_loads_before_stores`)."""
    from mlir import ir

    index = ir.IndexType.get()
    copies = []                            # each copy's ops (for loads_first)
    for j in range(unroll):
        at = len(list(block.operations)) if loads_first else 0
        kj = k if j == 0 else ir.Operation.create(
            "arith.addi", [index], [k, index_constant(j * step)]).result
        acc = element(kj, acc)
        if loads_first:
            copies.append([_op(o) for o in list(block.operations)[at:]])
    if loads_first:
        _loads_before_stores(copies)
    return acc



def _loads_before_stores(copies: list) -> None:
    """Move each unrolled copy's loads — with the pure ops they and the copy's work before
    its first store need — in front of the first store of the copies before it.  A copy's
    stores otherwise come between its loads and the next copy's: a warp then issues the next
    chunk's loads only once the previous chunk's have arrived and been stored (the compiler
    cannot move a load across a store to a buffer it does not know apart), one chunk's
    latency after another (TinyMoE B32's RMSNorm backward: 2.1 TB/s against a 3.0 TB/s
    copy).  Legal because the copies are different chunks of the row: a copy's loads never
    read what an earlier copy's stores wrote (a lane that read an element another chunk
    writes would race with the lane writing it in the original kernel too), and a copy's
    own loads stay before its own stores.  Only straight-line copies (loads, stores, pure
    ops) are touched; the values and their order of combination are unchanged."""
    flat = [o for c in copies for o in c]
    if any(not (pure(o) or o.name in LOADS + STORES) or o.regions for o in flat):
        return
    stores = [i for i, o in enumerate(flat) if o.name in STORES]
    if not stores:
        return
    anchor = flat[stores[0]]
    later = {r for o in flat[stores[0]:] for r in o.results}   # defined after the anchor
    seen = 0
    for c in copies:
        first = seen
        seen += len(c)
        if first <= stores[0]:
            continue                       # at or before the anchor already
        for o in c:
            if o.name in STORES:
                break
            if any(v in later for v in o.operands):
                continue                   # needs a value only defined after the anchor
            o.move_before(anchor)
            later.difference_update(o.results)


def _widen(value, info):
    """A partial as it travels between threads: i1 -> i32, f32 as it is."""
    from mlir import ir

    if not info.logical:
        return value
    return ir.Operation.create("arith.extui", [ir.IntegerType.get_signless(32)],
                               [value]).result


def _narrow(value, info):
    from mlir import ir

    if not info.logical:
        return value
    return ir.Operation.create("arith.trunci", [ir.IntegerType.get_signless(1)],
                               [value]).result


def _combine(info, a, b):
    from mlir import ir

    return ir.Operation.create(info.comb.name, [a.type], [a, b]).result


def _store_total(out, where, total, info, finish=None, zero=None) -> None:
    """``out[where] = combine(out[where], total)`` (an i1 in i8 is narrowed and widened);
    with ``finish`` (:func:`_finalizer`'s op) its body applied to that value is also stored
    into its output at ``where``; with ``zero`` (the constant the output was filled with,
    the fill gone) ``combine(zero, total)``: the same value, no load.  Returns the
    combined value (before widening)."""
    from mlir import ir

    elt = ir.MemRefType(out.type).element_type
    if zero is not None:
        old = ir.Operation.create("arith.constant", [elt], attributes={"value": zero}).result
    else:
        old = ir.Operation.create("memref.load", [elt], [out] + where).result
    if info.logical:
        old = ir.Operation.create("arith.trunci", [ir.IntegerType.get_signless(1)],
                                  [old]).result
    new = _combine(info, old, total)
    stored = new
    if info.logical:
        new = ir.Operation.create("arith.extui", [elt], [new]).result
    ir.Operation.create("memref.store", [], [new, out] + where)
    if finish is not None:
        ir.Operation.create("memref.store", [], [apply_body(finish, new),
                                                 finish.operands[1]] + where)
    return stored


# -- a warp or a block per output --------------------------------------------------------

def _row_chunk(op, info, group: int) -> int:
    """Consecutive elements a lane takes at once (one 16-byte load of each input read along
    the last reduction loop): :func:`latch.passes.vector_lanes.chunk_width`, for float
    combiners, when the ``group``'s lanes walk the row in whole chunks; else 1."""
    from latch.passes.vector_lanes import chunk_width

    if info.logical:
        return 1
    n_red = math.prod(info.ranges[d] for d in info.red)
    v = chunk_width(op, info.maps, info.ranges, info.red[-1])
    while v > 1 and n_red % (group * v):
        v //= 2
    return v


#: fewer blocks than this leave SMs idle (the H200 has 132): each block's loads in flight
#: are then the kernel's (TinyMoE's per-expert counts: 8 blocks, one per expert, each
#: reading 65,536 ids 4 vectors at a time, 20 us a launch at B32 for 4.2 MB)
FEW_BLOCKS = 132


def _unroll_of(n_blocks: int, per_block: int, few_rows_unroll: int, trips: int,
               whole_rows: bool = False) -> int:
    """Copies of the body per trip of a thread's strided loop (``trips`` whole elements or
    chunks a thread): ``few_rows_unroll`` for a launch of a block per output with fewer than
    FEW_BLOCKS blocks whose threads walk at least that many (more independent loads in
    flight a thread; the same elements in the same order); with ``whole_rows`` all of
    ``trips`` when that is at most ``2 * _UNROLL`` (a 768-wide f32 row: 6 chunks of 4 a
    lane, which 4 copies and a remainder loop took in three steps of loads); else
    ``_UNROLL``."""
    if few_rows_unroll > _UNROLL and per_block == 1 and n_blocks < FEW_BLOCKS and \
            trips >= few_rows_unroll:
        return few_rows_unroll
    if whole_rows and _UNROLL < trips <= 2 * _UNROLL:
        return trips
    return _UNROLL


def _emit(op, info, finish=None, chunks: bool = True, few_rows_unroll: int = 0,
          reader: RowReader | None = None, writer: RowWriter | None = None,
          zero=None, loads_first: bool = True, whole_rows: bool = True,
          held_rows: bool = False) -> None:
    from mlir import ir
    from mlir.dialects import gpu, scf

    index = ir.IndexType.get()
    par, red, ranges = info.par, info.red, info.ranges
    out = list(op.operands)[-1]
    n_out = math.prod(ranges[d] for d in par)
    n_red = math.prod(ranges[d] for d in red)
    group = _BLOCK if n_red >= _BLOCK_MIN else short_row_lanes(n_red)
    per_block = _BLOCK // group
    with ir.InsertionPoint(op), op.location:
        c1 = index_constant(1)
        launch = gpu.LaunchOp((index_constant(-(-n_out // per_block)), c1, c1),
                              (index_constant(group), index_constant(per_block), c1))
        lb = launch.regions[0].blocks[0]
    with ir.InsertionPoint(lb), op.location:
        bid, lane, sub = lb.arguments[0], lb.arguments[3], lb.arguments[4]
        if per_block == 1:
            row = bid
        else:
            scaled = ir.Operation.create("arith.muli", [index],
                                         [bid, index_constant(per_block)]).result
            row = ir.Operation.create("arith.addi", [index], [scaled, sub]).result
        guard, inside = None, None
        if n_out % per_block and group >= _WARP:    # the last block's extra warps idle
            guard = scf.IfOp(compare("ult", row, index_constant(n_out)))
        elif n_out % per_block:      # groups share warps: all shuffle, on the last row
            inside = compare("ult", row, index_constant(n_out))
            row = ir.Operation.create("arith.select", [index],
                                      [inside, row, index_constant(n_out - 1)]).result
        ip = ir.InsertionPoint(guard.then_block) if guard else ir.InsertionPoint(lb)
    with ip, op.location:
        dims = [None] * len(ranges)
        _split(row, par, ranges, dims)
        start = _identity(info)
        if writer is not None:
            v = writer.v
        else:
            v = _row_chunk(op, info, group) if chunks else 1
        unroll = _unroll_of(-(-n_out // per_block), per_block, few_rows_unroll,
                            n_red // (group * v), whole_rows and n_red % (group * v) == 0)
        # a row walked whole by both passes without loops (at most 2 x _UNROLL chunks a
        # lane): the reader's loads are the first pass's (forward_loads), in registers
        # instead of read again
        hold = held_rows and reader is not None and reader.v == v and \
            n_red % (group * v) == 0 and n_red // (group * v) <= 2 * _UNROLL
        if hold:
            unroll = n_red // (group * v)
        if v > 1:                   # lane l: chunks of v from v*l on, 16 bytes a load
            first = ir.Operation.create("arith.muli", [index],
                                        [lane, index_constant(v)]).result
            partial = _strided_partial(first, n_red, group * v, start,
                                       _chunk_fn(op, info, dims, v, writer), unroll,
                                       loads_first, hold)
        else:
            partial = _strided_partial(lane, n_red, group, start, _element_fn(op, info, dims),
                                       unroll, loads_first)
        if per_block == 1:
            kind = (_LOGICAL if info.logical else _COMBINERS)[info.comb.name][0]
            total = _narrow(block_all_reduce(_widen(partial, info), kind), info)
        else:
            total = _narrow(_warp_reduce(_widen(partial, info), info.comb.name, group), info)
        first = compare("eq", lane, index_constant(0))
        if inside is not None:
            first = ir.Operation.create("arith.andi", [first.type], [first, inside]).result
        where = indices(info.maps[-1], dims)
        if reader is None:
            store = scf.IfOp(first)
            with ir.InsertionPoint(store.then_block):
                _store_total(out, where, total, info, finish, zero)
                scf.YieldOp([])
        else:
            # the lane that stores the total hands the stored value to its group's lanes
            # (only it reads the output's old value: no lane reads what another writes)
            store = scf.IfOp(first, [total.type], has_else=True)
            with ir.InsertionPoint(store.then_block):
                scf.YieldOp([_store_total(out, where, total, info, finish, zero)])
            with ir.InsertionPoint(store.else_block):
                scf.YieldOp([total])
            stored = _from_first_lane(store.results[0], lane, group)
            values = [stored] + ([apply_body(finish, stored)] if finish is not None else [])
            _emit_reader(reader, info, dims, lane, group, values, unroll, loads_first, hold)
            if hold:
                forward_loads(ir.InsertionPoint.current.block)
        if guard:
            scf.YieldOp([])
    with ir.InsertionPoint(lb), op.location:
        ir.Operation.create("gpu.terminator", [])


def _from_first_lane(value, lane, group: int):
    """``value`` of the first lane of each group of ``group`` lanes (``lane``: the lane's
    number in its group; groups fill the warps in order): a ``gpu.shuffle idx``."""
    from mlir import ir

    i32 = ir.IntegerType.get_signless(32)

    def const(n):
        return ir.Operation.create("arith.constant", [i32],
                                   attributes={"value": ir.IntegerAttr.get(i32, n)}).result

    if group >= _WARP:
        src = const(0)
    else:                       # the group's first lane: the warp lane minus the group's lane
        index = ir.IndexType.get()
        warp_lane = ir.Operation.create("gpu.lane_id", [index]).result
        first = ir.Operation.create("arith.subi", [index], [warp_lane, lane]).result
        src = ir.Operation.create("arith.index_cast", [i32], [first]).result
    return ir.Operation.create(
        "gpu.shuffle", [value.type, ir.IntegerType.get_signless(1)], [value, src, const(_WARP)],
        attributes={"mode": ir.Attribute.parse("#gpu<shuffle_mode idx>")}).results[0]


def _emit_reader(reader: RowReader, info, dims, lane, group: int, values,
                 unroll: int = _UNROLL, loads_first: bool = True,
                 inline: bool = False) -> None:
    """The reader's body for the row at the parallel indices in ``dims``: lane ``lane`` of
    the row's ``group`` lanes takes chunks of ``reader.v`` consecutive elements ``v*lane,
    v*(lane + group), ...`` (the reduction elements' order, last loop fastest), reading the
    totals from ``values`` (0: the reduction's output, 1: the finishing op's) and the other
    inputs from memory, and stores its elements (one vector store a chunk; the loop unrolled
    as the reduction's, :func:`_strided_partial`)."""
    from mlir import ir

    from latch.passes.vector_lanes import lane_of, load_chunk, read_along, store_chunk

    g, v = reader.op, reader.v
    operands = list(g.operands)
    ins, res = operands[:-1], operands[-1]
    maps = indexing_maps(g)
    block = g.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    result = body[-1].operands[0]
    n_red = math.prod(info.ranges[d] for d in info.red)
    fixed = {block.arguments[j]: values[t] for j, t in reader.totals.items()}
    last = reader.loops.index(info.red[-1])
    along = read_along(ins, maps, f"d{last}") - set(reader.totals) if v > 1 else set()
    loaded = set(range(len(ins))) - set(reader.totals) - along
    index = ir.IndexType.get()

    def chunk(k, _):
        at = list(dims)
        _split(k, info.red[::-1], info.ranges, at)
        here = [at[d] for d in reader.loops]
        shared = dict(fixed)
        load_inputs(block, ins, maps, here, shared, only=loaded)
        vectors = load_chunk(block, ins, maps, here, v, along) if along else {}
        ys = []
        for u in range(v):
            mapping = dict(shared)
            mapping.update(lane_of(vectors, u))
            clone_body_ops(body[:-1], mapping, here)
            ys.append(mapping.get(result, result))
        where = indices(maps[-1], here)
        stores = [(ys, res)]
        for f, _ in reader.followers:       # the same element of each follower's output
            stores.append(([apply_body(f, y) for y in ys], list(f.operands)[-1]))
        for values, mem in stores:
            if v == 1:
                ir.Operation.create("memref.store", [], [values[0], mem] + where)
            else:
                store_chunk(values, mem, where)
        return None

    start = ir.Operation.create("arith.muli", [index], [lane, index_constant(v)]).result \
        if v > 1 else lane
    _strided_partial(start, n_red, group * v, None, chunk,
                     unroll if n_red % (group * v) == 0 else _UNROLL, loads_first, inline)


def block_all_reduce(value, kind: str):
    """``gpu.all_reduce <kind>`` of ``value`` over the block (uniform: every thread takes
    part and gets the total)."""
    from mlir import ir

    return ir.Operation.create(
        "gpu.all_reduce", [value.type], [value],
        attributes={"op": ir.Attribute.parse(f"#gpu<all_reduce_op {kind}>"),
                    "uniform": ir.UnitAttr.get()}, regions=1).result


def short_row_lanes(n_red: int) -> int:
    """Lanes combining one output of a reduction shorter than ``_BLOCK_MIN``: a power of two
    giving each lane about ``_PER_LANE`` elements, from 4 to a warp (32) — a 64-element row
    (attention's ``delta``, one per query and head) takes 8 lanes, four rows a warp, instead
    of a warp whose lanes each combine two elements."""
    return max(4, min(_WARP, _pow2_at_least(-(-n_red // _PER_LANE))))


def _warp_reduce(value, combine: str, lanes: int = _WARP):
    """Combine ``value`` (f32 or i32) across each aligned group of ``lanes`` lanes of a warp
    (butterfly of ``gpu.shuffle xor``; every lane ends with its group's total)."""
    from mlir import ir

    i32 = ir.IntegerType.get_signless(32)
    t = value.type
    width = ir.Operation.create("arith.constant", [i32],
                                attributes={"value": ir.IntegerAttr.get(i32, _WARP)}).result
    offsets = []
    while lanes > 1:
        lanes //= 2
        offsets.append(lanes)
    for offset in offsets:
        off = ir.Operation.create("arith.constant", [i32],
                                  attributes={"value": ir.IntegerAttr.get(i32, offset)}).result
        other = ir.Operation.create(
            "gpu.shuffle", [t, ir.IntegerType.get_signless(1)], [value, off, width],
            attributes={"mode": ir.Attribute.parse("#gpu<shuffle_mode xor>")}).results[0]
        value = ir.Operation.create(combine, [t], [value, other]).result
    return value


# -- column tiles --------------------------------------------------------------------------

def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def column_tile(info, column_bytes: int = COLUMN_BYTES) -> tuple[int, int]:
    """(W, R): outputs per block (threadIdx.x: ``column_bytes`` of the input, at most a
    warp) and threads splitting the reduction (threadIdx.y) of a column-tile kernel."""
    n_out = math.prod(info.ranges[d] for d in info.par)
    n_red = math.prod(info.ranges[d] for d in info.red)
    w = max(1, min(_WARP, 8 * column_bytes // max(1, info.column_bits),
                   _pow2_at_least(n_out)))
    r = min(_COLUMN_THREADS // w, _pow2_at_least(-(-n_red // _COLUMN_PER_THREAD)))
    r = max(r, _pow2_at_least(-(-_WARP // w)), 2)
    return w, r


def column_splits(info, blocks: int, r: int, whole_waves: bool = True) -> int:
    """Slices the reduction of a column-tile kernel is cut into (1, or a power of two
    dividing it, every thread keeping at least ``_COLUMN_SPLIT_MIN`` elements): the one
    whose ``blocks * splits`` blocks keep the GPU's ``_COLUMN_SPLIT_BLOCKS`` block slots
    busiest over the waves they take (the fewer slices on a tie).  The norm weights'
    gradients at B32 — 96 (48) blocks of 1024 threads summing 32,768 tokens — took 4 (8)
    slices, 384 blocks: 1.45 waves, the second half empty (2.1 TB/s on an H100); 8 (16)
    slices are 2.9 full waves.  Without ``whole_waves`` (the rule before the tenth stop):
    the fewest slices that make at least ``_COLUMN_SPLIT_BLOCKS`` blocks.  Each slice's
    block writes its partial sums into a workspace; a second launch combines the slices
    in order."""
    if info.logical:
        return 1
    n_red = math.prod(info.ranges[d] for d in info.red)
    options = [1]
    while n_red % (2 * options[-1] * r) == 0 and \
            n_red // (2 * options[-1] * r) >= _COLUMN_SPLIT_MIN:
        options.append(2 * options[-1])

    if not whole_waves:
        return next((s for s in options if blocks * s >= _COLUMN_SPLIT_BLOCKS), options[-1])

    def busy(splits: int) -> float:       # slots in use over the waves, as a fraction
        n = blocks * splits
        return round(n / (-(-n // _COLUMN_SPLIT_BLOCKS) * _COLUMN_SPLIT_BLOCKS), 2)
    return max(options, key=lambda s: (busy(s), -s))


def _column_order(info) -> list:
    """The parallel loops, the one walking the input's last dimension first, then those of
    its earlier dimensions (innermost first), then the rest."""
    from mlir import ir

    pos = {}
    for k, e in enumerate(info.column_map.results):
        if isinstance(e, ir.AffineDimExpr):
            pos.setdefault(ir.AffineDimExpr(e).position, k)
    inside = sorted((d for d in info.par if d in pos), key=lambda d: -pos[d])
    return inside + [d for d in info.par if d not in pos]


def _emit_columns(op, info, whole_waves: bool = True,
                  column_bytes: int = COLUMN_BYTES) -> None:
    from mlir import ir
    from mlir.dialects import gpu, scf

    index = ir.IndexType.get()
    i64 = ir.IntegerType.get_signless(64)
    ranges = info.ranges
    out = list(op.operands)[-1]
    n_out = math.prod(ranges[d] for d in info.par)
    n_red = math.prod(ranges[d] for d in info.red)
    w, r = column_tile(info, column_bytes)
    blocks = -(-n_out // w)
    splits = column_splits(info, blocks, r, whole_waves)
    slot_t = ir.IntegerType.get_signless(32) if info.logical else ir.F32Type.get()
    shared = ir.MemRefType.get([w * r], slot_t, memory_space=ir.Attribute.parse(
        "#gpu.address_space<workgroup>"))
    partials = None
    if splits > 1:       # [slice, output] partial sums: an unshared slot after the arena
        partials = top_allocation(op.operation.block,
                                  ir.MemRefType.get([splits, n_out], slot_t))
    with ir.InsertionPoint(op), op.location:
        c1 = index_constant(1)
        launch = gpu.LaunchOp((index_constant(blocks), index_constant(splits), c1),
                              (index_constant(w), index_constant(r), c1))
        lb = launch.regions[0].blocks[0]
        buf = lb.add_argument(shared, op.location)
        launch.operation.attributes["workgroup_attributions"] = ir.IntegerAttr.get(i64, 1)
    with ir.InsertionPoint(lb), op.location:
        bid, tx, ty = lb.arguments[0], lb.arguments[3], lb.arguments[4]
        o = tx
        if blocks > 1:
            scaled = ir.Operation.create("arith.muli", [index],
                                         [bid, index_constant(w)]).result
            o = ir.Operation.create("arith.addi", [index], [scaled, tx]).result
        ragged = n_out % w != 0
        # the last block's extra columns read the last output's elements (every thread
        # takes part in the barriers) and store nothing
        oc = o if not ragged else ir.Operation.create(
            "arith.minui", [index], [o, index_constant(n_out - 1)]).result
        dims = [None] * len(ranges)
        _split(oc, _column_order(info), ranges, dims)
        element = _element_fn(op, info, dims)
        if splits > 1:                    # this block's slice of the reduction
            chunk = n_red // splits
            base = ir.Operation.create("arith.muli", [index],
                                       [lb.arguments[1], index_constant(chunk)]).result

            def element(k, partial, whole=element):
                return whole(ir.Operation.create("arith.addi", [index], [base, k]).result,
                             partial)
        partial = _strided_partial(ty, n_red // splits, r, _identity(info), element)
        row = ir.Operation.create("arith.muli", [index], [ty, index_constant(w)]).result
        slot = ir.Operation.create("arith.addi", [index], [row, tx]).result
        ir.Operation.create("memref.store", [], [_widen(partial, info), buf, slot])
        step = r // 2
        while step >= 1:
            gpu.BarrierOp()
            half = scf.IfOp(compare("ult", ty, index_constant(step)))
            with ir.InsertionPoint(half.then_block):
                other = ir.Operation.create("arith.addi", [index],
                                            [slot, index_constant(step * w)]).result
                a = ir.Operation.create("memref.load", [slot_t], [buf, slot]).result
                b = ir.Operation.create("memref.load", [slot_t], [buf, other]).result
                ir.Operation.create("memref.store", [], [_combine(info, a, b), buf, slot])
                scf.YieldOp([])
            step //= 2
        # row 0 wrote slot tx itself in the last step: no barrier before reading it
        first = compare("eq", ty, index_constant(0))
        if ragged:
            inside = compare("ult", o, index_constant(n_out))
            first = ir.Operation.create("arith.andi", [first.type], [first, inside]).result
        store = scf.IfOp(first)
        with ir.InsertionPoint(store.then_block):
            total = ir.Operation.create("memref.load", [slot_t], [buf, tx]).result
            if partials is not None:
                ir.Operation.create("memref.store", [], [total, partials, lb.arguments[1], o])
            else:
                _store_total(out, indices(info.maps[-1], dims), _narrow(total, info), info)
            scf.YieldOp([])
        ir.Operation.create("gpu.terminator", [])
    if partials is not None:
        _combine_slices(op, info, partials, splits, n_out)


def _combine_slices(op, info, partials, splits: int, n_out: int) -> None:
    """A launch of one thread per output combining its ``splits`` partial sums in slice
    order (a fixed order: deterministic) with the output's initial value."""
    from mlir import ir

    out = list(op.operands)[-1]
    slot_t = ir.MemRefType(partials.type).element_type
    body, o = guarded_launch(op, n_out, _BLOCK)
    with ir.InsertionPoint.at_block_terminator(body), op.location:
        dims = [None] * len(info.ranges)
        _split(o, _column_order(info), info.ranges, dims)
        total = None
        for k in range(splits):
            part = ir.Operation.create("memref.load", [slot_t],
                                       [partials, index_constant(k), o]).result
            total = part if total is None else _combine(info, total, part)
        _store_total(out, indices(info.maps[-1], dims), total, info)
