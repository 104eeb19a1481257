"""A compiled training program: ``init`` makes the state, ``step`` runs one whole update.

The manifest (a JSON-able dict) is the program's contract with whoever runs it: the state
slots in ABI order (name, kind, shape, dtype), the inputs, the outputs, the build options,
per-stage compile times, the memory plan and the IR hash.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from latch.errors import LatchError, NonFiniteError
from latch.options import CompileOptions
from latch.state import TrainingState

_NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32,
       "bf16": None, "f16": np.float16, "i1": np.bool_}
_TORCH_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64",
                torch.int32: "i32", torch.bool: "i1", torch.float16: "f16",
                torch.bfloat16: "bf16"}


def _parse_tensor_type(t: str):
    body = t.strip()[len("tensor<"):-1]
    parts = body.split("x")
    return [int(p) for p in parts[:-1]], parts[-1]


def build_program(model, rule, inputs, options: CompileOptions) -> "Program":
    from mlir import ir

    import latch.dialect
    from latch.compiler import _Timer
    from latch.stages import dump_dir, run_stages

    if options.target == "cuda":   # same front half, then the cuda stages (targets/cuda.py)
        from latch.targets.cuda import compile_program
        return compile_program(model, rule, inputs, options)
    timer = _Timer()
    traced, program_text, linalg_text = front_half(model, rule, inputs, options, timer)
    dump_to = dump_dir()

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        module, counts_in = parse_program(program_text, linalg_text)
        slots = _state_slots(module)
        records = run_stages(module, ["latch-lower-rules"], dump_to=dump_dir(), name="update")
        for r in records:
            timer.times[r.stage] = r.seconds
        lowered = module.operation.get_asm(print_generic_op_form=True)
    if dump_to:   # the input of the cpu stages: replay with latch-bufferize-host etc.
        _dump(dump_to, "update-01-latch-bufferize-host.mlir", lowered)

    manifest = {
        "format": "latch-program/1",
        "kind": "update",
        "entry": "update",
        "options": {"target": options.target, "precision": options.precision,
                    "on_nonfinite": options.on_nonfinite, "opt_level": options.opt_level},
        "param_names": list(traced.param_names),
        "states": slots,
        "inputs": [{"shape": list(t.shape), "dtype": _TORCH_NAMES[t.dtype]} for t in inputs],
        "outputs": [{"name": "loss", "shape": [], "dtype": "f32"}],
        "ops": {"before_lowering": counts_in},
        "ir_sha256": hashlib.sha256(lowered.encode()).hexdigest(),
    }
    with timer("buffers+llvm+jit"):
        program = Program(manifest, lowered)
    manifest["compile_seconds"] = {k: round(v, 4) for k, v in timer.times.items()}
    return program


def front_half(model, rule, inputs, options, timer):
    """Stages 1-3 shared by every target: trace the loss and gradients (``trace``), import
    them with torch-mlir (``linalg``) and emit the Latch program around them (``latch``).
    Returns (traced graph, Latch program text, imported linalg text); each stage's time is
    added to ``timer`` and, with ``LATCH_DUMP_DIR``, the trace and the import are dumped."""
    from latch.compiler import mlir_tensor_type
    from latch.frontend.importer import import_to_linalg
    from latch.frontend.trace import trace_loss_and_grads
    from latch.optim.emit import build_update_module
    from latch.stages import dump_dir

    with timer("trace"):
        traced = trace_loss_and_grads(model, inputs, precision=options.precision)
    with timer("linalg"):
        linalg_text = import_to_linalg(traced, "loss_and_grads")
    params = [(n, mlir_tensor_type(s, d)) for n, s, d in
              zip(traced.param_names, traced.param_shapes, traced.param_dtypes)]
    input_types = [mlir_tensor_type(t.shape, t.dtype) for t in inputs]
    with timer("latch"):
        program_text = build_update_module(
            params, rule, input_types,
            all_reduce_bucket_bytes=options.bucket_bytes if options.distributed else None)
    dump_to = dump_dir()
    if dump_to:
        _dump(dump_to, "update-trace.txt", traced.graph_text)
        _dump(dump_to, "update-linalg.mlir", linalg_text)
    return traced, program_text, linalg_text


def parse_program(program_text: str, linalg_text: str):
    """The Latch program with the imported functions appended, parsed in the current
    context (the latch dialect loaded); returns (module, op counts by dialect)."""
    from mlir import ir

    from latch.stages import op_counts

    module = ir.Module.parse(program_text)
    _append_functions(module, ir.Module.parse(linalg_text))
    return module, op_counts(module)


def _dump(folder: str, name: str, text: str) -> None:
    import os

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


def _append_functions(module, imported) -> None:
    """Move every func.func of ``imported`` to the end of ``module``'s body."""
    body = module.body
    for op in list(imported.body.operations):
        if op.operation.name == "func.func":
            op.operation.detach_from_parent()
            body.append(op.operation)


