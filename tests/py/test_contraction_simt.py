"""latch-form-contraction-kernels' GEMM kernels executed on the CPU: the pass's output for
small contractions (memref-level ``linalg.generic``, as after latch-bufferize) runs through
the SIMT interpreter of tests/py/simt.py — every thread of every block in lock step, with
data-race detection between barriers — and the result is compared with float64.  Inputs
are bf16-exact, so the tensor-core kernel (bf16 products are exact in f32) and the f32
SIMT kernel both land within 1e-5 (relative L2) of float64.  The second half unit-tests
the interpreter's warp-level ops (ldmatrix, mma.sync, cp.async) on hand-written kernels
against the PTX ISA's fragment layouts."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from simt import Race, Simt

TOL = 1e-5


# ---------------------------------------------------------------------------------------
# contractions through the pass
# ---------------------------------------------------------------------------------------
def _memref(shape, elt, layout=None):
    dims = "x".join(str(d) for d in shape)
    return f"memref<{dims}x{elt}{', ' + layout if layout else ''}>"


def contraction_text(sizes: dict, a_idx: str, b_idx: str, c_idx: str, a_elt="bf16",
                     b_elt="bf16", a_layout=None, b_layout=None) -> str:
    """``func @main(%a, %b, %c)``: c[c_idx] += P(a[a_idx]) * Q(b[b_idx]) summed over the
    loops not in ``c_idx`` (one letter per loop, ``sizes`` in loop order).  An element type
    "bf16" is widened with extf; "f32>bf16" is an f32 input rounded to bf16 in the body
    (a cast fused in, as precision="bf16" makes); "f32" is used as it is."""
    loops = list(sizes)
    dims = ", ".join(f"d{i}" for i in range(len(loops)))

    def amap(idx):
        return f"affine_map<({dims}) -> ({', '.join(f'd{loops.index(c)}' for c in idx)})>"

    its = ", ".join('"parallel"' if c in c_idx else '"reduction"' for c in loops)
    store = {"bf16": "bf16", "f32>bf16": "f32", "f32": "f32"}
    ta = _memref([sizes[c] for c in a_idx], store[a_elt], a_layout)
    tb = _memref([sizes[c] for c in b_idx], store[b_elt], b_layout)
    tc = _memref([sizes[c] for c in c_idx], "f32")

    def widen(name, elt):
        if elt == "bf16":
            return [f"%{name}e = arith.extf %{name} : bf16 to f32"], f"%{name}e"
        if elt == "f32>bf16":
            return [f"%{name}t = arith.truncf %{name} : f32 to bf16",
                    f"%{name}e = arith.extf %{name}t : bf16 to f32"], f"%{name}e"
        return [], f"%{name}"

    (ops_x, vx), (ops_y, vy) = widen("x", a_elt), widen("y", b_elt)
    body = ops_x + ops_y
    body_text = "\n      ".join(body)
    return f"""
func.func @main(%a: {ta}, %b: {tb}, %c: {tc}) {{
  linalg.generic {{indexing_maps = [{amap(a_idx)}, {amap(b_idx)}, {amap(c_idx)}],
                  iterator_types = [{its}]}}
      ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) {{
    ^bb0(%x: {store[a_elt]}, %y: {store[b_elt]}, %acc: f32):
      {body_text}
      %p = arith.mulf {vx}, {vy} : f32
      %s = arith.addf %acc, %p : f32
      linalg.yield %s : f32
  }}
  return
}}
"""


def run_pass(text: str, options: str = ""):
    """(module after latch-form-contraction-kernels, its context)."""
    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, f"builtin.module(latch-form-contraction-kernels{options})")
    return m, ctx


def _launches(m) -> list:
    """(kernel symbol, grid, block) of each gpu.launch_func of @main."""
    from mlir import ir

    f = next(o.operation for o in m.body.operations if o.operation.name == "func.func")
    consts, out = {}, []
    for op in f.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "arith.constant" and str(op.results[0].type) == "index":
            consts[op.results[0]] = ir.IntegerAttr(op.attributes["value"]).value
        if op.name == "gpu.launch_func":
            v = [consts.get(x) for x in list(op.operands)[:6]]
            out.append((str(op.attributes["kernel"]), tuple(v[:3]), tuple(v[3:6])))
    return out


def _bf16(t):
    return t.bfloat16().double()


def _operand(shape, elt, g):
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return _bf16(x) if elt in ("bf16", "f32>bf16") else x.float().double()


def check(sizes, a_idx, b_idx, c_idx, a_elt="bf16", b_elt="bf16", options="", seed=0,
          a_layout=None, expect_kernel="mma"):
    """Run the pass on the contraction, interpret it, compare with float64; returns the
    module (for structural checks)."""
    text = contraction_text(sizes, a_idx, b_idx, c_idx, a_elt, b_elt, a_layout=a_layout)
    m, ctx = run_pass(text, options)
    kernel_text = str(m)
    host = kernel_text.split("gpu.module")[0]
    assert "gpu.launch_func" in host, "the contraction was not replaced"
    # left on the host: at most the split-K partial sums (over a view of the workspace)
    assert host.count("linalg.generic") == ("memref.view" in host)
    if expect_kernel == "mma":
        assert "mma.sync" in kernel_text
    elif expect_kernel == "wgmma":
        assert "nvvm.wgmma.mma_async" in kernel_text and "mma.sync" not in kernel_text
    else:
        assert "mma.sync" not in kernel_text and "math.fma" in kernel_text
    g = torch.Generator().manual_seed(seed)
    a = _operand([sizes[c] for c in a_idx], a_elt, g)
    b = _operand([sizes[c] for c in b_idx], b_elt, g)
    c = torch.randn(*[sizes[c] for c in c_idx], generator=g, dtype=torch.float64)
    with ctx:
        sim = Simt(m)
        sim.run([a.numpy(), b.numpy(), c.numpy()])
    got = torch.from_numpy(np.asarray(sim.arguments[2], np.float64))
    ref = c + torch.einsum(f"{a_idx},{b_idx}->{c_idx}", a, b)
    err = float((got - ref).norm() / ref.norm())
    assert err < TOL, err
    return m


def test_mma_whole_tiles():
    """256x128 @ 128x128 (M, N multiples of the 128x128 tile, K of the 32 k-tile)."""
    m = check({"m": 256, "n": 128, "k": 64}, "mk", "kn", "mn")
    assert [la[1] for la in _launches(m)] == [(1, 2, 1)]


def test_mma_tiles_in_groups_of_m_tiles(monkeypatch):
    """The mma.sync kernel with a wide output takes its tiles in groups of m-tiles too
    (RASTER_GROUP 2: a 3 x 3 grid of 128 x 128 tiles, groups of 2 and 1 m-tiles)."""
    import latch.passes.form_contraction_kernels as fck
    monkeypatch.setattr(fck, "RASTER_GROUP", 2)
    m = check({"m": 300, "n": 300, "k": 32}, "mk", "kn", "mn")
    assert [la[1] for la in _launches(m)] == [(3, 3, 1)]


def test_mma_edge_tiles():
    """136x96 @ 96x40: partial m and n tiles (clamped loads, guarded stores)."""
    check({"m": 136, "n": 40, "k": 96}, "mk", "kn", "mn")


def test_mma_k_not_a_multiple_of_the_k_tile():
    """K = 40: the last k-tile is partly out of range (zero-filled)."""
    check({"m": 24, "n": 16, "k": 40}, "mk", "kn", "mn")


def test_mma_b_transposed():
    """A linear layer's y = x @ W^T: B stored [N, K], k contiguous in both operands."""
    check({"m": 72, "n": 136, "k": 64}, "mk", "nk", "mn")


