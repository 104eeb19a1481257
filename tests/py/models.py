"""Reference models for Latch's tests and examples.

Every model's ``forward(*inputs)`` returns a scalar loss.  Each ``make_<name>(seed)``
returns ``(model, example_inputs)`` with the model in float32 and deterministic
parameters and inputs for that seed.

- :func:`make_mlp`: MLP regression (Linear, GELU, MSE).
- :func:`make_char_lm`: tiny char-level transformer LM (Embedding, LayerNorm, causal
  ``F.scaled_dot_product_attention``, GELU, cross-entropy).
- :func:`make_looped`: a residual block applied 3 times with shared weights
  (``latch.repeat``).
- :func:`make_tiny_moe`: mini TinyMoE following ``WORKLOADS.md`` at tiny sizes (RMSNorm,
  fused qkv, causal attention, tied embedding/LM head, fp32 router softmax, top-2 with
  renormalised gates, capacity ``C = ceil(1.25 * N * k / E)``, rank-in-expert by flattened
  (token, k) order via one_hot + cumsum, dropped slots past C, static-shape dispatch with
  ``index_add`` / gather, SwiGLU experts as ``bmm`` with weights ``[E, in, out]``, Switch aux
  loss weight 0.01 averaged over layers).
- :func:`make_looped_tiny_moe`: the mini TinyMoE with a span of layers applied twice with
  shared weights (WORKLOADS.md "Looped TinyMoE"): one ``latch.repeat`` carrying
  ``(hidden, aux_sum)``.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def _fp32_or_wider(t):
    """``t.float()`` for low-precision tensors; fp32/fp64 stay as they are (so that the
    float64 reference stays float64)."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


# ---------------------------------------------------------------------------------------
# (a) MLP regression
# ---------------------------------------------------------------------------------------
class MLPRegression(nn.Module):
    def __init__(self, d_in: int = 8, hidden: int = 32, d_out: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x, y):
        h = F.gelu(self.fc1(x))
        h = F.gelu(self.fc2(h))
        return F.mse_loss(self.fc3(h), y)


def make_mlp(seed: int = 0, batch: int = 16):
    torch.manual_seed(seed)
    model = MLPRegression()
    x = torch.randn(batch, 8)
    y = torch.randn(batch, 4)
    return model, (x, y)


