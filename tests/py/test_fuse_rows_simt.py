"""latch-fuse-rows executed on the CPU (the SIMT interpreter of tests/py/simt.py, with its
race detection): a router-like chain of small row-by-row generics (a softmax over 8
experts, the top choice and its gate written into a strided [rows, 2] slot) lowered by the
kernel-forming passes with and without the fusion; the fused program has one launch where
the unfused one has one per op, and writes the same bits."""
from __future__ import annotations

import numpy as np

from simt import Simt

CHAIN = """
#rc = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
func.func @main(%x: memref<256x8xf32>, %probs: memref<256x8xf32>, %slots: memref<256x2xf32>,
                %top: memref<256xi64>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %m = memref.alloc() : memref<256xf32>
  linalg.generic {indexing_maps = [#v], iterator_types = ["parallel"]} outs(%m : memref<256xf32>) {
    ^bb0(%o: f32):
      linalg.yield %ninf : f32
  }
  linalg.generic {indexing_maps = [#rc, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<256x8xf32>) outs(%m : memref<256xf32>) {
    ^bb0(%a: f32, %o: f32):
      %b = arith.maximumf %a, %o : f32
      linalg.yield %b : f32
  }
  %s = memref.alloc() : memref<256xf32>
  linalg.generic {indexing_maps = [#v], iterator_types = ["parallel"]} outs(%s : memref<256xf32>) {
    ^bb0(%o: f32):
      linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#rc, #r, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x, %m : memref<256x8xf32>, memref<256xf32>) outs(%s : memref<256xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      %e = math.exp %d : f32
      %t = arith.addf %e, %o : f32
      linalg.yield %t : f32
  }
  %p = memref.alloc() : memref<256x8xf32>
  linalg.generic {indexing_maps = [#rc, #r, #r, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m, %s : memref<256x8xf32>, memref<256xf32>, memref<256xf32>)
      outs(%p : memref<256x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      %e = math.exp %d : f32
      %q = arith.divf %e, %c : f32
      linalg.yield %q : f32
  }
  %best = memref.alloc() : memref<256xf32>
  %arg = memref.alloc() : memref<256xi64>
  linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      outs(%best, %arg : memref<256xf32>, memref<256xi64>) {
    ^bb0(%o: f32, %i: i64):
      %c0 = arith.constant 0 : i64
      linalg.yield %ninf, %c0 : f32, i64
  }
  linalg.generic {indexing_maps = [#rc, #r, #r], iterator_types = ["parallel", "reduction"]}
      ins(%p : memref<256x8xf32>) outs(%best, %arg : memref<256xf32>, memref<256xi64>) {
    ^bb0(%a: f32, %o: f32, %i: i64):
      %j = linalg.index 1 : index
      %ji = arith.index_cast %j : index to i64
      %gt = arith.cmpf ogt, %a, %o : f32
      %nb = arith.select %gt, %a, %o : f32
      %ni = arith.select %gt, %ji, %i : i64
      linalg.yield %nb, %ni : f32, i64
  }
  %g = memref.alloc() : memref<256x2xf32>
  %col = memref.subview %g[0, 1] [256, 1] [1, 1] : memref<256x2xf32> to memref<256x1xf32, strided<[2, 1], offset: 1>>
  linalg.generic {indexing_maps = [#r, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%best : memref<256xf32>) outs(%col : memref<256x1xf32, strided<[2, 1], offset: 1>>) {
    ^bb0(%a: f32, %o: f32):
      linalg.yield %a : f32
  }
  %col0 = memref.subview %g[0, 0] [256, 1] [1, 1] : memref<256x2xf32> to memref<256x1xf32, strided<[2, 1]>>
  linalg.generic {indexing_maps = [#r, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%s : memref<256xf32>) outs(%col0 : memref<256x1xf32, strided<[2, 1]>>) {
    ^bb0(%a: f32, %o: f32):
      linalg.yield %a : f32
  }
  memref.copy %p, %probs : memref<256x8xf32> to memref<256x8xf32>
  memref.copy %g, %slots : memref<256x2xf32> to memref<256x2xf32>
  memref.copy %arg, %top : memref<256xi64> to memref<256xi64>
  return
}
"""


def _run(fuse: bool, args):
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(CHAIN)
        passes = (["latch-fuse-rows"] if fuse else []) + [
            "func.func(convert-linalg-to-parallel-loops)", "latch-register-accumulators",
            "latch-unroll-short-loops", "latch-map-parallel-loops{min-blocks=1}",
            "canonicalize", "cse"]
        run_pipeline(m, "builtin.module(" + ", ".join(passes) + ")")
        text = str(m)
        sim = Simt(m)
        sim.run([a.copy() for a in args])
    launches = text.count("gpu.launch blocks")
    return launches, [np.asarray(a) for a in sim.arguments]


def test_fused_chain_writes_the_same_bits_in_one_launch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    x[3] = x[3, 0]                       # a row of ties: the first index wins
    args = [x, np.zeros((256, 8), np.float32), np.zeros((256, 2), np.float32),
            np.zeros(256, np.int64)]
    n_fused, fused = _run(True, args)
    n_plain, plain = _run(False, args)
    for a, b in zip(fused, plain):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(fused[1], e / e.sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(fused[3], np.argmax(fused[1], 1))
    assert n_plain >= 8 and n_fused < n_plain - 5, (n_fused, n_plain)
