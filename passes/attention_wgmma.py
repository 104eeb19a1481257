"""The Hopper (sm_90a) attention kernels: the products of ``latch-form-attention-kernels``
as ``wgmma`` from swizzled shared memory instead of ``mma.sync`` from ``ldmatrix`` fragments.

``latch-form-attention-kernels{chip=sm_90a}`` uses :class:`WgmmaGen` in place of the
``mma.sync`` emitter for a head dimension of 64 (one 128-byte swizzled row a tile row);
other head dimensions keep the ``mma.sync`` kernels.  The schedule, the online softmax,
the masking and every store are the ``mma.sync`` kernels' own (passes/attention_kernels.py):
a block is one *warpgroup* (4 warps, 64 rows) and the m64n64 accumulator of ``wgmma``
gives thread t the cells the m16n8 accumulators of its warp gave it (register 4 ni + r of
the struct is the ``mma.sync`` code's ``acc[ni][r]``), so only the products change:

* every 64 x 64 operand tile (queries, keys, values, output gradients) sits in shared
  memory in the 128-byte swizzled layout of passes/contraction_wgmma.py: row r at byte
  128 r, its 16-byte chunk c at chunk ``c ^ (r % 8)``, each tile 1024-byte aligned.  Read
  *K-major* (k along the row: ``Q Kᵀ``, ``dO Vᵀ``, ``K Qᵀ``, ``V dOᵀ``) a k16 step moves the
  descriptor 32 bytes; read *MN-major* as the B operand of a product over the rows
  (``P V``, ``dS K``, ``Pᵀ dO``, ``dSᵀ Q``: k = the tile's rows, n = its 64 columns) the
  same bytes are k-rows of 128 bytes and a k16 step moves 2,048 bytes;
* ``A Bᵀ`` is four ``wgmma m64n64k16`` from a zero accumulator;
* ``acc += bf16(P) X``: the MLIR op reads A from shared memory only, so each thread
  writes its probabilities as bf16 pairs into a swizzled P tile (conflict-free: the 32
  lanes of a store hit chunk ``ni ^ (row % 8)``, 4 bytes apart), fences them to the async
  proxy, the block meets, and four ``wgmma`` add ``P X`` to the accumulator.

Products independent of each other are issued together and waited for once (dQ's ``Q Kᵀ``
and ``dO Vᵀ``; dK/dV's ``K Qᵀ`` and ``V dOᵀ``, then ``Pᵀ dO`` and ``dSᵀ Q`` from two P
tiles), so their latencies overlap.  ``cp.async`` copies are fenced to the async proxy after
their wait (wgmma reads shared memory through it); a P tile is written again only after the
barrier that ends the tile's step (every warp has waited for the products that read it).
Shared memory (head dimension 64, 8 KiB a tile): forward 6 tiles, dQ 7, dK/dV 8, plus 1 KiB
for the alignment.
"""
from __future__ import annotations

from latch.passes.attention_kernels import BLOCK, THREADS, Shape, _Gen
from latch.passes.contraction_wgmma import _desc_fields
from latch.passes.form_contraction_kernels import _WG

#: head dimensions the wgmma kernels take (a tile row is one 128-byte swizzled row)
HEAD_DIMS = (64,)
_TILE = BLOCK * 64               # bf16 elements of one 64 x 64 tile (8 KiB)
_SM_SIZE = "@SM_ELEMENTS@"       # the flat view's size, known once every tile is declared
_FENCE = ("nvvm.fence.proxy { kind = #nvvm.proxy_kind<async.shared>, "
          "space = #nvvm.shared_space<cta> }")


def applies(shape: Shape) -> bool:
    return shape.E in HEAD_DIMS


