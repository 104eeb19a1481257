"""Run a cuda ``.latch`` artifact: one arena, the state, the launch list, one CUDA graph.

    prog = CudaProgram.load("sgd_update.latch")        # current device; loads the PTX
    prog.load_state({"w": w0})                          # other states start at zero
    loss = prog.step(x, y)                              # torch CUDA tensors in, tensors out
    prog.state_dict()                                   # {name: torch.Tensor} (copies)

Memory: one ``cuMemAlloc`` for the arena (the compiler's memory plan: temporaries at planned
offsets, plus unshared slots for new state values), one per state buffer, per input staging
buffer and per output buffer.  Inputs are copied into the staging buffers with one
device-to-device copy each (skipped when the tensor already *is* the staging buffer:
:meth:`CudaProgram.input_views` returns zero-copy torch views of them, so a producer can
write the batch in place).  Then the launch list runs: the first step launches every kernel
directly; the second records the same sequence into a CUDA graph with stream capture, and from
then on each step is one ``cuGraphLaunch``.  The launches go on a few streams
(:mod:`latch.runtime.streams`, ``LATCH_STREAMS``, default 8) following each launch's
``after`` list from the compiler, so the graph runs kernels that touch disjoint buffers
concurrently; a manifest without ``after`` (or ``LATCH_STREAMS=1``) runs in order on one
stream.  When every kernel begins with ``griddepcontrol.wait`` (the manifest's
``dependent_launches``: latch-dependent-launches, sm_90+), the kernels are launched with
programmatic stream serialization, so a kernel's launch overlaps the end of the one before
it on its stream (``LATCH_DEPENDENT_LAUNCHES=0`` turns it off).  Outputs are copied into
fresh torch tensors.

``on_nonfinite`` (the manifest's compile options; "skip" when absent) is enforced inside the
graph (:mod:`latch.runtime.guard`): a flag is set, the kernels run, one check kernel clears
the flag if the loss or any new floating-point state value is NaN/inf, and the new state
values (counters included) are committed only when the flag is set.  Commit is by swap
where it can be (:mod:`latch.runtime.commit`: each state's two buffers trade the roles of
old and new value, the host moving the states a committed step wrote after reading the flag;
a graph per variant and placement of the swapped states — two for a one-variant program),
else by one guarded copy kernel.  The state API (``step(state, *batch)``) reads the flag
with the loss (one 16-byte device-to-host copy after the graph) and then counts
``state.skipped_steps`` ("skip") or raises :class:`latch.NonFiniteError` ("raise"); either
way the state is bitwise unchanged.  The raw API (``step(*tensors)``) is guarded the same
way; with commit by swap it reads the previous step's flag before enqueuing the next
(:meth:`CudaProgram.step_committed` reads the flag).  Work runs on a stream of its own (taken from PyTorch's stream
pool, so it is capturable and outlives the program) ordered after PyTorch's current stream,
and PyTorch's current stream is ordered after it, so results can be used directly.

Inputs are checked (count, type, device, dtype, shape) before anything is launched.

Data-parallel programs (``distributed=True``; ``process_group`` or torch.distributed's
default group) average their gradient buckets over the ranks with NCCL between the launches
the manifest names (:mod:`latch.runtime.collectives`), inside the same CUDA graph;
``init(model)`` broadcasts rank 0's parameters.
"""
from __future__ import annotations

import os
import time

import numpy as np

from latch.errors import LatchError, NonFiniteError
from latch.runtime import driver as drv
from latch.runtime import commit, guard, streams
from latch.runtime.collectives import Collectives

_TORCH_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
                 "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "bool"}
_ARG_NP = {"i64": np.int64, "ptr": np.uint64, "i32": np.int32, "i16": np.int16,
           "i8": np.int8, "i1": np.uint8, "f32": np.float32, "f64": np.float64,
           "f16": np.float16}


def torch_dtype(name: str):
    import torch
    return getattr(torch, _TORCH_DTYPES[name])


class _Buffer:
    """A device buffer + its tensor layout; ``view()`` is a zero-copy torch tensor of it."""

    def __init__(self, alloc: drv.Allocation, spec: dict, label: str):
        self.alloc, self.spec, self.label = alloc, spec, label

    @property
    def ptr(self) -> int:
        return self.alloc.ptr

    @property
    def nbytes(self) -> int:
        return int(self.spec["bytes"])

    def view(self):
        """A torch tensor aliasing this buffer (keeps the buffer alive)."""
        import torch

        shape = tuple(self.spec["shape"])
        if self.nbytes == 0:
            return torch.empty(shape, dtype=torch_dtype(self.spec["dtype"]), device="cuda")
        return _view_at(self.alloc, 0, self.spec)


def _view_at(alloc: drv.Allocation, offset: int, spec: dict):
    """A torch tensor of layout ``spec`` aliasing ``alloc`` from byte ``offset``."""
    import torch

    shape, nbytes = tuple(spec["shape"]), int(spec["bytes"])
    if nbytes == 0:
        return torch.empty(shape, dtype=torch_dtype(spec["dtype"]), device="cuda")
    holder = _CudaArray(alloc, nbytes, offset)
    raw = torch.as_tensor(holder, device=f"cuda:{alloc.device.ordinal}")
    return raw.view(torch_dtype(spec["dtype"])).reshape(shape)


