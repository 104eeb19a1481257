"""Structured control flow in traces: ``latch.scan`` / ``latch.repeat`` kept as loops (and
fused attention kept as one op).

Tracing (stage 1).  While Latch traces a model, :func:`latch.scan` and :func:`latch.repeat`
do not run their Python loops: each call becomes **one** node of the traced graph, a call to
a torch custom op (``latch::scan``, ``latch::repeat``, and ``latch::repeat_bwd`` for the
backward of a repeat), whose string argument names the call (``scan0``, ``repeat1``, ...: a
counter per trace, so traces are deterministic).  The op's fake implementation runs the step
function once on fake tensors to learn the output shapes.  After the outer trace, each body
is traced on its own with ``make_fx`` (:func:`finish`):

* scan:   ``(carries..., x slices..., extras...) -> (new carries..., y slices...)``
  (the step function may call ``torch.func.grad``; ``extras`` are the parameters and
  buffers of a step function that is an ``nn.Module``);
* repeat: ``(carries..., params..., buffers...) -> new carries...`` (the leaves of the carry
  pytree: one for a tensor carry), and for training its VJP
  ``(carries..., carry cotangents..., params..., buffers...) -> (carry gradients...,
  gparams...)``, which rematerialises the body's forward.

and the node's name gets a digest of the body graph (``scan0:1a2b...``), so the graph text
(the compile cache's key) changes when a body does.  The bodies live in
``graph_module.meta["latch_structured"]``.

Training: ``torch.func.grad_and_value`` under ``torch.func.functionalize`` (how
:func:`latch.frontend.trace.trace_loss_and_grads` traces) cannot differentiate through a
custom ``autograd.Function``; when a repeat is met in that mode the trace is restarted
(:class:`NeedsAutogradJoint`) with :func:`autograd_joint`, which takes the gradients with
``torch.autograd.grad`` instead, so the joint graph holds one ``latch::repeat`` node in the
forward and one ``latch::repeat_bwd`` node in the backward.

Import (stage 2, :func:`import_structured`).  The main graph is split at the structured nodes
into segments of ordinary aten ops; every segment and every body is imported by torch-mlir as
its own ``func.func`` (so torch-mlir never sees a custom op).  Then, in upstream MLIR, the
main function is assembled: ``func.call``\\ s of the segments, and for each node a Latch op:

* scan           -> ``latch.scan`` whose body calls ``@<main>__scanN_body``;
* repeat         -> ``latch.loop`` (forward only) or ``latch.scan`` with no xs that also stacks
                    each visit's input, one stack per carry leaf (for the backward);
* repeat_bwd     -> ``latch.loop`` running the visits in reverse (slice ``times-1-i`` of each
                    stack), carrying every leaf's cotangent, calling
                    ``@<main>__repeatN_vjp`` and accumulating the parameters' gradients with
                    ``latch.accumulate``;

* attention      -> ``latch.attention`` (``q, k, v -> o, lse``) and
  attention_grad -> ``latch.attention_grad`` (``q, k, v, lse, dO, delta -> dQ, dK, dV``),
                    their ``causal`` and ``scale`` attributes read from the node's
                    arguments.  These are the ``latch::attention`` / ``latch::attention_grad``
                    custom ops of :mod:`latch.frontend.attention` (``attention="fused"``):
                    no body, no :class:`Call`, and they stay in the result (a later pass of
                    the cuda target lowers them);

the loop ops are lowered right away by ``latch-lower-control`` (-> ``scf.for``) and
``latch-lower-optimizers``, then ``inline`` + ``symbol-dce``: the result is one
``func.func @<main>`` on tensors, as :func:`latch.frontend.importer.import_to_linalg`
returns it, with each body once inside its ``scf.for`` (and the attention ops, if any).

Limitations: bodies are traced with the structured ops switched off, so a scan/repeat nested
inside a body is unrolled in that body; tensors of the traced model that a scan's step
function closes over become extra inputs of the body (:func:`_lift_captured`), real tensors
it closes over become constants; a repeat's block must be an ``nn.Module`` (its parameters
and buffers are inputs; a closure over a traced tensor is an error) or a function of the
carry alone; a repeat's carry is a tensor or a pytree of tensors (every leaf floating-point
when training); scans are forward-only (rule None).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
from typing import Any, Callable

import torch
import torch.fx
import torch.nn as nn
import torch.utils._pytree as pytree

from latch.errors import LatchError, UnsupportedOpError

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("latch_structured", default=None)
META_KEY = "latch_structured"


class NeedsAutogradJoint(LatchError):
    """Raised inside a functorch joint trace that meets a repeat: retrace with autograd."""


@dataclasses.dataclass
class Call:
    """One scan/repeat call met during a trace."""
    kind: str                 # "scan" | "repeat"
    index: int
    flat_fn: Callable         # see the module docstring
    in_meta: list             # (shape, dtype) of the op's flat inputs
    length: int               # scan length / repeat times
    num_carries: int = 0
    num_xs: int = 0
    num_params: int = 0       # repeat: the leading extras that get gradients
    num_extras: int = 0
    carry_def: Any = None
    y_def: Any = None
    out_meta: list = dataclasses.field(default_factory=list)  # (shape, dtype) of the op's outputs
    key: str = ""             # final key (with the body digest), set by finish()
    body: Any = None          # traced body GraphModule
    vjp: Any = None           # traced VJP GraphModule (repeat in a training trace)
    captured: list = dataclasses.field(default_factory=list)  # closed-over traced tensors

    @property
    def base_key(self) -> str:
        return f"{self.kind}{self.index}"


class Recorder:
    def __init__(self, mode: str):
        # "function" | "joint" (functorch) | "joint-autograd" | "fingerprint"
        self.mode = mode
        self.calls: list[Call] = []
        self.refused: str | None = None   # "fingerprint": the scan/repeat it met

    def refuse_fingerprint(self, what: str) -> None:
        """In a fingerprint run (latch.frontend.fingerprint) a scan/repeat ends the run: the
        trace keeps it as a loop, which an eager run cannot show."""
        if self.mode == "fingerprint":
            from latch.frontend.fingerprint import NotFingerprintable
            self.refused = what
            raise NotFingerprintable(f"{what} is traced into a loop")

    def add(self, call: Call) -> Call:
        call.index = len(self.calls)
        self.calls.append(call)
        return call

    def lookup(self, key: str) -> Call:
        base = key.split(":")[0]
        for c in self.calls:
            if c.base_key == base:
                return c
        raise LatchError(f"latch structured op {key!r} called outside its trace")


def active() -> Recorder | None:
    return _ACTIVE.get()


# whether the traces inside unroll each latch.repeat (latch.options.REPEAT "unroll")
_UNROLL: contextvars.ContextVar = contextvars.ContextVar("latch_unroll_repeats", default=False)


@contextlib.contextmanager
def repeats_unrolled(unroll: bool):
    """Traces inside trace each visit of a ``latch.repeat`` as ordinary ops (``unroll``) or
    keep the repeat as one node (the default)."""
    token = _UNROLL.set(bool(unroll))
    try:
        yield
    finally:
        _UNROLL.reset(token)


def unrolls_repeats() -> bool:
    return _UNROLL.get()


@contextlib.contextmanager
def recording(mode: str, precision: str = "fp32"):
    rec = Recorder(mode)
    rec.precision = precision
    token = _ACTIVE.set(rec)
    try:
        yield rec
    finally:
        _ACTIVE.reset(token)


def _lookup(key: str) -> Call:
    rec = _ACTIVE.get()
    if rec is None:
        raise LatchError(f"latch structured op {key!r} runs only while Latch traces a model")
    return rec.lookup(key)


# ----------------------------------------------------------------------------- custom ops
@torch.library.custom_op("latch::scan", mutates_args=())
def _scan_op(args: list[torch.Tensor], key: str) -> list[torch.Tensor]:
    call = _lookup(key)
    k, nx = call.num_carries, call.num_xs
    carries, xs, extras = list(args[:k]), args[k:k + nx], args[k + nx:]
    ys = []
    for t in range(call.length):
        out = call.flat_fn(*carries, *[x[t] for x in xs], *extras)
        carries, y = list(out[:k]), out[k:]
        ys.append(y)
    return [c.clone() for c in carries] + [torch.stack(list(s)) for s in zip(*ys)]


@_scan_op.register_fake
def _(args, key):
    return [args[0].new_empty(shape, dtype=dtype) for shape, dtype in _lookup(key).out_meta]


@torch.library.custom_op("latch::repeat", mutates_args=())
def _repeat_op(args: list[torch.Tensor], key: str) -> list[torch.Tensor]:
    """``[carries..., extras...] -> [final carries..., stacked visit inputs...]``."""
    call = _lookup(key)
    k = call.num_carries
    cs, extras = list(args[:k]), args[k:]
    visits = []
    for _ in range(call.length):
        visits.append(cs)
        cs = list(call.flat_fn(*cs, *extras))
    return [c.clone() for c in cs] + [torch.stack([v[i] for v in visits]) for i in range(k)]


@_repeat_op.register_fake
def _(args, key):
    call = _lookup(key)
    cs = args[:call.num_carries]
    return ([torch.empty_like(c) for c in cs]
            + [c.new_empty((call.length, *c.shape)) for c in cs])


@torch.library.custom_op("latch::repeat_bwd", mutates_args=())
def _repeat_bwd_op(args: list[torch.Tensor], key: str) -> list[torch.Tensor]:
    """``[stacks..., carry cotangents..., extras...] -> [carry gradients..., param grads...]``:
    the visits in reverse, the parameters' gradients summed over them."""
    call = _lookup(key)
    k, P = call.num_carries, call.num_params
    stacks, gys, extras = args[:k], list(args[k:2 * k]), args[2 * k:]
    gps = [torch.zeros_like(p) for p in extras[:P]]
    for i in reversed(range(call.length)):
        out = _vjp_of(call)(*[s[i] for s in stacks], *gys, *extras)
        gys, g = list(out[:k]), out[k:]
        gps = [a + b for a, b in zip(gps, g)]
    return [*gys, *gps]


