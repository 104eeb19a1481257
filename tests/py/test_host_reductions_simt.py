"""Reductions that latch-wrap-host-compute turns into kernels, executed on the CPU by the
SIMT interpreter (tests/py/simt.py).  Sums of one-hot terms (passes/one_hot_reductions.py)
become one thread per output (the tests at the end).  Column-tile reductions
(passes/row_reductions.py): a norm weight's gradient shape —
the sum over many tokens of ``x * g`` for each of a few features — whose column tiles are
too few blocks to fill the GPU is cut into slices of tokens (``column_splits``), each
block writing its slice's partial sums, and a second launch combines the slices in order
with the output's initial value.  Compared with float64."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from simt import Simt, formed

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


def _run(tokens: int, features: int, options: str = ""):
    with formed(TEXT.replace("TOK", str(tokens)).replace("FEAT", str(features)),
                f"builtin.module(latch-wrap-host-compute{options})") as m:
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


def test_wide_column_tiles():
    """column-bytes=128: a block's threads in x cover 32 f32 columns (whole 128-byte lines
    of a row) instead of 8; 40 features -> 2 blocks of 32 x 32 threads, the second's extra
    columns storing nothing; the sums as float64's."""
    text, got, ref = _run(16384, 40, "{column-bytes=128}")
    host = text.split("gpu.module")[0]
    assert re.search(r"gpu.launch blocks\(.*?\) in \(%\w+ = %c2(?:_\d+)?, .*threads\(.*?\) "
                     r"in \(%\w+ = %c32(?:_\d+)?, %\w+ = %c32", host), host[:3000]
    err = float((got - ref).abs().max() / ref.abs().max())
    assert err < 1e-5, err


def test_column_slices_fill_whole_waves():
    """column_splits: TinyMoE B32's norm weight gradients (32,768 tokens; 96 blocks of 8 x
    128 threads for f32 inputs, 48 of 16 x 64 for bf16) take 8 and 16 slices, 768 blocks
    (2.9 waves of the 264 block slots), not the 384 (1.45 waves) of the fewest slices making
    264 blocks (``whole_waves=False``); at B2 (2,048 tokens) a thread would keep fewer than
    32 elements of a slice: one slice."""
    from types import SimpleNamespace

    from latch.passes.row_reductions import column_splits

    b32 = SimpleNamespace(logical=False, ranges=[32768, 768], red=[0])
    assert column_splits(b32, 96, 128) == 8 and column_splits(b32, 48, 64) == 16
    assert column_splits(b32, 96, 128, whole_waves=False) == 4
    assert column_splits(b32, 48, 64, whole_waves=False) == 8
    b2 = SimpleNamespace(logical=False, ranges=[2048, 768], red=[0])
    assert column_splits(b2, 96, 128) == 1


# the loss's gather gradient: out[o] += sum_k [t(o) == v(k)] * (-c(o)), v an arange written
# by a generic (as torch's one_hot leaves it), some targets out of range (ignored)
GATHER = """
#g_o = affine_map<(d0, d1) -> (d0)>
#g_k = affine_map<(d0, d1) -> (d1)>
#id = affine_map<(d0) -> (d0)>
func.func @main(%t: memref<OUTxi64>, %c: memref<OUTxf32>, %x: memref<OUTxVOCABxf32>,
                %out: memref<OUTxf32>) {
  %v = memref.alloc() : memref<VOCABxi64>
  %c0 = arith.constant 0 : i64
  linalg.fill ins(%c0 : i64) outs(%v : memref<VOCABxi64>)
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]}
      outs(%v : memref<VOCABxi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %ii = arith.index_cast %i : index to i64
    linalg.yield %ii : i64
  }
  linalg.generic {indexing_maps = [#g_o, #g_k, #g_o, #affine_map<(d0, d1) -> (d0, d1)>, #g_o],
                  iterator_types = ["parallel", "reduction"]}
      ins(%t, %v, %c, %x : memref<OUTxi64>, memref<VOCABxi64>, memref<OUTxf32>,
          memref<OUTxVOCABxf32>) outs(%out : memref<OUTxf32>) {
  ^bb0(%tt: i64, %vv: i64, %cc: f32, %xx: f32, %acc: f32):
    %hit = arith.cmpi eq, %tt, KEY : i64
    %m1 = arith.constant -1.0 : f32
    %z = arith.constant 0.0 : f32
    %s = arith.select %hit, %m1, %z : f32
    %p = arith.mulf %cc, %s : f32
    %q = arith.mulf %p, %xx : f32
    %r = arith.addf %acc, %q : f32
    linalg.yield %r : f32
  }
  return
}
"""


@pytest.mark.parametrize("key", ["arange", "index"])
def test_one_hot_sum_collapses_to_its_term(key):
    """passes/one_hot_reductions.py: the [outputs x vocabulary] sum of one-hot terms is one
    thread per output evaluating the term at k = t(o) (no loop over the vocabulary), equal
    to the dense sum; targets out of range add nothing."""
    n, vocab = 300, 97
    text = GATHER.replace("#affine_map<(d0, d1) -> (d0, d1)>", "affine_map<(d0, d1) -> (d0, d1)>")
    text = text.replace("OUT", str(n)).replace("VOCAB", str(vocab))
    if key == "arange":
        text = text.replace("KEY", "%vv")
    else:                                 # the reduction loop's own index
        text = text.replace("%hit = arith.cmpi eq, %tt, KEY : i64",
                            "%k = linalg.index 1 : index\n    %ki = arith.index_cast %k : "
                            "index to i64\n    %hit = arith.cmpi eq, %tt, %ki : i64")
    with formed(text, "builtin.module(latch-wrap-host-compute)") as m:
        host = str(m)
        assert "scf.for" not in host and "linalg.generic" not in host.split("gpu.launch", 2)[-1]
        assert re.search(r"gpu.launch blocks\(.*?\) in \(%\w+ = %c2(?:_\d+)?, ", host)
        g = torch.Generator().manual_seed(9)
        t = torch.randint(-3, vocab + 3, (n,), generator=g)
        c = torch.randn(n, generator=g, dtype=torch.float64).float()
        x = torch.randn(n, vocab, generator=g, dtype=torch.float64).float()
        out = torch.randn(n, generator=g, dtype=torch.float64).float()
        sim = Simt(m)
        sim.run([t.numpy(), c.numpy(), x.numpy(), out.numpy()])
        got = torch.from_numpy(np.asarray(sim.arguments[3], np.float64))
    keep = (t >= 0) & (t < vocab)
    ref = out.clone()                     # the kept term, in float32 as the body rounds it
    rows = torch.arange(n)[keep]
    ref[keep] = ref[keep] + (c[keep] * -1.0) * x[rows, t[keep]]
    assert torch.equal(got.float(), ref), (got.float() - ref).abs().max()


