"""Emit the Latch program of one training update for a learning rule, as generic-form MLIR text.

The entry point is :func:`build_update_module`: given the parameters (name, tensor type), the
rule and the microbatch input types, it declares the training state (``latch.state`` for every
parameter, the global ``step`` counter and the rule's moments/accumulators/counters) and one
``latch.update`` whose body

1. reads every state (``latch.read``),
2. calls ``@loss_and_grads(params..., inputs...) -> (loss, grads..., extras...)`` through
   ``latch.call`` (see ``call_op`` in :func:`build_update_module`) (a function
   the caller puts into the same module, e.g. imported from torch-mlir),
3. emits the rule's ops (``latch.sgd``/``latch.adamw``/``latch.every``/...),
4. writes the new parameters, the rule's new state and ``step + 1`` (``latch.write``),
5. returns ``(loss, extras...)``.

Text is produced (not ``mlir`` objects) so that this module imports without MLIR and the
output can be concatenated with text from torch-mlir's own MLIR.  Every op is printed in
generic form, so the text parses with the real Latch dialect or with
``allow_unregistered_dialects``.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Sequence

from latch.errors import LatchError

I64 = "tensor<i64>"
F32 = "tensor<f32>"


# ----------------------------------------------------------------------------- values & types
@dataclasses.dataclass(frozen=True)
class V:
    """An SSA value of the text being built: its name (``%3``, ``%4#1``, ``%arg0``) and type."""
    name: str
    type: str

    def __str__(self) -> str:
        return self.name


_TENSOR = re.compile(r"^tensor<((?:\d+x)*)([a-z0-9]+)>$")


def tensor_shape(type_str: str) -> tuple[tuple[int, ...], str]:
    """``tensor<4x8xf32>`` -> ((4, 8), "f32"); rejects dynamic or unranked tensors."""
    m = _TENSOR.match(type_str.replace(" ", ""))
    if not m:
        raise LatchError(f"expected a statically shaped ranked tensor type, got '{type_str}'")
    dims = tuple(int(d) for d in m.group(1).split("x") if d)
    return dims, m.group(2)


def fmt_float(x: float) -> str:
    """An MLIR float literal that round-trips ``x`` exactly (always has a '.')."""
    s = repr(float(x))
    if "e" in s and "." not in s:
        mant, exp = s.split("e")
        s = f"{mant}.0e{exp}"
    elif "." not in s:
        s += ".0"
    return s


def f64_attr(x: float) -> str:
    return f"{fmt_float(x)} : f64"


def i64_attr(n: int) -> str:
    return f"{int(n)} : i64"


def i1_attr(b: bool) -> str:
    return "true" if b else "false"


def sym(name: str) -> str:
    return '@"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def string(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ----------------------------------------------------------------------------- the text builder
@dataclasses.dataclass(frozen=True)
class StateDecl:
    name: str
    type: str
    kind: str  # param | grad_acc | moment | counter


class Emitter:
    """Appends generic-form ops to the current block; regions are built with :meth:`op_region`."""

    def __init__(self):
        self._next = 0
        self._blocks: list[list[str]] = [[]]

    # -- core
    def fresh(self) -> str:
        n = self._next
        self._next += 1
        return f"%{n}"

    def emit_line(self, text: str) -> None:
        self._blocks[-1].append(text)

    def _results(self, result_types: Sequence[str]) -> tuple[str, list[V]]:
        if not result_types:
            return "", []
        name = self.fresh()
        if len(result_types) == 1:
            return f"{name} = ", [V(name, result_types[0])]
        return f"{name}:{len(result_types)} = ", [V(f"{name}#{i}", t) for i, t in enumerate(result_types)]

    @staticmethod
    def _attrs(attrs: dict[str, str] | None, props: bool = False) -> str:
        if not attrs:
            return ""
        body = ", ".join(f"{k} = {v}" for k, v in attrs.items())
        return f" <{{{body}}}>" if props else f" {{{body}}}"

    @staticmethod
    def _sig(operands: Sequence[V], result_types: Sequence[str]) -> str:
        ins = ", ".join(o.type for o in operands)
        outs = ", ".join(result_types)
        return f"({ins}) -> ({outs})"

    def op(self, name: str, operands: Sequence[V] = (), result_types: Sequence[str] = (),
           attrs: dict[str, str] | None = None, props: dict[str, str] | None = None,
           regions: Sequence[str] = ()) -> list[V]:
        head, results = self._results(result_types)
        ops = ", ".join(o.name for o in operands)
        reg = f" ({', '.join(regions)})" if regions else ""
        self.emit_line(f'{head}"{name}"({ops}){self._attrs(props, True)}{reg}'
                       f'{self._attrs(attrs)} : {self._sig(operands, result_types)}')
        return results

    def region(self, arg_types: Sequence[str], body: Callable[[list[V]], None]) -> str:
        """Build one single-block region; ``body(args)`` emits its ops including the terminator."""
        args = [V(self.fresh().replace("%", "%a"), t) for t in arg_types]
        self._blocks.append([])
        body(args)
        lines = self._blocks.pop()
        head = ""
        if arg_types:
            head = "^bb0(" + ", ".join(f"{a.name}: {a.type}" for a in args) + "):\n"
        inner = "\n".join("  " + ln for ln in "\n".join(lines).split("\n"))
        return "{\n" + head + inner + "\n}"

    def op_region(self, name: str, operands: Sequence[V], result_types: Sequence[str],
                  attrs: dict[str, str] | None, arg_types: Sequence[str],
                  body: Callable[[list[V]], None], props: dict[str, str] | None = None) -> list[V]:
        region = self.region(arg_types, body)
        return self.op(name, operands, result_types, attrs, props, [region])

    def text(self) -> str:
        assert len(self._blocks) == 1
        return "\n".join(self._blocks[0])

    # -- scalars kept as rank-0 tensors (tensor.extract -> arith -> tensor.from_elements)
    def const_tensor(self, value: float, type_str: str = F32) -> V:
        dims, elt = tensor_shape(type_str)
        lit = str(int(value)) if elt.startswith("i") else fmt_float(value)
        return self.op("arith.constant", [], [type_str], props={"value": f"dense<{lit}> : {type_str}"})[0]

    def _scalar_i64(self, t: V) -> V:
        return self.op("tensor.extract", [t], ["i64"])[0]

    def _const_i64(self, n: int) -> V:
        return self.op("arith.constant", [], ["i64"], props={"value": f"{int(n)} : i64"})[0]

    def _to_tensor(self, s: V) -> V:
        return self.op("tensor.from_elements", [s], [f"tensor<{s.type}>"])[0]

    def i64_add(self, t: V, n: int) -> V:
        """``t + n`` for a ``tensor<i64>``."""
        s = self._scalar_i64(t)
        r = self.op("arith.addi", [s, self._const_i64(n)], ["i64"],
                    props={"overflowFlags": "#arith.overflow<none>"})[0]
        return self._to_tensor(r)

    def i64_floordiv(self, t: V, n: int) -> V:
        """``t // n`` for a non-negative ``tensor<i64>``."""
        s = self._scalar_i64(t)
        r = self.op("arith.divsi", [s, self._const_i64(n)], ["i64"])[0]
        return self._to_tensor(r)

    # -- elementwise helpers on statically shaped tensors (emitted as linalg.generic)
    def _elementwise(self, inputs: Sequence[V], out_type: str, body: Callable[[list[V]], V]) -> V:
        dims, elt = tensor_shape(out_type)
        rank = len(dims)
        d = ", ".join(f"d{i}" for i in range(rank))
        ident = f"affine_map<({d}) -> ({d})>"
        empty = self.op("tensor.empty", [], [out_type])[0]
        maps = "[" + ", ".join([ident] * (len(inputs) + 1)) + "]"
        iters = "[" + ", ".join(["#linalg.iterator_type<parallel>"] * rank) + "]"

        def region(args):
            (res,) = [body(args[:len(inputs)])]
            self.op("linalg.yield", [res], [])

        arg_types = [tensor_shape(i.type)[1] for i in inputs] + [elt]
        return self.op_region("linalg.generic", list(inputs) + [empty], [out_type], None, arg_types,
                              region, props={"indexing_maps": maps, "iterator_types": iters,
                                             "operandSegmentSizes": f"array<i32: {len(inputs)}, 1>"})[0]

    def divide(self, t: V, n: float) -> V:
        """``t / n`` elementwise (n a Python number)."""
        _, elt = tensor_shape(t.type)

        def body(args):
            c = self.op("arith.constant", [], [elt], props={"value": f"{fmt_float(n)} : {elt}"})[0]
            return self.op("arith.divf", [args[0], c], [elt],
                           props={"fastmath": "#arith.fastmath<none>"})[0]
        return self._elementwise([t], t.type, body)

    def zeros(self, type_str: str) -> V:
        dims, elt = tensor_shape(type_str)
        empty = self.op("tensor.empty", [], [type_str])[0]
        zero = self.op("arith.constant", [], [elt], props={"value": f"0.0 : {elt}" if elt[0] in "fb" else f"0 : {elt}"})[0]

        def region(args):
            self.op("linalg.yield", [args[0]], [])
        return self.op_region("linalg.fill", [zero, empty], [type_str], None, [elt, elt], region,
                              props={"operandSegmentSizes": "array<i32: 1, 1>"})[0]

    # -- Latch ops
    def read(self, decl: StateDecl) -> V:
        return self.op("latch.read", [], [decl.type], {"state": sym(decl.name)})[0]

    def write(self, name: str, value: V) -> None:
        self.op("latch.write", [value], [], {"state": sym(name)})


# ----------------------------------------------------------------------------- emission contexts
@dataclasses.dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str


@dataclasses.dataclass(frozen=True)
class Slot:
    """One parameter during emission: its spec, current value and (possibly transformed) grad."""
    name: str
    type: str
    value: V
    grad: V


@dataclasses.dataclass(frozen=True)
class Scope:
    """Where a rule sits in the rule tree: a prefix for its counters, and how many every() enclose it."""
    prefix: str = ""
    every_depth: int = 0

    def child(self, part: str, *, every: bool = False) -> "Scope":
        return Scope(self.prefix + part, self.every_depth + (1 if every else 0))


def lr_value(em: Emitter, lr, step: V) -> V:
    """The ``tensor<f32>`` learning rate at ``step`` (steps taken, 0-based) for a float or schedule."""
    from latch.optim.schedules import WarmupCosine
    if isinstance(lr, WarmupCosine):
        return em.op("latch.warmup_cosine", [step], [F32], {
            "peak": f64_attr(lr.peak), "warmup_steps": i64_attr(lr.warmup_steps),
            "total_steps": i64_attr(lr.total_steps), "final_ratio": f64_attr(lr.final_ratio)})[0]
    return em.const_tensor(float(lr), F32)


# ----------------------------------------------------------------------------- the whole update
STEP = StateDecl("step", I64, "counter")


def declare_states(params: Sequence[tuple[str, str]], rule) -> list[StateDecl]:
    """The training state of ``rule`` on ``params``, in declaration (= ABI) order:
    the parameters, ``step``, then the rule's own state."""
    specs = _specs(params)
    decls = [StateDecl(p.name, p.type, "param") for p in specs] + [STEP]
    decls += rule.state_decls(specs, Scope())
    seen = set()
    for d in decls:
        if d.name in seen:
            raise LatchError(f"two pieces of training state are both named '{d.name}' "
                             "(rename the parameter or restructure the rule)")
        seen.add(d.name)
    return decls


_NP_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "i64": "int64"}


