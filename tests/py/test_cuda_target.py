"""The cuda target: host-compute wrapping, the launch schedule, the artifact and the runtime.

Everything here but the last tests runs on the CPU (compilation only); the runtime tests skip
cleanly when there is no CUDA GPU (``pytest.skip("no CUDA GPU: ...")``).  The GPU numerics
check is bench/gpu_smoke.py, run on the GPU machine with the runtime only.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SGD = os.path.join(ROOT, "examples", "mlir", "sgd_update.mlir")

_HOST_OK = {"arith.constant", "memref.alloc", "memref.dealloc", "gpu.launch_func",
            "func.return", "memref.cast", "memref.view", "memref.subview",
            "memref.collapse_shape", "memref.expand_shape", "memref.reinterpret_cast"}


def _bench_module(name: str):
    """A script of bench/ imported as a module (they are not a package)."""
    import importlib

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def _sgd_text() -> str:
    with open(SGD) as f:
        return f.read()


def _kernels_module(text: str, ctx):
    """(module after latch-form-kernels, schedule, ptx)."""
    from mlir import ir

    from latch.targets.cuda import compile_update_module

    module = ir.Module.parse(text, context=ctx)
    schedule, ptx, _ = compile_update_module(module)
    return module, schedule, ptx


@pytest.fixture(scope="module")
def sgd_compiled():
    from mlir import ir

    import latch.dialect

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        module, schedule, ptx = _kernels_module(_sgd_text(), ctx)
        host_ops = [op.operation.name for op in _entry(module).regions[0].blocks[0].operations]
        yield host_ops, schedule, ptx


def _entry(module):
    for op in module.body.operations:
        if op.operation.name == "func.func":
            return op.operation
    raise AssertionError("no func.func")


def test_host_function_holds_only_launches_after_form_kernels(sgd_compiled):
    host_ops, schedule, _ = sgd_compiled
    assert set(host_ops) <= _HOST_OK, sorted(set(host_ops) - _HOST_OK)
    # the residual writes its zero-filled output: no fill kernel; nor for the weight
    # gradient, whose split-K partial sums start from zero (latch-fold-zero-fills)
    assert host_ops.count("gpu.launch_func") == len(schedule["launches"]) == 10


def test_schedule_of_sgd_update(sgd_compiled):
    _, s, ptx = sgd_compiled
    assert s["entry"] == "update"
    assert [(st["name"], st["shape"], st["dtype"]) for st in s["states"]] == [
        ("w", [64, 16], "f32"), ("step", [], "i64"), ("w.momentum", [64, 16], "f32")]
    assert [(i["shape"], i["dtype"]) for i in s["inputs"]] == [([256, 64], "f32"),
                                                               ([256, 16], "f32")]
    assert [(o["shape"], o["dtype"], o["bytes"]) for o in s["outputs"]] == [([], "f32", 4)]
    assert s["arena_bytes"] >= s["planned_arena_bytes"] > 0
    assert s["arena_bytes"] % s["alignment"] == 0
    # the first kernel is the residual's product x @ w [256, 16]: it writes its sums
    # straight into its zero-initialised arena slot 0 (no fill kernel before it): 4 row
    # tiles of 64 (the f32 SIMT kernel), reading input 0 and state 0
    first = s["launches"][0]
    assert first["module"].startswith("latch_contract")
    assert first["grid"] == [1, 4, 1] and first["block"] == [256, 1, 1]
    assert first["shared_bytes"] == 0
    assert first["args"] == [{"input": 0, "type": "ptr"}, {"state": 0, "type": "ptr"},
                             {"arena": 0, "type": "ptr"}]
    # the loss is written straight into output 0; the forward reads input 0 and state 0
    used = [a for launch in s["launches"] for a in launch["args"]]
    assert {"output": 0, "type": "ptr"} in used
    assert {"input": 0, "type": "ptr"} in used and {"state": 0, "type": "ptr"} in used
    for a in used:
        assert set(a) in ({"const", "type"}, {"arena", "type"}, {"state", "type"},
                          {"input", "type"}, {"output", "type"}), a
        if "arena" in a:
            assert 0 <= a["arena"] < s["arena_bytes"]
    # new state values land in the arena and are copied into the state buffers at the end
    assert [c["dst"] for c in s["copies"]] == [{"state": 0}, {"state": 1}, {"state": 2}]
    assert [c["bytes"] for c in s["copies"]] == [4096, 8, 4096]
    assert all("arena" in c["src"] for c in s["copies"])
    # the two full reductions (loss, gradient norm) run as one block of 256 threads; the
    # rest of the host compute (zero fills, the clip factor, the schedule, step + 1) runs
    # in one-thread kernels; the elementwise kernels over [64, 16] (1024 elements in
    # vectors of 4 f32) also fit one block
    single = [launch for launch in s["launches"] if launch["grid"] == [1, 1, 1]]
    reductions = [la for la in single if "shfl.sync.bfly" in ptx[la["module"]]]
    assert [la["block"] for la in reductions] == [[256, 1, 1], [256, 1, 1]]
    assert [la["block"] for la in single if la["block"] == [32, 1, 1]] == [[32, 1, 1]] * 3
    assert all(".global.v4.b32" in ptx[la["module"]] for la in single
               if la not in reductions and la["block"] == [256, 1, 1])
    # the weight gradient [64, 16] sums over 256 rows: 4 output tiles cannot fill the GPU, so
    # it is split along k into 4 slices (grid z) whose partial sums a kernel then adds up
    contractions = [la for la in s["launches"] if la["module"].startswith("latch_contract")]
    assert [la["grid"] for la in contractions] == [[1, 4, 1], [1, 16, 4]]


def test_ptx_parameters_match_schedule_arguments(sgd_compiled):
    """Bare-pointer ABI: one .param per schedule argument, pointers as .u64."""
    _, s, ptx = sgd_compiled
    for launch in s["launches"]:
        text = ptx[launch["module"]]
        assert ".target sm_90" in text
        m = re.search(r"\.entry\s+" + re.escape(launch["kernel"]) + r"\((.*?)\)", text, re.S)
        assert m, launch["module"]
        params = [p.strip() for p in m.group(1).split(",") if p.strip()]
        assert len(params) == len(launch["args"]), (launch["module"], params)
        for p, a in zip(params, launch["args"]):
            want = {"ptr": ".u64", "i64": ".u64", "f32": ".f32", "f64": ".f64"}[a["type"]]
            if a["type"] == "ptr":
                assert ".ptr" in p, p
            assert p.startswith(".param " + want), (p, a)


def test_artifact_is_deterministic_and_has_the_manifest(tmp_path):
    from latch.artifact import read_artifact
    from latch.targets.cuda import compile_update_to_artifact

    a, b = tmp_path / "a.latch", tmp_path / "b.latch"
    compile_update_to_artifact(_sgd_text(), a)
    compile_update_to_artifact(_sgd_text(), b)
    assert a.read_bytes() == b.read_bytes()

    manifest, files = read_artifact(a)
    for key in ("kind", "target", "entry", "arena_bytes", "states", "inputs", "outputs",
                "modules", "launches", "copies", "abi", "build", "ir_sha256"):
        assert key in manifest, key
    assert manifest["kind"] == "cuda-update"
    assert manifest["target"] == {"name": "cuda", "chip": "sm_90a", "features": "+ptx81"}
    assert manifest["abi"]["kernel_args"] == "bare-ptr"
    assert sorted(files) == sorted(manifest["modules"].values())
    assert {launch["module"] for launch in manifest["launches"]} == set(manifest["modules"])
    assert re.fullmatch(r"[0-9a-f]{64}", manifest["ir_sha256"]["kernels"])
    with zipfile.ZipFile(a) as z:
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in z.infolist())
    # a different chip changes the PTX and so the bytes
    c = tmp_path / "c.latch"
    compile_update_to_artifact(_sgd_text(), c, chip="sm_90")
    assert c.read_bytes() != a.read_bytes()


def test_spec_mismatch_is_rejected():
    from latch.errors import LatchError
    from latch.targets.cuda import compile_update_to_artifact

    with pytest.raises(LatchError, match="input 0: expected"):
        compile_update_to_artifact(_sgd_text(), None,
                                   input_specs=[([128, 64], "f32"), ([256, 16], "f32")])


_HOST_LOOP = """
#id = affine_map<(d0) -> (d0)>
func.func @f(%a: memref<8xf32>) -> memref<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant TRIPS : index
  %b = memref.alloc() {latch.pinned} : memref<8xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
        ins(%a : memref<8xf32>) outs(%b : memref<8xf32>) {
    ^bb0(%x: f32, %o: f32):
      %s = arith.addf %x, %o : f32
      linalg.yield %s : f32
    }
  }
  return %b : memref<8xf32>
}
"""

_DYNAMIC = """
func.func @f(%a: memref<?xf32>) -> memref<?xf32> {
  return %a : memref<?xf32>
}
"""


def test_host_loop_around_kernels_is_a_clear_error():
    """A loop around kernels longer than latch-unroll-kernel-loops unrolls (64 trips)."""
    from latch.errors import LatchError
    from latch.targets.cuda import compile_update_to_artifact

    with pytest.raises(LatchError) as e:
        compile_update_to_artifact(_HOST_LOOP.replace("TRIPS", "100"), None)
    assert "scf.for" in str(e.value) and "parallel work" in str(e.value)


def test_short_host_loop_around_kernels_is_unrolled_into_the_launch_list():
    from latch.targets.cuda import compile_update_to_artifact

    manifest = compile_update_to_artifact(_HOST_LOOP.replace("TRIPS", "4"), None)
    assert len(manifest["launches"]) == 4
    assert len({(la["module"], la["kernel"]) for la in manifest["launches"]}) == 1


def test_dynamic_shapes_are_a_clear_error():
    from latch.errors import LatchError
    from latch.targets.cuda import compile_update_to_artifact

    with pytest.raises(LatchError, match="dynamic shape"):
        compile_update_to_artifact(_DYNAMIC, None)


_HYGIENE = r"""
import sys
for name in ("mlir", "torch_mlir", "latch.dialect", "latch.passes", "latch.targets",
             "latch.frontend", "latch.compiler"):
    sys.modules[name] = None          # importing any of these now raises ImportError
