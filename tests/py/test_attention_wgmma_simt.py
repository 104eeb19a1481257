"""latch-form-attention-kernels{chip=sm_90a}: the attention kernels' products as Hopper
``wgmma`` from swizzled shared memory (passes/attention_wgmma.py), executed by the SIMT
interpreter of tests/py/simt.py — which also checks the async proxy's rules (a wgmma reading
shared memory not fenced after its writes, or a write to a tile a pending wgmma reads, is a
race).  The interpreter rounds each wgmma and mma.sync k16 step the same way, so the kernels
must give exactly the bits of the ``mma.sync`` kernels (and float64 to bf16 accuracy)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from simt import Simt
from test_attention_kernels_simt import _bf16, _fused_module, _module, _reference, _rel, \
    _run_pass

WGMMA = "{chip=sm_90a}"
CASES = [  # batch, L, S, causal
    ([1, 2], 128, 128, True),
    ([2], 64, 128, False),
    ([1], 192, 192, True),
]


def _kernels(m) -> str:
    text = str(m)
    return text[text.index("gpu.module"):]


def _forward(m, ctx, q, k, v):
    with ctx:
        sim = Simt(m)
        sim.run([q.numpy(), k.numpy(), v.numpy(), np.zeros(q.shape), np.zeros(q.shape[:-1])])
    return [np.asarray(a) for a in sim.arguments[3:5]]


def _backward(m, ctx, q, k, v, lse, do, delta):
    with ctx:
        sim = Simt(m)
        sim.run([q.numpy(), k.numpy(), v.numpy(), lse.numpy(), do.numpy(), delta.numpy(),
                 *[np.zeros(x.shape) for x in (q, k, v)]])
    return [np.asarray(a) for a in sim.arguments[6:]]


@pytest.mark.parametrize("batch,L,S,causal", CASES)
def test_wgmma_kernels_give_the_mma_sync_bits(batch, L, S, causal):
    E = 64
    scale = 1.0 / math.sqrt(E)
    g = torch.Generator().manual_seed(7)
    q, k, v, do = _bf16(batch + [L, E], g), _bf16(batch + [S, E], g), \
        _bf16(batch + [S, E], g), _bf16(batch + [L, E], g)
    got = {}
    for options in (WGMMA, ""):
        m, ctx = _run_pass(_module(batch, L, S, E, causal, scale, grad=False), options)
        kernels = _kernels(m)
        assert ("nvvm.wgmma.mma_async" in kernels) == (options == WGMMA)
        assert ("nvvm.mma.sync" in kernels) == (options != WGMMA)
        o, lse = _forward(m, ctx, q, k, v)
        m, ctx = _run_pass(_module(batch, L, S, E, causal, scale, grad=True), options)
        assert ("nvvm.mma.sync" in _kernels(m)) == (options != WGMMA)
        lse_t = torch.as_tensor(lse)
        delta = (do * torch.as_tensor(o)).sum(-1)
        got[options] = [o, lse] + _backward(m, ctx, q, k, v, lse_t, do, delta)
    for a, b in zip(got[WGMMA], got[""]):
        assert np.array_equal(a, b)
    # and float64 attention, to bf16 accuracy
    qr, kr, vr = (x.clone().requires_grad_(True) for x in (q, k, v))
    o_ref, lse_ref = _reference(qr, kr, vr, causal, scale)
    grads = torch.autograd.grad(o_ref, (qr, kr, vr), do)
    assert _rel(got[WGMMA][1], lse_ref) < 1e-5
    for x, ref in zip([got[WGMMA][0]] + got[WGMMA][2:], (o_ref,) + grads):
        assert _rel(x, ref) < 2e-2


def test_strided_head_views_with_wgmma():
    """q, k, v as strided views of a fused projection (latch-attention-views) copied into
    the swizzled tiles: the bits of contiguous operands."""
    B, H, L, E = 1, 2, 64, 64
    g = torch.Generator().manual_seed(8)
    qkv = _bf16([B, L, 3 * H * E], g)
    q, k, v = (qkv[..., i * H * E:(i + 1) * H * E].reshape(B, L, H, E).transpose(1, 2)
               .contiguous() for i in range(3))
    m, ctx = _run_pass(_fused_module(B, H, L, E, grad=False), WGMMA)
    assert "nvvm.wgmma.mma_async" in _kernels(m)
    with ctx:
        sim = Simt(m)
        sim.run([qkv.numpy(), np.zeros([B, H, L, E]), np.zeros([B, H, L])])
        o_view, lse_view = np.asarray(sim.arguments[1]), np.asarray(sim.arguments[2])
    m, ctx = _run_pass(_module([B, H], L, L, E, True, 1.0 / math.sqrt(E), grad=False), WGMMA)
    o, lse = _forward(m, ctx, q, k, v)
    assert np.array_equal(o_view, o) and np.array_equal(lse_view, lse)


def test_other_head_dimensions_keep_mma_sync():
    m, _ = _run_pass(_module([1], 64, 64, 32, True, 0.2, grad=True), WGMMA)
    assert "nvvm.mma.sync" in _kernels(m) and "wgmma" not in _kernels(m)
