"""Concurrent launches: the compiler's per-launch dependencies (latch/runtime/dependencies.py)
order every two launches that may address a common byte, and the runtime's stream plan
(latch.runtime.streams) keeps every dependency — checked against brute force on random
schedules (test_cuda_target checks that a compiled update lists them)."""
from __future__ import annotations

import random

import pytest

from latch.runtime.dependencies import launch_dependencies
from latch.runtime.streams import plan, successors


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
            ranges.append((rng.choice(spaces), lo, lo + rng.randrange(0, 40),
                           rng.random() < 0.5))
        out.append(ranges)
    return out


def _conflict(a, b) -> bool:
    """Whether two launches' accesses share a byte that one of them may write."""
    return any(s == t and lo < hi2 and lo2 < hi and lo < hi and lo2 < hi2 and (w or w2)
               for s, lo, hi, w in a for t, lo2, hi2, w2 in b)


def test_dependencies_order_every_conflicting_pair_and_nothing_else():
    rng = random.Random(0)
    for _ in range(200):
        touched = _random_touches(rng, rng.randint(1, 30))
        deps = launch_dependencies(touched)
        before = _closure(len(touched), [(d, j) for j, ds in enumerate(deps) for d in ds])
        for j in range(len(touched)):
            assert all(_conflict(touched[d], touched[j]) for d in deps[j])  # real conflicts
            for i in range(j):
                if _conflict(touched[i], touched[j]):
                    assert i in before[j], (i, j, touched)


def test_disjoint_launches_and_readers_have_no_dependencies():
    W, R = True, False
    touched = [[("arena", 0, 64, W)], [("arena", 64, 128, W)], [("state 3", 0, 8, W)],
               [("arena", 32, 96, R)], [("arena", 0, 8, R)], [("arena", 0, 100, W)]]
    # the two readers (3, 4) follow the writers of their bytes, not each other; the last
    # writer follows both readers (and, through them, both writers)
    assert launch_dependencies(touched) == [[], [], [], [0, 1], [0], [0, 1, 3, 4]]


def _bytes(r) -> set:
    """The bytes a range addresses (its strided rows only, when it has lanes)."""
    space, lo, hi = r[:3]
    if len(r) > 4:
        period, first, width = r[4]
        return {(space, b) for b in range(lo, hi) if (b - first) % period < width}
    return {(space, b) for b in range(lo, hi)}


def _strided_touches(rng, n: int) -> list:
    """Random launches mixing whole ranges and strided rows (periods 12 and 16, parts of
    them), so that the same bytes are reached both ways."""
    out = []
    for _ in range(n):
        ranges = []
        for _ in range(rng.randint(0, 3)):
            lo = rng.randrange(0, 96)
            r = (rng.choice(["arena", "state 0"]), lo, lo + rng.randrange(0, 64),
                 rng.random() < 0.5)
            if rng.random() < 0.6:
                period = rng.choice([12, 16])
                width = rng.randrange(1, period)
                r += ((period, rng.randrange(period), width),)
            ranges.append(r)
        out.append(ranges)
    return out


def test_strided_rows_order_only_the_lanes_they_share():
    """Ranges with strided rows (the dQ / dK / dV kernels writing their parts of one fused
    gradient): every two launches that may write a common byte (brute force over the
    bytes) are ordered, and no dependency is listed without a shared byte."""
    rng = random.Random(1)
    for _ in range(300):
        touched = _strided_touches(rng, rng.randint(1, 25))
        deps = launch_dependencies(touched)
        before = _closure(len(touched), [(d, j) for j, ds in enumerate(deps) for d in ds])

        def conflict(a, b):
            return any((w or w2) and _bytes(r) & _bytes(q)
                       for r in a for q in b for w, w2 in [(r[3], q[3])])
        for j in range(len(touched)):
            for i in range(j):
                if conflict(touched[i], touched[j]):
                    assert i in before[j], (i, j, touched)
            for d in deps[j]:
                lanes = [(r[4] if len(r) > 4 else None) for r in touched[d] + touched[j]]
                if all(x is None for x in lanes):
                    assert conflict(touched[d], touched[j])


