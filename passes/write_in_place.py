"""``latch-write-in-place``: an elementwise result that is next only copied into a part
of another buffer is written there directly (stage 'buffers', before latch-plan-memory).

One-shot bufferization leaves a copy wherever a tensor is inserted into a larger one:
``torch.cat([h, zero_row])`` (a padded expert buffer), the three gradients of a fused
q/k/v projection put side by side, ``new_zeros(...)`` followed by a slice assignment.
Each copy reads and writes the whole part again (TinyMoE B32: 100 to 250 MB per copy, four
per layer) after the generic that made it wrote it once.  Here an all-parallel
``linalg.generic`` writing a whole allocation (a permutation of its loops) that is next
used by a copy of it — a ``memref.copy`` or a copying generic, directly or through a
``collapse_shape``/``expand_shape`` — into a view of another allocation, and not read again
before it is next written whole, writes into that view instead (reshaped back to the
generic's shape), and the copy goes.  Between the two, other parts of the destination may
be written (the other blocks of a concatenation) and the destination may be filled whole
from a constant (the fill then moves in front of the generic; latch-forward-zero-fills
later fills only what the generic leaves); nothing else may touch that view.

Run before the memory plan, the plan sees the destination live from the generic on.  Run
after it (allocations with ``latch.offset``), the destination's slot must also share no
byte with the buffers the generic and the ops in between use (checked), since the plan let
those die before the copy.  The values are unchanged; only the bytes moved are fewer.
Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-write-in-place)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.generic_body import elementwise_output, segments
from latch.passes.buffer_views import (INERT, RESHAPES, arena_span, block_position,
                                       box_in, boxes_disjoint, generic_reads, identity_layout,
                                       memrefs_in_body, memrefs_used, root, slots_overlap,
                                       users)
from latch.passes.zero_fills import copy_pair


def _reshaped_to(view, shape_of, reshape):
    """``view`` reshaped by the inverse of the ``memref.collapse_shape`` or
    ``memref.expand_shape`` op ``reshape`` (which made a value of ``shape_of``'s shape
    into its result), at the current insertion point; None when the layout of ``view``
    does not allow it."""
    from mlir import ir

    t = ir.MemRefType(view.type)
    target = ir.MemRefType(shape_of.type).shape
    groups = [list(ir.ArrayAttr(g)) for g in ir.ArrayAttr(reshape.attributes["reassociation"])]
    groups = [[ir.IntegerAttr(d).value for d in g] for g in groups]
    strides, offset = t.get_strides_and_offset()
    identity = identity_layout(t)
    if reshape.name == "memref.collapse_shape":      # the copy read a collapse: expand
        new = []
        for g, s in zip(groups, strides):
            inner = s
            dims = []
            for d in reversed(g):
                dims.append(inner)
                inner *= target[d]
            new.extend(reversed(dims))
        name = "memref.expand_shape"
        attrs = {"reassociation": reshape.attributes["reassociation"],
                 "static_output_shape": ir.DenseI64ArrayAttr.get(target)}
    else:                                            # the copy read an expansion: collapse
        new = []
        for g in groups:
            for a, b in zip(g, g[1:]):
                if strides[a] != strides[b] * t.shape[b]:
                    return None                      # not contiguous: no collapse
            new.append(strides[g[-1]])
        name = "memref.collapse_shape"
        attrs = {"reassociation": reshape.attributes["reassociation"]}
    layout = None if identity else ir.StridedLayoutAttr.get(offset, new)
    result = ir.MemRefType.get(target, t.element_type, layout)
    op = ir.Operation.create(name, [result], [view], attributes=attrs)
    if not op.verify():
        op.erase()
        return None
    return op.result


def _as_identity(view, base):
    """``view`` as an identity-layout memref (a ``memref.reinterpret_cast`` of ``base``)
    when it is the contiguous start of ``base`` (offset 0, row-major strides): kernels,
    and the contraction kernels' direct bf16 outputs, take such buffers as they are
    (``cat([x, zero_row])``'s first rows); ``view`` itself otherwise."""
    from mlir import ir

    t = ir.MemRefType(view.type)
    if isinstance(t.layout, ir.AffineMapAttr):
        return view
    strides, offset = t.get_strides_and_offset()
    canonical, inner = [], 1
    for n in reversed(t.shape):
        canonical.insert(0, inner)
        inner *= n
    if offset != 0 or strides != canonical:
        return view
    return ir.Operation.create(
        "memref.reinterpret_cast", [ir.MemRefType.get(t.shape, t.element_type)], [base],
        attributes={"static_offsets": ir.DenseI64ArrayAttr.get([0]),
                    "static_sizes": ir.DenseI64ArrayAttr.get(t.shape),
                    "static_strides": ir.DenseI64ArrayAttr.get(canonical),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0])}).result


