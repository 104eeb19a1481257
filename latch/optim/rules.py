"""Learning rules: optimizers and the combinators that build a whole update from them.

Every rule can (a) declare the training state it needs for a list of parameters
(:meth:`Rule.state_decls`) and (b) emit Latch ops for one update (:meth:`Rule.emit`), given the
current parameter values and gradients, the current value of every state, and the number of
steps this rule has already taken.  ``emit`` is functional: it returns the new parameter values
and a dict ``{state name: new value}`` of the states it changes; writes happen at top level.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import math
from typing import Sequence

from latch.errors import LatchError
from latch.optim.emit import (F32, Emitter, ParamSpec, Scope, Slot, StateDecl, V, f64_attr,
                              i1_attr, i64_attr, lr_value)
from latch.optim.schedules import Schedule, check_finite, check_int


def _check_lr(owner: str, lr):
    if isinstance(lr, Schedule):
        return lr
    if isinstance(lr, bool):
        raise LatchError(f"{owner}: lr must be a float or a schedule, got {lr!r}")
    try:
        x = float(lr)
    except (TypeError, ValueError):
        raise LatchError(f"{owner}: lr must be a float or a schedule "
                         f"(e.g. latch.optim.warmup_cosine), got {lr!r}") from None
    if math.isnan(x) or math.isinf(x) or x < 0:
        raise LatchError(f"{owner}: invalid learning rate {x} (must be finite and >= 0)")
    return x


class Rule:
    """Base class of learning rules."""

    def state_decls(self, params: Sequence[ParamSpec], scope: Scope) -> list[StateDecl]:
        raise NotImplementedError

    def emit(self, em: Emitter, params: list[Slot], states: dict[str, V], step: V,
             scope: Scope) -> tuple[list[V], dict[str, V]]:
        raise NotImplementedError

    def bind(self, names: Sequence[str]) -> None:
        """Check the rule against the model's parameter names (partition patterns)."""
        for child in self.children():
            child.bind(names)

    def children(self) -> list["Rule"]:
        return []

    def describe(self) -> dict:
        """A canonical, JSON-able description of the rule (its type and every
        hyperparameter, children and schedules included), independent of the process:
        hashed into the compile-cache key (latch.cache)."""
        return describe_value(self)


def describe_value(v):
    """Canonical JSON-able form of a rule, schedule or hyperparameter value (floats print
    exactly: JSON uses the shortest repr that round-trips); a value with no canonical form
    raises TypeError."""
    if isinstance(v, (Rule, Schedule)):
        if type(v).describe not in (Rule.describe, Schedule.describe):
            return v.describe()                  # a subclass with its own description
        if not dataclasses.is_dataclass(v):
            raise TypeError(f"{type(v).__qualname__} has no canonical description "
                            "(make it a dataclass or give it a describe() method)")
        return {"type": f"{type(v).__module__}.{type(v).__qualname__}",
                **{f.name: describe_value(getattr(v, f.name)) for f in dataclasses.fields(v)}}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return [describe_value(x) for x in v]
    raise TypeError(f"{type(v).__qualname__} has no canonical description")


# ----------------------------------------------------------------------------- optimizers
@dataclasses.dataclass(frozen=True)
class SGD(Rule):
    """torch.optim.SGD (dampening 0): ``SGD(lr, momentum=0.0, weight_decay=0.0, nesterov=False)``."""
    lr: object
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    def __post_init__(self):
        object.__setattr__(self, "lr", _check_lr("SGD", self.lr))
        object.__setattr__(self, "momentum", check_finite("SGD: momentum", self.momentum, nonneg=True))
        object.__setattr__(self, "weight_decay",
                           check_finite("SGD: weight_decay", self.weight_decay, nonneg=True))
        if not isinstance(self.nesterov, bool):
            raise LatchError(f"SGD: nesterov must be a bool, got {self.nesterov!r}")
        if self.nesterov and self.momentum <= 0:
            raise LatchError("SGD: nesterov momentum requires momentum > 0")

    def state_decls(self, params, scope):
        if self.momentum == 0:
            return []
        return [StateDecl(f"{p.name}.momentum_buffer", p.type, "moment") for p in params]

    def emit(self, em, params, states, step, scope):
        lr = lr_value(em, self.lr, step)
        attrs = {"momentum": f64_attr(self.momentum), "weight_decay": f64_attr(self.weight_decay),
                 "nesterov": i1_attr(self.nesterov)}
        new_params, new_states = [], {}
        for p in params:
            if self.momentum == 0:
                (np_,) = em.op("latch.sgd", [p.value, p.grad, lr], [p.type], attrs)
            else:
                key = f"{p.name}.momentum_buffer"
                np_, nb = em.op("latch.sgd", [p.value, p.grad, lr, states[key]], [p.type, p.type], attrs)
                new_states[key] = nb
            new_params.append(np_)
        return new_params, new_states


