"""Pipelined updates (latch.runtime.pipelined): the manifest's per-launch byte ranges, the
split of an update into its step and apply phases, the order of two updates' launches in
one graph — checked on the CPU against brute force — and, on a GPU, updates run pipelined
giving the same state, bit for bit, as updates run one after the other."""
from __future__ import annotations

import os

import pytest

from latch.errors import LatchError
from latch.runtime.dependencies import launch_dependencies
from latch.runtime.pipelined import apply_phase_start, combined_after, placed
from test_cuda_target import _adamw_clip, _has_gpu


@pytest.fixture(scope="module")
def tiny_moe():
    import latch
    from models import MODELS

    model, example = MODELS["tiny_moe"](seed=0)
    return model, example, latch.compile(model, _adamw_clip(), example, target="cuda")


def _closure(after: list) -> list:
    """before[j]: every launch ordered before j through ``after``."""
    before = []
    for deps in after:
        s = set(deps)
        for d in deps:
            s |= before[d]
        before.append(s)
    return before


def _conflict(a: list, b: list) -> bool:
    """Whether two launches' ranges share a byte that one of them may write (ranges with
    strided rows: unless their parts of one period are apart, latch.runtime.dependencies.
    overlap, itself checked byte by byte in test_launch_concurrency)."""
    from latch.runtime.dependencies import overlap

    def lanes(r):
        return tuple(r[4]) if len(r) > 4 else None

    return any(ra[0] == rb[0] and ra[1] < rb[2] and rb[1] < ra[2] and (ra[3] or rb[3])
               and overlap(lanes(ra), lanes(rb)) for ra in a for rb in b)


def test_every_launch_records_the_ranges_its_order_comes_from(tiny_moe):
    launches = tiny_moe[2].manifest["launches"]
    assert all("touches" in la for la in launches)
    touched = [[tuple(r) for r in la["touches"]] for la in launches]
    assert launch_dependencies(touched) == [la["after"] for la in launches]
    spaces = {r[0].split()[0] for t in touched for r in t}
    assert spaces == {"arena", "state", "input", "output"}


def test_the_apply_phase_is_the_optimizer_after_the_clip(tiny_moe):
    m = tiny_moe[2].manifest
    launches = m["launches"]
    s = apply_phase_start(launches)
    assert s is not None and 0 < s < len(launches)
    before = _closure([la["after"] for la in launches])
    assert all(s - 1 in before[j] for j in range(s, len(launches)))
    assert not any("output" in a for la in launches[s:] for a in la["args"]
                   if isinstance(a, dict))
    # the shortest such suffix: no later launch is depended on by all that follow it
    n = len(launches)
    assert not any(all(t - 1 in before[j] for j in range(t, n)) for t in range(s + 1, n))
    # each parameter's new value is written in the apply phase
    params = {k for k, st in enumerate(m["states"]) if st["kind"] == "param"}
    from latch.runtime import commit
    slots = commit.swap_slots(m)
    assert params <= set(slots)
    new_written = {k for la in launches[s:] for sp, lo, hi, w in la["touches"] if w
                   and sp == "arena" for k in params
                   if slots[k][0] <= lo and hi <= slots[k][0] + slots[k][1]}
    assert new_written == params


def test_no_apply_phase_without_the_dependency_lists():
    assert apply_phase_start([]) is None
    assert apply_phase_start([{"args": []}, {"args": []}]) is None
    # a chain: the shortest suffix after the output writer that hangs on one launch
    chain = [{"args": [{"output": 0}], "after": []}, {"args": [], "after": [0]},
             {"args": [], "after": [1]}, {"args": [], "after": [1]}]
    assert apply_phase_start(chain) == 2
    # two independent tails: none
    split = [{"args": [{"output": 0}], "after": []}, {"args": [], "after": []},
             {"args": [], "after": [1]}, {"args": [], "after": [0]}]
    assert apply_phase_start(split) is None


