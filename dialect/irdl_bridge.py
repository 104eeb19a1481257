"""The Latch op descriptions rendered as an IRDL dialect (``mlir.dialects.irdl``).

:func:`irdl_module` turns :data:`latch.dialect.OPS` into an ``irdl.dialect`` op: one
``irdl.operation`` per op with its operands, results (base type and variadicity), attributes
(base attribute kind) and regions (one block; no arguments where documented).  Each operand,
result and attribute gets its own constraint value: IRDL binds a constraint value to the first
type it matches, so sharing one would force equal types.

It is not loaded under ``latch`` (see ``latch.dialect``'s docstring: IRDL ops cannot be region
terminators and a variadic group has a single type), but it can be loaded under another name,
which is how the tests keep those limitations under watch.
"""
from __future__ import annotations

from typing import Iterable

from mlir import ir
from mlir.dialects import irdl

from .opdef import OpDef, Variadicity

_VARIADICITY = {Variadicity.SINGLE: irdl.Variadicity.single,
                Variadicity.OPTIONAL: irdl.Variadicity.optional,
                Variadicity.VARIADIC: irdl.Variadicity.variadic}


def _constraint(base: str | None) -> ir.Value:
    return irdl.base(base_name=base) if base else irdl.any()


def _define(d: OpDef) -> None:
    op = irdl.operation_(d.mnemonic)
    with ir.InsertionPoint(op.body):
        for defs, emit in ((d.operands, irdl.operands_), (d.results, irdl.results_)):
            if defs:
                emit([_constraint(x.type.irdl_base) for x in defs], [x.name for x in defs],
                     [_VARIADICITY[x.variadicity] for x in defs])
        if d.attributes:
            irdl.attributes_([_constraint(a.kind.irdl_base) for a in d.attributes],
                             [a.name for a in d.attributes])
        if d.regions:
            irdl.regions_([irdl.region([], number_of_blocks=1,
                                       constrained_arguments=r.no_block_args or None)
                           for r in d.regions], [r.name for r in d.regions])


def irdl_module(ops: Iterable[OpDef], namespace: str = "latch") -> ir.Module:
    """An ``ir.Module`` (current context and location) holding ``irdl.dialect @namespace``."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        dialect = irdl.dialect(namespace)
        with ir.InsertionPoint(dialect.body):
            for d in ops:
                _define(d)
    return module


def load_irdl(ops: Iterable[OpDef], namespace: str, ctx: ir.Context | None = None) -> None:
    """Load the IRDL rendering of ``ops`` into ``ctx`` under ``namespace`` (once per context
    and namespace: MLIR cannot register an op twice)."""
    ctx = ctx if ctx is not None else ir.Context.current
    with ctx, ir.Location.unknown():
        module = irdl_module(ops, namespace)
        module.operation.verify()
        irdl.load_dialects(module)
