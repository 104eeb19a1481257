"""Products that skip the rows a one-hot gather left empty (part of
``latch-form-contraction-kernels``, option ``empty-rows``).

An MoE's expert buffers hold C = ceil(1.25 N k / E) slots per expert; a slot that no token
takes stays zero (the dispatch gather's fill).  With N k routed slots in E C, at least a
fifth of every expert product multiplies zeros — the control computes the same padding.
Here the gather that fills such a buffer also records, per *segment* of S rows (an
expert's slots), its **extent**: one past the last row that received a source.  Every row
of the segment from the extent on is the fill (zero), so a product reading the buffer

* with the segment's rows as its output rows (``m``, or ``n``: the forward products
  ``x_e @ w1_e``, an input gradient ``dy_e @ w2_e^T``) gives an output tile wholly past
  the extent no k-tiles: its accumulators stay zero and its epilogue writes the zeros
  (and whatever the epilogue computes from them) as before;
* with them as its reduction (``k``: a weight gradient ``x_e^T dh_e``) stops its k-tile
  loop at the extent's tile.

Both are exact: a skipped term is a zero row times finite values.  The elementwise kernels
between the products (the SwiGLU forward and backward) skip their *loads* there too
(option ``empty-row-loads``, :func:`skip_row_loads`): an elementwise generic whose every
output is zero where such an input is zero reads its element-for-element inputs as
``select(row < extent, x, 0)`` — the values it computed before — and latch-map-parallel-loops
issues those loads only where the row is live; its stores (the zeros) stay.  The extent array
(``memref<segments x i32>``, an unshared slot) is zeroed by the gather's first launch and
raised (``atomic max``) in its gather launch by the thread storing the first columns of
each row that has sources and is the last such row of its run (the next row has none, or
the segment ends); the product loads one element of it per block.

The same extents hold for rows computed from such rows: a product that skips output rows
writes zeros there (its output zero-filled just before, batch dims first, then the
segment's dim), and an elementwise generic keeps a zero input's rows zero where its body
yields 0 for that input whatever the other (finite) inputs are (products with it,
roundings, negations: ``silu(x @ w1) * (x @ w3)``, the SwiGLU backward's two outputs).  So
all nine expert products of a TinyMoE layer skip: the forward's three, the combine
gradient's product, the three weight gradients and the two input gradients.  The other
values are taken as finite: a zero times inf is NaN, which skipping makes 0 in padding rows.

Applies when: the gather's output is zero-filled just before it (or its rounded copy's
body maps 0 to 0: ``truncf``, adding a zero constant); the product's factor is that
buffer (or views of it: row-major rows of the gather's row length ``L``), read as it is
(at most widened or rounded), its segment dim alone in its group with stride ``L``, its
batch dims ``S L``-multiple strides, its other dims within one row; and nothing between
the op that wrote the rows and the product writes the buffer.  A gather takes the segment
size of its first such product; a product whose segment size differs reads all rows.
Measured (H200): products skipping, TinyMoE B32 58.73 -> 57.77 ms (B2 slower until
:data:`MIN_WAVES` limited skipping to large products); the bitwise checks are
``tests/py/test_empty_rows_simt.py``.
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import float_constant, operation as _op
from latch.passes.buffer_views import identity_layout, may_write, root, users

#: ops a factor may apply to the element it reads and still be zero where it is zero
_ZERO_PRESERVING = ("arith.extf", "arith.truncf")


@dataclasses.dataclass
class Skip:
    """How a product reads a gather's extents: loop ``dim`` (group ``group``: "m", "n" or
    "k") walks a segment's rows; the segment of batch indices ``b`` is
    ``first + sum(coeff * b[d])``; the extents are the kernel's captured argument ``arg``."""
    group: str
    dim: int
    rows: int                  # S: rows per segment (the dim's size)
    first: int
    coeffs: dict               # batch loop dim -> segment stride
    extents: object = None     # the memref<segments x i32> allocation
    arg: int | None = None     # its position among the contraction's captured memrefs


