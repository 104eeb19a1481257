"""One new-value slot per state for all update variants of a cuda program (stage 'artifact').

Each update function's launch schedule (passes/extract_launches.py) puts the buffers that
the memory plan does not place — among them every new state value — in *unshared* slots
appended after its planned arena, in the order the function allocates them.  The every(N)
variants of one program (passes/specialize_every.py) are separate functions, so the same
state's new value lands at a different offset in each.  Commit by swap
(latch/runtime/commit.py) needs one: after a committed step a swapped state lives in its
new-value slot, and whichever variant runs next must read it there (and write the next
value into the state buffer).

:func:`share_state_slots` relocates the unshared part of every variant's arena: first one
slot per state that some variant writes into an unshared slot of exactly the state's size
(in state order, the same offset in every variant), then each variant's other unshared
buffers, each contiguous run between two state slots moved as a whole (offsets inside it
kept).  Every arena location of the variant (kernel arguments, copies, the non-finite flag,
collective buffers) is moved with the byte range it lies in; a one-to-one move of disjoint
ranges, so the launches' dependencies (computed from byte ranges) stay valid.  The planned
part below is untouched.
"""
from __future__ import annotations

import bisect

from latch.passes.extract_launches import ALIGNMENT


def _align(x: int) -> int:
    """Rounded up to the schedule's buffer alignment (as extract_launches places them)."""
    return -(-x // ALIGNMENT) * ALIGNMENT


def state_slots(schedule: dict) -> dict[int, tuple[int, int]]:
    """{state: (arena offset, bytes)} of the states whose new value this schedule copies
    from an unshared slot (after its planned arena) of exactly the state's size, named by
    no other copy: the rule of commit by swap (latch.runtime.commit.new_value_slots)."""
    from latch.runtime.commit import new_value_slots
    return new_value_slots(schedule.get("copies", []), schedule["states"],
                           int(schedule["planned_arena_bytes"]))


def share_state_slots(schedules: list[dict]) -> None:
    """Relocate each schedule's unshared slots (see the module docstring), in place; each
    schedule's ``arena_bytes`` becomes its new end."""
    if len(schedules) < 2:
        return
    per = [state_slots(s) for s in schedules]
    sizes: dict[int, int] = {}
    for slots in per:
        for k, (_, n) in slots.items():
            sizes.setdefault(k, n)
    start = _align(max(int(s["planned_arena_bytes"]) for s in schedules))
    shared, at = {}, start
    for k in sorted(sizes):
        shared[k] = at
        at = _align(at + sizes[k])
    others = at
    for sch, slots in zip(schedules, per):
        moves = _moves(sch, slots, shared, others)
        _relocate(sch, moves)
        sch["arena_bytes"] = max([others] + [new + (end - old) for old, end, new in moves])


def _moves(sch: dict, slots: dict, shared: dict, others: int) -> list:
    """[(old start, old end, new start)], sorted, covering the schedule's unshared part:
    its state slots to their shared offsets, the runs between them one after another from
    ``others`` on."""
    first, end = _align(int(sch["planned_arena_bytes"])), int(sch["arena_bytes"])
    moves, at, nxt = [], first, others
    for a, n, k in sorted((a, n, k) for k, (a, n) in slots.items()):
        if a > at:                                   # the run of other buffers before it
            moves.append((at, a, nxt))
            nxt = _align(nxt + (a - at))
        moves.append((a, a + n, shared[k]))
        at = _align(a + n)
    if end > at:
        moves.append((at, end, nxt))
    return moves


def _relocate(sch: dict, moves: list) -> None:
    starts = [m[0] for m in moves]

    def move(loc):
        if not isinstance(loc, dict) or "arena" not in loc or not moves:
            return
        a = int(loc["arena"])
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0 and a < moves[i][1]:
            old, _, new = moves[i]
            loc["arena"] = new + (a - old)

    for launch in sch.get("launches", []):
        for arg in launch.get("args", []):
            move(arg)
    for c in sch.get("copies", []):
        move(c["src"])
        move(c["dst"])
    move(sch.get("nonfinite_flag"))
    for c in sch.get("collectives", []):
        move(c.get("buffer"))
