"""``latch-wrap-host-compute``: after bufferization, move every piece of host code that touches
buffers onto the device (stage 'buffers' → 'kernels').

After ``latch-bufferize`` a function body mixes two kinds of work: linalg ops with at least
one parallel dimension (which ``latch-form-kernels`` maps to blocks and threads) and *host
compute*: ``memref.load``/``memref.store``, scalar arithmetic fed by loads (the clip factor,
the learning rate from the step counter), ``scf.for``/``scf.if``/``scf.while`` over scalars,
``memref.copy`` and linalg ops with no parallel dimension (full reductions, 0-d fills and
updates).  On a GPU target none of that may run on the host: the buffers live in device
memory, and the whole update must be one launch schedule that a CUDA graph can replay.

The pass rewrites each function body so that after ``latch-form-kernels`` the host function
holds only constants, ``memref.alloc``/``dealloc``, views and casts, ``gpu.launch_func`` and
the return:

* ``cf.assert`` in linalg bodies (torch-mlir's gather bounds checks) is dropped:
  convert-parallel-loops-to-gpu leaves an exactly tiled loop nest with an assert in it on
  the host.
* ``memref.copy`` of rank ≥ 1 becomes a copying ``linalg.generic`` (a parallel op, so it
  becomes an ordinary elementwise kernel); of rank 0 a ``memref.load`` + ``memref.store``;
  a copy of a buffer onto itself goes (one-shot bufferization leaves one per tensor of the
  gradient clip's per-tensor sums of squares: a one-thread launch each, 67 in TinyMoE).
* A full sum reduction (a linalg.generic whose loops are all reductions into a 0-d f32/f64
  buffer, with body ``acc + e``, or an i32/i64 one with ``addi``: a count) becomes one ``gpu.launch`` of ``reduce-threads`` threads
  (default 256; 0 turns this off): each thread sums a strided slice of the iteration space
  in a register — chunks of ``V`` consecutive elements, one 16-byte vector load of each input
  a chunk, where the last loop walks every input's contiguous last dimension in whole
  aligned chunks (:func:`~latch.passes.vector_lanes.chunk_width`) —, ``gpu.all_reduce add`` combines the partial sums
  (shuffles + shared memory after NVVM lowering) and thread 0 adds the total to the output; a larger sum
  runs on several blocks that store their partial sums, and the block that stores the last
  one (a ticket taken with an atomic add, between two ``membar.gl``) adds them up in a fixed
  order in the same launch (``last-block-sums``, default false: a second, one-block launch)
  (``passes/full_sums.py``).  Other reductions without a parallel dimension take the serial
  path below.
* An integer sum split by a class, ``sum_k L[b, k] * [x[t, k] == s[e]]`` (a MoE's routing
  rank), becomes one thread per ``(b, t)`` keeping the accumulators of all the classes
  (``passes/class_sums.py``; ``class-sums``, default false: timed slower on an H100).
* A sum over ``k`` of terms that are zero unless ``t(o) == k`` (a cross-entropy's gather
  gradient over the vocabulary) becomes one thread per output computing the term at
  ``k = t(o)`` (``passes/one_hot_reductions.py``), before the row reductions below.
* A row max followed by the row sum of ``exp(x - max)`` over the same input (a softmax's
  two reductions) becomes one pass with a running maximum and a rescaled sum
  (``passes/online_softmax_sums.py``).
* A row reduction (parallel and reduction loops: a softmax's row max, a norm weight's
  gradient summed over tokens) with at least 32 elements per output becomes a cooperative
  kernel: a warp or a whole block per output element, or column tiles when the reduction
  runs over an outer dimension (``passes/row_reductions.py``); f32 combiners and i1
  all/any/xor held in i8 buffers.
* Maximal runs of consecutive host-compute ops are wrapped, in order, into a one-iteration
  ``scf.parallel (%i) = (0) to (1) step (1)``; ``latch-form-kernels`` turns each into a
  kernel with one working thread (a "serial kernel").  Allocations, constants and
  side-effect-free scalar ops on constants that sit between the wrapped ops are hoisted in
  front of the loop (they stay on the host; allocations have no operands, so this keeps
  their meaning, and the memory plan's offsets stay valid: liveness is defined by uses);
  a ``memref.dealloc`` is never moved: it ends the run.

Rejected with a located error (the launch schedule cannot express them yet):
* host control flow (``scf.for``/``scf.if``/``scf.while``) whose body contains parallel work
  (a linalg op with a parallel dimension or an ``scf.parallel``): a host loop of kernels;
* a value computed inside a wrapped run that is used outside it (other than through memory);
* ``func.call`` (functions are not inlined into the update program on the GPU target).

A buffer-form ``latch.all_reduce`` (data-parallel programs) stays on the host, in place: it
becomes an entry of the launch schedule's ``collectives`` and ends a run of host compute.

Options: ``reduce-threads`` (int, default 256), ``last-block-sums`` (bool, default false),
``finish-rows``, ``row-readers``, ``in-place-readers``, ``fold-zeros``, ``row-writers``, ``chunks``,
``held-chunks``, ``staged-rows``, ``softmax-unroll``,
``column-waves``, ``column-bytes``, ``few-rows-unroll``, ``class-sums``, ``loads-first``,
``whole-rows`` (the fields below).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-bufferize,
latch-wrap-host-compute, latch-form-kernels)'``
"""
from __future__ import annotations

import dataclasses

from latch.errors import PassError
from latch.passes.base import ModulePass, defining_op, function_definitions, \
    nested_operations, operation as _op
from latch.passes.buffer_views import VIEW_OPS
from latch.passes.class_sums import rewrite_class_sums
from latch.passes.full_sums import parallel_full_reductions
from latch.passes.buffer_views import root as _root
from latch.passes.generic_body import order_loops
from latch.passes.one_hot_reductions import collapse_one_hot_reductions
from latch.passes.online_softmax_sums import (STAGED_BYTES, UNROLL as SOFTMAX_UNROLL,
                                              fuse_online_softmax_sums)