def initial_state(decls: Sequence[StateDecl], params: dict) -> list:
    """Initial values (numpy arrays) of the state in ABI order: the given parameter values,
    zeros for moments, accumulators and counters (bf16 states are returned as float32)."""
    import numpy as np
    out = []
    for d in decls:
        dims, elt = tensor_shape(d.type)
        dtype = _NP_DTYPES.get(elt, "float32")
        if d.kind == "param":
            if d.name not in params:
                raise LatchError(f"no initial value for parameter '{d.name}'")
            v = np.asarray(params[d.name], dtype=dtype)
            if v.shape != dims:
                raise LatchError(f"parameter '{d.name}' has shape {v.shape}, expected {dims}")
            out.append(v.copy())
        else:
            out.append(np.zeros(dims, dtype=dtype))
    return out


def _specs(params) -> list[ParamSpec]:
    specs = []
    for item in params:
        name, type_str = (item.name, item.type) if isinstance(item, ParamSpec) else item
        dims, elt = tensor_shape(type_str)
        if elt not in ("f32", "f64", "bf16", "f16"):
            raise LatchError(f"parameter '{name}' has element type {elt}; "
                             "trainable parameters must be f32, f64, bf16 or f16")
        specs.append(ParamSpec(name, type_str))
    if not specs:
        raise LatchError("the model has no trainable parameters")
    return specs


