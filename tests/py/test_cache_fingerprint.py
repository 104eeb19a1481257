"""The compile cache's fingerprint (latch/frontend/fingerprint.py): what changes it, what
makes it decline (the cache then traces), that it leaves the model and torch as they were,
and that a warm hit in a new process finds its entry without tracing and gives the same
program.  (How long such a hit takes is measured by bench/compile_time.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import latch
from latch import optim
from latch.frontend.fingerprint import (NotFingerprintable, fingerprint_function,
                                        fingerprint_loss_and_grads)
from models import make_mlp

HERE = os.path.dirname(os.path.abspath(__file__))
X = torch.randn(3, 4)
ONES, TWOS = torch.ones(4), torch.full((4,), 2.0)


class Net(nn.Module):
    """A Linear layer and a buffer around ``body(self, x)``, which returns the loss."""

    def __init__(self, body, buffer=None):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.body = body
        self.register_buffer("buf", torch.ones(4) if buffer is None else buffer)

    def forward(self, x):
        return self.body(self, x)


def digest(body, **kw) -> str:
    return fingerprint_loss_and_grads(Net(body, **kw), (X,)).digest


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_equal_for_the_same_computation_whatever_the_values():
    body = lambda m, x: F.gelu(m.lin(x)).square().mean()  # noqa: E731
    a = fingerprint_loss_and_grads(Net(body), (X,))
    b = fingerprint_loss_and_grads(Net(body), (torch.randn(3, 4),))    # other weights, data
    assert a == b and a.calls > 0 and len(a.digest) == 64


@pytest.mark.parametrize("one, other", [
    (lambda m, x: F.gelu(m.lin(x)).mean(), lambda m, x: F.relu(m.lin(x)).mean()),
    (lambda m, x: (m.lin(x) * 2.0).mean(), lambda m, x: (m.lin(x) * 2.0000001).mean()),
    (lambda m, x: (m.lin(x) * 2).mean(), lambda m, x: (m.lin(x) * 2.0).mean()),
    (lambda m, x: m.lin(x).sum(), lambda m, x: m.lin(x).sum(0).sum()),
    (lambda m, x: (m.lin(x) * ONES).mean(), lambda m, x: (m.lin(x) * TWOS).mean()),
    (lambda m, x: (m.lin(x) * m.buf).mean(), lambda m, x: (m.lin(x) * m.buf.detach()).mean()),
    (lambda m, x: (m.lin(x) * m.lin(x)).mean(),                     # grad flows through both
     lambda m, x: (m.lin(x) * m.lin(x).detach()).mean()),
    (lambda m, x: m.lin(x).square().mean(),
     lambda m, x: _no_grad_then(m, x)),
    (lambda m, x: m.lin(x).square().mean(),
     lambda m, x: _autocast_then(m, x)),
], ids=["op", "float", "int-vs-float", "reduction", "closure-constant", "detach",
        "detach-in-grad", "no_grad", "autocast"])
def test_a_different_computation_changes_it(one, other):
    assert digest(one) != digest(other)


def _no_grad_then(m, x):
    with torch.no_grad():
        h = m.lin(x)
    return h.square().mean()


def _autocast_then(m, x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = m.lin(x)
    return h.float().square().mean()


def test_buffer_values_change_it():
    body = lambda m, x: (m.lin(x) * m.buf).mean()  # noqa: E731
    assert digest(body, buffer=ONES) != digest(body, buffer=TWOS)


def _twice(t: torch.Tensor) -> torch.Tensor:
    return t * 2


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    SCRIPTED = torch.jit.script(_twice)


def _catches(m, x):
    h = m.lin(x)
    try:
        bool(h.sum() > 0)
    except Exception:  # noqa: BLE001 - the model hides the refusal: still refused
        pass
    return h.mean()


def _saved_tensor_hooks(m, x):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        return m.lin(x).square().mean()


def _repeat(m, x):
    return latch.repeat(m.lin, x, 2).mean()


@pytest.mark.parametrize("body", [
    lambda m, x: m.lin(x).mean() if m.lin(x).sum() > 0 else m.lin(x).sum(),  # a value
    lambda m, x: m.lin(x).mean() * float(x.max()),
    lambda m, x: m.lin(x).mean() + len(repr(x)),                             # print(t)
    lambda m, x: m.lin(x).mean() * x.stride(0),                              # layout
    lambda m, x: m.lin(x).mean() if m.lin(x).is_contiguous() else x.sum(),
    lambda m, x: m.lin(x).mean() + x.numpy().sum(),
    lambda m, x: m.lin(x)[m.lin(x) > 0].sum(),                               # boolean mask
    lambda m, x: _Double.apply(m.lin(x)).mean(),                             # custom backward
    lambda m, x: m.lin(x).register_hook(lambda g: g * 2) or m.lin(x).mean(),
    lambda m, x: (m.lin(x) * ONES.add_(0)).mean(),                        # writes a constant
    lambda m, x: (m.lin(x)[:, :2] * ONES[:2].mul_(1)).mean(),                # a view of it
    lambda m, x: SCRIPTED(m.lin(x)).mean(),                                  # TorchScript
    _catches, _saved_tensor_hooks, _repeat,
], ids=["bool", "float", "repr", "stride", "is_contiguous", "numpy", "mask", "Function",
        "hook", "in-place-constant", "in-place-view", "torchscript", "caught", "saved-hooks",
        "latch.repeat"])
def test_declines_what_a_fake_tensor_would_not_show(body):
    before = ONES.clone()
    with pytest.raises(NotFingerprintable):
        digest(body)
    assert torch.equal(ONES, before)


def test_a_model_too_large_to_run_eagerly_runs_on_fake_tensors(monkeypatch):
    """Above MAX_WORK the run uses fake tensors: same record for the same model, a different
    one when the model changes, the model untouched, value-dependent code still declined."""
    import latch.frontend.fingerprint as fp

    calls = []
    real_run = fp._run

    def spy(*args, **kwargs):
        calls.append(kwargs.get("fake"))
        return real_run(*args, **kwargs)
    monkeypatch.setattr(fp, "_run", spy)
    x = (torch.randn(512, 1000),)
    big = nn.Sequential(nn.Linear(1000, 1000), nn.Flatten(0))
    before = big[0].weight.detach().clone()
    a = fingerprint_function(big, x).digest
    assert calls == ["meta"]
    assert fingerprint_function(big, x).digest == a
    assert torch.equal(big[0].weight, before)
    other = nn.Sequential(nn.Linear(1000, 1000), nn.ReLU(), nn.Flatten(0))
    other[0].load_state_dict(big[0].state_dict())
    assert fingerprint_function(other, x).digest != a

    class ValueDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1000, 1000)

        def forward(self, x):
            y = self.lin(x)
            return y.sum() if bool(y.sum() > 0) else -y.sum()
    with pytest.raises(NotFingerprintable):
        fingerprint_function(ValueDependent(), x)
    # below the bound the same model runs eagerly, a record of another kind
    monkeypatch.setattr(fp, "MAX_WORK", 1 << 40)
    assert fingerprint_function(big, x).digest != a
    assert calls[-1] is None


def _records(monkeypatch, fake: str, fingerprint) -> list:
    """The record (without its header) of ``fingerprint()`` run on fake tensors of kind
    ``fake`` ("meta": the light run; "torch": FakeTensorMode)."""
    import latch.frontend.fingerprint as fp
    entries = []
    write = fp._Recorder.write

    def spy(self, entry):
        entries.append(json.loads(fp._canonical(entry)))
        write(self, entry)
    monkeypatch.setattr(fp._Recorder, "write", spy)
    monkeypatch.setattr(fp, "MAX_WORK", 0)
    monkeypatch.setattr(fp, "FAKE", fake)
    fingerprint()
    assert entries[0][-3] == f"fake-{fake}"
    return entries[1:]


def _scalars_views_in_place(m, x):
    h = m.lin(x)
    s = h.sum() * 0.5 + 2                            # 0-dim tensor with Python scalars
    z = torch.zeros(4, device=x.device).add_(1)      # a factory, written in place
    v = h.t()[1:].unsqueeze(0)                       # views
    v.mul_(2)                                        # written through a view
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = h @ h.t() + z[:3]
    return (v.float().mean() + s + a.float().sum() + h.new_ones(()) * m.buf.sum()).mean()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("make", ["tiny_moe", "char_lm", "mlp", "body"])
def test_the_light_fake_run_records_what_fake_tensor_mode_records(monkeypatch, make,
                                                                  precision):
    """The light fake run (meta tensors that say they are on the cpu, no torch._dynamo) makes
    the same record as a run on torch's FakeTensorMode: the same calls, and results of the
    same shapes, dtypes (autocast included), devices and requires_grad."""
    import models
    if make == "body":
        model, example = Net(_scalars_views_in_place), (X,)
    else:
        model, example = getattr(models, f"make_{make}")(seed=0)
    run = lambda: fingerprint_loss_and_grads(model, example, precision)  # noqa: E731
    light = _records(monkeypatch, "meta", run)
    assert light == _records(monkeypatch, "torch", run)
    assert len(light) > 5 and any("bfloat16" in json.dumps(e) for e in light) == (
        precision == "bf16" or make == "body")


@pytest.mark.parametrize("body", [
    lambda m, x: (m.lin(x).unsqueeze_(0) * 2).mean(),                 # shape, in place
    lambda m, x: (m.lin(x) + torch.ones(4, device="meta")).mean(),     # another device
    lambda m, x: m.lin(x.to("meta")).mean(),
    lambda m, x: (m.lin(x) * torch.ones(4).to_sparse()).mean(),        # a sparse constant
], ids=["unsqueeze_", "meta-factory", "to-meta", "sparse"])
def test_the_light_fake_run_declines_what_it_could_answer_otherwise(monkeypatch, body):
    import latch.frontend.fingerprint as fp
    monkeypatch.setattr(fp, "MAX_WORK", 0)
    with pytest.raises(NotFingerprintable):
        digest(body)


LIGHT_CHILD = r"""
import json, sys
sys.path.insert(0, {here!r})
import torch
import latch.frontend.fingerprint as fp
from latch.frontend.fingerprint import NotFingerprintable, fingerprint_loss_and_grads
from models import make_tiny_moe

