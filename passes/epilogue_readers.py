"""Elementwise readers of a product computed in its epilogue (part of
``latch-form-contraction-kernels``, option ``epilogue-readers``: by default only those that
measured faster, :func:`pays`).

The wgmma kernel writes a bf16 output through shared memory (``contraction_wgmma.
_staged_epilogue``): each thread ends holding 8 consecutive columns of one output row.  When
the op that comes right after the product is an all-parallel ``linalg.generic`` that reads
that output element for element — the SwiGLU backward ``(dh, a, b) -> (dh * silu'(a) ..,
dh * silu(a))`` after the experts' input-gradient product ``dh = dy @ w2^T``, the SwiGLU
forward ``silu(a) * b`` after ``b = x @ w3``, a gradient accumulator ``acc + g`` after a
weight gradient — the epilogue computes it there: it loads the reader's other inputs at
the same 8 elements (16-byte vectors), runs the reader's body on each, stores the reader's
outputs, and stores the product itself only if something after the reader reads it.  The
reader's launch goes, and with it a write and a read of the product (``dh``: 2 x 168 MB a
layer at TinyMoE B32).

Applies when (:func:`match`): the reader is the first op after the product that touches
its output (passed over: allocations, views, constants, the product's own rounding copy,
which the kernel writes, and at most 256 other ops that define no values and share no
byte with the reader's buffers — it now runs before them: the next product's zero fill,
or for a gradient accumulator the rest of the backward pass); it reads the product's bf16
output as one input; every operand of it has the output's shape and the same indexing map (a permutation), so that one index list addresses
an element of each; its other operands have the identity layout and bf16 or f32 elements;
its body is ``arith`` / ``math`` ops of its input elements (no ``linalg.index``, no output
element read); an output is either one of its inputs (written in place: the thread reads
before it writes, as the reader's own kernel did) or shares no planned arena bytes with
its inputs; and no output shares arena bytes with the product's factors (the memory plan
may give a buffer that is live from the reader on the slot of a factor whose last reader
is the product — written by one block while another still reads it).

Rows that the product skips (``passes/empty_rows.py``) are computed from its zeros: the
plan only took the reader's outputs as zero there when its body maps a zero product
element to zero whatever its other (finite) inputs, so they still are.

The body is cloned per element after the kernel text is parsed (:func:`expand`), as the
factors' bodies are (``form_contraction_kernels._expand_factors``).
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import element_bits, operation as _op
from latch.passes.buffer_views import INERT, held_users, identity_layout, may_share_bytes, \
    memrefs_used, root

PLACEHOLDER = "latch.epilogue_reader"   # one element's reader body, expanded after parsing
LANES = 8                               # a staged-epilogue piece: 8 bf16 columns, 16 bytes
#: pieces whose reader inputs a thread loads before it computes and stores any of them
GROUP = 4
_ELEMENTS = ("bf16", "f32")
_MAX_BETWEEN = 256                      # other ops the reader may be moved across

#: ``epilogue-readers`` values (:func:`pays`)
POLICIES = ("large", "all", "none")
#: blocks (of one per SM: the stages take 128-192 KiB) a product's grid needs for "large":
#: four waves on the 132 SMs of an H100 / H200
MIN_BLOCKS = 4 * 132


@dataclasses.dataclass
class Reader:
    """The elementwise reader ``generic`` a product's epilogue computes: ``operands`` its
    operands in order (inputs, then outputs), ``body`` its body ops (yield excluded),
    ``store_product`` whether the product's own value is still stored (read after the
    reader and not overwritten by it)."""
    generic: object
    n_inputs: int
    operands: list
    body: list
    store_product: bool
    prefetch: bool = False     # its other inputs' tile rows prefetched to L2 (prefetch_rows)

    def inputs(self) -> list:
        return self.operands[:self.n_inputs]

    def outputs(self) -> list:
        return self.operands[self.n_inputs:]

    def other_inputs(self, product) -> list:
        """Its inputs other than the ``product``'s output, each once."""
        found = []
        for v in self.inputs():
            if v != product and v not in found:
                found.append(v)
        return found