@_repeat_bwd_op.register_fake
def _(args, key):
    call = _lookup(key)
    k = call.num_carries
    return ([torch.empty_like(g) for g in args[k:2 * k]]
            + [torch.empty_like(p) for p in args[2 * k:2 * k + call.num_params]])


class _RepeatFn(torch.autograd.Function):
    """One forward node, one backward node (traced under plain autograd).  Inputs:
    ``key, num_params, num_carries, carries..., extras...``; outputs: the final carries, then
    the stacks of each carry leaf's visit inputs (non-differentiable, saved for backward)."""

    @staticmethod
    def forward(key, num_params, num_carries, *args):
        return tuple(torch.ops.latch.repeat(list(args), key))

    @staticmethod
    def setup_context(ctx, inputs, output):
        key, num_params, k, *args = inputs
        ctx.key, ctx.num_params, ctx.num_carries = key, num_params, k
        ctx.num_extras = len(args) - k
        ctx.save_for_backward(*output[k:], *args[k:])
        ctx.mark_non_differentiable(*output[k:])

    @staticmethod
    def backward(ctx, *grads):
        k = ctx.num_carries
        saved = ctx.saved_tensors
        stacks, extras = saved[:k], saved[k:]
        out = torch.ops.latch.repeat_bwd([*stacks, *grads[:k], *extras], ctx.key)
        return (None, None, None, *out,
                *([None] * (ctx.num_extras - ctx.num_params)))


