"""The launch-graph arithmetic of bench/estimate_critical_path.py and
bench/predict_removed_launches.py on a small made-up launch list: the longest chain of
``after`` dependencies, the launches on it, and the rules that remove launches and charge
their work to another."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import estimate_critical_path as estimate  # noqa: E402
import predict_removed_launches as predict  # noqa: E402


def _launch(module, grid, after):
    return {"module": module, "grid": [grid, 1, 1], "after": after}


# 0 -> 1 -> 2 (sum, 4 us) -> 3 (its reader) -> 4 (gather) -> 5 (walk) ; 0 -> 6 (long, beside)
LAUNCHES = [_launch("a", 100, []), _launch("b", 100, [0]), _launch("sum", 16, [1]),
            _launch("reader", 8, [2]), _launch("gather", 2000, [3]),
            _launch("walk", 264, [4]), _launch("side", 100, [0])]
MS = [0.010, 0.020, 0.004, 0.008, 0.010, 0.004, 0.040]
SIGS = {"sum": [("memref<8x2xf32>", 64, "w"), ("memref<3x8x2xf32>", 192, "r")]}


def test_longest_chain_and_its_launches():
    assert estimate.longest(LAUNCHES, MS) == pytest.approx(0.056)
    assert estimate.critical_path(LAUNCHES, MS) == [0, 1, 2, 3, 4, 5]
    side = list(MS)
    side[6] = 0.100                      # the side launch now the longest chain
    assert estimate.critical_path(LAUNCHES, side) == [0, 6]


def test_removed_launches_charge_their_reader_and_writer():
    after, removed = predict.apply_rules(
        LAUNCHES, SIGS, MS, sorted(["memref<3x8x2xf32>", "memref<8x2xf32>"]), 1.0, 264, 0.5)
    assert dict(removed) == {"by argument types": 1, "grid [264, 1, 1]": 1}
    assert after[2] == 0.0 and after[5] == 0.0
    assert after[3] == pytest.approx(0.009) and after[4] == pytest.approx(0.0105)
    # the chain: 0.010 + 0.020 + 0 + 0.009 + 0.0105 + 0 = 0.0495 (the sum and the walk gone,
    # their work charged), now shorter than the launch beside it: 0.010 + 0.040
    assert estimate.longest(LAUNCHES, after) == pytest.approx(0.050)
    assert estimate.critical_path(LAUNCHES, after) == [0, 6]


def test_a_small_grid_after_nothing_larger_stays():
    launches = [_launch("x", 100, []), _launch("walk", 264, [0])]
    after, removed = predict.apply_rules(launches, {}, [0.01, 0.004], None, 0.0, 264, 0.5)
    assert not removed and after == [0.01, 0.004]
