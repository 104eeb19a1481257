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


@pytest.mark.parametrize("batch,L,split,options", [
    ([1, 2], 256, 1, WGMMA),       # four query tiles: 1 + 2 + 3 + 4 slices of one key tile
    ([1, 2], 256, 3, WGMMA),       # the last tile's 4 key tiles as 3 + 1: a short slice
    ([1], 192, 2, ""),             # mma.sync; the first query tile's second slice empty
], ids=["wgmma-split1", "wgmma-split3", "mma-split2"])
def test_split_forward_matches_float64(batch, L, split, options):
    """``kv-split``: a causal forward's query tile takes its key tiles in slices of at most
    ``split`` tiles, each block writing its unnormalized output, row maxima and row sums,
    and a second kernel combines the slices (an empty slice's maximum is -inf: weight 0).
    The output and log-sum-exp agree with the unsplit kernel's to f32 rounding (before
    the bf16 store) and with float64 to bf16 accuracy."""
    E = 64
    scale = 1.0 / math.sqrt(E)
    g = torch.Generator().manual_seed(9)
    q, k, v = (_bf16(batch + [L, E], g) for _ in range(3))
    with_split = options[:-1] + f" kv-split={split}}}" if options else f"{{kv-split={split}}}"
    m, ctx = _run_pass(_module(batch, L, L, E, True, scale, grad=False), with_split)
    host = str(m).split("gpu.module")[0]
    assert host.count("gpu.launch_func") == 2 and "memref.view" in host
    assert ("nvvm.wgmma.mma_async" in _kernels(m)) == (options == WGMMA)
    o, lse = _forward(m, ctx, q, k, v)
    m, ctx = _run_pass(_module(batch, L, L, E, True, scale, grad=False), options)
    o1, lse1 = _forward(m, ctx, q, k, v)
    assert _rel(lse, torch.as_tensor(lse1)) < 1e-6
    assert _rel(o, torch.as_tensor(o1)) < 8e-3        # bf16 stores of nearby f32 values
    o_ref, lse_ref = _reference(q, k, v, True, scale)
    assert _rel(lse, lse_ref) < 1e-5 and _rel(o, o_ref) < 2e-2


def test_split_forward_only_where_blocks_are_few(monkeypatch):
    """Only causal attention of fewer than SPLIT_BELOW blocks, longer than one slice, is
    split: the forward and its combining kernel, the backward's dQ and dK/dV kernels and
    the kernels adding their slices."""
    import latch.passes.attention_kernels as ak

    causal = _module([2], 256, 256, 64, True, 0.125, grad=False)
    m, _ = _run_pass(causal, "{chip=sm_90a kv-split=2}")
    assert str(m).split("gpu.module")[0].count("gpu.launch_func") == 2
    monkeypatch.setattr(ak, "SPLIT_BELOW", 8)           # 2 x 4 blocks: not fewer
    m, _ = _run_pass(causal, "{chip=sm_90a kv-split=2}")
    assert str(m).split("gpu.module")[0].count("gpu.launch_func") == 1
    monkeypatch.undo()
    m, _ = _run_pass(_module([2], 256, 256, 64, False, 0.125, grad=False),   # not causal
                     "{chip=sm_90a kv-split=2}")
    assert "memref.view" not in str(m).split("gpu.module")[0]
    m, _ = _run_pass(_module([2], 256, 256, 64, True, 0.125, grad=True),     # backward:
                     "{chip=sm_90a kv-split=2}")                             # dQ, dK/dV
    assert str(m).split("gpu.module")[0].count("gpu.launch_func") == 4
    m, _ = _run_pass(_module([2], 128, 128, 64, True, 0.125, grad=False),
                     "{chip=sm_90a kv-split=2}")            # two key tiles: one slice
    assert str(m).split("gpu.module")[0].count("gpu.launch_func") == 1