from latch.passes.row_reductions import COLUMN_BYTES, cooperative_row_reductions

# ops that stay on the host as they are
_HOST_OK = {"arith.constant", "memref.alloc", "memref.alloca", "memref.dealloc",
            "memref.get_global", "memref.subview", "memref.cast", "memref.collapse_shape",
            "memref.expand_shape", "memref.reinterpret_cast", "memref.view", "memref.reshape",
            "memref.transpose", "memref.extract_strided_metadata", "func.return",
            "gpu.launch_func", "gpu.wait", "index.constant", "ub.poison"}
_PURE_DIALECTS = ("arith.", "math.", "index.")
# collectives stay on the host as launch-schedule entries of their own, in program order:
# they end a run of host compute like a kernel does
_COLLECTIVES = {"latch.all_reduce"}
_CONTROL = {"scf.for", "scf.if", "scf.while", "scf.execute_region", "affine.for", "affine.if"}


def _has_parallel_dim(op) -> bool:
    """A linalg op with at least one parallel loop (form-kernels maps it to threads)."""
    from mlir import ir

    if "iterator_types" in op.attributes:
        its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        return any("parallel" in s for s in its)
    # a named op (not generalized): parallel iff some output has rank >= 1
    for v in op.operands:
        if isinstance(v.type, ir.MemRefType) and ir.MemRefType(v.type).rank >= 1:
            return True
    return False


def _is_parallel_op(op) -> bool:
    if op.name in ("scf.parallel", "gpu.launch"):
        return True
    if op.name.startswith("linalg.") and op.name not in ("linalg.yield", "linalg.index"):
        return _has_parallel_dim(op)
    return False


def _contains_parallel(op) -> object | None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = _op(inner)
                if _is_parallel_op(inner):
                    return inner
                found = _contains_parallel(inner)
                if found is not None:
                    return found
    return None


@dataclasses.dataclass(frozen=True)
class WrapHostCompute(ModulePass):
    name = "latch-wrap-host-compute"
    summary = ("move host code that touches buffers (loads/stores, scalar math, serial loops, "
               "full reductions, copies) into one-iteration scf.parallel loops, i.e. kernels")

    reduce_threads: int = 256
    #: a row reduction's elementwise reader finished by the lanes that store the totals
    #: (passes/row_reductions.py, "Finished in the same launch"); a one-pass row max and
    #: sum of exponentials followed by a reader of the same rows computes the reader's
    #: elements of each row in the row's block (passes/online_softmax_sums.py)
    finish_rows: bool = True
    #: with ``finish-rows``, the warps of a row reduction (short rows: a warp or fewer
    #: lanes per row) also run the next op when it reads the totals row by row
    #: (passes/row_reductions.py, "Rows read in the same launch": RMSNorm's normalization
    #: in its statistics' launch); false: that op is a launch of its own
    row_readers: bool = True
    #: with ``row-readers``, such a reader may accumulate in place into one of its inputs
    #: (RMSNorm's backward: ``dx += ...``); false: an in-place reader is a launch of its own
    in_place_readers: bool = True
    #: a row reduction whose totals were filled with zeros right before it (nothing reading
    #: them since) starts each total from the constant and the fill goes (one launch
    #: fewer); false: the fill stays and the reduction adds to what it loads
    fold_zeros: bool = True
    #: with ``finish-rows``, the warps of a row reduction (short rows) also run the
    #: elementwise op before it that writes its input (passes/row_reductions.py, "Rows
    #: written in the same launch": the residual add before RMSNorm in the norm's
    #: launch); false: that op is a launch of its own
    row_writers: bool = True
    #: the one-pass row max / sum of exponentials and the full sums read chunks of
    #: consecutive elements (one 16-byte load) where the input allows; false: one element
    #: a load, strided
    chunks: bool = True
    #: with ``finish-rows``, a row of at most this many chunks of 8 a thread is kept in
    #: registers between the online softmax's totals and its reader (read from memory
    #: once); longer rows (all rows with 0, the default) are read again for the reader.
    #: Held, TinyMoE's loss kernel (16 chunks a thread) took 2.65 ms at B32 on an H100 (1.6
    #: TB/s: the registers cost occupancy), read again 2.16 ms
    #: (profile-tinymoe196m-b32-bf16-rereadrows-117e680-h100.json)
    held_chunks: int = 0
    #: with ``finish-rows``, a row (not held in registers) of at most this many bytes is
    #: kept in dynamic shared memory between the online softmax's totals and its reader,
    #: each thread reading back the chunks it stored (read from memory once); 0: read
    #: again.  TinyMoE (rows of 32768 bf16, 64 KiB) on an H100: B32 59.37 -> 58.97 ms, B2
    #: 6.715 -> 6.689 (tinymoe_bench-20261206T022012Z.json)
    staged_rows: int = STAGED_BYTES
    #: chunks a thread of the online softmax's totals loads together (its loop unrolled;
    #: 1: one load an iteration, the default before the tenth stop)
    softmax_unroll: int = SOFTMAX_UNROLL
    #: column-tile reductions cut into the slices that fill whole waves of blocks
    #: (row_reductions.column_splits; false: the fewest slices making 264 blocks, the rule
    #: before the tenth stop)
    column_waves: bool = True
    #: bytes of a row of the input a column tile's block reads across (its outputs: 8
    #: f32 columns by default, one 32-byte sector; at most a warp of columns)
    column_bytes: int = COLUMN_BYTES
    #: a full sum over several blocks finishes in its launch: the block that stores the
    #: last partial sum adds them all (false, the default: a second, one-block launch
    #: does).  Timed on an H100 with staged rows: TinyMoE B2 6.689 -> 6.759 ms, B32
    #: 58.97 -> 59.19 (slower: the ticket's fences and atomics on every block cost more
    #: than the one-block launch they save; tinymoe_bench-20261206T022012Z.json)
    last_block_sums: bool = False
    #: a row reduction of a block per output launched on fewer blocks than the GPU has
    #: SMs unrolls each thread's loop this many times (more loads in flight); 0 (the
    #: default until it is timed on the GPU): 4, as every other
    few_rows_unroll: int = 0
    #: integer sums split by a class (a MoE's routing rank: ``sum_k L[b,k] [x[t,k] ==
    #: s[e]]``) as one thread per row of classes, keeping every class's accumulator
    #: (passes/class_sums.py); false (the default until it is timed on the GPU): a thread
    #: per output
    class_sums: bool = False
    #: the unrolled copies of a lane's chunk loop in a row kernel issue their loads before
    #: any of them stores (row_reductions._loads_before_stores); false: each copy's loads,
    #: work and stores in turn
    loads_first: bool = True
    #: a lane's chunk loop unrolled whole when it has at most twice the usual copies
    #: (row_reductions._unroll_of; a 768-wide f32 row: 6 chunks a lane); false: 4 copies
    #: and a remainder loop
    whole_rows: bool = True
    #: a row kernel's reader (RMSNorm's backward after its row sums) whose lanes walk
    #: the row whole in both passes takes the first pass's loaded values instead of
    #: loading them again (passes/forward_loads.py); false: read again (from L1 / L2)
    held_rows: bool = False

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            body = func_op.regions[0].blocks[0]
            _splat_globals_to_fills(module, body)
            _drop_kernel_asserts(body)
            _if_convert(body)
            _fold_scalar_constants(body)
            _fix_fpowi(func_op)
            _widen_i1_buffers(func_op)
            _rewrite_copies(body)
            _reductions_innermost(body)
            if self.reduce_threads > 0:
                if self.class_sums:
                    rewrite_class_sums(body)
                collapse_one_hot_reductions(body)
                fuse_online_softmax_sums(body, self.chunks, self.finish_rows,
                                         self.held_chunks, self.staged_rows,
                                         self.softmax_unroll)
                cooperative_row_reductions(body, self.finish_rows, self.chunks,
                                           self.few_rows_unroll, self.column_waves,
                                           self.column_bytes, self.row_readers,
                                           self.row_writers, self.in_place_readers,
                                           self.fold_zeros, self.loads_first,
                                           self.whole_rows, self.held_rows)
                parallel_full_reductions(body, self.reduce_threads, self.chunks,
                                          self.last_block_sums)
            _wrap(body)


