"""``latch-form-contraction-kernels``: matrix products become tiled GPU kernels (stage
'kernels').

After ``latch-bufferize`` every matmul, batched matmul and linear layer is a
``linalg.generic`` *contraction* on memrefs: ``out[p] += f(a[..]) * g(b[..])`` summed over
the reduction loops, where ``f`` and ``g`` are chains of ``arith.extf``/``arith.truncf``
(precision casts fused in by ``linalg-fuse-elementwise-ops``).  ``latch-form-kernels`` would
give each output element one thread that walks the whole reduction: correct, but a few
percent of the chip.  This pass replaces each top-level contraction by a ``gpu.launch_func``
of a generated, shared-memory tiled kernel (one ``gpu.module`` per contraction):

* **tensor cores** (``mma``, the default): when both operands reach the product as bf16
  values widened to f32 (``extf(bf16 -> f32)``) and the accumulator is f32, a kernel of
  256 threads computes a 128x128 output tile per block: the k-tiles of 32 flow through a
  four-stage pipeline in dynamic shared memory (``cp.async`` copies of later tiles in
  flight while the warps multiply the current one; one barrier per k-tile), each of the 8
  warps owns a 64x32 sub-tile, reads its fragments with ``ldmatrix`` and issues
  ``nvvm.mma.sync`` m16n8k16 (bf16 x bf16 -> f32).  An operand that is a bf16 buffer read
  as it is is copied 16 bytes at a time whether it is contiguous along k or along its rows
  (a transposed operand: ``ldmatrix.trans``); one with casts or index math fused in is
  loaded and converted by the threads.
* **SIMT** otherwise (f32 operands: TF32 is never used, so float32 results keep float32
  accuracy): 64x64 output tiles per block of 256 threads, 16-deep k-tiles in shared
  memory, a 4x4 register tile per thread, ``math.fma``.

Refinements: an output that was just zero-filled (nothing reading it in between) is
written, not read and added to, and the fill goes; an output with too few tiles to fill
the GPU (a weight gradient summed over all tokens) is **split along k** into slices whose
partial sums land in a per-function workspace and are then added in order (deterministic;
the wgmma kernel's tile width and slices come from a cost model fitted to the H200's
measured launch times, ``contraction_wgmma.tiling``);
a factor that is a 0/1 mask (an i1 converted to f32, in the body or read from a buffer whose
last writer made it) lets the SIMT kernel **skip all-zero k-tiles** (``bar.red.or``); and
a one-hot product ``C[row] += [t(k) == row] * V[k]`` — the dense form of ``index_add``/``index_put``/the
embedding gradient — becomes a **gather** (``passes/one_hot_gather.py``: the sources
grouped by target row, then one thread per output element sums its row's sources in k
order; a rounded copy that is the output's only reader is written directly), or, with
``gather=false``, a **scatter kernel** of K x N atomic adds (``passes/one_hot_scatter.py``).

Loop dimensions are grouped by where they appear — *batch* (output, a and b), *m* (output
and a), *n* (output and b), *k* (reduction, a and b) — and each group is flattened, so
``bmm``, attention's ``[B, H, T, T]`` products and transposed operands all take the same
kernels (grid: n tiles x m tiles x batch).  Tile edges are handled by clamped loads whose
out-of-range k values are zero and by guarded stores.  Contractions the kernels do not
cover (other body ops, integer or f64 types, dynamic shapes, a broadcast output
dimension) are left to ``latch-form-kernels``, and so are those a tile would mostly waste:
at most 16 outputs per batch entry (a batch of dot products: row reductions, a warp each)
or at most 8 terms per sum (a weighted sum: a loop per output element).

On ``chip=sm_90a`` (Hopper's architecture-specific instructions) a bf16 contraction whose
factors are both staged by 16-byte copies takes the ``wgmma`` kernel instead
(``passes/contraction_wgmma.py``: two warpgroups, 128 x 128 tiles, k-tiles of 64 in
128-byte swizzled shared memory read through wgmma descriptors).

Options: ``round-sums`` (bool, default true: the launch adding a split product's slices
writes the bf16 rounding that is its zeroed output's only reader),
``fill-past-factor`` (bool, default true: the rows of a tile past a factor's last are
zero-filled by copies that read nothing, instead of clamped copies of its last row),
``mma`` (bool, default true: use tensor cores where the operands are bf16),
``chip`` (default sm_90; sm_90a: wgmma kernels),
``scatter`` (bool, default true: one-hot products as gathers or scatter kernels; false
keeps them contractions, quadratic in the sources), ``gather`` (bool, default true: the
gather form where it applies; false: float atomic adds), ``deterministic`` (bool, default false: the
scatter kernels sum in fixed point, the same bits in any order of their atomic adds —
``passes/fixed_point_scatter.py``).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-bufferize,
latch-form-contraction-kernels, latch-form-kernels)'``
"""
from __future__ import annotations

import dataclasses
import functools
import math

from latch.errors import PipelineError
from latch.passes.base import ModulePass, element_bits, fresh_symbol, function_definitions, \
    operation as _op, symbol_names
from latch.passes.buffer_views import (INERT, NO_MEMORY_EFFECTS, arena_span,
                                       held_users, last_writer, root, slots_overlap, users)
from latch.passes.generic_body import clone_body_ops, index_constant, order_loops, \
    top_allocation, used_only_rounded_to_bf16
from latch.passes import fixed_point_scatter as fixed_point
from latch.passes import one_hot_gather
from latch.passes import empty_rows
from latch.passes import epilogue_readers
from latch.passes.one_hot_scatter import (emit_scatter, erase_dead_mask_writer,
                                         match_one_hot_scatter)

KERNEL = "contract"     # the kernel's name in every module: identical kernels dedupe
_PLACEHOLDER = "latch.contraction_factor"   # a factor's value, expanded after parsing
_WG = "#gpu.address_space<workgroup>"


# ---------------------------------------------------------------------------------------
# recognising a contraction
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Operand:
    """One factor of the product: the body ops that compute it from the generic's inputs,
    ``linalg.index`` values, loads from other buffers and constants."""
    value: object              # the body value (bf16 for the tensor-core kernel, else f32)
    ops: list                  # body ops computing it, in block order
    args: list                 # generic input numbers it reads
    dims: set                  # loop dims it depends on
    captured: list             # values defined outside the generic (memrefs, constants)
    narrow: object = None      # the bf16 value that ``value`` widens (tensor-core kernel)


@dataclasses.dataclass
class Contraction:
    """A matched contraction: ``out[p] += P * Q`` summed over the reduction loops."""
    op: object
    inputs: list               # the generic's input values (memrefs)
    c: object                  # the output (memref of f32)
    maps: list                 # per input and the output: [("d", dim) | ("c", 0)] per result
    sizes: list                # size of each loop dim
    groups: dict               # 'batch'/'m'/'n'/'k' -> [loop dims, outer first]
    sides: list                # [Operand P, Operand Q]
    mma: bool                  # both factors are bf16 values widened to f32
    captured: list             # external memrefs the factors load from (extra kernel args)
    indicator: int | None = None   # a factor that is a 0/1 mask (an i1 converted to f32)
    zeroed_by: list | None = None  # the ops that zeroed the whole output just before, if any
    narrowed_by: object | None = None  # the generic that rounded the output to bf16, when
                                       # the kernel writes that copy instead (c is then it)
    reader_rounds: object | None = None  # the f32 output replaced by c when narrowed_by is
                                         # a reader that rounds it (it stays, reading c)
    reader: object | None = None       # the elementwise op after the product that its
                                       # epilogue computes (passes/epilogue_readers.py)
    skip: object | None = None  # an empty_rows.Skip: the block skips k-tiles of rows a
                                # gather left zero (its extents among ``captured``)

    def size(self, group: str) -> int:
        n = 1
        for d in self.groups[group]:
            n *= self.sizes[d]
        return n


_PURE_PREFIXES = ("arith.", "math.")


def map_dims(op) -> list:
    """Per operand of the generic ``op``, its indexing map as ``("d", loop)`` or ``("c",
    value)`` per result; None for a map with any other expression."""
    from mlir import ir

    maps = []
    for attr in ir.ArrayAttr(op.attributes["indexing_maps"]):
        res = []
        for expr in ir.AffineMapAttr(attr).value.results:
            if isinstance(expr, ir.AffineDimExpr):
                res.append(("d", ir.AffineDimExpr(expr).position))
            elif isinstance(expr, ir.AffineConstantExpr):
                res.append(("c", ir.AffineConstantExpr(expr).value))
            else:
                res = None
                break
        maps.append(res)
    return maps


def side_of(value, block, inputs_maps, n_inputs):
    """The Operand computing ``value`` inside ``block``, a generic's body whose inputs have
    the maps ``inputs_maps`` (``map_dims``); None if it uses anything but inputs (with
    plain maps), loop indices, values from outside and pure arith/math ops and loads."""
    from mlir import ir

    body = [_op(o) for o in block.operations]

    def position(o):     # Python wrappers of one op are not identical objects: compare
        return next(i for i, b in enumerate(body) if b == o)

    ops, args, dims, captured = [], set(), set(), []
    seen = set()
    stack = [value]
    while stack:
        v = stack.pop()
        owner = v.owner
        if hasattr(owner, "arguments"):                    # a block argument
            if owner == block:
                i = ir.BlockArgument(v).arg_number
                if i >= n_inputs or inputs_maps[i] is None:
                    return None             # the accumulator, or an input with a non-plain map
                args.add(i)
                dims.update(d for kind, d in inputs_maps[i] if kind == "d")
            else:
                captured.append(v)
            continue
        op = _op(owner)
        if op.parent is None or _op(op.parent) != _op(block.owner):
            captured.append(v)                              # defined outside the generic
            continue
        key = position(op)
        if key in seen:
            continue
        seen.add(key)
        if op.name == "linalg.index":
            dims.add(ir.IntegerAttr(op.attributes["dim"]).value)
        elif not (op.name.startswith(_PURE_PREFIXES) or
                  op.name in ("memref.load", "affine.apply")) or \
                op.regions:
            return None
        ops.append(op)
        stack.extend(op.operands)
    ops.sort(key=position)
    return Operand(value, ops, sorted(args), dims, captured)


# a product whose rows x columns (per batch entry) are at most this many is a batch of
# dot products (the MoE combine: each token's two expert outputs weighted by a
# [tokens, 2, d] x [tokens, d] product): a 64 x 64 output tile per batch entry would waste
# all but a few of its threads, so latch-wrap-host-compute's row reductions take it (a
# warp per dot product)
_TINY_OUTPUT = 16
# ... and one whose reduction has at most this many terms (the MoE combine's two experts:
# [tokens, 2, d] x [tokens, 2] -> [tokens, d]) is a weighted sum, a loop per output element
_TINY_REDUCTION = 8


def _order_groups_by_layout(groups: dict, maps: list) -> None:
    """Order each group's loop dims as the memory does (outer first), so that a group of
    several loops flattens row-major onto contiguous elements: batch, m and n as the
    output's dims, k as the first input that indexes all of them.  Earlier passes may have
    permuted the loops (e.g. loop 0 walking the innermost dimension); in loop order a
    group's last dim would then not be the unit-stride one, and a factor that is in fact
    contiguous would look strided (no 16-byte copies, no tensor-core staging)."""
    def position_in(m):
        return {d: i for i, (kind, d) in enumerate(m) if kind == "d"}

    out = position_in(maps[-1])
    for g in ("batch", "m", "n"):
        groups[g].sort(key=out.get)
    for m in maps[:-1]:
        pos = position_in(m)
        if groups["k"] and all(d in pos for d in groups["k"]):
            groups["k"].sort(key=pos.get)
            break


