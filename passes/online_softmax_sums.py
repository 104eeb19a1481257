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
from latch.passes.generic_body import (clone_body_ops, compare, index_constant, indexing_maps,
                                       indices, load_inputs, loop_ranges, segments)
from latch.passes.row_reductions import (_BLOCK as _THREADS, _BLOCK_MIN, _split,
                                         block_all_reduce, match_row_reduction)
from latch.passes.vector_lanes import aligned_chunks, lane_of, load_chunk

_CHUNK = 8
#: chunks a thread may keep in registers when a reader is finished in the launch (the row
#: read from memory once: 16 x 8 bf16 = 64 registers a thread); latch-wrap-host-compute's
#: ``held-chunks`` (default 0: read again, the faster on an H100) sets the limit
_HELD = 16
#: bytes of a row a launch may keep in (dynamic) shared memory between the totals and its
#: reader when the row is not held in registers: each thread stores the chunks it loads for
#: the totals and reads them back for the reader (its own chunks only: no barrier), so the
#: row is read from global memory once.  TinyMoE's 32768-wide bf16 logits rows: 64 KiB, three
#: blocks of 256 threads an SM.  The default of latch-wrap-host-compute's ``staged-rows``
#: (0: read again)
STAGED_BYTES = 96 * 1024
#: chunks a thread's loop over the row takes an iteration (their loads issued together,
#: then one running-maximum update for all of them): with one, each iteration waited for
#: its only load, and TinyMoE B32's loss kernel (32768 rows of 64 KiB bf16 logits, three
#: blocks an SM) read and wrote its 4.3 GB at 2.5 TB/s on an H200.  The default of
#: latch-wrap-host-compute's ``softmax-unroll``
UNROLL = 4


def fuse_online_softmax_sums(body, chunks: bool = True, readers: bool = True,
                             held_chunks: int = _HELD, staged_bytes: int = STAGED_BYTES,
                             unroll: int = UNROLL) -> int:
    """Rewrite each matching (row max, row sum of exponentials) pair in ``body`` (with
    ``chunks``, reading consecutive elements where the input allows; with ``readers``,
    finishing the elementwise reader that follows the pair in the same launch, the row
    kept in registers where a thread's share is at most ``held_chunks`` chunks, else in
    shared memory where the row is at most ``staged_bytes`` bytes, else read again; a
    thread's loop over its chunks takes up to ``unroll`` of them an iteration)."""
    from mlir import ir

    from latch.passes.buffer_views import hoist_definition

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
        k, perm = _reader(ops, i, j, first) if readers else (None, None)
        reader = ops[k] if k is not None else None
        if reader is not None:
            for v in reader.operands:
                if isinstance(v.type, ir.MemRefType):
                    hoist_definition(v, ops[j])
        _emit(op, ops[j], first, widen, chunks, reader, perm, held_chunks, staged_bytes,
              unroll)
        op.erase()
        ops[j].erase()
        gone.add(j)
        if reader is not None:
            reader.erase()
            gone.add(k)
        n += 1
    return n