def _drop_kernel_asserts(body) -> None:
    """Erase ``cf.assert`` inside linalg bodies (torch-mlir's index bounds checks of
    gathers: ``index must be smaller than dim size`` / ``larger or equal to 0``).
    convert-parallel-loops-to-gpu does not convert a mapped scf.parallel nest whose loop
    bounds are exact multiples of the tile (no guard ``scf.if``) when its innermost body
    holds a ``cf.assert``: the nest stays on the host as a loop of loads and stores, and the
    launch schedule cannot express it (TinyMoE-196M's position-embedding gather, 1024 x 768
    with 32 x 8 tiles).  On the device such a check is a trap (``__assertfail``), not an
    error the runtime can report; the CPU target keeps the checks.  On the cuda target an
    out-of-range token id is not diagnosed (as with a raw gather)."""
    for op in list(body.operations):
        op = _op(op)
        if not op.name.startswith("linalg.") or not op.regions:
            continue
        for inner in list(nested_operations(op)):
            if inner.name == "cf.assert":
                inner.erase()


def _rewrite_copies(body) -> None:
    from mlir import ir
    from mlir.dialects import memref

    for op in list(body.operations):
        op = _op(op)
        if op.name != "memref.copy":
            continue
        src, dst = op.operands[0], op.operands[1]
        if src == dst:       # a buffer onto itself (one-shot bufferization's insert_slice
            op.erase()       # written in place: the clip's per-tensor sums): nothing to do
            continue
        st, dt = ir.MemRefType(src.type), ir.MemRefType(dst.type)
        with ir.InsertionPoint(op), op.location:
            if st.rank == 0:
                v = memref.load(src, [])
                memref.store(v, dst, [])
            else:
                if not (st.has_static_shape and dt.has_static_shape):
                    raise PassError("latch-wrap-host-compute: memref.copy with dynamic shape "
                                    "cannot be scheduled on the GPU", op.location)
                _copy_generic(src, dst, st.rank)
        op.erase()


def _copy_generic(src, dst, rank: int) -> None:
    """``dst[i...] = src[i...]`` as a linalg.generic (not the named linalg.copy), so that
    _reductions_innermost orders its loops for coalesced access like every other kernel."""
    from mlir import ir

    ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
    par = ir.Attribute.parse("#linalg.iterator_type<parallel>")
    gen = ir.Operation.create(
        "linalg.generic", [], [src, dst],
        attributes={"indexing_maps": ir.ArrayAttr.get([ident, ident]),
                    "iterator_types": ir.ArrayAttr.get([par] * rank),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])},
        regions=1)
    block = gen.regions[0].blocks.append(ir.MemRefType(src.type).element_type,
                                         ir.MemRefType(dst.type).element_type)
    with ir.InsertionPoint(block):
        ir.Operation.create("linalg.yield", [], [block.arguments[0]])


