"""Concurrent launches: the compiler's per-launch dependencies (passes/launch_dependencies.py)
order every two launches that may address a common byte, and the runtime's stream plan
(latch.runtime.streams) keeps every dependency — checked against brute force on random
schedules (test_cuda_target checks that a compiled update lists them)."""
from __future__ import annotations

import random

from latch.passes.launch_dependencies import launch_dependencies
from latch.runtime.streams import plan


def _closure(n: int, edges: list) -> list:
    """before[j]: the set of launches ordered before j by ``edges`` (i -> j pairs)."""
    preds = [[] for _ in range(n)]
    for i, j in edges:
        preds[j].append(i)
    before = []
    for j in range(n):
        s = set()
        for i in preds[j]:
            s.add(i)
            s |= before[i]
        before.append(s)
    return before


def _random_touches(rng, n: int) -> list:
    spaces = ["arena", "state 0", "input 0"]
    out = []
    for _ in range(n):
        ranges = []
        for _ in range(rng.randint(0, 3)):
            lo = rng.randrange(0, 200)
            ranges.append((rng.choice(spaces), lo, lo + rng.randrange(0, 40)))
        out.append(ranges)
    return out


def _overlap(a, b) -> bool:
    return any(s == t and lo < hi2 and lo2 < hi and lo < hi and lo2 < hi2
               for s, lo, hi in a for t, lo2, hi2 in b)


def test_dependencies_order_every_overlapping_pair_and_nothing_else():
    rng = random.Random(0)
    for _ in range(200):
        touched = _random_touches(rng, rng.randint(1, 30))
        deps = launch_dependencies(touched)
        before = _closure(len(touched), [(d, j) for j, ds in enumerate(deps) for d in ds])
        for j in range(len(touched)):
            assert all(_overlap(touched[d], touched[j]) for d in deps[j])   # real conflicts
            for i in range(j):
                if _overlap(touched[i], touched[j]):
                    assert i in before[j], (i, j, touched)


def test_disjoint_launches_have_no_dependencies():
    touched = [[("arena", 0, 64)], [("arena", 64, 128)], [("state 3", 0, 8)],
               [("arena", 32, 96)], [("arena", 0, 8)]]
    # launch 4's bytes were last addressed by launch 0 (3 starts at byte 32)
    assert launch_dependencies(touched) == [[], [], [], [0, 1], [0]]


def _random_dag(rng, n: int) -> list:
    return [sorted(rng.sample(range(i), rng.randint(0, min(i, 3)))) for i in range(n)]


def test_stream_plan_keeps_every_dependency():
    rng = random.Random(1)
    for streams in (1, 2, 4):
        for _ in range(200):
            after = _random_dag(rng, rng.randint(1, 40))
            p = plan(after, streams)
            n = len(after)
            assert all(0 <= s < streams for s in p.stream)
            edges = []
            last = {}
            for i in range(n):               # a stream runs its launches in order
                if p.stream[i] in last:
                    edges.append((last[p.stream[i]], i))
                last[p.stream[i]] = i
                for d in p.waits[i]:
                    assert p.record[d] and p.stream[d] != p.stream[i]
                    edges.append((d, i))
            before = _closure(n, edges)
            for i, deps in enumerate(after):
                assert set(deps) <= before[i], (i, deps, p)
            # stream 0 ends after every other stream's last launch
            assert sorted(p.tails) == sorted(last[k] for k in last if k)
            assert all(p.record[t] for t in p.tails)


def test_independent_chains_go_on_different_streams():
    # two chains 0-2-4 and 1-3-5, then 6 joins them
    p = plan([[], [], [0], [1], [2], [3], [4, 5]], 4)
    assert p.stream[0] == p.stream[2] == p.stream[4]
    assert p.stream[1] == p.stream[3] == p.stream[5] != p.stream[0]
    assert len(p.waits[6]) == 1

