"""``latch-recompute-elementwise``: one copy of an elementwise producer per reader, where
recomputing it moves no more memory than reading it back (stage 'buffers', on tensors,
before ``linalg-fuse-elementwise-ops``).

Elementwise fusion moves a producer into its reader only when it has one reader.  A
softmax's or a cross-entropy's intermediate has several — ``x - max`` is read by the sum of
exponentials and by the log-softmax; the log-softmax by the loss and by its backward — so
each is materialized: at B32 the TinyMoE update made thirteen passes over full
``[32768, 32768]`` tensors (4.3 GB each in f32) between the LM head's product and its
gradient (four with this pass and the rewrites below).  This pass clones such a producer once for each further reader; each copy then
fuses into its reader, which reads the producer's inputs instead of its result.

A producer qualifies when:

* it is an all-parallel ``linalg.generic`` on tensors with one result of static shape, an
  invertible output map, and a body of pure scalar code (``arith``/``math``, no regions, no
  reads of its output's initial value) — or a gather: a ``tensor.extract`` of a tensor
  from outside with elements no wider than the result's (the MoE's ``o[slot]``, read by
  the top-k combine and by the gates' gradient: each reader gathers the rows itself
  instead of reading a [65536, 768] copy written for them);
* at most one input is large (more than an eighth of the result's bytes; a gather counts
  as one) and none is larger than the result, so a reader that computes it reads at most
  as many bytes as it reads now (a rounding to bf16 stays: reading the bf16 copy is half the bytes of
  recomputing it from f32 — and latch-form-contraction-kernels lets the product that
  feeds it write that copy directly); an f32 product that every reader takes rounded to
  bf16 counts as its bf16 bytes in a producer that computes more than the rounding
  (``_read_rounded``: the SwiGLU gate ``silu(bf16(x @ w1))`` is then recomputed in the
  forward product and in the backward ``dy * s`` instead of written and read back — the
  pipeline's third round catches it, once the second fusion has made it read the product);
* it has 2 to ``max-readers`` readers, each a ``linalg.generic`` that takes it as an input
  indexed by all of its loops (every element read once — a row reduction qualifies, a
  contraction, which reads each element once per column of the other operand, does not:
  products keep reading materialized operands, as latch-form-contraction-kernels wants —
  except a plain widening of bf16 to f32, whose copies let each product read the bf16
  values and widen them itself, a tensor-core kernel, a plain transpose or copy, whose
  copies let each product read the original through the permuted map, and a generic that
  reads nothing — an ``arange`` — which a reader, broadcasting it or not, computes from its
  own indices if its other inputs still bound all of its loops, :func:`_covered_without`;
  such a producer is copied for one qualifying reader too, the others keeping it),
  directly or through ``tensor.expand_shape`` / ``tensor.collapse_shape`` (cloned with the
  copy; elementwise fusion folds them once ``linalg-fold-unit-extent-dims`` has made every
  indexing map a projected permutation).

Two rewrites come first, giving more producers that qualify:

* a ``tensor.extract`` of an elementwise result (the loss's gather of the log-softmax at
  the targets) computes the producer's body on the extracted elements of its inputs —
  unless the producer has readers other than extracts (it is materialized anyway) and
  either narrows (a rounding to bf16: it is read instead of its wider input, which keeps
  a single reader, so the product computing it can write the rounding) or reads more than
  one full-size input (a residual sum: one element of it is fewer reads than its terms —
  unfolded, the MoE's gather of its normalized input recomputed the whole residual stream,
  every earlier layer's output, for each of its two reads of each token) — and unless it
  rounds a product that only it reads (the product writes the rounding itself: reading the
  f32 product instead would double the bytes); an extract through a reshape reads the
  reshape's source, and an extract of ``tensor.insert_slice %src into %filled`` (the MoE's
  expert input gradients placed in front of the dropped tokens' zero row) selects between
  ``%src`` and the fill, so the dispatch gradient's gather sums the two products' bf16
  roundings itself instead of reading an f32 sum of them written for it;
* a generic whose reduction loops all run once, accumulating into a filled output (the
  one-hot scatter of the loss's gradient: ``g[i, j] += (t[i, k] == j) * c`` over ``k < 1``
  into zeros), is elementwise: those loops are dropped (indexed at 0) and the fill's value
  is read instead of the output.

Producers are visited last to first, so that a chain (``a -> b -> {c, d}``) is unfolded in
one sweep: ``b``'s copies become readers of ``a``.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-recompute-elementwise,
func.func(linalg-fuse-elementwise-ops))'``
"""
from __future__ import annotations

