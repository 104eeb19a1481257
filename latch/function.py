"""``latch.compile(fn, None, example_inputs)``: a plain function (or module) compiled for the
cpu target (JIT, :class:`CompiledFunction`) or the cuda target (a ``cuda-function`` artifact,
:class:`CudaFunctionHandle`), callable on torch tensors and returning tensors, with no
training state.  On the cuda target each ``latch.scan`` becomes one kernel that keeps its
carry on chip (``latch-form-scan-kernels``)."""
from __future__ import annotations

import hashlib
import time

import torch

from latch.errors import LatchError
from latch.options import CompileOptions
from latch.targets.cuda import DEFAULT_CHIP, DEFAULT_FEATURES, CudaArtifactHandle


class CompiledFunction:
    """A compiled tensor function.  ``fn(*tensors)`` returns what the traced function did."""

    def __init__(self, manifest: dict, module_text: str, out_treedef=None):
        from latch.targets.cpu import CpuExecutable

        self.manifest = manifest
        self._module_text = module_text
        self._treedef = out_treedef
        t0 = time.perf_counter()
        self._exe = CpuExecutable(module_text, manifest["entry"],
                                  opt_level=manifest["options"]["opt_level"])
        manifest.setdefault("compile_seconds", {})["llvm+jit"] = round(time.perf_counter() - t0, 4)

    def __call__(self, *tensors):
        import torch.utils._pytree as pytree

        from latch.targets.cpu import _np_to_torch, _torch_to_np

        specs = self.manifest["inputs"]
        if len(tensors) != len(specs):
            raise LatchError(f"the compiled function takes {len(specs)} tensors, got {len(tensors)}")
        arrays = []
        for i, (t, spec) in enumerate(zip(tensors, specs)):
            if not isinstance(t, torch.Tensor):
                raise LatchError(f"argument {i} must be a torch.Tensor, got {type(t).__name__}")
            if list(t.shape) != spec["shape"] or str(t.dtype) != spec["dtype"]:
                raise LatchError(f"argument {i} is {t.dtype}{list(t.shape)}, the function was "
                                 f"compiled for {spec['dtype']}{spec['shape']}")
            if t.device.type != "cpu":
                raise LatchError(f"argument {i} is on {t.device}; this function runs on the cpu")
            arrays.append(_torch_to_np(t))
        outs = [_np_to_torch(o) for o in self._exe(*arrays)]
        if self._treedef is not None:
            return pytree.tree_unflatten(outs, self._treedef)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def report(self) -> str:
        m = self.manifest
        lines = [f"Latch function: target {m['options']['target']}, "
                 f"{len(m['inputs'])} inputs", "compile time per stage:"]
        for stage, sec in m.get("compile_seconds", {}).items():
            lines.append(f"  {stage:20s} {sec * 1e3:9.1f} ms")
        return "\n".join(lines)

    def save(self, path) -> None:
        from latch.artifact import write_artifact
        write_artifact(path, self.manifest, {"function.mlir": self._module_text.encode()})

    @classmethod
    def from_artifact(cls, manifest: dict, files: dict):
        if manifest.get("kind") == "cuda-function":     # runtime only: no MLIR needed
            from latch.runtime.function import CudaFunction
            return CudaFunction(manifest, files)
        return cls(manifest, files["function.mlir"].decode())


