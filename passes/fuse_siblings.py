"""``latch-fuse-siblings``: two elementwise generics that read the same tensor become one
generic with two results (stage 'buffers', on tensors, after the last
``linalg-fuse-elementwise-ops``).

Elementwise fusion joins a producer to its reader; two *readers* of the same input stay
two kernels, each reading it.  The SwiGLU backward is such a pair: ``dy * s`` (the gradient
of the up projection) and ``dy * u * silu'(g)`` (of the gate) both read ``dy`` and the gate
``g`` — at TinyMoE B32, five [8, 10240, 1024] bf16 passes (168 MB each) where one kernel
needs three reads and two writes... seven against five.  Fused, each element of the shared
inputs is loaded once and both results are stored from the same thread.

Two ``linalg.generic`` ops A (earlier) and B of one block are fused when both are
all-parallel over the same loop ranges, each has one result written through an identity
map without reading its initial value, their bodies are ``arith``/``math`` code, they
share an input value of at least ``min-bytes`` (default 64 KiB: below that a second read
costs nothing worth a change of the program's order) read through the same full indexing
map (every element), B reads
nothing computed from A's result, and at most ``window`` ops lie between them (so no input
is kept alive much longer).  The fused op takes A's inputs, then B's that A does not have,
writes A's and B's outputs, and runs A's body and then B's; it sits where B was when every
use of A's result comes after B, else where A was when B's operands all exist there (a
``tensor.empty`` init is made anew there; the SwiGLU backward of a small MLP comes in that
order: ``dy * s``, its product, then the gate's gradient); otherwise the pair stays.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-fuse-siblings{min-bytes=0})'``
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.generic_body import clone_body_ops, indexing_maps, loop_ranges, segments


def _candidate(op) -> bool:
    """An all-parallel generic on static tensors with one result through an identity map,
    not reading its output, with a body of arith/math ops."""
    from mlir import ir

    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    if any("parallel" not in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])):
        return False
    n_in, n_out = segments(op)
    if n_out != 1 or not isinstance(op.results[0].type, ir.RankedTensorType) or \
            not ir.RankedTensorType(op.results[0].type).has_static_shape:
        return False
    out_map = indexing_maps(op)[-1]
    if out_map != ir.AffineMap.get_identity(out_map.n_dims):
        return False
    block = op.regions[0].blocks[0]
    if any(True for _ in block.arguments[n_in].uses):
        return False
    for inner in block.operations:
        inner = _op(inner)
        if inner.regions or not (inner.name.startswith(("arith.", "math."))
                                 or inner.name == "linalg.yield"):
            return False
    return True


def _full_inputs(op, min_bytes: int) -> dict:
    """{(input value, its indexing map as text)} of the inputs read at every element that
    hold at least ``min_bytes``."""
    from mlir import ir

    from latch.passes.base import element_bits

    n_in, _ = segments(op)
    maps = indexing_maps(op)
    out = set()
    for k in range(n_in):
        t = op.operands[k].type
        if not maps[k].is_permutation or not isinstance(t, ir.RankedTensorType):
            continue
        shaped = ir.RankedTensorType(t)
        if shaped.has_static_shape and \
                math.prod(shaped.shape) * element_bits(shaped.element_type) // 8 \
                >= min_bytes:
            out.add((op.operands[k], str(maps[k])))
    return out


def _depends_on(op, value, between: list) -> bool:
    """Whether ``op`` reads ``value`` or anything ``between`` computes from it."""
    tainted = {value}
    for mid in between:
        if any(v in tainted for v in mid.operands):
            tainted.update(mid.results)
    return any(v in tainted for v in op.operands)


def _defined_before(v, earlier: list) -> bool:
    """Whether ``v`` is a block argument or the result of an op in ``earlier``."""
    owner = v.owner
    if hasattr(owner, "arguments"):
        return True
    return _op(owner) in earlier


def _is_empty(v) -> bool:
    """Whether ``v`` is a ``tensor.empty`` without dynamic sizes (an init with no data)."""
    owner = v.owner
    return not hasattr(owner, "arguments") and _op(owner).name == "tensor.empty" and \
        not len(_op(owner).operands)


def _fuse(a, b, at) -> None:
    """Replace generics ``a`` and ``b`` (``a`` first) by one with both results, placed at
    ``at`` (one of them)."""
    from mlir import ir

    na, _ = segments(a)
    nb, _ = segments(b)
    maps_a, maps_b = indexing_maps(a), indexing_maps(b)
    ins = [(a.operands[k], maps_a[k]) for k in range(na)]
    where = {}                                       # (value, map text) -> fused input index
    for k, (v, m) in enumerate(ins):
        where.setdefault((v, str(m)), k)
    b_index = []
    for k in range(nb):
        key = (b.operands[k], str(maps_b[k]))
        if key not in where:
            where[key] = len(ins)
            ins.append((b.operands[k], maps_b[k]))
        b_index.append(where[key])
    outs = [(a.operands[na], maps_a[-1]), (b.operands[nb], maps_b[-1])]
    with ir.InsertionPoint(at), b.location:
        fused = ir.Operation.create(
            "linalg.generic", [a.results[0].type, b.results[0].type],
            [v for v, _ in ins] + [v for v, _ in outs],
            attributes={
                "indexing_maps": ir.ArrayAttr.get(
                    [ir.AffineMapAttr.get(m) for _, m in ins + outs]),
                "iterator_types": a.attributes["iterator_types"],
                "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(ins), 2])},
            regions=1)
        elts = [ir.ShapedType(v.type).element_type if isinstance(v.type, ir.ShapedType)
                else v.type for v, _ in ins + outs]
        block = fused.regions[0].blocks.append(*elts)
        with ir.InsertionPoint(block):
            yielded = []
            for op, index in ((a, list(range(na))), (b, b_index)):
                body = op.regions[0].blocks[0]
                mapping = {body.arguments[k]: block.arguments[i] for k, i in enumerate(index)}
                ops = list(body.operations)
                clone_body_ops(ops[:-1], mapping, None)
                y = ops[-1].operands[0]
                yielded.append(mapping.get(y, y))
            ir.Operation.create("linalg.yield", [], yielded)
    a.results[0].replace_all_uses_with(fused.results[0])
    b.results[0].replace_all_uses_with(fused.results[1])
    b.erase()
    a.erase()


@dataclasses.dataclass(frozen=True)
class FuseSiblings(ModulePass):
    name = "latch-fuse-siblings"
    summary = ("two elementwise generics over the same loops that read the same tensor "
               "become one generic with two results (the shared input read once)")
    window: int = 16
    min_bytes: int = 65536

    def apply(self, module) -> None:
        for f in function_definitions(module):
            block = f.regions[0].blocks[0]
            done = True
            while done:                      # one pair at a time: the op list changes
                done = self._fuse_one(block)

    def _fuse_one(self, block) -> bool:
        from mlir import ir

        ops = [_op(o) for o in block.operations]
        for j, b in enumerate(ops):
            if not _candidate(b):
                continue
            b_inputs = _full_inputs(b, self.min_bytes)
            _, b_ranges = loop_ranges(b)
            for i in range(j - 1, max(-1, j - 1 - self.window), -1):
                a = ops[i]
                if not _candidate(a) or loop_ranges(a)[1] != b_ranges:
                    continue
                if not (_full_inputs(a, self.min_bytes) & b_inputs):
                    continue
                between = ops[i + 1:j]
                if _depends_on(b, a.results[0], between):
                    continue
                if not any(_op(u.owner) in between for u in a.results[0].uses):
                    _fuse(a, b, b)                    # A's readers all come after B
                    return True
                late = [v for v in b.operands if not _defined_before(v, ops[:i])]
                if all(_is_empty(v) for v in late):   # B's operands all exist at A
                    for v in late:                    # (an empty init is made there)
                        k = list(b.operands).index(v)
                        b.operands[k] = _op(v.owner).clone(ip=ir.InsertionPoint(a)).results[0]
                    _fuse(a, b, a)
                    return True
        return False