def test_the_parts_of_a_fused_gradient_are_written_side_by_side():
    """dQ and dK/dV write the query and the key and value parts of one [tokens, 3 x 1536
    bytes] buffer (rows 4608 bytes apart): not ordered with each other; the product that
    reads the whole buffer after them follows both (and the zero fill, which no strided
    write covers as a whole: a redundant edge, implied through either)."""
    W, R = True, False
    rows = ("arena", 0, 4608 * 4, W)
    touched = [[rows[:3] + (W,)],                                         # zero fill
               [("arena", 0, 4608 * 3 + 1536, W, (4608, 0, 1536))],         # dQ
               [("arena", 1536, 4608 * 3 + 3072, W, (4608, 1536, 1536)),    # dK
                ("arena", 3072, 4608 * 4, W, (4608, 3072, 1536))],          # dV
               [("arena", 0, 4608 * 4, R)]]                                 # qkv product
    assert launch_dependencies(touched) == [[], [0], [0], [0, 1, 2]]


def _random_dag(rng, n: int) -> list:
    return [sorted(rng.sample(range(i), rng.randint(0, min(i, 3)))) for i in range(n)]


@pytest.mark.parametrize("policy", ["chains", "greedy"])
@pytest.mark.parametrize("reserve", [False, True])
def test_stream_plan_keeps_every_dependency(policy, reserve):
    """Also with launches pinned to a stream and stream 0 avoided (latch.runtime.pipelined:
    the apply phase on a stream of its own)."""
    rng = random.Random(1)
    for streams in ((3, 4) if reserve else (1, 2, 4)):
        for _ in range(200):
            after = _random_dag(rng, rng.randint(1, 40))
            pinned = avoid = None
            if reserve:
                pinned = [streams - 1 if rng.random() < 0.3 else None for _ in after]
                avoid = frozenset({0})
                p = plan(after, streams, policy, pinned=pinned, avoid=avoid)
                assert all(s == q for s, q in zip(p.stream, pinned) if q is not None)
                reserved = avoid | {q for q in pinned if q is not None}
                assert all(s not in reserved for s, q in zip(p.stream, pinned) if q is None)
            else:
                p = plan(after, streams, policy)
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


@pytest.mark.parametrize("policy", ["chains", "greedy"])
def test_independent_chains_go_on_different_streams(policy):
    # two chains 0-2-4 and 1-3-5, then 6 joins them
    p = plan([[], [], [0], [1], [2], [3], [4, 5]], 4, policy)
    assert p.stream[0] == p.stream[2] == p.stream[4]
    assert p.stream[1] == p.stream[3] == p.stream[5] != p.stream[0]
    assert len(p.waits[6]) == 1


def test_the_longest_chain_stays_on_one_stream():
    # 0 forks into a leaf (1, launched first) and the chain 2-3-4; 5 joins the leaf late
    after = [[], [0], [0], [2], [3], [1, 4]]
    assert successors(after) == [2, 5, 3, 4, 5, None]
    greedy, chains = plan(after, 4, "greedy"), plan(after, 4, "chains")
    assert greedy.stream[1] == greedy.stream[0] != greedy.stream[2]   # the leaf took it
    assert chains.stream[0] == chains.stream[2] == chains.stream[3] == chains.stream[4] \
        == chains.stream[5] != chains.stream[1]
    assert chains.waits[2] == [] and greedy.waits[2] == [0]
    with pytest.raises(ValueError, match="policy"):
        plan(after, 4, "fastest")
    with pytest.raises(ValueError, match="every stream is reserved"):
        plan(after, 2, pinned=[1] + [None] * 5, avoid=frozenset({0}))


def test_stream_plan_policy_from_the_environment(monkeypatch):
    from latch.errors import LatchError
    from latch.runtime.streams import policy_wanted

    monkeypatch.delenv("LATCH_STREAM_PLAN", raising=False)
    assert policy_wanted() == "chains"
    monkeypatch.setenv("LATCH_STREAM_PLAN", "greedy")
    assert policy_wanted() == "greedy"
    monkeypatch.setenv("LATCH_STREAM_PLAN", "random")
    with pytest.raises(LatchError, match="LATCH_STREAM_PLAN"):
        policy_wanted()



