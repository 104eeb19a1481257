"""The Latch dialect: ops that describe one training update (state, learning rules, control).

    import latch.dialect
    from latch.dialect import builders as lt

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load()            # once per context; later calls do nothing
        ...
        p2, m2, v2 = lt.adamw(p, g, m, v, lr, step, beta1=0.9, beta2=0.999)

Every op is described once, declaratively, in :data:`OPS` (one module per op family:
``state_ops``, ``optimizer_ops``, ``control_ops``, ``collective_ops``,
``attention_ops``).  That description
drives the verifier (``latch-verify``, :func:`latch.passes.latch_verify.verify_module`), the
reference (``python -m latch.dialect.docgen > docs/dialect.md``) and its IRDL rendering
(:mod:`latch.dialect.irdl_bridge`).

How the ops exist in MLIR 22: IRDL (``mlir.dialects.irdl``) cannot express two things the
spec needs, so the IRDL definitions are not loaded under ``latch``:

1. a block in a region of an IRDL-defined op must end with an op that has the
   ``IsTerminator`` trait, and IRDL ops have no traits, so ``latch.update``/``every``/``loop``
   /``scan`` bodies ending in ``latch.return``/``latch.yield`` fail MLIR's verifier;
2. every IRDL constraint is a variable bound to the first type it matches, so all values of a
   variadic operand or result group must have one and the same type; ``latch.return``,
   ``latch.yield``, ``latch.clip_global_norm``, ``every``, ``loop`` and ``scan`` carry tensors
   of different types.

An IRDL dynamic dialect also rejects ops it does not define, so the namespace cannot be split.
:func:`load` therefore lets the context hold ``latch.*`` ops as (generic-form) unregistered
operations, and ``latch-verify`` checks everything IRDL would have checked (op names, operand
and result counts and types, attribute kinds, regions, terminators, parents) plus the rules of
each op.  ``tests/py/test_dialect.py`` keeps both IRDL limitations under test, so that the day
they are lifted the suite says so.
"""
from __future__ import annotations

from mlir import ir

from .attention_ops import OPS as _ATTENTION
from .collective_ops import OPS as _COLLECTIVE
from .control_ops import OPS as _CONTROL
from .opdef import OpDef, Violation
from .optimizer_ops import OPS as _OPTIMIZER
from .state_ops import OPS as _STATE

NAMESPACE = "latch"

#: Every Latch op by full name ("latch.adamw"), in documentation order.
OPS: dict[str, OpDef] = {d.name: d for d in (*_STATE, *_OPTIMIZER, *_CONTROL, *_COLLECTIVE,
                                               *_ATTENTION)}


def load(ctx: ir.Context | None = None) -> ir.Context:
    """Make ``ctx`` (default: the current context) accept Latch ops.  Idempotent per context.

    Latch ops are held as unregistered operations (see the module docstring for why), so this
    turns on ``allow_unregistered_dialects``; ``latch-verify`` rejects unknown ``latch.*`` ops
    and ops of dialects that are not loaded.
    """
    ctx = ctx if ctx is not None else ir.Context.current
    if not is_loaded(ctx):
        ctx.allow_unregistered_dialects = True
    return ctx


def is_loaded(ctx: ir.Context | None = None) -> bool:
    """Whether ``ctx`` (default: the current context) accepts Latch ops.  The state lives on
    the context itself, so nothing is cached here and contexts are not kept alive."""
    ctx = ctx if ctx is not None else ir.Context.current
    return bool(ctx.allow_unregistered_dialects)


def opdef(name: str) -> OpDef | None:
    """The description of the op called ``name`` ("latch.sgd"), or None."""
    return OPS.get(name)


__all__ = ["NAMESPACE", "OPS", "OpDef", "Violation", "is_loaded", "load", "opdef"]