def match_contraction(op) -> Contraction | None:
    from mlir import ir

    if op.name != "linalg.generic" or len(op.results) != 0 or len(op.operands) < 3:
        return None
    values = list(op.operands)
    n_inputs = len(values) - 1
    if "operandSegmentSizes" in op.attributes and \
            list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])) != [n_inputs, 1]:
        return None
    c = values[-1]
    if not all(isinstance(v.type, ir.MemRefType) and ir.MemRefType(v.type).has_static_shape
               for v in values):
        return None
    if str(ir.MemRefType(c.type).element_type) != "f32":
        return None
    its = [str(x) for x in ir.ArrayAttr(op.attributes["iterator_types"])]
    n_loops = len(its)
    maps = map_dims(op)
    if any(m is None or any(m_res != ("c", 0) for m_res in m if m_res[0] == "c")
           for m in maps):
        return None
    out_dims = [d for kind, d in maps[-1] if kind == "d"]
    if len(out_dims) != len(maps[-1]) or len(set(out_dims)) != len(out_dims):
        return None
    sizes = [None] * n_loops
    for v, m in zip(values, maps):
        for (kind, d), s in zip(m, ir.MemRefType(v.type).shape):
            if kind == "d":
                if sizes[d] not in (None, s):
                    return None
                sizes[d] = s
    if any(s is None for s in sizes):
        return None
    # the body: yield(addf(acc, mulf(P, Q)))
    block = op.regions[0].blocks[0]
    ops = [_op(o) for o in block.operations]
    acc = block.arguments[n_inputs]
    if str(acc.type) != "f32" or ops[-1].name != "linalg.yield":
        return None
    add = ops[-1].operands[0].owner
    if hasattr(add, "arguments") or _op(add).name != "arith.addf":
        return None
    add = _op(add)
    x, y = add.operands
    prod = y if x == acc else x if y == acc else None
    if prod is None or hasattr(prod.owner, "arguments") or _op(prod.owner).name != "arith.mulf":
        return None
    mul = _op(prod.owner)
    if str(mul.results[0].type) != "f32" or \
            any(u.owner != add for u in mul.results[0].uses):
        return None
    sides = [side_of(v, block, maps, n_inputs) for v in mul.operands]
    if None in sides:
        return None
    covered = [o for s in sides for o in s.ops] + [mul, add, ops[-1]]
    if any(all(o != c for c in covered) for o in ops):
        return None                                 # other work in the body
    for s in sides:
        for v in s.captured:
            t = v.type
            if isinstance(t, ir.MemRefType):
                if not ir.MemRefType(t).has_static_shape:
                    return None
            elif hasattr(v.owner, "arguments") or _op(v.owner).name != "arith.constant":
                return None                         # a runtime scalar from the host
    groups = {"batch": [], "m": [], "n": [], "k": []}
    p_dims, q_dims = sides[0].dims, sides[1].dims
    for d in range(n_loops):
        if "reduction" in its[d]:
            groups["k"].append(d)
        elif d not in out_dims:
            return None
        elif d in p_dims and d in q_dims:
            groups["batch"].append(d)
        elif d in q_dims:
            groups["n"].append(d)
        else:
            groups["m"].append(d)
    _order_groups_by_layout(groups, maps)
    if math.prod(sizes[d] for d in groups["k"]) == 1:
        return None                 # no reduction (only unit ones): elementwise work
    if math.prod(sizes[d] for d in groups["m"] + groups["n"]) <= _TINY_OUTPUT:
        return None                 # a few dot products per batch entry: row reductions
    if math.prod(sizes[d] for d in groups["k"]) <= _TINY_REDUCTION:
        return None                 # a weighted sum of a few terms: elementwise work

    def bf16_widened(side):
        v = side.value
        if hasattr(v.owner, "arguments"):
            return False
        o = _op(v.owner)
        return (o.name == "arith.extf" and str(o.operands[0].type) == "bf16" and
                all(_op(u.owner) == mul for u in o.results[0].uses))

    mma = all(bf16_widened(s) for s in sides)
    if mma:    # the tensor-core kernel takes the bf16 values; the widening is the mma's
        for s in sides:
            s.narrow = _op(s.value.owner).operands[0]
    captured = []
    for s in sides:
        for v in s.captured:
            if isinstance(v.type, ir.MemRefType) and all(v != w for w in captured):
                captured.append(v)
    indicator = next((i for i, s in enumerate(sides)
                      if _is_indicator(s.value, op, values[:-1])), None)
    return Contraction(op, values[:-1], c, maps, sizes, groups, sides, mma, captured,
                       indicator, zeroing_ops(op, c))


def hoist_narrowed_outputs(block) -> None:
    """Move the allocation of each bf16 copy that a contraction kernel will write directly
    (:func:`_narrowing_reader`) in front of its product, so that ``latch-plan-memory``,
    which runs before this pass, keeps that buffer apart from the product's operands."""
    for op in list(block.operations):
        con = match_contraction(_op(op))
        if con is not None:          # zeroed or not: that is known after host code is wrapped
            g = _narrowing_reader(con, check_slots=False)
            if g is not None:
                _hoist_between(con.op, g)


def _narrowing_reader(con: Contraction, check_slots: bool = True):
    """The generic that rounds the (just zeroed) output of ``con`` to bf16 when the kernel
    may write that copy directly: an all-parallel ``truncf`` copy of the whole output
    (both indexed by one permutation of its loops), the only use of its allocation after the product, right after it (nothing
    between but allocations, views and constants), into a buffer that shares no memory
    with the product's operands (the memory plan may reuse their slots for a buffer that
    is only live from the copy on).  None otherwise."""
    from mlir import ir

    op, c = con.op, con.c
    base = root(c)
    if hasattr(base.owner, "arguments"):
        return None
    here = _op(op)
    later = [u for u, h in held_users(base, here) if here.is_before_in_block(h)]
    if len(later) != 1 or later[0].name != "linalg.generic":
        return None
    ops = [_op(o) for o in op.operation.block.operations]
    at = next(i for i, o in enumerate(ops) if o == op)
    g = later[0]
    if len(g.operands) != 2 or g.operands[0] != c or g.results:
        return None
    seg = list(ir.DenseI32ArrayAttr(g.attributes["operandSegmentSizes"]))
    out = g.operands[1]
    if seg != [1, 1] or out.type != ir.MemRefType.get(
            ir.MemRefType(c.type).shape, ir.BF16Type.get()):
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    if maps[0] != maps[1] or not maps[0].is_permutation or \
            any("parallel" not in str(a) for a in ir.ArrayAttr(g.attributes["iterator_types"])):
        return None
    block = g.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    if len(body) != 2 or body[0].name != "arith.truncf" or \
            body[0].operands[0] != block.arguments[0] or body[1].operands[0] != body[0].results[0]:
        return None
    for between in ops[at + 1:]:
        if between == g:
            break
        if between.name not in INERT:
            return None
    else:
        return None
    span = arena_span(out) if check_slots else None
    if span is not None and any(slots_overlap(span, arena_span(v))
                                for v in list(con.inputs) + list(con.captured)):
        return None
    return g


#: A just-zeroed f32 product whose readers all use it rounded to bf16 is written rounded by
#: the kernel (:func:`_rounding_readers`): half the bytes written and read.
ROUND_FOR_READERS = True


def _rounding_readers(con: Contraction):
    """[(generic, operand number)] when every reader of the (just zeroed) f32 output of
    ``con`` after the product is a ``linalg.generic`` that uses it solely through
    ``arith.truncf`` to bf16 (e.g. a SwiGLU gate: ``silu(bf16(gate))`` in the forward pass
    and its derivative in the backward pass): the kernel can then write the output rounded,
    the readers take bf16 values without their truncf, with the same bits.  The output must
    be an allocation read by each generic directly, as one input, and placed by
    ``latch-plan-memory`` (``latch.offset``); the generics all-parallel, in the same block.
    None otherwise."""
    from mlir import ir

    c = con.c
    if hasattr(c.owner, "arguments") or root(c) != c:
        return None
    alloc = _op(c.owner)
    if alloc.name != "memref.alloc" or "latch.offset" not in alloc.attributes or \
            not ir.MemRefType(c.type).has_static_shape or \
            not isinstance(ir.MemRefType(c.type).element_type, ir.F32Type):
        return None
    op = _op(con.op)
    readers = []
    for g, holder in held_users(c, op):
        if not op.is_before_in_block(holder):
            continue                 # before the product
        reader = _rounding_reader(g, c, holder == g)
        if reader is None:
            return None
        readers.append(reader)
    return readers or None


def _rounding_reader(g, c, in_block: bool):
    """(g, operand number) when the ``linalg.generic`` ``g``, an op of the product's block
    (``in_block``), is all-parallel, writes no result, reads ``c`` as exactly one input and
    uses that input only through ``arith.truncf`` to bf16; None otherwise."""
    from mlir import ir

    if g.name != "linalg.generic" or g.results or not in_block or \
            any("parallel" not in str(a) for a in ir.ArrayAttr(g.attributes["iterator_types"])):
        return None                  # not elementwise in this block (a contraction's body
                                     # may already be analyzed: leave it as it is)
    seg = list(ir.DenseI32ArrayAttr(g.attributes["operandSegmentSizes"]))
    ins = list(g.operands)[:seg[0]]
    if sum(v == c for v in g.operands) != 1 or c not in ins:
        return None
    i = ins.index(c)
    if not used_only_rounded_to_bf16(g.regions[0].blocks[0].arguments[i]):
        return None
    return g, i


def _round_in_place(con: Contraction, readers):
    """Give ``con`` a bf16 output at the planned place of its f32 one (half its bytes; the
    f32 buffer dies with the last of ``readers``, its only later readers) and make each
    reader's input read it, the truncf ops of that input dropped.  Returns the bf16
    buffer."""
    from mlir import ir

    c = con.c
    alloc = _op(c.owner)
    bf16 = ir.BF16Type.get()
    with ir.InsertionPoint(alloc), alloc.location:
        rounded = ir.Operation.create(
            "memref.alloc", [ir.MemRefType.get(ir.MemRefType(c.type).shape, bf16)],
            operands=[], attributes={n: alloc.attributes[n] for n in alloc.attributes}).result
    for g, i in readers:
        g.operands[i] = rounded
        arg = g.regions[0].blocks[0].arguments[i]
        arg.set_type(bf16)
        for use in list(arg.uses):
            t = _op(use.owner)
            t.results[0].replace_all_uses_with(arg)
            t.erase()
    return rounded


def _hoist_between(op, later, only: tuple | None = None) -> None:
    """Move the (inert) ops between ``op`` and ``later`` in front of ``op`` (``only``: just
    those with these names)."""
    ops = [_op(o) for o in op.operation.block.operations]
    at = next(i for i, o in enumerate(ops) if o == op)
    for between in ops[at + 1:]:
        if between == later:
            break
        if only is None or between.name in only:
            between.move_before(op)


def zeroing_ops(op, c) -> list | None:
    """When the whole allocation ``c`` is (not a part of it) holds zeros right before
    ``op`` and nothing reads it in between, the ops that put them there and nothing else
    needs: ``op`` may then write its sums instead of adding them, and they can go.  Zeros
    come from an all-parallel generic writing 0.0, or from one copying (a view of) such a
    buffer — one-shot bufferization leaves ``fill -> expand_shape -> copy`` for an output
    whose tensor was reshaped."""
    from mlir import ir

    base = root(c)
    writer = last_writer(c, op)
    if writer is None or ir.MemRefType(base.type).shape != ir.MemRefType(c.type).shape or \
            _reads_between(writer, op, base):
        return None
    if writes_zero(writer):
        return [writer]
    source = copied_buffer(writer)
    if source is None:
        return None                         # not a copy
    fill = last_writer(source, writer)
    if fill is None or not writes_zero(fill):     # (readers in between change nothing)
        return None
    others = [u for u in users(root(source)) if u != fill and u != writer]
    return [writer] + ([] if others else [fill])      # the fill too when only the copy read it


