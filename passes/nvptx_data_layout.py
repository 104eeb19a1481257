"""``latch-nvptx-data-layout``: every kernel module gets NVPTX's data layout before it is
translated to LLVM IR (stage 'nvvm -> ptx', first in ``latch-kernels-to-ptx``), so that a
64-bit integer is loaded and stored with one 8-byte access instead of two 4-byte ones.

``gpu-module-to-binary`` translates a ``gpu.module`` to an LLVM module and gives it the
NVPTX target's data layout only afterwards, when it builds the target machine.  While
translating, a ``llvm.load`` or ``llvm.store`` without an ``alignment`` takes the ABI
alignment of its type from the module's layout at that time: LLVM's default one, in which
``i64`` is 4-byte aligned (``i64:32:64``).  The alignment stays on the instruction, and the
backend splits an access it cannot prove 8-byte aligned into two ``ld.global.b32`` (plus a
shift and an or to join the halves).  TinyMoE B2's kernels had 1,156 of them, the routing's
scans among them (token ids, expert classes and counts are i64): each load of their inner
loops two loads and two more instructions.

This pass sets ``llvm.data_layout`` on each ``gpu.module`` that has none, to NVPTX's 64-bit
layout (:data:`NVPTX64`: ``i64`` and ``i128`` naturally aligned), which the translation uses
from the start.  Every i64 buffer a kernel sees is 8-byte aligned: the memory plan's slots
are 256-byte aligned (``latch-plan-memory``), views move by whole elements, state and input
tensors come from allocators that align at least to their element (a torch tensor's
storage offset counts elements), and no kernel keeps i64 values in shared memory.  Vector
loads and stores carry their own ``alignment`` and do not change.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-nvptx-data-layout)'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, operation as _op

ATTR = "llvm.data_layout"
#: LLVM's data layout for the nvptx64 target: i64/i128 naturally aligned, 16/32-bit vectors
#: aligned to their size, native integer widths 16, 32 and 64
NVPTX64 = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"


@dataclasses.dataclass(frozen=True)
class NvptxDataLayout(ModulePass):
    name = "latch-nvptx-data-layout"
    summary = ("give each gpu.module NVPTX's data layout before translation, so i64 "
               "accesses are 8-byte aligned (one load, not two)")

    def apply(self, module) -> None:
        from mlir import ir

        for top in module.regions[0].blocks[0].operations:
            top = _op(top)
            if top.name == "gpu.module" and ATTR not in top.attributes:
                top.attributes[ATTR] = ir.StringAttr.get(NVPTX64)
