"""Loads of straight-line kernel code answered by an earlier load of the same element
(part of ``latch-wrap-host-compute``, option ``held-rows``: passes/row_reductions.py).

A row kernel whose lanes walk their whole row without a loop (``whole-rows``: a 768-wide
f32 row is 6 chunks of 4 a lane) reads each chunk twice: once for the row's total, once
more for the elementwise reader that needs the total (RMSNorm's backward ``dx += g * w *
rstd - x * rstd^3 * sum / n`` after the row sums of ``g * w * x``); the second read comes
from L1 or L2, but it is as many load instructions again — and a chunk's per-row inputs
(the rstd, a router gradient's 8 entries) are loaded again for every chunk.
:func:`forward_loads` keeps the first loaded value instead:

1. *value numbering*: a pure op (``arith``, ``math``, ``affine.apply``, ``index``,
   ``vector.extract`` / ``from_elements`` / ``broadcast``, the thread and block ids) with
   the same name, operands, attributes and result types as an earlier one in the block is
   replaced by it — so the second walk's index arithmetic becomes the first walk's values;
2. *load forwarding*: a ``memref.load`` / ``vector.load`` with the same operands and
   result type as an earlier one is replaced by it, unless a store in between (at the top
   level of the block or nested in an op's regions: the ``scf.if`` that stores a row's
   total) may write a byte of its buffer (:func:`~latch.passes.buffer_views.
   may_share_bytes`: views of one allocation, overlapping planned slots); a load of what
   a store at the block's top level wrote (same buffer, same indices, the stored type)
   is replaced by the stored value — the row kernels' reader reading back the chunks its
   lane's writer stored (the residual add before RMSNorm).  Any other op that may write
   memory, or a barrier (other threads' writes become visible), forgets every load.

Only the block's own ops are numbered (not those nested in regions), in order, so every
value kept dominates the uses it takes over.  A lane's loads never read what another lane
of the kernel writes (the row kernels' own condition), so keeping a value across another
lane's stores is what the original kernel read too.
"""
from __future__ import annotations

from latch.passes.base import nested_operations, operation as _op
from latch.passes.buffer_views import may_share_bytes

#: names (prefixes) of the pure ops of straight-line kernel code: no memory effects
_PURE = ("arith.", "math.", "index.", "affine.apply", "vector.extract", "vector.broadcast",
         "vector.from_elements", "vector.bitcast", "vector.splat", "vector.shape_cast",
         "gpu.thread_id", "gpu.block_id", "gpu.block_dim", "gpu.grid_dim", "gpu.lane_id")
LOADS = ("memref.load", "vector.load")
#: the stores (value, buffer, indices...)
STORES = ("memref.store", "vector.store")
#: ops that write no memory and order nothing across threads
_QUIET = ("gpu.shuffle", "scf.yield", "gpu.yield", "gpu.terminator")


def pure(op) -> bool:
    """Whether ``op`` has no memory effects (its regions aside: a caller that moves or
    numbers ops checks those)."""
    return op.name.startswith(_PURE)


def _key(op) -> tuple:
    attrs = tuple(sorted((name, str(op.attributes[name])) for name in op.attributes))
    return (op.name, tuple(op.operands), attrs, tuple(str(r.type) for r in op.results))


def _load_key(name: str, operands, value_type) -> tuple:
    """A load's key: its kind, buffer and indices, the loaded type (alignment aside)."""
    return (name, tuple(operands), str(value_type))


def _offset(value) -> tuple:
    """(base, constant): ``value`` as ``base + constant`` (an ``arith.addi`` of a constant),
    else (value, 0)."""
    owner = value.owner
    if not hasattr(owner, "arguments") and _op(owner).name == "arith.addi":
        for a, b in (tuple(_op(owner).operands), tuple(reversed(_op(owner).operands))):
            if not hasattr(b.owner, "arguments") and _op(b.owner).name == "arith.constant":
                return a, _op(b.owner).attributes["value"].value
    return value, 0


def _width(value_type) -> int:
    from mlir import ir

    return ir.VectorType(value_type).shape[-1] if str(value_type).startswith("vector<") else 1


def _apart(key, buf, where, value_type) -> bool:
    """Whether the load ``key`` and a store to ``buf`` at ``where`` of ``value_type`` touch
    different elements for certain: the same buffer, the same indices but the last, which
    differ by a constant at least as large as the wider access."""
    _, (kbuf, *kidx), ktype = key
    if kbuf != buf or len(kidx) != len(where) or kidx[:-1] != list(where[:-1]):
        return False
    (b1, c1), (b2, c2) = _offset(kidx[-1]), _offset(where[-1])
    if b1 != b2:
        return False
    from mlir import ir

    return abs(c1 - c2) >= max(_width(ir.Type.parse(ktype)), _width(value_type))


def _written(op):
    """The buffers ``op`` or anything nested in it stores to; None when it may write
    memory some other way, or orders other threads' writes (a barrier)."""
    out = []
    for o in [op, *nested_operations(op)]:
        if o.name in STORES:
            out.append(o.operands[1])
        elif not (pure(o) or o.name in LOADS + _QUIET + ("scf.if", "scf.for")):
            return None
    return out


def forward_loads(block) -> int:
    """Value-number the pure ops and forward the loads of ``block`` (see the module);
    returns how many loads were answered by earlier ones."""
    numbered: dict = {}
    loads: dict = {}
    forwarded = 0
    for op in [_op(o) for o in block.operations]:
        name = op.name
        if not op.regions and pure(op):
            key = _key(op)
            if key in numbered:
                for old, new in zip(op.results, numbered[key]):
                    old.replace_all_uses_with(new)
                op.erase()
            else:
                numbered[key] = list(op.results)
            continue
        if name in LOADS and not op.regions:
            key = _load_key(name, op.operands, op.results[0].type)
            if key in loads:
                op.results[0].replace_all_uses_with(loads[key])
                op.erase()
                forwarded += 1
            else:
                loads[key] = op.results[0]
            continue
        if name in _QUIET:
            continue
        if name in STORES:    # at the top level: its indices are known, its value is what
            value, buf, *where = op.operands       # a load there would read
            for key in [k for k in loads if may_share_bytes(k[1][0], buf) and
                        not _apart(k, buf, where, value.type)]:
                del loads[key]
            kind = "vector.load" if name == "vector.store" else "memref.load"
            loads[_load_key(kind, [buf, *where], value.type)] = value
            continue
        written = _written(op)
        if written is None:
            loads.clear()
            continue
        for buf in written:
            for key in [k for k in loads if may_share_bytes(k[1][0], buf)]:
                del loads[key]
    return forwarded
