"""How a cuda step commits its new state: by swapping buffers where it can, else by copying.

A compiled step reads each state from its state buffer ``S`` and writes the new value into an
unshared arena slot ``N`` (``manifest["copies"]``: ``{"src": {"arena": a}, "dst": {"state":
k}, "bytes": n}``; the compiler appends those slots after the planned arena, so no other
value of the step ever lives there).  The non-finite guard then commits the step only when
the loss and every new floating-point state value are finite (:mod:`latch.runtime.guard`).

*Commit by copy* copies each ``N`` into its ``S`` inside the graph when the flag is set:
the whole new state is read and written once more every step (TinyMoE: 2.35 GB, ≈ 1.1 ms on
the H200).  *Commit by swap* instead keeps two graphs of the same update: parity 0 reads
``S`` and writes ``N``; parity 1 is the same launch list with every pointer into ``S``
redirected to ``N`` and every pointer into ``N`` to ``S`` (:func:`remap`), so it reads ``N``
and writes ``S``.  Committing a step is then flipping the parity on the host, which the host
does after reading the guard flag (the state API reads it with the loss anyway); a step
whose flag is cleared leaves the parity, so the live buffers are untouched, as before.

A state commits by swap (:func:`swap_slots`) when its new value comes from an unshared arena
slot of exactly its size that no other copy names; the program has one update variant (the
every(N) variants would each need their own parities) and no collectives; and
``LATCH_STATE_COMMIT`` is not ``copy``.  The other states keep the guarded copy.
"""
from __future__ import annotations

import bisect
import os


def swap_slots(manifest: dict) -> dict[int, tuple[int, int]]:
    """{state index: (arena offset, bytes)} of the states that commit by swap (see the
    module docstring); empty when the program cannot swap or ``LATCH_STATE_COMMIT=copy``."""
    mode = os.environ.get("LATCH_STATE_COMMIT", "swap")
    if mode not in ("swap", "copy"):
        from latch.errors import LatchError
        raise LatchError(f"LATCH_STATE_COMMIT={mode!r}; expected 'swap' or 'copy'")
    if mode == "copy" or len(manifest.get("variants") or [None]) != 1 or \
            manifest.get("collectives"):
        return {}
    planned = int(manifest.get("planned_arena_bytes", manifest.get("arena_bytes", 0)))
    states = manifest["states"]
    copies = manifest.get("copies", [])
    named = {}                                  # arena offset -> how many copies name it
    for c in copies:
        if "arena" in c["src"]:
            a = int(c["src"]["arena"]) + int(c["src"].get("byte_offset", 0))
            named[a] = named.get(a, 0) + 1
    slots = {}
    for c in copies:
        src, dst = c["src"], c["dst"]
        if "state" not in dst or set(src) != {"arena"}:
            continue
        k, a, n = int(dst["state"]), int(src["arena"]), int(c["bytes"])
        if a >= planned and named[a] == 1 and n == int(states[k]["bytes"]) and n > 0:
            slots[k] = (a, n)
    ranges = sorted(slots.values())
    for (a0, n0), (a1, _) in zip(ranges, ranges[1:]):
        if a0 + n0 > a1:                        # overlapping slots: not unshared after all
            return {}
    return slots


class Remap:
    """The location that parity 1 uses for a location of the manifest (``remap(loc)``): a
    byte of a swapped state's buffer becomes the same byte of its new-value slot, and the
    reverse; anything else is kept."""

    def __init__(self, slots: dict[int, tuple[int, int]]):
        self.slots = dict(slots)
        self._by_offset = sorted((a, n, k) for k, (a, n) in self.slots.items())
        self._starts = [a for a, _, _ in self._by_offset]

    def __call__(self, loc: dict) -> dict:
        off = int(loc.get("byte_offset", 0))
        if "state" in loc and int(loc["state"]) in self.slots:
            return {"arena": self.slots[int(loc["state"])][0], "byte_offset": off}
        if "arena" in loc and self._starts:
            at = int(loc["arena"]) + off
            i = bisect.bisect_right(self._starts, at) - 1
            if i >= 0:
                a, n, k = self._by_offset[i]
                if at < a + n:
                    return {"state": k, "byte_offset": at - a}
        return loc
