"""One-hot scatters as gathers (part of ``latch-form-contraction-kernels``, option ``gather``).

A scatter kernel (passes/one_hot_scatter.py) adds each source row ``V[k]`` to its target
row ``C[t(k)]`` with float atomics, into an output zero-filled just before.  In an MoE
dispatch almost every target row receives one source or none (the capacity slots), so the
atomics read-modify-write a whole f32 buffer that a plain store would fill, after a kernel
that zeroed it, and often before one that rounds it to bf16 for the expert GEMMs: three
passes over the buffer where one would do.  Here the sources are grouped by target row
first, and each output element is then computed by its own thread:

1. **zero** the per-row source counts (and two list lengths) of an i32 workspace;
2. **group**: one thread per source ``k`` with an in-range target ``t``: ``j = atomicAdd(
   count[t], 1)``; the first ``SLOTS`` sources of a row land in its slots of a
   ``[rows, SLOTS]`` table, later ones in an *overflow* list (and a row reaching
   ``SLOTS + 1`` sources in a *heavy-row* list; when the output was just zero-filled, the
   thread that makes a row heavy stores that row's zeros);
3. **gather**: one thread per 16 bytes of output (8 bf16 of a rounded copy, 4 f32; the
   row's grouping, sorting and index math shared by those columns, one vector store):
   its row's (at most ``SLOTS``) sources sorted by ``k``, ``C = C0 + V[k0] + V[k1] + ...``
   added in that order (``C0`` the output's value, or 0.0 when it was just zero-filled:
   that fill goes) and stored — a heavy row's ``V[k0] + ... + V[k3]`` added to ``C`` by
   atomics instead;
4. **overflow**: ``_OVERFLOW_BLOCKS`` blocks walk the overflow list:
   ``atomicAdd(C[t(k)], V[k])`` — by default (``walk="launch"``) a launch of their own
   after the gather; ``"last"``: the gather launch's last blocks, ``"first"``: its first.
   Only heavy rows take overflow sources and a heavy row's every sum arrives by an atomic
   add, so the walk needs nothing from the gathering blocks and can share their launch —
   which measured slower at TinyMoE B32 (2026-12-07, H100: the MoE gathers 0.4 ms an
   update slower with the walk inside, though no row there is heavy), hence the default.

A row with at most ``SLOTS`` sources is thus summed in ascending ``k``, the order of the
dense product (deterministic, the same bits as the CPU target's loops); a heavier row's
sources are added by atomics in the order the hardware takes them, as the scatter kernel
does.  Sources whose target is out of range add nothing.  (Until 2026-12-07 a heavy row's
first ``SLOTS`` sources were stored and the walk was a launch of its own after the gather:
in TinyMoE, whose dispatch rows take one source and whose combine rows two, a launch that
found an empty list on the critical path of every dispatch and combine.)

**Rounded copies.**  When the output's only later reader is an all-parallel copy that
rounds (``truncf`` to bf16, maybe with more elementwise work) a leading part of it (MoE: ``buf[:E*C]`` rounded for the expert GEMMs; the
last, dummy row of dropped tokens never read), the gather writes that bf16 copy itself and
skips the rows nobody reads: the f32 buffer is then written only for heavy rows (their
overflow still sums in f32), and each heavy row's pieces (a gather thread's columns) are
rounded into the copy by whichever thread adds a piece's last sum — the gather thread or
an overflow walker: after its atomic adds it takes a count of the piece's sums (an i32
a piece in the workspace, zeroed by the grouping thread that made the row heavy, between
two ``membar.gl``), and the one that completes ``1 + n - SLOTS`` reads the piece back by
atomic adds of -0.0 (the values at L2, whatever another thread of its SM left in L1) and
stores it rounded.  (``walk="launch"``, and copies of single columns: a last launch rounds
the heavy rows.)

Measured at TinyMoE B32 on the H200 (bench/gpu_profile_launches.py): the forward dispatch
took a zero fill, the atomic scatter and the bf16 rounding (78 + 158 + 92 us a layer), now
the gather (137 us) and four small launches; the backward's combine gradient 327 -> 88 us,
the dispatch gradient 127 -> 86 us; the update 67.0 -> 63.8 ms.
"""
from __future__ import annotations

import math

from latch.passes import empty_rows
from latch.passes.base import defining_op, operation as _op
from latch.passes.buffer_views import (arena_span, defined_by_views, held_users,
                                       hoist_definition, identity_layout, root,
                                       slots_overlap)
from latch.passes.fixed_point_scatter import _int as const, _kind
from latch.passes.generic_body import (apply_body, compare, delinearize, flat_launch,
                                       gpu_fence, guarded_launch, index_constant,
                                       indexing_maps, pure_function_of_input, segments)
from latch.passes.one_hot_scatter import Scatter, _target, _value, in_range

SLOTS = 4            # sources a row takes in the table (summed in k order)
#: where the overflow walk runs: the gather launch's last blocks, its first blocks, or a
#: launch of its own after the gather
WALKS = ("last", "first", "launch")
_THREADS = 256
_OVERFLOW_BLOCKS = 264   # the overflow walk's grid: two blocks per H200 SM
_I32_MAX = 2 ** 31 - 1


