"""``latch-carry-casts``: a parameter that the update reads only rounded (bf16 matmul
inputs under autocast) gets its rounded copy as state of its own, written by the optimizer
kernel that writes the parameter (stage 'buffers', on tensors, first pass of
``latch-bufferize``).

Under ``precision="bf16"`` every weight is an fp32 master copy that the forward rounds to
bf16 before its product.  Each update therefore starts with a cast per weight: at TinyMoE
that is 64 launches reading 0.78 GB and writing 0.39 GB (≈ 0.85 ms of kernel time at B32
on an H100, ≈ 0.6 ms at B2), although the optimizer of the previous update had every new
weight in registers.  Carried, the optimizer kernel stores the rounded value too (2 bytes
an element more in a kernel that moves ≈ 28), and the next update reads it: the same bits
as the cast (``arith.truncf`` rounds to nearest even, as ``torch.Tensor.to`` does for the
first update's copy), no cast launches.

Rewritten, in each function with ``latch.abi`` (the update; every update variant alike):
for a floating-point ``param`` state ``w`` whose every rounding in the function is a
*cast* — an all-parallel ``linalg.generic`` with one input and one output, both through
identity maps, whose body is one ``arith.truncf`` (default rounding) to a narrower type T
— of ``w`` itself or of a ``linalg.transpose`` of ``w``, and whose new value is ``w``
unchanged or a result of an all-parallel ``linalg.generic`` (the optimizer's) written
through an identity map:

- a state ``{kind = "copy", name = "<w>.<T>", of = "<w>"}`` of ``w``'s shape in T is added
  after the other states (a function argument before the inputs, a result before the
  outputs);
- each cast of ``w`` becomes that argument (a cast of ``transpose(w)`` the same transpose
  of it, which the products fold into their operand maps);
- the generic that computes ``w``'s new value gets one more output, the ``truncf`` of it;
  that result is the copy's new value (an unchanged ``w`` returns the copy's argument).

Casts to two different types, or a parameter read in fp32 besides, are fine: only the
casts to the first type T seen are carried (the fp32 reads stay). Every variant of an
``every(N)`` program must carry the same parameters (the state layout is shared): a
parameter is carried only where every function with ``latch.abi`` can carry it.

The runtime (``latch.runtime``) keeps copies out of the training state that users see —
``state_dict()``, checkpoints, ``load_state`` — and recomputes a copy whenever its
parameter is loaded.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-carry-casts)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, defining_op, function_definitions, operation as _op
from latch.passes.generic_body import all_parallel, indexing_maps, segments

_NARROW = ("bf16", "f16")          # the types a carried copy may have


def _identity(m) -> bool:
    from mlir import ir

    return m == ir.AffineMap.get_identity(m.n_dims)


def _cast_type(op):
    """The narrower float type an elementwise cast generic rounds its one input to, or None
    when ``op`` is not such a cast."""
    if op.name != "linalg.generic" or len(op.results) != 1 or segments(op) != (1, 1) or \
            not all_parallel(op) or not all(_identity(m) for m in indexing_maps(op)):
        return None
    body = [_op(o) for o in op.regions[0].blocks[0].operations]
    if len(body) != 2 or body[0].name != "arith.truncf" or body[1].name != "linalg.yield":
        return None
    t = body[0]
    if "roundingmode" in t.attributes or t.operands[0] != op.regions[0].blocks[0].arguments[0] \
            or body[1].operands[0] != t.results[0]:
        return None
    elt = t.results[0].type
    return elt if str(elt) in _NARROW else None


@dataclasses.dataclass
class _Plan:
    """What carrying one parameter changes in one function."""
    index: int                 # the state's argument (and result) position
    element: object            # the copy's element type
    casts: list                # (cast op, permutation or None)
    producer: object           # the generic computing the new value (None: unchanged)


def _plan(index: int, arg, new_value):
    """A _Plan for carrying the parameter ``arg`` (state ``index``), or None."""
    from mlir import ir

    if not isinstance(arg.type, ir.RankedTensorType) or \
            str(ir.RankedTensorType(arg.type).element_type) != "f32":
        return None
    casts, element = [], None
    for use in arg.uses:
        reader = _op(use.owner)
        readers = [(reader, None)]
        if reader.name == "linalg.transpose":
            perm = list(ir.DenseI64ArrayAttr(reader.attributes["permutation"]))
            readers = [(_op(u.owner), perm) for u in reader.results[0].uses]
        for op, perm in readers:
            t = _cast_type(op)
            if t is None:
                continue
            if element is None:
                element = t
            if t == element:
                casts.append((op, perm))
    if not casts:
        return None
    if new_value == arg:
        return _Plan(index, element, casts, None)
    producer = defining_op(new_value)
    if producer is None or producer.name != "linalg.generic" or not all_parallel(producer):
        return None
    result = list(producer.results).index(new_value)
    n_in, _ = segments(producer)
    if not _identity(indexing_maps(producer)[n_in + result]):
        return None
    return _Plan(index, element, casts, producer)


def _abi_states(func) -> list:
    from mlir import ir

    abi = ir.DictAttr(func.attributes["latch.abi"])
    return [ir.DictAttr(s) for s in ir.ArrayAttr(abi["states"])]


def _plans(func) -> dict:
    """{state index: _Plan} for the parameters ``func`` could carry."""
    from mlir import ir

    states = _abi_states(func)
    block = func.regions[0].blocks[0]
    ret = _op(list(block.operations)[-1])
    plans = {}
    for i, s in enumerate(states):
        if ir.StringAttr(s["kind"]).value != "param":
            continue
        p = _plan(i, block.arguments[i], ret.operands[i])
        if p is not None:
            plans[i] = p
    return plans


def _empty_like(value, element):
    from mlir import ir

    t = ir.RankedTensorType(value.type)
    return ir.Operation.create(
        "tensor.empty", [ir.RankedTensorType.get(t.shape, element)], []).results[0]


def _with_rounded_result(producer, result: int, element):
    """Rebuild ``producer`` with one more output: the ``truncf`` to ``element`` of its
    result ``result``. Returns that new result; the old results' uses move over."""
    from mlir import ir

    n_in, n_out = segments(producer)
    maps = indexing_maps(producer)
    with ir.InsertionPoint(producer), producer.location:
        init = _empty_like(producer.results[result], element)
        operands = list(producer.operands) + [init]
        attrs = {name: producer.attributes[name] for name in producer.attributes}
        attrs["indexing_maps"] = ir.ArrayAttr.get(
            [ir.AffineMapAttr.get(m) for m in maps + [maps[n_in + result]]])
        attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([n_in, n_out + 1])
        new = ir.Operation.create(
            "linalg.generic", [r.type for r in producer.results] + [init.type], operands,
            attributes=attrs, regions=1)
        old = producer.regions[0].blocks[0]
        block = new.regions[0].blocks.append(*[a.type for a in old.arguments], element)
        for a, b in zip(old.arguments, block.arguments):
            a.replace_all_uses_with(b)
        body = [_op(o) for o in old.operations]
        for op in body[:-1]:                # moved: the loops are the same
            block.append(op)
        yielded = list(body[-1].operands)
        with ir.InsertionPoint(block):
            rounded = ir.Operation.create("arith.truncf", [element], [yielded[result]])
            ir.Operation.create("linalg.yield", [], yielded + [rounded.results[0]])
    for a, b in zip(producer.results, new.results):
        a.replace_all_uses_with(b)
    producer.erase()
    return new.results[n_out]


