"""Structured control of a learning rule: every-N selective updates (``latch.every``), a body
applied K times with shared weights (``latch.loop``), a scan over a leading dimension
(``latch.scan``), and their terminator (``latch.yield``)."""
from __future__ import annotations

from mlir import ir

from .opdef import (
    ANY, I64, I64_SCALAR, Attr, OpDef, Operand, Region, Result, Rule, Variadicity,
    VerifyEnv, Violation, attr_value,
)


def _types(values) -> list[ir.Type]:
    return [v.type for v in values]


def _fmt(types) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def _body(op) -> ir.Block:
    return op.regions[0].blocks[0]


def _yielded(op) -> list[ir.Type]:
    return _types(list(_body(op).operations)[-1].operands)


def _positive(op, name: str, rule: str, lo: int = 1) -> int:
    x = attr_value(op.attributes[name])
    if x < lo:
        raise Violation(op, rule, f"{name} must be >= {lo}, got {x}")
    return x


def _expect(op, rule: str, what: str, got, want) -> None:
    if list(got) != list(want):
        raise Violation(op, rule, f"{what} must be {_fmt(want)}, got {_fmt(got)}")


def _verify_every(op, env: VerifyEnv) -> None:
    _positive(op, "period", "period")
    passthrough = _types(op.operands[1:])
    _expect(op, "result-types", "result types", _types(op.results), passthrough)
    _expect(op, "yield-types", "yielded types", _yielded(op), passthrough)


def _verify_loop(op, env: VerifyEnv) -> None:
    _positive(op, "times", "times")
    inits = _types(op.operands)
    _expect(op, "result-types", "result types", _types(op.results), inits)
    iteration = ir.RankedTensorType.get([], ir.IntegerType.get_signless(64))
    _expect(op, "block-args", "block argument types", _types(_body(op).arguments),
            [iteration] + inits)
    _expect(op, "yield-types", "yielded types", _yielded(op), inits)


def _slice(t: ir.Type) -> ir.Type:
    return ir.RankedTensorType.get(list(t.shape)[1:], t.element_type)


def _stack(t: ir.Type, length: int) -> ir.Type | None:
    if not isinstance(t, ir.RankedTensorType):
        return None
    return ir.RankedTensorType.get([length] + list(t.shape), t.element_type)


def _verify_scan(op, env: VerifyEnv) -> None:
    n = _positive(op, "num_carries", "num-carries", lo=0)
    length = _positive(op, "length", "length")
    if n > len(op.operands):
        raise Violation(op, "num-carries", f"num_carries ({n}) exceeds the number of operands "
                        f"({len(op.operands)})")
    carries, xs = _types(op.operands[:n]), _types(op.operands[n:])
    for i, t in enumerate(xs):
        if not isinstance(t, ir.RankedTensorType) or t.rank < 1 or t.shape[0] != length:
            raise Violation(op, "xs-length", f"x #{i} must be a ranked tensor with leading "
                            f"dimension {length} (length), got {t}")
    _expect(op, "block-args", "block argument types", _types(_body(op).arguments),
            carries + [_slice(t) for t in xs])
    yielded = _yielded(op)
    _expect(op, "yield-types", "the first num_carries yielded types", yielded[:n], carries)
    ys = yielded[n:]
    stacked = [_stack(t, length) for t in ys]
    if any(s is None for s in stacked):
        raise Violation(op, "yield-types", f"yielded y slices must be ranked tensors, got "
                        f"{_fmt(ys)}")
    _expect(op, "result-types", "result types", _types(op.results), carries + stacked)