def _rows(sc: Scatter) -> int:
    return math.prod(sc.con.sizes[d] for d in sc.row_dims)


def _value_dims(sc: Scatter) -> list:
    return sc.con.groups["n" if sc.con.indicator == 0 else "m"]


def _sources(sc: Scatter) -> int:
    return math.prod(sc.con.sizes[d] for d in sc.con.groups["k"])


def applies(sc: Scatter) -> bool:
    """Whether the gather form covers ``sc``: an f32 output of static shape indexed by the
    row and value loops only (no batch loops, no constant indices), and source and table
    numbers that fit an i32."""
    from mlir import ir

    con = sc.con
    t = ir.MemRefType(con.c.type)
    if not t.has_static_shape or not isinstance(t.element_type, ir.F32Type) or \
            con.groups["batch"] or not _value_dims(sc):
        return False
    if any(kind != "d" for kind, _ in con.maps[-1]):
        return False
    if sorted(d for _, d in con.maps[-1]) != sorted(sc.row_dims + _value_dims(sc)):
        return False
    return _rows(sc) * (SLOTS + 2) + _sources(sc) + 2 < _I32_MAX


def workspace_bytes(sc: Scatter, copy=None) -> int:
    """Bytes of i32 workspace: counts and two list lengths, the table, the overflow list,
    the heavy-row list and, with a rounded ``copy`` (:func:`rounded_copy`), a count of the
    sums each of a live row's column pieces has taken (:func:`_pieces`)."""
    r = _rows(sc)
    return 4 * (r + 2 + r * SLOTS + _sources(sc) + r + _live_rows(sc, copy) * _pieces(sc, copy))


def _live_rows(sc: Scatter, copy) -> int:
    """The output rows read later: those of the rounded ``copy``, else all."""
    return _rows(sc) if copy is None else copy[2] // _n_values(sc)


def _n_values(sc: Scatter) -> int:
    return math.prod(sc.con.sizes[d] for d in _value_dims(sc))


def _pieces(sc: Scatter, copy) -> int:
    """With a rounded ``copy`` whose gather threads take several columns each
    (:func:`_width`), the column pieces of a row (each a thread's); else 0 (no counts)."""
    if copy is None or _width(sc, copy) == 1:
        return 0
    return _n_values(sc) // _width(sc, copy)


def rounded_copy(sc: Scatter):
    """(the truncf generic, the bf16 buffer it writes, the number of leading output
    elements it reads) when the gather may write that copy instead of the f32 output
    (module docstring), else None.  Conditions: the output is a contiguous allocation
    whose rows come first (row loops, then value loops, in the output's dimension order),
    zero-filled just before the product; its only user after the product is an
    all-parallel generic computing each element from one element of a view of its leading
    elements — whole rows — (``generic_body.pure_function_of_input``: a rounding to bf16) into a
    contiguous buffer of the same element order; nothing
    between the product and that copy touches the copy's bytes, and the copy's bytes are
    not those of anything the gather reads (the memory plan may have placed it over
    buffers that die before the copy)."""
    from mlir import ir

    from latch.passes.buffer_views import INERT
    con = sc.con
    op, c = con.op, con.c
    if con.zeroed_by is None or hasattr(c.owner, "arguments") or \
            _op(c.owner).name != "memref.alloc":
        return None
    order = [d for _, d in con.maps[-1]]
    if order != sorted(sc.row_dims, key=order.index) + \
            sorted(_value_dims(sc), key=order.index) or order[:len(sc.row_dims)] != sc.row_dims:
        return None
    if not identity_layout(ir.MemRefType(c.type)):
        return None
    here = _op(op)
    later = [(u, h) for u, h in held_users(c, here) if here.is_before_in_block(h)]
    if len(later) != 1 or later[0][0].name != "linalg.generic":
        return None
    g, g_holder = later[0]
    ops = [_op(o) for o in op.operation.block.operations]
    at = next(i for i, o in enumerate(ops) if o == op)
    seg = list(ir.DenseI32ArrayAttr(g.attributes["operandSegmentSizes"]))
    if seg != [1, 1] or g.results or \
            any("parallel" not in str(a) for a in ir.ArrayAttr(g.attributes["iterator_types"])):
        return None
    view, out = g.operands[0], g.operands[1]
    if not defined_by_views(out, ops[at + 1:]):
        return None
    prefix = _leading_elements(view, c)
    n_values = _n_values(sc)
    out_t = ir.MemRefType(out.type)
    if prefix is None or prefix % n_values or not out_t.has_static_shape or \
            math.prod(out_t.shape) != prefix or not identity_layout(out_t):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    if maps[0] != maps[1] or not maps[0].is_permutation or not pure_function_of_input(g):
        return None
    out_root = root(out)
    if hasattr(out_root.owner, "arguments"):
        return None
    span = arena_span(out)        # None before latch-plan-memory: distinct allocations
    reads = list(con.inputs) + list(con.captured)
    if sc.space != op:                   # t(k) is recomputed from the mask writer's inputs
        reads += list(sc.space.operands)
    if any(slots_overlap(span, arena_span(v)) for v in reads):
        return None
    for between in ops[at + 1:next(i for i, o in enumerate(ops) if o == g_holder)]:
        if between.name in INERT:
            continue
        for v in between.operands:
            if isinstance(v.type, ir.MemRefType) and (
                    root(v) == out_root or slots_overlap(span, arena_span(v))):
                return None
    return g, out, prefix


