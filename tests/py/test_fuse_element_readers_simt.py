"""latch-fuse-element-readers (passes/fuse_element_readers.py): an op reading, element for
element through a reshape, what a thread-per-element reduction just stored runs in the
reduction's threads.  The kernels of ``latch-form-kernels`` run on the CPU by the SIMT
interpreter (tests/py/simt.py, which fails a read of an element another thread wrote in
the same launch) with and without the pass: the same integers, numpy's, and one launch
fewer — the shape of TinyMoE's routing rank (a count over the experts as ``[T, E]``, read
flattened to decide each slot's place)."""
from __future__ import annotations

import numpy as np
import pytest

from simt import Simt
from test_fold_zero_fills_simt import zero_filled_counts

T, K, E, CAP = 16, 64, 8, 5
TEXT = f"""
#x = affine_map<(t, e, k) -> (t, k)>
#o = affine_map<(t, e, k) -> (t, e)>
#id = affine_map<(t, e) -> (t, e)>
#v = affine_map<(i) -> (i)>
func.func @main(%x: memref<{T}x{K}xi64>, %ex: memref<{T * E}xi64>, %slot: memref<{T * E}xi64>,
                %kept: memref<{T * E}xi8>) {{
  %zi = arith.constant 0 : i64
  %cap = arith.constant {CAP} : i64
  %e8 = arith.constant {E} : i64
  %none = arith.constant -1 : i64
{zero_filled_counts(T, K, E)}  %flat = memref.collapse_shape %buf [[0, 1]] : memref<{T}x{E}xi64> into memref<{T * E}xi64>
  linalg.generic {{indexing_maps = [#v, #v, #v, #v], iterator_types = ["parallel"]}}
      ins(%flat, %ex : memref<{T * E}xi64>, memref<{T * E}xi64>)
      outs(%slot, %kept : memref<{T * E}xi64>, memref<{T * E}xi8>) {{
  ^bb0(%r: i64, %q: i64, %o: i64, %k: i8):
    %keep = arith.cmpi slt, %r, %cap : i64
    %base = arith.muli %q, %e8 : i64
    %at = arith.addi %base, %r : i64
    %s = arith.select %keep, %at, %none : i64
    %k8 = arith.extui %keep : i1 to i8
    linalg.yield %s, %k8 : i64, i8
  }}
  return
}}
"""

# the reader also clamps the counts in place (%flat is its input and its output, as the
# backward's replay of TinyMoE's rank writes its input), and the counts are copied out
N = T * E
IN_PLACE = f"""
#x = affine_map<(t, e, k) -> (t, k)>
#o = affine_map<(t, e, k) -> (t, e)>
#id = affine_map<(t, e) -> (t, e)>
#v = affine_map<(i) -> (i)>
func.func @main(%x: memref<{T}x{K}xi64>, %ex: memref<{N}xi64>, %slot: memref<{N}xi64>,
                %kept: memref<{N}xi8>, %clamped: memref<{T}x{E}xi64>) {{
  %zi = arith.constant 0 : i64
  %cap = arith.constant {CAP} : i64
  %e8 = arith.constant {E} : i64
  %none = arith.constant -1 : i64
{zero_filled_counts(T, K, E)}  %flat = memref.collapse_shape %buf [[0, 1]] : memref<{T}x{E}xi64> into memref<{N}xi64>
  linalg.generic {{indexing_maps = [#v, #v, #v, #v, #v], iterator_types = ["parallel"]}}
      ins(%flat, %ex : memref<{N}xi64>, memref<{N}xi64>)
      outs(%slot, %kept, %flat : memref<{N}xi64>, memref<{N}xi8>, memref<{N}xi64>) {{
  ^bb0(%r: i64, %q: i64, %o: i64, %k: i8, %old: i64):
    %keep = arith.cmpi slt, %r, %cap : i64
    %base = arith.muli %q, %e8 : i64
    %at = arith.addi %base, %r : i64
    %s = arith.select %keep, %at, %none : i64
    %k8 = arith.extui %keep : i1 to i8
    %c = arith.select %keep, %r, %cap : i64
    linalg.yield %s, %k8, %c : i64, i8, i64
  }}
  memref.copy %buf, %clamped : memref<{T}x{E}xi64> to memref<{T}x{E}xi64>
  return
}}
"""

FORM = ("builtin.module(latch-wrap-host-compute, latch-forward-zero-fills, "
        "latch-form-contraction-kernels, func.func(convert-linalg-to-parallel-loops), "
        "latch-register-accumulators, latch-fold-zero-fills, {PASS}latch-split-integer-sums, "
        "latch-unroll-short-loops, latch-map-parallel-loops{{block=32,8}}, lower-affine, "
        "canonicalize, cse)")


def _run(with_pass: bool, text: str = TEXT):
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, FORM.format(PASS="latch-fuse-element-readers, " if with_pass else ""))
        launches = str(m).count("gpu.launch ")
        rng = np.random.default_rng(7)
        x = rng.integers(0, E + 1, size=(T, K)).astype(np.int64)
        ex = rng.integers(0, 100, size=T * E).astype(np.int64)
        sim = Simt(m)
        args = [x, ex, np.full(T * E, 99, np.int64), np.full(T * E, 7, np.int8)]
        if text is IN_PLACE:
            args.append(np.full((T, E), 99, np.int64))
        sim.run(args)
        out = [np.asarray(a) for a in sim.arguments[2:]]
    return launches, x, ex, *out


@pytest.fixture(scope="module")
def both():
    return _run(True), _run(False)


def test_reader_in_the_reductions_threads_same_values(both):
    (_, x, ex, slot, kept), (_, _, _, slot_off, kept_off) = both
    np.testing.assert_array_equal(slot, slot_off)
    np.testing.assert_array_equal(kept, kept_off)
    counts = (x[:, None, :] == np.arange(E)[None, :, None]).sum(-1).reshape(-1)
    np.testing.assert_array_equal(kept, (counts < CAP).astype(np.int8))
    np.testing.assert_array_equal(slot, np.where(counts < CAP, ex * E + counts, -1))


def test_reader_is_a_launch_fewer(both):
    (n_on, *_), (n_off, *_) = both
    assert n_on == n_off - 1, (n_on, n_off)



def test_reader_writing_what_it_reads_stays_apart():
    """A reader that also overwrites the counts it reads (the backward's replay of the rank
    writes its input so) keeps its launch: fused, the counts' buffer would be stored twice
    in one kernel, and latch-nonfinite-checks checks every store of a state buffer in the
    kernel that writes it last.  Both ways still compute numpy's integers."""
    n_on, x, ex, slot, kept, clamped = _run(True, IN_PLACE)
    n_off, *_ = _run(False, IN_PLACE)
    assert n_on == n_off
    counts = (x[:, None, :] == np.arange(E)[None, :, None]).sum(-1)
    np.testing.assert_array_equal(clamped, np.minimum(counts, CAP))
    np.testing.assert_array_equal(slot, np.where(counts.reshape(-1) < CAP,
                                                 ex * E + counts.reshape(-1), -1))