def _all_reduce(em: Emitter, loss: V, grads: list[V], bucket_bytes: int) -> tuple[V, list[V]]:
    """One ``latch.all_reduce`` (mean) per bucket of :func:`latch.distributed.plan_buckets`;
    returns the averaged loss and gradients."""
    from latch.distributed import plan_buckets

    buckets = plan_buckets([tensor_shape(g.type) for g in grads], bucket_bytes,
                           tensor_shape(loss.type)[1])
    grads = list(grads)
    for b in buckets:
        values = ([loss] if b.with_loss else []) + [grads[i] for i in b.grads]
        reduced = em.op("latch.all_reduce", values, [v.type for v in values],
                        {"bucket": i64_attr(b.index), "reduction": string("mean")})
        if b.with_loss:
            loss, reduced = reduced[0], reduced[1:]
        for i, r in zip(b.grads, reduced):
            grads[i] = r
    return loss, grads


def build_update_module(params: Sequence[tuple[str, str]], rule, input_types: Sequence[str] = (), *,
                        loss_and_grads: str | None = "loss_and_grads", loss_type: str = F32,
                        extra_result_types: Sequence[str] = (), update_name: str = "update",
                        functions: str = "", call_op: str = "latch.call",
                        all_reduce_bucket_bytes: int | None = None) -> str:
    """Generic-form MLIR text of a module holding the training state and ``latch.update``.

    ``params``: ``[(name, "tensor<...xf32>"), ...]`` in the model's parameter order.
    ``rule``: a :class:`latch.optim.rules.Rule`.
    ``input_types``: the microbatch inputs (block arguments of the update).
    ``loss_and_grads``: the symbol of ``func.func(params..., inputs...) -> (loss, grads...,
    extras...)``; grads in parameter order with the parameter types; ``extra_result_types``
    are returned by the update after the loss.
    ``functions``: text appended inside the module (e.g. that function).
    ``call_op``: ``"latch.call"`` (default; ``latch-lower-state`` turns it into ``func.call``)
    or ``"func.call"``.  A ``func.call`` nested in ``latch.update`` does not verify while Latch
    ops are unregistered operations: MLIR does not resolve symbols through an unregistered op
    with a region (``SymbolTable::getNearestSymbolTable`` gives up), so parsing fails with
    "'func.call' op 'loss_and_grads' does not reference a valid function".
    ``loss_and_grads=None``: no call; the update's inputs are the gradients (in parameter
    order, parameter types) followed by ``input_types``, and the loss is 0 (an optimizer-only
    program, for gradients computed elsewhere).
    ``all_reduce_bucket_bytes``: data-parallel (``distributed=True``): the loss and the
    gradients are averaged over the ranks by ``latch.all_reduce`` ops, one per bucket of at
    most this many bytes (:func:`latch.distributed.plan_buckets`), before the rule sees them.
    """
    from latch.optim.rules import Rule
    if not isinstance(rule, Rule):
        raise LatchError(f"expected a learning rule (latch.optim.SGD, AdamW, partition, ...), got {rule!r}")
    specs = _specs(params)
    decls = declare_states(specs, rule)
    rule.bind([p.name for p in specs])
    em = Emitter()

    def body(args: list[V]):
        current = {d.name: em.read(d) for d in decls}
        if loss_and_grads is None:
            grads, extras = args[:len(specs)], []
            loss = em.const_tensor(0.0, loss_type)
        else:
            call_ins = [current[p.name] for p in specs] + list(args)
            call_outs = [loss_type] + [p.type for p in specs] + list(extra_result_types)
            if call_op == "func.call":
                res = em.op("func.call", call_ins, call_outs, props={"callee": sym(loss_and_grads)})
            else:
                res = em.op(call_op, call_ins, call_outs, {"callee": sym(loss_and_grads)})
            loss, grads, extras = res[0], res[1:1 + len(specs)], res[1 + len(specs):]
        if all_reduce_bucket_bytes is not None:
            loss, grads = _all_reduce(em, loss, list(grads), all_reduce_bucket_bytes)
        slots = [Slot(p.name, p.type, current[p.name], g) for p, g in zip(specs, grads)]
        step = current["step"]
        new_params, new_states = rule.emit(em, slots, current, step, Scope())
        writes = {s.name: v for s, v in zip(slots, new_params)}
        writes.update(new_states)
        writes["step"] = em.i64_add(step, 1)
        for d in decls:
            if d.name in writes and writes[d.name] is not current[d.name]:
                em.write(d.name, writes[d.name])
        em.op("latch.return", [loss] + list(extras), [])

    arg_types = list(input_types)
    if loss_and_grads is None:
        arg_types = [p.type for p in specs] + arg_types
    region = em.region(arg_types, body)
    lines = ['module {']
    for d in decls:
        lines.append(f'  "latch.state"() {{sym_name = {string(d.name)}, type = {d.type}, '
                     f'kind = {string(d.kind)}}} : () -> ()')
    reg = "\n".join("  " + ln for ln in region.split("\n")).lstrip()
    lines.append(f'  "latch.update"() ({reg}) {{sym_name = {string(update_name)}}} : () -> ()')
    if functions:
        lines.append(functions)
    lines.append("}")
    return "\n".join(lines) + "\n"
