"""The CUDA target: an update function → a ``.latch`` artifact (manifest + PTX) that
:mod:`latch.runtime` runs through the CUDA driver, recorded once into a CUDA graph.

Stages (each a named pipeline, replayable with ``latch-opt``)::

    [latch-lower-rules]            a Latch program -> func/linalg/scf on tensors
    latch-specialize-every         every(N) rules: one update function per outcome of their
                                   conditions (update variants; none without every);
    latch-unroll-kernel-loops      loops around kernels (repeat/loop/scan) unrolled
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
import re

from latch.errors import LatchError, PipelineError

MANIFEST_KIND = "cuda-update"
MANIFEST_VERSION = 1
#: the H200's architecture-specific target: plain sm_90 plus wgmma (the contraction
#: kernels use it, passes/contraction_wgmma.py); its PTX runs on compute capability 9.0 only
DEFAULT_CHIP = "sm_90a"
#: PTX ISA 8.1 (CUDA 12.1 drivers and later): the vector atomic adds of the scatter kernels
#: (passes/vector_atomics.py)
DEFAULT_FEATURES = "+ptx81"


def kernels_to_ptx_pipeline(chip: str, features: str, opt_level: int = 3) -> str:
    """The named pipeline ``latch-kernels-to-ptx`` (passes/pipelines.py) with these options,
    as one ``--pass-pipeline`` string (recorded in the manifest)."""
    from latch.passes.pipelines import PIPELINES
    steps = PIPELINES["latch-kernels-to-ptx"].expand(
        {"chip": chip, "features": features, "opt-level": str(opt_level)})
    return "builtin.module(" + ", ".join(steps) + ")"


def _run(module, pipeline: str, stage: str, dump: bool = True) -> None:
    """Run one stage; on failure raise PipelineError with a dumped reproducer of its input
    (also written to ``$LATCH_DUMP_DIR/cuda-<stage>.mlir`` when that is set and ``dump``:
    the PTX workers, each lowering a part of the kernels, leave it to their parent)."""
    import os
    import tempfile

    from mlir import ir

    from latch.pipeline import run_pipeline
    before = module.operation.get_asm(print_generic_op_form=True)
    if dump:
        _dump_stage_input(before, stage)
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


def serialize_kernels(module, chip: str, features: str, opt_level: int = 3,
                      only=None, jobs: int | None = None,
                      min_per_job: int = 16) -> dict[str, str]:
    """PTX of every gpu.module of ``module`` (after latch-form-kernels): {module name: ptx}
    (of those named in ``only``, when given).  Works on a copy from which host functions
    are removed, so only kernels are lowered.

    Kernel modules are independent, so with ``jobs`` > 1 (default: ``LATCH_JOBS`` or the
    number of CPUs) they are split into that many groups (of at least ``min_per_job``
    modules: fewer are not worth a process) lowered in worker processes; each module's PTX
    depends only on that module, so the result does not depend on ``jobs``."""
    import os

    from mlir import ir

    copy = ir.Module.parse(str(module), context=module.context)
    names = []
    for op in list(copy.body.operations):
        if op.operation.name != "gpu.module" or \
                (only is not None and
                 ir.StringAttr(op.operation.attributes["sym_name"]).value not in only):
            op.operation.erase()
        else:
            names.append(ir.StringAttr(op.operation.attributes["sym_name"]).value)
    if "gpu.container_module" not in copy.operation.attributes:
        copy.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    if jobs is None:
        jobs = int(os.environ.get("LATCH_JOBS", "0")) or (os.cpu_count() or 1)
    jobs = max(1, min(jobs, len(names) // max(1, min_per_job)))
    if jobs == 1:
        _run(copy, kernels_to_ptx_pipeline(chip, features, opt_level), "latch-kernels-to-ptx")
        return _ptx_of_binaries(copy)
    import pickle
    import subprocess
    import sys

    text = copy.operation.get_asm(print_generic_op_form=True)
    _dump_stage_input(text, "latch-kernels-to-ptx")     # all modules, not one worker's part
    groups = [names[i::jobs] for i in range(jobs)]
    import tempfile

    procs = []
    for keep in groups:
        log = tempfile.TemporaryFile()      # a file, not a pipe: no deadlock on chatter
        p = subprocess.Popen([sys.executable, "-m", "latch.targets._ptx_worker"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        p.log = log
        procs.append((p, pickle.dumps({"text": text, "keep": keep, "chip": chip,
                                       "features": features, "opt_level": opt_level})))
    replies = []
    for p, request in procs:     # each worker reads its whole request before working
        p.stdin.write(request)
        p.stdin.close()
    out: dict[str, str] = {}
    for p, _ in procs:
        raw = p.stdout.read()
        p.wait()
        p.log.seek(0)
        err = p.log.read().decode("utf-8", "replace")
        p.log.close()
        try:
            replies.append(pickle.loads(raw))
        except Exception:  # noqa: BLE001 - a crashed worker: report its stderr
            raise LatchError(f"cuda target: a PTX worker process failed (exit {p.returncode})",
                             diagnostics=err.strip().splitlines()[-20:]) from None
    for reply in replies:
        if "error" in reply:
            raise PipelineError(reply["error"], diagnostics=reply["diagnostics"],
                                reproducer=reply["reproducer"], command=reply["command"])
        out.update(reply["ptx"])
    return out


def _serialize_group(text: str, keep: list[str], chip: str, features: str,
                     opt_level: int) -> dict[str, str]:
    """Worker of serialize_kernels: lower the kernel modules named ``keep`` of ``text``."""
    from mlir import ir

    import latch.dialect

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        module = ir.Module.parse(text)
        wanted = set(keep)
        for op in list(module.body.operations):
            if ir.StringAttr(op.operation.attributes["sym_name"]).value not in wanted:
                op.operation.erase()
        _run(module, kernels_to_ptx_pipeline(chip, features, opt_level),
             "latch-kernels-to-ptx", dump=False)
        return _ptx_of_binaries(module)


def _ptx_of_binaries(module) -> dict[str, str]:
    from mlir import ir
    from mlir.dialects import gpu

    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name != "gpu.binary":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        objects = list(ir.ArrayAttr(op.attributes["objects"]))
        if len(objects) != 1:
            raise LatchError(f"gpu.binary @{name}: expected one object, got {len(objects)}")
        out[name] = bytes(gpu.ObjectAttr(objects[0]).object).decode("utf-8")
    return out


def form_kernels(block: str, chip: str, deterministic: bool = False) -> str:
    """The ``latch-form-kernels`` stage as the cuda target runs it."""
    return f"latch-form-kernels{{block={block} chip={chip}" + \
        (" deterministic=true}" if deterministic else "}")


def _dump_stage_input(text: str, stage: str) -> None:
    """Write a stage's input to ``$LATCH_DUMP_DIR/cuda-<stage>.mlir`` when that is set."""
    import os

    dump = os.environ.get("LATCH_DUMP_DIR")
    if dump:
        os.makedirs(dump, exist_ok=True)
        with open(os.path.join(dump, f"cuda-{stage}.mlir"), "w") as f:
            f.write(text)


