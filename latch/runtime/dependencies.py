"""Which earlier launches each launch must wait for, from the byte ranges each launch can
address (pure Python: used by the compiler, passes/launch_dependencies.py, and by the
runtime, latch.runtime.pipelined, which orders launches of two updates in one graph).

``touched[i]`` lists launch ``i``'s ranges as ``(space, first byte, end byte, may write)``,
``space`` naming the buffer the range is in (``"arena"``, ``"state 3"``, ``"input 0"``,
``"output 0"``), optionally followed by ``(period, first, width)``: of the range only the
bytes whose offset in the space, modulo ``period``, lies in ``[first, first + width)``
(circularly) — the rows of a strided view, such as the query, key and value parts of a
fused ``[tokens, 3, heads, dim]`` gradient that attention's dQ and dK/dV kernels write.
A read depends on the last earlier launch that may have written one of its bytes; a write
on that one and on every launch that read one of its bytes since (read-after-write,
write-after-read, write-after-write; two readers are not ordered).  Ordering is
transitive, so these are enough: a segment of a space keeps its last writers — one, or
several whose strided parts of it are not covered by a later write — and the readers since.
"""
from __future__ import annotations

import bisect


def _cover(starts: list, segs: list, lo: int, hi: int) -> tuple[int, int]:
    """Split and fill ``segs`` (disjoint [lo, hi, writers, readers], sorted) so that
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
            segs.insert(k, [at, end, (), ()])
            starts.insert(k, at)
            at = end
        k += 1
    return j, k


def _lanes(r) -> tuple | None:
    """The (period, first, width) of a touched range, None for every byte of it."""
    return tuple(r[4]) if len(r) > 4 and r[4] is not None else None


def overlap(a, b) -> bool:
    """Whether two ranges' lanes (:func:`_lanes`) may share a byte: unless both are
    strided with one period and their parts of it are apart."""
    if a is None or b is None or a[0] != b[0]:
        return True
    period = a[0]
    return (b[1] - a[1]) % period < a[2] or (a[1] - b[1]) % period < b[2]


def _covers(a, b) -> bool:
    """Whether lanes ``a`` hold every byte of lanes ``b`` (within one range)."""
    if a is None:
        return True
    if b is None or a[0] != b[0]:
        return False
    return (b[1] - a[1]) % a[0] + b[2] <= a[2]


def launch_dependencies(touched: list) -> list[list[int]]:
    """``touched[i]``: the (space, first byte, end byte, may write[, (period, first,
    width)]) ranges launch ``i`` can address.  Returns, per launch, the sorted indices of
    the earlier launches it must follow."""
    last: dict = {}               # space -> (starts, segments [lo, hi, writers, readers])
    out = []
    ancestors = []                # per launch: a bitmask of every launch ordered before it
    for i, ranges in enumerate(touched):
        deps, strided = set(), set()
        for r in ranges:
            space, lo, hi, write = r[:4]
            if hi <= lo:
                continue
            lanes = _lanes(r)
            starts, segs = last.setdefault(space, ([], []))
            j, k = _cover(starts, segs, lo, hi)
            for s in segs[j:k]:
                for e, el in s[2] + (s[3] if write else ()):
                    if overlap(lanes, el):
                        (deps if lanes is None and el is None else strided).add(e)
        for r in sorted(ranges, key=lambda r: r[3]):            # reads, then writes
            space, lo, hi, write = r[:4]
            if hi <= lo:
                continue
            lanes = _lanes(r)
            starts, segs = last[space]
            j, k = _cover(starts, segs, lo, hi)
            for s in segs[j:k]:
                if write:     # the last writer of its bytes; earlier ones of other lanes stay
                    s[2] = tuple(e for e in s[2] if not _covers(lanes, e[1])) + ((i, lanes),)
                    s[3] = tuple(e for e in s[3] if not _covers(lanes, e[1]))
                elif (i, lanes) not in s[3]:
                    s[3] = s[3] + ((i, lanes),)
        # a strided range's writers stay the last writers of their rows until a write
        # covers them: the edges to those already ordered before another are left out
        every = deps | strided
        deps |= {e for e in strided
                 if not any(ancestors[f] >> e & 1 for f in every if f != e)}
        deps.discard(i)
        out.append(sorted(deps))
        mask = 0
        for d in deps:
            mask |= ancestors[d] | 1 << d
        ancestors.append(mask)
    return out
