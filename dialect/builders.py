"""Emit Latch ops from Python at the current insertion point; functions return ``ir.Value``s.

    from latch.dialect import builders as lt

    with ctx, ir.Location.unknown(), ir.InsertionPoint(module.body):
        w = lt.state("w", ir.RankedTensorType.get([4], ir.F32Type.get()), "param")
        upd = lt.update("train", [x_type])
        with ir.InsertionPoint(upd.body):
            p = lt.read(w)
            ...
            p2, m2, v2 = lt.adamw(p, g, m, v, lr, step, weight_decay=0.1)
            lt.write(w, p2)
            lt.return_([loss])

Region ops (``update``, ``every``, ``loop``, ``scan``) return a :class:`RegionOp` whose
``body`` block is already created with its arguments; fill it and end it with ``yield_`` (or
``return_``).  Every builder makes the current context accept Latch ops (``load()``).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from mlir import ir

from . import load


@dataclasses.dataclass(frozen=True)
class RegionOp:
    """A region op just built: the op, its body block, and its results."""
    op: ir.Operation
    body: ir.Block

    @property
    def results(self) -> list[ir.Value]:
        return list(self.op.results)

    @property
    def args(self) -> list[ir.Value]:
        return list(self.body.arguments)


def _f64(x: float) -> ir.FloatAttr:
    return ir.FloatAttr.get(ir.F64Type.get(), float(x))


def _i64(x: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(x))


def _scalar(elem: ir.Type) -> ir.Type:
    return ir.RankedTensorType.get([], elem)


def _create(name: str, operands=(), results=(), attributes=None, regions=0) -> ir.Operation:
    load()
    return ir.Operation.create(name, results=list(results), operands=list(operands),
                               attributes=attributes or {}, regions=regions)


def _with_body(op: ir.Operation, arg_types: Sequence[ir.Type]) -> RegionOp:
    loc = ir.Location.unknown()
    block = op.regions[0].blocks.append(*arg_types, arg_locs=[loc] * len(arg_types))
    return RegionOp(op, block)


def _sym_name(state) -> str:
    if isinstance(state, str):
        return state
    return ir.StringAttr(state.operation.attributes["sym_name"]).value


# ------------------------------------------------------------------------- program structure
def state(sym_name: str, type: ir.Type, kind: str) -> ir.Operation:
    """``latch.state``: declare a persistent tensor (kind: param, grad_acc, moment, counter)."""
    return _create("latch.state", attributes={
        "sym_name": ir.StringAttr.get(sym_name), "type": ir.TypeAttr.get(type),
        "kind": ir.StringAttr.get(kind)})


def update(sym_name: str, input_types: Sequence[ir.Type] = ()) -> RegionOp:
    """``latch.update``: its body's arguments are the microbatch inputs."""
    op = _create("latch.update", attributes={"sym_name": ir.StringAttr.get(sym_name)}, regions=1)
    return _with_body(op, input_types)


def read(state, type: ir.Type | None = None) -> ir.Value:
    """``latch.read`` of ``state`` (a ``latch.state`` op, or its name together with ``type``)."""
    if type is None:
        if isinstance(state, str):
            raise ValueError(f"read('{state}'): pass the state op or its type")
        type = ir.TypeAttr(state.operation.attributes["type"]).value
    return _create("latch.read", results=[type],
                   attributes={"state": ir.FlatSymbolRefAttr.get(_sym_name(state))}).result


def write(state, value: ir.Value) -> ir.Operation:
    """``latch.write``: ``value`` becomes the state's value after the update."""
    return _create("latch.write", operands=[value],
                   attributes={"state": ir.FlatSymbolRefAttr.get(_sym_name(state))})


def return_(values: Sequence[ir.Value]) -> ir.Operation:
    """``latch.return``: ends the update; the loss first."""
    return _create("latch.return", operands=values)


def call(callee, args: Sequence[ir.Value], result_types: Sequence[ir.Type] | None = None
         ) -> list[ir.Value]:
    """``latch.call`` of a ``func.func`` (the op, or its name together with ``result_types``)."""
    if not isinstance(callee, str):
        if result_types is None:
            ftype = ir.FunctionType(ir.TypeAttr(callee.operation.attributes["function_type"]).value)
            result_types = list(ftype.results)
        callee = _sym_name(callee)
    if result_types is None:
        raise ValueError(f"call('{callee}'): pass the func.func op or the result types")
    return list(_create("latch.call", operands=args, results=result_types,
                        attributes={"callee": ir.FlatSymbolRefAttr.get(callee)}).results)


# ------------------------------------------------------------------------- learning rules
def sgd(param, grad, lr, buf=None, *, momentum: float = 0.0, weight_decay: float = 0.0,
        nesterov: bool = False) -> tuple[ir.Value, ir.Value | None]:
    """``latch.sgd`` -> (new_param, new_buf or None).  Pass ``buf`` iff momentum != 0."""
    operands = [param, grad, lr] + ([buf] if buf is not None else [])
    op = _create("latch.sgd", operands=operands, results=[param.type] * (len(operands) - 2),
                 attributes={
                     "momentum": _f64(momentum), "weight_decay": _f64(weight_decay),
                     "nesterov": ir.BoolAttr.get(bool(nesterov))})
    return op.results[0], (op.results[1] if buf is not None else None)


