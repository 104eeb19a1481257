"""latch-lower-schedules: latch.warmup_cosine -> arith/math on the rank-0 step counter.

``lr(s)`` (s = updates already taken) is computed in f64 and truncated to ``tensor<f32>``:
``peak*(s+1)/warmup`` for ``s < warmup``, else
``final + (peak-final) * 0.5 * (1 + cos(pi * min(1, (s-warmup)/(total-warmup))))`` with
``final = peak*final_ratio``.
"""
from __future__ import annotations

import dataclasses
import math

from latch.errors import PassError
from latch.passes.base import ModulePass
from latch.passes.lower_optimizers import (add, attr_float, attr_int, collect, create, div, fcast,
                                           fconst, fmin, _fm, extract, ir, mul, replace, sub,
                                           to_tensor)


@dataclasses.dataclass(frozen=True)
class LowerSchedules(ModulePass):
    name = "latch-lower-schedules"
    summary = "lower latch.warmup_cosine to arith/math on rank-0 tensors"

    def apply(self, module) -> None:
        I = ir()
        for op in collect(module, ("latch.warmup_cosine",)):
            with I.InsertionPoint(op), op.location:
                replace(op, [_warmup_cosine(op)])


def _warmup_cosine(op):
    I = ir()
    peak, ratio = attr_float(op, "peak"), attr_float(op, "final_ratio")
    warmup, total = attr_int(op, "warmup_steps"), attr_int(op, "total_steps")
    if total <= warmup or peak <= 0 or not 0 <= ratio <= 1 or warmup < 0:
        raise PassError("'latch.warmup_cosine': needs peak > 0, 0 <= warmup_steps < total_steps "
                        "and 0 <= final_ratio <= 1", op.location)
    f64, f32, i64 = I.F64Type.get(), I.F32Type.get(), I.IntegerType.get_signless(64)
    step_i = extract(op.operands[0])
    s = create("arith.sitofp", [step_i], [f64]).result
    final = peak * ratio
    progress = fmin(fconst(1.0, f64),
                    div(sub(s, fconst(float(warmup), f64)), fconst(float(total - warmup), f64)))
    cos = create("math.cos", [mul(fconst(math.pi, f64), progress)], [f64], _fm()).result
    lr = add(fconst(final, f64), mul(fconst((peak - final) * 0.5, f64), add(fconst(1.0, f64), cos)))
    if warmup > 0:
        warm = div(mul(fconst(peak, f64), add(s, fconst(1.0, f64))), fconst(float(warmup), f64))
        limit = create("arith.constant", [], [i64], {"value": I.IntegerAttr.get(i64, warmup)}).result
        cond = create("arith.cmpi", [step_i, limit], [I.IntegerType.get_signless(1)],
                      {"predicate": I.IntegerAttr.get(i64, 2)}).result
        lr = create("arith.select", [cond, warm, lr], [f64]).result
    return to_tensor(fcast(lr, f32))
