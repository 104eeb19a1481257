"""Which stream each launch of an update goes on, so that the CUDA graph captured from them
runs kernels concurrently where the compiler found them independent.

Each launch of a manifest may list ``after``: the earlier launches it must follow (for a
byte it reads, the last launch that may have written it; for a byte it may write, that one
and the launches that read it since; passes/launch_dependencies.py).  :func:`plan` puts the
launches on ``streams`` streams (0 is the program's own stream): a launch continues the
stream of its latest dependency when that dependency is the stream's last launch, else it
takes the stream that has been idle longest; for every dependency on another stream it
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


def streams_wanted() -> int:
    return max(1, int(os.environ.get("LATCH_STREAMS", STREAMS)))


@dataclasses.dataclass
class StreamPlan:
    stream: list        # per launch: its stream (0: the program's stream)
    waits: list         # per launch: launches on other streams whose events it waits for
    record: list        # per launch: whether to record its event after it
    tails: list         # the last launch of each other stream used (stream 0 waits for them)
    used: list          # the other streams used (they wait for stream 0's start first)


def plan(after: list, streams: int = STREAMS) -> StreamPlan:
    n = len(after)
    stream, waits, record = [0] * n, [[] for _ in range(n)], [False] * n
    tail = [None] * streams
    seen = [[-1] * streams for _ in range(streams)]   # seen[s][x]: latest launch of x s follows
    for i, deps in enumerate(after):
        if any(not 0 <= d < i for d in deps):
            raise ValueError(f"launch {i}: 'after' must list earlier launches, got {deps}")
        s = next((stream[d] for d in sorted(deps, reverse=True) if tail[stream[d]] == d), None)
        if s is None:
            s = min(range(streams), key=lambda k: -1 if tail[k] is None else tail[k])
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
