"""A trace's fingerprint, computed without tracing: what a compile-cache hit is found by.

Tracing (:mod:`latch.frontend.trace`) takes seconds in a new process, most of it torch
importing its tracing stack (``make_fx`` and fake tensors import ``torch._dynamo`` and
sympy).  A cache hit needs no traced graph, only something that determines it.  This module
computes such a thing by running the model (or function) *eagerly*, once, on copies of its
tensors, under a ``TorchFunctionMode`` that records every torch call its Python code makes:

    the call's torch name; its arguments, tensors written as references (parameter ``p<i>``,
    input ``x<i>``, buffer ``b<i>``, result ``r<n>.<k>`` of call ``n``, or a constant
    ``c<j>`` given by shape, dtype and the SHA-256 of its bytes); grad and autocast mode;
    and each tensor result's shape, dtype, device and ``requires_grad``

(plus a header, the values of the buffers, and for a function the structure of its
outputs).  The SHA-256 of this record is :attr:`Fingerprint.digest`.

Why it determines the trace.  Latch's trace runs the same Python code on fake tensors,
which answer every metadata query (shape, dtype, device, ``requires_grad``) as real tensors
do, with the same grad/autocast modes, the same tracing context (math attention, static
one-hot, ``is_fx_tracing()`` true) and parameters that all require grad.  Python code sees
tensors only through torch calls; when it sees nothing but that metadata it makes the same
calls in both runs, and the same calls give the same aten graph under the same torch (whose
version is in the cache key with everything else).  So the recorder gives up
(:class:`NotFingerprintable`, and the cache traces instead) wherever a real run could
differ from a fake one or escape the record:

- a call returning anything but tensors or ``None``, other than a metadata query
  (:data:`METADATA_QUERIES`): ``.item()``, ``bool(t)``, ``.tolist()``, ``.numpy()``,
  ``print(t)``, ``.stride()``, ``.is_contiguous()``, ``.data_ptr()``, ...;
- a function that is not torch's own (a user ``__torch_function__`` override, a custom op),
  ``torch.autograd.*``, tensor hooks, setters;
- a tensor argument computed where the recorder could not see (inside a TorchScript
  function, ...), a tensor subclass, an argument it cannot write down (a callable, a numpy
  array, a generator);
- a custom ``autograd.Function`` or backward hook in the loss's graph, or saved-tensor
  hooks: their Python code runs in the backward pass, which is not run here (without them,
  torch's derivative formulas make the backward a function of the forward);
- ``latch.scan`` / ``latch.repeat`` (the trace keeps them as loops);
- nothing for size: a model too large to run eagerly in a fraction of a second
  (:data:`MAX_WORK`) runs on *fake* tensors instead; the record says which kind of run it
  is.  Values are never computed, which the rules above already make irrelevant.  The fake
  run is a light one (:class:`_CpuMeta`, :class:`_CpuMetaMode`): meta tensors underneath,
  run by torch's meta kernels as ``FakeTensorMode`` runs them, that say they are on the
  cpu and carry the cpu's dispatch keys, so autocast and autograd apply as in the trace.
  Unlike ``FakeTensorMode`` it does not import ``torch._dynamo`` (1.2 s of a warm hit in
  a new process; :class:`_DynamoStub` says how the meta kernels' wrappers are kept from
  importing it).  It refuses what it could answer otherwise than ``FakeTensorMode`` on the
  cpu (another device, a sparse tensor, an op without a meta kernel, an in-place change
  of shape); tests check that it records what a ``FakeTensorMode`` run records.

The run leaves the model's tensors and torch's RNG as they were: parameters, buffers and
inputs are copies, a dispatch mode refuses any write into memory the run did not allocate,
and the CPU RNG state is restored.  Python-level side effects of ``forward`` (a counter it
increments, a cache it fills) happen once more.  It imports neither ``torch._dynamo`` nor
MLIR.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import types
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from latch.cache import tensor_digest

MAX_WORK = 1 << 28
"""Upper bound of (tensor elements of the parameters, buffers and largest input) × (elements
of the largest input): roughly the work of one forward pass; above it the run uses fake
tensors (TinyMoE-196M: 0.3 s instead of minutes of CPU arithmetic)."""

FAKE = "meta"
"""Which fake run a model above :data:`MAX_WORK` gets (see :func:`_run`)."""


def _is_fake(t) -> bool:
    """A tensor of a fake run: :class:`_CpuMeta` (the light run) or torch's FakeTensor."""
    if type(t) is _CpuMeta:
        return True
    from torch._subclasses.fake_tensor import FakeTensor   # (imported by torch itself)
    return isinstance(t, FakeTensor)


