"""Column-tile reductions of latch-wrap-host-compute (passes/row_reductions.py) executed
on the CPU by the SIMT interpreter (tests/py/simt.py): a norm weight's gradient shape —
the sum over many tokens of ``x * g`` for each of a few features — whose column tiles are
too few blocks to fill the GPU is cut into slices of tokens (``column_splits``), each
block writing its slice's partial sums, and a second launch combines the slices in order
with the output's initial value.  Compared with float64."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from simt import Simt

TEXT = """
#ng_in = affine_map<(d0, d1) -> (d0, d1)>
#ng_out = affine_map<(d0, d1) -> (0, d1)>
func.func @main(%x: memref<TOKxFEATxf32>, %g: memref<TOKxFEATxf32>,
                %w: memref<1xFEATxf32>) {
  linalg.generic {indexing_maps = [#ng_in, #ng_in, #ng_out],
                  iterator_types = ["reduction", "parallel"]}
      ins(%x, %g : memref<TOKxFEATxf32>, memref<TOKxFEATxf32>) outs(%w : memref<1xFEATxf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %p = arith.mulf %a, %b : f32
    %r = arith.addf %p, %acc : f32
    linalg.yield %r : f32
  }
  return
}
"""


def _run(tokens: int, features: int):
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(TEXT.replace("TOK", str(tokens)).replace("FEAT", str(features)))
        run_pipeline(m, "builtin.module(latch-wrap-host-compute)")
        text = str(m)
        g = torch.Generator().manual_seed(4)
        x = torch.randn(tokens, features, generator=g, dtype=torch.float64).float()
        y = torch.randn(tokens, features, generator=g, dtype=torch.float64).float()
        w = torch.randn(1, features, generator=g, dtype=torch.float64).float()
        sim = Simt(m)
        sim.run([x.numpy(), y.numpy(), w.numpy()])
        got = torch.from_numpy(np.asarray(sim.arguments[2], np.float64))
    ref = w.double() + (x.double() * y.double()).sum(0, keepdim=True)
    return text, got, ref


@pytest.mark.parametrize("tokens,features,splits", [(16384, 20, 4), (2048, 20, 1)],
                         ids=["sliced", "one-slice"])
def test_column_reduction_slices(tokens, features, splits):
    text, got, ref = _run(tokens, features)
    host = text.split("gpu.module")[0]
    grids = re.findall(r"gpu.launch blocks\(.*?\) in \(%\w+ = %c(\d+)(?:_\d+)?, %\w+ = %c(\d+)", host)
    if splits > 1:
        # 3 blocks of 8 features x 128 threads, 4 slices of 4096 tokens; then the combine
        assert len(grids) == 2 and grids[0] == ("3", str(splits)), grids
        assert f"memref<{splits}x{features}xf32>" in host
    else:
        assert len(grids) == 1 and grids[0][1] == "1", grids
    err = float((got - ref).abs().max() / ref.abs().max())
    assert err < 1e-5, err