def _leading_elements(view, c):
    """The number of leading elements (row-major) of ``c`` that ``view`` covers when it is
    ``c`` itself or reshapes of a subview taking the first rows of ``c`` whole, else None."""
    from mlir import ir

    while view != c:
        if hasattr(view.owner, "arguments"):
            return None
        o = _op(view.owner)
        if o.name in ("memref.expand_shape", "memref.collapse_shape"):
            view = o.operands[0]
            continue
        if o.name != "memref.subview" or o.operands[0] != c or len(o.operands) != 1:
            return None
        shape = list(ir.MemRefType(c.type).shape)
        offsets = list(ir.DenseI64ArrayAttr(o.attributes["static_offsets"]))
        sizes = list(ir.DenseI64ArrayAttr(o.attributes["static_sizes"]))
        strides = list(ir.DenseI64ArrayAttr(o.attributes["static_strides"]))
        if any(offsets) or any(s != 1 for s in strides) or sizes[1:] != shape[1:]:
            return None
        return math.prod(sizes)
    return math.prod(ir.MemRefType(c.type).shape)


def additive_reader(sc: Scatter):
    """The generic right after the product of ``sc`` that adds a term to its output in place
    — ``c = h(others) + c``, all-parallel, every operand through the same permutation of
    the loops (element by element), ``c`` read once and only by the
    final ``addf`` (TinyMoE's tied embedding: the LM head's rounded weight gradient added
    to the embedding's, a [vocab, d] pass at the end of the backward): the gather's threads
    add ``h`` to their sums before they store (the same bits for rows of up to SLOTS
    sources; a heavier row's further sources, added by atomics, now come after ``h``) and
    the pass goes; else None."""
    from mlir import ir

    con = sc.con
    block = con.op.operation.block
    ops = [_op(o) for o in block.operations]
    at = next((i for i, o in enumerate(ops) if o == _op(con.op)), None)
    if at is None or at + 1 >= len(ops):
        return None
    g = ops[at + 1]
    if g.name != "linalg.generic" or g.results or \
            any("parallel" not in str(t) for t in ir.ArrayAttr(g.attributes["iterator_types"])):
        return None
    n_in, n_out = segments(g)
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    operands = list(g.operands)
    if n_out != 1 or operands[n_in] != con.c or not maps[-1].is_permutation or \
            any(m != maps[-1] for m in maps):        # every operand element by element
        return None
    reads = [j for j in range(n_in) if operands[j] == con.c]
    if any(root(operands[j]) == root(con.c) for j in range(n_in) if j not in reads):
        return None                       # another view of the output: it would read zeros
    body = g.regions[0].blocks[0]
    if len(reads) != 1 or any(True for _ in body.arguments[n_in].uses):
        return None
    c_arg = body.arguments[reads[0]]
    inner = [_op(o) for o in body.operations]
    total = inner[-1].operands[0]
    add = defining_op(total)
    if add is None or add.name != "arith.addf" or c_arg not in list(add.operands) or \
            sum(1 for _ in c_arg.uses) != 1 or list(add.operands)[0] == list(add.operands)[1]:
        return None
    if any(o.regions or o.name.startswith("memref.") for o in inner):
        return None
    return g


def _reader_term(g, c, at: list):
    """The term ``h(others)`` of :func:`additive_reader`'s generic ``g`` at output indices
    ``at``, its body cloned at the current insertion point (``c``: the product's output)."""
    from latch.passes.generic_body import clone_body_ops, load_inputs

    from mlir import ir

    n_in, _ = segments(g)
    body = g.regions[0].blocks[0]
    operands = list(g.operands)
    maps = indexing_maps(g)
    dims = [None] * maps[-1].n_dims           # the loop indices of output element ``at``
    for pos, e in enumerate(maps[-1].results):
        dims[ir.AffineDimExpr(e).position] = at[pos]
    others = {j for j in range(n_in) if operands[j] != c}
    mapping: dict = {}
    load_inputs(body, operands[:n_in], maps[:n_in], dims, mapping, only=others)
    inner = [_op(o) for o in body.operations]
    add = defining_op(inner[-1].operands[0])
    c_arg = next(a for j, a in enumerate(body.arguments) if j < n_in and j not in others)
    term = next(v for v in add.operands if v != c_arg)
    clone_body_ops([o for o in inner[:-1] if o != add], mapping, dims)
    return mapping.get(term, term)