class _CudaArray:
    """``__cuda_array_interface__`` over an allocation (as bytes); torch.as_tensor keeps a
    reference to it, and it keeps the allocation alive."""

    def __init__(self, alloc: drv.Allocation, nbytes: int, offset: int = 0):
        self._alloc = alloc
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (alloc.ptr + offset, False), "version": 2,
                                         "strides": None}


class _Launch:
    """One kernel launch with its packed argument block (kept alive for graph replays)."""

    def __init__(self, spec: dict, function, resolve, dependent: bool = False):
        self.spec = spec
        self.function = function
        self.dependent = dependent      # launched with programmatic stream serialization
        self.what = f"{spec['module']}::{spec['kernel']}"
        args = spec["args"]
        self.storage = np.zeros(max(1, len(args)), dtype=np.uint64)
        raw = self.storage.view(np.uint8)
        for i, a in enumerate(args):
            t = a["type"]
            if t == "ptr":
                value = np.array([resolve(a)], dtype=np.uint64)
            elif t == "bf16":
                f = np.array([a["const"]], dtype=np.float32).view(np.uint32)
                value = (f >> 16).astype(np.uint16)
            elif t in _ARG_NP:
                value = np.array([a["const"]], dtype=_ARG_NP[t])
            else:
                raise LatchError(f"{self.what}: argument {i} has unsupported type {t!r}")
            b = value.view(np.uint8)
            raw[8 * i: 8 * i + b.size] = b
        base = self.storage.ctypes.data
        self.pointers = np.array([base + 8 * i for i in range(len(args))] or [0],
                                 dtype=np.uint64)
        self.grid, self.block = spec["grid"], spec["block"]
        self.shared = int(spec.get("shared_bytes", 0))

    def enqueue(self, stream: drv.Stream) -> None:
        (drv.launch_dependent if self.dependent else drv.launch)(
            self.function, self.grid, self.block, self.shared, stream,
            self.pointers.ctypes.data, self.what)


