"""Commit by swap (latch/runtime/commit.py): which states swap, and how parity 1 addresses
the buffers.  The GPU behaviour (bitwise-unchanged state after a non-finite step, numerics
over many steps) is checked by test_cuda_target.py's GPU tests and bench/gpu_nonfinite.py,
bench/gpu_models.py on the device."""
from __future__ import annotations

import random

import pytest

from latch.runtime import commit


def _manifest(copies, states, planned=1024, **extra):
    return {"states": [{"bytes": n} for n in states], "copies": copies,
            "planned_arena_bytes": planned, **extra}


def _copy(src, k, n):
    return {"src": src, "dst": {"state": k}, "bytes": n}


def test_only_unshared_exclusive_slots_of_the_states_size_swap():
    states = [256, 512, 64, 64, 128, 32]
    m = _manifest([
        _copy({"arena": 1024}, 0, 256),                   # swaps
        _copy({"arena": 1280}, 1, 512),                   # swaps
        _copy({"arena": 512}, 2, 64),                     # a planned (shared) slot: copies
        _copy({"input": 0}, 3, 64),                       # an input: copies
        _copy({"arena": 2048}, 4, 128),                   # named twice: copies
        {"src": {"arena": 2048}, "dst": {"output": 0}, "bytes": 128},
        _copy({"arena": 4096, "byte_offset": 0}, 5, 16),  # not the state's size: copies
    ], states)
    assert commit.swap_slots(m) == {0: (1024, 256), 1: (1280, 512)}


def test_programs_that_cannot_swap_copy(monkeypatch):
    m = _manifest([_copy({"arena": 1024}, 0, 256)], [256])
    assert commit.swap_slots(m) == {0: (1024, 256)}
    assert commit.swap_slots({**m, "variants": [{}]}) == {}      # a variant writing nothing
    assert commit.swap_slots({**m, "collectives": [{"op": "all_reduce"}]}) == {}
    overlapping = _manifest([_copy({"arena": 1024}, 0, 256), _copy({"arena": 1200}, 1, 256)],
                            [256, 256])
    assert commit.swap_slots(overlapping) == {}
    monkeypatch.setenv("LATCH_STATE_COMMIT", "copy")
    assert commit.swap_slots(m) == {}
    monkeypatch.setenv("LATCH_STATE_COMMIT", "sometimes")
    from latch.errors import LatchError
    with pytest.raises(LatchError, match="LATCH_STATE_COMMIT='sometimes'"):
        commit.swap_slots(m)


def test_parity_one_exchanges_each_swapped_states_two_buffers_byte_for_byte():
    slots = {0: (1024, 256), 3: (1536, 64), 7: (4096, 1000)}
    remap = commit.Remap(slots)
    assert remap({"state": 0}) == {"arena": 1024, "byte_offset": 0}
    assert remap({"state": 7, "byte_offset": 999}) == {"arena": 4096, "byte_offset": 999}
    assert remap({"arena": 1024}) == {"state": 0, "byte_offset": 0}
    assert remap({"arena": 1024, "byte_offset": 255}) == {"state": 0, "byte_offset": 255}
    assert remap({"arena": 1536, "byte_offset": 8}) == {"state": 3, "byte_offset": 8}
    for kept in ({"arena": 1280}, {"arena": 1023}, {"arena": 1600}, {"arena": 0},
                 {"arena": 5096}, {"state": 1}, {"input": 0}, {"output": 0, "byte_offset": 4}):
        assert remap(kept) == kept
    # an involution on addresses: mapping twice gives every byte back

    def byte(loc):
        off = loc.get("byte_offset", 0)
        return ("arena", loc["arena"] + off) if "arena" in loc else ("state", loc["state"], off)

    rng = random.Random(0)
    for _ in range(500):
        loc = rng.choice([{"arena": rng.randrange(6000)},
                          {"state": rng.choice([0, 3, 7, 1]), "byte_offset": rng.randrange(64)}])
        assert byte(remap(remap(loc))) == byte(loc), loc


def test_compiled_updates_commit_every_state_by_swap():
    """Every state of a compiled cuda update has an unshared new-value slot, so a plain
    program swaps all of them (the guarded copy is left with nothing to copy)."""
    import latch
    from latch import optim
    from models import make_mlp

    model, example = make_mlp(seed=0)
    prog = latch.compile(model, optim.clip_grad_norm(1.0, optim.AdamW(1e-2)), example,
                         target="cuda")
    m = prog.manifest
    state_copies = [c for c in m["copies"] if "state" in c["dst"]]
    assert state_copies and sorted(commit.swap_slots(m)) == \
        sorted(c["dst"]["state"] for c in state_copies)


def _variant(copies, planned=1024):
    return {"copies": copies, "planned_arena_bytes": planned}