def test_written_arguments_tells_reads_from_writes():
    """Loads (also through views) and an async copy's source only read — whatever the rank
    of its destination —; stores, atomics, an async copy's destination and anything
    unknown may write."""
    from mlir import ir

    import latch.dialect
    from latch.passes.launch_dependencies import written_arguments

    text = """
    module attributes {gpu.container_module} {
      gpu.module @m {
        gpu.func @k(%a: memref<64xf32>, %b: memref<8x8xf32>, %c: memref<64xf32>,
                    %d: memref<64xbf16>, %e: memref<64xf32>, %n: index, %f: memref<64xf32>,
                    %s: memref<64xbf16, #gpu.address_space<workgroup>>,
                    %g: memref<64x8xbf16>,
                    %s3: memref<2x4x8xbf16, #gpu.address_space<workgroup>>) kernel {
          %c0 = arith.constant 0 : index
          %x = memref.load %a[%c0] : memref<64xf32>
          %v = memref.subview %b[0, 0] [1, 8] [1, 1] : memref<8x8xf32> to memref<8xf32, strided<[1]>>
          %y = vector.load %v[%c0] : memref<8xf32, strided<[1]>>, vector<4xf32>
          memref.store %x, %c[%c0] : memref<64xf32>
          %t = nvgpu.device_async_copy %d[%c0], %s[%c0], 8 : memref<64xbf16> to memref<64xbf16, #gpu.address_space<workgroup>>
          %z = memref.atomic_rmw addf %x, %e[%c0] : (f32, memref<64xf32>) -> f32
          %t3 = nvgpu.device_async_copy %g[%c0, %c0], %s3[%c0, %c0, %c0], 8 : memref<64x8xbf16> to memref<2x4x8xbf16, #gpu.address_space<workgroup>>
          gpu.return
        }
      }
    }"""
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        m = ir.Module.parse(text)
        gm = next(o for o in m.body.operations if o.operation.name == "gpu.module")
        fn = next(iter(gm.regions[0].blocks[0].operations))
        # %g, copied into a [stage, row, column] buffer (the attention kernels' copies:
        # its source is operand 4), is only read
        assert written_arguments(fn) == [False, False, True, False, True, False, False, True,
                                         False, True]


def test_profilers_critical_path_is_the_heaviest_chain():
    """bench/gpu_profile_launches.py's critical path (what an update would take on unlimited
    streams with free launches) against brute force over every chain on small random
    schedules."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench",
                        "gpu_profile_launches.py")
    spec = importlib.util.spec_from_file_location("gpu_profile_launches", path)
    profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile)
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 9)
        after = [sorted(rng.sample(range(i), rng.randint(0, min(i, 3)))) for i in range(n)]
        ms = [rng.choice([0.5, 1.0, 2.0, 3.5]) for _ in range(n)]

        def heaviest(i):                      # the heaviest chain ending at launch i
            return ms[i] + max((heaviest(d) for d in after[i]), default=0.0)
        total, chain = profile.critical_path(after, ms)
        assert total == max(heaviest(i) for i in range(n))
        assert sum(ms[i] for i in chain) == total
        assert all(b in after[a] for a, b in zip(chain[1:], chain))
    assert profile.critical_path([[], None], [1.0, 1.0]) is None


def test_graph_tools_empty_kernel_and_arguments(capsys):
    """bench/gpu_graph_floor.py's empty kernel is PTX with nothing but the grid dependency
    control every Latch kernel begins with (so it can stand in for any launch of a
    dependent-launch graph), and the tool parses its arguments without a GPU (``--help``)."""
    import importlib.util
    import os

    bench = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
    tools = {}
    for name in ("gpu_graph_floor",):
        spec = importlib.util.spec_from_file_location(name, os.path.join(bench, f"{name}.py"))
        tools[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tools[name])
        with pytest.raises(SystemExit) as done:
            tools[name].main(["--help"])
        assert done.value.code == 0 and "--model" in capsys.readouterr().out
    ptx = tools["gpu_graph_floor"].EMPTY_PTX.format(chip="sm_90a")
    body = ptx[ptx.index("{"):]
    assert ".entry latch_empty()" in ptx and ".target sm_90a" in ptx
    assert [line.strip() for line in body.splitlines() if line.strip() not in ("{", "}")] == [
        "griddepcontrol.launch_dependents;", "griddepcontrol.wait;", "ret;"]


def test_a_misspelt_stream_plan_is_named(monkeypatch):
    """latch.runtime.env.choice: a LATCH_ switch outside its words fails naming it."""
    from latch.errors import LatchError
    from latch.runtime import streams
    monkeypatch.setenv("LATCH_STREAM_PLAN", "chain")
    with pytest.raises(LatchError, match=r"LATCH_STREAM_PLAN='chain'; expected one of "
                                         r"\('chains', 'greedy'\)"):
        streams.policy_wanted()
    monkeypatch.delenv("LATCH_STREAM_PLAN")
    assert streams.policy_wanted() == "chains"
