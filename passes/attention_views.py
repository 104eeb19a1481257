"""``latch-attention-views``: attention reads and writes its heads where they are instead of
through transposed copies (stage 'buffers', before latch-plan-memory).

A transformer splits the fused q/k/v projection ``[B, L, 3 * H * E]`` into heads and moves
the head axis in front: ``q.view(B, L, H, E).transpose(1, 2)``.  Bufferized, each of q, k,
v (and the output gradient dO) becomes a copy of a strided ``[B, L, H, E]`` view into a
contiguous ``[B, H, L, E]`` buffer for ``latch.attention`` / ``latch.attention_grad``, and
the gradients dQ, dK, dV are copied back the other way into the ``[B, L, 3 * H * E]``
gradient of the projection: seven copies of ``B * L * H * E`` elements a layer (TinyMoE
B32: 50 MB each, about 210 us a layer).  The attention kernels index a strided
``[B, H, L, E]`` view as well as a contiguous buffer (passes/attention_kernels.py), so:

* **inputs**: a buffer ``X`` written whole by a copying ``linalg.generic`` from a view ``Y``
  with ``X[b, h, l, e] = Y[b, l, h, e]``, and read afterwards only by attention ops and by
  elementwise or reduction generics (not by contractions, whose tiled kernels want
  contiguous factors), is replaced in those readers by the same bytes as ``Y``'s buffer
  seen as ``[B, H, L, E]`` (a ``memref.reinterpret_cast`` with ``Y``'s strides permuted),
  provided nothing writes ``Y``'s buffer from the copy to ``X``'s last reader; the copy
  goes;
* **outputs**: a gradient ``Z`` written by ``latch.attention_grad`` and then only copied by a
  generic into a view ``W`` with ``W[b, l, h, e] = Z[b, h, l, e]`` is written into ``W``
  directly (``W``'s buffer seen as ``[B, H, L, E]``), provided nothing between the two
  touches ``W``'s elements (the other gradients' copies into other parts of that buffer
  may); the copy goes.  When ``W``'s buffer is itself only reshaped and copied
  (``memref.copy``) into a part of another buffer — the three gradients put side by side
  as the fused projection's gradient — the attention writes that part instead.

Run before the memory plan, the plan keeps ``Y``'s buffer alive up to its new readers and
``W``'s from the attention on.  Strides must keep rows 16-byte aligned
(``attention_kernels.strided_view``); otherwise nothing changes.
Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-attention-views)'``
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.buffer_views import (INERT, VIEW_OPS, box_in, boxes_disjoint,
                                       identity_layout,
                                       may_write, memrefs_used, root)

_ATTENTION = {"latch.attention": (0, 1, 2), "latch.attention_grad": (0, 1, 2, 4)}
_GRADIENTS = {"latch.attention_grad": (6, 7, 8)}
_HEADS_SWAPPED = [0, 2, 1, 3]       # [B, H, L, E] <-> [B, L, H, E]


def _copy(g):
    """(input, output, perm) of a linalg.generic that copies its one memref input into its
    one output, output dim k walking input dim ``perm[k]``; else None."""
    from mlir import ir

    if g.name != "linalg.generic" or g.results:
        return None
    if list(ir.DenseI32ArrayAttr(g.attributes["operandSegmentSizes"])) != [1, 1]:
        return None
    src, dst = g.operands[0], g.operands[1]
    if not isinstance(src.type, ir.MemRefType):
        return None
    block = g.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    if len(body) != 1 or list(body[0].operands) != [block.arguments[0]]:
        return None
    if any("parallel" not in str(a) for a in ir.ArrayAttr(g.attributes["iterator_types"])):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    loops_in, loops_out = [], []
    for m, out in ((maps[0], loops_in), (maps[1], loops_out)):
        for e in m.results:
            if not isinstance(e, ir.AffineDimExpr):
                return None
            out.append(ir.AffineDimExpr(e).position)
    if sorted(loops_in) != sorted(loops_out) or len(set(loops_in)) != len(loops_in):
        return None
    perm = [loops_in.index(d) for d in loops_out]
    return src, dst, perm


def _view_type(t, perm):
    """The type of the bytes of view type ``t`` seen with its dims reordered: dim k of the
    result is dim ``perm[k]`` of ``t``."""
    from mlir import ir

    strides, offset = t.get_strides_and_offset()
    layout = ir.StridedLayoutAttr.get(offset, [strides[p] for p in perm])
    return ir.MemRefType.get([t.shape[p] for p in perm], t.element_type, layout,
                             t.memory_space)


def _reinterpret(base, t):
    """``memref.reinterpret_cast`` of the allocation ``base`` to the static strided type
    ``t`` (at the current insertion point)."""
    from mlir import ir

    strides, offset = t.get_strides_and_offset()
    i64 = ir.DenseI64ArrayAttr.get
    return ir.Operation.create(
        "memref.reinterpret_cast", [t], [base],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0]),
                    "static_offsets": i64([offset]), "static_sizes": i64(list(t.shape)),
                    "static_strides": i64(strides)}).result


def _usable(t) -> bool:
    from latch.passes.attention_kernels import strided_view
    return strided_view(t)


def _reader_ok(user, x) -> bool:
    """Whether ``user`` may read ``x`` through a strided view: an attention op reading it
    as an input, or a non-contraction generic reading it as an input only."""
    from mlir import ir

    if user.name in _ATTENTION:
        return all(i in _ATTENTION[user.name] for i, v in enumerate(user.operands) if v == x)
    if user.name != "linalg.generic":
        return False
    from latch.passes.form_contraction_kernels import match_contraction
    n_in = list(ir.DenseI32ArrayAttr(user.attributes["operandSegmentSizes"]))[0]
    if any(v == x for v in list(user.operands)[n_in:]):
        return False
    return match_contraction(user) is None


def _may_write(op, base) -> bool:
    """buffer_views.may_write, knowing which operands the attention ops write."""
    if op.name in _ATTENTION:
        written = {"latch.attention": (3, 4), "latch.attention_grad": (6, 7, 8)}[op.name]
        return any(root(op.operands[i]) == base for i in written)
    return may_write(op, base)


def _position(ops, op) -> int:
    return next(i for i, o in enumerate(ops) if o == op)


def _forward_input(ops, x) -> bool:
    """Replace the transposed copy that fills ``x`` (see the module docstring); True when
    done."""
    from mlir import ir

    if hasattr(x.owner, "arguments") or _op(x.owner).name != "memref.alloc" or \
            not identity_layout(ir.MemRefType(x.type)) or ir.MemRefType(x.type).rank != 4:
        return False
    users = [_op(u.owner) for u in x.uses]
    copies = [u for u in users if _copy(u) is not None and _copy(u)[1] == x]
    if len(copies) != 1:
        return False
    c = copies[0]
    y, _, perm = _copy(c)
    if perm != _HEADS_SWAPPED:
        return False
    view_t = _view_type(ir.MemRefType(y.type), perm)
    base = root(y)
    if not _usable(view_t) or not ir.MemRefType(y.type).has_static_shape or \
            not identity_layout(ir.MemRefType(base.type)):
        return False
    readers = [u for u in users if u != c]
    if not readers or any(not _reader_ok(u, x) for u in readers):
        return False
    if any(u.parent != c.parent for u in readers):
        return False
    at = _position(ops, c)
    last = max(_position(ops, u) for u in readers)
    if min(_position(ops, u) for u in readers) < at:
        return False
    if any(_may_write(o, base) for o in ops[at + 1:last]):
        return False
    with ir.InsertionPoint(c), c.location:
        view = _reinterpret(base, view_t)
    for u in readers:
        for i, v in enumerate(list(u.operands)):
            if v == x:
                u.operands[i] = view
    c.erase()
    if not list(x.uses):
        _op(x.owner).erase()
    return True


def _redirect(ops, a, i: int, w, base, view_t, copy) -> bool:
    """Make operand ``i`` of ``a`` the ``view_t`` reinterpretation of allocation ``base``
    (the copy destination ``w``'s elements) when the kernels can index it and nothing
    between ``a`` and ``copy`` touches ``w``'s elements; ``base``'s allocation moves in
    front of ``a``.  True when done."""
    from mlir import ir

    if not _usable(view_t):
        return False
    box = box_in(w, base)
    for o in ops[_position(ops, a) + 1:_position(ops, copy)]:
        if o.name in INERT:
            continue
        for v in memrefs_used(o):
            if root(v) == base and not boxes_disjoint(box, box_in(v, base)):
                return False
    alloc = _op(base.owner)
    if _position(ops, alloc) > _position(ops, a):
        alloc.move_before(a)
    with ir.InsertionPoint(a), a.location:
        a.operands[i] = _reinterpret(base, view_t)
    return True


def _write_output(ops, a, i: int) -> bool:
    """Make operand ``i`` of attention op ``a`` the destination of the transposed copy that
    is its only reader (module docstring); True when done."""
    from mlir import ir

    z = a.operands[i]
    if hasattr(z.owner, "arguments") or _op(z.owner).name != "memref.alloc" or \
            not identity_layout(ir.MemRefType(z.type)):
        return False
    users = [_op(u.owner) for u in z.uses if _op(u.owner) != a]
    if len(users) != 1 or _copy(users[0]) is None or _copy(users[0])[0] != z:
        return False
    c = users[0]
    _, w, perm = _copy(c)
    if c.parent != a.parent or _position(ops, c) < _position(ops, a):
        return False
    # the copy reads z[perm^-1]; z dim k is w dim q[k]
    q = [perm.index(k) for k in range(len(perm))]
    if q != _HEADS_SWAPPED:
        return False
    base = root(w)
    wt = ir.MemRefType(w.type)
    if hasattr(base.owner, "arguments") or _op(base.owner).name != "memref.alloc" or \
            not wt.has_static_shape or not identity_layout(ir.MemRefType(base.type)):
        return False
    if not _redirect(ops, a, i, w, base, _view_type(wt, q), c):
        return False
    c.erase()
    if not list(z.uses):
        _op(z.owner).erase()
    return True


def _write_through_copy(ops, a, i: int) -> bool:
    """When operand ``i`` of ``a`` is a view of an allocation ``P`` whose only other use is a
    reshape of it copied whole (``memref.copy``) into a view ``W`` of another allocation —
    the gradient put into its part of the fused projection's gradient — make the operand
    the same elements of ``W``'s allocation; the copy goes.  True when done."""
    from mlir import ir

    v = a.operands[i]
    if hasattr(v.owner, "arguments") or _op(v.owner).name != "memref.reinterpret_cast":
        return False
    p = _op(v.owner).operands[0]
    if hasattr(p.owner, "arguments") or _op(p.owner).name != "memref.alloc" or \
            not identity_layout(ir.MemRefType(p.type)):
        return False
    # bufferization may have reused P for other values (other layers' gradients) before a
    # and after the copy: the first access after a must be the copy reading P through a
    # collapse_shape, and the next one a whole write of P
    accesses = []                       # (position, op, view) of the ops accessing P
    for u in p.uses:
        o = _op(u.owner)
        if o.parent != a.parent:
            return False
        if o.name in VIEW_OPS:
            for uu in o.results[0].uses:
                user = _op(uu.owner)
                if user.parent != a.parent:
                    return False
                accesses.append((_position(ops, user), user, o))
        else:
            accesses.append((_position(ops, o), o, None))
    after = sorted((x for x in accesses if x[0] > _position(ops, a)), key=lambda x: x[0])
    if not after:
        return False
    _, copy, reshape = after[0]
    if copy.name != "memref.copy" or reshape is None or \
            reshape.name != "memref.collapse_shape" or copy.operands[0] != reshape.results[0]:
        return False
    if len(after) > 1 and not _overwritten_whole(after[1][2], p):
        return False
    w = copy.operands[1]
    base = root(w)
    wt, pt = ir.MemRefType(w.type), ir.MemRefType(p.type)
    if hasattr(base.owner, "arguments") or _op(base.owner).name != "memref.alloc" or \
            not identity_layout(ir.MemRefType(base.type)) or not wt.has_static_shape:
        return False
    # W's strides for P's dims: each collapsed group of P splits its W stride row-major
    groups = [[ir.IntegerAttr(d).value for d in ir.ArrayAttr(g)]
              for g in ir.ArrayAttr(reshape.attributes["reassociation"])]
    w_strides, w_offset = wt.get_strides_and_offset()
    p_in_w = [0] * pt.rank
    for g, stride in zip(groups, w_strides):
        inner = stride
        for d in reversed(g):
            p_in_w[d] = inner
            inner *= pt.shape[d]
    # the operand's dims as P's: matched by P's own (row-major) strides
    p_strides, _ = pt.get_strides_and_offset()
    v_strides, v_offset = ir.MemRefType(v.type).get_strides_and_offset()
    if v_offset != 0 or any(p_strides.count(x) != 1 for x in v_strides):
        return False
    vt = ir.MemRefType(v.type)
    layout = ir.StridedLayoutAttr.get(w_offset, [p_in_w[p_strides.index(x)] for x in v_strides])
    new_t = ir.MemRefType.get(list(vt.shape), vt.element_type, layout, vt.memory_space)
    view = _op(v.owner)
    if not _redirect(ops, a, i, w, base, new_t, copy):
        return False
    copy.erase()
    if not list(reshape.results[0].uses):
        reshape.erase()
    if not list(view.results[0].uses):
        view.erase()
    if not list(p.uses):
        _op(p.owner).erase()
    return True


def _overwritten_whole(view_op, p) -> bool:
    """Whether ``view_op`` (a use of allocation ``p``; None: a direct use) is a view of all
    of ``p`` used only as a gradient output of an attention op, which writes every element
    of it."""
    from mlir import ir

    if view_op is None or view_op.name != "memref.reinterpret_cast" or \
            math.prod(ir.MemRefType(view_op.results[0].type).shape) != \
            math.prod(ir.MemRefType(p.type).shape):
        return False
    users = [(_op(u.owner), u.operand_number) for u in view_op.results[0].uses]
    return bool(users) and all(o.name in _GRADIENTS and n in _GRADIENTS[o.name]
                               for o, n in users)


@dataclasses.dataclass(frozen=True)
class AttentionViews(ModulePass):
    name = "latch-attention-views"
    summary = ("attention reads q/k/v/dO and writes dQ/dK/dV as strided [B, H, L, E] views "
               "of the projection's buffers instead of through transposed copies")

    def apply(self, module) -> None:
        for f in function_definitions(module):
            block = f.regions[0].blocks[0]
            attention = [_op(o) for o in block.operations if _op(o).name in _ATTENTION]
            attention = [a for a in attention if not a.results]   # bufferized ones
            for a in attention:
                for i in _ATTENTION[a.name]:
                    ops = [_op(o) for o in block.operations]
                    _forward_input(ops, a.operands[i])
            # last first: a buffer reused by several layers' gradients is then known to be
            # overwritten whole by the later layer when an earlier one stops writing it
            for a in reversed(attention):
                for i in _GRADIENTS.get(a.name, ()):
                    ops = [_op(o) for o in block.operations]
                    if _write_output(ops, a, i):
                        _write_through_copy([_op(o) for o in block.operations], a, i)
