"""``latch-materialize-product-factors``: a product whose bf16 factor elementwise fusion
computed inside it gets that factor back as a tensor of its own (stage 'buffers', on
tensors, after the last ``linalg-fuse-elementwise-ops``).

Elementwise fusion moves a producer with one reader into the reader.  When the reader is a
product (a ``linalg.generic`` with reduction loops) and the producer the bf16 value of one
of its factors — the looped TinyMoE's SwiGLU ``bf16(silu(a)) * bf16(b)`` feeding the
experts' second product, with ``a`` and ``b`` the first products' f32 results — the
product computes the factor again for every tile of the other operand that reads it, from
the wider inputs, and latch-form-contraction-kernels can no longer stage the factor by
16-byte copies: no wgmma, a load per element (4.7 ms a launch at B32 where the materialized
form takes 0.3 ms of product and 0.1 ms of elementwise pass).

The rewrite: when a factor of the product's ``mulf`` is ``extf(x)`` with ``x`` a bf16 value
computed in the body (float ``arith``/``math`` ops — not a one-hot mask, which
latch-form-contraction-kernels turns into a scatter — on block arguments of inputs and on
values from outside), the inputs it reads are indexed by projected permutations, none of
them is the output, and one of them is indexed by every loop the others use: a new
all-parallel generic computes ``x`` over that input's loops (in its order, so it is read in
place), into a bf16 tensor no larger than it; the product reads that tensor (``extf`` of its element) instead, and the inputs
it no longer reads are dropped.  The values are the same (the body rounded ``x`` to bf16
already); the product reads 2 bytes an element of the factor where it read the inputs.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-materialize-product-factors)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.generic_body import accumulation, clone_body_ops, loop_ranges, segments

_PURE = ("arith.", "math.")
_FLOATS = ("f16", "bf16", "f32", "f64")


@dataclasses.dataclass(frozen=True)
class MaterializeProductFactors(ModulePass):
    name = "latch-materialize-product-factors"
    summary = ("a product computing a bf16 factor from wider inputs in its body reads it "
               "from a tensor an elementwise generic writes (so it can be staged and "
               "multiplied by tensor cores)")

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            generics = []

            def visit(op, out=generics):
                from mlir import ir
                if op.name == "linalg.generic":
                    out.append(_op(op))
                return ir.WalkResult.ADVANCE

            func_op.walk(visit)
            for g in generics:
                _materialize(g)


def _factor(op):
    """(the bf16 value, the ops computing it in body order, the input numbers it reads) of
    the product ``op``'s first factor that qualifies, or None."""
    from mlir import ir

    block = op.regions[0].blocks[0]
    n_in, n_out = segments(op)
    body = [_op(o) for o in block.operations]
    mul = _product_term(op, n_out)
    if mul is not None:
        for side in mul.operands:
            if hasattr(side.owner, "arguments"):
                continue
            ext = _op(side.owner)
            if ext.name != "arith.extf" or str(ext.operands[0].type) != "bf16":
                continue
            x = ext.operands[0]
            if hasattr(x.owner, "arguments"):
                continue                       # already read from a bf16 input
            chain, inputs, ok = set(), set(), True
            stack = [x]
            while stack and ok:
                v = stack.pop()
                if hasattr(v.owner, "arguments"):
                    if v.owner == block:
                        k = ir.BlockArgument(v).arg_number
                        ok = k < n_in
                        inputs.add(k)
                    continue
                o = _op(v.owner)
                if o.operation.block != block:
                    continue                   # defined outside the generic
                if not o.name.startswith(_PURE) or len(o.regions) or \
                        not all(str(r.type) in _FLOATS for r in o.results):
                    ok = False                 # float arithmetic only (not a one-hot mask)
                    break
                if any(o == c for c in chain):
                    continue
                chain.add(o)
                stack.extend(o.operands)
            if ok and inputs and len(chain) > 0:
                ordered = [o for o in body if any(o == c for c in chain)]
                inner = [r for o in ordered for r in o.results if r != x]
                if any(v == r for o in body if not any(o == c for c in chain)
                       for v in o.operands for r in inner):
                    continue                   # the rest of the body reads a part of it
                return x, ordered, sorted(inputs)
    return None