@dataclasses.dataclass(frozen=True)
class AdamW(Rule):
    """torch.optim.AdamW: ``AdamW(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)``."""
    lr: object
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01

    def __post_init__(self):
        object.__setattr__(self, "lr", _check_lr("AdamW", self.lr))
        try:
            b1, b2 = self.betas
        except (TypeError, ValueError):
            raise LatchError(f"AdamW: betas must be a pair (beta1, beta2), got {self.betas!r}") from None
        b1 = check_finite("AdamW: betas[0]", b1, below_one=True)
        b2 = check_finite("AdamW: betas[1]", b2, below_one=True)
        object.__setattr__(self, "betas", (b1, b2))
        object.__setattr__(self, "eps", check_finite("AdamW: eps", self.eps, positive=True))
        object.__setattr__(self, "weight_decay",
                           check_finite("AdamW: weight_decay", self.weight_decay, nonneg=True))

    def state_decls(self, params, scope):
        out = []
        for p in params:
            out += [StateDecl(f"{p.name}.exp_avg", p.type, "moment"),
                    StateDecl(f"{p.name}.exp_avg_sq", p.type, "moment")]
        return out

    def emit(self, em, params, states, step, scope):
        lr = lr_value(em, self.lr, step)
        t = em.i64_add(step, 1)  # 1-based count of this step (bias correction)
        attrs = {"beta1": f64_attr(self.betas[0]), "beta2": f64_attr(self.betas[1]),
                 "eps": f64_attr(self.eps), "weight_decay": f64_attr(self.weight_decay)}
        new_params, new_states = [], {}
        for p in params:
            km, kv = f"{p.name}.exp_avg", f"{p.name}.exp_avg_sq"
            np_, nm, nv = em.op("latch.adamw", [p.value, p.grad, states[km], states[kv], lr, t],
                                [p.type] * 3, attrs)
            new_params.append(np_)
            new_states[km], new_states[kv] = nm, nv
        return new_params, new_states


# ----------------------------------------------------------------------------- combinators
@dataclasses.dataclass(frozen=True)
class Partition(Rule):
    """Parameter groups by fnmatch pattern on parameter names; first matching pattern wins."""
    groups: tuple  # ((pattern, rule), ...)

    def __post_init__(self):
        if not self.groups:
            raise LatchError("partition: needs at least one {pattern: rule} entry")
        for pat, rule in self.groups:
            if not isinstance(pat, str) or not pat:
                raise LatchError(f"partition: patterns must be non-empty strings, got {pat!r}")
            if not isinstance(rule, Rule):
                raise LatchError(f"partition: the rule for pattern '{pat}' is not a learning rule: {rule!r}")

    def children(self):
        return [r for _, r in self.groups]

    def assign(self, names: Sequence[str]) -> list[list[str]]:
        """The parameter names of each group (raises on unmatched parameters or patterns)."""
        out = [[] for _ in self.groups]
        for n in names:
            for i, (pat, _) in enumerate(self.groups):
                if fnmatch.fnmatchcase(n, pat):
                    out[i].append(n)
                    break
            else:
                pats = ", ".join(repr(p) for p, _ in self.groups)
                raise LatchError(f"partition: parameter '{n}' matches none of the patterns {pats}; "
                                 "add a catch-all pattern such as '*'")
        for (pat, _), members in zip(self.groups, out):
            if not members:
                raise LatchError(f"partition: pattern '{pat}' matches no parameter "
                                 f"(parameters: {', '.join(names)})")
        return out

    def bind(self, names):
        for (pat, rule), members in zip(self.groups, self.assign(names)):
            rule.bind(members)

    def state_decls(self, params, scope):
        by_name = {p.name: p for p in params}
        out = []
        for i, ((_, rule), members) in enumerate(zip(self.groups, self.assign(list(by_name)))):
            out += rule.state_decls([by_name[n] for n in members], scope.child(f"group{i}."))
        return out

    def emit(self, em, params, states, step, scope):
        by_name = {p.name: p for p in params}
        new_by_name, new_states = {}, {}
        for i, ((_, rule), members) in enumerate(zip(self.groups, self.assign(list(by_name)))):
            slots = [by_name[n] for n in members]
            np_, ns = rule.emit(em, slots, states, step, scope.child(f"group{i}."))
            new_by_name.update({s.name: v for s, v in zip(slots, np_)})
            new_states.update(ns)
        return [new_by_name[p.name] for p in params], new_states