import latch.runtime
from latch.runtime import CudaProgram, CudaError, CudaUnavailableError
import latch.runtime.driver, latch.runtime.program
bad = sorted(m for m in sys.modules if sys.modules[m] is not None and
             (m == "mlir" or m.startswith(("mlir.", "torch_mlir", "latch.dialect",
                                           "latch.passes"))))
assert not bad, bad
print("ok")
"""


def test_runtime_imports_without_mlir_or_the_compiler():
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", _HYGIENE], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def _load_or_skip(path, **kw):
    from latch.runtime import CudaProgram, CudaUnavailableError

    try:
        return CudaProgram.load(path, **kw)
    except CudaUnavailableError as e:
        msg = str(e)
        pytest.skip(msg if msg.startswith("no CUDA GPU") else f"no CUDA GPU: {msg}")


def test_runtime_runs_the_artifact_or_skips(tmp_path):
    """On a GPU machine: three steps match the float64 reference; elsewhere: a clean skip."""
    import torch

    from latch.errors import LatchError

    path = tmp_path / "sgd.latch"
    try:
        from latch.targets.cuda import compile_update_to_artifact
        compile_update_to_artifact(_sgd_text(), path)
    except ImportError:
        pytest.skip("no MLIR here to build the artifact")
    prog = _load_or_skip(path)
    reference_steps = _bench_module("gpu_smoke").reference_steps
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 64, generator=g), torch.randn(256, 16, generator=g)
    w0 = 0.1 * torch.randn(64, 16, generator=g)
    prog.load_state({"w": w0})
    losses = [float(prog.step(x.cuda(), y.cuda())) for _ in range(3)]
    ref, w, _, _ = reference_steps(x, y, w0, 3)
    assert all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(losses, ref))
    assert prog.graph_captured
    got = prog.state_dict()["w"].double().cpu()
    assert float((got - w).norm() / w.norm()) < 1e-5
    with pytest.raises(LatchError, match="shape"):
        prog.step(x[:-1].cuda(), y.cuda())
    prog.close()


def test_missing_cuda_bindings_or_gpu_is_a_latch_error():
    """Whatever this machine has, asking for the GPU either works or raises the
    CudaUnavailableError that callers (and the test above) turn into a skip."""
    from latch.runtime import driver as drv

    try:
        drv.init()
    except drv.CudaUnavailableError as e:
        assert str(e).startswith("no CUDA GPU")
    else:
        assert drv.driver_version()


def test_manifest_is_plain_json(tmp_path):
    from latch.targets.cuda import compile_update_to_artifact

    m = compile_update_to_artifact(_sgd_text(), None)
    assert json.loads(json.dumps(m)) == m


def test_full_reductions_become_block_reductions(sgd_compiled):
    _, s, ptx = sgd_compiled
    blocks = [launch for launch in s["launches"] if launch["block"] == [256, 1, 1]
              and launch["grid"] == [1, 1, 1]]
    reductions = [la for la in blocks if "shfl.sync.bfly" in ptx[la["module"]]]
    assert len(reductions) == 2                # the loss and the gradient norm
    for launch in reductions:
        assert ".shared" in ptx[launch["module"]]


def test_wrap_pass_without_block_reductions_is_all_serial():
    """reduce-threads=0 keeps the plain wrapping: every full reduction in a one-thread kernel."""
    from mlir import ir

    import latch.dialect
    from latch.passes.extract_launches import extract_launch_schedule
    from latch.pipeline import run_pipeline
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        m = ir.Module.parse(_sgd_text())
        run_pipeline(m, "builtin.module(latch-lower-rules, latch-bufferize, "
                        "latch-wrap-host-compute{reduce-threads=0}, latch-form-kernels)")
        s = extract_launch_schedule(m.operation)
    # 7 + the split-K partial sums of the gradient (which start from zero instead of a
    # fill: latch-fold-zero-fills)
    assert len(s["launches"]) == 8
    # the reductions are one-thread kernels too; the other single-block launches are
    # elementwise kernels of 256 threads (vectors of 4 f32 over [64, 16])
    serial = [launch for launch in s["launches"] if launch["grid"] == [1, 1, 1]
              and launch["block"] != [256, 1, 1]]
    assert [launch["block"] for launch in serial] == [[32, 1, 1]] * 3


def test_materialized_arena_maps_to_the_same_offsets():
    """latch-plan-memory{materialize=true} (views of one arena alloc) gives the same schedule,
    but for the zero fill of the residual: through views of the one arena the contraction
    pass cannot tell that the fill wrote exactly its output, so the fill stays there."""
    from mlir import ir

    import latch.dialect
    from latch.passes.extract_launches import extract_launch_schedule
    from latch.pipeline import run_pipeline

    schedules = []
    for extra in ("", ", latch-plan-memory{materialize=true}"):
        with ir.Context() as ctx, ir.Location.unknown():
            latch.dialect.load(ctx)
            m = ir.Module.parse(_sgd_text())
            run_pipeline(m, f"builtin.module(latch-lower-rules, latch-bufferize{extra}, "
                            "latch-wrap-host-compute, latch-form-kernels)")
            schedules.append(extract_launch_schedule(m.operation))
    plain, materialized = schedules
    assert materialized["arena_bytes"] == plain["arena_bytes"]
    assert materialized["copies"] == plain["copies"]

    def shape(launch):
        return launch["grid"], launch["block"], launch["shared_bytes"], launch["args"]
    fill, *rest = materialized["launches"]
    # (its value is a constant of the kernel: gpu-launch-sink-index-computations)
    assert fill["args"] == [{"arena": 0, "type": "ptr"}]
    assert [shape(la) for la in rest] == [shape(la) for la in plain["launches"]]


# -- latch.compile(model, rule, inputs, target="cuda") on the fast-example models ---------

sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

_MODEL_NAMES = ("mlp", "char_lm", "tiny_moe", "looped")


def _adamw_clip():
    from latch import optim
    return optim.clip_grad_norm(0.5, optim.AdamW(optim.warmup_cosine(1e-2, 2, 6, 0.1),
                                                 betas=(0.9, 0.95), weight_decay=0.1))


@pytest.fixture(scope="module")
def cuda_models():
    """{name: (model, example inputs, CudaProgramHandle)}: each model compiled once."""
    import latch
    from models import MODELS

    out = {}
    for name in _MODEL_NAMES:
        model, example = MODELS[name](seed=0)
        out[name] = (model, example, latch.compile(model, _adamw_clip(), example,
                                                   target="cuda"))
    return out


def _locations(launch):
    return [a for a in launch["args"] if a["type"] == "ptr"]


@pytest.mark.parametrize("name", _MODEL_NAMES)
def test_model_compiles_for_cuda_with_a_sane_manifest(cuda_models, name):
    model, example, prog = cuda_models[name]
    m = prog.manifest
    assert m["kind"] == "cuda-update" and m["launches"]
    assert m["arena_bytes"] >= m["planned_arena_bytes"] > 0
    assert m["memory"]["buffer_bytes"] >= m["planned_arena_bytes"]
    # the state: every parameter under its model name, with the model's shape
    states = {s["name"]: s for s in m["states"]}
    params = dict(model.named_parameters())
    assert m["param_names"] == list(params)
    for n, p in params.items():
        assert states[n]["kind"] == "param" and states[n]["shape"] == list(p.shape)
        assert f"{n}.exp_avg" in states and f"{n}.exp_avg_sq" in states
    assert states["step"]["dtype"] == "i64"
    assert [(i["shape"], i["dtype"]) for i in m["inputs"]] == [
        (list(x.shape), {"torch.float32": "f32", "torch.int64": "i64"}[str(x.dtype)])
        for x in example]
    assert [(o["shape"], o["dtype"]) for o in m["outputs"]] == [([], "f32")]
    # every argument resolves to a buffer of the right kind, inside it
    sizes = {"state": [s["bytes"] for s in m["states"]],
             "input": [s["bytes"] for s in m["inputs"]],
             "output": [s["bytes"] for s in m["outputs"]]}
    for launch in m["launches"]:
        assert launch["module"] in m["modules"]
        assert all(g >= 1 for g in launch["grid"] + launch["block"])
        for a in launch["args"]:
            assert a["type"] == "ptr" or "const" in a
        for loc in _locations(launch):
            kinds = [k for k in ("state", "input", "output", "arena") if k in loc]
            assert len(kinds) == 1, loc
            if kinds[0] == "arena":
                assert 0 <= loc["arena"] < m["arena_bytes"]
            else:
                assert 0 <= loc[kinds[0]] < len(sizes[kinds[0]])
                assert loc.get("byte_offset", 0) < sizes[kinds[0]][loc[kinds[0]]]
    # every new state value is copied back into its state buffer
    assert {c["dst"]["state"] for c in m["copies"] if "state" in c["dst"]} <= \
        set(range(len(m["states"])))
    assert len(m["modules"]) <= len(m["launches"])
    for path in m["modules"].values():
        assert prog.files[path].startswith(b"//") and b".entry" in prog.files[path]
    report = prog.report()
    assert "kernels per update" in report and "arena" in report


def test_cuda_artifacts_are_byte_identical(cuda_models, tmp_path):
    import latch
    from models import make_mlp

    model, example = make_mlp(seed=0)
    again = latch.compile(model, _adamw_clip(), example, target="cuda")
    a, b = tmp_path / "a.latch", tmp_path / "b.latch"
    cuda_models["mlp"][2].save(a)
    again.save(b)
    assert a.read_bytes() == b.read_bytes()


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def test_cuda_program_without_gpu_raises_a_clear_error(cuda_models, tmp_path):
    import latch

    model, example, prog = cuda_models["mlp"]
    path = tmp_path / "mlp.latch"
    prog.save(path)
    if _has_gpu():
        state = prog.init(model)
        assert math.isfinite(prog.step(state, *example)) and state.step == 1
        loaded = latch.load(path)
        state = loaded.init(model)
        assert math.isfinite(loaded.step(state, *example))
        return
    with pytest.raises(latch.LatchError, match="compiled for cuda; run it on a machine "
                                                "with a GPU via latch.load"):
        prog.init(model)
    with pytest.raises(latch.LatchError, match="compiled for cuda"):
        prog.step(None, *example)
    with pytest.raises(latch.LatchError, match="no CUDA GPU"):
        latch.load(path)        # routed to latch.runtime, which needs a GPU


def test_partition_every_compiles_for_cuda():
    """latch.every's scf.if around the group's optimizer is if-converted (no host branch)."""
    import latch
    from latch import optim
    from models import make_mlp

    model, example = make_mlp(seed=0)
    rule = optim.partition({"fc2.*": optim.every(2, optim.AdamW(3e-3)),
                            "*": optim.SGD(0.05, momentum=0.9)})
    prog = latch.compile(model, rule, example, target="cuda")
    names = {s["name"] for s in prog.manifest["states"]}
    assert {"fc2.weight.exp_avg", "fc1.weight.momentum_buffer"} <= names
    assert any(s["kind"] == "grad_acc" for s in prog.manifest["states"])


# a kernel reading the second half of a buffer through a subview (offset: 8 in its type)
_OFFSET_VIEW = """
func.func @f(%a: memref<2x16xf32>) -> memref<2x8xf32> {
  %v = memref.subview %a[0, 8] [2, 8] [1, 1]
      : memref<2x16xf32> to memref<2x8xf32, strided<[16, 1], offset: 8>>
  %out = memref.alloc() : memref<2x8xf32>
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%v : memref<2x8xf32, strided<[16, 1], offset: 8>>) outs(%out : memref<2x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %d = arith.addf %x, %x : f32
    linalg.yield %d : f32
  }
  return %out : memref<2x8xf32>
}
"""


def test_views_with_an_offset_pass_the_base_pointer():
    """Bare-pointer ABI: the kernel applies the static offset of its memref type itself
    (MemRefDescriptor::fromStaticShape), so the launch passes the buffer's base pointer, not
    the address of the view's first element (which would apply the offset twice: q/k/v
    slices of the fused qkv read the wrong columns, NaN on the GPU)."""
    from mlir import ir

    import latch.dialect
    from latch.passes.extract_launches import extract_launch_schedule
    from latch.pipeline import run_pipeline

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        m = ir.Module.parse(_OFFSET_VIEW)
        run_pipeline(m, "builtin.module(latch-form-kernels)")
        text = str(m)
        s = extract_launch_schedule(m.operation)
    assert "offset: 8>>" in text.split("gpu.module")[1]   # the kernel's type keeps it
    (launch,) = s["launches"]
    ptrs = _locations(launch)
    assert ptrs[0] == {"input": 0, "type": "ptr"}, ptrs


def test_a_view_beyond_its_buffer_is_a_clear_error():
    from latch.errors import LatchError
    from latch.passes.extract_launches import _base_pointer
    from mlir import ir

    with ir.Context():
        t = ir.Type.parse("memref<2x8xf32, strided<[16, 1], offset: 8>>")
        assert _base_pointer({"arena": 32}, t, (128, 32), "x") == {"arena": 0}
        with pytest.raises(LatchError, match="addresses bytes"):
            _base_pointer({"arena": 32}, t, (64, 32), "x")


def test_a_view_not_aligned_to_its_elements_is_a_clear_error():
    """The kernels access an i64 with one 8-byte load (latch-nvptx-data-layout): a base
    pointer that is not a multiple of its element size would fault on the GPU, so the
    launch schedule refuses it at compile time.  4-byte elements 4 bytes in are fine."""
    from latch.errors import LatchError
    from latch.passes.extract_launches import _base_pointer
    from mlir import ir

    with ir.Context():
        i64 = ir.Type.parse("memref<4xi64>")
        assert _base_pointer({"arena": 264}, i64, (1024, 264), "x") == {"arena": 264}
        with pytest.raises(LatchError, match="not a multiple of its 8-byte elements"):
            _base_pointer({"arena": 260}, i64, (1024, 260), "x")
        with pytest.raises(LatchError, match="byte 12 of its buffer"):
            _base_pointer({"state": 3, "byte_offset": 12}, i64, (1024, 12), "x")
        f32 = ir.Type.parse("memref<4xf32>")
        assert _base_pointer({"arena": 260}, f32, (1024, 260), "x") == {"arena": 260}


# -- on_nonfinite on the GPU: the in-graph guard (latch/runtime/guard.py) -------------------

def test_guard_ptx_assembles_for_sm90(tmp_path):
    import shutil

    from latch.runtime import guard

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas here")
    src = tmp_path / "guard.ptx"
    src.write_text(guard.PTX)
    r = subprocess.run([ptxas, "-arch=sm_90", str(src), "-o", str(tmp_path / "g.cubin")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for entry in ("latch_check_finite", "latch_guarded_copy"):
        assert f".visible .entry {entry}(" in guard.PTX


@pytest.mark.parametrize("name", _MODEL_NAMES)
def test_guard_covers_every_new_state_and_the_loss(cuda_models, name):
    """Every state copy becomes a guarded copy; every floating-point new state value and the
    loss are checked; integer counters are copied (guarded) but not checked."""
    from latch.runtime import guard

    _, _, prog = cuda_models[name]
    m = prog.manifest
    assert m["options"]["on_nonfinite"] == "skip"
    checks, copies, policy = guard.plan(m)
    assert policy == "skip"
    state_copies = [c for c in m["copies"] if "state" in c["dst"]]
    assert [(c["src"], c["dst"], c["bytes"]) for c in state_copies] == copies
    floats = [c for c in state_copies
              if m["states"][c["dst"]["state"]]["dtype"] in guard.FLOAT_CHECKS and
              not c.get("checked_in_kernels")]
    step = next(i for i, s in enumerate(m["states"]) if s["name"] == "step")
    assert any(c["dst"] == {"state": step} for c in state_copies)     # the counter: guarded
    assert len(checks) == len(floats) + 1 and checks[-1][1:] == ("f32", 1)   # + the loss
    for (loc, dtype, n), c in zip(checks, floats):
        assert loc == c["src"] and n * guard.FLOAT_CHECKS[dtype][0] == c["bytes"]
    table = guard.check_table([(4096, "bf16", 3), (8192, "f64", 5)])
    assert table.tolist() == [[4096, 3, 0x7F80, 2], [8192, 5, 0x7FF0000000000000, 8]]


@pytest.mark.parametrize("name", _MODEL_NAMES)
def test_optimizer_kernels_check_the_new_state_for_nonfinite_values(cuda_models, name):
    """latch-nonfinite-checks: every floating-point new state value of these updates is
    written last by an elementwise optimizer kernel, which checks it (PTX ``setp.nan``) and
    clears the manifest's ``nonfinite_flag``; the runtime's check kernel is left with the
    loss.  The flag's writes commute, so the optimizer kernels stay unordered."""
    from latch.runtime import guard

    _, _, prog = cuda_models[name]
    m = prog.manifest
    flag = m["nonfinite_flag"]
    assert set(flag) == {"arena"} and flag["arena"] >= m["planned_arena_bytes"]
    state_copies = [c for c in m["copies"] if "state" in c["dst"]]
    floats = [c for c in state_copies
              if m["states"][c["dst"]["state"]]["dtype"] in guard.FLOAT_CHECKS]
    assert floats and all(c.get("checked_in_kernels") for c in floats)
    assert not any(c.get("checked_in_kernels") for c in state_copies if c not in floats)
    checks, _, _ = guard.plan(m)
    assert len(checks) == 1                                      # the loss
    checking = [i for i, la in enumerate(m["launches"])
                if any(a.get("arena") == flag["arena"] for a in la["args"])]
    assert checking
    for i in checking:
        ptx = prog.files[m["modules"][m["launches"][i]["module"]]].decode()
        assert "setp.nan" in ptx
    # no launch waits for another only because both may clear the flag
    before = [set() for _ in m["launches"]]
    for i, la in enumerate(m["launches"]):
        for d in la["after"]:
            before[i] |= before[d] | {d}
    assert any(j not in before[i] for i in checking for j in checking if j < i)


