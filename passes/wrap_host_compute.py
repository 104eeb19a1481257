"""``latch-wrap-host-compute``: after bufferization, move every piece of host code that touches
buffers onto the device (stage 'buffers' → 'kernels').

After ``latch-bufferize`` a function body mixes two kinds of work: linalg ops with at least
one parallel dimension (which ``latch-form-kernels`` maps to blocks and threads) and *host
compute*: ``memref.load``/``memref.store``, scalar arithmetic fed by loads (the clip factor,
the learning rate from the step counter), ``scf.for``/``scf.if``/``scf.while`` over scalars,
``memref.copy`` and linalg ops with no parallel dimension (full reductions, 0-d fills and
updates).  On a GPU target none of that may run on the host: the buffers live in device
memory, and the whole update must be one launch schedule that a CUDA graph can replay.

The pass rewrites each function body so that after ``latch-form-kernels`` the host function
holds only constants, ``memref.alloc``/``dealloc``, views and casts, ``gpu.launch_func`` and
the return:

* ``memref.copy`` of rank ≥ 1 becomes ``linalg.copy`` (a parallel op, so it becomes an
  ordinary elementwise kernel); of rank 0 a ``memref.load`` + ``memref.store``.
* A full sum reduction (a linalg.generic whose loops are all reductions into a 0-d f32/f64
  buffer, with body ``acc + e``) becomes one ``gpu.launch`` of ``reduce-threads`` threads
  (default 256; 0 turns this off): each thread sums a strided slice of the iteration space
  in a register, ``gpu.all_reduce add`` combines the partial sums (shuffles + shared memory
  after NVVM lowering) and thread 0 adds the total to the output.  Other reductions without
  a parallel dimension take the serial path below.
* Maximal runs of consecutive host-compute ops are wrapped, in order, into a one-iteration
  ``scf.parallel (%i) = (0) to (1) step (1)``; ``latch-form-kernels`` turns each into a
  kernel with one working thread (a "serial kernel").  Allocations, constants and
  side-effect-free scalar ops on constants that sit between the wrapped ops are hoisted in
  front of the loop (they stay on the host; allocations have no operands, so this keeps
  their meaning, and the memory plan's offsets stay valid: liveness is defined by uses);
  a ``memref.dealloc`` is never moved: it ends the run.

Rejected with a located error (the launch schedule cannot express them yet):
* host control flow (``scf.for``/``scf.if``/``scf.while``) whose body contains parallel work
  (a linalg op with a parallel dimension or an ``scf.parallel``): a host loop of kernels;
* a value computed inside a wrapped run that is used outside it (other than through memory);
* ``func.call`` (functions are not inlined into the update program on the GPU target).

Options: ``reduce-threads`` (int, default 256).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-bufferize,
latch-wrap-host-compute, latch-form-kernels)'``
"""
from __future__ import annotations

import dataclasses

from latch.errors import PassError
from latch.passes.base import ModulePass

# ops that stay on the host as they are
_HOST_OK = {"arith.constant", "memref.alloc", "memref.alloca", "memref.dealloc",
            "memref.get_global", "memref.subview", "memref.cast", "memref.collapse_shape",
            "memref.expand_shape", "memref.reinterpret_cast", "memref.view", "memref.reshape",
            "memref.transpose", "memref.extract_strided_metadata", "func.return",
            "gpu.launch_func", "gpu.wait", "index.constant", "ub.poison"}
_PURE_DIALECTS = ("arith.", "math.", "index.")
_CONTROL = {"scf.for", "scf.if", "scf.while", "scf.execute_region", "affine.for", "affine.if"}


def _op(o):
    return o.operation if hasattr(o, "operation") else o


def _has_parallel_dim(op) -> bool:
    """A linalg op with at least one parallel loop (form-kernels maps it to threads)."""
    from mlir import ir

    if "iterator_types" in op.attributes:
        its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        return any("parallel" in s for s in its)
    # a named op (not generalized): parallel iff some output has rank >= 1
    for v in op.operands:
        if isinstance(v.type, ir.MemRefType) and ir.MemRefType(v.type).rank >= 1:
            return True
    return False