def compile_update_module(module, *, entry: str | None = None, chip: str = DEFAULT_CHIP,
                          features: str = DEFAULT_FEATURES, block: str = "32,8",
                          opt_level: int = 3, times: dict | None = None,
                          deterministic: bool = False) -> tuple[dict, dict[str, str], str]:
    """Run the cuda stages on ``module`` (an ``mlir.ir.Module``, changed in place).
    Returns (schedule, {gpu.module name: PTX}, kernels-stage IR text).  ``times`` (optional)
    receives the seconds of each stage; ``deterministic``: scatter kernels that sum in
    fixed point, no float atomics (``CompileOptions.deterministic``)."""
    from latch.passes.extract_launches import extract_launch_schedule

    times = {} if times is None else times

    def timed(name, fn, *args):
        return _timed(times, name, fn, *args)

    stage = _stage_of(module)
    if stage == "latch":
        timed("latch-lower-rules", _run, module, "builtin.module(latch-lower-rules)",
              "latch-lower-rules")
    entries = [entry]
    if stage in ("latch", "tensors"):
        _drop_dead_functions(module, entry)
        # every(N) rules: one update variant per outcome (passes/specialize_every.py)
        # and no host loops around kernels: repeat/loop/scan bodies are unrolled
        timed("latch-specialize-every", _run, module,
              "builtin.module(latch-specialize-every, latch-unroll-kernel-loops, "
              "canonicalize, cse)", "latch-specialize-every")
        from latch.passes.specialize_every import variants as _variants
        found = _variants(module.operation)
        if found:
            entries = [name for name, _ in found]
        timed("latch-bufferize", _run, module, "builtin.module(inline, latch-bufferize)",
              "latch-bufferize")
    else:
        found = []
    buffer_bytes = _entry_attr(module, entries[0], "latch.buffer_bytes")
    timed("latch-form-kernels", _run, module,
          f"builtin.module({form_kernels(block, chip, deterministic)})", "latch-form-kernels")
    kernels_ir = str(module)
    schedules = [timed("schedule", extract_launch_schedule, module.operation, e)
                 for e in entries]
    schedule = schedules[0]
    schedule["buffer_bytes"] = buffer_bytes
    _share_identical_kernels(kernels_ir, schedules)
    if found:
        # the update variants share states, inputs, outputs, modules and the arena (the
        # largest plan), and each state's new-value slot (commit by swap across variants);
        # the manifest's own launch list is the first variant's
        from latch.targets.state_slots import share_state_slots
        share_state_slots(schedules)
        schedule["variants"] = [
            {"entry": sch["entry"], "when": when, "arena_bytes": sch["arena_bytes"],
             "planned_arena_bytes": sch["planned_arena_bytes"], "launches": sch["launches"],
             "copies": sch["copies"],
             **({"collectives": sch["collectives"]} if sch.get("collectives") else {}),
             **({"nonfinite_flag": sch["nonfinite_flag"]} if "nonfinite_flag" in sch else {})}
            for sch, (_, when) in zip(schedules, found)]
        for sch in schedules[1:]:
            if (sch["states"], sch["inputs"], sch["outputs"]) != \
                    (schedule["states"], schedule["inputs"], schedule["outputs"]):
                raise LatchError("cuda target: the update variants disagree on the state, "
                                 "input or output layout")
        schedule["arena_bytes"] = max(sch["arena_bytes"] for sch in schedules)
        schedule["planned_arena_bytes"] = max(sch["planned_arena_bytes"] for sch in schedules)
    ptx = timed("latch-kernels-to-ptx", _launched_ptx, module, schedules, chip, features,
                opt_level)
    return schedule, ptx, kernels_ir