import dataclasses
import math

from latch.passes.base import ModulePass, element_bits, function_definitions, \
    nested_operations, operation as _op
from latch.passes.generic_body import clone_body_ops, compare, index_constant, indexing_maps, \
    loop_ranges, segments, used_only_rounded_to_bf16
from latch.passes.rematerialize_masks import read_through_unit_expansions


def _numel(t) -> int:
    from mlir import ir

    if not isinstance(t, ir.ShapedType):
        return 1
    shaped = ir.ShapedType(t)
    return math.prod(shaped.shape) if shaped.has_static_shape else -1


def _n_loops(op) -> int:
    from mlir import ir

    return len(ir.ArrayAttr(op.attributes["iterator_types"]))


def _is_recomputable(op) -> bool:
    from mlir import ir

    if op.name != "linalg.generic" or len(op.results) != 1:
        return False
    if not isinstance(op.results[0].type, ir.RankedTensorType):
        return False
    if any("parallel" not in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])):
        return False
    n_in, n_out = segments(op)
    if n_out != 1 or not indexing_maps(op)[-1].is_permutation:
        return False
    block = op.regions[0].blocks[0]
    if any(True for _ in block.arguments[len(block.arguments) - 1].uses):
        return False                                  # reads its output's initial value
    gathers = _gathers(op)
    if gathers is None or not _body_is_pure(op, gathers):
        return False
    out = _bytes(op.results[0].type)
    computes = any(_op(o).name not in ("arith.truncf", "linalg.yield")
                   for o in op.regions[0].blocks[0].operations)
    sizes = [_bytes(v.type) // 2 if computes and _read_rounded(op, k) else _bytes(v.type)
             for k, v in enumerate(list(op.operands)[:n_in])]
    if out <= 0 or any(s < 0 for s in sizes):
        return False
    # a gather reads one element of its source per element written: a large input
    return sum(1 for s in sizes if s * 8 > out) + len(gathers) <= 1 and \
        all(s <= out for s in sizes)


def _read_rounded(op, k: int) -> bool:
    """Whether input ``k`` of generic ``op`` is an f32 product (a contraction's result)
    that every reader, ``op`` included, takes only rounded to bf16: as it does the SwiGLU
    gate's ``silu(bf16(x @ w1))``, forward and backward.  latch-form-contraction-kernels
    then writes that product rounded (``_rounding_readers``), so a copy of ``op`` reads
    bf16 values: it counts as half its f32 bytes (for a producer that computes more than
    the rounding itself: a bare rounding stays one kernel, as above)."""
    from mlir import ir

    v = op.operands[k]
    if not isinstance(v.type, ir.RankedTensorType) or \
            not isinstance(ir.RankedTensorType(v.type).element_type, ir.F32Type):
        return False
    if not _is_product(v):
        return False
    for use in v.uses:
        reader = _op(use.owner)
        if reader.name != "linalg.generic" or use.operand_number >= segments(reader)[0]:
            return False
        if not used_only_rounded_to_bf16(
                reader.regions[0].blocks[0].arguments[use.operand_number]):
            return False
    return True


def _gathers(op) -> list | None:
    """The ``tensor.extract`` ops in generic ``op``'s body (a gather: ``o[slot[i], j]``),
    each reading a tensor from outside with elements no wider than the result's, so that
    a reader computing it reads no more bytes than it reads of the result; None if an
    extract reads anything else."""
    from mlir import ir

    out_bits = element_bits(ir.ShapedType(op.results[0].type).element_type)
    found = []
    for inner in op.regions[0].blocks[0].operations:
        inner = _op(inner)
        if inner.name != "tensor.extract":
            continue
        src = inner.operands[0]
        if not isinstance(src.type, ir.RankedTensorType) or \
                element_bits(ir.RankedTensorType(src.type).element_type) > out_bits:
            return None
        found.append(inner)
    return found


