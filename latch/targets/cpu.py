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

import contextlib
import contextvars
import ctypes
import functools
import os
from typing import Callable

import numpy as np

from latch.errors import LatchError, PipelineError

CPU_BUFFERIZE_PIPELINE = "builtin.module(latch-bufferize-host)"
"""First half (see ``latch-bufferize-host`` in latch.passes.pipelines): linalg-on-tensors →
loops on memrefs.  Results become out-parameters (the caller's state buffers: pinned), every
temporary is a view into one arena planned by ``latch-plan-memory`` (reused by liveness),
and the arena is freed on return."""

CPU_LLVM_PIPELINE = "builtin.module(latch-loops-to-llvm)"
"""Second half: loops on memrefs → LLVM dialect, booleans stored as bytes
(``latch-widen-i1-memrefs``: MLIR 22.1.8's ``finalize-memref-to-llvm`` asserts on
``memref.store`` of ``i1``)."""

CPU_PIPELINE = "builtin.module(latch-bufferize-host, latch-loops-to-llvm)"
"""The whole pipeline from linalg-on-tensors to the LLVM dialect (``latch-to-llvm`` without
rule lowering)."""

from latch.passes.widen_i1_memrefs import widen_i1_memrefs  # noqa: E402,F401  (re-export)


def _memory_plan(module, func_name: str) -> dict:
    """The arena planned for ``func_name`` by latch-plan-memory (bytes; zeros if none)."""
    from latch.passes.plan_memory import recorded_plan

    try:
        fn = _find_func(module, func_name)
    except LatchError:          # already lowered past func.func
        fn = None
    return (recorded_plan(fn) if fn is not None else None) or {"arena_bytes": 0,
                                                               "buffer_bytes": 0}


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


_PRELOWERED: contextvars.ContextVar = contextvars.ContextVar("latch_prelowered", default=None)


@contextlib.contextmanager
def prelowered(module_text: str, llvm_text: str, memory_plan: dict):
    """Within this block, ``CpuExecutable(module_text, ...)`` (this very text, default
    pipeline) skips lowering and JIT-compiles ``llvm_text``, what lowering it gave before
    (:meth:`CpuExecutable.llvm_text`; ``memory_plan``: its ``memory_plan``).  The compile
    cache (latch.cache) keeps both, so that a hit does not bufferize and lower again."""
    token = _PRELOWERED.set((module_text, llvm_text, memory_plan))
    try:
        yield
    finally:
        _PRELOWERED.reset(token)


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
        from latch.pipeline import run_pipeline

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
            pre = _PRELOWERED.get()
            if pre is not None and pipeline is None and pre[0] == module_text:
                module = ir.Module.parse(pre[1])        # lowered before: see prelowered()
                self.memory_plan = dict(pre[2])
            else:
                try:
                    run_pipeline(module, CPU_BUFFERIZE_PIPELINE if pipeline is None else pipeline)
                    self.memory_plan = _memory_plan(module, func_name)
                    if pipeline is None:
                        run_pipeline(module, CPU_LLVM_PIPELINE)
                except Exception as e:
                    raise PipelineError("CPU target: lowering to LLVM failed",
                                        diagnostics=[str(e)[:4000]]) from e
            self.engine = ExecutionEngine(module, opt_level=opt_level,
                                          shared_libs=[runner_utils_lib()])
        self._module = module
        self._entry = None

    def llvm_text(self) -> str:
        """The LLVM-dialect module this executable was JIT-compiled from (see
        :func:`prelowered`)."""
        with self.context:
            return str(self._module)

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