def test_on_nonfinite_raise_is_recorded_in_the_cuda_manifest(tmp_path):
    import latch
    from latch import optim
    from latch.artifact import read_artifact
    from latch.runtime import guard
    from models import make_mlp

    model, example = make_mlp(seed=0)
    prog = latch.compile(model, optim.AdamW(1e-2), example, target="cuda",
                         on_nonfinite="raise")
    prog.save(tmp_path / "r.latch")
    manifest, _ = read_artifact(tmp_path / "r.latch")
    assert manifest["options"]["on_nonfinite"] == "raise"
    assert guard.plan(manifest)[2] == "raise"
    manifest["options"]["on_nonfinite"] = "ignore"
    with pytest.raises(latch.LatchError, match="on_nonfinite"):
        guard.plan(manifest)


@pytest.mark.parametrize("policy", ["skip", "raise"])
def test_nonfinite_step_on_the_gpu_leaves_state_bitwise_unchanged(tmp_path, policy):
    """On a GPU: a NaN-input / inf-target step, after the graph is captured and as the first
    step, is skipped (skipped_steps == 1) or raises NonFiniteError; every state tensor, the
    step counter included, is bitwise unchanged, and later clean steps match a run that
    never saw it bitwise.  Compiles here when MLIR is available, else uses the prebuilt
    bench/artifacts/nonfinite-adamw_clip-<policy>.latch.  Skips without a GPU."""
    if not _has_gpu():
        pytest.skip("no CUDA GPU")
    import latch

    build = _bench_module("build_nonfinite_artifacts")
    gpu_nonfinite = _bench_module("gpu_nonfinite")
    model, clean, poison = build.batches()
    path = tmp_path / f"{policy}.latch"
    try:
        import mlir.ir  # noqa: F401
        latch.compile(model, build.rules()["adamw_clip"](), clean[0], target="cuda",
                      on_nonfinite=policy).save(path)
    except ImportError:
        path = os.path.join(ROOT, "bench", "artifacts", f"nonfinite-adamw_clip-{policy}.latch")
        if not os.path.exists(path):
            pytest.skip("no MLIR here and no prebuilt artifact")
    poison = {k: poison[k] for k in ("nan_input", "inf_target")}
    records = gpu_nonfinite.check_program(lambda: latch.load(path), policy, model, clean,
                                          poison, policy)
    assert len(records) == 4
    assert all(r["ok"] for r in records), [r["problems"] for r in records]
    assert all(r["step_counter"][0] == r["step_counter"][1] for r in records)


