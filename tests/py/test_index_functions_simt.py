"""latch-recompute-index-functions (passes/index_functions.py): the blocked scan's 0/1
triangle, built from two aranges, is computed in the routing rank's product from its loop
indices instead of loaded.  The kernels of ``latch-form-kernels`` run on the CPU by the
SIMT interpreter (tests/py/simt.py) with and without the pass: the same integers, which
are the rank computed by numpy; and the triangle's element is no longer loaded."""
from __future__ import annotations

import numpy as np
import pytest

from simt import Simt, formed

# out[b, t, e] += sum_k L[b, k] * [x[t, k] == s[e]], L[b, k] = (b >= k) built from aranges
# (the shape of TinyMoE's routing rank: blocks of B tokens, T blocks, E experts)
B, T, E = 8, 5, 3
TEXT = f"""
#a1 = affine_map<(d0) -> (d0)>
#row = affine_map<(d0, d1) -> (d0)>
#col = affine_map<(d0, d1) -> (d1)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#l = affine_map<(b, t, e, k) -> (b, k)>
#x = affine_map<(b, t, e, k) -> (t, k)>
#s = affine_map<(b, t, e, k) -> (e)>
#o = affine_map<(b, t, e, k) -> (b, t, e)>
func.func @main(%x: memref<{T}x{B}xi64>, %s: memref<{E}xi64>, %out: memref<{B}x{T}x{E}xi64>) {{
  %ar = memref.alloc() : memref<{B}xi64>
  linalg.generic {{indexing_maps = [#a1], iterator_types = ["parallel"]}} outs(%ar : memref<{B}xi64>) {{
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  }}
  %tri = memref.alloc() : memref<{B}x{B}xi64>
  linalg.generic {{indexing_maps = [#row, #col, #id2], iterator_types = ["parallel", "parallel"]}}
      ins(%ar, %ar : memref<{B}xi64>, memref<{B}xi64>) outs(%tri : memref<{B}x{B}xi64>) {{
  ^bb0(%a: i64, %b: i64, %o: i64):
    %ge = arith.cmpi sge, %a, %b : i64
    %v = arith.extui %ge : i1 to i64
    linalg.yield %v : i64
  }}
  linalg.generic {{indexing_maps = [#l, #x, #s, #o],
                  iterator_types = ["parallel", "parallel", "parallel", "reduction"]}}
      ins(%tri, %x, %s : memref<{B}x{B}xi64>, memref<{T}x{B}xi64>, memref<{E}xi64>)
      outs(%out : memref<{B}x{T}x{E}xi64>) {{
  ^bb0(%lv: i64, %xv: i64, %sv: i64, %acc: i64):
    %eq = arith.cmpi eq, %xv, %sv : i64
    %one = arith.extui %eq : i1 to i64
    %p = arith.muli %lv, %one : i64
    %r = arith.addi %acc, %p : i64
    linalg.yield %r : i64
  }}
  return
}}
"""


FORM = ("builtin.module(latch-wrap-host-compute, latch-forward-zero-fills, "
        "latch-form-contraction-kernels, {PASS}func.func(convert-linalg-to-parallel-loops), "
        "latch-register-accumulators, latch-split-integer-sums, latch-unroll-short-loops, "
        "latch-map-parallel-loops{{block=32,8}}, lower-affine, canonicalize, cse)")


def _form_kernels(without_pass: bool):
    """The kernels (``gpu.launch``, not outlined: what the interpreter runs) as
    latch-form-kernels makes them, with or without the pass; (IR text, output, numpy's)."""
    with formed(TEXT, FORM.format(
            PASS="" if without_pass else "latch-recompute-index-functions, ")) as m:
        text = str(m)
        rng = np.random.default_rng(3)
        x = rng.integers(0, E, size=(T, B)).astype(np.int64)
        s = np.arange(E, dtype=np.int64)
        out = rng.integers(-5, 5, size=(B, T, E)).astype(np.int64)
        sim = Simt(m)
        sim.run([x, s, out.copy()])
        got = np.asarray(sim.arguments[2])
    tri = (np.arange(B)[:, None] >= np.arange(B)[None, :]).astype(np.int64)
    ref = out + np.einsum("bk,tke->bte", tri, (x[:, :, None] == s).astype(np.int64))
    return text, got, ref


def _product_kernel(text: str) -> str:
    """The text of the product's launch (the one comparing classes)."""
    (product,) = [k for k in text.split("gpu.launch")[1:] if "cmpi eq" in k]
    return product


def _triangle_loads(product: str) -> int:
    return sum(1 for line in product.splitlines()
               if "memref.load" in line and f"memref<{B}x{B}xi64>" in line)


@pytest.mark.parametrize("without_pass", [False, True], ids=["recomputed", "loaded"])
def test_rank_is_exact_either_way(without_pass):
    """Bitwise numpy's rank; with the pass the product compares its own indices (one
    ``cmpi sge`` a term) and loads the triangle nowhere, without it it loads it."""
    text, got, ref = _form_kernels(without_pass)
    np.testing.assert_array_equal(got, ref)
    product = _product_kernel(text)
    if without_pass:
        assert _triangle_loads(product) >= 1 and "cmpi sge" not in product, product
    else:
        assert _triangle_loads(product) == 0 and "cmpi sge" in product, product