# a cross-entropy's two row reductions over bf16 logits, as the update leaves them: the row
# max into a buffer filled with -inf, then the sum of exp(x - max) into a copy of zeros
SOFTMAX = """
#x = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: memref<ROWSxCOLSxbf16>, %m: memref<ROWSxf32>, %s: memref<ROWSxf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%ninf : f32) outs(%m : memref<ROWSxf32>)
  linalg.generic {indexing_maps = [#x, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<ROWSxCOLSxbf16>) outs(%m : memref<ROWSxf32>) {
  ^bb0(%a: bf16, %acc: f32):
    %e = arith.extf %a : bf16 to f32
    %y = arith.maximumf %e, %acc : f32
    linalg.yield %y : f32
  }
  %z = memref.alloc() : memref<ROWSxf32>
  linalg.fill ins(%zero : f32) outs(%z : memref<ROWSxf32>)
  memref.copy %z, %s : memref<ROWSxf32> to memref<ROWSxf32>
  linalg.generic {indexing_maps = [#x, #r, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x, %m : memref<ROWSxCOLSxbf16>, memref<ROWSxf32>) outs(%s : memref<ROWSxf32>) {
  ^bb0(%a: bf16, %mm: f32, %acc: f32):
    %e = arith.extf %a : bf16 to f32
    %d = arith.subf %e, %mm : f32
    %p = math.exp %d : f32
    %y = arith.addf %p, %acc : f32
    linalg.yield %y : f32
  }
  return
}
"""


@pytest.mark.parametrize("layout", ["rows", "misaligned"])
def test_row_max_and_sum_of_exponentials_in_one_pass(layout):
    """passes/online_softmax_sums.py: the two reductions become one launch of a block per
    row (running maximum, rescaled sums); max and sum equal float64's (the sum to float32
    rounding); a row of -inf gives max -inf and sum 0, as the two passes do.  Rows stored
    contiguously are read 8 elements (16 bytes) a load; a view whose rows start 4 elements
    past a 16-byte boundary (``misaligned``) one element a load."""
    rows, cols = 3, 4096
    text = SOFTMAX.replace("ROWS", str(rows)).replace("COLS", str(cols))
    if layout == "misaligned":      # the rows of a [rows, cols + 8] array from column 4 on
        view = f"memref<{rows}x{cols}xbf16, strided<[{cols + 8}, 1], offset: 4>>"
        text = text.replace(f"%x: memref<{rows}x{cols}xbf16>",
                            f"%xa: memref<{rows}x{cols + 8}xbf16>")
        text = text.replace(f"memref<{rows}x{cols}xbf16>", view)
        text = text.replace(
            "  %ninf =", f"  %x = memref.subview %xa[0, 4] [{rows}, {cols}] [1, 1] : "
            f"memref<{rows}x{cols + 8}xbf16> to {view}\n  %ninf =", 1)
    with formed(text, "builtin.module(latch-wrap-host-compute)") as m:
        host = str(m).split("gpu.module")[0]
        assert host.count("gpu.all_reduce") == 2 and "math.exp" in host
        assert ("vector<8xbf16>" in host) == (layout == "rows")
        launches = re.findall(r"gpu.launch blocks\(.*?\) in \(%\w+ = %c(\d+)", host)
        assert launches[-1] == str(rows)
        assert host.count("scf.for") == 1            # one pass over the row
        g = torch.Generator().manual_seed(2)
        x = (torch.randn(rows, cols, generator=g, dtype=torch.float64) * 4).bfloat16()
        x[1, 100:] = float("-inf")                   # a row with a few finite entries
        x[2] = float("-inf")                         # a row of -inf
        mx = np.zeros(rows, np.float32)
        sx = np.zeros(rows, np.float32)
        sim = Simt(m)
        stored = x if layout == "rows" else \
            torch.cat([torch.zeros(rows, 4), x.float(), torch.zeros(rows, 4)], dim=1)
        sim.run([stored.float().numpy().astype(np.float32), mx, sx])
        got_m = torch.from_numpy(np.asarray(sim.arguments[1], np.float64))
        got_s = torch.from_numpy(np.asarray(sim.arguments[2], np.float64))
    xd = x.double()
    want_m = xd.max(dim=1).values
    assert torch.equal(got_m, want_m)
    want_s = torch.exp(xd - want_m[:, None]).nan_to_num(0.0).sum(dim=1)
    assert float((got_s[:2] - want_s[:2]).abs().max() / want_s[:2].abs().max()) < 1e-5
    assert got_s[2] == 0.0 and got_m[2] == float("-inf")


ROWS_TEXT = """
#r_in = affine_map<(d0, d1) -> (d0, d1)>
#r_out = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: memref<ROWSxNxbf16>, %y: memref<ROWSxNxbf16>, %o: memref<ROWSxf32>) {
  linalg.generic {indexing_maps = [#r_in, #r_in, #r_out],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x, %y : memref<ROWSxNxbf16>, memref<ROWSxNxbf16>) outs(%o : memref<ROWSxf32>) {
  ^bb0(%a: bf16, %b: bf16, %acc: f32):
    %p = arith.mulf %a, %b : bf16
    %e = arith.extf %p : bf16 to f32
    %r = arith.addf %e, %acc : f32
    linalg.yield %r : f32
  }
  return
}
"""


@pytest.mark.parametrize("n,lanes", [(40, 8), (64, 8), (200, 32), (300, 32), (512, 32)])
def test_short_rows_take_groups_of_lanes(n, lanes):
    """Row sums shorter than 256 elements (attention's delta: 64 per query and head) take a
    group of lanes per row, about 8 elements a lane, several rows a warp
    (row_reductions.short_row_lanes); their shuffles stay inside the group.  A row the
    group walks in whole chunks of 16 bytes (64 bf16 for 8 lanes) is read a chunk a load
    (row_reductions._row_chunk).  Compared with float64 sums of the same bf16 products."""

    from latch.passes.row_reductions import short_row_lanes

    assert short_row_lanes(n) == lanes
    rows = 37                                    # the last block's extra groups idle
    with formed(ROWS_TEXT.replace("ROWS", str(rows)).replace("xNx", f"x{n}x"),
                "builtin.module(latch-wrap-host-compute)") as m:
        host = str(m).split("gpu.module")[0]
        assert re.search(rf"threads\(.*\) in \(%\w+ = %c{lanes}, %\w+ = %c{256 // lanes},", host)
        # rows the group walks in whole chunks of 8 bf16 read them 16 bytes a load
        assert ("vector<8xbf16>" in host) == (n % (lanes * 8) == 0)
        g = torch.Generator().manual_seed(5)
        x = torch.randn(rows, n, generator=g).bfloat16()
        y = torch.randn(rows, n, generator=g).bfloat16()
        o = torch.randn(rows, generator=g)
        sim = Simt(m)
        sim.run([x.float().numpy(), y.float().numpy(), o.numpy()])
        got = torch.from_numpy(np.asarray(sim.arguments[2], np.float64))
    ref = o.double() + (x * y).double().sum(1)
    assert float((got - ref).norm() / ref.norm()) < 1e-6


@pytest.mark.parametrize("rows,n,deep", [(8, 40960, True), (8, 8192, False),
                                         (200, 40960, False)])
