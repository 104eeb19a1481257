"""Which earlier launches each launch of a schedule must wait for (stage 'artifact', part of
:func:`latch.passes.extract_launches.extract_launch_schedule`).

The launch list is a total order, and a CUDA graph captured from one stream replays it as a
chain: every kernel waits for the one before it, though most of an update's small kernels
do not touch each other's buffers (the 67 parameters' gradient-norm partial sums and AdamW
steps, the weight gradients next to the input gradients of the backward pass).  On a small
batch the chain is the cost: TinyMoE B2 replays 1,804 kernels in 14.6 ms, 8 us a kernel,
most of it the GPU waiting for the next one.

For every launch this module lists the earlier launches it depends on, from the byte ranges
its buffer arguments can address (each memref argument's type, in the arena or in a state,
input or output buffer) and whether the kernel may write through the argument
(:func:`written_arguments`): a read depends on the last earlier launch that may have written
one of its bytes; a write on that one and on every launch that read one of its bytes since
(read-after-write, write-after-read, write-after-write; two readers are not ordered:
:func:`latch.runtime.dependencies.launch_dependencies`, pure Python so that the runtime can
order the launches of two updates the same way).  The compiler also writes each launch's
ranges into the manifest (``touches``).  The runtime (latch.runtime.streams) records
the launches on a few streams with these edges, so the CUDA graph's kernels run
concurrently where the buffers allow.
"""
from __future__ import annotations

from latch.passes.base import operation as _op
from latch.passes.buffer_views import VIEW_OPS

# uses of a kernel's memref argument that only read it (through views)
_READS = ("memref.load", "vector.load", "memref.dim", "vector.transfer_read")


def written_arguments(kernel) -> list[bool]:
    """Per argument of ``gpu.func`` ``kernel``: whether the kernel may write through it
    (any use other than loads, directly or through views; an async copy reads its source
    operand only).  Not a memref argument: False."""
    from mlir import ir

    def writes(v) -> bool:
        for use in v.uses:
            user = _op(use.owner)
            if user.name in VIEW_OPS:
                if any(writes(r) for r in user.results):
                    return True
            elif user.name == "nvgpu.device_async_copy":
                # operands (dst, one index a dimension of dst, src, ...): a source copied
                # into a [stage, row, column] buffer is operand 4, not 2
                src = 1 + ir.MemRefType(user.operands[0].type).rank
                if use.operand_number != src:
                    return True
            elif user.name not in _READS:
                return True
        return False

    block = kernel.regions[0].blocks[0]
    return [isinstance(a.type, ir.MemRefType) and writes(a) for a in block.arguments]