def adamw(param, grad, m, v, lr, step, *, beta1: float = 0.9, beta2: float = 0.999,
          eps: float = 1e-8, weight_decay: float = 1e-2) -> tuple[ir.Value, ir.Value, ir.Value]:
    """``latch.adamw`` -> (new_param, new_m, new_v); defaults are torch.optim.AdamW's."""
    op = _create("latch.adamw", operands=[param, grad, m, v, lr, step],
                 results=[param.type] * 3, attributes={
                     "beta1": _f64(beta1), "beta2": _f64(beta2), "eps": _f64(eps),
                     "weight_decay": _f64(weight_decay)})
    return op.results[0], op.results[1], op.results[2]


def clip_global_norm(grads: Sequence[ir.Value], max_norm: float
                     ) -> tuple[list[ir.Value], ir.Value]:
    """``latch.clip_global_norm`` -> (clipped grads, total norm as tensor<f32>)."""
    op = _create("latch.clip_global_norm", operands=grads,
                 results=[g.type for g in grads] + [_scalar(ir.F32Type.get())],
                 attributes={"max_norm": _f64(max_norm)})
    results = list(op.results)
    return results[:-1], results[-1]


def warmup_cosine(step, *, peak: float, warmup_steps: int, total_steps: int,
                  final_ratio: float = 0.0) -> ir.Value:
    """``latch.warmup_cosine`` -> lr (tensor<f32>) from the 0-based step (tensor<i64>)."""
    return _create("latch.warmup_cosine", operands=[step], results=[_scalar(ir.F32Type.get())],
                   attributes={"peak": _f64(peak), "warmup_steps": _i64(warmup_steps),
                               "total_steps": _i64(total_steps),
                               "final_ratio": _f64(final_ratio)}).result


def accumulate(acc, grad) -> ir.Value:
    """``latch.accumulate`` -> acc + grad."""
    return _create("latch.accumulate", operands=[acc, grad], results=[acc.type]).result


# ------------------------------------------------------------------------- control
def every(counter, passthrough: Sequence[ir.Value], period: int) -> RegionOp:
    """``latch.every``: fill ``.body`` (no arguments) and ``yield_`` the passthrough types."""
    op = _create("latch.every", operands=[counter, *passthrough],
                 results=[v.type for v in passthrough], attributes={"period": _i64(period)},
                 regions=1)
    return _with_body(op, [])


def loop(inits: Sequence[ir.Value], times: int) -> RegionOp:
    """``latch.loop``: ``.args`` are (iteration tensor<i64>, carried...); yield the next carried."""
    types = [v.type for v in inits]
    op = _create("latch.loop", operands=inits, results=types, attributes={"times": _i64(times)},
                 regions=1)
    return _with_body(op, [_scalar(ir.IntegerType.get_signless(64))] + types)


def scan(carries: Sequence[ir.Value], xs: Sequence[ir.Value], y_types: Sequence[ir.Type],
         length: int | None = None) -> RegionOp:
    """``latch.scan``: ``.args`` are (carries..., x slices...); yield (carries..., y slices...)
    whose types are ``y_types``.  Results: final carries, then ys stacked to [length, ...]."""
    if length is None:
        if not xs:
            raise ValueError("scan without xs needs an explicit length")
        length = ir.RankedTensorType(xs[0].type).shape[0]
    carry_types = [v.type for v in carries]
    slices = [ir.RankedTensorType.get(list(x.type.shape)[1:], x.type.element_type) for x in xs]
    stacked = [ir.RankedTensorType.get([length] + list(t.shape), t.element_type) for t in y_types]
    op = _create("latch.scan", operands=[*carries, *xs], results=carry_types + stacked,
                 attributes={"num_carries": _i64(len(carries)), "length": _i64(length)},
                 regions=1)
    return _with_body(op, carry_types + slices)


def yield_(values: Sequence[ir.Value] = ()) -> ir.Operation:
    """``latch.yield``: ends an every/loop/scan body."""
    return _create("latch.yield", operands=values)


# ------------------------------------------------------------------------- distributed
def all_reduce(values: Sequence[ir.Value], bucket: int, reduction: str = "mean"
               ) -> list[ir.Value]:
    """``latch.all_reduce`` (tensor form) of one bucket -> the reduced values."""
    return list(_create("latch.all_reduce", operands=values, results=[v.type for v in values],
                        attributes={"bucket": _i64(bucket),
                                    "reduction": ir.StringAttr.get(reduction)}).results)


# ------------------------------------------------------------------------- fused kernels
def _attention_attrs(causal: bool, scale: float) -> dict:
    return {"causal": ir.BoolAttr.get(bool(causal)),
            "scale": ir.FloatAttr.get(ir.F64Type.get(), float(scale))}


def attention(q: ir.Value, k: ir.Value, v: ir.Value, causal: bool, scale: float
              ) -> list[ir.Value]:
    """``latch.attention`` (tensor form) -> [o (bf16, q's shape), lse (f32, q's shape
    without its last dimension)]."""
    qt = ir.RankedTensorType(q.type)
    o = ir.RankedTensorType.get(list(qt.shape), qt.element_type)
    lse = ir.RankedTensorType.get(list(qt.shape)[:-1], ir.F32Type.get())
    return list(_create("latch.attention", operands=[q, k, v], results=[o, lse],
                        attributes=_attention_attrs(causal, scale)).results)


def attention_grad(q: ir.Value, k: ir.Value, v: ir.Value, lse: ir.Value, do: ir.Value,
                   delta: ir.Value, causal: bool, scale: float) -> list[ir.Value]:
    """``latch.attention_grad`` (tensor form) -> [dq, dk, dv]."""
    return list(_create("latch.attention_grad", operands=[q, k, v, lse, do, delta],
                        results=[q.type, k.type, v.type],
                        attributes=_attention_attrs(causal, scale)).results)
