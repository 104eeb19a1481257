"""attention="fused": eligible bf16 attention calls traced as the custom ops
``latch::attention`` / ``latch::attention_grad`` and imported as the Latch ops
``latch.attention`` / ``latch.attention_grad`` (latch/frontend/attention.py,
latch/frontend/structured.py).  CPU only: the ops' CPU implementations against float64 and
against the "flash" decomposition, and the IR ``latch.compile`` imports for each target,
caught right after the import (no backend stage runs, so no GPU and no attention kernel
lowering is needed)."""
import math
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import latch
from latch import optim
from latch.errors import LatchError
from latch.frontend.attention import (FlashRoundedAttention, FusedAttention,
                                      attention_rounding, traced_mode)
from latch.frontend.trace import trace_function
from latch.options import CompileOptions


def _rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def _qkv(L=64, S=64, E=32, seed=0):
    """bf16 q [2, 3, L, E], k and v [2, 3, S, E]; q and k scaled so the scores span tens."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, L, E, generator=g).mul(2.0).bfloat16()
    k = torch.randn(2, 3, S, E, generator=g).mul(2.0).bfloat16()
    v = torch.randn(2, 3, S, E, generator=g).bfloat16()
    return q, k, v


def _scores64(q, k, causal, scale):
    s = (q.double() @ k.double().transpose(-2, -1)) * scale
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    return s


@pytest.mark.parametrize("causal,S", [(True, 64), (False, 128)])
def test_ops_match_float64(causal, S):
    """The CPU implementations against float64 of the same bf16 inputs: lse to float32
    accuracy; o and the gradients to the bf16 roundings the ops make (probabilities, dS,
    results: measured 0.2-0.5%)."""
    q, k, v = _qkv(S=S)
    scale = 1.0 / math.sqrt(q.shape[-1])
    o, lse = torch.ops.latch.attention(q, k, v, causal, scale)
    assert (o.dtype, tuple(o.shape)) == (torch.bfloat16, tuple(q.shape))
    assert (lse.dtype, tuple(lse.shape)) == (torch.float32, tuple(q.shape[:-1]))
    s64 = _scores64(q, k, causal, scale)
    lse64 = torch.logsumexp(s64, dim=-1)
    assert _rel(lse, lse64) < 1e-6
    assert _rel(o, torch.softmax(s64, dim=-1) @ v.double()) < 4e-3

    ref = [t.double().requires_grad_() for t in (q, k, v)]
    o64 = F.scaled_dot_product_attention(*ref, is_causal=causal, scale=scale)
    d_o = torch.randn(o64.shape, generator=torch.Generator().manual_seed(1)).bfloat16()
    o64.backward(d_o.double())
    delta = (d_o.float() * o.float()).sum(-1)
    grads = torch.ops.latch.attention_grad(q, k, v, lse, d_o, delta, causal, scale)
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref):
        assert g.dtype == torch.bfloat16 and g.shape == r.shape, name
        assert _rel(g, r.grad) < 8e-3, (name, _rel(g, r.grad))


def test_fused_function_matches_the_flash_decomposition():
    """FusedAttention's forward and backward against autograd through FlashRoundedAttention
    (the "flash" path, same rounding of the probabilities).  The outputs agree to the last
    bf16 bit but for exp(s - lse) vs softmax(s); dV agrees; dQ and dK differ by delta, which
    the fused backward reads from the bf16 output (rowsum(dO ⊙ O), as the flash kernels do)
    where the decomposition takes rowsum(dP ⊙ P) in float32 (measured 0.5%)."""
    q, k, v = _qkv()
    scale = 1.0 / math.sqrt(q.shape[-1])
    d_o = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).bfloat16()
    fused = [t.clone().requires_grad_() for t in (q, k, v)]
    flash = [t.clone().requires_grad_() for t in (q, k, v)]
    o_fused, lse = FusedAttention.apply(*fused, True, scale)
    o_flash, _ = FlashRoundedAttention.apply(*flash, True, scale)
    o_fused.backward(d_o)
    o_flash.backward(d_o)
    assert lse.dtype == torch.float32 and not lse.requires_grad
    assert _rel(o_fused, o_flash) < 1e-4
    assert _rel(fused[2].grad, flash[2].grad) < 1e-4                       # dV
    for a, b in zip(fused[:2], flash[:2]):                                # dQ, dK
        assert a.grad.dtype == torch.bfloat16
        assert _rel(a.grad, b.grad) < 1e-2


def test_options():
    assert CompileOptions(precision="bf16", attention="fused").attention == "fused"
    with pytest.raises(LatchError, match="precision='bf16'"):
        CompileOptions(attention="fused")
    digests = {a: CompileOptions(precision="bf16", attention=a, target="cuda").digest()
               for a in ("math", "flash", "fused")}
    assert len(set(digests.values())) == 3          # the cache key tells them apart
    assert traced_mode("fused", "cuda") == "fused"
    assert traced_mode("fused", "cpu") == "flash"
    assert traced_mode("flash", "cuda") == "flash"


class Attention(nn.Module):
    """A linear layer to q, k, v (``heads`` heads of ``E``), one attention call and an MSE
    loss (in float32)."""

    def __init__(self, E=16, heads=2, causal=True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(E * heads, 3 * E * heads, bias=False)

    def forward(self, x, y):
        B, T, D = x.shape
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(D, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return F.mse_loss(a.transpose(1, 2).reshape(B, T, D).float(), y)


def _data(T=64, D=32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(1, T, D, generator=g), torch.randn(1, T, D, generator=g)


class _Imported(Exception):
    """Raised right after latch.compile's import: the test has the IR it wants."""


