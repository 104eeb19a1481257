"""``latch-nonfinite-checks``: the kernels that store a new floating-point state value also
check it for NaN/inf, clearing a flag the runtime's non-finite guard reads (stage 'kernels':
``phase=mark`` before ``convert-linalg-to-parallel-loops``, ``phase=check`` after
``convert-parallel-loops-to-gpu``, before outlining).

The cuda runtime commits a step only when its loss and every new floating-point state value
are finite (latch/runtime/guard.py).  Checked after the update, that is a kernel reading the
whole new state once more (TinyMoE: 2.35 GB, ≈ 0.55 ms on the H200), at the end of the
critical path.  The values are in registers when the optimizer's kernels store them, so the
check costs a subtraction and a compare there: ``x - x`` is NaN exactly when ``x`` is NaN or
±inf, and a thread that stores such a value stores 0 into a 4-byte flag (every writer stores
the same value, so the races are benign and the outcome deterministic).

*Mark* (on linalg): a new state value (one of the first ``#states`` results of a function
with ``latch.abi``) of a floating-point type, allocated in the function, whose last writer
among the function's ops is a ``linalg.generic`` with only parallel loops that has the
allocation itself as an output indexed by a permutation of the loops (and reads it, if at
all, at the same element: an in-place update) writes every element of it last: the
allocation is marked ``latch.finite_covered``.  (The buffer may hold other values earlier
in the step, a gradient or a masked -inf, say: those are no concern of the guard.)  Any
other last writer (atomics, copies, a contraction kernel, a partial write) leaves the value
to the runtime's check kernel.

*Check* (on ``gpu.launch``): for each marked allocation, the last launch that stores into
it (``memref.store`` / ``vector.store``, through views) is that generic; each of its stores
is followed by the check, and the allocation is marked ``latch.finite_checked``.  The flag
is one ``memref.alloc() : memref<i32>`` marked ``latch.nonfinite_flag``, created at the top
of the function; the launch schedule reports its location (``nonfinite_flag``) and the
checked copies (``checked_in_kernels``), and leaves the flag out of the launches'
dependencies (its writes commute), so the runtime sets the flag to 1 before the launches
and reads it after them.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-nonfinite-checks)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.buffer_views import may_write, root, users

FLAG_ATTR = "latch.nonfinite_flag"
COVERED_ATTR = "latch.finite_covered"
CHECKED_ATTR = "latch.finite_checked"
_FLOATS = ("f16", "bf16", "f32", "f64")


@dataclasses.dataclass(frozen=True)
class NonfiniteChecks(ModulePass):
    name = "latch-nonfinite-checks"
    summary = ("the kernels that store a new floating-point state value clear a flag when "
               "it is NaN or inf (the runtime's guard then reads the flag, not the state)")
    phase: str = "check"

    def apply(self, module) -> None:
        from latch.errors import PassError

        if self.phase not in ("mark", "check"):
            raise PassError(f"latch-nonfinite-checks: phase={self.phase!r}; expected 'mark' "
                            "or 'check'")
        for func_op in function_definitions(module):
            if "latch.abi" in func_op.attributes:
                (_mark if self.phase == "mark" else _check)(func_op)


def _new_states(func_op) -> list:
    """The allocations of ``func_op``'s floating-point new state values (each once)."""
    from mlir import ir

    block = func_op.regions[0].blocks[0]
    ret = _op(list(block.operations)[-1])
    if ret.name != "func.return":
        return []
    n = len(ir.ArrayAttr(ir.DictAttr(func_op.attributes["latch.abi"])["states"]))
    out = []
    for v in list(ret.operands)[:n]:
        if isinstance(v.owner, ir.Block):
            continue
        alloc = _op(v.owner)
        if alloc.name == "memref.alloc" and not any(alloc == a for a in out) and \
                str(ir.MemRefType(v.type).element_type) in _FLOATS:
            out.append(alloc)
    return out


