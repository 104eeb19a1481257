"""latch-register-accumulators: short reductions left to loops (a product of 8 terms per
output, as TinyMoE's router input gradient) keep the output element in a register across
the reduction loop.  Through latch-form-kernels and the SIMT interpreter, the kernel's
results equal float64's; its loop carries the sum and the output is loaded and stored once
per element; nested reduction loops are rewritten from the inside out; an output that may
share bytes with an input keeps the per-iteration load and store."""
from __future__ import annotations

import numpy as np
import torch

from simt import Simt
from test_contraction_simt import contraction_text


def _run(text: str, pipeline: str):
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, pipeline)
    return m, ctx


# out[a, n] += x[a, t, k] * w[t, k, n]: 8 terms a sum over two reduction loops
SHORT = contraction_text({"a": 64, "n": 96, "t": 2, "k": 4}, "atk", "tkn", "an")


def test_short_reduction_accumulates_in_registers():
    # latch-form-kernels' steps up to the mapped gpu.launch (the interpreter runs scf)
    m, ctx = _run(SHORT, "builtin.module(func.func(convert-linalg-to-parallel-loops), "
                         "latch-register-accumulators, latch-map-parallel-loops{min-blocks=1},"
                         "canonicalize, cse)")
    kernel = str(m)
    assert "gpu.launch" in kernel and kernel.count("iter_args") == 2
    # one load and one store of the output per element; the two loops carry the sum
    assert kernel.count("memref.store") == 1
    loads = [ln for ln in kernel.splitlines() if "memref.load" in ln and "64x96xf32" in ln]
    assert len(loads) == 1, loads
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 2, 4, generator=g).bfloat16()
    w = torch.randn(2, 4, 96, generator=g).bfloat16()
    o = torch.randn(64, 96, generator=g, dtype=torch.float64).float()
    with ctx:
        sim = Simt(m)
        sim.run([x.float().numpy(), w.float().numpy(), o.numpy()])   # bf16 as rounded f32
    got = torch.from_numpy(np.asarray(sim.arguments[2], np.float64))
    ref = o.double() + torch.einsum("atk,tkn->an", x.double(), w.double())
    assert float((got - ref).norm() / ref.norm()) < 1e-6


def test_loops_are_rewritten_inside_out_and_aliasing_outputs_are_left():
    m, _ = _run(SHORT, "builtin.module(func.func(convert-linalg-to-parallel-loops), "
                       "latch-register-accumulators)")
    text = str(m)
    assert text.count("iter_args") == 2 and text.count("memref.store") == 1
    # the output a view of the same allocation as an input: nothing proves them disjoint
    aliased = SHORT.replace(
        "func.func @main(%a: memref<64x2x4xbf16>, %b: memref<2x4x96xbf16>, %c: memref<64x96xf32>) {",
        "func.func @main(%a: memref<64x2x4xbf16>, %b: memref<2x4x96xbf16>, %buf: memref<6144xf32>) {\n"
        "  %c = memref.expand_shape %buf [[0, 1]] output_shape [64, 96] : memref<6144xf32> into memref<64x96xf32>\n"
        "  %y3 = memref.expand_shape %buf [[0, 1, 2]] output_shape [64, 96, 1] : memref<6144xf32> into memref<64x96x1xf32>")
    aliased = aliased.replace("^bb0(%x: bf16, %y: bf16, %acc: f32):",
                              "^bb0(%x: bf16, %y: bf16, %acc: f32):\n"
                              "      %i0 = linalg.index 0 : index\n"
                              "      %c0 = arith.constant 0 : index\n"
                              "      %peek = memref.load %y3[%i0, %c0, %c0] : memref<64x96x1xf32>")
    aliased = aliased.replace("%s = arith.addf %acc, %p : f32",
                              "%s0 = arith.addf %acc, %p : f32\n      %s = arith.addf %s0, %peek : f32")
    assert "%peek" in aliased and "%buf" in aliased and "%s0" in aliased
    m, _ = _run(aliased, "builtin.module(func.func(convert-linalg-to-parallel-loops), "
                         "latch-register-accumulators)")
    assert "iter_args" not in str(m)


def test_short_loops_unrolled_into_vector_lanes():
    """latch-unroll-short-loops after the accumulators: the two reduction loops (2 x 4
    terms) unroll innermost first into straight-line code, which latch-map-parallel-loops
    gives vector lanes (4: one 16-byte store of the f32 output, 8-byte loads of the bf16
    weights).
    The same operations in the same order: the results equal the loops' bit for bit."""
    front = "builtin.module(latch-wrap-host-compute, func.func(convert-linalg-to-parallel-loops), " \
            "latch-register-accumulators, "
    back = "latch-map-parallel-loops{min-blocks=1}, canonicalize, cse)"
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 2, 4, generator=g).bfloat16()
    w = torch.randn(2, 4, 96, generator=g).bfloat16()
    o = torch.randn(64, 96, generator=g, dtype=torch.float64).float()
    got = {}
    for unrolled in (True, False):
        m, ctx = _run(SHORT, front + ("latch-unroll-short-loops, " if unrolled else "") + back)
        kernel = str(m)
        assert ("scf.for" in kernel) != unrolled
        assert ("vector.load" in kernel and "vector<4xf32>" in kernel) == unrolled
        with ctx:
            sim = Simt(m)
            sim.run([x.float().numpy(), w.float().numpy(), o.numpy()])
        got[unrolled] = np.asarray(sim.arguments[2]).copy()
    assert np.array_equal(got[True], got[False])
    ref = o.double() + torch.einsum("atk,tkn->an", x.double(), w.double())
    assert float((torch.from_numpy(got[True].astype(np.float64)) - ref).norm() / ref.norm()) < 1e-6