def test_few_long_rows_unroll_deeper(rows, n, deep):
    """A block per output on fewer blocks than the GPU has SMs (8 rows of 40,960: the MoE's
    per-expert counts) unrolls each thread's loop ``few-rows-unroll`` times instead of 4
    (16 chunks of 16 bytes in flight a thread) — not when its threads walk fewer chunks
    than that (8,192: 4 a thread) or when the launch fills the GPU (200 rows).  The same
    elements in the same order: bitwise the totals of the default."""
    text = ROWS_TEXT.replace("ROWS", str(rows)).replace("xNx", f"x{n}x")
    g = torch.Generator().manual_seed(11)
    x = torch.randn(rows, n, generator=g).bfloat16()
    y = torch.randn(rows, n, generator=g).bfloat16()
    o = torch.randn(rows, generator=g)
    got, steps = {}, {}
    for unroll in (0, 16):
        with formed(text,
                    f"builtin.module(latch-wrap-host-compute{{few-rows-unroll={unroll}}})") as m:
            host = str(m).split("gpu.module")[0]
            assert re.search(r"threads\(.*\) in \(%\w+ = %c256, %\w+ = %c1\w*,", host)
            steps[unroll] = host.count("vector.load %arg0")   # chunks a loop trip reads
            sim = Simt(m)
            sim.run([x.float().numpy(), y.float().numpy(), o.numpy()])
            got[unroll] = np.asarray(sim.arguments[2]).copy()

    def loads(unroll):          # copies of the body, + the remainder loop's when there is one
        per = 256 * 8 * unroll                # 256 threads, 8 bf16 a chunk
        return unroll + (n % per != 0)
    assert steps[0] == loads(4)
    assert steps[16] == loads(16 if deep else 4)
    np.testing.assert_array_equal(got[16], got[0])
    ref = o.double() + (x * y).double().sum(1)
    assert float((torch.from_numpy(got[16].astype(np.float64)) - ref).norm() / ref.norm()) < 1e-5


# RMSNorm's statistics: a row sum of squares into a zero fill, then rsqrt(sum / n + eps)
# of each total; the warp that stores a total also stores the finished value (one launch),
# and the totals stay written for later readers (the backward reads them again).
RMS = """
#rc = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
func.func @main(%x: memref<64x768xf32>, %y: memref<64xf32>, %sums: memref<64xf32>) {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 768.0 : f32
  %eps = arith.constant 1.0e-5 : f32
  %s = memref.alloc() : memref<64xf32>
  linalg.generic {indexing_maps = [#v], iterator_types = ["parallel"]} outs(%s : memref<64xf32>) {
    ^bb0(%o: f32):
      linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#rc, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<64x768xf32>) outs(%s : memref<64xf32>) {
    ^bb0(%a: f32, %o: f32):
      %q = arith.mulf %a, %a : f32
      %t = arith.addf %q, %o : f32
      linalg.yield %t : f32
  }
  %r = memref.alloc() : memref<64xf32>
  linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%s : memref<64xf32>) outs(%r : memref<64xf32>) {
    ^bb0(%a: f32, %o: f32):
      %m = arith.divf %a, %n : f32
      %e = arith.addf %m, %eps : f32
      %q = math.rsqrt %e : f32
      linalg.yield %q : f32
  }
  memref.copy %r, %y : memref<64xf32> to memref<64xf32>
  memref.copy %s, %sums : memref<64xf32> to memref<64xf32>
  return
}
"""


def test_row_reduction_finished_by_its_warp():
    with formed(RMS, "builtin.module(latch-wrap-host-compute)") as m:
        host = str(m)
        x = np.random.default_rng(0).standard_normal((64, 768)).astype(np.float32)
        sim = Simt(m)
        sim.run([x, np.zeros(64, np.float32), np.zeros(64, np.float32)])
        got = np.asarray(sim.arguments[1], np.float64)
        sums = np.asarray(sim.arguments[2], np.float64)
    # the finishing code is inside the reduction's launch, and no kernel of its own
    assert host.count("math.rsqrt") == 1
    assert "vector<4xf32>" in host              # a lane reads 4 consecutive f32 a load
    assert "math.rsqrt" in host.split("gpu.terminator")[0]
    ref_sums = (x.astype(np.float64) ** 2).sum(1)
    ref = 1 / np.sqrt(ref_sums / 768 + 1e-5)
    assert float(np.abs(got - ref).max() / np.abs(ref).max()) < 1e-6
    assert float(np.abs(sums - ref_sums).max() / np.abs(ref_sums).max()) < 1e-6


# the whole RMSNorm: the statistics as above, then the normalization x * rstd * w rounded to
# bf16 (a reader of the totals row by row); COLS 768: a warp a row, 64: 8 lanes a row.
# READ is the totals buffer the normalization reads: %r (finished) or %s (the raw sums).
# ARGS / WRITER / KEEP: %x an argument, or written first by WRITER (and kept by KEEP).
RMS_NORM = """
#rc = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#c = affine_map<(d0, d1) -> (d1)>
#v = affine_map<(d0) -> (d0)>
func.func @main(ARGS, %w: memref<COLSxf32>, %y: memref<64xCOLSxbf16>, %rs: memref<64xf32>) {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant COLS.0 : f32
  %eps = arith.constant 1.0e-5 : f32
  WRITER
  %s = memref.alloc() : memref<64xf32>
  linalg.generic {indexing_maps = [#v], iterator_types = ["parallel"]} outs(%s : memref<64xf32>) {
    ^bb0(%o: f32):
      linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#rc, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<64xCOLSxf32>) outs(%s : memref<64xf32>) {
    ^bb0(%e: f32, %o: f32):
      %q = arith.mulf %e, %e : f32
      %t = arith.addf %q, %o : f32
      linalg.yield %t : f32
  }
  %r = memref.alloc() : memref<64xf32>
  linalg.generic {indexing_maps = [#v, #v], iterator_types = ["parallel"]}
      ins(%s : memref<64xf32>) outs(%r : memref<64xf32>) {
    ^bb0(%e: f32, %o: f32):
      %m = arith.divf %e, %n : f32
      %d = arith.addf %m, %eps : f32
      %q = math.rsqrt %d : f32
      linalg.yield %q : f32
  }
  %out = memref.alloc() : memref<64xCOLSxbf16>
  linalg.generic {indexing_maps = [#rc, #r, #c, #rc],
                  iterator_types = ["parallel", "parallel"]}
      ins(%x, READ, %w : memref<64xCOLSxf32>, memref<64xf32>, memref<COLSxf32>)
      outs(%out : memref<64xCOLSxbf16>) {
    ^bb0(%e: f32, %k: f32, %g: f32, %o: bf16):
      %p = arith.mulf %e, %k : f32
      %q = arith.mulf %p, %g : f32
      %t = arith.truncf %q : f32 to bf16
      linalg.yield %t : bf16
  }
  KEEP
  memref.copy %out, %y : memref<64xCOLSxbf16> to memref<64xCOLSxbf16>
  memref.copy %r, %rs : memref<64xf32> to memref<64xf32>
  return
}
"""


def _with_and_without(text: str, option: str, args: list) -> tuple[dict, dict]:
    """Run ``text`` through latch-wrap-host-compute with ``option`` true and false and
    then in the SIMT interpreter on ``args``: ({flag: host IR}, {flag: the arguments
    after the run})."""
    hosts, outs = {}, {}
    for on in (True, False):
        with formed(text, "builtin.module(latch-wrap-host-compute{%s=%s})"
                    % (option, str(on).lower())) as m:
            hosts[on] = str(m)
            sim = Simt(m)
            sim.run([np.copy(a) for a in args])
            outs[on] = [np.asarray(v) for v in sim.arguments]
    return hosts, outs


