"""Data-parallel updates: which gradients are averaged together (the *bucketing plan*).

With ``latch.compile(..., distributed=True)`` every rank of a ``torchrun`` job runs the same
update on its own shard of the batch, and the gradients are averaged over the ranks with
NCCL between the backward pass and the learning rule.  One all-reduce per gradient would pay
NCCL's fixed cost (~10 µs) a few hundred times per step; one for all of them could not start
before the backward pass ends.  So, as PyTorch DDP does, gradients are grouped into buckets
of at most ``bucket_bytes``, in *reverse* parameter order — the order in which the backward
pass finishes them — and each bucket is reduced as soon as its last gradient is written
(``latch-schedule-collectives``), overlapping the rest of the backward pass.

The loss joins the first bucket, so every rank reports the global batch's mean loss and the
non-finite guard takes the same decision on every rank.

This module is plain Python (no MLIR, no torch): the emitter (:mod:`latch.optim.emit`) and
the tests use it.
"""
from __future__ import annotations

import dataclasses
import math

from latch.errors import LatchError

_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8}


@dataclasses.dataclass(frozen=True)
class Bucket:
    """One all-reduce: the gradients it carries (indices into the parameter list, in the
    order they are laid out in its buffer), whether the loss leads it, its element type and
    size."""
    index: int
    grads: tuple[int, ...]
    with_loss: bool
    dtype: str
    elements: int

    @property
    def bytes(self) -> int:
        return self.elements * _BYTES[self.dtype]


def plan_buckets(grads: list[tuple[tuple[int, ...], str]], bucket_bytes: int,
                 loss_dtype: str | None = "f32") -> list[Bucket]:
    """Buckets for gradients of ``grads`` = [(shape, element type)] in parameter order.

    Walks the parameters from last to first, closing a bucket when the next gradient would
    take it over ``bucket_bytes`` or has another element type (a gradient larger than the
    cap gets a bucket of its own).  ``loss_dtype``: the loss joins bucket 0 when its
    element type matches (else it gets a bucket of its own, numbered 0); None: no loss."""
    if bucket_bytes <= 0:
        raise LatchError(f"bucket size must be positive, got {bucket_bytes} bytes")
    groups: list[list[int]] = []
    sizes: list[int] = []
    for i in reversed(range(len(grads))):
        shape, dtype = grads[i]
        if dtype not in _BYTES:
            raise LatchError(f"gradient {i} has element type {dtype}; only floating-point "
                             "gradients can be averaged")
        nbytes = math.prod(shape) * _BYTES[dtype]
        if groups and grads[groups[-1][-1]][1] == dtype and sizes[-1] + nbytes <= bucket_bytes:
            groups[-1].append(i)
            sizes[-1] += nbytes
        else:
            groups.append([i])
            sizes.append(nbytes)
    out: list[Bucket] = []
    loss_alone = loss_dtype is not None and (not groups or grads[groups[0][0]][1] != loss_dtype)
    if loss_alone:
        out.append(Bucket(0, (), True, loss_dtype, 1))
    for k, members in enumerate(groups):
        with_loss = loss_dtype is not None and k == 0 and not loss_alone
        elements = sum(math.prod(grads[i][0]) for i in members) + (1 if with_loss else 0)
        out.append(Bucket(len(out), tuple(members), with_loss, grads[members[0]][1], elements))
    return out

