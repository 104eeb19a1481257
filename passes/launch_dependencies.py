"""Which earlier launches each launch of a schedule must wait for (stage 'artifact', part of
:func:`latch.passes.extract_launches.extract_launch_schedule`).

The launch list is a total order, and a CUDA graph captured from one stream replays it as a
chain: every kernel waits for the one before it, though most of an update's small kernels
do not touch each other's buffers (the 67 parameters' gradient-norm partial sums and AdamW
steps, the weight gradients next to the input gradients of the backward pass).  On a small
batch the chain is the cost: TinyMoE B2 replays 1,804 kernels in 14.6 ms, 8 us a kernel,
most of it the GPU waiting for the next one.

For every launch this module lists the earlier launches it depends on: for each byte its
buffer arguments can address (the range of each memref argument's type, in the arena or in a
state, input or output buffer), the last earlier launch that can address that byte.  Reads
and writes are not told apart, so any two launches that may share a byte stay ordered
(read-after-write, write-after-read and write-after-write alike; two readers are ordered
too, which costs concurrency, never correctness).  Ordering is transitive, so the last
toucher of each byte is enough.  The runtime (latch.runtime.program) records the launches on
a few streams with these edges, so the CUDA graph's kernels run concurrently where the
buffers allow.
"""
from __future__ import annotations

import bisect


def launch_dependencies(touched: list) -> list[list[int]]:
    """``touched[i]``: the (space, first byte, end byte) ranges launch ``i`` can address.
    Returns, per launch, the sorted indices of the earlier launches it must follow."""
    last: dict = {}           # space -> (starts, segments): disjoint [lo, hi, launch], by lo
    out = []
    for i, ranges in enumerate(touched):
        deps = set()
        for space, lo, hi in ranges:
            if hi <= lo:
                continue
            starts, segs = last.setdefault(space, ([], []))
            j = bisect.bisect_right(starts, lo) - 1
            if j < 0 or segs[j][1] <= lo:
                j += 1
            k = j
            while k < len(segs) and segs[k][0] < hi:
                if segs[k][2] != i:
                    deps.add(segs[k][2])
                k += 1
            new = []
            if j < k and segs[j][0] < lo:
                new.append([segs[j][0], lo, segs[j][2]])
            new.append([lo, hi, i])
            if j < k and segs[k - 1][1] > hi:
                new.append([hi, segs[k - 1][1], segs[k - 1][2]])
            segs[j:k] = new
            starts[j:k] = [s[0] for s in new]
        out.append(sorted(deps))
    return out