def _is_parallel_op(op) -> bool:
    if op.name in ("scf.parallel", "gpu.launch"):
        return True
    if op.name.startswith("linalg.") and op.name not in ("linalg.yield", "linalg.index"):
        return _has_parallel_dim(op)
    return False


def _contains_parallel(op) -> object | None:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = _op(inner)
                if _is_parallel_op(inner):
                    return inner
                found = _contains_parallel(inner)
                if found is not None:
                    return found
    return None


def _functions(module):
    for op in module.regions[0].blocks[0].operations:
        op = _op(op)
        if op.name == "func.func" and op.regions and op.regions[0].blocks:
            yield op


@dataclasses.dataclass(frozen=True)
class WrapHostCompute(ModulePass):
    name = "latch-wrap-host-compute"
    summary = ("move host code that touches buffers (loads/stores, scalar math, serial loops, "
               "full reductions, copies) into one-iteration scf.parallel loops, i.e. kernels")

    reduce_threads: int = 256

    def apply(self, module) -> None:
        for func_op in _functions(module):
            body = func_op.regions[0].blocks[0]
            _rewrite_copies(body)
            if self.reduce_threads > 0:
                _parallel_full_reductions(body, self.reduce_threads)
            _wrap(body)


def _rewrite_copies(body) -> None:
    from mlir import ir
    from mlir.dialects import linalg, memref

    for op in list(body.operations):
        op = _op(op)
        if op.name != "memref.copy":
            continue
        src, dst = op.operands[0], op.operands[1]
        st, dt = ir.MemRefType(src.type), ir.MemRefType(dst.type)
        with ir.InsertionPoint(op), op.location:
            if st.rank == 0:
                v = memref.load(src, [])
                memref.store(v, dst, [])
            else:
                if not (st.has_static_shape and dt.has_static_shape):
                    raise PassError("latch-wrap-host-compute: memref.copy with dynamic shape "
                                    "cannot be scheduled on the GPU", op.location)
                linalg.copy(src, outs=[dst])
        op.erase()


def _classify(op, compute_values) -> str:
    """'host', 'parallel' or 'compute'."""
    name = op.name
    if name in _HOST_OK:
        return "host"
    if _is_parallel_op(op):
        return "parallel"
    if name == "func.call" or name == "func.call_indirect":
        raise PassError(f"latch-wrap-host-compute: '{name}' in an update function cannot be "
                        "scheduled on the GPU (inline it first)", op.location)
    if name in _CONTROL or op.regions:
        inner = _contains_parallel(op)
        if inner is not None:
            raise PassError(
                f"latch-wrap-host-compute: host control flow '{name}' contains parallel work "
                f"('{inner.name}'); a host loop or branch around kernels cannot be expressed "
                "in the launch schedule yet", op.location)
        return "compute"
    if name.startswith(_PURE_DIALECTS) and not _touches_memory(op):
        # pure scalar op: stays on the host only if it does not depend on device values
        if any(_defined_by(v) in compute_values for v in op.operands):
            return "compute"
        return "host"
    return "compute"


def _touches_memory(op) -> bool:
    from mlir import ir

    return any(isinstance(v.type, ir.MemRefType) for v in list(op.operands) + list(op.results))


def _defined_by(value):
    owner = value.owner
    return _op(owner) if not hasattr(owner, "arguments") else None


def _wrap(body) -> None:
    ops = [_op(o) for o in body.operations]
    groups: list[tuple[list, list]] = []   # (compute ops, host ops to hoist before them)
    compute_ops: set = set()
    current: list | None = None
    hoist: list = []
    pending: list = []   # host ops after the last compute op of the current run
    for op in ops:
        kind = _classify(op, compute_ops)
        if kind == "compute":
            if current is None:
                current, hoist = [], []
            if any(p.name == "memref.dealloc" for p in pending):
                # never free a buffer earlier: a dealloc ends the run instead
                groups.append((current, hoist))
                current, hoist = [], []
            else:
                hoist.extend(pending)   # host ops between two compute ops move in front
            pending = []
            current.append(op)
            compute_ops.add(op)
        elif kind == "host" and current is not None and op.name != "func.return":
            if any(_defined_by(v) in compute_ops for v in op.operands):
                raise PassError(f"latch-wrap-host-compute: '{op.name}' uses a value computed "
                                "on the device", op.location)
            pending.append(op)
        else:   # parallel op or return: the run ends
            if current:
                groups.append((current, hoist))
            current, hoist, pending = None, [], []
    if current:
        groups.append((current, hoist))
    for group, hoisted in groups:
        _wrap_group(group, hoisted)


