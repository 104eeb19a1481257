"""Execution targets.  ``cpu``: upstream MLIR's LLVM lowering + ExecutionEngine JIT."""
