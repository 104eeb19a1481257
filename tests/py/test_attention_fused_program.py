"""A whole training update with fused attention, executed on the CPU.

A small causal self-attention model is compiled for the cuda target with
``attention="fused"`` and with ``attention="flash"`` (the same rounding, decomposed); the
module each build hands to ``latch-form-kernels`` (dumped through ``LATCH_DUMP_DIR``) is
formed into kernels and the whole update — every launch — runs in the SIMT interpreter
(tests/py/simt.py).  With ``optim.SGD(1.0)`` the parameters' change is the gradient, which
is compared per tensor with float64 PyTorch: the fused program must be as close as the
decomposed one (both round the same values to bf16), with fewer launches and no buffer of
attention scores."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from simt import Simt, formed

# latch-form-kernels as the cuda target runs it (sm_90a, zero fills forwarded, vector lanes)
# up to its kernels, without the lowering to cf the interpreter skips
FORM = ("builtin.module(latch-form-attention-kernels, latch-wrap-host-compute, "
        "latch-forward-zero-fills, latch-form-contraction-kernels{chip=sm_90a}, "
        "func.func(convert-linalg-to-parallel-loops), latch-map-parallel-loops{block=32,8}, "
        "lower-affine, canonicalize, cse)")


class CausalSelfAttention(nn.Module):
    def __init__(self, d=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, y):
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.mse_loss(self.out(o.transpose(1, 2).reshape(B, T, d)).float(), y)


def _update(model, x, y, attention, dump, monkeypatch, precision="bf16", form=FORM,
            **options):
    """(parameters after one SGD(1.0) update, loss, launch count, module text, report)
    interpreted: compiled for cuda (``precision``, ``attention`` and other compile
    ``options``), the module latch-form-kernels receives formed by ``form``."""

    import latch
    import latch.dialect

    monkeypatch.setenv("LATCH_DUMP_DIR", str(dump))
    monkeypatch.setenv("LATCH_CACHE", "0")
    prog = latch.compile(model, latch.optim.SGD(1.0), (x, y), target="cuda",
                         precision=precision, attention=attention, **options)
    launches = len(prog.manifest["launches"])
    assert ("attention: fused flash-style kernels" in prog.report()) == (attention == "fused")
    with formed((dump / "cuda-latch-form-kernels.mlir").read_text(), form) as m:
        text = str(m)
        params = [p.detach().double().numpy().copy() for p in model.parameters()]
        inputs = [t.numpy() if not t.is_floating_point() else t.double().numpy()
                  for t in (x, y)]                      # token ids stay integers
        res = Simt(m).run(_states(model, prog.manifest) + inputs, func="update")
    new = [torch.as_tensor(np.asarray(r, np.float64)) for r in res[:len(params)]]
    return new, float(np.asarray(res[-1])), launches, text, prog.report()


def _states(model, manifest) -> list:
    """The initial state arguments of the update, in the manifest's order: the parameters,
    their carried bf16 copies (Simt rounds the parameter's values to the argument's type),
    zero counters and moments."""
    named = {n: p.detach().double().numpy().copy() for n, p in model.named_parameters()}
    return [named[s.get("of", s["name"])] if s["kind"] in ("param", "copy") else
            np.zeros(s["shape"], np.int64 if s["dtype"] == "i64" else np.float64)
            for s in manifest["states"]]


def test_fused_update_matches_float64_like_the_decomposed_one(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = CausalSelfAttention()
    x, y = torch.randn(2, 128, 32), torch.randn(2, 128, 32)
    ref = CausalSelfAttention().double()
    ref.load_state_dict(model.state_dict())
    loss = ref(x.double(), y.double())
    loss.backward()
    got = {}
    for attention in ("flash", "fused"):
        (tmp_path / attention).mkdir()
        new, got_loss, launches, text, report = _update(model, x, y, attention,
                                                        tmp_path / attention, monkeypatch)
        assert abs(got_loss - float(loss)) < 1e-3 * float(loss)
        errs = {}
        for (name, p), p_new in zip(ref.named_parameters(), new):
            g = p.detach() - p_new
            errs[name] = float((g - p.grad).norm() / p.grad.norm())
        got[attention] = (errs, launches, text, report)
    flash, fused = got["flash"], got["fused"]
    for name, err in fused[0].items():
        assert err < 0.1, (name, err)
        assert err <= 1.25 * flash[0][name] + 2e-3, (name, err, flash[0][name])
    assert fused[1] < flash[1]                             # fewer launches
    assert "x128x128x" not in fused[2] and "x128x128x" in flash[2]    # no score buffers
    assert fused[2].count("@attention_dkdv") == 2          # module symbol + its launch
    assert "vector.load" in fused[2]                       # vector lanes in the rest
    assert "1 forward and 2 backward launches" in got["fused"][3]


class Residual(nn.Module):
    """``h + attention(h)``: the block a ``latch.repeat`` applies."""

    def __init__(self):
        super().__init__()
        self.attn = CausalSelfAttention()

    def forward(self, h):
        B, T, d = h.shape
        m = self.attn
        q, k, v = m.qkv(h).view(B, T, 3, m.heads, d // m.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return h + m.out(o.transpose(1, 2).reshape(B, T, d)).float()


class LoopedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.last = Residual(), CausalSelfAttention()

    def forward(self, x, y):
        import latch
        return self.last(latch.repeat(self.block, x, 2), y)


def test_fused_attention_inside_a_repeat(tmp_path, monkeypatch):
    """The repeated block's attention is fused too (its VJP taken with torch.autograd.grad;
    the GPU unrolls the loop: three dK/dV kernels), and the whole update is as close to
    float64 as the decomposed program's."""
    torch.manual_seed(0)
    model = LoopedAttention()
    x, y = torch.randn(2, 128, 32), torch.randn(2, 128, 32)
    ref = LoopedAttention().double()
    ref.load_state_dict(model.state_dict())
    ref(x.double(), y.double()).backward()
    got = {}
    for attention in ("flash", "fused"):
        (tmp_path / attention).mkdir()
        new, _, launches, text, _ = _update(model, x, y, attention, tmp_path / attention,
                                            monkeypatch)
        errs = {name: float(((p.detach() - p_new) - p.grad).norm() / p.grad.norm())
                for (name, p), p_new in zip(ref.named_parameters(), new)}
        got[attention] = (errs, launches, text)
    assert got["fused"][2].count("@attention_dkdv") == 2 * 3     # module symbols + launches
    assert got["fused"][1] < got["flash"][1]
    for name, err in got["fused"][0].items():
        assert err <= 1.25 * got["flash"][0][name] + 2e-3, (name, err, got["flash"][0][name])