def _mark(func_op) -> None:
    from mlir import ir

    ops = [_op(o) for o in func_op.regions[0].blocks[0].operations][:-1]   # not the return
    for alloc in _new_states(func_op):
        v = alloc.results[0]
        top = next((o for o in reversed(ops) if may_write(o, v)), None)    # the last writer
        if top is None or top.name != "linalg.generic":
            continue
        n_in = len(top.opview.inputs)
        outs = [i for i, o in enumerate(top.operands) if i >= n_in and o == v]
        if len(outs) != 1 or any(root(o) == v and o != v for o in top.operands):
            continue                                    # through a view: maybe a part
        number = outs[0]
        maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(top.attributes["indexing_maps"])]
        iters = [str(t) for t in ir.ArrayAttr(top.attributes["iterator_types"])]
        rank = len(ir.MemRefType(v.type).shape)
        # every loop parallel and the output indexed by a permutation of them: each element
        # is written; the buffer may also be read, at the same element (in place)
        same = [i for i, o in enumerate(top.operands) if o == v]
        if all("parallel" in t for t in iters) and len(iters) == rank and \
                maps[number].is_permutation and all(maps[i] == maps[number] for i in same):
            alloc.attributes[COVERED_ATTR] = ir.UnitAttr.get()


def _launch_of(op):
    """The ``gpu.launch`` ``op`` is nested in, or None."""
    p = op.operation.parent
    while p is not None:
        if p.name == "gpu.launch":
            return p
        if p.name == "func.func":
            return None
        p = p.parent
    return None


def _check(func_op) -> None:
    from mlir import ir
    from mlir.dialects import memref

    checked = []
    for alloc in _new_states(func_op):
        if COVERED_ATTR not in alloc.attributes:
            continue
        stores = [(u, _launch_of(u)) for u in users(alloc.results[0])
                  if u.name in ("memref.store", "vector.store") and
                  root(u.operands[1]) == alloc.results[0]]
        stores = [(u, la) for u, la in stores if la is not None]
        if not stores:
            continue
        last = stores[0][1]
        for _, la in stores[1:]:
            if last.is_before_in_block(la):
                last = la
        checked.append((alloc, [u for u, la in stores if la == last]))
    if not checked:
        return
    i32 = ir.IntegerType.get_signless(32)
    first = _op(list(func_op.regions[0].blocks[0].operations)[0])
    with ir.InsertionPoint(first), func_op.location:
        flag = memref.AllocOp(ir.MemRefType.get([], i32), [], []).operation
        flag.attributes[FLAG_ATTR] = ir.UnitAttr.get()
    for alloc, stores in checked:
        alloc.attributes[CHECKED_ATTR] = ir.UnitAttr.get()
        for store in stores:
            _check_after(store, flag.result)


def _check_after(store, flag) -> None:
    """After ``store``: if its value is NaN or inf, store 0 into ``flag``."""
    from mlir import ir
    from mlir.dialects import scf

    value = store.operands[0]
    f32 = ir.F32Type.get()
    i1 = ir.IntegerType.get_signless(1)
    with ir.InsertionPoint.after(store.operation), store.location:
        t = value.type
        vec = isinstance(t, ir.VectorType)
        elt = ir.VectorType(t).element_type if vec else t
        if str(elt) in ("f16", "bf16"):             # compare in f32
            wide = ir.VectorType.get(ir.VectorType(t).shape, f32) if vec else f32
            value = ir.Operation.create("arith.extf", [wide], [value]).result
        diff = ir.Operation.create("arith.subf", [value.type], [value, value]).result
        bad_t = ir.VectorType.get(ir.VectorType(value.type).shape, i1) if vec else i1
        bad = ir.Operation.create(
            "arith.cmpf", [bad_t], [diff, diff],
            attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                        14)}).result       # uno
        if vec:
            bad = ir.Operation.create("vector.reduction", [i1], [bad],
                                      attributes={"kind": ir.Attribute.parse(
                                          "#vector.kind<or>")}).result
        branch = scf.IfOp(bad)
        with ir.InsertionPoint(branch.then_block):
            zero = ir.Operation.create("arith.constant", [ir.IntegerType.get_signless(32)],
                                       attributes={"value": ir.IntegerAttr.get(
                                           ir.IntegerType.get_signless(32), 0)}).result
            ir.Operation.create("memref.store", [], [zero, flag])
            scf.YieldOp([])
