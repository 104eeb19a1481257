"""The Hopper (sm_90a) tensor-core contraction kernel: ``wgmma`` from swizzled shared memory.

``latch-form-contraction-kernels{wgmma=true}`` generates this kernel instead of the
``mma.sync`` one (``form_contraction_kernels.mma_kernel_text``) for a bf16 contraction whose
two factors both reach shared memory by 16-byte copies (``_staging``: ``k``/``rows`` through
``cp.async``, ``k-f32``/``rows-f32`` rounded by the threads); anything else keeps the
``mma.sync`` kernel.

Block: 256 threads, two *warpgroups* of 4 warps; a 128 x ``BN`` output tile (BN 128 or
256, :func:`n_tile`), warpgroup g
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

Persistent (:func:`persistent_kernel_text`, chosen where the output tiles outnumber
``PERSISTENT_BLOCKS``, one block an SM, and no split-K): each block takes every G-th tile
and runs the same pipeline over all its (tile, k-tile) steps, so the first k-tiles of its
next tile load while it writes the last one: measured on the H200, short reductions (k
768-1024: the forward products, TinyMoE's LM head) lost a quarter of their time to
filling the pipeline and writing the tile with the tensor cores idle, one tile a block.
"""
from __future__ import annotations

from latch.passes.form_contraction_kernels import (
    _WG, Contraction, _begin, _epilogue, _Kernel, _module, _signature, _staging, _Text,
    copy_chunk, k_tile_range, tile_order)

BM, BK, THREADS = 128, 64, 256
#: n width of the output tile (128 or 256; None: :func:`n_tile` chooses per contraction)
#: and shared-memory stages; bench/gemm_shapes.py measures the alternatives
BN, STAGES = None, 4
_LONG_SLICE = 16                 # k-tiles a block needs to amortize a 128 x 256 tile
_ROW_BYTES = 128                 # one swizzled row: 64 bf16
_BLOCK_BYTES = 64 * _ROW_BYTES   # 64 rows (K-major) or 64 k-rows of a 64-row block (MN-major)


def wgmma_applies(con: Contraction) -> bool:
    """Whether both factors are staged by 16-byte copies (the swizzled layouts need them)."""
    return all(_staging(con, which, BK)[0] != "load" for which in (0, 1)) and \
        con.size("k") % BK == 0


