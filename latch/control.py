"""Structured learning-rule control flow: ``latch.scan`` and ``latch.repeat``.

In eager PyTorch both are plain Python loops (so a model that uses them trains and runs like
any other).  When Latch traces the model (``latch.compile``), each call is recorded as *one*
node whose body is traced once and kept as a loop in the IR (see
:mod:`latch.frontend.structured`), instead of being unrolled.

``scan(step_fn, carry, xs)`` follows ``jax.lax.scan``: ``step_fn(carry, x) -> (carry, y)``;
``carry`` is a tensor or a pytree (tuple/list/dict) of tensors; ``xs`` a tensor or a pytree of
tensors scanned along dim 0 (all with the same leading size); returns ``(final_carry, ys)``
with each leaf of ``y`` stacked along a new dim 0.  ``step_fn`` may take gradients with
``torch.func.grad`` (fast weights).  It may be an ``nn.Module``: its parameters and buffers are
then inputs of the traced body (tensors a plain function closes over become constants).

``repeat(block, carry, times)`` applies ``block`` ``times`` times with the same weights:
``carry = block(carry)``.  ``carry`` is a tensor or a pytree (tuple/list/dict) of tensors, and
``block`` (an ``nn.Module`` or a function of the carry alone) returns a carry of the same
structure, each leaf with its shape and dtype: e.g. ``(hidden, aux_sum)`` for layers that also
accumulate a loss.  Compiled, the repeat is one loop in the IR; with a learning rule the
backward pass runs the loop in reverse, gradients flowing through every carry leaf, and
accumulates the block's parameter gradients across the visits.
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

__all__ = ["scan", "repeat"]


def _scan_length(xs_leaves) -> int:
    if not xs_leaves:
        raise ValueError("latch.scan: xs must hold at least one tensor")
    for x in xs_leaves:
        if not isinstance(x, torch.Tensor) or x.dim() < 1:
            raise ValueError("latch.scan: every leaf of xs must be a tensor with a leading "
                             "dimension to scan over")
    length = int(xs_leaves[0].shape[0])
    if any(int(x.shape[0]) != length for x in xs_leaves):
        raise ValueError("latch.scan: every leaf of xs must have the same leading size, got "
                         f"{[int(x.shape[0]) for x in xs_leaves]}")
    return length


def eager_scan(step_fn, carry, xs):
    """The reference semantics: a plain Python loop."""
    xs_leaves, xs_def = pytree.tree_flatten(xs)
    length = _scan_length(xs_leaves)
    if length == 0:
        raise ValueError("latch.scan: xs have length 0")
    ys = []
    for t in range(length):
        carry, y = step_fn(carry, pytree.tree_unflatten([x[t] for x in xs_leaves], xs_def))
        ys.append(y)
    stacked = pytree.tree_map(lambda *leaves: torch.stack(leaves), ys[0], *ys[1:])
    return carry, stacked


def _recorder():
    """The Latch trace in progress, if any.  Under torch.compile (dynamo) there is none: the
    eager loop is what dynamo should see (reading the ContextVar would break its graph)."""
    if torch.compiler.is_compiling():
        return None
    from latch.frontend import structured
    return structured.active()


def scan(step_fn, carry, xs):
    """``jax.lax.scan``: returns ``(final_carry, stacked_ys)``; see the module docstring."""
    from latch.frontend import structured
    rec = _recorder()
    if rec is not None:
        return structured.traced_scan(rec, step_fn, carry, xs)
    return eager_scan(step_fn, carry, xs)


def repeat(block, carry, times: int):
    """Apply ``block`` ``times`` times with shared weights: ``block(...block(carry))``;
    ``carry`` a tensor or a pytree of tensors (see the module docstring)."""
    if not isinstance(times, int) or isinstance(times, bool) or times < 0:
        raise ValueError(f"latch.repeat: times must be an int >= 0, got {times!r}")
    if times == 0:
        return carry
    from latch.frontend import structured
    rec = _recorder()
    if rec is not None and not structured.unrolls_repeats():
        return structured.traced_repeat(rec, block, carry, times)
    for _ in range(times):          # eager, or a trace that unrolls it (repeat="unroll")
        carry = block(carry)
    return carry