def _timed(times: dict, name: str, fn, *args):
    """``fn(*args)``, its seconds added to ``times[name]`` (and reported by latch.progress)."""
    import time

    from latch import progress
    with progress.stage(name):
        t0 = time.perf_counter()
        out = fn(*args)
        times[name] = times.get(name, 0.0) + time.perf_counter() - t0
    return out


def _share_identical_kernels(kernels_ir: str, schedules: list[dict]) -> None:
    """Point every launch of a kernel module identical to an earlier one (up to the kernel's
    name) at that earlier module, so that it is shipped once."""
    canonical = _identical_kernel_modules(kernels_ir)
    for sch in schedules:
        for launch in sch["launches"]:
            if launch["module"] in canonical:
                first, kernel, own = canonical[launch["module"]]
                if launch["kernel"] == own and kernel is not None:
                    launch["kernel"] = kernel
                launch["module"] = first


def _launched_ptx(module, schedules: list[dict], chip: str, features: str,
                  opt_level: int) -> dict[str, str]:
    """{module name: PTX} of the kernel modules the schedules launch, each serialized once."""
    wanted = {launch["module"] for sch in schedules for launch in sch["launches"]}
    ptx = serialize_kernels(module, chip, features, opt_level, wanted)
    missing = wanted - set(ptx)
    if missing:
        raise LatchError(f"cuda target: no PTX for kernel modules {sorted(missing)}")
    return {k: v for k, v in ptx.items() if k in wanted}