def match(con, factors) -> Reader | None:
    """The :class:`Reader` of the product ``con`` (its output ``con.c`` a bf16 buffer the
    kernel writes whole, rounded) whose factor buffers are ``factors``; None when the
    first op after the product is not one (see the module docstring)."""
    from mlir import ir

    c = con.c
    product = _op(con.op)
    skip = {product}
    if con.narrowed_by is not None and con.reader_rounds is None:
        skip.add(_op(con.narrowed_by))     # the rounding copy the kernel writes instead
    g, between = None, []
    ops = [_op(o) for o in product.operation.block.operations]
    at = next(i for i, o in enumerate(ops) if o == product)
    for o in ops[at + 1:]:
        if o in skip or o.name in INERT:
            continue
        if any(may_share_bytes(v, c) for v in memrefs_used(o)):
            g = o                                    # the first op to touch the product
            break
        between.append(o)
        if len(between) > _MAX_BETWEEN:
            return None
    if g is None or g.name != "linalg.generic" or g.results:
        return None
    if any("parallel" not in str(a) for a in ir.ArrayAttr(g.attributes["iterator_types"])):
        return None
    seg = list(ir.DenseI32ArrayAttr(g.attributes["operandSegmentSizes"]))
    operands = list(g.operands)
    n_in = seg[0]
    ins, outs = operands[:n_in], operands[n_in:]
    if sum(v == c for v in ins) != 1 or not outs:
        return None
    shape = list(ir.MemRefType(c.type).shape)
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    if any(m != maps[0] for m in maps) or not maps[0].is_permutation:
        return None
    for v in operands:
        t = ir.MemRefType(v.type)
        if list(t.shape) != shape or str(t.element_type) not in _ELEMENTS:
            return None
        if v != c and not identity_layout(t):
            return None
    block = g.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    if body[-1].name != "linalg.yield" or len(body[-1].operands) != len(outs):
        return None
    if any(list(a.uses) for a in list(block.arguments)[n_in:]):
        return None                                  # reads an output element
    for o in body[:-1]:
        if o.regions or o.name.split(".")[0] not in ("arith", "math"):
            return None
    if any(hasattr(v.owner, "arguments") or _op(v.owner).name != "arith.constant"
           for v in _outside_values(g, body)):
        return None                                  # only constants can be cloned in
    # outputs: in place over an input, or apart from every input; never over a factor
    if any(any(may_share_bytes(out, v) for v in ins) for out in outs if out not in ins) or \
            any(may_share_bytes(out, f) for out in outs for f in factors):
        return None
    # the ops passed over touch none of the reader's buffers (it may run before them) and
    # define no values (the allocations and views moved in front of the product for its
    # launch depend on nothing they define)
    if any(list(o.results) for o in between) or \
            any(may_share_bytes(v, w) for o in between for v in memrefs_used(o) for w in operands):
        return None
    # the product's value is still needed after the reader unless the reader overwrites it
    later = [u for u, h in held_users(root(c), g) if g.is_before_in_block(h)]
    store = c not in outs and bool(later)
    return Reader(g, n_in, operands, body[:-1], store)


