"""The sm_90a contraction kernel (``passes/contraction_wgmma.py``: wgmma from 128-byte
swizzled shared memory) executed on the CPU by the SIMT interpreter (tests/py/simt.py),
compared with float64; the interpreter's reading of wgmma descriptors checked against what
the H200 did with the same probe kernels (bench/wgmma_probe.py and its recorded results);
and mutations of the kernel's synchronization or layout caught."""
from __future__ import annotations

import glob
import json
import os
import re
import sys

import numpy as np
import pytest

from simt import Race, Simt, formed
from test_contraction_simt import (_launches, _missing_barrier_inputs, check,
                                   contraction_text, run_pass)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WGMMA = "{chip=sm_90a}"


@pytest.mark.parametrize("sizes,a_idx,b_idx", [
    ({"m": 128, "n": 128, "k": 128}, "mk", "nk"),     # x @ W^T: both K-major, whole tiles
    ({"m": 136, "n": 72, "k": 192}, "mk", "kn"),      # dy @ W: B MN-major; edge tiles
    ({"m": 64, "n": 200, "k": 128}, "km", "kn"),      # a weight gradient: both MN-major
    ({"m": 72, "n": 40, "k": 64}, "km", "nk"),        # A MN-major, B K-major; one k-tile
    ({"m": 40, "n": 136, "k": 320}, "mk", "nk"),      # five k-tiles: every stage reused
], ids=["nt", "nn", "tn", "tt", "deep"])
def test_wgmma_layouts(sizes, a_idx, b_idx):
    m = check(sizes, a_idx, b_idx, "mn", options=WGMMA, expect_kernel="wgmma")
    text = str(m)
    assert "nvvm.fence.proxy" in text and text.count("nvvm.wgmma.mma_async") == 4
    # the transposed (MN-major) operands carry the transpose flag
    assert ("A[<bf16>, <one>, <col>]" in text) == (a_idx == "km")
    assert ("B[<bf16>, <one>, <row>]" in text) == (b_idx == "kn")


@pytest.mark.parametrize("sizes,a_idx,b_idx", [
    ({"m": 128, "n": 256, "k": 128}, "mk", "nk"),
    ({"m": 72, "n": 296, "k": 192}, "km", "kn"),      # edge tiles, MN-major
], ids=["nt", "tn-edges"])
def test_wgmma_256_wide_tile(monkeypatch, sizes, a_idx, b_idx):
    """The 128 x 256 tile (m64n256k16, 128 accumulators a thread), which n_tile gives
    outputs with 256+ columns and long k-loops (too large to interpret at such sizes)."""
    import latch.passes.contraction_wgmma as wg
    monkeypatch.setattr(wg, "BN", 256)
    m = check(sizes, a_idx, b_idx, "mn", options=WGMMA, expect_kernel="wgmma")
    assert "n = 256" in str(m)


@pytest.mark.parametrize("sizes,a_idx,b_idx", [
    ({"m": 300, "n": 600, "k": 64}, "mk", "nk"),      # 3 x 3 tiles of 128 x 256: groups 2 + 1
    ({"m": 136, "n": 712, "k": 128}, "mk", "kn"),     # 2 x 3 tiles, B MN-major, one group
], ids=["partial-group", "one-group"])
def test_wgmma_tiles_in_groups_of_m_tiles(monkeypatch, sizes, a_idx, b_idx):
    """Wide outputs: blocks take the tiles in groups of RASTER_GROUP m-tiles (here 2, so a
    3 x 3 grid has a last group of one m-tile); every tile is still computed exactly once,
    edge tiles guarded (an f64 reference over the whole output)."""
    import latch.passes.form_contraction_kernels as fck
    monkeypatch.setattr(fck, "RASTER_GROUP", 2)
    m = check(sizes, a_idx, b_idx, "mn", options=WGMMA, expect_kernel="wgmma")
    assert "arith.minui" in str(m).split("nvvm.wgmma.fence")[0]


