"""The CUDA target: an update function → a ``.latch`` artifact (manifest + PTX) that
:mod:`latch.runtime` runs through the CUDA driver, recorded once into a CUDA graph.

Stages (each a named pipeline, replayable with ``latch-opt``)::

    [latch-lower-rules]            a Latch program -> func/linalg/scf on tensors
    latch-bufferize                -> memrefs + the static memory plan (latch.offset, arena)
    latch-wrap-host-compute        host code touching buffers -> one-iteration scf.parallel
    latch-form-kernels{block}      -> gpu.launch_func + outlined gpu.module kernels
    extract_launch_schedule        the host function -> launches/copies/layout (plain data)
    gpu-lower-to-nvvm-pipeline     the gpu.modules alone (host function removed), bare-pointer
      {kernel-bare-ptr-calling-convention cubin-format=isa}   kernel ABI -> PTX per module

The artifact (see :func:`compile_update_to_artifact`) is byte-identical for identical inputs.
"""
from __future__ import annotations

import hashlib
import json

from latch.errors import LatchError, PipelineError

MANIFEST_KIND = "cuda-update"
MANIFEST_VERSION = 1


def _register_passes() -> None:
    from latch.passes import PASSES
    PASSES.setdefault("latch-wrap-host-compute", "wrap_host_compute:WrapHostCompute")


def kernels_to_ptx_pipeline(chip: str, features: str, opt_level: int = 3) -> str:
    return ("builtin.module(gpu-lower-to-nvvm-pipeline{"
            f"cubin-chip={chip} cubin-features={features} cubin-format=isa "
            f"opt-level={opt_level} kernel-bare-ptr-calling-convention=true}})")


def _run(module, pipeline: str, stage: str) -> None:
    """Run one stage; on failure raise PipelineError with a dumped reproducer of its input
    (also written to ``$LATCH_DUMP_DIR/cuda-<stage>.mlir`` when that is set)."""
    import os
    import tempfile

    from mlir import ir

    from latch.pipeline import run_pipeline
    before = module.operation.get_asm(print_generic_op_form=True)
    dump = os.environ.get("LATCH_DUMP_DIR")
    if dump:
        os.makedirs(dump, exist_ok=True)
        with open(os.path.join(dump, f"cuda-{stage}.mlir"), "w") as f:
            f.write(before)
    try:
        run_pipeline(module, pipeline)
    except ir.MLIRError as e:
        diags = [f"{d.location}: {d.message}" for d in e.error_diagnostics] or [str(e)]
        fd, path = tempfile.mkstemp(prefix=f"latch-cuda-{stage}-", suffix=".mlir")
        with os.fdopen(fd, "w") as f:
            f.write(before)
        raise PipelineError(f"cuda target: stage '{stage}' failed", diagnostics=diags,
                            reproducer=path,
                            command=f"latch-opt {path} --pass-pipeline='{pipeline}'") from None


def _stage_of(module) -> str:
    names = set()

    def walk(op):
        op = op.operation if hasattr(op, "operation") else op
        names.add(op.name)
        for r in op.regions:
            for b in r.blocks:
                for o in b.operations:
                    walk(o)
    walk(module.operation)
    if any(n.startswith("latch.") for n in names):
        return "latch"
    if "gpu.launch_func" in names:
        raise LatchError("cuda target: the module already has kernels; pass the module "
                         "before latch-form-kernels")
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and "latch.arena_bytes" in op.attributes:
            return "buffers"
    return "tensors"


def serialize_kernels(module, chip: str, features: str, opt_level: int = 3) -> dict[str, str]:
    """PTX of every gpu.module of ``module`` (after latch-form-kernels): {module name: ptx}.
    Works on a copy from which host functions are removed, so only kernels are lowered."""
    from mlir import ir
    from mlir.dialects import gpu

    copy = ir.Module.parse(str(module), context=module.context)
    for op in list(copy.body.operations):
        if op.operation.name != "gpu.module":
            op.operation.erase()
    if "gpu.container_module" not in copy.operation.attributes:
        copy.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    _run(copy, kernels_to_ptx_pipeline(chip, features, opt_level), "latch-kernels-to-ptx")
    out = {}
    for op in copy.body.operations:
        op = op.operation
        if op.name != "gpu.binary":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        objects = list(ir.ArrayAttr(op.attributes["objects"]))
        if len(objects) != 1:
            raise LatchError(f"gpu.binary @{name}: expected one object, got {len(objects)}")
        out[name] = bytes(gpu.ObjectAttr(objects[0]).object).decode("utf-8")
    return out


