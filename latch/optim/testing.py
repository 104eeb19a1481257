"""Helpers to build, lower and run learning-rule programs in tests (no model needed).

``lower_rules(text)`` parses a Latch program and runs latch-lower-state, -schedules, -control
and -optimizers, verifying after each; ``Runner`` JIT-compiles the resulting ``func.func`` on
the CPU with the upstream pipeline (a stand-in until ``latch.targets.cpu`` is used) and calls
it on numpy arrays.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from latch.errors import LatchError

LOWERING = ("latch-lower-state", "latch-lower-schedules", "latch-lower-control",
            "latch-lower-optimizers")


def make_context():
    """An ``mlir`` context with the Latch dialect loaded, or unregistered dialects allowed."""
    from mlir import ir
    ctx = ir.Context()
    try:
        from latch import dialect
        dialect.load(ctx)
    except (ImportError, AttributeError):
        ctx.allow_unregistered_dialects = True
    return ctx


def lower_rules(text: str, ctx=None):
    """Parse ``text`` and apply the four rule-lowering passes; returns the verified module."""
    from mlir import ir
    from latch.passes import get_pass
    ctx = ctx or make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        for name in LOWERING:
            get_pass(name)().apply(module.operation)
            if not module.operation.verify():
                raise LatchError(f"module does not verify after {name}")
    return module


_NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32, "i1": np.bool_}

CPU_PIPELINE = ("builtin.module(one-shot-bufferize{bufferize-function-boundaries "
                "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}, canonicalize, "
                "convert-bufferization-to-memref, "
                "func.func(convert-linalg-to-loops), expand-strided-metadata, lower-affine, "
                "convert-scf-to-cf, convert-math-to-llvm, convert-math-to-libm, "
                "finalize-memref-to-llvm, convert-arith-to-llvm, convert-cf-to-llvm, "
                "convert-func-to-llvm, reconcile-unrealized-casts)")


def _runtime_libs():
    import mlir.ir
    root = os.path.dirname(os.path.dirname(mlir.ir.__file__))
    for sub in ("lib", "_mlir_libs"):
        d = os.path.join(root, sub)
        if os.path.isdir(d):
            for f in os.listdir(d):
                if f == "libmlir_c_runner_utils.so":
                    return [os.path.join(d, f)]
    return []


class Runner:
    """JIT a lowered update function: ``Runner(module, "update")(*arrays) -> list of arrays``."""

    def __init__(self, module, func_name: str = "update"):
        from mlir import ir, passmanager
        from mlir.execution_engine import ExecutionEngine
        ctx = module.context
        with ctx, ir.Location.unknown():
            func = None
            for op in module.body.operations:
                if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == func_name:
                    func = op
            if func is None:
                raise LatchError(f"no func.func @{func_name}")
            ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
            self.in_types = [ir.RankedTensorType(t) for t in ftype.inputs]
            self.out_types = [ir.RankedTensorType(t) for t in ftype.results]
            text = str(module) + "\n"
            # A wrapper taking memrefs for every input and result (no multi-result C ABI).
            args, lines = [], []
            for i, t in enumerate(self.in_types):
                args.append(f"%i{i}: {self._memref(t)}")
                lines.append(f"  %t{i} = bufferization.to_tensor %i{i} restrict : {self._memref(t)} to {t}")
            for i, t in enumerate(self.out_types):
                args.append(f"%o{i}: {self._memref(t)}")
            ins = ", ".join(f"%t{i}" for i in range(len(self.in_types)))
            lines.append(f"  %r:{len(self.out_types)} = func.call @{func_name}({ins}) : "
                         f"({', '.join(map(str, self.in_types))}) -> ({', '.join(map(str, self.out_types))})")
            for i, t in enumerate(self.out_types):
                lines.append(f"  bufferization.materialize_in_destination %r#{i} in restrict writable "
                             f"%o{i} : ({t}, {self._memref(t)}) -> ()")
            wrapper = (f"func.func @__latch_run({', '.join(args)}) attributes {{llvm.emit_c_interface}} {{\n"
                       + "\n".join(lines) + "\n  return\n}\n")
            body = text.rstrip()
            assert body.endswith("}")
            full = body[:-1] + wrapper + "}\n"
            m = ir.Module.parse(full)
            passmanager.PassManager.parse(CPU_PIPELINE).run(m.operation)
            self.engine = ExecutionEngine(m, opt_level=2, shared_libs=_runtime_libs())
            self._module = m

    @staticmethod
    def _memref(t) -> str:
        s = str(t)
        return "memref<" + s[len("tensor<"):]

    @staticmethod
    def _dtype(t):
        return _NP[str(t.element_type)]

    def __call__(self, *arrays):
        from mlir.runtime import get_ranked_memref_descriptor
        if len(arrays) != len(self.in_types):
            raise LatchError(f"expected {len(self.in_types)} arrays, got {len(arrays)}")
        ins = [np.ascontiguousarray(np.asarray(a, dtype=self._dtype(t)).reshape(t.shape))
               for a, t in zip(arrays, self.in_types)]
        outs = [np.zeros(t.shape, dtype=self._dtype(t)) for t in self.out_types]
        ptrs = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in ins + outs]
        self.engine.invoke("__latch_run", *ptrs)
        return outs
