"""A whole bf16 training update whose products take the wgmma kernel, executed on the CPU.

A two-layer MLP with 64-multiple widths and 128 tokens (so that its forward products, input
gradients and weight gradients all reduce over whole 64-deep k-tiles with 16-byte staged
operands) is compiled for the cuda target; the module ``latch-form-kernels`` receives is
formed into kernels as the target forms them (sm_90a: wgmma; zero fills forwarded; vector
lanes) and every launch runs in the SIMT interpreter (tests/py/simt.py), with its race,
fence and wgmma-ordering checks.  With ``optim.SGD(1.0)`` each parameter's change is its
gradient, compared per tensor with float64 PyTorch: bf16-rounded operands, f32 sums."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from test_attention_fused_program import _update


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)

    def forward(self, x, y):
        return F.mse_loss(self.fc2(F.silu(self.fc1(x))).float(), y)


def test_mlp_update_with_wgmma_products(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(128, 64), torch.randn(128, 64)
    ref = MLP().double()
    ref.load_state_dict(model.state_dict())
    loss = ref(x.double(), y.double())
    loss.backward()
    new, got_loss, _, text, _ = _update(model, x, y, "math", tmp_path, monkeypatch)
    # every product of 64-multiple shapes is a wgmma kernel: 2 forward, 1 input gradient
    # (fc1's is not needed), 2 weight gradients
    assert text.count("nvvm.wgmma.mma_async") >= 4 * 5, text.count("nvvm.wgmma.mma_async")
    assert "nvvm.mma.sync" not in text
    assert abs(got_loss - float(loss)) < 1e-2 * float(loss)
    for (name, p), p_new in zip(ref.named_parameters(), new):
        err = float(((p.detach() - p_new) - p.grad).norm() / p.grad.norm())
        assert err < 0.02, (name, err)
