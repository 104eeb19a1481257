"""``latch.compile(fn, None, example_inputs)``: a plain function (or module) compiled for the
CPU target, callable on torch tensors and returning tensors, with no training state."""
from __future__ import annotations

import hashlib
import time

import torch

from latch.errors import LatchError
from latch.options import CompileOptions


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
    def from_artifact(cls, manifest: dict, files: dict) -> "CompiledFunction":
        return cls(manifest, files["function.mlir"].decode())


def compile_function(fn, inputs, options: CompileOptions) -> CompiledFunction:
    from latch.frontend.importer import import_to_linalg
    from latch.frontend.trace import trace_function

    if options.target != "cpu":
        raise LatchError(f"compiled functions (rule None) run on the cpu target; "
                         f"target {options.target!r} is not supported for them yet")
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
