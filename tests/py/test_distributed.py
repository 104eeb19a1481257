"""Data-parallel programs (``distributed=True``), the parts that need no GPU: the bucketing
plan, the ``latch.all_reduce`` ops of the learning program, the launch schedule's
collectives (where each bucket starts and where the program waits for it) and the
runtime's start/wait order.  The GPU half (torchrun, NCCL, numerics against one GPU) is
bench/distributed_gpu.py."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import latch
from latch import optim
from latch.distributed import plan_buckets
from latch.errors import LatchError
from latch.runtime.collectives import events

F32 = "f32"


# ------------------------------------------------------------------------ bucketing plan
def test_buckets_follow_reverse_parameter_order_under_the_cap():
    grads = [((1000,), F32), ((10,), F32), ((500,), F32), ((600,), F32), ((10,), F32)]
    plan = plan_buckets(grads, bucket_bytes=4 * 700)
    assert [b.grads for b in plan] == [(4, 3), (2, 1), (0,)]
    assert plan[0].with_loss and not any(b.with_loss for b in plan[1:])
    assert [b.elements for b in plan] == [611, 510, 1000]
    assert [b.index for b in plan] == [0, 1, 2]
    # a gradient larger than the cap gets a bucket of its own
    assert all(b.bytes <= 4 * 700 or len(b.grads) == 1 for b in plan)


def test_every_gradient_is_in_exactly_one_bucket():
    grads = [((i % 7 + 1, 3), "bf16" if i % 5 == 0 else F32) for i in range(40)]
    for cap in (8, 64, 1000, 1 << 30):
        plan = plan_buckets(grads, cap)
        seen = sorted(i for b in plan for i in b.grads)
        assert seen == list(range(40))
        for b in plan:
            assert {grads[i][1] for i in b.grads} <= {b.dtype}   # one element type each
        assert sum(b.with_loss for b in plan) == 1


def test_loss_gets_its_own_bucket_when_the_last_gradient_is_not_f32():
    plan = plan_buckets([((4,), F32), ((4,), "bf16")], 1 << 20)
    assert plan[0].grads == () and plan[0].with_loss and plan[0].dtype == F32
    assert [b.grads for b in plan[1:]] == [(1,), (0,)]


def test_bucket_plan_rejects_bad_input():
    with pytest.raises(LatchError, match="bucket size must be positive"):
        plan_buckets([((4,), F32)], 0)
    with pytest.raises(LatchError, match="only floating-point gradients"):
        plan_buckets([((4,), "i64")], 1024)


# ------------------------------------------------------------------------ options
def test_distributed_needs_the_cuda_target_and_a_rule():
    import torch

    model = torch.nn.Linear(2, 1)
    with pytest.raises(LatchError, match="distributed=True needs target='cuda'"):
        latch.compile(model, optim.SGD(0.1), (torch.zeros(2, 2),), distributed=True)
    with pytest.raises(LatchError, match="a plain function"):
        latch.compile(lambda x: x * 2, None, (torch.zeros(2),), target="cuda",
                      distributed=True)
    with pytest.raises(LatchError, match="bucket_mb must be a positive"):
        latch.compile(model, optim.SGD(0.1), (torch.zeros(2, 2),), target="cuda",
                      distributed=True, bucket_mb=0)


def test_distributed_is_part_of_the_options_digest():
    from latch.options import CompileOptions

    a = CompileOptions(target="cuda")
    b = CompileOptions(target="cuda", distributed=True)
    c = CompileOptions(target="cuda", distributed=True, bucket_mb=1.0)
    assert len({a.digest(), b.digest(), c.digest()}) == 3


# ------------------------------------------------------------------------ the learning program
def test_the_program_averages_every_gradient_and_the_loss_before_the_rule():
    from latch.optim.emit import build_update_module

    params = [("a", "tensor<64x64xf32>"), ("b", "tensor<64xf32>"), ("c", "tensor<8x64xf32>")]
    text = build_update_module(params, optim.SGD(0.1), ["tensor<4x64xf32>"],
                               all_reduce_bucket_bytes=4 * 1000)
    ops = re.findall(r'(%\S+) = "latch.all_reduce"\(([^)]*)\) \{bucket = (\d+) : i64, '
                     r'reduction = "mean"\}', text)
    # reverse order: c (512) + b (64) + the loss in bucket 0, a (4096 > cap) alone
    assert [(len(args.split(", ")), int(k)) for _, args, k in ops] == [(3, 0), (1, 1)]
    assert text.index('"latch.all_reduce"') < text.index('"latch.sgd"')
    plain = build_update_module(params, optim.SGD(0.1), ["tensor<4x64xf32>"])
    assert "latch.all_reduce" not in plain


@pytest.fixture(scope="module")
def mlp_dp():
    sys.path.insert(0, str(Path(__file__).parent))
    from models import make_mlp

    model, example = make_mlp(seed=0, batch=8)
    return latch.compile(model, optim.clip_grad_norm(1.0, optim.AdamW(1e-3)), example,
                         target="cuda", distributed=True, bucket_mb=0.001)


def _ranges(launch):
    """The arena offsets of a launch's pointer arguments (base pointers: a view into a
    bucket passes the bucket's start plus nothing, or a pointer inside it)."""
    return [a["arena"] for a in launch["args"] if a.get("type") == "ptr" and "arena" in a]