def n_tile(con: Contraction) -> int:
    """256 columns per block where the output has them, unless split-K (spreading the
    reduction to fill the GPU) would leave each block fewer than ``_LONG_SLICE`` k-tiles;
    else 128.  Measured on the H200 (bench/results/gemm_shapes-20261130T204458Z.json):
    the wider tile is 5-50% faster on every B32 shape (the wgmma's B operand read once per
    64 x 256 product instead of per 64 x 128), and slower where split-K leaves each block
    4 k-tiles (B2's 768 x 2304 weight gradient over 2048 tokens: 0.107 vs 0.066 ms)."""
    from latch.passes.form_contraction_kernels import split_factor

    if BN is not None:
        return BN
    n, k_tiles = con.size("n"), con.size("k") // BK
    if n < 256:
        return 128
    grid = (-(-n // 256), -(-con.size("m") // BM), max(1, con.size("batch")))
    splits = split_factor(grid, k_tiles)
    return 256 if splits == 1 or k_tiles // splits >= _LONG_SLICE else 128


def _desc_fields(mn_major: bool) -> int:
    """The constant bits of a descriptor: leading / stride byte offsets (16-byte units) and
    the 128-byte swizzle mode."""
    lead, stride = (_BLOCK_BYTES, 1024) if mn_major else (16, 1024)
    return ((lead >> 4) << 16) | ((stride >> 4) << 32) | (1 << 62)


class _Smem:
    """The shared-memory stages of one block: a bf16 view starting at the first 1024-byte
    aligned address of the dynamic shared memory, and that address / 16 (descriptors)."""

    def __init__(self, t: _Text, total: int):
        dyn = f"memref<?xi8, {_WG}>"
        self.type = f"memref<{total // 2}xbf16, {_WG}>"
        t.line(f"%dyn = gpu.dynamic_shared_memory : {dyn}")
        base = t.emit(f"memref.extract_aligned_pointer_as_index %dyn : {dyn} -> index")
        aligned = t.arith("andi", t.add(base, 1023), -1024)
        shift = t.arith("subi", aligned, base)
        self.view = t.emit(f"memref.view %dyn[{shift}][] : {dyn} to {self.type}")
        self.addr16 = t.emit(f"arith.index_cast {t.arith('shrui', aligned, 4)} : index to i64")


def _operands(con: Contraction, bn: int) -> list:
    """(staging, input, tile rows, group, byte offset in a stage) of factor A and B."""
    out = []
    for which, (rows, group, off) in enumerate(((BM, "m", 0), (bn, "n", BM * _ROW_BYTES))):
        how, i = _staging(con, which, BK)
        assert how != "load", "wgmma_kernel_text needs 16-byte staged factors"
        out.append((how, i, rows, group, off))
    return out


def _stage_tile(t: _Text, k: _Kernel, operands, smem: _Smem, tid: str, origin: dict,
                batch: dict, kt: str, stage: str, stage_bytes: int) -> None:
    """Copy both factors' k-tile ``kt`` of the output tile at ``origin`` (group -> first
    row: m0, n0) into stage ``stage`` in the swizzled layouts."""
    con = k.con
    sm, sm_type = smem.view, smem.type
    k0 = t.mul(kt, BK)
    stage0 = t.mul(stage, stage_bytes // 2)
    for how, i, rows, group, off in operands:
        row0 = origin[group]
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
                fr = t.add(row0, r)
                fr = t.arith("minui", fr, limit - 1) if limit > 1 else t.const(0)
                fk = t.add(k0, t.mul(c, 8))
                # K-major: row r at r * 64, chunk c at (c ^ r % 8) * 8
                sw = t.arith("xori", c, t.arith("remui", r, 8))
                dst = t.add(t.add(base_e, t.mul(r, 64)), t.mul(sw, 8))
            else:                        # tile row r = k, chunk c = factor rows 8c..8c+7
                fr = t.arith("minui", t.add(row0, t.mul(c, 8)), limit - 8)
                fk = t.add(k0, r)
                # MN-major: 64-row block c / 8, k-row r at r * 64, chunk (c % 8) ^ (r % 8)
                sw = t.arith("xori", t.arith("remui", c, 8), t.arith("remui", r, 8))
                blk = t.mul(t.arith("divui", c, 8), _BLOCK_BYTES // 2)
                dst = t.add(t.add(t.add(base_e, blk), t.mul(r, 64)), t.mul(sw, 8))
            dims = dict(batch)
            dims.update(k.split(group, fr))
            dims.update(k.split("k", fk))
            copy_chunk(t, how, f"%I{i}[{k.indices(i, dims)}]", mtype, f"{sm}[{dst}]",
                       sm_type)


def _descriptors(t: _Text, operands, smem: _Smem, stage: str, wg: str,
                 stage_bytes: int) -> list:
    """Per factor, the wgmma descriptors of the four k16 steps of stage ``stage`` (A: this
    warpgroup's 64 rows)."""
    stage_b = t.emit(f"arith.index_cast {t.mul(stage, stage_bytes >> 4)} : index to i64")
    wg_a = t.emit(f"arith.index_cast {t.mul(wg, _BLOCK_BYTES >> 4)} : index to i64")
    start = t.arith("addi", smem.addr16, stage_b, "i64")
    descs = []
    for which, (how, _i, _rows, _group, off) in enumerate(operands):
        mn_major = how.startswith("rows")
        d = t.arith("addi", start, t.const(_desc_fields(mn_major) + (off >> 4), "i64"), "i64")
        if which == 0:
            d = t.arith("addi", d, wg_a, "i64")
        k16 = (16 * _ROW_BYTES if mn_major else 32) >> 4      # start address per k16 step
        descs.append([d] + [t.arith("addi", d, t.const(s * k16, "i64"), "i64")
                            for s in range(1, BK // 16)])
    return descs


def _mma_tile(t: _Text, operands, descs, acc: str, acc_type: str, bn: int) -> str:
    """The four k16 wgmma of one k-tile as one group; returns the new accumulator."""
    layout_a = "col" if operands[0][0].startswith("rows") else "row"
    layout_b = "row" if operands[1][0].startswith("rows") else "col"
    t.line("nvvm.wgmma.fence.aligned")
    cur = acc
    for s in range(BK // 16):
        cur = t.emit(
            f"nvvm.wgmma.mma_async {descs[0][s]}, {descs[1][s]}, {cur}, "
            f"<m = 64, n = {bn}, k = 16>, D[<f32>, <one>, <wrapped>], "
            f"A[<bf16>, <one>, <{layout_a}>], B[<bf16>, <one>, <{layout_b}>] "
            f": {acc_type} -> {acc_type}")
    t.line("nvvm.wgmma.commit.group.sync.aligned")
    return cur


def _cells(t: _Text, tid: str, warp: str, wg: str, m0: str, n0: str, acc: str,
           acc_type: str, bn: int) -> list:
    """(row, col, value) of each accumulator register of this thread: register j at row
    16 (warp % 4) + lane / 4 (+ 8), column 8 (j / 4) + 2 (lane % 4) (+ 1) — the layout the
    probe confirmed."""
    lane = t.arith("remui", tid, 32)
    row_base = t.add(t.add(m0, t.mul(wg, 64)),
                     t.add(t.mul(t.arith("remui", warp, 4), 16), t.arith("divui", lane, 4)))
    col_base = t.add(n0, t.mul(t.arith("remui", lane, 4), 2))
    cells = []
    for j in range(bn // 2):
        row = t.add(row_base, 8 * ((j % 4) // 2))
        col = t.add(col_base, 8 * (j // 4) + j % 2)
        cells.append((row, col, t.emit(f"llvm.extractvalue {acc}[{j}] : {acc_type}")))
    return cells


def _zero_acc(t: _Text, acc_type: str, bn: int) -> str:
    zero = t.emit("llvm.mlir.constant(0.0 : f32) : f32")
    acc = t.emit(f"llvm.mlir.undef : {acc_type}")
    for j in range(bn // 2):
        acc = t.emit(f"llvm.insertvalue {zero}, {acc}[{j}] : {acc_type}")
    return acc


def wgmma_kernel_text(con: Contraction, name: str, splits: int = 1, bn: int | None = None,
                      stages: int | None = None,
                      persistent: bool = False) -> tuple[str, tuple, tuple, int]:
    """(gpu.module text, grid, block, dynamic shared bytes) of the wgmma kernel
    (``persistent``: :func:`persistent_kernel_text`)."""
    if persistent:
        return persistent_kernel_text(con, name, bn, stages)
    bn = bn or n_tile(con)
    stages = stages or STAGES
    assert bn in (128, 256) and stages >= 3
    t = _Text()
    k = _Kernel(con, t, (BM, bn, BK), narrow=True, splits=splits)
    M, N, K = con.size("m"), con.size("n"), con.size("k")
    tid, m0, n0, batch = _begin(t, con, k, BM, bn)
    stage_bytes = (BM + bn) * _ROW_BYTES
    total = stages * stage_bytes
    smem = _Smem(t, total)
    operands = _operands(con, bn)
    warp = t.arith("divui", tid, 32)
    wg = t.arith("divui", warp, 4)

    def stage_tile(kt: str, stage: str) -> None:
        _stage_tile(t, k, operands, smem, tid, {"m": m0, "n": n0}, batch, kt, stage,
                    stage_bytes)

    # the k-tile loop over this block's tiles (all, or its split-K slice)
    lo, hi = k_tile_range(t, k, K // BK)
    acc_type = "!llvm.struct<(" + ", ".join(["f32"] * (bn // 2)) + ")>"
    zero = t.emit("llvm.mlir.constant(0.0 : f32) : f32")
    acc = t.emit(f"llvm.mlir.undef : {acc_type}")
    for j in range(bn // 2):
        acc = t.emit(f"llvm.insertvalue {zero}, {acc}[{j}] : {acc_type}")
    kt, carried, result = t.fresh(), t.fresh(), t.fresh()
    t.line(f"{result} = scf.for {kt} = {lo} to {hi} step {t.const(1)} "
           f"iter_args({carried} = {acc}) -> ({acc_type}) {{")
    step = t.arith("subi", kt, lo)
    stage = t.arith("remui", step, stages)

    def stage_if_any(tile: str, into: str) -> None:
        """Stage k-tile ``tile`` if this block has it; one cp.async group either way (the
        waits count groups)."""
        t.line(f"scf.if {t.emit(f'arith.cmpi ult, {tile}, {hi} : index')} {{")
        stage_tile(tile, into)
        t.line("}")
        t.line("nvvm.cp.async.commit.group")

    # prologue (first iteration): tiles lo .. lo + STAGES - 3 into stages 0 .. STAGES - 3
    t.line(f"scf.if {t.emit(f'arith.cmpi eq, {step}, {t.const(0)} : index')} {{")
    for j in range(stages - 2):
        stage_if_any(t.add(lo, j), t.const(j))
    t.line("}")
    t.line(f"nvvm.cp.async.wait.group {stages - 3}")
    t.line("nvvm.fence.proxy { kind = #nvvm.proxy_kind<async.shared>, "
           "space = #nvvm.shared_space<cta> }")
    t.line("gpu.barrier")
    # descriptors of this stage's tiles for this warpgroup (A rows 64 wg .. 64 wg + 63)
    descs = _descriptors(t, operands, smem, stage, wg, stage_bytes)
    cur = _mma_tile(t, operands, descs, carried, acc_type, bn)
    t.line("nvvm.wgmma.wait.group.sync.aligned 1")
    # tile kt + STAGES - 2 into the stage of tile kt - 2 (no warpgroup reads it any more)
    stage_if_any(t.add(kt, stages - 2), t.arith("remui", t.add(step, stages - 2), stages))
    t.line(f"scf.yield {cur} : {acc_type}")
    t.line("}")
    t.line("nvvm.wgmma.wait.group.sync.aligned 0")
    cells = _cells(t, tid, warp, wg, m0, n0, result, acc_type, bn)
    _epilogue(k, t, batch, cells, pairs=True)
    text = _module(name, _signature(con, None, THREADS, splits), t)
    grid = (-(-N // bn), -(-M // BM), max(1, con.size("batch")) * splits)
    return text, grid, (THREADS, 1, 1), total + 1024


#: blocks of a persistent kernel: one an SM of an H100/H200 SXM (132 SMs).  Any grid is
#: correct (the kernel strides over the tiles by the grid's size); this one fills those
#: chips with one block an SM (the stages take 192 KB of shared memory).
PERSISTENT_BLOCKS = 132
#: whether contractions with more output tiles than PERSISTENT_BLOCKS get the persistent
#: kernel (bench/gemm_shapes.py's "tilewise" variant measures them without)
PERSISTENT = True


def persistent_applies(con: Contraction, grid: tuple, splits: int) -> bool:
    """A persistent kernel where the output tiles outnumber the blocks that run at once
    and no split-K is needed."""
    return PERSISTENT and splits == 1 and grid[0] * grid[1] * grid[2] > PERSISTENT_BLOCKS


def persistent_kernel_text(con: Contraction, name: str, bn: int | None = None,
                           stages: int | None = None) -> tuple[str, tuple, tuple, int]:
    """The wgmma kernel as a *persistent* kernel: block b computes output tiles b, b + G,
    b + 2G, ... (G = the grid's size; tiles in :func:`tile_order` within each batch
    element) through ONE pipeline over all its (tile, k-tile) steps.  Step s multiplies
    k-tile s % KT of its tile and stages step s + STAGES - 2, which near the end of a
    tile is already the next tile's first k-tiles; after the last k-tile of a tile the
    warpgroups wait for their products, write the tile (the same epilogue) and start the
    next from zero.  So the next tile's first loads are in flight during the epilogue
    instead of after it, and no block pays the pipeline's fill again; every tile's sums
    are the same products in the same order as the one-tile-a-block kernel's."""
    bn = bn or n_tile(con)
    stages = stages or STAGES
    assert bn in (128, 256) and stages >= 3
    t = _Text()
    k = _Kernel(con, t, (BM, bn, BK), narrow=True)
    M, N, K = con.size("m"), con.size("n"), con.size("k")
    gx, gy, nb = -(-N // bn), -(-M // BM), max(1, con.size("batch"))
    tiles, k_tiles = gx * gy * nb, K // BK
    group = tile_order(gx, gy)
    blocks = min(tiles, PERSISTENT_BLOCKS)
    tid = t.emit("gpu.thread_id x")
    bid = t.emit("gpu.block_id x")
    grid = t.emit("gpu.grid_dim x")
    mine = t.arith("divui", t.add(t.arith("subi", t.const(tiles), bid), t.arith(
        "subi", grid, 1)), grid)                       # ceil((tiles - b) / G)
    steps = t.mul(mine, k_tiles)
    stage_bytes = (BM + bn) * _ROW_BYTES
    total = stages * stage_bytes
    smem = _Smem(t, total)
    operands = _operands(con, bn)
    warp = t.arith("divui", tid, 32)
    wg = t.arith("divui", warp, 4)

    def tile_of(step: str) -> tuple[dict, dict, str]:
        """({"m": m0, "n": n0}, batch dims, k-tile) of pipeline step ``step``."""
        tile = t.add(bid, t.mul(t.arith("divui", step, k_tiles), grid))
        kt = t.arith("remui", step, k_tiles)
        bz = t.arith("divui", tile, gx * gy)
        within_b = t.arith("remui", tile, gx * gy)
        by, bx = t.arith("divui", within_b, gx), t.arith("remui", within_b, gx)
        if group:
            first = t.mul(t.arith("divui", within_b, group * gx), group)
            height = t.arith("minui", t.arith("subi", t.const(gy), first), t.const(group))
            within = t.arith("remui", within_b, group * gx)
            by = t.add(first, t.arith("remui", within, height))
            bx = t.arith("divui", within, height)
        batch = k.split("batch", bz) if con.groups["batch"] else {}
        return {"m": t.mul(by, BM), "n": t.mul(bx, bn)}, batch, kt

    def stage_if_any(step: str, into: str) -> None:
        """Stage pipeline step ``step`` if this block has it; one cp.async group either
        way (the waits count groups)."""
        t.line(f"scf.if {t.emit(f'arith.cmpi ult, {step}, {steps} : index')} {{")
        origin, batch, kt = tile_of(step)
        _stage_tile(t, k, operands, smem, tid, origin, batch, kt, into, stage_bytes)
        t.line("}")
        t.line("nvvm.cp.async.commit.group")

    acc_type = "!llvm.struct<(" + ", ".join(["f32"] * (bn // 2)) + ")>"
    acc = _zero_acc(t, acc_type, bn)
    s, carried, result = t.fresh(), t.fresh(), t.fresh()
    t.line(f"{result} = scf.for {s} = {t.const(0)} to {steps} step {t.const(1)} "
           f"iter_args({carried} = {acc}) -> ({acc_type}) {{")
    stage = t.arith("remui", s, stages)
    # prologue (first step): steps 0 .. STAGES - 3 into stages 0 .. STAGES - 3
    t.line(f"scf.if {t.emit(f'arith.cmpi eq, {s}, {t.const(0)} : index')} {{")
    for j in range(stages - 2):
        stage_if_any(t.const(j), t.const(j))
    t.line("}")
    t.line(f"nvvm.cp.async.wait.group {stages - 3}")
    t.line("nvvm.fence.proxy { kind = #nvvm.proxy_kind<async.shared>, "
           "space = #nvvm.shared_space<cta> }")
    t.line("gpu.barrier")
    descs = _descriptors(t, operands, smem, stage, wg, stage_bytes)
    cur = _mma_tile(t, operands, descs, carried, acc_type, bn)
    t.line("nvvm.wgmma.wait.group.sync.aligned 1")
    # step s + STAGES - 2 into the stage of step s - 2 (no warpgroup reads it any more):
    # near a tile's end, the next tile's first k-tiles
    stage_if_any(t.add(s, stages - 2), t.arith("remui", t.add(s, stages - 2), stages))
    last = t.emit(f"arith.cmpi eq, {t.arith('remui', s, k_tiles)}, "
                  f"{t.const(k_tiles - 1)} : index")
    nxt = t.fresh()
    t.line(f"{nxt} = scf.if {last} -> ({acc_type}) {{")
    t.line("nvvm.wgmma.wait.group.sync.aligned 0")
    origin, batch, _kt = tile_of(s)
    cells = _cells(t, tid, warp, wg, origin["m"], origin["n"], cur, acc_type, bn)
    _epilogue(k, t, batch, cells, pairs=True)
    t.line(f"scf.yield {_zero_acc(t, acc_type, bn)} : {acc_type}")
    t.line("} else {")
    t.line(f"scf.yield {cur} : {acc_type}")
    t.line("}")
    t.line(f"scf.yield {nxt} : {acc_type}")
    t.line("}")
    t.line("nvvm.wgmma.wait.group.sync.aligned 0")
    text = _module(name, _signature(con, None, THREADS), t)
    return text, (blocks, 1, 1), (THREADS, 1, 1), total + 1024
