"""A row max and the row sum of exponentials below it in one pass (part of
``latch-wrap-host-compute``, before the other row reductions).

A softmax or a cross-entropy computes ``M = max_k f(x[k])`` and then ``S = sum_k
exp(f(x[k]) - M)``: two row reductions over the same input, each reading all of it — at
TinyMoE B32 the 2.1 GB of bf16 logits twice (0.64 and 0.69 ms).  Here one block of 256
threads per row reads it once, keeping a running maximum and a sum rescaled whenever the
maximum grows (the online softmax of Milakov & Gimelshein, FlashAttention's): each thread
takes chunks of ``_CHUNK`` of the row's elements — ``_CHUNK`` consecutive ones, one 16-byte
load of bf16, when the row's last loop walks the input's contiguous last dimension (thread
``t`` reads elements ``8t .. 8t + 7``, then ``8t + 2048 ..``), else elements ``t, t + 256,
...`` one at a time (a warp's loads still coalesced, but 2 bytes an instruction: TinyMoE
B32's 2.1 GB of logits at ≈ 3.0 TB/s) —, forms the chunk's maximum ``c``, sets ``m' = max(m, c)``, ``s = s * exp(m - m') + sum exp(f(x) - m')``;
then the block combines the threads' maxima (``gpu.all_reduce``), rescales each thread's sum
to the block maximum and adds them.  Thread 0 stores ``M = max(M0, m)`` and ``S = S0 + s *
exp(m - M)`` (``M0``, ``S0`` the outputs' initial values).  A maximum of ``-inf`` rescales
by 1 and adds nothing (no ``exp(-inf + inf)``).  The sums are rounded in another order than
the two-pass form's (float32 either way).

Matched: a row reduction ``R1`` (passes/row_reductions.py) yielding ``maximumf(f(x), acc)``
over one input ``x`` with ``f`` at most an ``arith.extf``, at least ``_BLOCK_MIN``
elements per output, a multiple of 256 x ``_CHUNK``; a later ``R2`` over the same loops
reading ``x`` with the same map and ``R1``'s output with ``R1``'s output map, yielding
``addf(exp(subf(f(x), m)), acc)`` with the same ``f``; between them only views,
allocations, constants and ops on other buffers (copies, fills, generics).
"""
from __future__ import annotations

import math

from latch.passes.base import element_bits, operation as _op
from latch.passes.buffer_views import VIEW_OPS, root
from latch.passes.generic_body import compare, index_constant, indices, load_inputs
from latch.passes.row_reductions import (_BLOCK as _THREADS, _BLOCK_MIN, _split,
                                         block_all_reduce, match_row_reduction)

_CHUNK = 8


def fuse_online_softmax_sums(body, chunks: bool = True) -> int:
    """Rewrite each matching (row max, row sum of exponentials) pair in ``body`` (with
    ``chunks``, reading consecutive elements where the input allows)."""
    n = 0
    ops = [_op(o) for o in body.operations]
    gone = set()
    for i, op in enumerate(ops):
        if i in gone:
            continue
        first = match_row_reduction(op)
        if first is None or first.column is not None or first.comb.name != "arith.maximumf":
            continue
        widen = _widening(op, first)
        if widen is False:
            continue
        j = _partner(ops, i, first, widen)
        if j is None:
            continue
        _emit(op, ops[j], first, widen, chunks)
        op.erase()
        ops[j].erase()
        gone.add(j)
        n += 1
    return n


def _widening(op, info):
    """The ``arith.extf`` op ``f`` of R1's body (None when f is the input itself), or False
    when the body is not ``maximumf(f(x), acc)`` over one input."""
    block = op.regions[0].blocks[0]
    if len(block.arguments) != 2:
        return False
    body = [_op(o) for o in block.operations][:-1]
    x = block.arguments[0]
    other = [v for v in info.comb.operands if v != info.acc]
    if len(other) != 1:
        return False
    if other[0] == x and len(body) == 1:
        return None
    if len(body) == 2 and body[0].name == "arith.extf" and body[0].operands[0] == x and \
            other[0] == body[0].results[0]:
        return body[0]
    return False