def _if_convert(body) -> None:
    """``scf.if`` around parallel work (``latch.every``: the optimizer of a group runs every
    N-th microbatch) → straight-line code: the condition is stored to a 0-d i8 flag buffer,
    the ops of both branches are hoisted in front (pure ops and allocations as they are;
    writes to buffers allocated inside the branch too, since nothing else reads them;
    other writes are predicated on the flag), and each memref result becomes a fresh buffer
    filled by ``flag ? then-value : else-value`` (a parallel select copy).  The launch
    schedule stays one straight sequence of kernels that a CUDA graph replays; the skipped
    branch's kernels run but change nothing.  (A CUDA conditional graph node would skip
    them; not done yet.)  Then each memref ``arith.select`` becomes a fresh buffer and a
    select copy placed right before the first use of its result (see
    :func:`_select_to_copy`), reusing the if-conversion's flag of the same condition."""
    from mlir import ir

    flags = {}      # condition -> the 0-d i8 buffer the if-conversion stored it to
    for op in list(body.operations):
        op = _op(op)
        if op.name == "scf.if" and _contains_parallel(op) is not None:
            _if_convert_one(op, flags)
    # after the branches are straight-line code: a select may pick a buffer that a hoisted
    # branch fills (every(N)'s grad_acc reset: select(due, zeros, acc + g), the zeros
    # written inside the optimizer's branch), so its copy goes where the result is first
    # used, not where the select stood
    for op in list(body.operations):
        op = _op(op)
        if op.name == "arith.select" and isinstance(op.results[0].type, ir.MemRefType):
            # canonicalize folds an scf.if that only picks a buffer into a select
            _select_to_copy(body, op, flags)


_VIEWS = VIEW_OPS


def _top_level(op, body):
    """The op of ``body`` that holds ``op`` (itself when it is one)."""
    while op is not None:
        parent = op.parent
        if parent is None:
            return None
        parent = _op(parent)
        if parent.name == "func.func":
            return op
        op = parent
    return None


def _real_users(value, body):
    """The top-level ops of ``body`` that use ``value`` or a view of it, other than the
    views themselves."""
    users, work = [], [value]
    while work:
        v = work.pop()
        for use in v.uses:
            user = _op(use.owner)
            if user.name in _VIEWS and _op(user.parent).name == "func.func":
                work.extend(user.results)
                continue
            top = _top_level(user, body)
            if top is not None:
                users.append(top)
    return users


def _written_roots(op):
    """The roots of the buffers ``op`` (and the ops nested in it) may write; None: unknown."""
    out = set()
    for o in [op] + list(nested_operations(op)):
        if o.name in ("linalg.yield", "scf.yield", "scf.reduce", "scf.condition",
                      "affine.yield", "cf.assert") or \
                o.name.startswith(("linalg.index", "gpu.terminator")):
            continue
        if o.regions and o.name not in ("linalg.generic",):
            continue            # its nested ops are walked
        w = _writes(o)
        if w is None and o.name.startswith("linalg.") and \
                "operandSegmentSizes" in o.attributes:
            from mlir import ir
            seg = list(ir.DenseI32ArrayAttr(o.attributes["operandSegmentSizes"]))
            w = list(o.operands)[seg[0]:]       # a named op: its outs
        if w is None:
            return None
        out.update(_root(v) for v in w)
    return out


def _select_to_copy(body, op, flags) -> None:
    """A memref ``arith.select`` → a fresh buffer (allocated where the select stood) filled
    by a select copy right before the first top-level op that uses the result (or a view of
    it): in buffer semantics the select only picks a pointer, and each use reads the picked
    buffer when it runs, so the copy must come after every write of either operand that
    precedes that use (writes hoisted out of an if-converted branch included), not at the
    select.  Writes of either operand between the first and the last use, or writes through
    the result that a later op could read back through an operand, cannot be expressed by
    one copy and are rejected."""
    from mlir import ir

    cond, a, b = op.operands[0], op.operands[1], op.operands[2]
    result = op.results[0]
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create(
            "memref.alloc", [result.type], operands=[],
            attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])}).result
    result.replace_all_uses_with(new)
    loc = op.location
    op.erase()
    users = _real_users(new, body)
    if not users:
        return
    order = {o: i for i, o in enumerate(_op(x) for x in body.operations)}
    users.sort(key=lambda u: order[u])
    first, last = users[0], users[-1]
    ops = [_op(x) for x in body.operations]
    operands = {_root(a), _root(b)}
    for o in ops[order[first]:order[last]]:
        w = _written_roots(o)
        if w is None or w & operands:
            raise PassError(
                f"latch-wrap-host-compute: '{o.name}' may write an operand of a buffer "
                "select between the uses of its result; the select cannot become one copy",
                o.location)
    for i in range(order[first], len(ops)):
        w = _written_roots(ops[i])
        if w is not None and new not in w:
            continue
        for later in ops[i + 1:]:
            used = {_root(v) for x in [later] + list(nested_operations(later)) for v in x.operands
                    if isinstance(v.type, ir.MemRefType)}
            if used & operands:
                raise PassError(
                    f"latch-wrap-host-compute: '{ops[i].name}' writes through a buffer "
                    f"select that '{later.name}' reads back through the select's operand; "
                    "the select cannot become a copy", ops[i].location)
        break
    flag = flags.get(cond)
    if flag is None or _op(flag.owner) not in order or order[_op(flag.owner)] > order[first]:
        with ir.InsertionPoint(first), loc:
            flag = flags[cond] = _store_flag(cond)
    with ir.InsertionPoint(first), loc:
        _select_copy(flag, a, b, new)


def _store_flag(cond, invert: bool = False):
    """A 0-d i8 buffer holding ``cond`` (or its negation), stored at the insertion point."""
    from mlir import ir

    i1 = ir.IntegerType.get_signless(1)
    i8 = ir.IntegerType.get_signless(8)
    buf = ir.Operation.create(
        "memref.alloc", [ir.MemRefType.get([], i8)], operands=[],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])}).result
    c = cond
    if invert:
        one = ir.Operation.create("arith.constant", [i1],
                                  attributes={"value": ir.IntegerAttr.get(i1, 1)})
        c = ir.Operation.create("arith.xori", [i1], [cond, one.result]).result
    wide = ir.Operation.create("arith.extui", [i8], [c]).result
    ir.Operation.create("memref.store", [], [wide, buf])
    return buf


