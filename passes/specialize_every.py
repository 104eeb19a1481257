"""``latch-specialize-every``: one copy of the update function per outcome of its
``every(N)`` conditions (stage 'tensors', for the cuda target).

``latch.every`` lowers to ``scf.if ((counter + k) % N == 0)`` around the inner rule's
update (``latch-lower-control``).  A CUDA graph cannot branch on the host, so without this
pass ``latch-wrap-host-compute`` if-converts the region: its kernels run on every step and
select the old state values on the steps that do not update — touching the inner rule's
state (read, rewritten, copied) on every microbatch.

This pass instead clones the update function once per combination of outcomes of its
distinct ``every`` conditions (2 for one ``every``; at most ``max-variants``), replaces
each condition by a constant in each clone and folds the branches away, so the variant for
"no inner step" contains no kernel of the inner rule and returns the inner state unchanged
(no copy either).  Each clone is named ``<function>__v<i>`` and carries
``latch.when = [{state = i, offset = k, period = N, value = true|false}, ...]``: the variant
applies when, for each entry, ``(state_i + k) % N == 0`` equals ``value`` at the start of
the step (state_i: the update's i-th state argument, a counter).  The runtime reads those
counters before each step and replays that variant's CUDA graph.

A condition that is not of that form (``(read counter + constant) % N == 0``) is left alone
(it is if-converted later, as before); so is a function with more combinations than
``max-variants`` (default 8).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-lower-rules,
latch-specialize-every)'``
"""
from __future__ import annotations

import dataclasses
import itertools

from latch.passes.base import (ModulePass, defining_op, function_definitions, int_constant,
                               operation as _op)


def _counter_term(v, block):
    """(argument index, offset) when ``v`` = tensor.extract(argument) + constants."""
    from mlir import ir

    offset = 0
    while True:
        o = defining_op(v)
        if o is None:
            return None
        if o.name == "arith.addi":
            for a, b in ((o.operands[0], o.operands[1]), (o.operands[1], o.operands[0])):
                c = int_constant(b)
                if c is not None:
                    offset += c
                    v = a
                    break
            else:
                return None
            continue
        if o.name == "tensor.extract" and len(o.operands) == 1:
            t = o.operands[0]
            if hasattr(t.owner, "arguments"):
                if t.owner != block:
                    return None
                return ir.BlockArgument(t).arg_number, offset
            inner = defining_op(t)
            if inner is not None and inner.name == "tensor.from_elements" and \
                    len(inner.operands) == 1:
                v = inner.operands[0]
                continue
        return None


def every_condition(cond, block):
    """(state argument, offset, period) when ``cond`` is ``(counter + k) % N == 0``."""
    from mlir import ir

    o = defining_op(cond)
    if o is None or o.name != "arith.cmpi" or \
            ir.IntegerAttr(o.attributes["predicate"]).value != 0:           # eq
        return None
    for rem, zero in ((o.operands[0], o.operands[1]), (o.operands[1], o.operands[0])):
        r = defining_op(rem)
        if int_constant(zero) != 0 or r is None or r.name != "arith.remsi":
            continue
        period = int_constant(r.operands[1])
        term = _counter_term(r.operands[0], block)
        if period and period > 0 and term is not None:
            return term[0], term[1], period
    return None


def _conditions(func_op) -> dict:
    """{(state, offset, period): [the top-level scf.if ops branching on that condition]}"""
    block = func_op.regions[0].blocks[0]
    found: dict = {}
    for op in block.operations:
        op = _op(op)
        if op.name == "scf.if":
            key = every_condition(op.operands[0], block)
            if key is not None:
                found.setdefault(key, []).append(op)
    return found


@dataclasses.dataclass(frozen=True)
class SpecializeEvery(ModulePass):
    name = "latch-specialize-every"
    summary = ("clone the update function once per outcome of its every(N) conditions and "
               "fold the branches (the cuda target's update variants)")
    max_variants: int = 8

    def apply(self, module) -> None:
        for func_op in list(function_definitions(module)):
            specialize(func_op, self.max_variants)


def specialize(func_op, max_variants: int = 8) -> list[tuple[str, list[dict]]]:
    """Replace ``func_op`` by its variants (see the module docstring); returns
    [(variant name, when)] in order (all-false first), or [] when nothing was specialized."""
    from mlir import ir

    conds = _conditions(func_op)
    keys = sorted(conds)
    if not keys or 2 ** len(keys) > max_variants:
        return []
    name = ir.StringAttr(func_op.attributes["sym_name"]).value
    out = []
    anchor = func_op
    for values in itertools.product((False, True), repeat=len(keys)):
        clone = func_op.clone(ir.InsertionPoint.after(anchor))
        anchor = clone
        vname = f"{name}__v{len(out)}"
        clone.attributes["sym_name"] = ir.StringAttr.get(vname)
        branches = _conditions(clone)
        for key, value in zip(keys, values):
            for if_op in branches[key]:
                _inline_branch(if_op, value)
        when = [{"state": k[0], "offset": k[1], "period": k[2], "value": v}
                for k, v in zip(keys, values)]
        clone.attributes["latch.when"] = ir.ArrayAttr.get([
            ir.DictAttr.get({"state": _i64(w["state"]), "offset": _i64(w["offset"]),
                             "period": _i64(w["period"]),
                             "value": ir.BoolAttr.get(w["value"])}) for w in when])
        out.append((vname, when))
    func_op.erase()
    return out


def _inline_branch(if_op, value: bool) -> None:
    """Replace ``if_op`` by the ops of its then (``value``) or else region."""
    region = if_op.regions[0 if value else 1]
    if not len(region.blocks):            # no else region: nothing happens
        if_op.erase()
        return
    block = region.blocks[0]
    ops = [_op(o) for o in block.operations]
    term = ops[-1]
    for o in ops[:-1]:
        o.move_before(if_op)
    for r, v in zip(if_op.results, term.operands):
        r.replace_all_uses_with(v)
    if_op.erase()


def _i64(n: int):
    from mlir import ir

    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), n)


def variants(module) -> list[tuple[str, list[dict]]]:
    """[(function name, when)] of the variants this pass made, in module order."""
    from mlir import ir

    out = []
    for f in function_definitions(module):
        if "latch.when" in f.attributes:
            when = []
            for a in ir.ArrayAttr(f.attributes["latch.when"]):
                d = ir.DictAttr(a)
                when.append({"state": ir.IntegerAttr(d["state"]).value,
                             "offset": ir.IntegerAttr(d["offset"]).value,
                             "period": ir.IntegerAttr(d["period"]).value,
                             "value": bool(ir.BoolAttr(d["value"]).value)})
            out.append((ir.StringAttr(f.attributes["sym_name"]).value, when))
    return out