def test_mma_a_transposed():
    """The weight-gradient form dW = X^T @ dY: A stored [K, M] (both operands contiguous
    along their rows, not along k)."""
    check({"m": 40, "n": 72, "k": 96}, "km", "kn", "mn")


def test_mma_both_transposed():
    check({"m": 48, "n": 24, "k": 64}, "km", "nk", "mn")


def test_mma_batched():
    """2 x (40x64 @ 64x48): the batch is grid z."""
    m = check({"b": 2, "m": 40, "n": 48, "k": 64}, "bmk", "bkn", "bmn")
    assert [la[1] for la in _launches(m)] == [(1, 1, 2)]


def test_mma_fused_cast_and_strided_operand():
    """An f32 weight rounded to bf16 inside the body (loaded and converted by the threads)
    times a bf16 operand that is a strided view (row stride 128, offset 16)."""
    check({"m": 40, "n": 24, "k": 64}, "mk", "nk", "mn", b_elt="f32>bf16",
          a_layout="strided<[128, 1], offset: 16>")


@pytest.fixture
def wide(monkeypatch):
    """The 128x256 tile for every product with at least 256 columns (the pass takes it
    only when there are enough such tiles to fill the GPU: too large to interpret)."""
    import latch.passes.form_contraction_kernels as fck
    monkeypatch.setattr(fck, "WIDE_TILES", True)
    monkeypatch.setattr(fck, "_WIDE_MIN_TILES", 1)


