"""Learning rules users write in Python, and the emitter that turns them into Latch ops.

    from latch import optim
    rule = optim.partition({
        "experts.*": optim.every(4, optim.AdamW(1e-3)),
        "*": optim.clip_grad_norm(1.0, optim.AdamW(optim.warmup_cosine(1e-3, 100, 1000, 0.1))),
    })
"""
from latch.optim.emit import StateDecl, build_update_module, declare_states, initial_state
from latch.optim.rules import (SGD, AdamW, ClipGradNorm, Every, Partition, Rule, clip_grad_norm,
                               every, partition)
from latch.optim.schedules import Schedule, WarmupCosine, warmup_cosine

__all__ = ["SGD", "AdamW", "partition", "every", "clip_grad_norm", "warmup_cosine", "Rule",
           "Schedule", "WarmupCosine", "Partition", "Every", "ClipGradNorm", "StateDecl",
           "build_update_module", "declare_states", "initial_state"]
