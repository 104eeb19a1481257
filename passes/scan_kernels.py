"""``latch-form-scan-kernels``: a bufferized scan (an ``scf.for`` whose body is linalg work
on small buffers) becomes ONE ``gpu.launch`` that runs every step, with the carry kept in
workgroup (shared) memory (stage 'buffers' → 'kernels', cuda target, before
``latch-form-kernels``).

``latch.scan`` lowers to an ``scf.for`` with the step function inlined
(``latch-lower-control``); after ``latch-bufferize`` the carry is a memref iteration
argument, each step reads slices of the scanned inputs (``xs``: subviews at the induction
variable), computes through temporaries allocated in the body, writes slices of the stacked
outputs (``ys``) and yields the new carry.  Launching the body's kernels once per step costs
a launch (and a trip through global memory) per op and token; GradLev has 1024 tokens.

**Batch classes.**  A union-find over (buffer, dimension) pairs, joined through views
(subview, expand/collapse_shape, cast), copies, the carry (init, iteration argument,
yield, result) and every ``linalg.generic``'s indexing maps (the operand dimensions indexed
by one loop are one class), finds the dimensions along which the scan is independent
problems: a class is a *batch class* when it has no reduction loop and no dimension
indexed by a compound expression, all its dimensions have the same size (> 1), every
buffer the body writes and every temporary and carry has exactly one dimension in it, and
read-only global inputs at most one (none: the input is broadcast to every problem).
Each batch class becomes a grid dimension (up to three); one thread block runs one problem
(GradLev: 4 × 12 heads = 48 blocks).  Without a batch class the kernel has one block.

**Inside a block** (``threads`` threads, default 256), per step and in program order:

* each ``linalg.generic`` runs over its per-block iteration space (the batch loops fixed
  to the block's ids): a reduction ``out = combine(out, e)`` (``addf``, ``mulf``,
  ``maximumf``, ``minimumf``, ``maxnumf``, ``minnumf`` on f32) with at least 32 reduction
  elements gets a **warp per output element** (lane ``l`` combines elements ``l, l + 32,
  ...`` — the last reduction loop varying fastest, so a warp reads consecutive addresses —
  then five ``gpu.shuffle xor``); anything else gets **a thread per output element**
  (threads strided over the parallel loops, the output's last dimension fastest, the
  reduction loops serial in registers);
* ``memref.copy`` becomes a strided element copy;
* a ``gpu.barrier`` separates two ops when the second reads what the first wrote or writes
  what it read or wrote (tracked per buffer), and ends every step.

Temporaries (allocations in the body) and carries live in one workgroup buffer, each at a
planned offset, in a compact per-block layout (batch dimensions dropped).  A carry whose
new value is a temporary of the same shape *ping-pongs*: the temporary takes the carry's
other half, and the halves swap roles every step (no copy).  Other carries are copied back
at the end of the step.  Carries are copied in from global memory before the first step
and out after the last (into a fresh buffer that replaces the loop's result); xs slices
are read and ys slices written in global memory at step ``t``.

Refused with a located :class:`PassError` (the op, its location, why): no static trip
count, an op other than views / allocations / linalg.generic / memref.copy / pure scalar
arithmetic in the body, dynamic shapes, dynamic view offsets other than the induction
variable, a workgroup buffer above ``max-shared`` bytes (default 48 KiB, the static
shared-memory limit), carries that are not memrefs.

Options: ``threads`` (default 256, a multiple of 32), ``max-shared`` (bytes, default 49152).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-bufferize,
latch-form-scan-kernels, latch-form-kernels)'``
"""
from __future__ import annotations

import dataclasses
import math

from latch.errors import PassError
from latch.passes.base import (ModulePass, defining_op, function_definitions, has_parallel_work,
                               int_constant, operation as _op)
from latch.passes.generic_body import accumulation, compare, delinearize, index_constant

_VIEWS = ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast")
_PURE = ("arith.", "math.", "index.")
_COMBINERS = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf",
              "arith.maxnumf", "arith.minnumf")
_WARP = 32
_MIN_WARP_REDUCTION = 32
_SLOT_ALIGN = 16
_SMS = 132               # streaming multiprocessors of an H100/H200
_WG = "#gpu.address_space<workgroup>"


def _is_memref(v) -> bool:
    from mlir import ir
    return isinstance(v.type, ir.MemRefType)


@dataclasses.dataclass(frozen=True)
class FormScanKernels(ModulePass):
    name = "latch-form-scan-kernels"
    summary = ("a bufferized scan (scf.for over linalg work on small buffers) -> one "
               "gpu.launch: a block per independent problem, the carry in workgroup memory "
               "across all steps")

    threads: int = 256
    max_shared: int = 48 * 1024

    def apply(self, module) -> None:
        if self.threads <= 0 or self.threads % _WARP or self.threads > 1024:
            raise PassError(f"{self.name}: threads={self.threads} must be a multiple of 32 "
                            "in [32, 1024]")
        for func_op in function_definitions(module):
            for op in list(func_op.regions[0].blocks[0].operations):
                op = _op(op)
                if op.name == "scf.for" and has_parallel_work(op):
                    _ScanKernel(op, self).build()


# -- union-find over (value, dim) ---------------------------------------------------------