_TENSOR_TYPES = (torch.Tensor, nn.Parameter)

METADATA_QUERIES = frozenset(
    [f"torch.Tensor.{g}.__get__" for g in ("shape", "dtype", "device", "ndim",
                                           "requires_grad", "layout", "is_cpu", "is_cuda",
                                           "is_meta", "is_sparse", "is_quantized",
                                           "is_nested", "itemsize", "nbytes", "names")]
    + [f"torch.Tensor.{m}" for m in ("size", "dim", "ndimension", "numel", "nelement",
                                     "element_size", "is_floating_point", "is_complex",
                                     "is_signed", "get_device", "has_names", "__len__",
                                     "__hash__")]
    + ["torch.numel", "torch.is_floating_point", "torch.is_complex", "torch.result_type",
       "torch.device"])
"""Calls whose non-tensor results Python code may see: fake tensors give the same answers."""

_REFUSED = ("torch.autograd.", "torch.Tensor.backward", "torch.Tensor.register_hook",
            "torch.Tensor.register_post_accumulate_grad_hook")


class NotFingerprintable(Exception):
    """The model cannot be fingerprinted (the message says why): the cache traces it."""


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """What :func:`fingerprint_loss_and_grads` / :func:`fingerprint_function` return."""
    kind: str               # "loss_and_grads" | "function", as TracedGraph.kind
    precision: str
    digest: str             # SHA-256 of the record (see the module docstring)
    calls: int              # torch calls recorded
    out_treedef: Any = None  # a function's output structure (as TracedGraph.out_treedef)


def _canonical(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


def _is_torch_module(name) -> bool:
    return isinstance(name, str) and (name == "torch" or name.startswith("torch."))


def _torch_name(func) -> str:
    """The qualified torch name of ``func``; refuses anything that is not torch's own."""
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        if func.namespace not in ("aten", "prims"):
            raise NotFingerprintable(f"custom op {func}: its implementation is not recorded")
        return f"torch.ops.{resolve_name(func)}"
    if isinstance(func, types.FunctionType) and not _is_torch_module(func.__module__):
        raise NotFingerprintable(f"{func.__module__}.{func.__qualname__} overrides a torch "
                                 "call")
    name = resolve_name(func)
    if name is None:
        module, qual = getattr(func, "__module__", None), getattr(func, "__qualname__", None)
        if not _is_torch_module(module) or not qual:
            raise NotFingerprintable(f"{func!r} is not a torch function")
        name = f"{module}.{qual}"
    if not name.startswith("torch."):
        raise NotFingerprintable(f"{name} is not a torch function")
    return name


# ----------------------------------------------------------------------------- recording
def _storage(t: torch.Tensor) -> int:
    try:
        if type(t) is _CpuMeta:    # no memory: its meta storage's identity instead
            return t.elem.untyped_storage()._cdata
        if _is_fake(t):            # no memory: the storage object's identity instead
            return t.untyped_storage()._cdata
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):       # sparse, nested, ...
        raise NotFingerprintable(f"a {t.layout} tensor") from None


_DATA_DEPENDENT_TAGS = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)


def _data_dependent(func, args, kwargs) -> bool:
    """Whether fake tensors cannot run ``func`` on these arguments (its result's shape or
    value depends on tensor values): ops tagged so, except where the arguments make them
    static (integer indexing; one_hot with ``num_classes``)."""
    aten = torch.ops.aten
    if func is aten.index.Tensor:
        return any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in args[1])
    if func is aten.one_hot.default:
        return (args[1] if len(args) > 1 else kwargs.get("num_classes", -1)) < 0
    return any(tag in _DATA_DEPENDENT_TAGS for tag in func.tags)


# ----------------------------------------------------------------------------- light fake run
_CPU, _META = torch.device("cpu"), torch.device("meta")


