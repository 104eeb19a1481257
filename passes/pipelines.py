"""The named pipelines of each compilation stage (DESIGN.md, "Compilation stages").

A named pipeline may appear anywhere a pass may in ``--pass-pipeline`` and expands to its
elements; stage pipelines compose into the end-to-end ones (``latch-to-ptx``,
``latch-to-llvm``).  Options like ``latch-to-ptx{chip=sm_90a}`` are substituted into the
``{chip}`` placeholders of the expansion.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class NamedPipeline:
    name: str
    summary: str
    elements: tuple[str, ...]
    defaults: tuple[tuple[str, str], ...] = ()

    def expand(self, options: dict[str, str]) -> list[str]:
        values = dict(self.defaults)
        for key in options:
            if key not in values:
                valid = ", ".join(values) or "none"
                raise KeyError(f"pipeline '{self.name}' has no option '{key}' (options: {valid})")
        values.update(options)
        return [e.format(**values) for e in self.elements]


_GPU_DEFAULTS = (("chip", "sm_90"), ("features", "+ptx80"), ("block", "32,8"))

PIPELINES: dict[str, NamedPipeline] = {p.name: p for p in [
    NamedPipeline(
        "latch-lower-rules",
        "stage 'latch': verify, then lower state, schedules, control and optimizer ops to "
        "tensor code (func/linalg/scf/arith)",
        ("latch-verify", "latch-lower-state", "latch-lower-schedules", "latch-lower-control",
         "latch-lower-optimizers", "canonicalize", "cse"),
    ),
    NamedPipeline(
        "latch-bufferize",
        "stage 'buffers': linalg on tensors -> linalg on memrefs (one-shot bufferization "
        "across function boundaries, identity layouts) and the static memory plan",
        ("func.func(convert-elementwise-to-linalg, linalg-generalize-named-ops)",
         "linalg-fuse-elementwise-ops",
         "eliminate-empty-tensors", "empty-tensor-to-alloc-tensor",
         "one-shot-bufferize{{bufferize-function-boundaries "
         "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}}",
         "canonicalize", "cse", "latch-plan-memory"),
    ),
    NamedPipeline(
        "latch-form-kernels",
        "stage 'kernels': parallel loops of each linalg op -> outlined gpu.func kernels "
        "with a host launch schedule",
        ("func.func(convert-linalg-to-parallel-loops)",
         "func.func(scf-parallel-loop-tiling{{parallel-loop-tile-sizes={block} no-min-max-bounds=true}})",
         "func.func(gpu-map-parallel-loops)", "func.func(convert-parallel-loops-to-gpu)",
         "gpu-kernel-outlining", "lower-affine", "convert-scf-to-cf", "canonicalize"),
        _GPU_DEFAULTS,
    ),
    NamedPipeline(
        "latch-kernels-to-ptx",
        "stage 'nvvm -> ptx': lower kernels through NVVM and serialize them to PTX in a "
        "gpu.binary (format isa)",
        ("gpu-lower-to-nvvm-pipeline{{cubin-chip={chip} cubin-features={features} "
         "cubin-format=isa}}",),
        _GPU_DEFAULTS,
    ),
    NamedPipeline(
        "latch-to-ptx",
        "linalg-on-tensors (or a Latch program) all the way to a gpu.binary holding PTX",
        ("latch-lower-rules", "latch-bufferize", "latch-form-kernels{{chip={chip} "
         "features={features} block={block}}}",
         "latch-kernels-to-ptx{{chip={chip} features={features}}}"),
        _GPU_DEFAULTS,
    ),
]}