def _reader(ops, i, j, info):
    """(position in ``ops``, :func:`loop_correspondence`) of the op that the launch of the
    pair (R1, R2 = ``ops[j]``) can finish, or (None, None): the next op (views, allocations
    and constants aside) is an all-parallel generic with one output that reads ``x``
    through R1's map up to an order of its loops (:func:`loop_correspondence`: the same
    loops, numbered otherwise), a body of scalar ``arith``/``math`` code (``linalg.index``
    too), not reading its output; it reads R1's and R2's outputs, if at all, as those
    buffers with their own output maps (each element is then the total of the row its block
    computes); its output is an allocation (or views of one) sharing no bytes with anything
    R1, R2 or it reads; and each buffer it uses can move in front of R2 (views of an
    allocation defined before, or between, alone). The block of a row then computes the
    reader's elements of that row (R1's loop indices ``(row, k)``, the same split,
    renumbered) after its totals."""
    from mlir import ir

    from latch.passes.buffer_views import (arena_span, defined_by_views, memrefs_used,
                                           next_memory_op, slots_overlap)

    r1, r2 = ops[i], ops[j]
    k = next_memory_op(ops, j)
    if k is None:
        return None, None
    fin = ops[k]
    if fin.name != "linalg.generic" or fin.results or segments(fin)[1] != 1 or \
            any("parallel" not in str(t)
                for t in ir.ArrayAttr(fin.attributes["iterator_types"])):
        return None, None
    n_in = segments(fin)[0]
    perm = loop_correspondence(fin, r1.operands[0], info)
    if perm is None:
        return None, None
    block = fin.regions[0].blocks[0]
    if any(True for _ in block.arguments[n_in].uses):
        return None, None
    for inner in list(block.operations):
        inner = _op(inner)
        if inner.regions or not inner.name.startswith(
                ("arith.", "math.", "linalg.index", "linalg.yield")):
            return None, None
    maps = indexing_maps(fin)
    m_out, s_out = r1.operands[1], r2.operands[2]
    s_map = indexing_maps(r2)[-1]
    for v, mp in zip(list(fin.operands)[:n_in], maps):
        if not isinstance(v.type, ir.MemRefType):
            continue
        if root(v) == root(m_out) and not (v == m_out and
                                            _translate(mp, perm) == info.maps[-1]):
            return None, None
        if root(v) == root(s_out) and not (v == s_out and _translate(mp, perm) == s_map):
            return None, None
    out = fin.operands[n_in]
    if not all(defined_by_views(v, ops[j + 1:k]) for v in fin.operands
               if isinstance(v.type, ir.MemRefType)):
        return None, None
    span = arena_span(out)
    for v in memrefs_used(r1) + memrefs_used(r2) + list(fin.operands)[:n_in]:
        if isinstance(v.type, ir.MemRefType) and \
                (root(v) == root(out) or slots_overlap(span, arena_span(v))):
            return None, None
    return k, perm


def loop_correspondence(fin, x, info):
    """``perm`` with the reader ``fin``'s loop ``i`` being R1's loop ``perm[i]``, from the
    two maps through which they read ``x`` (each result a loop index, every loop once;
    linalg's loop order of an elementwise op may differ from the reduction's), the trip
    counts equal; None when ``fin`` does not read ``x`` so."""
    from mlir import ir

    n_in = segments(fin)[0]
    n = len(info.ranges)
    for v, mp in zip(list(fin.operands)[:n_in], indexing_maps(fin)):
        if v != x or mp.n_dims != n or len(mp.results) != len(info.maps[0].results):
            continue
        perm = [None] * n
        for a, b in zip(mp.results, info.maps[0].results):
            if not (isinstance(a, ir.AffineDimExpr) and isinstance(b, ir.AffineDimExpr)):
                break
            i, j = ir.AffineDimExpr(a).position, ir.AffineDimExpr(b).position
            if perm[i] is not None:
                break
            perm[i] = j
        else:
            _, ranges = loop_ranges(fin)
            if None not in perm and sorted(perm) == list(range(n)) and \
                    all(ranges[i] == info.ranges[perm[i]] for i in range(n)):
                return perm
    return None


def _translate(m, perm):
    """Indexing map ``m`` of the reader's loops in terms of R1's (loop ``i`` is R1's
    ``perm[i]``); None when a result is not a loop index or a constant."""
    from mlir import ir

    out = []
    for e in m.results:
        if isinstance(e, ir.AffineDimExpr):
            out.append(ir.AffineDimExpr.get(perm[ir.AffineDimExpr(e).position]))
        elif isinstance(e, ir.AffineConstantExpr):
            out.append(e)
        else:
            return None
    return ir.AffineMap.get(len(perm), 0, out)


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


