"""The supported-op check: which aten ops Latch's frontend knows to import.

:func:`check_supported` walks a traced graph before import; the first op that is not in
:data:`SUPPORTED_OPS` raises :class:`latch.errors.UnsupportedOpError` naming the aten op, the
model's source line (the innermost frame of ``node.meta["stack_trace"]`` outside torch and
Latch) and a hint.  :func:`unsupported_from_mlir_ops` turns a torch-mlir lowering failure
into the same error, mapping the torch-dialect op name back to the FX nodes.

``SUPPORTED_OPS`` lists the overloads (``"aten.add.Tensor"``) that appear after Latch's
decompositions and that torch-mlir 20261001 lowers to linalg-on-tensors without leaving
``tm_tensor`` ops; every model in ``tests/py/models.py`` uses only these.
"""
from __future__ import annotations

import os
import re

import torch

from latch.errors import UnsupportedOpError

# Overloads known to import (checked against torch-mlir's linalg backend).
SUPPORTED_OPS: frozenset[str] = frozenset("""
aten._log_softmax.default aten._log_softmax_backward_data.default aten._softmax.default
aten._softmax_backward_data.default aten._to_copy.default aten.abs.default
aten.add.Scalar aten.add.Tensor aten.addmm.default aten.alias.default aten.amax.default
aten.amin.default aten.any.default aten.any.dim aten.any.dims aten.all.default aten.all.dim
aten.arange.default aten.arange.start aten.arange.start_step aten.argmax.default
aten.argmin.default aten.bitwise_and.Tensor aten.bitwise_not.default aten.bitwise_or.Tensor
aten.bitwise_xor.Tensor aten.bmm.default aten.cat.default aten.ceil.default
aten.clamp.default aten.clamp.Tensor aten.clamp_max.default aten.clamp_min.default
aten.clone.default aten.constant_pad_nd.default aten.copy.default aten.cos.default
aten.cumsum.default aten.div.Scalar aten.div.Tensor aten.div.Tensor_mode aten.embedding.default
aten.empty.memory_format aten.eq.Scalar aten.eq.Tensor aten.erf.default aten.exp.default
aten.expand.default aten.expm1.default aten.fill.Scalar aten.floor.default
aten.full.default aten.full_like.default aten.gather.default aten.ge.Scalar aten.ge.Tensor
aten.gelu.default aten.gelu_backward.default aten.gt.Scalar aten.gt.Tensor
aten.index.Tensor aten.index_select.default aten.le.Scalar aten.le.Tensor aten.log.default
aten.log1p.default aten.logical_and.default aten.logical_not.default aten.logical_or.default
aten.lt.Scalar aten.lt.Tensor aten.max.dim aten.maximum.default aten.mean.default
aten.mean.dim aten.min.dim aten.minimum.default aten.mm.default aten.mul.Scalar
aten.mul.Tensor aten.native_layer_norm.default aten.native_layer_norm_backward.default
aten.ne.Scalar aten.ne.Tensor aten.neg.default aten.permute.default aten.pow.Scalar
aten.pow.Tensor_Scalar aten.pow.Tensor_Tensor aten.reciprocal.default aten.relu.default
aten.remainder.Scalar aten.rsqrt.default aten.scalar_tensor.default aten.select.int
aten.sigmoid.default aten.sign.default aten.sin.default aten.slice.Tensor aten.split.Tensor
aten.split_with_sizes.default aten.sqrt.default aten.squeeze.dim aten.squeeze.dims
aten.squeeze.default aten.sub.Scalar aten.sub.Tensor aten.sum.default aten.sum.dim_IntList
aten.tanh.default aten.threshold_backward.default aten.t.default aten.transpose.int
aten.unsqueeze.default aten.view.default aten.where.self aten.zeros.default
aten.zeros_like.default aten.ones.default aten.ones_like.default aten.empty_like.default
aten.lift_fresh_copy.default aten.detach.default aten.sigmoid_backward.default
aten.tanh_backward.default aten.floor_divide.default aten.isnan.default aten.isinf.default
aten.unbind.int aten.stack.default aten.repeat.default aten.flip.default
prims.convert_element_type.default prims.squeeze.default prims.broadcast_in_dim.default
aten.linalg_vector_norm.default aten.var_mean.correction aten.var.correction aten.empty_strided.default aten.slice_scatter.default aten.sym_size.int aten.sym_numel.default
""".split())

