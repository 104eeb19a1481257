"""``latch-dependent-launches``: every kernel starts with Hopper's grid dependency control,
so the runtime may launch it while the kernel before it on the stream is still running
(programmatic dependent launch; stage 'nvvm -> ptx', in ``latch-kernels-to-ptx`` before the
NVVM lowering; sm_90 and later, PTX 7.8).

An update is a few thousand kernels, most of them small: TinyMoE B2's critical path is 908
launches, half of them under 6 µs, and every one waits for the one before it to finish, be
flushed, and only then be launched.  With ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_
SERIALIZATION`` a kernel may instead be launched as soon as every block of the one before
it has executed ``griddepcontrol.launch_dependents``; its blocks then sit at
``griddepcontrol.wait`` until that kernel has completed and its memory is visible.  So
the order and the visibility are those of a plain launch, and the launch latency overlaps
the previous kernel.

Each ``gpu.func`` kernel gets, first in its entry block, ``griddepcontrol.launch_dependents``
and then ``griddepcontrol.wait`` (inline PTX with a memory clobber, as CUTLASS writes them:
the NVVM intrinsics do not keep loads below them): nothing of the kernel runs before the
wait, so whatever the runtime does, a kernel never reads before its
predecessors completed (launched plainly, the wait returns at once).  The module gets
``latch.dependent_launches`` (the manifest's ``dependent_launches``), which tells the
runtime that every kernel of the artifact waits, so it may launch them with the attribute.
Nothing is done for chips before sm_90 or PTX before 7.8.

Example: ``latch-opt f.mlir --pass-pipeline='builtin.module(latch-dependent-launches{chip=sm_90a features=+ptx81})'``
"""
from __future__ import annotations

import dataclasses

from latch.passes.base import ModulePass, chip_at_least, operation as _op

ATTR = "latch.dependent_launches"


def supported(chip: str, features: str) -> bool:
    """Whether ``chip`` with PTX ``features`` has ``griddepcontrol`` (sm_90+, PTX 7.8+)."""
    return chip_at_least(chip, features, 90, 78)


@dataclasses.dataclass(frozen=True)
class DependentLaunches(ModulePass):
    name = "latch-dependent-launches"
    summary = ("every kernel starts with griddepcontrol launch_dependents + wait, so the "
               "runtime may launch it before the previous kernel on its stream ends")
    chip: str = "sm_90a"
    features: str = "+ptx81"

    def apply(self, module) -> None:
        from mlir import ir
        from mlir.dialects import llvm

        if not supported(self.chip, self.features):
            return
        kernels = []
        for top in module.regions[0].blocks[0].operations:
            top = _op(top)
            if top.name != "gpu.module":
                continue
            for f in top.regions[0].blocks[0].operations:
                f = _op(f)
                if f.name == "gpu.func" and "gpu.kernel" in f.attributes:
                    kernels.append(f)
        for f in kernels:
            entry = f.regions[0].blocks[0]
            with ir.InsertionPoint.at_block_begin(entry), f.location:
                for instruction in ("griddepcontrol.launch_dependents;",
                                    "griddepcontrol.wait;"):
                    # a memory clobber: no load of the kernel may move above the wait
                    llvm.InlineAsmOp(None, [], instruction, "~{memory}",
                                     has_side_effects=True)
        if kernels:
            module.attributes[ATTR] = ir.UnitAttr.get()
