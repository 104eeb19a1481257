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

It also takes the ops in their *call form*: MLIR's inliner refuses to inline a function
that holds an unregistered op (Latch ops are held unregistered, see latch/dialect), so
``latch-attention-to-calls`` (in ``latch-lower-rules``, before ``inline``) replaces each op
by a ``func.call`` of a private declaration ``@__latch_attention_N`` that carries the op's
name and attributes (``latch.op``, ``causal``, ``scale``); calls inline like any other.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-lower-attention)'``
"""
from __future__ import annotations

from latch.passes.base import ModulePass, fresh_symbol, operation as _op, symbol_names
from latch.passes.lower_optimizers import collect

OPS = ("latch.attention", "latch.attention_grad")


DECLARATION = "__latch_attention_"     # the call form's callees: @__latch_attention_N
_ATTRS = ("causal", "scale")


def _tensor_form(module) -> list:
    """The attention ops in tensor form (with results), anywhere in ``module``."""
    return [op for op in collect(module, OPS) if len(op.results)]


def _declarations(module) -> dict:
    """name -> the call form's private declarations."""
    from mlir import ir

    out = {}
    for o in module.regions[0].blocks[0].operations:
        o = _op(o)
        if o.name == "func.func" and "latch.op" in o.attributes:
            out[ir.StringAttr(o.attributes["sym_name"]).value] = o
    return out


class AttentionToCalls(ModulePass):
    name = "latch-attention-to-calls"
    summary = ("tensor-form latch.attention / latch.attention_grad -> calls of private "
               "declarations carrying the op (so that the functions holding them inline)")

    def apply(self, module) -> None:
        from mlir import ir

        top = module.regions[0].blocks[0]
        taken = symbol_names(module)
        for op in _tensor_form(module):
            name = fresh_symbol(DECLARATION, taken)
            ftype = ir.FunctionType.get([v.type for v in op.operands],
                                        [r.type for r in op.results])
            attrs = {"sym_name": ir.StringAttr.get(name),
                     "function_type": ir.TypeAttr.get(ftype),
                     "sym_visibility": ir.StringAttr.get("private"),
                     "latch.op": ir.StringAttr.get(op.name)}
            attrs.update({n: op.attributes[n] for n in _ATTRS})
            with ir.InsertionPoint(top), op.location:
                ir.Operation.create("func.func", attributes=attrs, regions=1)
            with ir.InsertionPoint(op), op.location:
                call = ir.Operation.create(
                    "func.call", results=[r.type for r in op.results],
                    operands=list(op.operands),
                    attributes={"callee": ir.FlatSymbolRefAttr.get(name)})
            for r, new in zip(op.results, call.results):
                r.replace_all_uses_with(new)
            op.erase()


class LowerAttention(ModulePass):
    name = "latch-lower-attention"
    summary = ("tensor-form latch.attention / latch.attention_grad (ops or their call form) -> "
               "buffer form (run before one-shot bufferization)")

    def apply(self, module) -> None:
        from mlir import ir

        decls = _declarations(module)
        for op in _tensor_form(module):
            _lower(op, op.name, {n: op.attributes[n] for n in _ATTRS})
        for call in collect(module, ("func.call",)):
            decl = decls.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
            if decl is not None:
                _lower(call, ir.StringAttr(decl.attributes["latch.op"]).value,
                       {n: decl.attributes[n] for n in _ATTRS})
        for decl in decls.values():          # every call of them is gone
            decl.erase()


def _lower(op, name: str, attrs: dict) -> None:
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
        ir.Operation.create(name, results=[], operands=ins + outs, attributes=attrs)
        for r, buf in zip(op.results, outs):
            back = ir.Operation.create(
                "bufferization.to_tensor", results=[r.type], operands=[buf],
                attributes={"restrict": ir.UnitAttr.get(), "writable": ir.UnitAttr.get()}
            ).result
            r.replace_all_uses_with(back)
    op.erase()