def _writer_of(source, copy, block, position):
    """The generic that last wrote the allocation ``source`` before ``copy`` (in ``block``),
    when it wrote all of it (:func:`_writes_whole`), nothing touches ``source`` between it
    and ``copy``, and nothing reads what it wrote after ``copy``: the next op touching
    ``source``, if any, writes it whole again without reading it.  (One-shot
    bufferization may give every layer's copy of one tensor the same allocation.)  None
    otherwise."""
    at = position[copy]
    before, after = [], []
    for user in users(source):
        i = block_position(user, block, position)
        if i < 0:
            return None
        if i < at:
            before.append((i, user))
        elif i > at:
            after.append((i, user))
    if not before:
        return None
    i, writer = max(before, key=lambda t: t[0])
    if sum(j == i for j, _ in before) > 1 or not _writes_whole(writer, source):
        return None
    if after:
        j, user = min(after, key=lambda t: t[0])
        if sum(k == j for k, _ in after) > 1 or not _writes_whole(user, source):
            return None
    return writer


def _writes_whole(op, source) -> bool:
    """Whether ``op`` is an all-parallel ``linalg.generic`` whose one output is the
    allocation ``source`` itself, indexed by a permutation of its loops (every element
    written once), and which reads nothing of ``source``."""
    out = elementwise_output(op)
    return out is not None and out == source and \
        not any(root(v) == source for v in generic_reads(op))


def _clear_between(writer, copy, ops, position, dest, box):
    """The ops to move in front of ``writer`` (fills of the whole of ``dest``) when the box
    ``box`` of the allocation ``dest`` may be written at ``writer`` instead of at ``copy``;
    None when it may not.  In between, other boxes of ``dest`` may be written (the other
    blocks of a concatenation) and ``dest`` may be filled whole from a constant (which then
    moves before ``writer``: ``cat([x, zeros])`` bufferized as zeros, then a copy of ``x``);
    nothing else may touch ``box``.  After the memory plan (``latch.offset``), no buffer
    that the writer or the ops in between use may share bytes with ``dest``'s slot (the
    plan let such buffers die before the copy)."""
    span = arena_span(dest)
    planned = not hasattr(dest.owner, "arguments") and \
        "latch.offset" in _op(dest.owner).attributes
    if planned and span is None:
        return None
    moved, seen = [], False      # a fill moves only if nothing touched dest before it
    for op in [writer] + ops[position[writer] + 1:position[copy]]:
        if op.name in INERT:
            continue
        touched = [v for v in (generic_reads(op) if op == writer else memrefs_used(op))
                   if root(v) == dest]
        if op != writer and touched and not seen and _fills_whole(op, dest):
            moved.append(op)
            seen = True
            continue
        seen = seen or bool(touched)
        if any(op == writer or not boxes_disjoint(box_in(v, dest), box) for v in touched):
            return None
        if planned and any(slots_overlap(span, arena_span(v)) for v in memrefs_used(op)
                           if root(v) != dest):
            return None
    return moved


def _fills_whole(op, dest) -> bool:
    """Whether ``op`` writes all of the allocation ``dest`` from a constant: a copy of a
    ``memref.get_global`` (of the same shape) or a generic with no memref operand but it."""
    from mlir import ir

    pair = copy_pair(op)
    if pair is not None:
        src = root(pair[0])
        return pair[1] == dest and not hasattr(src.owner, "arguments") and \
            _op(src.owner).name == "memref.get_global" and src == pair[0]
    out = elementwise_output(op)
    return out is not None and out == dest and not memrefs_in_body(op) and \
        [v for v in op.operands if isinstance(v.type, ir.MemRefType)] == [dest]


