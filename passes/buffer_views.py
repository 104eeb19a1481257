"""Views of buffers and who writes them: which ops make a view of a memref, the allocation
(or function argument) a view comes from, whether an op may write an allocation, and the
generic that last wrote one, which ops use one — shared by the passes that reason about which buffer an op
reads or writes (latch-wrap-host-compute, its row reductions, latch-form-contraction-kernels
and its one-hot scatter)."""
from __future__ import annotations

from latch.passes.base import int_constant, operation as _op

VIEW_OPS = ("memref.subview", "memref.cast", "memref.collapse_shape", "memref.expand_shape",
            "memref.reinterpret_cast", "memref.view", "memref.reshape")
RESHAPES = ("memref.collapse_shape", "memref.expand_shape")
#: ops that neither read nor write any buffer's bytes (a deallocation does: it ends one):
#: an op can move past them
NO_MEMORY_EFFECTS = VIEW_OPS + ("memref.alloc", "arith.constant")
#: ops that may lie between two ops without touching a byte either of them uses (a
#: deallocation included: nothing uses its buffer after it)
INERT = NO_MEMORY_EFFECTS + ("memref.dealloc",)


def root(v):
    """The allocation (or argument) the buffer value ``v`` is a view of (``v`` itself if
    it is not a view)."""
    while not hasattr(v.owner, "arguments"):
        o = v.owner.operation if hasattr(v.owner, "operation") else v.owner
        if o.name not in VIEW_OPS:
            break
        v = o.operands[0]
    return v


def users(alloc) -> list:
    """Every op, at any depth, that uses the allocation ``alloc`` directly or through views
    of it (the views themselves and deallocations not counted)."""
    stack, found = [alloc], []
    while stack:
        for use in stack.pop().uses:
            user = _op(use.owner)
            if user.name in VIEW_OPS:
                stack.extend(user.results)
            elif user.name != "memref.dealloc":
                found.append(user)
    return found


def last_writer(buffer, op):
    """The all-parallel ``linalg.generic`` that last wrote the whole allocation ``buffer``
    views, before ``op`` in the same block; None if another op may have written it since
    (or if that is not known).

    Only an op that refers to the allocation (directly, through views, or in an op nested
    in it) may write it (:func:`may_write`), so the walk back visits just the ops of the
    block that hold a use of it, latest first (``is_before_in_block``), not every op before
    ``op`` (asked for each of a TinyMoE update's ~700 products and row reductions, the full
    walk was most of ``latch-form-kernels``' time)."""
    import functools

    base = root(buffer)
    if not _writers_known(base):
        return None
    op = _op(op)
    holders = []
    for _, holder in held_users(base, op):
        if holder.is_before_in_block(op) and all(holder != h for h in holders):
            holders.append(holder)

    def later_first(a, b):
        return -1 if b.is_before_in_block(a) else 1
    holders.sort(key=functools.cmp_to_key(later_first))
    return _writer_among(base, holders)[1]


def held_users(alloc, op) -> list:
    """[(user, holder)] for each user of the allocation ``alloc`` (:func:`users`) that is an
    op of ``op``'s block or nested in one, ``holder`` being that op of the block: whether a
    use comes before or after ``op`` is then ``is_before_in_block`` on the holders, without
    listing the block."""
    op = _op(op)
    parent = _op(op.parent) if op.parent is not None else None
    found = []
    for user in users(alloc):
        holder = _holder_under(user, parent)
        if holder is not None:
            found.append((user, holder))
    return found


def _holder_under(o, parent):
    """The op directly in ``parent``'s body that is ``o`` or holds it (nested at any depth);
    None when ``o`` is not nested in ``parent``."""
    o = _op(o)
    while True:
        p = o.parent
        if p is None:
            return None
        p = _op(p)
        if parent is not None and p == parent:
            return o
        o = p


class LastWriters:
    """:func:`last_writer` for many questions about one block's ops, asked in block order
    (``ops``: the block's ops, kept in step with it by the caller): each answer looks back
    only to where the same allocation was last asked about (a zero buffer copied all over a
    long function would otherwise be looked for from every copy back to its one fill)."""

    def __init__(self, ops: list):
        self.ops = ops
        self.known: dict = {}        # allocation -> (position asked at, its last writer there)

    def at(self, buffer, i: int):
        """:func:`last_writer` of ``buffer`` before ``ops[i]``."""
        base = root(buffer)
        if not _writers_known(base):
            return None
        if base in self.known:
            at, writer = self.known[base]
            decided, found = _writer_among(base, reversed(self.ops[at:i]))
            writer = found if decided else writer
        else:
            writer = _writer_among(base, reversed(self.ops[:i]))[1]
        self.known[base] = (i, writer)
        return writer


def _writers_known(base) -> bool:
    """Whether the writers of allocation ``base`` are all in its function (not an
    argument) and its size is static."""
    from mlir import ir

    return not hasattr(base.owner, "arguments") and ir.MemRefType(base.type).has_static_shape


