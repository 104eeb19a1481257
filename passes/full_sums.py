"""Full sums on the device for ``latch-wrap-host-compute``: a ``linalg.generic`` whose loops
are all reductions into a 0-d buffer with body ``acc + e`` (an f32/f64 sum — the gradient
clip's per-tensor sums of squares — or an i32/i64 count) becomes one ``gpu.launch``.

Each of ``threads`` threads sums a strided slice of the iteration space in a register —
chunks of ``V`` consecutive elements, one 16-byte vector load of each input a chunk, where
the last loop walks every input's contiguous last dimension in whole aligned chunks
(:func:`~latch.passes.vector_lanes.chunk_width`) —, ``gpu.all_reduce add`` combines the
partial sums and thread 0 adds the total to the output.  A larger sum runs on several blocks
that store their partial sums, added up in a fixed order by a second one-block launch, or
(``last_block``) by the block that stores the last one (a ticket taken with an atomic add,
between two ``membar.gl``) in the same launch.  The pass's options ``reduce-threads``,
``chunks`` and ``last-block-sums`` reach :func:`parallel_full_reductions`.
"""
from __future__ import annotations

from latch.passes.base import operation as _op
from latch.passes.generic_body import (accumulation, clone_body_ops, compare, delinearize,
                                       gpu_fence, index_constant, load_inputs, loop_ranges)
from latch.passes.vector_lanes import chunk_width, lane_of, load_chunk, read_along


# -- full reductions: one block, strided partial sums, gpu.all_reduce ---------------------------

def _sum_reduction(op):
    """(block, acc arg, the add, the summand) if ``op`` is a linalg.generic whose loops are
    all reductions into one 0-d f32/f64 (``addf``) or i32/i64 (``addi``: a count) output
    with body ``acc + e`` (e independent of acc), over static shapes; else None."""
    from mlir import ir

    if op.name != "linalg.generic" or len(op.regions) != 1:
        return None
    its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if not its or any("reduction" not in t for t in its):
        return None
    outs = [v for v in op.operands][-1:]
    n_out = 1
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])) \
        if "operandSegmentSizes" in op.attributes else None
    if seg is None or seg[1] != n_out:
        return None
    out_t = outs[0].type
    if not isinstance(out_t, ir.MemRefType) or ir.MemRefType(out_t).rank != 0:
        return None
    elt = str(ir.MemRefType(out_t).element_type)
    if elt not in ("f32", "f64", "i32", "i64"):
        return None
    for v in op.operands:
        if not isinstance(v.type, ir.MemRefType) or not ir.MemRefType(v.type).has_static_shape:
            return None
    found = accumulation(op)
    if found is None or found[2].name != ("arith.addi" if elt.startswith("i") else "arith.addf"):
        return None
    return found


def parallel_full_reductions(body, threads: int, chunks: bool = True,
                              last_block: bool = False) -> None:
    for op in list(body.operations):
        op = _op(op)
        found = _sum_reduction(op)
        if found is None:
            continue
        maps, ranges = loop_ranges(op)
        if any(r is None for r in ranges):
            continue
        _emit_block_reduction(op, found, maps, ranges, threads, chunks, last_block)
        op.erase()


def _emit_block_reduction(op, found, maps, ranges, threads: int, chunks: bool = True,
                          last_block: bool = False) -> None:
    """Replace a sum reduction by ``gpu.launch``es of ``threads``-thread blocks: each thread
    sums a strided slice of the iteration space in a register and ``gpu.all_reduce add``
    combines a block's partial sums.  One block (up to ``_ONE_BLOCK_ITEMS`` elements) adds
    its total to the output directly; for a larger iteration space, several blocks (one per
    ``_ITEMS_PER_BLOCK`` elements, at most ``_MAX_BLOCKS``) each store their total into a
    scratch buffer, and the scratch buffer is summed in a fixed order into the output by
    one block (deterministic: no float atomics) — with ``last_block``, in the same launch
    by the block that finishes last (:func:`_last_block_sum`), else by a second launch."""
    from mlir import ir

    block, acc, add, summand = found
    out = op.operands[len(op.operands) - 1]
    ins = list(op.operands)[:len(op.operands) - 1]
    ftype = ir.MemRefType(out.type).element_type
    total_iters = 1
    for r in ranges:
        total_iters *= r
    blocks = 1 if total_iters <= _ONE_BLOCK_ITEMS else \
        min(_MAX_BLOCKS, -(-total_iters // _ITEMS_PER_BLOCK))
    lanes = chunk_width(op, maps, ranges, len(ranges) - 1) if chunks else 1
    with op.location:
        if blocks == 1:
            with ir.InsertionPoint(op):
                _launch_strided_sum(op, found, maps, ranges, ins, total_iters, 1, threads,
                                    lambda bid, total: _add_to(out, total, ftype), lanes)
            return
        with ir.InsertionPoint(op):
            scratch = ir.Operation.create(
                "memref.alloc", [ir.MemRefType.get([blocks], ftype)], operands=[],
                attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])}).result

            def store_partial(bid, total):
                ir.Operation.create("memref.store", [], [total, scratch, bid])

            if last_block:     # the launch's last block sums the partials
                counter = ir.Operation.create(   # an unshared arena slot: zero at start
                    "memref.alloc", [ir.MemRefType.get([1], ir.IntegerType.get_signless(32))],
                    operands=[],
                    attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0]),
                                "latch.zero_at_start": ir.UnitAttr.get()}).result
                _launch_strided_sum(op, found, maps, ranges, ins, total_iters, blocks, threads,
                                    store_partial, lanes,
                                    then=lambda tx: _last_block_sum(
                                        tx, counter, scratch, blocks, threads, out, ftype))
                return
            _launch_strided_sum(op, found, maps, ranges, ins, total_iters, blocks, threads,
                                store_partial, lanes)
            # the partials, summed in order by one block
            _launch_strided_sum(None, None, None, [blocks], [scratch], blocks, 1, threads,
                                lambda bid, total: _add_to(out, total, ftype))