# ---------------------------------------------------------------------------------------
# (b) tiny char-level transformer LM
# ---------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, T, H, D // H).transpose(1, 2)
        k = k.view(B, T, H, D // H).transpose(1, 2)
        v = v.view(B, T, H, D // H).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class CharLM(nn.Module):
    def __init__(self, vocab: int = 32, d: int = 32, n_layers: int = 2, n_heads: int = 2,
                 seq: int = 16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))


def make_char_lm(seed: int = 0, batch: int = 2, seq: int = 16, vocab: int = 32):
    torch.manual_seed(seed)
    model = CharLM(vocab=vocab, seq=seq)
    data = torch.randint(0, vocab, (batch, seq + 1))
    return model, (data[:, :-1].contiguous(), data[:, 1:].contiguous())


# ---------------------------------------------------------------------------------------
# (c) mini TinyMoE (semantics of WORKLOADS.md at tiny sizes)
# ---------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MoE(nn.Module):
    """Top-k MoE feed-forward with SwiGLU experts and static-shape capacity dispatch."""

    def __init__(self, d: int, hidden: int, n_experts: int, top_k: int = 2,
                 capacity_factor: float = 1.25):
        super().__init__()
        self.E, self.k, self.cf = n_experts, top_k, capacity_factor
        self.router = nn.Linear(d, n_experts, bias=False)
        # [N, k] expert indices that replace the router's top-k choice when set (the FP64
        # qualification's routing-pinned comparison); None: route by the top-k probabilities
        self.pinned_routes = None
        s_in, s_h = 1.0 / math.sqrt(d), 1.0 / math.sqrt(hidden)
        self.w1 = nn.Parameter(torch.randn(n_experts, d, hidden) * s_in)
        self.w3 = nn.Parameter(torch.randn(n_experts, d, hidden) * s_in)
        self.w2 = nn.Parameter(torch.randn(n_experts, hidden, d) * s_h)

    def forward(self, x):
        """x: [N, d] → (y [N, d], aux loss scalar)."""
        N, D = x.shape
        E, k = self.E, self.k
        C = math.ceil(self.cf * N * k / E)
        probs = torch.softmax(_fp32_or_wider(self.router(x)), dim=-1)            # [N, E] fp32
        if self.pinned_routes is None:
            top_p, top_e = torch.topk(probs, k, dim=-1)                    # [N, k]
        else:
            top_e = self.pinned_routes
            top_p = probs.gather(-1, top_e)
        gates = top_p / top_p.sum(-1, keepdim=True)                        # renormalised
        flat_e = top_e.reshape(N * k)                                      # (token, k) order
        onehot = F.one_hot(flat_e, E)                                      # [N*k, E]
        rank = ((torch.cumsum(onehot, dim=0) - 1) * onehot).sum(-1)       # [N*k]
        keep = rank < C
        # kept slots go to row e*C + rank of the [E*C + 1, D] buffer; dropped ones to the
        # last (dummy) row, which is discarded.
        slot = torch.where(keep, flat_e * C + rank, torch.full_like(rank, E * C))
        tok = torch.arange(N * k, device=x.device) // k
        buf = x.new_zeros(E * C + 1, D).index_add(0, slot, x[tok])
        h = buf[: E * C].view(E, C, D)
        a = torch.bmm(h, self.w1)
        b = torch.bmm(h, self.w3)
        o = torch.bmm(F.silu(a) * b, self.w2).reshape(E * C, D)
        o = torch.cat([o, o.new_zeros(1, D)], dim=0)                     # dummy row = 0
        w = (gates.reshape(N * k) * keep.to(gates.dtype)).to(x.dtype)
        y = (o[slot] * w.unsqueeze(-1)).view(N, k, D).sum(1)
        # Switch load-balancing loss: E * sum_e f_e * P_e (f_e over all N*k routed slots)
        f = onehot.to(probs.dtype).mean(0)
        P = probs.mean(0)
        aux = E * (f * P).sum()
        return y, aux


class MoEBlock(nn.Module):
    def __init__(self, d, n_heads, hidden, n_experts, top_k):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.norm2 = RMSNorm(d)
        self.moe = MoE(d, hidden, n_experts, top_k)

    def forward(self, x):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = self.qkv(self.norm1(x)).split(D, dim=-1)
        q = q.view(B, T, H, D // H).transpose(1, 2)
        k = k.view(B, T, H, D // H).transpose(1, 2)
        v = v.view(B, T, H, D // H).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, D))
        y, aux = self.moe(self.norm2(x).reshape(B * T, D))
        return x + y.view(B, T, D), aux


class TinyMoE(nn.Module):
    def __init__(self, vocab=64, d=32, n_layers=2, n_heads=2, seq=16, hidden=32,
                 n_experts=8, top_k=2, aux_weight=0.01):
        super().__init__()
        self.aux_weight = aux_weight
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.layers = nn.ModuleList(
            [MoEBlock(d, n_heads, hidden, n_experts, top_k) for _ in range(n_layers)])
        self.norm = RMSNorm(d)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        aux = 0.0
        for layer in self.layers:
            x, a = layer(x)
            aux = aux + a
        logits = self.norm(x) @ self.tok.weight.t()                       # tied LM head
        ce = F.cross_entropy(_fp32_or_wider(logits).reshape(B * T, -1), targets.reshape(B * T))
        return ce + self.aux_weight * aux / len(self.layers)


def make_tiny_moe(seed: int = 0, batch: int = 2, seq: int = 16, vocab: int = 64, **config):
    """A TinyMoE and a batch of token ids; ``config``: more TinyMoE arguments (d, n_heads,
    hidden, ...)."""
    torch.manual_seed(seed)
    model = TinyMoE(vocab=vocab, seq=seq, **config)
    data = torch.randint(0, vocab, (batch, seq + 1))
    return model, (data[:, :-1].contiguous(), data[:, 1:].contiguous())


# ---------------------------------------------------------------------------------------
# (d) looped layers: a block applied several times with shared weights (latch.repeat)
# ---------------------------------------------------------------------------------------
class LoopedBlock(nn.Module):
    def __init__(self, d: int = 16, h: int = 32):
        super().__init__()
        self.norm = RMSNorm(d)
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class LoopedMLP(nn.Module):
    """A projection in, one residual block applied ``times`` times with shared weights
    (``latch.repeat``: a plain loop in eager mode), a projection out, MSE."""

    def __init__(self, d_in: int = 8, d: int = 16, d_out: int = 4, times: int = 3):
        super().__init__()
        self.pre = nn.Linear(d_in, d)
        self.block = LoopedBlock(d)
        self.post = nn.Linear(d, d_out)
        self.times = times

    def forward(self, x, y):
        import latch
        return F.mse_loss(self.post(latch.repeat(self.block, self.pre(x), self.times)), y)


def make_looped(seed: int = 0, batch: int = 16):
    torch.manual_seed(seed)
    model = LoopedMLP()
    return model, (torch.randn(batch, 8), torch.randn(batch, 4))


# ---------------------------------------------------------------------------------------
# (e) looped TinyMoE (WORKLOADS.md "Looped TinyMoE"): layers [start, stop) applied ``times``
#     times in sequence with shared weights, one latch.repeat carrying (hidden, aux sum)
# ---------------------------------------------------------------------------------------
class MoESpan(nn.Module):
    """``layers`` applied in order to a ``(hidden, aux_sum)`` carry, each layer's aux loss
    added to the sum: the block of a looped TinyMoE (``block(carry) -> carry``)."""

    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, carry):
        x, aux = carry
        for layer in self.layers:
            x, a = layer(x)
            aux = aux + a
        return x, aux


class LoopedTinyMoE(TinyMoE):
    """TinyMoE with layers ``[start, stop)`` applied ``times`` times in sequence with shared
    weights (``loop=(2, 6, 2)`` at 8 layers: 0,1,2,3,4,5,2,3,4,5,6,7, 12 layer applications
    with 8 layers of weights).  Same parameters (and names, ``layers.<i>.*``) as the TinyMoE
    of the same configuration.  The repeated span is ONE ``latch.repeat`` whose carry is
    ``(hidden, aux_sum)``; the aux loss is averaged over the layer applications."""

    def __init__(self, *args, loop=(2, 6, 2), **kwargs):
        super().__init__(*args, **kwargs)
        start, stop, times = loop
        if not (0 <= start < stop <= len(self.layers)) or times < 1:
            raise ValueError(f"loop=(start, stop, times) needs 0 <= start < stop <= "
                             f"{len(self.layers)} and times >= 1, got {loop}")
        self.loop = (start, stop, times)
        self.applications = len(self.layers) + (stop - start) * (times - 1)
        # the span holds the same layer modules as self.layers; kept out of the module tree
        # (self.__dict__) so that every parameter keeps one name, layers.<i>.*
        self.__dict__["span"] = MoESpan(list(self.layers[start:stop]))

    def forward(self, idx, targets):
        import latch
        B, T = idx.shape
        start, stop, times = self.loop
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        aux = x.new_zeros(())
        for layer in self.layers[:start]:
            x, a = layer(x)
            aux = aux + a
        x, aux = latch.repeat(self.span, (x, aux), times)
        for layer in self.layers[stop:]:
            x, a = layer(x)
            aux = aux + a
        logits = self.norm(x) @ self.tok.weight.t()                       # tied LM head
        ce = F.cross_entropy(_fp32_or_wider(logits).reshape(B * T, -1), targets.reshape(B * T))
        return ce + self.aux_weight * aux / self.applications


def make_looped_tiny_moe(seed: int = 0, batch: int = 2, seq: int = 16, vocab: int = 64):
    """4 tiny layers, layers 1 and 2 applied twice: 0,1,2,1,2,3 (6 applications)."""
    torch.manual_seed(seed)
    model = LoopedTinyMoE(vocab=vocab, seq=seq, n_layers=4, loop=(1, 3, 2))
    data = torch.randint(0, vocab, (batch, seq + 1))
    return model, (data[:, :-1].contiguous(), data[:, 1:].contiguous())


MODELS = {"mlp": make_mlp, "char_lm": make_char_lm, "tiny_moe": make_tiny_moe,
          "looped": make_looped, "looped_tiny_moe": make_looped_tiny_moe}