fp.MAX_WORK = 0
model, example = make_tiny_moe(seed=0)
out = {{"digest": fingerprint_loss_and_grads(model, example, "bf16").digest,
        "dynamo": "torch._dynamo" in sys.modules}}


class AsksDynamo(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x) + 1.0
        return y.mean() * (2 if torch._dynamo.config.verbose else 3)


try:
    fingerprint_loss_and_grads(AsksDynamo(), (torch.randn(3, 4),))
    out["asks"] = "fingerprinted"
except NotFingerprintable as e:
    out["asks"] = str(e)
import torch._dynamo
out["real"] = hasattr(torch._dynamo, "optimize") and hasattr(torch._dynamo.config, "verbose")
out["compiled"] = torch.compile(lambda t: (t + 1) * 2, backend="eager")(torch.ones(2)).tolist()
out["again"] = fingerprint_loss_and_grads(model, example, "bf16").digest
print(json.dumps(out))
"""


def test_the_light_fake_run_does_not_import_dynamo(tmp_path):
    """In a new process the light run imports no torch._dynamo (1.2 s), gives the same digest
    as when torch._dynamo is imported, refuses a model that asks torch._dynamo for anything,
    and leaves torch._dynamo importable and working."""
    p = subprocess.run([sys.executable, "-c", LIGHT_CHILD.format(here=HERE)],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["dynamo"] is False
    assert "torch._dynamo.config is asked for" in out["asks"]
    assert out["real"] and out["compiled"] == [4.0, 4.0]
    assert out["again"] == out["digest"]


def test_leaves_the_model_the_inputs_and_torch_as_they_were():
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.norm = nn.BatchNorm1d(4)          # training mode: updates running stats

        def forward(self, x):
            x.mul_(2)                               # in place, on the (copied) input
            return F.dropout(self.norm(self.lin(x)), 0.5).square().mean()

    model, x = Noisy(), torch.randn(3, 4)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x0, rng, threads = x.clone(), torch.get_rng_state(), torch.get_num_threads()
    fingerprint_loss_and_grads(model, (x,))
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert torch.equal(x, x0) and torch.equal(torch.get_rng_state(), rng)
    assert torch.get_num_threads() == threads
    assert not torch.fx._symbolic_trace._is_fx_tracing_flag


def _asks(x):
    """Takes one path under Latch's trace (and its fingerprint run), another in eager."""
    traced = torch.fx._symbolic_trace._is_fx_tracing_flag
    on_cpu = x.device.type == "cpu" and x.is_cpu
    return x * (2 if traced and on_cpu and not torch.is_grad_enabled() else 3)