def _drop_dead_functions(module, entry) -> None:
    """Erase the functions nothing calls any more (the model's loss_and_grads, inlined into
    the update by latch-lower-rules), so that only the update is bufferized and outlined."""
    from mlir import ir

    from latch.passes.extract_launches import find_entry
    try:
        keep = find_entry(module.operation, entry)
    except LatchError:
        return
    text = None
    for op in list(module.body.operations):
        op = op.operation
        if op.name != "func.func" or op == keep:
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if text is None:
            text = str(keep)
        if f"@{name}" not in text:
            op.erase()


def _identical_kernel_modules(kernels_ir: str) -> dict[str, tuple[str, str, str]]:
    """{gpu.module name: (the first gpu.module with the same body, that module's kernel
    name, this module's kernel name)}:
    kernel outlining makes one module per launch, and an update repeats the same kernel (one
    AdamW kernel per parameter shape, one fill per buffer shape; the update variants of an
    every(N) program share most kernels); each distinct one is lowered and shipped once.
    Compares the modules' text in the printed kernels-stage module (printing each nested op
    on its own is far slower), with the kernel's own name (``<function>_kernel``) left out.
    """
    import re

    first: dict[str, tuple[str, str]] = {}
    canonical: dict[str, tuple[str, str, str]] = {}
    name, kernel, lines = None, None, []
    for line in kernels_ir.splitlines():
        if name is None:
            m = re.match(r"^  gpu\.module @([\w$.-]+) ", line)
            if m:
                name, kernel, lines = m.group(1), None, []
            continue
        if line == "  }":
            canonical[name] = first.setdefault("\n".join(lines), (name, kernel)) + (kernel,)
            name = None
            continue
        m = re.match(r"^    gpu\.func @([\w$.-]+)\(", line)
        if m and kernel is None:
            kernel = m.group(1)
            line = line.replace(f"@{kernel}(", "@(", 1)
        lines.append(line)
    return canonical


def _entry_attr(module, entry, attr: str) -> int:
    from mlir import ir

    from latch.passes.extract_launches import find_entry
    try:
        f = find_entry(module.operation, entry)
    except LatchError:
        return 0
    return int(ir.IntegerAttr(f.attributes[attr]).value) if attr in f.attributes else 0


def build_manifest(schedule: dict, ptx: dict[str, str], *, source_text: str,
                   kernels_ir: str, chip: str, features: str, block: str,
                   opt_level: int, deterministic: bool = False) -> tuple[dict, dict[str, bytes]]:
    manifest, files = _manifest_core(MANIFEST_KIND, schedule, ptx, source_text=source_text,
                                     kernels_ir=kernels_ir, chip=chip, features=features)
    manifest.update(
        states=schedule["states"],
        **({"collectives": schedule["collectives"]} if schedule.get("collectives") else {}),
        **({"variants": schedule["variants"]} if schedule.get("variants") else {}),
        build={"block": block, "opt_level": opt_level,
               "stages": ["latch-lower-rules", "latch-specialize-every", "latch-bufferize",
                          "latch-wrap-host-compute", form_kernels(block, chip, deterministic),
                          kernels_to_ptx_pipeline(chip, features, opt_level)]})
    return manifest, files


_SHARED_DECL = re.compile(r"^\s*(\.extern\s+)?\.shared\s[^;\n]*?(\w+)(\[\d*\])?;", re.M)


def check_shared_layout(name: str, ptx: str) -> None:
    """Refuse a kernel module that declares ``gpu.dynamic_shared_memory``'s array next to
    static shared arrays: NVVM declares it as a static array of its own, whose address is
    where the static arrays start, so the dynamic buffer would overlap them (a kernel must
    keep all its shared memory in the dynamic buffer, as the generated GEMM, attention and
    staged-row kernels do)."""
    decls = _SHARED_DECL.findall(ptx)
    dynamic = [d for d in decls if d[1].startswith("__dynamic_shmem__")]
    static = [d[1] for d in decls if not d[1].startswith("__dynamic_shmem__")]
    if dynamic and static:
        raise LatchError(f"kernel module {name}: dynamic shared memory beside static shared "
                         f"arrays ({', '.join(static)}) would overlap them; this is a "
                         "compiler bug (keep the kernel's shared memory in its dynamic buffer)")