def compile_update_module(module, *, entry: str | None = None, chip: str = "sm_90",
                          features: str = "+ptx80", block: str = "32,8",
                          opt_level: int = 3) -> tuple[dict, dict[str, str], str]:
    """Run the cuda stages on ``module`` (an ``mlir.ir.Module``, changed in place).
    Returns (schedule, {gpu.module name: PTX}, kernels-stage IR text)."""
    from latch.passes.extract_launches import extract_launch_schedule

    _register_passes()
    stage = _stage_of(module)
    if stage == "latch":
        _run(module, "builtin.module(latch-lower-rules)", "latch-lower-rules")
    if stage in ("latch", "tensors"):
        _run(module, "builtin.module(inline, latch-bufferize)", "latch-bufferize")
    _run(module, "builtin.module(latch-wrap-host-compute)", "latch-wrap-host-compute")
    _run(module, f"builtin.module(latch-form-kernels{{block={block}}})", "latch-form-kernels")
    kernels_ir = str(module)
    schedule = extract_launch_schedule(module.operation, entry)
    ptx = serialize_kernels(module, chip, features, opt_level)
    used = {launch["module"] for launch in schedule["launches"]}
    missing = used - set(ptx)
    if missing:
        raise LatchError(f"cuda target: no PTX for kernel modules {sorted(missing)}")
    return schedule, {k: v for k, v in ptx.items() if k in used}, kernels_ir


def build_manifest(schedule: dict, ptx: dict[str, str], *, source_text: str,
                   kernels_ir: str, chip: str, features: str, block: str,
                   opt_level: int) -> tuple[dict, dict[str, bytes]]:
    files = {f"kernels/{name}.ptx": text.encode() for name, text in sorted(ptx.items())}
    manifest = {
        "kind": MANIFEST_KIND,
        "manifest_version": MANIFEST_VERSION,
        "target": {"name": "cuda", "chip": chip, "features": features},
        "entry": schedule["entry"],
        "arena_bytes": schedule["arena_bytes"],
        "planned_arena_bytes": schedule["planned_arena_bytes"],
        "alignment": schedule["alignment"],
        "states": schedule["states"],
        "inputs": schedule["inputs"],
        "outputs": schedule["outputs"],
        "modules": {name: f"kernels/{name}.ptx" for name in sorted(ptx)},
        "launches": schedule["launches"],
        "copies": schedule["copies"],
        "abi": {"kernel_args": "bare-ptr", "index": "i64"},
        "build": {"block": block, "opt_level": opt_level,
                  "stages": ["latch-lower-rules", "latch-bufferize", "latch-wrap-host-compute",
                             f"latch-form-kernels{{block={block}}}",
                             kernels_to_ptx_pipeline(chip, features, opt_level)]},
        "ir_sha256": {"source": hashlib.sha256(source_text.encode()).hexdigest(),
                      "kernels": hashlib.sha256(kernels_ir.encode()).hexdigest()},
    }
    return manifest, files


def compile_update_to_artifact(module_text: str, path=None, *, entry: str | None = None,
                               chip: str = "sm_90", features: str = "+ptx80",
                               block: str = "32,8", opt_level: int = 3,
                               state_slots=None, input_specs=None) -> dict:
    """Compile ``module_text`` (a Latch program, linalg-on-tensors, or a bufferized and
    memory-planned module) for the cuda target; write the artifact to ``path`` (if given).
    Returns the manifest.  ``state_slots`` / ``input_specs`` (optional) are checked against
    the function's ABI: lists of (shape, dtype name) pairs (or dicts with those keys)."""
    from mlir import ir

    import latch.dialect
    from latch.artifact import write_artifact

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        try:
            module = ir.Module.parse(module_text)
        except ir.MLIRError as e:
            raise LatchError("cuda target: the input does not parse",
                             diagnostics=[str(d.message) for d in e.error_diagnostics]) \
                from None
        schedule, ptx, kernels_ir = compile_update_module(
            module, entry=entry, chip=chip, features=features, block=block,
            opt_level=opt_level)
    _check_specs("state", schedule["states"], state_slots)
    _check_specs("input", schedule["inputs"], input_specs)
    manifest, files = build_manifest(schedule, ptx, source_text=module_text,
                                     kernels_ir=kernels_ir, chip=chip, features=features,
                                     block=block, opt_level=opt_level)
    if path is not None:
        write_artifact(path, manifest, files)
    return json.loads(json.dumps(manifest))


def _check_specs(what: str, actual: list[dict], expected) -> None:
    if expected is None:
        return
    expected = list(expected)
    if len(expected) != len(actual):
        raise LatchError(f"cuda target: expected {len(expected)} {what}s, the program has "
                         f"{len(actual)}")
    for i, (e, a) in enumerate(zip(expected, actual)):
        shape, dtype = (e["shape"], e["dtype"]) if isinstance(e, dict) else e
        if list(shape) != a["shape"] or dtype != a["dtype"]:
            raise LatchError(f"cuda target: {what} {i}: expected {list(shape)} {dtype}, the "
                             f"program has {a['shape']} {a['dtype']}")
