"""Carried bf16 copies of the parameters (``latch-carry-casts``) over two whole SGD
(momentum, weight decay) updates under the SIMT interpreter: the program with the copies as state must compute the
same bits as the one that rounds every weight at the start of each update, in fewer
launches; each copy after an update is the rounding of its parameter."""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from simt import Simt
from test_attention_fused_program import FORM, _states


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 16, bias=False)

    def forward(self, x, y):
        return F.mse_loss(self.down(torch.relu(self.up(x))).float(), y)


@contextlib.contextmanager
def _without_carry_casts():
    from latch.passes.pipelines import PIPELINES

    saved = dict(PIPELINES)
    named = PIPELINES["latch-bufferize"]
    PIPELINES["latch-bufferize"] = dataclasses.replace(
        named, elements=tuple(e for e in named.elements if e != "latch-carry-casts"))
    try:
        yield
    finally:
        PIPELINES.clear()
        PIPELINES.update(saved)


def _two_updates(model, x, y, dump, monkeypatch):
    """(manifest, [states after update 1, states after update 2]) with every launch of the
    update interpreted."""
    from mlir import ir

    import latch
    import latch.dialect
    from latch.pipeline import run_pipeline

    monkeypatch.setenv("LATCH_DUMP_DIR", str(dump))
    monkeypatch.setenv("LATCH_CACHE", "0")
    prog = latch.compile(model, latch.optim.SGD(0.1, momentum=0.9, weight_decay=0.01), (x, y),
                         target="cuda", precision="bf16")
    states = _states(model, prog.manifest)
    ctx = ir.Context()
    latch.dialect.load(ctx)
    after = []
    with ctx, ir.Location.unknown():
        m = ir.Module.parse((dump / "cuda-latch-form-kernels.mlir").read_text())
        run_pipeline(m, FORM)
        for _ in range(2):
            res = Simt(m).run(states + [x.double().numpy(), y.double().numpy()],
                              func="update")
            states = [np.asarray(r, np.float64) for r in res[:len(states)]]
            after.append(states)
    return prog.manifest, after


def test_carried_copies_compute_the_same_bits(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(64, 32), torch.randn(64, 16)
    (tmp_path / "carried").mkdir()
    (tmp_path / "cast").mkdir()
    carried, got = _two_updates(model, x, y, tmp_path / "carried", monkeypatch)
    with _without_carry_casts():
        plain, want = _two_updates(model, x, y, tmp_path / "cast", monkeypatch)

    copies = [s for s in carried["states"] if s["kind"] == "copy"]
    assert {s["of"] for s in copies} == {"up.weight", "up.bias", "down.weight"}
    assert all(s["dtype"] == "bf16" and s["name"] == s["of"] + ".bf16" for s in copies)
    assert not any(s["kind"] == "copy" for s in plain["states"])
    assert len(carried["launches"]) < len(plain["launches"])      # no cast launches

    names = [s["name"] for s in carried["states"]]
    for step in range(2):
        for k, s in enumerate(plain["states"]):                     # the same bits
            assert np.array_equal(got[step][names.index(s["name"])], want[step][k]), \
                (step, s["name"])
        for s in copies:                                            # copy = bf16(param)
            p = torch.tensor(got[step][names.index(s["of"])], dtype=torch.float32)
            c = got[step][names.index(s["name"])]
            assert np.array_equal(p.to(torch.bfloat16).double().numpy(), c), (step, s["name"])
        assert not np.array_equal(got[step][names.index("up.weight")],
                                  model.up.weight.detach().double().numpy())  # it moved