def _imported_ir(monkeypatch, model, inputs, target, attention, **options):
    """The linalg module ``latch.compile`` imports (stage 2) for ``target``; the compile
    stops there, so no backend stage runs."""
    from latch.frontend import importer
    real = importer.import_to_linalg
    seen = {}

    def stop_after_import(traced, func_name="loss_and_grads", isolate=True):
        seen["text"] = real(traced, func_name, isolate)
        seen["graph"] = traced.graph_text
        raise _Imported
    monkeypatch.setattr(importer, "import_to_linalg", stop_after_import)
    with pytest.raises(_Imported):
        latch.compile(model, optim.SGD(0.1), inputs, target=target, precision="bf16",
                      attention=attention, **options)
    monkeypatch.setattr(importer, "import_to_linalg", real)
    return seen


def test_fused_training_imports_one_attention_and_one_grad_op(monkeypatch):
    """The cuda target: one latch.attention in the forward, one latch.attention_grad in the
    backward, with the call's causal flag and scale; the scores [1, 2, 64, 64] are never a
    tensor of the program (every other op is imported as usual)."""
    text = _imported_ir(monkeypatch, Attention(), _data(), "cuda", "fused")["text"]
    assert text.count('"latch.attention"') == 1
    assert text.count('"latch.attention_grad"') == 1
    assert text.count("causal = true, scale = 2.500000e-01 : f64") == 2
    assert "64x64x" not in text
    bf16, f32 = "tensor<1x2x64x16xbf16>", "tensor<1x2x64xf32>"
    attrs = r"{causal = true, scale = 2\.500000e-01 : f64}"
    value = r"%[\w#]+"
    assert re.search(rf'"latch\.attention"\(({value}, ){{2}}{value}\) {attrs} : '
                     rf'\({bf16}, {bf16}, {bf16}\) -> \({bf16}, {f32}\)', text)
    assert re.search(rf'"latch\.attention_grad"\(({value}, ){{5}}{value}\) {attrs} : '
                     rf'\({bf16}, {bf16}, {bf16}, {f32}, {bf16}, {f32}\) -> '
                     rf'\({bf16}, {bf16}, {bf16}\)', text)