def emit_gather(sc: Scatter, workspace, copy=None, zero_rows=None, lanes: bool = True,
                reader=None, walk: str = "last") -> None:
    """Replace the contraction of ``sc`` by the launches of the module docstring, using the
    i8 buffer ``workspace`` (at least :func:`workspace_bytes` long); ``copy``: the
    :func:`rounded_copy` to write instead of the f32 output, or None; ``zero_rows``: an
    ``empty_rows.GatherRows`` whose extents the launches also write, or None; ``lanes``:
    a thread's columns of a source row read as vectors where they can be
    (:func:`_lane_values`); ``reader``: an :func:`additive_reader` whose term the threads
    add before they store (the caller erases it); ``walk``: one of :data:`WALKS`, where
    the overflow walk runs."""
    from mlir import ir
    from mlir.dialects import scf

    con = sc.con
    op = con.op
    index = ir.IndexType.get()
    i32 = ir.IntegerType.get_signless(32)
    f32 = ir.F32Type.get()
    rows = _rows(sc)
    live = _live_rows(sc, copy)
    k_total = _sources(sc)
    walk_blocks = walk != "launch"
    if copy is not None:
        hoist_definition(copy[1], op)       # the copy's buffer, written by the launches
    counts_at, table_at = 0, 4 * (rows + 2)
    overflow_at = table_at + 4 * rows * SLOTS
    heavy_at = overflow_at + 4 * k_total
    pieces = _pieces(sc, copy) if walk_blocks else 0     # finished by their last adder
    with ir.InsertionPoint(op), op.location:
        def view(offset, n):
            return ir.Operation.create("memref.view", [ir.MemRefType.get([n], i32)],
                                       [workspace, index_constant(offset)]).result
        counts = view(counts_at, rows + 2)      # per row; [rows]: overflow, [rows+1]: heavy
        table = view(table_at, rows * SLOTS)
        overflow = view(overflow_at, k_total)
        heavy = view(heavy_at, rows)
        # per live row and column piece: the sums added so far (heavy rows' only)
        added = view(heavy_at + 4 * rows, live * pieces) if pieces else None

    def cast(v, t):
        return ir.Operation.create("arith.index_cast", [t], [v]).result

    def atomic_add_i32(buffer, at):
        return ir.Operation.create("memref.atomic_rmw", [i32], [const(i32, 1), buffer, at],
                                   attributes={"kind": _kind("addi")}).result

    def k_dims(k_lin):
        dims = [index_constant(0) for _ in con.sizes]
        delinearize(k_lin, con.groups["k"][::-1], con.sizes, dims)
        return dims

    n_values = _n_values(sc)

    # 1. zero the counts
    body, lin = guarded_launch(op, rows + 2, _THREADS)
    with ir.InsertionPoint.at_block_terminator(body), op.location:
        ir.Operation.create("memref.store", [], [const(i32, 0), counts, lin])
        if zero_rows is not None:
            empty_rows.zero_extents(zero_rows, lin)

    # 2. group the sources by target row
    body, lin = guarded_launch(op, k_total, _THREADS)
    with ir.InsertionPoint.at_block_terminator(body), op.location:
        t64, ok = in_range(_target(sc, k_dims(lin)), live)
        hit = scf.IfOp(ok)
        with ir.InsertionPoint(hit.then_block):
            t = cast(t64, index)
            j = atomic_add_i32(counts, t)
            k32 = cast(lin, i32)
            slotted = scf.IfOp(compare("slt", j, const(i32, SLOTS)), has_else=True)
            with ir.InsertionPoint(slotted.then_block):
                at = ir.Operation.create("arith.muli", [index], [t, index_constant(SLOTS)]).result
                at = ir.Operation.create("arith.addi", [index], [at, cast(j, index)]).result
                ir.Operation.create("memref.store", [], [k32, table, at])
                scf.YieldOp([])
            with ir.InsertionPoint(slotted.else_block):
                o = atomic_add_i32(counts, index_constant(rows))
                ir.Operation.create("memref.store", [], [k32, overflow, cast(o, index)])
                first = scf.IfOp(compare("eq", j, const(i32, SLOTS)))
                with ir.InsertionPoint(first.then_block):
                    h = atomic_add_i32(counts, index_constant(rows + 1))
                    ir.Operation.create("memref.store", [], [cast(t, i32), heavy,
                                                             cast(h, index)])
                    if con.zeroed_by is not None:    # its sums arrive by atomic adds
                        _zero_row(sc, t, n_values)
                    if pieces:
                        _zero_counts(added, t, pieces)
                    scf.YieldOp([])
                scf.YieldOp([])
            scf.YieldOp([])

    def piece_column(piece, w):
        """The row's column ``w`` of column piece ``piece`` (``width`` columns a piece)."""
        column = ir.Operation.create("arith.muli", [index],
                                     [piece, index_constant(width)]).result
        return column if not w else ir.Operation.create(
            "arith.addi", [index], [column, index_constant(w)]).result

    def finish_piece(row, piece, n):
        """After a heavy row's sums into column piece ``piece`` (``width`` columns) of row
        ``row`` (``n`` sources): count them (``membar.gl`` first); the adder of the last
        of its ``1 + n - SLOTS`` sums (the gather thread's, the overflow sources')
        reads the piece (``membar.gl``, then atomic adds of -0.0: values at L2, any stale
        L1 line aside) and stores it rounded into the copy."""
        gpu_fence()
        at = ir.Operation.create("arith.muli", [index], [row, index_constant(pieces)]).result
        at = ir.Operation.create("arith.addi", [index], [at, piece]).result
        before = atomic_add_i32(added, at)
        others = ir.Operation.create("arith.subi", [i32], [n, const(i32, SLOTS)]).result
        last = scf.IfOp(compare("eq", before, others))
        with ir.InsertionPoint(last.then_block):
            gpu_fence()
            minus_zero = ir.Operation.create("arith.constant", [f32], attributes={
                "value": ir.FloatAttr.get(f32, -0.0)}).result
            for w in range(width):
                column = piece_column(piece, w)
                x = ir.Operation.create(
                    "memref.atomic_rmw", [f32], [minus_zero, con.c] + _output_at(sc, row, column),
                    attributes={"kind": _kind("addf")}).result
                _store_row_rounded(x, copy, row, column, n_values)
            scf.YieldOp([])

    # 3. one thread per ``width`` consecutive live output elements of a row: its row's
    #    slotted sources in k order
    shape = list(ir.MemRefType(con.c.type).shape)
    out_pos = [d for _, d in con.maps[-1]]
    live_elements = math.prod(shape) if copy is None else copy[2]
    width = _width(sc, copy)
    dest = con.c if copy is None else copy[1]
    vector_store = _vector_store_ok(dest, width)
    body, lin, walk_body, walk_from, thread = _gather_launch(
        op, live_elements // width, _OVERFLOW_BLOCKS if walk_blocks else 0, walk == "first")
    with ir.InsertionPoint.at_block_terminator(body), op.location:
        first = ir.Operation.create("arith.muli", [index], [lin, index_constant(width)]).result
        at = [None] * len(shape)          # the output indices of each of the columns:
        delinearize(first, list(range(len(shape)))[::-1], shape, at)   # one row's
        ats = [at] + [at[:-1] + [ir.Operation.create(
            "arith.addi", [index], [at[-1], index_constant(w)]).result] for w in range(1, width)]
        dims = [index_constant(0) for _ in con.sizes]
        for pos, d in enumerate(out_pos):
            dims[d] = ats[0][pos]
        row = index_constant(0)
        for d in sc.row_dims:
            row = ir.Operation.create("arith.muli", [index],
                                      [row, index_constant(con.sizes[d])]).result
            row = ir.Operation.create("arith.addi", [index], [row, dims[d]]).result
        n = ir.Operation.create("memref.load", [i32], [counts, row]).result
        if zero_rows is not None:
            empty_rows.raise_extent(zero_rows, first, row, n, counts, live, rows)
        base = ir.Operation.create("arith.muli", [index], [row, index_constant(SLOTS)]).result
        keys = []
        for s in range(SLOTS):
            slot = ir.Operation.create("arith.addi", [index], [base, index_constant(s)]).result
            used = compare("slt", const(i32, s), n)
            safe = ir.Operation.create("arith.select", [index],
                                       [used, slot, index_constant(0)]).result
            k = ir.Operation.create("memref.load", [i32], [table, safe]).result
            keys.append(ir.Operation.create("arith.select", [i32],
                                            [used, k, const(i32, _I32_MAX)]).result)
        keys = _sorted(keys)
        light = compare("sle", n, const(i32, SLOTS))
        zero = ir.Operation.create("arith.constant", [f32],
                                   attributes={"value": ir.FloatAttr.get(f32, 0.0)}).result
        if con.zeroed_by is not None:
            accs = [zero] * width
        else:       # a heavy row adds its sum to the output's values by atomics: from 0
            initial = scf.IfOp(light, [f32] * width, has_else=True)
            with ir.InsertionPoint(initial.then_block):
                scf.YieldOp([ir.Operation.create("memref.load", [f32], [con.c] + at).result
                             for at in ats])
            with ir.InsertionPoint(initial.else_block):
                scf.YieldOp([zero] * width)
            accs = list(initial.results)
        for s, k in enumerate(keys):
            more = scf.IfOp(compare("slt", const(i32, s), n), [f32] * width, has_else=True)
            with ir.InsertionPoint(more.then_block):
                kd = k_dims(cast(k, index))
                for pos, d in enumerate(out_pos):
                    if d in _value_dims(sc):
                        kd[d] = ats[0][pos]
                values = _lane_values(sc, kd, width, out_pos[-1]) \
                    if lanes and width > 1 else None
                if values is None:                 # one clone of the factor a column
                    values = []
                    for at in ats:
                        for pos, d in enumerate(out_pos):
                            if d in _value_dims(sc):
                                kd[d] = at[pos]
                        values.append(_value(sc, kd))
                sums = [ir.Operation.create("arith.addf", [f32], [acc, v]).result
                        for acc, v in zip(accs, values)]
                scf.YieldOp(sums)
            with ir.InsertionPoint(more.else_block):
                scf.YieldOp(accs)
            accs = list(more.results)
        if reader is not None:           # c = h(others) + c, as the reader would
            accs = [ir.Operation.create("arith.addf", [f32],
                                        [_reader_term(reader, con.c, at), acc]).result
                    for acc, at in zip(accs, ats)]

        def add_f32():        # a heavy row: the other sources' atomics may come first
            for acc, at in zip(accs, ats):
                ir.Operation.create("memref.atomic_rmw", [f32], [acc, con.c] + at,
                                    attributes={"kind": _kind("addf")})

        split = scf.IfOp(light, has_else=True)
        with ir.InsertionPoint(split.else_block):
            add_f32()
            if pieces:
                column = ir.Operation.create("arith.subi", [index], [first, ir.Operation.create(
                    "arith.muli", [index], [row, index_constant(n_values)]).result]).result
                finish_piece(row, ir.Operation.create(
                    "arith.divui", [index], [column, index_constant(width)]).result, n)
            scf.YieldOp([])
        if copy is None:
            with ir.InsertionPoint(split.then_block):
                if vector_store:
                    _store_vector(accs, con.c, ats[0])
                else:
                    for acc, at in zip(accs, ats):
                        ir.Operation.create("memref.store", [], [acc, con.c] + at)
                scf.YieldOp([])
        else:
            with ir.InsertionPoint(split.then_block):
                values = [apply_body(copy[0], acc) for acc in accs]
                if vector_store:
                    out_shape = list(ir.MemRefType(copy[1].type).shape)
                    at = [None] * len(out_shape)
                    delinearize(first, list(range(len(out_shape)))[::-1], out_shape, at)
                    _store_vector(values, copy[1], at)
                else:
                    for w, value in enumerate(values):
                        e = first if not w else ir.Operation.create(
                            "arith.addi", [index], [first, index_constant(w)]).result
                        _store_at(value, copy[1], e)
                scf.YieldOp([])

    # 4. the overflow sources: atomic adds, the gather launch's last _OVERFLOW_BLOCKS blocks
    #    walking the list
    def walk_items(block, first_item, tid, length_at, per_item, columns=None):
        """In ``block`` (run by a whole block of threads ``tid``; ``first_item``: its number
        among the walking blocks): items b, b + _OVERFLOW_BLOCKS, ... of the list whose
        length is counts[length_at]; the block's threads split the ``columns`` (default:
        the row's values) of each."""
        with ir.InsertionPoint.at_block_terminator(block), op.location:
            length = cast(ir.Operation.create("memref.load", [i32],
                                              [counts, index_constant(length_at)]).result, index)
            items = scf.ForOp(first_item, length, index_constant(_OVERFLOW_BLOCKS))
            with ir.InsertionPoint(items.body):
                loop = scf.ForOp(tid, index_constant(columns or n_values),
                                 index_constant(_THREADS))
                with ir.InsertionPoint(loop.body):
                    per_item(items.induction_variable, loop.induction_variable)
                    scf.YieldOp([])
                scf.YieldOp([])

    def walk(length_at, per_item):
        """A launch of _OVERFLOW_BLOCKS x _THREADS walking a list (:func:`walk_items`)."""
        with ir.InsertionPoint(op), op.location:
            launch_body, _, _ = flat_launch(_OVERFLOW_BLOCKS, _THREADS)
        walk_items(launch_body, launch_body.arguments[0], launch_body.arguments[3], length_at,
                   per_item)

    def add_overflow(item, column):
        k = cast(ir.Operation.create("memref.load", [i32], [overflow, item]).result, index)
        dims = k_dims(k)
        t = cast(_target(sc, dims), index)
        delinearize(column, _value_dims(sc)[::-1], con.sizes, dims)
        delinearize(t, sc.row_dims[::-1], con.sizes, dims)
        v = _value(sc, dims)
        where = [dims[d] for _, d in con.maps[-1]]
        ir.Operation.create("memref.atomic_rmw", [f32], [v, con.c] + where,
                            attributes={"kind": _kind("addf")})

    def add_overflow_piece(item, piece):
        """``add_overflow`` for the ``width`` columns of ``piece``, then finish_piece."""
        k = cast(ir.Operation.create("memref.load", [i32], [overflow, item]).result, index)
        dims = k_dims(k)
        t = cast(_target(sc, dims), index)
        n = ir.Operation.create("memref.load", [i32], [counts, t]).result
        delinearize(t, sc.row_dims[::-1], con.sizes, dims)
        for w in range(width):
            delinearize(piece_column(piece, w), _value_dims(sc)[::-1], con.sizes, dims)
            v = _value(sc, dims)
            ir.Operation.create("memref.atomic_rmw", [f32],
                                [v, con.c] + [dims[d] for _, d in con.maps[-1]],
                                attributes={"kind": _kind("addf")})
        finish_piece(t, piece, n)

    if pieces:
        walk_items(walk_body, walk_from, thread, rows, add_overflow_piece, pieces)
    elif walk_blocks:
        walk_items(walk_body, walk_from, thread, rows, add_overflow)
    else:
        walk(rows, add_overflow)

    if copy is not None and not pieces:   # 5. round the heavy rows (summed in f32) into the copy
        def round_heavy(item, column):
            r = cast(ir.Operation.create("memref.load", [i32], [heavy, item]).result, index)
            x = ir.Operation.create("memref.load", [f32],
                                    [con.c] + _output_at(sc, r, column)).result
            _store_row_rounded(x, copy, r, column, n_values)

        walk(rows + 1, round_heavy)


def _gather_launch(op, n: int, walkers: int, walkers_first: bool = False):
    """The gather's ``gpu.launch`` in front of ``op``: one thread per item ``0 .. n-1`` in
    its gathering blocks and ``walkers`` blocks that walk the overflow list, after them (or
    before them: ``walkers_first``).  Returns (the gather's body block under the ``lin < n``
    guard, ``lin``, the walking blocks' body block, the walking block's number among them,
    ``threadIdx.x``); both bodies have their terminators."""
    from mlir import ir
    from mlir.dialects import scf

    index = ir.IndexType.get()
    blocks = -(-n // _THREADS)
    with ir.InsertionPoint(op), op.location:
        launch_body, end, _ = flat_launch(blocks + walkers, _THREADS)
    with ir.InsertionPoint(end), op.location:
        bid, tid = launch_body.arguments[0], launch_body.arguments[3]
        # the first branch holds the blocks that come first (the SIMT interpreter runs an
        # scf.if's branches in that order too)
        split = index_constant(walkers if walkers_first else blocks)
        first = scf.IfOp(compare("ult", bid, split), has_else=True)
        gathering, walking = (first.else_block, first.then_block) if walkers_first \
            else (first.then_block, first.else_block)
        with ir.InsertionPoint(gathering):
            own = ir.Operation.create("arith.subi", [index], [bid, split]).result \
                if walkers_first else bid
            lin = ir.Operation.create("arith.muli", [index], [own, index_constant(_THREADS)]).result
            lin = ir.Operation.create("arith.addi", [index], [lin, tid]).result
            guard = scf.IfOp(compare("ult", lin, index_constant(n)))
            with ir.InsertionPoint(guard.then_block):
                scf.YieldOp([])
            scf.YieldOp([])
        with ir.InsertionPoint(walking):
            walker = bid if walkers_first else \
                ir.Operation.create("arith.subi", [index], [bid, split]).result
            scf.YieldOp([])
    return guard.then_block, lin, walking, walker, tid


def _zero_counts(added, t, pieces: int) -> None:
    """Store 0 into row ``t``'s ``pieces`` counts of ``added`` (an i32 list, ``pieces``
    a row)."""
    from mlir import ir
    from mlir.dialects import scf

    i32 = ir.IntegerType.get_signless(32)
    base = ir.Operation.create("arith.muli", [ir.IndexType.get()],
                               [t, index_constant(pieces)]).result
    loop = scf.ForOp(index_constant(0), index_constant(pieces), index_constant(1))
    with ir.InsertionPoint(loop.body):
        at = ir.Operation.create("arith.addi", [ir.IndexType.get()],
                                 [base, loop.induction_variable]).result
        ir.Operation.create("memref.store", [], [const(i32, 0), added, at])
        scf.YieldOp([])


def _zero_row(sc: Scatter, t, n_values: int) -> None:
    """Store 0.0 into the ``n_values`` elements of output row ``t`` (an index), one after
    another (a heavy row of a zero-filled output, in the thread that found it heavy)."""
    from mlir import ir
    from mlir.dialects import scf

    con = sc.con
    f32 = ir.F32Type.get()
    zero = ir.Operation.create("arith.constant", [f32],
                               attributes={"value": ir.FloatAttr.get(f32, 0.0)}).result
    columns = scf.ForOp(index_constant(0), index_constant(n_values), index_constant(1))
    with ir.InsertionPoint(columns.body):
        ir.Operation.create("memref.store", [], [zero, con.c] +
                            _output_at(sc, t, columns.induction_variable))
        scf.YieldOp([])


def _output_at(sc: Scatter, row, column) -> list:
    """The output's indices of column ``column`` (over the value loops) of row ``row``
    (over the row loops), both index values."""
    con = sc.con
    dims = [index_constant(0) for _ in con.sizes]
    delinearize(column, _value_dims(sc)[::-1], con.sizes, dims)
    delinearize(row, sc.row_dims[::-1], con.sizes, dims)
    return [dims[d] for _, d in con.maps[-1]]


def _store_row_rounded(x, copy, row, column, n_values: int) -> None:
    """Store f32 ``x``, rounded as the ``copy`` rounds, at column ``column`` of row ``row``
    of the copy (``n_values`` columns a row)."""
    from mlir import ir

    index = ir.IndexType.get()
    flat = ir.Operation.create("arith.muli", [index], [row, index_constant(n_values)]).result
    flat = ir.Operation.create("arith.addi", [index], [flat, column]).result
    _store_rounded(x, copy, flat)


def _lane_values(sc: Scatter, dims: list, width: int, last: int):
    """The value factor at ``width`` consecutive indices of loop ``last`` from ``dims``
    (the first, a multiple of ``width``), what it reads along ``last`` loaded as
    ``vector.load``s (``vector_lanes.LaneEmitter``: the MoE's gathers and the embedding
    gradient read 8 bf16 or 4 f32 of a source row in one access instead of one each), the
    rest once; None when the factor does not allow it: ``last``'s index elsewhere than an
    access's last index, a buffer misaligned for ``width`` elements, a store or nested
    regions in the body."""
    from mlir import ir

    from latch.passes.form_contraction_kernels import load_factor_inputs
    from latch.passes.vector_lanes import aligned_chunks, _bytes, emit_lanes, lane_loads

    con = sc.con
    side = con.sides[sc.value_side]
    block = con.op.regions[0].blocks[0]

    def vectorizable(mt) -> bool:
        return _bytes(mt.element_type) is not None and aligned_chunks(mt, width)

    along_inputs = []
    for i in side.args:
        at = [p for p, (kind, d) in enumerate(con.maps[i]) if kind == "d" and d == last]
        if at and (at != [len(con.maps[i]) - 1] or
                   not vectorizable(ir.MemRefType(con.inputs[i].type))):
            return None
        if at:
            along_inputs.append(i)
    if any(o.regions or o.name == "memref.store" for o in side.ops):
        return None
    loads = lane_loads(side.ops, [block.arguments[i] for i in along_inputs], last)
    if loads is None or not all(vectorizable(ir.MemRefType(x.type)) for x in loads):
        return None
    mapping: dict = {}
    vectors = load_factor_inputs(con, side, con.inputs, dims, mapping, width, along_inputs)
    return emit_lanes(side.ops, side.value, mapping, vectors, dims, last, width)


def _store_rounded(x, copy, flat) -> None:
    """Store the copy's value of f32 ``x`` (its body applied: a rounding to bf16) at
    row-major position ``flat`` of its buffer."""
    _store_at(apply_body(copy[0], x), copy[1], flat)


def _store_at(value, out, flat) -> None:
    """Store ``value`` at row-major position ``flat`` of ``out``."""
    from mlir import ir

    shape = list(ir.MemRefType(out.type).shape)
    at = [None] * len(shape)
    delinearize(flat, list(range(len(shape)))[::-1], shape, at)
    ir.Operation.create("memref.store", [], [value, out] + at)


def _width(sc: Scatter, copy) -> int:
    """Consecutive output elements a gather thread computes: 16 bytes of what it stores
    (8 bf16 of a rounded copy, 4 f32) when the output's last dimension is the fastest value
    loop and a multiple of that long (the row's grouping, its sorting and the thread's index
    math are then shared by the columns), else 1."""
    from mlir import ir

    from latch.passes.base import element_bits

    con = sc.con
    last = con.maps[-1][-1][1]
    if last not in _value_dims(sc):
        return 1
    dest = con.c if copy is None else copy[1]
    width = 128 // element_bits(ir.MemRefType(dest.type).element_type)
    shape = ir.MemRefType(dest.type).shape
    if con.sizes[last] % width or shape[-1] % width:
        return 1
    return width


def _vector_store_ok(buffer, width: int) -> bool:
    """Whether ``width`` consecutive elements of ``buffer`` starting at a multiple of
    ``width`` in its last dimension are one aligned 16-byte vector: an identity layout
    (allocations are 64-byte aligned) whose last dimension is a multiple of ``width``."""
    from mlir import ir

    t = ir.MemRefType(buffer.type)
    return width > 1 and identity_layout(t) and t.shape[-1] % width == 0


def _store_vector(values, buffer, at) -> None:
    """One ``vector.store`` of ``values`` (consecutive elements) at indices ``at``."""
    from mlir import ir

    vt = ir.VectorType.get([len(values)], values[0].type)
    vec = ir.Operation.create("vector.from_elements", [vt], values).result
    ir.Operation.create("vector.store", [], [vec, buffer] + list(at),
                        attributes={"alignment": ir.IntegerAttr.get(
                            ir.IntegerType.get_signless(64), 16)})


def _sorted(keys: list) -> list:
    """``keys`` (i32 values) in ascending order: a sorting network of min/max pairs."""
    from mlir import ir

    pairs = {4: [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)], 2: [(0, 1)], 1: []}[len(keys)]
    keys = list(keys)
    for a, b in pairs:
        lo = ir.Operation.create("arith.minsi", [keys[a].type], [keys[a], keys[b]]).result
        hi = ir.Operation.create("arith.maxsi", [keys[a].type], [keys[a], keys[b]]).result
        keys[a], keys[b] = lo, hi
    return keys