def _product_term(op, n_out):
    """The ``mulf`` of ``yield(addf(out, mulf(a, b)))``, the product's body; or None."""
    found = accumulation(op) if n_out == 1 else None
    if found is None or found[2].name != "arith.addf" or hasattr(found[3].owner, "arguments"):
        return None
    mul = _op(found[3].owner)
    return mul if mul.name == "arith.mulf" else None


def _materialize(op) -> bool:
    from mlir import ir
    from mlir.dialects import linalg

    if len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType):
        return False
    iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if all("parallel" in t for t in iters):
        return False
    found = _factor(op)
    if found is None:
        return False
    x, chain, inputs = found
    n_in, n_out = segments(op)
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if any(not maps[k].is_projected_permutation for k in inputs):
        return False
    dims_of = {k: [ir.AffineDimExpr(e).position for e in maps[k].results] for k in inputs}
    widest = max(inputs, key=lambda k: len(dims_of[k]))
    if any(not set(dims_of[k]) <= set(dims_of[widest]) for k in inputs):
        return False               # the factor would be larger than any input it reads
    order = dims_of[widest]
    pos = {d: i for i, d in enumerate(order)}
    ranges = loop_ranges(op)[1]
    if any(ranges[d] is None for d in order):
        return False
    shape = [ranges[d] for d in order]
    bf16 = ir.BF16Type.get()
    factor_type = ir.RankedTensorType.get(shape, bf16)
    n = len(order)
    parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    block = op.regions[0].blocks[0]
    with ir.InsertionPoint(op), op.location:
        empty = ir.Operation.create("tensor.empty", [factor_type]).result
        in_maps = [ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(pos[d]) for d in dims_of[k]])
                   for k in inputs]
        factor = linalg.GenericOp(
            [factor_type], [op.operands[k] for k in inputs], [empty],
            ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in
                              in_maps + [ir.AffineMap.get_identity(n)]]),
            ir.ArrayAttr.get([parallel] * n))
        fblock = factor.regions[0].blocks.append(
            *[block.arguments[k].type for k in inputs], bf16)
        with ir.InsertionPoint(fblock):
            mapping = {block.arguments[k]: fblock.arguments[i] for i, k in enumerate(inputs)}
            clone_body_ops(chain, mapping, [])
            linalg.YieldOp([mapping[x]])
        # the product, reading the factor (first) and the inputs the rest still reads
        rest = [o for o in [_op(b) for b in block.operations] if not any(o == c for c in chain)]
        still = sorted({ir.BlockArgument(v).arg_number for o in rest for v in o.operands
                        if hasattr(v.owner, "arguments") and v.owner == block and
                        ir.BlockArgument(v).arg_number < n_in})
        new_maps = [ir.AffineMap.get(len(iters), 0, [ir.AffineDimExpr.get(d) for d in order])]
        new_maps += [maps[k] for k in still] + maps[n_in:]
        product = linalg.GenericOp(
            [op.results[0].type], [factor.results[0]] + [op.operands[k] for k in still],
            list(op.operands[n_in:]),
            ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps]),
            op.attributes["iterator_types"])
        pblock = product.regions[0].blocks.append(
            bf16, *[block.arguments[k].type for k in still],
            *[a.type for a in list(block.arguments)[n_in:]])
        with ir.InsertionPoint(pblock):
            mapping = {x: pblock.arguments[0]}
            for i, k in enumerate(still):
                mapping[block.arguments[k]] = pblock.arguments[1 + i]
            for i, a in enumerate(list(block.arguments)[n_in:]):
                mapping[a] = pblock.arguments[1 + len(still) + i]
            dims = None
            if any(o.name == "linalg.index" for o in rest):
                dims = [linalg.IndexOp(ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                          d)).result
                        for d in range(len(iters))]
            clone_body_ops(rest, mapping, dims or [])
    op.results[0].replace_all_uses_with(product.results[0])
    op.erase()
    return True
