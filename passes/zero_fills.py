"""``latch-forward-zero-fills``: a copy of an all-zero buffer becomes a zero fill of its
destination, and zero fills nothing reads go (stage 'kernels', before
latch-form-contraction-kernels).

Functional PyTorch code makes zeros and then copies them: ``x.new_zeros(n, d).index_add(0,
slot, src)`` (one-shot bufferization copies the zeros into the buffer the scatter writes),
an expert's output accumulated into a copy of a zero tensor, the same zero tensor copied
into every layer's buffer.  Each copy reads as many bytes as it writes; a fill only writes
(TinyMoE B32: 252 to 335 MB per copy, a few per layer).  This pass, run after
latch-wrap-host-compute has turned ``memref.copy`` into copying generics:

* replaces every copying ``linalg.generic`` whose source was last written, whole, by a
  generic writing 0.0 or integer 0 (nothing else writing it in between) by a generic writing
  that zero into the copy's destination — which latch-form-contraction-kernels then
  recognizes as an output zeroed right before a product (the product writes its sums and
  the fill goes), and latch-fold-zero-fills before a reduction left to loops (TinyMoE's
  integer routing rank);
* erases the zero fills of allocations that nothing reads any more (their copies were the
  only readers);
* fills only what the next write leaves: a zero fill of a whole allocation whose next use
  writes a box of it (a copy into a view, or a generic writing one whole) spanning every
  dimension but one from one end of it fills the rest of that dimension instead, after
  that write (``cat([x, zero_row])``: one row instead of the whole buffer).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-wrap-host-compute,
latch-forward-zero-fills)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.buffer_views import (LastWriters, block_position, box_in, generic_reads,
                                       root, users)
from latch.passes.form_contraction_kernels import copied_buffer, writes_zero
from latch.passes.generic_body import elementwise_output, zero_of


def _copy_operands(op):
    """(source, destination) of a copying generic that reads and writes the same element
    (the same indexing of both, all loops parallel), else None."""
    from mlir import ir

    if op.name != "linalg.generic":
        return None
    src = copied_buffer(op)
    maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
    if src is None or str(maps[0]) != str(maps[1]) or \
            not all("parallel" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    return src, op.operands[1]


def _fill(dst, indexing_map, iterators, attributes):
    """``linalg.generic outs(dst) { yield 0 }`` at the current insertion point (the
    constant made here: the source fill's may live in its body, which may go)."""
    from mlir import ir

    elt = ir.MemRefType(dst.type).element_type
    zero = zero_of(elt)
    attrs = {"indexing_maps": ir.ArrayAttr.get([indexing_map]), "iterator_types": iterators,
             "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 1])}
    attrs.update(attributes)
    op = ir.Operation.create("linalg.generic", [], [dst], attributes=attrs, regions=1)
    block = op.regions[0].blocks.append(elt)
    with ir.InsertionPoint(block):
        ir.Operation.create("linalg.yield", [], [zero])
    return _op(op)


def copy_pair(op):
    """(source, destination) of a ``memref.copy`` or of a copying ``linalg.generic``."""
    if op.name == "memref.copy":
        return op.operands[0], op.operands[1]
    return _copy_operands(op)


def _rest(shape, offsets, sizes):
    """(offsets, sizes) of the part of ``shape`` that the box (``offsets``, ``sizes``)
    leaves, when that is one box: the box spans every dimension but one, from one end of it.
    None otherwise (or when the box is everything)."""
    short = [d for d, (n, o, s) in enumerate(zip(shape, offsets, sizes)) if (o, s) != (0, n)]
    if len(short) != 1:
        return None
    d = short[0]
    rest_offsets, rest_sizes = [0] * len(shape), list(shape)
    if offsets[d] == 0:
        rest_offsets[d], rest_sizes[d] = sizes[d], shape[d] - sizes[d]
    elif offsets[d] + sizes[d] == shape[d]:
        rest_sizes[d] = offsets[d]
    else:
        return None
    return rest_offsets, rest_sizes


def _subview(base, offsets, sizes):
    """``memref.subview`` of the identity-layout ``base`` at (``offsets``, ``sizes``),
    unit strides, at the current insertion point."""
    from mlir import ir

    t = ir.MemRefType(base.type)
    strides, _ = t.get_strides_and_offset()
    offset = sum(o * s for o, s in zip(offsets, strides))
    layout = ir.StridedLayoutAttr.get(offset, strides)
    result = ir.MemRefType.get(sizes, t.element_type, layout)
    return ir.Operation.create(
        "memref.subview", [result], [base],
        attributes={"static_offsets": ir.DenseI64ArrayAttr.get(offsets),
                    "static_sizes": ir.DenseI64ArrayAttr.get(sizes),
                    "static_strides": ir.DenseI64ArrayAttr.get([1] * len(sizes)),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0])}).result


