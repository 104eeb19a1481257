"""The Hopper (sm_90a) tensor-core contraction kernel: ``wgmma`` from swizzled shared memory.

``latch-form-contraction-kernels{wgmma=true}`` generates this kernel instead of the
``mma.sync`` one (``form_contraction_kernels.mma_kernel_text``) for a bf16 contraction whose
two factors both reach shared memory by 16-byte copies (``_staging``: ``k``/``rows`` through
``cp.async``, ``k-f32``/``rows-f32`` rounded by the threads); anything else keeps the
``mma.sync`` kernel.

Block: 256 threads, two *warpgroups* of 4 warps; a 128 x ``BN`` output tile (BN 128 or
256, and the split-K factor, chosen by the cost model of :func:`tiling`), warpgroup g
owning rows 64g .. 64g + 63 as one ``wgmma.mma_async m64n{BN}k16`` accumulator (BN / 2 f32
registers a thread, carried through the k-loop as one LLVM struct).  k-tiles of 64 pass
through ``STAGES`` shared-memory stages; each operand tile sits in a **128-byte swizzled**
layout that wgmma reads through a matrix descriptor (start address, leading / stride byte
offsets, swizzle mode; every stage 1024-byte aligned, since the swizzle is a function of
the address):

* K-major (the factor is contiguous along k: a forward ``x @ W^T``): row r of the tile is
  128 bytes (64 k), its 16-byte chunk c stored at chunk ``c ^ (r % 8)``; the descriptor's
  stride offset is 1024 bytes (8 rows), the leading offset unused; each k16 step moves the
  start address 32 bytes.
* MN-major (contiguous along its rows, a transposed operand: the weights of an input
  gradient, both factors of a weight gradient): 64-row blocks of 64 k-rows x 128 bytes,
  chunk c of k-row k at ``c ^ (k % 8)``; leading offset = the 8192 bytes between 64-row
  blocks, stride offset = 1024 bytes (8 k-rows); each k16 step moves 2048 bytes; the
  instruction's transpose flag set.

These readings of the descriptor were measured on the H200, not taken from the
documentation's prose: ``bench/wgmma_probe.py`` tried every layout and both readings of
the two offsets (bench/results/wgmma_probe-20261130T203939Z.json).

Pipeline (every thread both copies and multiplies; one barrier per k-tile): at k-tile kt a
thread waits for its copies of tile kt (``cp.async.wait_group STAGES-3``), fences them to
the async proxy (``fence.proxy.async``: wgmma reads shared memory through it), and the
block meets at a barrier; each warpgroup then issues the four k16 ``wgmma`` of tile kt as
one group and waits until at most one group (tile kt) is in flight — tile kt-1's are done —
and copies tile kt + STAGES - 2 into the stage tile kt - 2 used (every warpgroup finished
reading it before the barrier).  So STAGES - 2 tiles are loading while one multiplies.

Epilogue: a bf16 output (a just-zeroed product written rounded, ``stages_output``) goes
through the idle stages — each thread's accumulator pairs into a padded [128][BN] bf16
tile, then 16-byte pieces of whole rows out to global memory (a warp writes 512 contiguous
bytes); measured on the H200 (gemm_shapes-20261201T064324Z.json) 0.71-0.80 -> 0.84-0.93 of
cuBLAS on the forward shapes against the stores straight from the accumulator layout (8
rows x 16 bytes per store instruction).  f32 outputs and split-K workspaces keep those.
"""
from __future__ import annotations

from latch.passes import epilogue_readers
from latch.passes.form_contraction_kernels import (
    _WG, Contraction, _begin, _epilogue, _Kernel, _module, _pairable, _signature, _staging,
    _Text, copy_chunk, k_tile_range, open_edge_guard, output_index, past_the_factor,
    tile_coordinates)

BM, BK, THREADS = 128, 64, 256
#: n width of the output tile (128 or 256; None: :func:`tiling` chooses per contraction)
#: and shared-memory stages; bench/gemm_shapes.py measures the alternatives
BN, STAGES = None, 4
_ROW_BYTES = 128                 # one swizzled row: 64 bf16
_BLOCK_BYTES = 64 * _ROW_BYTES   # 64 rows (K-major) or 64 k-rows of a 64-row block (MN-major)


