"""``latch-verify``: check every Latch op of a module against the dialect (docs/dialect.md).

It runs first in every pipeline (``latch-opt`` always runs it).  It checks what IRDL would
check if it could define the dialect (op names, operand/result counts and types, attribute
kinds, regions, terminators, parents, SSA dominance inside Latch regions), then each op's own
rules (``OpDef.verify``).  It checks the ``latch.state`` declarations first (reads and writes
rely on them), then every op in pre-order, stops at the first violation and raises
:class:`latch.dialect.Violation` (a :class:`latch.errors.PassError`) located at the offending
op, e.g. ``'latch.every' op period must be >= 1, got 0``; ``Violation.rule`` names the rule.

Options: none.  Example::

    latch-opt update.mlir --pass-pipeline='builtin.module(latch-verify)'
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from mlir import ir

from latch.dialect import NAMESPACE, OPS
from latch.dialect.opdef import GENERIC_RULES, OpDef, Variadicity, VerifyEnv, Violation, segments
from latch.dialect.state_ops import collect_symbols
from latch.errors import PassError
from latch.passes.base import ModulePass

__all__ = ["GENERIC_RULES", "LatchVerify", "verify_module"]


@dataclasses.dataclass(frozen=True)
class LatchVerify(ModulePass):
    name: ClassVar[str] = "latch-verify"
    summary: ClassVar[str] = "check every Latch op against the dialect (stops at the first error)"

    def apply(self, module) -> None:
        verify_module(module)


def verify_module(module_op) -> None:
    """Raise :class:`Violation` (a ``PassError``) at the first broken rule of ``module_op``
    (a ``builtin.module`` operation or ``ir.Module``); return None if it is valid."""
    module = module_op.operation
    with module.context, module.location:
        _verify(module)


def _verify(module: ir.Operation) -> None:
    try:
        module.verify()
    except ir.MLIRError as e:
        first = e.error_diagnostics[0] if e.error_diagnostics else None
        raise PassError(first.message if first else str(e),
                        location=first.location if first else module.location) from None
    env = VerifyEnv()
    collect_symbols(module, env)
    for state in env.states.values():   # states first: reads and writes rely on them
        _check_op(state, env)
    scoped: set[ir.Value] = set()
    _collect_scoped(module, scoped)
    for region in module.regions:
        for block in region.blocks:
            for op in block.operations:
                _visit(op.operation, env, scoped, set())


def _is_latch(op) -> bool:
    return op.name.startswith(NAMESPACE + ".")


def _collect_scoped(op, scoped: set) -> None:
    """The values defined in blocks of Latch ops: MLIR does not check their dominance (the
    ops are unregistered, so their regions may be graph regions); we do."""
    for region in op.regions:
        for block in region.blocks:
            if _is_latch(op):
                scoped.update(block.arguments)
            for inner in block.operations:
                if _is_latch(op):
                    scoped.update(inner.results)
                _collect_scoped(inner.operation, scoped)


def _visit(op: ir.Operation, env: VerifyEnv, scoped: set, visible: set) -> None:
    _check_op(op, env)
    for i, v in enumerate(op.operands):
        if v in scoped and v not in visible:
            raise Violation(op, "dominance", f"operand #{i} does not dominate this use")
    for region in op.regions:
        for block in region.blocks:
            added = list(block.arguments)
            visible.update(added)
            for inner in block.operations:
                _visit(inner.operation, env, scoped, visible)
                visible.update(inner.results)
                added += list(inner.results)
            visible.difference_update(added)


def _opaque_in_type(t) -> str | None:
    """The first type of an unloaded dialect inside ``t`` (printed), or None."""
    if t.typeid == ir.OpaqueType.static_typeid:
        return str(t)
    if isinstance(t, ir.ShapedType) or hasattr(t, "element_type"):
        try:
            return _opaque_in_type(ir.ShapedType(t).element_type)
        except (ValueError, TypeError):
            return None
    if t.typeid == ir.FunctionType.static_typeid:
        ft = ir.FunctionType(t)
        for inner in list(ft.inputs) + list(ft.results):
            found = _opaque_in_type(inner)
            if found:
                return found
    return None


def _opaque_in_attr(a) -> str | None:
    if a.typeid == ir.OpaqueAttr.static_typeid:
        return str(a)
    if a.typeid == ir.TypeAttr.static_typeid:
        return _opaque_in_type(ir.TypeAttr(a).value)
    if a.typeid == ir.ArrayAttr.static_typeid:
        for inner in ir.ArrayAttr(a):
            found = _opaque_in_attr(inner)
            if found:
                return found
    if a.typeid == ir.DictAttr.static_typeid:
        d = ir.DictAttr(a)
        for i in range(len(d)):
            found = _opaque_in_attr(d[i].attr)
            if found:
                return found
    return None


def _check_unloaded_types(op: ir.Operation) -> None:
    """latch.dialect.load() allows unregistered dialects (the latch ops need it), so MLIR
    would accept `!foo.bar` anywhere; reject it like an unknown op."""
    values = [("operand", v.type) for v in op.operands] + [("result", v.type) for v in op.results]
    for region in op.regions:
        for block in region.blocks:
            values += [("block argument", a.type) for a in block.arguments]
    for what, t in values:
        found = _opaque_in_type(t)
        if found:
            raise Violation(op, "unregistered-type", f"{what} type '{found}' belongs to a "
                            "dialect that is not loaded")
    attrs = op.attributes
    for i in range(len(attrs)):
        named = attrs[i]
        found = _opaque_in_attr(named.attr)
        if found:
            raise Violation(op, "unregistered-type", f"attribute '{named.name}' uses "
                            f"'{found}', of a dialect that is not loaded")


def _check_op(op: ir.Operation, env: VerifyEnv) -> None:
    _check_unloaded_types(op)
    if not _is_latch(op):
        if not op.context.is_registered_operation(op.name):
            raise Violation(op, "unregistered-op",
                            "is not a registered operation (is its dialect loaded?)")
        return
    d = OPS.get(op.name)
    if d is None:
        raise Violation(op, "unknown-op", f"is not an op of the latch dialect (known: "
                        f"{', '.join(n.split('.', 1)[1] for n in OPS)})")
    _check_parent(op, d)
    _check_values(op, d.operands, list(op.operands), "operand")
    _check_values(op, d.results, list(op.results), "result")
    _check_attributes(op, d)
    _check_regions(op, d)
    if d.verify is not None:
        d.verify(op, env)


def _check_parent(op, d: OpDef) -> None:
    if not d.parents:
        return
    parent = op.parent
    got = parent.name if parent is not None else "nothing"
    if got not in d.parents:
        want = d.parents[0] if len(d.parents) == 1 else "one of " + ", ".join(d.parents)
        raise Violation(op, "parent", f"expects parent op {want}, got {got}")


def _count_text(defs) -> str:
    singles = sum(x.variadicity is Variadicity.SINGLE for x in defs)
    flexible = [x.variadicity for x in defs if x.variadicity is not Variadicity.SINGLE]
    if not flexible:
        return f"exactly {singles}"
    if flexible[0] is Variadicity.OPTIONAL:
        return f"{singles} or {singles + 1}"
    return f"at least {singles}"


def _check_values(op, defs, values, what: str) -> None:
    split = segments(defs, len(values))
    if split is None:
        raise Violation(op, f"{what}-count", f"expects {_count_text(defs)} {what}s, "
                        f"got {len(values)}")
    for d, start, size in split:
        for k in range(size):
            t = values[start + k].type
            if not d.type.check(t):
                which = f"'{d.name}'" + (f" #{k}" if d.variadicity is Variadicity.VARIADIC else "")
                raise Violation(op, f"{what}-type", f"{what} {which} must be {d.type.text}, "
                                f"got {t}")


def _check_attributes(op, d: OpDef) -> None:
    for a in d.attributes:
        if a.name not in op.attributes:
            raise Violation(op, "attribute-missing", f"requires attribute '{a.name}'")
        value = op.attributes[a.name]
        if not a.kind.check(value):
            raise Violation(op, "attribute-kind", f"attribute '{a.name}' must be an "
                            f"{a.kind.text}, got {value}")


def _check_regions(op, d: OpDef) -> None:
    if len(op.regions) != len(d.regions):
        raise Violation(op, "region-count", f"expects {len(d.regions)} region(s), "
                        f"got {len(op.regions)}")
    for spec, region in zip(d.regions, op.regions):
        blocks = list(region.blocks)
        if len(blocks) != 1:
            raise Violation(op, "region-blocks", f"region '{spec.name}' must have exactly one "
                            f"block, got {len(blocks)}")
        if spec.no_block_args and len(blocks[0].arguments):
            raise Violation(op, "region-args", f"region '{spec.name}' must have no block "
                            f"arguments, got {len(blocks[0].arguments)}")
        ops = list(blocks[0].operations)
        if not ops or ops[-1].operation.name != spec.terminator:
            got = ops[-1].operation.name if ops else "an empty block"
            raise Violation(op, "terminator", f"region '{spec.name}' must end with "
                            f"{spec.terminator}, got {got}")
