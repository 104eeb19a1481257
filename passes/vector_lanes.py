"""Vector lanes for ``latch-map-parallel-loops``: a thread runs ``V`` consecutive iterations
of the fastest loop with 16-byte memory accesses.

An elementwise kernel whose threads load and store one element each moves 2 or 4 bytes per
instruction; the memory system wants 16 (the H200's copy bandwidth is reached with 16-byte
accesses, HOPPER.md).  When the fastest loop of a straight-line body walks the contiguous
(unit-stride) last dimension of every buffer it touches, ``V`` consecutive iterations are
``V`` consecutive elements of each: one ``vector.load`` / ``vector.store`` of ``V`` elements
replaces ``V`` scalar accesses, and the arithmetic between them is
cloned once per lane on ``vector.extract``-ed scalars (so every op lowers exactly as in a
scalar kernel).  Values that do not depend on the fastest loop (index math of the other
loops, a per-row scale, a constant) are computed once and shared by the lanes; a stored
value that does not vary is broadcast.

``V`` is set by the **narrowest** element accessed (``narrow=True``, the default): its
accesses move 16 bytes, wider ones ``V * bytes`` in up to four 16-byte pieces (LLVM splits
the vector), at most 8 lanes when the widths differ (an i8 mask beside f32 data: 8 bytes of
the mask, not 16 lanes of body copies) — a cross-entropy gradient over bf16 logits that
also reads an i64 vocabulary index (TinyMoE B32's largest elementwise kernel, 4.3 GB) moved
its logits 4 bytes an access when ``V`` was set by the widest element (8 bytes: ``V = 2``),
and the bf16 tensors of a bf16/f32 kernel 8 bytes (``V = 4``).  ``narrow=False`` keeps that
older rule (every access at most 16 bytes).

Loads may be split, **stores are not** (``whole_stores=True``, the default): ``V`` is also
at most 16 bytes of every element the body *stores*.  A thread's 32 bytes of f32 go out as
two 16-byte stores, and each of them writes half of every 32-byte sector the warp touches;
a split load costs little (its second piece finds the sectors the first brought into L1).
TinyMoE's AdamW kernels (a bf16 gradient beside f32 weights and moments, all stored) took
0.098 ms for 176 MB on an H100 with 8 lanes, 1.8 TB/s against the 3.0 of kernels whose
stores are whole (an RMSNorm that reads f32 in two pieces and stores bf16 moves its bytes at
3.0 TB/s; profile-tinymoe196m-b32-bf16-6366c20-overlapbug-h100.json).

The fastest loop's index may also be used as a value (an ``arange`` recomputed in its
reader: ``[t == v]`` of a one-hot): lane ``j`` takes the first lane's index plus ``j``.

Refused (the loop keeps scalar iterations) when: the fastest loop's index, or a value
computed from it, is an index of a load or store other than the fastest loop's own last
one; a buffer's last dimension is not contiguous, not a
multiple of ``V`` long, or its other strides or offset would misalign a ``V``-element access;
an index other than the last depends on a loaded value (a gather); a store's last index is
not the fastest loop's (lanes would write one element); a buffer the body stores to is also
read at other indices (lanes would see each other's writes); or a buffer holds ``i1``.
"""
from __future__ import annotations

_MAX_BYTES = 16        # the narrowest element's access
_MAX_PIECES = 4        # 16-byte pieces of the widest element's access (narrow lanes)
_MAX_MIXED_LANES = 8   # lanes when the elements differ in width (an i8 mask beside f32 data
                       # would take 16, each thread's copies of the body with them)


