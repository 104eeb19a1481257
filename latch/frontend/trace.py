"""Stage 1 (trace): a PyTorch model's loss and gradients as one functional aten graph.

``trace_loss_and_grads(model, example_inputs)`` traces

    (p_0, …, p_{P-1}, x_0, …, x_{I-1})  →  (loss, g_0, …, g_{P-1})

where ``p_i`` are the model's parameters in ``model.named_parameters()`` order (the order
is recorded in :attr:`TracedGraph.param_names`) and ``g_i = ∂loss/∂p_i`` in the same order.
Buffers (``model.named_buffers()``) are baked in as constants.  The graph is made with
``make_fx`` over ``torch.func.grad_and_value`` + ``torch.func.functional_call``, in fake
tensor mode, functionalised (no mutation), with Latch's decomposition table
(:mod:`latch.frontend.decompositions`), attention forced onto the math path (no
flash/efficient-attention ops) and a data-independent ``F.one_hot``.

``trace_function(fn_or_module, example_inputs)`` traces a plain function (no gradients).
For an ``nn.Module``, parameters and buffers become **constants** of the graph by default
(``params="constants"``); with ``params="inputs"`` they become leading inputs in
``named_parameters()`` order, like in the loss-and-grads graph.

Tracing is deterministic: the same model and input shapes give the same graph text.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import traceback
import dataclasses
from typing import Any, Callable, Sequence

import torch
import torch.fx
import torch.nn as nn
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

from latch.errors import LatchError, UnsupportedOpError
from latch.frontend import attention
from latch.frontend.decompositions import StaticOneHotMode, decomposition_table

PRECISIONS = ("fp32", "bf16")


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Name, static shape and dtype of one graph input or output."""
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @staticmethod
    def of(name: str, t: torch.Tensor) -> "TensorSpec":
        return TensorSpec(name, tuple(int(s) for s in t.shape), t.dtype)


@dataclasses.dataclass
class TracedGraph:
    """One traced functional aten graph and its calling convention.

    ``input_specs`` are the graph's placeholders in order (parameters first, when they are
    inputs, then the example inputs); ``output_specs`` its flat outputs in order.
    ``kind`` is ``"loss_and_grads"`` or ``"function"``.
    """
    graph_module: torch.fx.GraphModule
    kind: str
    param_names: list[str]
    param_shapes: list[tuple[int, ...]]
    param_dtypes: list[torch.dtype]
    input_specs: list[TensorSpec]
    output_specs: list[TensorSpec]
    precision: str = "fp32"
    name: str = "model"
    out_treedef: Any = None          # pytree structure of trace_function's outputs

    @property
    def num_params(self) -> int:
        return len(self.param_names)

    @property
    def graph_text(self) -> str:
        return str(self.graph_module.graph)

    def aten_ops(self) -> list[str]:
        """Sorted distinct call_function targets of the graph."""
        return sorted({str(n.target) for n in self.graph_module.graph.nodes
                       if n.op == "call_function"})


