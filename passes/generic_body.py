"""Turning a ``linalg.generic`` into hand-built loops: its loop ranges, index arithmetic on a
linear iteration index, and its body cloned at given loop indices (shared by the passes that
do this: latch-wrap-host-compute's block and row reductions,
latch-form-contraction-kernels' operand loads, latch-map-parallel-loops' iterations per
thread and latch-recompute-elementwise's extracts), and the loop order every generic is
mapped to threads in (:func:`order_loops`)."""
from __future__ import annotations

from latch.passes.base import nested_operations


def segments(op) -> tuple[int, int]:
    """(inputs, outputs) of a ``linalg.generic``: its operand segment sizes."""
    from mlir import ir

    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    return seg[0], seg[1]


def indexing_maps(op) -> list:
    """The ``AffineMap`` of each operand of a ``linalg.generic``, in operand order."""
    from mlir import ir

    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def all_parallel(op) -> bool:
    """Whether every loop of the ``linalg.generic`` ``op`` is parallel."""
    from mlir import ir

    return all("parallel" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"]))


def plain_dims(m) -> list | None:
    """The loop numbers an indexing map's results are (None if any is not a plain dim)."""
    from mlir import ir

    dims = []
    for expr in m.results:
        if not isinstance(expr, ir.AffineDimExpr):
            return None
        dims.append(ir.AffineDimExpr(expr).position)
    return dims


def used_only_rounded_to_bf16(arg) -> bool:
    """Whether the body argument ``arg`` is used, and only by ``arith.truncf`` to bf16
    with the default rounding (a product that such readers read can be written rounded:
    latch-form-contraction-kernels' rounding readers)."""
    from mlir import ir

    from latch.passes.base import operation

    bf16 = ir.BF16Type.get()
    uses = [operation(u.owner) for u in arg.uses]
    return bool(uses) and all(
        t.name == "arith.truncf" and t.results[0].type == bf16 and
        not (len(t.attributes) and "roundingmode" in t.attributes) for t in uses)


def elementwise_output(op):
    """The one output of ``op`` when it is an all-parallel ``linalg.generic`` on buffers
    (no results) writing that output through a permutation of its loops (every element
    once); else None."""
    from mlir import ir

    if op.name != "linalg.generic" or op.results:
        return None
    n_in, n_out = segments(op)
    if n_out != 1 or any("parallel" not in str(t)
                         for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return None
    out_map = ir.AffineMapAttr(list(ir.ArrayAttr(op.attributes["indexing_maps"]))[-1]).value
    return op.operands[n_in] if out_map.is_permutation else None


def clone_body_ops(ops, mapping: dict, dims) -> None:
    """Clone ``ops`` (body ops of a generic, in order) at the current insertion point.

    ``mapping`` maps the body's values that are already available (block arguments: the
    loaded input elements; outside values) to their replacements and receives every cloned
    result; ``linalg.index d`` becomes ``dims[d]`` (the loop index values)."""
    from mlir import ir

    for op in ops:
        if op.name == "linalg.index":
            mapping[op.results[0]] = dims[ir.IntegerAttr(op.attributes["dim"]).value]
            continue
        new = op.clone()
        for i, operand in enumerate(list(new.operands)):
            if operand in mapping:
                new.operands[i] = mapping[operand]
        for old_r, new_r in zip(op.results, new.results):
            mapping[old_r] = new_r


def scalar_body(g, also: tuple = ()) -> list | None:
    """The body ops of the one-output generic ``g`` (its yield left out) when they compute
    the one yielded value from the input elements (and values defined outside) with
    ``arith`` and ``math`` ops, or ops named in ``also``, without nested regions and without
    reading the output element; else None."""
    from latch.passes.base import operation

    block = g.regions[0].blocks[0]
    body = [operation(o) for o in block.operations]
    if list(block.arguments[len(block.arguments) - 1].uses):
        return None
    for o in body[:-1]:
        if o.regions or (o.name.split(".")[0] not in ("arith", "math") and o.name not in also):
            return None
    if body[-1].name != "linalg.yield" or len(body[-1].operands) != 1:
        return None
    return body[:-1]


def pure_function_of_input(g) -> bool:
    """Whether the body of the one-input, one-output generic ``g`` computes its yielded
    value from its input element (and values defined outside) with arith and math ops only,
    not reading its output (:func:`scalar_body`): a rounding copy (``truncf``, maybe with
    more elementwise work), RMSNorm's ``rsqrt(sum / n + eps)`` of a row sum."""
    return scalar_body(g) is not None


def apply_body(g, x):
    """The value the body of generic ``g`` (:func:`pure_function_of_input`) yields for
    input element ``x``, its ops cloned at the current insertion point."""
    from latch.passes.base import operation

    block = g.regions[0].blocks[0]
    body = [operation(o) for o in block.operations]
    mapping = {block.arguments[0]: x}
    clone_body_ops(body[:-1], mapping, [])
    y = body[-1].operands[0]
    return mapping.get(y, y)


def index_constant(v: int):
    """An ``arith.constant`` of type index at the current insertion point."""
    from mlir import ir

    index = ir.IndexType.get()
    return ir.Operation.create("arith.constant", [index],
                               attributes={"value": ir.IntegerAttr.get(index, v)}).result


_PREDICATES = {"eq": 0, "ne": 1, "slt": 2, "sle": 3, "sgt": 4, "sge": 5, "ult": 6, "ule": 7,
               "ugt": 8, "uge": 9}


def guarded_value(cond, make, result_type):
    """``scf.if cond -> result_type { make() } else { 0 }`` at the current insertion point
    (``make`` builds the value in the then-branch: a load issued only where ``cond``
    holds); returns its result."""
    from mlir import ir
    from mlir.dialects import scf

    branch = scf.IfOp(cond, [result_type], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([make()])
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp([zero_of(result_type)])
    return branch.results[0]


def zero_of(t):
    """An ``arith.constant`` 0 of scalar or vector type ``t`` at the current insertion
    point."""
    from mlir import ir

    elt = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
    zero = ir.FloatAttr.get(elt, 0.0) if isinstance(elt, ir.FloatType) else \
        ir.IntegerAttr.get(elt, 0)
    if isinstance(t, ir.VectorType):
        zero = ir.DenseElementsAttr.get_splat(t, zero)
    return ir.Operation.create("arith.constant", [t], attributes={"value": zero}).result


def compare(predicate: str, a, b):
    """``arith.cmpi <predicate>, a, b`` at the current insertion point (an i1 value)."""
    from mlir import ir

    return ir.Operation.create(
        "arith.cmpi", [ir.IntegerType.get_signless(1)], [a, b],
        attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                    _PREDICATES[predicate])}).result


def gpu_fence() -> None:
    """``membar.gl`` (``nvvm.memory.barrier`` at gpu scope) at the current insertion point:
    the thread's earlier global writes are seen by the whole GPU before its later ones."""
    from mlir import ir

    ir.Operation.create("nvvm.memory.barrier", [], [], attributes={
        "scope": ir.Attribute.parse("#nvvm.mem_scope<gpu>")})


def flat_launch(blocks: int, threads: int, span: int | None = None):
    """A 1-D ``gpu.launch`` of ``blocks`` x ``threads`` at the current insertion point, with
    its terminator; returns (its body block, the terminator, the thread's first iteration
    ``blockIdx.x * span + threadIdx.x`` computed at the top of the body; ``span`` — the
    iterations a block covers — defaults to ``threads``)."""
    from mlir import ir
    from mlir.dialects import gpu

    index = ir.IndexType.get()
    c1 = index_constant(1)
    launch = gpu.LaunchOp((index_constant(blocks), c1, c1), (index_constant(threads), c1, c1))
    body = launch.regions[0].blocks[0]
    with ir.InsertionPoint(body):
        bid, tid = body.arguments[0], body.arguments[3]
        linear = tid
        if blocks > 1:
            scaled = ir.Operation.create("arith.muli", [index],
                                         [bid, index_constant(span or threads)]).result
            linear = ir.Operation.create("arith.addi", [index], [scaled, tid]).result
        end = ir.Operation.create("gpu.terminator", [])
    return body, end, linear


def guarded_launch(op, n: int, threads: int):
    """A 1-D ``gpu.launch`` in front of ``op`` with one thread per item ``0 .. n-1`` (blocks
    of ``threads``; the last block's extra threads skip the body).  Returns (the body block
    under the ``lin < n`` guard, its terminator already in place: insert at
    ``ir.InsertionPoint.at_block_terminator``; the item number ``lin``)."""
    from mlir import ir
    from mlir.dialects import scf

    with ir.InsertionPoint(op), op.location:
        _, end, lin = flat_launch(-(-n // threads), threads)
    with ir.InsertionPoint(end), op.location:
        guard = scf.IfOp(compare("ult", lin, index_constant(n)))
    with ir.InsertionPoint(guard.then_block), op.location:
        scf.YieldOp([])
    return guard.then_block, lin


def top_allocation(block, memref_type):
    """A ``memref.alloc`` of ``memref_type`` at the top of ``block`` (a function body): added
    after ``latch-plan-memory``, it is an unshared slot after the planned arena."""
    from mlir import ir

    first = list(block.operations)[0]
    first = first.operation if hasattr(first, "operation") else first
    with ir.InsertionPoint(first), first.location:
        return ir.Operation.create(
            "memref.alloc", [memref_type], operands=[],
            attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])}).result