def _if_convert_one(if_op, cache=None) -> None:
    from mlir import ir

    cond = if_op.operands[0]
    loc = if_op.location
    with ir.InsertionPoint(if_op), loc:
        flags = {}
        else_ops = len(if_op.regions[1].blocks) and \
            len(list(if_op.regions[1].blocks[0].operations)) > 1
        for polarity in ((True, False) if else_ops else (True,)):
            flags[polarity] = _store_flag(cond, invert=not polarity)
    if cache is not None:
        cache.setdefault(cond, flags[True])
    yields = {}
    for polarity, region in zip((True, False), if_op.regions):
        if not region.blocks:
            yields[polarity] = []
            continue
        block = region.blocks[0]
        for inner in list(block.operations):
            inner = _op(inner)
            if inner.name == "scf.if" and _contains_parallel(inner) is not None:
                _if_convert_one(inner, cache)
        local = set()
        ops = [_op(o) for o in block.operations]
        for inner in ops[:-1]:
            _hoist_predicated(inner, if_op, flags[polarity], local)
        yields[polarity] = list(ops[-1].operands)
    results = list(if_op.results)
    for k, r in enumerate(results):
        a = yields[True][k] if yields[True] else None
        b = yields[False][k] if yields[False] else None
        with ir.InsertionPoint(if_op), loc:
            if a is not None and b is not None and a == b:
                new = a
            elif isinstance(r.type, ir.MemRefType):
                new = ir.Operation.create(
                    "memref.alloc", [r.type], operands=[],
                    attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])}
                ).result
                _select_copy(flags[True], a, b, new)
            else:
                new = ir.Operation.create("arith.select", [r.type], [cond, a, b]).result
        r.replace_all_uses_with(new)
    if_op.erase()


def _writes(op):
    """The buffers ``op`` writes (None: unknown)."""
    from mlir import ir

    n = op.name
    if n == "memref.store":
        return [op.operands[1]]
    if n == "memref.copy":
        return [op.operands[1]]
    if n == "linalg.generic":
        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        return list(op.operands)[seg[0]:]
    if n in ("memref.alloc", "memref.alloca", "memref.dealloc") or n in _HOST_OK or \
            n == "memref.load":
        return []
    if n.startswith(_PURE_DIALECTS) and not op.regions:
        return []
    return None


def _hoist_predicated(op, anchor, flag, local) -> None:
    """Move ``op`` in front of ``anchor``; predicate it on ``flag`` when it writes a buffer
    that is not allocated inside the branch (``local``)."""
    from mlir import ir

    if op.name in ("memref.alloc", "memref.alloca"):
        local.add(op.results[0])
    writes = _writes(op)
    if writes is None:
        raise PassError(f"latch-wrap-host-compute: '{op.name}' inside a branch around "
                        "kernels cannot be if-converted yet", op.location)
    op.move_before(anchor)
    for r in op.results:
        if isinstance(r.type, ir.MemRefType) and op.name not in ("memref.alloc",
                                                                  "memref.alloca"):
            if _root(r) in local:
                local.add(r)
    if all(_root(w) in local for w in writes):
        return
    if op.name == "memref.store":
        with ir.InsertionPoint(op), op.location:
            f = ir.Operation.create("memref.load", [ir.IntegerType.get_signless(8)],
                                    [flag]).result
            c = ir.Operation.create("arith.trunci", [ir.IntegerType.get_signless(1)],
                                    [f]).result
            sif = ir.Operation.create("scf.if", [], [c], regions=2)
            blk = sif.regions[0].blocks.append()
        with ir.InsertionPoint(blk), op.location:
            y = ir.Operation.create("scf.yield", [], [])
        op.move_before(y)
    elif op.name == "memref.copy":
        with ir.InsertionPoint(op), op.location:
            _select_copy(flag, op.operands[0], op.operands[1], op.operands[1])
        op.erase()
    elif op.name == "linalg.generic":
        _predicate_generic(op, flag)
    else:
        raise PassError(f"latch-wrap-host-compute: '{op.name}' inside a branch around "
                        "kernels cannot be predicated", op.location)


def _select_copy(flag, a, b, out) -> None:
    """``out = flag ? a : b`` elementwise (a parallel linalg.generic)."""
    from mlir import ir

    t = ir.MemRefType(out.type)
    rank = t.rank
    ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
    scalar = ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, []))
    i8 = ir.IntegerType.get_signless(8)
    gen = ir.Operation.create(
        "linalg.generic", [], operands=[flag, a, b, out],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([3, 1]),
                    "indexing_maps": ir.ArrayAttr.get([scalar, ident, ident, ident]),
                    "iterator_types": ir.ArrayAttr.get(
                        [ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank)},
        regions=1)
    et = t.element_type
    blk = gen.regions[0].blocks.append(i8, et, et, et)
    with ir.InsertionPoint(blk):
        c = ir.Operation.create("arith.trunci", [ir.IntegerType.get_signless(1)],
                                [blk.arguments[0]]).result
        v = ir.Operation.create("arith.select", [et], [c, blk.arguments[1],
                                                       blk.arguments[2]]).result
        ir.Operation.create("linalg.yield", [], [v])