def _manifest_core(kind: str, schedule: dict, ptx: dict[str, str], *, source_text: str,
                   kernels_ir: str, chip: str, features: str) -> tuple[dict, dict[str, bytes]]:
    """What every cuda artifact's manifest holds (the kind, target, arena, layout of inputs
    and outputs, modules, launch list, copies, ABI and IR hashes) and its PTX files."""
    from latch.passes.dependent_launches import supported as dependent_launches_supported

    for name, text in sorted(ptx.items()):
        check_shared_layout(name, text)
    files = {f"kernels/{name}.ptx": text.encode() for name, text in sorted(ptx.items())}
    manifest = {
        "kind": kind,
        "manifest_version": MANIFEST_VERSION,
        "target": {"name": "cuda", "chip": chip, "features": features},
        "entry": schedule["entry"],
        "arena_bytes": schedule["arena_bytes"],
        "planned_arena_bytes": schedule["planned_arena_bytes"],
        "alignment": schedule["alignment"],
        "inputs": schedule["inputs"],
        "outputs": schedule["outputs"],
        "modules": {name: f"kernels/{name}.ptx" for name in sorted(ptx)},
        "launches": schedule["launches"],
        "copies": schedule["copies"],
        # every kernel begins with griddepcontrol.wait (latch-dependent-launches)
        "dependent_launches": dependent_launches_supported(chip, features),
        **({"nonfinite_flag": schedule["nonfinite_flag"]} if "nonfinite_flag" in schedule
           else {}),
        "abi": {"kernel_args": "bare-ptr", "index": "i64"},
        "ir_sha256": {"source": hashlib.sha256(source_text.encode()).hexdigest(),
                      "kernels": hashlib.sha256(kernels_ir.encode()).hexdigest()},
    }
    return manifest, files


