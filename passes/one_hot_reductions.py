"""Sums of one-hot terms collapse to their one term (part of ``latch-wrap-host-compute``).

A cross-entropy's gradient reaches the loss's gather as a reduction over the vocabulary
whose every term carries the indicator ``[t(o) == k]`` of the target: ``out[o] +=
sum_k [t(o) == k] * c(o)`` — at TinyMoE B32, 32,768 tokens x 32,768 comparisons in one
kernel (362 µs), quadratic in the batch times the vocabulary.  Only the term at
``k = t(o)`` is not zero, so this module computes that term alone: one thread per output
evaluates ``t(o)``, and if ``0 <= t(o) < K`` evaluates the body at ``k = t(o)`` (inputs
read there) and stores it; otherwise the output keeps its value.

Recognized: a ``linalg.generic`` on memrefs with one reduction loop ``k`` of static size
``K`` (the output not indexed by it), yielding ``addf(acc, e)`` (``acc`` the output element,
used only there), with an ``arith.cmpi eq`` in the body between ``k``'s coordinate (its
``linalg.index`` or an element of an ``arange`` buffer, as passes/one_hot_scatter.py reads
them) and a value that does not depend on ``k``, such that ``e`` is zero whenever that
comparison is false — checked on the body: through ``uitofp``/``extui``/``extf``/``truncf``/
``negf`` of it, ``select`` of it with a zero, ``mulf`` or ``andi`` with it.  As with the
scatter kernels, a term whose indicator is 0 adds nothing even where its other factor is
not finite (the dense sum would have added ``0 * inf = NaN``).
"""
from __future__ import annotations

import math

from latch.passes.base import operation as _op
from latch.passes.generic_body import (accumulation, clone_body_ops, delinearize,
                                       guarded_launch, index_constant, indices, load_inputs,
                                       loop_ranges)
from latch.passes.one_hot_scatter import _is_coordinate, in_range

_THREADS = 256
_THROUGH = ("arith.uitofp", "arith.sitofp", "arith.extui", "arith.extf", "arith.truncf",
            "arith.negf")


def collapse_one_hot_reductions(body) -> int:
    """Rewrite each matching reduction in ``body`` (a function body); returns how many."""
    n = 0
    for op in list(body.operations):
        op = _op(op)
        if op.name != "linalg.generic":
            continue
        found = _match(op)
        if found is not None:
            _emit(op, *found)
            op.erase()
            n += 1
    return n


def _match(op):
    """(reduction loop, its size, the target Operand) when ``op`` is such a reduction."""
    from mlir import ir

    from latch.passes.form_contraction_kernels import map_dims, side_of

    if op.results or not all(isinstance(v.type, ir.MemRefType) for v in op.operands):
        return None
    kinds = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    red = [i for i, k in enumerate(kinds) if "reduction" in k]
    if len(red) != 1:
        return None
    r = red[0]
    maps, ranges = loop_ranges(op)
    if any(x is None for x in ranges) or \
            any(isinstance(e, ir.AffineDimExpr) and ir.AffineDimExpr(e).position == r
                for e in maps[-1].results):
        return None
    acc = accumulation(op)
    if acc is None or acc[2].name != "arith.addf":
        return None
    block, _, _, term = acc
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    if seg[1] != 1:
        return None
    for o in (_op(x) for x in block.operations):
        if o.name != "arith.cmpi" or ir.IntegerAttr(o.attributes["predicate"]).value != 0:
            continue
        for a, b in ((o.operands[0], o.operands[1]), (o.operands[1], o.operands[0])):
            if not _is_coordinate(a, [r], op, [ranges[r]]):
                continue
            target = side_of(b, block, map_dims(op), seg[0])
            if target is None or r in target.dims or not _vanishes(term, o.results[0]):
                continue
            return r, ranges[r], target
    return None


def _vanishes(v, cmp) -> bool:
    """Whether body value ``v`` is zero (or false) whenever the i1 ``cmp`` is false."""
    from mlir import ir

    if v == cmp:
        return True
    if hasattr(v.owner, "arguments"):
        return False
    o = _op(v.owner)
    if o.name == "arith.constant":
        attr = o.attributes["value"]
        if isinstance(attr, ir.FloatAttr):
            return ir.FloatAttr(attr).value == 0.0
        return isinstance(attr, ir.IntegerAttr) and ir.IntegerAttr(attr).value == 0
    if o.name in _THROUGH:
        return _vanishes(o.operands[0], cmp)
    if o.name in ("arith.mulf", "arith.andi"):
        return _vanishes(o.operands[0], cmp) or _vanishes(o.operands[1], cmp)
    if o.name == "arith.select":
        c, x, y = o.operands
        if c == cmp:
            return _vanishes(y, cmp)
        return _vanishes(x, cmp) and _vanishes(y, cmp)
    return False


def _emit(op, r: int, size: int, target) -> None:
    """One thread per output: the body at ``k = t(o)`` when that is in range."""
    from mlir import ir
    from mlir.dialects import scf

    index = ir.IndexType.get()
    maps, ranges = loop_ranges(op)
    par = [d for d in range(len(ranges)) if d != r]
    n_out = math.prod(ranges[d] for d in par)
    block = op.regions[0].blocks[0]
    operands = list(op.operands)
    ins, out = operands[:-1], operands[-1]
    body_ops = [_op(x) for x in block.operations][:-1]
    body, lin = guarded_launch(op, n_out, _THREADS)
    with ir.InsertionPoint.at_block_terminator(body), op.location:
        dims = [None] * len(ranges)
        delinearize(lin, par[::-1], ranges, dims)        # the last loop varies fastest
        dims[r] = index_constant(0)
        mapping: dict = {}
        load_inputs(block, ins, maps, dims, mapping, only=target.args)
        clone_body_ops(target.ops, mapping, dims)
        t, ok = in_range(mapping.get(target.value, target.value), size)
        hit = scf.IfOp(ok)
        with ir.InsertionPoint(hit.then_block):
            dims[r] = ir.Operation.create("arith.index_cast", [index], [t]).result
            mapping = {}
            load_inputs(block, ins, maps, dims, mapping)
            where = indices(maps[-1], dims)
            elt = ir.MemRefType(out.type).element_type
            mapping[block.arguments[len(ins)]] = ir.Operation.create(
                "memref.load", [elt], [out] + where).result
            clone_body_ops(body_ops, mapping, dims)
            yielded = _op(list(block.operations)[-1]).operands[0]
            ir.Operation.create("memref.store", [], [mapping[yielded], out] + where)
            scf.YieldOp([])