def wgmma_applies(con: Contraction) -> bool:
    """Whether both factors are staged by 16-byte copies (the swizzled layouts need them)."""
    return all(_staging(con, which, BK)[0] != "load" for which in (0, 1)) and \
        con.size("k") % BK == 0


#: The cost model :func:`tiling` chooses the tile width and the split-K factor by, fitted
#: to the per-launch times of the TinyMoE B2 and B32 updates on the H200
#: (bench/results/profile-tinymoe196m-b{2,32}-bf16-*.json, ``gpu_profile_launches.py``):
#: a block per SM (the stages take 128 or 192 KiB), each *wave* of blocks costs a fixed
#: ``_WAVE_US`` (pipeline fill, epilogue) plus ``_K_TILE_US[bn]`` per 64-deep k-tile; a
#: split writes its f32 partial sums and a second kernel reads them back and adds them to
#: the output (``_SUM_LAUNCH_US`` plus the bytes at ``_BYTES_PER_US``).
_SMS = 132
_WAVE_US = 3.0
_K_TILE_US = {128: 0.45, 256: 0.72}
_BYTES_PER_US = 3.3e6
_SUM_LAUNCH_US = 2.0
_MAX_SPLITS = 16
_MIN_SLICE = 2                   # k-tiles a split-K block keeps at least