def _box_written(op, base):
    """The box of the allocation ``base`` that ``op`` writes whole without reading
    ``base``: a copy into a view of it, or an all-parallel generic whose one output is such
    a view indexed by a permutation of its loops.  None otherwise."""
    pair = copy_pair(op)
    if pair is not None:
        dst = pair[1]
        if root(pair[0]) == base:
            return None
    else:
        dst = elementwise_output(op)
        if dst is None or any(root(v) == base for v in generic_reads(op)):
            return None
    return box_in(dst, base) if root(dst) == base else None


def shrink_fills(block) -> int:
    """Zero fills of whole allocations whose next use writes a box of it that leaves one
    box (a copy into a view, or a generic writing one): fill only that box, after that
    use.  Returns how many."""
    from mlir import ir

    done = 0
    ops = [_op(o) for o in block.operations]
    position = {o: i for i, o in enumerate(ops)}
    for fill in ops:
        if not writes_zero(fill) or fill.name != "linalg.generic":
            continue
        out = fill.operands[len(fill.operands) - 1]
        if root(out) != out or hasattr(out.owner, "arguments") or \
                _op(out.owner).name != "memref.alloc":
            continue
        at = position[fill]
        later = [(block_position(u, block, position), u) for u in users(out)]
        later = sorted((t for t in later if t[0] > at), key=lambda t: t[0])
        if not later or later[0][1].block != block or \
                len(later) > 1 and later[1][0] == later[0][0]:
            continue
        copy = later[0][1]
        box = _box_written(copy, out)
        rest = _rest(ir.MemRefType(out.type).shape, *box) if box else None
        if rest is None:
            continue
        with ir.InsertionPoint.after(copy), fill.location:
            part = _subview(out, *rest)
            rank = len(rest[1])
            identity = ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))
            parallel = ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")]
                                        * rank)
            keep = {n: fill.attributes[n] for n in fill.attributes if n.startswith("latch.")}
            _fill(part, identity, parallel, keep)
        fill.erase()
        done += 1
    return done


@dataclasses.dataclass(frozen=True)
class ForwardZeroFills(ModulePass):
    name = "latch-forward-zero-fills"
    summary = ("copies of an all-zero buffer -> zero fills of the destination; zero fills "
               "of allocations nothing reads are erased")

    def apply(self, module) -> None:
        from mlir import ir

        for f in function_definitions(module):
            block = f.regions[0].blocks[0]
            ops = [_op(o) for o in block.operations]     # kept in step with the block
            writers = LastWriters(ops)
            for i, op in enumerate(ops):
                pair = _copy_operands(op)
                if pair is None:
                    continue
                src, dst = pair
                source_fill = writers.at(src, i)
                if source_fill is None or not writes_zero(source_fill):
                    continue
                maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
                keep = {n: op.attributes[n] for n in op.attributes if n.startswith("latch.")}
                with ir.InsertionPoint(op), op.location:
                    ops[i] = _fill(dst, maps[1], op.attributes["iterator_types"], keep)
                op.erase()
            shrink_fills(block)
            # zero fills of allocations that nothing reads
            for op in list(block.operations):
                op = _op(op)
                if not writes_zero(op):
                    continue
                base = root(op.operands[len(op.operands) - 1])
                if hasattr(base.owner, "arguments") or _op(base.owner).name != "memref.alloc":
                    continue
                if all(writes_zero(u) for u in users(base)):
                    op.erase()
