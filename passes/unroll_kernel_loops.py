"""``latch-unroll-kernel-loops``: fully unroll host loops around parallel work (stage
'tensors', for the cuda target).

``latch.repeat`` (looped layers with shared weights) and ``latch.loop`` / ``latch.scan``
lower to ``scf.for`` on tensors (``latch-lower-control``).  On the CPU target the loop
stays a loop.  A CUDA graph has no host loop, and ``latch-wrap-host-compute`` rejects a
host loop around kernels; so for the cuda target every top-level ``scf.for`` with constant
bounds whose body contains parallel work (a ``linalg`` op or a nested loop of them) and at
most ``max-trips`` iterations is replaced by its iterations, one after the other: the
induction variable becomes a constant, the iteration arguments the previous iteration's
yields.  The kernels of the body are then formed once per iteration (identical kernels are
shipped once) and the launch list replays the loop's order.  Loops inside the unrolled
body are unrolled in turn.  Longer loops are left alone (``latch-wrap-host-compute`` then
names them).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-unroll-kernel-loops{max-trips=64})'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import (ModulePass, function_definitions, has_parallel_work, int_constant,
                               operation as _op)


@dataclasses.dataclass(frozen=True)
class UnrollKernelLoops(ModulePass):
    name = "latch-unroll-kernel-loops"
    summary = ("fully unroll host scf.for loops (constant bounds, at most max-trips "
               "iterations) whose bodies hold parallel work (the cuda target's launch list "
               "has no host loops)")
    max_trips: int = 64

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            block = func_op.regions[0].blocks[0]
            changed = True
            while changed:
                changed = False
                for op in [_op(o) for o in block.operations]:
                    if op.name == "scf.for" and _unroll(op, self.max_trips):
                        changed = True


def trip_count(for_op) -> int | None:
    """Iterations of the ``scf.for`` ``for_op`` when its bounds and step are constants (a
    positive step); else None."""
    lb, ub, step = (int_constant(v) for v in list(for_op.operands)[:3])
    if lb is None or ub is None or not step or step <= 0:
        return None
    return len(range(lb, ub, step))


def unroll(for_op) -> None:
    """Replace the ``scf.for`` ``for_op`` (constant bounds: :func:`trip_count`) by its
    iterations, in order, in front of it: the induction variable a constant in each, the
    iteration arguments the previous iteration's yields."""
    from mlir import ir

    lb, ub, step = (int_constant(v) for v in list(for_op.operands)[:3])
    body = for_op.regions[0].blocks[0]
    ops = [_op(o) for o in body.operations]
    term = ops[-1]
    current = list(for_op.operands)[3:]
    with ir.InsertionPoint(for_op), for_op.location:
        for i in range(lb, ub, step):
            iv = ir.Operation.create("arith.constant", results=[ir.IndexType.get()],
                                     attributes={"value": ir.IntegerAttr.get(
                                         ir.IndexType.get(), i)}).result
            mapping = {body.arguments[0]: iv}
            mapping.update(zip(list(body.arguments)[1:], current))
            for op in ops[:-1]:
                new = op.clone()
                _remap(new, mapping)
                for old_r, new_r in zip(op.results, new.results):
                    mapping[old_r] = new_r
            current = [mapping.get(v, v) for v in term.operands]
    for r, v in zip(for_op.results, current):
        r.replace_all_uses_with(v)
    for_op.erase()


def _unroll(for_op, max_trips: int) -> bool:
    trips = trip_count(for_op)
    if trips is None or trips > max_trips or not has_parallel_work(for_op):
        return False
    unroll(for_op)
    return True


def _remap(op, mapping: dict) -> None:
    """Replace, in ``op`` and every op nested in it, operands found in ``mapping``."""
    for k, v in enumerate(list(op.operands)):
        if v in mapping:
            op.operands[k] = mapping[v]
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                _remap(_op(inner), mapping)