def _only_extracted(value) -> bool:
    """Whether every use of ``value`` (seen through reshapes) is a ``tensor.extract``."""
    for use in value.uses:
        user = _op(use.owner)
        if user.name in ("tensor.expand_shape", "tensor.collapse_shape"):
            if not _only_extracted(user.results[0]):
                return False
        elif user.name != "tensor.extract":
            return False
    return True


def _narrows(op) -> bool:
    """Whether generic ``op``'s result has narrower elements than one of its inputs (a
    rounding to bf16): its readers read fewer bytes from it than from its inputs."""
    from mlir import ir

    n_in, _ = segments(op)
    out = element_bits(ir.ShapedType(op.results[0].type).element_type)
    return any(isinstance(v.type, ir.ShapedType) and
               element_bits(ir.ShapedType(v.type).element_type) > out
               for v in list(op.operands)[:n_in])


def _bytes(t) -> int:
    """Bytes of a static shaped type (an element of under a byte counts as one); 4 for a
    scalar; -1 if dynamic."""
    from mlir import ir

    n = _numel(t)
    if n < 0 or not isinstance(t, ir.ShapedType):
        return n if n < 0 else 4
    return n * max(1, element_bits(ir.ShapedType(t).element_type) // 8)


def _readers(value, path=(), projections: bool = False) -> list | None:
    """(reshapes on the way, reader, operand number) for each use of ``value``, seen
    through ``tensor.expand_shape`` / ``tensor.collapse_shape``; None if a reader is not a
    ``linalg.generic`` taking the value as an input indexed by all of its loops (a
    permutation: every element read once) — or, with ``projections``, by some of them (a
    contraction, reading each element once per column of the other operand)."""
    out = []
    for use in value.uses:
        user, number = _op(use.owner), use.operand_number
        if user.name in ("tensor.expand_shape", "tensor.collapse_shape"):
            inner = _readers(user.results[0], path + (user,), projections)
            if inner is None:
                return None
            out.extend(inner)
            continue
        if user.name != "linalg.generic":
            return None
        n_in, _ = segments(user)
        m = indexing_maps(user)[number] if number < n_in else None
        if m is None or m.n_dims != _n_loops(user):
            return None
        if not (m.is_permutation or projections and m.is_projected_permutation):
            return None
        out.append((path, user, number))
    return out


def _of_indices_only(op) -> bool:
    """Whether generic ``op`` reads no tensor: its elements are a function of their indices
    alone (``arange``, a positional mask).  A reader recomputes it from its own loop
    indices, reading nothing — a cross-entropy's gradient compared an i64 ``arange`` of the
    vocabulary, read 8 bytes an element beside the 2 of the bf16 logits, with the targets."""
    return segments(op)[0] == 0


def _covered_without(reader, number: int) -> bool:
    """Whether every loop of generic ``reader`` indexes one of its inputs other than input
    ``number``: computed there from the loop index, that input leaves the reader fusable
    (elementwise fusion into a reduction needs each loop bounded by an input — a one-hot
    ``[t == arange]`` that read only its targets besides the arange would be materialized,
    4.3 GB in f32 for TinyMoE's vocabulary at B32, instead of fused into its row sum)."""
    n_in, _ = segments(reader)
    seen = set()
    for k, m in enumerate(indexing_maps(reader)[:n_in]):
        if k != number:
            seen.update(str(e) for e in m.results)
    return all(f"d{d}" in seen for d in range(_n_loops(reader)))


def _widens_bf16(op) -> bool:
    """Whether generic ``op`` only widens one bf16 input to f32 (``yield extf(in)``): a
    product reading its copy reads bf16 values widened at the product (a tensor-core kernel
    in latch-form-contraction-kernels) and half the bytes of the materialized f32."""
    n_in, _ = segments(op)
    body = [_op(o) for o in op.regions[0].blocks[0].operations]
    if n_in != 1 or [o.name for o in body] != ["arith.extf", "linalg.yield"]:
        return False
    ext = body[0]
    return (str(ext.operands[0].type) == "bf16" and str(ext.results[0].type) == "f32" and
            ext.operands[0] == op.regions[0].blocks[0].arguments[0] and
            body[1].operands[0] == ext.results[0])


def _moves_elements(op) -> bool:
    """Whether generic ``op`` only moves its one input's elements (``yield in``: a
    transpose or a copy): a product reading its copy reads the input through the permuted
    map instead — no pass over memory at all (the tensor-core kernels stage operands
    contiguous along k or along their rows alike)."""
    n_in, _ = segments(op)
    block = op.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    return (n_in == 1 and [o.name for o in body] == ["linalg.yield"] and
            body[0].operands[0] == block.arguments[0])


@dataclasses.dataclass(frozen=True)
class RecomputeElementwise(ModulePass):
    name = "latch-recompute-elementwise"
    summary = ("clone an elementwise producer once per reader when recomputing it reads no "
               "more than reading its result, so each copy fuses into its reader")
    max_readers: int = 4
    #: a generic reading nothing (an arange) recomputed in readers that broadcast it too
    aranges: bool = True

    def apply(self, module) -> None:
        from mlir import ir

        for func_op in function_definitions(module):
            for op in [_op(o) for o in func_op.regions[0].blocks[0].operations]:
                if op.name == "linalg.generic":
                    _drop_unit_reduction(op)
                    read_fill_instead_of_output(op)
                    _drop_zero_add(op)
            while _compute_extracts(func_op):
                pass
            for op in reversed([_op(o) for o in func_op.regions[0].blocks[0].operations]):
                if not _is_recomputable(op):
                    continue
                indices_only = self.aranges and _of_indices_only(op)
                readers = _readers(op.results[0])
                if readers is None and (_widens_bf16(op) or _moves_elements(op)
                                        or indices_only):
                    readers = _readers(op.results[0], projections=True)
                if readers is None or not 2 <= len(readers) <= self.max_readers:
                    if readers is None or not indices_only:
                        continue
                targets = readers[1:]
                if indices_only:
                    covered = [r for r in readers if _covered_without(r[1], r[2])]
                    targets = covered[1:] if len(covered) == len(readers) else covered
                for path, owner, number in targets:
                    ip = ir.InsertionPoint(owner)
                    value = op.clone(ip=ip).results[0]
                    for reshape in path:
                        copy = reshape.clone(ip=ip)
                        copy.operands[0] = value
                        value = copy.results[0]
                    owner.operands[number] = value


def _body_is_pure(op, allowed=()) -> bool:
    """Whether generic ``op``'s body is scalar ``arith``/``math`` code (and the ops of
    ``allowed``: the gathers :func:`_gathers` accepted)."""
    for inner in op.regions[0].blocks[0].operations:
        inner = _op(inner)
        if inner in allowed:
            continue
        if inner.regions or not (inner.name.startswith(("arith.", "math."))
                                 or inner.name in ("linalg.index", "linalg.yield")):
            return False
    return True


# ----------------------------------------------------------------------------- extracts
def _full_inputs(op, maps, n_in: int) -> int:
    """How many of generic ``op``'s tensor inputs are indexed by all of its loops (one
    element read per element computed, unlike a broadcast row statistic or weight)."""
    from mlir import ir

    full = 0
    for k in range(n_in):
        if not isinstance(op.operands[k].type, ir.RankedTensorType):
            continue
        used = {ir.AffineDimExpr(e).position for e in maps[k].results
                if isinstance(e, ir.AffineDimExpr)}
        full += len(used) == maps[k].n_dims
    return full


def _compute_extracts(func_op) -> bool:
    """Replace each ``tensor.extract`` of an elementwise generic's result (a gather of a
    log-softmax, say) by the generic's body computed on the elements of its inputs; True
    if any was replaced (the inputs' extracts may now qualify in turn)."""
    from mlir import ir

    changed = False
    for ex in [o for o in nested_operations(func_op) if o.name == "tensor.extract"]:
        src = ex.operands[0]
        if hasattr(src.owner, "arguments"):
            continue
        if _op(src.owner).name in ("tensor.collapse_shape", "tensor.expand_shape"):
            _extract_through_reshape(ex)
            changed = True
            continue
        if _op(src.owner).name == "tensor.insert_slice":
            changed |= _extract_through_insert_slice(ex)
            continue
        prod = _op(src.owner)
        if prod.name != "linalg.generic" or len(prod.results) != 1 or not _body_is_pure(prod):
            continue
        if _narrows(prod) and not _only_extracted(prod.results[0]):
            continue          # a rounding materialized anyway: read it, not its wider input
        if _narrows(prod) and _rounds_a_product(prod):
            continue          # the product writes the rounding: read it, not the product
        if any("parallel" not in str(a)
               for a in ir.ArrayAttr(prod.attributes["iterator_types"])):
            continue
        maps = indexing_maps(prod)
        n_in, _ = segments(prod)
        if _full_inputs(prod, maps, n_in) > 1 and not _only_extracted(prod.results[0]):
            continue          # materialized anyway, and one element of it is fewer reads
        out_map = maps[-1]
        block = prod.regions[0].blocks[0]
        if not out_map.is_permutation or any(True for _ in block.arguments[n_in].uses):
            continue
        if not all(isinstance(e, (ir.AffineDimExpr, ir.AffineConstantExpr))
                   for m in maps[:n_in] for e in m.results):
            continue
        idx = list(ex.operands)[1:]
        loops = [None] * out_map.n_dims
        for k, e in enumerate(out_map.results):
            loops[ir.AffineDimExpr(e).position] = idx[k]
        index = ir.IndexType.get()
        with ir.InsertionPoint(ex), ex.location:
            mapping = {}
            for k in range(n_in):
                v = prod.operands[k]
                if not isinstance(v.type, ir.RankedTensorType):
                    mapping[block.arguments[k]] = v
                    continue
                at = []
                for e in maps[k].results:
                    if isinstance(e, ir.AffineDimExpr):
                        at.append(loops[ir.AffineDimExpr(e).position])
                    else:
                        at.append(ir.Operation.create(
                            "arith.constant", [index], attributes={"value": ir.IntegerAttr.get(
                                index, ir.AffineConstantExpr(e).value)}).result)
                mapping[block.arguments[k]] = ir.Operation.create(
                    "tensor.extract", [block.arguments[k].type], [v] + at).result
            body = [_op(o) for o in block.operations]
            clone_body_ops(body[:-1], mapping, loops)
            yielded = body[-1].operands[0]
            value = mapping.get(yielded, yielded)
        ex.results[0].replace_all_uses_with(value)
        ex.erase()
        changed = True
    return changed


# ----------------------------------------------------------------------------- unit reductions
def read_fill_instead_of_output(op) -> None:
    """A generic reading a fill (an input, or the initial value of an all-parallel
    generic's output): read the fill's value instead (the input is then unused, and the
    output starts from an empty tensor), so the fill may go."""
    from mlir import ir

    if len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType):
        return
    n_in, n_out = segments(op)
    block = op.regions[0].blocks[0]
    for k in range(n_in):                     # an input that is a fill: its value
        arg = block.arguments[k]
        if isinstance(op.operands[k].type, ir.ShapedType) and any(True for _ in arg.uses) \
                and _is_fill(op.operands[k]):
            arg.replace_all_uses_with(_fill_value(op.operands[k]))
    if any("parallel" not in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])):
        return
    acc = block.arguments[n_in]
    if n_out != 1 or not any(True for _ in acc.uses):
        return
    if not _is_fill(op.operands[n_in]):
        return
    fill = _fill_value(op.operands[n_in])
    with ir.InsertionPoint(op), op.location:
        empty = ir.Operation.create("tensor.empty", [op.operands[n_in].type]).result
    acc.replace_all_uses_with(fill)
    op.operands[n_in] = empty