def _last_block_sum(tx, counter, scratch, blocks: int, threads: int, out, ftype) -> None:
    """In each block of a partial-sums launch, after thread 0 stored the block's total:
    thread 0 makes it visible to the whole GPU (``membar.gl``) and takes a ticket
    (``atomicAdd(counter, 1)``); the block whose ticket is ``blocks - 1`` is the last, sees
    every partial, sums them as the second launch would (a strided slice a thread, then
    ``gpu.all_reduce add``: the same order, the same bits), adds the total to ``out`` and
    puts the counter back to 0 for the next launch.  The counter is an allocation of its
    own that nothing else uses (an unshared arena slot: zero from the start)."""
    from mlir import ir
    from mlir.dialects import scf

    from latch.passes.fixed_point_scatter import _kind

    i32 = ir.IntegerType.get_signless(32)

    def i32c(v):
        return ir.Operation.create("arith.constant", [i32],
                                   attributes={"value": ir.IntegerAttr.get(i32, v)}).result

    c0 = index_constant(0)
    first = scf.IfOp(compare("eq", tx, c0), [i32], has_else=True)
    with ir.InsertionPoint(first.then_block):
        gpu_fence()
        ticket = ir.Operation.create(
            "memref.atomic_rmw", [i32], [i32c(1), counter, c0],
            attributes={"kind": _kind("addi")}).result
        scf.YieldOp([ticket])
    with ir.InsertionPoint(first.else_block):
        scf.YieldOp([i32c(0)])
    ticket = ir.Operation.create(                  # thread 0's ticket, in every thread
        "gpu.all_reduce", [i32], [first.results[0]],
        attributes={"op": ir.Attribute.parse("#gpu<all_reduce_op maxui>"),
                    "uniform": ir.UnitAttr.get()}, regions=1).result
    finish = scf.IfOp(compare("eq", ticket, i32c(blocks - 1)))
    with ir.InsertionPoint(finish.then_block):
        gpu_fence()      # the partials summed exactly as the second, one-block launch would
        total = _strided_total(None, None, None, [blocks], [scratch], blocks, 1, threads, 1,
                               None, tx)
        store = scf.IfOp(compare("eq", tx, c0))
        with ir.InsertionPoint(store.then_block):
            _add_to(out, total, ftype)
            ir.Operation.create("memref.store", [], [i32c(0), counter, c0])
            scf.YieldOp([])
        scf.YieldOp([])


def _zero(ftype):
    from mlir import ir
    return ir.Operation.create("arith.constant", [ftype], attributes={"value": (
        ir.IntegerAttr.get(ftype, 0) if isinstance(ftype, ir.IntegerType)
        else ir.FloatAttr.get(ftype, 0.0))}).result


#: elements a block sums (8 a thread), and at most this many blocks.  Each thread's partial
#: sum is a chain of dependent loads and adds, so the chain's length is the kernel's time:
#: at 64 a thread (16384 a block), TinyMoE B32's global-norm partial sums of a 6.3M-element
#: bf16 expert gradient took 31 us a launch (0.4 TB/s), 24 launches an update; at 8 a
#: thread, 19 us (0.65 TB/s: still 8 dependent 2-byte loads a thread), which chunks
#: (:func:`~latch.passes.vector_lanes.chunk_width`: the 8 as one 16-byte load) shorten to one load.
#: A sum of at most ``_ONE_BLOCK_ITEMS`` (16 a thread) stays one launch of one block: a
#: second launch to combine the partials would cost about what it saves.
_ITEMS_PER_BLOCK = 2048
_MAX_BLOCKS = 4096
_ONE_BLOCK_ITEMS = 4096


def _add_name(t) -> str:
    from mlir import ir
    return "arith.addi" if isinstance(t, ir.IntegerType) else "arith.addf"


def _add_to(out, total, ftype) -> None:
    from mlir import ir
    old = ir.Operation.create("memref.load", [ftype], [out]).result
    new_v = ir.Operation.create(_add_name(ftype), [ftype], [old, total]).result
    ir.Operation.create("memref.store", [], [new_v, out])


