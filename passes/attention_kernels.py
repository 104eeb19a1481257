"""``latch-form-attention-kernels``: buffer-form ``latch.attention`` / ``latch.attention_grad``
become launches of flash-style tensor-core kernels (stage 'kernels').

The decomposed attention stores the scores ``[..., L, S]`` and makes several passes over
them (row max, exponentials, row sums, and as many again backward): at TinyMoE B32 that is
1.6 GB per pass and about 95 of the update's 216 ms.  These kernels keep a 64 x 64 block
of scores in registers instead (online softmax, FlashAttention-2's schedule):

* **forward** (grid: query blocks of 64 x batch): 4 warps, 16 query rows each; the block's
  queries are staged once, the key and value tiles of 64 rows flow through two shared
  stages (``cp.async`` copies of tile j+1 in flight while tile j is used).  Per tile,
  ``S = Q Kᵀ`` with ``mma.sync`` m16n8k16 (bf16 -> f32), scaled, causally masked, the row
  maxima combined across the 4 threads of a row with shuffles, ``P = exp2(S - m)``, the
  running sums and the output rescaled, and ``O += bf16(P) V`` — the accumulator fragments
  of S are the A fragments of P (no shared-memory round trip).  Writes ``o`` (bf16) and
  the row log-sum-exp ``lse`` (f32, natural log).
* **dQ** (grid: query blocks x batch): per key tile, P recomputed from ``lse``,
  ``dP = dO Vᵀ``, ``dS = P (dP - delta)``, ``dQ += bf16(dS) K``; scaled at the end.
* **dK, dV** (grid: key blocks x batch): per query tile, ``Pᵀ`` and ``dPᵀ`` computed with
  the keys as rows (``K Qᵀ``, ``V dOᵀ``), ``dV += bf16(Pᵀ) dO``, ``dK += bf16(dSᵀ) Q``.

Two backward kernels, each owning its outputs, so no atomics and the result is
deterministic.  With ``causal`` the tiles above the diagonal are skipped (half the work)
and the diagonal tile is masked.  Shapes: ``[N, L, E]`` after collapsing the batch
dimensions; L and S multiples of 64, E a multiple of 16 up to 128 (the frontend only forms
the ops for such shapes; others are rejected here with the op's location).  A q/k/v/o/dO/
dQ/dK/dV operand may also be a strided ``[B, H, rows, E]`` view (the heads of a fused
projection, ``latch-attention-views``): block y then indexes it at ``[y / H, y % H]``;
its rows must be 16-byte aligned (:func:`strided_view`).

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-lower-attention,
one-shot-bufferize{bufferize-function-boundaries}, latch-form-attention-kernels)'``
"""
from __future__ import annotations

import dataclasses
import functools
import math

from latch.errors import PassError, PipelineError
from latch.dialect.opdef import attr_value
from latch.passes.base import ModulePass, fresh_symbol, function_definitions, \
    operation as _op, symbol_names
from latch.passes.form_contraction_kernels import _WG, _bytes, _ldmatrix, _Text

BLOCK = 64            # query (or key) rows per block and per tile
THREADS = 128         # 4 warps x 16 rows
PAD = 8               # elements of padding per shared row: ldmatrix rows in distinct banks
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_NEG_INF = "0xFF800000"
_MMA_ATTRS = ("{layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, "
              "multiplicandAPtxType = #nvvm.mma_type<bf16>, "
              "multiplicandBPtxType = #nvvm.mma_type<bf16>, "
              "shape = #nvvm.shape<m = 16, n = 8, k = 16>} : "
              "(i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>")


@dataclasses.dataclass(frozen=True)
class Shape:
    n: int           # batch entries (the batch dimensions flattened)
    L: int           # queries
    S: int           # keys
    E: int           # head dimension
    causal: bool
    scale: float
    heads: int = 1   # H of operands that are strided [B, H, rows, E] views (n = B * H)

    def check(self, where) -> None:
        if self.L % BLOCK or self.S % BLOCK or self.E % 16 or not 16 <= self.E <= 128:
            raise PassError(f"latch-form-attention-kernels: the kernels need L and S "
                            f"multiples of {BLOCK} and E a multiple of 16 up to 128; got "
                            f"L={self.L}, S={self.S}, E={self.E} (compile with "
                            "attention=\"flash\" for other shapes)", where)
        if self.causal and self.L != self.S:
            raise PassError("latch-form-attention-kernels: causal attention needs L == S",
                            where)


#: batch entries (heads) whose blocks are dispatched together, heaviest tiles first
#: (:func:`heavy_first_order`): at TinyMoE B32 1,024 blocks (two waves of the forward)
#: whose operands (256 KiB of keys and values a head forward, 512 KiB with the queries and
#: output gradients backward) stay in the H200's 50 MB L2 while the group runs
HEAD_GROUP = 64


def heavy_first_order(t: _Text, linear: str, tiles: int, n: int, heavy: str
                      ) -> tuple[str, str]:
    """(tile, batch entry) of block ``linear`` of a 1-D grid of ``tiles * n`` blocks.

    With a causal mask the blocks' work differs: the forward's and dQ's query block i
    loops over i + 1 key tiles (``heavy="last"``), dK/dV's key block j over ``tiles - j``
    query tiles (``heavy="first"``).  In a (tile, batch) grid the GPU dispatches blocks
    in index order, so the last blocks to start include long ones and the kernel ends on
    a tail of them.  Here the blocks come in groups of ``HEAD_GROUP`` batch entries, and
    within a group the heaviest tiles of all its entries first (longest work first: the
    tail is made of the shortest blocks); grouping keeps a group's keys and values in L2.
    Which block computes which tile changes nothing in any tile's arithmetic."""
    group = min(HEAD_GROUP, n)
    first = t.mul(t.arith("divui", linear, group * tiles), group)
    height = t.arith("minui", t.arith("subi", t.const(n), first), t.const(group))
    within = t.arith("remui", linear, group * tiles)
    rank = t.arith("divui", within, height)            # 0: the heaviest tile
    entry = t.add(first, t.arith("remui", within, height))
    tile = t.arith("subi", t.const(tiles - 1), rank) if heavy == "last" else rank
    return tile, entry