def _drop_zero_add(op) -> None:
    """An elementwise ``x + 0.0`` where ``x`` is a sum accumulated from a ``+0.0`` fill (a
    product into zeros): ``x`` itself.  ``index_add`` into ``new_zeros`` decomposes to
    ``zeros + one_hot^T @ v`` (latch.frontend.decompositions), one more full pass over the
    result after the scatter.  Exact: a round-to-nearest sum that starts at ``+0.0`` is
    never ``-0.0`` (``+0 + -0 = +0``, exact cancellation gives ``+0``), and ``+0.0`` added
    to anything else, NaN and infinities included, leaves it unchanged."""
    from mlir import ir

    if len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType) or \
            any("parallel" not in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])):
        return
    n_in, n_out = segments(op)
    maps = indexing_maps(op)
    block = op.regions[0].blocks[0]
    body = [_op(o) for o in block.operations]
    if n_out != 1 or [o.name for o in body] != ["arith.addf", "linalg.yield"] or \
            body[1].operands[0] != body[0].results[0]:
        return
    for x, zero in (tuple(body[0].operands), tuple(body[0].operands)[::-1]):
        if not _is_zero_operand(zero, op, block, n_in) or not hasattr(x.owner, "arguments") \
                or x.owner != block or ir.BlockArgument(x).arg_number >= n_in:
            continue
        k = ir.BlockArgument(x).arg_number
        value = op.operands[k]
        if value.type != op.results[0].type or maps[k] != maps[-1]:
            continue
        if _accumulated_from_zero(value):
            op.results[0].replace_all_uses_with(value)
            op.erase()
            return


