"""latch-lower-control: latch.every -> scf.if, latch.loop -> scf.for, latch.scan -> scf.for
with tensor.extract_slice / tensor.insert_slice.

* ``latch.every(counter, passthrough...) {period}``: ``scf.if (counter % period == 0)`` whose
  then-branch is the region (``latch.yield`` -> ``scf.yield``) and whose else-branch yields the
  passthrough operands.
* ``latch.loop(inits...) {times}``: ``scf.for %i = 0 to times iter_args(inits)``; the body's
  first block argument (``tensor<i64>`` iteration) is rebuilt from the induction variable.
* ``latch.scan(carries..., xs...) {num_carries, length}``: ``scf.for`` over ``length`` carrying
  the carries and the stacked ys (initialised with ``tensor.empty``); each x is sliced at the
  iteration (rank-reducing ``tensor.extract_slice``) and each y inserted with
  ``tensor.insert_slice``.
Ops are lowered outermost first, so nested control flow is handled (the moved bodies are
visited afterwards).
"""
from __future__ import annotations

import dataclasses

from latch.errors import PassError
from latch.passes.base import ModulePass
from latch.passes.lower_optimizers import attr_int, collect, create, empty, extract, ir, to_tensor

_DYN = -9223372036854775808  # ShapedType::kDynamic


@dataclasses.dataclass(frozen=True)
class LowerControl(ModulePass):
    name = "latch-lower-control"
    summary = "lower latch.every/loop/scan to scf.if/scf.for on tensors"

    def apply(self, module) -> None:
        I = ir()
        while True:
            ops = collect(module, ("latch.every", "latch.loop", "latch.scan"))
            if not ops:
                return
            op = ops[0]  # outermost first; bodies are moved, so re-collect each time
            with I.InsertionPoint(op), op.location:
                {"latch.every": _every, "latch.loop": _loop, "latch.scan": _scan}[op.name](op)


def _body(op):
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        raise PassError(f"'{op.name}': expected one region with one block", op.location)
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if not ops or ops[-1].operation.name != "latch.yield":
        raise PassError(f"'{op.name}': region must end with latch.yield", op.location)
    return block, ops[:-1], ops[-1]


def _move_into(ops, dest_block, terminator_name, terminator_operands):
    """Create the terminator in ``dest_block`` and move ``ops`` (in order) before it."""
    I = ir()
    with I.InsertionPoint(dest_block):
        term = create(terminator_name, terminator_operands)
    for o in ops:
        o.operation.move_before(term)
    return term


def _index(n):
    I = ir()
    t = I.IndexType.get()
    return create("arith.constant", [], [t], {"value": I.IntegerAttr.get(t, n)}).result


def _every(op):
    I = ir()
    period = attr_int(op, "period")
    if period < 1:
        raise PassError("'latch.every': period must be >= 1", op.location)
    counter, passthrough = op.operands[0], list(op.operands[1:])
    block, body_ops, yld = _body(op)
    yields = list(yld.operands)
    if [v.type for v in yields] != [v.type for v in passthrough]:
        raise PassError("'latch.every': region must yield the passthrough types", op.location)
    i64 = I.IntegerType.get_signless(64)
    c = extract(counter)
    p = create("arith.constant", [], [i64], {"value": I.IntegerAttr.get(i64, period)}).result
    rem = create("arith.remsi", [c, p], [i64]).result
    zero = create("arith.constant", [], [i64], {"value": I.IntegerAttr.get(i64, 0)}).result
    cond = create("arith.cmpi", [rem, zero], [I.IntegerType.get_signless(1)],
                  {"predicate": I.IntegerAttr.get(i64, 0)}).result  # eq
    if_op = create("scf.if", [cond], [v.type for v in passthrough], regions=2)
    then_b = if_op.regions[0].blocks.append()
    else_b = if_op.regions[1].blocks.append()
    _move_into(body_ops, then_b, "scf.yield", yields)
    with I.InsertionPoint(else_b):
        create("scf.yield", passthrough)
    for r, n in zip(op.results, if_op.results):
        r.replace_all_uses_with(n)
    op.erase()


