"""``latch-split-integer-sums``: a thread's sequential integer reduction loop carries
``chains`` partial results instead of one (stage 'kernels', after
``latch-register-accumulators``).

A reduction left to one thread per output (a short reduction over many outputs) becomes an
``scf.for`` in a parallel loop's body whose one carried value, the register accumulator of
latch-register-accumulators, is combined with each iteration's term.  Every trip waits for
the one before: its loads are issued, but the chain through the accumulator is the
kernel's time.  TinyMoE's routing rank is an integer ``cumsum`` over the ``N·k`` token slots
(``latch.frontend.decompositions``: blocked triangular products), whose first product sums
64 terms ``[j <= c] * [expert(i, j) == e]`` for each of ``64 x 1024 x 8`` outputs at B32: 49 µs
a layer with one chain of 64 loads and adds.

Integer sums (``addi``), bitwise ``ori``/``andi``/``xori`` and integer ``max``/``min``
are exact in any order, so here the loop runs ``N / chains`` trips, each computing the terms
of ``chains`` consecutive iterations into ``chains`` accumulators (the first starts from the
loop's initial value, the others from the combining op's identity), which are combined
after the loop: the same result, bit for bit, with ``chains`` independent chains.

Applied to an ``scf.for`` inside an ``scf.parallel`` (directly or in other ``scf.for``
ops) with constant bounds, at least ``min-trips`` (default 16) iterations, a multiple of
``chains`` (default 4), one integer iteration argument, a body without nested regions
whose yielded value is ``combine(acc, e)`` with ``acc`` that argument used nowhere else and
no store in the body.  Floating-point sums are left alone (their rounding depends on the
order).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-split-integer-sums)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import (ModulePass, defining_op, function_definitions, int_constant,
                               operation as _op)
from latch.passes.fixed_point_scatter import _int as const
from latch.passes.generic_body import clone_body_ops
from latch.passes.unroll_kernel_loops import trip_count
from latch.passes.unroll_short_loops import loops_in_parallel_bodies

# combining op -> its identity, from the integer width
_IDENTITY = {
    "arith.addi": lambda bits: 0,
    "arith.ori": lambda bits: 0,
    "arith.xori": lambda bits: 0,
    "arith.andi": lambda bits: -1,
    "arith.maxsi": lambda bits: -(1 << (bits - 1)),
    "arith.minsi": lambda bits: (1 << (bits - 1)) - 1,
    "arith.maxui": lambda bits: 0,
    "arith.minui": lambda bits: -1,
}


def _integer_sum(loop, min_trips: int, chains: int):
    """The combining op of ``loop`` when it qualifies (see the module docstring), else None."""
    from mlir import ir

    trips = trip_count(loop)
    if trips is None or trips < min_trips or trips % chains:
        return None
    body = loop.regions[0].blocks[0]
    if len(body.arguments) != 2 or not isinstance(body.arguments[1].type, ir.IntegerType):
        return None
    ops = [_op(o) for o in body.operations]
    if any(o.regions or o.name in ("memref.store", "memref.atomic_rmw", "vector.store")
           or o.name.startswith("gpu.") for o in ops):
        return None
    acc = body.arguments[1]
    term = ops[-1]
    if term.name != "scf.yield" or len(term.operands) != 1:
        return None
    comb = defining_op(term.operands[0])
    if comb is None or comb.name not in _IDENTITY or acc not in list(comb.operands) or \
            list(comb.operands).count(acc) != 1:
        return None
    if any(u.owner != comb.operation for u in acc.uses):
        return None
    if any(u.owner != term.operation for u in comb.results[0].uses):
        return None
    return comb


def split(loop, comb, chains: int) -> None:
    """Rewrite ``loop`` (qualifying, with combining op ``comb``) to carry ``chains``
    accumulators over ``trips / chains`` trips and combine them after it."""
    from mlir import ir
    from mlir.dialects import scf

    index = ir.IndexType.get()
    lb, step = int_constant(loop.operands[0]), int_constant(loop.operands[2])
    trips = trip_count(loop)
    body = loop.regions[0].blocks[0]
    acc = body.arguments[1]
    ty = acc.type
    bits = ir.IntegerType(ty).width
    ops = [_op(o) for o in body.operations][:-1]

    with ir.InsertionPoint(loop), loop.location:
        ident = const(ty, _IDENTITY[comb.name](bits))
        new = scf.ForOp(const(index, 0), const(index, trips // chains), const(index, 1),
                        [list(loop.operands)[3]] + [ident] * (chains - 1))
        with ir.InsertionPoint(new.body):
            j = new.induction_variable
            first = ir.Operation.create("arith.muli", [index],
                                        [j, const(index, chains * step)]).result
            first = ir.Operation.create("arith.addi", [index], [first, const(index, lb)]).result
            yields = []
            for k in range(chains):
                iv = first if k == 0 else ir.Operation.create(
                    "arith.addi", [index], [first, const(index, k * step)]).result
                mapping = {body.arguments[0]: iv, acc: new.inner_iter_args[k]}
                clone_body_ops(ops, mapping, [])
                yields.append(mapping[comb.results[0]])
            scf.YieldOp(yields)
        total = new.results[0]
        for k in range(1, chains):
            total = ir.Operation.create(comb.name, [ty], [total, new.results[k]]).result
    loop.results[0].replace_all_uses_with(total)
    loop.erase()


@dataclasses.dataclass(frozen=True)
class SplitIntegerSums(ModulePass):
    name = "latch-split-integer-sums"
    summary = ("a thread's integer reduction loop (sum, bitwise, min/max) carries several "
               "independent partial results, combined after the loop (exact)")
    chains: int = 4
    min_trips: int = 16

    def apply(self, module) -> None:
        if self.chains < 2:
            return
        for f in function_definitions(module):
            for loop in loops_in_parallel_bodies(f):
                comb = _integer_sum(loop, self.min_trips, self.chains)
                if comb is not None:
                    split(loop, comb, self.chains)