class CudaProgram:
    """A loaded cuda artifact.  See the module docstring."""

    def __init__(self, manifest: dict, files: dict[str, bytes], device: int | None = None,
                 use_graph: bool | None = None, process_group=None):
        import torch

        if manifest.get("kind") != "cuda-update":
            raise LatchError(f"not a cuda program artifact (kind {manifest.get('kind')!r})")
        self.manifest = manifest
        self.states_spec = manifest["states"]
        self.inputs_spec = manifest["inputs"]
        self.outputs_spec = manifest["outputs"]
        # a parameter's rounded copy (kind "copy", latch-carry-casts) is state the program
        # keeps for itself: not in state_dict() or checkpoints, recomputed from its
        # parameter whenever that is loaded
        self.state_names = [s["name"] for s in self.states_spec if s.get("kind") != "copy"]
        index = {s["name"]: k for k, s in enumerate(self.states_spec)}
        self.copies_of = {k: index[s["of"]] for k, s in enumerate(self.states_spec)
                          if s.get("kind") == "copy"}
        if use_graph is None:
            use_graph = os.environ.get("LATCH_CUDA_GRAPH", "1") != "0"
        self.use_graph = use_graph
        self.steps_run = 0
        self.timings: dict[str, float] = {}

        t0 = time.perf_counter()
        self.device, self.torch_device, self.modules = open_device(manifest, files, device)
        self.timings["load_modules_s"] = time.perf_counter() - t0
        self.dependent_launches = dependent_launches(manifest, files)

        dev = self.device
        self.arena = dev.alloc(int(manifest["arena_bytes"]), "the arena")
        self.state_buffers = [_Buffer(dev.alloc(s["bytes"], f"state '{s['name']}'"), s,
                                      f"state '{s['name']}'") for s in self.states_spec]
        self.input_buffers = [_Buffer(dev.alloc(s["bytes"], f"input {i}"), s, f"input {i}")
                              for i, s in enumerate(self.inputs_spec)]
        self.output_buffers = [_Buffer(dev.alloc(s["bytes"], f"output {i}"), s, f"output {i}")
                               for i, s in enumerate(self.outputs_spec)]
        # a stream from PyTorch's pool: capturable (not the legacy default stream), never
        # destroyed, so tensors that record it stay valid after close()
        self.torch_stream = torch.cuda.Stream(device=self.torch_device)
        self.stream = drv.Stream(dev, handle=self.torch_stream.cuda_stream)
        # more streams of our own for the launches that may run concurrently (a variant's
        # stream plan: latch.runtime.streams); created once, used inside the CUDA graphs
        self.side_streams = [drv.Stream(dev) for _ in range(streams.streams_wanted() - 1)]
        # commit by swap (latch.runtime.commit): the states whose new value has an unshared
        # arena slot live either in their state buffer or in that slot: at_new holds those in
        # the slot (a one-variant program: none or all of them, the parity)
        self.swap = commit.Remap(commit.swap_slots(manifest))
        self.at_new: frozenset = frozenset()
        self._status_pending = False     # a swapping step ran; its flag is not read yet
        self._pending_flips: frozenset = frozenset()   # what that step moves if committed

        # one update variant per outcome of the program's every(N) conditions (the
        # manifest's "variants"; a program without them has one): each its own launch list,
        # guard tables, collectives and CUDA graph, over the same states and arena
        self._setup_guard_module()
        specs = manifest.get("variants") or [
            {"launches": manifest["launches"], "copies": manifest.get("copies", []),
             "collectives": manifest.get("collectives", []), "when": []}]
        self.variants = [_Variant(self, spec, process_group) for spec in specs]
        first = self.variants[0]
        self.launches = first.launches            # the first variant's (tools, describe())
        self.collectives = first.collectives
        self.guard_checks, self.guard_copies = first.guard_checks, first.guard_copies
        # the counter states the variants' conditions test, read before each step
        self._counter_states = sorted({w["state"] for v in self.variants for w in v.when})
        self._counter_host = torch.zeros(max(1, len(self._counter_states)), dtype=torch.int64,
                                         pin_memory=True)
        for buf in self.state_buffers:
            drv.memset_zero(buf.ptr, buf.nbytes, self.stream, buf.label)
        # the arena starts zeroed: results never depend on what cuMemAlloc recycled (a
        # kernel that reads an arena slot before this step wrote it then reads what the
        # previous step left there, or zeros; see tests/py/test_cuda_target.py::
        # test_no_kernel_reads_an_arena_buffer_before_it_is_written)
        drv.memset_zero(self.arena.ptr, self.arena.nbytes, self.stream, "the arena")
        self.stream.synchronize("state initialization")

    # -- the non-finite guard (see latch.runtime.guard) -----------------------------------------
    def _setup_guard_module(self) -> None:
        """The flag + loss status buffer and the guard kernels' module (shared by the
        variants; each variant has its own check and copy tables)."""
        import torch

        self.on_nonfinite = guard.plan(self.manifest)[2]
        loss = self.outputs_spec[0] if self.outputs_spec else None
        # the loss is reported with the flag (one 16-byte read) when it fits in 8 bytes
        self._loss_status = loss is not None and 0 < int(loss["bytes"]) <= 8
        # [0,4) the flag, [8,16) the loss
        self.guard_buffer = self.device.alloc(256, "the non-finite guard flag")
        self.flag_ptr = self.status_ptr = self.guard_buffer.ptr
        self.guard_module = self.device.load_ptx(guard.PTX, "latch_guard")
        self._host_status = torch.zeros(16, dtype=torch.uint8, pin_memory=True)
        self.last_step_finite: bool | None = None

    def _read_status(self) -> tuple[bool, float | None]:
        """(flag, loss) of the last step: one 16-byte device-to-host copy, then a sync.
        After a step that commits by swap, a set flag moves the states it wrote to their
        other buffer (the commit)."""
        drv.memcpy_dtoh_async(self._host_status.data_ptr(), self.status_ptr, 16, self.stream,
                              "step status")
        self.stream.synchronize("step status")
        raw = self._host_status.numpy()
        finite = bool(raw[:4].view(np.uint32)[0])
        loss = None
        if self._loss_status:
            spec = self.outputs_spec[0]
            b = raw[8:8 + int(spec["bytes"])]
            if spec["dtype"] == "bf16":
                loss = float((b.view(np.uint16).astype(np.uint32) << 16).view(np.float32)[0])
            elif spec["dtype"] in _ARG_NP:
                loss = float(b.view(_ARG_NP[spec["dtype"]])[0])
        self.last_step_finite = finite
        if self._status_pending:
            self._status_pending = False
            if finite:
                self.at_new = self.at_new ^ self._pending_flips
        return finite, loss

    def step_committed(self) -> bool:
        """Whether the last step's new state was committed (its loss and every new
        floating-point state value were finite).  Synchronizes with the stream."""
        return self._read_status()[0]

    # -- loading ----------------------------------------------------------------------------
    @classmethod
    def load(cls, path, device: int | None = None, use_graph: bool | None = None,
             process_group=None) -> "CudaProgram":
        from latch.artifact import read_artifact

        manifest, files = read_artifact(path)
        return cls(manifest, files, device=device, use_graph=use_graph,
                   process_group=process_group)

    # -- addresses ----------------------------------------------------------------------------
    def _resolve(self, loc: dict) -> int:
        return resolve_location(loc, self.arena, {"state": self.state_buffers,
                                                  "input": self.input_buffers,
                                                  "output": self.output_buffers})

    def resolver(self, at_new: frozenset):
        """The device address of a manifest location in the placement ``at_new`` (the
        swapped states living in their new-value slots: latch.runtime.commit)."""
        if not at_new:
            return self._resolve
        return lambda loc: self._resolve(self.swap(loc, at_new))

    # -- state --------------------------------------------------------------------------------
    def _settle(self) -> None:
        """Read the last step's flag if it committed by swap and is not read yet (so the
        placement says where each state lives)."""
        if self._status_pending:
            self._read_status()

    def live_pointer(self, k: int) -> int:
        """The device address of state ``k``'s live value."""
        self._settle()
        if k in self.at_new:
            return self.arena.ptr + self.swap.slots[k][0]
        return self.state_buffers[k].ptr

    def state_views(self) -> dict:
        """{name: torch tensor aliasing the live state buffer}.  The values change with
        every step; a state that commits by swap (latch.runtime.commit) lives in the other of
        its two buffers after each committed step, so take the views again after a step."""
        self._settle()
        self.stream.synchronize("state_views")
        return {b.spec["name"]: self._live_view(k) for k, b in enumerate(self.state_buffers)}

    def _live_view(self, k: int):
        b = self.state_buffers[k]
        if k in self.at_new:
            return _view_at(self.arena, self.swap.slots[k][0], b.spec)
        return b.view()

    def state_dict(self) -> dict:
        """{name: a copy of the state as a torch tensor on the program's GPU} (the
        parameters' rounded copies left out: they follow from the parameters)."""
        views = self.state_views()
        return {n: views[n].clone() for n in self.state_names}

    def _refresh_copies(self, views: dict, sources=None) -> None:
        """Recompute, in the live state ``views`` (:meth:`state_views`), the rounded copies
        of the parameters named in ``sources`` (all when None): ``Tensor.to`` rounds to
        nearest even, as the optimizer kernels' ``truncf`` does."""
        for k, src in self.copies_of.items():
            name = self.states_spec[src]["name"]
            if sources is None or name in sources:
                views[self.states_spec[k]["name"]].copy_(views[name])

    def load_state(self, values: dict, strict: bool = False) -> None:
        """Copy tensors into the named states (others keep their values)."""
        import torch

        unknown = sorted(set(values) - set(self.state_names))
        if unknown:
            raise LatchError(f"unknown state names {unknown}; the program has "
                             f"{self.state_names}")
        if strict and set(values) != set(self.state_names):
            raise LatchError(f"missing states {sorted(set(self.state_names) - set(values))}")
        views = self.state_views()
        for name, value in values.items():
            view = views[name]
            value = torch.as_tensor(value)
            if tuple(value.shape) != tuple(view.shape):
                raise LatchError(f"state '{name}': shape {tuple(value.shape)}, the program "
                                 f"expects {tuple(view.shape)}")
            view.copy_(value.to(device=view.device, dtype=view.dtype))
        self._refresh_copies(views, values)
        torch.cuda.synchronize(self.torch_device)

    def input_views(self) -> list:
        """Zero-copy torch views of the input staging buffers: write a batch into them and
        pass them to :meth:`step` to skip the copy."""
        return [b.view() for b in self.input_buffers]

    # -- one step -----------------------------------------------------------------------------
    def check_inputs(self, inputs) -> list:
        import torch

        if len(inputs) != len(self.inputs_spec):
            raise LatchError(f"step() takes {len(self.inputs_spec)} inputs, got {len(inputs)}")
        out = []
        for i, (t, spec) in enumerate(zip(inputs, self.inputs_spec)):
            if not isinstance(t, torch.Tensor):
                raise LatchError(f"input {i}: expected a torch.Tensor, got {type(t).__name__}")
            if t.device != self.torch_device:
                raise LatchError(f"input {i}: on {t.device}, the program runs on "
                                 f"{self.torch_device}")
            want = torch_dtype(spec["dtype"])
            if t.dtype != want:
                raise LatchError(f"input {i}: dtype {t.dtype}, expected {want}")
            if list(t.shape) != list(spec["shape"]):
                raise LatchError(f"input {i}: shape {list(t.shape)}, expected {spec['shape']}")
            out.append(t if t.is_contiguous() else t.contiguous())
        return out

    # -- the user API of latch.Program: init(model) -> state; step(state, *batch) -> loss --
    def init(self, model) -> "CudaTrainingState":
        """A new training state: the model's parameters (copied to the GPU), zero moments
        and counters.  Parameters are matched by the names of ``model.named_parameters()``."""
        import torch

        named = dict(model.named_parameters())
        values = {}
        for spec in self.states_spec:
            if spec.get("kind") == "copy":       # made from its parameter by load_state
                continue
            if spec.get("kind") == "param":
                if spec["name"] not in named:
                    raise LatchError(f"the model has no parameter {spec['name']!r}; init() "
                                     "needs the model the program was compiled from")
                t = named[spec["name"]].detach()
                if list(t.shape) != list(spec["shape"]):
                    raise LatchError(f"parameter {spec['name']!r} has shape "
                                     f"{tuple(t.shape)}, the program expects "
                                     f"{tuple(spec['shape'])}")
                values[spec["name"]] = t
            else:
                values[spec["name"]] = torch.zeros(tuple(spec["shape"]),
                                                   dtype=torch_dtype(spec["dtype"]))
        state = CudaTrainingState(self, values)
        self._activate(state, force=True)
        # data-parallel: every rank starts from rank 0's parameters (as DDP does)
        collectives = self.variants[0].collectives
        collectives.broadcast_from_rank0(
            [self._live_view(k) for k, b in enumerate(self.state_buffers)
             if b.spec.get("kind") == "param"])
        if collectives.active and self.copies_of:   # the parameters changed: their copies too
            self._refresh_copies(self.state_views())
        return state

    def _activate(self, state: "CudaTrainingState", force: bool = False) -> None:
        """Make ``state`` the one in the program's state buffers (one live state at a time;
        switching saves the previous one's tensors)."""
        if state.program is not self:
            raise LatchError("this training state belongs to another program")
        active = getattr(self, "_active", None)
        if active is state and not force:
            return
        if active is not None and active is not state:
            active._saved = self.state_dict()
        self.load_state(state._saved, strict=True)
        state._saved = None
        self._active = state

    def step(self, *inputs):
        """``step(state, *batch)`` (the latch.Program API): one update, returns the loss as a
        float.  ``step(*tensors)``: one update on the live state, returns the outputs (a
        tensor, or a tuple if several)."""
        if inputs and isinstance(inputs[0], CudaTrainingState):
            import torch

            state, batch = inputs[0], inputs[1:]
            self._activate(state)
            batch = tuple(t.to(self.torch_device) if isinstance(t, torch.Tensor) and
                          t.device != self.torch_device else t for t in batch)
            out = self._step(*batch)
            finite, loss = self._read_status()
            if loss is None:
                loss = float((out[0] if isinstance(out, tuple) else out).item())
            if not finite:
                if self.on_nonfinite == "raise":
                    raise NonFiniteError(f"step {state.step}: non-finite loss ({loss}) or "
                                         "update; the training state was left unchanged")
                state.skipped_steps += 1
            return loss
        return self._step(*inputs)

    def _step(self, *inputs):
        """One update.  Returns the outputs (a tensor, or a tuple if several)."""
        def run():
            variant = self._variant()
            variant.run(self.stream, self.use_graph, self.timings, self.at_new)
            self._pending_flips = variant.flips
            self._status_pending = bool(variant.flips)
        return self.run_step(inputs, run)

    def run_step(self, inputs, run):
        """Check ``inputs`` and copy them into the staging buffers (after the caller's
        stream), call ``run()`` — which enqueues an update's work on the program's stream —,
        copy the outputs into fresh tensors (the caller's stream waits for them).  Returns
        the outputs (a tensor, or a tuple if several)."""
        import torch

        tensors = self.check_inputs(inputs)
        self._settle()
        self.device.make_current()
        current = torch.cuda.current_stream(self.torch_device)
        self.torch_stream.wait_stream(current)
        for t, buf in zip(tensors, self.input_buffers):
            if t.data_ptr() != buf.ptr:
                drv.memcpy_dtod(buf.ptr, t.data_ptr(), buf.nbytes, self.stream, buf.label)
            t.record_stream(self.torch_stream)
        run()
        outs = []
        for buf in self.output_buffers:   # allocated on the caller's stream, written on ours
            o = torch.empty(tuple(buf.spec["shape"]), dtype=torch_dtype(buf.spec["dtype"]),
                            device=self.torch_device)
            o.record_stream(self.torch_stream)
            drv.memcpy_dtod(o.data_ptr(), buf.ptr, buf.nbytes, self.stream, buf.label)
            outs.append(o)
        current.wait_stream(self.torch_stream)
        self.steps_run += 1
        return outs[0] if len(outs) == 1 else tuple(outs)

    __call__ = step

    def synchronize(self) -> None:
        self.stream.synchronize("synchronize")

    @property
    def graph_captured(self) -> bool:
        """Whether every variant used so far runs as a captured CUDA graph."""
        used = [m for v in self.variants for m in v.setups.values() if m.uses]
        return bool(used) and all(m.graph is not None for m in used)

    def _variant(self) -> "_Variant":
        """The variant whose every(N) conditions hold at the start of this step: reads the
        counters they test (one small device-to-host copy each, after the previous step)."""
        if len(self.variants) == 1:
            return self.variants[0]
        for i, st in enumerate(self._counter_states):     # ordered after the previous step
            drv.memcpy_dtoh_async(self._counter_host.data_ptr() + 8 * i,
                                  self.live_pointer(st), 8, self.stream, "counter")
        self.stream.synchronize("every(N) counters")
        raw = self._counter_host.numpy()
        values = {st: int(raw[i]) for i, st in enumerate(self._counter_states)}
        return self.variants[choose_variant([v.when for v in self.variants], values)]

    def describe(self) -> dict:
        m = self.manifest
        return {"device": self.device.name, "chip": self.device.chip,
                "artifact_chip": m.get("target", {}).get("chip"),
                "arena_bytes": m["arena_bytes"], "kernels": len(self.launches),
                "modules": len(self.modules), "copies": len(self.guard_copies),
                "on_nonfinite": self.on_nonfinite, "nonfinite_checks": len(self.guard_checks),
                "commit": (f"swap ({len(self.swap.slots)} states)" if self.swap.slots
                           else "copy"),
                "dependent_launches": self.dependent_launches,
                "streams": (f"{1 + len(self.side_streams)} ({streams.policy_wanted()})"
                            if self.variants[0].plan is not None else "1"),
                "states": [(s["name"], s["shape"], s["dtype"]) for s in self.states_spec],
                "inputs": [(s["shape"], s["dtype"]) for s in self.inputs_spec],
                "outputs": [(s["shape"], s["dtype"]) for s in self.outputs_spec],
                "use_graph": self.use_graph, "collectives": self.collectives.describe(),
                "variants": [{"when": v.when, "kernels": len(v.launches),
                              "copies": len(v.guard_copies), "uses": v.uses,
                              "placements": len(v.setups),
                              "graph_captured": v.graph_captured()}
                             for v in self.variants]}

    def close(self) -> None:
        try:
            self.synchronize()
        finally:
            for v in self.variants:
                v.close()
            for m in self.modules.values():
                m.unload()
            self.modules = {}
            if getattr(self, "guard_module", None) is not None:
                self.guard_module.unload()
                self.guard_module = None
                self.guard_buffer.free()
            for b in self.state_buffers + self.input_buffers + self.output_buffers:
                b.alloc.free()
            self.arena.free()
            for st in self.side_streams:
                st.destroy()
            self.side_streams = []
            self.stream.destroy()