def _positive_zero(x) -> bool:
    """Whether ``x`` — a value an ``arith.constant`` defines, a float attribute or a splat
    (what :func:`_fill_value` gives without creating anything) — is ``+0.0``."""
    import math

    from mlir import ir

    if x is None:
        return False
    if isinstance(x, ir.Value):
        if hasattr(x.owner, "arguments") or _op(x.owner).name != "arith.constant":
            return False
        x = _op(x.owner).attributes["value"]
    if isinstance(x, ir.DenseElementsAttr):
        x = x.get_splat_value() if x.is_splat else None
    if not isinstance(x, ir.FloatAttr):
        return False
    v = ir.FloatAttr(x).value
    return v == 0.0 and math.copysign(1.0, v) > 0


def _is_zero_operand(v, op, block, n_in: int) -> bool:
    """Whether body value ``v`` of generic ``op`` is ``+0.0``: a constant, or an input
    that is a fill of one."""
    from mlir import ir

    if hasattr(v.owner, "arguments"):
        return v.owner == block and ir.BlockArgument(v).arg_number < n_in and             _positive_zero(_fill_value(op.operands[ir.BlockArgument(v).arg_number],
                                       create=False))
    return _positive_zero(v)


def _accumulated_from_zero(value) -> bool:
    """Whether ``value`` is the result of a generic that starts from a ``+0.0`` fill and
    only adds to it (yields ``acc + t``, ``acc`` used nowhere else)."""
    if hasattr(value.owner, "arguments") or _op(value.owner).name != "linalg.generic":
        return False
    p = _op(value.owner)
    n_in, n_out = segments(p)
    if len(p.results) != 1 or n_out != 1 or             not _positive_zero(_fill_value(p.operands[n_in], create=False)):
        return False
    block = p.regions[0].blocks[0]
    y = _op(list(block.operations)[-1]).operands[0]
    if hasattr(y.owner, "arguments") or _op(y.owner).name != "arith.addf":
        return False
    acc = block.arguments[n_in]
    return any(x == acc for x in _op(y.owner).operands) and sum(1 for _ in acc.uses) == 1


