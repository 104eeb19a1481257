"""latch-fuse-element-readers (passes/fuse_element_readers.py): an op reading, element for
element through a reshape, what a thread-per-element reduction just stored runs in the
reduction's threads.  The kernels of ``latch-form-kernels`` run on the CPU by the SIMT
interpreter (tests/py/simt.py, which fails a read of an element another thread wrote in
the same launch) with and without the pass: the same integers, numpy's, and one launch
fewer — the shape of TinyMoE's routing rank (a count over the experts as ``[T, E]``, read
flattened to decide each slot's place) — and, option ``rows``, a sum of partials read a row
at a time (TinyMoE's router: its split-K logits summed one thread an element, then the
softmax one thread a token): the sum's iterations of a row run first in the reader's
thread."""
from __future__ import annotations

import numpy as np
import pytest

from test_fold_zero_fills_simt import counts_of, form_and_run, zero_filled_counts

T, K, E, CAP = 16, 64, 8, 5
N = T * E


def _text(in_place: bool) -> str:
    """The counts, then the op placing each slot from them read flattened; ``in_place``:
    that op also clamps the counts where it reads them (``%flat`` its input and its output,
    as the backward's replay of TinyMoE's rank writes its input), copied out to
    ``%clamped``."""
    def when(text: str) -> str:
        return text if in_place else ""
    clamped_arg = when(f", %clamped: memref<{T}x{E}xi64>")
    flat_map, flat_out, flat_type = when(", #v"), when(", %flat"), when(f", memref<{N}xi64>")
    old_arg, clamped, i64 = when(", %old: i64"), when(", %c"), when(", i64")
    clamp = when("    %c = arith.select %keep, %r, %cap : i64\n")
    copy = when(f"  memref.copy %buf, %clamped : memref<{T}x{E}xi64> to memref<{T}x{E}xi64>\n")
    return f"""
#x = affine_map<(t, e, k) -> (t, k)>
#o = affine_map<(t, e, k) -> (t, e)>
#id = affine_map<(t, e) -> (t, e)>
#v = affine_map<(i) -> (i)>
func.func @main(%x: memref<{T}x{K}xi64>, %ex: memref<{N}xi64>, %slot: memref<{N}xi64>,
                %kept: memref<{N}xi8>{clamped_arg}) {{
  %zi = arith.constant 0 : i64
  %cap = arith.constant {CAP} : i64
  %e8 = arith.constant {E} : i64
  %none = arith.constant -1 : i64
{zero_filled_counts(T, K, E)}  %flat = memref.collapse_shape %buf [[0, 1]] : memref<{T}x{E}xi64> into memref<{N}xi64>
  linalg.generic {{indexing_maps = [#v, #v, #v, #v{flat_map}], iterator_types = ["parallel"]}}
      ins(%flat, %ex : memref<{N}xi64>, memref<{N}xi64>)
      outs(%slot, %kept{flat_out} : memref<{N}xi64>, memref<{N}xi8>{flat_type}) {{
  ^bb0(%r: i64, %q: i64, %o: i64, %k: i8{old_arg}):
    %keep = arith.cmpi slt, %r, %cap : i64
    %base = arith.muli %q, %e8 : i64
    %at = arith.addi %base, %r : i64
    %s = arith.select %keep, %at, %none : i64
    %k8 = arith.extui %keep : i1 to i8
{clamp}    linalg.yield %s, %k8{clamped} : i64, i8{i64}
  }}
{copy}  return
}}
"""


