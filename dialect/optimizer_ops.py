"""Learning-rule ops: optimizer steps, gradient clipping, the learning-rate schedule and
gradient accumulation.  All are pure functions of tensors."""
from __future__ import annotations

from .opdef import (
    F32_SCALAR, F64, FLOAT_TENSOR, I1, I64, I64_SCALAR, Attr, OpDef, Operand, Result, Rule,
    Variadicity, VerifyEnv, Violation, attr_value, check_finite, float_attr,
)

_FINITE = Rule("finite", "every float hyperparameter is finite.")


def _same_type(op, names_and_values, rule: str = "same-type") -> None:
    (first_name, first), *rest = names_and_values
    for name, value in rest:
        if value.type != first.type:
            raise Violation(op, rule, f"{name} type {value.type} differs from {first_name} type "
                            f"{first.type}")


def _at_least(op, name: str, lo: float, rule: str) -> float:
    x = float_attr(op, name)
    if x < lo:
        raise Violation(op, rule, f"{name} must be >= {lo:g}, got {x:g}")
    return x


def _verify_sgd(op, env: VerifyEnv) -> None:
    check_finite(op, ("momentum", "weight_decay"))
    momentum = _at_least(op, "momentum", 0.0, "momentum")
    _at_least(op, "weight_decay", 0.0, "weight-decay")
    nesterov = attr_value(op.attributes["nesterov"])
    has_buf = len(op.operands) == 4
    if has_buf != (momentum != 0.0):
        raise Violation(op, "buf-iff-momentum",
                        f"has {'a' if has_buf else 'no'} momentum buffer but momentum is "
                        f"{momentum:g} (buf is required iff momentum != 0)")
    if len(op.results) != len(op.operands) - 2:
        raise Violation(op, "buf-iff-momentum",
                        "has new_buf iff it has buf: expected "
                        f"{len(op.operands) - 2} results, got {len(op.results)}")
    if nesterov and momentum <= 0.0:
        raise Violation(op, "nesterov", "nesterov requires momentum > 0")
    p, g = op.operands[0], op.operands[1]
    values = [("param", p), ("grad", g), ("new_param", op.results[0])]
    if has_buf:
        values += [("buf", op.operands[3]), ("new_buf", op.results[1])]
    _same_type(op, values)


def _verify_adamw(op, env: VerifyEnv) -> None:
    check_finite(op, ("beta1", "beta2", "eps", "weight_decay"))
    for beta in ("beta1", "beta2"):
        b = float_attr(op, beta)
        if not 0.0 <= b < 1.0:
            raise Violation(op, "beta", f"{beta} must be in [0, 1), got {b:g}")
    eps = float_attr(op, "eps")
    if eps <= 0.0:
        raise Violation(op, "eps", f"eps must be > 0, got {eps:g}")
    _at_least(op, "weight_decay", 0.0, "weight-decay")
    names = ("param", "grad", "m", "v")
    _same_type(op, list(zip(names, op.operands[:4]))
               + list(zip(("new_param", "new_m", "new_v"), op.results)))


def _verify_clip(op, env: VerifyEnv) -> None:
    check_finite(op, ("max_norm",))
    max_norm = float_attr(op, "max_norm")
    if max_norm <= 0.0:
        raise Violation(op, "max-norm", f"max_norm must be > 0, got {max_norm:g}")
    want = [v.type for v in op.operands]
    got = [r.type for r in op.results][:-1]
    if got != want:
        raise Violation(op, "result-types", "results must be the operands' types followed by "
                        f"tensor<f32>; got ({', '.join(map(str, got))}) for operands "
                        f"({', '.join(map(str, want))})")


def _verify_warmup_cosine(op, env: VerifyEnv) -> None:
    check_finite(op, ("peak", "final_ratio"))
    peak = float_attr(op, "peak")
    if peak <= 0.0:
        raise Violation(op, "peak", f"peak must be > 0, got {peak:g}")
    warmup = attr_value(op.attributes["warmup_steps"])
    total = attr_value(op.attributes["total_steps"])
    if warmup < 0:
        raise Violation(op, "warmup", f"warmup_steps must be >= 0, got {warmup}")
    if total <= warmup:
        raise Violation(op, "total", f"total_steps ({total}) must be > warmup_steps ({warmup})")
    ratio = float_attr(op, "final_ratio")
    if not 0.0 <= ratio <= 1.0:
        raise Violation(op, "final-ratio", f"final_ratio must be in [0, 1], got {ratio:g}")


def _verify_accumulate(op, env: VerifyEnv) -> None:
    _same_type(op, [("acc", op.operands[0]), ("grad", op.operands[1]),
                    ("new_acc", op.results[0])])


_SAME = "param, grad{extra} and the corresponding results share one type."

