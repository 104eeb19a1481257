"""The decomposition table and tracing modes of Latch's frontend.

The table is torch-mlir's (``core_aten_decompositions()`` minus the entries torch-mlir
excludes, plus the overloads it needs), with Latch's own entries on top:

- ``aten.empty_permuted`` → ``empty`` + ``permute`` (torch-mlir rejects ``empty_permuted``).
- ``aten.index_put`` (with or without ``accumulate``), ``aten.scatter`` (``src``/``value``)
  and ``aten.scatter_add`` → dense one-hot formulations (compare with an ``arange``, then a
  matmul or a masked sum).  torch-mlir lowers the scatter family to ``tm_tensor.scatter``,
  which upstream MLIR cannot read; the dense forms import as plain linalg.  They are exact
  (each output element receives the same sum) but cost O(#indices · indexed-dim) work:
  embedding backward becomes a ``[tokens, vocab]ᵀ @ [tokens, d]`` matmul.
- ``aten.one_hot`` with an explicit ``num_classes`` → ``eq(x[..., None], arange(n))``.
- ``aten.cumsum`` → a blocked scan of triangular products (torch-mlir lowers it to
  ``tm_tensor.scan``).
- ``aten.topk`` → ``k`` rounds of ``max``/``argmax`` + masking (torch-mlir lowers ``topk``
  to ``tm_tensor.topk``).  Only used for small ``k`` (≤ 8); ties resolve to the lowest
  index, as PyTorch's CPU kernel does.

``F.one_hot`` is data-dependent under ``make_fx`` (it checks the values' range and, without
``num_classes``, takes the max), and it is handled above the dispatcher, so the static
version is installed as a ``TorchFunctionMode`` (:class:`StaticOneHotMode`) too.
Scaled-dot-product attention is traced through its math path (see
:func:`latch.frontend.trace.tracing_context`), so no flash-attention backward op appears.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten

MAX_TOPK = 8


# ----------------------------------------------------------------------------- helpers
def _arange_like_dim(n: int, device) -> torch.Tensor:
    return torch.arange(n, device=device, dtype=torch.int64)


def _static_one_hot(x: torch.Tensor, num_classes: int) -> torch.Tensor:
    return (x.unsqueeze(-1) == _arange_like_dim(num_classes, x.device)).to(torch.int64)


# ----------------------------------------------------------------------------- entries
def _empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                    pin_memory=None):
    physical = [size[i] for i in physical_layout]
    inverse = [0] * len(physical_layout)
    for i, p in enumerate(physical_layout):
        inverse[p] = i
    return torch.empty(physical, dtype=dtype, device=device).permute(inverse)


def _one_hot(x, num_classes=-1):
    if num_classes is None or num_classes < 0:
        return NotImplemented
    return _static_one_hot(x, num_classes)


def _index_put(self, indices, values, accumulate=False):
    """``self[indices] = values`` (or ``+=``) for leading integer index tensors."""
    idx = list(indices)
    while idx and idx[-1] is None:
        idx.pop()
    if not idx or any(i is None for i in idx):
        return NotImplemented
    if any(i.dtype in (torch.bool, torch.uint8) for i in idx):
        return NotImplemented          # boolean masks are data-dependent
    k = len(idx)
    lead = list(self.shape[:k])
    rest = list(self.shape[k:])
    bshape = torch.broadcast_shapes(*[i.shape for i in idx])
    linear = None
    stride = 1
    for d in reversed(range(k)):
        i = idx[d].expand(bshape)
        i = torch.where(i < 0, i + lead[d], i)
        linear = i * stride if linear is None else linear + i * stride
        stride *= lead[d]
    n_rows = stride
    m = 1
    for s in bshape:
        m *= s
    r = 1
    for s in rest:
        r *= s
    linear = linear.reshape(m)
    vals = values.expand(list(bshape) + rest).reshape(m, r).to(self.dtype)
    hit = linear.unsqueeze(-1) == _arange_like_dim(n_rows, self.device)   # [m, n_rows]
    flat = self.reshape(n_rows, r)
    if self.dtype.is_floating_point:
        contrib = torch.mm(hit.to(self.dtype).t(), vals)                   # [n_rows, r]
    else:
        contrib = (hit.unsqueeze(-1).to(self.dtype) * vals.unsqueeze(1)).sum(0)
    if accumulate:
        out = flat + contrib
    else:
        any_hit = hit.any(0).unsqueeze(-1)
        out = torch.where(any_hit, contrib, flat)
    return out.reshape(self.shape)


def _scatter_dense(self, dim, index, src, reduce_add: bool):
    dim = dim % max(self.dim(), 1)
    if self.dim() == 0:
        return NotImplemented
    for d in range(self.dim()):
        if d != dim and index.shape[d] != self.shape[d]:
            return NotImplemented
    S = self.shape[dim]
    if isinstance(src, torch.Tensor):
        src = src[tuple(slice(0, s) for s in index.shape)]
    else:
        src = torch.full(index.shape, src, dtype=self.dtype, device=self.device)
    src = src.to(self.dtype)
    ar_shape = [1] * (self.dim() + 1)
    ar_shape[dim + 1] = S
    hit = index.unsqueeze(dim + 1) == _arange_like_dim(S, self.device).view(ar_shape)
    # hit: index.shape with an S-sized axis after `dim`; reduce over `dim`.
    contrib = (hit.to(self.dtype) * src.unsqueeze(dim + 1)).sum(dim)
    if reduce_add:
        return self + contrib
    return torch.where(hit.any(dim), contrib, self)


def _scatter_src(self, dim, index, src):
    return _scatter_dense(self, dim, index, src, reduce_add=False)


def _scatter_value(self, dim, index, value):
    return _scatter_dense(self, dim, index, value, reduce_add=False)


def _scatter_add(self, dim, index, src):
    return _scatter_dense(self, dim, index, src, reduce_add=True)


def _topk(self, k, dim=-1, largest=True, sorted=True):
    if k > MAX_TOPK or self.dim() == 0:
        return NotImplemented
    dim = dim % self.dim()
    x = self if largest else -self
    S = self.shape[dim]
    ar_shape = [1] * self.dim()
    ar_shape[dim] = S
    ar = _arange_like_dim(S, self.device).view(ar_shape)
    fill = torch.finfo(x.dtype).min if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
    vals, idxs = [], []
    for _ in range(k):
        v, i = torch.max(x, dim, keepdim=True)
        vals.append(v if largest else -v)
        idxs.append(i)
        x = torch.where(ar == i, torch.full_like(x, fill), x)
    return torch.cat(vals, dim), torch.cat(idxs, dim)


SCAN_BLOCK = 64      # cumsum: elements summed by one triangular product (a block)


def _cumsum(self, dim, dtype=None):
    """``cumsum`` as a blocked scan of triangular products: the scanned dimension is cut
    into blocks of ``SCAN_BLOCK``; one product with the lower-triangular 0/1 matrix gives
    every block's inclusive prefix sums, the blocks' totals are scanned the same way
    (recursively, so ``ceil(log_64 S)`` levels), and each block adds the exclusive prefix
    of the totals before it.  A handful of kernels a level instead of the ``2·log2 S``
    small kernels of a log-step scan (TinyMoE's routing rank: 4096 or 65536 rows), and
    O(S·64) multiply-adds.  Integer sums are exact; floating-point ones are summed in
    blocks (as a GPU scan does)."""
    if self.dim() == 0:
        return NotImplemented
    x = self if dtype is None else self.to(dtype)
    if dtype is None and not x.dtype.is_floating_point and x.dtype != torch.int64:
        x = x.to(torch.int64)              # torch promotes integer cumsum to int64
    dim = dim % x.dim()
    moved = x.movedim(dim, 0)
    out = _scan_rows(moved.reshape(moved.shape[0], -1))
    return out.reshape(moved.shape).movedim(0, dim)


def _lower_triangle(n: int, dtype, device) -> torch.Tensor:
    """[n, n] with 1 where column <= row: ``tri @ x`` sums rows 0..i into row i."""
    i = torch.arange(n, device=device)
    return (i.unsqueeze(1) >= i.unsqueeze(0)).to(dtype)


def _scan_rows(x: torch.Tensor) -> torch.Tensor:
    """Inclusive prefix sums down the rows of a 2-D ``x`` [S, R] (see :func:`_cumsum`)."""
    S, R = x.shape
    b = SCAN_BLOCK
    if S <= b:
        return _lower_triangle(S, x.dtype, x.device) @ x
    a = -(-S // b)
    if a * b != S:
        x = torch.cat([x, x.new_zeros(a * b - S, R)], 0)
    cols = x.reshape(a, b, R).permute(1, 0, 2).reshape(b, a * R)      # block rows side by side
    inner = (_lower_triangle(b, x.dtype, x.device) @ cols).reshape(b, a, R)
    totals = inner[b - 1]                                             # [a, R]
    before = _scan_rows(totals) - totals                              # exclusive prefix
    out = (inner + before.unsqueeze(0)).permute(1, 0, 2).reshape(a * b, R)
    return out[:S]


LATCH_DECOMPOSITIONS = {
    aten.cumsum.default: _cumsum,
    aten.empty_permuted.default: _empty_permuted,
    aten.one_hot.default: _one_hot,
    aten.index_put.default: _index_put,
    aten.scatter.src: _scatter_src,
    aten.scatter.value: _scatter_value,
    aten.scatter_add.default: _scatter_add,
    aten.topk.default: _topk,
}


@functools.cache
def _base_table():
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table
    return dict(get_decomposition_table())


def decomposition_table() -> dict:
    """The table passed to ``make_fx`` (a fresh dict; callers may extend it)."""
    table = dict(_base_table())
    table.update(LATCH_DECOMPOSITIONS)
    return table


class StaticOneHotMode(TorchFunctionMode):
    """Replaces ``F.one_hot(x, n)`` (``n > 0``) by a data-independent comparison."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.one_hot or func is torch._C._nn.one_hot:
            x = args[0]
            n = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
            if isinstance(n, int) and n > 0:
                return _static_one_hot(x, n)
        return func(*args, **kwargs)
