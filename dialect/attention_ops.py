"""Fused causal attention (``latch.attention`` and its gradient ``latch.attention_grad``).

The tracer (``latch.compile(..., attention="fused")`` on the cuda target) keeps each eligible
``F.scaled_dot_product_attention`` call as one op instead of its decomposition, so that the
scores ``[..., L, S]`` are never stored: ``latch-form-attention-kernels`` gives each op a
flash-style kernel that keeps a block of scores in registers (online softmax).

Each op has two forms, as ``latch.all_reduce`` does:

* **tensor form** (the program): values in, values out;
* **buffer form** (after ``latch-lower-attention``, before one-shot bufferization): the
  same operands followed by the buffers the results are written to, no results.
"""
from __future__ import annotations

from mlir import ir

from .opdef import ANY, F64, I1, Attr, OpDef, Operand, Result, Rule, Variadicity, VerifyEnv, \
    Violation, attr_value


def _dims(t) -> tuple[list[int], str] | None:
    """(shape, element type) of a ranked tensor or memref type, else None."""
    if isinstance(t, (ir.RankedTensorType, ir.MemRefType)):
        return list(t.shape), str(t.element_type)
    return None


def _check_shapes(op, q, k, v) -> tuple[list[int], int, int, int]:
    """Batch dims, L, S, E of the operands, or a Violation."""
    if q is None or k is None or v is None:
        raise Violation(op, "shapes", "q, k and v must be ranked tensors or memrefs")
    (qs, qe), (ks, ke), (vs, ve) = q, k, v
    if len(qs) < 3 or not len(qs) == len(ks) == len(vs):
        raise Violation(op, "shapes", "q, k, v are [..., L, E], [..., S, E], [..., S, E] of "
                        f"one rank >= 3; got {qs}, {ks}, {vs}")
    if not qs[:-2] == ks[:-2] == vs[:-2] or ks[-2] != vs[-2] or not qs[-1] == ks[-1] == vs[-1]:
        raise Violation(op, "shapes", "q, k, v are [..., L, E], [..., S, E], [..., S, E] "
                        f"with one batch shape; got {qs}, {ks}, {vs}")
    if not qe == ke == ve == "bf16":
        raise Violation(op, "element-type", f"q, k, v are bf16; got {qe}, {ke}, {ve}")
    return qs[:-2], qs[-2], ks[-2], qs[-1]


def _expect(op, what, got, shape, elem) -> None:
    if got is None or got != (shape, elem):
        raise Violation(op, "shapes", f"{what} must be {'x'.join(map(str, shape))}x{elem}; "
                        f"got {got}")


def _forms(op, n_in: int, n_out: int) -> tuple[list, list]:
    """(inputs, outputs) as (shape, elem) pairs, from either form."""
    operands = [v.type for v in op.operands]
    results = [r.type for r in op.results]
    if len(operands) == n_in and len(results) == n_out and \
            all(isinstance(t, ir.RankedTensorType) for t in operands + results):
        return [_dims(t) for t in operands], [_dims(t) for t in results]
    if len(operands) == n_in + n_out and not results and \
            all(isinstance(t, ir.MemRefType) for t in operands):
        return [_dims(t) for t in operands[:n_in]], [_dims(t) for t in operands[n_in:]]
    raise Violation(op, "form", f"tensor form: {n_in} tensors in, {n_out} out; buffer form: "
                    f"{n_in + n_out} memrefs, no results; got {len(operands)} operands and "
                    f"{len(results)} results")


def _check_attrs(op) -> None:
    scale = attr_value(op.attributes["scale"])
    if not scale > 0.0 or scale != scale or scale == float("inf"):
        raise Violation(op, "scale", f"scale must be finite and > 0; got {scale}")


def _verify_attention(op, env: VerifyEnv) -> None:
    _check_attrs(op)
    ins, outs = _forms(op, 3, 2)
    batch, L, S, E = _check_shapes(op, *ins)
    if attr_value(op.attributes["causal"]) and L != S:
        raise Violation(op, "causal", f"causal attention needs L == S; got {L} and {S}")
    _expect(op, "o", outs[0], batch + [L, E], "bf16")
    _expect(op, "lse", outs[1], batch + [L], "f32")