def _transposed(value, perm, like):
    """``linalg.transpose`` of ``value`` by ``perm`` into a new tensor of ``like``'s type."""
    from mlir import ir

    init = ir.Operation.create("tensor.empty", [like.type], []).results[0]
    op = ir.Operation.create("linalg.transpose", [like.type], [value, init],
                             attributes={"permutation": ir.DenseI64ArrayAttr.get(perm)},
                             regions=1)
    elt = ir.RankedTensorType(like.type).element_type
    block = op.regions[0].blocks.append(elt, elt)
    with ir.InsertionPoint(block):
        ir.Operation.create("linalg.yield", [], [block.arguments[0]])
    return op.results[0]


def _carry(func, plans: list) -> None:
    """Apply ``plans`` (sorted by state index) to ``func``: copy arguments after the states,
    copy results after the state results, the abi's state list extended."""
    from mlir import ir

    states = _abi_states(func)
    S = len(states)
    abi = ir.DictAttr(func.attributes["latch.abi"])
    block = func.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    n_args = len(ftype.inputs)
    if "arg_attrs" in func.attributes or "res_attrs" in func.attributes:
        return                                   # (the update functions carry none)
    loc = func.location
    copy_types = [ir.RankedTensorType.get(ir.RankedTensorType(block.arguments[p.index].type)
                                          .shape, p.element) for p in plans]
    copies = [block.add_argument(t, loc) for t in copy_types]
    # the inputs move behind the copies: new arguments for them, the old ones erased
    for i in range(S, n_args):
        old = block.arguments[i]
        old.replace_all_uses_with(block.add_argument(old.type, old.location))
    for i in reversed(range(S, n_args)):
        block.erase_argument(i)

    ret = _op(list(block.operations)[-1])
    new_copies = []
    for p, arg in zip(plans, copies):
        for cast, perm in p.casts:
            with ir.InsertionPoint(cast), cast.location:
                v = arg if perm is None else _transposed(arg, perm, cast.results[0])
            cast.results[0].replace_all_uses_with(v)
            cast.erase()
        if p.producer is None:
            new_copies.append(arg)
            continue
        # the producer as it is now: an earlier plan may have rebuilt it (one generic
        # updating several parameters)
        value = ret.operands[p.index]
        producer = defining_op(value)
        new_copies.append(_with_rounded_result(producer, list(producer.results).index(value),
                                               p.element))
    returned = list(ret.operands)
    for p in plans:                               # transposes left without readers
        t = block.arguments[p.index]
        for use in list(t.uses):
            op = _op(use.owner)
            if op.name == "linalg.transpose" and not any(True for _ in op.results[0].uses):
                op.erase()
    results = returned[:S] + new_copies + returned[S:]
    with ir.InsertionPoint(ret), ret.location:
        ir.Operation.create("func.return", [], results)
    ret.erase()

    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in results]))
    added = []
    for p, t in zip(plans, copy_types):
        source = ir.StringAttr(states[p.index]["name"]).value
        added.append(ir.DictAttr.get({
            "kind": ir.StringAttr.get("copy"),
            "name": ir.StringAttr.get(f"{source}.{p.element}"),
            "of": ir.StringAttr.get(source),
            "type": ir.TypeAttr.get(t)}))
    entries = {n.name: n.attr for n in abi}
    entries["states"] = ir.ArrayAttr.get(list(states) + added)
    func.attributes["latch.abi"] = ir.DictAttr.get(entries)


@dataclasses.dataclass(frozen=True)
class CarryCasts(ModulePass):
    name = "latch-carry-casts"
    summary = ("a parameter read only rounded (bf16 matmul inputs) keeps its rounded copy "
               "as state, written by the optimizer kernel that writes the parameter")

    def apply(self, module) -> None:
        funcs = [f for f in function_definitions(module) if "latch.abi" in f.attributes
                 and len(f.regions[0].blocks) == 1]
        if not funcs:
            return
        plans = [_plans(f) for f in funcs]
        carried = set(plans[0])
        for p in plans[1:]:
            carried &= set(p)
        for f in funcs[1:]:
            if [str(s) for s in _abi_states(f)] != [str(s) for s in _abi_states(funcs[0])]:
                return                           # variants that differ: leave them alone
        if not carried:
            return
        elements = {i: str(plans[0][i].element) for i in carried}
        if any({i: str(p[i].element) for i in carried} != elements for p in plans[1:]):
            return
        for f, p in zip(funcs, plans):
            _carry(f, [p[i] for i in sorted(carried)])