def _is_fill(v) -> bool:
    return _fill_value(v, create=False) is not None


def _fill_value(v, create: bool = True):
    """The scalar a tensor value is filled with (a splat constant, ``linalg.fill``, a
    generalized fill, any of them reshaped), or None; for a splat constant an
    ``arith.constant`` of it is created in front of it (with ``create=False``: its
    attribute, nothing created)."""
    from mlir import ir

    if hasattr(v.owner, "arguments"):
        return None
    o = _op(v.owner)
    if o.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        return _fill_value(o.operands[0], create)
    if o.name == "linalg.fill":
        return o.operands[0]
    if o.name == "linalg.generic" and len(o.results) == 1:       # a generalized fill
        n_in, _ = segments(o)
        block = o.regions[0].blocks[0]
        body = [_op(x) for x in block.operations]
        if len(body) == 1 and body[0].name == "linalg.yield":
            y = body[0].operands[0]
            for k in range(n_in):
                if y == block.arguments[k] and not isinstance(o.operands[k].type, ir.ShapedType):
                    return o.operands[k]
            if not hasattr(y.owner, "arguments") and \
                    _op(y.owner).name == "arith.constant" and \
                    not isinstance(y.type, ir.ShapedType):
                return y                     # yields a constant from outside
    if o.name == "arith.constant":
        attr = o.attributes["value"]
        if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
            if not create:
                return attr
            with ir.InsertionPoint(o), o.location:
                return ir.Operation.create("arith.constant", [attr.get_splat_value().type],
                                           attributes={"value": attr.get_splat_value()}).result
    return None