def _launch_strided_sum(op, found, maps, ranges, ins, total_iters, blocks, threads,
                        finish, lanes: int = 1, then=None) -> None:
    """One gpu.launch of ``blocks`` x ``threads``: thread (b, t) sums elements
    ``b * threads + t`` + k * blocks * threads of the iteration space (the body of ``op``,
    or, when ``op`` is None, the elements of the 1-d buffer ``ins[0]``) — with ``lanes``
    > 1, the chunks of ``lanes`` consecutive elements numbered so, each input read as one
    vector a chunk and the chunk's elements added in order; the block's total goes to
    ``finish(block id, total)`` in thread 0; ``then(thread id)``, if given, emits the
    launch's last part."""
    from mlir import ir
    from mlir.dialects import gpu, scf

    c1 = index_constant(1)
    launch = gpu.LaunchOp((c1 if blocks == 1 else index_constant(blocks), c1, c1),
                          (index_constant(threads), c1, c1))
    lb = launch.regions[0].blocks[0]
    with ir.InsertionPoint(lb):
        bid, tx = lb.arguments[0], lb.arguments[3]
        total = _strided_total(op, found, maps, ranges, ins, total_iters, blocks, threads,
                               lanes, bid, tx)
        if_op = scf.IfOp(compare("eq", tx, index_constant(0)))
        with ir.InsertionPoint(if_op.then_block):
            finish(bid, total)
            scf.YieldOp([])
        if then is not None:
            then(tx)
        ir.Operation.create("gpu.terminator", [])


def _strided_total(op, found, maps, ranges, ins, total_iters, blocks, threads, lanes, bid,
                   tx):
    """Inside a launch of ``blocks`` x ``threads`` (block ``bid``, thread ``tx``): the
    thread's strided partial sum (:func:`_launch_strided_sum`) and ``gpu.all_reduce add``
    of it over the block (the block's total, in every thread)."""
    from mlir import ir
    from mlir.dialects import scf

    index = ir.IndexType.get()
    if op is not None:
        block, acc, add, summand = found
        ftype = ir.MemRefType(op.operands[len(op.operands) - 1].type).element_type
    else:
        ftype = ir.MemRefType(ins[0].type).element_type
    start = tx
    if blocks > 1:
        scaled = ir.Operation.create("arith.muli", [index], [bid, index_constant(threads)]).result
        start = ir.Operation.create("arith.addi", [index], [scaled, tx]).result
    loop = scf.ForOp(start, index_constant(total_iters // lanes),
                     index_constant(blocks * threads), [_zero(ftype)])
    with ir.InsertionPoint(loop.body):
        linear = loop.induction_variable
        partial = loop.inner_iter_args[0]
        if lanes > 1:
            first = ir.Operation.create("arith.muli", [index],
                                        [linear, index_constant(lanes)]).result
            scf.YieldOp([_chunk_at(block, acc, add, ins, maps, ranges, first, partial,
                                   lanes)])
        elif op is None:
            e = ir.Operation.create("memref.load", [ftype], [ins[0], linear]).result
            scf.YieldOp([ir.Operation.create(_add_name(ftype), [ftype], [partial, e]).result])
        else:
            scf.YieldOp([_body_at(block, acc, add, ins, maps, ranges, linear, partial)])
    return ir.Operation.create(
        "gpu.all_reduce", [ftype], [loop.results[0]],
        attributes={"op": ir.Attribute.parse("#gpu<all_reduce_op add>"),
                    "uniform": ir.UnitAttr.get()}, regions=1).result


def _chunk_at(block, acc, add, ins, maps, ranges, first, partial, lanes: int):
    """:func:`_body_at` for the ``lanes`` consecutive elements from the linear index ``first``
    (a multiple of ``lanes``; :func:`~latch.passes.vector_lanes.chunk_width` holds): the
    inputs read along the last loop as one vector each, the others once; the elements added
    in order."""
    dims = [None] * len(ranges)
    delinearize(first, list(range(len(ranges)))[::-1], ranges, dims)
    along = read_along(ins, maps, f"d{len(ranges) - 1}")
    shared = {}
    load_inputs(block, ins, maps, dims, shared, only=set(range(len(ins))) - along)
    vectors = load_chunk(block, ins, maps, dims, lanes, along)
    for j in range(lanes):
        mapping = dict(shared)
        mapping.update(lane_of(vectors, j))
        mapping[acc] = partial
        clone_body_ops([_op(o) for o in block.operations][:-1], mapping, dims)
        partial = mapping[add.results[0]]
    return partial


def _body_at(block, acc, add, ins, maps, ranges, linear, partial):
    """The reduction body at the row-major linear index ``linear``, accumulating into
    ``partial``; returns the new partial sum."""
    dims = [None] * len(ranges)
    delinearize(linear, list(range(len(ranges)))[::-1], ranges, dims)
    mapping = {}
    load_inputs(block, ins, maps, dims, mapping)
    mapping[acc] = partial
    clone_body_ops([_op(o) for o in block.operations][:-1], mapping, dims)
    return mapping[add.results[0]]