def _partner(ops, i, first, widen):
    """Index in ``ops`` of R2 for R1 = ``ops[i]``, or None."""
    from mlir import ir

    r1 = ops[i]
    n_red = math.prod(first.ranges[d] for d in first.red)
    if n_red < _BLOCK_MIN or n_red % (_THREADS * _CHUNK):
        return None
    x, m = r1.operands[0], r1.operands[1]
    watched = {root(x), root(m)}
    for j in range(i + 1, len(ops)):
        o = ops[j]
        if o.name == "linalg.generic":
            second = match_row_reduction(o)
            if second is not None and _is_sum_below(o, second, first, x, m, widen):
                return j
        if o.name in VIEW_OPS or o.name in ("memref.alloc", "arith.constant"):
            continue
        if o.name in ("memref.copy", "linalg.fill", "linalg.generic") and not o.results and \
                all(root(v) not in watched for v in o.operands
                    if isinstance(v.type, ir.MemRefType)):
            continue                # touches neither x nor R1's output
        return None
    return None


def _is_sum_below(op, info, first, x, m, widen) -> bool:
    from mlir import ir

    if info.column is not None or info.comb.name != "arith.addf" or \
            info.ranges != first.ranges or info.red != first.red:
        return False
    operands = list(op.operands)
    if len(operands) != 3 or operands[0] != x or operands[1] != m:
        return False
    if info.maps[0] != first.maps[0] or info.maps[1] != first.maps[-1]:
        return False
    block = op.regions[0].blocks[0]
    body = [_op(o) for o in block.operations][:-1]
    names = [o.name for o in body]
    want = (["arith.extf"] if widen is not None else []) + \
        ["arith.subf", "math.exp", "arith.addf"]
    if names != want:
        return False
    a = block.arguments
    e = a[0]
    if widen is not None:
        if body[0].operands[0] != a[0] or body[0].results[0].type != widen.results[0].type:
            return False
        e = body[0].results[0]
    sub, ex = body[-3], body[-2]
    return list(sub.operands) == [e, a[1]] and ex.operands[0] == sub.results[0] and \
        info.comb == body[-1] and isinstance(e.type, ir.F32Type)