# ----------------------------------------------------------------------------- tracing
def _module_inputs(block):
    """(names, tensors, number of parameters) of an nn.Module's parameters then buffers, read
    through attribute access (so a surrounding functional_call's tensors are seen)."""
    if not isinstance(block, nn.Module):
        return [], [], 0
    pnames = [n for n, _ in block.named_parameters()]
    bnames = [n for n, _ in block.named_buffers()]

    def get(path):
        obj = block
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj
    return pnames + bnames, [get(n) for n in pnames + bnames], len(pnames)


def _call_with(block, names, extras, args):
    if names:
        return torch.func.functional_call(block, dict(zip(names, extras)), args)
    return block(*args)


def traced_scan(rec: Recorder, step_fn, carry, xs):
    from latch.control import _scan_length
    rec.refuse_fingerprint("latch.scan")
    if rec.mode != "function":
        raise UnsupportedOpError(
            "latch.scan inside a model compiled with a learning rule is not supported yet",
            diagnostics=["hint: scans compile forward-only: latch.compile(fn, None, inputs)"])
    carry_leaves, carry_def = pytree.tree_flatten(carry)
    xs_leaves, xs_def = pytree.tree_flatten(xs)
    length = _scan_length(xs_leaves)
    if length == 0:
        raise ValueError("latch.scan: xs have length 0")
    for leaf in carry_leaves:
        if not isinstance(leaf, torch.Tensor):
            raise LatchError(f"latch.scan: carry leaves must be tensors, got {type(leaf).__name__}")
    names, extras, _ = _module_inputs(step_fn)
    k, nx = len(carry_leaves), len(xs_leaves)
    call = Call("scan", 0, None, [], length, num_carries=k, num_xs=nx,
                num_extras=len(extras), carry_def=carry_def)

    def flat_fn(*flat):
        c = pytree.tree_unflatten(list(flat[:k]), carry_def)
        x = pytree.tree_unflatten(list(flat[k:k + nx]), xs_def)
        out = _call_with(step_fn, names, flat[k + nx:], (c, x))
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise LatchError("latch.scan: step_fn(carry, x) must return (carry, y)")
        nc_leaves, nc_def = pytree.tree_flatten(out[0])
        if nc_def != carry_def:
            raise LatchError(f"latch.scan: step_fn returned a carry of structure {nc_def}, "
                             f"expected {carry_def}")
        y_leaves, call.y_def = pytree.tree_flatten(out[1])
        return tuple(nc_leaves) + tuple(y_leaves)

    call.flat_fn = flat_fn
    args = [*carry_leaves, *xs_leaves, *extras]
    call.in_meta = [(tuple(int(s) for s in a.shape), a.dtype) for a in args]
    rec.add(call)
    _trace_bodies(rec, call)
    if call.captured:                   # tensors step_fn closes over: extra inputs
        args += call.captured
        call.num_extras += len(call.captured)
        call.in_meta += [(tuple(int(d) for d in t.shape), t.dtype) for t in call.captured]
    body_out = _out_meta(call.body)
    for i, ((cs, cd), (ns, nd)) in enumerate(zip(call.in_meta[:k], body_out[:k])):
        if cs != ns or cd != nd:
            raise LatchError(f"latch.scan: the step function changes carry leaf {i} from "
                             f"{cd}{list(cs)} to {nd}{list(ns)}")
    call.out_meta = body_out[:k] + [((length, *ys), yd) for ys, yd in body_out[k:]]
    out = torch.ops.latch.scan(args, call.base_key)
    return (pytree.tree_unflatten(list(out[:k]), carry_def),
            pytree.tree_unflatten(list(out[k:]), call.y_def))