@dataclasses.dataclass
class ZeroRows:
    """A buffer whose rows (``length`` elements each, ``count`` of them, ``rows`` to a
    segment) are zero from their segment's extent on: a gather's (the gather's rows, zero
    where they received no source), or one computed from such rows (``op`` wrote it)."""
    buffer: object
    length: int
    count: int
    op: object                 # what wrote it: a gather's contraction (before it is
                               # emitted), a product, an elementwise generic
    writer: object = None      # the rounded copy's generic the gather replaces, if any
    rows: int | None = None    # S chosen by the first product that reads it
    extents: object = None
    gather: int | None = None  # the gather's index among the contractions (its own rows)


def maps_zero_to_zero(g) -> bool:
    """Whether the body of the one-input generic ``g`` (a rounding copy) yields 0 for the
    input 0 (:func:`_zero_results`: ``truncf``, adding a zero constant)."""
    block = g.regions[0].blocks[0]
    return _zero_results(block, block.arguments[0]) == [True]


def gather_rows(sc, copy) -> ZeroRows | None:
    """The buffer whose rows the gather of ``sc`` writes zero where no source lands (the
    rounded copy's when ``copy`` is given, else the f32 output), or None when those rows
    are not known to be zero or not row-major whole rows."""
    from mlir import ir

    from latch.passes.one_hot_gather import _rows, _value_dims

    con = sc.con
    if con.zeroed_by is None:             # the gather starts from the output's old values
        return None
    length = math.prod(con.sizes[d] for d in _value_dims(sc))
    if copy is not None:
        g, out, prefix = copy
        if not maps_zero_to_zero(g) or root(out) != out:
            return None
        return ZeroRows(out, length, prefix // length, con.op, writer=g)
    c = con.c
    order = [d for kind, d in con.maps[-1]]
    if root(c) != c or not identity_layout(ir.MemRefType(c.type)) or \
            order[:len(sc.row_dims)] != sc.row_dims:
        return None
    return ZeroRows(c, length, _rows(sc), con.op)


def _factor_skip(con, side: int, rows: ZeroRows) -> Skip | None:
    """The :class:`Skip` of factor ``side`` of the product ``con`` when it reads ``rows``'
    buffer as the module docstring requires, else None."""
    from mlir import ir

    operand = con.sides[side]
    if len(operand.args) != 1 or operand.captured or \
            any(_op(o).name not in _ZERO_PRESERVING for o in operand.ops):
        return None
    i = operand.args[0]
    v = con.inputs[i]
    if root(v) != rows.buffer:
        return None
    t = ir.MemRefType(v.type)
    strides, offset = t.get_strides_and_offset()
    if any(s < 0 for s in strides) or offset < 0 or not t.has_static_shape:
        return None
    group_of = {d: g for g, ds in con.groups.items() for d in ds}
    L = rows.length
    dims = []                             # (loop dim, stride) of the factor's dims
    for (kind, d), stride, size in zip(con.maps[i], strides, t.shape):
        if kind != "d":
            if size != 1:
                return None
            continue
        dims.append((d, stride))
    for d, stride in dims:
        g = group_of[d]
        if g == "batch" or stride != L or len(con.groups[g]) != 1:
            continue
        S = con.sizes[d]
        others = [(e, s) for e, s in dims if e != d and group_of[e] != "batch"]
        within = sum(s * (con.sizes[e] - 1) for e, s in others)
        batch = [(e, s) for e, s in dims if group_of[e] == "batch"]
        if within >= L or offset % (S * L) or any(s % (S * L) for _, s in batch):
            continue
        if any(group_of[e] == g for e, _ in others):
            continue
        return Skip(g, d, S, offset // (S * L), {e: s // (S * L) for e, s in batch})
    return None


def _written_between(rows: ZeroRows, op, positions: dict) -> bool:
    """Whether an op between the one that wrote ``rows`` and ``op`` (top-level positions
    in their block) may write ``rows``' buffer (other than the rounded copy a gather
    replaces)."""
    lo, hi = positions[_op(rows.op)], positions[_op(op)]
    for user in users(rows.buffer):
        top = _op(user)
        while top not in positions:
            top = top.parent
            if top is None:
                return True
            top = _op(top)
        if not lo < positions[top] < hi:
            continue
        if rows.writer is not None and top == _op(rows.writer):
            continue
        user = _op(user)
        if may_write(user, rows.buffer):
            return True
    return False


def _zero_results(block, arg) -> list:
    """Per value the body ``block`` of an elementwise generic yields, whether it is 0
    whenever the argument ``arg`` is 0 and the others are any finite values: a product
    with it, its negation, roundings, a sum of such terms (``silu(g) * u``,
    ``dy * u * silu'(g)``)."""
    ZERO, ANY = "zero", "any"
    values = {arg: ZERO}

    def value(v):
        if v in values:
            return values[v]
        c = float_constant(v)
        return ZERO if c == 0.0 else ANY

    for o in block.operations:
        o = _op(o)
        if o.name == "linalg.yield":
            return [value(v) == ZERO for v in o.operands]
        args = [value(v) for v in o.operands]
        if o.name in ("arith.extf", "arith.truncf", "arith.negf"):
            r = args[0]
        elif o.name == "arith.mulf":
            r = ZERO if ZERO in args else ANY
        elif o.name in ("arith.addf", "arith.subf"):
            r = ZERO if args == [ZERO, ZERO] else ANY
        elif o.name == "arith.select":
            r = ZERO if args[1:] == [ZERO, ZERO] else ANY
        else:
            r = ANY
        for res in o.results:
            values[res] = r
    return []


def _product_rows(con, skip: Skip, source: ZeroRows) -> ZeroRows | None:
    """The rows of product ``con``'s output that are zero because its output rows (or
    columns: group m or n) are ``source``'s skipped ones: the output must be written whole
    (zero-filled just before), an identity-layout allocation ordered (batch dims as the
    extents count them, the segment dim, then the other group's dims)."""
    from mlir import ir

    out = con.c
    if skip.group == "k" or con.zeroed_by is None or root(out) != out:
        return None
    columns = "n" if skip.group == "m" else "m"
    t = ir.MemRefType(out.type)
    if not identity_layout(t) or not t.has_static_shape:
        return None
    order = [d if kind == "d" else None for kind, d in con.maps[-1]]
    batch = [d for d in order if d in con.groups["batch"]]
    if None in order or order[len(batch)] != skip.dim or \
            any(d not in con.groups[columns] for d in order[len(batch) + 1:]):
        return None
    length = math.prod(t.shape[len(batch) + 1:])
    stride = skip.rows                    # a batch dim's step in rows, innermost first
    for d in reversed(batch):
        if skip.coeffs.get(d) != stride // skip.rows:
            return None
        stride *= con.sizes[d]
    if skip.first or len(skip.coeffs) != len(batch):
        return None
    return ZeroRows(out, length, math.prod(t.shape) // length, con.op, rows=skip.rows,
                    extents=skip.extents)


def _elementwise_rows(op, facts: dict, positions: dict, readers: list | None = None) -> list:
    """The rows of an elementwise generic's outputs that are zero because an input read
    element for element (same shape, identity layouts, the output's indexing map) has them
    zero and the body keeps a zero of it zero in that output: a :class:`ZeroRows` per
    such output.  When it keeps every output zero and its outputs are laid out as
    ``[segments, S, row]``, ``(op, the input's ZeroRows)`` is appended to ``readers``
    (:func:`skip_row_loads` may rebuild it)."""
    from mlir import ir

    from latch.passes.generic_body import indexing_maps, segments

    if op.results or any("parallel" not in str(t)
                         for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return []
    n_in, n_out = segments(op)
    maps = indexing_maps(op)
    outs = list(op.operands)[n_in:]
    if not outs or any(m != maps[-1] for m in maps[n_in:]) or not maps[-1].is_permutation:
        return []
    shape = ir.MemRefType(outs[0].type).shape
    if any(root(o) != o or ir.MemRefType(o.type).shape != shape or
           not identity_layout(ir.MemRefType(o.type)) for o in outs):
        return []
    block = op.regions[0].blocks[0]
    for a in range(n_in):
        v = op.operands[a]
        if maps[a] != maps[-1] or v not in facts or ir.MemRefType(v.type).shape != shape or \
                not identity_layout(ir.MemRefType(v.type)):
            continue
        source = facts[v][-1]
        if source.extents is None or _written_between(source, op, positions):
            continue
        zero = _zero_results(block, block.arguments[a])
        found = [ZeroRows(out, source.length, source.count, op, rows=source.rows,
                          extents=source.extents)
                 for out, z in zip(outs, zero) if z]
        if found:
            if readers is not None and len(found) == len(outs) and \
                    _segment_loops(op, source) is not None:
                readers.append((op, source))
            return found
    return []


def _segment_loops(op, rows: ZeroRows) -> tuple[int, int] | None:
    """(segment loop, row loop) of the elementwise generic ``op`` whose outputs hold
    ``rows``' geometry as ``[segments, S, ...]`` (the output's first dim the segment, its
    second a row of it, the rest one row of ``rows.length`` elements), else None."""
    from mlir import ir

    from latch.passes.generic_body import indexing_maps

    out = indexing_maps(op)[-1]
    shape = ir.MemRefType(list(op.operands)[-1].type).shape
    if len(shape) < 3 or shape[1] != rows.rows or math.prod(shape[2:]) != rows.length or \
            shape[0] * shape[1] != rows.count or \
            shape[0] > ir.MemRefType(rows.extents.type).shape[0]:
        return None
    first, second = out.results[0], out.results[1]
    if not isinstance(first, ir.AffineDimExpr) or not isinstance(second, ir.AffineDimExpr):
        return None
    return ir.AffineDimExpr(first).position, ir.AffineDimExpr(second).position


def plan(found, scatters, gathers, copies) -> tuple[dict, dict, list]:
    """({index of a gather in ``found``: its :class:`ZeroRows` with the segment size and
    extents allocation}, {index of a product: its :class:`Skip`}, [(elementwise generic,
    the :class:`ZeroRows` of its input) that :func:`skip_row_loads` may rebuild]) for the
    products of ``found`` (matched contractions; ``scatters``/``gathers``/``copies``: per
    contraction its one-hot scatter, gather form and rounded copy or None).  Each function
    body is walked in order: a gather's buffer has zero rows; so has a product's output
    whose rows it skips, and an elementwise result that a zero of such an input keeps
    zero."""
    from mlir import ir

    from latch.passes.generic_body import top_allocation

    index_of = {_op(con.op): j for j, con in enumerate(found)}
    blocks = {}
    for con in found:
        blocks.setdefault(hash(con.op.operation.block), con.op.operation.block)
    used, skips, readers = {}, {}, []
    for block in blocks.values():
        ops = [_op(o) for o in block.operations]
        positions = {o: n for n, o in enumerate(ops)}
        facts = {}                        # buffer -> [ZeroRows], latest last
        for o in ops:
            j = index_of.get(o)
            if j is None:
                if o.name == "linalg.generic":
                    for rows in _elementwise_rows(o, facts, positions, readers):
                        facts.setdefault(rows.buffer, []).append(rows)
                continue
            if gathers[j] is not None:
                rows = gather_rows(gathers[j], copies[j])
                if rows is not None:
                    rows.gather = j
                    facts.setdefault(rows.buffer, []).append(rows)
                continue
            if scatters[j] is not None:       # kept a scatter: not a tiled product
                continue
            con = found[j]
            for side in (0, 1):
                operand = con.sides[side]
                if len(operand.args) != 1:
                    continue
                known = facts.get(root(con.inputs[operand.args[0]]))
                if not known:
                    continue
                rows = known[-1]              # the last writer before the product
                skip = _factor_skip(con, side, rows)
                if skip is None or rows.rows not in (None, skip.rows) or \
                        _written_between(rows, con.op, positions):
                    continue
                if rows.extents is None:
                    rows.rows = skip.rows
                    segments = -(-rows.count // skip.rows)
                    rows.extents = top_allocation(block,
                                                  ir.Type.parse(f"memref<{segments}xi32>"))
                    used[rows.gather] = rows
                skip.extents = rows.extents
                skips[j] = skip
                out = _product_rows(con, skip, rows)
                if out is not None:
                    facts.setdefault(out.buffer, []).append(out)
                break
    return used, skips, readers


#: a product skips only where that pays for the extent's load (about 1 us at the start of
#: every block, before its first copies): rows as output tiles, when its tiles take at
#: least MIN_WAVES waves of the GPU (skipped blocks then shorten the kernel); rows as its
#: reduction, when a block's k loop has at least MIN_K_TILES tiles.  Measured on the H200
#: (tinymoe_bench-20261205T030210Z.json, every expert product skipping): TinyMoE B2 6.73 ->
#: 6.99 ms (its expert products take one or two waves of 10 k-tiles), B32 58.73 -> 57.77.
MIN_WAVES = 4
MIN_K_TILES = 16


def pays(con, skip: Skip, chip: str) -> bool:
    """Whether product ``con`` gains from skipping the rows of ``skip`` (above)."""
    from latch.passes import contraction_wgmma as wg

    if chip == "sm_90a" and wg.wgmma_applies(con):
        bn, splits = wg.tiling(con)
    else:
        bn, splits = 128, 1
    k_tiles = -(-con.size("k") // wg.BK)
    if skip.group == "k":
        return -(-k_tiles // splits) >= MIN_K_TILES
    tiles = -(-con.size("n") // bn) * -(-con.size("m") // wg.BM) * max(1, con.size("batch"))
    return tiles * splits >= MIN_WAVES * wg._SMS


# ---------------------------------------------------------------------------------------
# elementwise readers: no loads past the extent
# ---------------------------------------------------------------------------------------
def skip_row_loads(op, rows: ZeroRows) -> None:
    """Rebuild the elementwise generic ``op`` (one of :func:`plan`'s readers: every output
    zero where its input of ``rows`` is zero) so that its inputs read element for element
    are taken as 0 in the rows of a segment from its extent on: the extents become one
    more input (indexed by the segment loop) and each such input's element ``x`` becomes
    ``select(row < extent, x, 0)``.  The values are those of before (the body keeps those
    rows zero either way: a zero's sign aside); latch-map-parallel-loops then issues a
    load that is only read through such a select only where its condition holds
    (``map_parallel_loops.guarded_loads``), so the padding rows cost their stores alone."""
    from mlir import ir

    from latch.passes.generic_body import compare, indexing_maps, segments, zero_of

    seg_loop, row_loop = _segment_loops(op, rows)
    n_in, n_out = segments(op)
    maps = indexing_maps(op)
    ins, outs = list(op.operands)[:n_in], list(op.operands)[n_in:]
    guarded = [j for j in range(n_in) if maps[j] == maps[-1]]
    by_segment = ir.AffineMap.get(maps[-1].n_dims, 0, [ir.AffineDimExpr.get(seg_loop)])
    attrs = {name: op.attributes[name] for name in op.attributes}
    attrs["indexing_maps"] = ir.ArrayAttr.get(
        [ir.AffineMapAttr.get(m) for m in maps[:n_in] + [by_segment] + maps[n_in:]])
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([n_in + 1, n_out])
    i32, index = ir.IntegerType.get_signless(32), ir.IndexType.get()
    segments_here = ir.MemRefType(outs[0].type).shape[0]
    with ir.InsertionPoint(op), op.location:
        extents = rows.extents          # the gather's may count more segments
        if ir.MemRefType(extents.type).shape[0] != segments_here:
            extents = ir.Operation.create(
                "memref.subview", [ir.Type.parse(f"memref<{segments_here}xi32>")], [extents],
                attributes={"static_offsets": ir.DenseI64ArrayAttr.get([0]),
                            "static_sizes": ir.DenseI64ArrayAttr.get([segments_here]),
                            "static_strides": ir.DenseI64ArrayAttr.get([1]),
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0])}
            ).result
        new = ir.Operation.create("linalg.generic", [], ins + [extents] + outs,
                                  attributes=attrs, regions=1)
    old = op.regions[0].blocks[0]
    types = [a.type for a in old.arguments]
    block = new.regions[0].blocks.append(*types[:n_in], i32, *types[n_in:])
    args = list(block.arguments[:n_in]) + list(block.arguments[n_in + 1:])
    with ir.InsertionPoint(block), op.location:
        row = ir.Operation.create("linalg.index", [index], attributes={
            "dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), row_loop)}).result
        extent = ir.Operation.create("arith.index_cast", [index],
                                     [block.arguments[n_in]]).result
        live = compare("ult", row, extent)
        for j in guarded:
            args[j] = ir.Operation.create("arith.select", [types[j]], [
                live, block.arguments[j], zero_of(types[j])]).result
    for a, b in zip(old.arguments, args):
        a.replace_all_uses_with(b)
    for o in [_op(o) for o in old.operations]:
        block.append(o)
    op.erase()


# ---------------------------------------------------------------------------------------
# the gather's side: zero the extents, raise them
# ---------------------------------------------------------------------------------------
def zero_extents(rows: ZeroRows, lin) -> None:
    """In the gather's zeroing launch (thread ``lin``): zero extent ``lin`` if there."""
    from mlir import ir
    from mlir.dialects import scf

    from latch.passes.fixed_point_scatter import _int as const
    from latch.passes.generic_body import compare, index_constant

    i32 = ir.IntegerType.get_signless(32)
    segments = ir.MemRefType(rows.extents.type).shape[0]
    inside = scf.IfOp(compare("ult", lin, index_constant(segments)))
    with ir.InsertionPoint(inside.then_block):
        ir.Operation.create("memref.store", [], [const(i32, 0), rows.extents, lin])
        scf.YieldOp([])


def raise_extent(rows: ZeroRows, first, row, n, counts, live: int, count_rows: int) -> None:
    """In the gather launch, the thread whose elements start at ``first`` (of row ``row``,
    which received ``n`` sources; ``counts``: every row's count, ``count_rows`` of them, the
    ``live`` first written): when ``first`` starts its row, the row has sources and the
    next row none or another segment, raise its segment's extent to the row's end."""
    from mlir import ir
    from mlir.dialects import scf

    from latch.passes.fixed_point_scatter import _int as const, _kind
    from latch.passes.generic_body import compare, index_constant

    index = ir.IndexType.get()
    i32 = ir.IntegerType.get_signless(32)
    i1 = ir.IntegerType.get_signless(1)
    S = rows.rows

    def arith(name, a, b, t=index):
        return ir.Operation.create(f"arith.{name}", [t], [a, b]).result

    starts = compare("eq", arith("remui", first, index_constant(rows.length)),
                     index_constant(0))
    has = compare("sgt", n, const(i32, 0))
    following = arith("addi", row, index_constant(1))
    ends = arith("ori", compare("eq", arith("remui", following, index_constant(S)),
                                index_constant(0)),
                 compare("uge", following, index_constant(live)), i1)
    next_n = ir.Operation.create("memref.load", [i32], [counts, arith(
        "minui", following, index_constant(count_rows - 1))]).result
    last = arith("ori", ends, compare("eq", next_n, const(i32, 0)), i1)
    raise_it = scf.IfOp(arith("andi", arith("andi", starts, has, i1), last, i1))
    with ir.InsertionPoint(raise_it.then_block):
        seg = arith("divui", row, index_constant(S))
        end = ir.Operation.create("arith.index_cast", [i32], [following]).result
        end = arith("subi", end, ir.Operation.create(
            "arith.index_cast", [i32], [arith("muli", seg, index_constant(S))]).result, i32)
        ir.Operation.create("memref.atomic_rmw", [i32], [end, rows.extents, seg],
                            attributes={"kind": _kind("maxs")})
        scf.YieldOp([])


# ---------------------------------------------------------------------------------------
# the product's side: the block's k-tiles
# ---------------------------------------------------------------------------------------
def bound_k_tiles(t, k, lo: str, hi: str) -> str:
    """The end of the block's k-tile loop (kernel text ``t``, ``_Kernel`` ``k`` after
    ``_begin``) given its slice ``lo`` .. ``hi``: ``lo`` (no tiles) for an output tile
    wholly past its segment's extent; for a segment walked by k, the tile holding the
    extent's last row."""
    skip = k.con.skip
    seg = t.const(skip.first)
    for d, coeff in skip.coeffs.items():
        seg = t.add(seg, t.mul(k.batch[d], coeff))
    ext_type = str(skip.extents.type)
    extent = t.emit(f"arith.index_cast {t.emit(f'memref.load %X{skip.arg}[{seg}] : {ext_type}')}"
                    " : i32 to index")
    if skip.group == "k":
        tiles = t.arith("divui", t.add(extent, k.k_tile - 1), k.k_tile)
        return t.arith("maxui", t.arith("minui", hi, tiles), lo)
    first_row = k.m0 if skip.group == "m" else k.n0
    past = t.emit(f"arith.cmpi uge, {first_row}, {extent} : index")
    return t.emit(f"arith.select {past}, {lo}, {hi} : index")