def _drop_unit_reduction(op) -> None:
    """A generic whose reduction loops all run once, into a filled output (a one-hot
    scatter: ``out[i, j] += (t[i, k] == j) * c`` with ``k < 1`` into zeros), is elementwise:
    drop those loops (indexed at 0); :func:`read_fill_instead_of_output` then reads the
    fill's value instead of the output."""
    from mlir import ir

    if len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType):
        return
    its = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    red = [d for d, t in enumerate(its) if "reduction" in t]
    if not red or not _body_is_pure(op):
        return
    maps, ranges = loop_ranges(op)
    n_in, n_out = segments(op)
    if n_out != 1 or any(ranges[d] != 1 for d in red):
        return
    init = op.operands[n_in]
    block = op.regions[0].blocks[0]
    acc = block.arguments[n_in]
    if any(True for _ in acc.uses) and not _is_fill(init):
        return
    keep = [d for d in range(len(its)) if d not in red]
    zero = ir.AffineConstantExpr.get(0)
    repl = [zero if d in red else ir.AffineDimExpr.get(keep.index(d)) for d in range(len(its))]
    new_maps = [_substitute(m, repl, len(keep)) for m in maps]
    if not new_maps[-1].is_permutation:
        return
    with ir.InsertionPoint(op), op.location:
        zero_index = ir.Operation.create("arith.constant", [ir.IndexType.get()],
                                         attributes={"value": ir.IntegerAttr.get(
                                             ir.IndexType.get(), 0)}).result
    for inner in list(block.operations):
        inner = _op(inner)
        if inner.name == "linalg.index":
            d = ir.IntegerAttr(inner.attributes["dim"]).value
            if d in red:
                inner.results[0].replace_all_uses_with(zero_index)
                inner.erase()
            else:
                inner.attributes["dim"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), keep.index(d))
    op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
    op.attributes["iterator_types"] = ir.ArrayAttr.get(
        [ir.ArrayAttr(op.attributes["iterator_types"])[d] for d in keep])
    read_through_unit_expansions(op)


def _substitute(m, repl, n_dims):
    """``m`` with dimension ``d`` replaced by the expression ``repl[d]`` (over ``n_dims``)."""
    from mlir import ir

    return ir.AffineMap.get(n_dims, m.n_symbols, [e.compose(ir.AffineMap.get(n_dims, 0, repl))
                                                  for e in m.results])


def _rounds_a_product(op) -> bool:
    """Whether narrowing generic ``op`` reads a wider tensor that only it reads, the result
    of a contraction (``linalg.matmul``, ``linalg.batch_matmul``, a generic with a reduction
    loop): latch-form-contraction-kernels makes that product write the rounding itself, so
    the rounding is worth reading (half the bytes of the product in f32)."""
    from mlir import ir

    n_in, _ = segments(op)
    out = element_bits(ir.ShapedType(op.results[0].type).element_type)
    for v in list(op.operands)[:n_in]:
        if not isinstance(v.type, ir.ShapedType) or \
                element_bits(ir.ShapedType(v.type).element_type) <= out:
            continue
        if _is_product(v) and sum(1 for _ in v.uses) == 1:
            return True
    return False


def _is_product(v) -> bool:
    """Whether tensor ``v`` is the result of a contraction (``linalg.matmul``,
    ``linalg.batch_matmul``, a generic with a reduction loop)."""
    from mlir import ir

    if hasattr(v.owner, "arguments"):
        return False
    producer = _op(v.owner)
    return producer.name in ("linalg.matmul", "linalg.batch_matmul") or (
        producer.name == "linalg.generic" and
        any("reduction" in str(a) for a in ir.ArrayAttr(producer.attributes["iterator_types"])))


