"""``latch-lower-attention``: tensor-form ``latch.attention`` / ``latch.attention_grad`` ->
their buffer form (stage 'buffers', before one-shot bufferization).

Each op's operands are read through ``bufferization.to_buffer`` (read-only), each result
gets a fresh buffer (``memref.alloc``, 256-byte aligned like every planned buffer) that the
buffer-form op writes, and the results are read back with ``bufferization.to_tensor
restrict``::

    %o, %lse = "latch.attention"(%q, %k, %v) {causal = true, scale = 0.125 : f64}

becomes::

    %qb = bufferization.to_buffer %q read_only ...
    %ob = memref.alloc() ; %lb = memref.alloc()
    "latch.attention"(%qb, %kb, %vb, %ob, %lb) {causal = true, scale = 0.125 : f64}
    %o = bufferization.to_tensor %ob restrict ... ; %lse = bufferization.to_tensor %lb ...

so that one-shot bufferization and the memory plan treat the outputs as ordinary buffers
(the op is opaque to both: it uses every buffer it is given, which keeps them alive, and
it counts as a writer of each).  ``latch-form-attention-kernels`` then launches the kernels.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-lower-attention)'``
"""
from __future__ import annotations

from latch.passes.base import ModulePass, function_definitions, operation as _op

OPS = ("latch.attention", "latch.attention_grad")


def _ops(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = _op(inner)
                if inner.name in OPS and len(inner.results):
                    yield inner
                yield from _ops(inner)


class LowerAttention(ModulePass):
    name = "latch-lower-attention"
    summary = ("tensor-form latch.attention / latch.attention_grad -> buffer form (run before "
               "one-shot bufferization)")

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            for op in list(_ops(func_op)):
                _lower(op)


def _lower(op) -> None:
    from mlir import ir

    i64 = ir.IntegerType.get_signless(64)
    with ir.InsertionPoint(op), op.location:
        ins = []
        for v in op.operands:
            t = ir.RankedTensorType(v.type)
            ins.append(ir.Operation.create(
                "bufferization.to_buffer",
                results=[ir.MemRefType.get(list(t.shape), t.element_type)], operands=[v],
                attributes={"read_only": ir.UnitAttr.get()}).result)
        outs = []
        for r in op.results:
            t = ir.RankedTensorType(r.type)
            outs.append(ir.Operation.create(
                "memref.alloc", results=[ir.MemRefType.get(list(t.shape), t.element_type)],
                operands=[], attributes={
                    "alignment": ir.IntegerAttr.get(i64, 256),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])}).result)
        ir.Operation.create(op.name, results=[], operands=ins + outs,
                            attributes={n: op.attributes[n] for n in ("causal", "scale")})
        for r, buf in zip(op.results, outs):
            back = ir.Operation.create(
                "bufferization.to_tensor", results=[r.type], operands=[buf],
                attributes={"restrict": ir.UnitAttr.get(), "writable": ir.UnitAttr.get()}
            ).result
            r.replace_all_uses_with(back)
    op.erase()