def _predicate_generic(op, flag) -> None:
    """Rebuild a linalg.generic with one more input, the 0-d flag, and yield
    ``flag ? new : old`` for every output."""
    from mlir import ir

    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    n_in = seg[0]
    operands = list(op.operands)
    maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
    n_loops = len(ir.ArrayAttr(op.attributes["iterator_types"]))
    scalar = ir.AffineMapAttr.get(ir.AffineMap.get(n_loops, 0, []))
    attrs = {}
    for a in op.attributes:
        key = a if isinstance(a, str) else a.name
        attrs[key] = op.attributes[key]
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([n_in + 1, seg[1]])
    attrs["indexing_maps"] = ir.ArrayAttr.get(maps[:n_in] + [scalar] + maps[n_in:])
    old = op.regions[0].blocks[0]
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create("linalg.generic", [], operands=operands[:n_in] + [flag] +
                                  operands[n_in:], attributes=attrs, regions=1)
        types = [a.type for a in old.arguments]
        i8 = ir.IntegerType.get_signless(8)
        blk = new.regions[0].blocks.append(*(types[:n_in] + [i8] + types[n_in:]))
    args = list(blk.arguments)
    new_of = args[:n_in] + args[n_in + 1:]
    for a, b in zip(old.arguments, new_of):
        a.replace_all_uses_with(b)
    body = [_op(o) for o in old.operations]
    yld = body[-1]
    with ir.InsertionPoint(blk), op.location:
        c = ir.Operation.create("arith.trunci", [ir.IntegerType.get_signless(1)],
                                [args[n_in]]).result
    for o in body:
        o.detach_from_parent()
        blk.append(o)
    outs = args[n_in + 1:]
    with ir.InsertionPoint(yld), op.location:
        vals = [ir.Operation.create("arith.select", [v.type], [c, v, o]).result
                for v, o in zip(list(yld.operands), outs)]
    for k, v in enumerate(vals):
        yld.operands[k] = v
    op.erase()


_FOLD_BIN = {"arith.addf": lambda a, b: a + b, "arith.subf": lambda a, b: a - b,
             "arith.mulf": lambda a, b: a * b, "arith.divf": lambda a, b: a / b,
             "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
             "arith.muli": lambda a, b: a * b}


def _fold_scalar_constants(body) -> None:
    """Fold top-level scalar ops whose operands are all constants (if-conversion hoists
    such ops out of branches after the canonicalizer ran) into ``arith.constant``."""
    import numpy as np
    from mlir import ir

    npf = {"f16": np.float16, "f32": np.float32, "f64": np.float64}

    def const(v):
        owner = v.owner
        if hasattr(owner, "arguments") or _op(owner).name != "arith.constant":
            return None
        a = _op(owner).attributes["value"]
        if isinstance(a, ir.FloatAttr):
            return float(ir.FloatAttr(a).value)
        if isinstance(a, ir.IntegerAttr):
            return int(ir.IntegerAttr(a).value)
        return None

    for op in list(body.operations):
        op = _op(op)
        n = op.name
        if not n.startswith("arith.") or n == "arith.constant" or len(op.results) != 1 or \
                op.regions:
            continue
        vals = [const(v) for v in op.operands]
        if not vals or any(v is None for v in vals):
            continue
        t = op.results[0].type
        ts = str(t)
        try:
            if n in ("arith.truncf", "arith.extf", "arith.sitofp") and ts in npf:
                value = float(npf[ts](vals[0]))
            elif n in _FOLD_BIN and ts in npf:
                value = float(npf[ts](_FOLD_BIN[n](npf[ts](vals[0]), npf[ts](vals[1]))))
            elif n in _FOLD_BIN and ts in ("i64", "index"):
                value = int(_FOLD_BIN[n](vals[0], vals[1]))
            elif n == "arith.index_cast":
                value = int(vals[0])
            else:
                continue
        except (ZeroDivisionError, OverflowError, ValueError):
            continue
        attr = ir.FloatAttr.get(t, value) if ts in npf else ir.IntegerAttr.get(t, value)
        with ir.InsertionPoint(op), op.location:
            c = ir.Operation.create("arith.constant", [t], attributes={"value": attr})
        op.results[0].replace_all_uses_with(c.results[0])
        op.erase()


def _fix_fpowi(func_op) -> None:
    """``math.fpowi %x, %n : f32, i64`` (torch's ``x.pow(2)``): the NVVM lowering calls
    libdevice's ``__nv_powif(float, int)`` with a 64-bit exponent, so the kernel reads a
    garbage exponent (NaN losses on the GPU).  A constant exponent 2 becomes ``x * x`` (exact,
    as on the CPU); any other i64 exponent is truncated to i32 first."""
    from mlir import ir

    i32 = ir.IntegerType.get_signless(32)
    for op in list(nested_operations(func_op)):
        if op.name != "math.fpowi":
            continue
        x, n = op.operands[0], op.operands[1]
        owner = n.owner
        value = None
        if not hasattr(owner, "arguments") and _op(owner).name == "arith.constant":
            value = int(ir.IntegerAttr(_op(owner).attributes["value"]).value)
        with ir.InsertionPoint(op), op.location:
            if value == 2:
                new = ir.Operation.create("arith.mulf", [x.type], [x, x]).result
            elif value == 1:
                new = x
            elif str(n.type) != "i32":
                n32 = ir.Operation.create("arith.trunci", [i32], [n]).result
                new = ir.Operation.create("math.fpowi", [x.type], [x, n32]).result
            else:
                continue
        op.results[0].replace_all_uses_with(new)
        op.erase()