_VIEWS = {"memref.cast", "memref.collapse_shape", "memref.expand_shape",
          "memref.reinterpret_cast", "memref.view", "memref.subview"}


def _reads_before_writes(kernels_ir: str) -> list[str]:
    """Launches of the host function (after latch-form-kernels) that only read (memref.load,
    no memref.store in the same kernel) a buffer allocated in the function before any
    earlier launch of the step wrote it: such a kernel reads what the previous step left in
    the arena (or the arena's initial zeros), not a value of this step."""
    from mlir import ir

    import latch.dialect

    with ir.Context() as ctx:
        latch.dialect.load(ctx)
        m = ir.Module.parse(kernels_ir)
        access = {}       # (module, kernel) -> [set of "R"/"W"/other per argument]
        for op in m.body.operations:
            op = op.operation
            if op.name != "gpu.module":
                continue
            mname = ir.StringAttr(op.attributes["sym_name"]).value
            for f in op.regions[0].blocks[0].operations:
                f = f.operation
                if f.name != "gpu.func":
                    continue
                args = list(f.regions[0].blocks[0].arguments)
                root = {a: i for i, a in enumerate(args)}
                acc = [set() for _ in args]

                def walk(o, root=root, acc=acc):
                    if o.name in _VIEWS and o.operands[0] in root:
                        root[o.results[0]] = root[o.operands[0]]
                    elif o.name == "memref.store" and o.operands[1] in root:
                        acc[root[o.operands[1]]].add("W")
                    elif o.name == "memref.load" and o.operands[0] in root:
                        acc[root[o.operands[0]]].add("R")
                    else:
                        for v in o.operands:
                            if v in root:
                                acc[root[v]].add("W?")      # unknown: assume it writes
                    for r in o.regions:
                        for b in r.blocks:
                            for x in b.operations:
                                walk(x.operation)
                for b in f.regions[0].blocks:
                    for x in b.operations:
                        walk(x.operation)
                access[(mname, ir.StringAttr(f.attributes["sym_name"]).value)] = acc
        func = next(o.operation for o in m.body.operations if o.operation.name == "func.func")
        root, written, problems = {}, set(), []
        for o in func.regions[0].blocks[0].operations:
            o = o.operation
            if o.name == "memref.alloc":
                root[o.results[0]] = len(root)
            elif o.name in _VIEWS and o.operands[0] in root:
                root[o.results[0]] = root[o.operands[0]]
            elif o.name == "gpu.launch_func":
                mname, kname = str(o.attributes["kernel"]).lstrip("@").split("::@")
                acc = access[(mname, kname)]
                ops = list(o.operands)[-len(acc):]
                for i, v in enumerate(ops):
                    if v in root and acc[i] == {"R"} and root[v] not in written:
                        problems.append(f"@{mname} argument {i} ({v.type}) is read before "
                                        "this step writes it")
                for i, v in enumerate(ops):
                    if v in root and acc[i] - {"R"}:
                        written.add(root[v])
    return problems