def test_forward_only_function_imports_one_attention_op():
    """A plain function (no backward): one latch.attention, no latch.attention_grad (the
    unused lse is not computed by anything else)."""
    from latch.frontend.importer import import_to_linalg
    model = Attention()
    x, _ = _data()

    def attend(x):
        B, T, D = x.shape
        q, k, v = (t.view(B, T, 2, D // 2).transpose(1, 2)
                   for t in model.qkv(x).split(D, dim=-1))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    with attention_rounding(traced_mode("fused", "cuda")):
        traced = trace_function(attend, (x,), precision="bf16")
    text = import_to_linalg(traced, "main")
    assert text.count('"latch.attention"') == 1
    assert '"latch.attention_grad"' not in text


def test_calls_the_kernels_do_not_cover_take_the_flash_path(monkeypatch):
    """L = 40 is no multiple of 64: the call is the "flash" path's, op for op, and no Latch
    op is imported."""
    fused = _imported_ir(monkeypatch, Attention(), _data(T=40), "cuda", "fused")
    flash = _imported_ir(monkeypatch, Attention(), _data(T=40), "cuda", "flash")
    assert '"latch.' not in fused["text"]
    assert fused["graph"] == flash["graph"]
    assert fused["text"] == flash["text"]


def test_fused_on_the_cpu_target_is_flash(monkeypatch):
    """The cpu JIT cannot run the fused ops: "fused" traces and imports as "flash"."""
    fused = _imported_ir(monkeypatch, Attention(), _data(), "cpu", "fused")
    flash = _imported_ir(monkeypatch, Attention(), _data(), "cpu", "flash")
    assert '"latch.' not in fused["text"]
    assert "latch.attention" not in fused["graph"]
    assert fused["text"] == flash["text"]


class Residual(nn.Module):
    """``h + attention(h)`` (the block a repeat applies)."""

    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, h):
        B, T, D = h.shape
        m = self.attn
        q, k, v = (t.view(B, T, m.heads, D // m.heads).transpose(1, 2)
                   for t in m.qkv(h).split(D, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return h + a.transpose(1, 2).reshape(B, T, D).float()


class LoopedAttention(nn.Module):
    """A residual attention block applied twice with shared weights (``latch.repeat``),
    then an attention layer and its loss: the repeat's body and its VJP are traced on their
    own, under functionalize and ``torch.func.vjp``."""

    def __init__(self):
        super().__init__()
        self.block, self.last = Residual(), Attention()

    def forward(self, x, y):
        return self.last(latch.repeat(self.block, x, 2), y)


@pytest.mark.parametrize("attention", ["auto", "fused", "flash"])
def test_attention_inside_a_repeat_body(monkeypatch, attention):
    """The default (auto = fused on cuda), "fused" and "flash" compile a model whose repeated
    block calls attention.  Fused, repeat="loop": the body's call is one latch.attention in
    the loop's forward body and one of each in its VJP (taken with torch.autograd.grad; it
    recomputes the forward), next to the pair of the call outside the loop; unrolled, one
    pair per visit."""
    text = _imported_ir(monkeypatch, LoopedAttention(), _data(), "cuda", attention,
                        repeat="loop")["text"]
    fused = attention != "flash"
    # latch.attention: the loop body, the body's VJP (which recomputes the forward) and the
    # last layer; latch.attention_grad: the VJP and the last layer
    assert text.count('"latch.attention"') == 3 * int(fused)
    assert text.count('"latch.attention_grad"') == 2 * int(fused)
    assert "64x64x" not in text or not fused
    # unrolled (the cuda default): one pair per visit (2) and for the last layer; the
    # backward reads the saved outputs, no forward is recomputed
    text = _imported_ir(monkeypatch, LoopedAttention(), _data(), "cuda", attention)["text"]
    assert text.count('"latch.attention"') == 3 * int(fused)
    assert text.count('"latch.attention_grad"') == 3 * int(fused)
    assert '"scf.for"' not in text
