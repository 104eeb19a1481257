"""Learning-rate schedules: values usable as ``lr`` that the program evaluates from its step counter."""
from __future__ import annotations

import dataclasses
import math

from latch.errors import LatchError


def check_finite(what: str, value, *, positive=False, nonneg=False, below_one=False) -> float:
    """Validate one float hyperparameter; returns it as a Python float."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise LatchError(f"{what} must be a number, got {value!r}") from None
    if math.isnan(x) or math.isinf(x):
        raise LatchError(f"{what} must be finite, got {x}")
    if positive and not x > 0:
        raise LatchError(f"{what} must be > 0, got {x}")
    if nonneg and not x >= 0:
        raise LatchError(f"{what} must be >= 0, got {x}")
    if below_one and not (0 <= x < 1):
        raise LatchError(f"{what} must be in [0, 1), got {x}")
    return x


def check_int(what: str, value, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise LatchError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise LatchError(f"{what} must be >= {minimum}, got {value}")
    return int(value)


class Schedule:
    """Base class of learning-rate schedules (evaluated inside the program)."""

    def value_at(self, step: int) -> float:  # reference semantics, used by tests and docs
        raise NotImplementedError

    def describe(self) -> dict:
        """Canonical JSON-able description (type and parameters), hashed into cache keys."""
        from latch.optim.rules import describe_value
        return describe_value(self)


@dataclasses.dataclass(frozen=True)
class WarmupCosine(Schedule):
    """``lr(s)``, s = number of updates already taken (0-based):

    * ``peak * (s + 1) / warmup_steps`` for ``s < warmup_steps``;
    * cosine from ``peak`` down to ``peak * final_ratio`` over ``[warmup_steps, total_steps]``;
    * ``peak * final_ratio`` after ``total_steps``.
    Lowered from ``latch.warmup_cosine`` by ``latch-lower-schedules``.
    """
    peak: float
    warmup_steps: int
    total_steps: int
    final_ratio: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "peak", check_finite("warmup_cosine: peak", self.peak, positive=True))
        object.__setattr__(self, "warmup_steps",
                           check_int("warmup_cosine: warmup_steps", self.warmup_steps, minimum=0))
        object.__setattr__(self, "total_steps",
                           check_int("warmup_cosine: total_steps", self.total_steps, minimum=1))
        if self.total_steps <= self.warmup_steps:
            raise LatchError(f"warmup_cosine: total_steps ({self.total_steps}) must be > "
                             f"warmup_steps ({self.warmup_steps})")
        r = check_finite("warmup_cosine: final_ratio", self.final_ratio, nonneg=True)
        if r > 1:
            raise LatchError(f"warmup_cosine: final_ratio must be in [0, 1], got {r}")
        object.__setattr__(self, "final_ratio", r)

    def value_at(self, step: int) -> float:
        return warmup_cosine_value(step, self.peak, self.warmup_steps, self.total_steps,
                                   self.final_ratio)


def warmup_cosine_value(s: int, peak: float, warmup: int, total: int, final_ratio: float) -> float:
    """The reference formula (float64) of ``latch.warmup_cosine``."""
    final = peak * final_ratio
    if s < warmup:
        return peak * (s + 1) / warmup
    progress = min(1.0, (s - warmup) / (total - warmup))
    return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine(peak: float, warmup_steps: int, total_steps: int, final_ratio: float = 0.0) -> WarmupCosine:
    """Linear warmup to ``peak`` then cosine decay to ``peak * final_ratio`` (usable as ``lr``)."""
    return WarmupCosine(peak, warmup_steps, total_steps, final_ratio)