class WgmmaGen(_Gen):
    """:class:`_Gen` whose shared tiles are swizzled and whose products are ``wgmma``."""

    def __init__(self, shape: Shape, operands: dict | None = None, tiles: int = 0,
                 heavy: str | None = None):
        super().__init__(shape, operands, tiles, heavy)
        assert applies(shape), shape
        t = self.t
        self.tiles: dict[str, tuple[int, int]] = {}    # tile -> (element offset, stages)
        self.size = 0                                   # bf16 elements declared
        self.sm_type = f"memref<{_SM_SIZE}xbf16, {_WG}>"
        dyn = f"memref<?xi8, {_WG}>"
        t.line(f"%dyn = gpu.dynamic_shared_memory : {dyn}")
        base = t.emit(f"memref.extract_aligned_pointer_as_index %dyn : {dyn} -> index")
        aligned = t.arith("andi", t.add(base, 1023), -1024)
        self.sm = t.emit(f"memref.view %dyn[{t.arith('subi', aligned, base)}][] : {dyn} to "
                         f"{self.sm_type}")
        self.addr16 = t.emit(f"arith.index_cast {t.arith('shrui', aligned, 4)} : index to i64")
        self.acc_type = "!llvm.struct<(" + ", ".join(["f32"] * (BLOCK // 2)) + ")>"

    # -- shared memory
    def shared(self, name: str, stages: int = 2) -> str:
        self.tiles[name] = (self.size, stages)
        self.size += stages * _TILE
        return name

    def _base(self, smem: str, stage) -> str:
        """Element offset of ``smem[stage]``."""
        t = self.t
        off, stages = self.tiles[smem]
        if stages == 1:
            return t.const(off)
        return t.add(t.mul(stage, _TILE), off)

    def stage_tile(self, src: str, src_type: str, row0: str, smem: str, stage) -> None:
        """cp.async rows row0 .. row0+63 of ``src[bz]`` into ``smem[stage]``, swizzled."""
        t = self.t
        base = self._base(smem, stage)
        for n in range(BLOCK * 8 // THREADS):
            lin = t.add(self.tid, n * THREADS)
            r = t.arith("divui", lin, 8)
            c = t.arith("remui", lin, 8)
            sw = t.arith("xori", c, t.arith("remui", r, 8))
            dst = t.add(t.add(base, t.mul(r, 64)), t.mul(sw, 8))
            t.emit(f"nvgpu.device_async_copy {self.at(src, t.add(row0, r), t.mul(c, 8))}, "
                   f"{self.sm}[{dst}], 8 {{bypassL1}} : {self.type_of(src, src_type)} to "
                   f"{self.sm_type}")

    def landed(self) -> None:
        self.t.line(_FENCE)             # this thread's landed copies, to the async proxy

    # -- products
    def _desc(self, smem: str, stage, mn_major: bool) -> list[str]:
        """The four k16 descriptors of tile ``smem[stage]`` read K-major or MN-major."""
        t = self.t
        off = t.emit(f"arith.index_cast {t.arith('shrui', self._base(smem, stage), 3)} "
                     ": index to i64")                 # elements -> 16-byte units
        d = t.arith("addi", t.arith("addi", self.addr16, off, "i64"),
                    t.const(_desc_fields(mn_major), "i64"), "i64")
        step = (16 * 128 if mn_major else 32) >> 4
        return [d] + [t.arith("addi", d, t.const(s * step, "i64"), "i64") for s in (1, 2, 3)]

    def _struct(self, acc: list[list[str]]) -> str:
        t = self.t
        s = t.emit(f"llvm.mlir.undef : {self.acc_type}")
        for ni, tile in enumerate(acc):
            for r, v in enumerate(tile):
                s = t.emit(f"llvm.insertvalue {v}, {s}[{4 * ni + r}] : {self.acc_type}")
        return s

    def _issue(self, a: list[str], b: list[str], b_mn_major: bool,
               acc: list[list[str]]) -> str:
        """Issue ``acc + A B`` (A K-major 64 x 64 from descriptors ``a``, B from ``b``) as
        one wgmma group; the result struct (valid after a wait)."""
        t = self.t
        cur = self._struct(acc)
        layout_b = "row" if b_mn_major else "col"
        t.line("nvvm.wgmma.fence.aligned")
        for s in range(4):
            cur = t.emit(f"nvvm.wgmma.mma_async {a[s]}, {b[s]}, {cur}, "
                         "<m = 64, n = 64, k = 16>, D[<f32>, <one>, <wrapped>], "
                         f"A[<bf16>, <one>, <row>], B[<bf16>, <one>, <{layout_b}>] "
                         f": {self.acc_type} -> {self.acc_type}")
        t.line("nvvm.wgmma.commit.group.sync.aligned")
        return cur

    def _wait(self, structs: list[str]) -> list[list[list[str]]]:
        """Wait for every issued group; each struct's cells as [ni][r]."""
        t = self.t
        t.line("nvvm.wgmma.wait.group.sync.aligned 0")
        return [[[t.emit(f"llvm.extractvalue {s}[{4 * ni + r}] : {self.acc_type}")
                  for r in range(4)] for ni in range(BLOCK // 8)] for s in structs]

    def products_nt(self, pairs) -> list[list[list[str]]]:
        zero = [[self.f32(0.0)] * 4 for _ in range(BLOCK // 8)]
        return self._wait([self._issue(self._desc(*a, False), self._desc(*b, False), False, zero)
                           for a, b in pairs])

    def product_nt(self, a_smem, a_stage, b_smem, b_stage) -> list[list[str]]:
        return self.products_nt([((a_smem, a_stage), (b_smem, b_stage))])[0]

    def _p_tile(self, i: int) -> str:
        """The i-th swizzled P tile (declared on first use)."""
        name = f"%Ps{i}"
        if name not in self.tiles:
            self.shared(name, 1)
        return name

    def accumulate_all(self, items) -> list:
        """Each ``acc += bf16(p) X`` of ``items`` ((p, X tile, stage, acc)), every p through
        its own swizzled P tile: all stored, fenced, the block meets once, the products
        issued together and waited for together."""
        t = self.t
        row0 = t.add(self.wrow, self.g)                 # rows g and g + 8 of the warp's 16
        for i, (p, _x, _stage, _acc) in enumerate(items):
            base = self.tiles[self._p_tile(i)][0]
            for ni in range(BLOCK // 8):
                # row % 8 == g: the pair's chunk is ni ^ g, at byte 4 tq of it
                chunk = t.mul(t.arith("xori", self.g, ni), 8)
                for half in (0, 1):
                    row = t.add(row0, 8 * half)
                    at = t.add(t.add(t.mul(row, 64), chunk), t.mul(self.tq, 2))
                    lo = t.emit(f"arith.truncf {p[ni][2 * half]} : f32 to bf16")
                    hi = t.emit(f"arith.truncf {p[ni][2 * half + 1]} : f32 to bf16")
                    v = t.emit(f"vector.from_elements {lo}, {hi} : vector<2xbf16>")
                    t.line(f"vector.store {v}, {self.sm}[{t.add(at, base)}] "
                           f"{{alignment = 4}} : {self.sm_type}, vector<2xbf16>")
        t.line(_FENCE)
        t.line("gpu.barrier")
        return self._wait([self._issue(self._desc(self._p_tile(i), None, False),
                                       self._desc(x, stage, True), True, acc)
                           for i, (_p, x, stage, acc) in enumerate(items)])

    def accumulate_pv(self, p, v_smem, v_stage, acc):
        return self.accumulate_all([(p, v_smem, v_stage, acc)])[0]

    def shared_views(self) -> tuple[list[str], int]:
        # the flat view is defined at the kernel's start (__init__); 1 KiB for its alignment
        return [], 2 * self.size + 1024

    def module(self, name: str, kernel: str, args: list[tuple[str, str]]) -> tuple[str, int]:
        text, shared = super().module(name, kernel, args)
        return text.replace(_SM_SIZE, str(self.size)), shared
