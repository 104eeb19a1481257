"""Row reductions as cooperative GPU kernels (part of ``latch-wrap-host-compute``).

A ``linalg.generic`` with parallel *and* reduction loops (a softmax's row max and row sum, a
norm weight's gradient summed over all tokens, a count per expert) would otherwise become
one thread per output element, each running the whole reduction loop alone, with the
accumulator loaded from and stored to memory on every iteration: 2,048 threads each
walking a 32,768-long vocabulary row take milliseconds.  Here each output element gets a
group of threads instead:

* a **warp** (32 lanes; 8 warps, i.e. 8 outputs, per 256-thread block) when the reduction
  has fewer than ``_BLOCK_MIN`` elements: lane ``l`` combines elements ``l, l + 32, ...``
  in a register, then five ``gpu.shuffle xor`` steps combine the lanes;
* a **block** of 256 threads for longer reductions: thread ``t`` combines elements
  ``t, t + 256, ...``, then ``gpu.all_reduce`` combines the block.

Lane / thread 0 combines the total with the output's initial value (linalg semantics) and
stores it.  The combining order is fixed by the shapes, so results are deterministic (a
tree instead of a left-to-right chain: at least as accurate).  Reduction elements are
numbered with the last reduction loop varying fastest, so rows of row-major buffers are
read by consecutive lanes (coalesced).

Matched: not a contraction (``latch-form-contraction-kernels`` tiles those), one f32 output,
static shapes, an output map that uses only parallel loops, no
input aliasing the output, at least ``_MIN_ELEMENTS`` reduction elements, and a body whose
yielded value is ``combine(acc, e)`` — ``addf``, ``maximumf``, ``minimumf``, ``maxnumf`` or
``minnumf`` — with ``acc`` (the output element) used nowhere else.  Anything else keeps
the one-thread-per-output loops.
"""
from __future__ import annotations

import math

from latch.passes.buffer_views import root as _root
from latch.passes.form_contraction_kernels import match_contraction
from latch.passes.generic_body import (accumulation, clone_body_ops, compare, delinearize,
                                       index_constant, indices, load_inputs, loop_ranges)

# combining op -> (gpu.all_reduce operation, identity)
_COMBINERS = {
    "arith.addf": ("add", 0.0),
    "arith.maximumf": ("maximumf", -math.inf),
    "arith.minimumf": ("minimumf", math.inf),
    "arith.maxnumf": ("maxnumf", -math.inf),
    "arith.minnumf": ("minnumf", math.inf),
}
_MIN_ELEMENTS = 32      # shorter reductions stay one loop per thread
_BLOCK_MIN = 4096       # from here on a whole block per output element
_BLOCK = 256
_WARP = 32


def _op(o):
    return o.operation if hasattr(o, "operation") else o


def match_row_reduction(op):
    """(combining op, parallel loops, reduction loops, maps, ranges) if ``op`` is a row
    reduction this module can turn into a cooperative kernel, else None."""
    from mlir import ir

    if op.name != "linalg.generic" or len(op.regions) != 1:
        return None
    its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    par = [i for i, t in enumerate(its) if "parallel" in t]
    red = [i for i, t in enumerate(its) if "reduction" in t]
    if not par or not red or len(par) + len(red) != len(its):
        return None
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    if seg[1] != 1:
        return None
    operands = list(op.operands)
    out = operands[-1]
    if not isinstance(out.type, ir.MemRefType) or \
            str(ir.MemRefType(out.type).element_type) != "f32":
        return None
    for v in operands:
        if isinstance(v.type, ir.MemRefType) and not ir.MemRefType(v.type).has_static_shape:
            return None
    out_root = _root(out)
    if any(isinstance(v.type, ir.MemRefType) and _root(v) == out_root for v in operands[:-1]):
        return None
    maps, ranges = loop_ranges(op)
    if any(r is None for r in ranges):
        return None
    for expr in maps[-1].results:
        if isinstance(expr, ir.AffineDimExpr):
            if ir.AffineDimExpr(expr).position in red:
                return None
        elif not isinstance(expr, ir.AffineConstantExpr):
            return None
    if math.prod(ranges[d] for d in red) < _MIN_ELEMENTS:
        return None
    if match_contraction(op) is not None:
        return None              # a matmul: latch-form-contraction-kernels tiles it
    found = accumulation(op)
    if found is None or found[2].name not in _COMBINERS:
        return None
    comb = found[2]
    return comb, par, red, maps, ranges


