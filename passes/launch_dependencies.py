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
(read-after-write, write-after-read, write-after-write; two readers are not ordered).
Ordering is transitive, so these are enough.  The runtime (latch.runtime.streams) records
the launches on a few streams with these edges, so the CUDA graph's kernels run
concurrently where the buffers allow.
"""
from __future__ import annotations

import bisect

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
                if use.operand_number != 2:          # (dst, dst indices, src, ...)
                    return True
            elif user.name not in _READS:
                return True
        return False

    block = kernel.regions[0].blocks[0]
    return [isinstance(a.type, ir.MemRefType) and writes(a) for a in block.arguments]


def _cover(starts: list, segs: list, lo: int, hi: int) -> tuple[int, int]:
    """Split and fill ``segs`` (disjoint [lo, hi, writer, readers], sorted) so that
    segments ``j:k`` exactly tile [lo, hi); returns (j, k)."""
    j = bisect.bisect_right(starts, lo) - 1
    if j >= 0 and segs[j][1] > lo and segs[j][0] < lo:          # split at lo
        s = segs[j]
        segs[j:j + 1] = [[s[0], lo, s[2], s[3]], [lo, s[1], s[2], s[3]]]
        starts[j:j + 1] = [s[0], lo]
        j += 1
    elif j < 0 or segs[j][1] <= lo:
        j += 1
    k, at = j, lo
    while at < hi:
        if k < len(segs) and segs[k][0] <= at:                  # segs[k] starts at `at`
            s = segs[k]
            if s[1] > hi:                                       # split at hi
                segs[k:k + 1] = [[s[0], hi, s[2], s[3]], [hi, s[1], s[2], s[3]]]
                starts[k:k + 1] = [s[0], hi]
            at = segs[k][1]
        else:                                                   # a gap: an untouched piece
            end = min(hi, segs[k][0]) if k < len(segs) else hi
            segs.insert(k, [at, end, None, ()])
            starts.insert(k, at)
            at = end
        k += 1
    return j, k


def launch_dependencies(touched: list) -> list[list[int]]:
    """``touched[i]``: the (space, first byte, end byte, may write) ranges launch ``i`` can
    address.  Returns, per launch, the sorted indices of the earlier launches it must
    follow."""
    last: dict = {}               # space -> (starts, segments)
    out = []
    for i, ranges in enumerate(touched):
        deps = set()
        for space, lo, hi, write in ranges:
            if hi <= lo:
                continue
            starts, segs = last.setdefault(space, ([], []))
            j, k = _cover(starts, segs, lo, hi)
            for s in segs[j:k]:
                if s[2] is not None:
                    deps.add(s[2])
                if write:
                    deps.update(s[3])
        for space, lo, hi, write in sorted(ranges, key=lambda r: r[3]):   # reads, then writes
            if hi <= lo:
                continue
            starts, segs = last[space]
            j, k = _cover(starts, segs, lo, hi)
            for s in segs[j:k]:
                if write:
                    s[2], s[3] = i, ()
                elif i not in s[3]:
                    s[3] = s[3] + (i,)
        deps.discard(i)
        out.append(sorted(deps))
    return out
