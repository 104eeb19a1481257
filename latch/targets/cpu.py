"""The CPU target: linalg-on-tensors → LLVM dialect → ExecutionEngine JIT on the host.

Calling convention of the compiled function.  Before lowering, every argument is marked
``bufferization.writable = false`` (inputs are never written) and the function gets
``llvm.emit_c_interface``.  :data:`CPU_PIPELINE` bufferizes across function boundaries
(identity layouts) and turns every memref result into a trailing **out-parameter**
(``buffer-results-to-out-params{hoist-static-allocs}``), so the caller owns the result
buffers: :class:`CpuExecutable` allocates one numpy array per result and passes
``(*inputs, *outputs)``; the function itself returns nothing.  All buffers allocated
inside the function are freed by the ownership-based deallocation pipeline, so repeated
calls do not leak.  Rank-0 tensors, i1 (bool) and integer tensors are passed as memrefs
like any other.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
from typing import Callable, Sequence

import numpy as np

from latch.errors import LatchError, PipelineError

CPU_BUFFERIZE_PIPELINE = (
    "builtin.module("
    "func.func(linalg-fuse-elementwise-ops),"
    "eliminate-empty-tensors,empty-tensor-to-alloc-tensor,"
    "one-shot-bufferize{bufferize-function-boundaries=true "
    "function-boundary-type-conversion=identity-layout-map},"
    "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true},"
    "canonicalize,"
    "buffer-deallocation-pipeline,"
    "convert-bufferization-to-memref,"
    "func.func(convert-linalg-to-loops),"
    "expand-strided-metadata,lower-affine,convert-scf-to-cf)")
"""First half: linalg-on-tensors → loops on memrefs (out-params, deallocation)."""

CPU_LLVM_PIPELINE = (
    "builtin.module("
    "convert-math-to-llvm,convert-math-to-libm,"
    "finalize-memref-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,"
    "convert-arith-to-llvm,convert-index-to-llvm,"
    "reconcile-unrealized-casts)")
"""Second half: loops on memrefs → LLVM dialect."""

CPU_PIPELINE = CPU_BUFFERIZE_PIPELINE[:-1] + "," + CPU_LLVM_PIPELINE[len("builtin.module("):]
"""The whole textual upstream MLIR 22 pipeline from linalg-on-tensors to the LLVM dialect.