class _Gen:
    """Emission helpers shared by the three kernels (one instance per kernel)."""

    def __init__(self, shape: Shape, operands: dict | None = None, tiles: int = 0,
                 heavy: str | None = None):
        self.s = shape
        self.t = t = _Text()
        self.E = shape.E
        self.types: dict[str, str] = {}        # shared tile -> its memref type
        # operand -> its memref type where it is a strided [B, H, rows, E] view (indexed
        # [bz / H, bz % H, row, col]) instead of a contiguous [N, rows, E] buffer
        self.operands = dict(operands or {})
        self.tid = t.emit("gpu.thread_id x")
        self.heavy_first = bool(heavy) and shape.causal and shape.n > 1
        if self.heavy_first:           # a 1-D grid: :func:`heavy_first_order`
            self.bx, self.bz = heavy_first_order(t, t.emit("gpu.block_id x"), tiles, shape.n,
                                                 heavy)
        else:
            self.bx = t.emit("gpu.block_id x")
            self.bz = t.emit("gpu.block_id y")
        if self.operands:
            heads = shape.heads
            self.batch = t.arith("divui", self.bz, heads)
            self.head = t.arith("remui", self.bz, heads)
        self.lane = t.arith("remui", self.tid, 32)
        self.wrow = t.mul(t.arith("divui", self.tid, 32), 16)      # the warp's first row
        self.g = t.arith("divui", self.lane, 4)                    # accumulator row (and +8)
        self.tq = t.arith("remui", self.lane, 4)                   # accumulator column pair
        self.quarter = t.arith("divui", self.lane, 8)
        self.row8 = t.arith("remui", self.lane, 8)
        self.views: list[tuple[str, str]] = []

    def grid(self, tiles: int) -> tuple[int, int, int]:
        """The launch grid: (tiles, batch entries), or one dimension of both in the
        heavy-first order."""
        n = self.s.n
        return (tiles * n, 1, 1) if self.heavy_first else (tiles, n, 1)

    # -- constants and scalar math
    def f32(self, x: float) -> str:
        return self.t.const(x, "f32")

    def neg_inf(self) -> str:
        key = ("-inf", "f32")
        if key not in self.t.consts:
            name = f"%c{len(self.t.consts)}"
            self.t.consts[key] = name
            self.t.const_lines.append(f"{name} = arith.constant {_NEG_INF} : f32")
        return self.t.consts[key]

    def f(self, op: str, *xs: str) -> str:
        return self.t.emit(f"{op} {', '.join(xs)} : f32")

    def shuffle_xor(self, x: str, offset: int) -> str:
        t = self.t
        r = t.fresh()
        t.line(f"{r}, {t.fresh()} = gpu.shuffle xor {x}, {t.const(offset, 'i32')}, "
               f"{t.const(32, 'i32')} : f32")
        return r

    def quad(self, x: str, op: str) -> str:
        """Combine ``x`` over the 4 threads that hold one accumulator row."""
        for off in (1, 2):
            x = self.f(op, x, self.shuffle_xor(x, off))
        return x

    # -- operands
    def type_of(self, name: str, default: str) -> str:
        """The memref type of operand ``name``: its strided view's, else ``default``."""
        return self.operands.get(name, default)

    def at(self, name: str, row: str, col: str) -> str:
        """``name[...]`` at (this block's batch entry, ``row``, ``col``)."""
        if name in self.operands:
            return f"{name}[{self.batch}, {self.head}, {row}, {col}]"
        return f"{name}[{self.bz}, {row}, {col}]"

    # -- shared memory
    def shared(self, name: str, stages: int = 2) -> str:
        """A [stages][64][E + PAD] bf16 tile in dynamic shared memory."""
        self.types[name] = f"memref<{stages}x{BLOCK}x{self.E + PAD}xbf16, {_WG}>"
        self.views.append((name, self.types[name]))
        return name

    def stage_tile(self, src: str, src_type: str, row0: str, smem: str, stage) -> None:
        """cp.async rows row0 .. row0+63 of ``src[bz]`` into ``smem[stage]`` (16 bytes per
        copy, consecutive threads along a row)."""
        t, E = self.t, self.E
        chunks = E // 8
        for n in range(BLOCK * chunks // THREADS):
            lin = t.add(self.tid, n * THREADS)
            r = t.arith("divui", lin, chunks)
            c8 = t.mul(t.arith("remui", lin, chunks), 8)
            t.emit(f"nvgpu.device_async_copy {self.at(src, t.add(row0, r), c8)}, "
                   f"{smem}[{stage}, {r}, {c8}], 8 {{bypassL1}} : "
                   f"{self.type_of(src, src_type)} to {self.types[smem]}")

    def commit(self) -> None:
        self.t.line("nvvm.cp.async.commit.group")

    # -- fragments
    def a_frags(self, smem: str, stage) -> list[list[str]]:
        """A fragments of this warp's 16 rows of a [row][E] tile: one x4 per 16 of E."""
        t = self.t
        row = t.add(self.wrow, t.arith("remui", self.lane, 16))
        out = []
        for s in range(self.E // 16):
            col = t.add(t.mul(t.arith("divui", self.lane, 16), 8), s * 16)
            out.append(_ldmatrix(t, smem, self.types[smem], stage, row, col, 4, False))
        return out

    def b_frags_nk(self, smem: str, stage, s: int) -> list[list[str]]:
        """B fragments (k = E, step ``s``) of the 8 n-tiles of a [n][E] tile (n = its 64
        rows): ``x Tᵀ``."""
        t = self.t
        out = []
        for ni in range(0, BLOCK // 8, 2):
            nn = t.add(t.add(t.mul(t.arith("divui", self.lane, 16), 8), self.row8), ni * 8)
            kk = t.add(t.mul(t.arith("remui", self.quarter, 2), 8), s * 16)
            regs = _ldmatrix(t, smem, self.types[smem], stage, nn, kk, 4, False)
            out += [regs[0:2], regs[2:4]]
        return out

    def b_frags_kn(self, smem: str, stage, s: int) -> list[list[str]]:
        """B fragments (k = rows 16s .. 16s+15 of a [k][E] tile) of the E/8 n-tiles:
        ``x T`` (read transposed)."""
        t = self.t
        out = []
        for ni in range(0, self.E // 8, 2):
            kk = t.add(t.add(t.mul(t.arith("remui", self.quarter, 2), 8), self.row8), s * 16)
            nn = t.add(t.mul(t.arith("divui", self.lane, 16), 8), ni * 8)
            regs = _ldmatrix(t, smem, self.types[smem], stage, kk, nn, 4, True)
            out += [regs[0:2], regs[2:4]]
        return out

    def mma(self, a: list[str], b: list[str], c: list[str]) -> list[str]:
        t = self.t
        d = t.emit(f"nvvm.mma.sync A[{', '.join(a)}] B[{', '.join(b)}] C[{', '.join(c)}] "
                   + _MMA_ATTRS)
        return [t.emit(f"llvm.extractvalue {d}[{r}] : !llvm.struct<(f32, f32, f32, f32)>")
                for r in range(4)]

    def product_nt(self, a_smem, a_stage, b_smem, b_stage) -> list[list[str]]:
        """This warp's 16 x 64 block of ``A Bᵀ`` (A, B: [64][E] tiles): 8 accumulator
        tiles of 4."""
        zero = self.f32(0.0)
        acc = [[zero] * 4 for _ in range(BLOCK // 8)]
        af = self.a_frags(a_smem, a_stage)
        for s in range(self.E // 16):
            bf = self.b_frags_nk(b_smem, b_stage, s)
            for ni in range(BLOCK // 8):
                acc[ni] = self.mma(af[s], bf[ni], acc[ni])
        return acc

    def pack(self, x: str, y: str) -> str:
        """Two f32 -> one i32 holding bf16(x) (low half) and bf16(y)."""
        t = self.t
        lo = t.emit(f"arith.truncf {x} : f32 to bf16")
        hi = t.emit(f"arith.truncf {y} : f32 to bf16")
        v = t.emit(f"vector.from_elements {lo}, {hi} : vector<2xbf16>")
        w = t.emit(f"vector.bitcast {v} : vector<2xbf16> to vector<1xi32>")
        return t.emit(f"vector.extract {w}[0] : i32 from vector<1xi32>")

    def accumulate_pv(self, p: list[list[str]], v_smem, v_stage, acc: list[list[str]]):
        """``acc += bf16(p) V``: p is a 16 x 64 accumulator block (its fragments are A
        fragments), V a [64][E] tile."""
        for kk in range(BLOCK // 16):
            a = [self.pack(p[2 * kk][0], p[2 * kk][1]), self.pack(p[2 * kk][2], p[2 * kk][3]),
                 self.pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                 self.pack(p[2 * kk + 1][2], p[2 * kk + 1][3])]
            bf = self.b_frags_kn(v_smem, v_stage, kk)
            for ni in range(self.E // 8):
                acc[ni] = self.mma(a, bf[ni], acc[ni])
        return acc

    def products_nt(self, pairs) -> list[list[list[str]]]:
        """:meth:`product_nt` of each ((A tile, stage), (B tile, stage)) pair (one tile's
        independent products: the wgmma emitter waits for them together)."""
        return [self.product_nt(*a, *b) for a, b in pairs]

    def accumulate_all(self, items) -> list:
        """:meth:`accumulate_pv` of each (p, X tile, stage, acc) (independent of each other:
        the wgmma emitter stages every p, then waits for all the products together)."""
        return [self.accumulate_pv(*item) for item in items]

    def cell(self, row0: str, col0: str, ni: int, r: int) -> tuple[str, str]:
        """(row, column) of accumulator register ``r`` of n-tile ``ni``."""
        t = self.t
        row = t.add(t.add(row0, self.wrow), t.add(self.g, 8 if r >= 2 else 0))
        col = t.add(col0, t.add(t.mul(self.tq, 2), ni * 8 + r % 2))
        return row, col

    def causal_keep(self, q_row: str, k_col: str) -> str:
        return self.t.emit(f"arith.cmpi ule, {k_col}, {q_row} : index")

    def on_diagonal(self, diag: str, values: list[list[str]], mask) -> list[list[str]]:
        """``values`` (accumulator cells [ni][r]) with ``mask(ni, r, value)`` applied if
        ``diag`` (this tile is the causal diagonal's), unchanged otherwise: in the tiles off
        the diagonal every key precedes every query, so only one tile a block pays for the
        mask's index arithmetic (the condition is the same for the whole block)."""
        t = self.t
        flat = [v for tile in values for v in tile]
        types = ", ".join(["f32"] * len(flat))
        res = t.fresh()
        t.line(f"{res}:{len(flat)} = scf.if {diag} -> ({types}) {{")
        masked = [mask(ni, r, v) for ni, tile in enumerate(values) for r, v in enumerate(tile)]
        t.line(f"scf.yield {', '.join(masked)} : {types}")
        t.line("} else {")
        t.line(f"scf.yield {', '.join(flat)} : {types}")
        t.line("}")
        return [[f"{res}#{4 * ni + r}" for r in range(4)] for ni in range(len(values))]

    def store_rows(self, dst: str, dst_type: str, row0: str, acc, factor: list[str]) -> None:
        """Write this warp's 16 x E accumulator block times ``factor`` (per row: rows g and
        g+8) to ``dst[bz, row0 + ...]`` as bf16 pairs."""
        t = self.t
        for ni in range(self.E // 8):
            for half in (0, 1):
                row, col = self.cell(row0, t.const(0), ni, 2 * half)
                x = self.f("arith.mulf", acc[ni][2 * half], factor[half])
                y = self.f("arith.mulf", acc[ni][2 * half + 1], factor[half])
                lo = t.emit(f"arith.truncf {x} : f32 to bf16")
                hi = t.emit(f"arith.truncf {y} : f32 to bf16")
                v = t.emit(f"vector.from_elements {lo}, {hi} : vector<2xbf16>")
                t.line(f"vector.store {v}, {self.at(dst, row, col)} {{alignment = 4}} "
                       f": {self.type_of(dst, dst_type)}, vector<2xbf16>")

    def open_loop(self, lo: str, hi: str, carried: list[str]) -> tuple[str, list[str], str]:
        t = self.t
        it, res = t.fresh(), t.fresh()
        args = [t.fresh() for _ in carried]
        inits = ", ".join(f"{a} = {c}" for a, c in zip(args, carried))
        t.line(f"{res}:{len(carried)} = scf.for {it} = {lo} to {hi} step {t.const(1)} "
               f"iter_args({inits}) -> ({', '.join(['f32'] * len(carried))}) {{")
        return it, args, res

    def close_loop(self, values: list[str]) -> None:
        self.t.line(f"scf.yield {', '.join(values)} : {', '.join(['f32'] * len(values))}")
        self.t.line("}")

    def prefetch(self, tiles: list[tuple[str, str, str]], nxt: str, hi: str, stage: str) -> None:
        """Stage tile ``nxt`` of each (src, type, smem) into ``stage`` if ``nxt < hi``;
        commit a group either way, then wait until the current tile's group landed."""
        t = self.t
        t.line(f"scf.if {t.emit(f'arith.cmpi ult, {nxt}, {hi} : index')} {{")
        row0 = t.mul(nxt, BLOCK)
        for src, src_type, smem in tiles:
            self.stage_tile(src, src_type, row0, smem, stage)
        t.line("}")
        self.commit()
        t.line("nvvm.cp.async.wait.group 1")
        self.landed()
        t.line("gpu.barrier")

    def landed(self) -> None:
        """After this thread's copies of the current tile landed, before the block meets
        (nothing here: ldmatrix reads them through the generic proxy)."""

    def shared_views(self) -> tuple[list[str], int]:
        """(lines defining the shared tiles, placed before the kernel's lines; dynamic
        shared bytes): one view of dynamic shared memory a tile."""
        t = self.t
        if not self.views:             # (the split forward's combining kernel)
            return [], 0
        dyn = f"memref<?xi8, {_WG}>"
        views, offset = [f"%dyn = gpu.dynamic_shared_memory : {dyn}"], 0
        for smem, stype in self.views:
            views.append(f"{smem} = memref.view %dyn[{t.const(offset)}][] : {dyn} to {stype}")
            offset += _bytes(stype)
        return views, offset

    def module(self, name: str, kernel: str, args: list[tuple[str, str]]) -> tuple[str, int]:
        """The gpu.module text and its dynamic shared bytes."""
        t = self.t
        views, offset = self.shared_views()
        body = "\n      ".join(t.const_lines + views + t.lines)
        sig = ", ".join(f"{a}: {self.type_of(a, ty)}" for a, ty in args)
        text = (f"gpu.module @{name} {{\n  gpu.func @{kernel}({sig}) kernel attributes "
                f"{{known_block_size = array<i32: {THREADS}, 1, 1>}} {{\n      {body}\n"
                "      gpu.return\n    }\n}")
        return text, offset


def _mem(n: int, rows: int, E: int | None = None, elem: str = "bf16") -> str:
    return f"memref<{n}x{rows}x{E}x{elem}>" if E is not None else f"memref<{n}x{rows}x{elem}>"


def forward_kernel(shape: Shape, name: str, operands: dict | None = None,
                   heavy_first: bool = True, gen=None, split: int = 0
                   ) -> tuple[str, tuple, tuple, int]:
    """(module text, grid, block, dynamic shared bytes) of ``o, lse = attention(q, k, v)``;
    ``gen``: the emitter class (:class:`_Gen`, ``mma.sync``; or attention_wgmma's).
    ``split`` > 0 (causal only): block (query tile i, batch entry, z) takes key tiles
    ``split z`` .. ``min(split (z + 1), i + 1)``.  A query tile of one slice (i <
    ``split``) is finished by its block z = 0 as without the split (the other z do
    nothing); the others' blocks write their unnormalized partial output, row maxima and
    row sums to slice z of ``%WO``, ``%WM``, ``%WL`` (a block with no key tiles: -inf and
    0) for :func:`combine_kernel`."""
    if split:
        heavy_first = False
    g = (gen or _Gen)(shape, operands, shape.L // BLOCK, "last" if heavy_first else None)
    t, E, s = g.t, shape.E, shape
    qt, kt, lt = _mem(s.n, s.L, E), _mem(s.n, s.S, E), _mem(s.n, s.L, None, "f32")
    qs, ks, vs = g.shared("%Qs", 1), g.shared("%Ks"), g.shared("%Vs")
    q0 = t.mul(g.bx, BLOCK)
    part, lo, first_key = _key_slice(g, split)
    g.stage_tile("%Q", qt, q0, qs, t.const(0))
    g.stage_tile("%K", kt, first_key, ks, t.const(0))
    g.stage_tile("%V", kt, first_key, vs, t.const(0))
    g.commit()
    hi = t.add(g.bx, 1) if s.causal else t.const(s.S // BLOCK)
    if split:
        hi = t.arith("minui", hi, t.add(lo, split))
    zero = g.f32(0.0)
    n_o = E // 8 * 4
    j, args, res = g.open_loop(lo, hi, [g.neg_inf()] * 2 + [zero] * 2 + [zero] * n_o)
    m_old, l_old = args[0:2], args[2:4]
    o = [args[4 + 4 * i:8 + 4 * i] for i in range(E // 8)]
    stage, nxt, next_stage = _stages(t, j, lo, split)
    g.prefetch([("%K", kt, ks), ("%V", kt, vs)], nxt, hi, next_stage)
    sc = g.product_nt(qs, t.const(0), ks, stage)
    k0 = t.mul(j, BLOCK)
    c = g.f32(s.scale * LOG2E)
    x = [[g.f("arith.mulf", sc[ni][r], c) for r in range(4)] for ni in range(BLOCK // 8)]
    if s.causal:
        def mask(ni, r, v):
            row, col = g.cell(q0, k0, ni, r)
            return t.emit(f"arith.select {g.causal_keep(row, col)}, {v}, {g.neg_inf()} : f32")
        x = g.on_diagonal(t.emit(f"arith.cmpi eq, {j}, {g.bx} : index"), x, mask)
    m_new, alpha = [], []
    for half in (0, 1):
        m = x[0][2 * half]
        for ni in range(BLOCK // 8):
            for r in (2 * half, 2 * half + 1):
                if (ni, r) != (0, 2 * half):
                    m = g.f("arith.maximumf", m, x[ni][r])
        m = g.f("arith.maximumf", g.quad(m, "arith.maximumf"), m_old[half])
        m_new.append(m)
        alpha.append(t.emit(f"math.exp2 {g.f('arith.subf', m_old[half], m)} : f32"))
    p = [[t.emit(f"math.exp2 {g.f('arith.subf', x[ni][r], m_new[r // 2])} : f32")
          for r in range(4)] for ni in range(BLOCK // 8)]
    l_new = []
    for half in (0, 1):
        acc = g.f("arith.mulf", l_old[half], alpha[half])
        for ni in range(BLOCK // 8):
            for r in (2 * half, 2 * half + 1):
                acc = g.f("arith.addf", acc, p[ni][r])
        l_new.append(acc)
    o = [[g.f("arith.mulf", o[ni][r], alpha[r // 2]) for r in range(4)] for ni in range(E // 8)]
    o = g.accumulate_pv(p, vs, stage, o)
    t.line("gpu.barrier")             # every warp is done with this stage
    g.close_loop(m_new + l_new + [v for tile in o for v in tile])
    m = [f"{res}#{i}" for i in range(2)]
    l_sum = [g.quad(f"{res}#{2 + i}", "arith.addf") for i in range(2)]
    o = [[f"{res}#{4 + 4 * ni + r}" for r in range(4)] for ni in range(E // 8)]

    def finish():
        inv = [g.f("arith.divf", g.f32(1.0), l_sum[i]) for i in range(2)]
        g.store_rows("%O", qt, q0, o, inv)
        # lse = (m + log2 l) ln 2, by the first thread of each row
        t.line(f"scf.if {t.emit(f'arith.cmpi eq, {g.tq}, {t.const(0)} : index')} {{")
        for half in (0, 1):
            row = t.add(t.add(q0, g.wrow), t.add(g.g, 8 * half))
            lse = g.f("arith.addf", g.f("arith.mulf", m[half], g.f32(LN2)),
                      t.emit(f"math.log {l_sum[half]} : f32"))
            t.line(f"memref.store {lse}, %LSE[{g.bz}, {row}] : {lt}")
        t.line("}")

    args = [("%Q", qt), ("%K", kt), ("%V", kt), ("%O", qt), ("%LSE", lt)]
    if not split:
        finish()
        text, shared = g.module(name, "attention", args)
        return text, g.grid(s.L // BLOCK), (THREADS, 1, 1), shared
    wo, ws = workspace_types(s, split)
    row0 = t.arith("subi", q0, split * BLOCK)         # of the workspace

    def row_statistics():
        """The row maxima (log2 units) and sums, by the first thread of each row."""
        t.line(f"scf.if {t.emit(f'arith.cmpi eq, {g.tq}, {t.const(0)} : index')} {{")
        for half in (0, 1):
            row = t.add(t.add(row0, g.wrow), t.add(g.g, 8 * half))
            t.line(f"memref.store {m[half]}, %WM[{part}, {g.bz}, {row}] : {ws}")
            t.line(f"memref.store {l_sum[half]}, %WL[{part}, {g.bz}, {row}] : {ws}")
        t.line("}")

    # a query tile of one slice finishes here; the others' slices: partials
    _finish_or_slice(g, t.emit(f"arith.cmpi ult, {g.bx}, {t.const(split)} : index"), part,
                     finish, [("%WO", o, None)], row0, wo, then=row_statistics)
    text, shared = g.module(name, "attention", args + [("%WO", wo), ("%WM", ws), ("%WL", ws)])
    return text, (s.L // BLOCK, s.n, split_parts(s, split)), (THREADS, 1, 1), shared


def _key_slice(g: _Gen, split: int) -> tuple:
    """(slice number or None, first key tile, first key row) of a block of the forward or
    dQ kernel: slice z = grid z of ``split`` key tiles (``split`` > 0, causal), else all
    from 0."""
    t = g.t
    if not split:
        return None, t.const(0), t.const(0)
    assert g.s.causal, "split attention is for causal attention"
    part = t.emit("gpu.block_id z")
    lo = t.mul(part, split)
    return part, lo, t.mul(lo, BLOCK)


def _stages(t: _Text, j: str, lo: str, split: int) -> tuple[str, str, str]:
    """(stage of tile ``j``, tile ``j`` + 1, its stage) of a loop from tile ``lo``
    staging its tiles in two stages (a split slice starts at stage 0)."""
    step = t.arith("subi", j, lo) if split else j
    stage = t.arith("remui", step, 2)
    nxt = t.add(j, 1)
    return stage, nxt, t.arith("remui", t.add(step, 1) if split else nxt, 2)


def split_parts(shape: Shape, split: int) -> int:
    """Slices of key tiles a query tile's work is cut into (the last query tile's)."""
    return -(-(shape.S // BLOCK) // split)


def workspace_types(shape: Shape, split: int) -> tuple[str, str]:
    """(partial outputs, partial row statistics) memref types of a split forward: a slice
    of every split query row (tile ``split`` on)."""
    return (slice_type(shape, split, shape.L),
            f"memref<{split_parts(shape, split)}x{shape.n}x{shape.L - split * BLOCK}xf32>")


def slice_type(shape: Shape, split: int, rows: int) -> str:
    """The f32 workspace of partial outputs or sums: a slice of each split tile's rows
    (the forward and dQ: the query tiles from ``split`` on; dK / dV: the key tiles
    before the last ``split``)."""
    return (f"memref<{split_parts(shape, split)}x{shape.n}x{rows - split * BLOCK}x"
            f"{shape.E}xf32>")


def _finish_or_slice(g: _Gen, whole: str, part: str, finish, partials, row0: str,
                     wtype: str, then=None) -> None:
    """If ``whole`` (the block's tile has one slice): ``finish()`` in its block z = 0;
    else store each (workspace, accumulator, factor or None) of ``partials`` as f32 pairs
    at rows ``row0`` + ... of slice ``part``, then ``then()`` if given."""
    t = g.t
    t.line(f"scf.if {whole} {{")
    t.line(f"scf.if {t.emit(f'arith.cmpi eq, {part}, {t.const(0)} : index')} {{")
    finish()
    t.line("}")
    t.line("} else {")
    for ws, acc, factor in partials:
        for ni in range(g.E // 8):
            for half in (0, 1):
                row, col = g.cell(row0, t.const(0), ni, 2 * half)
                x, y = acc[ni][2 * half], acc[ni][2 * half + 1]
                if factor is not None:
                    x, y = g.f("arith.mulf", x, factor), g.f("arith.mulf", y, factor)
                v = t.emit(f"vector.from_elements {x}, {y} : vector<2xf32>")
                t.line(f"vector.store {v}, {ws}[{part}, {g.bz}, {row}, {col}] "
                       f"{{alignment = 8}} : {wtype}, vector<2xf32>")
    if then is not None:
        then()
    t.line("}")


def _row_pieces(g: _Gen) -> tuple[str, str, int]:
    """(row, first column, rows a block) of a thread of a kernel finishing split
    partials: each thread 8 consecutive columns of one row, the block's rows in order."""
    t = g.t
    groups = g.E // 8
    rows = THREADS // groups
    return (t.add(t.mul(g.bx, rows), t.arith("divui", g.tid, groups)),
            t.mul(t.arith("remui", g.tid, groups), 8), rows)


def slice_sum_kernel(shape: Shape, name: str, operands: dict | None, split: int,
                     outs: list, rows: int, first_row: int) -> tuple[str, tuple, tuple, int]:
    """(module text, grid, block, 0) of the kernel that adds a split backward's slices:
    thread (row, 8 columns) sums each (workspace, output) of ``outs`` over the slices in
    order and writes it as bf16 at ``first_row`` + row (an empty slice holds zeros)."""
    g = _Gen(shape, operands)
    t, E, s = g.t, shape.E, shape
    parts = split_parts(s, split)
    row, col, per_block = _row_pieces(g)
    wt = slice_type(s, split, rows)
    ot = _mem(s.n, rows, E)
    for ws, out in outs:
        acc = None
        for z in range(parts):
            v = t.emit(f"vector.load {ws}[{t.const(z)}, {g.bz}, {row}, {col}] "
                       f"{{alignment = 16}} : {wt}, vector<8xf32>")
            acc = v if acc is None else t.emit(f"arith.addf {acc}, {v} : vector<8xf32>")
        b = t.emit(f"arith.truncf {acc} : vector<8xf32> to vector<8xbf16>")
        t.line(f"vector.store {b}, {g.at(out, t.add(row, first_row), col)} "
               f"{{alignment = 16}} : {g.type_of(out, ot)}, vector<8xbf16>")
    args = [(ws, wt) for ws, _ in outs] + [(out, ot) for _, out in outs]
    text, _ = g.module(name, "slice_sum", args)
    return text, ((rows - split * BLOCK) // per_block, s.n, 1), (THREADS, 1, 1), 0


def combine_kernel(shape: Shape, name: str, operands: dict | None, split: int
                   ) -> tuple[str, tuple, tuple, int]:
    """(module text, grid, block, 0) of the kernel that finishes a split forward: thread
    (row, 8 columns) takes the row's slices' maxima ``m_z``, their largest ``M``, weights
    ``w_z = exp2(m_z - M)`` (0 for a slice with no tiles, whose maximum is -inf; the first
    slice always has the diagonal), ``l = Σ w_z l_z``, writes ``o = Σ w_z o_z / l`` as bf16
    and, for the row's first columns, ``lse = (M + log2 l) ln 2`` — the unsplit kernel's
    formulas, summed in slice order."""
    g = _Gen(shape, operands)
    t, E, s = g.t, shape.E, shape
    parts = split_parts(s, split)
    wo, ws = workspace_types(s, split)
    qt, lt = _mem(s.n, s.L, E), _mem(s.n, s.L, None, "f32")
    row, col, rows = _row_pieces(g)                   # row: of the workspace
    ms = [t.emit(f"memref.load %WM[{t.const(z)}, {g.bz}, {row}] : {ws}") for z in range(parts)]
    top = ms[0]
    for v in ms[1:]:
        top = g.f("arith.maximumf", top, v)
    total, acc = None, None
    for z in range(parts):
        w = t.emit(f"math.exp2 {g.f('arith.subf', ms[z], top)} : f32")
        lz = t.emit(f"memref.load %WL[{t.const(z)}, {g.bz}, {row}] : {ws}")
        wl = g.f("arith.mulf", w, lz)
        total = wl if total is None else g.f("arith.addf", total, wl)
        oz = t.emit(f"vector.load %WO[{t.const(z)}, {g.bz}, {row}, {col}] "
                    f"{{alignment = 16}} : {wo}, vector<8xf32>")
        wv = t.emit(f"vector.broadcast {w} : f32 to vector<8xf32>")
        term = t.emit(f"arith.mulf {oz}, {wv} : vector<8xf32>")
        acc = term if acc is None else t.emit(f"arith.addf {acc}, {term} : vector<8xf32>")
    inv = t.emit(f"vector.broadcast {g.f('arith.divf', g.f32(1.0), total)} : f32 to "
                 "vector<8xf32>")
    out = t.emit(f"arith.truncf {t.emit(f'arith.mulf {acc}, {inv} : vector<8xf32>')} : "
                 "vector<8xf32> to vector<8xbf16>")
    q_row = t.add(row, split * BLOCK)
    t.line(f"vector.store {out}, {g.at('%O', q_row, col)} {{alignment = 16}} : "
           f"{g.type_of('%O', qt)}, vector<8xbf16>")
    t.line(f"scf.if {t.emit(f'arith.cmpi eq, {col}, {t.const(0)} : index')} {{")
    lse = g.f("arith.addf", g.f("arith.mulf", top, g.f32(LN2)),
              t.emit(f"math.log {total} : f32"))
    t.line(f"memref.store {lse}, %LSE[{g.bz}, {q_row}] : {lt}")
    t.line("}")
    text, _ = g.module(name, "combine", [("%WO", wo), ("%WM", ws), ("%WL", ws),
                                         ("%O", qt), ("%LSE", lt)])
    return text, ((s.L - split * BLOCK) // rows, s.n, 1), (THREADS, 1, 1), 0


def _row_values(g: _Gen, src: str, src_type: str, row0: str, factor: str | None) -> list[str]:
    """``src[bz, row]`` (times ``factor``) for this thread's rows g and g+8."""
    t = g.t
    out = []
    for half in (0, 1):
        row = t.add(t.add(row0, g.wrow), t.add(g.g, 8 * half))
        v = t.emit(f"memref.load {src}[{g.bz}, {row}] : {src_type}")
        out.append(g.f("arith.mulf", v, factor) if factor else v)
    return out


def dq_kernel(shape: Shape, name: str, operands: dict | None = None,
              heavy_first: bool = True, gen=None, split: int = 0
              ) -> tuple[str, tuple, tuple, int]:
    """dQ of ``latch.attention_grad``: per query block, a loop over key tiles.  ``split``
    > 0 (causal): the key tiles in slices as the forward's (:func:`forward_kernel`), the
    split tiles' blocks writing their partial dQ to slice z of ``%WQ`` for
    :func:`slice_sum_kernel`."""
    if split:
        heavy_first = False
    g = (gen or _Gen)(shape, operands, shape.L // BLOCK, "last" if heavy_first else None)
    t, E, s = g.t, shape.E, shape
    qt, kt, lt = _mem(s.n, s.L, E), _mem(s.n, s.S, E), _mem(s.n, s.L, None, "f32")
    qs, dos, ks, vs = g.shared("%Qs", 1), g.shared("%dOs", 1), g.shared("%Ks"), g.shared("%Vs")
    q0 = t.mul(g.bx, BLOCK)
    part, lo, first_key = _key_slice(g, split)
    g.stage_tile("%Q", qt, q0, qs, t.const(0))
    g.stage_tile("%dO", qt, q0, dos, t.const(0))
    g.stage_tile("%K", kt, first_key, ks, t.const(0))
    g.stage_tile("%V", kt, first_key, vs, t.const(0))
    g.commit()
    lse2 = _row_values(g, "%LSE", lt, q0, g.f32(LOG2E))
    delta = _row_values(g, "%DELTA", lt, q0, None)
    hi = t.add(g.bx, 1) if s.causal else t.const(s.S // BLOCK)
    if split:
        hi = t.arith("minui", hi, t.add(lo, split))
    zero = g.f32(0.0)
    j, args, res = g.open_loop(lo, hi, [zero] * (E // 8 * 4))
    dq = [args[4 * i:4 * i + 4] for i in range(E // 8)]
    stage, nxt, next_stage = _stages(t, j, lo, split)
    g.prefetch([("%K", kt, ks), ("%V", kt, vs)], nxt, hi, next_stage)
    sc, dp = g.products_nt([((qs, t.const(0)), (ks, stage)), ((dos, t.const(0)), (vs, stage))])
    k0 = t.mul(j, BLOCK)
    c = g.f32(s.scale * LOG2E)
    p = [[t.emit(f"math.exp2 {g.f('arith.subf', g.f('arith.mulf', sc[ni][r], c), lse2[r // 2])}"
                 " : f32") for r in range(4)] for ni in range(BLOCK // 8)]
    if s.causal:
        def mask(ni, r, v):
            row, col = g.cell(q0, k0, ni, r)
            return t.emit(f"arith.select {g.causal_keep(row, col)}, {v}, {zero} : f32")
        p = g.on_diagonal(t.emit(f"arith.cmpi eq, {j}, {g.bx} : index"), p, mask)
    ds = [[g.f("arith.mulf", p[ni][r], g.f("arith.subf", dp[ni][r], delta[r // 2]))
           for r in range(4)] for ni in range(BLOCK // 8)]
    dq = g.accumulate_pv(ds, ks, stage, dq)
    t.line("gpu.barrier")
    g.close_loop([v for tile in dq for v in tile])
    dq = [[f"{res}#{4 * ni + r}" for r in range(4)] for ni in range(E // 8)]
    scale = g.f32(s.scale)
    args = [("%Q", qt), ("%K", kt), ("%V", kt), ("%LSE", lt), ("%dO", qt), ("%DELTA", lt),
            ("%dQ", qt)]
    if not split:
        g.store_rows("%dQ", qt, q0, dq, [scale, scale])
        text, shared = g.module(name, "attention_dq", args)
        return text, g.grid(s.L // BLOCK), (THREADS, 1, 1), shared
    _finish_or_slice(g, t.emit(f"arith.cmpi ult, {g.bx}, {t.const(split)} : index"), part,
                     lambda: g.store_rows("%dQ", qt, q0, dq, [scale, scale]),
                     [("%WQ", dq, scale)], t.arith("subi", q0, split * BLOCK),
                     slice_type(s, split, s.L))
    text, shared = g.module(name, "attention_dq", args + [("%WQ", slice_type(s, split, s.L))])
    return text, (s.L // BLOCK, s.n, split_parts(s, split)), (THREADS, 1, 1), shared


def dkdv_kernel(shape: Shape, name: str, operands: dict | None = None,
                heavy_first: bool = True, gen=None, split: int = 0
                ) -> tuple[str, tuple, tuple, int]:
    """dK and dV of ``latch.attention_grad``: per key block, a loop over query tiles, with
    the keys as the rows of every product (``K Qᵀ``, ``V dOᵀ``).  ``split`` > 0 (causal):
    key tile j's query tiles j .. in slices of ``split`` (block z: from j + split z); the
    tiles of several slices (j < tiles - split) write partial dK, dV to slice z of
    ``%WK``, ``%WV`` for :func:`slice_sum_kernel`."""
    if split:
        heavy_first = False
    g = (gen or _Gen)(shape, operands, shape.S // BLOCK, "first" if heavy_first else None)
    t, E, s = g.t, shape.E, shape
    qt, kt, lt = _mem(s.n, s.L, E), _mem(s.n, s.S, E), _mem(s.n, s.L, None, "f32")
    ks, vs, qs, dos = g.shared("%Ks", 1), g.shared("%Vs", 1), g.shared("%Qs"), g.shared("%dOs")
    k0 = t.mul(g.bx, BLOCK)
    lo = g.bx if s.causal else t.const(0)           # query tiles before the keys: masked
    tiles = s.L // BLOCK
    if split:           # slice z: query tiles bx + split z .. (staged: a tile that exists)
        part = t.emit("gpu.block_id z")
        lo = t.add(lo, t.mul(part, split))
        q_first = t.mul(t.arith("minui", lo, tiles - 1), BLOCK)
    else:
        q_first = t.mul(lo, BLOCK)
    g.stage_tile("%K", kt, k0, ks, t.const(0))
    g.stage_tile("%V", kt, k0, vs, t.const(0))
    g.stage_tile("%Q", qt, q_first, qs, t.const(0))
    g.stage_tile("%dO", qt, q_first, dos, t.const(0))
    g.commit()
    hi = t.const(s.L // BLOCK)
    if split:
        hi = t.arith("minui", hi, t.add(lo, split))
        lo = t.arith("minui", lo, hi)               # an empty slice: no trips
    zero = g.f32(0.0)
    n_acc = E // 8 * 4
    i, args, res = g.open_loop(lo, hi, [zero] * (2 * n_acc))
    dv = [args[4 * n:4 * n + 4] for n in range(E // 8)]
    dk = [args[n_acc + 4 * n:n_acc + 4 * n + 4] for n in range(E // 8)]
    stage = t.arith("remui", t.arith("subi", i, lo), 2)
    nxt = t.add(i, 1)
    g.prefetch([("%Q", qt, qs), ("%dO", qt, dos)], nxt, hi,
               t.arith("remui", t.arith("subi", nxt, lo), 2))
    st, dpt = g.products_nt([((ks, t.const(0)), (qs, stage)),        # [key][query]
                             ((vs, t.const(0)), (dos, stage))])
    q0 = t.mul(i, BLOCK)
    c = g.f32(s.scale * LOG2E)
    pt, deltas = [], []
    for ni in range(BLOCK // 8):
        p_row, d_row = [], []
        for r in range(4):
            _key, q = g.cell(k0, q0, ni, r)
            lse = t.emit(f"memref.load %LSE[{g.bz}, {q}] : {lt}")
            d_row.append(t.emit(f"memref.load %DELTA[{g.bz}, {q}] : {lt}"))
            x = g.f("arith.subf", g.f("arith.mulf", st[ni][r], c),
                    g.f("arith.mulf", lse, g.f32(LOG2E)))
            p_row.append(t.emit(f"math.exp2 {x} : f32"))
        pt.append(p_row)
        deltas.append(d_row)
    if s.causal:
        def mask(ni, r, v):
            key, q = g.cell(k0, q0, ni, r)
            return t.emit(f"arith.select {g.causal_keep(q, key)}, {v}, {zero} : f32")
        pt = g.on_diagonal(t.emit(f"arith.cmpi eq, {i}, {g.bx} : index"), pt, mask)
    dst = [[g.f("arith.mulf", pt[ni][r], g.f("arith.subf", dpt[ni][r], deltas[ni][r]))
            for r in range(4)] for ni in range(BLOCK // 8)]
    dv, dk = g.accumulate_all([(pt, dos, stage, dv), (dst, qs, stage, dk)])
    t.line("gpu.barrier")
    g.close_loop([v for tile in dv + dk for v in tile])
    dv = [[f"{res}#{4 * n + r}" for r in range(4)] for n in range(E // 8)]
    dk = [[f"{res}#{n_acc + 4 * n + r}" for r in range(4)] for n in range(E // 8)]
    one, scale = g.f32(1.0), g.f32(s.scale)
    args = [("%Q", qt), ("%K", kt), ("%V", kt), ("%LSE", lt), ("%dO", qt), ("%DELTA", lt),
            ("%dK", kt), ("%dV", kt)]

    def finish():
        g.store_rows("%dV", kt, k0, dv, [one, one])
        g.store_rows("%dK", kt, k0, dk, [scale, scale])

    if not split:
        finish()
        text, shared = g.module(name, "attention_dkdv", args)
        return text, g.grid(s.S // BLOCK), (THREADS, 1, 1), shared
    # key tiles with at most ``split`` query tiles after them: one slice (the last ones)
    wt = slice_type(s, split, s.S)
    _finish_or_slice(g, t.emit(f"arith.cmpi uge, {g.bx}, {t.const(tiles - split)} : index"),
                     part, finish, [("%WV", dv, one), ("%WK", dk, scale)], k0, wt)
    text, shared = g.module(name, "attention_dkdv", args + [("%WK", wt), ("%WV", wt)])
    return text, (s.S // BLOCK, s.n, split_parts(s, split)), (THREADS, 1, 1), shared


# ---------------------------------------------------------------------------------------
# the pass
# ---------------------------------------------------------------------------------------
def _shape_of(op) -> tuple[Shape, set]:
    """(the op's Shape, the operand numbers that are strided [B, H, rows, E] views)."""
    from mlir import ir

    q, k = (ir.MemRefType(op.operands[i].type) for i in (0, 1))
    qs, ks = list(q.shape), list(k.shape)
    strided, heads = set(), set()
    for i, (v, rows) in enumerate(zip(op.operands, _RANKS[op.name])):
        t = ir.MemRefType(v.type)
        if t.has_static_shape and t.layout == ir.AffineMapAttr.get(
                ir.AffineMap.get_identity(t.rank)):
            continue
        if rows == 2 and strided_view(t):
            strided.add(i)
            heads.add(t.shape[1])
            continue
        raise PassError(f"latch-form-attention-kernels: '{op.name}' needs static buffers, "
                        "contiguous (identity layout) or [B, H, rows, E] views whose rows "
                        f"are contiguous and 16-byte aligned; got {t}", op.location)
    if len(heads) > 1:
        raise PassError(f"latch-form-attention-kernels: '{op.name}' has strided operands "
                        f"with different head counts {sorted(heads)}", op.location)
    shape = Shape(n=math.prod(qs[:-2]), L=qs[-2], S=ks[-2], E=qs[-1],
                  causal=attr_value(op.attributes["causal"]),
                  scale=attr_value(op.attributes["scale"]),
                  heads=heads.pop() if heads else 1)
    shape.check(op.location)
    return shape, strided


def strided_view(t) -> bool:
    """Whether memref type ``t`` is a static [B, H, rows, E] view the kernels can index
    directly: unit stride along E, every other stride and the offset multiples of 16 bytes
    (the 16-byte ``cp.async`` copies and the 4-byte stores stay aligned)."""
    from mlir import ir

    if not t.has_static_shape or t.rank != 4 or not isinstance(t.element_type, ir.BF16Type):
        return False
    strides, offset = t.get_strides_and_offset()
    return strides[-1] == 1 and all(x % 8 == 0 for x in strides[:-1]) and offset % 8 == 0


def _collapsed(value, rows_dims: int):
    """``value`` as a [N, ...] memref: its batch dimensions (all but the last
    ``rows_dims``) collapsed into one."""
    from mlir import ir

    t = ir.MemRefType(value.type)
    shape = list(t.shape)
    lead = len(shape) - rows_dims
    if lead == 1:
        return value
    new = ir.MemRefType.get([math.prod(shape[:lead])] + shape[lead:], t.element_type)
    groups = [list(range(lead))] + [[lead + i] for i in range(rows_dims)]
    return ir.Operation.create(
        "memref.collapse_shape", results=[new], operands=[value],
        attributes={"reassociation": ir.ArrayAttr.get([
            ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d)
                              for d in grp]) for grp in groups])}).result


def _combine(shape: Shape, name: str, operands: dict | None, heavy_first: bool, gen,
             split: int):
    """:func:`combine_kernel` called as the other kernels are."""
    return combine_kernel(shape, name, operands, split)


def _sum_dq(shape: Shape, name: str, operands: dict | None, heavy_first: bool, gen,
            split: int):
    """The split dQ's slices added (:func:`slice_sum_kernel`): query rows from tile
    ``split`` on."""
    return slice_sum_kernel(shape, name, operands, split, [("%WQ", "%dQ")], shape.L,
                            split * BLOCK)


def _sum_dkdv(shape: Shape, name: str, operands: dict | None, heavy_first: bool, gen,
              split: int):
    """The split dK's and dV's slices added: key rows of the tiles before the last
    ``split``."""
    return slice_sum_kernel(shape, name, operands, split, [("%WK", "%dK"), ("%WV", "%dV")],
                            shape.S, 0)


def _workspace_parts(op, shape: Shape, split: int) -> list[str]:
    """The memref types of ``op``'s split workspace, in order: the forward's partial
    outputs, row maxima and sums; the backward's partial dQ, dK and dV."""
    if op.name == "latch.attention":
        wo, ws = workspace_types(shape, split)
        return [wo, ws, ws]
    return [slice_type(shape, split, shape.L)] + [slice_type(shape, split, shape.S)] * 2


#: an SM's shared memory (sm_90: 228 KiB) and the 1 KiB the hardware keeps of it a block
SM_SHARED_BYTES, BLOCK_RESERVED_BYTES = 228 * 1024, 1024


def resident_blocks(asked: int, shared: int) -> int:
    """The resident blocks an SM a kernel of ``shared`` dynamic shared bytes declares for
    ``FormAttentionKernels.blocks_per_sm`` = ``asked``: ``asked``, or fewer where that
    many blocks' shared memory does not fit an SM (TinyMoE, ``asked`` 4: the forward's
    49 KiB 4, dQ's 57 KiB and dK/dV's 65 KiB 3)."""
    return min(asked, SM_SHARED_BYTES // (shared + BLOCK_RESERVED_BYTES))


#: FormAttentionKernels.kv_split: attention of fewer blocks a kernel than this is split
#: (four waves of two blocks on 132 SMs; TinyMoE B2: 384 blocks, B32: 6,144)
SPLIT_BELOW = 4 * 2 * 132

_KERNEL_NAMES = {forward_kernel: "attention", dq_kernel: "attention_dq",
                 dkdv_kernel: "attention_dkdv", _combine: "combine", _sum_dq: "slice_sum",
                 _sum_dkdv: "slice_sum"}
# operand -> dimensions after the batch: 2 for [.., rows, E], 1 for [.., rows]
_RANKS = {"latch.attention": (2, 2, 2, 2, 1),
          "latch.attention_grad": (2, 2, 2, 1, 2, 1, 2, 2, 2)}
# operand -> its name in the kernels' text
_NAMES = {"latch.attention": ("%Q", "%K", "%V", "%O", "%LSE"),
          "latch.attention_grad": ("%Q", "%K", "%V", "%LSE", "%dO", "%DELTA", "%dQ", "%dK",
                                   "%dV")}


@dataclasses.dataclass(frozen=True)
class FormAttentionKernels(ModulePass):
    name = "latch-form-attention-kernels"
    summary = ("buffer-form latch.attention / latch.attention_grad -> launches of flash-style "
               "tensor-core kernels (scores kept in registers)")

    #: causal blocks dispatched heaviest first, in groups of HEAD_GROUP heads
    heavy_first: bool = True
    #: sm_90a: wgmma kernels (passes/attention_wgmma.py) where the head dimension is 64
    chip: str = "sm_90"
    #: > 0: causal attention of fewer than SPLIT_BELOW blocks (TinyMoE B2's 384) cut into
    #: blocks of at most this many tiles of their loop — the forward's and dQ's key tiles,
    #: dK/dV's query tiles — whose partial results :func:`combine_kernel` (the forward)
    #: and :func:`slice_sum_kernel` (the gradients) finish: the heaviest tile's 16 tiles
    #: no longer one block's chain; 0: a block a tile (B2 on an H100: N = 4 +5%, N = 8
    #: +1.5%: the update is bound by its kernels' work, not attention's chain)
    kv_split: int = 0
    #: > 1: the flash kernels (not the split's finishing kernels) declare this many
    #: resident blocks an SM (``nvvm.minctasm``: the PTX assembler keeps a thread's
    #: registers to 65536 / (128 x blocks)), or as many as their shared memory lets fit
    #: (:func:`resident_blocks`); 0: as many as the registers the assembler chooses allow
    #: (TinyMoE's wgmma kernels: forward 142 registers, 3 blocks; dK/dV 225, 2 blocks;
    #: 3 or 4 measured 1.3-1.8% slower at B32 on an H100)
    blocks_per_sm: int = 0

    def __post_init__(self):
        for option, value in (("kv-split", self.kv_split),
                              ("blocks-per-sm", self.blocks_per_sm)):
            if value < 0:
                raise PipelineError(f"pass '{self.name}': {option}={value} is negative")

    def apply(self, module) -> None:
        from mlir import ir
        from mlir.dialects import gpu

        top = module.regions[0].blocks[0]
        found = []
        for f in function_definitions(module):
            for op in f.regions[0].blocks[0].operations:
                op = _op(op)
                if op.name in _RANKS:
                    if len(op.results):
                        raise PassError(f"latch-form-attention-kernels: '{op.name}' in tensor "
                                        "form; run latch-lower-attention (and bufferize) "
                                        "first", op.location)
                    found.append(op)
        if not found:
            return
        module.attributes["gpu.container_module"] = ir.UnitAttr.get()
        taken = symbol_names(module)
        index = ir.IndexType.get()
        i32 = ir.IntegerType.get_signless(32)
        from latch.passes import attention_wgmma
        from latch.passes.form_contraction_kernels import _block_key, _byte_allocation
        split_of = {id(op): self._split(op) for op in found}
        layout = {}                  # op -> [(workspace part's type, byte offset)]
        need, blocks = {}, {}        # one workspace a function: its ops run in order
        for op in found:
            if split_of[id(op)]:
                offset, layout[id(op)] = 0, []
                for ty in _workspace_parts(op, _shape_of(op)[0], split_of[id(op)]):
                    ty = ir.Type.parse(ty)
                    layout[id(op)].append((ty, offset))
                    offset += 4 * math.prod(ir.MemRefType(ty).shape)
                key = _block_key(op)
                need[key] = max(need.get(key, 0), offset)
                blocks[key] = op.operation.block
        workspaces = {key: _byte_allocation(blocks[key], size) for key, size in need.items()}
        for op in found:
            shape, strided = _shape_of(op)
            gen = attention_wgmma.WgmmaGen if self.chip == "sm_90a" and \
                attention_wgmma.applies(shape) else _Gen
            kernels = [forward_kernel] if op.name == "latch.attention" else \
                [dq_kernel, dkdv_kernel]
            names = _NAMES[op.name]
            views = {names[i]: str(op.operands[i].type) for i in strided}
            with ir.InsertionPoint(op), op.location:
                operands = [v if i in strided else _collapsed(v, r)
                            for i, (v, r) in enumerate(zip(op.operands, _RANKS[op.name]))]
                split = split_of[id(op)]
                if split:            # the slices' partials, then the kernel combining them
                    parts = [ir.Operation.create("memref.view", [ty], [
                        workspaces[_block_key(op)],
                        ir.Operation.create("arith.constant", [index], attributes={
                            "value": ir.IntegerAttr.get(index, offset)}).result]).result
                        for ty, offset in layout[id(op)]]
                    if op.name == "latch.attention":
                        kernels = [functools.partial(forward_kernel, split=split),
                                   functools.partial(_combine, split=split)]
                        launches = [operands + parts, parts + operands[3:]]
                    else:
                        q, k, v, lse, do, delta, dq, dk, dv = operands
                        wq, wk, wv = parts
                        kernels = [functools.partial(dq_kernel, split=split),
                                   functools.partial(_sum_dq, split=split),
                                   functools.partial(dkdv_kernel, split=split),
                                   functools.partial(_sum_dkdv, split=split)]
                        launches = [[q, k, v, lse, do, delta, dq, wq], [wq, dq],
                                    [q, k, v, lse, do, delta, dk, dv, wk, wv], [wk, wv, dk, dv]]
                elif op.name == "latch.attention":
                    launches = [operands]
                else:
                    q, k, v, lse, do, delta, dq, dk, dv = operands
                    launches = [[q, k, v, lse, do, delta, dq],
                                [q, k, v, lse, do, delta, dk, dv]]
                for make, args in zip(kernels, launches):
                    name = fresh_symbol("latch_attention_", taken)
                    text, grid, block, shared = make(shape, name, views, self.heavy_first, gen)
                    parsed = ir.Module.parse(text)      # kept alive until detached
                    kernel_module = _op(parsed.body.operations[0])
                    made = getattr(make, "func", make)
                    blocks = resident_blocks(self.blocks_per_sm, shared)
                    if blocks > 1 and made in (forward_kernel, dq_kernel, dkdv_kernel):
                        func = _op(kernel_module.regions[0].blocks[0].operations[0])
                        func.attributes["nvvm.minctasm"] = ir.IntegerAttr.get(i32, blocks)
                    ir.InsertionPoint(top).insert(kernel_module.detach_from_parent())

                    def c(v, type_=index):
                        return ir.Operation.create(
                            "arith.constant", [type_],
                            attributes={"value": ir.IntegerAttr.get(type_, v)}).result
                    kernel = _KERNEL_NAMES[made]
                    gpu.LaunchFuncOp([name, kernel], tuple(c(v) for v in grid),
                                     tuple(c(v) for v in block), args,
                                     dynamic_shared_memory_size=c(shared, i32))
            op.erase()

    def _split(self, op) -> int:
        """The tiles a block of ``op``'s kernels walks (``kv-split``), 0 for none."""
        if not self.kv_split:
            return 0
        shape, _ = _shape_of(op)
        tiles = shape.L // BLOCK
        if not shape.causal or tiles <= self.kv_split or shape.n * tiles >= SPLIT_BELOW:
            return 0
        return self.kv_split