def pays(reader: Reader, grid, policy: str) -> bool:
    """Whether the product whose launch has ``grid`` computes ``reader`` in its epilogue
    under ``policy`` (one of :data:`POLICIES`).

    "large": only where the product's own value is no longer stored and its grid has at
    least :data:`MIN_BLOCKS` blocks.  The epilogue runs after the block's k-loop in a block
    that holds its SM alone, so the reader's loads and stores are not overlapped with
    multiplies; what the fusion saves is the product's bytes (written and read again when
    nothing reads it later, read again otherwise) and a launch.  Measured on an H100 (the
    thirteenth stop's builds, TinyMoE B32, per launch, bench/results/profile-tinymoe196m-
    b32-bf16-epiloguereaders-815df27-h100.json against …-8562828-h100.json): the SwiGLU
    backward (product unstored, 2560 blocks) 0.207 + 0.256 ms apart -> 0.423 fused (−0.040);
    the SwiGLU forward (product stored, read by the backward) 0.2365 + 0.155 -> 0.419
    (+0.028); TinyMoE B2 (expert products of 160 blocks) 3.8% slower with every reader
    fused, the selective-updates program (small weight gradients adding to accumulators)
    5.87 vs 5.49 ms a microbatch.  "all": every reader :func:`match` finds."""
    if policy == "none":
        return False
    if policy == "all":
        return True
    blocks = grid[0] * grid[1] * grid[2]
    return not reader.store_product and blocks >= MIN_BLOCKS


def kernel_operands(con, reader: Reader) -> dict:
    """Reader operand -> the kernel's name for it (``%C`` for the product's output, else
    ``%X<j>``, its position among ``con.captured`` — appended there when new)."""
    names = {}
    for v in reader.operands:
        if v == con.c:
            names[v] = "%C"
            continue
        if not any(v == w for w in con.captured):
            con.captured = list(con.captured) + [v]
        names[v] = f"%X{next(j for j, w in enumerate(con.captured) if w == v)}"
    return names


def prefetch_rows(t, k, con, reader: Reader, names: dict, tid: str, index_of, rows: int,
                  bn: int) -> None:
    """Text asking L2 for the rows of the block's output tile in each of the reader's
    inputs other than the product, before the k-loop: the epilogue then reads them from
    L2, its DRAM traffic overlapped with the multiplies instead of after them (the epilogue
    runs in a block that holds its SM alone).  One ``cp.async.bulk.prefetch.L2`` of a row's
    ``bn`` columns (the output's last dimension, contiguous in these identity-layout
    buffers) per thread: input q by the threads of half ``q % 2`` of the block, row
    ``tid % rows``; rows past the output's, and columns past its width, are not asked for.
    ``index_of(row, col)`` is the output's index list there (the operands share it).
    Nothing when the tile's columns are not one dimension of the output."""
    from mlir import ir

    ns = con.groups["n"]
    if len(ns) != 1 or con.maps[-1][-1] != ("d", ns[0]):
        return
    m, n = con.size("m"), con.size("n")
    inputs = reader.other_inputs(con.c)
    if not inputs:
        return
    r = t.arith("remui", tid, rows)
    half = t.arith("divui", tid, rows)
    row = t.add(k.m0, r)
    for q, v in enumerate(inputs):
        vt = ir.MemRefType(v.type)
        eb = element_bits(vt.element_type) // 8
        cond = t.emit(f"arith.cmpi eq, {half}, {t.const(q % 2)} : index")
        if m % rows:
            inside = t.emit(f"arith.cmpi ult, {row}, {t.const(m)} : index")
            cond = t.emit(f"arith.andi {cond}, {inside} : i1")
        t.line(f"scf.if {cond} {{")
        strides, _ = vt.get_strides_and_offset()      # identity layout: offset 0
        linear = None
        for i, stride in zip(index_of(row, k.n0).split(", "), strides):
            term = t.mul(i, stride)
            linear = term if linear is None else t.add(linear, term)
        base = t.emit(f"memref.extract_aligned_pointer_as_index {names[v]} : {v.type} -> index")
        at = t.emit(f"arith.index_cast {t.add(base, t.mul(linear, eb))} : index to i64")
        ptr = t.emit(f"llvm.inttoptr {at} : i64 to !llvm.ptr<1>")
        if n % bn:
            cols = t.arith("minui", t.arith("subi", t.const(n), k.n0), bn)
            size = t.emit(f"arith.index_cast {t.mul(cols, eb)} : index to i32")
        else:
            size = t.const(bn * eb, "i32")
        t.line(f"nvvm.cp.async.bulk.prefetch {ptr}, {size} : !llvm.ptr<1>")
        t.line("}")


