"""``latch-unroll-short-reductions``: a reduction of a few terms per output, read by one
elementwise generic, becomes elementwise itself, so that elementwise fusion moves it into
its reader (stage 'buffers', on tensors, between two ``linalg-fuse-elementwise-ops``).

Elementwise fusion moves producers into readers only when the producer is all-parallel: a
reduction's result is always materialized.  When the reduction is short — the MoE's top-2
combine ``y[t, :] = sum_k o[slot[t, k], :] * w[t, k]`` (2 terms), the router's input
gradient ``dx = g[t, 0:8] @ W`` (8 terms) — and its one reader is elementwise (the residual
sum ``x + y``), the result costs a write and a read of the whole output (TinyMoE B32: a
zero fill, a [32768, 768] f32 sum, and a separate residual pass; 100 MB each, every layer)
for a few loads per element.  Unrolled, the reduction loop's ``K`` iterations are ``K``
copies of its body in one all-parallel generic, each reading the inputs at its own index
of the reduction (a constant in the indexing map), the accumulator chained from the
initial value through the copies: the same operations in the same order, so the same
bits.  A filled initial value is read as the fill's constant (the fill may go); the reader
then fuses the whole sum.

Applied to a ``linalg.generic`` on tensors with one result of static shape, whose
reduction loops have static trip counts multiplying to at most ``max-terms`` (default 8),
whose inputs are indexed by projected permutations, and whose result has exactly one use:
an input of an all-parallel ``linalg.generic`` indexed by a permutation.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-unroll-short-reductions,
func.func(linalg-fuse-elementwise-ops))'``
"""
from __future__ import annotations

import dataclasses
import itertools
import math

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.generic_body import clone_body_ops, index_constant, loop_ranges, segments
from latch.passes.recompute_elementwise import read_fill_instead_of_output


def _read_by_one_elementwise(value) -> bool:
    """Whether ``value`` has one use: an input of an all-parallel ``linalg.generic``
    indexed by a permutation of its loops."""
    from mlir import ir

    uses = list(value.uses)
    if len(uses) != 1:
        return False
    user, number = _op(uses[0].owner), uses[0].operand_number
    if user.name != "linalg.generic" or number >= segments(user)[0]:
        return False
    if any("parallel" not in str(t) for t in ir.ArrayAttr(user.attributes["iterator_types"])):
        return False
    m = ir.AffineMapAttr(list(ir.ArrayAttr(user.attributes["indexing_maps"]))[number]).value
    return m.is_permutation


def short_reduction(op, max_terms: int):
    """(reduction loops, parallel loops, trip counts) of generic ``op`` when it may be
    unrolled (see the module docstring), else None."""
    from mlir import ir

    if op.name != "linalg.generic" or len(op.results) != 1 or \
            not isinstance(op.results[0].type, ir.RankedTensorType) or \
            not ir.RankedTensorType(op.results[0].type).has_static_shape:
        return None
    its = [str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])]
    red = [d for d, t in enumerate(its) if "reduction" in t]
    n_in, n_out = segments(op)
    if not red or n_out != 1:
        return None
    maps, ranges = loop_ranges(op)
    if any(ranges[d] is None or ranges[d] < 1 for d in range(len(its))) or \
            math.prod(ranges[d] for d in red) > max_terms:
        return None
    if not all(m.is_projected_permutation for m in maps) or \
            any(r.regions for r in (_op(o) for o in op.regions[0].blocks[0].operations)):
        return None
    if not _read_by_one_elementwise(op.results[0]):
        return None
    return red, [d for d in range(len(its)) if d not in red], ranges


def unroll(op, red, par, ranges) -> None:
    """Replace generic ``op`` by an all-parallel generic over its loops ``par`` computing
    its body once for each point of its reduction loops ``red`` (last loop fastest, as the
    loops ran), chaining the accumulator."""
    from mlir import ir

    n_in, _ = segments(op)
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n_par = len(par)
    points = list(itertools.product(*[range(ranges[d]) for d in red]))

    def substituted(m, point):
        repl = []
        for d in range(len(ranges)):
            if d in red:
                repl.append(ir.AffineConstantExpr.get(point[red.index(d)]))
            else:
                repl.append(ir.AffineDimExpr.get(par.index(d)))
        return ir.AffineMap.get(n_par, 0, [e.compose(ir.AffineMap.get(n_par, 0, repl))
                                          for e in m.results])

    uses_red = [any(isinstance(e, ir.AffineDimExpr) and ir.AffineDimExpr(e).position in red
                    for e in m.results) for m in maps[:n_in]]
    operands, new_maps, slots = [], [], {}       # slots[(input, point)] -> new input number
    for i in range(n_in):
        for point in (points if uses_red[i] else [None]):
            slots[(i, point)] = len(operands)
            operands.append(op.operands[i])
            new_maps.append(substituted(maps[i], point or (0,) * len(red)))
    init = op.operands[n_in]
    new_maps.append(substituted(maps[n_in], (0,) * len(red)))
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create(
            "linalg.generic", [op.results[0].type], operands + [init],
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m)
                                                            for m in new_maps]),
                        "iterator_types": ir.ArrayAttr.get([parallel] * n_par),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(operands), 1])},
            regions=1)
    old_block = op.regions[0].blocks[0]
    arg_types = [a.type for a in old_block.arguments]
    types = [arg_types[i] for i in range(n_in)
             for _ in (points if uses_red[i] else [None])] + [arg_types[n_in]]
    block = new.regions[0].blocks.append(*types)
    body = [_op(o) for o in old_block.operations]
    with ir.InsertionPoint(block), op.location:
        dims = [None] * len(ranges)
        i64 = ir.IntegerType.get_signless(64)
        for k, d in enumerate(par):
            if any(o.name == "linalg.index" for o in body):
                dims[d] = ir.Operation.create(
                    "linalg.index", [ir.IndexType.get()],
                    attributes={"dim": ir.IntegerAttr.get(i64, k)}).result
        acc = block.arguments[len(operands)]
        for point in points:
            mapping = {old_block.arguments[n_in]: acc}
            for i in range(n_in):
                mapping[old_block.arguments[i]] = \
                    block.arguments[slots[(i, point if uses_red[i] else None)]]
            for d, p in zip(red, point):
                dims[d] = index_constant(p)
            clone_body_ops(body[:-1], mapping, dims)
            yielded = body[-1].operands[0]
            acc = mapping.get(yielded, yielded)
        ir.Operation.create("linalg.yield", [], [acc])
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()
    read_fill_instead_of_output(new)


@dataclasses.dataclass(frozen=True)
class UnrollShortReductions(ModulePass):
    name = "latch-unroll-short-reductions"
    summary = ("a reduction of a few terms whose one reader is elementwise becomes "
               "elementwise (unrolled), so elementwise fusion moves it into the reader")
    max_terms: int = 8

    def apply(self, module) -> None:
        for f in function_definitions(module):
            for op in [_op(o) for o in f.regions[0].blocks[0].operations]:
                found = short_reduction(op, self.max_terms)
                if found is not None:
                    unroll(op, *found)