@pytest.mark.parametrize("cols,read", [(768, "%r"), (64, "%r"), (768, "%s")])
def test_row_reduction_read_by_its_warps(cols, read):
    """RMSNorm's normalization runs in its statistics' launch (row-readers): one launch,
    the stored total handed from the first lane of a row's group (``gpu.shuffle idx``), the
    row read again a vector a chunk and the bf16 outputs stored a vector a chunk — the same
    bits as the normalization's own launch (row-readers=false), and float64's values to
    bf16 rounding."""
    text = RMS_NORM.replace("ARGS", "%x: memref<64xCOLSxf32>").replace("WRITER", "")
    text = text.replace("KEEP", "").replace("COLS", str(cols)).replace("READ", read)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    hosts, outs = _with_and_without(text, "row-readers", [
        x, w, np.zeros((64, cols), np.float32), np.zeros(64, np.float32)])
    fused, apart = hosts[True], hosts[False]
    assert fused.count("gpu.launch ") == 1 and apart.count("gpu.launch ") == 1
    # the normalization (the one truncf) is inside the statistics' launch, not a generic,
    # and so is the copy of its output into %y (a follower of the reader: the same lanes
    # store each element twice)
    assert apart.count("linalg.generic") == fused.count("linalg.generic") + 2
    assert "arith.truncf" in fused.split("gpu.terminator")[0]
    assert "arith.truncf" not in apart.split("gpu.terminator")[0]
    assert re.search(r"gpu.shuffle +idx", fused) and "vector<4xbf16>" in fused
    for a, b in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(a, b)
    sums = (x.astype(np.float64) ** 2).sum(1)
    rstd = 1 / np.sqrt(sums / cols + 1e-5)
    ref = x * (rstd if read == "%r" else sums)[:, None] * w
    assert float(np.abs(outs[True][2] - ref).max() / np.abs(ref).max()) < 8e-3


@pytest.mark.parametrize("cols", [768, 64])
def test_row_totals_start_from_their_zero_fill(cols):
    """Totals filled with zeros right before the reduction (RMSNorm's sum of squares) start
    from the constant in the reduction's launch, and the fill goes (fold-zeros): one op
    fewer on the host (a launch fewer in the update), no load of the totals in the launch,
    the same bits as with the fill kept."""
    text = RMS_NORM.replace("ARGS", "%x: memref<64xCOLSxf32>").replace("WRITER", "")
    text = text.replace("KEEP", "").replace("COLS", str(cols)).replace("READ", "%r")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    hosts, outs = _with_and_without(text, "fold-zeros", [
        x, w, np.zeros((64, cols), np.float32), np.full(64, np.nan, np.float32)])
    folded, kept = hosts[True], hosts[False]
    assert kept.count("linalg.generic") == folded.count("linalg.generic") + 1

    def loads_of_totals(host):
        launch = host.split("gpu.launch ")[1].split("gpu.terminator")[0]
        return sum(1 for line in launch.splitlines()
                   if "memref.load" in line and line.rstrip().endswith(": memref<64xf32>"))
    assert loads_of_totals(kept) == 1 and loads_of_totals(folded) == 0
    for a, b in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    rstd = 1 / np.sqrt((x.astype(np.float64) ** 2).sum(1) / cols + 1e-5)
    np.testing.assert_allclose(outs[True][3], rstd, rtol=1e-5)


# a residual add writes the norm's input first: x = a + b (bf16) or, as the MoE's combine,
# x = a + tab[idx[row]] (a gather of bf16 rows); the totals' zero fill sits in between
RESIDUAL_ARGS = """%a: memref<64xCOLSxf32>, %b: memref<64xCOLSxbf16>, %idx: memref<64xi64>,
                %tab: memref<16xCOLSxbf16>, %xo: memref<64xCOLSxf32>"""
RESIDUAL = """%x = memref.alloc() : memref<64xCOLSxf32>
  linalg.generic {indexing_maps = [#rc, #rc, #r, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b, %idx : memref<64xCOLSxf32>, memref<64xCOLSxbf16>, memref<64xi64>)
      outs(%x : memref<64xCOLSxf32>) {
    ^bb0(%p: f32, %q: bf16, %i: i64, %o: f32):
      BODY
  }"""
_ADD = """%e = arith.extf %q : bf16 to f32
      %t = arith.addf %p, %e : f32
      linalg.yield %t : f32"""
_GATHER = """%c = linalg.index 1 : index
      %j = arith.index_cast %i : i64 to index
      %g = memref.load %tab[%j, %c] : memref<16xCOLSxbf16>
      %e = arith.extf %g : bf16 to f32
      %t = arith.addf %p, %e : f32
      linalg.yield %t : f32"""


@pytest.mark.parametrize("cols,body", [(768, "add"), (768, "gather"), (64, "add")])
def test_row_reduction_written_by_its_warps(cols, body):
    """The residual add before RMSNorm runs in the norm's launch too (row-writers): each
    lane computes, stores and sums its chunks of the row (a gather's rows read a vector a
    chunk), and the normalization reads back what the same lane stored — one launch, the
    same bits as the add's own launch (row-writers=false), float64's values to rounding."""
    text = RMS_NORM.replace("ARGS", RESIDUAL_ARGS).replace("READ", "%r")
    text = text.replace("WRITER", RESIDUAL.replace("BODY", _ADD if body == "add" else _GATHER))
    text = text.replace("KEEP", "memref.copy %x, %xo : memref<64xCOLSxf32> to "
                                "memref<64xCOLSxf32>").replace("COLS", str(cols))
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, cols)).astype(np.float32)
    b = torch.from_numpy(rng.standard_normal((64, cols))).bfloat16().float().numpy()
    idx = rng.integers(0, 16, 64).astype(np.int64)
    tab = torch.from_numpy(rng.standard_normal((16, cols))).bfloat16().float().numpy()
    w = rng.standard_normal(cols).astype(np.float32)
    hosts, outs = _with_and_without(text, "row-writers", [
        a, b, idx, tab, np.zeros((64, cols), np.float32), w,
        np.zeros((64, cols), np.float32), np.zeros(64, np.float32)])
    fused, apart = hosts[True], hosts[False]
    # the add is inside the norm's launch, not a generic of its own
    assert apart.count("linalg.generic") == fused.count("linalg.generic") + 1
    assert fused.count("gpu.launch ") == apart.count("gpu.launch ") == 1
    if body == "gather":
        assert "vector<4xbf16>" in fused.split("gpu.terminator")[0]
    for got, want in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(got, want)
    xo, y = outs[True][4], outs[True][6]
    x = a.astype(np.float64) + (b if body == "add" else tab[idx])
    rstd = 1 / np.sqrt((x ** 2).sum(1) / cols + 1e-5)
    assert float(np.abs(xo - x).max()) < 1e-5
    ref = x * rstd[:, None] * w
    assert float(np.abs(y - ref).max() / np.abs(ref).max()) < 8e-3


# the row sums of g * w * x into a zero-filled %s (G: the gradient buffer's name)
_ROW_SUMS = """  %s = memref.alloc() : memref<64xf32>
  linalg.generic {indexing_maps = [#v], iterator_types = ["parallel"]} outs(%s : memref<64xf32>) {
    ^bb0(%o: f32):
      linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#rc, #c, #rc, #r], iterator_types = ["parallel", "reduction"]}
      ins(G, %w, %x : memref<64xCOLSxf32>, memref<COLSxf32>, memref<64xCOLSxf32>)
      outs(%s : memref<64xf32>) {
    ^bb0(%a: f32, %b: f32, %e: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      %q = arith.mulf %p, %e : f32
      %t = arith.addf %q, %o : f32
      linalg.yield %t : f32
  }
"""


