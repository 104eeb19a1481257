"""Compile a Latch program (a .mlir file) through every stage to PTX, with a summary per stage.

    python examples/ptx_demo.py [examples/mlir/sgd_update.mlir]
"""
import os
import sys
import time

from mlir import ir

import latch.dialect
from latch.cli.latch_opt import _ptx_of
from latch.stages import GPU_STAGES, run_stages

HERE = os.path.dirname(os.path.abspath(__file__))


def main(path: str) -> None:
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        with open(path) as f:
            module = ir.Module.parse(f.read())
        from latch.passes.latch_verify import verify_module
        verify_module(module.operation)
        print(f"{'input':22s} {'':10s} {_summary(module)}")
        t0, plan = time.perf_counter(), ""
        for stage in GPU_STAGES:
            [r] = run_stages(module, [stage], dump_to=os.environ.get("LATCH_DUMP_DIR"),
                             name=os.path.splitext(os.path.basename(path))[0])
            ops = ", ".join(f"{d} {n}" for d, n in r.ops.items())
            print(f"{r.stage:22s} {r.seconds * 1e3:7.1f} ms {ops}")
            plan = plan or _memory_plan(module)
        ptx = _ptx_of(module)
        kernels = ptx.count(".entry ")
        print(f"total {1e3 * (time.perf_counter() - t0):.0f} ms: {kernels} kernels, "
              f"{len(ptx)} bytes of PTX for sm_90a{plan}")
        print("---- first kernel's PTX (head) ----")
        print("\n".join(ptx.splitlines()[:24]))


def _summary(module) -> str:
    from latch.stages import op_counts
    return ", ".join(f"{d} {n}" for d, n in op_counts(module).items())


def _memory_plan(module) -> str:
    from latch.passes.plan_memory import recorded_plan

    parts = []
    for op in module.body.operations:
        plan = recorded_plan(op.operation)
        if plan:
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            parts.append(f"; memory plan of {name}: arena {plan['arena_bytes']} B for "
                         f"{plan['buffer_bytes']} B of temporaries")
    return "".join(parts)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "mlir", "sgd_update.mlir"))