@pytest.mark.parametrize("rule", [
    "adamw_clip",
    # every(2)'s 1-D grad_acc reset is a buffer select(update, zeros, acc + g) whose zeros
    # are filled inside the optimizer's branch: its copy must follow the hoisted fill
    "every2_adamw",
])
def test_no_kernel_reads_an_arena_buffer_before_it_is_written(monkeypatch, rule):
    import latch
    import latch.targets.cuda as cuda

    build = _bench_module("build_nonfinite_artifacts")
    seen = {}
    original = cuda.compile_update_module

    def spy(*args, **kw):
        out = original(*args, **kw)
        seen["kernels_ir"] = out[2]
        return out

    monkeypatch.setattr(cuda, "compile_update_module", spy)
    model, clean, _ = build.batches()
    latch.compile(model, build.rules()[rule](), clean[0], target="cuda")
    assert _reads_before_writes(seen["kernels_ir"]) == []


_WRAPPED_TO_LLVM = (
    "builtin.module(buffer-results-to-out-params{hoist-static-allocs=true "
    "modify-public-functions=true}, canonicalize, func.func(convert-linalg-to-loops), "
    "expand-strided-metadata, lower-affine, convert-scf-to-cf, latch-loops-to-llvm)")


@pytest.mark.parametrize("rule", ["adamw_clip", "every2_adamw"])
def test_wrapped_ir_runs_on_the_cpu_like_the_cpu_program(monkeypatch, rule):
    """The update after latch-wrap-host-compute{reduce-threads=0} (serial kernels, select
    copies, if-converted every(2) branches, all as loops on the CPU; each buffer a fresh
    malloc, so a read before the step's write reads garbage) JIT-compiled on the CPU gives
    the same new states and loss, bitwise, as the CPU target's lowering of the same update,
    over 4 chained steps (both sides of every(2)'s branch, twice)."""
    import ctypes

    import numpy as np
    from mlir import ir
    from mlir.execution_engine import ExecutionEngine

    import latch
    import latch.dialect
    import latch.targets.cuda as cuda
    from latch.passes.extract_launches import find_entry
    from latch.pipeline import run_pipeline
    from latch.targets import cpu

    build = _bench_module("build_nonfinite_artifacts")
    seen = {}
    original = cuda.compile_update_module

    def spy(module, *args, **kw):
        seen.setdefault("latch_ir", str(module))
        return original(module, *args, **kw)

    monkeypatch.setattr(cuda, "compile_update_module", spy)
    model, clean, _ = build.batches()
    latch.compile(model, build.rules()[rule](), clean[0], target="cuda")

    def lowered(ctx):
        m = ir.Module.parse(seen["latch_ir"])
        run_pipeline(m, "builtin.module(latch-lower-rules)")
        cuda._drop_dead_functions(m, None)
        return m, ir.StringAttr(find_entry(m.operation, None).attributes["sym_name"]).value

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m, name = lowered(ctx)
        reference = cpu.CpuExecutable(str(m), name)
        run_pipeline(m, "builtin.module(inline, latch-bufferize)")
        run_pipeline(m, "builtin.module(latch-wrap-host-compute{reduce-threads=0})")
        fn = find_entry(m.operation, None)
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        out_sigs = [(tuple(ir.MemRefType(t).shape), cpu._np_dtype(ir.MemRefType(t).element_type))
                    for t in ftype.results]
        fn.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        run_pipeline(m, _WRAPPED_TO_LLVM)
        engine = ExecutionEngine(m, opt_level=0, shared_libs=[cpu.runner_utils_lib()])
    entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.raw_lookup("_mlir_ciface_" + name))

    def wrapped(*arrays):
        outs = [np.empty(s, d) for s, d in out_sigs]
        ptrs = [ctypes.pointer(cpu._memref_descriptor(np.ascontiguousarray(a)))
                for a in (*arrays, *outs)]
        packed = (ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs])
        entry(packed)
        return outs

    rng = np.random.default_rng(0)
    n_states = len(reference.input_sigs) - 2
    states = [np.zeros(s, d) if d == np.int64 else
              (np.abs(rng.standard_normal(s)) * 0.1).astype(d)
              for s, d in reference.input_sigs[:n_states]]
    batch = [rng.standard_normal(s).astype(d) for s, d in reference.input_sigs[n_states:]]
    a, b = list(states), list(states)
    for step in range(4):
        out_a, out_b = reference(*a, *batch), wrapped(*b, *batch)
        assert len(out_a) == len(out_b) == n_states + 1
        for k, (x, y) in enumerate(zip(out_a, out_b)):
            assert np.array_equal(x, y), (step, k, float(np.max(np.abs(x - y))))
        a, b = out_a[:n_states], out_b[:n_states]