def load_piece(t, con, reader: Reader, names: dict, index: str) -> dict:
    """Text loading the reader's inputs other than the product at the 8 elements from the
    output index list ``index``: {input: its vector value}."""
    from mlir import ir

    vectors = {}
    for v in reader.other_inputs(con.c):
        elt = ir.MemRefType(v.type).element_type
        vectors[v] = t.emit(f"vector.load {names[v]}[{index}] {{alignment = 16}} : {v.type}, "
                            f"vector<{LANES}x{elt}>")
    return vectors


def emit_piece(t, con, reader: Reader, names: dict, index: str, value: str,
               loaded: dict) -> None:
    """Text of one staged-epilogue piece: the 8 product elements ``value`` (a
    ``vector<8xbf16>`` at the output index list ``index``) and the reader's other inputs
    there (``loaded``, :func:`load_piece`) given to the reader, one placeholder per
    element; its outputs stored there."""
    from mlir import ir

    vectors = dict(loaded)
    vectors[con.c] = value
    in_types = [str(ir.MemRefType(v.type).element_type) for v in reader.inputs()]
    out_types = [str(ir.MemRefType(v.type).element_type) for v in reader.outputs()]
    lanes = []
    for lane in range(LANES):
        scalars = [t.emit(f"vector.extract {vectors[v]}[{lane}] : {ty} from "
                          f"vector<{LANES}x{ty}>")
                   for v, ty in zip(reader.inputs(), in_types)]
        result = t.fresh()
        t.line(f'{result}:{len(out_types)} = "{PLACEHOLDER}"({", ".join(scalars)}) : '
               f'({", ".join(in_types)}) -> ({", ".join(out_types)})')
        lanes.append(result)
    for j, (v, ty) in enumerate(zip(reader.outputs(), out_types)):
        vec = t.emit("vector.from_elements " + ", ".join(f"{r}#{j}" for r in lanes) +
                     f" : vector<{LANES}x{ty}>")
        t.line(f"vector.store {vec}, {names[v]}[{index}] {{alignment = 16}} : {v.type}, "
               f"vector<{LANES}x{ty}>")


def expand(kernel_module, reader: Reader) -> None:
    """Replace each placeholder of the parsed kernel by the reader's body ops, cloned with
    the placeholder's operands as the input elements."""
    from mlir import ir

    from latch.passes.generic_body import clone_body_ops

    found = []

    def visit(op):
        if op.name == PLACEHOLDER:
            found.append(_op(op))
        return ir.WalkResult.ADVANCE
    kernel_module.operation.walk(visit)
    g = reader.generic
    block = g.regions[0].blocks[0]
    ops = [_op(o) for o in block.operations]
    args = list(block.arguments)[:reader.n_inputs]
    yielded = list(ops[-1].operands)
    outside = _outside_values(g, ops)
    for ph in found:
        mapping = dict(zip(args, ph.operands))
        with ir.InsertionPoint(ph), ph.location:
            for v in outside:
                mapping[v] = _op(v.owner).clone().results[0]
            clone_body_ops(reader.body, mapping, [])
        for r, y in zip(ph.results, yielded):
            r.replace_all_uses_with(mapping[y])
        ph.erase()


def _outside_values(g, body: list) -> list:
    """Values that the body ops ``body`` of generic ``g`` (its yield included) use or
    yield and that are defined outside it."""
    block = g.regions[0].blocks[0]
    inside = list(block.arguments)
    for o in body:
        inside += list(o.results)
    found = []
    for o in body:
        for v in o.operands:
            if not any(v == w for w in inside) and not any(v == w for w in found):
                found.append(v)
    return found