class _CpuMeta(torch.Tensor):
    """A tensor of the light fake run: a meta tensor (``elem``: shape, strides, dtype, no
    memory) that says it is on the cpu.  As for torch's ``FakeTensor``, its dispatch keys are
    the cpu's, so autocast and autograd treat it as a cpu tensor.  Only
    :class:`_CpuMetaMode` computes with it."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        t = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=_CPU, requires_grad=False)
        t.elem = elem
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self) -> torch.device:     # (as FakeTensor: a property, so not recorded)
        return _CPU

    @classmethod
    def __torch_dispatch__(cls, func, types_, args=(), kwargs=None):
        reason = f"{func} on a fake tensor outside the fake run's mode"
        for refuse in _LIGHT_RUNS[-1:]:     # (torch code that disabled the modes: refused
            refuse(reason)                  # even if some code catches the exception)
        raise NotFingerprintable(reason)


_LIGHT_RUNS: list[_Refusals] = []
"""The refusals of the light fake run in progress (see :func:`_recording`)."""


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=_META)


class _CpuMetaMode(TorchDispatchMode):
    """Runs every aten op of the light fake run on the meta tensors underneath (torch's meta
    kernels: what ``FakeTensorMode`` runs too) and gives back :class:`_CpuMeta` tensors.
    Refuses (:class:`NotFingerprintable`) where it could answer otherwise than
    ``FakeTensorMode`` on the cpu: another device, a layout but strided, a tensor subclass,
    an op without a meta kernel, an op changing a tensor's shape or strides in place.
    (torch's Python meta kernels call ``torch._check``, which imports sympy: 0.5 s.)"""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:   # (else torch wraps this mode in torch._dynamo)
        return False

    def __init__(self, refuse: Callable[[str], NotFingerprintable] = NotFingerprintable):
        super().__init__()
        self.refuse = refuse
        self.constants: dict[int, torch.Tensor] = {}    # id(real tensor) -> its meta twin
        self.keep: list[torch.Tensor] = []              # (so that those ids stay unique)

    def _meta(self, x, inputs: dict):
        if type(x) is _CpuMeta:
            inputs[id(x.elem)] = x
            return x.elem
        if isinstance(x, torch.Tensor):          # a tensor that existed before the run
            if (type(x) not in _TENSOR_TYPES or x.device != _CPU
                    or x.layout != torch.strided):
                raise NotFingerprintable(f"a {type(x).__qualname__} on {x.device} "
                                         f"({x.layout}) in a fake run")
            m = self.constants.get(id(x))
            if m is None:
                m = self.constants[id(x)] = _meta_like(x)
                self.keep.append(x)
            return m
        if isinstance(x, torch.device):
            if x.type != "cpu":
                raise NotFingerprintable(f"a tensor on {x} (the trace runs on the cpu)")
            return _META
        return x

    def _wrap(self, func, x, inputs: dict):
        if not isinstance(x, torch.Tensor):
            return x
        own = inputs.get(id(x))
        if own is not None:                      # an input returned (in place, ...)
            if (own.size() != x.size() or own.stride() != x.stride() or own.dtype != x.dtype
                    or own.storage_offset() != x.storage_offset()):
                raise NotFingerprintable(f"{func} changes a tensor's shape in place")
            return own
        if x.device != _META:
            raise NotFingerprintable(f"{func} gives a tensor on {x.device}")
        return _CpuMeta(x)

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        with torch._C.DisableTorchFunction():
            try:
                if torch.Tag.inplace_view in func.tags or func.name().startswith(
                        ("aten::resize", "aten::set_")):
                    raise NotFingerprintable(f"{func} changes a tensor's shape in place")
                if any(a.name == "device" and kwargs.get("device", a.default_value) is None
                       and a.kwarg_only for a in func._schema.arguments):
                    kwargs["device"] = _CPU  # the default device (checked: the cpu)
                inputs: dict[int, _CpuMeta] = {}
                args, kwargs = pytree.tree_map(lambda x: self._meta(x, inputs),
                                               (tuple(args), kwargs))
                try:
                    out = func(*args, **kwargs)
                except NotImplementedError as e:
                    raise NotFingerprintable(f"{func} has no meta kernel ({e})") from None
                return pytree.tree_map(lambda x: self._wrap(func, x, inputs), out)
            except NotFingerprintable as e:
                raise self.refuse(str(e)) from None


class _DynamoStub(types.ModuleType):
    """Stands in for ``torch._dynamo`` (when not imported yet) during a light fake run.

    torch's Python meta kernels (``torch._refs``, ``torch._prims_common.wrappers``) are
    wrapped by ``torch._disable_dynamo``, which imports ``torch._dynamo`` (1.2 s) on their
    first call only to wrap them in ``torch._dynamo.disable`` (no Dynamo frame evaluation
    while they run).  Nothing is compiled by Dynamo in a process that has not imported it, so
    calling the kernel itself is the same: :meth:`disable` returns it as it is (and the run
    takes that mark off again, :func:`_without_dynamo`).  Anything else asked of this module
    refuses the run (its answer could differ) and hands over to the real ``torch._dynamo``
    (imported then), so that other code in the process gets what it asked for."""

    def __init__(self, refuse: Callable[[str], Any]):
        super().__init__("torch._dynamo")
        self.refuse = refuse
        self.disabled: list = []

    def disable(self, fn, recursive=True, wrapping=True):
        self.disabled.append(fn)
        return fn

    def release(self):
        """Take this stand-in out of ``sys.modules`` (if it is still there)."""
        import sys
        if sys.modules.get("torch._dynamo") is self:
            del sys.modules["torch._dynamo"]

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name != "__path__":
            raise AttributeError(name)      # introspection (inspect looks for __file__)
        import importlib
        self.refuse(f"torch._dynamo.{name} is asked for in the fingerprint run")
        self.release()
        return getattr(importlib.import_module("torch._dynamo"), name)


@contextlib.contextmanager
def _without_dynamo(refuse: Callable[[str], Any]):
    """:class:`_DynamoStub` in ``sys.modules`` while the light run runs, if ``torch._dynamo``
    is not imported yet; then the marks ``torch._disable_dynamo`` left on the kernels are
    taken off (their next call outside the run wraps them in the real ``disable``)."""
    import sys
    if "torch._dynamo" in sys.modules:
        yield
        return
    stub = _DynamoStub(refuse)
    sys.modules["torch._dynamo"] = stub
    try:
        yield
    finally:
        stub.release()
        if torch.__dict__.get("_dynamo") is stub:
            del torch.__dict__["_dynamo"]
        for fn in stub.disabled:
            if getattr(fn, "__dict__", {}).get("__dynamo_disable") is fn:
                del fn.__dict__["__dynamo_disable"]


class _Refusals:
    """The reasons the run gave up, kept even when the model's code catches the exception
    (a model taking another path after an error would make the record wrong)."""

    def __init__(self):
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> NotFingerprintable:
        self.reasons.append(reason)
        return NotFingerprintable(reason)


class _Allocations(TorchDispatchMode):
    """Every aten op of the run: remembers which tensors the run created and which memory it
    allocated, and refuses a write into any other memory (the model's or the user's)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:   # (else torch wraps this mode in torch._dynamo)
        return False

    def __init__(self, own: list[torch.Tensor], refuse: _Refusals):
        super().__init__()
        self.refuse = refuse
        self.created: set[int] = {id(t) for t in own}
        self.fresh: set[int] = {_storage(t) for t in own} - {0}

    def _writable(self, t) -> bool:
        ptr = _storage(t)
        return ptr in self.fresh if ptr else id(t) in self.created

    def _check(self, func, args, kwargs) -> None:
        if _data_dependent(func, args, kwargs):
            raise NotFingerprintable(f"{func}: its result depends on tensor values (a fake "
                                     "tensor cannot compute it)")
        if not func._schema.is_mutable:
            return
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is None or not a.alias_info.is_write:
                continue
            value = args[i] if i < len(args) else kwargs.get(a.name)
            for t in pytree.tree_leaves(value):
                if isinstance(t, torch.Tensor) and not self._writable(t):
                    raise NotFingerprintable(f"{func} writes into a tensor the model did not "
                                             "create")

    def _note(self, args, kwargs, out) -> None:
        inputs = {_storage(t) for t in pytree.tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.created.add(id(t))
                ptr = _storage(t)
                if ptr and ptr not in inputs:
                    self.fresh.add(ptr)

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunction():
            try:
                self._check(func, args, kwargs)
                out = func(*args, **kwargs)
                self._note(args, kwargs, out)
            except NotFingerprintable as e:
                raise self.refuse(str(e)) from None
        return out


class _Recorder(TorchFunctionMode):
    """Writes each torch call of the run into the record (see the module docstring)."""

    def __init__(self, allocations: _Allocations, refuse: _Refusals):
        super().__init__()
        self.allocations = allocations
        self.refuse = refuse
        self.hash = hashlib.sha256()
        self.labels: dict[int, str] = {}
        self.keep: list[torch.Tensor] = []     # labelled tensors stay alive: ids stay unique
        self.constants: set[int] = set()
        self.calls = 0

    def write(self, entry) -> None:
        self.hash.update(_canonical(entry) + b"\n")

    def name(self, t: torch.Tensor, label: str) -> None:
        self.labels[id(t)] = label
        self.keep.append(t)

    def ref(self, t: torch.Tensor) -> str:
        if type(t) not in _TENSOR_TYPES and not _is_fake(t):
            raise self.refuse(f"a tensor of type {type(t).__qualname__}")
        label = self.labels.get(id(t))
        if label is None:
            if id(t) in self.allocations.created:
                raise self.refuse("a tensor computed outside the recorded torch calls "
                                  "(a TorchScript function, a custom mode, ...)")
            label = f"c{len(self.constants)}"   # a tensor that existed before the run
            with _disable_current_modes():      # (its bytes, not a fake run's copy of it)
                self.write(["constant", label, tensor_digest(t)])
            self.constants.add(id(t))
            self.name(t, label)
        return label

    def arg(self, x):
        """``x`` as JSON; tensors by reference, every other kind tagged (no ambiguity)."""
        kind = type(x)
        if isinstance(x, torch.Tensor):
            return ["t", self.ref(x)]
        if x is None or kind in (bool, int, str):
            return x
        if kind is float:
            return ["f", x.hex()]
        if kind is complex:
            return ["j", x.real.hex(), x.imag.hex()]
        if kind in (torch.dtype, torch.layout, torch.memory_format, torch.device):
            return [kind.__name__, str(x)]
        if kind is torch.Size:
            return ["size", list(x)]
        if kind is slice:
            return ["slice", self.arg(x.start), self.arg(x.stop), self.arg(x.step)]
        if x is Ellipsis:
            return ["..."]
        if kind in (tuple, list):
            return [kind.__name__, [self.arg(v) for v in x]]
        if kind is dict and all(type(k) is str for k in x):
            return ["dict", [[k, self.arg(v)] for k, v in x.items()]]
        raise self.refuse(f"an argument of type {kind.__qualname__}")

    def result(self, name: str, out) -> list:
        leaves = pytree.tree_leaves(out)
        if name not in METADATA_QUERIES and any(
                v is not None and not isinstance(v, torch.Tensor) for v in leaves):
            raise self.refuse(f"{name} gives Python code something other than tensors "
                              "(values or memory layout a fake tensor does not have)")
        outs = []
        for k, t in enumerate(v for v in leaves if isinstance(v, torch.Tensor)):
            if type(t) not in _TENSOR_TYPES and not _is_fake(t):
                raise self.refuse(f"{name} returns a {type(t).__qualname__}")
            if id(t) not in self.labels:
                self.name(t, f"r{self.calls}.{k}")
            outs.append([self.labels[id(t)], list(t.shape), str(t.dtype), str(t.device),
                         t.requires_grad])
        return outs

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            name = _torch_name(func)
        except NotFingerprintable as e:
            raise self.refuse(str(e)) from None
        if name.startswith(_REFUSED) or name.endswith((".__set__", ".__delete__")):
            raise self.refuse(f"{name}: its effect is not recorded")
        if torch._C._autograd._top_saved_tensors_default_hooks(False) is not None:
            raise self.refuse("saved-tensor hooks run Python code in the backward pass")
        entry = [name, self.arg(args), self.arg(kwargs), torch.is_grad_enabled(),
                 torch.is_autocast_enabled("cpu") and str(torch.get_autocast_dtype("cpu"))]
        method = name.rsplit(".", 1)[-1]
        if (method.endswith("_") and not method.startswith("_") and args
                and isinstance(args[0], torch.Tensor) and id(args[0]) in self.constants):
            raise self.refuse(f"{name} changes a tensor the model did not create")
        try:
            out = func(*args, **kwargs)
        except NotFingerprintable as e:    # kept, even if the model's code catches it
            self.refuse(str(e))
            raise
        except BaseException as e:  # a fake run might not raise here: the paths could part
            self.refuse(f"{name} raised {type(e).__name__}")
            raise
        entry.append(self.result(name, out))
        self.write(entry)
        self.calls += 1
        return out


@contextlib.contextmanager
def _recording(header: list, own: list[torch.Tensor], precision: str,
               light: _CpuMetaMode | None = None):
    """The run's environment (as Latch's trace: see the module docstring), with the recorder
    on top (and the light fake run's mode under the allocation checks, when ``light``);
    torch's CPU RNG state, thread count and fx-tracing flag are restored after."""
    import torch.fx._symbolic_trace as fx_trace

    from latch.frontend import structured
    from latch.frontend.trace import tracing_context

    rng, threads, fx_flag = torch.get_rng_state(), torch.get_num_threads(), \
        fx_trace._is_fx_tracing_flag
    refuse = _Refusals()
    allocations = _Allocations(own, refuse)
    recorder = _Recorder(allocations, refuse)
    if light is not None:
        light.refuse = refuse
        _LIGHT_RUNS.append(refuse)
    recorder.write(["latch-fingerprint/1", *header, str(torch.get_default_dtype()),
                    torch.are_deterministic_algorithms_enabled()])
    try:
        torch.set_num_threads(1)            # small tensors (MAX_WORK): threads only cost
        fx_trace._is_fx_tracing_flag = True  # as under make_fx
        with contextlib.ExitStack() as stack:
            stack.enter_context(tracing_context(precision))
            loops = stack.enter_context(structured.recording("fingerprint", precision))
            if light is not None:
                stack.enter_context(_without_dynamo(refuse))
                stack.enter_context(light)
            stack.enter_context(allocations)
            stack.enter_context(recorder)
            yield recorder
        if loops.refused:        # refused, and the model's code caught the exception
            refuse(f"{loops.refused} is traced into a loop")
        if refuse.reasons:
            raise NotFingerprintable(refuse.reasons[0])
    finally:
        if light is not None:
            _LIGHT_RUNS.remove(refuse)
        fx_trace._is_fx_tracing_flag = fx_flag
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)