@pytest.mark.parametrize("batch,L,split,options", [
    ([1, 2], 256, 1, WGMMA),
    ([1, 2], 256, 3, WGMMA),       # dK/dV of key tile 0: query tiles 0-2 and 3
    ([1], 192, 2, ""),             # mma.sync; key tile 0's second slice: one tile
], ids=["wgmma-split1", "wgmma-split3", "mma-split2"])
def test_split_backward_matches_float64(batch, L, split, options):
    """``kv-split`` in the backward: dQ's key tiles and dK/dV's query tiles in slices, the
    tiles of several slices writing f32 partial sums that a second kernel adds in slice
    order (an empty slice holds zeros); the gradients agree with the unsplit kernels' to
    bf16 rounding and with float64 to bf16 accuracy."""
    E = 64
    scale = 1.0 / math.sqrt(E)
    g = torch.Generator().manual_seed(10)
    q, k, v, do = (_bf16(batch + [L, E], g) for _ in range(4))
    m, ctx = _run_pass(_module(batch, L, L, E, True, scale, grad=False), options)
    o, lse = _forward(m, ctx, q, k, v)
    lse_t = torch.as_tensor(lse)
    delta = (do * torch.as_tensor(o)).sum(-1)
    with_split = options[:-1] + f" kv-split={split}}}" if options else f"{{kv-split={split}}}"
    got = {}
    for opts in (with_split, options):
        m, ctx = _run_pass(_module(batch, L, L, E, True, scale, grad=True), opts)
        host = str(m).split("gpu.module")[0]
        assert host.count("gpu.launch_func") == (4 if opts == with_split else 2)
        got[opts] = _backward(m, ctx, q, k, v, lse_t, do, delta)
    for a, b in zip(got[with_split], got[options]):
        assert _rel(a, torch.as_tensor(b)) < 8e-3
    qr, kr, vr = (x.clone().requires_grad_(True) for x in (q, k, v))
    o_ref, _ = _reference(qr, kr, vr, True, scale)
    for x, ref in zip(got[with_split], torch.autograd.grad(o_ref, (qr, kr, vr), do)):
        assert _rel(x, ref) < 2e-2


def test_blocks_per_sm_declares_resident_blocks():
    """``blocks-per-sm=4``: each flash kernel declares as many resident blocks an SM as
    asked, or as its shared memory lets fit (the forward's 49 KiB: 4; dQ's 57 and dK/dV's
    65 KiB: 3), which reaches the PTX as ``.minnctapersm`` (the assembler then keeps the
    registers to 65536 / (128 x blocks)) and the runtime's carveout request; the kernels'
    results are the same bits.  0 (the default) declares nothing; a negative count is a
    pipeline error."""
    from mlir import ir

    from latch.errors import PipelineError
    from latch.passes.attention_kernels import resident_blocks
    from latch.pipeline import run_pipeline
    from latch.targets.cuda import _ptx_of_binaries, kernels_to_ptx_pipeline

    assert [resident_blocks(4, s) for s in (50176, 58368, 66560)] == [4, 3, 3]
    assert resident_blocks(2, 50176) == 2
    declared = {}
    for grad in (False, True):
        text = _module([2], 128, 128, 64, True, 0.125, grad=grad)
        m, ctx = _run_pass(text, "{chip=sm_90a blocks-per-sm=4}")
        plain, _ = _run_pass(text, WGMMA)
        assert "nvvm.minctasm" not in str(plain)
        here = {}
        with ctx:
            for op in m.body.operations:
                if op.operation.name != "gpu.module":
                    continue
                func = op.regions[0].blocks[0].operations[0]
                name = ir.StringAttr(func.attributes["sym_name"]).value
                here[name] = ir.IntegerAttr(func.attributes["nvvm.minctasm"]).value
            run_pipeline(m, kernels_to_ptx_pipeline("sm_90a", "+ptx81", 1))
            ptx = "\n".join(_ptx_of_binaries(m).values())
        for blocks in here.values():
            assert f".minnctapersm {blocks}" in ptx
        declared.update(here)
    assert declared == {"attention": 4, "attention_dq": 3, "attention_dkdv": 3}
    g = torch.Generator().manual_seed(3)
    q, k, v = (_bf16([2, 128, 64], g) for _ in range(3))
    outs = []
    for options in ("{chip=sm_90a blocks-per-sm=4}", WGMMA):
        m, ctx = _run_pass(_module([2], 128, 128, 64, True, 0.125, grad=False), options)
        outs.append(_forward(m, ctx, q, k, v))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)
    with pytest.raises(PipelineError, match="blocks-per-sm=-1 is negative"):
        _run_pass(_module([2], 128, 128, 64, True, 0.125, grad=False),
                  "{chip=sm_90a blocks-per-sm=-1}")
