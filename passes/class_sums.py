"""Integer sums split by a class, one thread for all the classes (part of
``latch-wrap-host-compute``, option ``class-sums``, off by default: slower when timed).

A MoE's routing rank is a blocked cumulative count: ``out[b, t, e] += sum_k L[b, k] *
[x[t, k] == s[e]]`` (``L`` a 0/1 triangle, ``x`` the experts the tokens chose, ``s`` the
expert numbers; TinyMoE B32: 64 x 1024 x 8 outputs of 64 terms).  As loops it is one thread
per ``(b, t, e)`` loading ``L``, ``x`` and ``s`` for each term: the ``E`` threads of one
``(b, t)`` read the same ``L`` and ``x`` (8 x 50 us a launch at B32, 4.8 MB: load-bound).
Here one thread per ``(b, t)`` keeps ``E`` accumulators: it loads ``s`` once, then per term
``L`` and ``x`` once and adds ``L`` to the accumulator of each class ``x`` equals (a select
per class), and stores the ``E`` totals (added to the output's values) at the end.  Integer
sums are exact, so the totals are bitwise those of the loops in any order.  Timed on an H100
(tinymoe_bench-20261206T051857Z.json): TinyMoE B2 +2.1%, B32 +0.13 ms — one thread's 64-term
chain for all 8 experts, where 8 threads ran one each, is longer on B2's critical path than
the loads it saves.

Matched: a ``linalg.generic`` on memrefs with static shapes, integer output, exactly one
reduction loop ``k`` and one parallel loop ``e`` of at most ``MAX_CLASSES`` iterations that
only the third input ``s`` (map: ``e`` alone) and the output use; the first two inputs'
maps use neither ``e`` nor anything but plain loop dims; the output map plain dims without
``k``; the body ``acc + A * extui(x == s)`` (``addi``/``muli`` operands in either order,
``cmpi eq`` either way round).
"""
from __future__ import annotations

import math

from latch.passes.base import operation as _op
from latch.passes.generic_body import plain_dims

MAX_CLASSES = 16


def match_class_sum(op):
    """(the reduction loop, the class loop, loop ranges, the inputs' roles: (A, x, s)) when
    ``op`` is the sum the module docstring describes, else None."""
    from mlir import ir

    from latch.passes.generic_body import indexing_maps, loop_ranges, segments

    if op.name != "linalg.generic" or op.results:
        return None
    n_in, n_out = segments(op)
    if n_in != 3 or n_out != 1:
        return None
    kinds = [str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])]
    red = [d for d, t in enumerate(kinds) if "reduction" in t]
    if len(red) != 1:
        return None
    k = red[0]
    operands = list(op.operands)
    if any(not isinstance(v.type, ir.MemRefType) or not ir.MemRefType(v.type).has_static_shape
           for v in operands):
        return None
    out_t = ir.MemRefType(operands[3].type).element_type
    if not isinstance(out_t, ir.IntegerType) or \
            ir.MemRefType(operands[0].type).element_type != out_t or \
            ir.MemRefType(operands[1].type).element_type != \
            ir.MemRefType(operands[2].type).element_type:
        return None
    maps = indexing_maps(op)
    dims = [plain_dims(m) for m in maps]
    if any(d is None for d in dims) or k in dims[3] or len(dims[2]) != 1:
        return None
    e = dims[2][0]
    _, ranges = loop_ranges(op)
    if e == k or e not in dims[3] or any(e in d for d in dims[:2]) or \
            any(r is None for r in ranges) or ranges[e] > MAX_CLASSES or \
            sorted(dims[3]) != [d for d in range(len(kinds)) if d != k]:
        return None
    block = op.regions[0].blocks[0]
    ops = [_op(o) for o in block.operations]
    a, x, s, acc = block.arguments
    if len(ops) != 5 or [o.name for o in ops] != ["arith.cmpi", "arith.extui", "arith.muli",
                                                  "arith.addi", "linalg.yield"]:
        return None
    cmp, ext, mul, add, yld = ops
    if ir.IntegerAttr(cmp.attributes["predicate"]).value != 0 or \
            {cmp.operands[0], cmp.operands[1]} != {x, s} or ext.operands[0] != cmp.result or \
            {mul.operands[0], mul.operands[1]} != {a, ext.result} or \
            {add.operands[0], add.operands[1]} != {acc, mul.result} or \
            yld.operands[0] != add.result:
        return None
    return k, e, ranges


def rewrite_class_sums(body, threads: int = 256) -> int:
    """Replace every matching sum in ``body`` (a function body) by a launch of one thread
    per output row of classes; returns how many were replaced."""
    n = 0
    for op in list(body.operations):
        op = _op(op)
        found = match_class_sum(op)
        if found is None:
            continue
        _emit(op, *found, threads)
        op.erase()
        n += 1
    return n


def _emit(op, k: int, e: int, ranges: list, threads: int) -> None:
    from mlir import ir
    from mlir.dialects import scf

    from latch.passes.generic_body import (compare, delinearize, guarded_launch,
                                           index_constant, indexing_maps)

    maps = indexing_maps(op)
    A, X, S, out = list(op.operands)
    elt = ir.MemRefType(out.type).element_type       # A's too (match_class_sum)
    x_elt = ir.MemRefType(X.type).element_type       # S's too
    classes = ranges[e]
    rows = [d for d in range(len(ranges)) if d not in (k, e)]
    # the output's fastest-varying loops first (consecutive threads, neighbouring rows)
    order = [d for d in reversed(plain_dims(maps[3])) if d in rows]
    n = math.prod(ranges[d] for d in rows)
    inner, lin = guarded_launch(op, n, threads)
    with ir.InsertionPoint.at_block_terminator(inner), op.location:
        dims = [None] * len(ranges)
        delinearize(lin, order, ranges, dims)

        def at(m, where):
            return [where[p] for p in plain_dims(m)]

        def load(v, m, where, t):
            return ir.Operation.create("memref.load", [t], [v] + at(m, where)).result

        cls, inits, outs_at = [], [], []
        for c in range(classes):
            where = list(dims)
            where[e] = index_constant(c)
            cls.append(load(S, maps[2], where, x_elt))
            outs_at.append(at(maps[3], where))
            inits.append(load(out, maps[3], where, elt))
        loop = scf.ForOp(index_constant(0), index_constant(ranges[k]), index_constant(1), inits)
        with ir.InsertionPoint(loop.body):
            where = list(dims)
            where[k] = loop.induction_variable
            a = load(A, maps[0], where, elt)
            x = load(X, maps[1], where, x_elt)
            zero = ir.Operation.create("arith.constant", [elt], attributes={
                "value": ir.IntegerAttr.get(elt, 0)}).result
            new = []
            for c, acc in enumerate(loop.inner_iter_args):
                term = ir.Operation.create("arith.select", [elt],
                                           [compare("eq", x, cls[c]), a, zero]).result
                new.append(ir.Operation.create("arith.addi", [elt], [acc, term]).result)
            scf.YieldOp(new)
        for c in range(classes):
            ir.Operation.create("memref.store", [], [loop.results[c], out] + outs_at[c])
