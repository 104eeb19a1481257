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

``attention="fused"`` rounds as ``"flash"`` does but keeps each call the kernels cover as
**one** node, so that the scores ``[..., L, S]`` are never materialized: the torch custom ops
``latch::attention`` (``(q, k, v) -> (o, lse)``, lse the float32 row log-sum-exp of the
scores) and ``latch::attention_grad`` (``(q, k, v, lse, dO, delta) -> (dQ, dK, dV)``, with
``delta = rowsum(dO ⊙ O)`` computed by ordinary ops), through :class:`FusedAttention`.  The
importer (:mod:`latch.frontend.structured`) turns them into the Latch ops ``latch.attention``
/ ``latch.attention_grad``, which only the cuda target lowers (one flash-style kernel each),
so the fused ops are produced only when compiling for ``target="cuda"``
(:func:`traced_mode`); on the cpu ``"fused"`` is ``"flash"``.  Calls the kernels do not cover
(:func:`fused_eligible`) take the ``"flash"`` path.  The two paths differ only in the float32
softmax's arithmetic (``exp(s - lse)`` against ``softmax(s)``) and in ``delta``, which the
fused backward reads from the bf16 output rather than from ``dP ⊙ P``, as the flash kernels
do.  ``dP − delta`` cancels, so that rounding shows in dQ and dK: on random bf16 operands
with scores spanning tens (tests/py/test_attention_fused_frontend.py) they were 0.5% from
float64 against the decomposition's 0.24% (o and dV: 0.2% either way).
"""
from __future__ import annotations

import contextlib
import contextvars
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_MODE = contextvars.ContextVar("latch_attention", default="math")

#: Modes that route ``F.scaled_dot_product_attention`` through :class:`FlashRoundingMode`.
ROUTED_MODES = ("flash", "fused")

#: Targets whose pipeline lowers ``latch.attention`` / ``latch.attention_grad``.
FUSED_TARGETS = ("cuda",)


def traced_mode(attention: str, target: str) -> str:
    """The mode the traces of a compile for ``target`` use for the ``attention`` option:
    ``"fused"`` on a target that cannot run the fused ops (the cpu JIT) traces as
    ``"flash"`` (the same rounding, decomposed)."""
    if attention == "fused" and target not in FUSED_TARGETS:
        return "flash"
    return attention


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


# ----------------------------------------------------------------------------- fused ops
def _scores(q, k, causal: bool, scale: float):
    """``scale · q kᵀ`` in float32 from bf16 ``q, k``, keys after the query at -inf when
    ``causal`` (the same arithmetic as :class:`FlashRoundedAttention`'s forward)."""
    s = _product(q, k.transpose(-2, -1)) * scale
    if causal:
        L, S = s.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s


@torch.library.custom_op("latch::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(o, lse)``: ``lse`` the float32 log-sum-exp of each row of the scores,
    ``o = bf16(bf16(exp(s - lse)) v)`` accumulated in float32.  This CPU implementation
    materializes the scores (eager runs, tests); the cuda target's kernel never does."""
    with _no_autocast():
        s = _scores(q, k, causal, scale)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse.unsqueeze(-1))
        o = _product(p.to(torch.bfloat16), v)
    return o.to(torch.bfloat16), lse


@_attention_op.register_fake
def _(q, k, v, causal, scale):
    return (q.new_empty((*q.shape[:-1], v.shape[-1]), dtype=torch.bfloat16),
            q.new_empty(q.shape[:-1], dtype=torch.float32))


@torch.library.custom_op("latch::attention_grad", mutates_args=())
def _attention_grad_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse: torch.Tensor,
                       do: torch.Tensor, delta: torch.Tensor, causal: bool,
                       scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of :func:`_attention_op` for the output gradient ``do``, with the
    probabilities recomputed from ``lse`` and ``delta = rowsum(do ⊙ o)`` (float32)."""
    with _no_autocast():
        p = torch.exp(_scores(q, k, causal, scale) - lse.unsqueeze(-1))
        d_v = _product(p.to(torch.bfloat16).transpose(-2, -1), do)
        d_p = _product(do, v.transpose(-2, -1))
        d_sb = (p * (d_p - delta.unsqueeze(-1))).to(torch.bfloat16)
        d_q = _product(d_sb, k) * scale
        d_k = _product(d_sb.transpose(-2, -1), q) * scale
    return d_q.to(torch.bfloat16), d_k.to(torch.bfloat16), d_v.to(torch.bfloat16)


@_attention_grad_op.register_fake
def _(q, k, v, lse, do, delta, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


class FusedAttention(torch.autograd.Function):
    """Attention over bf16 ``q, k, v`` as two fused ops: ``latch::attention`` forward,
    ``latch::attention_grad`` backward (whose ``delta`` is computed here with ordinary ops,
    so the graph shows it).  Returns (bf16 ``o``, float32 ``lse``).  Like
    :class:`FlashRoundedAttention` it needs a joint trace taken with ``torch.autograd.grad``
    (:func:`fused_attention` says so to a functorch one)."""

    @staticmethod
    def forward(q, k, v, causal: bool, scale: float):
        with _no_autocast():
            o, lse = torch.ops.latch.attention(q, k, v, causal, scale)
        return o, lse

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, causal, scale = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        ctx.mark_non_differentiable(lse)

    @staticmethod
    def backward(ctx, d_o, _d_lse):
        q, k, v, o, lse = ctx.saved_tensors
        with _no_autocast():
            d_o = d_o.to(torch.bfloat16)
            delta = (d_o.float() * o.float()).sum(-1)
            d_q, d_k, d_v = torch.ops.latch.attention_grad(q, k, v, lse, d_o, delta,
                                                           ctx.causal, ctx.scale)
        return d_q, d_k, d_v, None, None


def fused_eligible(q, k, v, is_causal: bool) -> bool:
    """Whether the fused kernels cover a call (already known to have no mask, dropout or
    grouped-query attention): 4-D ``[B, H, L, E]`` / ``[B, H, S, E]`` operands of one
    ``[B, H]``, L and S multiples of 64 (the kernels' row and key blocks), one head size E
    for keys and values, a multiple of 16 (the bf16 MMA's K) of at most 128 (what a block's
    registers hold), and causal only for L == S."""
    if not q.dim() == k.dim() == v.dim() == 4:
        return False
    if not q.shape[:2] == k.shape[:2] == v.shape[:2] or k.shape[2] != v.shape[2]:
        return False
    L, S, E, Ev = q.shape[2], k.shape[2], k.shape[3], v.shape[3]
    return (L % 64 == 0 and S % 64 == 0 and q.shape[3] == E == Ev and E % 16 == 0
            and E <= 128 and (not is_causal or L == S))


def fused_attention(q, k, v, is_causal: bool = False, scale: float | None = None):
    """``F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)`` under bf16
    autocast as the fused ops (:class:`FusedAttention`); the caller checked
    :func:`fused_eligible`."""
    return _apply(FusedAttention, "fused attention", q, k, v, is_causal, scale)


def _apply(function, what: str, q, k, v, is_causal: bool, scale: float | None):
    """``function`` (an autograd.Function over bf16 q, k, v) applied as a trace needs it:
    a functorch joint trace is restarted with torch.autograd.grad (NeedsAutogradJoint), a
    call autograd does not record runs the forward directly; returns the output."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    from latch.frontend import structured
    rec = structured.active()
    if rec is not None and rec.mode == "joint":
        raise structured.NeedsAutogradJoint(f"{what} in a functorch joint trace")
    q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    if not _differentiated(q, k, v):
        return function.forward(q, k, v, bool(is_causal), float(scale))[0]
    return function.apply(q, k, v, bool(is_causal), float(scale))[0]


def _differentiated(*tensors) -> bool:
    """Whether autograd records a call on ``tensors``.  A call it does not record runs an
    ``autograd.Function``'s forward directly: a forward-only trace is functionalized, and
    functionalization has no rule for ``autograd.Function`` calls."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _sdpa_arguments(args, kwargs):
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
             "enable_gqa")
    given = dict(zip(names, args))
    given.update(kwargs)
    return given


def flash_rounded(q, k, v, is_causal: bool = False, scale: float | None = None):
    """``F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)`` under bf16
    autocast, rounded as the flash kernels round it."""
    return _apply(FlashRoundedAttention, "flash-rounded attention", q, k, v, is_causal, scale)


class FlashRoundingMode(TorchFunctionMode):
    """Routes eligible ``F.scaled_dot_product_attention`` calls made under CPU bf16 autocast
    to :func:`flash_rounded`, or in mode ``"fused"`` those the kernels cover to
    :func:`fused_attention` (entered by the tracing context only while :func:`current` is
    one of :data:`ROUTED_MODES`: other traces pay nothing per op).  The fused ops are made
    only inside a Latch trace (a recorder is active) or a loop body's trace
    (``structured.in_body``: the importer splits a body holding them like the main graph);
    a repeat's VJP is then taken with ``torch.autograd.grad``
    (``structured._vjp_autograd``), since ``torch.func.vjp`` under functionalize cannot
    run an autograd.Function."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and current() in ROUTED_MODES and \
                torch.is_autocast_enabled("cpu") and \
                torch.get_autocast_dtype("cpu") == torch.bfloat16:
            a = _sdpa_arguments(args, kwargs)
            q, k, v = a["query"], a["key"], a["value"]
            floating = all(t.dtype in (torch.bfloat16, torch.float32) for t in (q, k, v))
            if floating and a.get("attn_mask") is None and not a.get("dropout_p", 0.0) and \
                    not a.get("enable_gqa", False) and q.shape[:-2] == k.shape[:-2] == \
                    v.shape[:-2]:
                causal = a.get("is_causal", False)
                if current() == "fused" and fused_eligible(q, k, v, causal):
                    from latch.frontend import structured
                    if structured.active() is not None or structured.in_body():
                        return fused_attention(q, k, v, causal, a.get("scale"))
                return flash_rounded(q, k, v, causal, a.get("scale"))
        return func(*args, **kwargs)