def _wrap_group(group, hoisted) -> None:
    from mlir import ir

    first = group[0]
    for h in hoisted:
        h.move_before(first)
    members = set(group)
    for op in group:
        for r in op.results:
            for use in r.uses:
                user = _op(use.owner)
                top = user
                while top is not None and top not in members and _op(top.parent) is not None \
                        and _op(top.parent).name != "func.func":
                    top = _op(top.parent)
                if top not in members:
                    raise PassError(
                        f"latch-wrap-host-compute: a value computed on the device by "
                        f"'{op.name}' is used on the host by '{user.name}'; pass it through "
                        "a 0-d buffer instead", user.location)
    index = ir.IndexType.get()
    with ir.InsertionPoint(first), first.location:
        c0 = ir.Operation.create("arith.constant", [index],
                                 attributes={"value": ir.IntegerAttr.get(index, 0)}).result
        c1 = ir.Operation.create("arith.constant", [index],
                                 attributes={"value": ir.IntegerAttr.get(index, 1)}).result
        par = ir.Operation.create(
            "scf.parallel", [], operands=[c0, c1, c1],
            attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, 1, 0]),
                        "latch.serial": ir.UnitAttr.get()},
            regions=1)
        block = par.regions[0].blocks.append(index)
    with ir.InsertionPoint(block), first.location:
        term = ir.Operation.create("scf.reduce", [], operands=[], regions=0)
    for op in group:
        op.move_before(term)


# -- full reductions: one block, strided partial sums, gpu.all_reduce ---------------------------

def _sum_reduction(op):
    """(block, acc arg, the addf, the summand) if ``op`` is a linalg.generic whose loops are
    all reductions into one 0-d f32/f64 output with body ``acc + e`` (e independent of acc),
    over static shapes; else None."""
    from mlir import ir

    if op.name != "linalg.generic" or len(op.regions) != 1:
        return None
    its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if not its or any("reduction" not in t for t in its):
        return None
    outs = [v for v in op.operands][-1:]
    n_out = 1
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])) \
        if "operandSegmentSizes" in op.attributes else None
    if seg is None or seg[1] != n_out:
        return None
    out_t = outs[0].type
    if not isinstance(out_t, ir.MemRefType) or ir.MemRefType(out_t).rank != 0:
        return None
    if str(ir.MemRefType(out_t).element_type) not in ("f32", "f64"):
        return None
    for v in op.operands:
        if not isinstance(v.type, ir.MemRefType) or not ir.MemRefType(v.type).has_static_shape:
            return None
    block = op.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    if any(o.regions for o in body):
        return None
    acc = block.arguments[len(block.arguments) - 1]
    yld = body[-1]
    if yld.name != "linalg.yield" or len(yld.operands) != 1:
        return None
    add = yld.operands[0].owner
    if hasattr(add, "arguments") or _op(add).name != "arith.addf":
        return None
    add = _op(add)
    a, b = add.operands[0], add.operands[1]
    if a == acc and b != acc:
        summand = b
    elif b == acc and a != acc:
        summand = a
    else:
        return None
    if sum(1 for _ in acc.uses) != 1:
        return None
    return block, acc, add, summand


def _loop_ranges(op, n_loops):
    from mlir import ir

    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    ranges = [None] * n_loops
    for v, m in zip(op.operands, maps):
        shape = ir.MemRefType(v.type).shape
        for k, expr in enumerate(m.results):
            if isinstance(expr, ir.AffineDimExpr):
                ranges[ir.AffineDimExpr(expr).position] = shape[k]
    return maps, ranges


def _parallel_full_reductions(body, threads: int) -> None:
    from mlir import ir

    for op in list(body.operations):
        op = _op(op)
        found = _sum_reduction(op)
        if found is None:
            continue
        n_loops = len(ir.ArrayAttr(op.attributes["iterator_types"]))
        maps, ranges = _loop_ranges(op, n_loops)
        if any(r is None for r in ranges):
            continue
        _emit_block_reduction(op, found, maps, ranges, threads)
        op.erase()