class _Classes:
    def __init__(self):
        self.parent: dict = {}
        self.bad: set = set()

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def join(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.bad:
                self.bad.add(ra)

    def mark(self, x):
        self.bad.add(self.find(x))

    def is_bad(self, x) -> bool:
        return self.find(x) in self.bad


@dataclasses.dataclass
class _Storage:
    """Where a root buffer lives in the kernel."""
    kind: str                   # "shared" | "global"
    etype: object
    ident: int
    value: object = None        # global: the host value (flat view made later)
    slot_elems: int = 0         # shared: elements of one copy
    pair: bool = False          # shared: two copies (ping-pong carry)
    byte_offset: int = 0        # shared: offset in the workgroup buffer
    flat: object = None         # global: 1-D memref captured by the launch


@dataclasses.dataclass
class _Access:
    """Element ``i`` of a buffer value is ``storage[offset + iv_coef * iv + sum(strides*i)]``
    (+ the ping-pong half ``((k + phase) % 2) * slot_elems`` of a pair)."""
    storage: _Storage
    shape: list
    strides: list
    offset: int = 0
    iv_coef: int = 0
    phase: int = 0


class _ScanKernel:
    def __init__(self, for_op, opts: FormScanKernels):
        self.for_op = for_op
        self.opts = opts
        self.threads = opts.threads
        self.body = for_op.regions[0].blocks[0]
        self.ops = [_op(o) for o in self.body.operations]
        self.iv = self.body.arguments[0]
        self.iter_args = list(self.body.arguments)[1:]
        operands = list(for_op.operands)
        self.inits = operands[3:]
        self.yields = list(self.ops[-1].operands)

    def refuse(self, why: str, op=None):
        where = op if op is not None else self.for_op
        name = f"'{where.name}' " if op is not None else ""
        raise PassError(f"latch-form-scan-kernels: cannot make the scan loop at "
                        f"{self.for_op.location} one kernel: {name}at {where.location}: "
                        f"{why}", where.location)

    # -- checks and analysis ---------------------------------------------------------------
    def _trips(self):
        lb, ub, st = (int_constant(v) for v in list(self.for_op.operands)[:3])
        if lb is None or ub is None or not st or st <= 0:
            self.refuse("the loop bounds are not constants (a scan has a static length)")
        return lb, st, len(range(lb, ub, st))

    def _in_body(self, v) -> bool:
        owner = v.owner
        if hasattr(owner, "arguments"):
            return owner == self.body
        o = _op(owner)
        return o.parent is not None and _op(o.parent) == self.for_op

    def _check_ops(self):
        from mlir import ir

        for v, i in zip(self.iter_args, range(len(self.iter_args))):
            if not _is_memref(v):
                self.refuse(f"carry {i} has type {v.type}; only buffer carries are supported")
            if not ir.MemRefType(v.type).has_static_shape:
                self.refuse(f"carry {i} has a dynamic shape")
        for op in self.ops[:-1]:
            n = op.name
            for r in op.results:
                if _is_memref(r) and not ir.MemRefType(r.type).has_static_shape:
                    self.refuse("dynamic shapes are not supported", op)
            if n in _VIEWS or n == "memref.dealloc":
                continue
            if n == "memref.alloc":
                if len(op.operands):
                    self.refuse("allocation with dynamic sizes", op)
                continue
            if n == "linalg.generic":
                for v in op.operands:
                    if _is_memref(v) and not ir.MemRefType(v.type).has_static_shape:
                        self.refuse("dynamic shapes are not supported", op)
                if not op.regions[0].blocks:
                    self.refuse("a generic without a body", op)
                for inner in op.regions[0].blocks[0].operations:
                    if _op(inner).regions:
                        self.refuse(f"'{_op(inner).name}' with regions inside the "
                                    "generic's body is not supported", op)
                continue
            if n == "memref.copy":
                continue
            if n.startswith(_PURE) and not op.regions and \
                    not any(_is_memref(v) for v in list(op.operands) + list(op.results)):
                continue
            why = "nested loops are not supported yet" if n in ("scf.for", "scf.while") \
                else "this op is not supported in a scan kernel (views, allocations, " \
                     "linalg.generic, memref.copy and scalar arithmetic are)"
            self.refuse(why, op)

    def _memref_values(self):
        """Every buffer value the body touches (body-defined and outer)."""
        seen, out = set(), []

        def add(v):
            if _is_memref(v) and v not in seen:
                seen.add(v)
                out.append(v)
        for a, b in zip(self.iter_args, self.inits):
            add(a)
            add(b)
        for op in self.ops:
            for v in op.operands:
                add(v)
            for r in op.results:
                add(r)
        return out

    def _union(self, values):
        from mlir import ir

        uf = _Classes()
        for v in values:
            for k in range(ir.MemRefType(v.type).rank):
                uf.find((v, k))
                if ir.MemRefType(v.type).shape[k] <= 1:
                    uf.mark((v, k))
        for a, init, y, r in zip(self.iter_args, self.inits, self.yields, self.for_op.results):
            for k in range(ir.MemRefType(a.type).rank):
                for other in (init, y, r):
                    if _is_memref(other):
                        uf.join((a, k), (other, k))
        for op in self.ops[:-1]:
            n = op.name
            if n == "memref.cast":
                for k in range(ir.MemRefType(op.results[0].type).rank):
                    uf.join((op.operands[0], k), (op.results[0], k))
            elif n == "memref.copy":
                for k in range(ir.MemRefType(op.operands[0].type).rank):
                    uf.join((op.operands[0], k), (op.operands[1], k))
            elif n == "memref.subview":
                src, res = op.operands[0], op.results[0]
                kept, offs, sizes, steps = self._subview_dims(op)
                for j, k in enumerate(kept):
                    uf.join((src, k), (res, j))
                    full = sizes[k] == ir.MemRefType(src.type).shape[k] and offs[k] == 0 \
                        and steps[k] == 1
                    if not full:
                        uf.mark((src, k))
                for k in range(ir.MemRefType(src.type).rank):
                    if k not in kept:
                        uf.mark((src, k))
            elif n in ("memref.expand_shape", "memref.collapse_shape"):
                src, res = op.operands[0], op.results[0]
                groups = [[ir.IntegerAttr(x).value for x in ir.ArrayAttr(g)]
                          for g in ir.ArrayAttr(op.attributes["reassociation"])]
                wide, narrow = (res, src) if n == "memref.expand_shape" else (src, res)
                shape = ir.MemRefType(wide.type).shape
                for k, g in enumerate(groups):
                    big = [d for d in g if shape[d] != 1]
                    if len(big) == 1:
                        uf.join((narrow, k), (wide, big[0]))
                    else:
                        uf.mark((narrow, k))
                    for d in g:
                        if len(big) != 1 or d != big[0]:
                            uf.mark((wide, d))
            elif n == "linalg.generic":
                maps, iters, ins, outs = self._generic_parts(op)
                first = {}
                for v, m in zip(ins + outs, maps):
                    if not _is_memref(v):
                        continue
                    for k, e in enumerate(m.results):
                        if isinstance(e, ir.AffineDimExpr):
                            d = ir.AffineDimExpr(e).position
                            if d in first:
                                uf.join(first[d], (v, k))
                            else:
                                first[d] = (v, k)
                            if iters[d] != "parallel":
                                uf.mark((v, k))
                        else:
                            uf.mark((v, k))
                            for d in range(m.n_dims):
                                if _uses_dim(e, d) and d in first:
                                    uf.mark(first[d])
                # a loop used in a compound expression anywhere cannot be a batch loop
                for v, m in zip(ins + outs, maps):
                    for e in m.results:
                        if not isinstance(e, ir.AffineDimExpr):
                            for d in range(m.n_dims):
                                if _uses_dim(e, d) and d in first:
                                    uf.mark(first[d])
        return uf

    def _generic_parts(self, op):
        from mlir import ir

        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        operands = list(op.operands)
        ins, outs = operands[:seg[0]], operands[seg[0]:seg[0] + seg[1]]
        maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        iters = ["parallel" if "parallel" in str(a) else "reduction"
                 for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        return maps, iters, ins, outs

    def _subview_dims(self, op):
        """(kept source dims in order, offsets (int or Value), sizes, strides) of a subview
        with static sizes and strides."""
        from mlir import ir

        src_t, res_t = ir.MemRefType(op.operands[0].type), ir.MemRefType(op.results[0].type)
        dyn = ir.ShapedType.get_dynamic_stride_or_offset()
        static_offs = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
        sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
        steps = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        if seg[2] or seg[3] or any(s == dyn or s < 0 for s in steps) or \
                any(s < 0 for s in sizes):
            self.refuse("a subview with dynamic sizes or strides", op)
        dyn_offs = list(op.operands)[1:1 + seg[1]]
        offs, it = [], iter(dyn_offs)
        for o in static_offs:
            offs.append(next(it) if o == dyn else o)
        kept, j = [], 0
        res_shape = list(res_t.shape)
        for k in range(src_t.rank):
            remaining_big = sum(1 for kk in range(k, src_t.rank) if sizes[kk] != 1)
            if sizes[k] != 1:
                if j >= len(res_shape) or res_shape[j] != sizes[k]:
                    self.refuse("cannot match the dimensions of a rank-reducing subview", op)
                kept.append(k)
                j += 1
            elif j < len(res_shape) and res_shape[j] == 1 and \
                    len(res_shape) - j > remaining_big:
                kept.append(k)
                j += 1
        if j != len(res_shape):
            self.refuse("cannot match the dimensions of a rank-reducing subview", op)
        return kept, offs, sizes, steps

    def _batch_classes(self, values, uf, shared_roots, written_roots):
        from mlir import ir

        by_class: dict = {}
        for v in values:
            for k in range(ir.MemRefType(v.type).rank):
                by_class.setdefault(uf.find((v, k)), []).append((v, k))
        chosen = []
        for cls, members in by_class.items():
            if cls in uf.bad:
                continue
            sizes = {ir.MemRefType(v.type).shape[k] for v, k in members}
            if len(sizes) != 1:
                continue
            count: dict = {}
            for v, k in members:
                count[v] = count.get(v, 0) + 1
            ok = True
            for v in values:
                c = count.get(v, 0)
                must = self._root_of(v) in shared_roots or self._root_of(v) in written_roots
                if c > 1 or (must and c != 1):
                    ok = False
                    break
            if ok:
                chosen.append((cls, sizes.pop()))
        # order: the carry's (or first buffer's) dimensions first
        order = []
        for v in values:
            for k in range(ir.MemRefType(v.type).rank):
                c = uf.find((v, k))
                if c not in order:
                    order.append(c)
        chosen.sort(key=lambda cs: order.index(cs[0]))
        return chosen

    def _root_of(self, v):
        """The root a buffer value is a view of: a body allocation, a carry iteration
        argument, or an outer value's own root."""
        while True:
            if hasattr(v.owner, "arguments"):
                return v
            o = _op(v.owner)
            if o.name in _VIEWS or o.name in ("memref.reinterpret_cast", "memref.view",
                                              "memref.reshape"):
                v = o.operands[0]
                continue
            return v

    # -- layout ------------------------------------------------------------------------------
    def _layouts(self, values, uf, classes, shared_roots, lb, st):
        """_Access of every buffer value."""
        from mlir import ir

        cls_ids = [c for c, _ in classes]
        access: dict = {}
        storages: list = []
        by_root: dict = {}

        def batch_dims(v):
            out = {}
            for k in range(ir.MemRefType(v.type).rank):
                c = uf.find((v, k))
                if c in cls_ids:
                    out[cls_ids.index(c)] = k
            return out
        self.batch_dims = batch_dims

        def compact(v, storage):
            t = ir.MemRefType(v.type)
            b = set(batch_dims(v).values())
            strides, acc = [0] * t.rank, 1
            for k in reversed(range(t.rank)):
                if k in b:
                    continue
                strides[k] = acc
                acc *= t.shape[k]
            storage.slot_elems = acc
            return _Access(storage, list(t.shape), strides)

        # shared roots: temporaries and carries
        for r in shared_roots:
            s = _Storage("shared", ir.MemRefType(r.type).element_type, len(storages))
            storages.append(s)
            by_root[r] = s
            access[r] = compact(r, s)
        # ping-pong: a carry whose new value is a fresh temporary of the same layout
        self.pingpong = {}
        yielded = [y for y in self.yields]
        for i, (a, y) in enumerate(zip(self.iter_args, self.yields)):
            if y == a or not _is_memref(y) or not self._in_body(y):
                continue
            yo = defining_op(y)
            if yo is None or yo.name != "memref.alloc" or yielded.count(y) != 1 or \
                    str(y.type) != str(a.type) or not _identity(ir.MemRefType(y.type)):
                continue
            s = by_root[a]
            s.pair = True
            storages.remove(by_root[y])
            by_root[y] = s
            access[y] = _Access(s, list(access[a].shape), list(access[a].strides), phase=1)
            self.pingpong[i] = y
        self.storages = storages
        self.by_root = by_root

        def global_access(v):
            base = self._root_of(v)
            t = ir.MemRefType(v.type)
            strides, offset = t.get_strides_and_offset()
            dyn = ir.ShapedType.get_dynamic_stride_or_offset()
            if offset == dyn or any(s == dyn for s in strides):
                self.refuse(f"the buffer {v.type} from outside the loop has a dynamic layout")
            bt = ir.MemRefType(base.type)
            if not bt.has_static_shape or not _identity(bt):
                self.refuse(f"the buffer {base.type} from outside the loop is not a "
                            "contiguous buffer")
            s = by_root.get(base)
            if s is None:
                s = _Storage("global", bt.element_type, len(storages), value=base)
                storages.append(s)
                by_root[base] = s
            return _Access(s, list(t.shape), list(strides), int(offset))

        ivs = {self.iv}

        def derive(op):
            src, res = op.operands[0], op.results[0]
            a = access[src]
            n = op.name
            rt = ir.MemRefType(res.type)
            if n == "memref.cast":
                return dataclasses.replace(a, shape=list(rt.shape))
            if n == "memref.subview":
                kept, offs, sizes, steps = self._subview_dims(op)
                off, coef = a.offset, a.iv_coef
                for k, o in enumerate(offs):
                    if isinstance(o, int):
                        off += o * a.strides[k]
                    elif o in ivs:
                        # the loop's induction variable is lb + k * st
                        off += lb * a.strides[k]
                        coef += st * a.strides[k]
                    else:
                        c = int_constant(o)
                        if c is None:
                            self.refuse("a subview offset that is neither a constant nor the "
                                        "loop's induction variable", op)
                        off += c * a.strides[k]
                return dataclasses.replace(
                    a, shape=list(rt.shape), strides=[a.strides[k] * steps[k] for k in kept],
                    offset=off, iv_coef=coef)
            groups = [[ir.IntegerAttr(x).value for x in ir.ArrayAttr(g)]
                      for g in ir.ArrayAttr(op.attributes["reassociation"])]
            if n == "memref.expand_shape":
                strides = [0] * rt.rank
                for k, g in enumerate(groups):
                    acc = a.strides[k]
                    for d in reversed(g):
                        strides[d] = acc
                        acc *= rt.shape[d]
                return dataclasses.replace(a, shape=list(rt.shape), strides=strides)
            # collapse_shape
            strides = []
            for g in groups:
                big = [d for d in g if a.shape[d] != 1]
                for outer, inner in zip(big, big[1:]):
                    if a.strides[outer] != a.strides[inner] * a.shape[inner]:
                        self.refuse("a collapse_shape of dimensions that are not contiguous "
                                    "in the kernel's layout (a batch dimension collapsed "
                                    "with another)", op)
                strides.append(a.strides[big[-1]] if big else 0)
            return dataclasses.replace(a, shape=list(rt.shape), strides=strides)

        for v in values:
            if v in access or self._in_body(v):
                continue
            access[v] = global_access(v)
        for op in self.ops[:-1]:
            if op.name in _VIEWS:
                access[op.results[0]] = derive(op)
        for v in values:
            if v not in access:
                if not self._in_body(v) and not hasattr(v.owner, "arguments"):
                    access[v] = global_access(v)
        return access

    def _plan_threads(self, access):
        """Problems (one per combination of batch-class indices), threads per problem
        (``group``: a power of two from 32 to ``threads``, about half the largest per-problem
        iteration space of an op) and problems per block."""
        from mlir import ir

        self.problems = math.prod(size for _, size in self.classes)
        largest = 1
        for op in self.ops[:-1]:
            vals = []
            if op.name == "linalg.generic":
                maps, iters, ins, outs = self._generic_parts(op)
                vals = [v for v in outs]
            elif op.name == "memref.copy":
                vals = [op.operands[1]]
            for v in vals:
                shape = ir.MemRefType(v.type).shape
                bd = set(self.batch_dims(v).values())
                largest = max(largest, math.prod(n for d, n in enumerate(shape)
                                                 if d not in bd))
        for a in self.iter_args:
            shape = ir.MemRefType(a.type).shape
            bd = set(self.batch_dims(a).values())
            largest = max(largest, math.prod(n for d, n in enumerate(shape) if d not in bd))
        group = _WARP
        while group < self.threads and group * 2 <= largest // 2:
            group *= 2
        if self.problems < 2 * _SMS:
            group = self.threads         # few problems: a whole block each
        per_block = self.threads // group
        while per_block > 1 and self.problems % per_block:
            per_block //= 2
        self.group, self.per_block = self.threads // per_block, per_block

    # -- build -------------------------------------------------------------------------------
    def build(self):
        lb, st, trips = self._trips()
        self._check_ops()
        values = self._memref_values()
        uf = self._union(values)
        shared_roots = []
        for a in self.iter_args:
            shared_roots.append(a)
        for op in self.ops[:-1]:
            if op.name == "memref.alloc":
                shared_roots.append(op.results[0])
        written_roots = set()
        for op in self.ops[:-1]:
            if op.name == "linalg.generic":
                _, _, _, outs = self._generic_parts(op)
                written_roots.update(self._root_of(v) for v in outs)
            elif op.name == "memref.copy":
                written_roots.add(self._root_of(op.operands[1]))
        classes = self._batch_classes(values, uf, set(shared_roots), written_roots)
        self.classes = classes
        access = self._layouts(values, uf, classes, shared_roots, lb, st)
        self.access = access
        self.written_roots = written_roots
        self._plan_threads(access)
        # workgroup plan: per storage, one region per problem of the block
        offset = 0
        for s in self.storages:
            if s.kind != "shared":
                continue
            s.byte_offset = offset
            nbytes = self.per_block * s.slot_elems * _elem_bytes(s.etype) * \
                (2 if s.pair else 1)
            offset += -(-max(nbytes, 1) // _SLOT_ALIGN) * _SLOT_ALIGN
        self.shared_bytes = offset
        if offset > self.opts.max_shared:
            self.refuse(f"the carry and temporaries of one block need {offset} bytes of "
                        f"workgroup memory, more than max-shared={self.opts.max_shared}")
        self._emit(lb, st, trips)

    def _emit(self, lb, st, trips):
        from mlir import ir
        from mlir.dialects import gpu, scf

        index = ir.IndexType.get()
        for_op = self.for_op
        loc = for_op.location
        grid = [self.problems // self.per_block, 1, 1]
        # host side: flat views of global buffers, result buffers of the carries
        results = []
        with ir.InsertionPoint(for_op), loc:
            for s in self.storages:
                if s.kind == "global":
                    s.flat = _flatten(s.value)
            for i, (a, init, y) in enumerate(zip(self.iter_args, self.inits, self.yields)):
                if y == a:
                    results.append(init)          # updated in place (when written)
                else:
                    t = ir.MemRefType(a.type)
                    results.append(ir.Operation.create(
                        "memref.alloc", [ir.MemRefType.get(list(t.shape), t.element_type)],
                        operands=[],
                        attributes={"operandSegmentSizes":
                                    ir.DenseI32ArrayAttr.get([0, 0])}).result)
            c1 = index_constant(1)
            launch = gpu.LaunchOp(tuple(index_constant(g) for g in grid),
                                  (index_constant(self.threads), c1, c1))
            kb = launch.regions[0].blocks[0]
            i64 = ir.IntegerType.get_signless(64)
            # one workgroup attribution per shared buffer, typed (so aligned) by its
            # element type
            wg = {}
            for s in self.storages:
                if s.kind == "shared":
                    n = self.per_block * s.slot_elems * (2 if s.pair else 1)
                    wg_t = ir.MemRefType.get([max(n, 1)], s.etype,
                                             memory_space=ir.Attribute.parse(_WG))
                    wg[s.ident] = kb.add_argument(wg_t, loc)
            if wg:
                launch.operation.attributes["workgroup_attributions"] = \
                    ir.IntegerAttr.get(i64, len(wg))
            launch.operation.attributes["latch.scan_kernel"] = ir.UnitAttr.get()
        e = _Emitter(self, kb, wg, loc)
        with ir.InsertionPoint(kb), loc:
            e.prologue()
            e.start_step(index_constant(0), None)
            # carries in
            for i, (a, init) in enumerate(zip(self.iter_args, self.inits)):
                e.copy(self.access[init], self.access[a], a, k=0)
            e.barrier()
            loop = scf.ForOp(index_constant(0), index_constant(trips), index_constant(1))
            with ir.InsertionPoint(loop.body):
                k = loop.induction_variable
                iv = k
                if st != 1:
                    iv = ir.Operation.create("arith.muli", [index], [k, index_constant(st)]).result
                if lb:
                    iv = ir.Operation.create("arith.addi", [index], [iv, index_constant(lb)]).result
                e.start_step(k, iv)
                e.step_body()
                # carries that neither ping-pong nor stay in place are copied back
                for i, (a, y) in enumerate(zip(self.iter_args, self.yields)):
                    if y == a or i in self.pingpong:
                        continue
                    e.copy(self.access[y], self.access[a], a, k=k)
                e.barrier(force=True)
                scf.YieldOp([])
            # carries out
            kfinal = index_constant(trips)
            e.start_step(kfinal, None)
            for i, (a, y, r) in enumerate(zip(self.iter_args, self.yields, results)):
                if y == a:
                    # updated in place: back into the init buffer, if the body wrote it
                    if a in self.written_roots:
                        e.copy(self.access[a], self.access[self.inits[i]], a, k=kfinal)
                    continue
                shape = list(ir.MemRefType(r.type).shape)
                e.copy(self.access[a], _Access(e.global_storage(r), shape, _row_major(shape)),
                       a, k=kfinal)
            ir.Operation.create("gpu.terminator", [])
        for r, new in zip(for_op.results, results):
            r.replace_all_uses_with(new)
        for_op.erase()


def _uses_dim(expr, d: int) -> bool:
    from mlir import ir
    if isinstance(expr, ir.AffineDimExpr):
        return ir.AffineDimExpr(expr).position == d
    if isinstance(expr, ir.AffineBinaryExpr):
        b = ir.AffineBinaryExpr(expr)
        return _uses_dim(b.lhs, d) or _uses_dim(b.rhs, d)
    return False


def _identity(t) -> bool:
    strides, offset = t.get_strides_and_offset()
    return offset == 0 and strides == _row_major(t.shape)


def _row_major(shape) -> list:
    out, acc = [], 1
    for d in reversed(list(shape)):
        out.insert(0, acc)
        acc *= d
    return out


def _elem_bytes(t) -> int:
    s = str(t)
    if s in ("f64", "i64", "index"):
        return 8
    if s in ("f16", "bf16", "i16"):
        return 2
    if s in ("i8", "i1"):
        return 1
    return 4


def _flatten(v):
    """A 1-D view of the contiguous buffer ``v`` (itself when already 1-D)."""
    from mlir import ir

    t = ir.MemRefType(v.type)
    if t.rank == 1:
        return v
    n = math.prod(t.shape)
    flat_t = ir.MemRefType.get([n], t.element_type)
    if t.rank == 0:
        return ir.Operation.create(
            "memref.expand_shape", [flat_t], [v],
            attributes={"reassociation": ir.ArrayAttr.get([]),
                        "static_output_shape": ir.DenseI64ArrayAttr.get([1])}).result
    i64 = ir.IntegerType.get_signless(64)
    group = ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in range(t.rank)])
    return ir.Operation.create("memref.collapse_shape", [flat_t], [v],
                               attributes={"reassociation": ir.ArrayAttr.get([group])}).result


# -- code emission inside the block ---------------------------------------------------------

class _Emitter:
    def __init__(self, sk: _ScanKernel, kb, wg, loc):
        self.sk = sk
        self.kb = kb
        self.wg = wg
        self.loc = loc
        self.T = sk.threads
        self.pending_reads: set = set()
        self.pending_writes: set = set()
        self.views: dict = {}
        self.extra_globals: dict = {}

    # index arithmetic with Python-int folding
    def idx(self, v):
        return index_constant(v) if isinstance(v, int) else v

    def add(self, a, b):
        from mlir import ir
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return ir.Operation.create("arith.addi", [ir.IndexType.get()],
                                   [self.idx(a), self.idx(b)]).result

    def mul(self, a, b):
        from mlir import ir
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if isinstance(a, int) and a == 1:
            return b
        if isinstance(b, int) and b == 1:
            return a
        if (isinstance(a, int) and a == 0) or (isinstance(b, int) and b == 0):
            return 0
        return ir.Operation.create("arith.muli", [ir.IndexType.get()],
                                   [self.idx(a), self.idx(b)]).result

    def prologue(self):
        from mlir import ir

        kb = self.kb
        sk = self.sk
        index = ir.IndexType.get()
        tid = kb.arguments[3]
        G, PB = sk.group, sk.per_block
        self.T = G                                   # threads per problem
        if PB > 1:
            self.slot = ir.Operation.create("arith.divui", [index],
                                            [tid, index_constant(G)]).result
            self.tid = ir.Operation.create("arith.remui", [index],
                                           [tid, index_constant(G)]).result
            problem = self.add(self.mul(kb.arguments[0], PB), self.slot)
        else:
            self.slot, self.tid, problem = 0, tid, kb.arguments[0]
        # the problem's index in each batch class (the last class fastest)
        sizes = [size for _, size in sk.classes]
        self.bids = self.split(problem, sizes) if sizes else []
        self.bids = [self.idx(b) for b in self.bids]
        self.lane = ir.Operation.create("arith.remui", [index],
                                        [tid, index_constant(_WARP)]).result
        self.warp = ir.Operation.create("arith.divui", [index],
                                        [self.tid, index_constant(_WARP)]).result
        for s in self.sk.storages:
            if s.kind == "shared":
                self.views[s.ident] = self.wg[s.ident]
            else:
                self.views[s.ident] = s.flat

    def global_storage(self, value):
        from mlir import ir
        s = self.extra_globals.get(value)
        if s is None:
            with ir.InsertionPoint(_op(self.kb.owner)):
                flat = _flatten(value)
            s = _Storage("global", ir.MemRefType(value.type).element_type,
                         -1 - len(self.extra_globals), value=value, flat=flat)
            self.extra_globals[value] = s
            self.views[s.ident] = flat
        return s

    def start_step(self, k, iv):
        from mlir import ir

        self.k, self.iv = k, iv
        self.half = {}
        index = ir.IndexType.get()
        for s in self.sk.storages:
            if s.kind == "shared" and s.pair:
                kv = int_constant(k)
                if kv is not None:
                    self.half[s.ident] = {0: (kv % 2) * s.slot_elems,
                                          1: ((kv + 1) % 2) * s.slot_elems}
                    continue
                par = ir.Operation.create("arith.andi", [index], [k, index_constant(1)]).result
                # phase 0 (the carry) at (k % 2) * n; phase 1 (the new value) the other half
                h0 = self.mul(par, s.slot_elems)
                h1 = ir.Operation.create("arith.subi", [index],
                                         [index_constant(s.slot_elems), h0]).result
                self.half[s.ident] = {0: h0, 1: h1}
        self.scalars = {}

    def address(self, acc: _Access, idxs):
        """(memref, flat index) of element ``idxs`` of a buffer with access ``acc``."""
        flat = acc.offset
        if acc.storage.kind == "shared" and self.sk.per_block > 1:
            per = acc.storage.slot_elems * (2 if acc.storage.pair else 1)
            flat = self.add(flat, self.mul(self.slot, per))
        if acc.iv_coef:
            flat = self.add(flat, self.mul(self.iv, acc.iv_coef))
        if acc.storage.pair:
            flat = self.add(flat, self.half[acc.storage.ident][acc.phase])
        for s, i in zip(acc.strides, idxs):
            if s:
                flat = self.add(flat, self.mul(i, s))
        return self.views[acc.storage.ident], self.idx(flat)

    def load(self, acc, idxs):
        from mlir import ir
        mem, i = self.address(acc, idxs)
        return ir.Operation.create("memref.load", [acc.storage.etype], [mem, i]).result

    def store(self, value, acc, idxs):
        from mlir import ir
        mem, i = self.address(acc, idxs)
        ir.Operation.create("memref.store", [], [value, mem, i])

    # barriers
    def barrier(self, force=False):
        from mlir.dialects import gpu
        if force or self.pending_reads or self.pending_writes:
            gpu.BarrierOp()
        self.pending_reads, self.pending_writes = set(), set()

    def before(self, reads: set, writes: set):
        if (reads & self.pending_writes) or (writes & (self.pending_writes | self.pending_reads)):
            self.barrier()
        self.pending_reads |= reads
        self.pending_writes |= writes

    # loops over per-block elements
    def distribute(self, counts, fn, worker=None, workers=None):
        """Run ``fn(linear)`` for linear = worker, worker + workers, ... < prod(counts)."""
        from mlir import ir
        from mlir.dialects import scf

        worker = self.tid if worker is None else worker
        workers = self.T if workers is None else workers
        total = math.prod(counts)
        if total == 0:
            return
        if total <= workers:
            if total < workers:
                guard = scf.IfOp(compare("ult", worker, index_constant(total)))
                with ir.InsertionPoint(guard.then_block):
                    fn(worker)
                    scf.YieldOp([])
            else:
                fn(worker)
            return
        loop = scf.ForOp(worker, index_constant(total), index_constant(workers))
        with ir.InsertionPoint(loop.body):
            fn(loop.induction_variable)
            scf.YieldOp([])

    def split(self, linear, counts):
        """Linear index -> per-dimension indices (last dimension fastest)."""
        out = [0] * len(counts)
        if isinstance(linear, int):
            for k in reversed(range(len(counts))):
                out[k] = linear % counts[k]
                linear //= counts[k]
            return out
        # the dimensions of extent 1 keep index 0; the others split the linear index
        delinearize(linear, [k for k in reversed(range(len(counts))) if counts[k] > 1],
                    counts, out)
        return out

    # element copy between two accesses over the (per-block) shape of ``value``
    def copy(self, src: _Access, dst: _Access, value, k):
        from mlir import ir

        shape = list(ir.MemRefType(value.type).shape)
        bd = self.sk.batch_dims(value)
        counts = [1 if d in bd.values() else n for d, n in enumerate(shape)]
        self.before({src.storage.ident}, {dst.storage.ident})

        def body(linear):
            idx = self.split(linear, counts)
            for c, d in bd.items():
                idx[d] = self.bids[c]
            self.store(self.load(src, idx), dst, idx)
        self.distribute(counts, body)

    # the step
    def step_body(self):
        from mlir import ir

        sk = self.sk
        mapping = {sk.iv: self.iv}
        self.scalar_map = mapping
        for op in sk.ops[:-1]:
            n = op.name
            if n in _VIEWS or n in ("memref.alloc", "memref.dealloc"):
                continue
            if n == "memref.copy":
                src, dst = op.operands[0], op.operands[1]
                self.copy(sk.access[src], sk.access[dst], src, self.k)
            elif n == "linalg.generic":
                self.generic(op)
            else:      # pure scalar arithmetic
                new = op.clone()
                for i, v in enumerate(list(new.operands)):
                    if v in mapping:
                        new.operands[i] = mapping[v]
                for a, b in zip(op.results, new.results):
                    mapping[a] = b
            del n
        del ir

    def generic(self, op):
        from mlir import ir

        sk = self.sk
        maps, iters, ins, outs = sk._generic_parts(op)
        n_loops = len(iters)
        ranges = [None] * n_loops
        for v, m in zip(ins + outs, maps):
            if _is_memref(v):
                shape = ir.MemRefType(v.type).shape
                for k, e in enumerate(m.results):
                    if isinstance(e, ir.AffineDimExpr):
                        ranges[ir.AffineDimExpr(e).position] = shape[k]
        if any(r is None for r in ranges):
            sk.refuse("a loop of the generic indexes no operand dimension directly", op)
        # loops fixed to the block ids
        fixed = {}
        for v, m in zip(ins + outs, maps):
            if not _is_memref(v):
                continue
            bd = sk.batch_dims(v)
            for c, k in bd.items():
                e = m.results[k]
                if isinstance(e, ir.AffineDimExpr):
                    fixed[ir.AffineDimExpr(e).position] = c
        out_map = maps[len(ins)]
        par_order = []
        for e in reversed(list(out_map.results)):
            if isinstance(e, ir.AffineDimExpr):
                d = ir.AffineDimExpr(e).position
                if d not in fixed and iters[d] == "parallel" and d not in par_order:
                    par_order.append(d)
        for d in reversed(range(n_loops)):
            if d not in fixed and iters[d] == "parallel" and d not in par_order:
                par_order.append(d)
        par = list(reversed(par_order))            # last = fastest
        red = [d for d in range(n_loops) if iters[d] != "parallel"]
        # the reduction loop order: fastest = the one an input indexes last
        red_fast = []
        for v, m in zip(ins, maps):
            for e in reversed(list(m.results)):
                if isinstance(e, ir.AffineDimExpr):
                    d = ir.AffineDimExpr(e).position
                    if d in red and d not in red_fast:
                        red_fast.append(d)
        for d in red:
            if d not in red_fast:
                red_fast.append(d)
        red = list(reversed(red_fast))

        reads = {sk.access[v].storage.ident for v in ins if _is_memref(v)}
        writes = {sk.access[v].storage.ident for v in outs}
        block = op.regions[0].blocks[0]
        body_ops = [_op(o) for o in block.operations]
        uses_out = any(len(list(block.arguments[len(ins) + j].uses)) for j in range(len(outs)))
        if uses_out:
            reads |= writes
        self.before(reads, writes)

        def accs_of(vs):
            return [sk.access[v] if _is_memref(v) else None for v in vs]
        in_acc, out_acc = accs_of(ins), accs_of(outs)

        def index_of(m, dims):
            out = []
            for e in m.results:
                out.append(self.affine(e, dims))
            return out

        def base_dims():
            dims = [None] * n_loops
            for d, c in fixed.items():
                dims[d] = self.bids[c]
            return dims

        def load_ins(dims, mapping):
            for j, (v, m) in enumerate(zip(ins, maps)):
                if in_acc[j] is None:
                    mapping[block.arguments[j]] = self.scalar_map.get(v, v)
                elif len(list(block.arguments[j].uses)):
                    mapping[block.arguments[j]] = self.load(in_acc[j], index_of(m, dims))

        def clone_body(ops, mapping, dims):
            for o in ops:
                if o.name == "linalg.index":
                    mapping[o.results[0]] = self.idx(dims[ir.IntegerAttr(o.attributes["dim"]).value])
                    continue
                new = o.clone()
                for i, v in enumerate(list(new.operands)):
                    if v in mapping:
                        new.operands[i] = mapping[v]
                    elif v in self.scalar_map:
                        new.operands[i] = self.scalar_map[v]
                for a, b in zip(o.results, new.results):
                    mapping[a] = b

        par_counts = [ranges[d] for d in par]
        red_counts = [ranges[d] for d in red]
        n_red = math.prod(red_counts) if red else 1
        acc = accumulation(op) if (len(outs) == 1 and red) else None
        warp_ok = acc is not None and acc[2].name in _COMBINERS and \
            str(acc[2].results[0].type) == "f32" and n_red >= _MIN_WARP_REDUCTION
        yld = body_ops[-1]

        if warp_ok:
            _, acc_arg, comb, other = acc
            pre = [o for o in body_ops[:-1] if o != comb]

            def element(dims, r):
                for d, i in zip(red, self.split(r, red_counts)):
                    dims[d] = i
                mapping = {}
                load_ins(dims, mapping)
                clone_body(pre, mapping, dims)
                v = mapping.get(other, other)
                return self.scalar_map.get(v, v)

            def per_output(o):
                from mlir.dialects import scf
                dims = base_dims()
                for d, i in zip(par, self.split(o, par_counts)):
                    dims[d] = i
                first = element(list(dims), self.lane)
                if n_red > _WARP:
                    loop = scf.ForOp(self.add(self.lane, _WARP), index_constant(n_red),
                                     index_constant(_WARP), [first])
                    with ir.InsertionPoint(loop.body):
                        e = element(list(dims), loop.induction_variable)
                        c = ir.Operation.create(comb.name, [e.type],
                                                [loop.inner_iter_args[0], e]).result
                        scf.YieldOp([c])
                    partial = loop.results[0]
                else:
                    partial = first
                total = _warp_reduce(partial, comb.name)
                lane0 = scf.IfOp(compare("eq", self.lane, index_constant(0)))
                with ir.InsertionPoint(lane0.then_block):
                    oi = index_of(out_map, dims)
                    old = self.load(out_acc[0], oi)
                    a, b = (old, total) if comb.operands[0] == acc_arg else (total, old)
                    new = ir.Operation.create(comb.name, [old.type], [a, b]).result
                    self.store(new, out_acc[0], oi)
                    scf.YieldOp([])
            self.distribute(par_counts, per_output, worker=self.warp,
                            workers=self.T // _WARP)
            return

        def per_thread(linear):
            from mlir.dialects import scf
            dims = base_dims()
            for d, i in zip(par, self.split(linear, par_counts)):
                dims[d] = i
            out_idx = [index_of(maps[len(ins) + j], dims) for j in range(len(outs))]
            out_args = [block.arguments[len(ins) + j] for j in range(len(outs))]
            if not red or n_red == 1:
                for d in red:
                    dims[d] = 0
                mapping = {}
                load_ins(dims, mapping)
                for j, a in enumerate(out_args):
                    if len(list(a.uses)):
                        mapping[a] = self.load(out_acc[j], out_idx[j])
                clone_body(body_ops[:-1], mapping, dims)
                for j, v in enumerate(yld.operands):
                    val = mapping.get(v, self.scalar_map.get(v, v))
                    self.store(val, out_acc[j], out_idx[j])
                return
            inits = [self.load(out_acc[j], out_idx[j]) for j in range(len(outs))]
            loop = scf.ForOp(index_constant(0), index_constant(n_red), index_constant(1), inits)
            with ir.InsertionPoint(loop.body):
                rdims = list(dims)
                for d, i in zip(red, self.split(loop.induction_variable, red_counts)):
                    rdims[d] = i
                mapping = {a: loop.inner_iter_args[j] for j, a in enumerate(out_args)}
                load_ins(rdims, mapping)
                clone_body(body_ops[:-1], mapping, rdims)
                scf.YieldOp([mapping.get(v, self.scalar_map.get(v, v)) for v in yld.operands])
            for j in range(len(outs)):
                self.store(loop.results[j], out_acc[j], out_idx[j])
        self.distribute(par_counts, per_thread)

    def affine(self, e, dims):
        from mlir import ir
        if isinstance(e, ir.AffineDimExpr):
            return dims[ir.AffineDimExpr(e).position]
        if isinstance(e, ir.AffineConstantExpr):
            return ir.AffineConstantExpr(e).value
        if isinstance(e, ir.AffineAddExpr):
            b = ir.AffineBinaryExpr(e)
            return self.add(self.affine(b.lhs, dims), self.affine(b.rhs, dims))
        if isinstance(e, ir.AffineMulExpr):
            b = ir.AffineBinaryExpr(e)
            return self.mul(self.affine(b.lhs, dims), self.affine(b.rhs, dims))
        index = ir.IndexType.get()
        n = max((d for d in range(len(dims)) if _uses_dim(e, d)), default=-1) + 1
        amap = ir.AffineMap.get(n, 0, [e])
        return ir.Operation.create("affine.apply", [index], [self.idx(d) for d in dims[:n]],
                                   attributes={"map": ir.AffineMapAttr.get(amap)}).result


def _warp_reduce(value, combine: str):
    from mlir import ir

    i32 = ir.IntegerType.get_signless(32)
    width = ir.Operation.create("arith.constant", [i32],
                                attributes={"value": ir.IntegerAttr.get(i32, _WARP)}).result
    for offset in (16, 8, 4, 2, 1):
        off = ir.Operation.create("arith.constant", [i32],
                                  attributes={"value": ir.IntegerAttr.get(i32, offset)}).result
        other = ir.Operation.create(
            "gpu.shuffle", [value.type, ir.IntegerType.get_signless(1)], [value, off, width],
            attributes={"mode": ir.Attribute.parse("#gpu<shuffle_mode xor>")}).results[0]
        value = ir.Operation.create(combine, [value.type], [value, other]).result
    return value