def _emit(r1, r2, info, widen, chunks: bool = True, reader=None, perm=None,
          held_chunks: int = _HELD, staged_bytes: int = STAGED_BYTES,
          unroll: int = UNROLL) -> None:
    from mlir import ir
    from mlir.dialects import gpu, scf

    f32 = ir.F32Type.get()
    index = ir.IndexType.get()
    par, red, ranges = info.par, info.red, info.ranges
    n_out = math.prod(ranges[d] for d in par)
    n_red = math.prod(ranges[d] for d in red)
    trips = n_red // (_THREADS * _CHUNK)
    x = r1.operands[0]
    m_out, s_out = r1.operands[1], r2.operands[2]
    s_map = ir.AffineMapAttr(list(ir.ArrayAttr(r2.attributes["indexing_maps"]))[-1]).value
    block = r1.regions[0].blocks[0]
    contiguous = chunks and _contiguous_chunks(x, info)
    held = reader is not None and contiguous and trips <= held_chunks
    x_elt = ir.MemRefType(x.type).element_type
    row_bytes = n_red * element_bits(x_elt) // 8
    staged = reader is not None and contiguous and not held and row_bytes <= staged_bytes
    with ir.InsertionPoint(r2), r2.location:
        c1 = index_constant(1)
        dynamic = ir.Operation.create(
            "arith.constant", [ir.IntegerType.get_signless(32)],
            attributes={"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(32),
                                                    _STAGE_AT + row_bytes)}).result \
            if staged else None
        launch = gpu.LaunchOp((index_constant(n_out), c1, c1),
                              (index_constant(_THREADS), c1, c1),
                              dynamic_shared_memory_size=dynamic)
        lb = launch.regions[0].blocks[0]
    with ir.InsertionPoint(lb), r2.location:
        row, tid = lb.arguments[0], lb.arguments[3]
        stage, partials = _stage_buffers(n_red, x_elt) if staged else (None, None)
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

        def widened(v):
            if widen is not None:
                v = ir.Operation.create("arith.extf", [f32], [v]).result
            return v

        def value(k):               # (element as stored, in f32)
            here = list(dims)
            _split(k, red[::-1], ranges, here)
            mapping: dict = {}
            load_inputs(block, [x], info.maps[:1], here, mapping)
            v = mapping[block.arguments[0]]
            return v, widened(v)

        def offset(base, u):        # the reduction element number of a chunk's u-th element
            if u == 0:
                return base
            return ir.Operation.create("arith.addi", [index], [base, index_constant(
                u if contiguous else u * _THREADS)]).result

        def staged_at(j):           # the thread's chunk j in the staged row
            return [ir.Operation.create("arith.muli", [index], [ir.Operation.create(
                "arith.addi", [index], [ir.Operation.create(
                    "arith.muli", [index], [j, index_constant(_THREADS)]).result,
                    tid]).result, index_constant(_CHUNK)]).result]

        def chunk(base, j=None):    # the _CHUNK elements of a chunk: (as stored, in f32);
            if not contiguous:      # with ``stage``, chunk j also put in shared memory
                return [value(offset(base, u)) for u in range(_CHUNK)]
            here = list(dims)
            _split(base, red[::-1], ranges, here)
            vectors = load_chunk(block, [x], info.maps[:1], here, _CHUNK, {0})
            if stage is not None:
                ir.Operation.create("vector.store", [],
                                    [vectors[block.arguments[0]], stage] + staged_at(j),
                                    attributes={"alignment": _alignment(x_elt)})
            out = []
            for u in range(_CHUNK):
                v = lane_of(vectors, u)[block.arguments[0]]
                out.append((v, widened(v)))
            return out

        def chunk_base(j):          # the first element number of the thread's chunk j
            base = ir.Operation.create("arith.muli", [index],
                                       [j, index_constant(_THREADS * _CHUNK)]).result
            first = ir.Operation.create("arith.muli", [index],
                                        [tid, index_constant(_CHUNK)]).result \
                if contiguous else tid
            return ir.Operation.create("arith.addi", [index], [base, first]).result

        where_m = indices(info.maps[-1], dims) if reader is not None else None
        where_s = indices(s_map, dims) if reader is not None else None
        if reader is not None:      # every thread needs the totals; all read the initial
            # values before thread 0 stores (the block all-reduces' barriers lie between)
            m0 = ir.Operation.create("memref.load", [f32], [m_out] + where_m).result
            s0 = ir.Operation.create("memref.load", [f32], [s_out] + where_s).result
        if held:                    # the whole row in registers: an exact maximum, then the sum
            kept = [chunk(chunk_base(index_constant(j))) for j in range(trips)]
            xs = [v for c in kept for _, v in c]
            m_t = xs[0]
            for v in xs[1:]:
                m_t = op("arith.maximumf", m_t, v)
            s_t = const(0.0)
            for v in xs:
                s_t = op("arith.addf", s_t, exp_guarded(v, m_t))
        else:           # `per` chunks an iteration: their loads in flight together
            per = max(u for u in range(1, max(1, unroll) + 1) if trips % u == 0)
            loop = scf.ForOp(index_constant(0), index_constant(trips // per),
                             c1, [const(-math.inf), const(0.0)])
            with ir.InsertionPoint(loop.body):
                m, s = loop.inner_iter_args
                first_j = ir.Operation.create("arith.muli", [index], [
                    loop.induction_variable, index_constant(per)]).result
                xs = []
                for u in range(per):
                    j = ir.Operation.create("arith.addi", [index],
                                            [first_j, index_constant(u)]).result if u \
                        else first_j
                    xs += [v for _, v in chunk(chunk_base(j), j)]
                c = xs[0]
                for v in xs[1:]:
                    c = op("arith.maximumf", c, v)
                m_new = op("arith.maximumf", m, c)
                s_new = op("arith.mulf", s, rescale(m, m_new))
                for v in xs:
                    s_new = op("arith.addf", s_new, exp_guarded(v, m_new))
                scf.YieldOp([m_new, s_new])
            m_t, s_t = loop.results
        if staged:      # no static shared memory beside the dynamic (it would overlap)
            m_b = _block_reduce(m_t, "arith.maximumf", partials, tid)
            s_b = _block_reduce(op("arith.mulf", s_t, rescale(m_t, m_b)), "arith.addf",
                                partials, tid)
        else:
            m_b = block_all_reduce(m_t, "maximumf")
            s_b = block_all_reduce(op("arith.mulf", s_t, rescale(m_t, m_b)), "add")
        if reader is not None:
            m_fin = op("arith.maximumf", m0, m_b)
            s_fin = op("arith.addf", s0, op("arith.mulf", s_b, rescale(m_b, m_fin)))
        store = scf.IfOp(compare("eq", tid, index_constant(0)))
        with ir.InsertionPoint(store.then_block):
            if reader is None:
                where_m = indices(info.maps[-1], dims)
                m0 = ir.Operation.create("memref.load", [f32], [m_out] + where_m).result
                m_fin = op("arith.maximumf", m0, m_b)
            ir.Operation.create("memref.store", [], [m_fin, m_out] + where_m)
            if reader is None:
                where_s = indices(s_map, dims)
                s0 = ir.Operation.create("memref.load", [f32], [s_out] + where_s).result
                s_fin = op("arith.addf", s0, op("arith.mulf", s_b, rescale(m_b, m_fin)))
            ir.Operation.create("memref.store", [], [s_fin, s_out] + where_s)
            scf.YieldOp([])
        if reader is not None:
            finish = _ReaderEmitter(reader, perm, info, dims, x, {m_out: m_fin, s_out: s_fin},
                                    {m_out: info.maps[-1], s_out: s_map}, held or staged,
                                    contiguous)
            if held:
                for j, c in enumerate(kept):
                    finish.chunk(chunk_base(index_constant(j)), offset, [r for r, _ in c])
            else:                   # each thread reads back only the chunks it staged
                loop = scf.ForOp(index_constant(0), index_constant(trips), c1, [])
                with ir.InsertionPoint(loop.body):
                    j = loop.induction_variable
                    xs = None
                    if staged:
                        vec = ir.Operation.create(
                            "vector.load", [ir.VectorType.get([_CHUNK], x_elt)],
                            [stage] + staged_at(j),
                            attributes={"alignment": _alignment(x_elt)}).result
                        xs = [lane_of({block.arguments[0]: vec}, u)[block.arguments[0]]
                              for u in range(_CHUNK)]
                    finish.chunk(chunk_base(j), offset, xs)
                    scf.YieldOp([])
        ir.Operation.create("gpu.terminator", [])


#: bytes of the staged kernel's dynamic shared memory before the row: the warps' partial
#: maxima and sums of the block reductions (8 f32, 16-byte aligned after them)
_STAGE_AT = 64


def _stage_buffers(n: int, elt):
    """The launch's dynamic shared memory as (the row: ``memref<n x elt>`` at
    ``_STAGE_AT``, the warps' partials: ``memref<8 x f32>`` at 0), workgroup space.  All the
    kernel's shared memory is dynamic: NVVM gives ``gpu.dynamic_shared_memory`` the address
    of the first static shared array, so static arrays beside it (``gpu.all_reduce``'s)
    would overlap the row."""
    from mlir import ir

    wg = ir.Attribute.parse("#gpu.address_space<workgroup>")
    i8 = ir.IntegerType.get_signless(8)
    dyn = ir.Operation.create("gpu.dynamic_shared_memory",
                              [ir.MemRefType.get([ir.ShapedType.get_dynamic_size()], i8,
                                                 memory_space=wg)]).result
    row = ir.Operation.create("memref.view", [ir.MemRefType.get([n], elt, memory_space=wg)],
                              [dyn, index_constant(_STAGE_AT)]).result
    warps = ir.Operation.create(
        "memref.view", [ir.MemRefType.get([_THREADS // 32], ir.F32Type.get(), memory_space=wg)],
        [dyn, index_constant(0)]).result
    return row, warps


def _block_reduce(value, combine: str, partials, tid):
    """``combine`` (an arith op name) of ``value`` over the block through ``partials`` (a
    workgroup buffer of a value a warp): a butterfly in each warp, lane 0 stores the warp's
    total, and every thread combines the totals in warp order (the same result in every
    thread); barriers before and after the reads."""
    from mlir import ir
    from mlir.dialects import scf

    from latch.passes.row_reductions import _warp_reduce

    f32 = value.type
    index = ir.IndexType.get()
    total = _warp_reduce(value, combine)
    lane = ir.Operation.create("arith.remui", [index], [tid, index_constant(32)]).result
    warp = ir.Operation.create("arith.divui", [index], [tid, index_constant(32)]).result
    first = scf.IfOp(compare("eq", lane, index_constant(0)))
    with ir.InsertionPoint(first.then_block):
        ir.Operation.create("memref.store", [], [total, partials, warp])
        scf.YieldOp([])
    ir.Operation.create("gpu.barrier", [])
    out = None
    for w in range(_THREADS // 32):
        v = ir.Operation.create("memref.load", [f32], [partials, index_constant(w)]).result
        out = v if out is None else ir.Operation.create(combine, [f32], [out, v]).result
    ir.Operation.create("gpu.barrier", [])      # read by all before the next reduction
    return out


def _alignment(elt):
    from mlir import ir
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), _CHUNK * element_bits(elt) // 8)


class _ReaderEmitter:
    """Emits the reader's elements of a chunk: its loop indices are the row's (``dims``) and
    the reduction element's (the same split as R1's); the totals come from registers, the
    inputs read at the row alone are loaded once, ``x`` (read as R1 reads it) is taken from
    the thread's registers when ``held``, the rest is loaded per element; the chunk's
    results are stored as one vector where they are consecutive in the output."""

    def __init__(self, reader, perm, info, dims, x, totals: dict, total_maps: dict,
                 held: bool, contiguous: bool):
        from mlir import ir

        self.info, self.dims = info, dims
        self.n_in = segments(reader)[0]
        self.block = reader.regions[0].blocks[0]
        self.body = [_op(o) for o in self.block.operations]
        self.maps = indexing_maps(reader)
        self.ins = list(reader.operands)[:self.n_in]
        self.out = reader.operands[self.n_in]
        self.perm = perm                            # the reader's loop i is R1's perm[i]
        self.fixed, self.x_args, self.per_element = {}, [], []
        for q, (v, mp) in enumerate(zip(self.ins, self.maps)):
            arg = self.block.arguments[q]
            ours = _translate(mp, self.perm)        # in R1's loops
            if not isinstance(v.type, ir.MemRefType):
                self.fixed[arg] = v
            elif v in totals and ours == total_maps[v]:
                self.fixed[arg] = totals[v]
            elif held and v == x and ours == info.maps[0]:
                self.x_args.append(q)
            elif ours is not None and _row_only(ours, info.par):
                elt = ir.MemRefType(v.type).element_type
                self.fixed[arg] = ir.Operation.create(
                    "memref.load", [elt], [v] + indices(ours, dims)).result
            else:
                self.per_element.append(q)
        out_map = _translate(self.maps[-1], self.perm)
        self.vector_store = contiguous and out_map is not None and \
            _contiguous_along(self.out, out_map, info)

    def element(self, k, x_value):
        """The reader's value at reduction element number ``k`` and its loop indices."""
        ours = list(self.dims)
        _split(k, self.info.red[::-1], self.info.ranges, ours)
        here = [ours[j] for j in self.perm]         # in the reader's loops
        mapping = dict(self.fixed)
        for q in self.x_args:
            mapping[self.block.arguments[q]] = x_value
        load_inputs(self.block, self.ins, self.maps, here, mapping, only=self.per_element)
        clone_body_ops(self.body[:-1], mapping, here)
        y = self.body[-1].operands[0]
        return mapping.get(y, y), here

    def chunk(self, base, offset, xs) -> None:
        from mlir import ir

        values, first = [], None
        for u in range(_CHUNK):
            y, here = self.element(offset(base, u), xs[u] if xs is not None else None)
            if u == 0:
                first = here
            if self.vector_store:
                values.append(y)
            else:
                ir.Operation.create("memref.store", [],
                                    [y, self.out] + indices(self.maps[-1], here))
        if self.vector_store:
            elt = ir.MemRefType(self.out.type).element_type
            vec = ir.Operation.create("vector.from_elements",
                                      [ir.VectorType.get([_CHUNK], elt)], values).result
            ir.Operation.create(
                "vector.store", [], [vec, self.out] + indices(self.maps[-1], first),
                attributes={"alignment": ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), _CHUNK * element_bits(elt) // 8)})


def _row_only(m, par) -> bool:
    """Whether indexing map ``m`` reads one element per row: its results are constants or
    the row's (parallel) loops."""
    from mlir import ir

    for e in m.results:
        if isinstance(e, ir.AffineDimExpr):
            if ir.AffineDimExpr(e).position not in par:
                return False
        elif not isinstance(e, ir.AffineConstantExpr):
            return False
    return True


def _contiguous_along(v, m, info) -> bool:
    """Whether ``_CHUNK`` consecutive reduction elements are ``_CHUNK`` consecutive, aligned
    elements of buffer ``v`` read through map ``m``."""
    from mlir import ir

    last = info.red[-1]
    results = [str(e) for e in m.results]
    mt = ir.MemRefType(v.type)
    return bool(results) and results[-1] == f"d{last}" and \
        info.ranges[last] % _CHUNK == 0 and element_bits(mt.element_type) in (16, 32) and \
        aligned_chunks(mt, _CHUNK)


def _contiguous_chunks(x, info) -> bool:
    """Whether ``_CHUNK`` consecutive reduction elements (the last reduction loop fastest)
    are ``_CHUNK`` consecutive, aligned elements of ``x``: that loop indexes its contiguous
    last dimension, in whole chunks."""
    return _contiguous_along(x, info.maps[0], info)


def _is_neg_inf(v):
    from mlir import ir

    f32 = ir.F32Type.get()
    inf = ir.Operation.create("arith.constant", [f32],
                              attributes={"value": ir.FloatAttr.get(f32, -math.inf)}).result
    return ir.Operation.create(
        "arith.cmpf", [ir.IntegerType.get_signless(1)], [v, inf],
        attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)}).result