def test_the_run_sees_what_the_trace_sees(monkeypatch):
    """Python code that asks about the tracing environment gets the trace's answers, so
    that it takes the path the trace takes: it records like code that always takes it."""
    asks = _asks

    def takes(k):
        def f(x):
            x.device, x.is_cpu                          # the same queries, answers unused
            return x * k
        return f

    x = torch.randn(4)
    assert fingerprint_function(asks, (x,)) == fingerprint_function(takes(2), (x,))
    assert fingerprint_function(asks, (x,)) != fingerprint_function(takes(3), (x,))

    def grad_mode(m, x):
        trained = torch.is_grad_enabled() and m.lin.weight.requires_grad
        return m.lin(x).mean() * (2 if trained else 3)

    def twice(m, x):
        m.lin.weight.requires_grad
        return m.lin(x).mean() * 2
    assert digest(grad_mode) == digest(twice)

    monkeypatch.setenv("LATCH_CACHE", "0")                 # and the trace does take it
    assert torch.equal(latch.compile(asks, None, (x,))(x), x * 2)


def test_a_function_fingerprint_holds_its_output_structure():
    a, b = torch.randn(3), torch.randn(3)
    one = fingerprint_function(lambda p, q: {"s": p + q, "p": p * q}, (a, b))
    other = fingerprint_function(lambda p, q: (p + q, p * q), (a, b))
    assert one.digest != other.digest
    assert torch.utils._pytree.tree_unflatten([1, 2], one.out_treedef) == {"s": 1, "p": 2}


