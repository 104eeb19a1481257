"""One-hot contractions as scatter kernels (part of ``latch-form-contraction-kernels``).

The frontend decomposes ``index_put``/``index_add``/``scatter_add`` and the backward of
``embedding`` into dense one-hot products (latch.frontend.decompositions): for a source row
``k`` with target ``t(k)``, ``C[j, n] += sum_k [t(k) == j] * V[k, n]``.  As a contraction
that is ``rows(C) x K x N`` multiply-adds, quadratic in the number of tokens.  This module
recognizes the pattern and emits the sparse computation it stands for instead: one thread
per ``(k, n)`` adds ``V[k, n]`` to ``C[t(k), n]`` (skipped when ``t(k)`` is out of range),
``K x N`` work — per ``(k, four consecutive n)`` where the f32 output's rows allow aligned
16-byte groups (:func:`lanes`): its four adds, emitted in a row, become one
``red.global.add.v4.f32`` in latch-vector-atomics.

Recognized: a contraction whose mask factor is ``[a == b]`` (an ``arith.cmpi eq`` turned
into 0/1), computed in the body or read from a buffer whose last writer computed it, where
one side of the comparison is the coordinate of the output's row dimension (that loop's
``linalg.index``, or an element of an ``arange`` buffer) and the other depends only on
the source (``k``) and batch loops.

Rows hit by several sources receive their additions through ``atomicAdd``, in an order the
hardware chooses: with duplicate targets the float sum may differ in the last bits from run
to run (as PyTorch's own CUDA ``index_add_``), where the dense product was deterministic.
Sources whose target is out of range add nothing, even when ``V`` is not finite (the dense
product would have added ``0 * inf = NaN``; PyTorch's scatter adds nothing).
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import operation as _op
from latch.passes.buffer_views import last_writer, may_write, root, users
from latch.passes.generic_body import (clone_body_ops, compare, delinearize, guarded_launch,
                                       index_constant, load_inputs)

_THREADS = 256


@dataclasses.dataclass
class Scatter:
    con: object                 # the Contraction
    row_dims: list              # the output's row (target) loop dims, row-major
    space: object               # the generic computing the target (the contraction or W)
    to_space: dict              # contraction loop dim -> loop dim of ``space``
    target: object              # the Operand (form_contraction_kernels) of ``space`` that is t(k)
    value_side: int             # the factor that is V
    in_body: bool = True        # the mask is computed in the contraction's body


def match_one_hot_scatter(con):
    """A Scatter if contraction ``con`` (with a mask factor) is a one-hot scatter."""
    from mlir import ir

    from latch.passes.form_contraction_kernels import map_dims, side_of

    if con.indicator is None:
        return None
    mask = con.sides[con.indicator]
    # the rows in the output's row-major order (loops may have been permuted)
    out_pos = {d: i for i, (kind, d) in enumerate(con.maps[-1]) if kind == "d"}
    row_dims = con.groups["m" if con.indicator == 0 else "n"]
    if any(d not in out_pos for d in row_dims):
        return None
    row_dims = sorted(row_dims, key=out_pos.get)
    op = con.op
    block = op.regions[0].blocks[0]
    v = _strip(mask.value)
    space, to_space = op, {d: d for d in range(len(con.sizes))}
    if hasattr(v.owner, "arguments"):            # read from a mask buffer H
        if v.owner != block or len(row_dims) != 1:
            return None
        h = ir.BlockArgument(v).arg_number
        writer = last_writer(con.inputs[h], op)
        if writer is None:
            return None
        # loop dims of the writer W <-> contraction dims, through H's two indexing maps
        w_out = ir.AffineMapAttr(list(ir.ArrayAttr(writer.attributes["indexing_maps"]))[-1]).value
        if ir.MemRefType(writer.operands[len(writer.operands) - 1].type).shape != \
                ir.MemRefType(con.inputs[h].type).shape:
            return None                           # a reshape between: positions differ
        to_space = {}
        for pos, (kind, d) in enumerate(con.maps[h]):
            expr = w_out.results[pos]
            if kind != "d" or not isinstance(expr, ir.AffineDimExpr):
                return None
            to_space[d] = ir.AffineDimExpr(expr).position
        space = writer
        wblock = writer.regions[0].blocks[0]
        v = _strip(_op(list(wblock.operations)[-1]).operands[0])
    if hasattr(v.owner, "arguments"):
        return None
    cmp = _op(v.owner)
    if cmp.name != "arith.cmpi" or ir.IntegerAttr(cmp.attributes["predicate"]).value != 0:
        return None
    if any(d not in to_space for d in row_dims):
        return None
    srows = [to_space[d] for d in row_dims]
    allowed = {to_space[d] for d in con.groups["k"] + con.groups["batch"] if d in to_space}
    for a, b in ((cmp.operands[0], cmp.operands[1]), (cmp.operands[1], cmp.operands[0])):
        if not _is_coordinate(a, srows, space, [con.sizes[d] for d in row_dims]):
            continue
        seg = list(ir.DenseI32ArrayAttr(space.attributes["operandSegmentSizes"]))
        target = side_of(b, space.regions[0].blocks[0], map_dims(space), seg[0])
        if target is None or set(srows) & target.dims or not target.dims <= allowed:
            continue
        if space != op and not _reads_unchanged(space, target, op):
            return None       # t(k) is recomputed at the contraction: its inputs must hold
        return Scatter(con, row_dims, space, to_space, target, 1 - con.indicator,
                       in_body=space == op)
    return None


def _reads_unchanged(writer, target, op) -> bool:
    """Whether the buffers the mask writer reads to compute ``target`` (its inputs and any
    buffer its body loads from) still hold the same data at ``op``: the scatter recomputes
    t(k) there, and bufferization reuses buffers, so nothing between may write them —
    neither those allocations nor, once ``latch-plan-memory`` has placed them
    (``latch.offset``), any allocation whose planned bytes overlap theirs."""
    from mlir import ir

    buffers = [writer.operands[i] for i in target.args]
    buffers += [x for o in target.ops if o.name == "memref.load" for x in o.operands[:1]]
    roots = [root(b) for b in buffers if isinstance(b.type, ir.MemRefType)]
    block_ops = [_op(o) for o in op.operation.block.operations]
    from latch.passes.plan_memory import planned_range

    placed = [(o.results[0], planned_range(o)) for o in block_ops if o.name == "memref.alloc"]
    for r in list(roots):
        mine = None if hasattr(r.owner, "arguments") else planned_range(_op(r.owner))
        if mine is not None:
            roots += [v for v, rng in placed if rng is not None and v != r and
                      rng[0] < mine[1] and mine[0] < rng[1]]
    between = block_ops
    start = next(i for i, o in enumerate(between) if o == writer)
    end = next(i for i, o in enumerate(between) if o == op)
    return not any(may_write(o, r) for o in between[start + 1:end] for r in roots)


def _strip(v):
    """Look through the 0/1 conversions around a comparison: uitofp/sitofp/extui/trunci."""
    while not hasattr(v.owner, "arguments") and _op(v.owner).name in (
            "arith.uitofp", "arith.sitofp", "arith.extui", "arith.trunci", "arith.extf",
            "arith.truncf"):
        v = _op(v.owner).operands[0]
    return v


def _is_coordinate(v, dims: list, space, sizes: list | None = None) -> bool:
    """Whether body value ``v`` of generic ``space`` equals the row-major linear index of its
    loops ``dims`` (trip counts ``sizes``): for one loop, its linalg.index (possibly cast);
    an ``affine.apply`` linearizing their linalg.index values (what elementwise fusion
    leaves of an arange read through a reshape); or an element of an arange buffer read at
    them (for several loops, the arange viewed through one ``expand_shape`` group, e.g.
    ``[tokens]`` read as ``[batch, seq]``)."""
    from mlir import ir

    while not hasattr(v.owner, "arguments") and _op(v.owner).name == "arith.index_cast":
        v = _op(v.owner).operands[0]
    if not hasattr(v.owner, "arguments"):
        o = _op(v.owner)
        if o.name == "affine.apply" and sizes is not None:
            return _is_linearization(o, dims, sizes)
        return len(dims) == 1 and o.name == "linalg.index" and \
            ir.IntegerAttr(o.attributes["dim"]).value == dims[0]
    block = space.regions[0].blocks[0]
    if v.owner != block:
        return False
    i = ir.BlockArgument(v).arg_number
    seg = list(ir.DenseI32ArrayAttr(space.attributes["operandSegmentSizes"]))
    if i >= seg[0]:
        return False
    amap = ir.AffineMapAttr(list(ir.ArrayAttr(space.attributes["indexing_maps"]))[i]).value
    if len(amap.results) != len(dims) or \
            any(not isinstance(e, ir.AffineDimExpr) or ir.AffineDimExpr(e).position != d
                for e, d in zip(amap.results, dims)):
        return False
    buf = space.operands[i]
    if len(dims) > 1:                 # the arange seen through expand_shape [[0, .., r-1]]
        if hasattr(buf.owner, "arguments") or _op(buf.owner).name != "memref.expand_shape":
            return False
        expand = _op(buf.owner)
        groups = [list(ir.ArrayAttr(g)) for g in ir.ArrayAttr(expand.attributes["reassociation"])]
        if len(groups) != 1 or not ir.MemRefType(buf.type).has_static_shape:
            return False
        buf = expand.operands[0]
    writer = last_writer(buf, space)
    if writer is None or len(ir.ArrayAttr(writer.attributes["iterator_types"])) != 1:
        return False
    wmap = ir.AffineMapAttr(list(ir.ArrayAttr(writer.attributes["indexing_maps"]))[-1]).value
    if wmap != ir.AffineMap.get_identity(1) or \
            writer.operands[len(writer.operands) - 1] != buf:
        return False
    yielded = _op(list(writer.regions[0].blocks[0].operations)[-1]).operands[0]
    return _is_coordinate(yielded, [0], writer)


def _is_linearization(apply, dims: list, sizes: list) -> bool:
    """Whether ``affine.apply`` op ``apply`` computes sum_i index(dims[i]) * stride_i with
    row-major strides of ``sizes``: each operand a linalg.index of one of ``dims``, the map
    a sum of products by constants (checked at the origin and at each unit vector)."""
    from mlir import ir

    amap = ir.AffineMapAttr(apply.attributes["map"]).value
    if len(amap.results) != 1:
        return False                   # operands: the map's dims, then its symbols
    loop_of = []
    for x in apply.operands:
        if hasattr(x.owner, "arguments") or _op(x.owner).name != "linalg.index":
            return False
        loop_of.append(ir.IntegerAttr(_op(x.owner).attributes["dim"]).value)
    if sorted(loop_of) != sorted(dims):
        return False

    def value(e, point):
        if isinstance(e, ir.AffineDimExpr):
            return point[ir.AffineDimExpr(e).position]
        if isinstance(e, ir.AffineSymbolExpr):
            return point[amap.n_dims + ir.AffineSymbolExpr(e).position]
        if isinstance(e, ir.AffineConstantExpr):
            return ir.AffineConstantExpr(e).value
        if isinstance(e, ir.AffineAddExpr):
            e = ir.AffineAddExpr(e)
            return value(e.lhs, point) + value(e.rhs, point)
        if isinstance(e, ir.AffineMulExpr):
            e = ir.AffineMulExpr(e)
            return value(e.lhs, point) * value(e.rhs, point)
        raise ValueError("not a sum of products")

    strides = {d: math.prod(sizes[j] for j in range(i + 1, len(dims)))
               for i, d in enumerate(dims)}
    try:
        if value(amap.results[0], [0] * len(loop_of)) != 0:
            return False
        for k, d in enumerate(loop_of):
            unit = [0] * len(loop_of)
            unit[k] = 1
            if value(amap.results[0], unit) != strides[d]:
                return False
    except ValueError:
        return False
    return True


def emit_scatter(sc: Scatter) -> None:
    """Replace the contraction by a gpu.launch: one thread per (batch, k, value dims) —
    per four consecutive columns where :func:`lanes` allows, whose four adds
    latch-vector-atomics makes one vector reduction."""
    from mlir import ir

    f32 = ir.F32Type.get()
    i64 = ir.IntegerType.get_signless(64)
    con = sc.con

    def add(columns):
        for value, where in columns:            # consecutive: one vector reduction on sm_90
            ir.Operation.create("memref.atomic_rmw", [f32], [value, con.c] + where,
                                attributes={"kind": ir.IntegerAttr.get(i64, 0)})   # addf

    source_launch(sc, lanes(sc), add)


def source_launch(sc: Scatter, width: int, per_source) -> None:
    """A gpu.launch before the contraction with one thread per (batch, k, ``width``
    consecutive value columns); where the source's target t(k) is in range, it calls
    ``per_source(columns)`` at the thread's insertion point, ``columns`` being (V at the
    column, the output's indices at row t(k) and that column) for each of its columns, all
    computed before the call (so that the caller's ops for the columns come in a row)."""
    from mlir import ir
    from mlir.dialects import scf

    con = sc.con
    op = con.op
    index = ir.IndexType.get()
    value_group = "n" if con.indicator == 0 else "m"
    # flattened: the value dims vary fastest (the output's rows are contiguous there)
    order = con.groups[value_group][::-1] + con.groups["k"][::-1] + con.groups["batch"][::-1]
    sizes = list(con.sizes)
    sizes[order[0]] //= width               # a thread's columns: order[0] counts groups
    total = math.prod(sizes[d] for d in order)
    body, lin = guarded_launch(op, total, _THREADS)
    with ir.InsertionPoint.at_block_terminator(body), op.location:
        dims = [None] * len(con.sizes)
        delinearize(lin, order, sizes, dims)
        if width > 1:
            dims[order[0]] = ir.Operation.create(
                "arith.muli", [index], [dims[order[0]], index_constant(width)]).result
        for d in sc.row_dims:
            dims[d] = index_constant(0)
        t64, ok = in_range(_target(sc, dims), math.prod(con.sizes[d] for d in sc.row_dims))
        hit = scf.IfOp(ok)
        with ir.InsertionPoint(hit.then_block):
            row = ir.Operation.create("arith.index_cast", [index], [t64]).result
            delinearize(row, sc.row_dims[::-1], con.sizes, dims)   # the last varies fastest
            zero_index = index_constant(0)
            columns = []
            for j in range(width):
                at = list(dims)
                if j:
                    at[order[0]] = ir.Operation.create(
                        "arith.addi", [index], [dims[order[0]], index_constant(j)]).result
                where = [at[d] if kind == "d" else zero_index for kind, d in con.maps[-1]]
                columns.append((_value(sc, at), where))
            per_source(columns)
            scf.YieldOp([])


def in_range(target, size: int):
    """(``target`` as i64, the i1 ``0 <= target < size``) for an integer or index value: a
    one-hot target t(k) that selects one of ``size`` rows, or none when out of range."""
    from mlir import ir

    i1 = ir.IntegerType.get_signless(1)
    i64 = ir.IntegerType.get_signless(64)
    t64 = target if isinstance(target.type, ir.IntegerType) else \
        ir.Operation.create("arith.index_cast", [i64], [target]).result
    if ir.IntegerType(t64.type).width != 64:
        t64 = ir.Operation.create("arith.extsi", [i64], [t64]).result
    zero = ir.Operation.create("arith.constant", [i64],
                               attributes={"value": ir.IntegerAttr.get(i64, 0)}).result
    end = ir.Operation.create("arith.constant", [i64],
                              attributes={"value": ir.IntegerAttr.get(i64, size)}).result
    ok = ir.Operation.create("arith.andi", [i1], [compare("sge", t64, zero),
                                                  compare("slt", t64, end)]).result
    return t64, ok


def lanes(sc: Scatter) -> int:
    """Columns a thread adds: 4 when the fastest value dim is the f32 output's contiguous
    last dimension, a multiple of 4 long, and every 4-column group starts 16 bytes aligned
    (the other strides and the offset multiples of 4) — what latch-vector-atomics needs to
    make the four adds one ``red.global.add.v4.f32``; else 1."""
    from latch.passes.vector_atomics import LANES, aligned_rows

    con = sc.con
    dims = con.groups["n" if con.indicator == 0 else "m"]
    if dims and con.maps[-1][-1] == ("d", dims[-1]) and aligned_rows(con.c.type):
        return LANES
    return 1


def _target(sc: Scatter, dims: list):
    """t(k) at the contraction loop indices ``dims`` (the row dims unused)."""
    from mlir import ir

    space = sc.space
    n_space = len(ir.ArrayAttr(space.attributes["iterator_types"]))
    sdims = [None] * n_space
    for d, s in sc.to_space.items():
        sdims[s] = dims[d]
    for s in range(n_space):
        if sdims[s] is None:
            sdims[s] = index_constant(0)
    seg = list(ir.DenseI32ArrayAttr(space.attributes["operandSegmentSizes"]))
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(space.attributes["indexing_maps"])]
    block = space.regions[0].blocks[0]
    mapping: dict = {}
    load_inputs(block, list(space.operands)[:seg[0]], maps, sdims, mapping,
                only=sc.target.args)
    clone_body_ops(sc.target.ops, mapping, sdims)
    return mapping.get(sc.target.value, sc.target.value)


def _value(sc: Scatter, dims: list):
    """V at the loop indices ``dims``: the value factor's body ops, cloned."""
    from latch.passes.form_contraction_kernels import load_factor_inputs

    con = sc.con
    side = con.sides[sc.value_side]
    mapping: dict = {}
    load_factor_inputs(con, side, con.inputs, dims, mapping)
    clone_body_ops(side.ops, mapping, dims)
    return mapping.get(side.value, side.value)


def erase_dead_mask_writer(sc: Scatter) -> None:
    """After the scatter replaced its reader, erase the generic that wrote the mask buffer
    if nothing else reads that buffer (its [sources x rows] mask is the quadratic part)."""
    from mlir import ir

    if sc.in_body:
        return
    writer = sc.space
    seg = list(ir.DenseI32ArrayAttr(writer.attributes["operandSegmentSizes"]))
    if all(u == writer for u in users(root(list(writer.operands)[seg[0]]))):
        writer.erase()
