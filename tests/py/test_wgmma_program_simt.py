"""A whole bf16 training update whose products take the wgmma kernel, executed on the CPU.

A two-layer MLP with 64-multiple widths and 128 tokens (so that its forward products, input
gradients and weight gradients all reduce over whole 64-deep k-tiles with 16-byte staged
operands) is compiled for the cuda target; the module ``latch-form-kernels`` receives is
formed into kernels as the target forms them (sm_90a: wgmma; zero fills forwarded; vector
lanes) and every launch runs in the SIMT interpreter (tests/py/simt.py), with its race,
fence and wgmma-ordering checks.  With ``optim.SGD(1.0)`` each parameter's change is its
gradient, compared per tensor with float64 PyTorch: bf16-rounded operands, f32 sums."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from simt import Simt
from test_attention_fused_program import FORM


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)

    def forward(self, x, y):
        return F.mse_loss(self.fc2(F.silu(self.fc1(x))).float(), y)


def test_mlp_update_with_wgmma_products(tmp_path, monkeypatch):
    from mlir import ir

    import latch
    import latch.dialect
    from latch.pipeline import run_pipeline

    torch.manual_seed(0)
    model = MLP()
    x, y = torch.randn(128, 64), torch.randn(128, 64)
    ref = MLP().double()
    ref.load_state_dict(model.state_dict())
    loss = ref(x.double(), y.double())
    loss.backward()
    monkeypatch.setenv("LATCH_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("LATCH_CACHE", "0")
    latch.compile(model, latch.optim.SGD(1.0), (x, y), target="cuda", precision="bf16")
    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse((tmp_path / "cuda-latch-form-kernels.mlir").read_text())
        run_pipeline(m, FORM)
        text = str(m)
        params = [p.detach().double().numpy().copy() for p in model.parameters()]
        res = Simt(m).run(params + [np.array(0, np.int64), x.double().numpy(),
                                    y.double().numpy()], func="update")
    # every product of 64-multiple shapes is a wgmma kernel: 2 forward, 1 input gradient
    # (fc1's is not needed), 2 weight gradients
    assert text.count("nvvm.wgmma.mma_async") >= 4 * 5, text.count("nvvm.wgmma.mma_async")
    assert "nvvm.mma.sync" not in text
    assert abs(float(np.asarray(res[-1])) - float(loss)) < 1e-2 * float(loss)
    for (name, p), p_new in zip(ref.named_parameters(), res[:len(params)]):
        g = p.detach() - torch.as_tensor(np.asarray(p_new, np.float64))
        err = float((g - p.grad).norm() / p.grad.norm())
        assert err < 0.02, (name, err)