def _emit_block_reduction(op, found, maps, ranges, threads: int) -> None:
    """Replace a sum reduction by one gpu.launch of ``threads`` threads: each thread sums a
    strided slice of the iteration space in a register, then ``gpu.all_reduce add`` combines
    the partial sums and thread 0 adds the total to the output."""
    from mlir import ir
    from mlir.dialects import gpu, scf

    block, acc, add, summand = found
    index = ir.IndexType.get()
    out = op.operands[len(op.operands) - 1]
    ins = list(op.operands)[:len(op.operands) - 1]
    ftype = ir.MemRefType(out.type).element_type
    total_iters = 1
    for r in ranges:
        total_iters *= r

    def cidx(v):
        return ir.Operation.create("arith.constant", [index],
                                   attributes={"value": ir.IntegerAttr.get(index, v)}).result

    with ir.InsertionPoint(op), op.location:
        c1 = cidx(1)
        nthreads = cidx(threads)
        launch = gpu.LaunchOp((c1, c1, c1), (nthreads, c1, c1))
        lb = launch.regions[0].blocks[0]
    with ir.InsertionPoint(lb), op.location:
        tx = lb.arguments[3]
        zero = ir.Operation.create("arith.constant", [ftype],
                                   attributes={"value": ir.FloatAttr.get(ftype, 0.0)}).result
        ub = cidx(total_iters)
        step = cidx(threads)
        loop = scf.ForOp(tx, ub, step, [zero])
        with ir.InsertionPoint(loop.body):
            linear = loop.induction_variable
            partial = loop.inner_iter_args[0]
            # delinearize the linear index over the loop ranges (row-major)
            dims = [None] * len(ranges)
            rest = linear
            for d in range(len(ranges) - 1, -1, -1):
                if d == 0:
                    dims[d] = rest
                    break
                r = cidx(ranges[d])
                dims[d] = ir.Operation.create("arith.remui", [index], [rest, r]).result
                rest = ir.Operation.create("arith.divui", [index], [rest, r]).result
            mapping = {}
            for j, (v, m) in enumerate(zip(ins, maps)):
                idx = []
                for expr in m.results:
                    if isinstance(expr, ir.AffineDimExpr):
                        idx.append(dims[ir.AffineDimExpr(expr).position])
                    else:
                        amap = ir.AffineMap.get(len(ranges), 0, [expr])
                        idx.append(ir.Operation.create(
                            "affine.apply", [index], dims,
                            attributes={"map": ir.AffineMapAttr.get(amap)}).result)
                elt = ir.MemRefType(v.type).element_type
                mapping[block.arguments[j]] = ir.Operation.create(
                    "memref.load", [elt], [v] + idx).result
            mapping[acc] = partial
            for body_op in list(block.operations)[:-1]:
                body_op = _op(body_op)
                new = body_op.clone()
                for i, operand in enumerate(list(new.operands)):
                    if operand in mapping:
                        new.operands[i] = mapping[operand]
                for old_r, new_r in zip(body_op.results, new.results):
                    mapping[old_r] = new_r
            scf.YieldOp([mapping[add.results[0]]])
        total = ir.Operation.create(
            "gpu.all_reduce", [ftype], [loop.results[0]],
            attributes={"op": ir.Attribute.parse("#gpu<all_reduce_op add>"),
                        "uniform": ir.UnitAttr.get()}, regions=1).result
        c0 = cidx(0)
        is0 = ir.Operation.create(
            "arith.cmpi", [ir.IntegerType.get_signless(1)], [tx, c0],
            attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)}
        ).result
        if_op = scf.IfOp(is0)
        with ir.InsertionPoint(if_op.then_block):
            old = ir.Operation.create("memref.load", [ftype], [out]).result
            new_v = ir.Operation.create("arith.addf", [ftype], [old, total]).result
            ir.Operation.create("memref.store", [], [new_v, out])
            scf.YieldOp([])
        ir.Operation.create("gpu.terminator", [])