SGD = OpDef(
    "latch.sgd", family="learning rules", builder="sgd",
    summary="one step of torch.optim.SGD (dampening 0)",
    doc="""Exactly `torch.optim.SGD` with dampening 0:

    g'  = g + weight_decay * p
    buf' = momentum * buf + g'                      (only with momentum)
    d   = nesterov ? g' + momentum * buf' : buf'    (without momentum: d = g')
    p'  = p - lr * d

The momentum buffer is a state that starts at zero, so `buf' = momentum * buf + g'` also
covers torch's first step (`buf = g'`).  `buf`/`new_buf` are present iff momentum != 0.""",
    operands=(
        Operand("param", FLOAT_TENSOR), Operand("grad", FLOAT_TENSOR),
        Operand("lr", F32_SCALAR, doc="the learning rate of this step"),
        Operand("buf", FLOAT_TENSOR, Variadicity.OPTIONAL, "momentum buffer"),
    ),
    results=(
        Result("new_param", FLOAT_TENSOR),
        Result("new_buf", FLOAT_TENSOR, Variadicity.OPTIONAL, "present iff `buf` is"),
    ),
    attributes=(
        Attr("momentum", F64, ">= 0"), Attr("weight_decay", F64, ">= 0 (L2, added to g)"),
        Attr("nesterov", I1, "Nesterov momentum; requires momentum > 0"),
    ),
    rules=(
        _FINITE,
        Rule("momentum", "momentum >= 0."),
        Rule("weight-decay", "weight_decay >= 0."),
        Rule("buf-iff-momentum", "`buf` (and `new_buf`) are present iff momentum != 0."),
        Rule("nesterov", "nesterov requires momentum > 0."),
        Rule("same-type", _SAME.format(extra=", buf")),
    ),
    verify=_verify_sgd,
)

ADAMW = OpDef(
    "latch.adamw", family="learning rules", builder="adamw",
    summary="one step of torch.optim.AdamW",
    doc="""Exactly `torch.optim.AdamW` (no amsgrad), with `t` = `step`:

    p  <- p * (1 - lr * weight_decay)
    m' = beta1 * m + (1 - beta1) * g
    v' = beta2 * v + (1 - beta2) * g^2
    p' = p - lr * (m' / (1 - beta1^t)) / (sqrt(v' / (1 - beta2^t)) + eps)

`step` is the 1-based count of this step (used for bias correction).""",
    operands=(
        Operand("param", FLOAT_TENSOR), Operand("grad", FLOAT_TENSOR),
        Operand("m", FLOAT_TENSOR, doc="first moment"),
        Operand("v", FLOAT_TENSOR, doc="second moment"),
        Operand("lr", F32_SCALAR, doc="the learning rate of this step"),
        Operand("step", I64_SCALAR, doc="1-based number of this step"),
    ),
    results=(Result("new_param", FLOAT_TENSOR), Result("new_m", FLOAT_TENSOR),
             Result("new_v", FLOAT_TENSOR)),
    attributes=(
        Attr("beta1", F64, "in [0, 1)"), Attr("beta2", F64, "in [0, 1)"),
        Attr("eps", F64, "> 0"), Attr("weight_decay", F64, ">= 0 (decoupled)"),
    ),
    rules=(
        _FINITE,
        Rule("beta", "0 <= beta1 < 1 and 0 <= beta2 < 1."),
        Rule("eps", "eps > 0."),
        Rule("weight-decay", "weight_decay >= 0."),
        Rule("same-type", _SAME.format(extra=", m, v")),
    ),
    verify=_verify_adamw,
)

CLIP_GLOBAL_NORM = OpDef(
    "latch.clip_global_norm", family="learning rules", builder="clip_global_norm",
    summary="clip gradients by their global L2 norm",
    doc="""`torch.nn.utils.clip_grad_norm_` over all operands together:

    total = sqrt(sum_i ||g_i||^2)
    coef  = min(1, max_norm / (total + 1e-6))
    g_i'  = g_i * coef

Results: the clipped gradients (same types, same order), then `total` as `tensor<f32>`.""",
    operands=(Operand("grads", FLOAT_TENSOR, Variadicity.VARIADIC),),
    results=(Result("clipped", FLOAT_TENSOR, Variadicity.VARIADIC, "same types as `grads`"),
             Result("norm", F32_SCALAR, doc="the total norm before clipping")),
    attributes=(Attr("max_norm", F64, "> 0"),),
    rules=(
        _FINITE,
        Rule("max-norm", "max_norm > 0."),
        Rule("result-types", "the results are the operands' types followed by `tensor<f32>`."),
    ),
    verify=_verify_clip,
)

WARMUP_COSINE = OpDef(
    "latch.warmup_cosine", family="learning rules", builder="warmup_cosine",
    summary="linear warmup then cosine decay of the learning rate",
    doc="""The learning rate after `s` = `step` updates (0-based):

    s <  warmup:          lr = peak * (s + 1) / warmup
    warmup <= s < total:  lr = final + (peak - final) * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2
    s >= total:           lr = final                  where final = peak * final_ratio""",
    operands=(Operand("step", I64_SCALAR, doc="number of updates already taken (0-based)"),),
    results=(Result("lr", F32_SCALAR),),
    attributes=(
        Attr("peak", F64, "> 0"), Attr("warmup_steps", I64, ">= 0"),
        Attr("total_steps", I64, "> warmup_steps"), Attr("final_ratio", F64, "in [0, 1]"),
    ),
    rules=(
        _FINITE,
        Rule("peak", "peak > 0."),
        Rule("warmup", "warmup_steps >= 0."),
        Rule("total", "total_steps > warmup_steps."),
        Rule("final-ratio", "0 <= final_ratio <= 1."),
    ),
    verify=_verify_warmup_cosine,
)

ACCUMULATE = OpDef(
    "latch.accumulate", family="learning rules", builder="accumulate",
    summary="gradient accumulation: acc + grad",
    doc="`new_acc = acc + grad`, elementwise.",
    operands=(Operand("acc", FLOAT_TENSOR), Operand("grad", FLOAT_TENSOR)),
    results=(Result("new_acc", FLOAT_TENSOR),),
    rules=(Rule("same-type", "acc, grad and new_acc share one type."),),
    verify=_verify_accumulate,
)

OPS = (SGD, ADAMW, CLIP_GLOBAL_NORM, WARMUP_COSINE, ACCUMULATE)
