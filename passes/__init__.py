"""Latch passes and the named pipelines of each compiler stage.

Every pass lives in its own module and is registered here lazily by its command-line name,
so ``latch-opt --list-passes`` and the pipeline parser never import more than they need.
"""
from __future__ import annotations

import importlib

# command-line name -> "module:Class" (module relative to latch.passes)
PASSES: dict[str, str] = {
    "latch-verify": "latch_verify:LatchVerify",
    "latch-lower-state": "lower_state:LowerState",
    "latch-lower-schedules": "lower_schedules:LowerSchedules",
    "latch-lower-control": "lower_control:LowerControl",
    "latch-lower-optimizers": "lower_optimizers:LowerOptimizers",
    "latch-specialize-every": "specialize_every:SpecializeEvery",
    "latch-unroll-kernel-loops": "unroll_kernel_loops:UnrollKernelLoops",
    "latch-lower-collectives": "lower_collectives:LowerCollectives",
    "latch-schedule-collectives": "schedule_collectives:ScheduleCollectives",
    "latch-rematerialize-masks": "rematerialize_masks:RematerializeMasks",
    "latch-recompute-elementwise": "recompute_elementwise:RecomputeElementwise",
    "latch-plan-memory": "plan_memory:PlanMemory",
    "latch-wrap-host-compute": "wrap_host_compute:WrapHostCompute",
    "latch-forward-zero-fills": "zero_fills:ForwardZeroFills",
    "latch-write-in-place": "write_in_place:WriteInPlace",
    "latch-attention-views": "attention_views:AttentionViews",
    "latch-form-contraction-kernels": "form_contraction_kernels:FormContractionKernels",
    "latch-map-parallel-loops": "map_parallel_loops:MapParallelLoops",
    "latch-widen-i1-memrefs": "widen_i1_memrefs:WidenI1Memrefs",
    "latch-form-scan-kernels": "scan_kernels:FormScanKernels",
    "latch-lower-attention": "lower_attention:LowerAttention",
    "latch-attention-to-calls": "lower_attention:AttentionToCalls",
    "latch-form-attention-kernels": "attention_kernels:FormAttentionKernels",
    "latch-vector-atomics": "vector_atomics:VectorAtomics",
    "latch-register-accumulators": "register_accumulators:RegisterAccumulators",
    "latch-fold-zero-fills": "fold_zero_fills:FoldZeroFills",
    "latch-fuse-element-readers": "fuse_element_readers:FuseElementReaders",
    "latch-unroll-short-loops": "unroll_short_loops:UnrollShortLoops",
    "latch-split-integer-sums": "split_integer_sums:SplitIntegerSums",
    "latch-unroll-short-reductions": "unroll_short_reductions:UnrollShortReductions",
    "latch-nonfinite-checks": "nonfinite_checks:NonfiniteChecks",
    "latch-dependent-launches": "dependent_launches:DependentLaunches",
    "latch-nvptx-data-layout": "nvptx_data_layout:NvptxDataLayout",
    "latch-materialize-product-factors": "product_factors:MaterializeProductFactors",
    "latch-fuse-siblings": "fuse_siblings:FuseSiblings",
    "latch-hoist-row-readers": "hoist_row_readers:HoistRowReaders",
    "latch-carry-casts": "carry_casts:CarryCasts",
    "latch-fuse-rows": "fuse_rows:FuseRows",
    "latch-recompute-index-functions": "index_functions:RecomputeIndexFunctions",
}


def get_pass(name: str):
    """The pass class registered under ``name`` (KeyError if none)."""
    module_name, class_name = PASSES[name].split(":")
    module = importlib.import_module(f"latch.passes.{module_name}")
    return getattr(module, class_name)


def available_passes() -> dict[str, str]:
    """name -> one-line summary, for passes whose module imports."""
    out = {}
    for name in sorted(PASSES):
        try:
            out[name] = get_pass(name).summary
        except (ImportError, AttributeError):
            continue
    return out
