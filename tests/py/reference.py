"""FP64 PyTorch references for whole training runs (the numerics policy of DESIGN.md).

``train_fp64(model, config, batches)`` trains a float64 copy of ``model`` with torch.optim,
stepped by hand exactly as the Latch rule of the same config prescribes, and returns the
losses and the final parameters and optimizer moments under Latch's state names.
"""
from __future__ import annotations

import copy
import fnmatch

import numpy as np
import torch

from latch import optim
from latch.optim.schedules import warmup_cosine_value

# name -> (latch rule factory(pattern), description)
CONFIGS = ("sgd_momentum", "adamw_schedule_clip", "partition_every")


def latch_rule(config: str, every_pattern: str):
    if config == "sgd_momentum":
        return optim.SGD(0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)
    if config == "adamw_schedule_clip":
        return optim.clip_grad_norm(0.5, optim.AdamW(optim.warmup_cosine(1e-2, 2, 6, 0.1),
                                                     betas=(0.9, 0.95), weight_decay=0.1))
    if config == "partition_every":
        return optim.partition({every_pattern: optim.every(2, optim.AdamW(3e-3)),
                                "*": optim.SGD(0.05, momentum=0.9)})
    if config == "selective_updates":   # WORKLOADS.md: experts step every 16th microbatch
        adamw = optim.AdamW(3e-3, betas=(0.9, 0.95), weight_decay=0.1)
        return optim.partition({every_pattern: optim.every(16, adamw), "*": adamw})
    raise KeyError(config)


def rel_l2(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    denom = np.linalg.norm(ref.ravel())
    diff = np.linalg.norm((got - ref).ravel())
    return float(diff / denom) if denom > 0 else float(diff)


def _cast_inputs(batch, dtype):
    return tuple(x.to(dtype) if x.is_floating_point() else x for x in batch)


def train_fp64(model, config: str, batches, every_pattern: str = ""):
    return train_torch(model, config, batches, every_pattern, torch.float64)


def train_torch(model, config: str, batches, every_pattern: str = "", dtype=torch.float64):
    """Eager PyTorch training in ``dtype`` (float64: the reference; float32: the control)."""
    m = copy.deepcopy(model).to(dtype)
    names = [n for n, _ in m.named_parameters()]
    params = dict(m.named_parameters())
    losses, states = [], {}

    if config == "sgd_momentum":
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                              weight_decay=1e-3)
        for batch in batches:
            opt.zero_grad()
            loss = m(*_cast_inputs(batch, dtype))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        for n in names:
            states[f"{n}.momentum_buffer"] = opt.state[params[n]]["momentum_buffer"]

    elif config == "adamw_schedule_clip":
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: warmup_cosine_value(s, 1e-2, 2, 6, 0.1) / 1e-2)
        for batch in batches:
            opt.zero_grad()
            loss = m(*_cast_inputs(batch, dtype))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
            sched.step()
            losses.append(loss.item())
        for n in names:
            states[f"{n}.exp_avg"] = opt.state[params[n]]["exp_avg"]
            states[f"{n}.exp_avg_sq"] = opt.state[params[n]]["exp_avg_sq"]

    elif config in ("partition_every", "selective_updates"):
        slow = [n for n in names if fnmatch.fnmatchcase(n, every_pattern)]
        fast = [n for n in names if n not in slow]
        assert slow and fast, "the pattern must split the parameters"
        if config == "partition_every":
            period = 2
            opt_slow = torch.optim.AdamW([params[n] for n in slow], lr=3e-3)
            opt_fast = torch.optim.SGD([params[n] for n in fast], lr=0.05, momentum=0.9)
        else:
            period = 16
            kw = dict(lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
            opt_slow = torch.optim.AdamW([params[n] for n in slow], **kw)
            opt_fast = torch.optim.AdamW([params[n] for n in fast], **kw)
        acc = {n: torch.zeros_like(params[n]) for n in slow}
        for i, batch in enumerate(batches, 1):
            m.zero_grad()
            loss = m(*_cast_inputs(batch, dtype))
            loss.backward()
            opt_fast.step()
            for n in slow:
                acc[n] += params[n].grad
            if i % period == 0:
                for n in slow:
                    params[n].grad = acc[n] / period
                opt_slow.step()
                for n in slow:
                    acc[n].zero_()
            losses.append(loss.item())
        for n in fast:
            st = opt_fast.state[params[n]]
            for key in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
                if key in st:
                    states[f"{n}.{key}"] = st[key]
        for n in slow:
            states[f"{n}.grad_acc"] = acc[n].clone()
            if opt_slow.state[params[n]]:
                states[f"{n}.exp_avg"] = opt_slow.state[params[n]]["exp_avg"]
                states[f"{n}.exp_avg_sq"] = opt_slow.state[params[n]]["exp_avg_sq"]
    else:
        raise KeyError(config)

    final = {n: p.detach().double().numpy().copy() for n, p in m.named_parameters()}
    return losses, final, {k: v.detach().double().numpy().copy() for k, v in states.items()}
