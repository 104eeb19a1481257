"""Which stream each launch of an update goes on, so that the CUDA graph captured from them
runs kernels concurrently where the compiler found them independent.

Each launch of a manifest may list ``after``: the earlier launches it must follow (for a
byte it reads, the last launch that may have written it; for a byte it may write, that one
and the launches that read it since; passes/launch_dependencies.py).  :func:`plan` puts the
launches on ``streams`` streams (0 is the program's own stream).  ``policy="chains"``
(the default): each launch names one *successor*, the dependent launch with the longest
chain of launches after it (ties: the earliest), and a launch continues the stream of a
dependency whose successor it is while that stream ends there (of several, the one with
the longest chain before it); otherwise it takes, among
the streams whose last launch has no successor still to come, the one idle longest (any
idle-longest stream when none is free).  So the longest chains of the update — at B2 its
critical path — stay on one stream, where consecutive kernels overlap their launches
(programmatic dependent launch) instead of meeting across streams.  ``policy="greedy"``: a
launch continues the stream of its latest dependency when that dependency is the stream's
last launch, else it takes the stream that has been idle longest.  For every dependency on
another stream it
waits for that launch's event first (unless the stream is already ordered after a later
launch of that stream).  The caller records each launch's event where ``record`` says, and
at the end makes stream 0 wait for the last launch of every other stream, so the guard and
the copies that follow see the whole update.  Captured into a CUDA graph, the waits are the
graph's edges.  A stream's launches run in order, so the plan can only add ordering, never
lose one of the dependencies.
"""
from __future__ import annotations

import dataclasses
import os

STREAMS = 8     # the program's stream and seven more (LATCH_STREAMS=1: one stream, in order);
                # TinyMoE B2 on the H200: 14.57 ms on 1, 13.09 on 4, 12.80 on 8
                # (tinymoe_bench-20261201T011847Z.json, …T013956Z.json, …T013911Z.json)


POLICIES = ("chains", "greedy")


def streams_wanted() -> int:
    return max(1, int(os.environ.get("LATCH_STREAMS", STREAMS)))


def policy_wanted() -> str:
    """``LATCH_STREAM_PLAN`` (default ``chains``)."""
    from latch.runtime.env import choice
    return choice("LATCH_STREAM_PLAN", "chains", POLICIES)


@dataclasses.dataclass
class StreamPlan:
    stream: list        # per launch: its stream (0: the program's stream)
    waits: list         # per launch: launches on other streams whose events it waits for
    record: list        # per launch: whether to record its event after it
    tails: list         # the last launch of each other stream used (stream 0 waits for them)
    used: list          # the other streams used (they wait for stream 0's start first)


def successors(after: list) -> list:
    """Per launch: the dependent launch with the longest chain of launches after it (ties:
    the earliest), or None when nothing depends on it."""
    n = len(after)
    children = [[] for _ in range(n)]
    for i, deps in enumerate(after):
        if any(not 0 <= d < i for d in deps):
            raise ValueError(f"launch {i}: 'after' must list earlier launches, got {deps}")
        for d in deps:
            children[d].append(i)
    chain = [1] * n                       # launches on the longest chain starting here
    for i in reversed(range(n)):
        if children[i]:
            chain[i] = 1 + max(chain[c] for c in children[i])
    return [min(children[i], key=lambda c: (-chain[c], c)) if children[i] else None
            for i in range(n)]


def depths(after: list) -> list:
    """Per launch: the launches on the longest chain that ends with it."""
    depth = []
    for deps in after:
        depth.append(1 + max((depth[d] for d in deps), default=0))
    return depth


def plan(after: list, streams: int = STREAMS, policy: str = "chains",
         pinned: list | None = None, avoid: frozenset = frozenset()) -> StreamPlan:
    """``pinned``: per launch, the stream it must go on, or None (the policy chooses);
    the policy never chooses a stream in ``avoid`` or one that a launch is pinned to."""
    n = len(after)
    pinned = pinned or [None] * n
    reserved = set(avoid) | {p for p in pinned if p is not None}
    open_ = [k for k in range(streams) if k not in reserved]
    if not open_:
        raise ValueError("stream plan: every stream is reserved")
    if policy not in POLICIES:
        raise ValueError(f"stream plan policy {policy!r}; expected one of {POLICIES}")
    chains = policy == "chains"
    succ = successors(after) if chains else None
    depth = depths(after) if chains else None
    stream, waits, record = [0] * n, [[] for _ in range(n)], [False] * n
    tail = [None] * streams
    seen = [[-1] * streams for _ in range(streams)]   # seen[s][x]: latest launch of x s follows

    def idle_longest(candidates):
        return min(candidates, key=lambda k: -1 if tail[k] is None else tail[k])

    for i, deps in enumerate(after):
        if any(not 0 <= d < i for d in deps):
            raise ValueError(f"launch {i}: 'after' must list earlier launches, got {deps}")
        if pinned[i] is not None:
            s = pinned[i]
        elif chains:
            s = next((stream[d] for d in sorted(deps, key=lambda d: (-depth[d], -d))
                      if tail[stream[d]] == d and succ[d] == i and stream[d] not in reserved),
                     None)
            if s is None:        # streams whose last launch waits for no successor to come
                free = [k for k in open_
                        if tail[k] is None or succ[tail[k]] is None or succ[tail[k]] < i]
                s = idle_longest(free or open_)
        else:
            s = next((stream[d] for d in sorted(deps, reverse=True)
                      if tail[stream[d]] == d and stream[d] not in reserved), None)
            if s is None:
                s = idle_longest(open_)
        for d in sorted(deps, reverse=True):
            x = stream[d]
            if x != s and seen[s][x] < d:
                waits[i].append(d)
                record[d] = True
                seen[s][x] = d
        stream[i], tail[s] = s, i
    tails = [t for k, t in enumerate(tail) if k and t is not None]
    for t in tails:
        record[t] = True
    used = [k for k in range(1, streams) if tail[k] is not None]
    return StreamPlan(stream, waits, record, tails, used)


class Events:
    """The CUDA events one enqueue of a plan records: one per launch that a launch on
    another stream waits for (or that stream 0 joins at the end), and the fork that the
    other streams start after.  Kept alive with the CUDA graph captured from them."""

    def __init__(self, plan: StreamPlan):
        from latch.runtime import driver as drv

        self.at = {i: drv.Event(timing=False) for i, r in enumerate(plan.record) if r}
        self.fork = drv.Event(timing=False)

    def destroy(self) -> None:
        for event in list(self.at.values()) + [self.fork]:
            event.destroy()
        self.at = {}


def enqueue(plan: StreamPlan, launches: list, main, side: list, events: Events) -> None:
    """Enqueue ``launches`` on ``main`` (stream 0) and the ``side`` streams by ``plan``: the
    side streams start after what ``main`` holds so far, each launch first waits for its
    dependencies on other streams, and ``main`` ends waiting for every side stream."""
    on = [main] + list(side)
    events.fork.record(main)
    for k in plan.used:
        on[k].wait(events.fork)
    for i, launch in enumerate(launches):
        s = on[plan.stream[i]]
        for d in plan.waits[i]:
            s.wait(events.at[d])
        launch.enqueue(s)
        if plan.record[i]:
            events.at[i].record(s)
    for t in plan.tails:
        main.wait(events.at[t])