def _writer_among(base, latest_first) -> tuple[bool, object]:
    """Walking back through ``latest_first`` (ops of one block, latest first): (True, the
    all-parallel generic that wrote the whole allocation ``base``) at the first op that
    writes it, (True, None) if that op is anything else, (False, None) if none of the ops
    writes it (the answer lies further back)."""
    from mlir import ir

    for prev in latest_first:
        if prev.name == "linalg.generic":
            seg = list(ir.DenseI32ArrayAttr(prev.attributes["operandSegmentSizes"]))
            outs = list(prev.operands)[seg[0]:]
            if not any(root(o) == base for o in outs):
                continue
            its = [str(a) for a in ir.ArrayAttr(prev.attributes["iterator_types"])]
            out_map = ir.AffineMapAttr(
                list(ir.ArrayAttr(prev.attributes["indexing_maps"]))[-1]).value
            bijective = out_map.is_permutation
            whole = _numel(outs[-1].type) == _numel(base.type) if len(outs) == 1 else False
            if whole and bijective and all("parallel" in t for t in its):
                return True, prev
            return True, None
        if may_write(prev, base):
            return True, None
    return False, None


def defined_by_views(v, between) -> bool:
    """Whether buffer ``v`` is an allocation, or views of one, each either defined before
    the ops ``between`` or by one of them from the previous one alone (so that the chain can
    move in front of them: :func:`hoist_definition`)."""
    while not hasattr(v.owner, "arguments"):
        o = _op(v.owner)
        if o not in between:
            return True
        if o.name == "memref.alloc":
            return len(o.operands) == 0
        if o.name not in VIEW_OPS or len(o.operands) != 1:
            return False
        v = o.operands[0]
    return True


def next_memory_op(ops, k):
    """Index of the first op after ``ops[k]`` that touches memory (views, allocations and
    constants skipped: :data:`NO_MEMORY_EFFECTS`), or None when there is none."""
    at = k + 1
    while at < len(ops) and ops[at].name in NO_MEMORY_EFFECTS:
        at += 1
    return at if at < len(ops) else None


def hoist_definition(v, op) -> None:
    """Move the ops defining buffer ``v`` that come after ``op`` (an allocation and views
    of it, :func:`defined_by_views`) in front of ``op``, the allocation first."""
    chain = []
    ops = [_op(o) for o in op.operation.block.operations]
    after = ops[next(i for i, o in enumerate(ops) if o == op) + 1:]
    while not hasattr(v.owner, "arguments") and _op(v.owner) in after:
        chain.append(_op(v.owner))
        if chain[-1].name == "memref.alloc":
            break
        v = chain[-1].operands[0]
    for o in reversed(chain):
        o.move_before(op)


def arena_span(v):
    """(first byte, end) of the planned arena slot of the allocation ``v`` views, or None
    when it has none (a function argument, a pinned buffer)."""
    from latch.passes.plan_memory import planned_range

    base = root(v)
    return None if hasattr(base.owner, "arguments") else planned_range(_op(base.owner))


def slots_overlap(a, b) -> bool:
    """Whether two :func:`arena_span` results share bytes (None shares nothing)."""
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def may_share_bytes(a, b) -> bool:
    """Whether buffers ``a`` and ``b`` may address a common byte: views of one allocation,
    or allocations whose planned slots overlap (distinct arguments and allocations
    without overlapping slots are distinct buffers)."""
    return root(a) == root(b) or slots_overlap(arena_span(a), arena_span(b))


def _numel(t) -> int:
    from mlir import ir

    n = 1
    for x in ir.MemRefType(t).shape:
        n *= x
    return n


def may_write(op, alloc) -> bool:
    """Whether ``op`` (or anything nested in it) may write the allocation ``alloc``."""
    from mlir import ir

    if op.name == "gpu.launch_func":      # a kernel may write any buffer it is given
        return any(isinstance(v.type, ir.MemRefType) and root(v) == alloc for v in op.operands)
    if op.name in VIEW_OPS or op.name in ("memref.alloc", "memref.dealloc", "memref.load",
                                           "memref.get_global") or \
            op.name.startswith(("arith.", "math.", "index.", "gpu.")) and not op.regions:
        return False
    if op.name == "memref.store":
        return root(op.operands[1]) == alloc
    if op.name == "memref.copy":
        return root(op.operands[1]) == alloc
    if op.name == "linalg.generic":
        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        return any(root(o) == alloc for o in list(op.operands)[seg[0]:])
    if op.name in ("scf.yield", "scf.reduce", "linalg.yield", "func.return"):
        return False
    if any(isinstance(v.type, ir.MemRefType) and root(v) == alloc for v in op.operands):
        return True                       # e.g. a named linalg op or a call taking it
    return any(may_write(_op(inner), alloc) for region in op.regions
               for blk in region.blocks for inner in blk.operations)