def _too_large(tensors, inputs) -> bool:
    """Whether the run should use fake tensors (see :data:`MAX_WORK`)."""
    largest = max((x.numel() for x in inputs), default=1)
    return (sum(t.numel() for t in tensors) + largest) * largest > MAX_WORK


def _example_inputs(example_inputs) -> list[torch.Tensor]:
    inputs = ([example_inputs] if isinstance(example_inputs, torch.Tensor)
              else list(example_inputs))
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise NotFingerprintable("an example input is not a tensor")
    return inputs


def _check_backward(loss: torch.Tensor) -> None:
    """Refuse a loss whose autograd graph runs Python code (custom Functions, module backward
    hooks): the backward pass is not recorded."""
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            raise NotFingerprintable(f"{type(node).__name__}: a custom autograd.Function or "
                                     "backward hook")
        stack.extend(n for n, _ in node.next_functions)


def _run(kind: str, precision: str, params, buffers, inputs, call: Callable, grad: bool,
         fake: str | None = None):
    """``call(params, buffers, inputs)`` on copies of the tensors, recorded; returns
    (recorder, output).  The copies are real (``fake`` None), :class:`_CpuMeta` tensors
    (``"meta"``: the light fake run) or torch's fake tensors (``"torch"``: FakeTensorMode,
    which imports torch._dynamo and sympy; kept to check the light run against).  Parameters
    are ``p<i>`` (requiring grad, as under the trace's ``grad_and_value``), buffers ``b<i>``
    (their values are in the header), inputs ``x<i>``."""
    mode, light = contextlib.nullcontext(), None
    copy = lambda t: t.detach().clone()  # noqa: E731
    if fake == "meta":
        if torch.get_default_device() != _CPU:
            raise NotFingerprintable(f"the default device is {torch.get_default_device()}")
        light = _CpuMetaMode()
        copy = lambda t: _CpuMeta(_meta_like(t))  # noqa: E731
    elif fake == "torch":
        from torch._subclasses.fake_tensor import FakeTensorMode
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        copy = lambda t: mode.from_tensor(t.detach())  # noqa: E731
    elif fake is not None:
        raise ValueError(f"fake={fake!r}")
    for t in (*params, *buffers, *inputs):
        if fake and (t.device != _CPU or t.layout != torch.strided):
            raise NotFingerprintable(f"a {t.layout} tensor on {t.device} in a fake run")
    with mode:
        own_p = [copy(p).requires_grad_(p.is_floating_point()) for p in params]
        own_b = [copy(b) for b in buffers]
        own_x = [copy(x) for x in inputs]
    header = [kind, precision, [[list(p.shape), str(p.dtype)] for p in params],
              [[list(x.shape), str(x.dtype)] for x in inputs],
              [tensor_digest(b) for b in buffers], f"fake-{fake}" if fake else "eager"]
    with mode, _recording(header, own_p + own_b + own_x, precision, light) as rec:
        for prefix, own in (("p", own_p), ("b", own_b), ("x", own_x)):
            for i, t in enumerate(own):
                rec.name(t, f"{prefix}{i}")
        with torch.enable_grad() if grad else torch.no_grad():
            out = call(own_p, own_b, own_x)
    return rec, out