def narrow_width(narrowest: int, widest: int) -> int:
    """Elements a vector takes when it moves 16 bytes of the ``narrowest``-byte element
    and at most four 16-byte pieces of the ``widest``."""
    return min(_MAX_BYTES // narrowest, _MAX_PIECES * _MAX_BYTES // widest)


def _bytes(elt) -> int | None:
    """Bytes of a memref element a vector access may move; None for i1 (bit-packed by later
    passes) and index."""
    from mlir import ir

    from latch.passes.base import element_bits

    if isinstance(elt, ir.IndexType):
        return None
    bits = element_bits(elt)
    return bits // 8 if bits in (8, 16, 32, 64) else None


def vector_width(ops, iv, count: int, lo: int, step: int, narrow: bool = True,
                 whole_stores: bool = True) -> int:
    """Lanes per thread for the straight-line body ``ops`` whose fastest loop index is the
    block argument ``iv`` (``count`` iterations from ``lo`` by ``step``): the largest ``V``
    that the checks above allow with ``V * bytes <= 16`` for the narrowest element accessed
    along ``iv`` and ``V * bytes <= 64`` for the widest (``narrow``; else ``<= 16`` for
    every element), and (``whole_stores``) ``V * bytes <= 16`` for every element stored,
    or 1."""
    from mlir import ir

    from latch.passes.buffer_views import root

    if lo != 0 or step != 1:
        return 1
    varying = {iv}
    widest, narrowest, widest_stored = 0, _MAX_BYTES, 0
    lanes = []            # (memref type) of every access along iv
    stored_roots = {}
    for op in ops:
        name = op.name
        if name in ("memref.load", "memref.store"):
            mem = op.operands[0] if name == "memref.load" else op.operands[1]
            idx = list(op.operands)[1:] if name == "memref.load" else list(op.operands)[2:]
            if any(v in varying for v in idx[:-1]):
                return 1                     # a gather, or the fastest index elsewhere
            along = bool(idx) and idx[-1] == iv
            if idx and idx[-1] in varying and not along:
                return 1                     # a computed last index
            if name == "memref.store":
                if not along:
                    return 1
                stored_roots.setdefault(root(mem), []).append((mem, idx))
            if along:
                mt = ir.MemRefType(mem.type)
                nbytes = _bytes(mt.element_type)
                if nbytes is None:          # i1 (bit-packed by later passes), index
                    return 1
                lanes.append(mt)
                widest = max(widest, nbytes)
                if name == "memref.store":
                    widest_stored = max(widest_stored, nbytes)
                narrowest = min(narrowest, nbytes)
                if name == "memref.load":
                    varying.add(op.results[0])
            continue
        if any(v in varying for v in op.operands):     # the index used as a value too
            varying.update(op.results)
    if not lanes:
        return 1
    for op in ops:                           # in-place updates only
        if op.name == "memref.load" and root(op.operands[0]) in stored_roots:
            idx = list(op.operands)[1:]
            if any(m != op.operands[0] or i != idx
                   for m, i in stored_roots[root(op.operands[0])]):
                return 1
    v = _MAX_BYTES // widest
    if narrow and narrowest < widest:
        v = min(narrow_width(narrowest, widest), _MAX_MIXED_LANES)
        if whole_stores and widest_stored:
            v = min(v, _MAX_BYTES // widest_stored)
    while v > 1:
        if count % v == 0 and all(aligned_chunks(mt, v) for mt in lanes):
            return v
        v //= 2
    return 1


def aligned_chunks(mt, v: int) -> bool:
    """Whether every ``v``-element run starting at a multiple of ``v`` of the last index is
    contiguous and ``v``-element aligned (buffers themselves are 256-byte aligned)."""
    strides, offset = mt.get_strides_and_offset()
    dyn = -9223372036854775808
    if not strides or strides[-1] != 1 or mt.shape[-1] % v or offset == dyn or offset % v:
        return False
    return all(s != dyn and s % v == 0 for s in strides[:-1])


def chunk_width(op, maps, ranges, last: int) -> int:
    """Consecutive elements ``V`` a thread of a reduction takes at once along loop ``last``:
    16 bytes of the narrowest input element read along it (at most 64 of the widest), when
    that loop indexes the contiguous last dimension of every input that depends on it, in
    whole chunks (its range and every such input's strides and offset multiples of ``V``),
    and indexes nothing else; 1 otherwise (a gather, an index used as a value, a transposed
    read)."""
    import re

    from mlir import ir

    from latch.passes.base import operation as _op

    uses = re.compile(rf"\bd{last}\b").search
    n_in = len(op.operands) - 1
    block = op.regions[0].blocks[0]
    along = []
    for v, m in zip(list(op.operands)[:n_in], maps[:n_in]):
        results = [str(e) for e in m.results]
        if not any(uses(r) for r in results):
            continue
        if results[-1] != f"d{last}" or any(uses(r) for r in results[:-1]) or \
                not isinstance(v.type, ir.MemRefType):
            return 1
        mt = ir.MemRefType(v.type)
        if _bytes(mt.element_type) is None:
            return 1
        along.append(mt)
    for o in block.operations:
        if _op(o).name == "linalg.index" and \
                ir.IntegerAttr(_op(o).attributes["dim"]).value == last:
            return 1
    if not along:
        return 1
    narrowest = min(_bytes(mt.element_type) for mt in along)
    widest = max(_bytes(mt.element_type) for mt in along)
    v = narrow_width(narrowest, widest)
    while v > 1 and (ranges[last] % v or not all(aligned_chunks(mt, v) for mt in along)):
        v //= 2
    return v


def read_along(ins, maps, last: str) -> set:
    """Positions of the buffers among ``ins`` read along loop ``last`` (``"d<n>"``: their
    map's last result)."""
    from mlir import ir

    return {j for j, (v, m) in enumerate(zip(ins, maps))
            if isinstance(v.type, ir.MemRefType) and [str(e) for e in m.results][-1:] == [last]}


def load_chunk(block, ins, maps, dims, lanes: int, along: set):
    """The inputs ``ins[j]``, ``j`` in ``along`` (:func:`read_along`; :func:`chunk_width`
    holds), as one ``vector.load`` of ``lanes`` elements each at the loop indices ``dims``
    (the chunk's first element): {body argument: vector}."""
    from mlir import ir

    from latch.passes.base import element_bits
    from latch.passes.generic_body import indices

    vectors = {}
    for j in sorted(along):
        v, m = ins[j], maps[j]
        elt = ir.MemRefType(v.type).element_type
        vectors[block.arguments[j]] = ir.Operation.create(
            "vector.load", [ir.VectorType.get([lanes], elt)], [v] + indices(m, dims),
            attributes={"alignment": ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), lanes * element_bits(elt) // 8)}).result
    return vectors


def store_chunk(values: list, mem, idx) -> None:
    """Store ``values`` (consecutive elements) into ``mem`` from the indices ``idx`` as one
    ``vector.store`` (:func:`aligned_chunks` holds for their number)."""
    from mlir import ir

    from latch.passes.base import element_bits

    elt = ir.MemRefType(mem.type).element_type
    vec = ir.Operation.create("vector.from_elements", [ir.VectorType.get([len(values)], elt)],
                              values).result
    ir.Operation.create("vector.store", [], [vec, mem] + idx, attributes={
        "alignment": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                        len(values) * element_bits(elt) // 8)})


def lane_of(vectors: dict, u: int) -> dict:
    """{body argument: element ``u`` of its vector} (``vector.extract``) for
    :func:`load_chunk`'s vectors."""
    from mlir import ir

    return {arg: ir.Operation.create(
        "vector.extract", [arg.type], [vec],
        attributes={"static_position": ir.DenseI64ArrayAttr.get([u])}).result
        for arg, vec in vectors.items()}


def _row_index(ops, last: int):
    """The ``linalg.index`` result of loop ``last`` among a body's ``ops`` (None if none);
    False when there are several."""
    from mlir import ir

    found = [o for o in ops if o.name == "linalg.index" and
             ir.IntegerAttr(o.attributes["dim"]).value == last]
    return False if len(found) > 1 else (found[0].results[0] if found else None)


def lane_loads(ops, along_args, last: int):
    """The buffers a generic's body ``ops`` (its yield left out) load as vectors when
    :func:`emit_lanes` runs them for consecutive iterations of loop ``last``: the loads whose
    last index is that loop's ``linalg.index``.  The values that vary between the lanes are
    ``along_args`` (block arguments read along the loop), that index and everything computed
    from them; None when the body has two indices of the loop or a load depends on a varying
    value otherwise (a gather's row taken from the lanes' values)."""
    iv = _row_index(ops, last)
    if iv is False:
        return None
    varying = set(along_args) | ({iv} if iv is not None else set())
    loads = []
    for o in ops:
        operands = list(o.operands)
        if not any(x in varying for x in operands):
            continue
        if o.name == "memref.load":
            if iv is None or operands[-1] != iv or any(x in varying for x in operands[:-1]):
                return None
            loads.append(operands[0])
        varying.update(o.results)
    return loads


def emit_lanes(ops, result, mapping: dict, vectors: dict, dims, last: int, v: int) -> list:
    """Emit a generic's body ``ops`` (its yield left out; :func:`lane_loads` holds) for the
    ``v`` consecutive iterations of loop ``last`` from ``dims`` (the loop indices of the
    first, a multiple of ``v``) with :class:`LaneEmitter`: ``linalg.index d`` is ``dims[d]``,
    the block arguments read along the loop are the lanes of ``vectors``
    (:func:`load_chunk`), the others as in ``mapping``.  Returns ``result``'s ``v`` lane
    values."""
    from mlir import ir

    for o in ops:
        if o.name == "linalg.index":
            mapping[o.results[0]] = dims[ir.IntegerAttr(o.attributes["dim"]).value]
    iv = _row_index(ops, last)
    # no body op uses the loop's index: a sentinel no operand equals (Values refuse None)
    lanes = LaneEmitter(iv if iv is not None else object(), mapping, v)
    for j in range(v):
        lanes.lanes[j].update(lane_of(vectors, j))
    lanes.emit([o for o in ops if o.name != "linalg.index"])
    return [lanes.value(result, j) for j in range(v)]


class LaneEmitter:
    """Emits the body ``ops`` for one vector of ``v`` lanes at the current insertion point:
    ``mapping`` maps the fastest loop's index to the first lane's (a multiple of ``v``) and
    the other block arguments to their values; loads along that index become vector loads,
    ops that depend on them are cloned per lane, stores become vector stores.  ``emit`` may
    be called on consecutive slices of the body (loads first, the rest later)."""

    def __init__(self, iv, mapping: dict, v: int, guards: dict | None = None):
        self.iv, self.v = iv, v
        self.guards = guards or {}               # load result -> condition (lane-free)
        self.shared = dict(mapping)              # lane-independent values
        self.lanes = [dict() for _ in range(v)]  # per lane: body value -> lane value

    def value(self, x, j):
        return self.lanes[j].get(x, self.shared.get(x, x))

    def _lane_index(self, j):
        """The fastest loop's index in lane ``j`` (made where first needed)."""
        if self.iv not in self.lanes[j]:
            from mlir import ir

            from latch.passes.generic_body import index_constant

            first = self.shared[self.iv]
            self.lanes[j][self.iv] = first if j == 0 else ir.Operation.create(
                "arith.addi", [ir.IndexType.get()], [first, index_constant(j)]).result
        return self.lanes[j][self.iv]

    def emit(self, ops) -> None:
        from mlir import ir

        for op in ops:
            name = op.name
            varying = any(o in self.lanes[0] or o == self.iv for o in op.operands)
            if name == "memref.load" and list(op.operands)[-1] == self.iv:
                mem = self.shared.get(op.operands[0], op.operands[0])
                idx = [self.shared.get(x, x) for x in list(op.operands)[1:]]
                elt = ir.MemRefType(op.operands[0].type).element_type
                vt = ir.VectorType.get([self.v], elt)

                def load(vt=vt, mem=mem, idx=idx, elt=elt):
                    return ir.Operation.create(
                        "vector.load", [vt], [mem] + idx,
                        attributes={"alignment": ir.IntegerAttr.get(
                            ir.IntegerType.get_signless(64), self.v * _bytes(elt))}).result
                cond = self.guards.get(op.results[0])
                if cond is None:
                    vec = load()
                else:                            # only where the condition holds
                    from latch.passes.generic_body import guarded_value
                    vec = guarded_value(self.shared.get(cond, cond), load, vt)
                for j in range(self.v):
                    self.lanes[j][op.results[0]] = ir.Operation.create(
                        "vector.extract", [elt], [vec],
                        attributes={"static_position": ir.DenseI64ArrayAttr.get([j])}).result
                continue
            if name == "memref.store":
                value, mem = op.operands[0], op.operands[1]
                mem = self.shared.get(mem, mem)
                idx = [self.shared.get(x, x) for x in list(op.operands)[2:]]
                elt = ir.MemRefType(op.operands[1].type).element_type
                vt = ir.VectorType.get([self.v], elt)
                if value in self.lanes[0]:
                    vec = ir.Operation.create("vector.from_elements", [vt],
                                              [self.value(value, j) for j in range(self.v)]
                                              ).result
                else:
                    vec = ir.Operation.create("vector.broadcast", [vt],
                                              [self.shared.get(value, value)]).result
                ir.Operation.create(
                    "vector.store", [], [vec, mem] + idx,
                    attributes={"alignment": ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), self.v * _bytes(elt))})
                continue
            if not varying:                      # once, shared by the lanes
                new = op.clone()
                for i, operand in enumerate(list(new.operands)):
                    if operand in self.shared:
                        new.operands[i] = self.shared[operand]
                for old_r, new_r in zip(op.results, new.results):
                    self.shared[old_r] = new_r
                continue
            for j in range(self.v):              # per lane
                if self.iv in list(op.operands):
                    self._lane_index(j)
                new = op.clone()
                for i, operand in enumerate(list(new.operands)):
                    new.operands[i] = self.value(operand, j)
                for old_r, new_r in zip(op.results, new.results):
                    self.lanes[j][old_r] = new_r