def _describe_value(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"a {v.dtype} tensor of shape {list(v.shape)}"
    return f"a {type(v).__name__}"


def _meta_str(shape, dtype) -> str:
    return f"{dtype}{list(shape)}"


CARRY_ACCEPTED = ("a tensor, or a tuple/list/dict (pytree) of tensors")


def _repeat_carry(carry, training: bool):
    """(leaves, treedef, leaf names) of a repeat's carry; a clear error for anything else."""
    if isinstance(carry, torch.Tensor):
        return [carry], pytree.tree_structure(carry), ["carry"]
    with_paths, carry_def = pytree.tree_flatten_with_path(carry)
    if not with_paths:
        raise LatchError(f"latch.repeat: the carry ({_describe_value(carry)}) holds no "
                         f"tensor; a carry is {CARRY_ACCEPTED}")
    leaves, where = [], []
    for path, leaf in with_paths:
        name = "carry" + pytree.keystr(path)
        if not isinstance(leaf, torch.Tensor):
            raise LatchError(
                f"latch.repeat: {name} is {_describe_value(leaf)}; a carry is "
                f"{CARRY_ACCEPTED} (make it a tensor, e.g. torch.zeros(()) for a running sum)")
        if training and not leaf.is_floating_point():
            raise LatchError(
                f"latch.repeat: {name} is {_describe_value(leaf)}; in a model compiled with "
                "a learning rule every carry leaf must be floating-point (gradients flow "
                "through the carry); integer carries compile forward-only (rule None)")
        leaves.append(leaf)
        where.append(name)
    return leaves, carry_def, where


def _structure_str(tree) -> str:
    """One line: ``(torch.float32[2, 8], {'n': torch.int64[]})``."""
    if isinstance(tree, torch.Tensor):
        return f"{tree.dtype}{list(tree.shape)}"
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {_structure_str(v)}" for k, v in tree.items()) + "}"
    if isinstance(tree, (list, tuple)):
        inner = ", ".join(_structure_str(v) for v in tree)
        if isinstance(tree, list):
            return f"[{inner}]"
        name = type(tree).__name__ if type(tree) is not tuple else ""
        return f"{name}({inner}{',' if len(tree) == 1 and not name else ''})"
    return f"a {type(tree).__name__}"


