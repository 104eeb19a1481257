"""How bf16 attention is rounded in a trace: PyTorch's math path, or as the flash kernels do.

Latch traces under ``torch.autocast("cpu")`` with the math backend of
``F.scaled_dot_product_attention``, whose decomposition runs each ``bmm`` under autocast:
the scaled queries and keys are rounded to bf16, and so are the **scores** ``q kᵀ`` before
the softmax.  PyTorch on CUDA (eager autocast and ``torch.compile``) runs the flash kernels
instead, which keep the scores and the softmax in float32 and round only the probabilities
(and, backward, the score gradients) to bf16 for the second products.  The difference is
one bf16 rounding of every score (and of every score gradient's input ``dP``).  At
TinyMoE-196M's trained states Latch's bf16 gradients were 1.6× further from float64 than
PyTorch's (routing pinned; examples/tinymoe/qualify.py); this is the rounding difference
found between the two — how much of the gap it explains is to be measured on the GPU.

``attention="flash"`` (a compile option, with ``precision="bf16"``) replaces the call by
:class:`FlashRoundedAttention`, whose forward and backward are ordinary ops, so that the rest
of the pipeline sees products of bf16 values with float32 results (tensor-core kernels):

forward   ``s = (q kᵀ)·scale`` in float32 from bf16 q, k (exact products); causal mask;
          ``p = softmax(s)`` in float32; ``o = bf16(p) v`` with float32 accumulation,
          returned in bf16 (autocast's dtype for attention);
backward  ``dV = bf16(p)ᵀ dO``, ``dP = dO vᵀ``, ``dS = p ⊙ (dP − rowsum(dP ⊙ p))`` in float32,
          ``dQ = bf16(dS) k · scale``, ``dK = bf16(dS)ᵀ q · scale``.

Calls it does not cover (an explicit mask, dropout, grouped-query attention, operands with
different batch shapes) keep the math path.  ``attention="math"`` (the default) leaves every
call to it.  The choices are listed in :data:`latch.options.ATTENTION`.
"""
from __future__ import annotations

import contextlib
import contextvars
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_MODE = contextvars.ContextVar("latch_attention", default="math")


@contextlib.contextmanager
def attention_rounding(mode: str):
    """Traces inside use ``mode`` (a key of :data:`latch.options.ATTENTION`) for bf16
    attention."""
    token = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(token)


def current() -> str:
    return _MODE.get()


def _no_autocast():
    return torch.autocast("cpu", enabled=False)


def _product(a, b):
    """``a @ b`` of bf16 tensors ([..., M, K] @ [..., K, N]) accumulated and returned in
    float32.  The operands are reshaped while still bf16 and widened right at the product,
    so the pipeline sees a product of widened bf16 values (a tensor-core kernel) rather than
    a materialized float32 copy."""
    batch = a.shape[:-2]
    a3 = a.reshape(-1, *a.shape[-2:])
    b3 = b.reshape(-1, *b.shape[-2:])
    return torch.bmm(a3.float(), b3.float()).reshape(*batch, a.shape[-2], b.shape[-1])


class FlashRoundedAttention(torch.autograd.Function):
    """Attention over bf16 ``q, k, v`` ([..., L, E], [..., S, E], [..., S, Ev]) with the
    flash kernels' rounding (module docstring); returns (bf16 ``[..., L, Ev]``, the float32
    probabilities).  functorch transforms cannot differentiate an ``autograd.Function``, so
    a joint trace meeting one restarts with ``torch.autograd.grad``
    (:class:`latch.frontend.structured.NeedsAutogradJoint`, as for ``latch.repeat``)."""

    @staticmethod
    def forward(q, k, v, causal: bool, scale: float):
        with _no_autocast():
            s = _product(q, k.transpose(-2, -1)) * scale
            if causal:
                L, S = s.shape[-2:]
                keep = torch.ones(L, S, dtype=torch.bool, device=s.device).tril()
                s = s.masked_fill(~keep, float("-inf"))
            p = torch.softmax(s, dim=-1)
            o = _product(p.to(torch.bfloat16), v)
        return o.to(torch.bfloat16), p

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, _causal, scale = inputs
        ctx.save_for_backward(q, k, v, output[1])
        ctx.scale = scale
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, d_o, _d_p):
        q, k, v, p = ctx.saved_tensors
        with _no_autocast():
            d_o = d_o.to(torch.bfloat16)
            d_v = _product(p.to(torch.bfloat16).transpose(-2, -1), d_o)
            d_p = _product(d_o, v.transpose(-2, -1))
            d_s = p * (d_p - (d_p * p).sum(dim=-1, keepdim=True))
            d_sb = d_s.to(torch.bfloat16)
            d_q = _product(d_sb, k) * ctx.scale
            d_k = _product(d_sb.transpose(-2, -1), q) * ctx.scale
        return d_q.to(q.dtype), d_k.to(k.dtype), d_v.to(v.dtype), None, None


def _sdpa_arguments(args, kwargs):
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
             "enable_gqa")
    given = dict(zip(names, args))
    given.update(kwargs)
    return given


def flash_rounded(q, k, v, is_causal: bool = False, scale: float | None = None):
    """``F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)`` under bf16
    autocast, rounded as the flash kernels round it."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    from latch.frontend import structured
    rec = structured.active()
    if rec is not None and rec.mode == "joint":
        raise structured.NeedsAutogradJoint("flash-rounded attention in a functorch joint trace")
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    return FlashRoundedAttention.apply(q, k, v, bool(is_causal), float(scale))[0]


class FlashRoundingMode(TorchFunctionMode):
    """Routes eligible ``F.scaled_dot_product_attention`` calls made under CPU bf16 autocast
    to :func:`flash_rounded` (entered by the tracing context only while :func:`current` is
    ``"flash"``: other traces pay nothing per op)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and torch.is_autocast_enabled("cpu") and \
                torch.get_autocast_dtype("cpu") == torch.bfloat16:
            a = _sdpa_arguments(args, kwargs)
            q, k, v = a["query"], a["key"], a["value"]
            floating = all(t.dtype in (torch.bfloat16, torch.float32) for t in (q, k, v))
            if floating and a.get("attn_mask") is None and not a.get("dropout_p", 0.0) and \
                    not a.get("enable_gqa", False) and q.shape[:-2] == k.shape[:-2] == \
                    v.shape[:-2]:
                return flash_rounded(q, k, v, a.get("is_causal", False), a.get("scale"))
        return func(*args, **kwargs)
