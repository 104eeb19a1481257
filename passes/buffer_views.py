"""Views of buffers: which ops make a view of a memref, and the allocation (or function
argument) a view comes from — shared by the passes that reason about which buffer an op
reads or writes (latch-wrap-host-compute, its row reductions, latch-form-contraction-kernels
and its one-hot scatter)."""
from __future__ import annotations

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
