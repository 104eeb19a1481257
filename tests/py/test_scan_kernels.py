"""latch-form-scan-kernels and the cuda target for compiled functions (rule None) with a
latch.scan: one kernel per scan, the carry in workgroup memory, a cuda-function artifact.

Without a GPU the kernel's numerics are checked by the SIMT interpreter of tests/py/simt.py
(every thread of every block in lock step, masked control flow, warp shuffles), which also
detects data races: an access to a workgroup or global element that another thread wrote
(or read, for a write) since the last ``gpu.barrier`` of the block — a barrier the pass
left out shows up as a race, not as luck.  With a GPU the artifact runs through
the runtime against eager PyTorch in float64."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import latch
from latch.errors import LatchError, PipelineError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gradlev_small import make_step  # noqa: E402
from simt import Race, Simt  # noqa: E402

ETA = 0.1


def _adapt_fn():
    step = make_step(ETA)

    def adapt(W0, q, k, v):
        return latch.scan(step, W0, (q, k, v))
    return adapt


def _inputs(H, D, T, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    W0 = torch.randn(H, D, D, generator=g, dtype=torch.float64) * 0.1
    qkv = [torch.randn(T, H, D, generator=g, dtype=torch.float64) / D ** 0.5 for _ in range(3)]
    return tuple(t.to(dtype) for t in (W0, *qkv))


def _rel(x, ref):
    x, ref = torch.as_tensor(x).double(), torch.as_tensor(ref).double()
    return float((x - ref).norm() / ref.norm())


def _bufferized(fn, inputs):
    """The function after latch-bufferize (text)."""
    from mlir import ir

    import latch.dialect
    from latch.frontend.importer import import_to_linalg
    from latch.frontend.trace import trace_function
    from latch.targets.cuda import _run

    text = import_to_linalg(trace_function(fn, inputs), func_name="main")
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        m = ir.Module.parse(text)
        _run(m, "builtin.module(inline, latch-bufferize)", "latch-bufferize")
        return str(m)


def _scan_kernel_module(text, pipeline="latch-form-scan-kernels"):
    from latch.pipeline import run_pipeline
    from mlir import ir

    import latch.dialect

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, f"builtin.module({pipeline})")
    return m, ctx


# -- the pass's output, interpreted (tests/py/simt.py) --------------------------------------

def _simulate(text, inputs):
    m, ctx = _scan_kernel_module(text)
    with ctx:
        return Simt(m).run([t.numpy() for t in inputs])


# -- the pass ---------------------------------------------------------------------------------

@pytest.mark.parametrize("H,D,T", [(2, 8, 16), (3, 64, 9), (200, 16, 5), (50, 64, 3)])
def test_scan_kernel_matches_float64(H, D, T):
    """The kernel the pass makes (interpreted thread by thread) computes the scan: within
    1e-5 of eager PyTorch in float64 for W and o, with no data race; (3, 64, 9) takes the
    warp-per-output reductions (64-long), (200, 16, 5) packs several problems per block,
    (50, 64, 3) both."""
    adapt = _adapt_fn()
    inputs = _inputs(H, D, T)
    W, o = _simulate(_bufferized(adapt, inputs), inputs)
    rW, ro = adapt(*(t.double() for t in inputs))
    assert _rel(W, rW) < 1e-5 and _rel(o, ro) < 1e-5, (_rel(W, rW), _rel(o, ro))


def test_simulator_catches_a_missing_barrier():
    """The interpreter is not lock-step lucky: with the barriers of the kernel removed it
    reports a race."""
    adapt = _adapt_fn()
    inputs = _inputs(2, 8, 4)
    m, ctx = _scan_kernel_module(_bufferized(adapt, inputs))
    with ctx:
        def walk(op):
            for r in op.regions:
                for b in r.blocks:
                    for o in list(b.operations):
                        if o.operation.name == "gpu.barrier":
                            o.operation.erase()
                        else:
                            walk(o.operation)
        walk(m.operation)
        with pytest.raises(Race):
            Simt(m).run([t.numpy() for t in inputs])


def test_one_launch_carry_in_workgroup_memory():
    adapt = _adapt_fn()
    inputs = _inputs(2, 8, 16)
    m, ctx = _scan_kernel_module(_bufferized(adapt, inputs))
    text = str(m)
    assert text.count("gpu.launch ") == 1
    assert "scf.for" in text and "gpu.barrier" in text
    assert "#gpu.address_space<workgroup>" in text
    host = text.split("gpu.launch ")[0]
    assert "scf.for" not in host and "linalg." not in text


def test_refuses_with_the_op_and_location():
    """An op the scan kernel does not support is named, with its location."""
    from mlir import ir

    text = _bufferized(_adapt_fn(), _inputs(2, 8, 4))
    # a call inside the loop body (not supported), before its first linalg op
    first = text.index("linalg.generic", text.index("scf.for"))
    bad = text[:first] + "func.call @opaque() : () -> ()\n      " + text[first:]
    bad = bad.replace("module {", "module {\n  func.func private @opaque()", 1)
    with pytest.raises((LatchError, ir.MLIRError)) as e:
        _scan_kernel_module(bad)
    msg = str(e.value) + " ".join(str(d.message) for d in getattr(e.value, "error_diagnostics", []))
    assert "func.call" in msg and "latch-form-scan-kernels" in msg


def test_refuses_too_much_workgroup_memory():
    from mlir import ir

    text = _bufferized(_adapt_fn(), _inputs(1, 64, 4))
    with pytest.raises((LatchError, ir.MLIRError)) as e:
        _scan_kernel_module(text, "latch-form-scan-kernels{max-shared=256}")
    msg = str(e.value) + " ".join(str(d.message) for d in getattr(e.value, "error_diagnostics", []))
    assert "max-shared=256" in msg and "workgroup memory" in msg


# -- the cuda target --------------------------------------------------------------------------

def _compile_cuda(H, D, T):
    return latch.compile(_adapt_fn(), None, _inputs(H, D, T), target="cuda")


@pytest.fixture(scope="module")
def small_cuda(tmp_path_factory):
    return _compile_cuda(2, 8, 16)


def test_cuda_function_artifact(small_cuda, tmp_path):
    m = small_cuda.manifest
    assert m["kind"] == "cuda-function"
    assert len(m["launches"]) == 1, m["launches"]
    launch = m["launches"][0]
    assert launch["block"][0] == 256 and launch["grid"][0] >= 1
    ptx = small_cuda.files[m["modules"][launch["module"]]].decode()
    assert ".shared" in ptx and "bar.sync" in ptx
    assert [o["shape"] for o in m["outputs"]] == [[2, 8, 8], [16, 2, 8]]
    a, b = tmp_path / "a.latch", tmp_path / "b.latch"
    small_cuda.save(a)
    _compile_cuda(2, 8, 16).save(b)
    assert a.read_bytes() == b.read_bytes()


def test_cuda_function_loads_without_mlir(small_cuda, tmp_path):
    """The artifact reads back on the runtime side (kind cuda-function); without a GPU
    running it says so."""
    from latch.artifact import read_artifact

    path = tmp_path / "f.latch"
    small_cuda.save(path)
    manifest, files = read_artifact(path)
    assert manifest["kind"] == "cuda-function" and manifest["out_tree"]
    if not torch.cuda.is_available():
        with pytest.raises(LatchError, match="GPU"):
            small_cuda(*_inputs(2, 8, 16))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("H,D,T", [(2, 8, 16), (12, 64, 64)])
def test_cuda_function_numerics_on_gpu(H, D, T, tmp_path):
    from latch.runtime.function import CudaFunction

    fn = _compile_cuda(H, D, T)
    path = tmp_path / "f.latch"
    fn.save(path)
    run = CudaFunction.load(path)
    inputs = _inputs(H, D, T)
    W, o = run(*(t.cuda() for t in inputs))
    rW, ro = _adapt_fn()(*(t.double() for t in inputs))
    assert _rel(W.cpu(), rW) <= 1e-4 and _rel(o.cpu(), ro) <= 1e-4
    with pytest.raises(LatchError, match="shape|dtype"):
        run(*(t.cuda() for t in _inputs(H, D, T + 1)))


def test_function_cuda_rejects_bad_precision():
    with pytest.raises(LatchError, match="precision"):
        latch.compile(_adapt_fn(), None, _inputs(2, 8, 4), target="cuda", precision="bf16")


def test_pipeline_error_type():
    assert issubclass(PipelineError, LatchError)


def test_cuda_function_cache_hit_gives_the_same_artifact(cache_dir, tmp_path):
    """A second compile of the same scan is a cache hit that rebuilds the cuda handle (not
    a 'corrupted entry' recompiled), with the same bytes."""
    from latch.function import CudaFunctionHandle

    first = _compile_cuda(2, 8, 16)
    second = _compile_cuda(2, 8, 16)
    assert first.manifest["cache"]["status"] == "miss"
    assert second.manifest["cache"]["status"] == "hit", second.manifest["cache"]
    assert isinstance(second, CudaFunctionHandle)
    a, b = tmp_path / "a.latch", tmp_path / "b.latch"
    first.save(a)
    second.save(b)
    assert a.read_bytes() == b.read_bytes()