def _emit(r1, r2, info, widen, chunks: bool = True) -> None:
    from mlir import ir
    from mlir.dialects import gpu, scf

    f32 = ir.F32Type.get()
    index = ir.IndexType.get()
    par, red, ranges = info.par, info.red, info.ranges
    n_out = math.prod(ranges[d] for d in par)
    n_red = math.prod(ranges[d] for d in red)
    x = r1.operands[0]
    m_out, s_out = r1.operands[1], r2.operands[2]
    block = r1.regions[0].blocks[0]
    with ir.InsertionPoint(r2), r2.location:
        c1 = index_constant(1)
        launch = gpu.LaunchOp((index_constant(n_out), c1, c1),
                              (index_constant(_THREADS), c1, c1))
        lb = launch.regions[0].blocks[0]
    with ir.InsertionPoint(lb), r2.location:
        row, tid = lb.arguments[0], lb.arguments[3]
        dims = [None] * len(ranges)
        _split(row, par, ranges, dims)

        def const(v):
            return ir.Operation.create("arith.constant", [f32],
                                       attributes={"value": ir.FloatAttr.get(f32, v)}).result

        def op(name, *args):
            return ir.Operation.create(name, [f32], list(args)).result

        def exp_guarded(a, b):      # exp(a - b), 0 when b is -inf (a is then -inf too)
            e = op("math.exp", op("arith.subf", a, b))
            return ir.Operation.create("arith.select", [f32],
                                       [_is_neg_inf(b), const(0.0), e]).result

        def rescale(old, new):      # exp(old - new), 1 when both are -inf
            e = op("math.exp", op("arith.subf", old, new))
            return ir.Operation.create("arith.select", [f32],
                                       [_is_neg_inf(new), const(1.0), e]).result

        def value(k):
            here = list(dims)
            _split(k, red[::-1], ranges, here)
            mapping: dict = {}
            load_inputs(block, [x], info.maps[:1], here, mapping)
            v = mapping[block.arguments[0]]
            if widen is not None:
                v = ir.Operation.create("arith.extf", [f32], [v]).result
            return v

        contiguous = chunks and _contiguous_chunks(x, info)

        def chunk(base):            # the _CHUNK elements of a chunk, in f32
            if not contiguous:
                return [value(base if u == 0 else ir.Operation.create(
                    "arith.addi", [index], [base, index_constant(u * _THREADS)]).result)
                        for u in range(_CHUNK)]
            here = list(dims)
            _split(base, red[::-1], ranges, here)
            elt = ir.MemRefType(x.type).element_type
            vec = ir.Operation.create(
                "vector.load", [ir.VectorType.get([_CHUNK], elt)],
                [x] + indices(info.maps[0], here),
                attributes={"alignment": ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), _CHUNK * element_bits(elt) // 8)}).result
            out = []
            for u in range(_CHUNK):
                v = ir.Operation.create("vector.extract", [elt], [vec], attributes={
                    "static_position": ir.DenseI64ArrayAttr.get([u])}).result
                if widen is not None:
                    v = ir.Operation.create("arith.extf", [f32], [v]).result
                out.append(v)
            return out

        loop = scf.ForOp(index_constant(0), index_constant(n_red // (_THREADS * _CHUNK)),
                         c1, [const(-math.inf), const(0.0)])
        with ir.InsertionPoint(loop.body):
            j = loop.induction_variable
            m, s = loop.inner_iter_args
            base = ir.Operation.create("arith.muli", [index],
                                       [j, index_constant(_THREADS * _CHUNK)]).result
            first = ir.Operation.create("arith.muli", [index],
                                        [tid, index_constant(_CHUNK)]).result \
                if contiguous else tid
            base = ir.Operation.create("arith.addi", [index], [base, first]).result
            xs = chunk(base)
            c = xs[0]
            for v in xs[1:]:
                c = op("arith.maximumf", c, v)
            m_new = op("arith.maximumf", m, c)
            s_new = op("arith.mulf", s, rescale(m, m_new))
            for v in xs:
                s_new = op("arith.addf", s_new, exp_guarded(v, m_new))
            scf.YieldOp([m_new, s_new])
        m_t, s_t = loop.results
        m_b = block_all_reduce(m_t, "maximumf")
        s_b = block_all_reduce(op("arith.mulf", s_t, rescale(m_t, m_b)), "add")
        store = scf.IfOp(compare("eq", tid, index_constant(0)))
        with ir.InsertionPoint(store.then_block):
            where_m = indices(info.maps[-1], dims)
            m0 = ir.Operation.create("memref.load", [f32], [m_out] + where_m).result
            m_fin = op("arith.maximumf", m0, m_b)
            ir.Operation.create("memref.store", [], [m_fin, m_out] + where_m)
            where_s = indices(ir.AffineMapAttr(list(ir.ArrayAttr(
                r2.attributes["indexing_maps"]))[-1]).value, dims)
            s0 = ir.Operation.create("memref.load", [f32], [s_out] + where_s).result
            s_fin = op("arith.addf", s0, op("arith.mulf", s_b, rescale(m_b, m_fin)))
            ir.Operation.create("memref.store", [], [s_fin, s_out] + where_s)
            scf.YieldOp([])
        ir.Operation.create("gpu.terminator", [])


def _contiguous_chunks(x, info) -> bool:
    """Whether ``_CHUNK`` consecutive reduction elements (the last reduction loop fastest)
    are ``_CHUNK`` consecutive, aligned elements of ``x``: that loop indexes its contiguous
    last dimension, in whole chunks."""
    from mlir import ir

    from latch.passes.vector_lanes import _aligned

    last = info.red[-1]
    results = [str(e) for e in info.maps[0].results]
    mt = ir.MemRefType(x.type)
    return bool(results) and results[-1] == f"d{last}" and \
        info.ranges[last] % _CHUNK == 0 and element_bits(mt.element_type) in (16, 32) and \
        _aligned(mt, _CHUNK)


def _is_neg_inf(v):
    from mlir import ir

    f32 = ir.F32Type.get()
    inf = ir.Operation.create("arith.constant", [f32],
                              attributes={"value": ir.FloatAttr.get(f32, -math.inf)}).result
    return ir.Operation.create(
        "arith.cmpf", [ir.IntegerType.get_signless(1)], [v, inf],
        attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)}).result
