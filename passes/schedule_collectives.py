"""``latch-schedule-collectives``: start each bucket's all-reduce as soon as its gradients
are final (stage 'buffers', after bufferization, before ``latch-plan-memory``).

``latch-lower-collectives`` leaves every bucket where the learning program put it: after the
whole backward pass.  Here, for each buffer-form ``latch.all_reduce`` at the top level of a
function, every copy into its bucket moves up to just after the last op that may write the
copy's source (its gradient is final from there on), the bucket's allocation and slice
views move in front of the earliest of those copies, and the all-reduce itself follows the
last of them.  The backward pass then keeps computing the remaining gradients while the
runtime reduces the finished buckets (NCCL works on a stream of its own; the runtime makes
the program wait for a bucket only before the first kernel that touches it).

Running before the memory plan matters: the plan computes each buffer's live range from the
new order, so a bucket is never shared with a temporary while its reduction is in flight
(it stays live until the learning rule has read it), and a gradient's own buffer can be
reused as soon as it has been copied.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-schedule-collectives)'``
"""
from __future__ import annotations

from latch.passes.base import ModulePass, defining_op, function_definitions, operation as _op
from latch.passes.buffer_views import VIEW_OPS, may_write, root


class ScheduleCollectives(ModulePass):
    name = "latch-schedule-collectives"
    summary = ("move each bucket's copies and all-reduce to just after the last write of its "
               "gradients (overlap with the backward pass; run before latch-plan-memory)")

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            block = func_op.regions[0].blocks[0]
            for op in [_op(o) for o in block.operations]:
                if op.name == "latch.all_reduce" and not len(op.results):
                    _schedule(block, op)


def _index(block) -> dict:
    return {_op(o): i for i, o in enumerate(block.operations)}


def _schedule(block, reduce_op) -> None:
    bucket = reduce_op.operands[0]
    alloc = defining_op(bucket)
    if alloc is None or alloc.name != "memref.alloc" or alloc.parent != reduce_op.parent:
        return
    ops = [_op(o) for o in block.operations]
    pos = _index(block)
    here = pos[reduce_op]
    # the copies into the bucket (before the all-reduce, at the top level)
    copies = [o for o in ops[:here] if o.name == "memref.copy" and
              root(o.operands[1]) == bucket]
    if not copies:
        return
    # views of the bucket (the copies' targets, and what the learning rule reads later)
    # that depend on nothing else move with the allocation
    views = [o for o in ops if o.name in VIEW_OPS and root(o.results[0]) == bucket]
    movable = [v for v in views if len(v.operands) == 1]
    placed = []                     # (copy, index of the op after which it goes; -1: start)
    for c in copies:
        src = c.operands[0]
        # the source value itself (and any view chain leading to it) must be defined first,
        # and so must a target view that cannot move
        anchor_at = -1
        target = defining_op(c.operands[1])
        if target is not None and target not in movable and target != alloc:
            anchor_at = pos[target]
        d = defining_op(src)
        while d is not None and d.name in VIEW_OPS:
            if d in pos:
                anchor_at = max(anchor_at, pos[d])
            d = defining_op(d.operands[0])
        if d is not None and d in pos:
            anchor_at = max(anchor_at, pos[d])
        base = root(src)
        for i in range(pos[c] - 1, anchor_at, -1):
            if ops[i] is not c and may_write(ops[i], base):
                anchor_at = i
                break
        placed.append((c, anchor_at))
    # move the copies (stable: equal anchors keep their order), then the alloc and the
    # views in front of the earliest one, then the all-reduce after the latest one
    placed.sort(key=lambda p: p[1])
    for c, at in reversed(placed):
        if at >= 0:
            c.move_after(ops[at])
        else:
            c.move_before(ops[0])
    first_copy = placed[0][0]
    alloc.move_before(first_copy)
    for v in movable:
        v.move_before(first_copy)
    order = _index(block)
    last = max((c for c, _ in placed), key=lambda c: order[c])
    reduce_op.move_after(last)
