"""Compile options: one frozen dataclass, hashed into the cache key (Triton-style)."""
from __future__ import annotations

import dataclasses
import hashlib
import json

from latch.errors import LatchError

TARGETS = {
    "cpu": "the embedded default: LLVM on the host through MLIR's ExecutionEngine",
    "cuda": "PTX for NVIDIA GPUs (sm_90), launched through the CUDA driver by latch.runtime",
}
PRECISIONS = {
    "fp32": "everything in float32",
    "bf16": "matmul inputs in bfloat16 as torch.autocast does; fp32 master weights and state",
}
ATTENTION = {
    "auto": "the default: 'fused' for target='cuda' with precision='bf16' (the fused kernels, "
            "PyTorch's CUDA rounding), else 'math'",
    "math": "PyTorch's math decomposition under autocast: scores rounded to bf16 before the "
            "softmax (what torch.autocast on the CPU computes)",
    "flash": "the rounding of PyTorch's CUDA flash kernels: float32 scores and softmax, bf16 "
             "probabilities and score gradients in the second products (precision='bf16')",
    "fused": "the rounding of 'flash', with each call the fused kernels cover (no mask or "
             "dropout, 4-D, L and S multiples of 64, head size a multiple of 16 up to 128, "
             "causal only for L == S) kept as one latch.attention op and one "
             "latch.attention_grad op that never store the scores (target='cuda'; on the cpu "
             "it is 'flash'; other calls take the 'flash' path)",
}
REPEAT = {
    "auto": "the default: 'unroll' for target='cuda' (its launch list unrolls the loop "
            "anyway), else 'loop'",
    "loop": "each latch.repeat stays one loop; its backward rematerializes every visit's "
            "forward from the visit's input (one visit's activations in memory at a time, "
            "one more forward pass of the repeated block per visit)",
    "unroll": "each visit of a latch.repeat is traced like an ordinary layer (the weights "
              "still shared): the backward reads every visit's saved activations, as "
              "PyTorch's autograd of the Python loop does (no rematerialized forward; every "
              "visit's activations in memory)",
}
NONFINITE = {
    "skip": "a step whose loss or new state is non-finite is not committed (state untouched); "
            "state.skipped_steps counts it",
    "raise": "such a step raises latch.NonFiniteError (state untouched)",
}


def _check(name: str, value: str, choices: dict) -> None:
    if value not in choices:
        valid = "\n".join(f"  {k!r}: {v}" for k, v in choices.items())
        raise LatchError(f"unknown {name} {value!r}; valid choices:\n{valid}")


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    target: str = "cpu"
    precision: str = "fp32"
    on_nonfinite: str = "skip"
    # LLVM optimization level of the CPU JIT.  0 compiles about 10x faster than 2 on the
    # fast examples (0.6 s vs 17 s of JIT for the char LM) for 1.5x slower updates; raise
    # it for long CPU runs.
    opt_level: int = 0
    # Data-parallel training (README, "Several GPUs"): gradients (and the loss) are averaged
    # over the ranks of a torch.distributed NCCL job between the backward pass and the rule,
    # in buckets of at most ``bucket_mb`` MiB (PyTorch DDP's default bucket size).
    distributed: bool = False
    bucket_mb: float = 25.0
    # How bf16 attention is rounded (latch/frontend/attention.py): "math", PyTorch's math
    # decomposition under autocast (scores rounded to bf16), "flash", the rounding of
    # PyTorch's CUDA flash kernels (float32 scores and softmax), or "fused", that rounding
    # as fused attention ops whose kernels never store the scores (cuda; "flash" on cpu);
    # "auto" (the default) is "fused" on cuda with bf16 and "math" otherwise.
    attention: str = "auto"
    # Bitwise reproducible updates on the cuda target: the scatter kernels of products
    # with a one-hot factor (index_add, embedding and MoE dispatch/combine gradients) sum
    # in 64-bit fixed point scaled to each element's largest term (integer atomics:
    # associative) instead of float atomic adds, whose order varies from run to run (as
    # PyTorch's index_add_ on CUDA).  Off by default: four launches per scatter instead of
    # one (passes/fixed_point_scatter.py).  The cpu target is deterministic either way.
    deterministic: bool = False
    # How a latch.repeat (looped layers with shared weights) is compiled: "loop" keeps one
    # loop whose backward rematerializes each visit's forward, "unroll" traces every visit
    # like an ordinary layer (activations saved); "auto" (the default) is "unroll" on cuda
    # and "loop" on the cpu.
    repeat: str = "auto"

    def __post_init__(self):
        _check("target", self.target, TARGETS)
        _check("precision", self.precision, PRECISIONS)
        _check("on_nonfinite", self.on_nonfinite, NONFINITE)
        if self.opt_level not in (0, 1, 2, 3):
            raise LatchError(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")
        if not isinstance(self.deterministic, bool):
            raise LatchError(f"deterministic must be True or False, got "
                             f"{self.deterministic!r}")
        if not isinstance(self.distributed, bool):
            raise LatchError(f"distributed must be True or False, got {self.distributed!r}")
        if self.distributed and self.target != "cuda":
            raise LatchError(f"distributed=True needs target='cuda' (the gradients are averaged "
                             f"with NCCL); got target={self.target!r}")
        _check("attention", self.attention, ATTENTION)
        _check("repeat", self.repeat, REPEAT)
        if self.attention not in ("math", "auto") and self.precision != "bf16":
            raise LatchError(f"attention={self.attention!r} sets how bf16 attention is "
                             f"rounded; it needs precision='bf16' (got {self.precision!r})")
        if not (isinstance(self.bucket_mb, (int, float)) and 0 < self.bucket_mb < 1 << 20):
            raise LatchError(f"bucket_mb must be a positive number of MiB, got "
                             f"{self.bucket_mb!r}")

    @property
    def attention_mode(self) -> str:
        """The attention option with "auto" resolved for this target and precision."""
        if self.attention != "auto":
            return self.attention
        return "fused" if self.target == "cuda" and self.precision == "bf16" else "math"

    @property
    def repeat_mode(self) -> str:
        """The repeat option with "auto" resolved for this target."""
        if self.repeat != "auto":
            return self.repeat
        return "unroll" if self.target == "cuda" else "loop"

    @property
    def bucket_bytes(self) -> int:
        return int(self.bucket_mb * (1 << 20))

    def digest(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()
