"""``latch-rematerialize-masks``: one copy of a comparison mask per reader (stage 'buffers',
on tensors, before ``linalg-fuse-elementwise-ops``).

The frontend turns ``index_add`` / ``index_put`` / the backward of indexing into dense
one-hot products (latch.frontend.decompositions): a mask ``[t(k) == j]`` computed by an
all-parallel ``linalg.generic`` from a few small vectors, then multiplied into a
contraction.  Autograd and CSE make the forward's mask and the backward's the same value
(the MoE dispatch's ``index_add`` and the combine's gather both compare ``slot`` against
the buffer's rows), so the mask has several readers.  Elementwise fusion only fuses a
producer with one reader; with two, the ``[sources x rows]`` mask is materialized and
lives from the forward to the backward (TinyMoE-196M at B32: eight i1 masks of
65536 x 81921, 43 GB), and the contractions that read it from memory are dense.

This pass clones such a mask producer once for each further reader, so that each copy has
one reader and fuses into it: the contraction then computes its mask in its body, where
``latch-form-contraction-kernels`` recognizes the one-hot product and emits a scatter
kernel (passes/one_hot_scatter.py), and the mask buffer disappears.

A mask producer that reads a vector through a ``tensor.expand_shape`` adding unit dims
(``[N] -> [N, 1]``, read at a constant 0) reads the vector itself instead: its indexing maps
become projected permutations, so that elementwise fusion can also move a reshape of the
mask's reader (e.g. ``[tokens] -> [batch, seq]`` rows) through it.

A producer qualifies when it is an all-parallel ``linalg.generic`` with one i1 result, its
body is pure scalar code (no loads, no nested regions), and its result holds at least
``min-ratio`` times as many elements as all of its inputs together (recomputing it is
cheaper than reading it back).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-rematerialize-masks)'``
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import ModulePass, function_definitions, operation as _op


def _numel(t) -> int:
    from mlir import ir

    shaped = ir.ShapedType(t)
    if not shaped.has_static_shape:
        return -1
    return math.prod(shaped.shape)


def _is_cheap_mask(op, min_ratio: int) -> bool:
    from mlir import ir

    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    if not isinstance(op.results[0].type, ir.RankedTensorType) or not _yields_mask(op):
        return False
    if any("parallel" not in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])):
        return False
    for inner in op.regions[0].blocks[0].operations:
        inner = _op(inner)
        if inner.regions or not inner.name.startswith(("arith.", "math.", "linalg.")):
            return False
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    sizes = [_numel(v.type) if isinstance(v.type, ir.ShapedType) else 1
             for v in list(op.operands)[:seg[0]]]
    out = _numel(op.results[0].type)
    return out > 0 and all(s >= 0 for s in sizes) and sum(sizes) * min_ratio <= out


def _yields_mask(op) -> bool:
    """Whether generic ``op`` yields a comparison (i1) or a comparison converted to 0/1
    (``uitofp``/``sitofp`` of an i1, possibly widened or narrowed after)."""
    v = _op(list(op.regions[0].blocks[0].operations)[-1]).operands[0]
    while not hasattr(v.owner, "arguments") and _op(v.owner).name in ("arith.extf",
                                                                       "arith.truncf"):
        v = _op(v.owner).operands[0]
    if str(v.type) == "i1":
        return True
    if hasattr(v.owner, "arguments"):
        return False
    o = _op(v.owner)
    return o.name in ("arith.uitofp", "arith.sitofp") and str(o.operands[0].type) == "i1"


@dataclasses.dataclass(frozen=True)
class RematerializeMasks(ModulePass):
    name = "latch-rematerialize-masks"
    summary = ("clone a cheap comparison mask (an all-parallel i1 linalg.generic on small "
               "inputs) once per reader, so each copy fuses into its reader")
    min_ratio: int = 8

    def apply(self, module) -> None:
        from mlir import ir

        for func_op in function_definitions(module):
            for op in [_op(o) for o in func_op.regions[0].blocks[0].operations]:
                if not _is_cheap_mask(op, self.min_ratio):
                    continue
                read_through_unit_expansions(op)
                uses = [(u.owner, u.operand_number) for u in op.results[0].uses]
                for owner, number in uses[1:]:
                    owner = _op(owner)
                    copy = op.clone(ip=ir.InsertionPoint(owner))
                    owner.operands[number] = copy.results[0]


def read_through_unit_expansions(op) -> None:
    """Inputs of generic ``op`` that are ``tensor.expand_shape``s adding only unit dims,
    read there at constant 0: read the source, drop those results of the indexing map."""
    from mlir import ir

    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    changed = False
    for i in range(seg[0]):
        v = op.operands[i]
        owner = v.owner
        if hasattr(owner, "arguments") or _op(owner).name != "tensor.expand_shape":
            continue
        expand = _op(owner)
        shape = ir.RankedTensorType(v.type).shape
        src_shape = ir.RankedTensorType(expand.operands[0].type).shape
        unit = [p for p, n in enumerate(shape) if n == 1]
        kept = [p for p in range(len(shape)) if p not in unit]
        if [shape[p] for p in kept] != list(src_shape) or not unit:
            continue
        results = list(maps[i].results)
        if any(not (isinstance(results[p], ir.AffineConstantExpr) and
                    ir.AffineConstantExpr(results[p]).value == 0) for p in unit):
            continue
        maps[i] = ir.AffineMap.get(maps[i].n_dims, maps[i].n_symbols,
                                   [results[p] for p in kept])
        op.operands[i] = expand.operands[0]
        changed = True
    if changed:
        op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
