"""``latch-fold-zero-fills``: a zero fill whose only reader is the next op, a reduction
that starts each output element from it, folds into that reduction (stage 'kernels', after
``latch-register-accumulators``).

A ``linalg.generic`` reduction adds its terms to what its output holds; PyTorch's sums
start from zeros, so bufferization leaves a fill of zeros (or, after
latch-forward-zero-fills, a fill in place of a copy of zeros) right before the reduction.
latch-form-contraction-kernels folds such fills into the products it forms; a reduction it
leaves to loops (an integer one, or a short one) keeps the fill as a launch of its own:
TinyMoE's routing rank, a blocked triangular ``cumsum`` of ``i64`` one-hot counts
(``latch.frontend.decompositions``), filled ``[64, 64, 8]`` zeros in a launch on the update's
critical path in every layer (about 5 us each at B2).

After ``convert-linalg-to-parallel-loops`` and latch-register-accumulators the pair is

    scf.parallel (ivs) = (0...) to (shape) step (1...) { memref.store %zero, %buf[ivs] }
    scf.parallel (ivs) = (0...) to (shape) step (1...) {
      %init = memref.load %buf[ivs]            // reads the zero this element was filled with
      %acc = scf.for ... iter_args(%a = %init) { ... }
      memref.store %acc, %buf[ivs]             // every element written again
    }

and the rewrite makes ``%init`` the fill's constant and erases the fill.  Applied when

* the fill is an ``scf.parallel`` whose induction variables index the buffer (each one
  dimension, in any order) from 0 to its static size in steps of one,
  whose body only stores one constant 0 (integer, or float of either sign) there; the
  buffer covers its whole allocation (identity layout, as many elements);
* the next op of the block that uses the allocation (directly, through views, or nested)
  is a parallel loop whose body holds exactly one load of it and one store into it, through
  the same whole view of it (the fill's or another: a reshape), both at the same indices,
  which visit every element once; the load first and the store unconditional (directly in
  the body);
* nothing else in the reduction's body uses the allocation.

Every element then holds what the reduction stores, as before; the element each thread
loads was zero, and is that constant now.  The same bits, one launch and one pass over the
buffer fewer.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, latch-fold-zero-fills)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, defining_op, function_definitions, operation as _op
from latch.passes.buffer_views import covers, held_users, root, users, whole_view
from latch.passes.form_contraction_kernels import is_zero_attribute


@dataclasses.dataclass(frozen=True)
class FoldZeroFills(ModulePass):
    name = "latch-fold-zero-fills"
    summary = ("a zero fill read only as the next reduction's initial values becomes that "
               "reduction's constant initial value")

    def apply(self, module) -> None:
        from mlir import ir

        for f in function_definitions(module):
            for fill in [_op(o) for o in f.regions[0].blocks[0].operations]:
                zero = _zero_fill(fill)
                if zero is None:
                    continue
                buf = fill.regions[0].blocks[0].operations[0].operands[1]
                reduction = _next_user(fill, buf)
                load = _initial_load(reduction, buf) if reduction is not None else None
                if load is None:
                    continue
                with ir.InsertionPoint(load), load.location:
                    value = ir.Operation.create("arith.constant", [load.results[0].type],
                                                attributes={"value": zero}).result
                load.results[0].replace_all_uses_with(value)
                load.erase()
                fill.erase()


def _zero_fill(op):
    """The constant attribute an ``scf.parallel`` stores at every element of a whole
    allocation (nothing else in its body), when it is a zero; else None."""
    from mlir import ir

    if op.name != "scf.parallel" or len(op.results) != 0:
        return None
    body = op.regions[0].blocks[0]
    ops = [_op(o) for o in body.operations]
    if len(ops) != 2 or ops[0].name != "memref.store" or ops[1].name != "scf.reduce":
        return None
    store = ops[0]
    value, buf, where = store.operands[0], store.operands[1], list(store.operands[2:])
    const = defining_op(value)
    if const is None or const.name != "arith.constant" or \
            not is_zero_attribute(const.attributes["value"]):
        return None
    if not whole_view(buf) or not covers(op, where, ir.MemRefType(buf.type).shape):
        return None
    return const.attributes["value"]


def _next_user(op, buf):
    """The first op after ``op`` in its block that uses (or holds a use of) ``buf``'s
    allocation; None if there is none."""
    later = [h for u, h in held_users(root(buf), op) if op.is_before_in_block(h)]
    first = None
    for h in later:
        if first is None or h.is_before_in_block(first):
            first = h
    return first


def _initial_load(loop, buf):
    """The load of ``loop`` (an ``scf.parallel``) that reads each element of a whole view of
    ``buf``'s allocation once, before the loop's one unconditional store writes it there
    through the same view, when these two are the loop's only uses of the allocation; else
    None."""
    from mlir import ir

    if loop.name != "scf.parallel" or len(loop.results) != 0:
        return None
    mine = [u for u in users(root(buf)) if _inside(u, loop)]
    if len(mine) != 2:
        return None
    load = next((u for u in mine if u.name == "memref.load"), None)
    store = next((u for u in mine if u.name == "memref.store"), None)
    where = list(load.operands[1:]) if load is not None else []
    if load is None or store is None or not whole_view(load.operands[0]) or \
            store.operands[1] != load.operands[0] or list(store.operands[2:]) != where or \
            not covers(loop, where, ir.MemRefType(load.operands[0].type).shape) or \
            _op(load.parent) != loop or _op(store.parent) != loop or \
            not load.is_before_in_block(store):
        return None
    return load


def _inside(op, loop) -> bool:
    """Whether ``op`` is nested (at any depth) in ``loop``."""
    p = op.parent
    while p is not None:
        if _op(p) == loop:
            return True
        p = _op(p).parent
    return False
