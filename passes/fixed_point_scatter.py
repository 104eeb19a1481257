"""One-hot scatters whose sums do not depend on the order of the adds (part of
``latch-form-contraction-kernels``, option ``deterministic``).

A scatter kernel (passes/one_hot_scatter.py) adds each source row ``V[k]`` to its target
row ``C[t(k)]`` with float atomics: where several sources hit one element, the float sum
depends on the order the hardware happens to take them in, and two runs of the same update
can differ in the last bits.  With ``deterministic=true`` a scatter is instead summed exactly
in integers, whose addition is associative (pre-rounding to a common exponent, as in
reproducible summation: Demmel & Nguyen, "Fast reproducible floating-point summation"):

1. **zero** a workspace holding, per element of ``C``, an i32 ``M`` and an i64 ``A``;
2. **bound**: every source adds ``|V|``'s bits to its element's ``M`` with an atomic max (an
   order-free operation: for non-negative floats the bits order like the values), so ``M``
   ends as the largest magnitude ``m`` added to that element, ``m < 2^(e - 126)`` for its
   biased exponent ``e``;
3. **add**: every source rounds ``V * 2^s`` to the nearest integer, ``s = 188 - H - e``,
   and adds it to ``A`` with an integer atomic add.  Each rounded term is below
   ``2^(62 - H)`` in magnitude, ``2^H`` exceeds the number of sources that can reach one
   element (the product's reduction size), so the sum cannot overflow; the rounding error
   of each term is at most ``2^(-63 + H)`` of ``m``: below ``2^-45`` of it for the 65,536
   sources of a TinyMoE layer, finer than a float32 sum's own rounding;
4. **finish**: one thread per element adds ``A * 2^-s`` (rounded to f32) to ``C``; an element
   that received an infinity or a NaN (``e = 255``) becomes NaN.

Four launches instead of one, reading ``V`` twice; the adds are integer (no
``red.global.add.v4.f32``).  The workspace (12 bytes per element of the largest such
output of a function) is one allocation at the top of the function shared by its
scatters, like the split-K workspace: the launches that touch it are ordered by it.
"""
from __future__ import annotations

import math

from latch.passes.generic_body import compare, delinearize, guarded_launch, index_constant
from latch.passes.one_hot_scatter import Scatter, lanes, source_launch

_THREADS = 256
_ALIGN = 64          # bytes: the i64 part of the workspace starts on this boundary


def applies(sc: Scatter) -> bool:
    """Whether the scatter's output is an f32 memref of static shape (what the scatter
    kernels write)."""
    from mlir import ir

    t = ir.MemRefType(sc.con.c.type)
    return t.has_static_shape and isinstance(t.element_type, ir.F32Type)


def workspace_bytes(sc: Scatter) -> int:
    """Bytes of workspace the scatter needs: an i32 and an i64 per output element."""
    from mlir import ir

    n = math.prod(ir.MemRefType(sc.con.c.type).shape)
    return _i64_offset(n) + 8 * n


