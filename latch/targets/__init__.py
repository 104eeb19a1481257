"""Execution targets.  ``cpu``: upstream MLIR's LLVM lowering + ExecutionEngine JIT."""
from latch.targets.cpu import CPU_PIPELINE, CpuExecutable, compile_function

__all__ = ["CPU_PIPELINE", "CpuExecutable", "compile_function"]