def _splat_globals_to_fills(module, body) -> None:
    """``memref.get_global`` of a constant splat global (torch-mlir's zero constants) →
    an allocation filled by a parallel linalg.generic: a kernel, not host data."""
    from mlir import ir

    globals_ = {}
    for op in module.regions[0].blocks[0].operations:
        op = _op(op)
        if op.name == "memref.global":
            globals_[ir.StringAttr(op.attributes["sym_name"]).value] = op
    for op in list(body.operations):
        op = _op(op)
        if op.name != "memref.get_global":
            continue
        name = ir.FlatSymbolRefAttr(op.attributes["name"]).value
        g = globals_.get(name)
        init = g.attributes["initial_value"] if g is not None and \
            "initial_value" in g.attributes else None
        if init is None or "constant" not in g.attributes or \
                not isinstance(init, ir.DenseElementsAttr) or not init.is_splat:
            raise PassError(f"latch-wrap-host-compute: global @{name} is not a constant "
                            "splat; non-splat constant data is not supported on the GPU "
                            "target yet", op.location)
        t = ir.MemRefType(op.results[0].type)
        value = init.get_splat_value()
        rank = t.rank
        ident = ir.AffineMap.get_identity(rank)
        with ir.InsertionPoint(op), op.location:
            alloc = ir.Operation.create(
                "memref.alloc", [t], operands=[],
                attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0]),
                            "alignment": ir.IntegerAttr.get(
                                ir.IntegerType.get_signless(64), 64)}).result
            gen = ir.Operation.create(
                "linalg.generic", [], operands=[alloc],
                attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 1]),
                            "indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(ident)]),
                            "iterator_types": ir.ArrayAttr.get(
                                [ir.Attribute.parse("#linalg.iterator_type<parallel>")]
                                * rank)},
                regions=1)
            blk = gen.regions[0].blocks.append(t.element_type)
        with ir.InsertionPoint(blk), op.location:
            c = ir.Operation.create("arith.constant", [t.element_type],
                                    attributes={"value": value}).result
            ir.Operation.create("linalg.yield", [], [c])
        op.results[0].replace_all_uses_with(alloc)
        op.erase()


def _widen_i1_buffers(func_op) -> None:
    """Buffers of i1 → buffers of i8 (NVPTX cannot store i1 through memory): every memref
    of i1 produced in the function becomes a memref of i8, loads are truncated back to i1,
    stores widen their value, linalg bodies truncate/extend at their block arguments and
    yields."""
    from mlir import ir

    i1 = ir.IntegerType.get_signless(1)
    i8 = ir.IntegerType.get_signless(8)

    def is_i1_memref(t):
        return isinstance(t, ir.MemRefType) and ir.MemRefType(t).element_type == i1

    def widened(t):
        mt = ir.MemRefType(t)
        return ir.MemRefType.get(mt.shape, i8, mt.layout, mt.memory_space)

    ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
    if any(is_i1_memref(t) for t in list(ftype.inputs) + list(ftype.results)):
        raise PassError("latch-wrap-host-compute: i1 buffers in a function signature are "
                        "not supported on the GPU target", func_op.location)
    ops = list(nested_operations(func_op))
    changed = False
    for op in ops:
        for r in op.results:
            if is_i1_memref(r.type):
                r.set_type(widened(r.type))
                changed = True
    if not changed:
        return
    for op in ops:
        if op.name == "memref.load" and op.results[0].type == i1:
            r = op.results[0]
            r.set_type(i8)
            with ir.InsertionPoint.after(op), op.location:
                t = ir.Operation.create("arith.trunci", [i1], [r])
            r.replace_all_uses_except(t.results[0], t)
        elif op.name == "memref.store" and op.operands[0].type == i1:
            with ir.InsertionPoint(op), op.location:
                e = ir.Operation.create("arith.extui", [i8], [op.operands[0]])
            op.operands[0] = e.results[0]
        elif op.name == "linalg.generic":
            blk = op.regions[0].blocks[0]
            n_ops = len(op.operands)
            seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
            n_in = seg[0]
            yld = _op(list(blk.operations)[-1])
            for i in range(n_ops):
                v = op.operands[i]
                arg = blk.arguments[i]
                if isinstance(v.type, ir.MemRefType) and \
                        ir.MemRefType(v.type).element_type == i8 and arg.type == i1:
                    arg.set_type(i8)
                    first = _op(list(blk.operations)[0])
                    with ir.InsertionPoint(first), op.location:
                        t = ir.Operation.create("arith.trunci", [i1], [arg])
                    arg.replace_all_uses_except(t.results[0], t)
                    if i >= n_in:
                        k = i - n_in
                        with ir.InsertionPoint(yld), op.location:
                            e = ir.Operation.create("arith.extui", [i8], [yld.operands[k]])
                        yld.operands[k] = e.results[0]


def _reductions_innermost(body) -> None:
    """Permute the loops of every linalg.generic so that its parallel loops come first, in
    reverse order, then its reductions (:func:`~latch.passes.generic_body.order_loops`).
    convert-linalg-to-parallel-loops emits loops in iterator order, so a reduction in front
    of a parallel loop (a bias gradient: sum over the batch) would become a host loop of
    kernels; with the reductions innermost it is one kernel whose threads each run the
    reduction loop.  Sums keep their order.  The parallel loops are reversed because
    gpu-map-parallel-loops maps the first loop to threadIdx.x: the last loop walks the
    unit-stride dimension of row-major buffers, so consecutive threads of a warp then touch
    consecutive addresses (coalesced) instead of addresses a whole row apart."""
    for op in list(body.operations):
        op = _op(op)
        if op.name == "linalg.generic":
            order_loops(op)


def _classify(op, compute_values) -> str:
    """'host', 'parallel', 'collective' or 'compute'."""
    name = op.name
    if name in _HOST_OK:
        return "host"
    if name in _COLLECTIVES:
        return "collective"
    if _is_parallel_op(op):
        return "parallel"
    if name == "func.call" or name == "func.call_indirect":
        raise PassError(f"latch-wrap-host-compute: '{name}' in an update function cannot be "
                        "scheduled on the GPU (inline it first)", op.location)
    if name in _CONTROL or op.regions:
        inner = _contains_parallel(op)
        if inner is not None:
            raise PassError(
                f"latch-wrap-host-compute: host control flow '{name}' contains parallel work "
                f"('{inner.name}'); a host loop or branch around kernels cannot be expressed "
                "in the launch schedule yet", op.location)
        return "compute"
    if name.startswith(_PURE_DIALECTS) and not _touches_memory(op) and \
            name not in ("arith.constant", "index.constant") and not op.operands:
        return "host"
    # any other scalar op computes on the device (the launch schedule holds constants
    # only; _fold_scalar_constants folded what it could)
    return "compute"