def estimated_us(con: Contraction, bn: int, splits: int) -> float:
    """The cost model's time (us) of the contraction as 128 x ``bn`` tiles in ``splits``
    k slices, adding the partial sums included."""
    m, n, batch = con.size("m"), con.size("n"), max(1, con.size("batch"))
    tiles = -(-n // bn) * -(-m // BM) * batch
    k_tiles = -(-con.size("k") // BK)
    waves = -(-tiles * splits // _SMS)
    us = waves * (_WAVE_US + -(-k_tiles // splits) * _K_TILE_US[bn])
    if splits > 1:         # f32 partials written and read back, the output written
        us += _SUM_LAUNCH_US + 4 * m * n * batch * (2 * splits + 1) / _BYTES_PER_US
    return us


def tiling(con: Contraction) -> tuple[int, int]:
    """(output tile width ``bn``, split-K factor) with the least :func:`estimated_us`:
    256 columns where the output has them, 128 where that leaves fewer partial waves, and
    k slices where the output tiles alone leave the GPU idle for long enough to pay for
    the partial sums (fewer slices, then the wider tile, on a tie).  ``BN`` fixes the
    width.  Examples (H200): B32's qkv projection (32768 x 2304, k 768) -> (256, 1); B2's
    expert products (8 x 640 x 768, k 1024: 120 tiles of 256, one wave) -> (256, 1), where
    the earlier fixed rule (enough slices for 528 blocks) took two slices of 128 columns
    and a partial-sum pass; B2's 768 x 768 weight gradient over 2048 tokens -> 3 slices."""
    k_tiles = -(-con.size("k") // BK)
    widths = [BN] if BN is not None else [128] + ([256] if con.size("n") >= 256 else [])
    options = [(estimated_us(con, bn, s), s, -bn) for bn in widths
               for s in range(1, _MAX_SPLITS + 1) if s == 1 or k_tiles // s >= _MIN_SLICE]
    _, splits, neg_bn = min(options)
    return -neg_bn, splits


def n_tile(con: Contraction) -> int:
    """The output tile width :func:`tiling` chooses."""
    return tiling(con)[0]


#: :func:`paired_blocks`: the tile, the stages (3 x 32 KiB: two blocks' 2 x 97 KiB fit an
#: SM's 228) and the fewest 128 x 128 tiles (four waves of two blocks on 132 SMs)
PAIRED_BN, PAIRED_STAGES, PAIRED_MIN_TILES = 128, 3, 4 * 2 * _SMS


def paired_blocks(con: Contraction, splits: int) -> bool:
    """Whether the product runs as two resident blocks an SM (``latch-form-contraction-
    kernels{blocks-per-sm=2}``): 128 x 128 tiles in three stages, 128 registers a thread,
    so one block's epilogue (its rounded tile out through shared memory, an epilogue
    reader's loads) and pipeline fill overlap the other block's multiplies instead of
    leaving the tensor cores idle.  For products with many tiles and no k slices (the
    large ones of a B32 update); a few waves gain nothing from the overlap."""
    gx, gy, nb = tile_grid(con, 1, PAIRED_BN)
    return splits == 1 and gx * gy * nb >= PAIRED_MIN_TILES


#: :func:`persistent_blocks`: the blocks of a persistent product (one an SM)
PERSISTENT_BLOCKS = _SMS


def persistent_blocks(con: Contraction, splits: int) -> int:
    """The blocks a product runs as under ``latch-form-contraction-kernels{persistent}``,
    0 for a block a tile: products without k slices whose tiles (of the width
    :func:`tiling` chooses) fill more than one wave of ``PERSISTENT_BLOCKS``.  Each
    block walks tiles b, b + blocks, ... (the grid's order, so the blocks at work at any
    time share the tiles of one wave, as before) and stages the next tile's first k-tiles
    while its last one goes out: the pipeline fill of every tile after the first overlaps
    an epilogue instead of leaving the tensor cores idle."""
    gx, gy, nb = tile_grid(con, splits)
    return PERSISTENT_BLOCKS if splits == 1 and gx * gy * nb > PERSISTENT_BLOCKS else 0


def tile_grid(con: Contraction, splits: int = 1, bn: int | None = None) -> tuple:
    """(n-tiles, m-tiles, batch x splits): the grid of a block a tile."""
    bn = bn or n_tile(con)
    return (-(-con.size("n") // bn), -(-con.size("m") // BM),
            max(1, con.size("batch")) * splits)


def _desc_fields(mn_major: bool) -> int:
    """The constant bits of a descriptor: leading / stride byte offsets (16-byte units) and
    the 128-byte swizzle mode."""
    lead, stride = (_BLOCK_BYTES, 1024) if mn_major else (16, 1024)
    return ((lead >> 4) << 16) | ((stride >> 4) << 32) | (1 << 62)


def wgmma_kernel_text(con: Contraction, name: str, splits: int = 1, bn: int | None = None,
                      stages: int | None = None, blocks_per_sm: int = 1,
                      persistent: int = 0) -> tuple[str, tuple, tuple, int]:
    """(gpu.module text, grid, block, dynamic shared bytes) of the wgmma kernel;
    ``blocks_per_sm`` 2: the kernel declares two resident blocks an SM (see
    :func:`paired_blocks`); ``persistent`` > 0: at most that many blocks, each computing
    its tiles one after another (see :func:`persistent_blocks`)."""
    bn = bn or n_tile(con)
    stages = stages or STAGES
    assert bn in (128, 256) and stages >= 3
    t = _Text()
    k = _Kernel(con, t, (BM, bn, BK), narrow=True, splits=splits)
    K = con.size("k")
    gx, gy, nb = tile_grid(con, 1, bn)
    blocks = min(persistent, gx * gy * nb) if persistent and splits == 1 else 0
    if blocks:        # block b: tiles b, b + blocks, ...; coordinates inside the tile loop
        tid = t.emit("gpu.thread_id x")
        first_tile = t.emit("gpu.block_id x")
    else:
        tid, m0, n0, batch = _begin(t, con, k, BM, bn)
    a_bytes, b_bytes = BM * _ROW_BYTES, bn * _ROW_BYTES
    stage_bytes = a_bytes + b_bytes
    total = stages * stage_bytes
    # one bf16 view of the stages, starting at the first 1024-byte aligned shared address
    dyn = f"memref<?xi8, {_WG}>"
    sm_type = f"memref<{total // 2}xbf16, {_WG}>"
    t.line(f"%dyn = gpu.dynamic_shared_memory : {dyn}")
    base = t.emit(f"memref.extract_aligned_pointer_as_index %dyn : {dyn} -> index")
    aligned = t.arith("andi", t.add(base, 1023), -1024)
    shift = t.arith("subi", aligned, base)
    sm = t.emit(f"memref.view %dyn[{shift}][] : {dyn} to {sm_type}")
    addr16 = t.emit(f"arith.index_cast {t.arith('shrui', aligned, 4)} : index to i64")
    operands = []                      # (staging, input, rows, group, element base)
    for which, (rows, group, off) in enumerate(((BM, "m", 0), (bn, "n", a_bytes))):
        how, i = _staging(con, which, BK)
        assert how != "load", "wgmma_kernel_text needs 16-byte staged factors"
        operands.append((how, i, rows, group, off))
    warp = t.arith("divui", tid, 32)
    wg = t.arith("divui", warp, 4)

    def stage_tile(kt: str, stage: str, tile: tuple) -> None:
        """Copy both factors' k-tile ``kt`` of output tile ``tile`` (first row, first
        column, batch indices) into stage ``stage`` in the swizzled layouts."""
        m0, n0, batch = tile
        k0 = t.mul(kt, BK)
        stage0 = t.mul(stage, stage_bytes // 2)
        for how, i, rows, group, off in operands:
            row0 = m0 if group == "m" else n0
            limit = con.size(group)
            mtype = con.inputs[i].type
            base_e = t.add(stage0, off // 2)
            along_rows = how.startswith("rows")
            per_row = rows // 8 if along_rows else BK // 8      # 16-byte chunks per tile row
            for n in range(rows * BK // 8 // THREADS):
                lin = t.add(tid, n * THREADS)
                r = t.arith("divui", lin, per_row)
                c = t.arith("remui", lin, per_row)
                if not along_rows:           # tile row r = factor row, chunk c = k 8c..8c+7
                    first = t.add(row0, r)
                    fr = t.arith("minui", first, limit - 1) if limit > 1 else t.const(0)
                    fk = t.add(k0, t.mul(c, 8))
                    # K-major: row r at r * 64, chunk c at (c ^ r % 8) * 8
                    sw = t.arith("xori", c, t.arith("remui", r, 8))
                    dst = t.add(t.add(base_e, t.mul(r, 64)), t.mul(sw, 8))
                else:                        # tile row r = k, chunk c = factor rows 8c..8c+7
                    first = t.add(row0, t.mul(c, 8))
                    fr = t.arith("minui", first, limit - 8)
                    fk = t.add(k0, r)
                    # MN-major: 64-row block c / 8, k-row r at r * 64, chunk (c % 8) ^ (r % 8)
                    sw = t.arith("xori", t.arith("remui", c, 8), t.arith("remui", r, 8))
                    blk = t.mul(t.arith("divui", c, 8), _BLOCK_BYTES // 2)
                    dst = t.add(t.add(t.add(base_e, blk), t.mul(r, 64)), t.mul(sw, 8))
                dims = dict(batch)
                dims.update(k.split(group, fr))
                dims.update(k.split("k", fk))
                copy_chunk(t, how, f"%I{i}[{k.indices(i, dims)}]", mtype, f"{sm}[{dst}]",
                           sm_type, past_the_factor(t, con, how, limit, rows, first))

    def stage_if_any(tile: str, into: str, hi: str, coords: tuple) -> None:
        """Stage k-tile ``tile`` of output tile ``coords`` if that has it (below ``hi``);
        one cp.async group either way (the waits count groups)."""
        t.line(f"scf.if {t.emit(f'arith.cmpi ult, {tile}, {hi} : index')} {{")
        stage_tile(tile, into, coords)
        t.line("}")
        t.line("nvvm.cp.async.commit.group")

    def prologue(lo: str, hi: str, coords: tuple) -> None:
        """k-tiles lo .. lo + STAGES - 3 of output tile ``coords`` into stages 0 ..
        STAGES - 3."""
        for j in range(stages - 2):
            stage_if_any(t.add(lo, j), t.const(j), hi, coords)

    def output_tile(coords: tuple, first: str, next_prologue=None) -> None:
        """One output tile: its k-loop and its epilogue.  ``first``: "loop" (the k-loop's
        first trip stages the prologue) or a condition under which it is staged before the
        k-loop (the block's first tile; the others' were staged by the tile before);
        ``next_prologue()``, if given, stages the next tile's prologue as soon as no
        warpgroup reads the stages any more, before this tile's epilogue."""
        m0, n0, batch = coords
        reader = getattr(con, "reader", None)
        if reader is not None and reader.prefetch and stages_output(con, k):
            # the epilogue's other inputs asked of L2 while the block multiplies
            epilogue_readers.prefetch_rows(
                t, k, con, reader, epilogue_readers.kernel_operands(con, reader), tid,
                lambda row, col: output_index(k, batch, row, col), BM, bn)
        # the k-tile loop over this block's tiles (all, or its split-K slice)
        lo, hi = k_tile_range(t, k, K // BK)
        if first != "loop":
            t.line(f"scf.if {first} {{")
            prologue(lo, hi, coords)
            t.line("}")
        zero = t.emit("llvm.mlir.constant(0.0 : f32) : f32")
        acc = t.emit(f"llvm.mlir.undef : {acc_type}")
        for j in range(bn // 2):
            acc = t.emit(f"llvm.insertvalue {zero}, {acc}[{j}] : {acc_type}")
        kt, carried, result = t.fresh(), t.fresh(), t.fresh()
        t.line(f"{result} = scf.for {kt} = {lo} to {hi} step {t.const(1)} "
               f"iter_args({carried} = {acc}) -> ({acc_type}) {{")
        step = t.arith("subi", kt, lo)
        stage = t.arith("remui", step, stages)
        if first == "loop":
            # prologue (first iteration): tiles lo .. lo + STAGES - 3 into stages 0 ..
            # STAGES - 3
            t.line(f"scf.if {t.emit(f'arith.cmpi eq, {step}, {t.const(0)} : index')} {{")
            prologue(lo, hi, coords)
            t.line("}")
        t.line(f"nvvm.cp.async.wait.group {stages - 3}")
        t.line("nvvm.fence.proxy { kind = #nvvm.proxy_kind<async.shared>, "
               "space = #nvvm.shared_space<cta> }")
        t.line("gpu.barrier")
        # descriptors of this stage's tiles for this warpgroup (A rows 64 wg .. 64 wg + 63)
        stage_b = t.emit(f"arith.index_cast {t.mul(stage, stage_bytes >> 4)} : index to i64")
        wg_a = t.emit(f"arith.index_cast {t.mul(wg, _BLOCK_BYTES >> 4)} : index to i64")
        start = t.arith("addi", addr16, stage_b, "i64")
        descs = []
        for which, (how, _i, _rows, _group, off) in enumerate(operands):
            mn_major = how.startswith("rows")
            d = t.arith("addi", start, t.const(_desc_fields(mn_major) + (off >> 4), "i64"),
                        "i64")
            if which == 0:
                d = t.arith("addi", d, wg_a, "i64")
            k16 = (16 * _ROW_BYTES if mn_major else 32) >> 4  # start address per k16 step
            descs.append([d] + [t.arith("addi", d, t.const(s * k16, "i64"), "i64")
                                for s in range(1, BK // 16)])
        layout_a = "col" if operands[0][0].startswith("rows") else "row"
        layout_b = "row" if operands[1][0].startswith("rows") else "col"
        t.line("nvvm.wgmma.fence.aligned")
        cur = carried
        for s in range(BK // 16):
            cur = t.emit(
                f"nvvm.wgmma.mma_async {descs[0][s]}, {descs[1][s]}, {cur}, "
                f"<m = 64, n = {bn}, k = 16>, D[<f32>, <one>, <wrapped>], "
                f"A[<bf16>, <one>, <{layout_a}>], B[<bf16>, <one>, <{layout_b}>] "
                f": {acc_type} -> {acc_type}")
        t.line("nvvm.wgmma.commit.group.sync.aligned")
        t.line("nvvm.wgmma.wait.group.sync.aligned 1")
        # tile kt + STAGES - 2 into the stage of tile kt - 2 (no warpgroup reads it any more)
        stage_if_any(t.add(kt, stages - 2), t.arith("remui", t.add(step, stages - 2), stages),
                     hi, coords)
        t.line(f"scf.yield {cur} : {acc_type}")
        t.line("}")
        t.line("nvvm.wgmma.wait.group.sync.aligned 0")
        # accumulator register j of a thread: row 16 (warp % 4) + lane / 4 (+ 8), column
        # 8 (j / 4) + 2 (lane % 4) (+ 1) — the layout the probe confirmed
        lane = t.arith("remui", tid, 32)
        row_base = t.add(t.add(m0, t.mul(wg, 64)),
                         t.add(t.mul(t.arith("remui", warp, 4), 16), t.arith("divui", lane, 4)))
        col_base = t.add(n0, t.mul(t.arith("remui", lane, 4), 2))
        cells = []
        for j in range(bn // 2):
            row = t.add(row_base, 8 * ((j % 4) // 2))
            col = t.add(col_base, 8 * (j // 4) + j % 2)
            cells.append((row, col, t.emit(f"llvm.extractvalue {result}[{j}] : {acc_type}")))
        if stages_output(con, k):
            # persistent: the tile goes out through the stages the next prologue leaves
            # idle (STAGES - 2 and up)
            _staged_epilogue(t, k, batch, cells, sm, sm_type, tid, m0, n0, bn,
                             base=(stages - 2) * stage_bytes // 2 if next_prologue else 0,
                             then=next_prologue)
        else:
            if next_prologue is not None:
                t.line("gpu.barrier")     # every warpgroup's products have read the stages
                next_prologue()
            _epilogue(k, t, batch, cells, pairs=True)

    acc_type = "!llvm.struct<(" + ", ".join(["f32"] * (bn // 2)) + ")>"
    if not blocks:
        output_tile((m0, n0, batch), "loop")
        grid = (gx, gy, nb * splits)
    else:
        tiles = gx * gy * nb
        tile = t.fresh()
        t.line(f"scf.for {tile} = {first_tile} to {t.const(tiles)} step {t.const(blocks)} {{")

        def coordinates(linear: str) -> tuple:
            bx = t.arith("remui", linear, gx)
            rest = t.arith("divui", linear, gx)
            return tile_coordinates(t, con, k, BM, bn, bx, t.arith("remui", rest, gy),
                                    t.arith("divui", rest, gy))

        coords = coordinates(tile)

        def next_prologue() -> None:
            """The block's next tile (if any): its first k-tiles into stages 0 ..
            STAGES - 3 while this tile goes out."""
            here = (k.m0, k.n0, k.batch)
            nxt = t.add(tile, blocks)
            t.line(f"scf.if {t.emit(f'arith.cmpi ult, {nxt}, {t.const(tiles)} : index')} {{")
            there = coordinates(nxt)
            lo, hi = k_tile_range(t, k, K // BK)
            prologue(lo, hi, there)
            t.line("}")
            k.m0, k.n0, k.batch = here

        output_tile(coords, t.emit(f"arith.cmpi eq, {tile}, {first_tile} : index"),
                    next_prologue)
        t.line("}")
        grid = (blocks, 1, 1)
    text = _module(name, _signature(con, None, THREADS, splits, blocks_per_sm), t)
    return text, grid, (THREADS, 1, 1), total + 1024


#: bf16 elements of padding after each row of the staged output tile: rows 528 (or 272)
#: bytes apart, so the 8 rows a warp's accumulator pairs fall on start 4 banks apart and
#: its 32 four-byte writes hit 32 different banks
_PITCH_PAD = 8
#: whether bf16 outputs go through shared memory (bench/gemm_shapes.py's "bf16out-direct"
#: variant measures the accumulator-layout stores instead)
STAGE_OUTPUT = True


def stages_output(con: Contraction, k: _Kernel) -> bool:
    """Whether the tile is written through shared memory (:func:`_staged_epilogue`): a
    just-zeroed output written rounded to bf16 (``narrowed_by``), whose columns are its
    contiguous dimension in groups of 8 aligned elements, no split-K."""
    return stages(con, k.splits) and k.overwrite


def stages(con: Contraction, splits: int) -> bool:
    """:func:`stages_output` before the kernel is made (its output just zeroed)."""
    from mlir import ir

    if not STAGE_OUTPUT or splits > 1 or con.zeroed_by is None or con.narrowed_by is None \
            or not _pairable(con):
        return False
    last = ir.MemRefType(con.c.type).shape[-1]
    return last % 8 == 0


def _staged_epilogue(t: _Text, k: _Kernel, batch: dict, cells, sm: str, sm_type: str,
                     tid: str, m0: str, n0: str, bn: int, base: int = 0, then=None) -> None:
    """Write the output tile rounded to bf16 through shared memory: each thread puts its
    accumulator pairs (4 bytes) into the idle stages as a [128][bn + pad] bf16 tile, then
    the block copies it out in 16-byte pieces, a warp writing 512 contiguous bytes of a row
    (instead of 8 rows x 16 bytes per store instruction straight from the accumulator
    layout).  Edge tiles: pieces past the output's rows / columns are not written (the
    columns come in whole pieces: n % 8 == 0)."""
    con = k.con
    reader = getattr(con, "reader", None)
    names = epilogue_readers.kernel_operands(con, reader) if reader is not None else None
    pitch = bn + _PITCH_PAD
    t.line("nvvm.cp.async.wait.group 0")
    t.line("gpu.barrier")                 # every warpgroup's products have read the stages
    if then is not None:                  # (the next tile's prologue: below ``base``)
        then()
    for i in range(0, len(cells), 2):
        (row, col, lo), hi = cells[i], cells[i + 1][2]
        at = t.add(t.add(t.mul(t.arith("subi", row, m0), pitch), t.arith("subi", col, n0)),
                   base)
        pair = t.emit(f"vector.from_elements {t.emit(f'arith.truncf {lo} : f32 to bf16')}, "
                      f"{t.emit(f'arith.truncf {hi} : f32 to bf16')} : vector<2xbf16>")
        t.line(f"vector.store {pair}, {sm}[{at}] {{alignment = 4}} : {sm_type}, "
               "vector<2xbf16>")
    t.line("gpu.barrier")
    per_row = bn // 8
    pieces = BM * per_row // THREADS
    # a reader's loads for several pieces issued before their stores (which the compiler
    # cannot move loads across: it does not know the buffers apart), where no edge guard
    # separates them
    whole = k.con.size("m") % BM == 0 and k.con.size("n") % bn == 0
    group = epilogue_readers.GROUP if reader is not None and whole else 1
    for first in range(0, pieces, group):
        placed = []                   # [row, col, value, index, reader inputs] a piece
        for q in range(first, min(first + group, pieces)):
            piece = t.add(tid, q * THREADS)
            r = t.arith("divui", piece, per_row)
            c = t.mul(t.arith("remui", piece, per_row), 8)
            v = t.emit(f"vector.load {sm}[{t.add(t.add(t.mul(r, pitch), c), base)}] "
                       "{alignment = 16} : "
                       f"{sm_type}, vector<8xbf16>")
            row, col = t.add(m0, r), t.add(n0, c)
            index = loaded = None
            if group > 1:             # loaded ahead (no guard: whole tiles)
                index = output_index(k, batch, row, col)
                loaded = epilogue_readers.load_piece(t, con, reader, names, index)
            placed.append((row, col, v, index, loaded))
        for row, col, v, index, loaded in placed:
            cond = open_edge_guard(t, k, row, col)
            if index is None:
                index = output_index(k, batch, row, col)
            if reader is None or reader.store_product:
                t.line(f"vector.store {v}, %C[{index}] {{alignment = 16}} : {con.c.type}, "
                       "vector<8xbf16>")
            if reader is not None:    # the elementwise op after the product, on these 8
                if loaded is None:
                    loaded = epilogue_readers.load_piece(t, con, reader, names, index)
                epilogue_readers.emit_piece(t, con, reader, names, index, v, loaded)
            if cond is not None:
                t.line("}")