# RMSNorm's backward as TinyMoE's has it: the row sums of g * w * x (zero-filled first),
# then the input gradient accumulated IN PLACE into the residual stream's gradient %dx:
# dx += g * w * rstd + x * s * c[row] (c: -rstd^3 / n, a per-row input of the forward).
# OUT is what the reader writes: %dx (in place), or %x (the reduction's own input: refused)
NORM_BACKWARD = """
#rc = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#c = affine_map<(d0, d1) -> (d1)>
#v = affine_map<(d0) -> (d0)>
func.func @main(%x: memref<64xCOLSxf32>, %g: memref<64xCOLSxf32>, %w: memref<COLSxf32>,
                %rstd: memref<64xf32>, %k: memref<64xf32>, %dx: memref<64xCOLSxf32>,
                %so: memref<64xf32>, %bo: memref<64xCOLSxbf16>) {
  %zero = arith.constant 0.0 : f32
ROW_SUMS
  linalg.generic {indexing_maps = [#rc, #rc, #c, #r, #r, #rc, #r, #rc],
                  iterator_types = ["parallel", "parallel"]}
      ins(OUT, %g, %w, %rstd, %s, %x, %k : memref<64xCOLSxf32>, memref<64xCOLSxf32>,
          memref<COLSxf32>, memref<64xf32>, memref<64xf32>, memref<64xCOLSxf32>,
          memref<64xf32>)
      outs(OUT : memref<64xCOLSxf32>) {
    ^bb0(%d: f32, %a: f32, %b: f32, %rs: f32, %t: f32, %e: f32, %kk: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      %q = arith.mulf %p, %rs : f32
      %u = arith.mulf %e, %t : f32
      %y = arith.mulf %u, %kk : f32
      %z = arith.addf %d, %q : f32
      %r = arith.addf %z, %y : f32
      linalg.yield %r : f32
  }
  FOLLOWER
  memref.copy %s, %so : memref<64xf32> to memref<64xf32>
  return
}
""".replace("ROW_SUMS\n", _ROW_SUMS.replace("G,", "%g,"))
# the stream's gradient rounded to bf16 for the next product, after the accumulation
CAST = """%b16 = memref.alloc() : memref<64xCOLSxbf16>
  linalg.generic {indexing_maps = [#rc, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%dx : memref<64xCOLSxf32>) outs(%b16 : memref<64xCOLSxbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %t = arith.truncf %a : f32 to bf16
      linalg.yield %t : bf16
  }
  memref.copy %b16, %bo : memref<64xCOLSxbf16> to memref<64xCOLSxbf16>"""


@pytest.mark.parametrize("cols,out", [(768, "%dx"), (64, "%dx"), (768, "%x")])
def test_row_reduction_read_in_place_by_its_warps(cols, out):
    """RMSNorm's backward: its input gradient, accumulated in place into the residual
    stream's gradient, runs in the launch of the row sums it reads (row-readers) — each
    lane reads its chunk of ``dx`` before it stores it — with the same bits as its own
    launch (in-place-readers=false) and float64's values to f32 rounding.  A reader writing in
    place a buffer the reduction reads (``x``: other warps may still be reading their rows)
    keeps its own launch."""
    text = NORM_BACKWARD.replace("OUT", out).replace("FOLLOWER", "").replace(
        ", %bo: memref<64xCOLSxbf16>", "").replace("COLS", str(cols))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, cols)).astype(np.float32)
    g = rng.standard_normal((64, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    rstd = rng.uniform(0.5, 2, 64).astype(np.float32)
    k = rng.standard_normal(64).astype(np.float32)
    dx = rng.standard_normal((64, cols)).astype(np.float32)
    hosts, outs = _with_and_without(text, "in-place-readers", [
        x, g, w, rstd, k, dx, np.zeros(64, np.float32)])
    fused, apart = hosts[True], hosts[False]
    for a, b in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(a, b)
    reader_in_launch = "arith.addf" in fused.split("gpu.terminator")[0].split("gpu.shuffle")[-1]
    if out == "%x":
        assert fused.count("linalg.generic") == apart.count("linalg.generic")
        return
    assert apart.count("linalg.generic") == fused.count("linalg.generic") + 1
    assert reader_in_launch
    s = (g.astype(np.float64) * w * x).sum(1)
    ref = dx + g * w * rstd[:, None] + x * s[:, None] * k[:, None]
    np.testing.assert_allclose(outs[True][5], ref, rtol=0, atol=2e-4 * np.abs(ref).max())
    np.testing.assert_allclose(outs[True][6], s, rtol=0, atol=2e-4 * np.abs(s).max())


@pytest.mark.parametrize("cols", [768, 64])
def test_row_reader_followed_by_its_rounding(cols):
    """The bf16 rounding of the accumulated gradient (the next product's operand) runs in
    the same lanes: they store the f32 element and its rounding (``vector<4xbf16>`` where
    8 lanes share a row's chunks, 16-byte-aligned runs of 4) — the same bits as the
    rounding's own launch, and one launch in all."""
    text = NORM_BACKWARD.replace("OUT", "%dx").replace("FOLLOWER", CAST)
    text = text.replace("COLS", str(cols))
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((64, cols)).astype(np.float32),
            rng.standard_normal((64, cols)).astype(np.float32),
            rng.standard_normal(cols).astype(np.float32),
            rng.uniform(0.5, 2, 64).astype(np.float32),
            rng.standard_normal(64).astype(np.float32),
            rng.standard_normal((64, cols)).astype(np.float32),
            np.zeros(64, np.float32), np.zeros((64, cols), np.float32)]
    hosts, outs = _with_and_without(text, "row-readers", args)
    fused, apart = hosts[True], hosts[False]
    for a, b in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(a, b)
    assert "arith.truncf" in fused.split("gpu.terminator")[0]
    # the reader and the rounding are folded (the copy of the rounding into %bo reads the
    # rounding, not the reader: a launch of its own)
    assert apart.count("linalg.generic") == fused.count("linalg.generic") + 2
    dx = outs[True][5]
    np.testing.assert_array_equal(outs[True][7],
                                  torch.from_numpy(dx).bfloat16().float().numpy())


# TinyMoE's norm backward in full: the elementwise op writing the norm's output gradient
# %gg (the router's input gradient added to the experts', as two inputs here), the norm
# weight's gradient (a column reduction over %gg, between the writer and the row sums),
# the row sums, the input gradient accumulated in place and rounded to bf16
NORM_BACKWARD_WRITTEN = """
#rc = affine_map<(d0, d1) -> (d0, d1)>
#cr = affine_map<(d0, d1) -> (d1, d0)>
#r = affine_map<(d0, d1) -> (d0)>
#c = affine_map<(d0, d1) -> (d1)>
#c0 = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
func.func @main(%x: memref<64xCOLSxf32>, %g: memref<64xCOLSxf32>, %h: memref<64xCOLSxbf16>,
                %w: memref<COLSxf32>, %rstd: memref<64xf32>, %dx: memref<64xCOLSxf32>,
                %wg: memref<COLSxf32>, %ggo: memref<64xCOLSxf32>, %bo: memref<64xCOLSxbf16>) {
  %zero = arith.constant 0.0 : f32
  %gg = memref.alloc() : memref<64xCOLSxf32>
  linalg.generic {indexing_maps = [#rc, #rc, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%g, %h : memref<64xCOLSxf32>, memref<64xCOLSxbf16>) outs(%gg : memref<64xCOLSxf32>) {
    ^bb0(%a: f32, %b: bf16, %o: f32):
      %e = arith.extf %b : bf16 to f32
      %t = arith.addf %a, %e : f32
      linalg.yield %t : f32
  }
  linalg.generic {indexing_maps = [#cr, #cr, #c0], iterator_types = ["parallel", "reduction"]}
      ins(%gg, %x : memref<64xCOLSxf32>, memref<64xCOLSxf32>) outs(%wg : memref<COLSxf32>) {
    ^bb0(%a: f32, %e: f32, %o: f32):
      %p = arith.mulf %a, %e : f32
      %t = arith.addf %p, %o : f32
      linalg.yield %t : f32
  }
ROW_SUMS
  linalg.generic {indexing_maps = [#rc, #rc, #c, #r, #r, #rc, #rc],
                  iterator_types = ["parallel", "parallel"]}
      ins(%dx, %gg, %w, %rstd, %s, %x : memref<64xCOLSxf32>, memref<64xCOLSxf32>,
          memref<COLSxf32>, memref<64xf32>, memref<64xf32>, memref<64xCOLSxf32>)
      outs(%dx : memref<64xCOLSxf32>) {
    ^bb0(%d: f32, %a: f32, %b: f32, %rs: f32, %t: f32, %e: f32, %o: f32):
      %p = arith.mulf %a, %b : f32
      %q = arith.mulf %p, %rs : f32
      %u = arith.mulf %e, %t : f32
      %z = arith.addf %d, %q : f32
      %r = arith.subf %z, %u : f32
      linalg.yield %r : f32
  }
  %b16 = memref.alloc() : memref<64xCOLSxbf16>
  linalg.generic {indexing_maps = [#rc, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%dx : memref<64xCOLSxf32>) outs(%b16 : memref<64xCOLSxbf16>) {
    ^bb0(%a: f32, %o: bf16):
      %t = arith.truncf %a : f32 to bf16
      linalg.yield %t : bf16
  }
  memref.copy %b16, %bo : memref<64xCOLSxbf16> to memref<64xCOLSxbf16>
  memref.copy %gg, %ggo : memref<64xCOLSxf32> to memref<64xCOLSxf32>
  return
}
""".replace("ROW_SUMS\n", _ROW_SUMS.replace("G,", "%gg,"))


@pytest.mark.parametrize("cols", [768, 64])
def test_norm_backward_in_one_launch(cols):
    """The writer of the norm's output gradient runs in the row sums' launch although the
    norm weight's gradient (a column reduction over that gradient) sits between them: the
    column reduction moves after the launch, which writes the gradient it reads.  With
    row-writers the row sums, the writer, the in-place reader and the rounding are one
    launch (the column reduction another), the same bits as apart."""
    text = NORM_BACKWARD_WRITTEN.replace("COLS", str(cols))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, cols)).astype(np.float32)
    g = rng.standard_normal((64, cols)).astype(np.float32)
    h = torch.from_numpy(rng.standard_normal((64, cols))).bfloat16().float().numpy()
    w = rng.standard_normal(cols).astype(np.float32)
    rstd = rng.uniform(0.5, 2, 64).astype(np.float32)
    dx = rng.standard_normal((64, cols)).astype(np.float32)
    wg = rng.standard_normal(cols).astype(np.float32)
    args = [x, g, h, w, rstd, dx, wg, np.zeros((64, cols), np.float32),
            np.zeros((64, cols), np.float32)]
    hosts, outs = _with_and_without(text, "row-writers", args)
    fused, apart = hosts[True], hosts[False]
    for a, b in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(a, b)
    assert apart.count("linalg.generic") == fused.count("linalg.generic") + 1
    launches = fused.split("gpu.launch ")
    assert len(launches) == 3                # the row sums' launch, then the columns'
    assert "arith.extf" in launches[1] and "arith.truncf" in launches[1]
    gg = g.astype(np.float64) + h
    s = (gg * w * x).sum(1)
    np.testing.assert_allclose(outs[True][6], wg + (gg * x).sum(0), rtol=0,
                               atol=1e-4 * np.abs(wg + (gg * x).sum(0)).max())
    ref = dx + gg * w * rstd[:, None] - x * s[:, None]
    np.testing.assert_allclose(outs[True][5], ref, rtol=0, atol=2e-4 * np.abs(ref).max())