def _i64_offset(n: int) -> int:
    return -(-4 * n // _ALIGN) * _ALIGN


def headroom_bits(sc: Scatter) -> int:
    """H: 2^H exceeds the number of sources one output element can receive."""
    return math.prod(sc.con.sizes[d] for d in sc.con.groups["k"]).bit_length()


def emit_fixed_point_scatter(sc: Scatter, workspace) -> None:
    """Replace the contraction of ``sc`` by the four launches of the module docstring,
    using the i8 buffer ``workspace`` (at least :func:`workspace_bytes` long)."""
    from mlir import ir

    con = sc.con
    op = con.op
    shape = list(ir.MemRefType(con.c.type).shape)
    n = math.prod(shape)
    i32 = ir.IntegerType.get_signless(32)
    i64 = ir.IntegerType.get_signless(64)
    dims = "x".join(str(d) for d in shape)
    with ir.InsertionPoint(op), op.location:
        bound = ir.Operation.create("memref.view", [ir.Type.parse(f"memref<{dims}xi32>")],
                                    [workspace, index_constant(0)]).result
        total = ir.Operation.create("memref.view", [ir.Type.parse(f"memref<{dims}xi64>")],
                                    [workspace, index_constant(_i64_offset(n))]).result
    h = headroom_bits(sc)

    def zero(at):
        ir.Operation.create("memref.store", [], [_int(i32, 0), bound] + at)
        ir.Operation.create("memref.store", [], [_int(i64, 0), total] + at)

    _per_element(op, shape, zero)

    def raise_bound(columns):
        for value, where in columns:
            bits = _f32_bits(value)
            magnitude = ir.Operation.create("arith.andi", [i32],
                                            [bits, _int(i32, 0x7FFFFFFF)]).result
            ir.Operation.create("memref.atomic_rmw", [i32], [magnitude, bound] + where,
                                attributes={"kind": _kind("maxs")})

    source_launch(sc, lanes(sc), raise_bound)

    def add(columns):
        terms = []
        for value, where in columns:
            e = _exponent(ir.Operation.create("memref.load", [i32], [bound] + where).result)
            x = _f64_mul(_extf(value), _pow2(_sub(_int(i64, 188 - h), e)))
            half = _select(_cmpf("olt", x, _f64(0.0)), _f64(-0.5), _f64(0.5))
            x = _select(_is_nonfinite(e), _f64(0.0), _addf(x, half))
            terms.append((ir.Operation.create("arith.fptosi", [i64], [x]).result, where))
        for q, where in terms:
            ir.Operation.create("memref.atomic_rmw", [i64], [q, total] + where,
                                attributes={"kind": _kind("addi")})

    source_launch(sc, lanes(sc), add)

    def finish(at):
        f32 = ir.F32Type.get()
        e = _exponent(ir.Operation.create("memref.load", [i32], [bound] + at).result)
        a = ir.Operation.create("memref.load", [i64], [total] + at).result
        x = ir.Operation.create("arith.sitofp", [ir.F64Type.get()], [a]).result
        x = _f64_mul(x, _pow2(_sub(e, _int(i64, 188 - h))))
        y = ir.Operation.create("arith.truncf", [f32], [x]).result
        nan = ir.Operation.create("arith.constant", [f32],
                                  attributes={"value": ir.FloatAttr.get(f32, math.nan)}).result
        y = _select(_is_nonfinite(e), nan, y)
        old = ir.Operation.create("memref.load", [f32], [con.c] + at).result
        new = ir.Operation.create("arith.addf", [f32], [old, y]).result
        ir.Operation.create("memref.store", [], [new, con.c] + at)

    _per_element(op, shape, finish)


def _per_element(op, shape: list, body) -> None:
    """A gpu.launch before ``op`` with one thread per element of ``shape`` (row-major),
    calling ``body(indices)`` in its guarded region."""
    from mlir import ir

    block, lin = guarded_launch(op, math.prod(shape), _THREADS)
    with ir.InsertionPoint.at_block_terminator(block), op.location:
        at = [None] * len(shape)
        delinearize(lin, list(range(len(shape)))[::-1], shape, at)
        body(at)


def _kind(name: str):
    """The ``kind`` attribute of a memref.atomic_rmw (arith.AtomicRMWKind)."""
    from mlir import ir
    from mlir.dialects.arith import AtomicRMWKind
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(getattr(AtomicRMWKind, name)))


def _int(t, v: int):
    from mlir import ir
    return ir.Operation.create("arith.constant", [t],
                               attributes={"value": ir.IntegerAttr.get(t, v)}).result


def _f64(v: float):
    from mlir import ir
    f64 = ir.F64Type.get()
    return ir.Operation.create("arith.constant", [f64],
                               attributes={"value": ir.FloatAttr.get(f64, v)}).result


def _f32_bits(v):
    from mlir import ir
    return ir.Operation.create("arith.bitcast", [ir.IntegerType.get_signless(32)], [v]).result


def _exponent(bits):
    """The biased exponent (0..255) of a non-negative f32's i32 bits, as i64."""
    from mlir import ir
    i32 = ir.IntegerType.get_signless(32)
    e = ir.Operation.create("arith.shrui", [i32], [bits, _int(i32, 23)]).result
    return ir.Operation.create("arith.extui", [ir.IntegerType.get_signless(64)], [e]).result


def _is_nonfinite(e):
    from mlir import ir
    return compare("eq", e, _int(ir.IntegerType.get_signless(64), 255))


def _pow2(s):
    """2^s as f64 for an i64 ``s`` in the normal range (-1022..1023): its bits."""
    from mlir import ir
    i64 = ir.IntegerType.get_signless(64)
    biased = ir.Operation.create("arith.addi", [i64], [s, _int(i64, 1023)]).result
    bits = ir.Operation.create("arith.shli", [i64], [biased, _int(i64, 52)]).result
    return ir.Operation.create("arith.bitcast", [ir.F64Type.get()], [bits]).result


def _sub(a, b):
    return _binary("arith.subi", a, b)


def _f64_mul(a, b):
    return _binary("arith.mulf", a, b)


def _addf(a, b):
    return _binary("arith.addf", a, b)


def _binary(name: str, a, b):
    from mlir import ir
    return ir.Operation.create(name, [a.type], [a, b]).result


def _extf(v):
    from mlir import ir
    return ir.Operation.create("arith.extf", [ir.F64Type.get()], [v]).result


def _cmpf(predicate: str, a, b):
    from mlir import ir
    codes = {"olt": 4}
    return ir.Operation.create(
        "arith.cmpf", [ir.IntegerType.get_signless(1)], [a, b],
        attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                    codes[predicate])}).result


def _select(c, a, b):
    from mlir import ir
    return ir.Operation.create("arith.select", [a.type], [c, a, b]).result