def fingerprint_loss_and_grads(model: nn.Module, example_inputs,
                               precision: str = "fp32") -> Fingerprint:
    """The fingerprint of ``trace_loss_and_grads(model, example_inputs, precision)``: the
    forward pass recorded with every parameter requiring grad (the gradients follow from it,
    :func:`_check_backward`).  Raises :class:`NotFingerprintable`."""
    inputs = _example_inputs(example_inputs)
    pnames, params = [n for n, _ in model.named_parameters()], list(model.parameters())
    bnames, buffers = [n for n, _ in model.named_buffers()], list(model.buffers())
    fake = _too_large(params + buffers, inputs)

    def call(ps, bs, xs):
        state = {**dict(zip(pnames, ps)), **dict(zip(bnames, bs))}
        return torch.func.functional_call(model, state, tuple(xs))
    rec, loss = _run("loss_and_grads", precision, params, buffers, inputs, call, grad=True,
                     fake=FAKE if fake else None)
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.is_floating_point()):
        raise NotFingerprintable("forward does not return a floating-point scalar")
    _check_backward(loss)
    rec.write(["loss", rec.ref(loss)])
    return Fingerprint("loss_and_grads", precision, rec.hash.hexdigest(), rec.calls)


def fingerprint_function(fn, example_inputs, precision: str = "fp32") -> Fingerprint:
    """The fingerprint of ``trace_function(fn, example_inputs, precision=precision)`` (an
    ``nn.Module``'s parameters and buffers are constants of that graph: here they are
    buffers, their values in the record).  Raises :class:`NotFingerprintable`."""
    inputs = _example_inputs(example_inputs)
    if isinstance(fn, nn.Module):
        named = list(fn.named_parameters()) + list(fn.named_buffers())
        names, tensors = [n for n, _ in named], [t for _, t in named]

        def call(ps, bs, xs):
            return torch.func.functional_call(fn, dict(zip(names, bs)), tuple(xs))
    else:
        tensors = []

        def call(ps, bs, xs):
            return fn(*xs)
    rec, out = _run("function", precision, [], tensors, inputs, call, grad=False,
                    fake=FAKE if _too_large(tensors, inputs) else None)
    leaves, treedef = pytree.tree_flatten(out)
    if not leaves or not all(isinstance(v, torch.Tensor) for v in leaves):
        raise NotFingerprintable("the function does not return only tensors")
    rec.write(["outputs", [rec.ref(v) for v in leaves], str(treedef)])
    return Fingerprint("function", precision, rec.hash.hexdigest(), rec.calls, treedef)
