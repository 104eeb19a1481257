"""The persistent compile cache (latch/cache.py): hits, misses and their reasons, every key
component, corrupted entries, LATCH_CACHE=0.

Model weights are deliberately *not* part of the key: a program compiled with a rule takes
the parameters as state (``prog.init(model)`` copies them), so the same program serves any
weights of the same shapes.  Constants baked into the graph (buffers) are.
"""
from __future__ import annotations

import logging
import os

import pytest
import torch

import latch
from latch import cache, optim
from latch.options import CompileOptions
from models import make_mlp

RULE = optim.AdamW(1e-3, weight_decay=0.1)


def _status(prog):
    return prog.manifest["cache"]


def _entries(folder):
    return sorted(p.name for p in folder.rglob("*.latch"))


def test_second_compile_hits_and_gives_the_same_program(cache_dir, tmp_path, caplog):
    model, example = make_mlp(seed=0)
    with caplog.at_level(logging.INFO, logger="latch.cache"):
        first = latch.compile(model, RULE, example)
        second = latch.compile(model, RULE, example)   # (its speed: bench/compile_time.py)
    assert _status(first)["status"] == "miss" and _status(first)["reason"] == "new model"
    assert _status(second) == {"status": "hit", "key": _status(first)["key"], "reason": None}
    assert "cache: miss (new model" in first.report()
    assert f"cache: hit (key {_status(first)['key'][:16]})" in second.report()
    msgs = [r.getMessage() for r in caplog.records if r.name == "latch.cache"]
    assert any(m.startswith("miss (new model") for m in msgs)
    assert any(m.startswith("hit ") for m in msgs)
    # same artifact bytes, same numbers
    first.save(tmp_path / "a.latch")
    second.save(tmp_path / "b.latch")
    assert (tmp_path / "a.latch").read_bytes() == (tmp_path / "b.latch").read_bytes()
    s1, s2 = first.init(model), second.init(model)
    assert first.step(s1, *example) == second.step(s2, *example)
    for (n, a), (_, b) in zip(s1.parameters().items(), s2.parameters().items()):
        assert torch.equal(a, b), n
    assert len(_entries(cache_dir)) == 1


def test_weights_are_not_part_of_the_key(cache_dir):
    model, example = make_mlp(seed=0)
    latch.compile(model, RULE, example)
    other, _ = make_mlp(seed=7)                  # same shapes, other weights
    assert _status(latch.compile(other, RULE, example))["status"] == "hit"


@pytest.mark.parametrize("change, reason", [
    (dict(rule=optim.AdamW(2e-3, weight_decay=0.1)), "rule changed"),
    (dict(rule=optim.AdamW(optim.warmup_cosine(1e-3, 2, 10), weight_decay=0.1)), "rule changed"),
    (dict(opt_level=1), "options changed"),
    (dict(on_nonfinite="raise"), "options changed"),
    (dict(batch=8), "inputs changed"),
])
def test_a_changed_component_misses_and_says_which(cache_dir, change, reason):
    model, example = make_mlp(seed=0)
    latch.compile(model, RULE, example)
    change = dict(change)
    rule = change.pop("rule", RULE)
    if "batch" in change:
        _, example = make_mlp(seed=0, batch=change.pop("batch"))
    prog = latch.compile(model, rule, example, **change)
    st = _status(prog)
    assert st["status"] == "miss" and reason in st["reason"], st
    assert f"cache: miss ({st['reason']}" in prog.report()
    assert len(_entries(cache_dir)) == 2
    # and the changed compile now hits too
    assert _status(latch.compile(model, rule, example, **change))["status"] == "hit"