def test_the_schedule_starts_buckets_during_the_backward_pass(mlp_dp):
    m = mlp_dp.manifest
    coll, launches = m["collectives"], m["launches"]
    assert m["options"]["distributed"] is True
    assert len(coll) == 4                       # 0.001 MiB buckets over 6 MLP gradients
    assert sorted(c["bucket"] for c in coll) == [0, 1, 2, 3]
    n = len(launches)
    for c in coll:
        assert c["op"] == "all_reduce" and c["reduction"] == "mean" and c["dtype"] == "f32"
        assert 0 < c["after_launch"] <= c["wait_before_launch"] <= n
        assert c["bytes"] == 4 * c["count"] and c["count"] % 64 == 0     # aligned slices
        lo, hi = c["buffer"]["arena"], c["buffer"]["arena"] + c["bytes"]
        assert hi <= m["arena_bytes"]
        # no launch between the start and the wait can touch the bucket ...
        for launch in launches[c["after_launch"]:c["wait_before_launch"]]:
            assert not any(lo <= p < hi for p in _ranges(launch)), launch["kernel"]
        # ... and the launch waited for does (the learning rule reads the bucket)
        if c["wait_before_launch"] < n:
            assert any(lo <= p < hi for p in _ranges(launches[c["wait_before_launch"]]))
    # overlap: some bucket starts while other buckets' gradients are still being computed
    assert min(c["after_launch"] for c in coll) < max(c["after_launch"] for c in coll)
    assert any(c["wait_before_launch"] > c["after_launch"] for c in coll)
    # buckets live in disjoint arena ranges while two of them may be in flight
    for a in coll:
        for b in coll:
            if a is not b and a["after_launch"] <= b["after_launch"] < a["wait_before_launch"]:
                assert (a["buffer"]["arena"] + a["bytes"] <= b["buffer"]["arena"] or
                        b["buffer"]["arena"] + b["bytes"] <= a["buffer"]["arena"])
    assert "data-parallel: 4 all-reduce buckets" in mlp_dp.report()


def test_a_data_parallel_program_has_the_plain_programs_kernels_plus_bucket_copies(mlp_dp):
    sys.path.insert(0, str(Path(__file__).parent))
    from models import make_mlp

    model, example = make_mlp(seed=0, batch=8)
    plain = latch.compile(model, optim.clip_grad_norm(1.0, optim.AdamW(1e-3)), example,
                          target="cuda")
    assert "collectives" not in plain.manifest
    extra = len(mlp_dp.manifest["launches"]) - len(plain.manifest["launches"])
    # one copy kernel per gradient (and the loss) into its bucket, at most
    assert 0 < extra <= 7


# ------------------------------------------------------------------------ runtime order
def test_runtime_events_start_in_manifest_order_and_wait_before_the_first_toucher():
    specs = [{"after_launch": 3, "wait_before_launch": 9},
             {"after_launch": 5, "wait_before_launch": 5},
             {"after_launch": 5, "wait_before_launch": 12}]
    ev = events(specs)
    assert ev == {3: [("start", 0)], 5: [("start", 1), ("start", 2), ("wait", 1)],
                  9: [("wait", 0)], 12: [("wait", 2)]}
    with pytest.raises(LatchError, match="starts after launch 7 but is needed before"):
        events([{"after_launch": 7, "wait_before_launch": 2}])


# ------------------------------------------------------------------------ GPU (two or more)
def test_two_ranks_match_one_gpu_and_each_other_on_two_gpus():
    """On a machine with two GPUs and the artifacts of bench/distributed_build.py: torchrun
    two ranks of the data-parallel programs (bench/distributed_gpu.py's numerics part) and
    hold them to float64 of the global batch, to bitwise-equal ranks and to a captured CUDA
    graph with NCCL inside.  Skips without two GPUs or without the artifacts."""
    import argparse
    import importlib
    import os

    import torch

    root = Path(__file__).resolve().parents[2]
    dp = root / "bench" / "artifacts" / "dp"
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    if not (dp / "mlp-dp.latch").exists():
        pytest.skip("no artifacts: run bench/distributed_build.py where MLIR is installed")
    sys.path.insert(0, str(root / "bench"))
    try:
        bench = importlib.import_module("distributed_gpu")
    finally:
        sys.path.pop(0)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    args = argparse.Namespace(iters=1, only="mlp,char_lm", engine="latch", hang_s=240,
                              batch=32)
    res = bench._torchrun(2, "numerics", args, 300)
    assert "error" not in res, res.get("stderr_tail")
    for name, rec in res.items():
        assert rec["ranks_bitwise_identical"] and rec["graph_captured"], name
        assert rec["loss_rel_err"] <= 1e-5, name
        worst = rec["dp"]["worst_rel_l2"]
        # within 1e-5 of float64, or no worse than 3x eager float32 on an ill-conditioned
        # tensor (the qkv biases of the char LM: see README, numerics)
        assert worst <= 1e-5 or worst <= 3 * rec["dp"]["worst_torch_fp32_rel_l2"], (name, worst)