def test_unrolled_chunks_load_before_they_store():
    """In the norm backward's launch (test above) each unrolled copy of a lane's chunk loop
    loads before any copy stores: the loads of four chunks in flight at once, not one chunk's
    loads after the previous chunk's store (which waited for its loads).  The values are the
    test above's (the same bits as the launches apart)."""
    with formed(NORM_BACKWARD_WRITTEN.replace("COLS", "768"),
                "builtin.module(latch-wrap-host-compute)") as m:
        launch = str(m).split("gpu.launch ")[1]
    unrolled = 0
    for body in launch.split("scf.for")[1:]:
        ops = "".join("S" if "store" in o else "L" for o in re.findall(
            r"(?:vector|memref)\.(?:load|store)", body.split("scf.yield")[0]))
        assert "SL" not in ops, ops       # every load before the loop's first store
        unrolled += ops.count("S") >= 4   # four copies: the sums' pass, the reader's
    assert unrolled == 2


# a gradient's sum of squares for the global norm (full sum into a 0-d buffer), over bf16
SUM_OF_SQUARES = """
#x = affine_map<(d0, d1) -> (MAP)>
#o = affine_map<(d0, d1) -> ()>
func.func @main(%x: memref<SHAPExbf16>, %o: memref<f32>) {
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["reduction", "reduction"]}
      ins(%x : memref<SHAPExbf16>) outs(%o : memref<f32>) {
  ^bb0(%a: bf16, %acc: f32):
    %e = arith.extf %a : bf16 to f32
    %q = arith.mulf %e, %e : f32
    %r = arith.addf %acc, %q : f32
    linalg.yield %r : f32
  }
  return
}
"""


@pytest.mark.parametrize("rows,cols,transposed", [(64, 1024, False), (3, 40, False),
                                                  (64, 1024, True)])
def test_full_sum_reads_chunks(rows, cols, transposed):
    """A full sum takes chunks of 8 consecutive bf16 a thread (one 16-byte load) when its
    last loop walks the input's contiguous last dimension; a transposed read keeps one
    element a load.  Either way the sum is float64's to float32 rounding, in a fixed order
    (two runs give the same bits)."""
    shape = (cols, rows) if transposed else (rows, cols)
    text = SUM_OF_SQUARES.replace("SHAPE", f"{shape[0]}x{shape[1]}").replace(
        "MAP", "d1, d0" if transposed else "d0, d1")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(*shape, generator=g, dtype=torch.float64).bfloat16()
    with formed(text, "builtin.module(latch-wrap-host-compute)") as m:
        host = str(m)
        assert "gpu.all_reduce" in host and "linalg.generic" not in host
        assert ("vector<8xbf16>" in host) == (not transposed and cols % 8 == 0)
        got = []
        for _ in range(2):
            sim = Simt(m)
            sim.run([x.float().numpy().astype(np.float32), np.zeros((), np.float32)])
            got.append(float(np.asarray(sim.arguments[1])))
    want = float((x.double() ** 2).sum())
    assert got[0] == got[1]
    assert abs(got[0] - want) <= 1e-5 * want


