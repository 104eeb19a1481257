"""``latch-unroll-short-loops``: a short sequential loop inside a parallel loop's body is
unrolled, so the body is straight-line code that ``latch-map-parallel-loops`` can give
vector lanes (stage 'kernels', after ``latch-register-accumulators``).

A ``linalg.generic`` with a reduction of a few terms per output (left to loops by
latch-form-contraction-kernels: TinyMoE's router input gradient ``x += g[.., 8] @ W``, the
top-2 combine ``out = x + sum_k y[.., k, :] * gate[.., k]``) becomes an ``scf.parallel``
over its outputs with an ``scf.for`` over the terms.  The loop keeps every thread on one
element (scalar loads and stores, 0.8 TB/s for the router gradient at B32, a fifth of the
copy rate): vector lanes need a straight-line body.  Unrolled, the ``K`` terms are ``K``
copies of the loop body with the index a constant, the carried values (the register
accumulator of latch-register-accumulators) chained from one copy to the next: the same
operations in the same order, so the same bits.

Applied to an ``scf.for`` in the body of an ``scf.parallel`` (directly or in other such
loops) with constant bounds, at most ``max-trips`` iterations (default 8), a body without
nested regions and at most ``max-ops`` ops once unrolled (default 512); innermost loops
first, so a nest of short loops (a sum over two small dimensions) unrolls whole.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-unroll-short-loops)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.unroll_kernel_loops import trip_count, unroll


#: most ops an unrolled loop may have (its trips times its body's ops)
MAX_OPS = 512


def loops_in_parallel_bodies(op, inside: bool = False) -> list:
    """The ``scf.for`` ops in the body of an ``scf.parallel`` nested in ``op`` (directly or
    in other ``scf.for`` ops), outer loops before the loops they hold."""
    found = []
    for region in op.regions:
        for blk in region.blocks:
            for inner in blk.operations:
                inner = _op(inner)
                if inside and inner.name == "scf.for":
                    found.append(inner)
                if inner.name == "scf.parallel" or inside and inner.name == "scf.for":
                    found.extend(loops_in_parallel_bodies(inner, True))
                elif not inside:
                    found.extend(loops_in_parallel_bodies(inner, False))
    return found


def _short_loops(op, max_trips: int, max_ops: int = MAX_OPS) -> list:
    """The loops of :func:`loops_in_parallel_bodies` that may be unrolled: constant
    bounds, at most ``max_trips`` iterations, a body without nested regions, at most
    ``max_ops`` ops unrolled."""
    found = []
    for loop in loops_in_parallel_bodies(op):
        trips = trip_count(loop)
        body = [_op(o) for o in loop.regions[0].blocks[0].operations]
        if trips is not None and trips <= max_trips and \
                trips * len(body) <= max_ops and not any(o.regions for o in body):
            found.append(loop)
    return found


@dataclasses.dataclass(frozen=True)
class UnrollShortLoops(ModulePass):
    name = "latch-unroll-short-loops"
    summary = ("short constant-trip loops in parallel loop bodies unrolled (straight-line "
               "bodies get vector lanes)")
    max_trips: int = 8
    max_ops: int = MAX_OPS

    def apply(self, module) -> None:
        for f in function_definitions(module):
            while True:          # innermost loops first: their parents lose a region
                loops = _short_loops(f, self.max_trips, self.max_ops)
                if not loops:
                    break
                for loop in loops:
                    unroll(loop)