_HOST_BRANCH = """
func.func @f(%a: memref<4xf32>, %c: i1) -> memref<4xf32> {
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  return %a : memref<4xf32>
^bb2:
  return %a : memref<4xf32>
}
"""


def test_host_control_flow_in_the_schedule_names_the_branch():
    """A host function left with several blocks: the error names the first branch and where
    it is."""
    from mlir import ir

    from latch.errors import LatchError
    from latch.passes.extract_launches import extract_launch_schedule

    with ir.Context(), ir.Location.unknown():
        m = ir.Module.parse(_HOST_BRANCH)
        with pytest.raises(LatchError, match=r"@f: the host function has control flow .*"
                                             r"'cf\.cond_br' at loc\(.*3:3\)"):
            extract_launch_schedule(m.operation, "f")


_SELECT_OPERAND_WRITTEN_BETWEEN_USES = """
#id = affine_map<(d0) -> (d0)>
func.func @f(%a: memref<4xf32>, %b: memref<4xf32>, %c: i1) -> (memref<4xf32>, memref<4xf32>) {
  %zero = arith.constant 0.0 : f32
  %buf = memref.alloc() {latch.pinned} : memref<4xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : memref<4xf32>) outs(%buf : memref<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    linalg.yield %x : f32
  }
  %r = arith.select %c, %buf, %b : memref<4xf32>
  %x = memref.alloc() {latch.pinned} : memref<4xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%r : memref<4xf32>) outs(%x : memref<4xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  }
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]}
      outs(%buf : memref<4xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  %y = memref.alloc() {latch.pinned} : memref<4xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%r : memref<4xf32>) outs(%y : memref<4xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  }
  return %x, %y : memref<4xf32>, memref<4xf32>
}
"""


