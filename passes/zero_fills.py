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
  generic writing 0.0 (nothing else writing it in between) by a generic writing 0.0 into the
  copy's destination — which latch-form-contraction-kernels then recognizes as an output
  zeroed right before a product (the product writes its sums and the fill goes);
* erases the zero fills of allocations that nothing reads any more (their copies were the
  only readers).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-wrap-host-compute,
latch-forward-zero-fills)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.buffer_views import LastWriters, root, users
from latch.passes.form_contraction_kernels import copied_buffer, writes_zero


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
    """``linalg.generic outs(dst) { yield 0.0 }`` at the current insertion point (the
    constant made here: the source fill's may live in its body, which may go)."""
    from mlir import ir

    elt = ir.MemRefType(dst.type).element_type
    zero = ir.Operation.create("arith.constant", [elt],
                               attributes={"value": ir.FloatAttr.get(elt, 0.0)}).result
    attrs = {"indexing_maps": ir.ArrayAttr.get([indexing_map]), "iterator_types": iterators,
             "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 1])}
    attrs.update(attributes)
    op = ir.Operation.create("linalg.generic", [], [dst], attributes=attrs, regions=1)
    block = op.regions[0].blocks.append(elt)
    with ir.InsertionPoint(block):
        ir.Operation.create("linalg.yield", [], [zero])
    return _op(op)


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
