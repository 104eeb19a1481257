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
slot of exactly its size that no other copy names, the same slot in every update variant
that writes it (an every(N) program: latch/targets/state_slots.py gives each state one); the
program has no collectives; and ``LATCH_STATE_COMMIT`` is not ``copy``.  The other states
keep the guarded copy.  With several variants the parity is per state: the runtime keeps
the set of swapped states living in their new-value slot, and a committed step of a
variant flips the states that variant writes (:func:`written_states`); each variant has
launch tables and graphs per such set it meets (the selective updates meet four).
"""
from __future__ import annotations

import bisect


def new_value_slots(copies: list, states: list, planned: int) -> dict[int, tuple[int, int]]:
    """{state: (arena offset, bytes)} of the states whose new value ``copies`` (one update
    function's) copy from an unshared arena slot — at or after ``planned``, the end of the
    planned arena — of exactly the state's size, named by no other copy."""
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
    return slots


def swap_slots(manifest: dict) -> dict[int, tuple[int, int]]:
    """{state index: (arena offset, bytes)} of the states that commit by swap (see the
    module docstring); empty when the program cannot swap or ``LATCH_STATE_COMMIT=copy``.
    With every(N) variants, a state swaps when the variants that write it into an unshared
    slot all use the same one (latch/targets/state_slots.py gives each state one); a variant
    that writes it from elsewhere (e.g. one zero buffer that resets several accumulators)
    copies that value into the state's other buffer instead (:func:`copy_into_other`)."""
    from latch.runtime.env import choice
    mode = choice("LATCH_STATE_COMMIT", "swap", ("swap", "copy"))
    variants = manifest.get("variants") or [manifest]
    if mode == "copy" or manifest.get("collectives") or \
            any(v.get("collectives") for v in variants):
        return {}
    states = manifest["states"]
    slots: dict[int, tuple[int, int]] = {}
    refused: set[int] = set()
    for v in variants:
        planned = int(v.get("planned_arena_bytes", manifest.get(
            "planned_arena_bytes", manifest.get("arena_bytes", 0))))
        found = new_value_slots(v.get("copies", []), states, planned)
        for k, slot in found.items():
            if slots.setdefault(k, slot) != slot:
                refused.add(k)                  # two variants, two slots
    slots = {k: slot for k, slot in slots.items() if k not in refused}
    ranges = sorted(slots.values())
    for (a0, n0), (a1, _) in zip(ranges, ranges[1:]):
        if a0 + n0 > a1:                        # overlapping slots: not unshared after all
            return {}
    return slots


def copy_into_other(copy: dict, slots: dict) -> dict | None:
    """For a copy ``{"src", "dst": {"state": k}, "bytes"}`` of a swapped state ``k`` whose
    source is not ``k``'s new-value slot: the location it must be copied to — that slot,
    which a placement with ``k`` already in it maps to ``k``'s state buffer (the other
    buffer either way; the commit then moves ``k`` as for a swap).  None when the copy is
    not of that kind."""
    k = copy["dst"].get("state")
    if k is None or int(k) not in slots:
        return None
    a, _ = slots[int(k)]
    src = copy["src"]
    if set(src) == {"arena"} and int(src["arena"]) == a:
        return None                     # written in place: a plain swap
    return {"arena": a}


def written_states(variant: dict) -> set[int]:
    """The states an update variant (or a one-variant manifest) writes: its copies'."""
    return {int(c["dst"]["state"]) for c in variant.get("copies", []) if "state" in c["dst"]}


class Remap:
    """The location a launch uses for a location of the manifest when the states in
    ``swapped`` live in their new-value slots (``remap(loc, swapped)``; ``swapped`` None:
    all of them, the one-variant program's parity 1): a byte of such a state's buffer
    becomes the same byte of its new-value slot, and the reverse; anything else is kept."""

    def __init__(self, slots: dict[int, tuple[int, int]]):
        self.slots = dict(slots)
        self._by_offset = sorted((a, n, k) for k, (a, n) in self.slots.items())
        self._starts = [a for a, _, _ in self._by_offset]

    def __call__(self, loc: dict, swapped=None) -> dict:
        off = int(loc.get("byte_offset", 0))
        if "state" in loc and int(loc["state"]) in self.slots and \
                (swapped is None or int(loc["state"]) in swapped):
            return {"arena": self.slots[int(loc["state"])][0], "byte_offset": off}
        if "arena" in loc and self._starts:
            at = int(loc["arena"]) + off
            i = bisect.bisect_right(self._starts, at) - 1
            if i >= 0:
                a, n, k = self._by_offset[i]
                if at < a + n and (swapped is None or k in swapped):
                    return {"state": k, "byte_offset": at - a}
        return loc