def _same_structure(a, b) -> bool:
    """Pytree structures equal up to the order of dict keys (a block may rebuild a dict)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_structure(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_structure(x, y) for x, y in zip(a, b))
    return pytree.tree_structure(a) == pytree.tree_structure(b)


def traced_repeat(rec: Recorder, block, carry, times: int):
    rec.refuse_fingerprint("latch.repeat")
    if rec.mode == "joint":
        raise NeedsAutogradJoint("latch.repeat in a functorch joint trace")
    single = isinstance(carry, torch.Tensor)
    leaves, carry_def, where = _repeat_carry(carry, rec.mode == "joint-autograd")
    k = len(leaves)
    names, extras, P = _module_inputs(block)
    call = Call("repeat", 0, None, [], times, num_carries=k, num_params=P,
                num_extras=len(extras), carry_def=carry_def)

    def flat_fn(*flat):
        c = flat[0] if single else pytree.tree_unflatten(list(flat[:k]), carry_def)
        out = _call_with(block, names, flat[k:], (c,))
        if single:
            if not isinstance(out, torch.Tensor):
                raise LatchError(f"latch.repeat: the block must return one tensor of its "
                                 f"input's shape and dtype, it returned {_describe_value(out)}")
            return (out,)
        out_leaves, out_def = pytree.tree_flatten(out)
        if out_def == carry_def:
            return tuple(out_leaves)
        if not _same_structure(out, carry):
            raise LatchError(f"latch.repeat: block(carry) must return a carry of the same "
                             f"structure as its input, {_structure_str(carry)}; it returned "
                             f"{_structure_str(out)}")
        # the same dicts with their keys in another order: read the leaves in carry order
        by_path = {pytree.keystr(p): leaf for p, leaf in pytree.tree_flatten_with_path(out)[0]}
        return tuple(by_path[w[len("carry"):]] for w in where)

    call.flat_fn = flat_fn
    args = [*leaves, *extras]
    call.in_meta = [(tuple(int(s) for s in a.shape), a.dtype) for a in args]
    rec.add(call)
    _trace_bodies(rec, call)
    body_out = _out_meta(call.body)
    if single:
        if len(body_out) != 1 or body_out[0] != call.in_meta[0]:
            raise LatchError(f"latch.repeat: the block must return one tensor of its input's "
                             f"shape and dtype ({call.in_meta[0][1]}{list(call.in_meta[0][0])})")
    else:
        for name, (cs, cd), (ns, nd) in zip(where, call.in_meta[:k], body_out):
            if (cs, cd) != (ns, nd):
                raise LatchError(f"latch.repeat: the block changes {name} from "
                                 f"{_meta_str(cs, cd)} to {_meta_str(ns, nd)}; every carry "
                                 "leaf must keep its shape and dtype")
    if rec.mode == "joint-autograd":
        out = _RepeatFn.apply(call.base_key, P, k, *leaves, *extras)
    else:
        out = torch.ops.latch.repeat(args, call.base_key)
    return out[0] if single else pytree.tree_unflatten(list(out[:k]), carry_def)


def autograd_joint(loss_fn, num_params: int):
    """``(params..., inputs...) -> (loss, grads...)`` with ``torch.autograd.grad`` (traced
    without functionalize) instead of ``torch.func.grad_and_value``."""
    def joint(*flat):
        ps = [p.detach().requires_grad_(True) for p in flat[:num_params]]
        with torch.enable_grad():
            loss = loss_fn(tuple(ps), flat[num_params:])
            grads = torch.autograd.grad(loss, ps, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, ps)]
        return (loss.detach(), *grads)
    return joint


def _vjp_autograd(call: Call):
    """:func:`_vjp_of` with ``torch.autograd.grad`` (traced without functionalize)."""
    P, k = call.num_params, call.num_carries

    def vjp_fn(*flat):
        xs, gys, extras = flat[:k], flat[k:2 * k], flat[2 * k:]
        ps, bufs = extras[:P], extras[P:]
        leaves = [t.detach().requires_grad_(True) for t in (*xs, *ps)]
        with torch.enable_grad():
            out = call.flat_fn(*leaves, *bufs)
            grads = torch.autograd.grad(tuple(out), leaves, tuple(gys), allow_unused=True)
        return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, leaves))
    return vjp_fn


def _vjp_of(call: Call):
    """``(carries..., carry cotangents..., params..., buffers...) -> (carry gradients...,
    param gradients...)``."""
    P, k = call.num_params, call.num_carries

    def vjp_fn(*flat):
        xs, gys, extras = flat[:k], flat[k:2 * k], flat[2 * k:]
        ps, bufs = extras[:P], extras[P:]
        _, pull = torch.func.vjp(lambda *a: call.flat_fn(*a, *bufs), *xs, *ps)
        return tuple(pull(tuple(gys)))
    return vjp_fn


def _is_structured(n) -> bool:
    """A node of a ``latch::`` custom op: a loop (scan/repeat) or a fused attention op;
    the import splits the graph at each."""
    return (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and n.target.namespace == "latch")


#: The fused attention ops (latch.frontend.attention): structured nodes with no Call record
#: (no body), imported as the Latch ops of the same names.
ATTENTION_OPS = ("latch::attention", "latch::attention_grad")


def _is_attention(n) -> bool:
    return _is_structured(n) and n.target._schema.name in ATTENTION_OPS


def _is_loop(n) -> bool:
    """A scan/repeat node: its second argument is the key of its :class:`Call`."""
    return _is_structured(n) and not _is_attention(n)


def _digest(gm) -> str:
    h = hashlib.sha256(str(gm.graph).encode())
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            t = getattr(gm, n.target)
            if isinstance(t, torch.Tensor):
                h.update(n.target.encode())
                h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _escaped():
    """Leave the surrounding trace (its dispatch modes, functorch transforms, recorder)."""
    from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack
    from torch.utils._python_dispatch import _disable_current_modes
    token = _ACTIVE.set(None)       # nested scans/repeats inside a body are unrolled
    try:
        with _disable_current_modes(), temporarily_clear_interpreter_stack():
            with torch.enable_grad():
                yield
    finally:
        _ACTIVE.reset(token)


def _out_meta(gm):
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return [(tuple(int(s) for s in n.meta["val"].shape), n.meta["val"].dtype)
            for n in pytree.tree_leaves(out.args[0])]


def _trace_bodies(rec: Recorder, call: Call) -> None:
    """Trace ``call``'s body (and VJP) once, on zeros of its inputs' shapes."""
    with _escaped():
        ex = [torch.zeros(s, dtype=d) for s, d in call.in_meta]
        if call.kind == "scan":
            k, nx = call.num_carries, call.num_xs
            args = ex[:k] + [x[0] for x in ex[k:k + nx]] + ex[k + nx:]
            call.body = _trace_body(call.flat_fn, args, rec.precision,
                                    f"latch.scan #{call.index}")
            call.captured = _lift_captured(call.body)
        else:
            call.body = _trace_body(call.flat_fn, ex, rec.precision,
                                    f"latch.repeat #{call.index}")
            if _lift_captured(call.body):
                raise LatchError(
                    "latch.repeat: the block reads a tensor computed by the traced model (a "
                    "closure); pass an nn.Module whose parameters and buffers are its weights")
            if rec.mode == "joint-autograd":
                # carries and cotangents must be distinct tensors: make_fx maps one object
                # to one input
                k = call.num_carries
                gys = [torch.zeros_like(x) for x in ex[:k]]
                # attention routed to an autograd.Function ("flash", "fused") cannot be
                # differentiated by torch.func.vjp under functionalize: take that VJP with
                # torch.autograd.grad, as the main joint trace does
                from latch.frontend import attention
                routed = attention.current() in attention.ROUTED_MODES
                call.vjp = _trace_body(_vjp_autograd(call) if routed else _vjp_of(call),
                                       [*ex[:k], *gys, *ex[k:]], rec.precision,
                                       f"latch.repeat #{call.index} (backward)", grad=True,
                                       functional=not routed)
        # inside _escaped: a body's constants (get_attr) are read as plain tensors
        digest = _digest(call.body) + (_digest(call.vjp) if call.vjp is not None else "")
    call.key = f"{call.base_key}:{hashlib.sha256(digest.encode()).hexdigest()[:16]}"


def _lift_captured(gm) -> list:
    """Tensors of the surrounding trace that a body closes over appear in its graph as
    constants (get_attr of a traced tensor); turn them into trailing inputs of the body and
    return them (the caller passes them to the structured op)."""
    caps = []
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            t = getattr(gm, n.target)
            if isinstance(t, torch.Tensor) and type(t) not in (torch.Tensor, nn.Parameter):
                caps.append((n, t))
    if not caps:
        return []
    last = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    for i, (n, t) in enumerate(caps):
        with gm.graph.inserting_after(last):
            p = gm.graph.placeholder(f"captured_{i}")
        p.meta["val"] = torch.empty(tuple(int(d) for d in t.shape), dtype=t.dtype)
        n.replace_all_uses_with(p)
        gm.graph.erase_node(n)
        if hasattr(gm, n.target):
            delattr(gm, n.target)
        last = p
    gm.recompile()
    return [t for _, t in caps]


def finish(gm, rec: Recorder | None, precision: str) -> None:
    """Rename the structured nodes of ``gm`` with their bodies' digests and attach the
    bodies (``gm.meta["latch_structured"]``)."""
    if rec is None or not rec.calls:
        return
    by_base = {c.base_key: c for c in rec.calls}
    for n in gm.graph.nodes:
        if _is_loop(n):
            n.args = (n.args[0], by_base[n.args[1]].key)
    gm.recompile()
    used = {n.args[1] for n in gm.graph.nodes if _is_loop(n)}
    gm.meta[META_KEY] = {c.key: c for c in rec.calls if c.key in used}


_IN_BODY = contextvars.ContextVar("latch_in_body", default=False)


def in_body() -> bool:
    """Whether a loop body (or its VJP) is being traced (its fused attention nodes are
    imported with it: :func:`_import_body`)."""
    return _IN_BODY.get()


def _trace_body(fn, args, precision, what, grad=False, functional=True):
    """``functional=False``: traced without functionalize (a VJP taken with
    torch.autograd.grad, :func:`_vjp_autograd`)."""
    from latch.frontend.trace import _make_fx

    def flat(*a):
        with contextlib.nullcontext() if grad else torch.no_grad():
            return tuple(fn(*a))
    f = torch.func.functionalize(flat, remove="mutations") if functional else flat
    token = _IN_BODY.set(True)
    try:
        return _make_fx(f, args, precision, args, what)
    finally:
        _IN_BODY.reset(token)


def has_structured(traced) -> bool:
    """Whether ``traced`` needs :func:`import_structured`: it has loops (their bodies are in
    ``META_KEY``) or fused attention nodes (which have no entry there)."""
    gm = traced.graph_module
    if getattr(gm, "meta", {}).get(META_KEY):
        return True
    return any(_is_attention(n) for n in gm.graph.nodes)


# ----------------------------------------------------------------------------- import
def _split(gm):
    """Plan of the main graph: a list of ("segment", nodes) and ("call", node) in order."""
    plan, cur = [], []
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output"):
            continue
        if n.op == "call_function" and n.target is __import__("operator").getitem \
                and _is_structured(n.args[0]):
            continue                                   # a result of a structured node
        if _is_structured(n):
            if cur:
                plan.append(("segment", cur))
                cur = []
            plan.append(("call", n))
        else:
            cur.append(n)
    if cur:
        plan.append(("segment", cur))
    return plan


def _segment_graph(gm, nodes):
    """A GraphModule for ``nodes``: (inputs, outputs, gm).  get_attr constants read from an
    earlier segment are copied in rather than passed."""
    inside = set(nodes)
    inputs, env = [], {}
    g = torch.fx.Graph()

    def arg(a):
        if a in env:
            return env[a]
        if a.op == "get_attr":
            env[a] = g.get_attr(a.target)
            env[a].meta = dict(a.meta)
            return env[a]
        raise AssertionError(a)

    for n in nodes:
        for a in n.all_input_nodes:
            if a not in inside and a.op != "get_attr" and a not in inputs:
                inputs.append(a)
    for a in inputs:
        p = g.placeholder(a.name)
        p.meta = dict(a.meta)
        env[a] = p
    for n in nodes:
        env[n] = g.node_copy(n, arg)
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    g.output(tuple(env[o] for o in outputs))
    sub = torch.fx.GraphModule(gm, g)
    return inputs, outputs, sub


def _mlir_type(t: torch.Tensor) -> str:
    from latch.compiler import mlir_tensor_type
    return mlir_tensor_type(tuple(t.shape), t.dtype)


def _plan(gm, func_name: str, what: str, lower, texts: list) -> list:
    """Split ``gm`` at its structured nodes, import each segment as ``<func_name>__segN``
    (its text appended to ``texts``); returns the plan with the segments' (name, inputs,
    outputs)."""
    plan = _split(gm)
    segs = 0
    for i, (kind, item) in enumerate(plan):
        if kind == "segment":
            ins, outs, sub = _segment_graph(gm, item)
            name = f"{func_name}__seg{segs}"
            texts.append(lower(sub, name, f"{what} (part {segs})"))
            segs += 1
            plan[i] = ("segment", (name, ins, outs))
    return plan


def _import_body(gm, name: str, what: str, lower, texts: list, assembled: list) -> None:
    """A loop body (or its VJP) as the function ``name``: imported whole, or, when it holds
    fused attention nodes, assembled like the main function from its segments."""
    if any(_is_attention(n) for n in gm.graph.nodes):
        assembled.append((gm, _plan(gm, name, what, lower, texts), name))
    else:
        texts.append(lower(gm, name, what))


def build_latch_module(traced, func_name: str, lower) -> str:
    """Import segments and bodies (``lower(gm, name, what) -> text``) and assemble the main
    function with Latch ops; returns the module text *before* lowering the Latch ops."""
    from mlir import ir

    import latch.dialect

    gm = traced.graph_module
    calls = gm.meta.get(META_KEY, {})       # none when the only structured nodes are attention
    texts, assembled = [], []
    plan = _plan(gm, func_name, traced.name, lower, texts)
    for c in calls.values():
        _import_body(c.body, f"{func_name}__{c.base_key}_body", f"{c.base_key} body", lower,
                     texts, assembled)
        if c.vjp is not None:
            _import_body(c.vjp, f"{func_name}__{c.base_key}_vjp", f"{c.base_key} vjp", lower,
                         texts, assembled)

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        module = ir.Module.create()
        ftypes = {}
        for text in texts:
            m = ir.Module.parse(text)
            for op in list(m.body.operations):
                if op.operation.name != "func.func":
                    continue
                o = op.operation
                o.detach_from_parent()
                o.attributes["sym_visibility"] = ir.StringAttr.get("private")
                module.body.append(o)
                ftypes[ir.StringAttr(o.attributes["sym_name"]).value] = ir.FunctionType(
                    ir.TypeAttr(o.attributes["function_type"]).value)
        for body_gm, body_plan, name in assembled:      # bodies first: the main calls them
            fn = _assemble(module, body_gm, body_plan, name, ftypes, {}, func_name)
            fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
            ftypes[name] = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        _assemble(module, gm, plan, func_name, ftypes, calls, func_name)
        return module.operation.get_asm(print_generic_op_form=True)


def _assemble(module, gm, plan, name: str, ftypes: dict, calls: dict, func_name: str):
    """Append the function ``name`` for graph ``gm``: calls of its segments and a Latch op
    for each structured node (loops: ``calls``' records; attention: the node itself)."""
    from mlir import ir

    from latch.dialect import builders as lt
    from latch.passes.lower_optimizers import create

    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    out_vals = pytree.tree_leaves(out_node.args[0])
    in_types = [ir.Type.parse(_mlir_type(n.meta["val"])) for n in phs]
    out_types = [ir.Type.parse(_mlir_type(n.meta["val"])) for n in out_vals]
    with ir.InsertionPoint(module.body):
        fn = create("func.func", [], [], {
            "sym_name": ir.StringAttr.get(name),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get(in_types, out_types))},
            regions=1)
    entry = fn.regions[0].blocks.append(*in_types)
    env = dict(zip(phs, entry.arguments))

    def bind(node, results):
        for u in node.users:
            env[u] = results[u.args[1]]

    def fcall(callee, args):
        return list(create("func.call", args, list(ftypes[callee].results),
                           {"callee": ir.FlatSymbolRefAttr.get(callee)}).results)

    with ir.InsertionPoint(entry):
        for kind, item in plan:
            if kind == "segment":
                seg, ins, outs = item
                for o, v in zip(outs, fcall(seg, [env[a] for a in ins])):
                    env[o] = v
                continue
            node = item
            if _is_attention(node):         # no Call: its operands are its arguments
                bind(node, _emit_attention(lt, node, env))
                continue
            c = calls[node.args[1]]
            args = [env[a] for a in node.args[0]]
            op = node.target._schema.name
            if op == "latch::scan":
                bind(node, _emit_scan(lt, c, args, ftypes, func_name))
            elif op == "latch::repeat":
                stacked = any(u.args[1] >= c.num_carries and u.users for u in node.users)
                bind(node, _emit_repeat(lt, c, args, ftypes, func_name, stacked))
            else:
                bind(node, _emit_repeat_bwd(lt, c, args, ftypes, func_name))
        create("func.return", [env[v] for v in out_vals])
    return fn