def test_a_changed_buffer_misses_as_graph(cache_dir):
    class WithBuffer(torch.nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("scale", torch.full((4,), scale))

        def forward(self, x):
            return (self.lin(x) * self.scale).square().mean()

    x = torch.randn(2, 4)
    latch.compile(WithBuffer(1.0), optim.SGD(0.1), (x,))
    st = _status(latch.compile(WithBuffer(2.0), optim.SGD(0.1), (x,)))
    assert st["status"] == "miss" and st["reason"] == "graph changed", st


def test_a_changed_version_misses_and_says_which(cache_dir, monkeypatch):
    model, example = make_mlp(seed=0)
    latch.compile(model, RULE, example)
    real = cache.versions()
    monkeypatch.setattr(cache, "versions", lambda: {**real, "torch": "9.9.9"})
    st = _status(latch.compile(model, RULE, example))
    assert st == {"status": "miss", "key": st["key"], "reason": "torch version changed"}


def test_every_single_component_changes_the_key(cache_dir, monkeypatch):
    """Key level, all components: change one at a time; each gives a new key and the miss
    reason names exactly that component."""
    from latch.frontend.trace import trace_loss_and_grads

    model, example = make_mlp(seed=0)
    traced = trace_loss_and_grads(model, example)
    base = cache.compute_key(model, traced, RULE, example, CompileOptions())
    store = cache.CompileCache(str(cache_dir))

    class _Saved:                      # stands in for a program: an empty artifact
        manifest = {}

        def save(self, path):
            from latch.artifact import write_artifact
            write_artifact(path, {"kind": "test"}, {})
    store.store(base, _Saved())
    assert store.lookup(base).status == "hit"

    real_graph, real_target, real_versions = (cache.graph_component, cache.target_component,
                                               cache.versions())
    patches = {
        "graph": ("graph_component", lambda t: {**real_graph(t), "text_sha256": "0"}),
        "target": ("target_component", lambda o: {**real_target(o), "name": "other"}),
    }
    for name in ("latch", "mlir", "torch-mlir", "torch"):
        patches[name] = ("versions", (lambda n: lambda: {**real_versions, n: "other"})(name))
    keys = {base.key}
    for name in cache.COMPONENTS:
        inputs = (example[0][:8], example[1][:8]) if name == "inputs" else example
        rule = optim.AdamW(1e-3, weight_decay=0.2) if name == "rule" else RULE
        options = CompileOptions(opt_level=2) if name == "options" else CompileOptions()
        shapes = list(traced.param_shapes)
        if name == "params":
            traced.param_shapes[0] = (1,)
        with pytest.MonkeyPatch.context() as mp:
            if name in patches:
                mp.setattr(cache, *patches[name])
            k = cache.compute_key(model, traced, rule, inputs, options)
        traced.param_shapes[:] = shapes
        info = store.lookup(k)
        assert info.status == "miss" and k.key not in keys, name
        assert info.reason == cache.miss_reason([name]), (name, info.reason)
        keys.add(k.key)
    assert len(keys) == len(cache.COMPONENTS) + 1


def test_corrupted_entry_is_a_miss_and_is_replaced(cache_dir):
    model, example = make_mlp(seed=0)
    first = latch.compile(model, RULE, example)
    (entry,) = list(cache_dir.rglob("*.latch"))
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    st = _status(latch.compile(model, RULE, example))
    assert st["status"] == "miss" and st["reason"].startswith("corrupted entry"), st
    assert st["key"] == _status(first)["key"]
    assert _status(latch.compile(model, RULE, example))["status"] == "hit"
    entry.write_bytes(b"not a zip")
    assert _status(latch.compile(model, RULE, example))["reason"].startswith("corrupted")


def test_cache_off(cache_dir, monkeypatch):
    monkeypatch.setenv("LATCH_CACHE", "0")
    model, example = make_mlp(seed=0)
    prog = latch.compile(model, RULE, example)
    assert _status(prog)["status"] == "off"
    assert "cache: off (LATCH_CACHE=0)" in prog.report()
    assert not cache_dir.exists()


def test_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("LATCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == os.path.join(str(tmp_path), "latch")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "latch")


def test_compiled_functions_are_cached_with_their_output_structure(cache_dir):
    def f(a, b):
        return {"sum": a + b, "prod": a * b}

    a, b = torch.randn(3), torch.randn(3)
    first = latch.compile(f, None, (a, b))
    second = latch.compile(f, None, (a, b))
    assert _status(first)["status"] == "miss" and _status(second)["status"] == "hit"
    out = second(a, b)
    assert torch.allclose(out["sum"], a + b) and torch.allclose(out["prod"], a * b)


def test_cuda_programs_hit_with_identical_artifacts(cache_dir, tmp_path):
    model, example = make_mlp(seed=0)
    first = latch.compile(model, RULE, example, target="cuda")
    second = latch.compile(model, RULE, example, target="cuda")
    assert _status(first)["status"] == "miss" and _status(second)["status"] == "hit"
    assert "cache: hit" in second.report() and "kernels per update" in second.report()
    first.save(tmp_path / "a.latch")
    second.save(tmp_path / "b.latch")
    assert (tmp_path / "a.latch").read_bytes() == (tmp_path / "b.latch").read_bytes()
    st = _status(latch.compile(model, RULE, example))           # the cpu target: a miss
    assert st["status"] == "miss" and "target changed" in st["reason"], st


def test_cpu_hits_reuse_the_lowered_module(cache_dir, monkeypatch):
    """A cpu hit JIT-compiles the stored LLVM-dialect module (no bufferization or lowering
    again); a corrupted one is ignored (lowered again) and replaced."""
    from latch.pipeline import run_pipeline as real_run_pipeline
    import latch.pipeline

    model, example = make_mlp(seed=0)
    first = latch.compile(model, RULE, example)
    (lowered,) = list(cache_dir.rglob("*.llvm"))
    calls = []
    monkeypatch.setattr(latch.pipeline, "run_pipeline",
                        lambda *a, **k: calls.append(a[1]) or real_run_pipeline(*a, **k))
    hit = latch.compile(model, RULE, example)
    assert _status(hit)["status"] == "hit" and calls == []
    s1, s2 = first.init(model), hit.init(model)
    assert first.step(s1, *example) == hit.step(s2, *example)
    lowered.write_bytes(b"garbage")
    again = latch.compile(model, RULE, example)
    assert _status(again)["status"] == "hit" and calls          # lowered again
    assert lowered.read_bytes().startswith(b"PK")               # and replaced