def _extract_through_insert_slice(ex) -> bool:
    """``tensor.extract`` of ``tensor.insert_slice %src into %filled`` (static offsets and
    sizes, unit strides, a splat or filled destination: the MoE's expert results placed in
    front of the dropped tokens' zero row) -> ``select(inside, extract %src[i - offset],
    fill)``, the source read at index 0 of a dimension where the element lies outside (any
    valid element: its value is not used).  False (nothing changed) for other slices."""
    from mlir import ir

    ins = _op(ex.operands[0].owner)
    src, dest = ins.operands[0], ins.operands[1]
    if len(ins.operands) != 2 or _fill_value(dest, create=False) is None:
        return False
    offsets = list(ir.DenseI64ArrayAttr(ins.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(ins.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(ins.attributes["static_strides"]))
    full = list(ir.RankedTensorType(dest.type).shape)
    if any(s != 1 for s in strides) or list(ir.RankedTensorType(src.type).shape) != sizes:
        return False
    index, i1 = ir.IndexType.get(), ir.IntegerType.get_signless(1)
    const = index_constant
    with ir.InsertionPoint(ex), ex.location:
        fill = _fill_value(dest)
        inside, at, bounded = None, [], []
        for i, off, size, n in zip(list(ex.operands)[1:], offsets, sizes, full):
            conds = []
            if off > 0:
                conds.append(compare("uge", i, const(off)))
            if off + size < n:
                conds.append(compare("ult", i, const(off + size)))
            for c in conds:
                inside = c if inside is None else \
                    ir.Operation.create("arith.andi", [i1], [inside, c]).result
            at.append(ir.Operation.create("arith.subi", [index], [i, const(off)]).result
                      if off else i)
            bounded.append(bool(conds))
        if inside is not None:
            zero = const(0)
            at = [ir.Operation.create("arith.select", [index], [inside, a, zero]).result
                  if b else a for a, b in zip(at, bounded)]
        value = ir.Operation.create("tensor.extract", [ex.results[0].type], [src] + at).result
        if inside is not None:
            value = ir.Operation.create("arith.select", [value.type],
                                        [inside, value, fill]).result
    ex.results[0].replace_all_uses_with(value)
    ex.erase()
    _erase_unused(ins)
    return True


def _erase_unused(op) -> None:
    """Erase ``op`` when nothing reads its result, and then the reshapes and slice
    insertions that fed it, so that they are not counted as readers of their sources."""
    while op.name in ("tensor.insert_slice", "tensor.collapse_shape", "tensor.expand_shape") \
            and not any(True for _ in op.results[0].uses):
        src = op.operands[0]
        op.erase()
        if hasattr(src.owner, "arguments"):
            return
        op = _op(src.owner)


def _extract_through_reshape(ex) -> None:
    """``tensor.extract`` of a reshape's result -> of its source, at the source's indices
    (split by division and remainder for a collapse, combined for an expansion)."""
    from mlir import ir

    reshape = _op(ex.operands[0].owner)
    src = reshape.operands[0]
    groups = [[ir.IntegerAttr(d).value for d in ir.ArrayAttr(g)]
              for g in ir.ArrayAttr(reshape.attributes["reassociation"])]
    idx = list(ex.operands)[1:]
    index = ir.IndexType.get()

    def const(v):
        return ir.Operation.create("arith.constant", [index], attributes={
            "value": ir.IntegerAttr.get(index, v)}).result

    def arith(name, a, b):
        return ir.Operation.create(name, [index], [a, b]).result

    with ir.InsertionPoint(ex), ex.location:
        if reshape.name == "tensor.collapse_shape":
            shape = ir.RankedTensorType(src.type).shape
            at = [None] * len(shape)
            for g, i in zip(groups, idx):
                rest = i
                for d in reversed(g[1:]):
                    at[d] = arith("arith.remui", rest, const(shape[d]))
                    rest = arith("arith.divui", rest, const(shape[d]))
                at[g[0]] = rest
        else:
            shape = ir.RankedTensorType(reshape.results[0].type).shape
            at = []
            for g in groups:
                lin = idx[g[0]]
                for d in g[1:]:
                    lin = arith("arith.addi", arith("arith.muli", lin, const(shape[d])), idx[d])
                at.append(lin)
        new = ir.Operation.create("tensor.extract", [ex.results[0].type], [src] + at).result
    ex.results[0].replace_all_uses_with(new)
    ex.erase()
    _erase_unused(reshape)