def _emit_attention(lt, node, env):
    """``latch.attention`` / ``latch.attention_grad`` for a node of the custom op of the same
    name: its tensor arguments are the operands, ``causal`` and ``scale`` (Python constants
    of the trace) the attributes; returns the results in the op schema's order."""
    schema = node.target._schema
    given = dict(zip((a.name for a in schema.arguments), node.args))
    given.update(node.kwargs)
    causal, scale = bool(given["causal"]), float(given["scale"])
    if schema.name == "latch::attention":
        return lt.attention(*(env[given[n]] for n in ("q", "k", "v")), causal, scale)
    return lt.attention_grad(*(env[given[n]] for n in ("q", "k", "v", "lse", "do", "delta")),
                             causal, scale)


def _emit_scan(lt, c, args, ftypes, func_name):
    k, nx = c.num_carries, c.num_xs
    carries, xs, extras = args[:k], args[k:k + nx], args[k + nx:]
    body = f"{func_name}__{c.base_key}_body"
    res = list(ftypes[body].results)
    r = lt.scan(carries, xs, res[k:], length=c.length)
    from mlir import ir
    with ir.InsertionPoint(r.body):
        lt.yield_(lt.call(body, r.args + extras, res))
    return r.results


def _emit_repeat(lt, c, args, ftypes, func_name, stacked):
    from mlir import ir
    k = c.num_carries
    cs, extras = args[:k], args[k:]
    body = f"{func_name}__{c.base_key}_body"
    res = list(ftypes[body].results)
    if not stacked:                       # forward only: a plain loop
        r = lt.loop(cs, c.length)
        with ir.InsertionPoint(r.body):
            lt.yield_(lt.call(body, [*r.args[1:], *extras], res))
        return [*r.results, *([None] * k)]
    # also stack each visit's input, every carry leaf (for the backward)
    r = lt.scan(cs, [], [x.type for x in cs], length=c.length)
    with ir.InsertionPoint(r.body):
        y = lt.call(body, [*r.args[:k], *extras], res)
        lt.yield_([*y, *r.args[:k]])
    return r.results


