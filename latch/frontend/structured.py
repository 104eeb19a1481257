"""Structured control flow in traces: ``latch.scan`` / ``latch.repeat`` kept as loops.

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
* repeat: ``(x, params..., buffers...) -> y``, and for training its VJP
  ``(x, gy, params..., buffers...) -> (gx, gparams...)``, which rematerialises the body's
  forward.

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
                    each visit's input (for the backward);
* repeat_bwd     -> ``latch.loop`` running the visits in reverse (slice ``times-1-i`` of the
                    stack), calling ``@<main>__repeatN_vjp`` and accumulating the parameters'
                    gradients with ``latch.accumulate``;

lowered right away by ``latch-lower-control`` (-> ``scf.for``) and
``latch-lower-optimizers``, then ``inline`` + ``symbol-dce``: the result is one
``func.func @<main>`` on tensors, as :func:`latch.frontend.importer.import_to_linalg`
returns it, with each body once inside its ``scf.for``.

Limitations: bodies are traced with the structured ops switched off, so a scan/repeat nested
inside a body is unrolled in that body; tensors of the traced model that a scan's step
function closes over become extra inputs of the body (:func:`_lift_captured`), real tensors
it closes over become constants; a repeat's block must be an ``nn.Module`` (its parameters
and buffers are inputs; a closure over a traced tensor is an error) or a function of ``x``
alone; scans are forward-only (rule None).
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
    call = _lookup(key)
    x, extras = args[0], args[1:]
    visits = []
    for _ in range(call.length):
        visits.append(x)
        x = call.flat_fn(x, *extras)
    return [x.clone(), torch.stack(visits)]


@_repeat_op.register_fake
def _(args, key):
    call = _lookup(key)
    x = args[0]
    return [torch.empty_like(x), x.new_empty((call.length, *x.shape))]


@torch.library.custom_op("latch::repeat_bwd", mutates_args=())
def _repeat_bwd_op(args: list[torch.Tensor], key: str) -> list[torch.Tensor]:
    call = _lookup(key)
    stack, gy, extras = args[0], args[1], args[2:]
    P = call.num_params
    gps = [torch.zeros_like(p) for p in extras[:P]]
    for i in reversed(range(call.length)):
        gy, *g = _vjp_of(call)(stack[i], gy, *extras)
        gps = [a + b for a, b in zip(gps, g)]
    return [gy, *gps]


@_repeat_bwd_op.register_fake
def _(args, key):
    call = _lookup(key)
    return [torch.empty_like(args[1])] + [torch.empty_like(p)
                                          for p in args[2:2 + call.num_params]]


class _RepeatFn(torch.autograd.Function):
    """One forward node, one backward node (traced under plain autograd)."""

    @staticmethod
    def forward(key, num_params, x, *extras):
        y, stack = torch.ops.latch.repeat([x, *extras], key)
        return y, stack

    @staticmethod
    def setup_context(ctx, inputs, output):
        key, num_params, x, *extras = inputs
        ctx.key, ctx.num_params, ctx.num_extras = key, num_params, len(extras)
        ctx.save_for_backward(output[1], *extras)
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, gy, _gstack):
        stack, *extras = ctx.saved_tensors
        gx, *gps = torch.ops.latch.repeat_bwd([stack, gy, *extras], ctx.key)
        return (None, None, gx, *gps, *([None] * (ctx.num_extras - ctx.num_params)))


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


def traced_repeat(rec: Recorder, block, x, times: int):
    rec.refuse_fingerprint("latch.repeat")
    if rec.mode == "joint":
        raise NeedsAutogradJoint("latch.repeat in a functorch joint trace")
    if not isinstance(x, torch.Tensor):
        raise LatchError(f"latch.repeat: x must be a tensor, got {type(x).__name__}")
    names, extras, P = _module_inputs(block)
    call = Call("repeat", 0, None, [], times, num_params=P, num_extras=len(extras))
    call.flat_fn = lambda h, *ex: _call_with(block, names, ex, (h,))
    args = [x, *extras]
    call.in_meta = [(tuple(int(s) for s in a.shape), a.dtype) for a in args]
    rec.add(call)
    _trace_bodies(rec, call)
    (ys, yd), = _out_meta(call.body) if len(_out_meta(call.body)) == 1 else [(None, None)]
    if ys != call.in_meta[0][0] or yd != call.in_meta[0][1]:
        raise LatchError(f"latch.repeat: the block must return one tensor of its input's "
                         f"shape and dtype ({call.in_meta[0][1]}{list(call.in_meta[0][0])})")
    if rec.mode == "joint-autograd":
        y, _ = _RepeatFn.apply(call.base_key, P, x, *extras)
    else:
        y, _ = torch.ops.latch.repeat(args, call.base_key)
    return y


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


def _vjp_of(call: Call):
    P = call.num_params

    def vjp_fn(x, gy, *extras):
        ps, bufs = extras[:P], extras[P:]
        _, pull = torch.func.vjp(lambda h, *p: call.flat_fn(h, *p, *bufs), x, *ps)
        return tuple(pull(gy))
    return vjp_fn


def _is_structured(n) -> bool:
    return (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and n.target.namespace == "latch")


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
            call.body = _trace_body(lambda *a, c=call: (c.flat_fn(*a),), ex, rec.precision,
                                    f"latch.repeat #{call.index}")
            if _lift_captured(call.body):
                raise LatchError(
                    "latch.repeat: the block reads a tensor computed by the traced model (a "
                    "closure); pass an nn.Module whose parameters and buffers are its weights")
            if rec.mode == "joint-autograd":
                # x and gy must be distinct tensors: make_fx maps one object to one input
                gy = torch.zeros_like(ex[0])
                call.vjp = _trace_body(_vjp_of(call), [ex[0], gy, *ex[1:]], rec.precision,
                                       f"latch.repeat #{call.index} (backward)", grad=True)
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
        if _is_structured(n):
            n.args = (n.args[0], by_base[n.args[1]].key)
    gm.recompile()
    used = {n.args[1] for n in gm.graph.nodes if _is_structured(n)}
    gm.meta[META_KEY] = {c.key: c for c in rec.calls if c.key in used}


def _trace_body(fn, args, precision, what, grad=False):
    from latch.frontend.trace import _make_fx

    def flat(*a):
        with contextlib.nullcontext() if grad else torch.no_grad():
            return tuple(fn(*a))
    f = torch.func.functionalize(flat, remove="mutations")
    return _make_fx(f, args, precision, args, what)


def has_structured(traced) -> bool:
    return bool(getattr(traced.graph_module, "meta", {}).get(META_KEY))


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


def build_latch_module(traced, func_name: str, lower) -> str:
    """Import segments and bodies (``lower(gm, name, what) -> text``) and assemble the main
    function with Latch ops; returns the module text *before* lowering the Latch ops."""
    from mlir import ir

    import latch.dialect
    from latch.dialect import builders as lt
    from latch.passes.lower_optimizers import create

    gm = traced.graph_module
    calls = gm.meta[META_KEY]
    plan = _split(gm)
    texts, segs = [], []
    for i, (kind, item) in enumerate(plan):
        if kind == "segment":
            ins, outs, sub = _segment_graph(gm, item)
            name = f"{func_name}__seg{len(segs)}"
            texts.append(lower(sub, name, f"{traced.name} (part {len(segs)})"))
            segs.append((name, ins, outs))
            plan[i] = ("segment", (name, ins, outs))
    for c in calls.values():
        texts.append(lower(c.body, f"{func_name}__{c.base_key}_body", f"{c.base_key} body"))
        if c.vjp is not None:
            texts.append(lower(c.vjp, f"{func_name}__{c.base_key}_vjp", f"{c.base_key} vjp"))

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
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        out_vals = pytree.tree_leaves(out_node.args[0])
        in_types = [ir.Type.parse(_mlir_type(n.meta["val"])) for n in phs]
        out_types = [ir.Type.parse(_mlir_type(n.meta["val"])) for n in out_vals]
        with ir.InsertionPoint(module.body):
            fn = create("func.func", [], [], {
                "sym_name": ir.StringAttr.get(func_name),
                "function_type": ir.TypeAttr.get(ir.FunctionType.get(in_types, out_types))},
                regions=1)
        entry = fn.regions[0].blocks.append(*in_types)
        env = dict(zip(phs, entry.arguments))

        def bind(node, results):
            for u in node.users:
                env[u] = results[u.args[1]]

        def fcall(name, args):
            return list(create("func.call", args, list(ftypes[name].results),
                               {"callee": ir.FlatSymbolRefAttr.get(name)}).results)

        with ir.InsertionPoint(entry):
            for kind, item in plan:
                if kind == "segment":
                    name, ins, outs = item
                    for o, v in zip(outs, fcall(name, [env[a] for a in ins])):
                        env[o] = v
                    continue
                node = item
                c = calls[node.args[1]]
                args = [env[a] for a in node.args[0]]
                op = node.target._schema.name
                if op == "latch::scan":
                    bind(node, _emit_scan(lt, c, args, ftypes, func_name))
                elif op == "latch::repeat":
                    stacked = any(u.args[1] == 1 and u.users for u in node.users)
                    bind(node, _emit_repeat(lt, c, args, ftypes, func_name, stacked))
                else:
                    bind(node, _emit_repeat_bwd(lt, c, args, ftypes, func_name))
            create("func.return", [env[v] for v in out_vals])
        return module.operation.get_asm(print_generic_op_form=True)


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
    x, extras = args[0], args[1:]
    body = f"{func_name}__{c.base_key}_body"
    res = list(ftypes[body].results)
    if not stacked:                       # forward only: a plain loop
        r = lt.loop([x], c.length)
        with ir.InsertionPoint(r.body):
            lt.yield_(lt.call(body, [r.args[1], *extras], res))
        return [r.results[0], None]
    r = lt.scan([x], [], [x.type], length=c.length)   # also stack each visit's input
    with ir.InsertionPoint(r.body):
        y = lt.call(body, [r.args[0], *extras], res)
        lt.yield_([y[0], r.args[0]])
    return r.results


_DYN = -9223372036854775808


def _emit_repeat_bwd(lt, c, args, ftypes, func_name):
    from mlir import ir
    from latch.passes.lower_optimizers import create, extract
    stack, gy, extras = args[0], args[1], args[2:]
    params = extras[:c.num_params]
    vjp = f"{func_name}__{c.base_key}_vjp"
    res = list(ftypes[vjp].results)
    zeros = []
    for p in params:
        t = ir.RankedTensorType(p.type)
        zeros.append(create("arith.constant", [], [t], {"value": ir.DenseElementsAttr.get_splat(
            t, ir.FloatAttr.get(t.element_type, 0.0))}).result)
    r = lt.loop([gy, *zeros], c.length)
    with ir.InsertionPoint(r.body):
        it, g, acc = r.args[0], r.args[1], r.args[2:]
        i64 = ir.IntegerType.get_signless(64)
        last = create("arith.constant", [], [i64],
                      {"value": ir.IntegerAttr.get(i64, c.length - 1)}).result
        rev = create("arith.subi", [last, extract(it)], [i64]).result   # times-1-i
        idx = create("arith.index_cast", [rev], [ir.IndexType.get()]).result
        st = ir.RankedTensorType(stack.type)
        rank = st.rank
        x_i = create("tensor.extract_slice", [stack, idx], [gy.type], {
            "static_offsets": ir.DenseI64ArrayAttr.get([_DYN] + [0] * (rank - 1)),
            "static_sizes": ir.DenseI64ArrayAttr.get([1] + list(st.shape[1:])),
            "static_strides": ir.DenseI64ArrayAttr.get([1] * rank),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 0, 0]),
        }).result
        outs = lt.call(vjp, [x_i, g, *extras], res)
        lt.yield_([outs[0]] + [lt.accumulate(a, gw) for a, gw in zip(acc, outs[1:])])
    return r.results


LOWER_LATCH = "builtin.module(latch-lower-control, latch-lower-optimizers)"
FINISH = "builtin.module(inline, symbol-dce, canonicalize, cse)"


def lower_latch_module(text: str) -> str:
    """latch.scan/loop/accumulate -> scf/linalg, latch.call -> func.call, inline the parts."""
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