def static_box(view):
    """(offsets, sizes) of ``view`` when it is one ``memref.subview`` with static offsets,
    sizes and unit strides of an allocation of the same rank; else None."""
    from mlir import ir

    if hasattr(view.owner, "arguments") or _op(view.owner).name != "memref.subview":
        return None
    sub = _op(view.owner)
    base = sub.operands[0]
    if len(sub.operands) != 1 or root(base) != base:
        return None
    offsets = list(ir.DenseI64ArrayAttr(sub.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(sub.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(sub.attributes["static_strides"]))
    if len(sizes) != len(ir.MemRefType(base.type).shape) or any(s != 1 for s in strides):
        return None
    return offsets, sizes


def box_in(view, base):
    """(offsets, sizes) within the allocation ``base`` of ``view``: a static unit-stride
    subview of it, possibly reshaped, or an identity-layout ``memref.reinterpret_cast`` of
    it covering whole rows from its start; the whole of it for ``base`` itself; None when
    not known."""
    from mlir import ir

    while view != base:
        if hasattr(view.owner, "arguments"):
            return None
        op = _op(view.owner)
        if op.name == "memref.subview":
            return static_box(view)
        if op.name == "memref.reinterpret_cast":
            return _prefix_box(view, base) if op.operands[0] == base else None
        if op.name not in RESHAPES:
            return None
        view = op.operands[0]
    return [0] * len(ir.MemRefType(base.type).shape), list(ir.MemRefType(base.type).shape)


def identity_layout(t) -> bool:
    """Whether the ``ir.MemRefType`` ``t`` has the identity (row-major, offset 0) layout."""
    from mlir import ir

    return isinstance(t.layout, ir.AffineMapAttr) and \
        ir.AffineMapAttr(t.layout).value == ir.AffineMap.get_identity(len(t.shape))


def whole_view(v) -> bool:
    """Whether buffer ``v`` is a whole allocation, or a view of all of it in the same
    row-major order: static shapes, identity layouts, the same element type and count."""
    from mlir import ir

    base = root(v)
    if not isinstance(base.type, ir.MemRefType) or hasattr(base.owner, "arguments"):
        return False
    t, b = ir.MemRefType(v.type), ir.MemRefType(base.type)
    return t.has_static_shape and b.has_static_shape and identity_layout(t) and \
        identity_layout(b) and t.element_type == b.element_type and \
        _numel(t) == _numel(b)


def covers(loop, where, shape) -> bool:
    """Whether the ``scf.parallel`` ``loop``, indexing a buffer of ``shape`` at ``where``,
    visits each element once: every index is a different induction variable of the loop
    (in any order), each running from 0 to its dimension's size in steps of one."""
    ivs = list(loop.regions[0].blocks[0].arguments)
    n = len(ivs)
    operands = list(loop.operands)
    if len(where) != len(shape) or len(ivs) != len(shape) or len(operands) != 3 * n:
        return False
    position = {}
    for d, v in enumerate(where):
        k = next((k for k, iv in enumerate(ivs) if iv == v), None)
        if k is None or k in position:
            return False
        position[k] = d
    lows, highs, steps = operands[:n], operands[n:2 * n], operands[2 * n:]
    return all(int_constant(lows[k]) == 0 and int_constant(steps[k]) == 1 and
               int_constant(highs[k]) == shape[d] for k, d in position.items())


def _prefix_box(view, base):
    """The box of ``base`` that the identity-layout reinterpretation ``view`` of it covers
    (its first elements, in row-major order), when that is whole rows; else None."""
    from mlir import ir

    t = ir.MemRefType(view.type)
    shape = list(ir.MemRefType(base.type).shape)
    if not identity_layout(t) or not shape:
        return None
    n = 1
    for d in t.shape:
        n *= d
    inner = 1
    for d in shape[1:]:
        inner *= d
    if n % inner or n // inner > shape[0]:
        return None
    return [0] * len(shape), [n // inner] + shape[1:]


def boxes_disjoint(a, b) -> bool:
    """Whether two (offsets, sizes) boxes of one buffer share no element (None: unknown)."""
    return a is not None and b is not None and any(
        oa + sa <= ob or ob + sb <= oa for oa, sa, ob, sb in zip(a[0], a[1], b[0], b[1]))


def memrefs_used(op) -> list:
    """The memrefs ``op`` or an op nested in it uses."""
    from mlir import ir

    return [v for v in op.operands if isinstance(v.type, ir.MemRefType)] + memrefs_in_body(op)


def memrefs_in_body(op) -> list:
    """The memrefs the ops nested in ``op`` use."""
    found = []
    for region in op.regions:
        for blk in region.blocks:
            for inner in blk.operations:
                found.extend(memrefs_used(_op(inner)))
    return found


def generic_reads(generic) -> list:
    """The buffers ``generic`` reads: its inputs and the memrefs its body loads from."""
    from mlir import ir

    from latch.passes.generic_body import segments

    n_in, _ = segments(generic)
    return [v for v in list(generic.operands)[:n_in] if isinstance(v.type, ir.MemRefType)] \
        + memrefs_in_body(generic)


def block_position(op, block, position) -> int:
    """Position in ``block`` of ``op`` or of the op of ``block`` it is nested in (-1: none)."""
    while op.block != block:
        if op.parent is None:
            return -1
        op = _op(op.parent)
    return position.get(op, -1)
