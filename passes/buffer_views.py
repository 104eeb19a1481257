"""Views of buffers and who writes them: which ops make a view of a memref, the allocation
(or function argument) a view comes from, whether an op may write an allocation, and the
generic that last wrote one, which ops use one — shared by the passes that reason about which buffer an op
reads or writes (latch-wrap-host-compute, its row reductions, latch-form-contraction-kernels
and its one-hot scatter)."""
from __future__ import annotations

from latch.passes.base import operation as _op

VIEW_OPS = ("memref.subview", "memref.cast", "memref.collapse_shape", "memref.expand_shape",
            "memref.reinterpret_cast", "memref.view", "memref.reshape")


def root(v):
    """The allocation (or argument) the buffer value ``v`` is a view of (``v`` itself if
    it is not a view)."""
    while not hasattr(v.owner, "arguments"):
        o = v.owner.operation if hasattr(v.owner, "operation") else v.owner
        if o.name not in VIEW_OPS:
            break
        v = o.operands[0]
    return v


def users(alloc) -> list:
    """Every op, at any depth, that uses the allocation ``alloc`` directly or through views
    of it (the views themselves and deallocations not counted)."""
    stack, found = [alloc], []
    while stack:
        for use in stack.pop().uses:
            user = _op(use.owner)
            if user.name in VIEW_OPS:
                stack.extend(user.results)
            elif user.name != "memref.dealloc":
                found.append(user)
    return found


def last_writer(buffer, op, before: list | None = None):
    """The all-parallel ``linalg.generic`` that last wrote the whole allocation ``buffer``
    views, before ``op`` in the same block; None if another op may have written it since
    (or if that is not known).  ``before``: the ops in front of ``op`` in its block, in
    order, when the caller has them (a pass asking for every op of a long block would
    otherwise list the block once per question)."""
    from mlir import ir

    base = root(buffer)
    if hasattr(base.owner, "arguments") or not ir.MemRefType(base.type).has_static_shape:
        return None                                  # a function argument
    if before is None:
        ops = [_op(o) for o in op.operation.block.operations]
        before = ops[:next(i for i, o in enumerate(ops) if o == op)]
    return writer_among(base, reversed(before))[1]


def writer_among(base, latest_first) -> tuple[bool, object]:
    """Walking back through ``latest_first`` (ops of one block, latest first): (True, the
    all-parallel generic that wrote the whole allocation ``base``) at the first op that
    writes it, (True, None) if that op is anything else, (False, None) if none of the ops
    writes it (the answer lies further back)."""
    from mlir import ir

    for prev in latest_first:
        if prev.name == "linalg.generic":
            seg = list(ir.DenseI32ArrayAttr(prev.attributes["operandSegmentSizes"]))
            outs = list(prev.operands)[seg[0]:]
            if not any(root(o) == base for o in outs):
                continue
            its = [str(a) for a in ir.ArrayAttr(prev.attributes["iterator_types"])]
            out_map = ir.AffineMapAttr(
                list(ir.ArrayAttr(prev.attributes["indexing_maps"]))[-1]).value
            bijective = out_map.is_permutation
            whole = _numel(outs[-1].type) == _numel(base.type) if len(outs) == 1 else False
            if whole and bijective and all("parallel" in t for t in its):
                return True, prev
            return True, None
        if may_write(prev, base):
            return True, None
    return False, None


def _numel(t) -> int:
    from mlir import ir

    n = 1
    for x in ir.MemRefType(t).shape:
        n *= x
    return n


def may_write(op, alloc) -> bool:
    """Whether ``op`` (or anything nested in it) may write the allocation ``alloc``."""
    from mlir import ir

    if op.name in VIEW_OPS or op.name in ("memref.alloc", "memref.dealloc", "memref.load",
                                           "memref.get_global") or \
            op.name.startswith(("arith.", "math.", "index.", "gpu.")) and not op.regions:
        return False
    if op.name == "memref.store":
        return root(op.operands[1]) == alloc
    if op.name == "memref.copy":
        return root(op.operands[1]) == alloc
    if op.name == "linalg.generic":
        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        return any(root(o) == alloc for o in list(op.operands)[seg[0]:])
    if op.name in ("scf.yield", "scf.reduce", "linalg.yield", "func.return"):
        return False
    if any(isinstance(v.type, ir.MemRefType) and root(v) == alloc for v in op.operands):
        return True                       # e.g. a named linalg op or a call taking it
    return any(may_write(_op(inner), alloc) for region in op.regions
               for blk in region.blocks for inner in blk.operations)
