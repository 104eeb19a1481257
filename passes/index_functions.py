"""``latch-recompute-index-functions``: an input of a ``linalg.generic`` whose elements are a
function of their indices alone is computed in the reader's body from the reader's loop
indices instead of loaded (stage 'kernels', in ``latch-form-kernels`` after the contraction
kernels are formed, before the loops are made).

The blocked scan of ``aten.cumsum`` (``latch.frontend.decompositions._cumsum``) multiplies
by a 0/1 lower triangle ``L[i, k] = (i >= k)``, built once from two ``arange`` buffers and
read by every product that needs it: the MoE routing rank of each layer sums
``L[b, k] * [x[t, k] == s[e]]`` over ``k``, and its loop loads ``L`` and ``x`` for each term
(TinyMoE B32: 64 x 1024 x 8 outputs of 64 terms, two loads a term; the kernel is bound by
its loads).  The triangle is an index function: this pass replaces the reader's use of the
loaded element by ``extui(cmpi sge(i, k))`` on the reader's own indices, and the load goes
(the operand stays, so that the generic keeps its loop ranges; the lowering's load of it
has no use and is dropped).

An input qualifies when its memref is an allocation itself (not a view of one), read
through a map of plain loop dimensions, whose last writer before the reader
(``buffer_views.last_writer``) is an all-parallel ``linalg.generic`` writing it through a
permutation of its loops, whose body (at most ``MAX_OPS`` ``arith`` ops and
``linalg.index``: ``generic_body.scalar_body``) reads no element of its output, and each
of whose inputs is an *arange*: a 1-D buffer whose last writer before it
yields ``index_cast(linalg.index 0)`` with nothing read, indexed by a plain loop dimension.
Elements are the same values either way (integer compares and casts), so results are bitwise
those of the loads.  Readers already turned into launches (products, reductions) are not
generics any more and are left alone.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-recompute-index-functions)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, function_definitions, operation as _op
from latch.passes.buffer_views import last_writer, root
from latch.passes.generic_body import (all_parallel, clone_body_ops, indexing_maps, plain_dims,
                                       scalar_body, segments)

#: body ops (yield excluded) an index function may have to be computed per element
MAX_OPS = 8


@dataclasses.dataclass(frozen=True)
class RecomputeIndexFunctions(ModulePass):
    name = "latch-recompute-index-functions"
    summary = ("an input whose elements are a function of their indices (a scan's 0/1 "
               "triangle) computed from the reader's loop indices instead of loaded")

    def apply(self, module) -> None:
        for func_op in function_definitions(module):
            body = func_op.regions[0].blocks[0]
            # readers last first: a reader is rewritten while its inputs' writers still
            # read their aranges (which they then compute in turn)
            for op in reversed(list(body.operations)):
                op = _op(op)
                if op.name == "linalg.generic":
                    recompute_index_inputs(op)


def _body_ops(g) -> list:
    return [_op(o) for o in g.regions[0].blocks[0].operations]


def _whole_allocation(v) -> bool:
    """Whether memref ``v`` is an allocation itself (not a view of a part of one)."""
    return not hasattr(v.owner, "arguments") and root(v) == v and \
        _op(v.owner).name == "memref.alloc"


def _arange_dim(buffer, w) -> bool:
    """Whether the 1-D ``buffer`` holds ``0, 1, 2, ...`` when ``w`` reads it: its last writer
    before ``w`` is an all-parallel generic reading nothing, writing it whole, whose body is
    ``index_cast(linalg.index 0)``."""
    from mlir import ir

    if not _whole_allocation(buffer) or ir.MemRefType(buffer.type).rank != 1:
        return False
    a = last_writer(buffer, w)
    if a is None or segments(a) != (0, 1) or a.operands[0] != buffer or not all_parallel(a):
        return False
    ops = _body_ops(a)
    if [o.name for o in ops] != ["linalg.index", "arith.index_cast", "linalg.yield"]:
        return False
    index, cast, yielded = ops
    return ir.IntegerAttr(index.attributes["dim"]).value == 0 and \
        cast.operands[0] == index.results[0] and yielded.operands[0] == cast.results[0]


def index_function(buffer, reader):
    """(writer, [loop of the writer each of its inputs is indexed by], [loop of the writer
    each dimension of ``buffer`` is]) when the elements of
    ``buffer`` that ``reader`` reads are an index function (see the module docstring); None
    otherwise."""
    if not _whole_allocation(buffer):
        return None
    w = last_writer(buffer, reader)
    if w is None or not all_parallel(w):
        return None
    n_in, n_out = segments(w)
    maps = indexing_maps(w)
    if n_out != 1 or w.operands[n_in] != buffer:
        return None
    out_dims = plain_dims(maps[n_in])           # the buffer's dimension p is loop out_dims[p]
    if out_dims is None or sorted(out_dims) != list(range(maps[n_in].n_dims)):
        return None                              # not a permutation: not every element once
    ops = scalar_body(w, also=("linalg.index",))      # None if it reads its output
    if ops is None or len(ops) > MAX_OPS or any(o.name.startswith("math.") for o in ops):
        return None
    loops = []
    for j in range(n_in):
        dims = plain_dims(maps[j])
        if dims is None or len(dims) != 1 or not _arange_dim(w.operands[j], w):
            return None
        loops.append(dims[0])
    return w, loops, out_dims


def recompute_index_inputs(reader) -> int:
    """Compute each qualifying input of the generic ``reader`` in its body; returns how many
    inputs were rewritten."""
    from mlir import ir

    n_in, _ = segments(reader)
    maps = indexing_maps(reader)
    block = reader.regions[0].blocks[0]
    done = 0
    for i in range(n_in):
        arg = block.arguments[i]
        value = reader.operands[i]
        if not isinstance(value.type, ir.MemRefType) or not any(True for _ in arg.uses):
            continue
        dims = plain_dims(maps[i])
        found = index_function(value, reader) if dims is not None else None
        if found is None:
            continue
        w, loops, out_dims = found
        w_block = w.regions[0].blocks[0]
        first = _op(list(block.operations)[0])
        with ir.InsertionPoint(first), reader.location:
            index = ir.IndexType.get()
            # the buffer's dimension p is the writer's loop out_dims[p] and the reader's
            # loop dims[p]: the writer's loop index, as the reader has it
            reader_dims = {out_dims[p]: ir.Operation.create(
                "linalg.index", [index],
                attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), r)}
            ).results[0] for p, r in enumerate(dims)}
            mapping = {}
            for j, loop in enumerate(loops):
                elem = w_block.arguments[j].type
                mapping[w_block.arguments[j]] = ir.Operation.create(
                    "arith.index_cast", [elem], [reader_dims[loop]]).results[0]
            ops = _body_ops(w)
            clone_body_ops(ops[:-1], mapping, reader_dims)
            yielded = ops[-1].operands[0]
            arg.replace_all_uses_with(mapping.get(yielded, yielded))
        done += 1
    return done
