"""``latch-register-accumulators``: a sequential reduction loop that loads and stores the
same output element every iteration carries it in a register instead (stage 'kernels',
after ``convert-linalg-to-parallel-loops``).

A ``linalg.generic`` with a short reduction (a product of a few terms per output, left to
loops by latch-form-contraction-kernels) becomes an ``scf.parallel`` over its outputs with
an ``scf.for`` over the reduction whose body loads ``out[i]``, adds one term and stores it
back.  In the kernel, every iteration's store stays: the other buffers the body loads are
kernel arguments the compiler cannot prove disjoint from the output, so LLVM keeps each
store in front of the next load.  TinyMoE's router input gradient (``x += g[.., 8] @ W``,
8 terms into a [32768, 768] f32 buffer) stored every element 8 times: 177 us a launch at
B32 where its bytes take about 50.

The rewrite: load ``out[i]`` once before the loop, carry it as the loop's result
(``iter_args``), store it once after.  Applied when

* the loop body (its own block) holds exactly one ``memref.load`` and one ``memref.store``
  of the buffer, at the same index values, all defined outside the loop, the load first
  and the store right before the terminator; the loop carries nothing yet;
* nothing else in the body (nested regions included) touches a buffer that may be that
  one: every other memref operand has another root (allocation or argument), and where
  both roots have planned arena slots (``latch.offset``), the slots do not overlap; only
  loads, stores, views and pure ``arith``/``math``/``scf`` ops are in the body.

Nested reduction loops are rewritten innermost first, so the outer loop then sees the load
before and the store after the inner one and is rewritten in turn.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.buffer_views import VIEW_OPS, may_share_bytes

_PURE = ("arith.", "math.")
_NESTED = ("scf.for", "scf.if", "scf.yield")


@dataclasses.dataclass(frozen=True)
class RegisterAccumulators(ModulePass):
    name = "latch-register-accumulators"
    summary = ("carry a reduction loop's output element in a register (load before, store "
               "after) instead of loading and storing it every iteration")

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            # innermost first (post-order): a rewritten loop's parent comes later
            for loop in [o for o in nested_ops(func_op) if o.name == "scf.for"]:
                _rewrite(loop)


def nested_ops(op) -> list:
    """Every op nested in ``op``, each after the ops nested in it."""
    out = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = _op(inner)
                out += nested_ops(inner)
                out.append(inner)
    return out


def _defined_outside(v, loop) -> bool:
    """Whether value ``v`` is defined outside ``loop`` (not in any of its regions)."""
    owner = v.owner
    op = _op(owner.owner if hasattr(owner, "arguments") else owner).operation
    while op is not None:
        if op == loop.operation:
            return False
        op = op.parent
    return True


def _rewrite(loop) -> bool:
    from mlir import ir
    from mlir.dialects import scf

    if len(loop.results) != 0:
        return False
    body = loop.regions[0].blocks[0]
    ops = [_op(o) for o in body.operations]
    if len(ops) < 3 or ops[-1].name != "scf.yield" or ops[-2].name != "memref.store":
        return False
    store = ops[-2]
    buf, where = store.operands[1], list(store.operands[2:])
    loads = [o for o in ops if o.name == "memref.load" and o.operands[0] == buf]
    if len(loads) != 1 or list(loads[0].operands[1:]) != where:
        return False
    load = loads[0]
    if not _defined_outside(buf, loop) or not all(_defined_outside(i, loop) for i in where):
        return False
    for o in nested_ops(loop):
        if o == load or o == store:
            continue
        if o.name in ("memref.load", "memref.store"):
            other = o.operands[0] if o.name == "memref.load" else o.operands[1]
            if may_share_bytes(other, buf):
                return False
        elif not (o.name.startswith(_PURE) or o.name in _NESTED or o.name in VIEW_OPS):
            return False
    with ir.InsertionPoint(loop), loop.location:
        init = ir.Operation.create("memref.load", [load.results[0].type], [buf] + where).result
        new = scf.ForOp(loop.operands[0], loop.operands[1], loop.operands[2], [init])
    new_body = new.body
    with ir.InsertionPoint(new_body):
        scf.YieldOp([store.operands[0]])
    new_yield = _op(list(new_body.operations)[-1])
    for o in ops[:-2]:
        o.operation.move_before(new_yield)
    body.arguments[0].replace_all_uses_with(new.induction_variable)
    load.results[0].replace_all_uses_with(new.inner_iter_args[0])
    load.operation.erase()
    with ir.InsertionPoint.after(new.operation), loop.location:
        ir.Operation.create("memref.store", [], [new.results[0], buf] + where)
    store.operation.erase()
    loop.operation.erase()
    return True