def zeroing_value(zeroing: list):
    """The zero (an attribute) that the ops :func:`zeroing_ops` found put in the buffer:
    written by the first of them, or by the fill it copies."""
    first = zeroing[0]
    value = zero_written(first)
    if value is None:
        source = copied_buffer(first)
        value = zero_written(last_writer(source, first))
    return value


def copied_buffer(generic):
    """The buffer a ``linalg.generic`` copies into its one output — its only input, a
    memref, yielded unchanged — else None."""
    from mlir import ir

    if generic.name != "linalg.generic" or \
            list(ir.DenseI32ArrayAttr(generic.attributes["operandSegmentSizes"])) != [1, 1] or \
            not isinstance(generic.operands[0].type, ir.MemRefType):
        return None
    block = generic.regions[0].blocks[0]
    yields = list(_op(list(block.operations)[-1]).operands)
    if len(yields) != 1 or not hasattr(yields[0].owner, "arguments") or \
            yields[0].owner != block or ir.BlockArgument(yields[0]).arg_number != 0:
        return None
    return generic.operands[0]


def writes_zero(generic) -> bool:
    """Whether ``generic`` is a ``linalg.generic`` with one output whose body yields the
    constant 0.0 or integer 0 (directly or as its scalar input) and that reads no buffer."""
    return zero_written(generic) is not None


def zero_written(generic):
    """The constant attribute (a float ±0.0 or an integer 0) that ``generic`` writes when
    :func:`writes_zero`, else None."""
    from mlir import ir

    if generic.name != "linalg.generic" or \
            list(ir.DenseI32ArrayAttr(generic.attributes["operandSegmentSizes"]))[1] != 1:
        return None
    block = generic.regions[0].blocks[0]
    yields = list(_op(list(block.operations)[-1]).operands)
    if len(yields) != 1:
        return None
    yielded = yields[0]
    if hasattr(yielded.owner, "arguments"):          # the fill's scalar input
        if yielded.owner != block:
            return None
        yielded = generic.operands[ir.BlockArgument(yielded).arg_number]
        if hasattr(yielded.owner, "arguments") or isinstance(yielded.type, ir.ShapedType):
            return None
    const = _op(yielded.owner)
    if const.name != "arith.constant" or not is_zero_attribute(const.attributes["value"]) \
            or any(isinstance(v.type, ir.MemRefType) for v in list(generic.operands)[:-1]):
        return None
    return const.attributes["value"]


def is_zero_attribute(value) -> bool:
    """Whether a scalar constant's attribute is a float 0.0 (either sign) or an integer 0."""
    from mlir import ir

    if isinstance(value, ir.FloatAttr):
        return ir.FloatAttr(value).value == 0.0
    if isinstance(value, ir.IntegerAttr) and not isinstance(value.type, ir.IndexType):
        return ir.IntegerAttr(value).value == 0
    return False


def _reads_between(first, last, base) -> bool:
    """Whether an op strictly between ``first`` and ``last`` (one block), or one nested in
    such an op, uses the allocation ``base`` other than by making a view of it."""
    first, last = _op(first), _op(last)
    return any(first.is_before_in_block(h) and h.is_before_in_block(last)
               for _, h in held_users(base, last))


def _is_indicator(value, op, inputs) -> bool:
    """A factor that is a 0/1 mask: an i1 converted to f32, computed in the body or loaded
    from a buffer that the last writer before ``op`` filled with such values (the one-hot
    masks of the dense scatter/index_put formulations in latch.frontend.decompositions)."""
    from mlir import ir

    if hasattr(value.owner, "arguments"):
        if value.owner != op.regions[0].blocks[0]:
            return False
        i = ir.BlockArgument(value).arg_number
        if i >= len(inputs):
            return False
        writer = last_writer(inputs[i], op)
        if writer is None:
            return False
        block = writer.regions[0].blocks[0]
        yielded = _op(list(block.operations)[-1]).operands[0]
        return not hasattr(yielded.owner, "arguments") and _is_mask_value(yielded)
    return _is_mask_value(value)


def _is_mask_value(value) -> bool:
    """An i1 converted to a float (then possibly widened or narrowed: still 0 or 1)."""
    o = _op(value.owner)
    while o.name in ("arith.extf", "arith.truncf") and \
            not hasattr(o.operands[0].owner, "arguments"):
        o = _op(o.operands[0].owner)
    return o.name in ("arith.uitofp", "arith.sitofp") and str(o.operands[0].type) == "i1"


