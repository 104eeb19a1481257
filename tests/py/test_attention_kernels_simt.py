"""latch-form-attention-kernels' flash-style kernels executed on the CPU: buffer-form
``latch.attention`` / ``latch.attention_grad`` through the pass, then the SIMT interpreter of
tests/py/simt.py (every thread in lock step, races between barriers detected), compared with
float64 attention of the same bf16-exact inputs.  The kernels round the probabilities (and
the score gradients) to bf16 before their second products, as PyTorch's flash kernels do,
so the outputs agree with float64 to bf16 accuracy (≈ 3e-3), the row log-sum-exp to f32
accuracy."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from simt import Simt


def _mem(shape, elt):
    return f"memref<{'x'.join(map(str, shape))}x{elt}>"


def _module(batch, L, S, E, causal, scale, grad: bool) -> str:
    q, k = _mem(batch + [L, E], "bf16"), _mem(batch + [S, E], "bf16")
    lse = _mem(batch + [L], "f32")
    attrs = f"{{causal = {str(causal).lower()}, scale = {scale!r} : f64}}"
    if not grad:
        return (f"func.func @main(%q: {q}, %k: {k}, %v: {k}, %o: {q}, %lse: {lse}) {{\n"
                f'  "latch.attention"(%q, %k, %v, %o, %lse) {attrs} : '
                f"({q}, {k}, {k}, {q}, {lse}) -> ()\n  return\n}}")
    return (f"func.func @main(%q: {q}, %k: {k}, %v: {k}, %lse: {lse}, %do: {q}, "
            f"%delta: {lse}, %dq: {q}, %dk: {k}, %dv: {k}) {{\n"
            f'  "latch.attention_grad"(%q, %k, %v, %lse, %do, %delta, %dq, %dk, %dv) {attrs} : '
            f"({q}, {k}, {k}, {lse}, {q}, {lse}, {q}, {k}, {k}) -> ()\n  return\n}}")


def _run_pass(text: str, options: str = ""):
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, f"builtin.module(latch-form-attention-kernels{options})")
    return m, ctx


def _bf16(shape, g):
    return torch.randn(*shape, generator=g, dtype=torch.float64).bfloat16().double()


def _reference(q, k, v, causal, scale):
    """float64 (o, lse) with autograd on q, k, v."""
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]) @ v, lse


def _rel(a, b) -> float:
    a, b = torch.as_tensor(np.asarray(a, np.float64)), torch.as_tensor(b).double()
    return float((a - b).norm() / b.norm())


CASES = [  # batch, L, S, E, causal
    ([1, 2], 128, 128, 32, True),
    ([2], 64, 128, 16, False),
    ([1], 128, 128, 64, True),
]


@pytest.mark.parametrize("batch,L,S,E,causal", CASES)
def test_forward_matches_float64(batch, L, S, E, causal):
    scale = 1.0 / math.sqrt(E)
    m, ctx = _run_pass(_module(batch, L, S, E, causal, scale, grad=False))
    text = str(m)
    assert "latch.attention" not in text.split("gpu.module")[0]
    assert text.count("gpu.launch_func") == 1 and "nvvm.mma.sync" in text
    g = torch.Generator().manual_seed(1)
    q, k, v = _bf16(batch + [L, E], g), _bf16(batch + [S, E], g), _bf16(batch + [S, E], g)
    o = np.zeros(batch + [L, E])
    lse = np.zeros(batch + [L])
    with ctx:
        sim = Simt(m)
        sim.run([q.numpy(), k.numpy(), v.numpy(), o, lse])
    o_ref, lse_ref = _reference(q, k, v, causal, scale)
    assert _rel(sim.arguments[4], lse_ref) < 1e-5
    assert _rel(sim.arguments[3], o_ref) < 1e-2


@pytest.mark.parametrize("batch,L,S,E,causal", CASES)
def test_gradients_match_float64(batch, L, S, E, causal):
    scale = 1.0 / math.sqrt(E)
    m, ctx = _run_pass(_module(batch, L, S, E, causal, scale, grad=True))
    text = str(m)
    assert text.count("gpu.launch_func") == 2           # dQ, then dK and dV
    g = torch.Generator().manual_seed(2)
    q, k, v = _bf16(batch + [L, E], g), _bf16(batch + [S, E], g), _bf16(batch + [S, E], g)
    do = _bf16(batch + [L, E], g)
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    o_ref, lse_ref = _reference(q, k, v, causal, scale)
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(o_ref, (q, k, v), do)
    delta = (do * o_ref.detach()).sum(-1)
    outs = [np.zeros(x.shape) for x in (q, k, v)]
    with ctx:
        sim = Simt(m)
        sim.run([q.detach().numpy(), k.detach().numpy(), v.detach().numpy(),
                 lse_ref.detach().numpy(), do.numpy(), delta.numpy(), *outs])
    for got, ref in zip(sim.arguments[6:], (dq_ref, dk_ref, dv_ref)):
        assert _rel(got, ref) < 2e-2


def test_unsupported_shape_is_a_located_error():
    from mlir.ir import MLIRError
    with pytest.raises(MLIRError, match=r'"-":2:3: latch-form-attention-kernels: .*multiples'):
        _run_pass(_module([1], 40, 40, 32, True, 0.2, grad=False))


def _fused_module(B, H, L, E, grad: bool) -> str:
    """@main reading q, k, v as strided [B, H, L, E] views of a fused projection output
    [B, L, 3 * H * E] (what latch-attention-views leaves), writing dQ, dK, dV into views of
    its gradient."""
    n = 3 * H * E
    fused = f"memref<{B}x{L}x{n}xbf16>"
    heads = f"memref<{B}x{H}x{L}x{E}xbf16>"
    lse = f"memref<{B}x{H}x{L}xf32>"

    def view(src, part):
        t = (f"memref<{B}x{H}x{L}x{E}xbf16, strided<[{L * n}, {E}, {n}, 1], "
             f"offset: {part * H * E}>>")
        return (f"memref.reinterpret_cast {src} to offset: [{part * H * E}], sizes: [{B}, {H}, "
                f"{L}, {E}], strides: [{L * n}, {E}, {n}, 1] : {fused} to {t}", t)

    attrs = f"{{causal = true, scale = {1 / math.sqrt(E)!r} : f64}}"
    lines, types = [], []
    for i, (src, name) in enumerate([("%qkv", "%q"), ("%qkv", "%k"), ("%qkv", "%v")]):
        text, t = view(src, i)
        lines.append(f"  {name} = {text}")
        types.append(t)
    if not grad:
        return (f"func.func @main(%qkv: {fused}, %o: {heads}, %lse: {lse}) {{\n"
                + "\n".join(lines) + "\n"
                f'  "latch.attention"(%q, %k, %v, %o, %lse) {attrs} : '
                f"({', '.join(types)}, {heads}, {lse}) -> ()\n  return\n}}")
    for i, name in enumerate(("%dq", "%dk", "%dv")):
        text, t = view("%dqkv", i)
        lines.append(f"  {name} = {text}")
        types.append(t)
    return (f"func.func @main(%qkv: {fused}, %lse: {lse}, %do: {heads}, %delta: {lse}, "
            f"%dqkv: {fused}) {{\n" + "\n".join(lines) + "\n"
            f'  "latch.attention_grad"(%q, %k, %v, %lse, %do, %delta, %dq, %dk, %dv) {attrs} : '
            f"({', '.join(types[:3])}, {lse}, {heads}, {lse}, {', '.join(types[3:])}) -> ()\n"
            "  return\n}")


def test_strided_head_views_give_the_same_bits():
    """q, k, v read as strided [B, H, L, E] views of the fused projection output and dQ, dK,
    dV written into views of its gradient (latch-attention-views: no transposed copies)
    give exactly the bits of the contiguous [B, H, L, E] buffers."""
    B, H, L, E = 1, 2, 64, 16
    scale = 1.0 / math.sqrt(E)
    g = torch.Generator().manual_seed(4)
    qkv = _bf16([B, L, 3 * H * E], g)
    q, k, v = (qkv[..., i * H * E:(i + 1) * H * E].reshape(B, L, H, E).transpose(1, 2)
               .contiguous() for i in range(3))
    m, ctx = _run_pass(_fused_module(B, H, L, E, grad=False))
    assert "memref.reinterpret_cast" in str(m).split("gpu.module")[0]
    with ctx:
        sim = Simt(m)
        sim.run([qkv.numpy(), np.zeros([B, H, L, E]), np.zeros([B, H, L])])
        o_view, lse_view = sim.arguments[1], sim.arguments[2]
    m2, ctx2 = _run_pass(_module([B, H], L, L, E, True, scale, grad=False))
    with ctx2:
        sim = Simt(m2)
        sim.run([q.numpy(), k.numpy(), v.numpy(), np.zeros([B, H, L, E]), np.zeros([B, H, L])])
        o, lse = sim.arguments[3], sim.arguments[4]
    assert np.array_equal(np.asarray(o_view), np.asarray(o))
    assert np.array_equal(np.asarray(lse_view), np.asarray(lse))

    do = _bf16([B, H, L, E], g)
    delta = (do * torch.as_tensor(np.asarray(o, np.float64))).sum(-1)
    m, ctx = _run_pass(_fused_module(B, H, L, E, grad=True))
    with ctx:
        sim = Simt(m)
        sim.run([qkv.numpy(), np.asarray(lse), do.numpy(), delta.numpy(),
                 np.zeros([B, L, 3 * H * E])])
        dqkv = torch.as_tensor(np.asarray(sim.arguments[4], np.float64))
    m2, ctx2 = _run_pass(_module([B, H], L, L, E, True, scale, grad=True))
    with ctx2:
        sim = Simt(m2)
        sim.run([q.numpy(), k.numpy(), v.numpy(), np.asarray(lse), do.numpy(), delta.numpy(),
                 *[np.zeros([B, H, L, E]) for _ in range(3)]])
        grads = [torch.as_tensor(np.asarray(x, np.float64)) for x in sim.arguments[6:]]
    for i, want in enumerate(grads):
        got = dqkv[..., i * H * E:(i + 1) * H * E].reshape(B, L, H, E).transpose(1, 2)
        assert torch.equal(got, want)


def test_heavy_first_block_order_gives_the_same_bits(monkeypatch):
    """Causal blocks dispatched heaviest first in groups of heads (here 2 of 3 batch
    entries, so the last group is partial) compute every tile as the (tile, batch) grid
    does: the same bits, forward and backward, on a 1-D grid."""
    from latch.passes import attention_kernels

    monkeypatch.setattr(attention_kernels, "HEAD_GROUP", 2)
    batch, L, E = [3], 128, 16
    scale = 1.0 / math.sqrt(E)
    g = torch.Generator().manual_seed(5)
    q, k, v, do = (_bf16(batch + [L, E], g) for _ in range(4))
    lse = torch.randn(batch + [L], generator=g)
    delta = torch.randn(batch + [L], generator=g)
    results = {}
    for heavy in (True, False):
        got = []
        for grad in (False, True):
            m, ctx = _run_pass(_module(batch, L, L, E, True, scale, grad=grad),
                               "{heavy-first=%s}" % str(heavy).lower())
            # heavy first: a 1-D grid, no block index along y
            assert heavy == (re.search(r"gpu\.block_id\s+y", str(m)) is None)
            with ctx:
                sim = Simt(m)
                if grad:
                    sim.run([q.numpy(), k.numpy(), v.numpy(), lse.numpy(), do.numpy(),
                             delta.numpy(), *[np.zeros(x.shape) for x in (q, k, v)]])
                    got += [np.asarray(a) for a in sim.arguments[6:]]
                else:
                    sim.run([q.numpy(), k.numpy(), v.numpy(), np.zeros(q.shape),
                             np.zeros(batch + [L])])
                    got += [np.asarray(a) for a in sim.arguments[3:5]]
        results[heavy] = got
    for a, b in zip(results[True], results[False]):
        assert np.array_equal(a, b)