def test_buffer_select_whose_operand_changes_between_uses_is_a_clear_error():
    """A buffer select becomes one copy before the first use of its result; an operand
    written between two uses (the second use must see the new contents) cannot be
    expressed by one copy and is rejected, located at the write."""
    from mlir import ir

    from latch.pipeline import run_pipeline

    with ir.Context(), ir.Location.unknown():
        m = ir.Module.parse(_SELECT_OPERAND_WRITTEN_BETWEEN_USES)
        with pytest.raises(Exception, match=r":18:3: latch-wrap-host-compute: "
                                            r"'linalg\.generic' may write an operand of a "
                                            r"buffer select between the uses"):
            run_pipeline(m, "builtin.module(latch-wrap-host-compute)")


def test_parallel_ptx_serialization_gives_the_same_ptx():
    """serialize_kernels in two worker processes (groups of modules) gives byte-identical
    PTX to lowering every module in this process."""
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline
    from latch.targets.cuda import serialize_kernels

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        m = ir.Module.parse(_sgd_text())
        run_pipeline(m, "builtin.module(latch-lower-rules, latch-bufferize, "
                        "latch-form-kernels)")
        serial = serialize_kernels(m, "sm_90", "+ptx80", jobs=1)
        parallel = serialize_kernels(m, "sm_90", "+ptx80", jobs=2, min_per_job=1)
    assert len(serial) >= 4
    assert parallel == serial

def test_one_hot_products_of_the_moe_become_gathers(cuda_models):
    """The dense one-hot products the frontend makes of index_add (the MoE dispatch, one per
    MoE layer) and of the embedding gradients become gathers (passes/one_hot_gather.py):
    a kernel groups the sources by target row with integer atomic adds, one computes each
    output element from its row's sources; float atomics are left only to heavy rows (more
    sources than the table takes: the gather adds their sums by atomics) and the walks of
    the overflow lists, each a launch of _OVERFLOW_BLOCKS blocks after its gather
    (``gather-walk=launch``, the default) — not contractions over all rows x all sources."""
    from latch.passes.one_hot_gather import _OVERFLOW_BLOCKS
    from models import MoE

    model, _, prog = cuda_models["tiny_moe"]
    m = prog.manifest

    def ptx(la):
        return prog.files[m["modules"][la["module"]]]

    # (not the tickets of full sums finished by their last block: those fence, membar.gl)
    grouping = [la for la in m["launches"] if re.search(rb"\b(atom|red)\.global\.add\.u32", ptx(la))
                and b"membar.gl" not in ptx(la)]
    n_moe = sum(isinstance(mod, MoE) for mod in model.modules())
    # per MoE layer: the dispatch (forward) and the combine's backward, whose masks CSE had
    # made one shared buffer (latch-rematerialize-masks); + the embedding gradients
    assert n_moe >= 1 and len(grouping) >= 2 * n_moe + 1, len(grouping)
    assert not any(la["module"].startswith("latch_contract") for la in grouping)
    float_atomics = [la for la in m["launches"]
                     if re.search(rb"\b(atom|red)\.global\.add(\.v4)?\.f32", ptx(la))]
    walks = [la for la in float_atomics if la["grid"] == [_OVERFLOW_BLOCKS, 1, 1]]
    assert len(walks) >= len(grouping), [la["grid"] for la in float_atomics]
    assert all(la["grid"][1:] == [1, 1] for la in float_atomics)
    launches = m["launches"]
    for i, la in enumerate(launches):           # each walk right after its gather's launch
        if la in walks:
            assert i - 1 in la["after"] and launches[i - 1] in float_atomics, i


def test_deterministic_sums_scatters_in_fixed_point(cuda_models):
    """deterministic=True: no float atomics anywhere in the PTX (the scatter kernels add
    64-bit integers and take an atomic max of magnitudes: passes/fixed_point_scatter.py;
    still no contraction over all rows x all sources), recorded in the manifest and its
    build stages, and a different cache entry than the default program."""
    import latch
    from models import MODELS

    _, _, default = cuda_models["tiny_moe"]
    model, example = MODELS["tiny_moe"](seed=0)
    prog = latch.compile(model, _adamw_clip(), example, target="cuda", deterministic=True)
    m = prog.manifest
    assert m["options"]["deterministic"] is True
    assert "deterministic" not in default.manifest["options"]
    assert any("deterministic=true" in st for st in m["build"]["stages"])
    assert not any(re.search(rb"\b(atom|red)\.global\.add(\.v4)?\.f32", ptx)
                   for ptx in prog.files.values())
    ptx = b"".join(prog.files.values())
    assert re.search(rb"\b(atom|red)\.global\.add\.u64", ptx)
    assert re.search(rb"\b(atom|red)\.global\.max\.s32", ptx)
    assert len(m["launches"]) > len(default.manifest["launches"])    # four per scatter
    assert sum(la["module"].startswith("latch_contract") for la in m["launches"]) == \
        sum(la["module"].startswith("latch_contract") for la in default.manifest["launches"])
    assert any(re.search(rb"\b(atom|red)\.global\.add(\.v4)?\.f32", ptx)
               for ptx in default.files.values())      # the gathers' overflow walks
    assert [s["name"] for s in m["states"]] == [s["name"] for s in default.manifest["states"]]


def test_deterministic_must_be_a_bool():
    from latch.errors import LatchError
    from latch.options import CompileOptions

    with pytest.raises(LatchError, match="deterministic must be True or False"):
        CompileOptions(target="cuda", deterministic="yes")


def test_every_launch_lists_the_launches_it_must_follow(cuda_models):
    """Each launch's ``after`` (passes/launch_dependencies.py) names earlier launches only,
    and the update is not a chain: many launches need not wait for the one before them
    (the runtime runs those concurrently: latch.runtime.streams)."""
    _, _, prog = cuda_models["tiny_moe"]
    launches = prog.manifest["launches"]
    assert all("after" in la and all(0 <= d < i for d in la["after"])
               for i, la in enumerate(launches))
    assert sum(1 for i, la in enumerate(launches) if i and i - 1 not in la["after"]) > 10


def test_launches_beyond_cuda_grid_limits_are_a_compile_error():
    from mlir import ir

    import latch.dialect
    from latch.errors import LatchError
    from latch.passes.extract_launches import extract_launch_schedule

    text = '''module attributes {gpu.container_module} {
      gpu.module @k { gpu.func @f() kernel { gpu.return } }
      func.func @update() {
        %c1 = arith.constant 1 : index
        %big = arith.constant 70000 : index
        gpu.launch_func @k::@f blocks in (%c1, %big, %c1) threads in (%c1, %c1, %c1)
        return
      }
    }'''
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        m = ir.Module.parse(text)
        with pytest.raises(LatchError, match=r"k::f is launched with grid \[1, 70000, 1\]"):
            extract_launch_schedule(m.operation, "update")



