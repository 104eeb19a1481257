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


# PTX 8.1: the vector atomic adds of latch-vector-atomics (latch.targets.cuda.DEFAULT_FEATURES)
_GPU_DEFAULTS = (("chip", "sm_90a"), ("features", "+ptx81"), ("block", "32,8"))
_FORM_DEFAULTS = _GPU_DEFAULTS + (("mma", "true"), ("scatter", "true"),
                                  ("deterministic", "false"))

PIPELINES: dict[str, NamedPipeline] = {p.name: p for p in [
    NamedPipeline(
        "latch-lower-rules",
        "stage 'latch': verify, then lower state, schedules, control and optimizer ops to "
        "tensor code (func/linalg/scf/arith)",
        ("latch-verify", "latch-attention-to-calls", "latch-lower-state",
         "latch-lower-schedules", "latch-lower-control", "latch-lower-optimizers", "inline",
         "canonicalize", "cse"),
    ),
    NamedPipeline(
        "latch-bufferize",
        "stage 'buffers': linalg on tensors -> linalg on memrefs (one-shot bufferization "
        "across function boundaries, identity layouts; one-hot masks and cheap elementwise "
        "producers recomputed in each "
        "reader (gathers included), sums of a few terms fused into their elementwise reader, "
        "bf16 product factors fusion moved into a product materialized again; "
        "gradient buckets of data-parallel programs reduced as soon as they are "
        "final; results only copied into a part of another buffer written there) and the "
        "static memory plan",
        (# the parameters' bf16 copies kept as state, written by the optimizer
         "latch-carry-casts",
         "func.func(convert-elementwise-to-linalg, linalg-generalize-named-ops, "
         "linalg-fold-unit-extent-dims)",
         # twice: a mask fused with its 0/1 conversion and transpose can have readers again
         "latch-rematerialize-masks", "latch-recompute-elementwise",
         "linalg-fuse-elementwise-ops",
         "latch-rematerialize-masks", "latch-recompute-elementwise",
         "linalg-fuse-elementwise-ops",
         # a third time: a producer that the second fusion left reading a product rounded
         # by all its readers (the SwiGLU gate, silu(bf16(x @ w1))) is copied into them
         "latch-recompute-elementwise", "linalg-fuse-elementwise-ops",
         # short sums (the MoE's top-2 combine) become elementwise: fused into their reader
         "latch-unroll-short-reductions", "linalg-fuse-elementwise-ops",
         "latch-materialize-product-factors",
         # two elementwise readers of the same tensor (the SwiGLU backward): one kernel
         "latch-fuse-siblings",
         # a long row reduction's elementwise reader next to it (the loss gradient after
         # its log-sum-exp): latch-wrap-host-compute runs both in one launch
         "latch-hoist-row-readers",
         "latch-lower-collectives", "latch-lower-attention",
         "eliminate-empty-tensors", "empty-tensor-to-alloc-tensor",
         "one-shot-bufferize{{bufferize-function-boundaries "
         "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}}",
         "canonicalize", "cse", "latch-schedule-collectives", "latch-attention-views",
         "latch-write-in-place", "latch-plan-memory{{reuse-distance=16}}"),
    ),
    NamedPipeline(
        "latch-form-kernels",
        "stage 'kernels': host code that touches buffers is wrapped for the device, "
        "contractions become tiled (tensor-core) kernels, the parallel loops of each other "
        "linalg op become outlined gpu.func kernels, and the host keeps only the launch "
        "schedule",
        ("latch-form-attention-kernels{{chip={chip}}}", "latch-wrap-host-compute",
         "latch-forward-zero-fills",
         "latch-form-contraction-kernels{{mma={mma} chip={chip} scatter={scatter} "
         "deterministic={deterministic}}}",
         "latch-nonfinite-checks{{phase=mark}}", "latch-fuse-rows",
         "latch-recompute-index-functions", "func.func(convert-linalg-to-parallel-loops)",
         "latch-register-accumulators", "latch-fold-zero-fills", "latch-fuse-element-readers",
         "latch-split-integer-sums", "latch-unroll-short-loops",
         "latch-map-parallel-loops{{block={block}}}",
         "func.func(scf-parallel-loop-tiling{{parallel-loop-tile-sizes={block} no-min-max-bounds=true}})",
         "func.func(gpu-map-parallel-loops)", "func.func(convert-parallel-loops-to-gpu)",
         "latch-nonfinite-checks", "gpu-launch-sink-index-computations", "gpu-kernel-outlining", "lower-affine",
         "convert-scf-to-cf", "canonicalize"),
        _FORM_DEFAULTS,
    ),
    NamedPipeline(
        "latch-kernels-to-ptx",
        "stage 'nvvm -> ptx': NVPTX's data layout on each kernel module, vector atomic adds "
        "where four are consecutive, then lower kernels through NVVM (bare-pointer memref "
        "arguments) and serialize them to PTX in a gpu.binary (format isa)",
        ("latch-nvptx-data-layout", "latch-vector-atomics{{chip={chip} features={features}}}",
         "latch-dependent-launches{{chip={chip} features={features}}}",
         "gpu-lower-to-nvvm-pipeline{{cubin-chip={chip} cubin-features={features} "
         "cubin-format=isa opt-level={opt-level} kernel-bare-ptr-calling-convention=true}}",),
        # opt-level 2 is upstream's default; latch.compile passes CompileOptions' (3)
        _GPU_DEFAULTS + (("opt-level", "2"),),
    ),
    NamedPipeline(
        "latch-bufferize-host",
        "stage 'buffers' for the cpu target: bufferize, turn results into caller-owned "
        "out-parameters (pinned state), carry out the memory plan (one arena, views at the "
        "planned offsets), free the arena on return, lower linalg to loops",
        ("latch-recompute-elementwise", "func.func(linalg-fuse-elementwise-ops)",
         "eliminate-empty-tensors", "empty-tensor-to-alloc-tensor",
         "one-shot-bufferize{{bufferize-function-boundaries=true "
         "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}}",
         "buffer-results-to-out-params{{hoist-static-allocs=true modify-public-functions=true}}",
         "canonicalize", "latch-plan-memory{{materialize=true alignment=64}}",
         "buffer-deallocation-pipeline", "convert-bufferization-to-memref",
         "func.func(convert-linalg-to-loops)", "expand-strided-metadata", "lower-affine",
         "convert-scf-to-cf"),
    ),
    NamedPipeline(
        "latch-loops-to-llvm",
        "stage 'llvm' for the cpu target: loops on memrefs -> LLVM dialect (booleans stored "
        "as bytes)",
        ("latch-widen-i1-memrefs", "convert-math-to-llvm", "convert-math-to-libm",
         "finalize-memref-to-llvm", "convert-func-to-llvm", "convert-cf-to-llvm",
         "convert-arith-to-llvm", "convert-index-to-llvm", "reconcile-unrealized-casts"),
    ),
    NamedPipeline(
        "latch-to-llvm",
        "a Latch program or linalg on tensors all the way to the LLVM dialect for the "
        "cpu target's JIT",
        ("latch-lower-rules", "latch-bufferize-host", "latch-loops-to-llvm"),
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