def compile_update_to_artifact(module_text: str, path=None, *, entry: str | None = None,
                               chip: str = DEFAULT_CHIP, features: str = DEFAULT_FEATURES,
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


# -- latch.compile(model, rule, inputs, target="cuda") -------------------------------------

NO_GPU_MESSAGE = ("compiled for cuda; run it on a machine with a GPU via latch.load(path) or "
                  "latch.runtime")


def compile_program(model, rule, inputs, options) -> "CudaProgramHandle":
    """trace → linalg → Latch program → latch-lower-rules (the same front half as the cpu
    target), then the cuda stages of :func:`compile_update_module`.  Returns a
    :class:`CudaProgramHandle`: save it, report it, or run it where there is a GPU."""
    import time

    from mlir import ir

    import latch.dialect
    from latch.compiler import _Timer
    from latch.program import _TORCH_NAMES, front_half, parse_program
    from latch.stages import dump_dir, run_stages

    timer = _Timer()
    traced, program_text, linalg_text = front_half(model, rule, inputs, options, timer)
    chip, features, block, opt_level = DEFAULT_CHIP, DEFAULT_FEATURES, "32,8", 3
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        module, counts_in = parse_program(program_text, linalg_text)
        records = run_stages(module, ["latch-lower-rules"], dump_to=dump_dir(), name="update")
        for r in records:
            timer.times[r.stage] = r.seconds
        source_text = module.operation.get_asm(print_generic_op_form=True)
        schedule, ptx, kernels_ir = compile_update_module(
            module, chip=chip, features=features, block=block, opt_level=opt_level,
            times=timer.times, deterministic=options.deterministic)
    t0 = time.perf_counter()
    manifest, files = build_manifest(schedule, ptx, source_text=source_text,
                                     kernels_ir=kernels_ir, chip=chip, features=features,
                                     block=block, opt_level=opt_level,
                                     deterministic=options.deterministic)
    expect = [(list(t.shape), _TORCH_NAMES[t.dtype]) for t in inputs]
    _check_specs("input", manifest["inputs"], expect)
    names = [s["name"] for s in manifest["states"]]
    missing = [n for n in traced.param_names if n not in names]
    if missing:
        raise LatchError(f"cuda target: parameters {missing} have no state slot")
    manifest["param_names"] = list(traced.param_names)
    manifest["options"] = {"target": "cuda", "precision": options.precision,
                           "on_nonfinite": options.on_nonfinite}
    if options.deterministic:
        manifest["options"]["deterministic"] = True
    if options.distributed:
        manifest["options"].update(distributed=True, bucket_mb=options.bucket_mb)
    manifest["memory"] = {"arena_bytes": schedule["arena_bytes"],
                          "planned_arena_bytes": schedule["planned_arena_bytes"],
                          "buffer_bytes": schedule.get("buffer_bytes", 0),
                          "state_bytes": sum(s["bytes"] for s in schedule["states"])}
    manifest["ops"] = {"before_lowering": counts_in}
    timer.times["artifact"] = time.perf_counter() - t0
    manifest = json.loads(json.dumps(manifest))
    return CudaProgramHandle(manifest, files, {k: round(v, 4) for k, v in timer.times.items()})


class CudaArtifactHandle:
    """A compiled cuda artifact in memory (manifest + PTX files): ``save(path)`` writes the
    ``.latch`` file (byte-identical for identical inputs: no timings in it); ``runtime()``
    loads it through :mod:`latch.runtime` when this process has a GPU and raises a
    :class:`LatchError` saying where to run it otherwise."""

    NO_GPU = NO_GPU_MESSAGE

    def __init__(self, manifest: dict, files: dict[str, bytes], compile_seconds: dict):
        self.manifest = manifest
        self.files = files
        self.compile_seconds = compile_seconds
        self._runtime = None

    def save(self, path) -> None:
        from latch.artifact import write_artifact
        write_artifact(path, self.manifest, self.files)

    def _load_runtime(self):
        raise NotImplementedError

    def runtime(self):
        """The runtime object of this artifact (loaded on first use)."""
        if self._runtime is None:
            try:
                import torch
                ok = torch.cuda.is_available()
            except Exception:  # noqa: BLE001
                ok = False
            if not ok:
                raise LatchError(self.NO_GPU)
            self._runtime = self._load_runtime()
        return self._runtime


class CudaProgramHandle(CudaArtifactHandle):
    """What ``latch.compile(..., target="cuda")`` returns: the artifact in memory.
    ``report()`` summarizes it; ``manifest`` is the runtime's contract; ``init``/``step`` run
    it through :class:`latch.runtime.program.CudaProgram` when this process has a GPU."""

    def _load_runtime(self):
        from latch.runtime.program import CudaProgram
        return CudaProgram(self.manifest, self.files)

    def init(self, model):
        return self.runtime().init(model)

    def step(self, state, *inputs):
        return self.runtime().step(state, *inputs)

    def report(self) -> str:
        m = self.manifest
        mem = m["memory"]
        lines = [f"Latch program: target cuda ({m['target']['chip']}), precision "
                 f"{m['options']['precision']}, {len(m['param_names'])} parameters, "
                 f"{len(m['states'])} state tensors ({mem['state_bytes']:,} B)"]
        lines.append("compile time per stage:")
        for stage, sec in self.compile_seconds.items():
            lines.append(f"  {stage:24s} {sec * 1e3:9.1f} ms")
        if mem["buffer_bytes"]:
            lines.append(f"memory plan: {mem['buffer_bytes']:,} B of temporaries in a planned "
                         f"arena of {mem['planned_arena_bytes']:,} B "
                         f"({mem['buffer_bytes'] / max(mem['planned_arena_bytes'], 1):.2f}x "
                         f"reuse); arena with unshared slots {mem['arena_bytes']:,} B")
        else:
            lines.append(f"arena {mem['arena_bytes']:,} B (planned "
                         f"{mem['planned_arena_bytes']:,} B)")
        lines.append(f"kernels per update: {len(m['launches'])} launches of "
                     f"{len(m['modules'])} kernel modules, {len(m['copies'])} state copies")
        fused = [la["kernel"] for la in m["launches"]
                 if la["module"].startswith("latch_attention")]
        if fused:
            forward = fused.count("attention")
            lines.append(f"attention: fused flash-style kernels, {forward} forward and "
                         f"{len(fused) - forward} backward launches")
        for i, v in enumerate(m.get("variants", [])):
            cond = ", ".join(f"(state {w['state']} + {w['offset']}) % {w['period']} "
                             f"{'==' if w['value'] else '!='} 0" for w in v["when"])
            lines.append(f"  update variant {i} ({cond}): {len(v['launches'])} launches, "
                         f"{sum('state' in c['dst'] for c in v['copies'])} state copies")
        collectives = m.get("collectives", [])
        if collectives:
            first = min(c["after_launch"] for c in collectives)
            lines.append(f"data-parallel: {len(collectives)} all-reduce buckets "
                         f"({sum(c['bytes'] for c in collectives):,} B, mean over ranks); the "
                         f"first starts after launch {first} of {len(m['launches'])}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"CudaProgramHandle({len(self.manifest['launches'])} launches, arena "
                f"{self.manifest['arena_bytes']} B)")


# -- latch.compile(fn, None, inputs, target="cuda"): plain functions ------------------------

FUNCTION_KIND = "cuda-function"


def compile_function_module(module, *, entry: str = "main", chip: str = DEFAULT_CHIP,
                            features: str = DEFAULT_FEATURES, block: str = "32,8",
                            opt_level: int = 3, scan_threads: int = 256,
                            times: dict | None = None,
                            deterministic: bool = False) -> tuple[dict, dict[str, str], str]:
    """The cuda stages for a plain function (linalg on tensors, no state): bufferize + plan
    memory, ``latch-form-scan-kernels`` (each scan loop → one kernel that keeps its carry
    in workgroup memory; no unrolling of host loops), then the same kernel formation,
    launch schedule and PTX as an update.  Returns (schedule, {module: PTX}, kernels IR)."""
    from latch.passes.extract_launches import extract_launch_schedule

    times = {} if times is None else times

    def timed(name, fn, *args):
        return _timed(times, name, fn, *args)

    if _stage_of(module) != "tensors":
        raise LatchError("cuda target: a function must be given as linalg on tensors")
    _drop_dead_functions(module, entry)
    timed("latch-bufferize", _run, module, "builtin.module(inline, latch-bufferize)",
          "latch-bufferize")
    timed("latch-form-scan-kernels", _run, module,
          f"builtin.module(latch-form-scan-kernels{{threads={scan_threads}}}, canonicalize)",
          "latch-form-scan-kernels")
    timed("latch-form-kernels", _run, module,
          f"builtin.module({form_kernels(block, chip, deterministic)})", "latch-form-kernels")
    kernels_ir = str(module)
    schedule = timed("schedule", extract_launch_schedule, module.operation, entry)
    if schedule["states"]:
        raise LatchError("cuda target: a function has no state")
    _share_identical_kernels(kernels_ir, [schedule])
    ptx = timed("latch-kernels-to-ptx", _launched_ptx, module, [schedule], chip, features,
                opt_level)
    return schedule, ptx, kernels_ir


def build_function_manifest(schedule: dict, ptx: dict[str, str], *, source_text: str,
                            kernels_ir: str, chip: str, features: str, block: str,
                            opt_level: int, scan_threads: int,
                            out_tree: str | None = None,
                            deterministic: bool = False) -> tuple[dict, dict[str, bytes]]:
    """The ``cuda-function`` artifact: like an update's, without states or guard."""
    manifest, files = _manifest_core(FUNCTION_KIND, schedule, ptx, source_text=source_text,
                                     kernels_ir=kernels_ir, chip=chip, features=features)
    manifest["build"] = {
        "block": block, "opt_level": opt_level, "scan_threads": scan_threads,
        "stages": ["latch-bufferize", f"latch-form-scan-kernels{{threads={scan_threads}}}",
                   form_kernels(block, chip, deterministic),
                   kernels_to_ptx_pipeline(chip, features, opt_level)]}
    if out_tree is not None:
        manifest["out_tree"] = out_tree
    return json.loads(json.dumps(manifest)), files
