"""latch-lower-optimizers: latch.sgd / latch.adamw / latch.accumulate / latch.clip_global_norm
-> linalg.generic (+ arith/math/tensor on rank-0 scalars).

Each optimizer op becomes one elementwise ``linalg.generic`` over the parameter whose
per-step scalars (learning rate, bias corrections, decay factor) are computed once in f64
from the rank-0 operands and passed in as rank-0 tensor inputs.  bf16/f16 tensors are
computed in f32 (extf on load, truncf on store).  The formulas follow torch.optim's
single-tensor implementations operation by operation.

``latch.clip_global_norm`` sums each gradient's squares into its own element of one
``[n]`` tensor (an ``extract_slice`` / ``insert_slice`` pair per gradient, so after
bufferization each reduction writes only its element and the reductions need no order
among themselves: on TinyMoE B2 a chain of 67 reductions and 67 scalar additions, 0.6 ms
on the critical path, became independent reductions and one sum), then one sum over them.

This module also holds the small IR-building helpers the other rule-lowering passes use.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from latch.errors import PassError
from latch.passes.base import ModulePass


# ----------------------------------------------------------------------------- IR helpers
def ir():
    from mlir import ir as _ir
    return _ir


def create(name: str, operands=(), results=(), attrs=None, regions: int = 0):
    """``Operation.create`` at the current insertion point and location."""
    return ir().Operation.create(name, results=list(results), operands=list(operands),
                                 attributes=attrs or {}, regions=regions)


def collect(module, names: Sequence[str]) -> list:
    """All ops named in ``names`` under ``module``, outermost first (pre-order)."""
    I = ir()
    out = []

    def cb(op):
        if op.name in names:
            out.append(op.operation if hasattr(op, "operation") else op)
        return I.WalkResult.ADVANCE
    getattr(module, "operation", module).walk(cb, I.WalkOrder.PRE_ORDER)
    return out


def attr_float(op, name: str) -> float:
    I = ir()
    a = op.attributes[name]
    return I.FloatAttr(a).value


def attr_int(op, name: str) -> int:
    I = ir()
    a = op.attributes[name]
    if isinstance(a, I.BoolAttr):
        return int(I.BoolAttr(a).value)
    return I.IntegerAttr(a).value


def attr_opt(op, name: str, kind=attr_float, default=0):
    return kind(op, name) if name in op.attributes else default


def ranked(value, op, what="operand"):
    I = ir()
    t = value.type
    if not isinstance(t, I.RankedTensorType):
        raise PassError(f"'{op.name}': {what} must be a ranked tensor, got {t}", op.location)
    t = I.RankedTensorType(t)
    if not t.has_static_shape:
        raise PassError(f"'{op.name}': {what} must have a static shape, got {t}", op.location)
    return t


def is_float(t) -> bool:
    I = ir()
    return any(isinstance(t, c) for c in (I.F16Type, I.BF16Type, I.F32Type, I.F64Type))


def compute_type(elt):
    """The type arithmetic on ``elt`` is done in: f32 for 16-bit floats, else ``elt``."""
    I = ir()
    if isinstance(elt, I.BF16Type) or isinstance(elt, I.F16Type):
        return I.F32Type.get()
    return elt


def fwidth(t) -> int:
    I = ir()
    for c, w in ((I.F16Type, 16), (I.BF16Type, 16), (I.F32Type, 32), (I.F64Type, 64)):
        if isinstance(t, c):
            return w
    raise ValueError(str(t))


def fcast(v, to):
    """extf/truncf a float scalar to ``to`` (no-op when equal)."""
    if v.type == to:
        return v
    name = "arith.extf" if fwidth(v.type) < fwidth(to) else "arith.truncf"
    return create(name, [v], [to]).result


def _fm():
    return {"fastmath": ir().Attribute.parse("#arith.fastmath<none>")}


def fconst(value: float, t):
    I = ir()
    return create("arith.constant", [], [t], {"value": I.FloatAttr.get(t, float(value))}).result


def iconst(value: int, t):
    I = ir()
    return create("arith.constant", [], [t], {"value": I.IntegerAttr.get(t, int(value))}).result


def fbin(name: str, a, b):
    return create(f"arith.{name}", [a, b], [a.type], _fm()).result


def add(a, b): return fbin("addf", a, b)
def sub(a, b): return fbin("subf", a, b)
def mul(a, b): return fbin("mulf", a, b)
def div(a, b): return fbin("divf", a, b)
def fmin(a, b): return fbin("minimumf", a, b)
def sqrt(a): return create("math.sqrt", [a], [a.type], _fm()).result


def extract(t):
    """The element of a rank-0 tensor."""
    return create("tensor.extract", [t], [ir().RankedTensorType(t.type).element_type]).result


def to_tensor(s):
    I = ir()
    return create("tensor.from_elements", [s], [I.RankedTensorType.get([], s.type)]).result


def empty(t):
    return create("tensor.empty", [], [t]).result


def generic(inputs: Sequence, inits: Sequence, maps: Sequence, iterators: Sequence[str],
            body: Callable[[list], list]) -> list:
    """A ``linalg.generic`` on tensors; ``body(block_args)`` returns the values to yield."""
    I = ir()
    op = create("linalg.generic", list(inputs) + list(inits), [v.type for v in inits], {
        "indexing_maps": I.ArrayAttr.get([I.AffineMapAttr.get(m) for m in maps]),
        "iterator_types": I.ArrayAttr.get(
            [I.Attribute.parse(f"#linalg.iterator_type<{it}>") for it in iterators]),
        "operandSegmentSizes": I.DenseI32ArrayAttr.get([len(inputs), len(inits)]),
    }, regions=1)
    arg_types = [I.RankedTensorType(v.type).element_type for v in list(inputs) + list(inits)]
    block = op.regions[0].blocks.append(*arg_types)
    with I.InsertionPoint(block):
        create("linalg.yield", body(list(block.arguments)))
    return list(op.results)


def elementwise(inputs: Sequence, out_types: Sequence, body: Callable[[list], list]) -> list:
    """Parallel ``linalg.generic``: inputs of the output shape map identically, rank-0 inputs
    broadcast; ``body(input elements)`` returns one element per output."""
    I = ir()
    rank = I.RankedTensorType(out_types[0]).rank
    ident = I.AffineMap.get_identity(rank)
    scalar = I.AffineMap.get(rank, 0, [])
    maps = [scalar if I.RankedTensorType(v.type).rank == 0 and rank else ident for v in inputs]
    maps += [ident] * len(out_types)
    inits = [empty(t) for t in out_types]
    return generic(inputs, inits, maps, ["parallel"] * rank,
                   lambda args: body(args[:len(inputs)]))


def sum_of_squares(t, acc_type, init=None):
    """``sum(t * t)`` as a rank-0 tensor of ``acc_type`` (a linalg reduction), accumulated
    into ``init`` (a rank-0 tensor holding 0; default: a fresh one)."""
    I = ir()
    from mlir.dialects import linalg
    rank = I.RankedTensorType(t.type).rank
    out_t = I.RankedTensorType.get([], acc_type)
    if init is None:
        init = linalg.fill(fconst(0.0, acc_type), outs=[empty(out_t)])
    maps = [I.AffineMap.get_identity(rank), I.AffineMap.get(rank, 0, [])]

    def body(args):
        x = fcast(args[0], acc_type)
        return [add(args[1], mul(x, x))]
    return generic([t], [init], maps, ["reduction"] * rank, body)[0]


def replace(op, values) -> None:
    for r, v in zip(op.results, values):
        r.replace_all_uses_with(v)
    op.erase()


# ----------------------------------------------------------------------------- the pass
@dataclasses.dataclass(frozen=True)
class LowerOptimizers(ModulePass):
    name = "latch-lower-optimizers"
    summary = ("lower latch.sgd/adamw/accumulate/clip_global_norm to linalg.generic on tensors "
               "(torch.optim semantics)")

    def apply(self, module) -> None:
        I = ir()
        ops = collect(module, ("latch.sgd", "latch.adamw", "latch.accumulate",
                               "latch.clip_global_norm"))
        for op in ops:
            with I.InsertionPoint(op), op.location:
                lower = {"latch.sgd": _sgd, "latch.adamw": _adamw,
                         "latch.accumulate": _accumulate,
                         "latch.clip_global_norm": _clip}[op.name]
                replace(op, lower(op))


def _param_type(op):
    t = ranked(op.operands[0], op, "param")
    if not is_float(t.element_type):
        raise PassError(f"'{op.name}': expected a float tensor, got {t}", op.location)
    n = {"latch.sgd": 2, "latch.adamw": 4, "latch.accumulate": 2}[op.name]
    extra = [op.operands[3]] if op.name == "latch.sgd" and len(op.operands) == 4 else []
    for v in list(op.operands[:n]) + extra:
        if v.type != t:
            raise PassError(f"'{op.name}': param, grad and moments must share one type "
                            f"({t} vs {v.type})", op.location)
    return t


def _scalar_f64(t):
    """extract + extf to f64 (for tensor<f32> / tensor<f64> rank-0 operands)."""
    I = ir()
    return fcast(extract(t), I.F64Type.get())


def _sgd(op):
    pt = _param_type(op)
    ct = compute_type(pt.element_type)
    m = attr_opt(op, "momentum")
    wd = attr_opt(op, "weight_decay")
    nesterov = bool(attr_opt(op, "nesterov", attr_int, 0))
    has_buf = len(op.operands) == 4
    if has_buf != (m != 0):
        raise PassError("'latch.sgd': a momentum buffer operand is required iff momentum != 0",
                        op.location)
    p, g, lr_t = op.operands[0], op.operands[1], op.operands[2]
    lr_elt = ir().RankedTensorType(lr_t.type).element_type
    lr = lr_t if lr_elt == ct else to_tensor(fcast(extract(lr_t), ct))
    ins = [p, g, lr] + ([op.operands[3]] if has_buf else [])
    outs = [pt] * (2 if has_buf else 1)
    elt = pt.element_type

    def body(a):
        pv, gv, lrv = fcast(a[0], ct), fcast(a[1], ct), a[2]
        d = add(gv, mul(pv, fconst(wd, ct))) if wd != 0 else gv
        res = []
        if has_buf:
            buf = add(mul(fcast(a[3], ct), fconst(m, ct)), d)
            d = add(d, mul(buf, fconst(m, ct))) if nesterov else buf
            res.append(fcast(buf, elt))
        return [fcast(sub(pv, mul(lrv, d)), elt)] + res
    return elementwise(ins, outs, body)


def _adamw(op):
    I = ir()
    pt = _param_type(op)
    if len(op.operands) != 6:
        raise PassError("'latch.adamw': expects 6 operands (param, grad, m, v, lr, step)", op.location)
    ct = compute_type(pt.element_type)
    elt = pt.element_type
    b1, b2 = attr_float(op, "beta1"), attr_float(op, "beta2")
    eps, wd = attr_float(op, "eps"), attr_opt(op, "weight_decay")
    f64 = I.F64Type.get()
    p, g, m, v, lr_t, step_t = op.operands
    # Per-step scalars in f64, like torch's Python-float bias corrections.
    t = create("arith.sitofp", [extract(step_t)], [f64]).result
    lr = _scalar_f64(lr_t)
    one = fconst(1.0, f64)
    bc1 = sub(one, create("math.powf", [fconst(b1, f64), t], [f64], _fm()).result)
    bc2 = sub(one, create("math.powf", [fconst(b2, f64), t], [f64], _fm()).result)
    step_size = to_tensor(fcast(div(lr, bc1), ct))
    bc2_sqrt = to_tensor(fcast(sqrt(bc2), ct))
    decay = to_tensor(fcast(sub(one, mul(lr, fconst(wd, f64))), ct))

    def body(a):
        pv, gv, mv, vv = (fcast(x, ct) for x in a[:4])
        ss, bcs, dec = a[4], a[5], a[6]
        if wd != 0:
            pv = mul(pv, dec)
        w = 1.0 - b1  # torch: exp_avg.lerp_(grad, 1 - beta1)
        if w < 0.5:
            m1 = add(mv, mul(fconst(w, ct), sub(gv, mv)))
        else:
            m1 = sub(gv, mul(sub(gv, mv), fconst(1.0 - w, ct)))
        v1 = add(mul(vv, fconst(b2, ct)), mul(mul(gv, gv), fconst(1.0 - b2, ct)))
        denom = add(div(sqrt(v1), bcs), fconst(eps, ct))
        p1 = sub(pv, mul(ss, div(m1, denom)))
        return [fcast(p1, elt), fcast(m1, elt), fcast(v1, elt)]
    return elementwise([p, g, m, v, step_size, bc2_sqrt, decay], [pt] * 3, body)


def _accumulate(op):
    t = _param_type(op)
    ct = compute_type(t.element_type)
    return elementwise(list(op.operands[:2]), [t],
                       lambda a: [fcast(add(fcast(a[0], ct), fcast(a[1], ct)), t.element_type)])


def _clip(op):
    I = ir()
    grads = list(op.operands)
    if not grads:
        raise PassError("'latch.clip_global_norm': needs at least one gradient", op.location)
    max_norm = attr_float(op, "max_norm")
    f32 = I.F32Type.get()
    types = [ranked(g, op, "gradient") for g in grads]
    acc_t = I.F64Type.get() if any(isinstance(t.element_type, I.F64Type) for t in types) else f32
    # each gradient's sum of squares into its own element of one [n] tensor (a slice each:
    # after bufferization every reduction writes its own element, so the reductions need
    # no order among themselves), then one sum over the n; one gradient: its sum itself
    n = len(grads)
    from mlir.dialects import linalg, tensor
    if n == 1:
        return _clip_with(grads, types, acc_t, max_norm,
                          extract(sum_of_squares(grads[0], acc_t)))
    parts = linalg.fill(fconst(0.0, acc_t), outs=[empty(I.RankedTensorType.get([n], acc_t))])
    scalar_t = I.RankedTensorType.get([], acc_t)
    for i, g in enumerate(grads):
        slot = tensor.ExtractSliceOp(scalar_t, parts, [], [], [], [i], [1], [1]).result
        part = sum_of_squares(g, acc_t, init=slot)
        parts = tensor.InsertSliceOp(part, parts, [], [], [], [i], [1], [1]).result
    zero = linalg.fill(fconst(0.0, acc_t), outs=[empty(scalar_t)])
    total = extract(generic([parts], [zero], [I.AffineMap.get_identity(1),
                                              I.AffineMap.get(1, 0, [])], ["reduction"],
                            lambda a: [add(a[1], a[0])])[0])
    return _clip_with(grads, types, acc_t, max_norm, total)


def _clip_with(grads, types, acc_t, max_norm, total):
    """The clipped gradients and the norm, from the sum of squares ``total``."""
    f32 = ir().F32Type.get()
    norm = sqrt(total)
    coef = fmin(fconst(1.0, acc_t), div(fconst(max_norm, acc_t), add(norm, fconst(1e-6, acc_t))))
    out = []
    for g, t in zip(grads, types):
        ct = compute_type(t.element_type)
        c = to_tensor(fcast(coef, ct))
        out += elementwise([g, c], [t],
                           lambda a, t=t, ct=ct: [fcast(mul(fcast(a[0], ct), a[1]), t.element_type)])
    return out + [to_tensor(fcast(norm, f32))]