def cooperative_row_reductions(body) -> int:
    """Replace every matching row reduction in ``body`` (a function body) by a cooperative
    ``gpu.launch``; returns how many were replaced."""
    n = 0
    for op in list(body.operations):
        op = _op(op)
        found = match_row_reduction(op)
        if found is None:
            continue
        _emit(op, *found)
        op.erase()
        n += 1
    return n


def _emit(op, comb, par, red, maps, ranges) -> None:
    from mlir import ir
    from mlir.dialects import gpu, scf

    index = ir.IndexType.get()
    f32 = ir.F32Type.get()
    kind, identity = _COMBINERS[comb.name]
    operands = list(op.operands)
    ins, out = operands[:-1], operands[-1]
    block = op.regions[0].blocks[0]
    acc = block.arguments[len(block.arguments) - 1]
    n_out = math.prod(ranges[d] for d in par)
    n_red = math.prod(ranges[d] for d in red)
    per_block = 1 if n_red >= _BLOCK_MIN else _BLOCK // _WARP
    group = _BLOCK if per_block == 1 else _WARP
    with ir.InsertionPoint(op), op.location:
        c1 = index_constant(1)
        launch = gpu.LaunchOp((index_constant(-(-n_out // per_block)), c1, c1),
                              (index_constant(group), index_constant(per_block), c1))
        lb = launch.regions[0].blocks[0]
    with ir.InsertionPoint(lb), op.location:
        bid, lane, sub = lb.arguments[0], lb.arguments[3], lb.arguments[4]
        if per_block == 1:
            row = bid
        else:
            scaled = ir.Operation.create("arith.muli", [index],
                                         [bid, index_constant(per_block)]).result
            row = ir.Operation.create("arith.addi", [index], [scaled, sub]).result
        guard = None
        if n_out % per_block:                       # the last block's extra warps idle
            guard = scf.IfOp(compare("ult", row, index_constant(n_out)))
        ip = ir.InsertionPoint(guard.then_block) if guard else ir.InsertionPoint(lb)
    with ip, op.location:
        dims = [None] * len(ranges)
        delinearize(row, par, ranges, dims)
        start = ir.Operation.create("arith.constant", [f32],
                                    attributes={"value": ir.FloatAttr.get(f32, identity)}
                                    ).result
        loop = scf.ForOp(lane, index_constant(n_red), index_constant(group), [start])
        with ir.InsertionPoint(loop.body):
            delinearize(loop.induction_variable, red[::-1], ranges, dims)
            mapping = {}
            load_inputs(block, ins, maps, dims, mapping)
            mapping[acc] = loop.inner_iter_args[0]
            clone_body_ops([_op(o) for o in block.operations][:-1], mapping, dims)
            scf.YieldOp([mapping[comb.results[0]]])
        partial = loop.results[0]
        if per_block == 1:
            total = ir.Operation.create(
                "gpu.all_reduce", [f32], [partial],
                attributes={"op": ir.Attribute.parse(f"#gpu<all_reduce_op {kind}>"),
                            "uniform": ir.UnitAttr.get()}, regions=1).result
        else:
            total = _warp_reduce(partial, comb.name)
        store = scf.IfOp(compare("eq", lane, index_constant(0)))
        with ir.InsertionPoint(store.then_block):
            where = indices(maps[-1], dims)
            old = ir.Operation.create("memref.load", [f32], [out] + where).result
            new = ir.Operation.create(comb.name, [f32], [old, total]).result
            ir.Operation.create("memref.store", [], [new, out] + where)
            scf.YieldOp([])
        if guard:
            scf.YieldOp([])
    with ir.InsertionPoint(lb), op.location:
        ir.Operation.create("gpu.terminator", [])


def _warp_reduce(value, combine: str):
    """Combine ``value`` across the 32 lanes of a warp (butterfly of ``gpu.shuffle xor``;
    every lane ends with the total)."""
    from mlir import ir

    i32 = ir.IntegerType.get_signless(32)
    f32 = ir.F32Type.get()
    width = ir.Operation.create("arith.constant", [i32],
                                attributes={"value": ir.IntegerAttr.get(i32, _WARP)}).result
    for offset in (16, 8, 4, 2, 1):
        off = ir.Operation.create("arith.constant", [i32],
                                  attributes={"value": ir.IntegerAttr.get(i32, offset)}).result
        other = ir.Operation.create(
            "gpu.shuffle", [f32, ir.IntegerType.get_signless(1)], [value, off, width],
            attributes={"mode": ir.Attribute.parse("#gpu<shuffle_mode xor>")}).results[0]
        value = ir.Operation.create(combine, [f32], [value, other]).result
    return value