# ---------------------------------------------------------------------------------------
# kernel text
# ---------------------------------------------------------------------------------------
class _Text:
    """SSA-numbered MLIR lines with cached index constants."""

    def __init__(self):
        self.lines: list[str] = []
        self.n = 0
        self.consts: dict[tuple, str] = {}
        self.const_lines: list[str] = []     # the constants, emitted before every line

    def fresh(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def emit(self, rhs: str) -> str:
        name = self.fresh()
        self.lines.append(f"{name} = {rhs}")
        return name

    def line(self, text: str) -> None:
        self.lines.append(text)

    def const(self, value, type_: str = "index") -> str:
        key = (value, type_)
        if key not in self.consts:
            name = f"%c{len(self.consts)}"
            lit = repr(float(value)) if type_ in ("f32", "bf16") else str(int(value))
            self.consts[key] = name
            self.const_lines.append(f"{name} = arith.constant {lit} : {type_}")
        return self.consts[key]

    def arith(self, name: str, x: str, y, type_: str = "index") -> str:
        if not isinstance(y, str):
            y = self.const(y)
        return self.emit(f"arith.{name} {x}, {y} : {type_}")

    def add(self, x, y):
        if y == 0:
            return x
        return self.arith("addi", x, y)

    def mul(self, x, y):
        if y == 1:
            return x
        return self.arith("muli", x, y)


class _Kernel:
    """Index math shared by both kernels: flattened groups -> memref indices."""

    def __init__(self, con: Contraction, t: _Text, tiles: tuple[int, int, int],
                 narrow: bool, splits: int = 1):
        self.con, self.t = con, t
        self.m_tile, self.n_tile, self.k_tile = tiles
        self.narrow = narrow       # factors as bf16 (tensor-core kernel) or f32
        self.splits = splits       # split-K: blocks per output tile, each a slice of k
        self.slice = None          # this block's slice number (a value), when splits > 1
        self.overwrite = con.zeroed_by is not None and splits == 1   # C = sum, not C += sum
        self.m0 = self.n0 = None   # the block's first output row / column (``_begin``)
        self.batch = {}            # its batch loop indices

    def split(self, group: str, flat: str) -> dict:
        """Loop dim -> value, delinearizing ``flat`` over the group's dims."""
        dims = self.con.groups[group]
        out = {}
        rest = flat
        for j in range(len(dims) - 1, -1, -1):
            d = dims[j]
            if j == 0:
                out[d] = rest
            else:
                s = self.con.sizes[d]
                out[d] = self.t.arith("remui", rest, s)
                rest = self.t.arith("divui", rest, s)
        return out

    def indices(self, which: int, dims: dict) -> str:
        """Index list of input ``which`` (-1: the output) at the loop dim values ``dims``."""
        m = self.con.maps[which]
        return ", ".join(dims[d] if kind == "d" else self.t.const(0) for kind, d in m)

    def contiguous_group(self, side: int) -> str:
        """The group of the loop dim that walks the unit-stride dimension of the first
        input the factor reads (coalesced loads walk it); "k" when it reads none."""
        from mlir import ir

        con = self.con
        for i in con.sides[side].args:
            mt = ir.MemRefType(con.inputs[i].type)
            strides, _ = mt.get_strides_and_offset()
            pos = len(strides) - 1
            for j, st in enumerate(strides):
                if st == 1 and mt.shape[j] != 1:
                    pos = j
            kind, d = con.maps[i][pos]
            if kind != "d":
                continue
            for g, ds in con.groups.items():
                if d in ds:
                    return g
        return "k"

    def load(self, side: int, batch: dict, row_group: str, row: str, k: str) -> str:
        """The factor at (batch, row, k): a placeholder op that
        :func:`_expand_operands` replaces by the factor's body ops; zero where k is out of
        range."""
        con, t = self.con, self.t
        rows, kk = con.size(row_group), con.size("k")
        row_c = t.arith("minui", row, rows - 1) if rows > 1 else t.const(0)
        if kk % self.k_tile == 0:
            k_c, valid = k, None
        else:
            k_c = t.arith("minui", k, kk - 1)
            valid = t.emit(f"arith.cmpi ult, {k}, {t.const(kk)} : index")
        dims = dict(batch)
        dims.update(self.split(row_group, row_c))
        dims.update(self.split("k", k_c))
        operands = ", ".join(dims.get(d, t.const(0)) for d in range(len(con.sizes)))
        rtype = "bf16" if self.narrow else "f32"
        x = t.emit(f'"{_PLACEHOLDER}"({operands}) {{side = {side} : i64, '
                   f'narrow = {str(self.narrow).lower()}}} : '
                   f'({", ".join(["index"] * len(con.sizes))}) -> {rtype}')
        if valid is not None:
            zero = t.const(0.0, rtype)
            x = t.emit(f"arith.select {valid}, {x}, {zero} : {rtype}")
        return x


def workspace_type(con: Contraction, splits: int) -> str:
    """The split-K partial sums: one f32 buffer of the output's shape per k slice."""
    from mlir import ir

    shape = "x".join(str(d) for d in [splits] + list(ir.MemRefType(con.c.type).shape))
    return f"memref<{shape}xf32>"


def _signature(con: Contraction, workgroup: str | None, threads: int, splits: int = 1,
               blocks_per_sm: int = 1) -> str:
    """The kernel's ``gpu.func`` line; ``blocks_per_sm`` > 1 asks the PTX assembler for
    that many resident blocks an SM (``nvvm.minctasm``: ``.minnctapersm``, which caps the
    registers a thread at 65536 / (threads x blocks))."""
    c_type = con.c.type if splits == 1 else workspace_type(con, splits)
    args = [f"%I{i}: {v.type}" for i, v in enumerate(con.inputs)] + [f"%C: {c_type}"]
    args += [f"%X{i}: {v.type}" for i, v in enumerate(con.captured)]
    attributions = f"workgroup({workgroup}) " if workgroup else ""
    occupancy = f", nvvm.minctasm = {blocks_per_sm} : i32" if blocks_per_sm > 1 else ""
    return (f"gpu.func @{KERNEL}({', '.join(args)}) "
            f"{attributions}kernel attributes "
            f"{{known_block_size = array<i32: {threads}, 1, 1>{occupancy}}} {{")


def _epilogue(k: _Kernel, t: _Text, batch: dict, cells, pairs: bool = False) -> None:
    """C[batch, row, col] += value for each (row, col, value), guarded at tile edges (with
    split-K: W[slice, batch, row, col] = value, the workspace of partial sums).  ``pairs``:
    consecutive cells come in pairs (row, col), (row, col + 1) with col even (the mma
    accumulator fragments); a bf16 output whose columns are its contiguous dimension then
    takes each pair as one 4-byte store, an f32 output (or the split-K workspace) one
    8-byte store (and load, when the sums are added to it)."""
    con = k.con
    f32_out = con.narrowed_by is None
    paired = pairs and (k.overwrite or k.splits > 1 or f32_out) and _pairable(con)
    for i, (row, col, value) in enumerate(cells):
        if paired and i % 2:
            continue                   # stored with its even neighbour
        cond = open_edge_guard(t, k, row, col)
        idx = output_index(k, batch, row, col)
        if k.splits > 1 and paired:    # two f32 partial sums, one 8-byte store
            w_type = workspace_type(con, k.splits)
            both = t.emit(f"vector.from_elements {value}, {cells[i + 1][2]} : vector<2xf32>")
            t.line(f"vector.store {both}, %C[{k.slice}, {idx}] {{alignment = 8}} : "
                   f"{w_type}, vector<2xf32>")
        elif k.splits > 1:
            w_type = workspace_type(con, k.splits)
            t.line(f"memref.store {value}, %C[{k.slice}, {idx}] : {w_type}")
        elif paired and f32_out:       # two f32 sums, one 8-byte store (and load)
            both = t.emit(f"vector.from_elements {value}, {cells[i + 1][2]} : vector<2xf32>")
            if not k.overwrite:
                old = t.emit(f"vector.load %C[{idx}] {{alignment = 8}} : {con.c.type}, "
                             "vector<2xf32>")
                both = t.emit(f"arith.addf {old}, {both} : vector<2xf32>")
            t.line(f"vector.store {both}, %C[{idx}] {{alignment = 8}} : "
                   f"{con.c.type}, vector<2xf32>")
        elif paired:                   # two neighbours rounded to bf16, one store
            lo = t.emit(f"arith.truncf {value} : f32 to bf16")
            hi = t.emit(f"arith.truncf {cells[i + 1][2]} : f32 to bf16")
            both = t.emit(f"vector.from_elements {lo}, {hi} : vector<2xbf16>")
            t.line(f"vector.store {both}, %C[{idx}] {{alignment = 4}} : "
                   f"{con.c.type}, vector<2xbf16>")
        elif k.overwrite and con.narrowed_by is not None:    # written rounded to bf16
            narrow = t.emit(f"arith.truncf {value} : f32 to bf16")
            t.line(f"memref.store {narrow}, %C[{idx}] : {con.c.type}")
        elif k.overwrite:              # the output was all zeros: no need to read it
            t.line(f"memref.store {value}, %C[{idx}] : {con.c.type}")
        else:
            old = t.emit(f"memref.load %C[{idx}] : {con.c.type}")
            new = t.emit(f"arith.addf {old}, {value} : f32")
            t.line(f"memref.store {new}, %C[{idx}] : {con.c.type}")
        if cond is not None:
            t.line("}")


def open_edge_guard(t: _Text, k: _Kernel, row: str, col: str) -> str | None:
    """Open ``scf.if row < m and col < n`` where tiles do not divide the output (returns the
    condition, None when no guard is needed; the caller closes it)."""
    m, n = k.con.size("m"), k.con.size("n")
    guard = []
    if m % k.m_tile:
        guard.append(t.emit(f"arith.cmpi ult, {row}, {t.const(m)} : index"))
    if n % k.n_tile:
        guard.append(t.emit(f"arith.cmpi ult, {col}, {t.const(n)} : index"))
    cond = guard[0] if guard else None
    if len(guard) == 2:
        cond = t.emit(f"arith.andi {guard[0]}, {guard[1]} : i1")
    if cond is not None:
        t.line(f"scf.if {cond} {{")
    return cond


def output_index(k: _Kernel, batch: dict, row: str, col: str) -> str:
    """The output's index list at (batch, row, col)."""
    dims = dict(batch)
    dims.update(k.split("m", row))
    dims.update(k.split("n", col))
    return k.indices(-1, dims)


def _pairable(con: Contraction) -> bool:
    """Whether output columns col, col + 1 (col even) are adjacent elements, aligned for
    one store of both (4 bytes in a bf16 output, 8 in an f32 one): its last index is the
    last n loop, of even size (every other index then moves by a multiple of it), in an
    identity layout."""
    from mlir import ir

    ns = con.groups["n"]
    return bool(ns) and con.maps[-1][-1] == ("d", ns[-1]) and con.sizes[ns[-1]] % 2 == 0 \
        and ir.MemRefType(con.c.type).layout == ir.AffineMapAttr.get(
            ir.AffineMap.get_identity(ir.MemRefType(con.c.type).rank))


#: Output tiles are visited in groups of this many m-tiles when the output is wider than
#: that many n-tiles: each group's tiles column by column (every m-tile of the group, then
#: the next n-tile), then the next group; see :func:`tile_order`.
RASTER_GROUP = 8


def tile_order(gx: int, gy: int) -> int:
    """The group height (m-tiles) in which blocks take the output tiles of a ``gx`` x ``gy``
    tile grid (n-tiles x m-tiles), 0 for the grid's own order (block x = the n-tile, y =
    the m-tile: a row of tiles at a time).

    In the grid's order the blocks running at once share one row of A and read ~one
    wave's worth of B's columns; where B is wide that is all of B for every row of tiles
    (TinyMoE's LM head: 132 blocks cover all 32768 vocabulary columns, the 50 MB
    embedding read from DRAM again for each of the 256 rows of tiles, 3 TB/s for the
    whole kernel).  In groups of ``RASTER_GROUP`` m-tiles, a wave covers 8 m-tiles x ~16
    n-tiles: a few MB of A and B that stay in L2 while the group sweeps along n.  Which
    block computes which tile changes nothing in any tile's arithmetic."""
    return RASTER_GROUP if gx > RASTER_GROUP and gy > 1 else 0


def _begin(t: _Text, con: Contraction, k: _Kernel, m_tile: int, n_tile: int):
    tid = t.emit("gpu.thread_id x")
    bx = t.emit("gpu.block_id x")
    by = t.emit("gpu.block_id y")
    bz = t.emit("gpu.block_id z")
    return (tid,) + tile_coordinates(t, con, k, m_tile, n_tile, bx, by, bz)


def tile_coordinates(t: _Text, con: Contraction, k: _Kernel, m_tile: int, n_tile: int,
                     bx: str, by: str, bz: str):
    """(first output row, first column, batch indices) of the tile that block (``bx``,
    ``by``, ``bz``) of the kernel's grid computes (in groups of m-tiles: :func:`tile_order`),
    also set on ``k``; with split-K, ``bz`` also names the block's slice (``k.slice``)."""
    gx, gy = -(-con.size("n") // n_tile), -(-con.size("m") // m_tile)
    group = tile_order(gx, gy)
    if group:                           # block (bx, by) -> tile (n, m) in groups of m-tiles
        linear = t.add(t.mul(by, gx), bx)
        first = t.mul(t.arith("divui", linear, group * gx), group)
        height = t.arith("minui", t.arith("subi", t.const(gy), first), t.const(group))
        within = t.arith("remui", linear, group * gx)
        by = t.add(first, t.arith("remui", within, height))
        bx = t.arith("divui", within, height)
    m0 = t.mul(by, m_tile)
    n0 = t.mul(bx, n_tile)
    if k.splits > 1:                    # grid z = batch x slices
        k.slice = t.arith("remui", bz, k.splits)
        bz = t.arith("divui", bz, k.splits)
    batch = k.split("batch", bz) if con.groups["batch"] else {}
    k.m0, k.n0, k.batch = m0, n0, batch
    return m0, n0, batch


def k_tile_range(t: _Text, k: _Kernel, n_tiles: int) -> tuple[str, str]:
    """(first, end) of this block's k-tiles: all ``n_tiles``, or its split-K slice; fewer
    (maybe none) where a factor's rows are known zero (``empty_rows.bound_k_tiles``)."""
    if k.splits == 1:
        lo, hi = t.const(0), t.const(n_tiles)
    else:
        per = -(-n_tiles // k.splits)
        lo = t.mul(k.slice, per)
        hi = t.arith("minui", t.add(lo, per), n_tiles)
    if k.con.skip is not None:
        hi = empty_rows.bound_k_tiles(t, k, lo, hi)
    return lo, hi


def _for_k_tiles(t: _Text, k: _Kernel, n_tiles: int, n_acc: int, zero: str,
                 bounds: list | None = None):
    """Open the loop over this block's k-tiles (all of them, or its split-K slice); its
    bounds are appended to ``bounds`` when given."""
    kt = t.fresh()
    accs = [t.fresh() for _ in range(n_acc)]
    results = t.fresh()
    args = ", ".join(f"{a} = {zero}" for a in accs)
    types = ", ".join(["f32"] * n_acc)
    lo, hi = k_tile_range(t, k, n_tiles)
    if bounds is not None:
        bounds += [lo, hi]
    t.line(f"{results}:{n_acc} = scf.for {kt} = {lo} to {hi} "
           f"step {t.const(1)} iter_args({args}) -> ({types}) {{")
    return kt, accs, results


def mma_kernel_text(con: Contraction, name: str, splits: int = 1,
                    wide: bool = False) -> tuple[str, tuple, tuple, int]:
    """(gpu.module text, grid, block, dynamic shared bytes) of the tensor-core kernel.

    256 threads (8 warps, 2 x 4, each a 64x32 sub-tile) compute a 128x128 output tile; the
    k-tiles of 32 pass through ``STAGES`` shared-memory stages in dynamic shared memory, so
    the copies of tiles k+1 .. k+STAGES-1 are in flight while the warps multiply tile k
    (one barrier per k-tile).  Each operand is staged as :func:`_staging` decides: ``"k"``
    — its bf16 elements are contiguous along k: 16-byte ``cp.async`` copies (global ->
    shared, no registers) into a [rows][k] tile; ``"rows"`` — contiguous along its rows (a
    transposed operand, e.g. the activations of a weight gradient): ``cp.async`` into a
    [k][rows] tile, read back transposed; ``"k-f32"``/``"rows-f32"`` — the same layouts
    for an f32 input rounded to bf16 in the product, through 32-byte vector loads; or
    ``"load"`` — anything else (casts or index math fused in, unaligned): loaded and
    converted by the threads and stored into a [rows][k] tile.  Fragments are read with
    ``ldmatrix`` (``.trans`` for [k][rows] tiles) and multiplied with ``mma.sync``
    m16n8k16.  Tiles are padded by 8 elements per row so that the 8 rows an ``ldmatrix``
    reads fall in distinct banks.

    ``wide``: a 128x256 output tile, each warp 64x64 (twice the products per fragment read
    from shared memory; 128 accumulators per thread, one block per SM), for outputs with
    enough such tiles to fill the GPU (:func:`wide_tiles`)."""
    BM, BN, THREADS = 128, (256 if wide else 128), 256
    BK, STAGES = mma_k_tiling()
    WM, WN = 64, (64 if wide else 32)     # warp tile: 2 x 4 warps
    MT, NT = WM // 16, WN // 8        # mma tiles per warp
    t = _Text()
    k = _Kernel(con, t, (BM, BN, BK), narrow=True, splits=splits)
    M, N, K = con.size("m"), con.size("n"), con.size("k")
    tid, m0, n0, batch = _begin(t, con, k, BM, BN)
    warp = t.arith("divui", tid, 32)
    lane = t.arith("remui", tid, 32)
    wm = t.mul(t.arith("divui", warp, 4), WM)
    wn = t.mul(t.arith("remui", warp, 4), WN)
    zero = t.const(0.0, "f32")
    n_acc = MT * NT * 4
    n_tiles = -(-K // BK)
    operands = []                     # per factor: (staging, input, smem, type, rows, row0, group)
    for which, (rows, smem, row0, group) in enumerate(((BM, "%As", m0, "m"),
                                                       (BN, "%Bs", n0, "n"))):
        how, i = _staging(con, which, BK)
        rows_layout = how.startswith("rows")
        shape = f"{STAGES}x{BK}x{rows + 8}" if rows_layout else f"{STAGES}x{rows}x{BK + 8}"
        operands.append((how, i, smem, f"memref<{shape}xbf16, {_WG}>", rows, row0, group))

    def stage_tile(kt: str, stage: str) -> None:
        """Copy (or load and store) both factors' k-tile ``kt`` into shared stage ``stage``."""
        k0 = t.mul(kt, BK)
        for which, (how, i, smem, stype, rows, row0, group) in enumerate(operands):
            limit = con.size(group)
            if how == "load":
                _load_and_store(t, k, which, batch, tid, THREADS, rows, smem, stype, stage,
                                row0, group, k0, BK)
                continue
            mtype = con.inputs[i].type
            along_rows = how.startswith("rows")
            per_row = (rows if along_rows else BK) // 8       # 8-element chunks per tile row
            for n in range(rows * BK // 8 // THREADS):
                lin = t.add(tid, n * THREADS)
                r = t.arith("divui", lin, per_row)
                c8 = t.mul(t.arith("remui", lin, per_row), 8)
                if not along_rows:           # tile row r = factor row, chunk = 8 k
                    first = t.add(row0, r)
                    fr = t.arith("minui", first, limit - 1) if limit > 1 else t.const(0)
                    fk = t.add(k0, c8)
                else:                        # tile row r = k, chunk = 8 factor rows
                    first = t.add(row0, c8)
                    fr = t.arith("minui", first, limit - 8)
                    fk = t.add(k0, r)
                dims = dict(batch)
                dims.update(k.split(group, fr))
                dims.update(k.split("k", fk))
                copy_chunk(t, how, f"%I{i}[{k.indices(i, dims)}]", mtype,
                           f"{smem}[{stage}, {r}, {c8}]", stype,
                           past_the_factor(t, con, how, limit, rows, first))

    copies = any(how in ("k", "rows") for how, *_ in operands)
    lo_hi = []
    kt, accs, results = _for_k_tiles(t, k, n_tiles, n_acc, zero, lo_hi)
    lo, hi = lo_hi
    step = t.arith("subi", kt, lo)
    stage = t.arith("remui", step, STAGES)

    def stage_if_any(tile: str, into: str) -> None:
        """Stage k-tile ``tile`` (if this block has it) and commit one cp.async group
        (empty or not: the wait below counts groups)."""
        t.line(f"scf.if {t.emit(f'arith.cmpi ult, {tile}, {hi} : index')} {{")
        stage_tile(tile, into)
        t.line("}")
        if copies:
            t.line("nvvm.cp.async.commit.group")

    # prologue (first iteration): k-tiles lo .. lo + STAGES - 2 into stages 0 .. STAGES - 2
    t.line(f"scf.if {t.emit(f'arith.cmpi eq, {step}, {t.const(0)} : index')} {{")
    for j in range(STAGES - 1):
        stage_if_any(t.add(lo, j), t.const(j))
    t.line("}")
    if copies:      # tile kt's group is done once at most STAGES - 2 newer ones are pending
        t.line(f"nvvm.cp.async.wait.group {STAGES - 2}")
    t.line("gpu.barrier")       # tile kt is in `stage`; every warp is done with tile kt - 1
    # tile kt + STAGES - 1 into the stage tile kt - 1 used
    stage_if_any(t.add(kt, STAGES - 1),
                 t.arith("remui", t.add(step, STAGES - 1), STAGES))
    cur = list(accs)
    quarter = t.arith("divui", lane, 8)          # which 8x8 matrix this lane addresses
    row8 = t.arith("remui", lane, 8)             # which of its rows
    for s in range(BK // 16):
        afr = []
        how, _i, smem, stype, *_ = operands[0]
        for mi in range(MT):
            if how.startswith("rows"):   # [k][m]: (m 0-7|8-15) x (k 0-7|8-15), transposed
                kk = t.add(t.add(t.mul(t.arith("divui", quarter, 2), 8), row8), s * 16)
                mm = t.add(t.mul(t.arith("remui", quarter, 2), 8), t.add(wm, mi * 16))
                afr.append(_ldmatrix(t, smem, stype, stage, kk, mm, 4, True))
            else:                # [m][k]
                mm = t.add(t.add(wm, mi * 16), t.arith("remui", lane, 16))
                kk = t.add(t.mul(t.arith("divui", lane, 16), 8), s * 16)
                afr.append(_ldmatrix(t, smem, stype, stage, mm, kk, 4, False))
        bfr = []
        how, _i, smem, stype, *_ = operands[1]
        for ni in range(0, NT, 2):      # one x4 load: b0, b1 of n-tiles ni and ni + 1
            if how.startswith("rows"):   # [k][n]
                kk = t.add(t.add(t.mul(t.arith("remui", quarter, 2), 8), row8), s * 16)
                nn = t.add(t.mul(t.arith("divui", lane, 16), 8), t.add(wn, ni * 8))
                regs = _ldmatrix(t, smem, stype, stage, kk, nn, 4, True)
            else:                # [n][k]
                nn = t.add(t.add(t.mul(t.arith("divui", lane, 16), 8), row8),
                           t.add(wn, ni * 8))
                kk = t.add(t.mul(t.arith("remui", quarter, 2), 8), s * 16)
                regs = _ldmatrix(t, smem, stype, stage, nn, kk, 4, False)
            bfr += [regs[0:2], regs[2:4]]
        for mi in range(MT):
            for ni in range(NT):
                base = (mi * NT + ni) * 4
                c_in = ", ".join(cur[base:base + 4])
                d = t.emit(
                    f"nvvm.mma.sync A[{', '.join(afr[mi])}] B[{', '.join(bfr[ni])}] "
                    f"C[{c_in}] {{layoutA = #nvvm.mma_layout<row>, "
                    "layoutB = #nvvm.mma_layout<col>, "
                    "multiplicandAPtxType = #nvvm.mma_type<bf16>, "
                    "multiplicandBPtxType = #nvvm.mma_type<bf16>, "
                    "shape = #nvvm.shape<m = 16, n = 8, k = 16>} : "
                    "(i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>")
                for r in range(4):
                    cur[base + r] = t.emit(
                        f"llvm.extractvalue {d}[{r}] : !llvm.struct<(f32, f32, f32, f32)>")
    t.line(f"scf.yield {', '.join(cur)} : {', '.join(['f32'] * n_acc)}")
    t.line("}")
    g = t.arith("divui", lane, 4)
    tq = t.arith("remui", lane, 4)
    cells = []
    for mi in range(MT):
        for ni in range(NT):
            for r in range(4):
                row = t.add(t.add(m0, wm), t.add(g, mi * 16 + (8 if r >= 2 else 0)))
                col = t.add(t.add(n0, wn), t.add(t.mul(tq, 2), ni * 8 + r % 2))
                cells.append((row, col, f"{results}#{(mi * NT + ni) * 4 + r}"))
    _epilogue(k, t, batch, cells, pairs=True)
    # the stages live in dynamic shared memory (more than the 48 KiB of static shared
    # memory a kernel may declare): one byte buffer, a typed view per operand
    dyn = f"memref<?xi8, {_WG}>"
    views, offset = [f"%dyn = gpu.dynamic_shared_memory : {dyn}"], 0
    for _how, _i, smem, stype, *_ in operands:
        views.append(f"{smem} = memref.view %dyn[{t.const(offset)}][] : {dyn} to {stype}")
        offset += _bytes(stype)
    t.lines[:0] = views
    text = _module(name, _signature(con, None, THREADS, splits), t)
    grid = (-(-N // BN), -(-M // BM), max(1, con.size("batch")) * splits)
    return text, grid, (THREADS, 1, 1), offset


def copy_chunk(t: _Text, how: str, src: str, src_type: str, dst: str, dst_type: str,
               inside: str | None = None) -> None:
    """Eight bf16 factor elements from ``src`` into shared memory at ``dst``: one 16-byte
    ``cp.async``, or (staging ``*-f32``: an f32 input rounded to bf16 in the product) eight
    f32 loaded by the thread, rounded and stored.  ``inside`` (an i1, for a ``cp.async``):
    whether the chunk is one of the factor's; where it is not (a tile row past the factor's
    last, ``src`` the clamped address of the last row), the copy reads nothing and zero-fills
    (``srcElements`` 0) — see :func:`past_the_factor`."""
    if how.endswith("-f32"):
        x = t.emit(f"vector.load {src} {{alignment = 16}} : {src_type}, vector<8xf32>")
        y = t.emit(f"arith.truncf {x} : vector<8xf32> to vector<8xbf16>")
        t.line(f"vector.store {y}, {dst} {{alignment = 16}} : {dst_type}, vector<8xbf16>")
    else:
        count = ""
        if inside is not None:
            count = ", " + t.emit(f"arith.select {inside}, {t.const(8)}, {t.const(0)} : index")
        t.emit(f"nvgpu.device_async_copy {src}, {dst}, 8{count} {{bypassL1}} : {src_type} to "
               f"{dst_type}")


def past_the_factor(t: _Text, con: Contraction, how: str, limit: int, rows: int,
                    first: str) -> str | None:
    """For a ``cp.async``-staged factor of ``limit`` rows (along the tile's m or n) whose last
    tile of ``rows`` runs past it (``limit % rows``): the i1 "``first`` (the chunk's first
    factor row, before clamping) < ``limit``", for :func:`copy_chunk`; else None.  The
    clamped copies of the rows past the factor all read its last row: a router's 8 x 768
    weight in a 128-row tile sends 120 of every 128 rows' copies to the same 128 bytes, from
    every block at once (TinyMoE B32's router product: 65 us where its input alone takes
    ~17 at the copy rate).  Zero-filled rows only feed output rows / columns that are never
    stored."""
    if how.endswith("-f32") or limit % rows == 0 or not getattr(con, "fill_past", True):
        return None
    return t.emit(f"arith.cmpi ult, {first}, {t.const(limit)} : index")


def _bytes(memref_type: str) -> int:
    """Bytes of a static ``memref<AxBx...xbf16, ...>`` type written as text."""
    dims = memref_type[len("memref<"):].split(",")[0].split("x")
    return math.prod(int(d) for d in dims[:-1]) * {"bf16": 2, "f32": 4}[dims[-1]]


def _ldmatrix(t: _Text, smem: str, stype: str, stage: str, row: str, col: str, tiles: int,
              transpose: bool) -> list:
    """``ldmatrix`` of ``tiles`` 8x8 bf16 matrices (this lane addresses row ``row``, column
    ``col`` of stage ``stage``): one packed bf16 pair (i32) per matrix."""
    v = t.emit(f"nvgpu.ldmatrix {smem}[{stage}, {row}, {col}] {{numTiles = {tiles} : i32, "
               f"transpose = {str(transpose).lower()}}} : {stype} -> vector<{tiles}x2xbf16>")
    out = []
    for j in range(tiles):
        pair = t.emit(f"vector.extract {v}[{j}] : vector<2xbf16> from vector<{tiles}x2xbf16>")
        word = t.emit(f"vector.bitcast {pair} : vector<2xbf16> to vector<1xi32>")
        out.append(t.emit(f"vector.extract {word}[0] : i32 from vector<1xi32>"))
    return out


def _staging(con: Contraction, which: int, k_tile: int) -> tuple[str, int | None]:
    """How factor ``which`` reaches shared memory: ("k", input) when it is a bf16 input's
    element as it is, contiguous along k (16-byte ``cp.async`` copies); ("rows", input)
    when contiguous along its rows (a transposed operand); ("k-f32", input) / ("rows-f32", input) the same for an f32 input rounded to
    bf16 in the product (a matmul output read by the next one): 32-byte vector loads,
    rounded and stored by the threads; ("load", None) otherwise.  The vector forms need K a
    whole number of k-tiles and 16-byte aligned chunks: every buffer a kernel sees is
    Latch's own (the arena, state, input and output buffers: cuMemAlloc, 256-byte aligned;
    callers' tensors are copied in), so a 16-byte aligned offset is a 16-byte address."""
    from mlir import ir

    side = con.sides[which]
    v = side.narrow
    block = con.op.regions[0].blocks[0]
    if v is None or side.captured or con.size("k") % k_tile:
        return "load", None
    suffix = ""
    if not hasattr(v.owner, "arguments") and _op(v.owner).name == "arith.truncf":
        v, suffix = _op(v.owner).operands[0], "-f32"          # round an f32 input
    if not hasattr(v.owner, "arguments") or v.owner != block:
        return "load", None
    i = ir.BlockArgument(v).arg_number
    if i >= len(con.inputs):
        return "load", None
    mt = ir.MemRefType(con.inputs[i].type)
    strides, offset = mt.get_strides_and_offset()
    per_16_bytes = 4 if suffix else 8
    if str(mt.element_type) != ("f32" if suffix else "bf16") or strides[-1] != 1 or \
            mt.shape[-1] % 8 or offset % per_16_bytes or \
            any(st % per_16_bytes for st in strides[:-1]):
        return "load", None
    # the input's unit-stride dimension must be the fastest loop of the group it walks (a
    # group of several loops is flattened row-major) and a multiple of 8 long, so that 8
    # consecutive flattened indices from a multiple of 8 are 8 consecutive elements
    inner = con.maps[i][-1]
    for group, how in (("k", "k"), ("m" if which == 0 else "n", "rows")):
        dims = con.groups[group]
        if dims and inner == ("d", dims[-1]) and con.sizes[dims[-1]] % 8 == 0:
            return how + suffix, i
    return "load", None


def _load_and_store(t: _Text, k: _Kernel, which: int, batch: dict, tid: str, threads: int,
                    rows: int, smem: str, stype: str, stage: str, row0: str, group: str,
                    k0: str, k_tile: int) -> None:
    """Factor ``which``'s k-tile through the threads (its casts and index math applied on
    the way): consecutive threads walk the factor's contiguous dimension, each storing a
    bf16 pair into the [rows][k] tile."""
    pairs = k_tile // 2
    k_contig = k.contiguous_group(which) == "k"
    for n in range(rows * pairs // threads):
        if k_contig:
            r = t.add(t.arith("divui", tid, pairs), n * threads // pairs)
            kp = t.arith("remui", tid, pairs)
        else:
            r = t.arith("remui", tid, rows) if rows < threads else tid
            kp = t.add(t.arith("divui", tid, rows), n * threads // rows)
        grow = t.add(row0, r)
        kk = t.mul(kp, 2)
        for d in (0, 1):
            x = k.load(which, batch, group, grow, t.add(t.add(k0, kk), d))
            t.line(f"memref.store {x}, {smem}[{stage}, {r}, {t.add(kk, d)}] : {stype}")


def simt_kernel_text(con: Contraction, name: str, splits: int = 1) -> tuple[str, tuple, tuple, int]:
    """(gpu.module text, grid, block, dynamic shared bytes) of the f32 SIMT kernel."""
    BM, BN, BK, THREADS, R = 64, 64, 16, 256, 4
    t = _Text()
    k = _Kernel(con, t, (BM, BN, BK), narrow=False, splits=splits)
    M, N, K = con.size("m"), con.size("n"), con.size("k")
    tid, m0, n0, batch = _begin(t, con, k, BM, BN)
    tx = t.arith("remui", tid, 16)
    ty = t.arith("divui", tid, 16)
    zero = t.const(0.0, "f32")
    kt, accs, results = _for_k_tiles(t, k, -(-K // BK), R * R, zero)
    k0 = t.mul(kt, BK)
    tiles = ((BM, "%As", m0, "m"), (BN, "%Bs", n0, "n"))
    mask = con.indicator
    order = [0, 1] if mask is None else [mask, 1 - mask]
    nonzero = _stage_tile(t, k, batch, tid, k0, BK, THREADS, order[0], *tiles[order[0]],
                          track_nonzero=mask is not None)
    skip = None
    if mask is not None:
        # a 0/1 mask factor: a k-tile whose mask tile is all zero adds nothing, so the
        # block skips it (the other factor's loads and the FMAs) when no thread saw a one
        # (bar.red.or: the barrier that publishes the mask tile also ORs the flags)
        anyone = t.emit(f"nvvm.barrier #nvvm.reduction<or> {nonzero} -> i32")
        skip = t.emit(f"arith.cmpi ne, {anyone}, {t.const(0, 'i32')} : i32")
        types = ", ".join(["f32"] * (R * R))
        taken = t.fresh()
        t.line(f"{taken}:{R * R} = scf.if {skip} -> ({types}) {{")
    _stage_tile(t, k, batch, tid, k0, BK, THREADS, order[1], *tiles[order[1]])
    t.line("gpu.barrier")
    cur = list(accs)
    for kk in range(BK):
        a = [t.emit(f"memref.load %As[{t.const(kk)}, {t.add(ty, 16 * i)}] : "
                    f"memref<{BK}x{BM}xf32, {_WG}>") for i in range(R)]
        b = [t.emit(f"memref.load %Bs[{t.const(kk)}, {t.add(tx, 16 * j)}] : "
                    f"memref<{BK}x{BN}xf32, {_WG}>") for j in range(R)]
        for i in range(R):
            for j in range(R):
                cur[i * R + j] = t.emit(f"math.fma {a[i]}, {b[j]}, {cur[i * R + j]} : f32")
    t.line("gpu.barrier")
    if skip is not None:
        t.line(f"scf.yield {', '.join(cur)} : {types}")
        t.line("} else {")
        t.line(f"scf.yield {', '.join(accs)} : {types}")
        t.line("}")
        cur = [f"{taken}#{i}" for i in range(R * R)]
    t.line(f"scf.yield {', '.join(cur)} : {', '.join(['f32'] * (R * R))}")
    t.line("}")
    cells = []
    for i in range(R):
        for j in range(R):
            cells.append((t.add(m0, t.add(ty, 16 * i)), t.add(n0, t.add(tx, 16 * j)),
                          f"{results}#{i * R + j}"))
    _epilogue(k, t, batch, cells)
    workgroup = (f"%As : memref<{BK}x{BM}xf32, {_WG}>, "
                 f"%Bs : memref<{BK}x{BN}xf32, {_WG}>")
    text = _module(name, _signature(con, workgroup, THREADS, splits), t)
    grid = (-(-N // BN), -(-M // BM), max(1, con.size("batch")) * splits)
    return text, grid, (THREADS, 1, 1), 0


def _stage_tile(t: _Text, k: _Kernel, batch: dict, tid: str, k0: str, BK: int, threads: int,
                which: int, tile: int, smem: str, row0: str, row_group: str,
                track_nonzero: bool = False) -> str | None:
    """Store factor ``which``'s ``BK`` x ``tile`` tile at k-offset ``k0`` into shared memory
    (``smem[kk, row]``), each thread loading along the factor's contiguous dimension;
    with ``track_nonzero``, return an i32 that is 1 where this thread stored a nonzero."""
    k_contig = k.contiguous_group(which) == "k"
    seen = t.const(0, "i32") if track_nonzero else None
    for i in range(tile * BK // threads):
        if k_contig:
            r = t.add(t.arith("divui", tid, BK), i * threads // BK)
            kk = t.arith("remui", tid, BK)
        else:
            r = t.arith("remui", tid, tile)
            kk = t.add(t.arith("divui", tid, tile), i * threads // tile)
        x = k.load(which, batch, row_group, t.add(row0, r), t.add(k0, kk))
        t.line(f"memref.store {x}, {smem}[{kk}, {r}] : memref<{BK}x{tile}xf32, {_WG}>")
        if track_nonzero:
            nz = t.emit(f"arith.cmpf une, {x}, {t.const(0.0, 'f32')} : f32")
            seen = t.emit(f"arith.ori {seen}, {t.emit(f'arith.extui {nz} : i1 to i32')} : i32")
    return seen


def _module(name: str, signature: str, t: _Text) -> str:
    body = "\n      ".join(t.const_lines + t.lines)
    return (f"gpu.module @{name} {{\n  {signature}\n      {body}\n"
            "      gpu.return\n    }\n}")


# ---------------------------------------------------------------------------------------
# the pass
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FormContractionKernels(ModulePass):
    name = "latch-form-contraction-kernels"
    summary = ("replace matmul-like linalg.generic contractions on memrefs by launches of "
               "tiled kernels (bf16 tensor-core mma.sync, or f32 SIMT)")

    mma: bool = True
    scatter: bool = True
    gather: bool = True
    deterministic: bool = False
    chip: str = "sm_90"
    #: products skip the rows a one-hot gather left zero (passes/empty_rows.py)
    empty_rows: bool = True
    #: elementwise kernels between them load nothing in those rows
    #: (empty_rows.skip_row_loads; with empty_rows)
    empty_row_loads: bool = True
    #: a gather thread reads its consecutive columns of a source row as one vector
    #: (one_hot_gather._lane_values); false: one element a load
    gather_lanes: bool = True
    #: a gather also adds the term of the elementwise generic right after it that adds one
    #: to its output in place (one_hot_gather.additive_reader); false: that pass stays
    gather_readers: bool = True
    #: where a gather's overflow walk runs (one_hot_gather.WALKS): "launch" in a launch of
    #: its own after the gather (the default: measured faster, docs/results-log.md
    #: 2026-12-07); "last" in the gather's own launch, in blocks after the gathering ones
    #: (one_hot_gather._gather_launch; its heavy rows take every sum by float atomics and,
    #: into a bf16 copy, per-piece counts: at B32 the MoE gathers took 0.4 ms more an
    #: update than gather + walk launch); "first" in blocks before them
    gather_walk: str = "launch"
    #: a split-K product whose zeroed f32 output only its bf16 rounding reads: the launch
    #: adding the slices writes that rounding (:func:`_round_partial_sums`); false: the
    #: slices added into the f32 output, then the rounding launch
    round_sums: bool = True
    #: the tile rows past a factor shorter than its tile (a router's 8 rows of 128) are
    #: zero-filled by copies that read nothing (:func:`past_the_factor`); false: clamped
    #: copies of the factor's last row, as before
    fill_past_factor: bool = True
    #: which elementwise ops right after a product with a staged bf16 output (the SwiGLU
    #: backward after the experts' input gradient) its epilogue computes
    #: (passes/epilogue_readers.py, :data:`epilogue_readers.POLICIES`): "large" those
    #: that leave the product unstored on a grid of several waves, "all" every one that
    #: matches, "none" none (the same bits either way)
    epilogue_readers: str = "large"
    #: such a product asks L2 for its reader's other inputs before its k-loop
    #: (epilogue_readers.prefetch_rows); off by default: measured slower on an H100
    #: (TinyMoE B32 57.22 vs 56.85 ms, the products' time +0.47 ms)
    epilogue_prefetch: bool = False
    #: 2: the large wgmma products (contraction_wgmma.paired_blocks) as two resident
    #: blocks an SM, 128 x 128 tiles in three stages, so that one block's epilogue
    #: overlaps the other's multiplies; 1: one block an SM, 128 x 256 (or 128) tiles in
    #: four stages
    blocks_per_sm: int = 1
    #: the wgmma products of more than one wave (no k slices, one block an SM) as
    #: persistent blocks (contraction_wgmma.persistent_blocks): one block an SM walks its
    #: tiles, staging the next tile's first k-tiles while the last one goes out (B32 on an
    #: H100: -1.2% in both engine orders; B2 even); false: a block a tile
    persistent: bool = True

    def __post_init__(self):
        if self.blocks_per_sm not in (1, 2):
            raise PipelineError(
                f"pass '{self.name}': blocks-per-sm={self.blocks_per_sm} is not 1 or 2")
        if self.gather_walk not in one_hot_gather.WALKS:
            raise PipelineError(
                f"pass '{self.name}': gather-walk={self.gather_walk} is not one of "
                + ", ".join(one_hot_gather.WALKS))
        if self.epilogue_readers not in epilogue_readers.POLICIES:
            raise PipelineError(
                f"pass '{self.name}': epilogue-readers={self.epilogue_readers} is not one of "
                + ", ".join(epilogue_readers.POLICIES))

    def apply(self, module) -> None:
        from mlir import ir
        from mlir.dialects import gpu

        top = module.regions[0].blocks[0]
        found = []
        for f in function_definitions(module):
            for op in list(f.regions[0].blocks[0].operations):
                con = match_contraction(_op(op))
                if con is not None:
                    found.append(con)
        if not found:
            return
        module.attributes["gpu.container_module"] = ir.UnitAttr.get()
        taken = symbol_names(module)
        planned = []
        scatters = [match_one_hot_scatter(con) if self.scatter else None for con in found]
        if self.deterministic:               # no order-free form: keep the contraction
            scatters = [sc if sc is not None and fixed_point.applies(sc) else None
                        for sc in scatters]
        exact = _fixed_point_workspaces(scatters) if self.deterministic else {}
        gathers = [sc if sc is not None and self.gather and not self.deterministic and
                   one_hot_gather.applies(sc) else None for sc in scatters]
        copies = [one_hot_gather.rounded_copy(g) if g is not None else None for g in gathers]
        copy_of = {id(g): c for g, c in zip(gathers, copies) if g is not None}
        grouped = _workspaces(gathers, lambda g: one_hot_gather.workspace_bytes(
            g, copy_of[id(g)]))
        zero_rows, skips, readers = empty_rows.plan(found, scatters, gathers, copies) \
            if self.empty_rows else ({}, {}, [])
        if self.empty_row_loads:     # rebuilt once the products have taken theirs
            for n, (reader, _) in enumerate(readers):
                reader.attributes[_ROW_READER] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), n)
        for j, (con, scatter, gather) in enumerate(zip(found, scatters, gathers)):
            if scatter is not None:          # a one-hot product: K x N atomic adds instead
                if gather is not None:       # sources grouped by row, a thread per element
                    copy = copies[j]
                    reader = one_hot_gather.additive_reader(gather) if self.gather_readers \
                        and copy is None and zero_rows.get(j) is None else None
                    one_hot_gather.emit_gather(gather, grouped[_block_key(con.op)], copy,
                                               zero_rows.get(j), self.gather_lanes, reader,
                                               self.gather_walk)
                    if copy is not None:
                        copy[0].erase()
                    if reader is not None:   # its term is where the gather's threads start
                        reader.erase()
                    for zeroing in con.zeroed_by or []:     # every element read is written
                        zeroing.erase()
                elif self.deterministic:     # in integers: the sum is the same in any order
                    fixed_point.emit_fixed_point_scatter(scatter, exact[_block_key(con.op)])
                else:
                    emit_scatter(scatter)
                con.op.erase()
                erase_dead_mask_writer(scatter)
                continue
            name = fresh_symbol("latch_contract_", taken)
            con.fill_past = self.fill_past_factor
            if j in skips and empty_rows.pays(con, skips[j], self.chip):  # its extents:
                con.skip = skips[j]                                  # one more argument
                con.captured = list(con.captured) + [con.skip.extents]
                con.skip.arg = len(con.captured) - 1
            make = mma_kernel_text if (self.mma and con.mma) else simt_kernel_text
            k_tile = _K_TILE[simt_kernel_text] if make is simt_kernel_text else \
                mma_k_tiling()[0]
            wgmma = False
            walking = 0              # persistent blocks (contraction_wgmma.persistent_blocks)
            if make is mma_kernel_text and self.chip == "sm_90a":
                from latch.passes import contraction_wgmma as wg
                wgmma = wg.wgmma_applies(con)
                if wgmma:
                    make, k_tile = wg.wgmma_kernel_text, wg.BK
            if make is mma_kernel_text and wide_tiles(con):
                make = _wide_mma_kernel_text
            if wgmma:                # its slices come from a cost model, not from the grid
                splits = wg.tiling(con)[1]
                if self.blocks_per_sm == 2 and wg.paired_blocks(con, splits):
                    make = functools.partial(make, bn=wg.PAIRED_BN, stages=wg.PAIRED_STAGES,
                                             blocks_per_sm=2)
                elif self.persistent:
                    walking = wg.persistent_blocks(con, splits)
                    if walking:
                        make = functools.partial(make, persistent=walking)
                text, grid, block, shared = make(con, name, splits)
            else:
                text, grid, block, shared = make(con, name)
                splits = split_factor(grid, -(-con.size("k") // k_tile))
                if splits > 1:
                    text, grid, block, shared = make(con, name, splits)
            if splits == 1 and con.zeroed_by is not None:
                narrowing = _narrowing_reader(con)
                rounding = _rounding_readers(con) if narrowing is None and \
                    ROUND_FOR_READERS else None
                if narrowing is not None:   # write the bf16 copy its only reader makes
                    _hoist_between(con.op, narrowing)    # its allocation comes first
                    con.narrowed_by, con.c = narrowing, narrowing.operands[1]
                    text, grid, block, shared = make(con, name)
                elif rounding is not None:  # write rounded what its readers round
                    f32_out = con.c
                    con.narrowed_by, con.c = rounding[0][0], _round_in_place(con, rounding)
                    con.reader_rounds = f32_out
                    text, grid, block, shared = make(con, name)
            elif splits > 1 and con.zeroed_by is not None and self.round_sums:
                # the launch adding the slices writes the bf16 copy its only reader makes
                # (after the product: no slot of its operands is written while they are read)
                con.narrowed_by = _narrowing_reader(con, check_slots=False)
                if con.narrowed_by is not None:
                    _hoist_between(con.op, con.narrowed_by)    # its allocation comes first
            if self.epilogue_readers != "none" and wgmma and wg.stages(con, splits):
                reader = epilogue_readers.match(con, list(con.inputs) + list(con.captured))
                tiles = wg.tile_grid(con, splits) if walking else grid  # not the blocks
                if reader is not None and epilogue_readers.pays(
                        reader, tiles, self.epilogue_readers):  # computed in its epilogue
                    con.reader = reader
                    reader.prefetch = self.epilogue_prefetch
                    # the allocations and views of its buffers before the launch
                    _hoist_between(con.op, reader.generic, only=NO_MEMORY_EFFECTS)
                    if con.skip is not None:    # its buffers before the extents (last)
                        con.captured = [v for v in con.captured if v != con.skip.extents]
                    epilogue_readers.kernel_operands(con, reader)
                    if con.skip is not None:
                        con.captured.append(con.skip.extents)
                        con.skip.arg = len(con.captured) - 1
                    text, grid, block, shared = make(con, name)
                    assert epilogue_readers.PLACEHOLDER in text, name
            planned.append((con, name, text, grid, block, shared, splits))
        workspaces = _split_k_workspaces(planned)
        index = ir.IndexType.get()
        for con, name, text, grid, block, shared, splits in planned:
            parsed = ir.Module.parse(text)
            kernel_module = _op(parsed.body.operations[0])
            ir.InsertionPoint(top).insert(kernel_module.detach_from_parent())
            _expand_factors(kernel_module, con, text.count(f'"{_PLACEHOLDER}"'))
            if con.reader is not None:
                epilogue_readers.expand(kernel_module, con.reader)
            with ir.InsertionPoint(con.op), con.op.location:
                def c(v):
                    return ir.Operation.create(
                        "arith.constant", [index],
                        attributes={"value": ir.IntegerAttr.get(index, v)}).result
                out = con.c
                if splits > 1:     # this contraction's view of its function's workspace
                    out = ir.Operation.create(
                        "memref.view", [ir.Type.parse(workspace_type(con, splits))],
                        [workspaces[_block_key(con.op)], c(0)]).result
                shared_size = ir.Operation.create(
                    "arith.constant", [ir.IntegerType.get_signless(32)],
                    attributes={"value": ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(32), shared)}).result if shared else None
                gpu.LaunchFuncOp([name, KERNEL], tuple(c(v) for v in grid),
                                 tuple(c(v) for v in block),
                                 list(con.inputs) + [out] + list(con.captured),
                                 dynamic_shared_memory_size=shared_size)
                if splits > 1 and con.narrowed_by is not None:
                    _round_partial_sums(out, splits, zeroing_value(con.zeroed_by),
                                        con.narrowed_by.operands[1])
                elif splits > 1:
                    _add_partial_sums(out, con.c)
            con.op.erase()
            if con.zeroed_by is not None and (splits == 1 or con.narrowed_by is not None):
                for zeroing in con.zeroed_by:     # every element is written
                    zeroing.erase()
            if con.reader_rounds is not None:    # the f32 buffer nothing uses any more
                if not list(con.reader_rounds.uses):
                    _op(con.reader_rounds.owner).erase()
            elif con.narrowed_by is not None:
                con.narrowed_by.erase()
            if con.reader is not None:     # its launch is the product's
                con.reader.generic.erase()
        if self.empty_row_loads and readers:
            _skip_row_loads(module, [rows for _, rows in readers])


#: marks an elementwise reader of expert rows (empty_rows.plan) until the products are
#: formed: the ones that a product's epilogue took over (a bf16 copy it writes) are gone
_ROW_READER = "latch.empty_row_reader"


def _skip_row_loads(module, rows: list) -> None:
    """Rebuild each generic still marked :data:`_ROW_READER` ``n`` by
    ``empty_rows.skip_row_loads`` with ``rows[n]``."""
    from mlir import ir

    marked = []

    def visit(op):
        if op.name == "linalg.generic" and _ROW_READER in op.attributes:
            marked.append(_op(op))
        return ir.WalkResult.ADVANCE
    for f in function_definitions(module):    # not the kernels' gpu.modules
        f.walk(visit)
    for op in marked:
        n = ir.IntegerAttr(op.attributes[_ROW_READER]).value
        del op.attributes[_ROW_READER]
        empty_rows.skip_row_loads(op, rows[n])


def _block_key(op) -> int:
    """Identity of the block holding ``op`` (its function body)."""
    return hash(op.operation.block) if hasattr(op, "operation") else hash(op.block)


def _fixed_point_workspaces(scatters) -> dict:
    """The workspaces of the one-hot scatters summed in fixed point
    (passes/fixed_point_scatter.py): :func:`_workspaces`."""
    return _workspaces(scatters, fixed_point.workspace_bytes)


def _workspaces(scatters, size_of) -> dict:
    """{function block key: an i8 allocation at the top of its body} large enough for the
    workspace (``size_of(scatter)`` bytes) of each of its one-hot scatters (``scatters``: a
    Scatter or None per contraction); they run in stream order and each consumes the
    workspace within its own launches, so the largest need is enough."""
    need: dict = {}
    blocks: dict = {}
    for sc in scatters:
        if sc is not None:
            key = _block_key(sc.con.op)
            need[key] = max(need.get(key, 0), size_of(sc))
            blocks[key] = sc.con.op.operation.block
    return {key: _byte_allocation(blocks[key], size) for key, size in need.items()}


def _byte_allocation(block, size: int):
    """A ``memref<size x i8>`` workspace at the top of ``block``."""
    from mlir import ir

    return top_allocation(block, ir.Type.parse(f"memref<{size}xi8>"))


def _split_k_workspaces(planned) -> dict:
    """One workspace per function for all its split-K partial sums: launches run in stream
    order and each partial-sum kernel consumes the workspace right after its contraction,
    so the largest need is enough.  An i8 allocation at the top of the function body (an
    unshared slot after the planned arena); each contraction takes a ``memref.view`` of it."""
    from mlir import ir

    need: dict = {}
    blocks: dict = {}
    for con, _name, _text, _grid, _block, _shared, splits in planned:
        if splits > 1:
            key = _block_key(con.op)
            size = 4 * splits
            for d in ir.MemRefType(con.c.type).shape:
                size *= d
            need[key] = max(need.get(key, 0), size)
            blocks[key] = con.op.operation.block
    return {key: _byte_allocation(blocks[key], size) for key, size in need.items()}


# k-tile depth of each kernel (split-K slices whole k-tiles)
#: k-tiles of 64 in three stages instead of 32 in four: half the barriers and cp.async
#: waits per product, the same two blocks per SM (108 KiB of stages each).  Off: measured
#: on the H200 (bench/results/gemm_shapes-20261130T190940Z.json, bench/gemm_shapes.py build
#: --variant deep, side by side) it was slower on 7 of the 12 shapes (experts -12%, the LM
#: head's input gradient -17%; the LM head +9%): the longer fill and drain of a 3-deep
#: pipeline of 64-wide tiles costs more than the barriers it saves.
DEEP_K_TILES = False


def mma_k_tiling() -> tuple[int, int]:
    """(k-tile, stages) of the tensor-core kernel."""
    return (64, 3) if DEEP_K_TILES else (32, 4)


def _wide_mma_kernel_text(con: Contraction, name: str, splits: int = 1):
    return mma_kernel_text(con, name, splits, wide=True)


#: Use the 128x256 tensor-core tile where :func:`wide_tiles` allows.  Off: measured on the
#: H200 (bench/results/gemm_shapes-20261130T190052Z.json, side by side with the 128x128
#: tile) it was 5-20% slower on every B32 shape but the LM head (+5%) and B32's update 3.7%
#: slower (152.0 vs 146.5 ms, tinymoe_bench-20261130T190059Z.json): with 128 accumulators a
#: thread, one block of 8 warps per SM is too few warps to hide the ldmatrix -> mma.sync
#: latency, which the 128x128 tile's two blocks per SM do.  Kept (SIMT-tested) for the
#: warp-specialized pipeline it would need; bench/gemm_shapes.py build --variant wide
#: measures it.
WIDE_TILES = False


def wide_tiles(con: Contraction) -> bool:
    """Whether a tensor-core contraction takes the 128x256 tile: at least 256 output
    columns and enough such tiles for a few waves of one block per SM (the wide kernel's
    registers allow one), so that no split-K is wanted."""
    if not WIDE_TILES:
        return False
    m, n = con.size("m"), con.size("n")
    tiles = -(-m // 128) * -(-n // 256) * max(1, con.size("batch"))
    return n >= 256 and tiles >= _WIDE_MIN_TILES


_WIDE_MIN_TILES = 528       # _WAVE_BLOCKS (defined below): a few waves of one block per SM
_K_TILE = {simt_kernel_text: 16}       # the mma.sync kernel's: mma_k_tiling()
_WAVE_BLOCKS = 528         # blocks that fill the H200 a few times over (132 SMs x 4)
_MAX_SPLITS = 16
_MIN_TILES_PER_SLICE = 4


def split_factor(grid, k_tiles: int) -> int:
    """How many k slices to give each output tile (split-K): when the output tiles alone
    cannot fill the GPU (a weight gradient: a small output, a long reduction over tokens),
    enough slices to reach about ``_WAVE_BLOCKS`` blocks, each keeping at least
    ``_MIN_TILES_PER_SLICE`` k-tiles; 1 otherwise."""
    tiles = grid[0] * grid[1] * grid[2]
    return max(1, min(_MAX_SPLITS, _WAVE_BLOCKS // tiles, k_tiles // _MIN_TILES_PER_SLICE))


def _add_partial_sums(workspace, c) -> None:
    """``c[i] += sum_s workspace[s, i]`` as a linalg.generic (slices summed in order:
    deterministic), its loops ordered as latch-wrap-host-compute, which ran before it was
    made, orders every other generic (:func:`~latch.passes.generic_body.order_loops`:
    coalesced once mapped)."""
    from mlir import ir

    rank = ir.MemRefType(c.type).rank
    n = rank + 1
    dims = [ir.AffineDimExpr.get(d) for d in range(n)]      # loop 0: the slice
    maps = [ir.AffineMap.get(n, 0, dims), ir.AffineMap.get(n, 0, dims[1:])]
    body = _buffer_generic([workspace], c, maps, ["reduction"] + ["parallel"] * rank)
    with ir.InsertionPoint(body):
        total = ir.Operation.create("arith.addf", [ir.F32Type.get()],
                                    [body.arguments[1], body.arguments[0]]).result
        ir.Operation.create("linalg.yield", [], [total])
    order_loops(body.owner)


def _buffer_generic(inputs: list, output, maps: list, iterators: list):
    """A ``linalg.generic`` on memrefs at the current insertion point — ``inputs`` and the
    one ``output`` indexed by ``maps``, loops of ``iterators`` ("parallel"/"reduction");
    returns its body block (one argument per operand, of its element type) for the caller
    to fill (and then to order: made after latch-wrap-host-compute, it is not ordered)."""
    from mlir import ir

    operands = list(inputs) + [output]
    generic = ir.Operation.create(
        "linalg.generic", [], operands,
        attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                    "iterator_types": ir.ArrayAttr.get(
                        [ir.Attribute.parse(f"#linalg.iterator_type<{x}>") for x in iterators]),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(inputs), 1])},
        regions=1)
    return generic.regions[0].blocks.append(
        *[ir.MemRefType(v.type).element_type for v in operands])


def _round_partial_sums(workspace, splits: int, zero, rounded) -> None:
    """``rounded[i] = bf16(((zero + w[0, i]) + w[1, i]) + ...)`` as an all-parallel
    linalg.generic reading each slice of the split-K ``workspace`` (a view each): the sums
    of :func:`_add_partial_sums` onto the output's zeros, in the same order, then the
    rounding its reader did — the same bits, without the f32 output written and read back
    and without the rounding launch (TinyMoE's expert weight gradients; option
    ``round-sums``)."""
    from mlir import ir

    ws_type = ir.MemRefType(workspace.type)
    shape = list(ws_type.shape[1:])
    slice_bytes = 4 * math.prod(shape)
    f32 = ir.F32Type.get()
    index = ir.IndexType.get()
    base = _op(workspace.owner).operands[0]           # the i8 workspace the view is of
    first = _op(workspace.owner).operands[1]          # its byte offset (a constant)
    slices = []
    for s in range(splits):
        at = ir.Operation.create("arith.addi", [index], [first, index_constant(s * slice_bytes)])
        slices.append(ir.Operation.create("memref.view", [ir.MemRefType.get(shape, f32)],
                                          [base, at.result]).result)
    identity = ir.AffineMap.get_identity(len(shape))
    body = _buffer_generic(slices, rounded, [identity] * (splits + 1),
                           ["parallel"] * len(shape))
    with ir.InsertionPoint(body):
        total = ir.Operation.create("arith.constant", [f32], attributes={"value": zero}).result
        for s in range(splits):
            total = ir.Operation.create("arith.addf", [f32],
                                        [total, body.arguments[s]]).result
        narrow = ir.Operation.create("arith.truncf", [ir.BF16Type.get()], [total]).result
        ir.Operation.create("linalg.yield", [], [narrow])
    # ordered as latch-wrap-host-compute, which ran before it was made, orders every other
    # generic: in its own order the first loop, the experts, went to consecutive threads
    # (the expert weight gradients' sums took 0.198 ms a launch at B32, 317 GB/s)
    order_loops(body.owner)


def load_factor_inputs(con: Contraction, side: Operand, inputs, dims, mapping: dict,
                       lanes: int = 1, along=()) -> dict:
    """Load, at the loop indices ``dims``, the generic inputs that factor ``side`` reads,
    from ``inputs`` (the generic's own inputs, or a kernel's arguments standing for them);
    ``mapping`` receives the body arguments' replacements.  The inputs numbered in
    ``along`` are loaded instead as one ``vector.load`` of ``lanes`` elements each
    (consecutive along their last index, from ``dims``'): returns {body argument: vector}."""
    from mlir import ir

    block = con.op.regions[0].blocks[0]
    zero = None
    vectors = {}
    for i in side.args:
        idx = []
        for kind, d in con.maps[i]:
            if kind == "d":
                idx.append(dims[d])
            else:
                if zero is None:
                    zero = index_constant(0)
                idx.append(zero)
        elt = ir.MemRefType(con.inputs[i].type).element_type
        if i in along:
            vectors[block.arguments[i]] = ir.Operation.create(
                "vector.load", [ir.VectorType.get([lanes], elt)], [inputs[i]] + idx,
                attributes={"alignment": ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), lanes * element_bits(elt) // 8)}).result
        else:
            mapping[block.arguments[i]] = ir.Operation.create(
                "memref.load", [elt], [inputs[i]] + idx).result
    return vectors


def _expand_factors(kernel_module, con: Contraction, expected: int) -> None:
    """Replace each factor placeholder of the kernel by the factor's body ops, cloned with
    the generic's inputs read at the placeholder's loop indices."""
    from mlir import ir

    func = next(_op(o) for o in kernel_module.regions[0].blocks[0].operations
                if _op(o).name == "gpu.func")
    entry = func.regions[0].blocks[0]
    n_in = len(con.inputs)
    inputs = list(entry.arguments)[:n_in]
    captured = list(entry.arguments)[n_in + 1:]
    # the kernels emit every factor load in the body of the k-tile loop (a top-level
    # scf.for) or in the scf.ifs there (nested: the tiles a block stages, the skipping of
    # all-zero mask tiles): searching those blocks (not the whole kernel) keeps this linear
    loops = [_op(o) for o in entry.operations if _op(o).name == "scf.for"]
    blocks = [loop.regions[0].blocks[0] for loop in loops]
    for b in blocks:                     # grows while it is walked: the ifs' blocks too
        blocks += [_op(o).regions[0].blocks[0] for o in b.operations
                   if _op(o).name == "scf.if"]
    placeholders = [_op(o) for b in blocks for o in b.operations
                    if _op(o).name == _PLACEHOLDER]
    if len(placeholders) != expected:      # the generators put every load in those blocks
        raise AssertionError(f"found {len(placeholders)} of {expected} factor placeholders")
    for ph in placeholders:
        side = con.sides[ir.IntegerAttr(ph.attributes["side"]).value]
        dims = list(ph.operands)
        mapping = {}
        with ir.InsertionPoint(ph), ph.location:
            load_factor_inputs(con, side, inputs, dims, mapping)
            for v in side.captured:
                if isinstance(v.type, ir.MemRefType):
                    mapping[v] = captured[next(j for j, w in enumerate(con.captured) if w == v)]
                else:
                    mapping[v] = _op(v.owner).clone().results[0]
            clone_body_ops(side.ops, mapping, dims)
        narrow = ir.BoolAttr(ph.attributes["narrow"]).value
        ph.results[0].replace_all_uses_with(mapping[side.narrow if narrow else side.value])
        ph.erase()
