"""``latch-lower-collectives``: ``latch.all_reduce`` on tensors → one flat bucket buffer
reduced in place (stage 'buffers', before one-shot bufferization).

For each tensor-form ``latch.all_reduce`` (a bucket of gradients, see
:mod:`latch.distributed`)::

    %r:2 = "latch.all_reduce"(%g0, %g1) {bucket = 0, reduction = "mean"}
        : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)

becomes one buffer holding the bucket's values back to back (each slice 256-byte aligned), a copy of each value into its
slice, the buffer form of the op, and tensors read back from the slices::

    %b  = memref.alloc() : memref<128xf32>
    %s0 = memref.reinterpret_cast %b to offset: [0], sizes: [4, 8], strides: [8, 1]
    memref.copy (bufferization.to_buffer %g0), %s0
    %s1 = memref.reinterpret_cast %b to offset: [64], sizes: [8], strides: [1]
    memref.copy (bufferization.to_buffer %g1), %s1
    "latch.all_reduce"(%b) {bucket = 0, reduction = "mean"} : (memref<128xf32>) -> ()
    %r0 = bufferization.to_tensor %s0 restrict ...

One collective call then reduces the whole bucket (NCCL's cost per call is fixed), and the
slices are ordinary buffers to the memory plan and the kernels that read them.  Run
``latch-schedule-collectives`` after bufferization to move each bucket next to the end of
its gradients' computation.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-lower-collectives,
one-shot-bufferize{bufferize-function-boundaries})'``
"""
from __future__ import annotations

import math

from latch.errors import PassError
from latch.passes.base import ModulePass, function_definitions, operation as _op


def _all_reduces(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = _op(inner)
                if inner.name == "latch.all_reduce" and len(inner.results):
                    yield inner
                yield from _all_reduces(inner)


class LowerCollectives(ModulePass):
    name = "latch-lower-collectives"
    summary = ("latch.all_reduce on tensors -> copies into one flat bucket buffer reduced in "
               "place (run before one-shot bufferization)")

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            for op in list(_all_reduces(func_op)):
                _lower(op)


def _contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.insert(0, acc)
        acc *= d
    return strides


def _lower(op) -> None:
    from mlir import ir

    types = [ir.RankedTensorType(v.type) for v in op.operands]
    for t in types:
        if not t.has_static_shape:
            raise PassError(f"latch-lower-collectives: '{op.name}' of a dynamically shaped "
                            f"tensor {t}; buckets need static shapes", op.location)
    element = types[0].element_type
    # every slice starts 256-byte aligned, as every buffer of the memory plan does (kernels
    # may use vector loads); the padding is reduced along, never read
    step = max(1, _ALIGN // _element_bytes(element))
    sizes = [-(-math.prod(t.shape) // step) * step for t in types]
    total = sum(sizes)
    flat = ir.MemRefType.get([total], element)
    i64 = ir.IntegerType.get_signless(64)
    with ir.InsertionPoint(op), op.location:
        bucket = ir.Operation.create(
            "memref.alloc", results=[flat], operands=[],
            attributes={"alignment": ir.IntegerAttr.get(i64, 256),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])}).result
        slices, offset = [], 0
        for value, t, n in zip(op.operands, types, sizes):
            shape = list(t.shape)
            strides = _contiguous_strides(shape)
            layout = ir.StridedLayoutAttr.get(offset, strides)
            view_type = ir.MemRefType.get(shape, element, layout)
            view = ir.Operation.create(
                "memref.reinterpret_cast", results=[view_type], operands=[bucket],
                attributes={
                    "static_offsets": ir.DenseI64ArrayAttr.get([offset]),
                    "static_sizes": ir.DenseI64ArrayAttr.get(shape),
                    "static_strides": ir.DenseI64ArrayAttr.get(strides),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0])}).result
            src = ir.Operation.create(
                "bufferization.to_buffer", results=[ir.MemRefType.get(shape, element)],
                operands=[value], attributes={"read_only": ir.UnitAttr.get()}).result
            ir.Operation.create("memref.copy", results=[], operands=[src, view])
            slices.append(view)
            offset += n
        ir.Operation.create("latch.all_reduce", results=[], operands=[bucket],
                            attributes={"bucket": op.attributes["bucket"],
                                        "reduction": op.attributes["reduction"]})
        for result, view, t in zip(op.results, slices, types):
            back = ir.Operation.create(
                "bufferization.to_tensor", results=[t], operands=[view],
                attributes={"restrict": ir.UnitAttr.get()}).result
            result.replace_all_uses_with(back)
    op.erase()


_ALIGN = 256


def _element_bytes(t) -> int:
    from mlir import ir

    return max(1, ir.FloatType(t).width // 8)

