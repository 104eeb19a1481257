"""A SIMT interpreter of Latch's GPU kernels, for tests on machines without a GPU.

``Simt(module).run(args)`` executes a host ``func.func`` — constants, allocations, views,
``linalg.generic`` (evaluated with numpy over its iteration space), ``gpu.launch`` and
``gpu.launch_func`` — and every kernel it launches with all threads of all blocks in lock
step: a per-thread value is a numpy array of shape (L, *vector_shape) over the L threads of
the grid (a value the same for every thread may stay a numpy scalar or a bare vector).
Control flow is masked (``scf.if``, ``scf.for`` with per-thread bounds), warp-collective
ops (``gpu.shuffle``, ``nvvm.mma.sync``, ``nvgpu.mma.sync``, ``nvgpu.ldmatrix``) must be run
by whole warps, and a barrier by whole blocks.

Element types: f32/f16/bf16 values are float32 arrays holding values rounded to the type
(bf16: round to nearest even), f64 float64, integers int64 arrays of the unsigned bit
pattern masked to the width (``index`` and i64: signed int64), i1 bool.  Bitcasts are bit
exact.

Memory: a memref value is a view (buffer, shape, strides, offset) of a flat buffer; every
element of a buffer records whether it was written, its last writer and reader (thread and
barrier epoch), so that the interpreter detects **data races**: an access to an element
that another thread of the block wrote (or, for a write, read) since the last barrier of
the block, a global element another block wrote (no grid barrier), a read of an element
nothing wrote, an out-of-bounds index.  ``nvgpu.device_async_copy`` (cp.async) writes at
issue time but leaves its destination *pending* until a
``nvgpu.device_async_wait`` / ``nvvm.cp.async.wait.group`` of the thread covers its group
(groups are closed by ``device_async_create_group`` / ``nvvm.cp.async.commit.group``: all
the thread's copies since the last one, as cp.async.commit_group does — the tokens are not
looked at): reading or overwriting a pending element is an error, and other threads need a
barrier after the wait as after a plain store.  Alignment is checked for cp.async (its
size), ldmatrix rows (16 bytes) and vector loads/stores with an ``alignment``.  Views of one
byte buffer (``memref.view``, also of ``gpu.dynamic_shared_memory``) with different element
types do not alias here.

Warp-level ops follow the PTX ISA: ``nvgpu.ldmatrix`` (lanes 8j..8j+7 address the rows of
matrix j; lane l receives row l/4, columns 2(l%4), 2(l%4)+1 of each matrix — transposed
with ``transpose``; register j is row j of the result vector, as the NVVM lowering packs
it), ``nvgpu.mma.sync`` / ``nvvm.mma.sync`` m16n8k16 bf16/f16 (row.col) with f32
accumulators, in the documented fragment layouts, computed in float64 and rounded to f32."""
from __future__ import annotations

import contextlib
import itertools

import numpy as np


@contextlib.contextmanager
def formed(text: str, pipeline: str):
    """The module parsed from ``text`` after the pass pipeline ``pipeline`` (e.g.
    ``"builtin.module(latch-wrap-host-compute)"``), in a fresh context with Latch's dialect,
    entered (with an unknown location) for the ``with`` block: the tests' way to form the
    kernels they then run with :class:`Simt`."""
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, pipeline)
        yield m


class Race(AssertionError):
    """A data race (or a read of a cp.async destination before its wait)."""


# ---------------------------------------------------------------------------------------
# types and element conversions
# ---------------------------------------------------------------------------------------
class _Ty:
    """A decoded MLIR type: kind 'scalar', 'vector', 'memref' or 'other'."""
    __slots__ = ("kind", "elem", "vshape", "shape", "strides", "offset", "workgroup", "text")

    def __init__(self, text):
        self.text = text
        self.kind, self.elem, self.vshape = "other", None, ()
        self.shape = self.strides = self.offset = None
        self.workgroup = False


_TYPES: dict = {}
_DYN = -9223372036854775808       # ShapedType::kDynamic
_SHARED_BASE = 16                  # the shared-window address of dynamic shared memory
_GLOBAL_SPACING = 1 << 40            # apart: the made-up addresses of global buffers


def _ty(t) -> _Ty:
    key = str(t)
    info = _TYPES.get(key)
    if info is None:
        info = _TYPES[key] = _parse_type(t, key)
    return info


def _parse_type(t, key) -> _Ty:
    from mlir import ir

    info = _Ty(key)
    if isinstance(t, ir.MemRefType):
        mt = ir.MemRefType(t)
        info.kind, info.elem = "memref", str(mt.element_type)
        info.shape = tuple(mt.shape)
        strides, offset = mt.get_strides_and_offset()
        info.strides, info.offset = tuple(strides), offset
        ms = mt.memory_space
        info.workgroup = ms is not None and ("workgroup" in str(ms) or str(ms).startswith("3"))
    elif isinstance(t, ir.VectorType):
        vt = ir.VectorType(t)
        info.kind, info.elem, info.vshape = "vector", str(vt.element_type), tuple(vt.shape)
    elif key == "index" or isinstance(t, ir.IntegerType) or isinstance(t, ir.FloatType):
        info.kind, info.elem = "scalar", key
    return info


_FLOATS = ("f32", "bf16", "f16", "f64", "tf32")


def _width(e: str) -> int:
    if e == "index":
        return 64
    if e.startswith("i"):
        return int(e[1:])
    return {"f32": 32, "bf16": 16, "f16": 16, "f64": 64}[e]