@pytest.mark.parametrize("last_block", [True, False])
def test_full_sum_finished_by_its_last_block(last_block):
    """A full sum over several blocks (64 x 1024: 32 blocks of partial sums): with
    ``last-block-sums`` (the default) one launch — each block's thread 0 stores its partial,
    fences, takes a ticket; the block holding the last ticket fences again, sums the
    partials and resets the ticket counter to 0 for the next launch — else a second,
    one-block launch sums them.  The same bits either way (the same order), float64's sum
    to float32 rounding; three launches in a row each see the counter at 0.  Without the
    last block's second fence the simulator reports the read of the other blocks'
    partials as a race."""
    from mlir import ir

    from latch.pipeline import run_pipeline
    from simt import Race

    text = SUM_OF_SQUARES.replace("SHAPE", "64x1024").replace("MAP", "d0, d1")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 1024, generator=g, dtype=torch.float64).bfloat16()
    want = float((x.double() ** 2).sum())
    with formed(text, "builtin.module(latch-wrap-host-compute{"
                f"last-block-sums={str(last_block).lower()}}})") as m:
        host = str(m)
        assert host.count("gpu.launch blocks") == (1 if last_block else 2)
        assert host.count("nvvm.memory.barrier") == (2 if last_block else 0)
        sim = Simt(m)
        out = np.zeros((), np.float32)
        got = []
        for _ in range(3):                 # the counter back at 0 after each launch
            sim.run([x.float().numpy().astype(np.float32), np.zeros((), np.float32)])
            got.append(float(np.asarray(sim.arguments[1])))
        assert got[0] == got[1] == got[2]
        assert abs(got[0] - want) <= 1e-5 * want
        if last_block:
            two = ir.Module.parse(text)
            run_pipeline(two, "builtin.module(latch-wrap-host-compute{last-block-sums=false})")
            sim2 = Simt(two)
            sim2.run([x.float().numpy().astype(np.float32), out])
            assert float(np.asarray(sim2.arguments[1])) == got[0]   # the same bits
            at = host.rindex("nvvm.memory.barrier")     # the last block's acquire, gone
            unfenced = ir.Module.parse(host[:at] + host[at:].split("\n", 1)[1])
            with pytest.raises(Race, match="another block wrote"):
                Simt(unfenced).run([x.float().numpy().astype(np.float32),
                                    np.zeros((), np.float32)])


# the same two reductions followed by a cross-entropy gradient of the same rows (what
# latch-hoist-row-readers leaves): softmax minus the one-hot of the target, times a per-row
# weight, rounded to bf16; the one-hot from the loop index (an arange recomputed)
SOFTMAX_GRAD = SOFTMAX.replace(
    "%s: memref<ROWSxf32>) {",
    "%s: memref<ROWSxf32>, %t: memref<ROWSxi64>, %w: memref<ROWSxf32>, "
    "%g: memref<ROWSxCOLSxbf16>) {").replace("""  return
}""", """  linalg.generic {indexing_maps = [#x, #r, #r, #r, #r, #x],
                  iterator_types = ["parallel", "parallel"]}
      ins(%x, %m, %s, %t, %w : memref<ROWSxCOLSxbf16>, memref<ROWSxf32>, memref<ROWSxf32>,
          memref<ROWSxi64>, memref<ROWSxf32>) outs(%g : memref<ROWSxCOLSxbf16>) {
  ^bb0(%a: bf16, %mm: f32, %ss: f32, %tt: i64, %ww: f32, %o: bf16):
    %k = linalg.index 1 : index
    %ki = arith.index_cast %k : index to i64
    %hit = arith.cmpi eq, %ki, %tt : i64
    %one = arith.constant 1.0 : f32
    %zf = arith.constant 0.0 : f32
    %oh = arith.select %hit, %one, %zf : f32
    %e = arith.extf %a : bf16 to f32
    %d = arith.subf %e, %mm : f32
    %p = math.exp %d : f32
    %q = arith.divf %p, %ss : f32
    %r = arith.subf %q, %oh : f32
    %y = arith.mulf %r, %ww : f32
    %b = arith.truncf %y : f32 to bf16
    linalg.yield %b : bf16
  }
  return
}""")


@pytest.mark.parametrize("cols,held_chunks,staged_rows,held", [
    (4096, 16, 0, "registers"), (4096, 0, 0, "no"), (2048 * 20, 16, 0, "no"),
    (4096, 0, 96 * 1024, "shared"), (2048 * 20, 0, 96 * 1024, "shared"),
    (2048 * 20, 0, 2048 * 20 * 2 - 2, "no")])
def test_softmax_reader_in_the_sums_launch(cols, held_chunks, staged_rows, held):
    """passes/online_softmax_sums.py with a reader: one launch computes the row max, the sum
    and the cross-entropy gradient of each row (the row's 8-element chunks kept in
    registers up to ``held-chunks`` chunks a thread; else in dynamic shared memory for rows
    of up to ``staged-rows`` bytes, each thread reading back its own chunks — the default;
    else read again), the gradient stored 8 bf16 a store; max and sum as the two-pass
    form's, the gradient as float64's rounded to bf16 (one bf16 ulp)."""
    rows = 3
    text = SOFTMAX_GRAD.replace("ROWS", str(rows)).replace("COLS", str(cols))
    with formed(text, "builtin.module(latch-wrap-host-compute{"
                f"held-chunks={held_chunks} staged-rows={staged_rows}}})") as m:
        host = str(m).split("gpu.module")[0]
        launches = re.findall(r"gpu.launch blocks\(.*?\) in \(%\w+ = %c(\d+)", host)
        assert launches == [str(rows)]                 # one launch: sums and gradient
        assert "outs(%arg5" not in host                # no generic left writing it
        assert host.count("scf.for") == (0 if held == "registers" else 2)
        assert "vector.store" in host and "vector<8xbf16>" in host
        assert ("gpu.dynamic_shared_memory" in host) == (held == "shared")
        # staged: the logits read from global memory by the sums' loop only (softmax-unroll
        # vector loads an iteration: 2 of a thread's 2 chunks at 4096 columns, 4 of 20 at
        # 40960); not held: by the reader's loop again (held in registers: loops unrolled)
        if held != "registers":
            sums_loop, reader_loop = host.split("scf.for")[1:3]
            reads = re.findall(r"(?:vector|memref).load %arg0", sums_loop)
            assert len(reads) == (2 if cols == 4096 else 4), reads
            again = re.findall(r"(?:vector|memref).load %arg0", reader_loop)
            assert (len(again) == 0) == (held == "shared"), again
        g = torch.Generator().manual_seed(3)
        x = (torch.randn(rows, cols, generator=g, dtype=torch.float64) * 4).bfloat16()
        x[1, 100:] = float("-inf")
        t = torch.tensor([5, 7, cols - 1])
        w = torch.tensor([0.5, -2.0, 1.0 / 3.0], dtype=torch.float32)
        mx = np.zeros(rows, np.float32)
        sx = np.zeros(rows, np.float32)
        gx = np.zeros((rows, cols), np.float32)
        sim = Simt(m)
        sim.run([x.float().numpy(), mx, sx, t.numpy().astype(np.int64), w.numpy(), gx])
        got_g = torch.from_numpy(np.asarray(sim.arguments[5], np.float64))
        got_m = torch.from_numpy(np.asarray(sim.arguments[1], np.float64))
    xd = x.double()
    assert torch.equal(got_m, xd.max(dim=1).values)
    p = torch.softmax(xd, dim=1)
    want = (p - torch.nn.functional.one_hot(t, cols).double()) * w.double()[:, None]
    err = (got_g - want).abs() / want.abs().clamp_min(1e-30)
    assert float(err[want.abs() > 1e-30].max()) < 2 ** -7, float(err.max())
    assert torch.equal(got_g == 0, want.bfloat16().double() == 0)


