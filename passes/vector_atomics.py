"""``latch-vector-atomics``: four f32 atomic adds to consecutive elements become one
``red.global.add.v4.f32`` (stage 'nvvm -> ptx', before the NVVM lowering).

A scatter kernel (passes/one_hot_scatter.py: ``index_add``, the gradient of a gather or of
an embedding) adds each value to its target row with an atomic add.  One f32 atomic per
element keeps the memory system's atomic units, not its bandwidth, the limit: at B32 the
TinyMoE update spends about 10 ms in 24 such scatters of 50M elements each (0.3-0.8 ms
apiece where moving their bytes takes about 0.1 ms).  Hopper adds four consecutive f32 in
one instruction (PTX ISA 8.1, sm_90: ``red.global.add.v4.f32``), a quarter of the atomic
operations.

The scatter kernel gives each thread four consecutive columns and emits its four adds one
after the other as scalar ``memref.atomic_rmw`` (what every earlier stage, the SIMT
interpreter included, reads).  This pass finds such groups in kernel bodies and replaces
each by one vector reduction (inline PTX on the element's address) when it can prove the
four elements consecutive and 16-byte aligned:

* four ``memref.atomic_rmw addf`` on f32 in a row, results unused, on the same memref, with
  the same indices but the last, which is ``b``, ``b + 1``, ``b + 2``, ``b + 3``;
* ``b`` a multiple of four (``x * 4``, or a constant);
* the memref's static layout: unit stride in its last dimension, every other stride and
  the offset multiples of four (the buffers a kernel sees are 256-byte aligned: the arena,
  state and I/O buffers come from cuMemAlloc).

It does nothing unless ``chip`` is sm_90 or later and ``features`` asks for PTX 8.1 or
later (the vector form does not exist before).  The additions land in an order the
hardware picks either way.

Example: ``latch-opt k.mlir --pass-pipeline='builtin.module(latch-vector-atomics{chip=sm_90a
features=+ptx81})'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, chip_at_least, int_constant, operation as _op
from latch.passes.generic_body import index_constant

LANES = 4
# the address is a generic one (kernel arguments are plain pointers): converted to global
ASM = ("{ .reg .b64 %ga; cvta.to.global.u64 %ga, $0; "
       "red.global.add.v4.f32 [%ga], {$1, $2, $3, $4}; }")


def supported(chip: str, features: str) -> bool:
    """Whether PTX for ``chip`` with ``features`` (e.g. "+ptx81") has the vector form."""
    return chip_at_least(chip, features, 90, 81)


@dataclasses.dataclass(frozen=True)
class VectorAtomics(ModulePass):
    name = "latch-vector-atomics"
    summary = ("fuse four f32 atomic adds to consecutive, 16-byte aligned elements into one "
               "red.global.add.v4.f32 (sm_90, PTX 8.1)")
    chip: str = "sm_90a"
    features: str = "+ptx81"

    def apply(self, module) -> None:
        from mlir import ir

        if not supported(self.chip, self.features):
            return
        blocks = []

        def visit(op):
            o = _op(op)
            if o.name == "memref.atomic_rmw":
                block = o.operation.block
                if all(block != b for b in blocks):
                    blocks.append(block)
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        for block in blocks:
            ops = [_op(o) for o in block.operations]
            i = 0
            while i + LANES <= len(ops):
                if _group(ops[i:i + LANES]):
                    _fuse(ops[i:i + LANES])
                    i += LANES
                else:
                    i += 1


def _is_add(op) -> bool:
    from mlir import ir

    return (op.name == "memref.atomic_rmw" and
            ir.IntegerAttr(op.attributes["kind"]).value == 0 and      # addf
            str(op.results[0].type) == "f32" and not any(True for _ in op.results[0].uses))


def _plus(v, base) -> int | None:
    """j if ``v`` is ``base + j`` (an arith.addi with a constant), 0 if it is ``base``."""
    if v == base:
        return 0
    if hasattr(v.owner, "arguments") or _op(v.owner).name != "arith.addi":
        return None
    x, y = _op(v.owner).operands
    for a, c in ((x, y), (y, x)):
        if a == base:
            return int_constant(c)
    return None


def _multiple_of_lanes(v) -> bool:
    c = int_constant(v)
    if c is not None:
        return c % LANES == 0
    if hasattr(v.owner, "arguments") or _op(v.owner).name != "arith.muli":
        return False
    factors = [int_constant(x) for x in _op(v.owner).operands]
    return any(c is not None and c % LANES == 0 for c in factors)


def aligned_rows(t) -> bool:
    """Whether memref type ``t`` holds f32 rows (its last dimension, unit stride, a multiple
    of four long) in global memory whose every group of four columns from a multiple of four
    starts 16 bytes aligned (the other strides and the offset multiples of four)."""
    from mlir import ir

    mt = ir.MemRefType(t)
    if str(mt.element_type) != "f32" or not mt.has_static_shape or mt.memory_space is not None:
        return False
    strides, offset = mt.get_strides_and_offset()
    return (strides[-1] == 1 and mt.shape[-1] % LANES == 0 and offset % LANES == 0 and
            all(s % LANES == 0 for s in strides[:-1]))


def _group(ops) -> bool:
    if not all(_is_add(o) for o in ops):
        return False
    ref = ops[0].operands[1]
    if not aligned_rows(ref.type):
        return False
    lead = list(ops[0].operands[2:-1])
    base = ops[0].operands[-1]
    if not _multiple_of_lanes(base):
        return False
    for j, o in enumerate(ops):
        if o.operands[1] != ref or list(o.operands[2:-1]) != lead or \
                _plus(o.operands[-1], base) != j:
            return False
    return True


def _fuse(ops) -> None:
    from mlir import ir
    from mlir.dialects import llvm

    first = ops[0]
    ref = first.operands[1]
    index = ir.IndexType.get()
    i64 = ir.IntegerType.get_signless(64)
    mt = ir.MemRefType(ref.type)
    strides, offset = mt.get_strides_and_offset()

    def arith(name, a, b):
        return ir.Operation.create(f"arith.{name}", [index], [a, b]).result

    with ir.InsertionPoint(first), first.location:
        base = ir.Operation.create("memref.extract_aligned_pointer_as_index", [index],
                                   [ref]).result
        linear = index_constant(offset)
        for idx, stride in zip(first.operands[2:], strides):
            step = idx if stride == 1 else arith("muli", idx, index_constant(stride))
            linear = arith("addi", linear, step)
        address = arith("addi", base, arith("muli", linear, index_constant(4)))
        address = ir.Operation.create("arith.index_cast", [i64], [address]).result
        llvm.InlineAsmOp(None, [address] + [o.operands[0] for o in ops], ASM, "l,f,f,f,f",
                         has_side_effects=True)
    for o in ops:
        o.erase()
