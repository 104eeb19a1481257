"""``latch-map-parallel-loops``: every top-level ``scf.parallel`` with static bounds becomes a
one-dimensional ``gpu.launch`` over its flattened iteration space.

``convert-linalg-to-parallel-loops`` leaves one ``scf.parallel`` per linalg op.  Mapping its
loops one-to-one onto thread and block dimensions (``scf-parallel-loop-tiling`` with a 32×8
tile + ``gpu-map-parallel-loops``) wastes most threads whenever a loop is short: a 1-D loop
gets 32-thread blocks, a ``[2048, 1]`` loop runs one thread of every 32 (the size-1 loop is
mapped to ``threadIdx.x``), and a ``[2, 12, 1024, 1]`` loop similar.  Here the iteration
space is numbered linearly instead — the first loop varying fastest, so after
latch-wrap-host-compute's ordering (the unit-stride dimension first) consecutive threads
touch consecutive addresses — and blocks of ``T`` threads cover it (``T`` is the product of
the ``block`` shape, default 32,8 → 256): thread ``i = blockIdx.x * T + threadIdx.x`` runs
iteration ``i`` if ``i < total``,
with the loop indices recovered by division and remainder by the (constant) trip counts.

Loops with non-constant bounds or a nested ``scf.parallel`` are left to the upstream passes
that follow in ``latch-form-kernels``.  Options: ``block`` (thread-block shape, default
``32,8``; its product is the number of threads per block).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-map-parallel-loops)'``
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import ModulePass, function_definitions, int_constant
from latch.passes.generic_body import compare, delinearize, flat_launch, index_constant

_MAX_GRID_X = 2 ** 31 - 1


def _op(o):
    return o.operation if hasattr(o, "operation") else o


def _nested_parallel(op) -> bool:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = _op(inner)
                if inner.name == "scf.parallel" or _nested_parallel(inner):
                    return True
    return False


@dataclasses.dataclass(frozen=True)
class MapParallelLoops(ModulePass):
    name = "latch-map-parallel-loops"
    summary = ("top-level scf.parallel loops with static bounds -> 1-D gpu.launch over the "
               "flattened iteration space (first loop fastest)")

    block: tuple[int, ...] = (32, 8)

    def apply(self, module) -> None:
        threads = math.prod(self.block)
        if threads <= 0:
            return
        for func_op in function_definitions(module):
            for inner in list(func_op.regions[0].blocks[0].operations):
                inner = _op(inner)
                if inner.name == "scf.parallel":
                    _map(inner, threads)


def _map(par, threads: int) -> None:
    from mlir import ir
    from mlir.dialects import scf

    seg = list(ir.DenseI32ArrayAttr(par.attributes["operandSegmentSizes"]))
    n = seg[0]
    if seg[3] != 0 or _nested_parallel(par):
        return
    operands = list(par.operands)
    lbs, ubs, steps = operands[:n], operands[n:2 * n], operands[2 * n:3 * n]
    bounds = [(int_constant(lo), int_constant(hi), int_constant(st))
              for lo, hi, st in zip(lbs, ubs, steps)]
    if any(None in b for b in bounds) or any(st <= 0 for _, _, st in bounds):
        return
    counts = [max(0, -(-(hi - lo) // st)) for lo, hi, st in bounds]
    total = math.prod(counts)
    if total == 0:
        par.erase()
        return
    block_threads = min(threads, -(-total // 32) * 32)
    blocks = -(-total // block_threads)
    if blocks > _MAX_GRID_X:
        return
    index = ir.IndexType.get()
    body = par.regions[0].blocks[0]
    with ir.InsertionPoint(par), par.location:
        _, end, linear = flat_launch(blocks, block_threads)
    guard = None
    if total % block_threads:
        with ir.InsertionPoint(end), par.location:
            guard = scf.IfOp(compare("ult", linear, index_constant(total)))
    inside = ir.InsertionPoint(guard.then_block) if guard else ir.InsertionPoint(end)
    with inside, par.location:
        ivs = [None] * n
        delinearize(linear, list(range(n)), counts, ivs)
        for k, (lo, _, st) in enumerate(bounds):
            v = ivs[k]
            if st != 1:
                v = ir.Operation.create("arith.muli", [index], [v, index_constant(st)]).result
            if lo != 0:
                v = ir.Operation.create("arith.addi", [index], [v, index_constant(lo)]).result
            ivs[k] = v
        anchor = scf.YieldOp([]) if guard else end
    for arg, iv in zip(body.arguments, ivs):
        arg.replace_all_uses_with(iv)
    for inner in list(body.operations):
        inner = _op(inner)
        if inner.name == "scf.reduce":
            continue
        inner.move_before(_op(anchor))
    par.erase()
