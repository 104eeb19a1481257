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
    assert commit.swap_slots({**m, "variants": [{}, {}]}) == {}     # every(N) variants
    assert commit.swap_slots({**m, "variants": [{}]}) == {0: (1024, 256)}
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