def _elem_bytes(e: str) -> int:
    """Bytes of an element type (``bf16`` 2, ``i1`` 1)."""
    return max(1, int("".join(c for c in e if c.isdigit())) // 8)


def _dtype(e: str):
    if e == "f64":
        return np.float64
    if e in _FLOATS:
        return np.float32
    if e == "i1":
        return np.bool_
    return np.int64


def _bf16(x):
    """float32 values rounded to bfloat16 (nearest even), as float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    out = u.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)


def _round(x, e: str):
    """``x`` (numbers) in the representation of element type ``e``."""
    x = np.asarray(x)
    if e == "f64":
        return x.astype(np.float64)
    if e == "f32":
        return x.astype(np.float32)
    if e == "bf16":
        return _bf16(x.astype(np.float32))
    if e == "f16":
        return x.astype(np.float16).astype(np.float32)
    if e == "i1":
        return (x.astype(np.int64) & 1).astype(bool) if x.dtype != bool else x
    x = x.astype(np.int64)
    w = _width(e)
    return x if w >= 64 else x & ((1 << w) - 1)


def _signed(x, e: str):
    w = _width(e)
    if e == "i1":
        return -np.asarray(x).astype(np.int64)
    if w >= 64:
        return x
    x = np.asarray(x, np.int64) & ((1 << w) - 1)
    return x - (((x >> (w - 1)) & 1) << w)


def _to_bits(x, e: str):
    """The bit patterns (int64) of values of element type ``e``."""
    x = np.asarray(x)
    if e == "f32":
        return np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.int64)
    if e == "bf16":
        return np.ascontiguousarray(_bf16(x), np.float32).view(np.uint32).astype(np.int64) >> 16
    if e == "f16":
        return np.ascontiguousarray(x, np.float16).view(np.uint16).astype(np.int64)
    if e == "f64":
        return np.ascontiguousarray(x, np.float64).view(np.int64)
    return _round(x, e).astype(np.int64)


def _from_bits(b, e: str):
    b = np.asarray(b, np.int64)
    if e == "f32":
        return np.ascontiguousarray(b & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    if e == "bf16":
        return np.ascontiguousarray((b & 0xFFFF) << 16).astype(np.uint32).view(np.float32)
    if e == "f16":
        return np.ascontiguousarray(b & 0xFFFF).astype(np.uint16).view(np.float16) \
            .astype(np.float32)
    if e == "f64":
        return np.ascontiguousarray(b).view(np.float64)
    return _round(b, e)


# ---------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------
class _Mem:
    """A flat buffer with per-element written flags and last-writer / last-reader records.
    ``shared_blocks``: workgroup memory, one slice of that many elements per block."""

    def __init__(self, n, elem, shared_blocks=None, data=None, valid=None):
        self.elem = elem
        self.data = np.zeros(n, _dtype(elem)) if data is None else data
        self.valid = np.zeros(n, bool) if valid is None else valid
        self.shared_blocks = shared_blocks
        self.pend_thread = self.pend_seq = None
        self.reset()

    def reset(self):
        n = self.data.size
        self.w_thread = np.full(n, -1, np.int64)
        self.w_epoch = np.full(n, -1, np.int64)
        self.r_thread = np.full(n, -1, np.int64)
        self.r_epoch = np.full(n, -1, np.int64)
        self.r_block = np.full(n, -1, np.int64)
        self.released = np.full(n, -1, np.int64)     # when its writer fenced it (gpu scope)
        self.pend_thread = self.pend_seq = None


class _Ref:
    """A memref value: a strided view of a buffer."""
    __slots__ = ("mem", "shape", "strides", "offset")

    def __init__(self, mem, shape, strides, offset):
        self.mem, self.shape, self.strides, self.offset = mem, tuple(shape), tuple(strides), \
            int(offset)

    def positions(self):
        """Flat positions of all elements, in row-major order of the shape."""
        pos = np.full(self.shape, self.offset, np.int64)
        for d, (s, st) in enumerate(zip(self.shape, self.strides)):
            ix = np.arange(s, dtype=np.int64) * st
            pos += ix.reshape((s,) + (1,) * (len(self.shape) - d - 1))
        return pos

    def read(self):
        return self.mem.data[self.positions()]


def _identity_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def _ref_for(ty: _Ty, mem, base_offset=0, base_strides=None):
    strides = ty.strides
    if strides is None or any(s == _DYN for s in strides):
        strides = base_strides if base_strides is not None else _identity_strides(ty.shape)
    offset = ty.offset if ty.offset not in (None, _DYN) else base_offset
    return _Ref(mem, ty.shape, strides, offset)


# ---------------------------------------------------------------------------------------
# decoded IR
# ---------------------------------------------------------------------------------------
class _Op:
    __slots__ = ("name", "ins", "outs", "regions", "op", "info")


class _Block:
    __slots__ = ("args", "ops")


class _Decoder:
    """Numbers the values of a region tree and records their types."""

    def __init__(self):
        self.ids: dict = {}
        self.types: list = []

    def value(self, v) -> int:
        i = self.ids.get(v)
        if i is None:
            i = self.ids[v] = len(self.types)
            self.types.append(_ty(v.type))
        return i

    def block(self, b) -> _Block:
        out = _Block()
        out.args = [self.value(a) for a in b.arguments]
        out.ops = [self.op(o.operation if hasattr(o, "operation") else o) for o in b.operations]
        return out

    def op(self, op) -> _Op:
        o = _Op()
        o.name, o.op, o.info = op.name, op, None
        o.ins = [self.value(v) for v in op.operands]
        o.outs = [self.value(v) for v in op.results]
        o.regions = [[self.block(b) for b in r.blocks] for r in op.regions]
        return o


def _short(o: _Op) -> str:
    text = str(o.op) if not o.regions else o.name
    line = text.strip().splitlines()[0] if text.strip() else o.name
    return line[:300]


def _ints(attr) -> list:
    from mlir import ir

    for cls in (ir.DenseI64ArrayAttr, ir.DenseI32ArrayAttr):
        try:
            return list(cls(attr))
        except (TypeError, ValueError):
            pass
    return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(attr)]


def _segments(op, counts_attr="operandSegmentSizes"):
    """The operand groups of ``op`` per its segment sizes (lists of operand positions)."""
    sizes = _ints(op.attributes[counts_attr])
    out, pos = [], 0
    for s in sizes:
        out.append(list(range(pos, pos + s)))
        pos += s
    return out


def _const_value(attr, ty: _Ty):
    from mlir import ir

    e = ty.elem
    if isinstance(attr, ir.DenseElementsAttr):
        dense = ir.DenseElementsAttr(attr)
        if dense.is_splat:
            v = _const_value(dense.get_splat_value(), _scalar_ty(e))
            return np.full(ty.vshape, v, dtype=_dtype(e))
        cls = ir.DenseFPElementsAttr if e in _FLOATS else ir.DenseIntElementsAttr
        d = cls(attr)
        vals = [d[i] for i in range(len(d))]
        return _round(np.array(vals, dtype=np.float64 if e in _FLOATS else np.int64),
                      e).reshape(ty.vshape)
    if isinstance(attr, ir.FloatAttr):
        return _round(np.float64(ir.FloatAttr(attr).value), e)[()]
    if isinstance(attr, ir.IntegerAttr):
        v = ir.IntegerAttr(attr).value
        if e == "i1":
            return np.bool_(v != 0)
        return _round(np.int64(v), e)[()]
    if isinstance(attr, ir.BoolAttr):
        return np.bool_(ir.BoolAttr(attr).value)
    raise NotImplementedError(f"constant {attr}")


def _scalar_ty(e):
    t = _Ty(e)
    t.kind, t.elem = "scalar", e
    return t


def _affine_fn(expr):
    """A function of the loop index arrays computing an affine expression."""
    from mlir import ir

    if isinstance(expr, ir.AffineDimExpr):
        p = ir.AffineDimExpr(expr).position
        return lambda d: d[p]
    if isinstance(expr, ir.AffineConstantExpr):
        c = ir.AffineConstantExpr(expr).value
        return lambda d: np.int64(c)
    for cls, f in ((ir.AffineAddExpr, np.add), (ir.AffineMulExpr, np.multiply),
                   (ir.AffineModExpr, np.mod), (ir.AffineFloorDivExpr, np.floor_divide),
                   (ir.AffineCeilDivExpr, lambda a, b: -np.floor_divide(-a, b))):
        if isinstance(expr, cls):
            e = cls(expr)
            lhs, rhs = _affine_fn(e.lhs), _affine_fn(e.rhs)
            return lambda d, f=f, lhs=lhs, rhs=rhs: f(lhs(d), rhs(d))
    raise NotImplementedError(f"affine expression {expr}")


# ---------------------------------------------------------------------------------------
# pure ops: f(op, operand values, operand types, result types) -> result value(s)
# ---------------------------------------------------------------------------------------
def _fbin(f):
    def g(o, a, at, rt):
        e = rt[0].elem
        dt = np.float64 if e == "f64" else np.float32
        with np.errstate(all="ignore"):
            return _round(f(np.asarray(a[0], dt), np.asarray(a[1], dt)), e)
    return g


def _fun(f):
    def g(o, a, at, rt):
        e = rt[0].elem
        with np.errstate(all="ignore"):
            return _round(f(np.asarray(a[0], np.float64)), e)
    return g


def _ibin(f, kind="plain"):
    """Integer binary op on bit patterns: 'plain' (wraps), 'u' (unsigned), 's' (signed)."""
    def g(o, a, at, rt):
        e = at[0].elem
        x, y = np.asarray(a[0]), np.asarray(a[1])
        if x.dtype == bool and y.dtype == bool and kind == "plain":
            return f(x, y)
        x, y = x.astype(np.int64), y.astype(np.int64)
        with np.errstate(all="ignore"):
            if kind == "s":
                r = f(_signed(x, e), _signed(y, e))
            elif kind == "u" and _width(e) >= 64:
                r = f(x.astype(np.uint64), y.astype(np.uint64)).astype(np.int64)
            else:
                r = f(x, y)
        return _round(r, rt[0].elem)
    return g


def _sdiv(a, b):
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where((a < 0) != (b < 0), -q, q)


def _srem(a, b):
    return a - _sdiv(a, b) * b


_CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
         5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater,
         9: np.greater_equal}


def _cmpi(o, a, at, rt):
    from mlir import ir

    if o.info is None:
        o.info = ir.IntegerAttr(o.op.attributes["predicate"]).value
    p, e = o.info, at[0].elem
    x, y = np.asarray(a[0]).astype(np.int64), np.asarray(a[1]).astype(np.int64)
    if p in (2, 3, 4, 5):
        x, y = _signed(x, e), _signed(y, e)
    elif p >= 6 and _width(e) >= 64:
        x, y = x.astype(np.uint64), y.astype(np.uint64)
    return _CMPI[p](x, y)


_CMPF = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal,
         6: np.not_equal, 8: np.equal, 9: np.greater, 10: np.greater_equal, 11: np.less,
         12: np.less_equal, 13: np.not_equal}


def _cmpf(o, a, at, rt):
    from mlir import ir

    if o.info is None:
        o.info = ir.IntegerAttr(o.op.attributes["predicate"]).value
    p = o.info
    x, y = np.asarray(a[0], np.float64), np.asarray(a[1], np.float64)
    ordered = ~(np.isnan(x) | np.isnan(y))
    if p == 0:
        return np.zeros(np.broadcast(x, y).shape, bool)
    if p == 15:
        return np.ones(np.broadcast(x, y).shape, bool)
    if p == 7:
        return ordered
    if p == 14:
        return ~ordered
    with np.errstate(invalid="ignore"):
        r = _CMPF[p](x, y)
    return r & ordered if p < 8 else r | ~ordered


def _select(o, a, at, rt):
    c = np.asarray(a[0])
    if at[0].kind == "scalar" and rt[0].vshape:
        c = c.reshape(c.shape + (1,) * len(rt[0].vshape))
    return np.where(c, a[1], a[2])


def _bitcast(o, a, at, rt):
    """arith.bitcast / vector.bitcast: bit exact, repacking along the last dimension."""
    se, de = at[0].elem, rt[0].elem
    ws, wd = _width(se), _width(de)
    bits = _to_bits(a[0], se)
    if wd > ws:
        r = wd // ws
        bits = bits.reshape(bits.shape[:-1] + (bits.shape[-1] // r, r))
        out = np.zeros(bits.shape[:-1], np.int64)
        for i in range(r):
            out |= (bits[..., i] & ((1 << ws) - 1)) << (ws * i)
        bits = out
    elif wd < ws:
        r = ws // wd
        parts = [(bits >> (wd * i)) & ((1 << wd) - 1) for i in range(r)]
        bits = np.stack(parts, -1)
        bits = bits.reshape(bits.shape[:-2] + (bits.shape[-2] * r,))
    return _from_bits(bits, de)


def _ext_s(o, a, at, rt):
    return _round(_signed(np.asarray(a[0]).astype(np.int64), at[0].elem), rt[0].elem)


def _ext_u(o, a, at, rt):
    return _round(np.asarray(a[0]).astype(np.int64), rt[0].elem)


def _index_cast(o, a, at, rt):
    x = np.asarray(a[0]).astype(np.int64)
    if at[0].elem != "index":
        x = _signed(x, at[0].elem)
    return _round(x, rt[0].elem)


def _to_float(signed):
    def g(o, a, at, rt):
        x = np.asarray(a[0]).astype(np.int64)
        if signed:
            x = _signed(x, at[0].elem)
        return _round(x.astype(np.float64), rt[0].elem)
    return g


def _from_float(o, a, at, rt):
    with np.errstate(all="ignore"):
        return _round(np.trunc(np.asarray(a[0], np.float64)).astype(np.int64), rt[0].elem)


def _fma(o, a, at, rt):
    x, y, z = (np.asarray(v, np.float64) for v in a)
    return _round(x * y + z, rt[0].elem)


def _fpowi(o, a, at, rt):
    return _round(np.asarray(a[0], np.float32) ** np.asarray(a[1]), rt[0].elem)


def _vector_positions(o, a, first_dynamic):
    """The static positions of a vector.extract/insert with its dynamic ones filled in."""
    from mlir import ir

    pos = list(ir.DenseI64ArrayAttr(o.op.attributes["static_position"]))
    dyn = iter(a[first_dynamic:])
    return [next(dyn) if p == _DYN else p for p in pos]


def _is_lanes(x, ty: _Ty) -> bool:
    return np.ndim(x) > len(ty.vshape)


def _vextract(o, a, at, rt):
    pos = _vector_positions(o, a, 1)
    src = np.asarray(a[0])
    lanes = _is_lanes(src, at[0])
    if all(np.ndim(p) == 0 for p in pos):
        key = tuple(int(p) for p in pos)
        return src[(slice(None),) + key] if lanes else src[key]
    n = max(np.size(p) for p in pos)
    src = np.broadcast_to(src, (n,) + at[0].vshape) if not lanes else src
    rows = np.arange(src.shape[0])
    return src[(rows,) + tuple(np.broadcast_to(p, (n,)) for p in pos)]


def _vinsert(o, a, at, rt):
    pos = _vector_positions(o, a, 2)
    val, dest = np.asarray(a[0]), np.asarray(a[1])
    lanes = _is_lanes(dest, at[1]) or _is_lanes(val, at[0]) or \
        any(np.ndim(p) > 0 for p in pos)
    if not lanes:
        out = dest.copy()
        out[tuple(int(p) for p in pos)] = val
        return out
    n = max([np.shape(dest)[0] if _is_lanes(dest, at[1]) else 0,
             np.shape(val)[0] if _is_lanes(val, at[0]) else 0] +
            [np.size(p) for p in pos])
    out = np.array(np.broadcast_to(dest, (n,) + at[1].vshape)) if not _is_lanes(dest, at[1]) \
        else dest.copy()
    if not _is_lanes(val, at[0]):
        val = np.broadcast_to(val, (n,) + at[0].vshape)
    rows = np.arange(n)
    out[(rows,) + tuple(np.broadcast_to(p, (n,)) for p in pos)] = val
    return out


def _vbroadcast(o, a, at, rt):
    src, rv = np.asarray(a[0]), rt[0].vshape
    sv = at[0].vshape
    if _is_lanes(src, at[0]):
        n = src.shape[0]
        src = src.reshape((n,) + (1,) * (len(rv) - len(sv)) + sv)
        return np.broadcast_to(src, (n,) + rv).copy()
    return np.broadcast_to(src, rv).copy()


def _vshape_cast(o, a, at, rt):
    src = np.asarray(a[0])
    lead = src.shape[:1] if _is_lanes(src, at[0]) else ()
    return src.reshape(lead + rt[0].vshape)


def _vfrom_elements(o, a, at, rt):
    n = max([np.shape(x)[0] for x in a if np.ndim(x) > 0] or [0])
    if n == 0:
        return np.array(a, dtype=_dtype(rt[0].elem)).reshape(rt[0].vshape)
    vals = [np.broadcast_to(x, (n,)) for x in a]
    return np.stack(vals, -1).reshape((n,) + rt[0].vshape)


def _vreduction(o, a, at, rt):
    """vector.reduction over a 1-D vector (lanes first when per-thread); no accumulator."""
    kind = str(o.op.attributes["kind"]).split("<")[-1].rstrip(">")
    if len(a) > 1:
        raise NotImplementedError("vector.reduction with an accumulator")
    src = np.asarray(a[0])
    fn = {"add": np.sum, "mul": np.prod, "or": np.any, "and": np.all,
          "maxnumf": np.max, "minnumf": np.min, "maximumf": np.max, "minimumf": np.min,
          "maxsi": np.max, "minsi": np.min}.get(kind)
    if fn is None:
        raise NotImplementedError(f"vector.reduction <{kind}>")
    return _round(fn(src, axis=-1), rt[0].elem)


def _const_op(o, a, at, rt):
    if o.info is None:
        o.info = _const_value(o.op.attributes["value"], rt[0])
    return o.info


_PURE = {
    "arith.constant": _const_op,
    "arith.addi": _ibin(np.add), "arith.subi": _ibin(np.subtract),
    "arith.muli": _ibin(np.multiply),
    "arith.divui": _ibin(lambda x, y: x // np.where(y == 0, 1, y), "u"),
    "arith.remui": _ibin(lambda x, y: x % np.where(y == 0, 1, y), "u"),
    "arith.ceildivui": _ibin(lambda x, y: -(-x // np.where(y == 0, 1, y)), "u"),
    "arith.divsi": _ibin(_sdiv, "s"), "arith.remsi": _ibin(_srem, "s"),
    "arith.floordivsi": _ibin(lambda x, y: x // np.where(y == 0, 1, y), "s"),
    "arith.ceildivsi": _ibin(lambda x, y: -(-x // np.where(y == 0, 1, y)), "s"),
    "arith.minui": _ibin(np.minimum, "u"), "arith.maxui": _ibin(np.maximum, "u"),
    "arith.minsi": _ibin(np.minimum, "s"), "arith.maxsi": _ibin(np.maximum, "s"),
    "arith.andi": _ibin(np.bitwise_and), "arith.ori": _ibin(np.bitwise_or),
    "arith.xori": _ibin(np.bitwise_xor),
    "arith.shli": _ibin(lambda x, y: x << y),
    "arith.shrui": _ibin(lambda x, y: x >> y, "u"),
    "arith.shrsi": _ibin(lambda x, y: x >> y, "s"),
    "arith.cmpi": _cmpi, "arith.cmpf": _cmpf, "arith.select": _select,
    "arith.extui": _ext_u, "arith.extsi": _ext_s, "arith.trunci": _ext_u,
    "arith.index_cast": _index_cast, "arith.index_castui": _ext_u,
    "arith.bitcast": _bitcast, "vector.bitcast": _bitcast,
    "arith.uitofp": _to_float(False), "arith.sitofp": _to_float(True),
    "arith.fptosi": _from_float, "arith.fptoui": _from_float,
    "arith.addf": _fbin(np.add), "arith.subf": _fbin(np.subtract),
    "arith.mulf": _fbin(np.multiply), "arith.divf": _fbin(np.divide),
    "arith.maximumf": _fbin(np.maximum), "arith.minimumf": _fbin(np.minimum),
    "arith.maxnumf": _fbin(np.fmax), "arith.minnumf": _fbin(np.fmin),
    "arith.negf": _fun(np.negative),
    "arith.extf": _fun(lambda x: x), "arith.truncf": _fun(lambda x: x),
    "math.fma": _fma, "math.fpowi": _fpowi,
    "math.exp": _fun(np.exp), "math.exp2": _fun(np.exp2), "math.log": _fun(np.log),
    "math.log1p": _fun(np.log1p), "math.sqrt": _fun(np.sqrt),
    "math.rsqrt": _fun(lambda x: 1 / np.sqrt(x)), "math.tanh": _fun(np.tanh),
    "math.absf": _fun(np.abs), "math.floor": _fun(np.floor), "math.ceil": _fun(np.ceil),
    "vector.extract": _vextract, "vector.insert": _vinsert,
    "vector.broadcast": _vbroadcast, "vector.splat": _vbroadcast,
    "vector.shape_cast": _vshape_cast, "vector.from_elements": _vfrom_elements,
    "vector.reduction": _vreduction,
    "llvm.extractvalue": lambda o, a, at, rt: a[0][
        _ints(o.op.attributes["position"])[0]],
    "llvm.insertvalue": lambda o, a, at, rt: _insert_field(
        a[0], _ints(o.op.attributes["position"])[0], a[1]),
    "llvm.mlir.undef": lambda o, a, at, rt: (None,) * _struct_fields(rt[0].text),
    "llvm.mlir.constant": _const_op,
    "llvm.inttoptr": lambda o, a, at, rt: np.asarray(a[0]).astype(np.int64),
}


def _struct_fields(text: str) -> int:
    """Fields of an ``!llvm.struct<(...)>`` of scalars."""
    assert text.startswith("!llvm.struct<("), text
    return text.count(",") + 1


def _insert_field(struct: tuple, pos: int, value) -> tuple:
    return struct[:pos] + (value,) + struct[pos + 1:]


# ---------------------------------------------------------------------------------------
# the interpreter
# ---------------------------------------------------------------------------------------
_TERMINATORS = ("scf.yield", "gpu.terminator", "gpu.return", "func.return", "linalg.yield")
_DIMS = {"x": 0, "y": 1, "z": 2}


# arith::AtomicRMWKind's numbering (the generic form prints the kind as an integer)
def _atomic_kinds() -> dict:
    """{the integer of a memref.atomic_rmw's kind in the generic form: its name}, from the
    bindings' enum (its numbering is the MLIR build's, not the order in the docs)."""
    from mlir.dialects.arith import AtomicRMWKind
    return {int(k): k.name for k in AtomicRMWKind}


_ATOMIC_KINDS = _atomic_kinds()


class Simt:
    """Runs a host function of ``module`` (``func.func @main``, or the first function)
    and the kernels it launches, every kernel thread in lock step."""

    def __init__(self, module):
        self.module = module
        self._kernels: dict = {}
        self.mems: list = []
        self.arguments: list = []
        #: made-up addresses of global buffers taken by extract_aligned_pointer_as_index:
        #: [(buffer, first byte, bytes)], _GLOBAL_SPACING apart
        self.global_spans: list = []

    # -- host ------------------------------------------------------------------------
    def run(self, args, func: str | None = None):
        """Run the function on ``args`` (numpy arrays or torch tensors, one per argument;
        memref arguments are copied into buffers of the argument's layout).  Returns the
        function's results (memrefs read back as arrays); ``self.arguments`` holds the
        arguments' final contents."""
        from mlir import ir

        funcs = [o.operation for o in self.module.body.operations
                 if o.operation.name == "func.func" and o.operation.regions[0].blocks]
        if func is None:
            named = [f for f in funcs
                     if ir.StringAttr(f.attributes["sym_name"]).value == "main"]
            f = (named or funcs)[0]
        else:
            f = next(f for f in funcs if ir.StringAttr(f.attributes["sym_name"]).value == func)
        dec = _Decoder()
        body = dec.block(f.regions[0].blocks[0])
        self.types = dec.types
        env: dict = {}
        refs = []
        assert len(args) == len(body.args), (len(args), len(body.args))
        for a, x in zip(body.args, args):
            env[a] = self._bind(x, dec.types[a])
            refs.append(env[a])
        results = self._host(body, env)
        self.arguments = [r.read() if isinstance(r, _Ref) else r for r in refs]
        return results

    def _bind(self, x, ty: _Ty):
        if type(x).__module__.startswith("torch"):
            x = x.detach().cpu()
            x = (x.double() if x.is_floating_point() else x.long()).numpy()
        if ty.kind != "memref":
            return _round(np.asarray(x), ty.elem)[()]
        x = np.asarray(x)
        assert tuple(x.shape) == ty.shape or x.size == int(np.prod(ty.shape)), \
            (x.shape, ty.shape)
        strides = ty.strides if all(s != _DYN for s in ty.strides) else \
            _identity_strides(ty.shape)
        offset = ty.offset if ty.offset != _DYN else 0
        size = offset + sum((s - 1) * st for s, st in zip(ty.shape, strides)) + 1 \
            if all(ty.shape) else offset
        mem = self._mem(size, ty.elem)
        ref = _Ref(mem, ty.shape, strides, offset)
        pos = ref.positions()
        mem.data[pos] = _round(x.reshape(ty.shape), ty.elem)
        mem.valid[pos] = True
        return ref

    def _mem(self, n, elem, shared_blocks=None):
        mem = _Mem(n, elem, shared_blocks)
        if shared_blocks is None:
            self.mems.append(mem)
        return mem

    def _host(self, body: _Block, env):
        for o in body.ops:
            n = o.name
            try:
                if n == "func.return":
                    return [env[i].read() if isinstance(env[i], _Ref) else env[i]
                            for i in o.ins]
                h = _HOST.get(n)
                if h is not None:
                    h(self, o, env)
                elif n in _PURE:
                    self._pure(o, env)
                else:
                    raise NotImplementedError(f"host op {n}")
            except Exception as e:
                _annotate(e, o)
                raise
        return []

    def _pure(self, o, env):
        types = self.types
        r = _PURE[o.name](o, [env[i] for i in o.ins], [types[i] for i in o.ins],
                          [types[i] for i in o.outs])
        if len(o.outs) == 1:
            env[o.outs[0]] = r
        else:
            for i, v in zip(o.outs, r):
                env[i] = v

    def _h_alloc(self, o, env):
        ty = self.types[o.outs[0]]
        strides = ty.strides if all(s != _DYN for s in ty.strides) else \
            _identity_strides(ty.shape)
        size = max(1, int(np.prod(ty.shape))) + (ty.offset or 0)
        mem = self._mem(size, ty.elem)
        if "latch.zero_at_start" in o.op.attributes:   # an unshared arena slot: zeroed once
            mem.valid[:] = True
        env[o.outs[0]] = _Ref(mem, ty.shape, strides, ty.offset or 0)

    def _h_view(self, o, env):
        """memref.view of a byte buffer (global, or workgroup memory in a kernel): a typed
        buffer shared by all views of that element type (views of one allocation with
        different element types do not alias here)."""
        src = env[o.ins[0]]
        shift = int(env[o.ins[1]])
        ty = self.types[o.outs[0]]
        nbytes = _width(ty.elem) // 8
        raw = src.mem
        assert raw.elem == "i8" and shift % nbytes == 0 and src.offset == 0
        views = raw.__dict__.setdefault("views", {})
        mem = views.get(ty.elem)
        if mem is None:
            if raw.shared_blocks is None:
                mem = self._mem(raw.data.size // nbytes, ty.elem)
            else:
                per = raw.shared_blocks // nbytes
                mem = _Mem(per * self.G, ty.elem, shared_blocks=per)
            views[ty.elem] = mem
        ref = _Ref(mem, ty.shape, _identity_strides(ty.shape), shift // nbytes)
        size = int(np.prod(ty.shape))
        limit = raw.shared_blocks if raw.shared_blocks is not None else raw.data.size
        assert shift + size * nbytes <= limit, \
            f"memref.view of {size * nbytes} bytes at {shift} in a buffer of {limit}"
        env[o.outs[0]] = ref

    def _k_view(self, o, env, mask):
        self._h_view(o, env)

    def _k_dynamic_shared(self, o, env, mask):
        n = self.dynamic_shared
        assert n > 0, "gpu.dynamic_shared_memory without dynamic_shared_memory_size"
        if self.dyn_raw is None:        # one buffer per launch, however often it is named
            self.dyn_raw = _Mem(self.G * n, "i8", shared_blocks=n)
        env[o.outs[0]] = _Ref(self.dyn_raw, (n,), (1,), 0)

    def _h_reshape(self, o, env):
        src = env[o.ins[0]]
        ty = self.types[o.outs[0]]
        same = src.strides if len(ty.shape) == len(src.shape) else None
        env[o.outs[0]] = _ref_for(ty, src.mem, src.offset, same)

    def _h_subview(self, o, env):
        from mlir import ir

        op = o.op
        src = env[o.ins[0]]
        segs = _segments(op)
        dyn = [iter([int(env[o.ins[i]]) for i in seg]) for seg in segs[1:4]]
        vals = []
        for name, it in zip(("static_offsets", "static_sizes", "static_strides"), dyn):
            vals.append([next(it) if v == _DYN else v
                         for v in ir.DenseI64ArrayAttr(op.attributes[name])])
        offs, _sizes, steps = vals
        offset = src.offset + sum(a * s for a, s in zip(offs, src.strides))
        ty = self.types[o.outs[0]]
        strides = [s * st for s, st in zip(src.strides, steps)]
        if len(ty.shape) == len(strides):
            base = strides
        else:
            base = None
        env[o.outs[0]] = _ref_for(ty, src.mem, offset, base)

    def _h_copy(self, o, env):
        src, dst = env[o.ins[0]], env[o.ins[1]]
        pos = dst.positions()
        dst.mem.data[pos] = _round(src.read(), dst.mem.elem)
        dst.mem.valid[pos] = True

    def _h_ignore(self, o, env):
        pass

    def _h_fill(self, o, env):
        ref = env[o.ins[1]]
        pos = ref.positions()
        ref.mem.data[pos] = _round(env[o.ins[0]], ref.mem.elem)
        ref.mem.valid[pos] = True

    def _h_generic(self, o, env):
        """linalg.generic on memrefs, evaluated with numpy: vectorized over the parallel
        loops, the reduction loops in order (outer first)."""
        from mlir import ir

        op = o.op
        if o.info is None:
            maps = [[_affine_fn(e) for e in ir.AffineMapAttr(m).value.results]
                    for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
            its = ["reduction" in str(x) for x in ir.ArrayAttr(op.attributes["iterator_types"])]
            raw = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
            sizes = [None] * len(its)
            for v, m in zip(op.operands, raw):
                shape = ir.MemRefType(v.type).shape
                for e, s in zip(m.results, shape):
                    if isinstance(e, ir.AffineDimExpr):
                        sizes[ir.AffineDimExpr(e).position] = s
            n_in = _ints(op.attributes["operandSegmentSizes"])[0]
            o.info = (maps, its, sizes, n_in)
        maps, its, sizes, n_in = o.info
        refs = [env[i] for i in o.ins]
        par = [d for d, r in enumerate(its) if not r]
        red = [d for d, r in enumerate(its) if r]
        grids = np.meshgrid(*[np.arange(sizes[d]) for d in par], indexing="ij")
        pdims = {d: g.reshape(-1) for d, g in zip(par, grids)}
        npts = int(np.prod([sizes[d] for d in par])) if par else 1
        block = o.regions[0][0]
        for rpt in itertools.product(*[range(sizes[d]) for d in red]):
            dims = [None] * len(its)
            for d, v in pdims.items():
                dims[d] = v
            for d, v in zip(red, rpt):
                dims[d] = np.full(npts, v, np.int64)
            pos = []
            for ref, m in zip(refs, maps):
                p = np.full(npts, ref.offset, np.int64)
                for f, st in zip(m, ref.strides):
                    p = p + np.broadcast_to(f(dims), (npts,)) * st
                pos.append(p)
            benv = dict(env)
            for k, (a, ref, p) in enumerate(zip(block.args, refs, pos)):
                x, ok = ref.mem.data[p], ref.mem.valid[p]
                if not ok.all():
                    assert k >= n_in and x.dtype.kind == "f", \
                        "linalg.generic reads an unwritten element"
                    x = np.where(ok, x, np.nan)      # an unwritten output: NaN if used
                benv[a] = x
            outs = self._body(block, benv, dims)
            for ref, p, v in zip(refs[n_in:], pos[n_in:], outs):
                ref.mem.data[p] = _round(np.broadcast_to(v, (npts,)), ref.mem.elem)
                ref.mem.valid[p] = True

    def _body(self, block, env, dims):
        for o in block.ops:
            if o.name == "linalg.yield":
                return [env[i] for i in o.ins]
            if o.name == "linalg.index":
                from mlir import ir
                env[o.outs[0]] = dims[ir.IntegerAttr(o.op.attributes["dim"]).value]
            elif o.name == "memref.load":
                ref = env[o.ins[0]]
                idx = [np.asarray(env[i]) for i in o.ins[1:]]
                p = ref.offset + sum(i * st for i, st in zip(idx, ref.strides))
                env[o.outs[0]] = ref.mem.data[p]
            else:
                self._pure(o, env)
        raise AssertionError("a linalg.generic body without linalg.yield")

    # -- launches ----------------------------------------------------------------------
    def _setup(self, grid, block):
        gx, gy, gz = grid
        bx, by, bz = block
        self.G, self.T = gx * gy * gz, bx * by * bz
        self.L = L = self.G * self.T
        lanes = np.arange(L, dtype=np.int64)
        self.blk, t = lanes // self.T, lanes % self.T
        self.tlin = t
        b = self.blk
        self.bids = (b % gx, (b // gx) % gy, b // (gx * gy))
        self.tids = (t % bx, (t // bx) % by, t // (bx * by))
        self.gdim, self.bdim = tuple(np.int64(v) for v in grid), tuple(np.int64(v) for v in block)
        self.bepoch = np.zeros(self.G, np.int64)
        self.groups = np.zeros(L, np.int64)      # committed cp.async groups per thread
        self.pending: list = []
        self.dynamic_shared = 0
        self.fences = 0                 # gpu-scope fences so far in this launch
        self.acquired = np.zeros(self.G, np.int64)   # per block: its last fence's number
        self.dyn_raw = None             # this launch's dynamic shared memory
        self.wg_open: dict = {}         # warpgroup (first thread) -> uncommitted wgmma reads
        self.wg_groups: dict = {}       # warpgroup -> committed groups of wgmma reads
        for mem in self.mems:           # launches are ordered: forget the last one's accesses
            mem.reset()

    def _h_launch(self, o, env):
        """gpu.launch with the kernel inline (body arguments: block ids, thread ids, grid
        and block sizes, then workgroup buffers)."""
        op = o.op
        if "operandSegmentSizes" in op.attributes:
            segs = _segments(op)
            sizes = [env[o.ins[s[0]]] for s in segs[1:7]]
        else:
            sizes = [env[i] for i in o.ins[:6]]
        grid, block = [int(v) for v in sizes[:3]], [int(v) for v in sizes[3:6]]
        self._setup(grid, block)
        if "operandSegmentSizes" in op.attributes and len(segs) > 10 and segs[10]:
            self.dynamic_shared = int(env[o.ins[segs[10][0]]])
        body = o.regions[0][0]
        vals = list(self.bids) + list(self.tids) + list(self.gdim) + list(self.bdim)
        for a, v in zip(body.args[:12], vals):
            env[a] = v
        for a in body.args[12:]:
            env[a] = self._shared(self.types[a])
        self._block(body, env, np.ones(self.L, bool))

    def _shared(self, ty: _Ty):
        n = int(np.prod(ty.shape))
        mem = _Mem(self.G * n, ty.elem, shared_blocks=n)
        return _Ref(mem, ty.shape, _identity_strides(ty.shape), 0)

    def _kernel(self, symbol: str):
        from mlir import ir

        if symbol in self._kernels:
            return self._kernels[symbol]
        mod_name, fn_name = [s.lstrip("@") for s in symbol.split("::")]
        for o in self.module.body.operations:
            o = o.operation
            if o.name == "gpu.module" and \
                    ir.StringAttr(o.attributes["sym_name"]).value == mod_name:
                for f in o.regions[0].blocks[0].operations:
                    f = f.operation
                    if f.name == "gpu.func" and \
                            ir.StringAttr(f.attributes["sym_name"]).value == fn_name:
                        dec = _Decoder()
                        body = dec.block(f.regions[0].blocks[0])
                        n_in = len(ir.FunctionType(
                            ir.TypeAttr(f.attributes["function_type"]).value).inputs)
                        n_wg = ir.IntegerAttr(f.attributes["workgroup_attributions"]).value \
                            if "workgroup_attributions" in f.attributes else 0
                        self._kernels[symbol] = (body, dec.types, n_in, n_wg)
                        return self._kernels[symbol]
        raise KeyError(f"no kernel {symbol}")

    def _h_launch_func(self, o, env):
        op = o.op
        segs = _segments(op)
        grid = [int(env[o.ins[s[0]]]) for s in segs[1:4]]
        block = [int(env[o.ins[s[0]]]) for s in segs[4:7]]
        kernel_args = [env[o.ins[i]] for i in segs[-2]]
        body, types, n_in, n_wg = self._kernel(str(op.attributes["kernel"]))
        self._setup(grid, block)
        self.dynamic_shared = int(env[o.ins[segs[10][0]]]) if segs[10] else 0
        host_types = self.types
        self.types = types
        try:
            kenv: dict = {}
            for a, v in zip(body.args[:n_in], kernel_args):
                kenv[a] = v
            for a in body.args[n_in:n_in + n_wg]:
                kenv[a] = self._shared(types[a])
            assert len(body.args) == n_in + n_wg, "private attributions are not supported"
            self._block(body, kenv, np.ones(self.L, bool))
        finally:
            self.types = host_types

    # -- kernels -------------------------------------------------------------------------
    def _block(self, block: _Block, env, mask):
        handlers = _KERNEL
        for o in block.ops:
            n = o.name
            if n in _TERMINATORS:
                return [env[i] for i in o.ins]
            try:
                h = handlers.get(n)
                if h is not None:
                    h(self, o, env, mask)
                elif n in _PURE:
                    self._pure(o, env)
                else:
                    raise NotImplementedError(f"kernel op {n}")
            except Exception as e:
                _annotate(e, o)
                raise
        return []

    def lanes(self, x, ty: _Ty):
        return np.broadcast_to(x, (self.L,) + ty.vshape)

    def _where(self, m, a, b, ty: _Ty):
        m = m.reshape((self.L,) + (1,) * len(ty.vshape))
        return np.where(m, self.lanes(a, ty), self.lanes(b, ty))

    def _k_id(self, o, env, mask):
        d = _DIMS[str(o.op.attributes["dimension"]).rstrip(">")[-1]]
        src = {"gpu.thread_id": self.tids, "gpu.block_id": self.bids,
               "gpu.block_dim": self.bdim, "gpu.grid_dim": self.gdim}[o.name]
        env[o.outs[0]] = src[d]

    def _k_lane_id(self, o, env, mask):
        env[o.outs[0]] = self.tlin % 32

    def _k_memory_barrier(self, o, env, mask):
        """nvvm.memory.barrier (membar) at gpu scope: the fencing threads' earlier global
        writes are released, and their blocks see the writes released before (the model
        of a ticket's two fences; any other scope is not modelled)."""
        assert "gpu" in str(o.op.attributes["scope"]), "only gpu-scope membar is modelled"
        self.fences += 1
        th = np.nonzero(mask)[0]
        for mem in self.mems:
            if mem.shared_blocks is None:
                mine = np.isin(mem.w_thread, th) & (mem.released < 0)
                mem.released[mine] = self.fences
        self.acquired[np.unique(self.blk[th])] = self.fences

    def _k_barrier(self, o, env, mask):
        m = mask.reshape(self.G, self.T)
        whole = m.all(1)
        assert (whole | ~m.any(1)).all(), "a barrier under control flow divergent in a block"
        self.bepoch[whole] += 1

    def _k_nvvm_barrier(self, o, env, mask):
        self._k_barrier(o, env, mask)
        if o.outs:          # bar.red: the block's reduction of a predicate
            red = str(o.op.attributes["reductionOp"]) if "reductionOp" in o.op.attributes \
                else ""
            x = (np.broadcast_to(env[o.ins[-1]], (self.L,)) != 0) & mask
            per = x.reshape(self.G, self.T)
            if "or" in red:
                r = per.any(1)
            elif "and" in red:
                r = (per | ~mask.reshape(self.G, self.T)).all(1)
            else:
                raise NotImplementedError(f"nvvm.barrier {red}")
            env[o.outs[0]] = _round(r[self.blk].astype(np.int64), self.types[o.outs[0]].elem)

    _ALL_REDUCE = {"add": np.sum, "mul": np.prod, "maximumf": np.max, "minimumf": np.min,
                   "maxnumf": np.nanmax, "minnumf": np.nanmin, "max": np.max, "min": np.min,
                   "maxui": np.max, "minui": np.min,
                   "and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce,
                   "xor": np.bitwise_xor.reduce}

    def _k_all_reduce(self, o, env, mask):
        """gpu.all_reduce <op> (no body): every thread of a block gets the block's
        reduction of its value; all threads of the block take part (a barrier)."""
        kind = str(o.op.attributes["op"]).split()[-1].rstrip(">")
        self._k_barrier(o, env, mask)
        x = np.broadcast_to(env[o.ins[0]], (self.L,)).reshape(self.G, self.T)
        r = np.array([self._ALL_REDUCE[kind](row) for row in x])
        env[o.outs[0]] = _round(r[self.blk], self.types[o.outs[0]].elem)

    def _warp(self, mask, what):
        assert self.T % 32 == 0, f"{what} in a block of {self.T} threads"
        m = mask.reshape(-1, 32)
        assert (m.all(1) | ~m.any(1)).all(), f"{what} with part of a warp"

    def _k_shuffle(self, o, env, mask):
        mode = str(o.op.attributes["mode"])
        self._warp(mask, "a shuffle")
        v = self.lanes(env[o.ins[0]], self.types[o.ins[0]])
        off = np.broadcast_to(env[o.ins[1]], (self.L,)).astype(np.int64)
        lanes = np.arange(self.L)
        lane = self.tlin % 32
        if "xor" in mode:
            src_lane = lane ^ off
        elif "down" in mode:
            src_lane = lane + off
        elif "up" in mode:
            src_lane = lane - off
        else:
            src_lane = off
        ok = (src_lane >= 0) & (src_lane < 32)
        src = np.where(ok, lanes - lane + src_lane, lanes)
        env[o.outs[0]] = v[src]
        env[o.outs[1]] = ok

    # memory
    def _address(self, ref: _Ref, idx, check, what, extent=1):
        """Flat addresses (L,) of ``ref[idx]`` per thread; the indices of threads in
        ``check`` must be in bounds (the last one for ``extent`` elements)."""
        L = self.L
        addr = np.full(L, ref.offset, np.int64)
        nd = len(ref.shape)
        for d, (i, s, st) in enumerate(zip(idx, ref.shape, ref.strides)):
            i = np.broadcast_to(np.asarray(i, np.int64), (L,))
            hi = s - (np.asarray(extent) - 1 if d == nd - 1 else 0)
            bad = check & ((i < 0) | (i >= hi))
            if bad.any():
                k = int(np.argmax(bad))
                raise AssertionError(f"out-of-bounds {what}: index {d} is {int(i[k])} "
                                     f"(size {s}) in thread {k}")
            addr = addr + i * st
        if ref.mem.shared_blocks is not None:
            addr = addr + self.blk * ref.mem.shared_blocks
        return addr

    def _aligned(self, ref: _Ref, base, check, nbytes: int, what: str):
        """The byte addresses of ``base`` (flat element addresses) are multiples of
        ``nbytes`` for the threads in ``check`` (buffers themselves are taken as aligned:
        Latch's buffers are 256-byte aligned, workgroup memory 16)."""
        local = base - self.blk * ref.mem.shared_blocks if ref.mem.shared_blocks else base
        byte = local * (_width(ref.mem.elem) // 8)
        bad = check & (byte % nbytes != 0)
        if bad.any():
            k = int(np.argmax(bad))
            raise AssertionError(f"misaligned {what}: byte offset {int(byte[k])} is not a "
                                 f"multiple of {nbytes} (thread {k})")

    def _vector_alignment(self, o, ref, base, mask, what):
        from mlir import ir

        if "alignment" in o.op.attributes:
            self._aligned(ref, base, mask, ir.IntegerAttr(o.op.attributes["alignment"]).value,
                          what)

    def _access(self, mem: _Mem, a, th, write: bool):
        if a.size == 0:
            return
        assert (a >= 0).all() and (a < mem.data.size).all(), "out-of-bounds access"
        blk = self.blk[th]
        ep = self.bepoch[blk]
        if mem.pend_thread is not None and (mem.pend_thread[a] >= 0).any():
            raise Race(("write to" if write else "read of") +
                       " a cp.async destination before its wait")
        wt = mem.w_thread[a]
        if mem.shared_blocks is None:
            # another block's write is visible after its writer's gpu-scope fence and a
            # later one of the reader (membar.gl on both sides of a ticket: a last block)
            seen = (mem.released[a] >= 0) & (mem.released[a] < self.acquired[blk]) & ~write
            other = (wt >= 0) & (wt // self.T != blk) & ~seen
            if other.any():
                raise Race("a block reads or writes global memory another block wrote")
            if write:
                rb = mem.r_block[a]
                if ((rb == -2) | ((rb >= 0) & (rb != blk))).any():
                    raise Race("a block writes global memory another block read")
        if ((wt >= 0) & (wt != th) & (mem.w_epoch[a] == ep)).any():
            raise Race(f"{'write' if write else 'read'} after another thread's write with "
                       "no barrier in between")
        if write:
            rt = mem.r_thread[a]
            if ((mem.r_epoch[a] == ep) & (rt != th) & (rt != -1)).any():
                raise Race("write after another thread's read with no barrier in between")
            if len(np.unique(a)) != len(a):
                raise Race("two threads write one element in one op")
            mem.w_thread[a], mem.w_epoch[a] = th, ep
        else:
            fresh = mem.r_epoch[a] != ep
            prev = mem.r_thread[a]
            mem.r_thread[a] = np.where(fresh | (prev == th), th, -2)
            mem.r_epoch[a] = ep
            rb = mem.r_block[a]
            mem.r_block[a] = np.where((rb == -1) | (rb == blk), blk, -2)
            u, counts = np.unique(a, return_counts=True)
            if (counts > 1).any():
                mem.r_thread[u[counts > 1]] = -2

    def _read(self, mem: _Mem, addr, emask, what="a read"):
        """Values at ``addr`` (L, n) where ``emask`` (L, n); zero elsewhere."""
        a = addr[emask]
        th = np.nonzero(emask)[0]
        self._access(mem, a, th, write=False)
        if not mem.valid[a].all():
            raise AssertionError(f"{what} of an unwritten element")
        out = np.zeros(addr.shape, mem.data.dtype)
        out[emask] = mem.data[a]
        return out

    def _write(self, mem: _Mem, addr, vals, emask):
        a = addr[emask]
        th = np.nonzero(emask)[0]
        self._access(mem, a, th, write=True)
        if mem.shared_blocks is not None:
            if getattr(mem, "wg_pending", None) is not None:
                if (mem.wg_pending[a] > 0).any():
                    raise Race("a write to shared memory that a wgmma group still reads (no "
                               "wgmma.wait_group retired it)")
                # another warpgroup's wait orders its reads before this write only through
                # a barrier after that wait (warpgroups do not run in lock step)
                wg = th // 128
                blk = self.blk[th]
                if ((mem.wg_ret_epoch[a] == self.bepoch[blk]) &
                        (mem.wg_ret_group[a] != wg)).any():
                    raise Race("a write to shared memory that a wgmma group of another "
                               "warpgroup still reads (its wait_group, but no barrier since)")
            if getattr(mem, "unfenced", None) is None:
                mem.unfenced = np.zeros(mem.data.size, bool)
            mem.unfenced[a] = True
        mem.data[a] = np.broadcast_to(vals, addr.shape)[emask]
        mem.valid[a] = True
        return a, th

    def _k_load(self, o, env, mask):
        ref = env[o.ins[0]]
        addr = self._address(ref, [env[i] for i in o.ins[1:]], mask, "memref.load")
        env[o.outs[0]] = self._read(ref.mem, addr[:, None], mask[:, None])[:, 0]

    def _k_store(self, o, env, mask):
        ref = env[o.ins[1]]
        addr = self._address(ref, [env[i] for i in o.ins[2:]], mask, "memref.store")
        v = _round(np.broadcast_to(env[o.ins[0]], (self.L,)), ref.mem.elem)
        self._write(ref.mem, addr[:, None], v[:, None], mask[:, None])

    def _k_vload(self, o, env, mask):
        ref = env[o.ins[0]]
        vs = self.types[o.outs[0]].vshape
        assert len(vs) == 1, "vector.load of a multi-dimensional vector"
        n = vs[0]
        base = self._address(ref, [env[i] for i in o.ins[1:]], mask, "vector.load", n)
        self._vector_alignment(o, ref, base, mask, "vector.load")
        addr = base[:, None] + np.arange(n) * ref.strides[-1]
        env[o.outs[0]] = self._read(ref.mem, addr, np.broadcast_to(mask[:, None], addr.shape))

    def _k_vstore(self, o, env, mask):
        ref = env[o.ins[1]]
        ty = self.types[o.ins[0]]
        n = ty.vshape[0]
        base = self._address(ref, [env[i] for i in o.ins[2:]], mask, "vector.store", n)
        self._vector_alignment(o, ref, base, mask, "vector.store")
        addr = base[:, None] + np.arange(n) * ref.strides[-1]
        v = _round(self.lanes(env[o.ins[0]], ty), ref.mem.elem)
        self._write(ref.mem, addr, v, np.broadcast_to(mask[:, None], addr.shape))

    def _k_atomic(self, o, env, mask):
        """memref.atomic_rmw: an atomic read-modify-write (not a race between threads)."""
        kind = str(o.op.attributes["kind"])
        if kind.split(" : ")[0].isdigit():      # the generic form's integer (AtomicRMWKind)
            kind = _ATOMIC_KINDS.get(int(kind.split(" : ")[0]), kind)
        ref = env[o.ins[1]]
        addr = self._address(ref, [env[i] for i in o.ins[2:]], mask, "memref.atomic_rmw")
        v = np.broadcast_to(env[o.ins[0]], (self.L,))
        a = addr[mask]
        old = np.zeros(self.L, ref.mem.data.dtype)
        old[mask] = ref.mem.data[a]
        assert ref.mem.valid[a].all(), "atomic_rmw of an unwritten element"
        if "addi" in kind:                  # lane by lane: each sees the adds before it
            lanes = np.nonzero(mask)[0]
            for lane, at in zip(lanes, a):
                old[lane] = ref.mem.data[at]
                ref.mem.data[at] += v[lane]
        elif "addf" in kind:
            np.add.at(ref.mem.data, a, v[mask])
        elif "max" in kind:
            np.maximum.at(ref.mem.data, a, v[mask])
        elif "min" in kind:
            np.minimum.at(ref.mem.data, a, v[mask])
        else:
            raise NotImplementedError(f"atomic_rmw {kind}")
        ref.mem.data[a] = _round(ref.mem.data[a], ref.mem.elem)
        env[o.outs[0]] = old

    # cp.async
    def _k_async_copy(self, o, env, mask):
        from mlir import ir

        op = o.op
        dst_s, didx_s, src_s, sidx_s, n_s = _segments(op)
        n = ir.IntegerAttr(op.attributes["dstElements"]).value
        dst, src = env[o.ins[dst_s[0]]], env[o.ins[src_s[0]]]
        assert dst.mem.shared_blocks is not None, "cp.async to global memory"
        count = np.broadcast_to(np.asarray(env[o.ins[n_s[0]]], np.int64), (self.L,)) \
            if n_s else np.full(self.L, n, np.int64)
        assert ((count >= 0) & (count <= n))[mask].all(), "cp.async srcElements out of range"
        reads = mask & (count > 0)
        sbase = self._address(src, [env[o.ins[i]] for i in sidx_s], reads,
                              "nvgpu.device_async_copy source", np.maximum(count, 1))
        dbase = self._address(dst, [env[o.ins[i]] for i in didx_s], mask,
                              "nvgpu.device_async_copy destination", n)
        size = n * _width(dst.mem.elem) // 8
        assert size in (4, 8, 16), f"cp.async of {size} bytes"
        self._aligned(src, sbase, reads, size, "cp.async source")
        self._aligned(dst, dbase, mask, size, "cp.async destination")
        j = np.arange(n)
        saddr = sbase[:, None] + j * src.strides[-1]
        daddr = dbase[:, None] + j * dst.strides[-1]
        rmask = reads[:, None] & (j[None, :] < count[:, None])
        vals = self._read(src.mem, np.where(rmask, saddr, 0), rmask, "cp.async")
        vals = _round(vals, dst.mem.elem)
        mem = dst.mem
        a, th = self._write(mem, daddr, vals, np.broadcast_to(mask[:, None], daddr.shape))
        if mem.pend_thread is None:
            mem.pend_thread = np.full(mem.data.size, -1, np.int64)
            mem.pend_seq = np.zeros(mem.data.size, np.int64)
            self.pending.append(mem)
        mem.pend_thread[a] = th
        mem.pend_seq[a] = self.groups[th]     # the group the next commit closes
        env[o.outs[0]] = np.int64(0)

    def _k_async_group(self, o, env, mask):
        self.groups[mask] += 1
        if o.outs:
            env[o.outs[0]] = np.int64(0)

    def _k_async_wait(self, o, env, mask):
        from mlir import ir

        attrs = o.op.attributes
        name = "n" if o.name == "nvvm.cp.async.wait.group" else "numGroups"
        keep = ir.IntegerAttr(attrs[name]).value if name in attrs else 0
        for mem in self.pending:
            idx = np.nonzero(mem.pend_thread >= 0)[0]
            th = mem.pend_thread[idx]
            done = mask[th] & (mem.pend_seq[idx] < self.groups[th] - keep)
            a = idx[done]
            mem.pend_thread[a] = -1
            mem.w_epoch[a] = self.bepoch[self.blk[th[done]]]

    # warp matrix ops
    def _k_ldmatrix(self, o, env, mask):
        from mlir import ir

        op = o.op
        tiles = ir.IntegerAttr(op.attributes["numTiles"]).value
        trans = ir.BoolAttr(op.attributes["transpose"]).value
        self._warp(mask, "nvgpu.ldmatrix")
        ref = env[o.ins[0]]
        assert _width(ref.mem.elem) == 16, "ldmatrix of a non-16-bit element type"
        lane = self.tlin % 32
        supply = mask & (lane < 8 * tiles)
        base = self._address(ref, [env[i] for i in o.ins[1:]], supply, "nvgpu.ldmatrix", 8)
        self._aligned(ref, base, supply, 16, "nvgpu.ldmatrix row")
        addr = base[:, None] + np.arange(8) * ref.strides[-1]
        rows = self._read(ref.mem, addr, np.broadcast_to(supply[:, None], addr.shape))
        W = self.L // 32
        rows = rows.reshape(W, 32, 8)[:, :8 * tiles].reshape(W, tiles, 8, 8)   # [w, j, r, c]
        ln = np.arange(32)
        r = (ln // 4)[:, None]
        c = 2 * (ln % 4)[:, None] + np.arange(2)[None, :]
        frag = rows[:, :, c, r] if trans else rows[:, :, r, c]          # (W, tiles, 32, 2)
        env[o.outs[0]] = frag.transpose(0, 2, 1, 3).reshape(self.L, tiles, 2)

    # warpgroup matrix ops (sm_90a)
    def _k_aligned_pointer(self, o, env, mask):
        """The address of a workgroup buffer: dynamic shared memory starts at
        ``_SHARED_BASE`` (16-byte, not 1024-byte aligned, as the driver may place it), so a
        kernel that needs more alignment must round it up itself.  A global buffer's
        address is a made-up one, ``_GLOBAL_SPACING`` apart, for what only takes an
        address (an L2 prefetch, checked to stay inside the buffer); no load goes through
        it."""
        ref = env[o.ins[0]]
        if ref.mem.shared_blocks is None:
            span = next((sp for sp in self.global_spans if sp[0] is ref.mem), None)
            if span is None:
                span = (ref.mem, (len(self.global_spans) + 1) * _GLOBAL_SPACING,
                        ref.mem.data.size * _elem_bytes(ref.mem.elem))
                self.global_spans.append(span)
            env[o.outs[0]] = np.int64(span[1] + ref.offset * _elem_bytes(ref.mem.elem))
            return
        assert ref.mem is self.dyn_raw, \
            "extract_aligned_pointer_as_index of a workgroup buffer other than dynamic " \
            "shared memory"
        env[o.outs[0]] = np.int64(_SHARED_BASE + ref.offset)

    def _k_bulk_prefetch(self, o, env, mask):
        """cp.async.bulk.prefetch.L2: changes no value; each active thread's
        [address, address + size) must be 16-byte aligned and inside one global buffer
        (an address of :meth:`_k_aligned_pointer`)."""
        ptr = np.broadcast_to(np.asarray(env[o.ins[0]], np.int64), mask.shape)[mask]
        size = np.broadcast_to(np.asarray(env[o.ins[1]], np.int64), mask.shape)[mask]
        for p, n in zip(ptr.tolist(), size.tolist()):
            assert p % 16 == 0 and n % 16 == 0 and n > 0, \
                f"bulk prefetch of {n} bytes at {p:#x}: not 16-byte aligned"
            assert any(b <= p and p + n <= b + total for _, b, total in self.global_spans), \
                f"bulk prefetch of [{p:#x}, {p + n:#x}) outside every global buffer"

    def _k_fence_proxy(self, o, env, mask):
        """fence.proxy.async: this thread's earlier shared-memory writes become visible to
        the async proxy (wgmma).  A wgmma reading an element its writer did not fence is an
        error (``_wgmma_operand``)."""
        for mem in (getattr(self.dyn_raw, "views", {}) or {}).values():
            if getattr(mem, "unfenced", None) is not None:
                th = np.nonzero(mask)[0]
                hit = np.isin(mem.w_thread, th) & mem.unfenced
                mem.unfenced[hit] = False

    def _k_wgmma_fence(self, o, env, mask):
        self._warpgroup(mask, "wgmma.fence")

    def _warpgroup(self, mask, what):
        wgs = mask.reshape(-1, 128)
        assert (wgs.all(1) | ~wgs.any(1)).all(), f"{what} needs whole warpgroups"
        assert self.T % 128 == 0, f"{what} in a block of {self.T} threads"

    def _wgmma_operand(self, desc, rows: int, transposed: bool, first):
        """The [rows, 16] bf16 operand a descriptor addresses, as (values, flat element
        addresses) for the warpgroups whose first thread is in ``first``; the layouts the
        H200 showed (bench/wgmma_probe.py): K-major rows of 8 16-byte chunks (128-byte
        swizzle: chunk ^= row % 8 within each 8-row group of 1024 bytes) or, transposed,
        MN-major k-rows; leading offset = between k core matrices (no swizzle) or 64-row
        blocks (MN-major swizzled), stride offset = between 8-row (8-k) groups."""
        d = np.asarray(desc, np.int64).astype(np.uint64)
        start = ((d & 0x3FFF) << 4).astype(np.int64)
        lbo = (((d >> 16) & 0x3FFF) << 4).astype(np.int64)
        sbo = (((d >> 32) & 0x3FFF) << 4).astype(np.int64)
        swz = (d >> 62).astype(np.int64)
        assert set(np.unique(swz[first])) <= {0, 1}, "only no swizzle and 128-byte swizzle"
        mn = np.arange(rows)[:, None]
        k = np.arange(16)[None, :]
        out_addr = []
        for th in np.nonzero(first)[0]:
            st, lb, sb, sw = start[th], lbo[th], sbo[th], swz[th]
            if not transposed and sw:
                byte = st + (mn // 8) * sb + (mn % 8) * 128 + k * 2
            elif not transposed:
                byte = st + (mn // 8) * sb + (k // 8) * lb + (mn % 8) * 16 + (k % 8) * 2
            elif sw:
                byte = st + (mn // 64) * lb + (k // 8) * sb + (k % 8) * 128 + (mn % 64) * 2
            else:
                byte = st + (mn // 8) * sb + (k // 8) * lb + (k % 8) * 16 + (mn % 8) * 2
            if sw:
                assert st % 16 == 0
                byte = byte ^ (((byte >> 7) & 7) << 4)
            out_addr.append(byte)
        byte = np.stack(out_addr)                                      # (groups, rows, 16)
        raw = self.dyn_raw
        mem = raw.views.get("bf16") if hasattr(raw, "views") else None
        assert mem is not None, "wgmma operand: no bf16 view of dynamic shared memory"
        local = byte - _SHARED_BASE
        assert (local % 2 == 0).all() and (local >= 0).all() and \
            (local < raw.shared_blocks).all(), "wgmma operand outside dynamic shared memory"
        blk = self.blk[np.nonzero(first)[0]]
        addr = local // 2 + (blk * mem.shared_blocks)[:, None, None]
        return addr, mem

    def _k_wgmma(self, o, env, mask):
        """wgmma.mma_async m64nNk16 bf16 x bf16 + f32, both operands from shared memory;
        executed at issue, its shared-memory reads pending until a wait retires its group
        (a write to them before that is a race)."""
        op = o.op
        shape = str(op.attributes["shape"])
        n = int(shape.split("n = ")[1].split(",")[0])
        assert "m = 64" in shape and "k = 16" in shape, shape
        ta = "col" in str(op.attributes["layoutA"])
        tb = "row" in str(op.attributes["layoutB"])
        self._warpgroup(mask, "wgmma.mma_async")
        first = mask & (self.tlin % 128 == 0)
        c, xa, xb = o.ins[:3]          # operands: accumulator struct, descriptors A, B
        for x in (xa, xb):
            v = np.broadcast_to(np.asarray(env[x], np.int64), (self.L,)).reshape(-1, 128)
            assert (v == v[:, :1]).all(), "wgmma descriptor differs within a warpgroup"
        da = np.broadcast_to(np.asarray(env[xa], np.int64), (self.L,))
        db = np.broadcast_to(np.asarray(env[xb], np.int64), (self.L,))
        aa, mem = self._wgmma_operand(da, 64, ta, first)
        ab, _ = self._wgmma_operand(db, n, tb, first)
        firsts = np.nonzero(first)[0]
        for addr in (aa, ab):
            flat = addr.reshape(len(firsts), -1)
            emask = np.zeros((self.L, flat.shape[1]), bool)
            full = np.zeros((self.L, flat.shape[1]), np.int64)
            emask[firsts] = True
            full[firsts] = flat
            self._read(mem, full, emask, "wgmma operand")
            if getattr(mem, "unfenced", None) is not None and mem.unfenced[flat].any():
                raise Race("wgmma reads shared memory written without fence.proxy.async")
            if getattr(mem, "wg_pending", None) is None:
                mem.wg_pending = np.zeros(mem.data.size, np.int64)
                mem.wg_ret_epoch = np.full(mem.data.size, -1, np.int64)
                mem.wg_ret_group = np.full(mem.data.size, -1, np.int64)
            np.add.at(mem.wg_pending, flat.ravel(), 1)
            for g, th in enumerate(firsts):
                self.wg_open.setdefault(int(th), []).append((mem, flat[g]))
        A = mem.data[aa].astype(np.float64)                    # (groups, 64, 16)
        B = mem.data[ab].astype(np.float64)                    # (groups, n, 16)
        D = A @ B.transpose(0, 2, 1)                           # (groups, 64, n)
        # accumulator j of warpgroup thread t: row 16 (t / 32) + (t % 32) / 4 + 8 ((j % 4) / 2),
        # column 8 (j / 4) + 2 (t % 4) + j % 2
        t = np.arange(128)[:, None]
        j = np.arange(n // 2)[None, :]
        row = (t // 32) * 16 + (t % 32) // 4 + 8 * ((j % 4) // 2)
        col = 8 * (j // 4) + (t % 4) * 2 + j % 2
        frag = D[:, row, col]                                  # (groups, 128, n / 2)
        acc = env[c]
        assert isinstance(acc, tuple) and len(acc) == n // 2, "wgmma accumulator struct"
        groups = np.nonzero(mask.reshape(-1, 128).all(1))[0]
        out = []
        for jj in range(n // 2):
            old = np.broadcast_to(np.asarray(acc[jj], np.float32), (self.L,)).reshape(-1, 128)
            new = old.astype(np.float64).copy()
            new[groups] += frag[:, :, jj]
            out.append(new.astype(np.float32).reshape(self.L))
        env[o.outs[0]] = tuple(out)

    def _k_wgmma_commit(self, o, env, mask):
        self._warpgroup(mask, "wgmma.commit_group")
        for th in np.nonzero(mask & (self.tlin % 128 == 0))[0]:
            reads = self.wg_open.pop(int(th), [])
            self.wg_groups.setdefault(int(th), []).append(reads)

    def _k_wgmma_wait(self, o, env, mask):
        from mlir import ir

        keep = ir.IntegerAttr(o.op.attributes["group"]).value
        self._warpgroup(mask, "wgmma.wait_group")
        for th in np.nonzero(mask & (self.tlin % 128 == 0))[0]:
            groups = self.wg_groups.get(int(th), [])
            while len(groups) > keep:
                for mem, flat in groups.pop(0):
                    np.add.at(mem.wg_pending, flat.ravel(), -1)
                    mem.wg_ret_epoch[flat.ravel()] = self.bepoch[self.blk[th]]
                    mem.wg_ret_group[flat.ravel()] = th // 128

    def _mma(self, a, b, c):
        """m16n8k16 per warp: a (L,4,2), b (L,2,2), c (L,2,2) fragments -> d (L,2,2)."""
        W = self.L // 32
        ln = np.arange(32)
        g, tq = (ln // 4)[:, None, None], (ln % 4)[:, None, None]
        reg, el = np.arange(4)[None, :, None], np.arange(2)[None, None, :]
        A = np.zeros((W, 16, 16))
        A[:, g + 8 * (reg % 2), 2 * tq + el + 8 * (reg // 2)] = \
            np.asarray(a, np.float64).reshape(W, 32, 4, 2)
        reg2 = np.arange(2)[None, :, None]
        B = np.zeros((W, 16, 8))
        B[:, 2 * tq + el + 8 * reg2, g + 0 * reg2] = np.asarray(b, np.float64).reshape(W, 32, 2, 2)
        rows, cols = g + 8 * reg2, 2 * tq + el + 0 * reg2
        C = np.zeros((W, 16, 8))
        C[:, rows, cols] = np.asarray(c, np.float64).reshape(W, 32, 2, 2)
        D = (A @ B + C).astype(np.float32)
        return D[:, rows, cols].reshape(self.L, 2, 2)

    def _k_nvgpu_mma(self, o, env, mask):
        op = o.op
        assert _ints(op.attributes["mmaShape"]) == [16, 8, 16], "mma shape"
        at = [self.types[i] for i in o.ins]
        assert at[0].elem in ("bf16", "f16") and at[0].vshape == (4, 2) and \
            at[1].vshape == (2, 2) and at[2].vshape == (2, 2) and at[2].elem == "f32", \
            "nvgpu.mma.sync: only m16n8k16 bf16/f16 x bf16/f16 + f32"
        self._warp(mask, "nvgpu.mma.sync")
        a, b, c = (self.lanes(env[i], t) for i, t in zip(o.ins, at))
        env[o.outs[0]] = self._mma(a, b, c)

    def _k_nvvm_mma(self, o, env, mask):
        op = o.op
        attrs = {k: str(op.attributes[k]) for k in
                 ("layoutA", "layoutB", "multiplicandAPtxType", "multiplicandBPtxType",
                  "shape")}
        assert "row" in attrs["layoutA"] and "col" in attrs["layoutB"], attrs
        assert "m = 16, n = 8, k = 16" in attrs["shape"], attrs
        elt = "bf16" if "bf16" in attrs["multiplicandAPtxType"] else "f16"
        assert elt in attrs["multiplicandBPtxType"], attrs
        sa, sb, sc = _segments(op)
        self._warp(mask, "nvvm.mma.sync")

        def unpack(ids):
            regs = np.stack([np.broadcast_to(np.asarray(env[o.ins[i]], np.int64), (self.L,))
                             for i in ids], 1)
            return np.stack([_from_bits(regs & 0xFFFF, elt), _from_bits(regs >> 16, elt)], -1)

        a, b = unpack(sa), unpack(sb)
        c = np.stack([np.broadcast_to(np.asarray(env[o.ins[i]], np.float32), (self.L,))
                      for i in sc], 1).reshape(self.L, 2, 2)
        d = self._mma(a, b, c).reshape(self.L, 4)
        env[o.outs[0]] = tuple(d[:, r] for r in range(4))

    # control flow
    def _k_if(self, o, env, mask):
        c = env[o.ins[0]]
        then, other = o.regions[0][0], (o.regions[1][0] if o.regions[1] else None)
        tys = [self.types[i] for i in o.outs]
        if np.ndim(c) == 0:                 # uniform
            block = then if bool(c) else other
            outs = self._block(block, env, mask) if block is not None else []
            for i, v in zip(o.outs, outs):
                env[i] = v
            return
        c = np.asarray(c, bool)
        m1, m2 = mask & c, mask & ~c
        r1 = self._block(then, env, m1) if m1.any() else None
        r2 = self._block(other, env, m2) if other is not None and m2.any() else None
        for k, (i, ty) in enumerate(zip(o.outs, tys)):
            if r1 is None and r2 is None:        # no thread here: any value
                env[i] = np.zeros((self.L,) + ty.vshape, _dtype(ty.elem or "i64"))
            elif r1 is None:
                env[i] = r2[k]
            elif r2 is None:
                env[i] = r1[k]
            else:
                env[i] = self._where(c, r1[k], r2[k], ty)

    def _k_for(self, o, env, mask):
        lb, ub, st = (env[i] for i in o.ins[:3])
        carried = [env[i] for i in o.ins[3:]]
        body = o.regions[0][0]
        tys = [self.types[i] for i in o.outs]
        if np.ndim(lb) == np.ndim(ub) == np.ndim(st) == 0:        # uniform bounds
            for iv in range(int(lb), int(ub), int(st)):
                env[body.args[0]] = np.int64(iv)
                for a, c in zip(body.args[1:], carried):
                    env[a] = c
                carried = self._block(body, env, mask)
        else:
            lb, ub, st = (np.broadcast_to(np.asarray(v, np.int64), (self.L,)) for v in (lb, ub, st))
            iv = lb.copy()
            while True:
                active = mask & (iv < ub)
                if not active.any():
                    break
                env[body.args[0]] = iv.copy()
                for a, c in zip(body.args[1:], carried):
                    env[a] = c
                outs = self._block(body, env, active)
                carried = [tuple(self._where(active, n1, o1, ty) for n1, o1 in zip(new, old))
                           if isinstance(new, tuple) else self._where(active, new, old, ty)
                           for new, old, ty in zip(outs, carried, tys)]
                iv = np.where(active, iv + st, iv)
        for i, c in zip(o.outs, carried):
            env[i] = c


def _annotate(e, o):
    if not getattr(e, "_simt_at", False):
        msg = e.args[0] if e.args else ""
        e.args = (f"{msg} [at {_short(o)}]",) + tuple(e.args[1:])
        e._simt_at = True


_HOST = {
    "memref.alloc": Simt._h_alloc, "memref.alloca": Simt._h_alloc,
    "memref.view": Simt._h_view,
    "memref.collapse_shape": Simt._h_reshape, "memref.expand_shape": Simt._h_reshape,
    "memref.cast": Simt._h_reshape, "memref.reinterpret_cast": Simt._h_reshape,
    "memref.subview": Simt._h_subview, "memref.copy": Simt._h_copy,
    "memref.dealloc": Simt._h_ignore, "linalg.fill": Simt._h_fill,
    "linalg.generic": Simt._h_generic,
    "gpu.launch": Simt._h_launch, "gpu.launch_func": Simt._h_launch_func,
}

_KERNEL = {
    "gpu.thread_id": Simt._k_id, "gpu.block_id": Simt._k_id,
    "gpu.block_dim": Simt._k_id, "gpu.grid_dim": Simt._k_id, "gpu.lane_id": Simt._k_lane_id,
    "gpu.barrier": Simt._k_barrier, "nvvm.barrier0": Simt._k_barrier,
    "nvvm.memory.barrier": Simt._k_memory_barrier,
    "nvvm.barrier": Simt._k_nvvm_barrier, "gpu.shuffle": Simt._k_shuffle,
    "gpu.all_reduce": Simt._k_all_reduce,
    "memref.load": Simt._k_load, "memref.store": Simt._k_store,
    "memref.view": Simt._k_view, "gpu.dynamic_shared_memory": Simt._k_dynamic_shared,
    "vector.load": Simt._k_vload, "vector.store": Simt._k_vstore,
    "memref.atomic_rmw": Simt._k_atomic,
    "nvgpu.device_async_copy": Simt._k_async_copy,
    "nvgpu.device_async_create_group": Simt._k_async_group,
    "nvgpu.device_async_wait": Simt._k_async_wait,
    "nvvm.cp.async.commit.group": Simt._k_async_group,
    "nvvm.cp.async.wait.group": Simt._k_async_wait,
    "nvgpu.ldmatrix": Simt._k_ldmatrix, "nvgpu.mma.sync": Simt._k_nvgpu_mma,
    "nvvm.mma.sync": Simt._k_nvvm_mma,
    "memref.extract_aligned_pointer_as_index": Simt._k_aligned_pointer,
    "nvvm.cp.async.bulk.prefetch": Simt._k_bulk_prefetch,
    "nvvm.fence.proxy": Simt._k_fence_proxy,
    "nvvm.wgmma.fence.aligned": Simt._k_wgmma_fence,
    "nvvm.wgmma.mma_async": Simt._k_wgmma,
    "nvvm.wgmma.commit.group.sync.aligned": Simt._k_wgmma_commit,
    "nvvm.wgmma.wait.group.sync.aligned": Simt._k_wgmma_wait,
    "scf.if": Simt._k_if, "scf.for": Simt._k_for,
}
