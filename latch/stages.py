"""Run a module through the named stages one at a time, timing each and summarizing the IR.

Used by ``compile()``'s report, by ``examples/ptx_demo.py`` and by ``LATCH_DUMP_DIR``: each
stage's input can be written to ``<dump dir>/<nn>-<stage>.mlir`` and replayed with
``latch-opt <file> --pass-pipeline='builtin.module(<stage>)'``.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import time

from latch.errors import LatchError

GPU_STAGES = ("latch-lower-rules", "latch-bufferize", "latch-form-kernels", "latch-kernels-to-ptx")


@dataclasses.dataclass
class StageRecord:
    stage: str
    seconds: float
    ops: dict           # dialect -> op count after the stage
    dumped_input: str | None = None


def op_counts(module) -> dict:
    counts: collections.Counter = collections.Counter()

    def visit(op):
        name = op.operation.name if hasattr(op, "operation") else op.name
        counts[name.split(".")[0]] += 1
        from mlir import ir
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    counts.pop("builtin", None)
    return dict(sorted(counts.items()))


def dump_dir() -> str | None:
    return os.environ.get("LATCH_DUMP_DIR") or None


def run_stages(module, stages, *, dump_to: str | None = None, name: str = "module"):
    """Run each named pipeline in ``stages`` on ``module`` in place; returns StageRecords."""
    from mlir import ir

    from latch.pipeline import run_pipeline

    records = []
    for i, stage in enumerate(stages):
        dumped = None
        if dump_to:
            os.makedirs(dump_to, exist_ok=True)
            dumped = os.path.join(dump_to, f"{name}-{i:02d}-{stage}.mlir")
            with open(dumped, "w") as f:
                f.write(module.operation.get_asm(print_generic_op_form=True))
        t0 = time.perf_counter()
        try:
            run_pipeline(module, f"builtin.module({stage})")
        except ir.MLIRError as e:
            where = dumped or _dump_reproducer(module, name, stage)
            raise LatchError(
                f"stage '{stage}' failed",
                diagnostics=[f"{d.location}: {d.message}" for d in e.error_diagnostics],
                reproducer=where,
                command=f"latch-opt {where} --pass-pipeline='builtin.module({stage})'",
            ) from None
        records.append(StageRecord(stage, time.perf_counter() - t0, op_counts(module), dumped))
    return records


def _dump_reproducer(module, name, stage) -> str:
    import tempfile

    fd, path = tempfile.mkstemp(prefix=f"latch-{name}-{stage}-", suffix=".mlir")
    with os.fdopen(fd, "w") as f:
        f.write(module.operation.get_asm(print_generic_op_form=True))
    return path
