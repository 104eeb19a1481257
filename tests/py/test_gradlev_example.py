"""examples/gradlev_gpt2.py: the GradLev workload's shape — a GPT-2-style trunk in plain
PyTorch, then a fast-weight layer whose token-by-token adaptation is a compiled
``latch.scan`` — at a CPU size, against the same model with the scan run eagerly in
float64."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import gradlev_gpt2 as ex  # noqa: E402

import latch  # noqa: E402


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    model = ex.GradLevGPT2(**ex.SMALL).eval()
    ids = torch.randint(0, ex.SMALL["vocab"], (ex.SMALL["batch"], ex.SMALL["seq"]))
    with torch.no_grad():
        example = model.fast.scan_inputs(model.trunk(ids))
    return model, ids, latch.compile(ex.adapt, None, example)


def test_logits_match_float64(small):
    model, ids, fn = small
    with torch.no_grad():
        logits = model(ids, run=fn)
        ref = model.double()(ids, run=ex.adapt)
        model.float()
    assert ex.rel_l2(logits, ref) <= 1e-4


def test_the_check_sees_a_wrong_adaptation(small):
    """Another step size changes the logits far beyond the bound: the check is sensitive."""
    model, ids, fn = small

    def other(W0, q, k, v):
        return latch.scan(ex.make_step(0.3), W0, (q, k, v))
    with torch.no_grad():
        logits = model(ids, run=fn)
        wrong = model(ids, run=other)
    assert ex.rel_l2(wrong, logits) > 1e-3


def test_example_main_runs_and_passes():
    assert ex.main(["--small", "--reps", "1"]) == 0