@pytest.mark.parametrize("sizes,a_idx,b_idx", [
    ({"m": 128, "n": 256, "k": 64}, "mk", "kn"),      # one whole tile
    ({"m": 136, "n": 300, "k": 40}, "mk", "nk"),      # edge tiles, a partial k-tile
    ({"m": 40, "n": 264, "k": 96}, "km", "kn"),       # A transposed (a weight gradient)
    ({"m": 72, "n": 256, "k": 64}, "km", "nk"),
])
def test_mma_wide_tile(wide, sizes, a_idx, b_idx):
    m = check(sizes, a_idx, b_idx, "mn")
    text = str(m)
    assert "memref<4x256x40xbf16" in text or "memref<4x32x264xbf16" in text   # B stages
    grid = _launches(m)[0][1]
    assert grid[0] == -(-sizes["n"] // 256) and grid[1] == -(-sizes["m"] // 128)


@pytest.mark.parametrize("sizes,a_idx,b_idx", [
    ({"m": 128, "n": 128, "k": 256}, "mk", "nk"),     # four k-tiles of 64: the ring wraps
    ({"m": 136, "n": 40, "k": 96}, "mk", "kn"),       # K not a multiple of 64: loaded
    ({"m": 40, "n": 72, "k": 192}, "km", "kn"),       # A transposed
])
def test_mma_deep_k_tiles(monkeypatch, sizes, a_idx, b_idx):
    """k-tiles of 64 in three stages (``DEEP_K_TILES``)."""
    import latch.passes.form_contraction_kernels as fck
    monkeypatch.setattr(fck, "DEEP_K_TILES", True)
    m = check(sizes, a_idx, b_idx, "mn")
    assert "memref<3x" in str(m)


def test_mma_wide_tile_batched(wide):
    m = check({"b": 2, "m": 40, "n": 256, "k": 64}, "bmk", "bkn", "bmn")
    assert [la[1] for la in _launches(m)] == [(1, 1, 2)]


def test_wide_tiles_only_where_they_fill_the_gpu(monkeypatch):
    """Switched on, B32's products take the wide tile, B2's (48 tiles) and narrow outputs
    do not; off (the default: measured slower) none does."""
    import latch.passes.form_contraction_kernels as fck
    from latch.passes.form_contraction_kernels import wide_tiles
    monkeypatch.setattr(fck, "WIDE_TILES", True)

    class C:
        def __init__(self, m, n, b=1):
            self.s = {"m": m, "n": n, "batch": b}

        def size(self, g):
            return self.s[g]
    assert wide_tiles(C(32768, 2304)) and wide_tiles(C(10240, 1024, 8))
    assert not wide_tiles(C(2048, 768)) and not wide_tiles(C(32768, 128))
    monkeypatch.setattr(fck, "WIDE_TILES", False)
    assert not wide_tiles(C(32768, 2304))


@pytest.mark.parametrize("sizes,idx,how", [
    ({"m": 40, "n": 24, "h": 2, "d": 32}, ("mhd", "nhd", "mn"), "device_async_copy"),
    ({"p": 5, "q": 8, "n": 24, "k": 64}, ("kpq", "nk", "pqn"), "transpose = true"),
], ids=["k-over-two-loops", "rows-over-two-loops"])
def test_mma_copies_operands_whose_groups_span_loops(sizes, idx, how):
    """A reduction over two loops (heads x head dim, an attention output's projection) or
    rows over two loops: the operand is still copied 8 elements at a time when its
    unit-stride dimension is the group's fastest loop and a multiple of 8 long."""
    m = check(sizes, *idx)
    text = str(m)
    assert "nvgpu.device_async_copy" in text and how in text


# the body of a bf16 x bf16 -> f32 product (a linalg.generic region, closing brace included)
_BF16_PRODUCT_BODY = """  ^bb0(%x: bf16, %y: bf16, %acc: f32):
    %xe = arith.extf %x : bf16 to f32
    %ye = arith.extf %y : bf16 to f32
    %p = arith.mulf %xe, %ye : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
"""


@pytest.mark.parametrize("a_idx,b_idx", [("mk", "nk"), ("km", "kn")],
                         ids=["along-k", "along-rows"])
def test_mma_f32_operands_rounded_in_the_product(a_idx, b_idx):
    """Both operands are f32 buffers rounded to bf16 in the body (a matmul output read by
    the next product): 8-element vector loads, rounded on the way into shared memory,
    whether the buffers are contiguous along k or along their rows (then read back with
    ldmatrix.trans)."""
    m = check({"m": 72, "n": 40, "k": 64}, a_idx, b_idx, "mn", a_elt="f32>bf16",
              b_elt="f32>bf16")
    text = str(m)
    assert text.count("vector<8xf32>") >= 4 and "nvgpu.device_async_copy" not in text
    assert ("transpose = true" in text) == (a_idx == "km")


def test_mma_writes_a_zeroed_output_without_reading_it():
    """The output was zero-filled and copied through a reshape (what one-shot
    bufferization leaves for a reshaped output): the copy and the fill go, and the kernel
    stores its sums without loading the output."""
    text = """
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(i, j) -> (i, j)>
#sc = affine_map<(i, j) -> ()>
func.func @main(%a: memref<40x64xbf16>, %b: memref<24x64xbf16>, %out: memref<40x24xf32>) {
  %zero = arith.constant 0.0 : f32
  %flat = memref.alloc() : memref<960xf32>
  %z = memref.expand_shape %flat [[0, 1]] output_shape [40, 24]
      : memref<960xf32> into memref<40x24xf32>
  linalg.generic {indexing_maps = [#sc, #id], iterator_types = ["parallel", "parallel"]}
      ins(%zero : f32) outs(%z : memref<40x24xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  }
  %c = memref.alloc() : memref<40x24xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%z : memref<40x24xf32>) outs(%c : memref<40x24xf32>) {
  ^bb0(%v: f32, %o: f32):
    linalg.yield %v : f32
  }
  linalg.generic {indexing_maps = [#a, #b, #c],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : memref<40x64xbf16>, memref<24x64xbf16>) outs(%c : memref<40x24xf32>) {
""" + _BF16_PRODUCT_BODY + """  memref.copy %c, %out : memref<40x24xf32> to memref<40x24xf32>
  return
}
"""
    m, ctx = run_pass(text)
    host, kernel = str(m).split("gpu.module")
    assert "linalg.generic" not in host            # no fill, no copy
    assert "memref.load" not in kernel.split("scf.yield")[-1]   # the epilogue only stores
    g = torch.Generator().manual_seed(5)
    a = _operand([40, 64], "bf16", g)
    b = _operand([24, 64], "bf16", g)
    with ctx:
        sim = Simt(m)
        sim.run([a.numpy(), b.numpy(), np.full((40, 24), np.nan)])
    got = torch.from_numpy(np.asarray(sim.arguments[2], np.float64))
    ref = a @ b.T
    assert float((got - ref).norm() / ref.norm()) < TOL


@pytest.mark.parametrize("sizes,idx", [
    ({"m": 64, "n": 64, "k": 2112}, ("km", "kn", "mn")),
    ({"b": 2, "m": 64, "n": 40, "k": 1024}, ("bkm", "bkn", "bmn")),
], ids=["66-k-tiles", "batched"])
def test_mma_split_k(sizes, idx):
    """Few output tiles, a long reduction (a weight gradient over tokens): the pass splits
    k (grid z = batch x slices) into a workspace whose slices a linalg.generic adds to the
    output in order.  66 k-tiles in slices of 5: the last slices are short or empty."""
    m = check(sizes, *idx)
    (_, grid, _), = _launches(m)
    assert grid[2] > sizes.get("b", 1), grid
    host = str(m).split("gpu.module")[0]
    assert "memref.view" in host and "linalg.generic" in host


def test_simt_f32():
    """f32 operands take the SIMT kernel (64x64 tiles, 16-deep k-tiles): edges in m, n
    and k (K = 50)."""
    check({"m": 70, "n": 30, "k": 50}, "mk", "kn", "mn", a_elt="f32", b_elt="f32",
          expect_kernel="simt")


def test_simt_bf16_without_tensor_cores():
    check({"m": 40, "n": 72, "k": 48}, "km", "nk", "mn", options="{mma=false}",
          expect_kernel="simt")


def test_simt_skips_all_zero_mask_tiles():
    """A 0/1 mask factor (an i8 converted in the body): the SIMT kernel ORs the threads'
    "saw a one" flags in the barrier that publishes the mask tile (nvvm.barrier
    #nvvm.reduction<or>) and skips all-zero k-tiles; blocks of one launch take different
    branches."""
    text = """
#h = affine_map<(d0, d1, d2) -> (d2, d0)>
#v = affine_map<(d0, d1, d2) -> (d2, d1)>
#o = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @main(%hit8: memref<100x70xi8>, %v: memref<100x48xf32>, %o: memref<70x48xf32>) {
  linalg.generic {indexing_maps = [#h, #v, #o], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%hit8, %v : memref<100x70xi8>, memref<100x48xf32>) outs(%o : memref<70x48xf32>) {
  ^bb0(%h8: i8, %x: f32, %acc: f32):
    %h = arith.trunci %h8 : i8 to i1
    %f = arith.uitofp %h : i1 to f32
    %p = arith.mulf %f, %x : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}
"""
    m, ctx = run_pass(text)
    assert "#nvvm.reduction<or>" in str(m)
    rng = np.random.default_rng(1)
    hit = np.zeros((100, 70), np.int64)
    hit[16:32] = rng.random((16, 70)) < 0.2          # only k-tile 1 has ones
    hit[70:80, :64] = rng.random((10, 64)) < 0.5     # k-tiles 4 and 5: only block 0's rows
    v = rng.standard_normal((100, 48)).astype(np.float32).astype(np.float64)
    o = rng.standard_normal((70, 48))
    with ctx:
        sim = Simt(m)
        sim.run([hit, v, o])
    ref = o + hit.T.astype(np.float64) @ v
    got = np.asarray(sim.arguments[2], np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < TOL


def test_mma_on_host_views():
    """The operands are views made on the host: a memref.subview of a larger buffer (an
    offset, strided operand) and an output reshaped with memref.expand_shape."""
    text = """
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
func.func @main(%big: memref<48x128xbf16>, %b: memref<24x64xbf16>, %flat: memref<960xf32>) {
  %a = memref.subview %big[4, 16] [40, 64] [1, 1]
      : memref<48x128xbf16> to memref<40x64xbf16, strided<[128, 1], offset: 528>>
  %c = memref.expand_shape %flat [[0, 1]] output_shape [40, 24]
      : memref<960xf32> into memref<40x24xf32>
  linalg.generic {indexing_maps = [#a, #b, #c],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : memref<40x64xbf16, strided<[128, 1], offset: 528>>, memref<24x64xbf16>)
      outs(%c : memref<40x24xf32>) {
""" + _BF16_PRODUCT_BODY + """  return
}
"""
    m, ctx = run_pass(text)
    g = torch.Generator().manual_seed(4)
    big = _operand([48, 128], "bf16", g)
    b = _operand([24, 64], "bf16", g)
    flat = torch.randn(960, generator=g, dtype=torch.float64)
    with ctx:
        sim = Simt(m)
        sim.run([big.numpy(), b.numpy(), flat.numpy()])
    ref = flat.reshape(40, 24) + big[4:44, 16:80] @ b.T
    got = torch.from_numpy(np.asarray(sim.arguments[2], np.float64)).reshape(40, 24)
    assert float((got - ref).norm() / ref.norm()) < TOL


@pytest.mark.parametrize("shape", [(None, 136, 96, 40), (2, 40, 64, 48), (None, 64, 2048, 64)],
                         ids=["edges", "batched", "split-k"])
def test_bench_gemm_through_bufferize(shape):
    """bench/gemm_shapes.py's functions (linalg.matmul / batch_matmul on tensors, bf16 in,
    f32 out) through latch-bufferize and the start of latch-form-kernels
    (latch-wrap-host-compute, latch-form-contraction-kernels): the host's zero fill, the
    planned arena and its views, the launch and (split-K) the partial sums interpreted
    with the kernel."""
    import sys
    from pathlib import Path

    from mlir import ir

    import latch.dialect
    from latch.pipeline import run_pipeline

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from gemm_shapes import mlir_text

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(mlir_text(*shape))
        run_pipeline(m, "builtin.module(inline, latch-bufferize)")
        run_pipeline(m, "builtin.module(latch-wrap-host-compute, "
                        "latch-form-contraction-kernels)")
        assert "gpu.launch_func @latch_contract_0::@contract" in str(m).replace("  ", " ")
        batch, M, K, N = shape
        lead = () if batch is None else (batch,)
        g = torch.Generator().manual_seed(0)
        a = _bf16(torch.randn(*lead, M, K, generator=g, dtype=torch.float64))
        b = _bf16(torch.randn(*lead, K, N, generator=g, dtype=torch.float64))
        out, = Simt(m).run([a.numpy(), b.numpy()])
    ref = a @ b
    got = torch.from_numpy(np.asarray(out, np.float64))
    assert float((got - ref).norm() / ref.norm()) < TOL


def _erase(m, name, keep=lambda i: False):
    """Erase the ops called ``name`` inside the gpu.modules of ``m`` (except those whose
    ordinal ``keep`` accepts); returns how many there were."""
    found = []

    def walk(op):
        for r in op.regions:
            for b in r.blocks:
                for o in b.operations:
                    if o.operation.name == name:
                        found.append(o.operation)
                    else:
                        walk(o.operation)

    for o in m.body.operations:
        if o.operation.name == "gpu.module":
            walk(o.operation)
    for i, op in enumerate(found):
        if not keep(i):
            op.erase()
    return len(found)


MISSING_BARRIER_CASES = [
    pytest.param(({"m": 136, "n": 40, "k": 96}, "mk", "kn", "mn", "bf16", ""), id="mma"),
    pytest.param(({"m": 40, "n": 72, "k": 96}, "km", "kn", "mn", "bf16", ""), id="mma-rows"),
    pytest.param(({"m": 40, "n": 24, "k": 64}, "mk", "nk", "mn", "f32>bf16", ""),
                 id="mma-load"),
    pytest.param(({"m": 70, "n": 30, "k": 50}, "mk", "kn", "mn", "f32", ""), id="simt"),
]


def _missing_barrier_inputs(sizes, a_idx, b_idx, c_idx, elt):
    g = torch.Generator().manual_seed(0)
    a = _operand([sizes[c] for c in a_idx], elt, g)
    b = _operand([sizes[c] for c in b_idx], elt, g)
    c = torch.randn(*[sizes[c] for c in c_idx], generator=g, dtype=torch.float64)
    return [a.numpy(), b.numpy(), c.numpy()]


@pytest.mark.parametrize("case", MISSING_BARRIER_CASES)
def test_interpreter_catches_a_missing_barrier(case):
    """The interpreter is not lock-step lucky: with the kernel's barriers removed — all of
    them, or any single one — it reports a race."""
    sizes, a_idx, b_idx, c_idx, elt, options = case
    text = contraction_text(sizes, a_idx, b_idx, c_idx, elt, elt)
    inputs = _missing_barrier_inputs(sizes, a_idx, b_idx, c_idx, elt)
    m, ctx = run_pass(text, options)
    with ctx:
        n = _erase(m, "gpu.barrier")
        assert n >= 1
        with pytest.raises(Race):
            Simt(m).run(inputs)
    for drop in range(n):
        m, ctx = run_pass(text, options)
        with ctx:
            _erase(m, "gpu.barrier", keep=lambda i: i != drop)
            with pytest.raises(Race):
                Simt(m).run(inputs)


def test_interpreter_catches_a_missing_cp_async_wait():
    """Without the cp.async wait, the fragments are read before the copies land."""
    text = contraction_text({"m": 136, "n": 40, "k": 96}, "mk", "kn", "mn")
    inputs = _missing_barrier_inputs({"m": 136, "n": 40, "k": 96}, "mk", "kn", "mn", "bf16")
    m, ctx = run_pass(text)
    with ctx:
        waits = _erase(m, "nvvm.cp.async.wait.group") + _erase(m, "nvgpu.device_async_wait")
        if not waits:
            pytest.skip("the tensor-core kernel does not use cp.async")
        with pytest.raises(Race, match="cp.async destination before its wait"):
            Simt(m).run(inputs)


# ---------------------------------------------------------------------------------------
# the interpreter's warp-level ops, on hand-written kernels
# ---------------------------------------------------------------------------------------
def run_kernel(body: str, args: list, arg_types: list, threads: int = 32, blocks=(1, 1, 1),
               workgroup: str = ""):
    """Run a gpu.func with ``body`` (arguments %arg0.. of ``arg_types``, thread id %tid,
    lane %lane, constants %c0..%c16 and %c32 predefined) launched on ``blocks`` x
    ``threads``; returns the arguments' final contents."""
    from mlir import ir

    import latch.dialect

    params = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(arg_types))
    host_params = ", ".join(f"%h{i}: {t}" for i, t in enumerate(arg_types))
    host_args = ", ".join(f"%h{i} : {t}" for i, t in enumerate(arg_types))
    consts = "\n      ".join(f"%c{i} = arith.constant {i} : index"
                             for i in list(range(17)) + [32])
    wg = f"workgroup({workgroup}) " if workgroup else ""
    text = f"""
module attributes {{gpu.container_module}} {{
  func.func @main({host_params}) {{
    %g0 = arith.constant {blocks[0]} : index
    %g1 = arith.constant {blocks[1]} : index
    %g2 = arith.constant {blocks[2]} : index
    %t = arith.constant {threads} : index
    %one = arith.constant 1 : index
    gpu.launch_func @k::@k blocks in (%g0, %g1, %g2) threads in (%t, %one, %one)
        args({host_args})
    return
  }}
  gpu.module @k {{
    gpu.func @k({params}) {wg}kernel {{
      {consts}
      %tid = gpu.thread_id x
      %lane = arith.remui %tid, %c32 : index
      {body}
      gpu.return
    }}
  }}
}}
"""
    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        sim = Simt(m)
        sim.run(args)
        return sim.arguments


def _bf16_values(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return _bf16(torch.randn(*shape, generator=g, dtype=torch.float64)).numpy()


SMEM = "memref<32x24xbf16, #gpu.address_space<workgroup>>"
# each thread copies row tid of a 32x16 global matrix into the (padded) shared tile
FILL = f"""
      %row = vector.load %arg0[%tid, %c0] : memref<32x16xbf16>, vector<8xbf16>
      vector.store %row, %s[%tid, %c0] : {SMEM}, vector<8xbf16>
      %row2 = vector.load %arg0[%tid, %c8] : memref<32x16xbf16>, vector<8xbf16>
      vector.store %row2, %s[%tid, %c8] : {SMEM}, vector<8xbf16>
      gpu.barrier
"""


def _ldmatrix_expected(src, rows, cols, tiles, trans):
    """Per PTX: lanes 8j..8j+7 address rows 0..7 of matrix j (row r at src[rows[8j+r],
    cols[8j+r]:+8]); lane l receives, per matrix j, elements (l/4, 2(l%4)) and
    (l/4, 2(l%4)+1) — with .trans (2(l%4), l/4) and (2(l%4)+1, l/4)."""
    out = np.zeros((32, tiles, 2))
    for j in range(tiles):
        mat = np.array([src[rows[8 * j + r], cols[8 * j + r]:cols[8 * j + r] + 8]
                        for r in range(8)])
        for lane in range(32):
            for e in range(2):
                r, c = lane // 4, 2 * (lane % 4) + e
                out[lane, j, e] = mat[c, r] if trans else mat[r, c]
    return out


@pytest.mark.parametrize("tiles", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_fragments(tiles, trans):
    src = _bf16_values((32, 16))
    # lane l addresses row (5 l) % 32, column 8 (l % 2) of the tile
    rows = [(5 * lane) % 32 for lane in range(32)]
    cols = [8 * (lane % 2) for lane in range(32)]
    body = FILL + f"""
      %r5 = arith.muli %lane, %c5 : index
      %r = arith.remui %r5, %c32 : index
      %odd = arith.remui %lane, %c2 : index
      %col = arith.muli %odd, %c8 : index
      %v = nvgpu.ldmatrix %s[%r, %col] {{numTiles = {tiles} : i32, transpose = {str(trans).lower()}}} : {SMEM} -> vector<{tiles}x2xbf16>
""" + "".join(f"""
      %p{j} = vector.extract %v[{j}] : vector<2xbf16> from vector<{tiles}x2xbf16>
      vector.store %p{j}, %arg1[%tid, %c{j}, %c0] : memref<32x4x2xbf16>, vector<2xbf16>
""" for j in range(tiles))
    out = np.zeros((32, 4, 2))
    got = run_kernel(body, [src, out], ["memref<32x16xbf16>", "memref<32x4x2xbf16>"],
                     workgroup=f"%s : {SMEM}")[1]
    np.testing.assert_array_equal(got[:, :tiles], _ldmatrix_expected(src, rows, cols, tiles,
                                                                     trans))


def _mma_kernel(b_trans: bool) -> str:
    """A (16x16, rows 0-15 of the tile) and B (rows 16-31: [k][n] 16x8 when ``b_trans``,
    else [n][k] 8x16 in rows 16-23) through ldmatrix; C = A @ B (+ C0) stored per the
    accumulator fragment layout."""
    b_load = """
      %bq = arith.divui %lane, %c8 : index
      %br8 = arith.remui %lane, %c8 : index
      %bqk = arith.muli %bq, %c8 : index
      %bk = arith.addi %bqk, %br8 : index
      %brow = arith.addi %bk, %c16 : index
      %b = nvgpu.ldmatrix %s[%brow, %c0] {numTiles = 2 : i32, transpose = true} : SMEM -> vector<2x2xbf16>
""" if b_trans else """
      %bq = arith.divui %lane, %c8 : index
      %br8 = arith.remui %lane, %c8 : index
      %brow = arith.addi %br8, %c16 : index
      %bq1 = arith.remui %bq, %c2 : index
      %bcol = arith.muli %bq1, %c8 : index
      %b = nvgpu.ldmatrix %s[%brow, %bcol] {numTiles = 2 : i32, transpose = false} : SMEM -> vector<2x2xbf16>
"""
    return (FILL + """
      %aq = arith.divui %lane, %c16 : index
      %arow = arith.remui %lane, %c16 : index
      %acol = arith.muli %aq, %c8 : index
      %a = nvgpu.ldmatrix %s[%arow, %acol] {numTiles = 4 : i32, transpose = false} : SMEM -> vector<4x2xbf16>
""" + b_load + """
      %g = arith.divui %lane, %c4 : index
      %tq = arith.remui %lane, %c4 : index
      %col = arith.muli %tq, %c2 : index
      %g8 = arith.addi %g, %c8 : index
      %c00 = vector.load %arg1[%g, %col] : memref<16x8xf32>, vector<2xf32>
      %c01 = vector.load %arg1[%g8, %col] : memref<16x8xf32>, vector<2xf32>
      %z = arith.constant dense<0.0> : vector<2x2xf32>
      %ci0 = vector.insert %c00, %z [0] : vector<2xf32> into vector<2x2xf32>
      %ci = vector.insert %c01, %ci0 [1] : vector<2xf32> into vector<2x2xf32>
      %d = nvgpu.mma.sync(%a, %b, %ci) {mmaShape = [16, 8, 16]} : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf32>) -> vector<2x2xf32>
      %d0 = vector.extract %d[0] : vector<2xf32> from vector<2x2xf32>
      %d1 = vector.extract %d[1] : vector<2xf32> from vector<2x2xf32>
      vector.store %d0, %arg2[%g, %col] : memref<16x8xf32>, vector<2xf32>
      vector.store %d1, %arg2[%g8, %col] : memref<16x8xf32>, vector<2xf32>
""").replace("SMEM", SMEM)


@pytest.mark.parametrize("b_trans", [False, True])
def test_nvgpu_mma_sync(b_trans):
    """ldmatrix fragments of A (x4) and B (x2, .trans for a [k][n] tile) into
    nvgpu.mma.sync m16n8k16: D = A @ B + C."""
    src = _bf16_values((32, 16), seed=3)
    a = src[:16].astype(np.float64)
    b = src[16:32, :8].astype(np.float64) if b_trans else src[16:24].T.astype(np.float64)
    c0 = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    out = np.zeros((16, 8))
    got = run_kernel(_mma_kernel(b_trans), [src, c0, out],
                     ["memref<32x16xbf16>", "memref<16x8xf32>", "memref<16x8xf32>"],
                     workgroup=f"%s : {SMEM}")[2]
    ref = a @ b + c0
    assert np.abs(got - ref).max() < 1e-5 * np.abs(ref).max()


def test_warp_collectives_need_the_whole_warp():
    body = FILL + f"""
      %half = arith.cmpi ult, %lane, %c16 : index
      scf.if %half {{
        %v = nvgpu.ldmatrix %s[%lane, %c0] {{numTiles = 1 : i32, transpose = false}} : {SMEM} -> vector<1x2xbf16>
      }}
"""
    with pytest.raises(AssertionError, match="part of a warp"):
        run_kernel(body, [_bf16_values((32, 16))], ["memref<32x16xbf16>"],
                   workgroup=f"%s : {SMEM}")


ASYNC_SMEM = "memref<2x32x8xbf16, #gpu.address_space<workgroup>>"


def _async_kernel(wait: str, barrier: bool, src_elements: str = "", reader="other",
                  second_group=False):
    """Thread t copies row t of a 32x8 bf16 matrix into stage 0 with cp.async (and with
    ``second_group`` row t of the second matrix into stage 1 as a later group); then
    ``wait``, maybe a barrier, and thread t reads back row (t + 1) % 32 (``reader`` =
    "other") or its own row t ("self") of stage 0 into the output."""
    n = f", {src_elements}" if src_elements else ""
    second = f"""
      %t1 = nvgpu.device_async_copy %arg0[%c1, %tid, %c0], %s[%c1, %tid, %c0], 8{n} : memref<2x32x8xbf16> to {ASYNC_SMEM}
      %g1 = nvgpu.device_async_create_group %t1
""" if second_group else ""
    row = "%tid" if reader == "self" else "%next"
    return f"""
      %srcn = arith.constant 3 : index
      %t0 = nvgpu.device_async_copy %arg0[%c0, %tid, %c0], %s[%c0, %tid, %c0], 8{n} {{bypassL1}} : memref<2x32x8xbf16> to {ASYNC_SMEM}
      %g0 = nvgpu.device_async_create_group %t0
      {second}
      {wait}
      {"gpu.barrier" if barrier else ""}
      %t1p = arith.addi %tid, %c1 : index
      %next = arith.remui %t1p, %c32 : index
      %v = vector.load %s[%c0, {row}, %c0] : {ASYNC_SMEM}, vector<8xbf16>
      vector.store %v, %arg1[{row}, %c0] : memref<32x8xbf16>, vector<8xbf16>
"""


def _run_async(body, src):
    return run_kernel(body, [src, np.zeros((32, 8))],
                      ["memref<2x32x8xbf16>", "memref<32x8xbf16>"], threads=32,
                      workgroup=f"%s : {ASYNC_SMEM}")[1]


def test_cp_async_copies_after_wait_and_barrier():
    src = _bf16_values((2, 32, 8), seed=5)
    got = _run_async(_async_kernel("nvgpu.device_async_wait %g0 {numGroups = 0 : i32}",
                                   True), src)
    np.testing.assert_array_equal(got, src[0])


def test_cp_async_src_elements_zero_fill():
    """srcElements = 3: three elements read, the other five zero."""
    src = _bf16_values((2, 32, 8), seed=6)
    got = _run_async(_async_kernel("nvgpu.device_async_wait %g0", True, "%srcn"), src)
    want = src[0].copy()
    want[:, 3:] = 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("wait,barrier,reader,second,message", [
    ("", True, "other", False, "before its wait"),
    ("", False, "self", False, "before its wait"),
    ("nvgpu.device_async_wait %g0", False, "other", False, "no barrier"),
    # two groups, the wait leaves the most recent one pending: group 0 (read here) is done
    # only with numGroups = 1 ...
    ("nvgpu.device_async_wait %g1 {numGroups = 2 : i32}", True, "other", True,
     "before its wait"),
], ids=["no-wait", "no-wait-own-row", "wait-without-barrier", "both-groups-pending"])
def test_cp_async_races(wait, barrier, reader, second, message):
    src = _bf16_values((2, 32, 8), seed=7)
    with pytest.raises(Race, match=message):
        _run_async(_async_kernel(wait, barrier, reader=reader, second_group=second), src)


def test_cp_async_wait_leaves_the_newest_groups_pending():
    """... with numGroups = 1 the older group (stage 0) is complete and readable."""
    src = _bf16_values((2, 32, 8), seed=8)
    got = _run_async(_async_kernel("nvgpu.device_async_wait %g1 {numGroups = 1 : i32}",
                                   True, second_group=True), src)
    np.testing.assert_array_equal(got, src[0])


def test_cp_async_wait_without_barrier_is_enough_for_the_copying_thread():
    src = _bf16_values((2, 32, 8), seed=9)
    got = _run_async(_async_kernel("nvgpu.device_async_wait %g0", False, reader="self"), src)
    np.testing.assert_array_equal(got, src[0])


def test_cp_async_alignment():
    """A 16-byte cp.async needs 16-byte aligned addresses: column 4 of a bf16 row is not."""
    body = f"""
      %t0 = nvgpu.device_async_copy %arg0[%tid, %c0], %s[%tid, %c4], 8 : memref<32x16xbf16> to {SMEM}
"""
    with pytest.raises(AssertionError, match="misaligned cp.async destination"):
        run_kernel(body, [_bf16_values((32, 16))], ["memref<32x16xbf16>"],
                   workgroup=f"%s : {SMEM}")


def test_vector_and_bit_ops():
    """vector.broadcast/insert/extract/from_elements, bitcasts bf16 <-> i16 and
    f32 <-> i32 (bit exact), xori/shrui/index_cast, vector.bitcast vector<2xbf16> ->
    vector<1xi32>."""
    body = """
      %x = memref.load %arg0[%tid] : memref<32xbf16>
      %xi = arith.bitcast %x : bf16 to i16
      %xw = arith.extui %xi : i16 to i32
      %sh = arith.constant 16 : i32
      %hi = arith.shli %xw, %sh : i32
      %f = arith.bitcast %hi : i32 to f32
      memref.store %f, %arg1[%tid] : memref<32xf32>
      %back = arith.shrui %hi, %sh : i32
      %mask = arith.constant 32768 : i32
      %neg = arith.xori %back, %mask : i32
      %n16 = arith.trunci %neg : i32 to i16
      %nb = arith.bitcast %n16 : i16 to bf16
      %v = vector.broadcast %nb : bf16 to vector<2xbf16>
      %v2 = vector.insert %x, %v [1] : bf16 into vector<2xbf16>
      %w = vector.bitcast %v2 : vector<2xbf16> to vector<1xi32>
      %wi = vector.extract %w[0] : i32 from vector<1xi32>
      %wx = arith.index_cast %wi : i32 to index
      %lo = arith.remui %wx, %c16 : index
      memref.store %nb, %arg2[%tid] : memref<32xbf16>
      %wf = arith.bitcast %wi : i32 to f32
      memref.store %wf, %arg3[%tid] : memref<32xf32>
      %e = vector.from_elements %x, %nb : vector<2xbf16>
      %e1 = vector.extract %e[1] : bf16 from vector<2xbf16>
      %same = arith.cmpf oeq, %e1, %nb : bf16
      %ok = arith.extui %same : i1 to i32
      %oki = arith.index_cast %ok : i32 to index
      %r = arith.addi %lo, %oki : index
      memref.store %r, %arg4[%tid] : memref<32xindex>
"""
    x = _bf16_values((32,), seed=11)
    outs = run_kernel(body, [x, np.zeros(32), np.zeros(32), np.zeros(32),
                             np.zeros(32, np.int64)],
                      ["memref<32xbf16>", "memref<32xf32>", "memref<32xbf16>",
                       "memref<32xf32>", "memref<32xindex>"])
    np.testing.assert_array_equal(outs[1], x.astype(np.float32))
    np.testing.assert_array_equal(outs[2], -x)
    bits = lambda a: a.astype(np.float32).view(np.uint32).astype(np.int64) >> 16  # noqa: E731
    word = (bits(-x) | (bits(x) << 16)) & 0xFFFFFFFF
    np.testing.assert_array_equal(outs[3].astype(np.float32).view(np.uint32), word)
    signed = np.where(word >= 2 ** 31, word - 2 ** 32, word)
    np.testing.assert_array_equal(outs[4], np.remainder(signed, 16) + 1)


ROUNDED = """
#ra = affine_map<(i, j, k) -> (i, k)>
#rb = affine_map<(i, j, k) -> (k, j)>
#rc = affine_map<(i, j, k) -> (i, j)>
#rid = affine_map<(i, j) -> (i, j)>
func.func @main(%x: memref<96x80xbf16>, %w: memref<80x72xbf16>) -> memref<96x72xbf16> {
  %zero = arith.constant 0.0 : f32
  %acc = memref.alloc() {latch.offset = 0 : i64} : memref<96x72xf32>
  linalg.generic {indexing_maps = [#rid], iterator_types = ["parallel", "parallel"]}
      outs(%acc : memref<96x72xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#ra, #rb, #rc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<96x80xbf16>, memref<80x72xbf16>) outs(%acc : memref<96x72xf32>) {
  ^bb0(%p: bf16, %q: bf16, %o: f32):
    %pe = arith.extf %p : bf16 to f32
    %qe = arith.extf %q : bf16 to f32
    %m = arith.mulf %pe, %qe : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  %out = memref.alloc() {latch.offset = 32768 : i64} : memref<96x72xbf16>
  linalg.generic {indexing_maps = [#rid, #rid], iterator_types = ["parallel", "parallel"]}
      ins(%acc : memref<96x72xf32>) outs(%out : memref<96x72xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %t = arith.truncf %v : f32 to bf16
    linalg.yield %t : bf16
  }
  return %out : memref<96x72xbf16>
}
"""


def check_rounded(options: str, k: int = 80) -> str:
    """ROUNDED (with a ``k``-long reduction) through the pass with ``options``, interpreted:
    nothing is left on the host but the launch writing the bf16 buffer, and its values are
    the f32 sums rounded to bf16.  Returns the module's text."""
    m, ctx = run_pass(ROUNDED.replace("96x80xbf16", f"96x{k}xbf16")
                      .replace("80x72xbf16", f"{k}x72xbf16"), options)
    host = str(m).split("gpu.module")[0]
    assert "linalg.generic" not in host and "memref<96x72xbf16>)" in host
    g = torch.Generator().manual_seed(3)
    a = _bf16(torch.randn(96, k, generator=g, dtype=torch.float64))
    b = _bf16(torch.randn(k, 72, generator=g, dtype=torch.float64))
    with ctx:
        (got,) = Simt(m).run([a.numpy(), b.numpy()])
    got = torch.from_numpy(np.asarray(got, np.float64))
    ref = (a @ b).float().bfloat16().double()      # f32 sums (exact here up to order)
    assert torch.equal(got, got.bfloat16().double())          # bf16 values
    err = float((got - ref).norm() / ref.norm())
    assert err < 2e-3, err
    return str(m)


@pytest.mark.parametrize("options", ["", "{chip=sm_90a}"], ids=["mma", "wgmma"])
def test_split_k_sums_write_the_rounded_copy(options):
    """A zeroed product split along k (96 x 72 outputs, k 2112: one tile, many slices)
    whose only reader rounds it to bf16: the launch adding the slices writes the bf16
    buffer itself — left on the host one generic reading the workspace's slices and
    writing bf16, no zero fill, no f32 output, no rounding launch — with the bits of the
    slices added onto the zeros and then rounded (``round-sums=false``)."""
    k = 2112
    text = ROUNDED.replace("96x80xbf16", f"96x{k}xbf16").replace("80x72xbf16", f"{k}x72xbf16")
    g = torch.Generator().manual_seed(4)
    a = _bf16(torch.randn(96, k, generator=g, dtype=torch.float64))
    b = _bf16(torch.randn(k, 72, generator=g, dtype=torch.float64))
    got = {}
    for fused in (True, False):
        m, ctx = run_pass(text, "{" + " ".join(
            o for o in (options.strip("{}"), "" if fused else "round-sums=false") if o) + "}")
        host = str(m).split("gpu.module")[0]
        (_, grid, _), = _launches(m)
        assert grid[2] > 1                                   # split along k
        generics = host.split("linalg.generic")[1:]
        if fused:          # one generic: the slices (views of the workspace) in, bf16 out
            assert len(generics) == 1, len(generics)
            ins = generics[0].split(" ins(")[1].split(") outs(")[0]
            assert ins.count("%view") == grid[2] and "memref<96x72xbf16>" in \
                generics[0].split(") outs(")[1].split(")")[0]
            assert generics[0].count("arith.addf") == grid[2] and "arith.truncf" in generics[0]
        else:
            assert len(generics) == 3                 # fill, slices' sum, rounding
        with ctx:
            (out,) = Simt(m).run([a.numpy(), b.numpy()])
        got[fused] = np.asarray(out, np.float32).copy()
    assert np.array_equal(got[True].view(np.uint32), got[False].view(np.uint32))
    ref = (a @ b).float().bfloat16().double()
    err = float((torch.from_numpy(got[True]).double() - ref).norm() / ref.norm())
    assert err < 2e-3, err


def test_split_k_rounded_sums_map_to_vector_lanes():
    """The generic adding the slices into the bf16 copy is ordered innermost dimension
    first (latch-wrap-host-compute, which orders every other generic, ran before it was
    made): mapped to threads, each reads 8 consecutive f32 of every slice and stores 8
    bf16 — where in its grid order consecutive threads took elements a whole row (at
    TinyMoE B32: an expert) apart, one scalar load each (0.198 ms a launch, 317 GB/s)."""
    from latch.pipeline import run_pipeline

    k = 2112
    text = ROUNDED.replace("96x80xbf16", f"96x{k}xbf16").replace("80x72xbf16", f"{k}x72xbf16")
    m, ctx = run_pass(text, "{chip=sm_90a}")
    (_, grid, _), = _launches(m)
    with ctx:
        run_pipeline(m, "builtin.module(func.func(convert-linalg-to-parallel-loops), "
                        "latch-map-parallel-loops)")
    host = str(m).split("gpu.module")[0]
    launch = host[host.index("gpu.launch blocks"):]
    assert len(re.findall(r"vector\.load %view\S*\[.*vector<8xf32>", launch)) == grid[2]
    assert re.search(r"vector\.store .*memref<96x72xbf16>, vector<8xbf16>", launch)
    assert "memref.load %view" not in launch


# a SwiGLU gate: the product read only by an elementwise generic that rounds it to bf16
# first (silu(bf16(gate)) * up), the product's buffer placed by the memory plan
GATED = """
#ga = affine_map<(i, j, k) -> (i, k)>
#gb = affine_map<(i, j, k) -> (k, j)>
#gc = affine_map<(i, j, k) -> (i, j)>
#gid = affine_map<(i, j) -> (i, j)>
func.func @main(%x: memref<200x64xbf16>, %w: memref<64x136xbf16>,
                %up: memref<200x136xbf16>) -> memref<200x136xbf16> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %acc = memref.alloc() {latch.offset = 0 : i64} : memref<200x136xf32>
  linalg.generic {indexing_maps = [#gid], iterator_types = ["parallel", "parallel"]}
      outs(%acc : memref<200x136xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#ga, #gb, #gc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<200x64xbf16>, memref<64x136xbf16>) outs(%acc : memref<200x136xf32>) {
  ^bb0(%p: bf16, %q: bf16, %o: f32):
    %pe = arith.extf %p : bf16 to f32
    %qe = arith.extf %q : bf16 to f32
    %m = arith.mulf %pe, %qe : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  %out = memref.alloc() {latch.offset = 108800 : i64} : memref<200x136xbf16>
  linalg.generic {indexing_maps = [#gid, #gid, #gid], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %up : memref<200x136xf32>, memref<200x136xbf16>) outs(%out : memref<200x136xbf16>) {
  ^bb0(%v: f32, %u: bf16, %o: bf16):
    %t = arith.truncf %v : f32 to bf16
    %te = arith.extf %t : bf16 to f32
    %n = arith.negf %te : f32
    %e = math.exp %n : f32
    %d = arith.addf %e, %one : f32
    %sg = arith.divf %te, %d : f32
    %sb = arith.truncf %sg : f32 to bf16
    %y = arith.mulf %sb, %u : bf16
    linalg.yield %y : bf16
  }
  return %out : memref<200x136xbf16>
}
"""

FORM_GATED = ("builtin.module(latch-wrap-host-compute, latch-forward-zero-fills, "
              "latch-form-contraction-kernels{OPTIONS}, "
              "func.func(convert-linalg-to-parallel-loops), latch-map-parallel-loops{block=32,8}, "
              "lower-affine, canonicalize, cse)")


def _run_gated(monkeypatch, text: str, options: str, seed: int):
    """``text`` (GATED or a variant) through FORM_GATED with ``options``, with and without
    ROUND_FOR_READERS, run by the SIMT interpreter on bf16 inputs from ``seed``: ({on:
    outputs as float64 tensors}, {on: the host function's text}, (x, w, up))."""
    import torch

    from mlir import ir

    import latch.dialect
    from latch.passes import form_contraction_kernels as fck
    from latch.pipeline import run_pipeline
    from simt import Simt

    g = torch.Generator().manual_seed(seed)
    x = _bf16(torch.randn(200, 64, generator=g, dtype=torch.float64))
    w = _bf16(torch.randn(64, 136, generator=g, dtype=torch.float64))
    up = _bf16(torch.randn(200, 136, generator=g, dtype=torch.float64))
    got, hosts = {}, {}
    for on in (True, False):
        monkeypatch.setattr(fck, "ROUND_FOR_READERS", on)
        ctx = ir.Context()
        latch.dialect.load(ctx)
        with ctx, ir.Location.unknown():
            m = ir.Module.parse(text)
            run_pipeline(m, FORM_GATED.replace("{OPTIONS}", options))
            hosts[on] = str(m).split("gpu.module")[0]
            outs = Simt(m).run([x.numpy(), w.numpy(), up.numpy()])
        got[on] = [torch.from_numpy(np.asarray(o, np.float64)) for o in outs]
    return got, hosts, (x, w, up)


@pytest.mark.parametrize("options", ["{chip=sm_90a}", "", "{mma=false}"],
                         ids=["wgmma", "mma.sync", "simt"])
def test_product_written_rounded_for_its_rounding_reader(monkeypatch, options):
    """ROUND_FOR_READERS: the gate's f32 product, read only by a generic that rounds it to
    bf16 first, is written rounded by the kernel into a bf16 buffer at the f32 one's
    planned offset, and the reader takes bf16 without its truncf: no f32 buffer is left,
    and the result has the same bits as without the rewrite."""
    import torch

    got, hosts, (x, w, up) = _run_gated(monkeypatch, GATED, options, seed=7)
    for on, host in hosts.items():
        assert ("memref<200x136xf32>" in host) != on
        if on:
            assert "memref.alloc() {latch.offset = 0 : i64} : memref<200x136xbf16>" in host
    got = {on: outs[0] for on, outs in got.items()}
    assert torch.equal(got[True], got[False])
    ref = (F.silu((x @ w).float().bfloat16().float()).bfloat16() * up.bfloat16()).double()
    err = float((got[True] - ref).norm() / ref.norm())
    assert err < 1e-2, err


@pytest.mark.parametrize("options", ["", "{mma=false}"])
def test_rounded_output_written_by_the_kernel(options):
    """A zeroed product read only by its bf16 rounding: the kernel stores the rounded sums
    into the copy's buffer (edge tiles included: 96 x 72 is not a multiple of the tile) —
    the same values as rounding the f32 sums."""
    check_rounded(options)


# GATED with a second reader of the gate (the backward pass's silu derivative, here
# bf16(gate) * dy): every reader rounds it, so the product can still be written rounded;
# READ_WIDE makes the second reader use the f32 value itself, which keeps the f32 buffer
SECOND_READER = """
  %out2 = memref.alloc() {latch.offset = 163200 : i64} : memref<200x136xf32>
  linalg.generic {indexing_maps = [#gid, #gid, #gid], iterator_types = ["parallel", "parallel"]}
      ins(%acc, %up : memref<200x136xf32>, memref<200x136xbf16>) outs(%out2 : memref<200x136xf32>) {
  ^bb0(%v: f32, %u: bf16, %o: f32):
    %t = arith.truncf %v : f32 to bf16
    %te = arith.extf %t : bf16 to f32
    %ue = arith.extf %u : bf16 to f32
    %y = arith.mulf %te, %ue : f32
    linalg.yield %y : f32
  }
  return %out, %out2 : memref<200x136xbf16>, memref<200x136xf32>
}
"""
GATED_TWICE = GATED.replace("-> memref<200x136xbf16> {", "-> (memref<200x136xbf16>, memref<200x136xf32>) {") \
    .replace("  return %out : memref<200x136xbf16>\n}\n", SECOND_READER)
READ_WIDE = GATED_TWICE.replace("%y = arith.mulf %te, %ue : f32", "%y = arith.mulf %v, %ue : f32")


@pytest.mark.parametrize("text", [GATED_TWICE, READ_WIDE], ids=["both-round", "one-reads-f32"])
def test_product_written_rounded_for_all_its_rounding_readers(monkeypatch, text):
    """ROUND_FOR_READERS with two readers (a SwiGLU gate read by the forward silu and by
    the backward derivative): when both use the gate only rounded to bf16 the kernel writes
    it rounded and no f32 buffer is left; when one reads the f32 value, nothing changes.
    Either way the bits equal those of the program without the rewrite."""
    import torch

    got, hosts, (x, w, up) = _run_gated(monkeypatch, text, "{chip=sm_90a}", seed=11)
    for on, host in hosts.items():
        rounded = "memref.alloc() {latch.offset = 0 : i64} : memref<200x136xbf16>" in host
        assert rounded == (on and text is GATED_TWICE)
        assert ("memref.alloc() {latch.offset = 0 : i64} : memref<200x136xf32>" in host) \
            != rounded
    for a, b in zip(got[True], got[False]):
        assert torch.equal(a, b)
    gate = (x @ w).float()
    ref = (gate.bfloat16().float() if text is GATED_TWICE else gate) * up.float()
    err = float((got[True][1] - ref.double()).norm() / ref.double().norm())
    assert err < 1e-2, err