@dataclasses.dataclass(frozen=True)
class Every(Rule):
    """Accumulate the mean gradient over ``n`` updates and apply ``rule`` on every n-th (optax.MultiSteps)."""
    n: int
    rule: Rule

    def __post_init__(self):
        object.__setattr__(self, "n", check_int("every: n", self.n, minimum=1))
        if not isinstance(self.rule, Rule):
            raise LatchError(f"every: expected a learning rule, got {self.rule!r}")

    def children(self):
        return [self.rule]

    def _acc_name(self, param: str, scope: Scope) -> str:
        return f"{param}.grad_acc" + (f".{scope.every_depth}" if scope.every_depth else "")

    def _counter(self, scope: Scope) -> str:
        return f"{scope.prefix}every.count"

    def state_decls(self, params, scope):
        out = [StateDecl(self._counter(scope), "tensor<i64>", "counter")]
        out += [StateDecl(self._acc_name(p.name, scope), p.type, "grad_acc") for p in params]
        out += self.rule.state_decls(params, scope.child("every.", every=True))
        return out

    def emit(self, em, params, states, step, scope):
        inner_scope = scope.child("every.", every=True)
        inner_names = [d.name for d in self.rule.state_decls(
            [ParamSpec(p.name, p.type) for p in params], inner_scope)]
        micro = states[self._counter(scope)]           # microbatches seen before this one
        count = em.i64_add(micro, 1)                   # ... including this one
        acc_names = [self._acc_name(p.name, scope) for p in params]
        accs = [em.op("latch.accumulate", [states[a], p.grad], [p.type])[0]
                for a, p in zip(acc_names, params)]
        passthrough = [p.value for p in params] + accs + [states[k] for k in inner_names]
        types = [v.type for v in passthrough]

        def body(_args):
            inner_step = em.i64_floordiv(micro, self.n)  # inner steps already taken
            slots = [Slot(p.name, p.type, p.value, em.divide(a, self.n)) for p, a in zip(params, accs)]
            new_params, new_inner = self.rule.emit(em, slots, states, inner_step, inner_scope)
            zeros = [em.zeros(p.type) for p in params]
            em.op("latch.yield", list(new_params) + zeros +
                  [new_inner.get(k, states[k]) for k in inner_names], [])

        res = em.op_region("latch.every", [count] + passthrough, types,
                           {"period": i64_attr(self.n)}, [], body)
        k = len(params)
        new_states = {self._counter(scope): count}
        new_states.update(dict(zip(acc_names, res[k:2 * k])))
        new_states.update(dict(zip(inner_names, res[2 * k:])))
        return res[:k], new_states


@dataclasses.dataclass(frozen=True)
class ClipGradNorm(Rule):
    """Clip the gradients of the params ``rule`` covers to global norm ``max_norm``, then apply ``rule``."""
    max_norm: float
    rule: Rule

    def __post_init__(self):
        object.__setattr__(self, "max_norm",
                           check_finite("clip_grad_norm: max_norm", self.max_norm, positive=True))
        if not isinstance(self.rule, Rule):
            raise LatchError(f"clip_grad_norm: expected a learning rule, got {self.rule!r}")

    def children(self):
        return [self.rule]

    def state_decls(self, params, scope):
        return self.rule.state_decls(params, scope)

    def emit(self, em, params, states, step, scope):
        res = em.op("latch.clip_global_norm", [p.grad for p in params],
                    [p.type for p in params] + [F32], {"max_norm": f64_attr(self.max_norm)})
        slots = [Slot(p.name, p.type, p.value, g) for p, g in zip(params, res[:-1])]
        return self.rule.emit(em, slots, states, step, scope)


# ----------------------------------------------------------------------------- user-facing constructors
def partition(groups: dict) -> Partition:
    """``partition({"experts.*": every(4, AdamW(1e-3)), "*": AdamW(1e-3)})``: first match wins."""
    if not isinstance(groups, dict):
        raise LatchError(f"partition: expected a dict {{pattern: rule}}, got {type(groups).__name__}")
    return Partition(tuple(groups.items()))


def every(n: int, rule: Rule) -> Every:
    """Apply ``rule`` to the mean gradient of every ``n`` updates; params stay unchanged in between."""
    return Every(n, rule)


def clip_grad_norm(max_norm: float, rule: Rule) -> ClipGradNorm:
    """torch.nn.utils.clip_grad_norm_ over the params ``rule`` covers, before ``rule``."""
    return ClipGradNorm(max_norm, rule)