def _state_slots(module) -> list[dict]:
    from mlir import ir

    slots = []
    for op in module.body.operations:
        o = op.operation
        if o.name == "latch.state":
            type_str = str(ir.TypeAttr(o.attributes["type"]).value)
            shape, dtype = _parse_tensor_type(type_str)
            slots.append({"name": ir.StringAttr(o.attributes["sym_name"]).value,
                          "kind": ir.StringAttr(o.attributes["kind"]).value,
                          "shape": shape, "dtype": dtype})
    return slots


class Program:
    """A compiled training update.  Create with :func:`latch.compile`, or :func:`latch.load`."""

    def __init__(self, manifest: dict, module_text: str):
        from latch.targets.cpu import CpuExecutable

        self.manifest = manifest
        self._module_text = module_text
        if manifest["options"]["target"] != "cpu":
            raise LatchError(f"target {manifest['options']['target']!r} cannot run in this "
                             "process; only 'cpu' programs run through the JIT")
        self._exe = CpuExecutable(module_text, manifest["entry"],
                                  opt_level=manifest["options"]["opt_level"])
        manifest["memory"] = self._exe.memory_plan

    # -- state ---------------------------------------------------------------------------
    def init(self, model) -> TrainingState:
        """A new training state: the model's parameters (copied), zero moments and counters."""
        named = dict(model.named_parameters())
        arrays = {}
        for slot in self.manifest["states"]:
            shape, dtype = tuple(slot["shape"]), slot["dtype"]
            if slot["kind"] == "param":
                if slot["name"] not in named:
                    raise LatchError(f"the model has no parameter {slot['name']!r}; init() needs "
                                     "the model the program was compiled from")
                t = named[slot["name"]].detach()
                if tuple(t.shape) != shape:
                    raise LatchError(f"parameter {slot['name']!r} has shape {tuple(t.shape)}, "
                                     f"the program expects {shape}")
                arrays[slot["name"]] = t.to(torch.float32 if dtype == "f32" else t.dtype).cpu().numpy().copy()
            else:
                arrays[slot["name"]] = np.zeros(shape, dtype=_NP[dtype])
        return TrainingState(self.manifest["states"], arrays, self.manifest["param_names"])

    # -- one update ----------------------------------------------------------------------
    def _check_inputs(self, inputs) -> list[np.ndarray]:
        specs = self.manifest["inputs"]
        if len(inputs) != len(specs):
            raise LatchError(f"step() takes {len(specs)} input tensors, got {len(inputs)}")
        out = []
        for i, (x, spec) in enumerate(zip(inputs, specs)):
            if not isinstance(x, torch.Tensor):
                raise LatchError(f"input {i} must be a torch.Tensor, got {type(x).__name__}")
            if list(x.shape) != spec["shape"] or _TORCH_NAMES.get(x.dtype) != spec["dtype"]:
                raise LatchError(f"input {i} is {_TORCH_NAMES.get(x.dtype, x.dtype)}{list(x.shape)}, "
                                 f"the program was compiled for {spec['dtype']}{spec['shape']}")
            if x.device.type != "cpu":
                raise LatchError(f"input {i} is on {x.device}; this program runs on the cpu")
            out.append(np.ascontiguousarray(x.detach().numpy()))
        return out

    def step(self, state: TrainingState, *inputs) -> float:
        """One complete update; returns the loss before the update."""
        arrays = self._check_inputs(inputs)
        outs = self._exe(*state.ordered(), *arrays)
        n = len(self.manifest["states"])
        new_state, loss = outs[:n], float(np.asarray(outs[n]))
        finite = np.isfinite(loss) and all(
            np.all(np.isfinite(a)) for a, s in zip(new_state, self.manifest["states"])
            if s["dtype"] in ("f32", "f64", "f16"))
        if not finite:
            if self.manifest["options"]["on_nonfinite"] == "raise":
                raise NonFiniteError(f"step {state.step}: non-finite loss ({loss}) or update; "
                                     "the training state was left unchanged")
            state.skipped_steps += 1
            return loss
        state.commit([np.asarray(a) for a in new_state])
        return loss

    # -- reporting and artifacts ---------------------------------------------------------
    def report(self) -> str:
        m = self.manifest
        lines = [f"Latch program: target {m['options']['target']}, precision "
                 f"{m['options']['precision']}, {len(m['param_names'])} parameters, "
                 f"{len(m['states'])} state tensors"]
        lines.append("compile time per stage:")
        for stage, sec in m.get("compile_seconds", {}).items():
            lines.append(f"  {stage:20s} {sec * 1e3:9.1f} ms")
        mem = m["memory"]
        if mem["buffer_bytes"]:
            lines.append(f"memory plan: arena {mem['arena_bytes']:,} B for "
                         f"{mem['buffer_bytes']:,} B of temporaries "
                         f"({mem['buffer_bytes'] / max(mem['arena_bytes'], 1):.2f}x reuse)")
        else:
            lines.append("memory plan: no temporaries")
        ops = m["ops"]["before_lowering"]
        lines.append("ops before lowering: " + ", ".join(f"{k} {v}" for k, v in ops.items()))
        return "\n".join(lines)

    def save(self, path) -> None:
        from latch.artifact import write_artifact
        write_artifact(path, self.manifest, {"program.mlir": self._module_text.encode()})