# Ops known not to import, with what to do instead.
HINTS: dict[str, str] = {
    "aten.nonzero": "data-dependent output shape; use a mask with torch.where",
    "aten.sort": "torch-mlir lowers sort to tm_tensor; use torch.topk with a small k",
    "aten.topk": "only k <= 8 is decomposed by Latch; use a smaller k",
    "aten.index_put": "only leading integer index tensors are supported (no boolean masks)",
    "aten.scatter": "scatter must index a dimension whose other sizes match the input",
    "aten._scaled_dot_product_flash_attention_for_cpu": "trace attention under Latch's "
        "tracing_context (math path)",
    "aten.empty_permuted": "use Latch's decomposition table",
}
# torch-mlir dialect ops → the aten ops that produce them
TM_TENSOR_SOURCES: dict[str, tuple[str, ...]] = {
    "tm_tensor.scan": ("aten.cumsum", "aten.cumprod"),
    "tm_tensor.scatter": ("aten.index_put", "aten.scatter", "aten.scatter_add",
                          "aten.index_add", "aten.scatter_reduce"),
    "tm_tensor.sort": ("aten.sort", "aten.argsort"),
    "tm_tensor.topk": ("aten.topk",),
    "tm_tensor.attention": ("aten._scaled_dot_product_flash_attention_for_cpu",
                            "aten.scaled_dot_product_attention"),
}
_DEFAULT_HINT = ("Latch cannot lower this op to linalg; rewrite it with supported ops (see "
                 "latch.frontend.support.SUPPORTED_OPS) or add a decomposition to "
                 "latch.frontend.decompositions")

_TORCH_DIR = os.path.dirname(torch.__file__)
_LATCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n(?:\s+(.*))?')


def op_name(target) -> str:
    """``"aten.add.Tensor"`` for an OpOverload; ``str(target)`` otherwise."""
    return str(target)


def user_frame(node) -> tuple[str, int, str] | None:
    """(file, line, code) of the innermost frame of the node's stack trace that is the
    user's (not torch, torch-mlir, Latch's frontend or the standard library)."""
    st = node.meta.get("stack_trace") if node is not None else None
    if not st:
        return None
    best = None
    for m in _FRAME.finditer(st):
        f = os.path.abspath(m.group(1))
        if f.startswith(_TORCH_DIR) or f.startswith(_LATCH_DIR) or "/torch_mlir/" in f:
            continue
        if "/lib/python3" in f and "site-packages" not in f:
            continue
        best = (m.group(1), int(m.group(2)), (m.group(4) or "").strip())
    return best


def _location(node) -> str:
    fr = user_frame(node)
    if fr is None:
        return "(no source location)"
    return f"{fr[0]}:{fr[1]}" + (f": {fr[2]}" if fr[2] else "")


def _hint(name: str) -> str:
    for k, v in HINTS.items():
        if name == k or name.startswith(k + "."):
            return v
    return _DEFAULT_HINT


def _error(traced, name: str, nodes, extra: list[str] | None = None,
           stage: str = "the supported-op check") -> UnsupportedOpError:
    # prefer a node with a user source line (forward nodes come first in graph order)
    node = next((n for n in nodes if user_frame(n) is not None), nodes[0] if nodes else None)
    loc = _location(node)
    diags = [f"at {loc}", f"hint: {_hint(name)}"] + list(extra or [])
    err = UnsupportedOpError(f"unsupported op {name} in {traced.name} (found by {stage})",
                             diagnostics=diags)
    err.op = name
    err.location = loc
    err.source = user_frame(node) if node is not None else None
    return err


def unsupported_ops(traced) -> dict[str, list]:
    """``{op name: [nodes]}`` for every call_function node not in SUPPORTED_OPS."""
    bad: dict[str, list] = {}
    for n in traced.graph_module.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is __import__("operator").getitem:
            continue
        name = op_name(n.target)
        if name not in SUPPORTED_OPS:
            bad.setdefault(name, []).append(n)
    return bad


def check_supported(traced) -> None:
    """Raise UnsupportedOpError for the first (in graph order) op not known to import."""
    bad = unsupported_ops(traced)
    if bad:
        name, nodes = next(iter(bad.items()))
        others = [k for k in bad if k != name]
        extra = [f"also unsupported: {', '.join(others)}"] if others else []
        raise _error(traced, name, nodes, extra)


def unsupported_from_mlir_ops(traced, mlir_ops: list[str], diagnostics: list[str],
                              stage: str) -> UnsupportedOpError:
    """An UnsupportedOpError for a torch-mlir failure, naming the aten op where possible."""
    diag_tail = [d for d in diagnostics if d.strip()][:8]
    for mo in mlir_ops:
        if not mo.startswith("torch.aten.") and not mo.startswith("torch.prims."):
            continue
        aten_name = mo[len("torch."):]                  # aten.foo[.overload]
        base = aten_name.split(".")[1]
        nodes = [n for n in traced.graph_module.graph.nodes if n.op == "call_function"
                 and op_name(n.target).split(".")[1:2] == [base]]
        return _error(traced, op_name(nodes[0].target) if nodes else aten_name, nodes,
                      diag_tail, stage=stage)
    for mo in mlir_ops:
        for src in TM_TENSOR_SOURCES.get(mo, ()):
            nodes = [n for n in traced.graph_module.graph.nodes if n.op == "call_function"
                     and op_name(n.target).startswith(src + ".")]
            if nodes:
                return _error(traced, op_name(nodes[0].target), nodes,
                              [f"torch-mlir lowers it to {mo}"] + diag_tail, stage=stage)
    if mlir_ops:
        return _error(traced, mlir_ops[0], [], diag_tail, stage=stage)
    return UnsupportedOpError(f"torch-mlir failed during {stage} of {traced.name}",
                              diagnostics=diag_tail)
