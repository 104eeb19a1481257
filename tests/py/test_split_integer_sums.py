"""latch-split-integer-sums: a thread's integer reduction loop (TinyMoE's routing rank: the
first product of a blocked cumsum, 64 terms ``tri[c, j] * [b[i, j] == key[e]]`` an output)
carries four partial sums over a quarter of the trips; through the kernel steps and the
SIMT interpreter the result equals numpy's exactly (integer sums in any order), as it does
without the pass; other combining ops get their identity; float sums and short or uneven
loops are left alone."""
from __future__ import annotations

import numpy as np
import pytest

from simt import Simt

TEXT = """
#tri = affine_map<(c, i, e, j) -> (c, j)>
#b = affine_map<(c, i, e, j) -> (i, j)>
#k = affine_map<(c, i, e, j) -> (e)>
#o = affine_map<(c, i, e, j) -> (c, i, e)>
func.func @main(%tri: memref<8xJxTY>, %b: memref<16xJxTY>, %key: memref<8xTY>,
                %out: memref<8x16x8xTY>) {
  linalg.generic {indexing_maps = [#tri, #b, #k, #o],
                  iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%tri, %b, %key : memref<8xJxTY>, memref<16xJxTY>, memref<8xTY>)
      outs(%out : memref<8x16x8xTY>) {
  ^bb0(%t: TY, %x: TY, %y: TY, %acc: TY):
    %eq = arith.cmpi eq, %x, %y : TY
    %z = arith.extui %eq : i1 to TY
    %p = arith.muli %t, %z : TY
    %s = COMBINE %acc, %p : TY
    linalg.yield %s : TY
  }
  return
}
"""

FRONT = "builtin.module(func.func(convert-linalg-to-parallel-loops), latch-register-accumulators, "
BACK = "latch-map-parallel-loops{min-blocks=1}, canonicalize, cse)"


def _run(text: str, split: bool):
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, FRONT + ("latch-split-integer-sums, " if split else "") + BACK)
    return m, ctx


@pytest.mark.parametrize("ty,combine,fold", [
    ("i64", "arith.addi", np.add), ("i32", "arith.maxsi", np.maximum),
    ("i32", "arith.xori", np.bitwise_xor)])
def test_split_sums_equal_the_serial_ones(ty, combine, fold):
    j = 64
    text = TEXT.replace("TY", ty).replace("COMBINE", combine).replace("J", str(j))
    rng = np.random.default_rng(7)
    dt = np.int64 if ty == "i64" else np.int32
    tri = (np.arange(j)[None, :] <= np.arange(8)[:, None] * 8).astype(dt) * \
        rng.integers(1, 1000, (8, j)).astype(dt)
    b = rng.integers(0, 8, (16, j)).astype(dt)
    key = np.arange(8).astype(dt)
    out0 = rng.integers(-50, 50, (8, 16, 8)).astype(dt)
    terms = tri[:, None, None, :] * (b[None, :, None, :] == key[None, None, :, None])
    want = fold.reduce(np.concatenate([out0[..., None], terms], axis=-1), axis=-1)
    got = {}
    for split in (True, False):
        m, ctx = _run(text, split)
        kernel = str(m)
        assert ("-> (" + ", ".join([ty] * 4) + ")" in kernel) == split
        with ctx:
            sim = Simt(m)
            sim.run([tri, b, key, out0.copy()])
        got[split] = np.asarray(sim.arguments[3]).astype(np.int64).astype(dt)   # as TY bits
    np.testing.assert_array_equal(got[True], want)
    np.testing.assert_array_equal(got[False], want)


@pytest.mark.parametrize("case", ["float", "short", "uneven"])
def test_left_alone(case):
    j = {"float": 64, "short": 8, "uneven": 30}[case]
    text = TEXT.replace("COMBINE", "arith.addi").replace("J", str(j)).replace("TY", "i64")
    if case == "float":
        text = text.replace("%s = arith.addi %acc, %p : i64",
                            "%pf = arith.sitofp %p : i64 to f32\n"
                            "    %af = arith.sitofp %acc : i64 to f32\n"
                            "    %sf = arith.addf %af, %pf : f32\n"
                            "    %s = arith.fptosi %sf : f32 to i64")
    m, _ = _run(text, True)
    assert "-> (i64, i64, i64, i64)" not in str(m)
