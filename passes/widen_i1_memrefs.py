"""``latch-widen-i1-memrefs``: store boolean buffers as bytes (CPU target).

MLIR 22.1.8's ``finalize-memref-to-llvm`` asserts on ``memref.store`` of ``i1``
(``integralElementType.getWidth() >= 8``).  This pass retypes every ``memref<...xi1>`` to
``memref<...xi8>`` (numpy's bool layout) and inserts the ``arith.trunci``/``arith.extui``
around loads and stores.  It runs on loops-on-memrefs IR, between bufferization and the
LLVM conversion; no options.
"""
from __future__ import annotations

import dataclasses
import re

from latch.passes.base import ModulePass


@dataclasses.dataclass(frozen=True)
class WidenI1Memrefs(ModulePass):
    name = "latch-widen-i1-memrefs"
    summary = "store i1 buffers as i8 (works around an MLIR 22 memref-to-LLVM assertion)"

    def apply(self, module) -> None:
        widen_i1_memrefs(module)


def widen_i1_memrefs(module_op) -> None:
    """Rewrite every ``memref<…xi1>`` value to ``memref<…xi8>``: loads are followed by
    ``arith.trunci``, stored values are ``arith.extui``-ed, ``memref.global`` initial values
    and ``func.func`` signatures are updated.  Runs on loops-on-memrefs IR (after
    ``convert-linalg-to-loops`` and ``expand-strided-metadata``)."""
    import mlir.ir as ir
    from mlir.dialects import arith

    i1 = ir.IntegerType.get_signless(1)
    i8 = ir.IntegerType.get_signless(8)

    def widen(t):
        if isinstance(t, ir.MemRefType):
            mt = t
            if mt.element_type == i1:
                return ir.MemRefType.get(mt.shape, i8, mt.layout, mt.memory_space)
        return None

    loads, stores, funcs, globals_ = [], [], [], []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        name = op.name
        for r in op.results:
            w = widen(r.type)
            if w is not None:
                r.set_type(w)
        for reg in op.regions:
            for blk in reg.blocks:
                for a in blk.arguments:
                    w = widen(a.type)
                    if w is not None:
                        a.set_type(w)
        if name == "memref.load" and op.results[0].type == i1:
            loads.append(op)
        elif name == "memref.store" and op.operands[0].type == i1:
            stores.append(op)
        elif name == "func.func":
            funcs.append(op)
        elif name == "memref.global":
            globals_.append(op)
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    for op in loads:
        # memref.load now yields i8 (its memref is i8): retype and truncate
        res = op.results[0]
        res.set_type(i8)
        with ir.InsertionPoint.after(op), op.location:
            t = arith.TruncIOp(i1, res)
        res.replace_all_uses_except(t.result, t.operation)
    for op in stores:
        with ir.InsertionPoint(op), op.location:
            e = arith.ExtUIOp(i8, op.operands[0])
        op.operands[0] = e.result
    for op in globals_:
        t = ir.TypeAttr(op.attributes["type"]).value
        w = widen(t)
        if w is None:
            continue
        op.attributes["type"] = ir.TypeAttr.get(w)
        if "initial_value" in op.attributes:
            iv = str(op.attributes["initial_value"])
            if iv.startswith("dense<"):
                # dense<true> / dense<[[true, false], …]> : tensor<…xi1>  →  0/1 : …xi8
                body, _, ty = iv.rpartition(" : ")
                body = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", body))
                ty = re.sub(r"xi1>$", "xi8>", ty).replace("tensor<i1>", "tensor<i8>")
                op.attributes["initial_value"] = ir.Attribute.parse(f"{body} : {ty}")
    for op in funcs:
        ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        ins = [widen(t) or t for t in ft.inputs]
        outs = [widen(t) or t for t in ft.results]
        op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(ins, outs))