def test_variants_swap_the_states_they_write_into_one_slot():
    """every(N) variants: a state swaps when the variants that write it into an unshared slot
    use the same one; one written into two slots is copied, one written from elsewhere in
    some variant swaps with that value copied into its other buffer there."""
    states = [256, 256, 128, 64]
    every = _variant([_copy({"arena": 1024}, 0, 256), _copy({"arena": 1280}, 1, 256),
                      _copy({"arena": 2048}, 3, 64)])
    shared_only = _variant([_copy({"arena": 1024}, 0, 256), _copy({"arena": 1536}, 1, 256),
                            _copy({"arena": 1792}, 2, 128), _copy({"input": 0}, 3, 64)])
    m = {**_manifest([], states), "variants": [every, shared_only]}
    # 0: the same slot in both; 2: written by one variant only; 1: two slots; 3: its slot in
    # one variant, an input in the other (copied into its other buffer there)
    slots = commit.swap_slots(m)
    assert slots == {0: (1024, 256), 2: (1792, 128), 3: (2048, 64)}
    assert commit.copy_into_other(_copy({"input": 0}, 3, 64), slots) == {"arena": 2048}
    assert commit.copy_into_other(_copy({"arena": 2048}, 3, 64), slots) is None
    assert commit.copy_into_other(_copy({"arena": 1536}, 1, 256), slots) is None
    assert commit.copy_into_other({"src": {"arena": 8}, "dst": {"output": 0}}, slots) is None
    assert commit.written_states(every) == {0, 1, 3}
    assert commit.written_states(shared_only) == {0, 1, 2, 3}


def test_a_placement_exchanges_only_its_states():
    """With several variants the states in their new-value slot are any subset: Remap(loc,
    swapped) exchanges the two buffers of the states in ``swapped`` only."""
    remap = commit.Remap({0: (1024, 256), 3: (1536, 64)})
    assert remap({"state": 0}, frozenset({3})) == {"state": 0}
    assert remap({"arena": 1024}, frozenset({3})) == {"arena": 1024}
    assert remap({"state": 3, "byte_offset": 4}, frozenset({3})) == \
        {"arena": 1536, "byte_offset": 4}
    assert remap({"arena": 1540}, frozenset({3})) == {"state": 3, "byte_offset": 4}
    assert remap({"state": 0}, frozenset()) == {"state": 0}
    assert remap({"state": 0}, frozenset({0, 3})) == remap({"state": 0})


def test_shared_state_slots_relocate_each_variants_unshared_buffers():
    """latch.targets.state_slots: after relocation each state's new value has one slot in
    every variant that writes it, the variants' other unshared buffers lie after all state
    slots (so no variant's temporaries overwrite a state living in its slot), and within a
    variant distinct buffers stay distinct (offsets inside a buffer kept)."""
    from latch.targets.state_slots import share_state_slots
    states = [{"bytes": 512}, {"bytes": 256}, {"bytes": 100}]

    def sch(planned, copies, args, end):
        return {"planned_arena_bytes": planned, "arena_bytes": end, "states": states,
                "copies": copies, "launches": [{"args": args}],
                "nonfinite_flag": {"arena": args[-1]["arena"]}}
    # variant a: [counter 1024..1280) [state 0 1280..1792) [workspace 1792..2048) [state 1]
    a = sch(1000, [_copy({"arena": 1280}, 0, 512), _copy({"arena": 2048}, 1, 256)],
            [{"arena": 1024, "type": "ptr"}, {"arena": 1300, "type": "ptr"},
             {"arena": 1792 + 16, "type": "ptr"}, {"arena": 100, "type": "ptr"},
             {"state": 0, "type": "ptr"}, {"arena": 2048, "type": "ptr"}], 2304)
    # variant b (a larger plan): [state 1 2048..2304) [state 2 ..) [flag]
    b = sch(2000, [_copy({"arena": 2048}, 1, 256), _copy({"arena": 2304}, 2, 100)],
            [{"arena": 2048, "type": "ptr"}, {"arena": 2304 + 50, "type": "ptr"},
             {"arena": 2560, "type": "ptr"}], 2816)
    share_state_slots([a, b])
    slot = {k: c["src"]["arena"] for v in (a, b) for c in v["copies"]
            for k in [c["dst"]["state"]]}
    assert slot == {0: 2048, 1: 2048 + 512, 2: 2048 + 512 + 256}
    first_other = 2048 + 512 + 256 + 256         # the slots, each 256-aligned
    aa = [x.get("arena") for x in a["launches"][0]["args"]]
    assert aa[3] == 100 and aa[4] is None                  # planned part, a state: kept
    assert aa[1] == slot[0] + 20 and aa[5] == slot[1]      # inside state slots
    assert aa[0] >= first_other and aa[2] >= first_other and aa[2] - aa[0] >= 256
    assert aa[2] % 256 == 16
    bb = [x.get("arena") for x in b["launches"][0]["args"]]
    assert bb[:2] == [slot[1], slot[2] + 50] and bb[2] >= first_other
    assert b["nonfinite_flag"] == {"arena": bb[2]}
    for v in (a, b):
        assert v["arena_bytes"] >= max(x.get("arena", 0) for x in v["launches"][0]["args"])
        assert commit.new_value_slots(v["copies"], states, v["planned_arena_bytes"])
    m = {"states": states, "copies": a["copies"], "planned_arena_bytes": 2000,
         "variants": [a, b]}
    assert sorted(commit.swap_slots(m)) == [0, 1, 2]
