"""The kernels of ``deterministic=True`` on a whole update, executed on the CPU: an
embedding model, whose gradient is a product with a one-hot factor (the tokens), is
compiled for cuda; the module ``latch-form-kernels`` receives is formed into kernels as the
target forms them with ``deterministic=true`` (what ``deterministic=True`` runs: the
scatter kernel sums in fixed point with integer atomics, passes/fixed_point_scatter.py) and
with the default (a scatter kernel of float atomic adds), every
launch runs in the SIMT interpreter (tests/py/simt.py), and with ``optim.SGD(1.0)`` each
parameter's change is its gradient, compared with float64 PyTorch.  That the option
reaches the pass is tested in test_cuda_target.py (no float atomics in the PTX)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from test_attention_fused_program import FORM, _update

# latch-form-kernels as deterministic=True runs it: scatters summed in fixed point
DETERMINISTIC_FORM = FORM.replace("{chip=sm_90a}", "{chip=sm_90a deterministic=true}")


class Embedded(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.fc = nn.Linear(32, 16)

    def forward(self, idx, y):
        return F.mse_loss(self.fc(self.emb(idx)), y)


def test_deterministic_embedding_gradient_sums_in_fixed_point(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = Embedded()
    idx = torch.randint(0, 64, (2, 32))
    idx[0, :4] = 7                          # repeated tokens: several adds to one row
    y = torch.randn(2, 32, 16)
    ref = Embedded().double()
    ref.load_state_dict(model.state_dict())
    ref(idx, y.double()).backward()
    texts, news = {}, {}
    for det in (True, False):
        (tmp_path / str(det)).mkdir()
        news[det], _, _, texts[det], _ = _update(
            model, idx, y, "math", tmp_path / str(det), monkeypatch, precision="fp32",
            form=DETERMINISTIC_FORM if det else FORM, deterministic=det)
        for (name, p), p_new in zip(ref.named_parameters(), news[det]):
            # p - p_new recovers the f32 step only to ~eps32 |p| / |g| (2e-5 for the
            # embedding rows, whose gradients are small against weights of size 1)
            err = float(((p.detach() - p_new) - p.grad).norm() / p.grad.norm())
            assert err < 1e-4, (det, name, err)
    # the two forms sum the same f32 terms (at most a few per row here): equal new weights
    for a, b in zip(news[True], news[False]):
        assert float((a - b).abs().max()) <= 1e-6 * float(a.abs().max())
    assert "atomic_rmw addf" not in texts[True] and "atomic_rmw addf" in texts[False]
    assert "atomic_rmw addi" in texts[True]
