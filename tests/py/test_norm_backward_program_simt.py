"""RMSNorm's backward in a whole bf16 update, executed on the CPU by the SIMT interpreter.

A pre-norm residual MLP (four blocks, then a norm and a head; ``tests/py/models.RMSNorm``,
TinyMoE's) is compiled for the cuda target; the module ``latch-form-kernels`` receives is
formed twice — with ``latch-wrap-host-compute``'s in-place row readers (the default) and
without (``in-place-readers=false``) — and every launch of one SGD(1.0) update is
interpreted.  The middle blocks' norms accumulate their input gradient in place into the
residual stream's gradient right after the row sums it reads; with in-place readers the
warps of those sums compute it (passes/row_reductions.py): a launch fewer per such norm,
the same bits, and the gradient as close to float64 as before."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from models import RMSNorm
from test_attention_fused_program import FORM, _update


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm, self.up, self.down = RMSNorm(d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, h):
        return h + self.down(F.silu(self.up(self.norm(h))))


class NormNet(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(4)])
        self.norm, self.head = RMSNorm(d), nn.Linear(d, 16, bias=False)

    def forward(self, x, y):
        for b in self.blocks:
            x = b(x)
        return F.mse_loss(self.head(self.norm(x)).float(), y)


def test_in_place_norm_readers_compute_the_same_bits(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = NormNet()
    with torch.no_grad():                       # norm weights away from 1: their role shows
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    x, y = torch.randn(2, 32, 64), torch.randn(2, 32, 16)
    off = FORM.replace("latch-wrap-host-compute,",
                       "latch-wrap-host-compute{in-place-readers=false},")
    assert off != FORM
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    got, loss, _, fused, _ = _update(model, x, y, "math", tmp_path / "on", monkeypatch,
                                     form=FORM)
    want, want_loss, _, apart, _ = _update(model, x, y, "math", tmp_path / "off", monkeypatch,
                                           form=off)
    # one launch fewer per norm whose input gradient accumulates into the residual stream's
    # (the middle blocks' norms), and their bf16 roundings with them
    assert fused.count("gpu.launch ") + 2 <= apart.count("gpu.launch ")
    assert loss == want_loss
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    ref = NormNet().double()
    ref.load_state_dict(model.state_dict())
    ref(x.double(), y.double()).backward()
    for (name, p), new in zip(ref.named_parameters(), got):
        g = p.detach().numpy() - new.numpy()
        err = np.linalg.norm(g - p.grad.numpy()) / np.linalg.norm(p.grad.numpy())
        assert err < 0.05, (name, err)


def test_tiny_moe_norm_backward_in_one_launch_computes_the_same_bits(tmp_path, monkeypatch):
    """TinyMoE's own norms (tests/py/models.TinyMoE, three layers): the MoE norm's
    backward takes its writer (the router's input gradient added to the experts') past the
    norm weight's gradient, and the in-place reader and its rounding — the same bits as
    with all three steps off, in fewer launches."""
    from models import make_tiny_moe

    model, (idx, tgt) = make_tiny_moe(seed=1, d=64, hidden=64, n_layers=3)
    off = FORM.replace("latch-wrap-host-compute,", "latch-wrap-host-compute{row-writers=false "
                                                   "in-place-readers=false},")
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    got, loss, _, fused, _ = _update(model, idx, tgt, "math", tmp_path / "on", monkeypatch,
                                     form=FORM)
    want, want_loss, _, apart, _ = _update(model, idx, tgt, "math", tmp_path / "off",
                                           monkeypatch, form=off)
    assert fused.count("gpu.launch ") < apart.count("gpu.launch ")
    assert loss == want_loss
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
