"""attention="flash": bf16 attention rounded as PyTorch's CUDA flash kernels round it
(latch/frontend/attention.py), against float64, the default math path and on the cuda
target (every product a tensor-core kernel)."""
import os
import tempfile

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import latch
from latch import optim
from latch.errors import LatchError
from latch.frontend.attention import attention_rounding, flash_rounded
from latch.options import CompileOptions


class Attention(nn.Module):
    """One causal self-attention layer (2 heads of 32), a projection and an MSE loss;
    ``sharp`` scales the queries and keys' weights so the scores span tens, as trained
    attention does (where rounding the scores to bf16 costs most)."""

    def __init__(self, d=64, heads=2, sharp=3.0, mask=False):
        super().__init__()
        self.heads, self.mask = heads, mask
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        with torch.no_grad():
            self.qkv.weight[: 2 * d].mul_(sharp)

    def forward(self, x, y):
        B, T, D = x.shape
        H = self.heads
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2)
                   for t in self.qkv(x).split(D, dim=-1))
        if self.mask:
            m = torch.ones(T, T, dtype=torch.bool).tril()
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.mse_loss(self.out(a.transpose(1, 2).reshape(B, T, D)).float(), y)


def _data(seed=0, B=2, T=32, d=64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, d, generator=g), torch.randn(B, T, d, generator=g)


def _rel(a, b):
    return float((a.detach().double() - b.detach()).norm() / b.detach().norm())


def test_options_are_checked():
    assert CompileOptions().attention == "auto"
    assert CompileOptions(precision="bf16").attention_mode == "math"           # cpu
    assert CompileOptions(target="cuda", precision="bf16").attention_mode == "fused"
    assert CompileOptions(target="cuda").attention_mode == "math"              # fp32
    with pytest.raises(LatchError, match="precision='bf16'"):
        CompileOptions(attention="flash")
    with pytest.raises(LatchError, match="unknown attention 'fast'"):
        CompileOptions(precision="bf16", attention="fast")
    assert CompileOptions(precision="bf16").digest() != \
        CompileOptions(precision="bf16", attention="flash").digest()


def test_flash_rounded_against_float64():
    """Forward and backward of the op itself: only the bf16 output/gradient roundings and
    the bf16 probabilities remain (float64 of the same bf16 inputs as reference)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 64, 64).mul(2.0).bfloat16().requires_grad_() for _ in range(3))
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o64 = F.scaled_dot_product_attention(*ref, is_causal=True)
    g = torch.randn_like(o64)
    o64.backward(g)
    o = flash_rounded(q, k, v, is_causal=True)
    o.backward(g.bfloat16())
    assert o.dtype == torch.bfloat16
    assert _rel(o, o64) < 6e-3
    for t, r in zip((q, k, v), ref):
        assert t.grad.dtype == torch.bfloat16
        assert _rel(t.grad, r.grad) < 6e-3


def _latch_grads(model, x, y, attention):
    prog = latch.compile(model, optim.SGD(1.0), (x, y), precision="bf16", attention=attention)
    state = prog.init(model)
    before = {n: t.clone() for n, t in state.parameters().items()}
    prog.step(state, x, y)
    after = state.parameters()
    return {n: (before[n] - after[n]).reshape(p.shape)
            for n, p in model.named_parameters()}


def test_flash_gradients_are_closer_to_float64_than_the_math_path():
    """With sharp scores, rounding them to bf16 (the math path) costs accuracy the flash
    rounding keeps: every gradient is at least 5% closer to float64."""
    model = Attention()
    x, y = _data()
    m64 = Attention()
    m64.load_state_dict(model.state_dict())
    m64 = m64.double()
    loss = m64(x.double(), y.double())
    g64 = dict(zip([n for n, _ in m64.named_parameters()],
                   torch.autograd.grad(loss, list(m64.parameters()))))
    err = {a: {n: _rel(g, g64[n]) for n, g in _latch_grads(model, x, y, a).items()}
           for a in ("math", "flash")}
    for n in g64:      # measured: qkv 0.0102 -> 0.0085, out 0.0081 -> 0.0071
        assert err["flash"][n] < 0.95 * err["math"][n], err
    assert max(err["flash"].values()) < 0.02, err


def test_calls_it_does_not_cover_keep_the_math_path():
    """An explicit mask is not covered: the trace is the math path's, op for op."""
    from latch.frontend.trace import trace_loss_and_grads
    model = Attention(mask=True)
    x, y = _data()
    graphs = {}
    for a in ("math", "flash"):
        with attention_rounding(a):
            graphs[a] = trace_loss_and_grads(model, (x, y), precision="bf16").graph_text
    assert graphs["math"] == graphs["flash"]
    with attention_rounding("flash"):     # the causal call is covered: another graph
        flash = trace_loss_and_grads(Attention(), (x, y), precision="bf16").graph_text
    with attention_rounding("math"):
        plain = trace_loss_and_grads(Attention(), (x, y), precision="bf16").graph_text
    assert flash != plain


def test_cuda_products_are_tensor_core_kernels():
    """On the cuda target every product of the flash-rounded attention (two forward, four
    backward) reads bf16 operands: tensor-core kernels (mma.sync or wgmma), no float32 SIMT
    product."""
    from latch.artifact import read_artifact
    model = Attention()
    x, y = _data()
    prog = latch.compile(model, optim.SGD(1.0), (x, y), target="cuda", precision="bf16",
                         attention="flash")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "a.latch")
        prog.save(path)
        _, files = read_artifact(path)
    products = {n: b.decode() for n, b in files.items()
                if "contract" in n and n.endswith(".ptx")}
    assert len(products) >= 6
    simt = [n for n, t in products.items() if "mma.sync" not in t and "wgmma.mma_async" not in t]
    assert not simt, simt