def test_wgmma_attention_update_gives_the_mma_sync_bits(tmp_path, monkeypatch):
    """Heads of 64 (the wgmma kernels' head dimension, passes/attention_wgmma.py): the whole
    update formed with latch-form-attention-kernels{chip=sm_90a}, as the cuda target forms
    it, gives exactly the loss and parameters of the update with the mma.sync kernels
    (tests/py/test_attention_wgmma_simt.py covers the strided head views)."""
    torch.manual_seed(0)
    model = CausalSelfAttention(d=128, heads=2)
    x, y = torch.randn(2, 128, 128), torch.randn(2, 128, 128)
    got = {}
    for chip in ("sm_90a", "sm_90"):
        (tmp_path / chip).mkdir()
        form = FORM.replace("latch-form-attention-kernels,",
                            f"latch-form-attention-kernels{{chip={chip}}},")
        new, loss, _, text, _ = _update(model, x, y, "fused", tmp_path / chip, monkeypatch,
                                        form=form)
        dq = text[text.index("gpu.func @attention_dq"):]
        dq = dq[:dq.index("gpu.return")]
        assert ("nvvm.wgmma.mma_async" in dq) == (chip == "sm_90a")
        assert ("nvvm.mma.sync" in dq) == (chip == "sm_90")
        got[chip] = (new, loss)
    assert got["sm_90a"][1] == got["sm_90"][1]
    for a, b in zip(got["sm_90a"][0], got["sm_90"][0]):
        assert torch.equal(a, b)


def test_split_forward_in_a_whole_update(tmp_path, monkeypatch):
    """``latch-form-attention-kernels{kv-split=2}`` in a whole update (4 query tiles of a
    causal 256-token sequence, heads of 64): the forward's partials in a workspace of the
    update and the combining launch after it, the backward's dQ and dK/dV in slices and
    the launches adding them; loss and parameters as without the split up to rounding
    (the slices' sums are added in another order)."""
    torch.manual_seed(0)
    model = CausalSelfAttention(d=128, heads=2)
    x, y = torch.randn(2, 256, 128), torch.randn(2, 256, 128)
    got = {}
    for split in (0, 2):
        (tmp_path / str(split)).mkdir()
        form = FORM.replace("latch-form-attention-kernels,",
                            f"latch-form-attention-kernels{{chip=sm_90a kv-split={split}}},")
        new, loss, _, text, _ = _update(model, x, y, "fused", tmp_path / str(split),
                                        monkeypatch, form=form)
        assert ("gpu.func @combine" in text) == (split > 0)
        assert text.count("gpu.func @slice_sum") == (2 if split else 0)     # dQ, dK/dV
        got[split] = (new, loss)
    assert abs(got[2][1] - got[0][1]) < 1e-3 * abs(got[0][1])
    for p, a, b in zip(model.parameters(), got[2][0], got[0][0]):
        step = b - p.detach().double()
        assert float((a - b).norm() / step.norm()) < 2e-2
