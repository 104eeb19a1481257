"""``latch-plan-memory``: the static memory plan of every function (stage 'buffers').

Each statically shaped ``memref.alloc`` in a function's body gets an offset in one arena.
A buffer is live from its allocation to the last top-level op that uses it or any view of
it (subview, cast, reshape ...); buffers that escape (returned, stored, yielded out of a
region, passed to an op whose memref results may alias it) are pinned: they get no arena
slot and keep their own allocation.  Offsets are assigned greedily, largest buffer first, at the lowest offset that
does not overlap a buffer whose live range intersects (the arena planner of TFLite and
XLA's heap simulator work alike).

Results are recorded as attributes, so later stages and ``prog.report()`` can read them:
``latch.offset`` (i64) on each planned alloc, and on the function ``latch.arena_bytes``
(the arena size) and ``latch.buffer_bytes`` (the sum of all planned buffers, each rounded
up to the alignment, i.e. what allocating each separately would take — never less than the
arena).

**Reuse distance.**  On the GPU the launches run concurrently wherever their buffers allow
(latch.passes.launch_dependencies), and a slot reused by the next buffer orders the kernels
that use the two: the new buffer's writer waits for the old buffer's last reader (write
after read) even when the two computations are independent.  Reused right away, the slot
of an attention out-projection's weight-gradient sum went to the input gradient computed
next, so every layer's backward waited for its weight gradient's split-K, sum and rounding
(TinyMoE B2: the dependency graph's longest chain 440 launches).  With ``reuse-distance``
``N`` a buffer's slot is not given to a buffer allocated within ``N`` ops of its last use
(each live range counts as ``N`` ops longer): the next reuse is far enough down the program
that the order it adds is mostly implied anyway (B2 with ``N = 16``: 398 launches, the
arena 0.6 MB smaller, the planned part 14 KB larger; ``N = 64``: 391 launches, +270 MB).

Options: ``alignment`` (bytes, default 256 — what cudaMalloc guarantees); ``reuse-distance``
(ops, default 0; ``latch-bufferize`` uses 16); ``materialize``
(default false): also carry the plan out — allocate one ``memref<Nxi8>`` arena at the top
of the function and turn every planned alloc into a ``memref.view`` of it at its offset, so
the function makes one allocation per call instead of one per buffer (the CPU target runs
it this way; the CUDA target reads the offsets into its manifest instead).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-bufferize, latch-plan-memory)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass

_VIEW_OPS = {"memref.subview", "memref.cast", "memref.collapse_shape", "memref.expand_shape",
             "memref.reinterpret_cast", "memref.view", "memref.reshape", "memref.transpose",
             "memref.extract_strided_metadata"}
_YIELDS = {"scf.yield", "scf.condition", "scf.reduce.return", "bufferization.dealloc"}
_ESCAPES = {"func.return", "memref.store", "func.call", "memref.dealloc_helper",
            "bufferization.to_tensor"}


def _is_memref(t) -> bool:
    return str(t).startswith("memref<")


def _element_bytes(t) -> int:
    s = str(t)
    if s in ("index", "i64", "f64"):
        return 8
    if s in ("i1", "i8"):
        return 1
    for prefix in ("f", "i", "bf"):
        if s.startswith(prefix) and s[len(prefix):].isdigit():
            return max(1, int(s[len(prefix):]) // 8)
    return 8


def memref_bytes(memref_type) -> int:
    n = 1
    for d in memref_type.shape:
        n *= d
    return n * _element_bytes(memref_type.element_type)


def planned_range(alloc):
    """The [start, end) arena bytes the memory plan gave the ``memref.alloc`` ``alloc``;
    None if it has no planned slot."""
    from mlir import ir

    if alloc.name != "memref.alloc" or "latch.offset" not in alloc.attributes:
        return None
    start = ir.IntegerAttr(alloc.attributes["latch.offset"]).value
    return start, start + memref_bytes(ir.MemRefType(alloc.results[0].type))


@dataclasses.dataclass
class Buffer:
    op: object
    size: int
    start: int
    end: int
    offset: int = -1


def _top_level_index(op, body_ops_index, func_op) -> int | None:
    cur = op
    while cur is not None:
        key = _key(cur)
        if key in body_ops_index:
            return body_ops_index[key]
        parent = cur.parent
        if parent is None or _key(parent) == _key(func_op):
            return None
        cur = parent
    return None


def _key(op):
    return op.operation if hasattr(op, "operation") else op


def _live_range(alloc, index, body_ops_index, func_op):
    """(last top-level index using the buffer, escapes?)"""
    last, escapes = index, False
    work = [alloc.result]
    seen = 0
    while work and seen < 10000:
        seen += 1
        value = work.pop()
        for use in value.uses:
            owner = use.owner
            owner_op = owner.operation if hasattr(owner, "operation") else owner
            name = owner_op.name
            if name in _ESCAPES or name in _YIELDS:
                escapes = True      # the value flows on through a region result: pinned
            if name in _VIEW_OPS:
                work.extend(owner_op.results)
            elif any(_is_memref(r.type) for r in owner_op.results):
                escapes = True      # e.g. scf.for/scf.if results that may alias it
            pos = _top_level_index(owner_op, body_ops_index, func_op)
            if pos is None:
                escapes = True
            else:
                last = max(last, pos)
    return last, escapes


def plan_buffers(buffers: list[Buffer], alignment: int, reuse_distance: int = 0) -> int:
    """Assign offsets in place; returns the arena size.  Two buffers may share bytes when
    their live ranges, each extended by ``reuse_distance`` ops, do not intersect."""
    placed: list[Buffer] = []
    d = reuse_distance
    for b in sorted(buffers, key=lambda b: (-b.size, b.start)):
        overlapping = sorted((p for p in placed
                              if p.start <= b.end + d and b.start <= p.end + d),
                             key=lambda p: p.offset)
        offset = 0
        for p in overlapping:
            if offset + b.size <= p.offset:
                break
            offset = max(offset, _align(p.offset + p.size, alignment))
        b.offset = offset
        placed.append(b)
    return max((_align(b.offset + b.size, alignment) for b in placed), default=0)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclasses.dataclass(frozen=True)
class PlanMemory(ModulePass):
    name = "latch-plan-memory"
    summary = "assign every temporary buffer an offset in one arena, reusing memory by liveness"
    alignment: int = 256
    reuse_distance: int = 0
    materialize: bool = False

    def apply(self, module) -> None:
        from mlir import ir

        from latch.passes.form_contraction_kernels import hoist_narrowed_outputs

        for func_op in _functions(module):
            if not func_op.regions or not func_op.regions[0].blocks:
                continue
            body = func_op.regions[0].blocks[0]
            hoist_narrowed_outputs(body)     # a buffer a product will write is live from it
            ops = list(body.operations)
            index = {_key(op): i for i, op in enumerate(ops)}
            buffers = []
            for i, op in enumerate(ops):
                o = _key(op)
                if o.name != "memref.alloc" or len(o.operands) != 0:
                    continue
                mtype = ir.MemRefType(o.results[0].type)
                if not mtype.has_static_shape:
                    continue
                last, escapes = _live_range(o, i, index, func_op)
                if escapes:
                    o.attributes["latch.pinned"] = ir.UnitAttr.get()
                    continue
                buffers.append(Buffer(o, memref_bytes(mtype), i, last))
            arena = plan_buffers(buffers, self.alignment, self.reuse_distance)
            i64 = ir.IntegerType.get_signless(64)
            for b in buffers:
                b.op.attributes["latch.offset"] = ir.IntegerAttr.get(i64, b.offset)
            func_op.attributes["latch.arena_bytes"] = ir.IntegerAttr.get(i64, arena)
            func_op.attributes["latch.buffer_bytes"] = ir.IntegerAttr.get(
                i64, sum(_align(b.size, self.alignment) for b in buffers))
            if self.materialize and buffers:
                _materialize(body, buffers, arena, self.alignment)


def _materialize(body, buffers, arena: int, alignment: int) -> None:
    """One arena alloc at the top of ``body``; each planned alloc becomes a view of it."""
    from mlir import ir
    from mlir.dialects import arith, memref

    i8 = ir.IntegerType.get_signless(8)
    index = ir.IndexType.get()
    first = list(body.operations)[0]
    with ir.InsertionPoint(first), first.location:
        arena_type = ir.MemRefType.get([max(arena, 1)], i8)
        arena_val = memref.AllocOp(arena_type, [], [],
                                   alignment=ir.IntegerAttr.get(
                                       ir.IntegerType.get_signless(64), alignment)).result
    for b in buffers:
        with ir.InsertionPoint(b.op), b.op.location:
            offset = arith.ConstantOp(index, b.offset).result
            view = memref.ViewOp(b.op.results[0].type, arena_val, offset, []).result
        b.op.results[0].replace_all_uses_with(view)
        b.op.erase()

def recorded_plan(func_op) -> dict | None:
    """``{"arena_bytes", "buffer_bytes"}`` that this pass recorded on ``func_op``, or None."""
    from mlir import ir

    attrs = func_op.attributes
    if "latch.arena_bytes" not in attrs:
        return None
    return {"arena_bytes": ir.IntegerAttr(attrs["latch.arena_bytes"]).value,
            "buffer_bytes": ir.IntegerAttr(attrs["latch.buffer_bytes"]).value}


def _functions(module):
    region = module.regions[0]
    for op in region.blocks[0].operations:
        if _key(op).name == "func.func":
            yield _key(op)