:class:`CpuExecutable` runs it as its two halves with :func:`widen_i1_memrefs` (a Python
pass) in between: MLIR 22.1.8's ``finalize-memref-to-llvm`` asserts on ``memref.store`` of
``i1`` (``integralElementType.getWidth() >= 8``), so boolean buffers are stored as ``i8``
(which is also numpy's bool layout).  Running ``CPU_PIPELINE`` alone works for programs
without boolean buffers."""


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


@functools.cache
def runner_utils_lib() -> str:
    """Path of ``libmlir_c_runner_utils.so`` shipped next to the installed ``mlir`` package."""
    import mlir.ir  # `mlir` is a namespace package: locate it through a module
    base = os.path.dirname(os.path.abspath(mlir.ir.__file__))
    for cand in (os.path.join(base, "lib", "libmlir_c_runner_utils.so"),
                 os.path.join(base, "_mlir_libs", "libmlir_c_runner_utils.so")):
        if os.path.exists(cand):
            return cand
    raise LatchError(f"libmlir_c_runner_utils.so not found under {base}")


_ELEM_TO_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64,
               "i32": np.int32, "i16": np.int16, "i8": np.int8, "i1": np.bool_,
               "ui8": np.uint8}


def _np_dtype(elem_type) -> np.dtype:
    s = str(elem_type)
    if s == "bf16":
        try:
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        except ImportError as e:  # pragma: no cover
            raise LatchError("bf16 tensors at the CPU boundary need ml_dtypes") from e
    if s not in _ELEM_TO_NP:
        raise LatchError(f"unsupported element type {s} at the function boundary")
    return np.dtype(_ELEM_TO_NP[s])


def _tensor_sig(t) -> tuple[tuple[int, ...], np.dtype]:
    import mlir.ir as ir
    rt = ir.RankedTensorType(t)
    if not rt.has_static_shape:
        raise LatchError(f"dynamic shapes are not supported at the CPU boundary: {t}")
    return tuple(rt.shape), _np_dtype(rt.element_type)


def _find_func(module, name):
    for op in module.body.operations:
        if op.operation.name == "func.func" and \
                op.operation.attributes["sym_name"].value == name:
            return op
    raise LatchError(f"no func.func @{name} in the module")


class CpuExecutable:
    """A linalg-on-tensors function JIT-compiled for the host.

    ``CpuExecutable(module_text, func_name, opt_level=2)``; ``exe(*arrays)`` takes numpy
    arrays matching the function's argument types (shape and dtype are checked before the
    call; inputs are made C-contiguous copies only when needed) and returns a list with one
    new numpy array per result (rank-0 results are 0-d arrays).
    """

    def __init__(self, module_text: str, func_name: str, opt_level: int = 2,
                 pipeline: str | None = None):
        import mlir.ir as ir
        from mlir.execution_engine import ExecutionEngine
        from mlir.passmanager import PassManager

        self.func_name = func_name
        self.context = ir.Context()
        with self.context, ir.Location.unknown():
            try:
                module = ir.Module.parse(module_text)
            except Exception as e:
                raise PipelineError("CPU target: the module does not parse",
                                    diagnostics=[str(e)[:2000]]) from e
            fn = _find_func(module, func_name)
            ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
            self.input_sigs = [_tensor_sig(t) for t in ftype.inputs]
            self.output_sigs = [_tensor_sig(t) for t in ftype.results]
            fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            no_write = ir.DictAttr.get({"bufferization.writable": ir.BoolAttr.get(False)})
            fn.attributes["arg_attrs"] = ir.ArrayAttr.get([no_write] * len(ftype.inputs))
            try:
                if pipeline is None:
                    PassManager.parse(CPU_BUFFERIZE_PIPELINE).run(module.operation)
                    widen_i1_memrefs(module.operation)
                    PassManager.parse(CPU_LLVM_PIPELINE).run(module.operation)
                else:
                    PassManager.parse(pipeline).run(module.operation)
            except Exception as e:
                raise PipelineError("CPU target: lowering to LLVM failed",
                                    diagnostics=[str(e)[:4000]]) from e
            self.llvm_module_text = None
            self.engine = ExecutionEngine(module, opt_level=opt_level,
                                          shared_libs=[runner_utils_lib()])
        self._module = module
        self._entry = None

    @property
    def num_inputs(self) -> int:
        return len(self.input_sigs)

    @property
    def num_outputs(self) -> int:
        return len(self.output_sigs)

    def _check(self, arrays):
        if len(arrays) != len(self.input_sigs):
            raise LatchError(f"@{self.func_name} takes {len(self.input_sigs)} arrays, "
                             f"got {len(arrays)}")
        out = []
        for i, (a, (shape, dt)) in enumerate(zip(arrays, self.input_sigs)):
            a = np.asarray(a)
            if tuple(a.shape) != shape:
                raise LatchError(f"argument {i} of @{self.func_name}: shape "
                                 f"{tuple(a.shape)}, expected {shape}")
            if a.dtype != dt:
                raise LatchError(f"argument {i} of @{self.func_name}: dtype {a.dtype}, "
                                 f"expected {dt}")
            out.append(np.ascontiguousarray(a))
        return out

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        ins = self._check(arrays)
        outs = [np.empty(shape, dtype=dt) for shape, dt in self.output_sigs]
        descs = [_memref_descriptor(a) for a in (*ins, *outs)]
        packed = (ctypes.c_void_p * len(descs))()
        holders = []
        for i, d in enumerate(descs):
            p = ctypes.pointer(d)               # pointer types are cached per class
            holders.append(p)
            packed[i] = ctypes.addressof(p)     # the C interface takes T** per argument
        if self._entry is None:
            addr = self.engine.raw_lookup("_mlir_ciface_" + self.func_name)
            if not addr:
                raise LatchError(f"JIT lookup of @{self.func_name} failed")
            self._entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)
        self._entry(packed)
        del holders
        return outs


@functools.lru_cache(maxsize=None)
def _descriptor_class(rank: int, np_dtype: np.dtype):
    """One ctypes memref-descriptor class per (rank, dtype).  (mlir.runtime's helpers make
    a new class per call, and ctypes caches a POINTER type per class forever: a leak of
    ~1 KB per argument per call.)"""
    from mlir.runtime.np_to_memref import as_ctype
    ctp = as_ctype(np_dtype)
    fields = [("allocated", ctypes.c_longlong), ("aligned", ctypes.POINTER(ctp)),
              ("offset", ctypes.c_longlong)]
    if rank > 0:
        fields += [("shape", ctypes.c_longlong * rank), ("strides", ctypes.c_longlong * rank)]
    return type(f"MemRef{rank}D_{np.dtype(np_dtype).name}", (ctypes.Structure,),
                {"_fields_": fields}), ctp


def _memref_descriptor(a: np.ndarray):
    cls, ctp = _descriptor_class(a.ndim, a.dtype)
    d = cls()
    d.allocated = a.ctypes.data
    d.aligned = ctypes.cast(a.ctypes.data, ctypes.POINTER(ctp))
    d.offset = 0
    if a.ndim > 0:
        d.shape = (ctypes.c_longlong * a.ndim)(*a.shape)
        d.strides = (ctypes.c_longlong * a.ndim)(*[s // a.itemsize for s in a.strides])
    return d


# ----------------------------------------------------------------------------- torch glue
def _torch_to_np(t):
    import torch
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _np_to_torch(a):
    import torch
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def compile_function(fn_or_module, example_inputs, func_name: str = "main",
                     opt_level: int = 2) -> Callable:
    """trace_function → import_to_linalg → CpuExecutable; the returned callable takes and
    returns torch tensors (a tensor, or the traced output structure).  Module parameters
    are baked in as constants (see :func:`latch.frontend.trace.trace_function`)."""
    import torch
    import torch.utils._pytree as pytree
    from latch.frontend import import_to_linalg, trace_function

    traced = trace_function(fn_or_module, example_inputs)
    text = import_to_linalg(traced, func_name=func_name)
    exe = CpuExecutable(text, func_name, opt_level=opt_level)

    def run(*tensors):
        outs = exe(*[_torch_to_np(torch.as_tensor(t)) for t in tensors])
        outs = [_np_to_torch(o) for o in outs]
        if traced.out_treedef is not None:
            return pytree.tree_unflatten(outs, traced.out_treedef)
        return outs[0] if len(outs) == 1 else tuple(outs)

    run.executable = exe
    run.traced = traced
    run.mlir_text = text
    return run
