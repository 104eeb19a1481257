"""latch-fold-zero-fills (passes/fold_zero_fills.py): a zero fill read only as the next
reduction's initial values folds into it.  The kernels of ``latch-form-kernels`` run on the
CPU by the SIMT interpreter (tests/py/simt.py) with and without the pass: the same bits
(an integer count like TinyMoE's routing rank, a short f32 sum), numpy's values, and one
launch fewer per folded fill (the interpreter also fails a read of an element nothing
wrote, so a dropped fill whose zeros were still needed would not pass)."""
from __future__ import annotations

import numpy as np
import pytest

from simt import Simt, formed


def zero_filled_counts(t: int, k: int, e: int) -> str:
    """MLIR: ``%buf[t, e]`` = how many of ``%x[t, :]`` (``t x k`` i64) equal ``e`` — a zero
    fill, then an integer reduction into it (the routing rank's counts); needs ``%zi``
    (i64 0) and the maps ``#x`` ``(t, e, k) -> (t, k)``, ``#o`` ``-> (t, e)``, ``#id``."""
    return _COUNTS.replace("TT", str(t)).replace("KK", str(k)).replace("EE", str(e))


def counts_of(x, e: int):
    """numpy's :func:`zero_filled_counts`: ``[t, e]`` = how many of ``x[t, :]`` equal ``e``."""
    return (x[:, None, :] == np.arange(e)[None, :, None]).sum(-1)


_COUNTS = """  %buf = memref.alloc() : memref<TTxEExi64>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]}
      outs(%buf : memref<TTxEExi64>) {
  ^bb0(%o: i64):
    linalg.yield %zi : i64
  }
  linalg.generic {indexing_maps = [#x, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<TTxKKxi64>) outs(%buf : memref<TTxEExi64>) {
  ^bb0(%v: i64, %acc: i64):
    %e = linalg.index 1 : index
    %ei = arith.index_cast %e : index to i64
    %eq = arith.cmpi eq, %v, %ei : i64
    %one = arith.extui %eq : i1 to i64
    %s = arith.addi %acc, %one : i64
    linalg.yield %s : i64
  }
"""


T, K, E, R, C = 16, 64, 8, 48, 6
TEXT = f"""
#x = affine_map<(t, e, k) -> (t, k)>
#o = affine_map<(t, e, k) -> (t, e)>
#id = affine_map<(t, e) -> (t, e)>
#r = affine_map<(i, j) -> (i, j)>
#s = affine_map<(i, j) -> (i)>
#i1 = affine_map<(i) -> (i)>
func.func @main(%x: memref<{T}x{K}xi64>, %counts: memref<{T}x{E}xi64>,
                %y: memref<{R}x{C}xf32>, %sums: memref<{R}xf32>) {{
  %zi = arith.constant 0 : i64
  %zf = arith.constant 0.0 : f32
{zero_filled_counts(T, K, E)}  memref.copy %buf, %counts : memref<{T}x{E}xi64> to memref<{T}x{E}xi64>
  %fbuf = memref.alloc() : memref<{R}xf32>
  linalg.generic {{indexing_maps = [#i1], iterator_types = ["parallel"]}} outs(%fbuf : memref<{R}xf32>) {{
  ^bb0(%o: f32):
    linalg.yield %zf : f32
  }}
  linalg.generic {{indexing_maps = [#r, #s], iterator_types = ["parallel", "reduction"]}}
      ins(%y : memref<{R}x{C}xf32>) outs(%fbuf : memref<{R}xf32>) {{
  ^bb0(%v: f32, %acc: f32):
    %m = arith.mulf %v, %v : f32
    %a = arith.addf %acc, %m : f32
    linalg.yield %a : f32
  }}
  memref.copy %fbuf, %sums : memref<{R}xf32> to memref<{R}xf32>
  return
}}
"""

# latch-form-kernels' steps up to the kernels the interpreter runs (gpu.launch, not
# outlined); PASSES: the steps tested, after latch-register-accumulators
FORM = ("builtin.module(latch-wrap-host-compute, latch-forward-zero-fills, "
        "latch-form-contraction-kernels, func.func(convert-linalg-to-parallel-loops), "
        "latch-register-accumulators, {PASSES}latch-split-integer-sums, "
        "latch-unroll-short-loops, latch-map-parallel-loops{{block=32,8}}, lower-affine, "
        "canonicalize, cse)")


def form_and_run(text: str, passes: str, args: list) -> tuple[int, list]:
    """Form the kernels of ``text`` (with ``passes``, e.g. ``"latch-fold-zero-fills, "``,
    after latch-register-accumulators) and run them in the SIMT interpreter on ``args``:
    (launches, the arguments after the run)."""
    with formed(text, FORM.format(PASSES=passes)) as m:
        sim = Simt(m)
        sim.run(args)
        return str(m).count("gpu.launch "), [np.asarray(a) for a in sim.arguments]


def _run(with_pass: bool):
    """(launches, x, y, counts, sums) of the kernels latch-form-kernels makes, run by the
    interpreter, with or without the pass."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, E + 2, size=(T, K)).astype(np.int64)
    y = rng.standard_normal((R, C)).astype(np.float32)
    launches, out = form_and_run(
        TEXT, "latch-fold-zero-fills, " if with_pass else "",
        [x, np.full((T, E), -7, np.int64), y, np.full(R, np.nan, np.float32)])
    return launches, x, y, out[1], out[3]


@pytest.fixture(scope="module")
def both():
    return _run(True), _run(False)


def test_folded_fills_give_the_same_bits(both):
    (n_on, x, y, counts, sums), (n_off, _, _, counts_off, sums_off) = both
    np.testing.assert_array_equal(counts, counts_off)
    np.testing.assert_array_equal(sums.view(np.uint32), sums_off.view(np.uint32))
    np.testing.assert_array_equal(counts, counts_of(x, E))
    ref_sums = (y.astype(np.float64) ** 2).sum(-1)
    np.testing.assert_allclose(sums, ref_sums, rtol=1e-6)


def test_each_fill_is_a_launch_fewer(both):
    (n_on, *_), (n_off, *_) = both
    assert n_on == n_off - 2, (n_on, n_off)