# ----------------------------------------------------------------------------- setup
@contextlib.contextmanager
def tracing_context(precision: str = "fp32"):
    """The context every Latch trace runs under (math attention, static one_hot, autocast)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if precision not in PRECISIONS:
        raise LatchError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    with contextlib.ExitStack() as stack:
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        stack.enter_context(StaticOneHotMode())
        if precision == "bf16":
            stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
            if attention.current() in attention.ROUTED_MODES:   # attention="flash"/"fused"
                stack.enter_context(attention.FlashRoundingMode())
        yield


def _as_tuple(example_inputs) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def _check_inputs(example_inputs: tuple):
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise LatchError(f"example input {i} is a {type(x).__name__}, not a tensor; "
                             "pass only tensors (bake other arguments into the model)")


def _check_input_dtypes(params, example_inputs):
    """Floating example inputs must have the parameters' floating dtype (eager PyTorch
    rejects e.g. a float64 batch through float32 Linear layers; fake tracing does not)."""
    dtypes = {p.dtype for p in params if p.is_floating_point()}
    if len(dtypes) != 1:
        return
    (want,) = dtypes
    for i, x in enumerate(example_inputs):
        if x.is_floating_point() and x.dtype != want:
            raise LatchError(f"example input {i} is {x.dtype} but the model's parameters are "
                             f"{want}; cast the inputs (x.to({want})) or the model")


def _signature(fn, name: str) -> str:
    import inspect
    try:
        return f"{name}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return name


@contextlib.contextmanager
def _full_stack_traces():
    """make_fx keeps only frames named ``forward`` in node stack traces; keep them all (the
    supported-op check picks the innermost user frame itself)."""
    from torch.fx.proxy import TracerBase
    orig = TracerBase._filter_traceback_frames
    torch_dir = os.path.dirname(torch.__file__)

    def keep_non_torch(self, summary):
        return traceback.StackSummary.from_list(
            [f for f in summary if not f.filename.startswith(torch_dir)])

    TracerBase._filter_traceback_frames = keep_non_torch
    try:
        yield
    finally:
        TracerBase._filter_traceback_frames = orig


@functools.cache
def _data_dependent_errors() -> tuple:
    """The exceptions of a data-dependent op under fake tensors (looked up when one is
    raised: importing symbolic_shapes imports sympy, which a cache hit does not need)."""
    from torch._subclasses import fake_tensor
    from torch.fx.experimental import symbolic_shapes
    errs = [symbolic_shapes.GuardOnDataDependentSymNode]
    for n in ("DynamicOutputShapeException", "DataDependentOutputException",
              "UnsupportedOperatorException"):
        if hasattr(fake_tensor, n):
            errs.append(getattr(fake_tensor, n))
    return tuple(errs)


def _describe(args: Sequence[torch.Tensor]) -> str:
    return ", ".join(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}" for t in args)


def _user_frame(tb) -> str | None:
    """``file:line: code`` of the innermost traceback frame outside torch and Latch."""
    skip = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    frames = [f for f in traceback.extract_tb(tb)
              if not f.filename.startswith(skip) and not f.filename.startswith("<")]
    if not frames:
        return None
    f = frames[-1]
    return f"at {f.filename}:{f.lineno}: {(f.line or '').strip()}"


class _DropLogs:
    """A logging filter that drops every record (fake-tensor mode logs a full traceback at
    ERROR level before raising; the error Latch raises already carries its message)."""
    @staticmethod
    def filter(record):
        return False


def _make_fx(fn: Callable, args: Sequence[torch.Tensor], precision: str,
             user_args: Sequence[torch.Tensor] = (), signature: str = ""):
    import logging
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    with tracing_context(precision), _full_stack_traces():
        fake_log.addFilter(_DropLogs)
        try:
            gm = make_fx(fn, decomposition_table=decomposition_table(),
                         tracing_mode="fake", record_stack_traces=True,
                         _allow_non_fake_inputs=True)(*args)
        except _data_dependent_errors() as e:
            raise UnsupportedOpError(
                "the model has data-dependent control flow or shapes, which a static "
                "training graph cannot express",
                diagnostics=[str(e).splitlines()[0],
                             "hint: compute with masks (torch.where) instead of .item(), "
                             "boolean indexing or nonzero()"]) from None
        except LatchError:
            raise
        except Exception as e:  # noqa: BLE001 - the model failed on the example inputs
            where = _user_frame(e.__traceback__)
            first = (str(e).strip().splitlines() or [""])[0]
            err = LatchError(
                f"tracing {signature or 'the model'} on the example inputs failed: "
                f"{type(e).__name__}: {first}",
                diagnostics=([where] if where else []) + [
                    f"example inputs: ({_describe(user_args)})",
                    "hint: example_inputs must be one real batch: as many tensors as "
                    "forward() takes, with the shapes and dtypes the model expects"])
            err.original = e
            raise err from None
        finally:
            fake_log.removeFilter(_DropLogs)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    _functionalize_leftover_inplace(gm)
    _check_static_shapes(gm)
    return gm


def _functionalize_leftover_inplace(gm) -> None:
    """Replace in-place ops that functionalisation could not see (ops on tensors computed
    only from constants, e.g. ``rms_norm``'s decomposition applied to a baked-in weight)
    by their out-of-place overloads, when nothing reads the mutated tensor afterwards."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    changed = False
    for n in list(gm.graph.nodes):
        t = n.target
        if n.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
            continue
        if not t._schema.is_mutable:
            continue
        name = t._schema.name.split("::")[1]
        if not name.endswith("_") or name.startswith("_"):
            continue
        packet = getattr(torch.ops.aten, name[:-1], None)
        functional = getattr(packet, t._overloadname, None) if packet is not None else None
        dst = n.args[0] if n.args else None
        if functional is None or not isinstance(dst, torch.fx.Node):
            continue
        if any(order[u] > order[n] for u in dst.users if u is not n):
            continue
        n.target = functional
        changed = True
    if changed:
        gm.recompile()


def _check_static_shapes(gm):
    """Reject ops whose output shape depends on data (nonzero, boolean indexing, …)."""
    from latch.frontend.support import _location
    for n in gm.graph.nodes:
        vals = pytree.tree_leaves(n.meta.get("val"))
        for v in vals:
            if isinstance(v, torch.Tensor) and not all(isinstance(d, int) for d in v.shape):
                raise UnsupportedOpError(
                    f"unsupported op {n.target}: its output shape depends on tensor values",
                    diagnostics=[f"at {_location(n)}",
                                 "hint: compute with masks (torch.where) instead of boolean "
                                 "indexing, nonzero() or .item()"])


def _out_specs(gm, args, names):
    """Output specs from the traced graph's node metadata."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    flat = pytree.tree_leaves(out_node.args[0])
    specs = []
    for i, n in enumerate(flat):
        val = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            raise LatchError(f"output {i} of the traced graph is not a tensor")
        specs.append(TensorSpec(names[i] if i < len(names) else f"out{i}",
                                tuple(int(s) for s in val.shape), val.dtype))
    return specs


def _named_params(model: nn.Module):
    names, params = [], []
    for n, p in model.named_parameters():
        names.append(n)
        params.append(p.detach())
    return names, params


# ----------------------------------------------------------------------------- reuse
_REUSE: contextvars.ContextVar = contextvars.ContextVar("latch_reuse_trace", default=None)


@contextlib.contextmanager
def reuse_trace(traced: "TracedGraph", fn, example_inputs):
    """Within this block, tracing ``fn`` (the same object) on the same input tensors and
    precision returns ``traced`` instead of tracing again: ``latch.compile`` traces once to
    compute its cache key (latch.cache), then builds the program from that trace."""
    token = _REUSE.set((traced, fn, tuple(_as_tuple(example_inputs))))
    try:
        yield
    finally:
        _REUSE.reset(token)


def _reused(kind: str, fn, example_inputs, precision: str):
    held = _REUSE.get()
    if held is None:
        return None
    traced, held_fn, held_inputs = held
    inputs = tuple(_as_tuple(example_inputs))
    if (traced.kind == kind and held_fn is fn and traced.precision == precision
            and len(inputs) == len(held_inputs)
            and all(a is b for a, b in zip(inputs, held_inputs))):
        return traced
    return None


# ----------------------------------------------------------------------------- API
def trace_loss_and_grads(model: nn.Module, example_inputs, precision: str = "fp32",
                         name: str | None = None) -> TracedGraph:
    """Trace ``(params…, inputs…) → (loss, grads…)`` for ``model(*inputs)`` returning a
    scalar loss.  Parameters in ``model.named_parameters()`` order; buffers are constants.

    ``precision="bf16"`` traces under ``torch.autocast("cpu", dtype=torch.bfloat16)``:
    parameters stay fp32 (master weights), matmul inputs are cast to bf16 as autocast does,
    the loss and gradients come back in the parameters' dtype (fp32).
    """
    reused = _reused("loss_and_grads", model, example_inputs, precision)
    if reused is not None:
        return reused
    example_inputs = _as_tuple(example_inputs)
    _check_inputs(example_inputs)
    names, params = _named_params(model)
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    P = len(params)

    _check_input_dtypes(params, example_inputs)

    def loss_fn(ps, inputs):
        state = dict(zip(names, ps))
        state.update(buffers)
        loss = torch.func.functional_call(model, state, tuple(inputs))
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            got = (f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor)
                   else f"a {type(loss).__name__}")
            raise LatchError(f"the model's forward must return a scalar loss tensor, it "
                             f"returned {got} (reduce it, e.g. with .mean())")
        if not loss.is_floating_point():
            raise LatchError(f"the model's forward must return a floating-point loss to "
                             f"differentiate, it returned a {loss.dtype} scalar")
        return loss

    grad_and_value = torch.func.grad_and_value(loss_fn)

    def joint(*flat):
        grads, loss = grad_and_value(tuple(flat[:P]), flat[P:])
        return (loss, *grads)

    joint_fn = torch.func.functionalize(joint, remove="mutations")
    # latch.structured hook: latch.scan/latch.repeat stay one node each (bodies traced once)
    from latch.frontend import structured
    try:
        with structured.recording("joint", precision) as rec:
            gm = _make_fx(joint_fn, [*params, *example_inputs], precision, example_inputs,
                          _signature(model.forward, type(model).__name__ + ".forward"))
    except structured.NeedsAutogradJoint:
        with structured.recording("joint-autograd", precision) as rec:
            gm = _make_fx(structured.autograd_joint(loss_fn, P), [*params, *example_inputs],
                          precision, example_inputs,
                          _signature(model.forward, type(model).__name__ + ".forward"))
    structured.finish(gm, rec, precision)
    # end latch.structured hook
    input_specs = ([TensorSpec.of(n, p) for n, p in zip(names, params)]
                   + [TensorSpec.of(f"input{i}", x) for i, x in enumerate(example_inputs)])
    _rename_placeholders(gm, [s.name for s in input_specs])
    out_names = ["loss"] + [f"grad.{n}" for n in names]
    return TracedGraph(
        graph_module=gm, kind="loss_and_grads", param_names=names,
        param_shapes=[tuple(p.shape) for p in params],
        param_dtypes=[p.dtype for p in params], input_specs=input_specs,
        output_specs=_out_specs(gm, [*params, *example_inputs], out_names),
        precision=precision, name=name or type(model).__name__)


def trace_function(fn_or_module: Callable | nn.Module, example_inputs,
                   params: str = "constants", precision: str = "fp32",
                   name: str | None = None) -> TracedGraph:
    """Trace a plain function (no gradients) to a functional aten graph.

    ``fn_or_module(*example_inputs)`` may return a tensor or a (nested) tuple/list/dict of
    tensors; outputs are flattened in pytree order (``TracedGraph.out_treedef`` keeps the
    structure).  For an ``nn.Module``: ``params="constants"`` (default) bakes parameters and
    buffers into the graph; ``params="inputs"`` makes parameters leading inputs in
    ``named_parameters()`` order (buffers stay constants).
    """
    reused = _reused("function", fn_or_module, example_inputs, precision)
    if reused is not None and (params == "inputs") == bool(reused.param_names):
        return reused
    example_inputs = _as_tuple(example_inputs)
    _check_inputs(example_inputs)
    if params not in ("constants", "inputs"):
        raise LatchError(f"params must be 'constants' or 'inputs', not {params!r}")
    names: list[str] = []
    plist: list[torch.Tensor] = []
    treedef_box: list = []

    if isinstance(fn_or_module, nn.Module):
        model = fn_or_module
        buffers = {n: b.detach() for n, b in model.named_buffers()}
        if params == "inputs":
            names, plist = _named_params(model)
            P = len(plist)

            def call(*flat):
                state = dict(zip(names, flat[:P]))
                state.update(buffers)
                return torch.func.functional_call(model, state, tuple(flat[P:]))
        else:
            state = {n: p.detach() for n, p in model.named_parameters()}
            state.update(buffers)

            def call(*flat):
                return torch.func.functional_call(model, state, tuple(flat))
        default_name = type(model).__name__
    else:
        call = fn_or_module
        default_name = getattr(fn_or_module, "__name__", "function")

    def flat_fn(*flat):
        with torch.no_grad():
            out = call(*flat)
        leaves, treedef = pytree.tree_flatten(out)
        treedef_box[:] = [treedef]
        return tuple(leaves)

    fn = torch.func.functionalize(flat_fn, remove="mutations")
    target = fn_or_module.forward if isinstance(fn_or_module, nn.Module) else fn_or_module
    from latch.frontend import structured   # latch.structured hook
    with structured.recording("function", precision) as rec:
        gm = _make_fx(fn, [*plist, *example_inputs], precision, example_inputs,
                      _signature(target, default_name))
    structured.finish(gm, rec, precision)      # end latch.structured hook
    input_specs = ([TensorSpec.of(n, p) for n, p in zip(names, plist)]
                   + [TensorSpec.of(f"input{i}", x) for i, x in enumerate(example_inputs)])
    _rename_placeholders(gm, [s.name for s in input_specs])
    return TracedGraph(
        graph_module=gm, kind="function", param_names=names,
        param_shapes=[tuple(p.shape) for p in plist],
        param_dtypes=[p.dtype for p in plist], input_specs=input_specs,
        output_specs=_out_specs(gm, None, []), precision=precision,
        name=name or default_name, out_treedef=treedef_box[0] if treedef_box else None)


def _rename_placeholders(gm: torch.fx.GraphModule, names: list[str]):
    """Keep make_fx's placeholder names (stable) but record the user-facing name."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(names):
        raise LatchError(f"traced graph has {len(phs)} inputs, expected {len(names)}")
    for n, name in zip(phs, names):
        n.meta["latch_name"] = name