def compile_function(fn, inputs, options: CompileOptions) -> CompiledFunction:
    from latch.frontend.importer import import_to_linalg
    from latch.frontend.trace import trace_function

    if options.target == "cuda":
        return compile_cuda_function(fn, inputs, options)
    if options.target != "cpu":
        raise LatchError(f"compiled functions (rule None) run on the cpu or cuda target, "
                         f"not {options.target!r}")
    times = {}
    t0 = time.perf_counter()
    traced = trace_function(fn, inputs)
    times["trace"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    text = import_to_linalg(traced, func_name="main")
    times["linalg"] = time.perf_counter() - t0
    manifest = {
        "format": "latch-program/1",
        "kind": "function",
        "entry": "main",
        "options": {"target": options.target, "precision": options.precision,
                    "on_nonfinite": options.on_nonfinite, "opt_level": options.opt_level},
        "inputs": [{"shape": list(t.shape), "dtype": str(t.dtype)} for t in inputs],
        "ir_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "compile_seconds": {k: round(v, 4) for k, v in times.items()},
    }
    return CompiledFunction(manifest, text, traced.out_treedef)


# -- the cuda target --------------------------------------------------------------------------

def compile_cuda_function(fn, inputs, options: CompileOptions) -> "CudaFunctionHandle":
    """trace → linalg → the cuda stages of
    :func:`latch.targets.cuda.compile_function_module` → a :class:`CudaFunctionHandle`."""
    import torch.utils._pytree as pytree
    from mlir import ir

    import latch.dialect
    from latch.frontend.importer import import_to_linalg
    from latch.frontend.trace import trace_function
    from latch.program import _TORCH_NAMES
    from latch.targets.cuda import build_function_manifest, compile_function_module

    if options.precision != "fp32":
        raise LatchError(f"compiled functions run in the precision they were traced in; "
                         f"precision={options.precision!r} is not supported for them")
    times: dict = {}
    t0 = time.perf_counter()
    traced = trace_function(fn, inputs)
    times["trace"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    text = import_to_linalg(traced, func_name="main")
    times["linalg"] = time.perf_counter() - t0
    chip, features, block, opt_level, threads = DEFAULT_CHIP, DEFAULT_FEATURES, "32,8", 3, 256
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        module = ir.Module.parse(text)
        schedule, ptx, kernels_ir = compile_function_module(
            module, chip=chip, features=features, block=block, opt_level=opt_level,
            scan_threads=threads, times=times, deterministic=options.deterministic)
    out_tree = None
    if traced.out_treedef is not None:
        try:
            out_tree = pytree.treespec_dumps(traced.out_treedef)
        except Exception:  # noqa: BLE001 - a structure pytree cannot serialize: flat outputs
            out_tree = None
    manifest, files = build_function_manifest(
        schedule, ptx, source_text=text, kernels_ir=kernels_ir, chip=chip, features=features,
        block=block, opt_level=opt_level, scan_threads=threads, out_tree=out_tree,
        deterministic=options.deterministic)
    expect = [{"shape": list(t.shape), "dtype": _TORCH_NAMES.get(t.dtype, str(t.dtype))}
              for t in inputs]
    got = [{"shape": s["shape"], "dtype": s["dtype"]} for s in manifest["inputs"]]
    if expect != got:
        raise LatchError(f"cuda target: the compiled function takes {got}, the example "
                         f"inputs are {expect}")
    manifest["options"] = {"target": "cuda", "precision": options.precision}
    if options.deterministic:
        manifest["options"]["deterministic"] = True
    return CudaFunctionHandle(manifest, files, {k: round(v, 4) for k, v in times.items()})


class CudaFunctionHandle(CudaArtifactHandle):
    """What ``latch.compile(fn, None, inputs, target="cuda")`` returns: the artifact in
    memory (``save``, ``report``); calling it runs it through
    :class:`latch.runtime.function.CudaFunction` when this process has a GPU."""

    NO_GPU = ("compiled for cuda; run it on a machine with a GPU: save(path), then "
              "latch.load(path) or latch.runtime.function.CudaFunction.load(path) there")

    def _load_runtime(self):
        from latch.runtime.function import CudaFunction
        return CudaFunction(self.manifest, self.files)

    def __call__(self, *tensors):
        return self.runtime()(*tensors)

    def report(self) -> str:
        m = self.manifest
        lines = [f"Latch function: target cuda ({m['target']['chip']}), "
                 f"{len(m['inputs'])} inputs, {len(m['outputs'])} outputs",
                 "compile time per stage:"]
        for stage, sec in self.compile_seconds.items():
            lines.append(f"  {stage:24s} {sec * 1e3:9.1f} ms")
        lines.append(f"kernels per call: {len(m['launches'])} launches of "
                     f"{len(m['modules'])} kernel modules; arena {m['arena_bytes']:,} B")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"CudaFunctionHandle({len(self.manifest['launches'])} launches)"
