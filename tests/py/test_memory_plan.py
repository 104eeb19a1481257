"""The arena planner behind latch-plan-memory."""
from latch.passes.plan_memory import Buffer, plan_buffers


def _overlap(a, b):
    return a.start <= b.end and b.start <= a.end


def test_disjoint_lifetimes_share_memory():
    bufs = [Buffer(None, 1000, 0, 1), Buffer(None, 1000, 2, 3), Buffer(None, 1000, 4, 5)]
    assert plan_buffers(bufs, 256) == 1024
    assert {b.offset for b in bufs} == {0}


def test_overlapping_lifetimes_never_share_bytes():
    import random

    rng = random.Random(0)
    for _ in range(50):
        bufs = []
        for _ in range(12):
            s = rng.randrange(20)
            bufs.append(Buffer(None, rng.randrange(1, 5000), s, s + rng.randrange(6)))
        arena = plan_buffers(bufs, 64)
        for b in bufs:
            assert b.offset % 64 == 0 and b.offset + b.size <= arena
        for i, a in enumerate(bufs):
            for b in bufs[i + 1:]:
                if _overlap(a, b):
                    assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset
        assert arena <= sum((b.size + 63) // 64 * 64 for b in bufs)