_DYN = -9223372036854775808


def _emit_repeat_bwd(lt, c, args, ftypes, func_name):
    from mlir import ir
    from latch.passes.lower_optimizers import create, extract
    k = c.num_carries
    stacks, gys, extras = args[:k], args[k:2 * k], args[2 * k:]
    params = extras[:c.num_params]
    vjp = f"{func_name}__{c.base_key}_vjp"
    res = list(ftypes[vjp].results)
    zeros = []
    for p in params:
        t = ir.RankedTensorType(p.type)
        zeros.append(create("arith.constant", [], [t], {"value": ir.DenseElementsAttr.get_splat(
            t, ir.FloatAttr.get(t.element_type, 0.0))}).result)
    r = lt.loop([*gys, *zeros], c.length)
    with ir.InsertionPoint(r.body):
        it, g, acc = r.args[0], r.args[1:1 + k], r.args[1 + k:]
        i64 = ir.IntegerType.get_signless(64)
        last = create("arith.constant", [], [i64],
                      {"value": ir.IntegerAttr.get(i64, c.length - 1)}).result
        rev = create("arith.subi", [last, extract(it)], [i64]).result   # times-1-i
        idx = create("arith.index_cast", [rev], [ir.IndexType.get()]).result
        x_is = []
        for stack, gy in zip(stacks, gys):
            st = ir.RankedTensorType(stack.type)
            rank = st.rank
            x_is.append(create("tensor.extract_slice", [stack, idx], [gy.type], {
                "static_offsets": ir.DenseI64ArrayAttr.get([_DYN] + [0] * (rank - 1)),
                "static_sizes": ir.DenseI64ArrayAttr.get([1] + list(st.shape[1:])),
                "static_strides": ir.DenseI64ArrayAttr.get([1] * rank),
                "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 0, 0]),
            }).result)
        outs = lt.call(vjp, [*x_is, *g, *extras], res)
        lt.yield_(list(outs[:k]) + [lt.accumulate(a, gw) for a, gw in zip(acc, outs[k:])])
    return r.results