# ----------------------------------------------------------------------------- the cache
def test_a_hit_by_fingerprint_does_not_trace(cache_dir, monkeypatch):
    import latch.frontend.trace as trace
    model, example = make_mlp(seed=0)
    first = latch.compile(model, optim.SGD(0.1), example)
    assert "trace" in first.manifest["compile_seconds"]
    monkeypatch.setattr(trace, "trace_loss_and_grads",
                        lambda *a, **k: pytest.fail("a fingerprint hit traced"))
    second = latch.compile(model, optim.SGD(0.1), example)
    assert second.manifest["cache"] == first.manifest["cache"] | {"status": "hit",
                                                                   "reason": None}
    assert set(second.manifest["compile_seconds"]) == {"fingerprint", "cache-lookup",
                                                       "cache-load+jit"}


def test_a_model_without_fingerprint_still_hits_by_its_traced_key(cache_dir):
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            h = self.lin(x)
            return h.square().mean() * (x.stride(0) // 4)  # a layout query: no fingerprint

    model = Branchy()
    latch.compile(model, optim.SGD(0.1), (X,))
    again = latch.compile(model, optim.SGD(0.1), (X,))
    assert again.manifest["cache"]["status"] == "hit"
    assert "trace" in again.manifest["compile_seconds"]
    assert not list(cache_dir.rglob("fingerprints/*/*.json"))


def test_a_stale_fingerprint_record_is_ignored(cache_dir):
    model, example = make_mlp(seed=0)
    first = latch.compile(model, optim.SGD(0.1), example)
    (record,) = list(cache_dir.rglob("fingerprints/*/*.json"))
    record.write_text(json.dumps({"key": "0" * 64}))            # an entry that is not there
    st = latch.compile(model, optim.SGD(0.1), example).manifest["cache"]
    assert st == first.manifest["cache"] | {"status": "hit", "reason": None}
    assert json.loads(record.read_text())["key"] == st["key"]     # and repaired


CHILD = r"""
import json, sys
sys.path.insert(0, {here!r})
import torch, latch
from latch import optim
from models import make_char_lm, make_mlp

out, target = sys.argv[1], sys.argv[2]
if sys.argv[3] == "fake":                    # as for a model too large to run eagerly
    import latch.frontend.fingerprint
    latch.frontend.fingerprint.MAX_WORK = 0
model, example = make_mlp(seed=0) if target == "cuda" else make_char_lm(seed=0)
rule = optim.clip_grad_norm(1.0, optim.AdamW(optim.warmup_cosine(1e-2, 2, 10, 0.1),
                                             weight_decay=0.1))
prog = latch.compile(model, rule, example, target=target)
prog.save(out + "/prog.latch")
result = {{"cache": prog.manifest["cache"],
           "stages": sorted(prog.manifest.get("compile_seconds")
                            or getattr(prog, "compile_seconds", {{}})),
           "modules": sorted(m for m in ("torch._dynamo", "sympy", "torch_mlir", "mlir")
                             if m in sys.modules)}}
if target == "cpu":
    state = prog.init(model)
    result["losses"] = [prog.step(state, *example) for _ in range(2)]
    torch.save(state.parameters(), out + "/params.pt")
print(json.dumps(result))
"""


@pytest.mark.parametrize("target, run", [("cpu", "eager"), ("cuda", "eager"),
                                         ("cuda", "fake")])
def test_a_warm_hit_in_a_new_process_is_found_without_tracing(tmp_path, target, run):
    """Process 1 misses (traces, builds, stores); process 2 (another hash seed) finds the
    entry by its fingerprint: no trace, no torch._dynamo/sympy/torch-mlir (and no MLIR for
    cuda), the same artifact bytes and, on the cpu, the same numbers.  A fingerprint run on
    fake tensors imports no torch._dynamo either (only sympy, for torch's meta kernels)."""
    runs = []
    for seed in (0, 1):
        out = tmp_path / f"run{seed}"
        out.mkdir()
        env = dict(os.environ, PYTHONHASHSEED=str(seed), LATCH_CACHE="1",
                   LATCH_CACHE_DIR=str(tmp_path / "cache"))
        env.pop("LATCH_DUMP_DIR", None)
        p = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE), str(out), target,
                            run],
                           cwd=str(tmp_path), env=env, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr[-4000:]
        runs.append((out, json.loads(p.stdout.strip().splitlines()[-1])))
    (out1, cold), (out2, warm) = runs
    assert cold["cache"]["status"] == "miss" and "trace" in cold["stages"]
    assert warm["cache"] == {"status": "hit", "key": cold["cache"]["key"], "reason": None}
    assert "fingerprint" in warm["stages"] and "trace" not in warm["stages"]
    assert warm["modules"] == ([] if target == "cuda" else ["mlir"]) + (
        ["sympy"] if run == "fake" else [])
    assert (out1 / "prog.latch").read_bytes() == (out2 / "prog.latch").read_bytes()
    if target == "cpu":
        assert warm["losses"] == cold["losses"]
        p1, p2 = torch.load(out1 / "params.pt"), torch.load(out2 / "params.pt")
        assert all(torch.equal(p1[k], p2[k]) for k in p1)