def test_placement_exchanges_a_swapped_states_two_buffers():
    slots = {3: (1000, 64)}
    t = [["state 3", 0, 64, False], ["arena", 1000, 1032, True], ["arena", 0, 8, True],
         ["state 1", 0, 4, False]]
    assert placed(t, frozenset(), slots) == [tuple(r) for r in t]
    assert placed(t, frozenset({3}), slots) == [
        ("arena", 1000, 1064, False), ("state 3", 0, 32, True), ("arena", 0, 8, True),
        ("state 1", 0, 4, False)]
    with pytest.raises(LatchError, match="across state 3's new-value slot"):
        placed([["arena", 990, 1010, True]], frozenset({3}), slots)


def test_combined_after_refuses_artifacts_without_ranges():
    with pytest.raises(LatchError, match="no 'touches'.*recompile"):
        combined_after([([{"module": "k"}], frozenset())], {})


@pytest.mark.parametrize("strided", [True, False], ids=["strided-rows", "default"])
def test_attention_gradients_into_one_fused_buffer_run_side_by_side(monkeypatch, strided):
    """With ``extract_launches.STRIDED_ROWS`` (off until timed on the GPU; build switch
    ``-sideparts``) the attention backward's dQ kernel and its dK/dV kernel, which write
    the query and the key and value parts of one fused [tokens, 3, heads, dim] gradient,
    carry strided rows in their ranges (``touches``' fifth element: period, first byte,
    width) and neither launch waits for the other; the launch that reads the whole
    gradient next follows both.  Without it, dK/dV follows dQ."""
    import latch
    import latch.passes.extract_launches as extract
    from models import MODELS

    monkeypatch.setattr(extract, "STRIDED_ROWS", strided)
    monkeypatch.setenv("LATCH_CACHE", "0")

    # the fused attention kernels of TinyMoE-196M: rows a multiple of 64, head dim 64
    model, example = MODELS["tiny_moe"](seed=0, seq=64, d=128, n_heads=2)
    prog = latch.compile(model, _adamw_clip(), example, target="cuda", precision="bf16")
    launches = prog.manifest["launches"]
    before = _closure([la["after"] for la in launches])
    pairs = [(i, i + 1) for i, la in enumerate(launches[:-1])
             if la["module"].startswith("latch_attention")
             and launches[i + 1]["module"].startswith("latch_attention")]
    assert pairs
    for dq, dkv in pairs:
        written = [t for t in launches[dq]["touches"] + launches[dkv]["touches"] if t[3]]
        assert len(written) == 3
        if not strided:
            assert all(len(t) == 4 for t in written) and dq in launches[dkv]["after"]
            continue
        assert all(len(t) > 4 for t in written), written
        assert len({t[4][0] for t in written}) == 1  # dQ, dK, dV: parts of one row
        assert dq not in before[dkv]
        readers = [j for j in range(dkv + 1, len(launches))
                   if dq in launches[j]["after"] or dkv in launches[j]["after"]]
        assert readers and dq in before[readers[-1]] and dkv in before[readers[-1]]


def test_two_updates_in_one_graph_keep_every_conflicting_pair_in_order(tiny_moe):
    """The steady graph (the apply phase of update t in its placement, then the step phase
    of update t + 1 in the other) orders every two launches that address a common byte,
    one of them writing, as running them one after the other would (brute force); and it
    is not a chain: the first launch of the next update waits for few apply launches."""
    from latch.runtime import commit

    m = tiny_moe[2].manifest
    launches = m["launches"]
    s = apply_phase_start(launches)
    slots = commit.swap_slots(m)
    flips = frozenset(k for k in commit.written_states(m) if k in slots)
    for at in (frozenset(), flips):
        parts = [(launches[s:], at), (launches[:s], at ^ flips)]
        after = combined_after(parts, slots)
        before = _closure(after)
        touched = [placed(la["touches"], place, slots) for specs, place in parts
                   for la in specs]
        n_apply = len(launches) - s
        for j in range(n_apply, len(touched)):
            for i in range(n_apply):
                if _conflict(touched[i], touched[j]):
                    assert i in before[j], (i, j)
        gating = [i for i in range(n_apply) if i in before[n_apply]]
        assert len(gating) < n_apply