EVERY = OpDef(
    "latch.every", family="control", builder="every",
    summary="run a region every `period` microbatches, else pass values through",
    doc="""A predicated region (not isolated from above): if `counter % period == 0` the region
runs and the values of its `latch.yield` are the results; otherwise the results are the
`passthrough` operands unchanged.  `counter` is the number of microbatches seen *including*
this one (1-based).  Used for selective updates: a parameter group steps every N microbatches
and accumulates gradients in between.""",
    operands=(Operand("counter", I64_SCALAR, doc="microbatches seen, including this one"),
              Operand("passthrough", ANY, Variadicity.VARIADIC, "the results when skipped")),
    results=(Result("results", ANY, Variadicity.VARIADIC, "same types as `passthrough`"),),
    attributes=(Attr("period", I64, ">= 1"),),
    regions=(Region("body", "none", "latch.yield", no_block_args=True),),
    rules=(
        Rule("period", "period >= 1."),
        Rule("result-types", "the result types are the passthrough types."),
        Rule("yield-types", "the region yields exactly the passthrough types."),
    ),
    verify=_verify_every,
)

LOOP = OpDef(
    "latch.loop", family="control", builder="loop",
    summary="apply a body `times` times to loop-carried values",
    doc="""Applies the body `times` times.  The block arguments are the iteration number
(`tensor<i64>`, 0-based) and the carried values; the body yields the next carried values, and
the results are the carried values after the last iteration.  Not isolated from above: shared
weights are captured, not carried.  Used for looped layers (one body, K applications).""",
    operands=(Operand("inits", ANY, Variadicity.VARIADIC, "initial carried values"),),
    results=(Result("results", ANY, Variadicity.VARIADIC, "same types as `inits`"),),
    attributes=(Attr("times", I64, ">= 1"),),
    regions=(Region("body", "(iteration: tensor<i64>, carried values...)", "latch.yield"),),
    rules=(
        Rule("times", "times >= 1."),
        Rule("result-types", "the result types are the `inits` types."),
        Rule("block-args", "the block arguments are `tensor<i64>` then the `inits` types."),
        Rule("yield-types", "the region yields the `inits` types."),
    ),
    verify=_verify_loop,
)

SCAN = OpDef(
    "latch.scan", family="control", builder="scan",
    summary="jax.lax.scan over the leading dimension of the xs",
    doc="""`jax.lax.scan`: the first `num_carries` operands are the initial carries, the rest
are the xs, each with leading dimension `length`.  Step `i` runs the body on (carries...,
x slices `x[i]`...) and yields (next carries..., y slices...).  The results are the final
carries followed by the ys stacked along a new leading dimension of size `length`.  Used for
token-by-token adaptation (a gradient step on fast weights per token).""",
    operands=(Operand("operands", ANY, Variadicity.VARIADIC, "carries, then xs"),),
    results=(Result("results", ANY, Variadicity.VARIADIC, "final carries, then stacked ys"),),
    attributes=(Attr("num_carries", I64, ">= 0, <= number of operands"),
                Attr("length", I64, ">= 1, the leading dimension of every x")),
    regions=(Region("body", "(carries..., x slices...)", "latch.yield"),),
    rules=(
        Rule("num-carries", "0 <= num_carries <= number of operands."),
        Rule("length", "length >= 1."),
        Rule("xs-length", "every x is a ranked tensor with leading dimension `length`."),
        Rule("block-args", "the block arguments are the carry types, then each x's type "
                           "without its leading dimension."),
        Rule("yield-types", "the region yields the carry types, then ranked-tensor y slices."),
        Rule("result-types", "the results are the carry types, then each y slice type with a "
                             "new leading dimension `length`."),
    ),
    verify=_verify_scan,
)

YIELD = OpDef(
    "latch.yield", family="control", builder="yield_",
    summary="terminator of latch.every, latch.loop and latch.scan bodies",
    doc="Ends the body of a `latch.every`, `latch.loop` or `latch.scan`; its operands are the "
        "body's values (see each op).",
    operands=(Operand("values", ANY, Variadicity.VARIADIC),),
    parents=("latch.every", "latch.loop", "latch.scan"),
)

OPS = (EVERY, LOOP, SCAN, YIELD)
