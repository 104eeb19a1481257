"""Checkpoints of the training state (latch/checkpoint.py): atomic, verified, deterministic.

``state.save(path)`` writes; ``latch.checkpoint.load_state(path, prog)`` reads back a new
TrainingState after checking the format, the version, every tensor's SHA-256 and the
program's state layout."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import latch
import latch.artifact as artifact
import latch.checkpoint as ckpt
from latch import optim
from latch.checkpoint import load_state
from models import MLPRegression, make_mlp
from zip_edit import rewrite_zip


@pytest.fixture(scope="module")
def trained():
    """An AdamW program (moments + counters) and a state after 3 updates."""
    model, inputs = make_mlp(seed=3)
    prog = latch.compile(model, optim.every(2, optim.AdamW(1e-2, weight_decay=0.1)), inputs)
    state = prog.init(model)
    for _ in range(3):
        prog.step(state, *inputs)
    return model, inputs, prog, state


def _snapshot(state):
    return {k: v.clone() for k, v in state.tensors().items()}


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_round_trip_continues_bitwise_identically(trained, tmp_path):
    model, inputs, prog, state = trained
    state.skipped_steps = 2
    path = tmp_path / "s.ckpt"
    state.save(path)
    loaded = load_state(path, prog)
    _same(_snapshot(state), _snapshot(loaded))
    assert loaded.step == state.step == 3 and loaded.skipped_steps == 2
    # continue both (on copies, so the module fixture stays at step 3)
    a, b = load_state(path, prog), load_state(path, prog)
    x, y = inputs
    for i in range(4):
        batch = (x + 0.01 * i, y)
        assert prog.step(a, *batch) == prog.step(b, *batch)
    _same(_snapshot(a), _snapshot(b))
    assert a.step == 7
    # and a reloaded program (latch.load) accepts the checkpoint too
    prog.save(tmp_path / "p.latch")
    c = load_state(path, latch.load(tmp_path / "p.latch"))
    _same(_snapshot(c), _snapshot(state))


def test_checkpoint_bytes_are_deterministic(trained, tmp_path):
    _, _, prog, state = trained
    state.save(tmp_path / "a.ckpt")
    state.save(tmp_path / "b.ckpt")
    load_state(tmp_path / "a.ckpt", prog).save(tmp_path / "c.ckpt")
    data = (tmp_path / "a.ckpt").read_bytes()
    assert data == (tmp_path / "b.ckpt").read_bytes() == (tmp_path / "c.ckpt").read_bytes()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_interrupted_save_leaves_the_old_checkpoint_intact(trained, tmp_path, monkeypatch,
                                                           where):
    model, inputs, prog, state = trained
    path = tmp_path / "s.ckpt"
    state.save(path)
    old_bytes = path.read_bytes()
    newer = load_state(path, prog)
    prog.step(newer, *inputs)                    # a different state to save over it

    class Interrupted(BaseException):            # like KeyboardInterrupt / SystemExit
        pass

    def boom(*a, **k):
        raise Interrupted(where)

    if where == "write":                         # half the bytes written, then interrupted
        def half(f, data):
            f.write(data[:len(data) // 2])
            raise Interrupted(where)
        monkeypatch.setattr(artifact, "_write_all", half)
    else:
        monkeypatch.setattr(ckpt.os, where, boom)
    with pytest.raises(Interrupted):
        newer.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == old_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.ckpt"], "temp file left behind"
    _same(_snapshot(load_state(path, prog)), _snapshot(state))


_KILLED_CHILD = textwrap.dedent("""
    import json, os, signal, sys
    import numpy as np
    import latch.artifact
    from latch.state import TrainingState
    spec = json.load(open(sys.argv[1]))
    arrays = dict(np.load(sys.argv[2]))
    state = TrainingState(spec["slots"], arrays, spec["param_names"])
    def half_then_die(f, data):
        f.write(data[:len(data) // 2]); f.flush(); os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
    latch.artifact._write_all = half_then_die
    state.save(sys.argv[3])
""")


def test_save_killed_mid_write_leaves_the_old_checkpoint_intact(trained, tmp_path):
    """A process SIGKILLed half-way through writing the new checkpoint: the old file is
    untouched and loads; only an orphan temp file (.latch-ckpt-*.tmp) remains."""
    model, inputs, prog, state = trained
    path = tmp_path / "s.ckpt"
    state.save(path)
    old_bytes = path.read_bytes()
    newer = load_state(path, prog)
    prog.step(newer, *inputs)
    (tmp_path / "spec.json").write_text(json.dumps(
        {"slots": prog.manifest["states"], "param_names": prog.manifest["param_names"]}))
    np.savez(tmp_path / "arrays.npz", **{s["name"]: a for s, a in
                                         zip(prog.manifest["states"], newer.ordered())})
    proc = subprocess.run([sys.executable, "-c", _KILLED_CHILD, str(tmp_path / "spec.json"),
                           str(tmp_path / "arrays.npz"), str(path)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert path.read_bytes() == old_bytes
    orphans = [p for p in tmp_path.iterdir() if p.name.startswith(".latch-ckpt-")]
    assert len(orphans) == 1 and 0 < orphans[0].stat().st_size < len(old_bytes) + 1
    _same(_snapshot(load_state(path, prog)), _snapshot(state))
    with pytest.raises(latch.LatchError, match="corrupted|not a Latch checkpoint"):
        load_state(orphans[0], prog)             # the torn file itself is rejected


def _edit_manifest(fn):
    def edit(files):
        m = json.loads(files["checkpoint.json"])
        fn(m)
        files["checkpoint.json"] = json.dumps(m).encode()
    return edit


def test_corrupted_checkpoints_are_rejected(trained, tmp_path):
    _, _, prog, state = trained
    path = tmp_path / "s.ckpt"
    cases = {
        "flipped byte": (lambda p: p.write_bytes(_flip(p.read_bytes())),
                         "corrupted|not a Latch checkpoint|checksum"),
        "truncated": (lambda p: p.write_bytes(p.read_bytes()[:len(p.read_bytes()) // 2]),
                      "not a Latch checkpoint or is corrupted"),
        "tensor tampered (valid zip)": (lambda p: rewrite_zip(p, _tamper_first_tensor),
                                        "checksum mismatch in state 'fc1.weight'"),
        "tensor missing": (lambda p: rewrite_zip(p, lambda f: f.pop("tensors/00000")),
                           "tensor of state 'fc1.weight' is missing"),
        "manifest missing": (lambda p: rewrite_zip(p, lambda f: f.pop("checkpoint.json")),
                             "no checkpoint.json"),
        "manifest garbage": (lambda p: rewrite_zip(p, lambda f: f.update({"checkpoint.json": b"{"})),
                             "unreadable"),
        "other version": (lambda p: rewrite_zip(p, _edit_manifest(
            lambda m: m.update(latch_version="0.0.1"))), "written by Latch 0.0.1"),
        "other format": (lambda p: rewrite_zip(p, _edit_manifest(
            lambda m: m.update(format="latch-checkpoint/9"))), "format 'latch-checkpoint/9'"),
        "not a zip": (lambda p: p.write_bytes(b"hello"), "not a Latch checkpoint"),
        "an artifact": (lambda p: prog.save(p), "no checkpoint.json"),
    }
    for what, (corrupt, msg) in cases.items():
        state.save(path)
        corrupt(path)
        with pytest.raises(latch.LatchError, match=msg):
            load_state(path, prog)
    with pytest.raises(latch.LatchError, match="no checkpoint at"):
        load_state(tmp_path / "missing.ckpt", prog)


def _flip(data):
    data = bytearray(data)
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


def _tamper_first_tensor(files):
    blob = bytearray(files["tensors/00000"])
    blob[0] ^= 0x01
    files["tensors/00000"] = bytes(blob)


def test_layout_mismatch_names_the_difference(trained, tmp_path):
    model, inputs, prog, state = trained
    path = tmp_path / "s.ckpt"
    state.save(path)
    # another rule: SGD has no moments -> the checkpoint has states the program lacks
    sgd = latch.compile(model, optim.SGD(0.1), inputs)
    with pytest.raises(latch.LatchError, match=r"checkpoint has states the program lacks: "
                                               r"\[.*'fc1.weight.exp_avg'"):
        load_state(path, sgd)
    # another model width: same names, other shapes
    torch.manual_seed(0)
    wide = MLPRegression(hidden=16)
    wprog = latch.compile(wide, optim.every(2, optim.AdamW(1e-2, weight_decay=0.1)), inputs)
    with pytest.raises(latch.LatchError, match=r"state 'fc1.weight' has shape \[32, 8\] in the "
                                               r"checkpoint, the program expects \[16, 8\]"):
        load_state(path, wprog)
    # a manifest whose kinds were edited
    rewrite_zip(path, _edit_manifest(lambda m: m["states"][0].update(kind="moment")))
    with pytest.raises(latch.LatchError, match="has kind 'moment' in the checkpoint"):
        load_state(path, prog)


def test_carried_copies_stay_out_of_cuda_states_and_checkpoints(tmp_path):
    """A cuda program's rounded parameter copies (kind "copy", latch-carry-casts) are not
    part of the training state: a CudaTrainingState lists, saves and loads its program's
    other states only (no GPU needed while the state is not live in the program)."""
    from latch.runtime.program import CudaTrainingState

    class Program:           # what CudaTrainingState and the checkpoints read of a program
        states_spec = [
            {"name": "w", "kind": "param", "shape": [2, 3], "dtype": "f32"},
            {"name": "step", "kind": "counter", "shape": [], "dtype": "i64"},
            {"name": "w.bf16", "kind": "copy", "of": "w", "shape": [2, 3], "dtype": "bf16"}]
        state_names = ["w", "step"]
        manifest = {"param_names": ["w"], "states": states_spec}

    prog = Program()
    w = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    state = CudaTrainingState(prog, {"w": w, "step": torch.tensor(4)})
    assert set(state.tensors()) == {"w", "step"} and state.tensors("copy") == {}
    assert state.step == 4 and torch.equal(state.parameters()["w"], w)
    state.save(tmp_path / "s.ckpt")
    manifest, arrays = ckpt.read_checkpoint(tmp_path / "s.ckpt")
    assert [s["name"] for s in manifest["states"]] == ["w", "step"]
    back = load_state(tmp_path / "s.ckpt", prog)
    assert torch.equal(back.parameters()["w"], w) and back.step == 4