#: the attribute :func:`order_loops` marks an ordered generic with
ORDERED = "latch.loops_ordered"


def order_loops(op) -> None:
    """Permute the loops of the linalg.generic ``op`` (once: it is marked :data:`ORDERED`)
    so that its parallel loops come first, in reverse order — the last one, which walks the
    unit-stride dimension of row-major buffers, becomes loop 0, the one mapped to
    consecutive threads — then its reductions in their order.  Its indexing maps, iterator
    types and ``linalg.index`` ops are rewritten; its values do not change."""
    from mlir import ir

    if ORDERED in op.attributes:
        return
    op.attributes[ORDERED] = ir.UnitAttr.get()     # running it again keeps it
    its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    par = [i for i, t in enumerate(its) if "parallel" in t]
    red = [i for i, t in enumerate(its) if "parallel" not in t]
    perm = par[::-1] + red               # new loop j is old loop perm[j]
    if perm == list(range(len(its))) or not par:
        return
    n = len(its)
    inv = [0] * n
    for j, i in enumerate(perm):
        inv[i] = j
    sub = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(inv[i]) for i in range(n)])
    maps = []
    for m in ir.ArrayAttr(op.attributes["indexing_maps"]):
        m = ir.AffineMapAttr(m).value
        maps.append(ir.AffineMapAttr.get(ir.AffineMap.get(
            n, m.n_symbols, [e.compose(sub) for e in m.results])))
    op.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)
    old_its = list(ir.ArrayAttr(op.attributes["iterator_types"]))
    op.attributes["iterator_types"] = ir.ArrayAttr.get([old_its[i] for i in perm])
    for inner in nested_operations(op):
        if inner.name == "linalg.index":
            d = ir.IntegerAttr(inner.attributes["dim"]).value
            inner.attributes["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                         inv[d])


def loop_ranges(op):
    """(indexing maps, static trip count of each loop or None) of a generic on memrefs or
    tensors."""
    from mlir import ir

    n_loops = len(ir.ArrayAttr(op.attributes["iterator_types"]))
    maps = indexing_maps(op)
    ranges = [None] * n_loops
    for v, m in zip(op.operands, maps):
        if not isinstance(v.type, ir.ShapedType):
            continue
        shape = ir.ShapedType(v.type).shape
        for k, expr in enumerate(m.results):
            if isinstance(expr, ir.AffineDimExpr):
                ranges[ir.AffineDimExpr(expr).position] = shape[k]
    return maps, ranges


def delinearize(linear, loops, ranges, dims) -> None:
    """Split the index value ``linear`` over ``loops`` (loop numbers, the first varying
    fastest) with trip counts ``ranges[loop]``; the index of each goes to ``dims[loop]``."""
    from mlir import ir

    index = ir.IndexType.get()
    rest = linear
    for n, d in enumerate(loops):
        if n == len(loops) - 1:
            dims[d] = rest
            break
        r = index_constant(ranges[d])
        dims[d] = ir.Operation.create("arith.remui", [index], [rest, r]).result
        rest = ir.Operation.create("arith.divui", [index], [rest, r]).result


def indices(m, dims) -> list:
    """The index values an indexing map ``m`` gives at the loop indices ``dims``."""
    from mlir import ir

    index = ir.IndexType.get()
    out = []
    for expr in m.results:
        if isinstance(expr, ir.AffineDimExpr):
            out.append(dims[ir.AffineDimExpr(expr).position])
        elif isinstance(expr, ir.AffineConstantExpr):
            out.append(index_constant(ir.AffineConstantExpr(expr).value))
        else:
            amap = ir.AffineMap.get(len(dims), 0, [expr])
            out.append(ir.Operation.create(
                "affine.apply", [index], dims,
                attributes={"map": ir.AffineMapAttr.get(amap)}).result)
    return out


def load_inputs(block, ins, maps, dims, mapping: dict, only=None) -> None:
    """Map the body arguments of the inputs ``ins`` (with indexing ``maps``) to their
    elements loaded at the loop indices ``dims`` (a scalar input maps to itself); with
    ``only``, just the inputs of those numbers."""
    from mlir import ir

    for j, (v, m) in enumerate(zip(ins, maps)):
        if only is not None and j not in only:
            continue
        if not isinstance(v.type, ir.MemRefType):
            mapping[block.arguments[j]] = v
            continue
        elt = ir.MemRefType(v.type).element_type
        mapping[block.arguments[j]] = ir.Operation.create(
            "memref.load", [elt], [v] + indices(m, dims)).result


def accumulation(op):
    """(body block, accumulator argument, combining op, the other operand) if the body of
    the single-output generic ``op`` has no nested regions and yields ``combine(acc, e)``
    with ``acc`` (the output element) used only there and ``e`` not ``acc``; else None."""
    block = op.regions[0].blocks[0]
    body = [o.operation if hasattr(o, "operation") else o for o in block.operations]
    if any(o.regions for o in body):
        return None
    acc = block.arguments[len(block.arguments) - 1]
    yld = body[-1]
    if yld.name != "linalg.yield" or len(yld.operands) != 1:
        return None
    owner = yld.operands[0].owner
    if hasattr(owner, "arguments"):
        return None
    comb = owner.operation if hasattr(owner, "operation") else owner
    if len(comb.operands) != 2 or sum(1 for _ in acc.uses) != 1:
        return None
    a, b = comb.operands[0], comb.operands[1]
    if (a == acc) == (b == acc):
        return None
    return block, acc, comb, (b if a == acc else a)
