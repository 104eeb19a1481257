"""The user API: compile options, save/load round trips, compiled functions, input checks,
non-finite steps and the report."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

import latch
from latch import optim
from models import make_mlp


@pytest.fixture(scope="module")
def mlp_program():
    model, inputs = make_mlp(seed=0)
    prog = latch.compile(model, optim.AdamW(1e-2, weight_decay=0.1), inputs)
    return model, inputs, prog


def test_step_returns_loss_before_update(mlp_program):
    model, inputs, prog = mlp_program
    state = prog.init(model)
    expected = model(*inputs).item()
    assert math.isclose(prog.step(state, *inputs), expected, rel_tol=1e-5)
    assert state.step == 1
    assert prog.step(state, *inputs) < expected


def test_init_copies_parameters(mlp_program):
    model, inputs, prog = mlp_program
    state = prog.init(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    prog.step(state, *inputs)
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), before[n]), "step() must not touch the model"
    assert set(state.parameters()) == set(before)


def test_save_load_round_trip_gives_identical_results(mlp_program, tmp_path):
    model, inputs, prog = mlp_program
    path = tmp_path / "mlp.latch"
    prog.save(path)
    loaded = latch.load(path)
    s1, s2 = prog.init(model), loaded.init(model)
    for _ in range(3):
        assert prog.step(s1, *inputs) == loaded.step(s2, *inputs)
    for name, t in s1.tensors().items():
        assert torch.equal(t, s2.tensors()[name]), name
    prog.save(tmp_path / "again.latch")
    assert (tmp_path / "again.latch").read_bytes() == path.read_bytes()


def test_corrupted_artifact_is_rejected(mlp_program, tmp_path):
    _, _, prog = mlp_program
    path = tmp_path / "mlp.latch"
    prog.save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(latch.LatchError, match="corrupted|checksum|not a Latch artifact"):
        latch.load(path)
    with pytest.raises(latch.LatchError, match="no artifact"):
        latch.load(tmp_path / "missing.latch")


def test_step_input_checks_leave_state_untouched(mlp_program):
    model, inputs, prog = mlp_program
    state = prog.init(model)
    before = {k: v.clone() for k, v in state.tensors().items()}
    x, y = inputs
    bad = [(x[:-1], y), (x.double(), y), (x,), (x, y, y), (x.numpy(), y)]
    for args in bad:
        with pytest.raises(latch.LatchError):
            prog.step(state, *args)
    for k, v in state.tensors().items():
        assert torch.equal(v, before[k])


@pytest.mark.parametrize("policy", ["skip", "raise"])
def test_nonfinite_step_leaves_state_bitwise_unchanged(policy):
    model, (x, y) = make_mlp(seed=1)
    prog = latch.compile(model, optim.AdamW(1e-2), (x, y), on_nonfinite=policy)
    state = prog.init(model)
    prog.step(state, x, y)
    before = {k: v.clone() for k, v in state.tensors().items()}
    x_bad = x.clone()
    x_bad[0, 0] = float("nan")
    if policy == "raise":
        with pytest.raises(latch.NonFiniteError):
            prog.step(state, x_bad, y)
    else:
        loss = prog.step(state, x_bad, y)
        assert math.isnan(loss) and state.skipped_steps == 1
    for k, v in state.tensors().items():
        assert torch.equal(v, before[k]), k
    assert state.step == 1
    prog.step(state, x, y)
    assert state.step == 2


def test_bad_options_list_valid_choices():
    model, inputs = make_mlp(seed=0)
    with pytest.raises(latch.LatchError, match="'cpu'"):
        latch.compile(model, optim.SGD(0.1), inputs, target="tpu")
    with pytest.raises(latch.LatchError, match="'bf16'"):
        latch.compile(model, optim.SGD(0.1), inputs, precision="fp8")


def test_model_must_be_a_module_with_a_rule():
    with pytest.raises(latch.LatchError, match="nn.Module"):
        latch.compile(lambda x: x.sum(), optim.SGD(0.1), (torch.ones(3),))


def test_compiled_function_matches_torch(tmp_path):
    def f(a, b):
        return torch.tanh(a @ b) + b.sum(0), (a * 2).amax(dim=1)

    a, b = torch.randn(5, 4), torch.randn(4, 3)
    fn = latch.compile(f, None, (a, b))
    got = fn(a, b)
    ref = f(a, b)
    for g, r in zip(got, ref):
        assert torch.allclose(g, r, rtol=1e-5, atol=1e-6)
    fn.save(tmp_path / "f.latch")
    loaded = latch.load(tmp_path / "f.latch")
    for g, r in zip(loaded(a, b), ref):
        assert torch.allclose(g, r, rtol=1e-5, atol=1e-6)
    with pytest.raises(latch.LatchError, match="compiled for"):
        fn(a[:2], b)


def test_report_shows_stages_and_memory(mlp_program):
    _, _, prog = mlp_program
    text = prog.report()
    for stage in ("trace", "linalg", "latch-lower-rules"):
        assert stage in text
    assert "memory plan" in text


def test_stages_dump_and_replay_with_latch_opt(tmp_path, monkeypatch):
    """LATCH_DUMP_DIR: every stage's input is written and replays with latch-opt."""
    import subprocess
    import sys

    monkeypatch.setenv("LATCH_DUMP_DIR", str(tmp_path))
    model, inputs = make_mlp(seed=2)
    latch.compile(model, optim.SGD(0.1, momentum=0.9), inputs)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["update-00-latch-lower-rules.mlir", "update-01-latch-bufferize-host.mlir",
                     "update-linalg.mlir", "update-trace.txt"]
    lowered = (tmp_path / "update-01-latch-bufferize-host.mlir").read_text()
    for name, stage in [("update-00-latch-lower-rules.mlir", "latch-lower-rules"),
                        ("update-01-latch-bufferize-host.mlir", "latch-bufferize-host"),
                        ("update-linalg.mlir", "latch-to-llvm")]:
        proc = subprocess.run([sys.executable, "-m", "latch.cli.latch_opt", str(tmp_path / name),
                               f"--pass-pipeline=builtin.module({stage})",
                               "--mlir-print-op-generic"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        if stage == "latch-lower-rules":
            assert proc.stdout.strip() == lowered.strip()