def test_programs_it_cannot_pipeline_are_refused_before_any_gpu_work():
    """every(N) variants, data-parallel programs, states that commit by copy and a launch
    list without an apply phase: a LatchError naming the reason (no stream is made)."""
    from types import SimpleNamespace as NS

    from latch.runtime.pipelined import PipelinedUpdates

    def prog(variants=1, collectives=(), copies=(), slots=None, launches=None):
        spec = {"collectives": list(collectives), "copies": list(copies),
                "launches": launches if launches is not None else []}
        v = NS(spec=spec, flips=frozenset())
        return NS(variants=[v] * variants, swap=NS(slots=slots or {}))

    with pytest.raises(LatchError, match="every\\(N\\) variants"):
        PipelinedUpdates(prog(variants=2))
    with pytest.raises(LatchError, match="data-parallel"):
        PipelinedUpdates(prog(collectives=[{"op": "all_reduce"}]))
    with pytest.raises(LatchError, match="commit by swap.*states \\[0\\] commit by copy"):
        PipelinedUpdates(prog(copies=[{"src": {"arena": 0}, "dst": {"state": 0}}]))
    with pytest.raises(LatchError, match="no apply phase"):
        PipelinedUpdates(prog(launches=[{"args": [], "after": []}]))


def test_side_by_side_parts_are_ordered_within_not_between(tiny_moe):
    from latch.runtime import commit
    from latch.runtime.pipelined import side_by_side_after

    m = tiny_moe[2].manifest
    launches = m["launches"]
    s = apply_phase_start(launches)
    slots = commit.swap_slots(m)
    after = side_by_side_after([(launches[s:], frozenset()), (launches[:s], frozenset())],
                               slots)
    n_apply = len(launches) - s
    assert after[:n_apply] == combined_after([(launches[s:], frozenset())], slots)
    assert after[n_apply:] == [[d + n_apply for d in la["after"]] for la in launches[:s]]


PREBUILT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench", "artifacts", "pipelined-tiny_moe-det.latch")


def build(path: str) -> None:
    """The GPU test's program: tiny_moe, AdamW + clip, ``deterministic=True`` (no float
    atomics, so two runs of the same updates agree bit for bit)."""
    import latch
    from models import MODELS

    model, example = MODELS["tiny_moe"](seed=0)
    latch.compile(model, _adamw_clip(), example, target="cuda", deterministic=True).save(path)


@pytest.mark.parametrize("apply_sms", [None, 16])
def test_pipelined_updates_give_the_same_state_bit_for_bit(tmp_path, apply_sms):
    """On a GPU: five updates pipelined give the losses and every state tensor of five
    updates one after the other, bit for bit — also with the optimizer launches in a green
    context of 16 SMs (``apply_sms``).  Compiles here when MLIR is available, else
    uses the prebuilt bench/artifacts/pipelined-tiny_moe-det.latch (``PYTHONPATH=tests/py
    .venv/bin/python tests/py/test_pipelined_updates.py`` writes it).  Skips without a
    GPU."""
    if not _has_gpu():
        pytest.skip("no CUDA GPU")
    try:
        import mlir.ir  # noqa: F401
        path = str(tmp_path / "tiny_moe.latch")
        build(path)
    except ImportError:
        path = PREBUILT
        if not os.path.exists(path):
            pytest.skip("no MLIR here and no prebuilt artifact")
    import torch

    import latch
    from latch.runtime.pipelined import PipelinedUpdates
    from models import MODELS

    model, example = MODELS["tiny_moe"](seed=0)
    inputs = [x.cuda() for x in example]
    one = latch.load(path)
    state = one.init(model)
    seq = [one.step(state, *inputs) for _ in range(5)]
    want = one.state_dict()
    two = latch.load(path)
    two.init(model)
    runner = PipelinedUpdates(two, apply_sms=apply_sms)
    if apply_sms:
        assert runner.green.sms >= apply_sms
    got_losses = [float(runner.step(*inputs)) for _ in range(5)]
    runner.flush()
    got = two.state_dict()
    assert got_losses == seq
    for name in want:
        assert torch.equal(want[name], got[name]), name
    runner.close()


if __name__ == "__main__":      # the GPU test's prebuilt artifact (needs MLIR)
    os.makedirs(os.path.dirname(PREBUILT), exist_ok=True)
    build(PREBUILT)
    print(PREBUILT)
