"""The data-parallel part of a cuda program: the manifest's ``collectives`` carried out with
``torch.distributed`` (NCCL) on the program's stream.

A program compiled with ``distributed=True`` lists one entry per gradient bucket::

    {"op": "all_reduce", "reduction": "mean", "bucket": 0, "buffer": {"arena": 11776},
     "dtype": "f32", "count": 320, "bytes": 1280, "after_launch": 33,
     "wait_before_launch": 43}

While the launch list is enqueued (:meth:`Collectives.before_launch` is called before each
launch and once after the last), a bucket's all-reduce starts once the first
``after_launch`` kernels are enqueued (``async_op=True``: NCCL runs it on its own stream,
after what our stream has enqueued so far) and our stream waits for it just before launch
``wait_before_launch``, the first kernel that touches the bucket.  The kernels in between
run while the bucket is reduced.  The same calls made under stream capture put the NCCL
kernels and both dependencies into the step's CUDA graph (PyTorch's NCCL process group
supports capture; the communicator is created by the first, eager, step).

The process group is ``torch.distributed``'s default group (``init_process_group("nccl")``
under ``torchrun``) or the one passed to the program.  Without an initialized process group
the program runs as a job of one rank: a mean over one rank changes nothing, so nothing is
launched.
"""
from __future__ import annotations

from latch.errors import LatchError

_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64"}


def events(specs: list[dict]) -> dict[int, list[tuple[str, int]]]:
    """{i: [("start" | "wait", k), ...]}: what to do before launch i (i == the number of
    launches: after the last one) for the collectives ``specs`` (in issue order; every rank
    issues them in this same order, as NCCL requires).  Starts come before waits at the
    same i; a collective is waited for where its buffer is next touched."""
    out: dict[int, list[tuple[str, int]]] = {}
    for k, c in enumerate(specs):
        start, wait = int(c["after_launch"]), int(c["wait_before_launch"])
        if not 0 <= start <= wait:
            raise LatchError(f"collective {k}: starts after launch {start} but is needed "
                             f"before launch {wait}")
        out.setdefault(start, []).append(("start", k))
    for k, c in enumerate(specs):
        out.setdefault(int(c["wait_before_launch"]), []).append(("wait", k))
    for i in out:
        out[i].sort(key=lambda e: e[0] != "start")      # stable: starts first
    return out


class _Range:
    """``__cuda_array_interface__`` of ``nbytes`` bytes at ``ptr`` (keeps ``owner`` alive)."""

    def __init__(self, owner, ptr: int, nbytes: int):
        self._owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 2, "strides": None}


class Collectives:
    """The collectives of one program.  ``resolve(location) -> device address``;
    ``owner`` is kept alive by the tensor views; ``group``: a process group, or None for
    the default group when torch.distributed is initialized (else: one rank)."""

    def __init__(self, specs: list[dict], resolve, owner, torch_device, torch_stream,
                 group=None):
        import os

        import torch

        self.specs = sorted(specs, key=lambda c: c["after_launch"])   # stable: list order
        # LATCH_OVERLAP_COLLECTIVES=0: wait for each reduction right after starting it (no
        # overlap with the kernels after it; for measuring what the overlap is worth)
        self.overlap = os.environ.get("LATCH_OVERLAP_COLLECTIVES", "1") != "0"
        if not self.overlap:
            self.specs = [dict(c, wait_before_launch=c["after_launch"]) for c in self.specs]
        self._events = events(self.specs)
        self.torch_stream = torch_stream
        self.group = None
        self.world_size = 1
        self.rank = 0
        self._pending: dict[int, object] = {}
        self.views = []
        if not self.specs:
            return
        import torch.distributed as dist

        if group is not None or (dist.is_available() and dist.is_initialized()):
            self.group = group if group is not None else dist.group.WORLD
            backend = str(dist.get_backend(self.group)).lower()
            if "nccl" not in backend:
                raise LatchError(f"a distributed Latch program reduces gradients with NCCL; "
                                 f"the process group's backend is {backend!r} (use "
                                 "torch.distributed.init_process_group('nccl'))")
            self.world_size = dist.get_world_size(self.group)
            self.rank = dist.get_rank(self.group)
        for c in self.specs:
            if c.get("op") != "all_reduce" or c.get("reduction") not in ("mean", "sum"):
                raise LatchError(f"unknown collective {c.get('op')!r} / "
                                 f"{c.get('reduction')!r} in the manifest")
            if c["dtype"] not in _DTYPES:
                raise LatchError(f"all-reduce of {c['dtype']} buffers is not supported")
            holder = _Range(owner, resolve(c["buffer"]), int(c["bytes"]))
            raw = torch.as_tensor(holder, device=torch_device)
            self.views.append(raw.view(getattr(torch, _DTYPES[c["dtype"]])))

    @property
    def active(self) -> bool:
        """Whether anything is launched (a job of more than one rank)."""
        return bool(self.specs) and self.group is not None and self.world_size > 1

    def before_launch(self, i: int) -> None:
        """Called with i = 0, 1, ..., len(launches) while enqueueing a step: start the
        reductions due after i launches, then make the stream wait for those that launch i
        needs.  (i == len(launches): everything still in flight is waited for.)"""
        if not self.active or i not in self._events:
            return
        import torch
        import torch.distributed as dist

        with torch.cuda.stream(self.torch_stream):
            for what, k in self._events[i]:
                if what == "start":
                    c = self.specs[k]
                    op = dist.ReduceOp.AVG if c["reduction"] == "mean" else dist.ReduceOp.SUM
                    self._pending[k] = dist.all_reduce(self.views[k], op=op, group=self.group,
                                                       async_op=True)
                else:
                    self._pending.pop(k).wait()

    def broadcast_from_rank0(self, tensors) -> None:
        """Make every rank start from rank 0's values (as DDP does at construction)."""
        if not self.active:
            return
        import torch
        import torch.distributed as dist

        with torch.cuda.stream(self.torch_stream):
            for t in tensors:
                dist.broadcast(t, src=dist.get_global_rank(self.group, 0), group=self.group)
        self.torch_stream.synchronize()

    def describe(self) -> dict:
        return {"buckets": len(self.specs), "bytes": sum(int(c["bytes"]) for c in self.specs),
                "world_size": self.world_size, "rank": self.rank, "active": self.active,
                "overlap": self.overlap}