@pytest.mark.parametrize("precision,instruction", [
    ("fp32", "fma.rn.f32"), ("bf16", ("mma.sync.aligned.m16n8k16", "wgmma.mma_async"))])
def test_every_matmul_of_the_mlp_is_a_contraction_kernel(precision, instruction):
    """The MLP's (8 -> 32 -> 32 -> 4) forward matmuls and backward ones (3 weight
    gradients, 2 input gradients) each launch a generated contraction kernel — tensor
    cores (wgmma where both operands are copied whole k-tiles of 64, else mma.sync) for bf16, FMA register tiles for fp32 (never TF32) — except the two
    that sum at most 8 terms per output (fc1's product over the 8 inputs, and the input
    gradient of fc3 over its 4 outputs): those are elementwise loops."""
    import latch
    from latch import optim
    sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
    from models import make_mlp

    model, example = make_mlp(0, batch=64)
    prog = latch.compile(model, optim.SGD(0.1), example, target="cuda", precision=precision)
    launches = [la for la in prog.manifest["launches"]
                if la["module"].startswith("latch_contract")]
    assert len(launches) == 6
    for la in launches:
        ptx = prog.files[prog.manifest["modules"][la["module"]]].decode()
        assert any(i in ptx for i in ((instruction,) if isinstance(instruction, str)
                                      else instruction)), la["module"]
        assert "tf32" not in ptx


def test_runtime_resolves_locations_and_builds_launches_without_a_gpu():
    """The address arithmetic shared by cuda programs and cuda functions: arena offsets,
    numbered buffers, byte offsets, and named errors for anything outside them."""
    import types

    import numpy as np

    from latch.errors import LatchError
    from latch.runtime.program import make_launches, resolve_location

    arena = types.SimpleNamespace(ptr=1000, nbytes=64)
    bufs = {"input": [types.SimpleNamespace(ptr=5000)],
            "output": [types.SimpleNamespace(ptr=7000), types.SimpleNamespace(ptr=8000)]}
    assert resolve_location({"arena": 16}, arena, bufs) == 1016
    assert resolve_location({"output": 1, "byte_offset": 4}, arena, bufs) == 8004
    with pytest.raises(LatchError, match="outside the arena"):
        resolve_location({"arena": 64}, arena, bufs)
    with pytest.raises(LatchError, match="output 2; there are 2"):
        resolve_location({"output": 2}, arena, bufs)
    with pytest.raises(LatchError, match="names no buffer of this artifact"):
        resolve_location({"state": 0}, arena, bufs)

    module = types.SimpleNamespace(function=lambda name: f"fn:{name}")
    spec = {"module": "m", "kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1],
            "args": [{"arena": 8, "type": "ptr"}, {"const": 3, "type": "i64"}]}
    (launch,) = make_launches([spec], {"m": module},
                              lambda loc: resolve_location(loc, arena, bufs))
    assert launch.function == "fn:k"
    assert list(launch.storage[:2]) == [np.uint64(1008), np.uint64(3)]
    with pytest.raises(LatchError, match="unknown kernel module 'x'"):
        make_launches([dict(spec, module="x")], {"m": module}, lambda loc: 0)


def test_every_kernel_waits_for_its_predecessors_before_touching_memory(cuda_models):
    """latch-dependent-launches: the manifest says ``dependent_launches`` only when every
    kernel's PTX begins (before its first global load or store) with
    ``griddepcontrol.launch_dependents`` and ``griddepcontrol.wait``; the runtime launches
    with programmatic stream serialization only then, and not under
    ``LATCH_DEPENDENT_LAUNCHES=0`` or when a module lacks the wait."""
    import re

    from latch.runtime.program import dependent_launches

    _, _, prog = cuda_models["tiny_moe"]
    m = prog.manifest
    assert m["dependent_launches"] is True
    for path in m["modules"].values():
        ptx = prog.files[path].decode()
        for entry in re.split(r"\.entry ", ptx)[1:]:
            body = entry[entry.index("{"):]
            wait = body.index("griddepcontrol.wait;")
            assert body.index("griddepcontrol.launch_dependents;") < wait
            first = re.search(r"\b(ld|st|atom|red|cp\.async|wgmma|cp\.async\.bulk)\.(global|"
                              r"shared::cluster)", body)
            assert first is None or first.start() > wait, path
    assert dependent_launches(m, prog.files)
    one = next(iter(m["modules"].values()))
    assert not dependent_launches(m, {**prog.files, one: b".entry k() { ret; }"})
    assert not dependent_launches({**m, "dependent_launches": False}, prog.files)
    os.environ["LATCH_DEPENDENT_LAUNCHES"] = "0"
    try:
        assert not dependent_launches(m, prog.files)
    finally:
        del os.environ["LATCH_DEPENDENT_LAUNCHES"]


def test_no_dependent_launches_before_hopper(tmp_path):
    from latch.artifact import read_artifact
    from latch.targets.cuda import compile_update_to_artifact

    for chip, expected in (("sm_80", False), ("sm_90", True)):
        path = tmp_path / f"{chip}.latch"
        compile_update_to_artifact(_sgd_text(), path, chip=chip)
        manifest, files = read_artifact(path)
        assert manifest["dependent_launches"] is expected
        assert all((b"griddepcontrol.wait" in files[p]) is expected
                   for p in manifest["modules"].values())


def test_manifest_refuses_dynamic_shared_memory_beside_static_arrays():
    """NVVM declares gpu.dynamic_shared_memory's array as a static one at the start of the
    kernel's shared memory, so static arrays beside it (gpu.all_reduce's) would overlap the
    dynamic buffer: the artifact is refused, naming the module and the arrays (the first
    staged-row loss kernel did this: non-finite gradients on the GPU).  Dynamic memory alone,
    or static arrays alone, pass."""
    from latch.errors import LatchError
    from latch.targets.cuda import check_shared_layout

    dyn = "\t.shared .align 16 .b8 __dynamic_shmem__0;\n"
    wg = "\t.shared .align 4 .b8 __wg_update_kernel_0[128];\n"
    check_shared_layout("update_kernel_1", ".version 8.4\n" + dyn + "\tret;\n")
    check_shared_layout("update_kernel_2", ".version 8.4\n" + wg + "\tret;\n")
    with pytest.raises(LatchError, match=r"update_kernel_3.*__wg_update_kernel_0"):
        check_shared_layout("update_kernel_3", ".version 8.4\n" + dyn + wg + "\tret;\n")