LOWER_LATCH = "builtin.module(latch-lower-control, latch-lower-optimizers)"
FINISH = "builtin.module(inline, symbol-dce, canonicalize, cse)"


def lower_latch_module(text: str) -> str:
    """latch.scan/loop/accumulate -> scf/linalg, latch.call -> func.call, inline the parts.
    ``latch.attention`` / ``latch.attention_grad`` are left as they are (the cuda target's
    ``latch-lower-attention`` lowers them)."""
    from mlir import ir

    import latch.dialect
    from latch.passes.lower_state import calls_to_func_call
    from latch.pipeline import run_pipeline

    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        module = ir.Module.parse(text)
        run_pipeline(module, LOWER_LATCH)
        calls_to_func_call(module)
        run_pipeline(module, FINISH)
        return module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)


def import_structured(traced, func_name: str, lower_gm: Callable, check: Callable,
                      latch_level: bool = False) -> str:
    """Stage 2 for a graph with structured nodes (see the module docstring).
    ``lower_gm(gm, func_name) -> result dict`` is the importer's torch-mlir step, ``check``
    its supported-op check; ``latch_level=True`` returns the module before the Latch ops are
    lowered (for tests)."""
    from latch.frontend.support import unsupported_from_mlir_ops

    def lower(gm, name, what):
        part = dataclasses.replace(traced, graph_module=gm, name=what)
        check(part)
        res = lower_gm(gm, name)
        if not res["ok"]:
            raise unsupported_from_mlir_ops(part, res["ops"], res["diagnostics"],
                                            stage=res["stage"])
        return res["text"]

    text = build_latch_module(traced, func_name, lower)
    return text if latch_level else lower_latch_module(text)
