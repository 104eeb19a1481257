"""CPU target tests: the three reference models' loss and gradients, compiled through
trace → torch-mlir → linalg → LLVM → JIT, against PyTorch in float64."""
import os
import sys
import time

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402

from latch.errors import LatchError  # noqa: E402
from latch.frontend import import_to_linalg, trace_loss_and_grads  # noqa: E402
from latch.targets.cpu import CPU_PIPELINE, CpuExecutable, compile_function  # noqa: E402

RTOL_FP32 = 1e-5
TIMINGS = {}


def rel_l2(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def reference_fp64(model, inputs):
    """PyTorch loss and gradients in float64 (a float64 copy of the model)."""
    import copy
    md = copy.deepcopy(model).double()
    ins = [x.double() if x.is_floating_point() else x for x in inputs]
    loss = md(*ins)
    grads = torch.autograd.grad(loss, list(md.parameters()))
    return [loss.detach().numpy()] + [g.numpy() for g in grads]


# LLVM -O2 on the unrolled joint graphs takes 15-30 s for the two transformers; the MLP is
# checked at the default opt_level=2, the transformers at 0 to keep the suite fast.
OPT_LEVEL = {"mlp": 2, "char_lm": 0, "tiny_moe": 0}


def build(name, seed=0, precision="fp32"):
    model, inputs = models.MODELS[name](seed)
    t0 = time.perf_counter()
    traced = trace_loss_and_grads(model, inputs, precision=precision)
    t1 = time.perf_counter()
    text = import_to_linalg(traced)
    t2 = time.perf_counter()
    exe = CpuExecutable(text, "loss_and_grads", opt_level=OPT_LEVEL[name])
    t3 = time.perf_counter()
    params = [p.detach().numpy() for p in model.parameters()]
    outs = exe(*params, *[x.numpy() for x in inputs])
    t4 = time.perf_counter()
    TIMINGS[(name, precision)] = dict(trace=t1 - t0, imprt=t2 - t1, compile=t3 - t2, first_run=t4 - t3)
    return dict(model=model, inputs=inputs, traced=traced, text=text, exe=exe, outs=outs)


@pytest.fixture(scope="module", params=["mlp", "char_lm", "tiny_moe"])
def compiled(request):
    return request.param, build(request.param)


def test_loss_and_grads_match_fp64(compiled):
    name, c = compiled
    ref = reference_fp64(c["model"], c["inputs"])
    names = ["loss"] + [f"grad.{n}" for n in c["traced"].param_names]
    assert len(c["outs"]) == len(ref) == len(names)
    errs = {}
    for n, a, b in zip(names, c["outs"], ref):
        assert a.shape == b.shape, n
        assert a.dtype == np.float32, n
        errs[n] = rel_l2(a, b)
    worst = max(errs, key=errs.get)
    print(f"\n{name}: worst relative L2 {errs[worst]:.3e} ({worst}); timings {TIMINGS.get((name, 'fp32'))}")
    bad = {n: e for n, e in errs.items() if e > RTOL_FP32}
    assert not bad, bad


def test_repeat_call_is_stable_and_inputs_untouched(compiled):
    name, c = compiled
    params = [p.detach().numpy().copy() for p in c["model"].parameters()]
    ins = [x.numpy().copy() for x in c["inputs"]]
    before = [a.copy() for a in params + ins]
    outs = c["exe"](*params, *ins)
    for a, b in zip(outs, c["outs"]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(params + ins, before):
        np.testing.assert_array_equal(a, b)


def test_shape_mismatch_raises_before_launch(compiled):
    name, c = compiled
    params = [p.detach().numpy() for p in c["model"].parameters()]
    ins = [x.numpy() for x in c["inputs"]]
    with pytest.raises(LatchError):
        c["exe"](*params[:-1], *ins)
    bad = list(params)
    bad[0] = bad[0].astype(np.float64)
    with pytest.raises(LatchError):
        c["exe"](*bad, *ins)


# ----------------------------------------------------------------------------- bf16
def torch_autocast_reference(model, inputs):
    """PyTorch's own bf16 autocast loss and gradients (fp32 master weights)."""
    import copy
    m = copy.deepcopy(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = m(*inputs)
    grads = torch.autograd.grad(loss, list(m.parameters()))
    return [loss.detach().float().numpy()] + [g.float().numpy() for g in grads]


@pytest.mark.parametrize("name", ["mlp", "char_lm", "tiny_moe"])
def test_bf16_autocast(name):
    """precision="bf16": matmuls in bf16 as torch.autocast does, fp32 master weights.

    The numerics policy: the loss and every gradient against the FP64 reference, relative
    L2 <= 0.08 and no worse than 3x eager PyTorch bf16 (torch.autocast) on the same state.
    "3x" gets an absolute slack of 0.005 (a tensor PyTorch gets to 0.002 may be 0.006 here:
    bf16 rounding of a bias-gradient sum, far inside 0.08).  Where PyTorch's own bf16 error
    already exceeds 0.08 (mini TinyMoE at this state: top-2 routing decisions flip under
    bf16 rounding, which changes every gradient by ~0.2 for PyTorch and Latch alike), 0.08 is
    unattainable for any bf16 program and only the 3x bound applies; those tensors are
    printed, and the program is then also checked directly against torch.autocast."""
    c = build(name, precision="bf16")
    assert "bf16" in c["text"]
    assert all(o.dtype == np.float32 for o in c["outs"])
    fp64 = reference_fp64(c["model"], c["inputs"])
    eager = torch_autocast_reference(c["model"], c["inputs"])
    names = ["loss"] + [n for n, _ in c["model"].named_parameters()]
    bad, beyond = {}, {}
    for n, got, ref, tb in zip(names, c["outs"], fp64, eager):
        ours, theirs = rel_l2(got, ref), rel_l2(tb, ref)
        if ours > 3 * theirs + 0.005:
            bad[n] = (ours, theirs)
        elif ours > 0.08:
            if theirs > 0.08:
                beyond[n] = (ours, theirs)
            else:
                bad[n] = (ours, theirs)
    worst = max(rel_l2(g, r) for g, r in zip(c["outs"], fp64))
    print(f"\n{name} bf16: worst relative L2 vs fp64 {worst:.3e}; beyond 0.08 where torch "
          f"bf16 is too (latch, torch): {beyond}")
    assert not bad, f"(latch, torch bf16) relative L2 vs fp64: {bad}"
    if beyond:
        same = max(rel_l2(g, t) for g, t in zip(c["outs"], eager))
        print(f"{name} bf16: worst relative L2 vs torch.autocast {same:.3e}")
        assert same <= 0.05


def test_tiny_moe_drops_slots():
    """The reference inputs exercise capacity dropping (some expert is over capacity)."""
    import math
    model, (idx, tgt) = models.make_tiny_moe(0)
    moe = model.layers[0].moe
    with torch.no_grad():
        B, T = idx.shape
        x = model.tok(idx) + model.pos(torch.arange(T))
        h = model.layers[0].norm1(x)  # noqa: F841 (only checks the router on layer 0 input)
        xin = model.layers[0].norm2(x).reshape(B * T, -1)
        probs = torch.softmax(moe.router(xin), -1)
        top_e = torch.topk(probs, moe.k, -1).indices.reshape(-1)
        counts = torch.bincount(top_e, minlength=moe.E)
    C = math.ceil(1.25 * B * T * moe.k / moe.E)
    assert int(counts.max()) > C


def test_cpu_pipeline_string_alone_runs_the_model(compiled):
    """CPU_PIPELINE as one textual pipeline (the named Latch pipelines, i1 widening
    included) gives the same results as the two-stage default."""
    name, c = compiled
    exe = CpuExecutable(c["text"], "loss_and_grads", opt_level=0, pipeline=CPU_PIPELINE)
    params = [p.detach().numpy() for p in c["model"].parameters()]
    outs = exe(*params, *[x.numpy() for x in c["inputs"]])
    for a, b in zip(outs, c["outs"]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_cpu_pipeline_text():
    from latch.pipeline import expand

    assert CPU_PIPELINE.startswith("builtin.module(")
    steps = " ".join(s if kind == "mlir" else s.name for kind, s in expand(CPU_PIPELINE))
    for p in ("one-shot-bufferize", "bufferize-function-boundaries", "latch-plan-memory",
              "buffer-deallocation-pipeline", "convert-linalg-to-loops",
              "latch-widen-i1-memrefs", "reconcile-unrealized-casts"):
        assert p in steps


# ----------------------------------------------------------------------------- functions
def _fn(x, idx, mask):
    s = x.sum()                                           # rank-0 result
    y = torch.where(mask.unsqueeze(-1), x * 2.0, x - 1.0)
    g = y[idx]                                            # gather with i64 indices
    return s, torch.tanh(g).mean(-1), idx * 3, mask.logical_not()


@pytest.fixture(scope="module")
def compiled_fn():
    torch.manual_seed(0)
    ex = (torch.randn(5, 3), torch.tensor([4, 0, 2, 2]), torch.tensor([True, False, True, False,
                                                                      True]))
    return compile_function(_fn, ex), ex


def test_compile_function_matches_torch(compiled_fn):
    f, ex = compiled_fn
    torch.manual_seed(1)
    args = (torch.randn(5, 3), torch.tensor([1, 3, 3, 0]),
            torch.tensor([False, True, True, False, False]))
    got = f(*args)
    want = _fn(*args)
    assert isinstance(got, tuple) and len(got) == 4
    assert got[0].shape == () and got[0].dtype == torch.float32
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got[1], want[1], rtol=1e-6, atol=1e-6)
    assert got[2].dtype == torch.int64 and torch.equal(got[2], want[2])
    assert got[3].dtype == torch.bool and torch.equal(got[3], want[3])


def test_compile_function_module_constants():
    model, (x, y) = models.make_mlp(0)

    class Pred(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m.fc3(torch.nn.functional.gelu(self.m.fc1(x)))

    pred = Pred(model)
    f = compile_function(pred, (x,))
    torch.testing.assert_close(f(x), pred(x).detach(), rtol=1e-5, atol=1e-6)


def test_no_leak_across_calls(compiled):
    """Repeated calls do not grow the process (internal buffers are deallocated, the caller
    owns the outputs, descriptor classes are cached)."""
    import gc
    import resource
    name, c = compiled
    params = [p.detach().numpy() for p in c["model"].parameters()]
    ins = [x.numpy() for x in c["inputs"]]
    for _ in range(20):
        c["exe"](*params, *ins)
    gc.collect()
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(200):
        c["exe"](*params, *ins)
    gc.collect()
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - r0
    assert grown_kb < 8 * 1024, grown_kb


def _many_ops(x, y, i):
    """One function touching many of the ops in SUPPORTED_OPS (forward only)."""
    import torch.nn.functional as F
    b = x > 0
    return (
        x.abs(), x.amax(1), x.amin(0), b.any(), b.any(1), b.all(0), x.argmax(1), x.argmin(1),
        b | (y > 0), b ^ (y > 0), x.ceil(), x.floor(), torch.clamp(x, y, y + 1),
        x.clamp(max=0.5), x.clamp(min=0.1), F.pad(x, (1, 2)), x.cos(), x.sin(),
        torch.div(x, y.abs() + 1, rounding_mode="floor"), x.expm1(), x.abs().log1p(),
        x >= y, x <= y, x != y, x.index_select(0, i), x[i], torch.maximum(x, y),
        torch.minimum(x, y), x.min(1).values, x.abs().pow(y), torch.pow(2.0, x),
        (x.abs() + 1).reciprocal(), x.relu(), x.remainder(2.0), x[1], x.sigmoid(), x.sign(),
        x[:, 1:4], x.split(2, 1)[1], x.abs().sqrt(), x.tanh(), x.t(), torch.stack([x, y]),
        x.repeat(2, 1), x.flip(0), x.isnan(), torch.linalg.vector_norm(x), x.cumsum(1),
        x.topk(3, 1).values, x.topk(3, 1).indices,
        torch.zeros(5, 6).index_add(0, torch.tensor([0, 4, 4, 1]), x),
        torch.zeros(5, 6).index_put((i,), x[:3], accumulate=True),
        torch.zeros(5, 6).scatter_add(0, (i.view(3, 1) + 1).expand(3, 6), x[:3]),
        F.one_hot(i, 5), F.silu(x), F.softplus(x), F.logsigmoid(x), F.layer_norm(x, (6,)),
        F.rms_norm(x, (6,)), x.var(1), x.softmax(1), x.log_softmax(1),
        F.binary_cross_entropy_with_logits(x, y.sigmoid()), F.smooth_l1_loss(x, y),
    )


def test_many_ops_match_torch():
    torch.manual_seed(3)
    ex = (torch.randn(4, 6), torch.randn(4, 6), torch.tensor([0, 2, 3]))
    f = compile_function(_many_ops, ex, opt_level=0)
    got, want = f(*ex), _many_ops(*ex)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, k
        if w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, msg=f"output {k}")
        else:
            assert torch.equal(g, w), k