def write_in_place(block) -> int:
    """Generics whose result is next only copied into a view of another allocation write
    into that view.  Returns how many."""
    done, start = 0, 0
    while True:       # a rewrite erases and moves ops: list them again, go on after it
        ops = [_op(o) for o in block.operations]
        position = {o: i for i, o in enumerate(ops)}
        for at in range(start, len(ops)):
            writer = _write_copied_in_place(ops[at], block, ops, position)
            if writer is not None:
                break
        else:
            return done
        done += writer[0]
        # ops before the writer are unchanged (only views, the destination and its fill
        # moved in front of it): continue at the writer when it changed, else after the copy
        start = [_op(o) for o in block.operations].index(writer[1]) + 1 - writer[0]


def _write_copied_in_place(copy, block, ops, position):
    """Rewrite ``copy`` (any op of ``block``) when it is a copy of a generic's whole result
    into a view of another allocation.  Returns (1, generic) when the generic now writes
    into the view, (0, copy) when only ops were moved in front of the generic, None when
    nothing changed."""
    from mlir import ir

    pair = copy_pair(copy)
    if pair is None:
        return None
    src, dst = pair
    chain = []                      # the reshapes from the written allocation to src
    source = src
    while not hasattr(source.owner, "arguments") and _op(source.owner).name in RESHAPES:
        chain.append(_op(source.owner))
        source = chain[-1].operands[0]
    if len(chain) > 1 or hasattr(source.owner, "arguments") or \
            _op(source.owner).name != "memref.alloc" or \
            not ir.MemRefType(source.type).has_static_shape:
        return None
    dest = root(dst)
    if hasattr(dest.owner, "arguments") or _op(dest.owner).name != "memref.alloc" or \
            dest == source:
        return None
    writer = _writer_of(source, copy, block, position)
    if writer is None:
        return None
    fills = _clear_between(writer, copy, ops, position, dest, box_in(dst, dest))
    if fills is None:
        return None
    view_ops = []                   # dst's views of dest, outermost last
    v = dst
    while v != dest:
        view_ops.append(_op(v.owner))
        v = view_ops[-1].operands[0]
    if any(len(o.operands) != 1 for o in view_ops) or \
            any(len(f.operands) != 2 or position[_op(f.operands[0].owner)] >
                position[writer] for f in fills if f.name == "memref.copy"):
        return None                    # dynamic views, or a fill's source defined later
    # the destination, its fill and its views come before the writer
    for o in [_op(dest.owner)] + fills + list(reversed(view_ops)):
        if position[o] > position[writer]:
            o.move_before(writer)
    with ir.InsertionPoint(writer), writer.location:
        shaped = dst if not chain else _reshaped_to(dst, source, chain[0])
        target = None if shaped is None else _as_identity(shaped, dest)
    if target is None or ir.MemRefType(target.type).shape != \
            ir.MemRefType(source.type).shape:
        return 0, copy
    writer.operands[segments(writer)[0]] = target
    copy.erase()
    if target != shaped:            # the strided views it replaces, if nothing else uses them
        views = [shaped] + [o.results[0] for o in view_ops]
        for v in dict.fromkeys(views):          # shaped is dst when there is no reshape
            if not list(v.uses):
                _op(v.owner).erase()
    for o in reversed(chain):
        if not list(o.results[0].uses):
            o.erase()
    if not list(source.uses):
        _op(source.owner).erase()
    return 1, writer


@dataclasses.dataclass(frozen=True)
class WriteInPlace(ModulePass):
    name = "latch-write-in-place"
    summary = ("an elementwise result next only copied into a view of another buffer is "
               "written there (before the memory plan)")

    def apply(self, module) -> None:
        for f in function_definitions(module):
            write_in_place(f.regions[0].blocks[0])
