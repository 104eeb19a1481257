"""Which earlier launches each launch must wait for, from the byte ranges each launch can
address (pure Python: used by the compiler, passes/launch_dependencies.py, and by the
runtime, latch.runtime.pipelined, which orders launches of two updates in one graph).

``touched[i]`` lists launch ``i``'s ranges as ``(space, first byte, end byte, may write)``,
``space`` naming the buffer the range is in (``"arena"``, ``"state 3"``, ``"input 0"``,
``"output 0"``).  A read depends on the last earlier launch that may have written one of
its bytes; a write on that one and on every launch that read one of its bytes since
(read-after-write, write-after-read, write-after-write; two readers are not ordered).
Ordering is transitive, so these are enough.
"""
from __future__ import annotations

import bisect


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