class _Setup:
    """What one variant launches for one placement of the swapped states: its kernel
    launches, output copies and non-finite guard (tables and launches), and — after its
    second use — its CUDA graph."""

    def __init__(self, launches: list, copies: list):
        self.launches = launches
        self.copies = copies            # [(src, dst, bytes)]: outputs the step copies
        self.guard_checks: list = []    # [(ptr, dtype, count)]: new values the guard checks
        self.guard_copies: list = []    # [(src, dst, bytes)]: new values it copies if finite
        self.guard_launches: list = []  # [check launch or None, copy launch or None]
        self.graph: drv.Graph | None = None
        self.uses = 0


class _Variant:
    """One update variant of a program: its launch list, output copies, non-finite guard
    tables, collectives and (after its second use) CUDA graph.  A program that commits by
    swap (latch.runtime.commit) has all of these once per placement of the swapped states it
    meets (``at_new``: the states living in their new-value slot; a one-variant program
    meets two, none and all of them), made at first use: the pointers of a placement are
    those of the empty one with each such state's two buffers exchanged.  ``flips``: the
    swapped states this variant writes (its committed step moves each to its other
    buffer)."""

    def __init__(self, prog: "CudaProgram", spec: dict, process_group=None):
        self.prog = prog
        self.spec = spec
        self.when = list(spec.get("when", []))
        self.flips = frozenset(k for k in commit.written_states(spec) if k in prog.swap.slots)
        # the flag the guard clears: the compiler's (latch-nonfinite-checks; its kernels
        # clear it as they store the new state) or the program's status word
        flag = spec.get("nonfinite_flag", prog.manifest.get("nonfinite_flag")
                        if len(prog.manifest.get("variants") or [None]) == 1 else None)
        self.flag_ptr = prog._resolve(flag) if flag else prog.flag_ptr
        self.tables: list = []
        # what the guard checks and copies, as manifest locations (resolved per placement)
        self._guard_plan = guard.plan({**prog.manifest, "copies": spec.get("copies", [])})
        self.setups: dict[frozenset, _Setup] = {}
        first = self.setup(frozenset())
        self.launches = first.launches
        self.guard_checks, self.guard_copies = first.guard_checks, first.guard_copies
        self.collectives = Collectives(spec.get("collectives", []), prog._resolve,
                                       prog.arena, prog.torch_device, prog.torch_stream,
                                       process_group)
        # the streams the launches go on: the launch list in order on the program's stream,
        # or spread over its side streams by their dependencies (the manifest's "after")
        after = [la.get("after") for la in spec["launches"]]
        self.plan, self.events = None, None
        if prog.side_streams and after and all(a is not None for a in after) and \
                not spec.get("collectives"):
            self.plan = streams.plan(after, 1 + len(prog.side_streams),
                                     streams.policy_wanted())
            self.events = streams.Events(self.plan)

    def setup(self, at_new: frozenset) -> _Setup:
        """The launches, copies and guard for the placement ``at_new`` (made at first use)."""
        found = self.setups.get(at_new)
        if found is not None:
            return found
        prog, spec = self.prog, self.spec
        resolve = prog.resolver(at_new)
        made = _Setup(make_launches(spec["launches"], prog.modules, resolve,
                                    prog.dependent_launches),
                      [(resolve(c["src"]), resolve(c["dst"]), int(c["bytes"]))
                       for c in spec.get("copies", []) if "state" not in c["dst"]])
        self._setup_guard(made, resolve)
        self.setups[at_new] = made
        return made

    def _setup_guard(self, made: _Setup, resolve) -> None:
        """Tables of the check and guarded-copy kernels of one placement: every new state
        value this variant writes (checked when floating-point; copied unless it commits by
        swap) and the loss (output 0)."""
        prog = self.prog
        checks, copies, _ = self._guard_plan
        checks = [(resolve(loc), dtype, n) for loc, dtype, n in checks]
        guarded = []
        for src, dst, n in copies:
            if int(dst["state"]) not in prog.swap.slots:     # commits by copy
                guarded.append((resolve(src), resolve(dst), n))
                continue
            other = commit.copy_into_other({"src": src, "dst": dst}, prog.swap.slots)
            if other is not None:       # a swapped state this variant writes from elsewhere
                guarded.append((resolve(src), resolve(other), n))
        copies = guarded
        made.guard_checks, made.guard_copies = checks, copies
        ct, cp = guard.check_table(checks), guard.copy_table(copies)
        off_copies = ((ct.nbytes + 255) // 256) * 256
        self.tables.append(prog.device.alloc(off_copies + cp.nbytes,
                                             "the non-finite guard tables"))
        tp = self.tables[-1].ptr
        drv.memcpy_htod(tp, ct.ctypes.data, ct.nbytes, "guard check table")
        drv.memcpy_htod(tp + off_copies, cp.ctypes.data, cp.nbytes, "guard copy table")
        module = prog.guard_module
        for fn, table, n, per in ((module.function("latch_check_finite"), tp,
                                   len(checks), [e[2] for e in checks]),
                                  (module.function("latch_guarded_copy"), tp + off_copies,
                                   len(copies), [-(-e[2] // 16) if not (e[0] | e[1] | e[2]) % 16
                                                 else e[2] for e in copies])):
            if not n:
                made.guard_launches.append(None)
                continue
            args = np.array([table, self.flag_ptr], dtype=np.uint64)
            ptrs = np.array([args.ctypes.data, args.ctypes.data + 8], dtype=np.uint64)
            made.guard_launches.append((fn, (guard.grid_x(max(per)), n, 1),
                                        (guard.BLOCK, 1, 1), args, ptrs))

    def _enqueue_guard(self, made: _Setup, which: int) -> None:
        g = made.guard_launches[which]
        if g is not None:
            fn, grid, block, _args, ptrs = g
            drv.launch(fn, grid, block, 0, self.prog.stream, ptrs.ctypes.data,
                       ("latch_check_finite", "latch_guarded_copy")[which])

    def record(self, at_new: frozenset = frozenset()) -> None:
        """Enqueue the whole update on the stream: set the flag, the kernels (and the
        collectives between them), check the new state values and the loss (may clear the
        flag), copy the outputs (and the loss next to the flag), copy the new state values
        that do not commit by swap into the state buffers if the flag is set."""
        prog, stream = self.prog, self.prog.stream
        made = self.setup(at_new)
        drv.memset_d32(self.flag_ptr, 1, 1, stream, "non-finite flag")
        launches = made.launches
        if self.plan is not None:
            self._enqueue_planned(launches)
        else:
            for i, launch in enumerate(launches):
                self.collectives.before_launch(i)      # data-parallel: start / wait for buckets
                launch.enqueue(stream)
        self.collectives.before_launch(len(launches))
        self._enqueue_guard(made, 0)
        for src, dst, n in made.copies:
            drv.memcpy_dtod(dst, src, n, stream, "output")
        if prog._loss_status:
            drv.memcpy_dtod(prog.status_ptr + 8, prog.output_buffers[0].ptr,
                            prog.output_buffers[0].nbytes, stream, "loss status")
        self._enqueue_guard(made, 1)
        if self.flag_ptr != prog.status_ptr:       # the compiler's flag -> the status word
            drv.memcpy_dtod(prog.status_ptr, self.flag_ptr, 4, stream, "non-finite flag")

    def _enqueue_planned(self, launches: list) -> None:
        """The launches on the plan's streams (:func:`latch.runtime.streams.enqueue`)."""
        streams.enqueue(self.plan, launches, self.prog.stream, self.prog.side_streams,
                        self.events)

    def run(self, stream, use_graph: bool, timings: dict,
            at_new: frozenset = frozenset()) -> None:
        """The first use (of a placement) launches every kernel directly; the second records
        them into a CUDA graph; later uses replay it."""
        made = self.setup(at_new)
        if made.graph is not None:
            made.graph.launch(stream)
        elif made.uses == 0 or not use_graph:
            self.record(at_new)
        else:
            t0 = time.perf_counter()
            made.graph = drv.Graph.capture(stream, lambda: self.record(at_new))
            timings["graph_capture_s"] = timings.get("graph_capture_s", 0.0) + \
                time.perf_counter() - t0
            made.graph.launch(stream)
        made.uses += 1

    @property
    def uses(self) -> int:
        return sum(m.uses for m in self.setups.values())

    def graph_captured(self) -> bool:
        return any(m.graph is not None for m in self.setups.values())

    def close(self) -> None:
        for made in self.setups.values():
            if made.graph is not None:
                made.graph.destroy()
                made.graph = None
        for t in self.tables:
            t.free()
        self.tables = []
        if self.events is not None:
            self.events.destroy()
            self.events = None


class CudaTrainingState:
    """The training state of a :class:`CudaProgram` (``prog.init(model)``): it lives in the
    program's device buffers while it is the program's live state.  Same reading API as
    :class:`latch.state.TrainingState`; tensors come back as copies on the GPU."""

    def __init__(self, program: CudaProgram, values: dict):
        self.program = program
        self._saved = values          # {name: tensor} while not live in the program
        self.skipped_steps = 0        # steps not committed (non-finite; on_nonfinite="skip")
        self._param_names = list(program.manifest.get("param_names") or
                                 [s["name"] for s in program.states_spec
                                  if s.get("kind") == "param"])

    def _tensors(self) -> dict:
        if self._saved is not None:
            return {n: t.clone() for n, t in self._saved.items()}
        return self.program.state_dict()

    @property
    def step(self) -> int:
        return int(self._tensors()["step"].item())

    def parameters(self) -> dict:
        t = self._tensors()
        return {n: t[n] for n in self._param_names}

    def tensors(self, kind: str | None = None) -> dict:
        t = self._tensors()
        return {s["name"]: t[s["name"]] for s in self.program.states_spec
                if s["name"] in t and (kind is None or s.get("kind") == kind)}

    def save(self, path) -> None:
        """Checkpoint atomically; reload with ``latch.load_state(path, prog)`` (as
        :meth:`latch.state.TrainingState.save`)."""
        from latch.checkpoint import save_state
        save_state(self, path)

    def __repr__(self) -> str:
        return f"CudaTrainingState(step={self.step}, {len(self.program.state_names)} tensors)"


def resolve_location(loc: dict, arena, buffers: dict) -> int:
    """The device address of a manifest location: ``{"arena": offset}`` in ``arena``, or
    ``{kind: i}`` for the i-th of ``buffers[kind]`` (state/input/output), plus any
    ``byte_offset``; a location naming nothing that exists is a LatchError."""
    off = int(loc.get("byte_offset", 0))
    if "arena" in loc:
        if int(loc["arena"]) >= max(1, arena.nbytes):
            raise LatchError(f"arena offset {loc['arena']} outside the arena "
                             f"({arena.nbytes} bytes)")
        return arena.ptr + int(loc["arena"]) + off
    for key, bufs in buffers.items():
        if key in loc:
            i = int(loc[key])
            if not 0 <= i < len(bufs):
                raise LatchError(f"manifest refers to {key} {i}; there are {len(bufs)}")
            return bufs[i].ptr + off
    raise LatchError(f"manifest location {loc} names no buffer of this artifact "
                     f"(it has {', '.join(['arena', *buffers])})")


def make_launches(specs: list[dict], modules: dict, resolve,
                  dependent: bool = False) -> list["_Launch"]:
    """The launch objects of a manifest launch list: each kernel looked up in its loaded
    module, dynamic shared memory above 48 KiB opted into; ``dependent``: launched with
    programmatic stream serialization (every kernel begins with griddepcontrol.wait).
    A kernel declaring several resident blocks an SM (``.minnctapersm``: the paired
    contraction kernels, 97 KiB each; the attention kernels under ``blocks-per-sm``) also
    asks for the largest shared-memory carveout, so that they fit."""
    launches = []
    for ls in specs:
        module = modules.get(ls["module"])
        if module is None:
            raise LatchError(f"launch of unknown kernel module {ls['module']!r}")
        fn = module.function(ls["kernel"])
        shared = int(ls.get("shared_bytes", 0))
        if shared > 48 * 1024:
            d = drv.driver()
            drv.call("cuFuncSetAttribute", fn,
                     d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                     shared, what=ls["module"])
            if getattr(module, "declares_resident_blocks", False):
                drv.call("cuFuncSetAttribute", fn, d.CUfunction_attribute.
                         CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100,
                         what=ls["module"])
        launches.append(_Launch(ls, fn, resolve, dependent))
    return launches


def open_device(manifest: dict, files: dict[str, bytes], device: int | None):
    """(driver Device, torch device, {module name: loaded module}) for an artifact: checks
    that there is a GPU (saying what torch and the driver see when not) and that it can run
    the artifact's chip, then loads every kernel module's PTX.  ``device`` None is torch's
    current device (under torchrun: the one ``torch.cuda.set_device`` chose)."""
    import torch

    if not torch.cuda.is_available():
        # torch decides whether tensors can live on the GPU; report the driver's view too
        try:
            drv.init()
            extra = "the driver sees a GPU but this torch build has no CUDA support"
        except drv.CudaUnavailableError as e:
            extra = str(e).removeprefix("no CUDA GPU: ")
        raise drv.CudaUnavailableError(f"no CUDA GPU: torch.cuda.is_available() is False; "
                                       f"{extra}")
    torch.cuda.init()
    if device is None:
        device = torch.cuda.current_device()
    dev = drv.Device.get(device)
    chip = manifest.get("target", {}).get("chip", "")
    if chip and _sm(chip) > _sm(dev.chip):
        raise LatchError(f"the artifact was compiled for {chip}; {dev.name} is {dev.chip}")
    if chip.endswith("a") and _sm(chip) != _sm(dev.chip):
        raise LatchError(f"the artifact was compiled for {chip} (architecture-specific: "
                         f"wgmma), which runs only on that architecture; {dev.name} is "
                         f"{dev.chip}: recompile with chip='sm_{_sm(dev.chip)}'")
    modules = {}
    for name, path in sorted(manifest["modules"].items()):
        if path not in files:
            raise LatchError(f"artifact has no {path} (kernel module {name})")
        modules[name] = dev.load_ptx(files[path], name)
    return dev, torch.device("cuda", device), modules


def dependent_launches(manifest: dict, files: dict[str, bytes]) -> bool:
    """Whether the program's kernels may be launched with programmatic stream serialization:
    the compiler says every kernel begins with ``griddepcontrol.wait``
    (``dependent_launches``: latch-dependent-launches), each module's PTX has it, and
    ``LATCH_DEPENDENT_LAUNCHES`` is not ``0``."""
    if os.environ.get("LATCH_DEPENDENT_LAUNCHES", "1") == "0" or \
            not manifest.get("dependent_launches"):
        return False
    return all(b"griddepcontrol.wait" in files.get(path, b"")
               for path in manifest["modules"].values())


def choose_variant(whens: list[list[dict]], counters: dict[int, int]) -> int:
    """The index of the variant whose conditions all hold: each ``{"state": i, "offset":
    k, "period": N, "value": b}`` holds when ``((counters[i] + k) % N == 0) == b``."""
    for index, when in enumerate(whens):
        if all(((counters[w["state"]] + w["offset"]) % w["period"] == 0) == w["value"]
               for w in when):
            return index
    raise LatchError(f"no update variant for the counters {counters}")


def _sm(chip: str) -> int:
    digits = "".join(c for c in chip if c.isdigit())
    return int(digits) if digits else 0
