"""TinyMoE-196M of /work/shared/WORKLOADS.md, built from the mini TinyMoE of
tests/py/models.py (same code: RMSNorm, fused qkv, causal attention, tied LM head, top-2
SwiGLU experts with static capacity dispatch, Switch aux loss) at the full configuration.

    model, example = make_tinymoe_196m(batch=2)     # B2: 2 x 1024 tokens
    rule = tinymoe_rule("B2")                         # AdamW(0.9/0.95, wd 0.1) + clip 1.0
    model, example = make_looped_tinymoe_196m(batch=32)   # WORKLOADS.md "Looped TinyMoE"
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(ROOT, "tests", "py") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

CONFIG = dict(vocab=32768, d=768, n_layers=8, n_heads=12, seq=1024, hidden=1024,
              n_experts=8, top_k=2, aux_weight=0.01)
N_PARAMS = 195_883_776
RECIPES = {"B2": dict(batch=2, peak=3e-4, warmup=1000), "Q": dict(batch=32, peak=1.2e-3, warmup=200)}


def make_tinymoe_196m(batch: int = 2, seed: int = 0):
    import torch

    from models import TinyMoE

    torch.manual_seed(seed)
    model = TinyMoE(**CONFIG)
    n = sum(p.numel() for p in model.parameters())
    assert n == N_PARAMS, f"TinyMoE-196M has {n:,} parameters, WORKLOADS.md says {N_PARAMS:,}"
    data = torch.randint(0, CONFIG["vocab"], (batch, CONFIG["seq"] + 1))
    return model, (data[:, :-1].contiguous(), data[:, 1:].contiguous())


LOOP = (2, 6, 2)    # WORKLOADS.md "Looped TinyMoE": layers 2-5 applied twice (12 applications)


def make_looped_tinymoe_196m(batch: int = 32, seed: int = 0):
    """The looped TinyMoE of WORKLOADS.md: TinyMoE-196M (same parameters, same seed, so the
    same initial weights as make_tinymoe_196m) with layers 2-5 applied twice in sequence,
    0,1,2,3,4,5,2,3,4,5,6,7, as ONE latch.repeat over layers 2-5 carrying (hidden, aux sum);
    the aux loss is averaged over the 12 layer applications."""
    import torch

    from models import LoopedTinyMoE

    torch.manual_seed(seed)
    model = LoopedTinyMoE(**CONFIG, loop=LOOP)
    n = sum(p.numel() for p in model.parameters())
    assert n == N_PARAMS, (f"looped TinyMoE-196M has {n:,} parameters, WORKLOADS.md says "
                           f"{N_PARAMS:,}")
    assert model.applications == 12
    data = torch.randint(0, CONFIG["vocab"], (batch, CONFIG["seq"] + 1))
    return model, (data[:, :-1].contiguous(), data[:, 1:].contiguous())


def tinymoe_rule(recipe: str = "B2", total_steps: int = 10_000):
    from latch import optim

    r = RECIPES[recipe]
    lr = optim.warmup_cosine(r["peak"], r["warmup"], total_steps, 0.1)
    return optim.clip_grad_norm(1.0, optim.AdamW(lr, betas=(0.9, 0.95), eps=1e-8,
                                                 weight_decay=0.1))


EXPERT_PATTERN = "*.w[123]"     # fnmatch: the w1, w2, w3 of every layer


def selective_rule(recipe: str = "B2", every: int = 16, total_steps: int = 10_000):
    """WORKLOADS.md "Selective updates": shared parameters take an AdamW step every
    microbatch; the expert weights (w1, w2, w3 of every layer) accumulate their gradients
    and take one AdamW step (on the mean gradient) every ``every`` microbatches."""
    from latch import optim

    r = RECIPES[recipe]

    def adamw():
        lr = optim.warmup_cosine(r["peak"], r["warmup"], total_steps, 0.1)
        return optim.AdamW(lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    # one group (one counter) for all expert weights: one condition, two update variants
    return optim.partition({EXPERT_PATTERN: optim.every(every, adamw()), "*": adamw()})