def _touches_memory(op) -> bool:
    from mlir import ir

    return any(isinstance(v.type, ir.MemRefType) for v in list(op.operands) + list(op.results))


def _wrap(body) -> None:
    ops = [_op(o) for o in body.operations]
    groups: list[tuple[list, list]] = []   # (compute ops, host ops to hoist before them)
    compute_ops: set = set()
    current: list | None = None
    hoist: list = []
    pending: list = []   # host ops after the last compute op of the current run
    for op in ops:
        kind = _classify(op, compute_ops)
        if kind == "compute":
            if current is None:
                current, hoist = [], []
            if any(p.name == "memref.dealloc" for p in pending):
                # never free a buffer earlier: a dealloc ends the run instead
                groups.append((current, hoist))
                current, hoist = [], []
            else:
                hoist.extend(pending)   # host ops between two compute ops move in front
            pending = []
            current.append(op)
            compute_ops.add(op)
        elif kind == "host" and current is not None and op.name != "func.return":
            if any(defining_op(v) in compute_ops for v in op.operands):
                raise PassError(f"latch-wrap-host-compute: '{op.name}' uses a value computed "
                                "on the device", op.location)
            pending.append(op)
        else:   # parallel op, collective or return: the run ends
            if current:
                groups.append((current, hoist))
            current, hoist, pending = None, [], []
    if current:
        groups.append((current, hoist))
    # last run first: a value a run leaves for a later run is reloaded inside the later
    # run's (already wrapped) loop
    for group, hoisted in reversed(groups):
        _wrap_group(group, hoisted)


def _wrap_group(group, hoisted) -> None:
    from mlir import ir

    first = group[0]
    for h in hoisted:
        h.move_before(first)
    members = set(group)
    escaping = []   # (value, its external uses) computed in this run and used after it
    for op in group:
        for r in op.results:
            outside = []
            for use in r.uses:
                user = _op(use.owner)
                top = user
                while top is not None and top not in members and _op(top.parent) is not None \
                        and _op(top.parent).name != "func.func":
                    top = _op(top.parent)
                if top not in members:
                    outside.append((user, use.operand_number))
            if outside:
                escaping.append((r, outside))
    index = ir.IndexType.get()
    with ir.InsertionPoint(first), first.location:
        c0 = ir.Operation.create("arith.constant", [index],
                                 attributes={"value": ir.IntegerAttr.get(index, 0)}).result
        c1 = ir.Operation.create("arith.constant", [index],
                                 attributes={"value": ir.IntegerAttr.get(index, 1)}).result
        spills = []
        for value, _ in escaping:
            if not _spillable(value.type):
                user = _[0][0]
                raise PassError(
                    f"latch-wrap-host-compute: a value of type {value.type} computed on the "
                    f"device is used on the host by '{user.name}'", user.location)
            spills.append(ir.Operation.create(
                "memref.alloc", [ir.MemRefType.get([], _stored_type(value.type))],
                operands=[], attributes={"operandSegmentSizes":
                                         ir.DenseI32ArrayAttr.get([0, 0])}).result)
        par = ir.Operation.create(
            "scf.parallel", [], operands=[c0, c1, c1],
            attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0]),
                        "latch.serial": ir.UnitAttr.get()},
            regions=1)
        block = par.regions[0].blocks.append(index)
    with ir.InsertionPoint(block), first.location:
        term = ir.Operation.create("scf.reduce", [], operands=[], regions=0)
    for op in group:
        op.move_before(term)
    # scalars that later device code reads travel through 0-d buffers: stored at the end
    # of this kernel, loaded again right before each later use
    i1 = ir.IntegerType.get_signless(1)
    i8 = ir.IntegerType.get_signless(8)
    with ir.InsertionPoint(term), first.location:
        for (value, _), buf in zip(escaping, spills):
            v = value
            if value.type == i1:
                v = ir.Operation.create("arith.extui", [i8], [value]).result
            ir.Operation.create("memref.store", [], [v, buf])
    for (value, uses), buf in zip(escaping, spills):
        for user, operand_number in uses:
            if user.name == "linalg.generic" and _op(user.parent).name == "func.func":
                # a scalar operand of a parallel op: the 0-d buffer becomes the operand
                _scalar_operand_from_buffer(user, operand_number, buf)
                continue
            with ir.InsertionPoint(user), user.location:
                loaded = ir.Operation.create("memref.load", [_stored_type(value.type)],
                                             [buf]).result
                if value.type == i1:
                    loaded = ir.Operation.create("arith.trunci", [i1], [loaded]).result
            user.operands[operand_number] = loaded


def _stored_type(t):
    """Scalars travel through memory as themselves, i1 as i8 (NVPTX stores no i1)."""
    from mlir import ir

    return ir.IntegerType.get_signless(8) if t == ir.IntegerType.get_signless(1) else t


def _scalar_operand_from_buffer(generic, k, buf) -> None:
    """Operand ``k`` of ``generic`` (a scalar, indexing map ``(...) -> ()``) → the 0-d
    buffer ``buf`` with the same map; an i1 comes in as i8 and is truncated in the body."""
    from mlir import ir

    i1 = ir.IntegerType.get_signless(1)
    generic.operands[k] = buf
    arg = generic.regions[0].blocks[0].arguments[k]
    if arg.type == i1:
        arg.set_type(ir.IntegerType.get_signless(8))
        first = _op(list(generic.regions[0].blocks[0].operations)[0])
        with ir.InsertionPoint(first), generic.location:
            t = ir.Operation.create("arith.trunci", [i1], [arg])
        arg.replace_all_uses_except(t.results[0], t)


def _spillable(t) -> bool:
    from mlir import ir

    return isinstance(t, (ir.FloatType, ir.IntegerType, ir.IndexType)) or \
        str(t) in ("f32", "f64", "f16", "bf16", "index") or str(t).startswith("i")