def _run(with_pass: bool, in_place: bool = False):
    """(launches, x, ex, slot, kept[, clamped]) of the kernels latch-form-kernels makes,
    run by the interpreter, with or without the pass."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, E + 1, size=(T, K)).astype(np.int64)
    ex = rng.integers(0, 100, size=N).astype(np.int64)
    args = [x, ex, np.full(N, 99, np.int64), np.full(N, 7, np.int8)]
    if in_place:
        args.append(np.full((T, E), 99, np.int64))
    passes = "latch-fold-zero-fills, " + ("latch-fuse-element-readers, " if with_pass else "")
    launches, out = form_and_run(_text(in_place), passes, args)
    return (launches, x, ex, *out[2:])


@pytest.fixture(scope="module")
def both():
    return _run(True), _run(False)


def test_reader_in_the_reductions_threads_same_values(both):
    (_, x, ex, slot, kept), (_, _, _, slot_off, kept_off) = both
    np.testing.assert_array_equal(slot, slot_off)
    np.testing.assert_array_equal(kept, kept_off)
    counts = counts_of(x, E).reshape(-1)
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
    n_on, x, ex, slot, kept, clamped = _run(True, in_place=True)
    n_off, *_ = _run(False, in_place=True)
    assert n_on == n_off
    counts = counts_of(x, E)
    np.testing.assert_array_equal(clamped, np.minimum(counts, CAP))
    np.testing.assert_array_equal(slot, np.where(counts.reshape(-1) < CAP,
                                                 ex * E + counts.reshape(-1), -1))


S, TOK, EXP = 6, 40, 8
_ROWS = f"""
#p = affine_map<(e, t, s) -> (s, t, e)>
#pb = affine_map<(e, t, s) -> (t, e)>
#row = affine_map<(t, e) -> (t, e)>
#rowout = affine_map<(t, e) -> (t)>
func.func @main(%parts: memref<{S}x{TOK}x{EXP}xf32>, %logits: memref<{TOK}x{EXP}xf32>,
                %top: memref<{TOK}xf32>, %probs: memref<{TOK}x{EXP}xf32>) {{
  %zf = arith.constant 0.0 : f32
  %b = memref.alloc() : memref<{TOK}x{EXP}xf32>
  linalg.generic {{indexing_maps = [#row], iterator_types = ["parallel", "parallel"]}}
      outs(%b : memref<{TOK}x{EXP}xf32>) {{
  ^bb0(%o: f32):
    linalg.yield %zf : f32
  }}
  linalg.generic {{indexing_maps = [#p, #pb], iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%parts : memref<{S}x{TOK}x{EXP}xf32>) outs(%b : memref<{TOK}x{EXP}xf32>) {{
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }}
  linalg.generic {{indexing_maps = [#row, #rowout], iterator_types = ["parallel", "reduction"]}}
      ins(%b : memref<{TOK}x{EXP}xf32>) outs(%top : memref<{TOK}xf32>) {{
  ^bb0(%v: f32, %acc: f32):
    %x = arith.maximumf %acc, %v : f32
    linalg.yield %x : f32
  }}
  linalg.generic {{indexing_maps = [#row, #rowout, #row], iterator_types = ["parallel", "parallel"]}}
      ins(%b, %top : memref<{TOK}x{EXP}xf32>, memref<{TOK}xf32>) outs(%probs : memref<{TOK}x{EXP}xf32>) {{
  ^bb0(%v: f32, %mx: f32, %o: f32):
    %d = arith.subf %v, %mx : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  }}
  memref.copy %b, %logits : memref<{TOK}x{EXP}xf32> to memref<{TOK}x{EXP}xf32>
  return
}}
"""


def _run_rows(option: str):
    """(launches, parts, logits, top, probs) of the row-reader program's kernels, run by
    the interpreter, with ``latch-fuse-element-readers`` given ``option``: the partials
    summed into a zero-filled ``[TOK, EXP]`` buffer (the fill folded), then each row's
    maximum (into ``top``, -inf on entry) and ``exp(logit - max)``."""
    rng = np.random.default_rng(11)
    parts = rng.standard_normal((S, TOK, EXP)).astype(np.float32)
    args = [parts, np.full((TOK, EXP), np.nan, np.float32), np.full(TOK, -np.inf, np.float32),
            np.full((TOK, EXP), np.nan, np.float32)]
    passes = f"latch-fold-zero-fills, latch-fuse-element-readers{{{option}}}, "
    launches, out = form_and_run(_ROWS, passes, args)
    return (launches, parts, *out[1:])


@pytest.fixture(scope="module")
def rows_both():
    return _run_rows("rows=true"), _run_rows("rows=false")


def test_row_reader_runs_the_sum_of_its_row_same_bits(rows_both):
    (_, parts, logits, top, probs), (_, _, logits_off, top_off, probs_off) = rows_both
    for on, off in ((logits, logits_off), (top, top_off), (probs, probs_off)):
        np.testing.assert_array_equal(on.view(np.uint32), off.view(np.uint32))
    want = np.zeros((TOK, EXP), np.float32)
    for s in range(S):                    # the partials added in order, as the loops do
        want = want + parts[s]
    np.testing.assert_array_equal(logits, want)
    np.testing.assert_array_equal(top, want.max(-1))
    np.testing.assert_allclose(probs, np.exp(want - want.max(-1, keepdims=True)), rtol=1e-6)


def test_row_reader_is_a_launch_fewer(rows_both):
    (n_on, *_), (n_off, *_) = rows_both
    assert n_on == n_off - 1, (n_on, n_off)