def _verify_attention_grad(op, env: VerifyEnv) -> None:
    _check_attrs(op)
    ins, outs = _forms(op, 6, 3)
    batch, L, S, E = _check_shapes(op, *ins[:3])
    if attr_value(op.attributes["causal"]) and L != S:
        raise Violation(op, "causal", f"causal attention needs L == S; got {L} and {S}")
    _expect(op, "lse", ins[3], batch + [L], "f32")
    _expect(op, "do", ins[4], batch + [L, E], "bf16")
    _expect(op, "delta", ins[5], batch + [L], "f32")
    for name, got, ref in zip(("dq", "dk", "dv"), outs, ins[:3]):
        _expect(op, name, got, *ref)


_ATTRS = (
    Attr("causal", I1, "mask the scores of keys after the query (`j > i`)"),
    Attr("scale", F64, "the factor of the scores, usually `1/sqrt(E)`"),
)
_RULES = (
    Rule("form", "tensor form: tensors in and out; buffer form: the operands, then one buffer "
                 "per result, no results."),
    Rule("shapes", "q, k, v are `[..., L, E]`, `[..., S, E]`, `[..., S, E]` of one batch "
                   "shape; the other values have the shapes listed."),
    Rule("element-type", "q, k, v (and o, do, dq, dk, dv) are bf16; lse and delta f32."),
    Rule("causal", "causal attention has L == S."),
    Rule("scale", "`scale` is finite and > 0."),
)

ATTENTION = OpDef(
    "latch.attention", family="fused kernels", builder="attention",
    summary="softmax attention with float32 scores, returning the output and the row "
            "log-sum-exp",
    doc="""`%o, %lse = latch.attention %q, %k, %v {causal, scale}`: with
`s = scale · q kᵀ` computed in float32 from the bf16 operands (keys after the query set to
−∞ when `causal`), `lse = log Σⱼ exp(s)` per row (float32) and
`o = bf16(Σⱼ exp(s − lse) v)`: the probabilities are rounded to bf16 for the second product,
accumulated in float32, as the flash kernels of PyTorch on CUDA do.  The buffer form takes
`o` and `lse` as two more operands.  `latch-form-attention-kernels` gives it one kernel that
never stores the scores.""",
    operands=(Operand("values", ANY, Variadicity.VARIADIC,
                      "q, k, v (tensor form); then o, lse (buffer form)"),),
    results=(Result("results", ANY, Variadicity.VARIADIC, "tensor form: o, lse"),),
    attributes=_ATTRS, rules=_RULES, verify=_verify_attention,
)

ATTENTION_GRAD = OpDef(
    "latch.attention_grad", family="fused kernels", builder="attention_grad",
    summary="the gradients of latch.attention with respect to q, k and v",
    doc="""`%dq, %dk, %dv = latch.attention_grad %q, %k, %v, %lse, %do, %delta
{causal, scale}`, where `lse` is the forward's and `delta = Σ dO ⊙ O` per row (float32): with
`p = exp(s − lse)` recomputed from q and k, `dV = bf16(p)ᵀ dO`, `dP = dO vᵀ`,
`dS = p ⊙ (dP − delta)`, `dQ = bf16(dS) k · scale`, `dK = bf16(dS)ᵀ q · scale`, every product
accumulated in float32 and the results rounded to bf16.  The buffer form takes dq, dk, dv as
three more operands.""",
    operands=(Operand("values", ANY, Variadicity.VARIADIC,
                      "q, k, v, lse, do, delta (tensor form); then dq, dk, dv (buffer form)"),),
    results=(Result("results", ANY, Variadicity.VARIADIC, "tensor form: dq, dk, dv"),),
    attributes=_ATTRS, rules=_RULES, verify=_verify_attention_grad,
)

OPS = (ATTENTION, ATTENTION_GRAD)