def test_tile_order_is_a_permutation_of_the_tiles():
    """tile_order's grouping, evaluated as the kernel computes it, visits every tile of
    a grid once, for grids with and without a partial last group; narrow grids keep the
    grid's own order."""
    from latch.passes.form_contraction_kernels import RASTER_GROUP, tile_order

    assert tile_order(RASTER_GROUP, 256) == 0 and tile_order(128, 1) == 0
    assert tile_order(128, 256) == RASTER_GROUP          # TinyMoE B32's LM head
    for gx, gy, group in [(5, 3, 2), (128, 16, 8), (9, 20, 8), (3, 7, 3)]:
        seen = []
        for by in range(gy):
            for bx in range(gx):
                linear = by * gx + bx
                first = linear // (group * gx) * group
                height = min(gy - first, group)
                within = linear % (group * gx)
                seen.append((first + within % height, within // height))
        assert sorted(seen) == [(m, n) for m in range(gy) for n in range(gx)]
        # the first `group` x ... blocks share `group` m-tiles
        assert {m for m, _ in seen[:group * 2]} == set(range(min(group, gy)))


def test_tiling_rule():
    """The cost model's (tile width, k slices): 256 columns where the output has them and
    the waves stay full, k slices only where the output tiles leave the GPU idle long
    enough to pay for the partial sums."""
    from test_contraction_simt import contraction_text

    import latch.passes.contraction_wgmma as wg
    from latch.passes.form_contraction_kernels import match_contraction
    from mlir import ir
    import latch.dialect

    def tiling(m, n, k, batch=0):
        ctx = ir.Context()
        latch.dialect.load(ctx)
        sizes = {"m": m, "n": n, "k": k}
        idx = ("km", "kn", "mn")
        if batch:
            sizes = {"b": batch, **sizes}
            idx = ("bkm", "bkn", "bmn")
        with ctx, ir.Location.unknown():
            mod = ir.Module.parse(contraction_text(sizes, *idx))
            f = mod.body.operations[0]
            op = next(o for o in f.regions[0].blocks[0].operations
                      if o.operation.name == "linalg.generic")
            return wg.tiling(match_contraction(op.operation))

    assert tiling(32768, 2304, 768) == (256, 1)       # B32's qkv projection
    assert tiling(2304, 768, 32768) == (256, 2)       # its weight gradient: 54 tiles
    assert tiling(1024, 768, 10240, 8) == (256, 2)    # B32's expert weight gradients
    assert tiling(640, 768, 1024, 8) == (256, 1)      # B2's experts: 120 tiles, one wave
    assert tiling(768, 2304, 2048) == (128, 1)        # B2's qkv weight gradient
    assert tiling(768, 768, 2048) == (128, 3)         # B2's out-projection weight gradient
    assert tiling(32768, 128, 768) == (128, 1)        # too few columns for 256


def test_wgmma_batched():
    m = check({"b": 2, "m": 72, "n": 48, "k": 128}, "bmk", "bkn", "bmn", options=WGMMA,
              expect_kernel="wgmma")
    assert [la[1] for la in _launches(m)] == [(1, 1, 2)]



@pytest.mark.parametrize("sizes,a_idx,b_idx,c_idx", [
    # dy @ W_out viewed [k, heads, dh]: the n group (h, d) with loop d first, as the
    # attention output-projection's backward reaches the pass (TinyMoE's out-projection)
    ({"d": 64, "h": 2, "m": 72, "k": 64}, "mk", "khd", "mhd"),
    # a reduction over (b, t) with loop t first, both factors contiguous along it
    ({"t": 64, "b": 2, "m": 64, "n": 72}, "mbt", "nbt", "mn"),
], ids=["n-group", "k-group"])
def test_wgmma_groups_of_permuted_loops(sizes, a_idx, b_idx, c_idx):
    """A group of several loops whose loop order is not the memory order still flattens
    onto contiguous elements (match_contraction orders groups by layout): both factors
    staged by 16-byte copies, the wgmma kernel, not the mma.sync fallback."""
    check(sizes, a_idx, b_idx, c_idx, options=WGMMA, expect_kernel="wgmma")

@pytest.mark.parametrize("a_idx,b_idx", [("mk", "nk"), ("km", "kn")],
                         ids=["along-k", "along-rows"])
def test_wgmma_f32_operands_rounded_in_the_product(a_idx, b_idx):
    """f32 buffers rounded to bf16 in the body: 8-element vector loads, rounded and stored
    by the threads into the swizzled layout (then fenced for the async proxy)."""
    m = check({"m": 72, "n": 40, "k": 128}, a_idx, b_idx, "mn", a_elt="f32>bf16",
              b_elt="f32>bf16", options=WGMMA, expect_kernel="wgmma")
    assert "nvgpu.device_async_copy" not in str(m)


def test_wgmma_split_k():
    """A weight gradient with few output tiles and a long reduction: k slices of whole
    64-deep tiles into the workspace, added in order."""
    m = check({"m": 64, "n": 64, "k": 2112}, "km", "kn", "mn", options=WGMMA,
              expect_kernel="wgmma")
    (_, grid, _), = _launches(m)
    assert grid[2] > 1


def test_operands_the_threads_convert_keep_mma_sync():
    """A factor with index math fused in (a strided view, an unaligned offset) cannot be
    copied 16 bytes at a time into the swizzled layout: that product keeps the mma.sync
    kernel on sm_90a too; so does a reduction that is not a multiple of 64."""
    check({"m": 40, "n": 24, "k": 64}, "mk", "nk", "mn", b_elt="f32>bf16",
          a_layout="strided<[128, 1], offset: 3>", options=WGMMA, expect_kernel="mma")
    check({"m": 40, "n": 24, "k": 96}, "mk", "nk", "mn", options=WGMMA, expect_kernel="mma")


# ---------------------------------------------------------------------------------------
# mutations: the interpreter must catch each
# ---------------------------------------------------------------------------------------
SIZES = ({"m": 72, "n": 136, "k": 384}, "km", "kn", "mn")      # 6 k-tiles, MN-major


def _mutated(pattern: str, replacement: str, options: str = WGMMA):
    from mlir import ir

    text = contraction_text(*SIZES)
    m, ctx = run_pass(text, options)
    src = str(m)
    new, n = re.subn(pattern, replacement, src)
    assert n >= 1, pattern
    with ctx:
        return ir.Module.parse(new), ctx


@pytest.mark.parametrize("pattern,replacement,message", [
    (r"nvvm\.fence\.proxy \{[^}]*\}", "", "without fence.proxy.async"),
    (r"nvvm\.wgmma\.wait\.group\.sync\.aligned 1", "nvvm.wgmma.wait.group.sync.aligned 2",
     "wgmma group of another warpgroup"),
    (r"nvvm\.cp\.async\.wait\.group 1", "nvvm.cp.async.wait.group 2", "before its wait"),
    (r"gpu\.barrier", "", "no barrier in between"),
], ids=["no-fence", "wgmma-wait-2", "cp-async-wait-2", "no-barrier"])
def test_interpreter_catches_broken_synchronization(pattern, replacement, message):
    m, ctx = _mutated(pattern, replacement)
    inputs = _missing_barrier_inputs(*SIZES, "bf16")
    with ctx, pytest.raises(Race, match=message):
        Simt(m).run(inputs)


@pytest.mark.parametrize("what", ["swizzle", "stride", "transpose"])
def test_interpreter_catches_layout_mistakes(monkeypatch, what):
    """A descriptor or a staging layout off by one detail gives wrong numbers."""
    import latch.passes.contraction_wgmma as wg
    if what == "swizzle":          # the copies skip the XOR the descriptor's mode expects
        monkeypatch.setattr(wg, "_desc_fields",
                            lambda mn_major: (1 << 16) | (64 << 32) if not mn_major
                            else (512 << 16) | (64 << 32))
    elif what == "stride":         # leading / stride offsets of MN-major swapped
        monkeypatch.setattr(wg, "_desc_fields",
                            lambda mn_major: ((64 << 16) | (512 << 32) | (1 << 62))
                            if mn_major else (1 << 16) | (64 << 32) | (1 << 62))
    with pytest.raises(AssertionError):
        if what == "transpose":    # B's transpose flag dropped
            m, ctx = _mutated(r"B\[<bf16>, <one>, <row>\]", "B[<bf16>, <one>, <col>]")
            sizes, a_idx, b_idx, c_idx = SIZES
            inputs = _missing_barrier_inputs(*SIZES, "bf16")
            with ctx:
                sim = Simt(m)
                sim.run(inputs)
                ref = inputs[2] + np.einsum(f"{a_idx},{b_idx}->{c_idx}", inputs[0], inputs[1])
                got = np.asarray(sim.arguments[2], np.float64)
                assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5
        else:
            check(*SIZES, options=WGMMA, expect_kernel="wgmma")


# ---------------------------------------------------------------------------------------
# the interpreter's wgmma against the H200's
# ---------------------------------------------------------------------------------------
def _probe_results():
    files = sorted(glob.glob(os.path.join(ROOT, "bench", "results", "wgmma_probe-*.json")))
    assert files, "no recorded wgmma probe (bench/wgmma_probe.py run on the GPU)"
    with open(files[-1]) as f:
        return json.load(f)


def test_interpreter_reads_wgmma_operands_as_the_h200_did():
    """Every probe case (layout x descriptor reading x transpose flags) that the H200
    computed exactly, the interpreter computes exactly; every case the H200 got wrong, the
    interpreter gets wrong (or rejects).  So the interpreter's descriptor decoding is the
    chip's, not a second copy of the kernel generator's assumptions."""
    from mlir import ir

    import latch.dialect
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import wgmma_probe as probe
    recorded = _probe_results()
    assert recorded["gpu"].startswith("NVIDIA H")
    cases = {(r["trans_a"], r["trans_b"], r["a_layout"], r["b_layout"]): r["exact"]
             for r in recorded["records"] if "exact" in r}
    assert len(cases) == len(probe.cases()) and any(cases.values()) and \
        not all(cases.values())
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, size=(probe.M, probe.K)).astype(np.float64)
    b = rng.integers(-4, 5, size=(probe.N, probe.K)).astype(np.float64)
    want = a @ b.T
    row, col = probe.fragment_coords()
    agree = 0
    for (ta, tb, an, bn), exact_on_gpu in sorted(cases.items()):
        kernel = probe.kernel_text(ta, tb)
        host = f"""module attributes {{gpu.container_module}} {{
func.func @main(%ia: memref<4096xbf16>, %ib: memref<8192xbf16>, %out: memref<8192xf32>,
                %da: i64, %db: i64, %sa: i64, %sb: i64) {{
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %sh = arith.constant 32768 : i32
  gpu.launch_func @probe_{ta}{tb}::@k blocks in (%c1, %c1, %c1) threads in (%c128, %c1, %c1)
      dynamic_shared_memory_size %sh
      args(%ia : memref<4096xbf16>, %ib : memref<8192xbf16>, %out : memref<8192xf32>,
           %da : i64, %db : i64, %sa : i64, %sb : i64)
  return
}}
{kernel}}}"""
        fa, desc_a, step_a = probe.layouts(probe.M, "MN" if ta else "K")[an]
        fb, desc_b, step_b = probe.layouts(probe.N, "MN" if tb else "K")[bn]
        ia = np.zeros(4096)
        ib = np.zeros(8192)
        mn, k = np.meshgrid(np.arange(probe.M), np.arange(probe.K), indexing="ij")
        ia[np.vectorize(fa)(mn, k)] = a
        mn, k = np.meshgrid(np.arange(probe.N), np.arange(probe.K), indexing="ij")
        ib[np.vectorize(fb)(mn, k)] = b
        ctx = ir.Context()
        latch.dialect.load(ctx)
        with ctx, ir.Location.unknown():
            mod = ir.Module.parse(host)
            sim = Simt(mod)
            try:
                sim.run([ia, ib, np.zeros(8192), desc_a, desc_b, step_a, step_b])
                got = np.asarray(sim.arguments[2]).reshape(128, probe.N // 2)
                d = np.full((probe.M, probe.N), np.nan)
                d[row, col] = got
                exact_here = bool(np.array_equal(d, want))
            except AssertionError:       # an operand outside shared memory, unwritten...
                exact_here = False
        assert exact_here == exact_on_gpu, (ta, tb, an, bn)
        agree += 1
    assert agree == len(cases)


def test_wgmma_writes_a_zeroed_output_rounded_to_bf16():
    """A zeroed product read only by its bf16 rounding (latch-form-contraction-kernels
    writes the rounded sums into the copy's buffer, two columns per 4-byte store): the
    wgmma kernel's epilogue too, edge tiles included (96 x 72 is not a multiple of the
    tile)."""
    from test_contraction_simt import check_rounded

    kernel = check_rounded(WGMMA, k=128)
    assert "nvvm.wgmma.mma_async" in kernel and "vector<2xbf16>" in kernel
    # written through shared memory: 16-byte pieces of rows into the output
    assert "vector<8xbf16>" in kernel.split("gpu.module")[1]


@pytest.mark.parametrize("m,k,n", [(200, 128, 520), (136, 64, 200), (256, 64, 512)],
                         ids=["128x256-edges", "128x128-edges", "whole-tiles"])
def test_wgmma_bf16_output_through_shared_memory(m, k, n):
    """The rounded output tile staged in shared memory and written in 16-byte pieces
    (stages_output): several tiles in both directions, edge tiles cut at whole pieces,
    both tile widths; every element equals the f32 sums rounded to bf16 (up to order)."""
    from test_contraction_simt import run_pass

    mod, ctx = run_pass(_rounded_product(m, k, n), WGMMA)
    kernel = str(mod).split("gpu.module", 1)[1]
    assert "nvvm.wgmma.mma_async" in kernel and "vector<8xbf16>" in kernel
    _check_rounded(mod, ctx, m, k, n, seed=5)


def _rounded_product(m: int, k: int, n: int) -> str:
    """test_contraction_simt's ROUNDED (a zeroed product read only by its bf16 rounding)
    at [m, k] x [k, n]."""
    from test_contraction_simt import ROUNDED

    return (ROUNDED.replace("96x80", f"{m}x{k}").replace("80x72", f"{k}x{n}")
            .replace("96x72", f"{m}x{n}")
            .replace("latch.offset = 32768", f"latch.offset = {m * n * 4}"))


def _check_rounded(mod, ctx, m: int, k: int, n: int, seed: int) -> None:
    """Interpret ``mod`` (:func:`_rounded_product` through the pass) on random bf16
    factors: every element is the f32 sums rounded to bf16 (up to order)."""
    import torch

    from simt import Simt
    from test_contraction_simt import _bf16

    g = torch.Generator().manual_seed(seed)
    a = _bf16(torch.randn(m, k, generator=g, dtype=torch.float64))
    b = _bf16(torch.randn(k, n, generator=g, dtype=torch.float64))
    with ctx:
        (got,) = Simt(mod).run([a.numpy(), b.numpy()])
    got = torch.from_numpy(np.asarray(got, np.float64))
    ref = (a @ b).float().bfloat16().double()
    assert torch.equal(got, got.bfloat16().double())
    err = float((got - ref).norm() / ref.norm())
    assert err < 2e-3, err


def test_bench_gemm_with_bf16_output_is_one_wgmma_kernel():
    """bench/gemm_shapes.py's ``bf16out`` form (the sums rounded to bf16, as cuBLAS and
    autocast write them) through latch-bufferize and the sm_90a kernels: one wgmma launch
    that writes the rounded sums itself, equal to float64 rounded to bf16 (up to order)."""
    import torch
    from pathlib import Path

    from latch.pipeline import run_pipeline
    from test_contraction_simt import _bf16

    sys.path.insert(0, str(Path(ROOT) / "bench"))
    from gemm_shapes import mlir_text

    with formed(mlir_text(None, 136, 128, 200, "nt", out="bf16"),
                "builtin.module(inline, latch-bufferize)") as m:
        run_pipeline(m, "builtin.module(latch-wrap-host-compute, latch-forward-zero-fills, "
                        "latch-form-contraction-kernels{chip=sm_90a})")
        text = str(m)
        host = text.split("gpu.module")[0]
        assert host.count("gpu.launch_func") == 1 and "linalg.generic" not in host
        assert "nvvm.wgmma.mma_async" in text and "vector<2xbf16>" in text
        g = torch.Generator().manual_seed(0)
        a = _bf16(torch.randn(136, 128, generator=g, dtype=torch.float64))
        b = _bf16(torch.randn(200, 128, generator=g, dtype=torch.float64))
        out, = Simt(m).run([a.numpy(), b.numpy()])
    got = torch.from_numpy(np.asarray(out, np.float64))
    ref = (a @ b.T).float().bfloat16().double()
    assert torch.equal(got, got.bfloat16().double())
    assert float((got - ref).norm() / ref.norm()) < 2e-3


@pytest.mark.parametrize("sizes,a_idx,b_idx,short,options,kernel", [
    # a router: 8 columns in a 128-column tile (B K-major: its rows are the output's columns)
    ({"m": 256, "n": 8, "k": 128}, "mk", "nk", "b", WGMMA, "wgmma"),
    # a router's weight gradient: 8 output rows (A MN-major: the rows in 16-byte chunks)
    ({"m": 8, "n": 128, "k": 128}, "km", "kn", "a", WGMMA, "wgmma"),
    ({"m": 256, "n": 8, "k": 128}, "mk", "nk", "b", "", "mma"),
], ids=["wgmma-columns", "wgmma-rows", "mma-columns"])
def test_tiles_past_a_short_factor_read_nothing(monkeypatch, sizes, a_idx, b_idx, short,
                                                options, kernel):
    """A factor shorter than its tile (a router's 8 rows in a 128-row tile): each block reads
    each of its elements once per k-tile, not once per tile row (the clamped copies of the
    rows past it all read its last row: 16x the bytes, from one line), and the product is
    unchanged (the rows past it are zero-filled and feed only unstored cells)."""
    reads, bound = {}, []
    read, bind = Simt._read, Simt._bind

    def counting(self, mem, addr, emask, what="a read"):
        reads[id(mem)] = reads.get(id(mem), 0) + int(np.count_nonzero(emask))
        return read(self, mem, addr, emask, what)

    def binding(self, x, ty):
        ref = bind(self, x, ty)
        bound.append(ref)
        return ref

    monkeypatch.setattr(Simt, "_read", counting)
    monkeypatch.setattr(Simt, "_bind", binding)
    m = check(sizes, a_idx, b_idx, "mn", options=options, expect_kernel=kernel)
    (_, grid, _), = _launches(m)
    blocks = grid[0] * grid[1] * grid[2]
    operand = bound[0 if short == "a" else 1]
    n_elements = sizes["k"] * sizes["n" if short == "b" else "m"]
    assert reads[id(operand.mem)] == blocks * n_elements


@pytest.mark.parametrize("m,k,n", [(200, 320, 264), (256, 64, 128)],
                         ids=["edges-five-k-tiles", "whole-tiles-one-k-tile"])
def test_paired_blocks_kernel(monkeypatch, m, k, n):
    """``blocks-per-sm=2``: a product with enough tiles (here the threshold lowered to one
    tile) becomes 128 x 128 tiles in three stages declaring two resident blocks an SM
    (``nvvm.minctasm``, 97 KiB of shared memory); its rounded output (every stage reused
    over five k-tiles, edge tiles) still equals the f32 sums rounded to bf16 (up to order).
    Without the option, or under the threshold, the one-block kernel."""
    import latch.passes.contraction_wgmma as wg
    from test_contraction_simt import run_pass

    text = _rounded_product(m, k, n)
    paired = "{chip=sm_90a blocks-per-sm=2}"
    mod, _ = run_pass(text, paired)              # under the threshold: one block an SM
    assert "nvvm.minctasm" not in str(mod)
    monkeypatch.setattr(wg, "PAIRED_MIN_TILES", 1)
    mod, ctx = run_pass(text, paired)
    kernel = str(mod).split("gpu.module", 1)[1]
    assert "nvvm.minctasm = 2" in kernel and "n = 128" in kernel and "n = 256" not in kernel
    (launch,) = _launches(mod)
    assert launch[1] == (-(-n // 128), -(-m // 128), 1)
    assert "nvvm.cp.async.wait.group 0" in kernel          # three stages: one tile ahead
    _check_rounded(mod, ctx, m, k, n, seed=7)


def test_paired_blocks_rule():
    """Which products pair: no k slices and four waves of two blocks (1,056 tiles of
    128 x 128) — B32's large products, not B2's experts nor split weight gradients."""
    import latch.passes.contraction_wgmma as wg

    class Con:
        def __init__(self, m, n, batch=0):
            self.sizes = {"m": m, "n": n, "batch": batch}

        def size(self, group):
            return self.sizes[group]

    assert wg.paired_blocks(Con(10240, 1024, 8), 1)       # B32's expert products
    assert wg.paired_blocks(Con(32768, 768), 1)           # its attention out projection
    assert not wg.paired_blocks(Con(640, 1024, 8), 1)     # B2's experts: 320 tiles
    assert not wg.paired_blocks(Con(32768, 768), 2)       # k slices
    assert wg.PAIRED_STAGES * (wg.BM + wg.PAIRED_BN) * 128 + 1024 <= 228 * 1024 // 2 - 1024


PERSISTENT = "{chip=sm_90a persistent=true}"     # the default, said explicitly
TILEWISE = "{chip=sm_90a persistent=false}"


@pytest.mark.parametrize("m,k,n,wide", [
    (300, 320, 264, False),     # 3 x 3 tiles of 128 x 128, edges, five k-tiles
    (200, 128, 520, True),      # 2 x 3 tiles of 128 x 256, edges
    (256, 64, 512, True),       # whole tiles, one k-tile: the next prologue is the whole
])                              # k-loop's staging
def test_persistent_blocks_write_every_tile_rounded(monkeypatch, m, k, n, wide):
    """``persistent=true`` (here two blocks, so each walks several tiles): a block stages
    its next tile's first k-tiles after its products have read the stages, and writes the
    finished tile rounded to bf16 through the two stages that leaves idle; every element
    still equals the f32 sums rounded to bf16 (up to order), and the interpreter finds no
    shared-memory race (a staged tile overwritten before every thread read it, a stage
    refilled while a wgmma still reads it).  The default; persistent=false: a block a tile."""
    import latch.passes.contraction_wgmma as wg
    from test_contraction_simt import run_pass

    monkeypatch.setattr(wg, "PERSISTENT_BLOCKS", 2)
    monkeypatch.setattr(wg, "BN", 256 if wide else 128)
    text = _rounded_product(m, k, n)
    bn = 256 if wide else 128
    tiles = -(-n // bn) * -(-m // 128)
    mod, _ = run_pass(text, TILEWISE)
    (launch,) = _launches(mod)
    assert launch[1] == (-(-n // bn), -(-m // 128), 1)
    mod, _ = run_pass(text, WGMMA)
    assert _launches(mod)[0][1] == (2, 1, 1)
    mod, ctx = run_pass(text, PERSISTENT)
    (launch,) = _launches(mod)
    assert launch[1] == (2, 1, 1) and tiles > 2
    kernel = str(mod).split("gpu.module", 1)[1]
    # the first tile's prologue, the next tile's, the k-loop's one group a trip
    assert kernel.count("nvvm.cp.async.commit.group") == 2 * (wg.STAGES - 2) + 1
    _check_rounded(mod, ctx, m, k, n, seed=11)


@pytest.mark.parametrize("sizes,a_idx,b_idx,c_idx", [
    ({"m": 300, "n": 200, "k": 192}, "mk", "kn", "mn"),        # f32 output, edges
    ({"b": 3, "m": 136, "n": 72, "k": 128}, "bmk", "bkn", "bmn"),   # batched tiles
], ids=["f32-output", "batched"])
def test_persistent_blocks_accumulate_into_f32(monkeypatch, sizes, a_idx, b_idx, c_idx):
    """An output the kernel adds to in f32 (no staging through shared memory): the next
    tile's prologue comes after a barrier that every warpgroup reaches once its products
    are done; batched products walk the tiles of every batch entry."""
    import latch.passes.contraction_wgmma as wg

    monkeypatch.setattr(wg, "PERSISTENT_BLOCKS", 2)
    m = check(sizes, a_idx, b_idx, c_idx, options=PERSISTENT, expect_kernel="wgmma")
    (_, grid, _), = _launches(m)
    assert grid == (2, 1, 1)


def test_persistent_blocks_in_groups_of_m_tiles(monkeypatch):
    """Tiles taken in groups of m-tiles (tile_order) from the linear tile number a
    persistent block walks: every tile computed once."""
    import latch.passes.contraction_wgmma as wg
    import latch.passes.form_contraction_kernels as fck

    monkeypatch.setattr(fck, "RASTER_GROUP", 2)
    monkeypatch.setattr(wg, "PERSISTENT_BLOCKS", 4)
    m = check({"m": 300, "n": 600, "k": 64}, "mk", "nk", "mn", options=PERSISTENT,
              expect_kernel="wgmma")
    (_, grid, _), = _launches(m)
    assert grid == (4, 1, 1) and "arith.minui" in str(m).split("nvvm.wgmma.fence")[0]


def test_persistent_blocks_rule():
    """Which products persist: no k slices and more tiles than one wave of blocks."""
    import latch.passes.contraction_wgmma as wg

    class Con:
        def __init__(self, m, n, batch=0):
            self.sizes = {"m": m, "n": n, "batch": batch, "k": 768}

        def size(self, g):
            return self.sizes[g]

    import unittest.mock as mock
    with mock.patch.object(wg, "n_tile", lambda con: 256):
        assert wg.persistent_blocks(Con(32768, 2304), 1) == wg.PERSISTENT_BLOCKS
        assert wg.persistent_blocks(Con(32768, 2304), 2) == 0         # k slices
        assert wg.persistent_blocks(Con(640, 768, 8), 1) == 0          # 120 tiles: a wave
        assert wg.persistent_blocks(Con(640, 1024, 8), 1) == wg.PERSISTENT_BLOCKS   # 160
        assert wg.persistent_blocks(Con(10240, 1024, 8), 1) == wg.PERSISTENT_BLOCKS