def _for(n_iters, inits):
    I = ir()
    lb, ub, st = _index(0), _index(n_iters), _index(1)
    for_op = create("scf.for", [lb, ub, st] + list(inits), [v.type for v in inits], regions=1)
    block = for_op.regions[0].blocks.append(I.IndexType.get(), *[v.type for v in inits])
    return for_op, block


def _loop(op):
    I = ir()
    times = attr_int(op, "times")
    if times < 1:
        raise PassError("'latch.loop': times must be >= 1", op.location)
    inits = list(op.operands)
    block, body_ops, yld = _body(op)
    if len(block.arguments) != len(inits) + 1:
        raise PassError("'latch.loop': body takes (iteration, carried values...)", op.location)
    for_op, new_block = _for(times, inits)
    iv = new_block.arguments[0]
    _move_into(body_ops, new_block, "scf.yield", list(yld.operands))
    with I.InsertionPoint.at_block_begin(new_block), op.location:
        i64 = I.IntegerType.get_signless(64)
        it = to_tensor(create("arith.index_cast", [iv], [i64]).result)
    block.arguments[0].replace_all_uses_with(it)
    for old, new in zip(list(block.arguments)[1:], list(new_block.arguments)[1:]):
        old.replace_all_uses_with(new)
    for r, n in zip(op.results, for_op.results):
        r.replace_all_uses_with(n)
    op.erase()


def _scan(op):
    I = ir()
    k = attr_int(op, "num_carries")
    length = attr_int(op, "length")
    operands = list(op.operands)
    if not 0 <= k <= len(operands) or length < 1:
        raise PassError("'latch.scan': needs 0 <= num_carries <= #operands and length >= 1",
                        op.location)
    carries, xs = operands[:k], operands[k:]
    ys_types = [r.type for r in list(op.results)[k:]]
    block, body_ops, yld = _body(op)
    yields = list(yld.operands)
    ys_inits = [empty(t) for t in ys_types]
    for_op, new_block = _for(length, carries + ys_inits)
    iv = new_block.arguments[0]
    new_args = list(new_block.arguments)[1:]
    new_carries, ys_acc = new_args[:k], new_args[k:]
    old_args = list(block.arguments)

    def strides(rank):
        return I.DenseI64ArrayAttr.get([1] * rank)

    # Slices of each x at the iteration, at the top of the new body.
    with I.InsertionPoint(new_block), op.location:
        slices = []
        for x, arg in zip(xs, old_args[k:]):
            xt = I.RankedTensorType(x.type)
            rank = xt.rank
            if not xt.has_static_shape or xt.shape[0] != length:
                raise PassError(f"'latch.scan': xs need a static leading dim {length}, got {xt}",
                                op.location)
            s = create("tensor.extract_slice", [x, iv], [arg.type], {
                "static_offsets": I.DenseI64ArrayAttr.get([_DYN] + [0] * (rank - 1)),
                "static_sizes": I.DenseI64ArrayAttr.get([1] + list(xt.shape[1:])),
                "static_strides": strides(rank),
                "operandSegmentSizes": I.DenseI32ArrayAttr.get([1, 1, 0, 0]),
            }).result
            slices.append(s)
    # Inserts of each y into its stack, then the terminator.
    ins_results = []
    with I.InsertionPoint(new_block), op.location:
        for y, acc, t in zip(yields[k:], ys_acc, ys_types):
            rt = I.RankedTensorType(t)
            rank = rt.rank
            r = create("tensor.insert_slice", [y, acc, iv], [t], {
                "static_offsets": I.DenseI64ArrayAttr.get([_DYN] + [0] * (rank - 1)),
                "static_sizes": I.DenseI64ArrayAttr.get([1] + list(rt.shape[1:])),
                "static_strides": strides(rank),
                "operandSegmentSizes": I.DenseI32ArrayAttr.get([1, 1, 1, 0, 0]),
            }).result
            ins_results.append(r)
        term = create("scf.yield", yields[:k] + ins_results)
    first_insert = ins_results[0].owner if ins_results else term
    for o in body_ops:
        o.operation.move_before(first_insert)
    for old, new in zip(old_args[:k], new_carries):
        old.replace_all_uses_with(new)
    for old, new in zip(old_args[k:], slices):
        old.replace_all_uses_with(new)
    for r, n in zip(op.results, for_op.results):
        r.replace_all_uses_with(n)
    op.erase()
