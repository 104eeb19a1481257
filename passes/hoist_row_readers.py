"""``latch-hoist-row-readers``: an elementwise reader of a long row reduction that reads the
reduction's input too moves up to just after the reduction (stage 'buffers', on tensors,
after the last elementwise fusion), so that ``latch-wrap-host-compute`` can run it in the
reduction's launch (``passes/online_softmax_sums.py``: the block that has just read a row
for its maximum and sum of exponentials computes the reader's elements of the same row).

A cross-entropy reads its logits three times: the row maximum and the sum of exponentials
(one pass since ``online_softmax_sums``), the picked logit, and the gradient
``softmax - one_hot`` scaled by the upstream gradient and the token mask.  The gradient is
the first op of the backward; between it and the forward's sums sit the loss's own small
ops (the token count, the mean, the loss output) and the gradient's per-token factors.  At
TinyMoE B32 the logits are 2.1 GB: the forward's sums read them (0.7 ms), the gradient reads
them again and writes 2.1 GB of bf16 gradient (1.3 ms).  Adjacent, one launch reads them
once from memory.

Rewritten: for each all-parallel ``linalg.generic`` R whose operands include the result of
a *row sum of exponentials* P (a generic with parallel and reduction loops, at least
``min-row`` reduction elements an output, ``exp`` and ``addf`` in its body) over an input
``x`` that R reads too and the result of a row maximum P0 over ``x``: the ops after the row
max P0 that R depends on (its operands' producers, transitively; the max and the sum aside)
move in front of P0, and R moves right after P. Only tensor ops with no side effects move
(``linalg`` ops whose bodies have none but bounds checks, ``tensor`` ops, constants);
nothing moves when a moved op would need the max or the sum, or when R is already next to
P.  Values keep their meaning (tensor ops are pure); buffers live longer: R's output from P
on, its producers' from P0 on — at TinyMoE both are the gradient (live across the loss's
few small ops) and per-token vectors.

Option ``min-row`` (default 4096: the shortest row that gets a block of its own, the online
softmax's; ``row_reductions._BLOCK_MIN``).  Example: ``latch-opt f.mlir
--pass-pipeline='builtin.module(latch-hoist-row-readers)'``
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import ModulePass, defining_op, function_definitions, operation as _op
from latch.passes.generic_body import loop_ranges, segments

#: ops that may move (pure on tensors); linalg ops are checked for side effects in bodies
_MOVABLE_PREFIXES = ("linalg.", "tensor.", "arith.")


def _iterators(op) -> list:
    from mlir import ir

    return [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _all_parallel_generic(op) -> bool:
    from mlir import ir

    return op.name == "linalg.generic" and len(op.results) >= 1 and \
        all("parallel" in a for a in _iterators(op)) and \
        all(isinstance(r.type, ir.RankedTensorType) for r in op.results)


def _row_reduction(op, min_row: int) -> bool:
    """A tensor generic with parallel and reduction loops and at least ``min_row``
    reduction elements an output."""
    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    its = _iterators(op)
    if not any("parallel" in a for a in its) or not any("reduction" in a for a in its):
        return False
    _, ranges = loop_ranges(op)
    if ranges is None or any(r is None for r in ranges):
        return False
    return math.prod(r for r, a in zip(ranges, its) if "reduction" in a) >= min_row


def _body_names(op) -> set:
    return {_op(o).name for o in op.regions[0].blocks[0].operations}


def _softmax_sums(ops, at, position, min_row: int, inputs):
    """(index of the row max, index of the sum) when ``ops[at]`` is a row sum of
    exponentials (at least ``min_row`` elements a row) reading an input ``x`` that the
    reader reads too (``inputs``) and the result of a row max over ``x``; else None."""
    p = ops[at]
    if not _row_reduction(p, min_row) or \
            not {"math.exp", "arith.addf"} <= _body_names(p):
        return None
    n_in, _ = segments(p)
    p_inputs = list(p.operands)[:n_in]
    xs = [u for u in p_inputs if u in inputs]
    for u in p_inputs:
        m_at = _defining_index(u, position)
        if m_at is None:
            continue
        m = ops[m_at]
        if _row_reduction(m, min_row) and "arith.maximumf" in _body_names(m) and \
                any(x in list(m.operands)[:segments(m)[0]] for x in xs):
            return m_at, at
    return None


def _pure(op) -> bool:
    """Whether ``op`` can move: a tensor op without side effects in its body."""
    from mlir import ir

    if not op.name.startswith(_MOVABLE_PREFIXES):
        return False
    if any(isinstance(v.type, ir.MemRefType) for v in list(op.operands) + list(op.results)):
        return False
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = _op(inner)
                if inner.regions or not inner.name.startswith(
                        ("arith.", "math.", "linalg.yield", "linalg.index", "tensor.extract",
                         "cf.assert")):
                    return False
    return True


def _defining_index(v, position: dict):
    """Position of the op defining ``v`` in the block (None: a block argument or an op of
    another block)."""
    op = defining_op(v)
    return None if op is None else position.get(op)


def hoist_one(block, min_row: int, done: set) -> bool:
    """Hoist one reader in ``block``; returns whether anything moved."""
    ops = [_op(o) for o in block.operations]
    position = {o: i for i, o in enumerate(ops)}
    for r_at, r in enumerate(ops):
        if not _all_parallel_generic(r) or r in done:
            continue
        n_in, _ = segments(r)
        inputs = list(r.operands)[:n_in]
        pair = None
        for v in inputs:
            at = _defining_index(v, position)
            if at is not None:
                pair = _softmax_sums(ops, at, position, min_row, inputs) or pair
        if pair is None:
            continue
        p0, p = pair
        if ops[p] in done:
            continue
        if all(ops[i].name in ("arith.constant", "tensor.empty")
               for i in range(p + 1, r_at)):
            continue                          # already next to P
        # what R needs from after the row max, transitively (the max and the sum aside)
        need, stack = set(), [r]
        while stack:
            o = stack.pop()
            for v in o.operands:
                at = _defining_index(v, position)
                if at is not None and p0 < at < r_at and at not in (p, p0) and \
                        at not in need:
                    need.add(at)
                    stack.append(ops[at])
        moving = sorted(need)
        if not all(_pure(ops[i]) for i in moving):
            continue
        if any(_defining_index(v, position) in (p0, p)            # computed from the sums
               for i in moving for v in ops[i].operands):
            continue
        for i in moving:
            ops[i].move_before(ops[p0])
        r.move_after(ops[p])
        done.update({r, ops[p]})
        return True
    return False


@dataclasses.dataclass(frozen=True)
class HoistRowReaders(ModulePass):
    name = "latch-hoist-row-readers"
    summary = ("an elementwise reader of a long row reduction that also reads its input "
               "moves next to the reduction (its other producers in front of it), for "
               "latch-wrap-host-compute to run both in one launch")
    min_row: int = 4096

    def apply(self, module) -> None:
        for f in function_definitions(module):
            block = f.regions[0].blocks[0]
            done: set = set()
            while hoist_one(block, self.min_row, done):
                pass
