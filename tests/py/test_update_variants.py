"""every(N) programs on the cuda target: one update variant per outcome of the every
conditions (passes/specialize_every.py), so the steps that do not update the inner rule's
parameters launch none of its kernels and copy none of its state.  The runtime's choice of
variant is tested here without a GPU; bench/gpu_models.py runs both variants on the H200
(tiny_moe_partition_every against float64)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import latch
from latch import optim
from latch.errors import LatchError
from latch.runtime.program import choose_variant

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def every_program():
    from models import make_mlp

    model, example = make_mlp(seed=0, batch=8)
    rule = optim.partition({"fc2.*": optim.every(4, optim.AdamW(1e-3)), "*": optim.SGD(0.1)})
    return latch.compile(model, rule, example, target="cuda")


def _state_copies(variant, states):
    return {states[c["dst"]["state"]]["name"] for c in variant["copies"] if "state" in c["dst"]}


def test_the_steps_between_updates_do_not_touch_the_inner_rules_state(every_program):
    m = every_program.manifest
    states = m["states"]
    v0, v1 = m["variants"]
    counter = next(i for i, s in enumerate(states) if s["name"].endswith("every.count"))
    assert v0["when"] == [{"state": counter, "offset": 1, "period": 4, "value": False}]
    assert v1["when"] == [{"state": counter, "offset": 1, "period": 4, "value": True}]
    inner = {"fc2.weight", "fc2.bias", "fc2.weight.exp_avg", "fc2.weight.exp_avg_sq",
             "fc2.bias.exp_avg", "fc2.bias.exp_avg_sq"}
    # the step without an inner update neither writes nor copies fc2 or its moments ...
    assert not _state_copies(v0, states) & inner
    assert _state_copies(v1, states) >= inner
    # ... but still accumulates the gradients, counts, and updates the other parameters
    for name in ("fc2.weight.grad_acc", "group0.every.count", "fc1.weight", "step"):
        assert name in _state_copies(v0, states)
    assert len(v0["launches"]) < len(v1["launches"])
    # the manifest's own launch list is the first variant's; the arena fits both plans
    assert m["launches"] == v0["launches"]
    assert m["arena_bytes"] >= max(v["arena_bytes"] for v in m["variants"])
    # kernels the variants share are shipped once
    used = {la["module"] for v in m["variants"] for la in v["launches"]}
    assert used == set(m["modules"])
    assert len(used) < len(v0["launches"]) + len(v1["launches"])
    assert "update variant 1 ((state" in every_program.report()


def test_every_state_commits_by_swap_in_one_slot_across_the_variants(every_program):
    """Each state a variant writes has one new-value slot, the same in both variants
    (latch/targets/state_slots.py), after every planned arena and apart from every other
    unshared buffer of either variant: so every state commits by swap
    (latch/runtime/commit.py), the step without the inner update flipping only the states
    it writes."""
    from latch.runtime import commit
    m = every_program.manifest
    v0, v1 = m["variants"]
    slots = commit.swap_slots(m)
    written = commit.written_states(v0) | commit.written_states(v1)
    assert set(slots) == written
    for v in (v0, v1):
        for c in v["copies"]:
            if "state" in c["dst"]:
                assert (c["src"]["arena"], c["bytes"]) == slots[c["dst"]["state"]]
    first = min(a for a, _ in slots.values())
    last = max(a + n for a, n in slots.values())
    assert first >= max(v["planned_arena_bytes"] for v in (v0, v1))
    for v in (v0, v1):
        mine = {a for k, (a, _) in slots.items() if k in commit.written_states(v)}
        for la in v["launches"]:
            for arg in la["args"]:
                a = arg.get("arena")
                if a is not None and first <= a < last:   # only this variant's own slots
                    assert any(s <= a < s + slots[k][1] for k, (s, _) in slots.items()
                               if s in mine), (la["module"], a)
    assert commit.written_states(v1) > commit.written_states(v0)


def test_a_program_without_every_has_no_variants():
    from models import make_mlp

    model, example = make_mlp(seed=0, batch=8)
    prog = latch.compile(model, optim.AdamW(1e-3), example, target="cuda")
    assert "variants" not in prog.manifest


def test_the_runtime_picks_the_variant_from_the_counters():
    whens = [[{"state": 7, "offset": 1, "period": 4, "value": False}],
             [{"state": 7, "offset": 1, "period": 4, "value": True}]]
    assert [choose_variant(whens, {7: c}) for c in range(9)] == [0, 0, 0, 1, 0, 0, 0, 1, 0]
    two = [[{"state": 3, "offset": 0, "period": 2, "value": a},
            {"state": 5, "offset": 1, "period": 3, "value": b}]
           for a in (False, True) for b in (False, True)]
    assert choose_variant(two, {3: 4, 5: 2}) == 3
    assert choose_variant(two, {3: 1, 5: 0}) == 0
    with pytest.raises(LatchError, match="no update variant"):
        choose_variant(whens[:1], {7: 3})