@pytest.mark.parametrize("on", [True, False])
def test_class_sums_one_thread_per_row_of_classes(on):
    """passes/class_sums.py (``class-sums``): the routing rank's count, split by expert,
    becomes one thread per (b, t) with the 8 classes' accumulators — 128 threads, not 1,024
    — each term's L and x loaded once; integer sums, so exactly the count.  Off: the sum
    is left to the loops (one thread per output)."""
    from test_split_integer_sums import TEXT   # the routing rank's sum: [8, 16, 8] outputs

    rng = np.random.default_rng(4)
    L = np.tril(np.ones((16, 16), np.int64))[:8] * rng.integers(1, 4, (8, 16))
    x = rng.integers(0, 9, (16, 16)).astype(np.int64)      # 8: a class no s names
    s = np.arange(8, dtype=np.int64)[::-1].copy()
    o = rng.integers(-5, 5, (8, 16, 8)).astype(np.int64)
    with formed(TEXT.replace("TY", "i64").replace("COMBINE", "arith.addi").replace("J", "16"),
                f"builtin.module(latch-wrap-host-compute{{class-sums={str(on).lower()}}})") as m:
        host = str(m).split("gpu.module")[0]
        assert ("linalg.generic" not in host) == on
        if not on:
            return
        assert re.search(r"gpu.launch blocks\(.*\) in \(%\w+ = %c1\w*,.*threads\(.*\) in "
                         r"\(%\w+ = %c256,", host)
        assert host.count("arith.select") == 8 and host.count("memref.load %arg0") == 1
        sim = Simt(m)
        sim.run([L, x, s, o.copy()])
        got = np.asarray(sim.arguments[3])
    ref = o + np.einsum("bk,tkc->btc", L, (x[:, :, None] == s[None, None, :]).astype(np.int64))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("cols", [768, 64])
def test_held_rows_take_the_first_pass_loads(cols):
    """``held-rows``: the norm backward's launch (the test above) with its rows walked
    whole (768 columns: 6 chunks of 4 a lane; 64: 2 chunks of 4 a lane of a group of 8)
    has no loops, and the reader's loads of the rows the row sums read (x, w) are the
    first pass's values, its loads of the gradient the writer stored the stored values
    (passes/forward_loads.py): the same bits as with the rows read again."""
    text = NORM_BACKWARD_WRITTEN.replace("COLS", str(cols))
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((64, cols)).astype(np.float32),
            rng.standard_normal((64, cols)).astype(np.float32),
            torch.from_numpy(rng.standard_normal((64, cols))).bfloat16().float().numpy(),
            rng.standard_normal(cols).astype(np.float32),
            rng.uniform(0.5, 2, 64).astype(np.float32),
            rng.standard_normal((64, cols)).astype(np.float32),
            rng.standard_normal(cols).astype(np.float32),
            np.zeros((64, cols), np.float32), np.zeros((64, cols), np.float32)]
    hosts, outs = _with_and_without(text, "held-rows", args)
    for a, b in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(a, b)

    def reader_loads(host):
        """The launch's loads after the row total's store (the reader's), and whether it
        has loops."""
        launch = host.split("gpu.launch ")[1].split("gpu.terminator")[0]
        ops = re.findall(r"(?:vector|memref)\.(?:load|store) [^\n]*", launch)
        total = next(i for i, o in enumerate(ops) if "memref.store" in o and "xf32>" in o
                     and re.search(r"\[%\w+\] : memref<64xf32>", o))
        return [o for o in ops[total:] if "load" in o], "scf.for" in launch

    (held, held_loops), (again, _) = reader_loads(hosts[True]), reader_loads(hosts[False])
    assert not held_loops
    # x (%arg0) and w (%arg3), which the row sums read, are not loaded again when held
    assert any("%arg0[" in o for o in again) and any("%arg3[" in o for o in again)
    assert not any("%arg0[" in o or "%arg3[" in o for o in held), held
    assert any("%arg5[" in o for o in held)        # dx, read in place, still loaded
    # and the output gradient the writer stored is its stored value, not read back: the
    # reader loads only dx and rstd (%arg4)
    assert all("%arg5[" in o or "%arg4[" in o for o in held), held


def _forward_loads_in(text: str) -> tuple[int, str]:
    """forward_loads on the body of the one function of ``text``: (loads forwarded, the
    module's text after)."""
    from mlir import ir

    import latch.dialect
    from latch.passes.forward_loads import forward_loads

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        forwarded = forward_loads(m.body.operations[0].regions[0].blocks[0])
        return forwarded, str(m)


def test_forward_loads_stops_at_a_store_that_may_write_the_buffer():
    """forward_loads keeps an earlier load only while nothing in between may write its
    buffer: a store to the same buffer (or one nested in an scf.if) forgets it, a store to
    another buffer does not; a repeated pure op is replaced by the first."""
    text = """
func.func @main(%a: memref<8xf32>, %b: memref<8xf32>, %c: i1) {
  %i = arith.constant 1 : index
  %x0 = memref.load %a[%i] : memref<8xf32>
  memref.store %x0, %b[%i] : memref<8xf32>
  %j = arith.constant 1 : index
  %x1 = memref.load %a[%j] : memref<8xf32>
  scf.if %c {
    memref.store %x1, %a[%i] : memref<8xf32>
  }
  %x2 = memref.load %a[%i] : memref<8xf32>
  %y = arith.addf %x0, %x1 : f32
  %z = arith.addf %y, %x2 : f32
  memref.store %z, %b[%i] : memref<8xf32>
  return
}"""
    forwarded, out = _forward_loads_in(text)
    assert forwarded == 1
    assert out.count("memref.load") == 2 and out.count("arith.constant") == 1
    assert re.search(r"arith\.addf (%\w+), \1 : f32", out), out     # x1 is x0


def test_forward_loads_reads_back_what_the_lane_stored():
    """A load of the element a store at the block's top level just wrote (same buffer,
    indices and type) takes the stored value; a store nested in an scf.if only forgets."""
    text = """
func.func @main(%a: memref<8xf32>, %b: memref<8xf32>, %c: i1, %v: vector<4xf32>) {
  %i = arith.constant 4 : index
  vector.store %v, %a[%i] : memref<8xf32>, vector<4xf32>
  %x = vector.load %a[%i] : memref<8xf32>, vector<4xf32>
  vector.store %x, %b[%i] : memref<8xf32>, vector<4xf32>
  scf.if %c {
    vector.store %v, %b[%i] : memref<8xf32>, vector<4xf32>
  }
  %y = vector.load %b[%i] : memref<8xf32>, vector<4xf32>
  vector.store %y, %a[%i] : memref<8xf32>, vector<4xf32>
  return
}"""
    forwarded, out = _forward_loads_in(text)
    assert forwarded == 1
    assert out.count("vector.load") == 1 and "vector.store %arg3, %arg1" in out
