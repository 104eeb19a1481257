"""The Latch runtime: runs a compiled ``.latch`` artifact on a GPU through the CUDA driver.

Importable on a machine with only numpy, torch and cuda-bindings: it never imports MLIR,
torch-mlir, ``latch.dialect`` or ``latch.passes`` (tests/py/test_cuda_target.py guards this).

    from latch.runtime import CudaProgram
    prog = CudaProgram.load("model.latch")
    loss = prog.step(x, y)
"""
from __future__ import annotations

from latch.runtime.driver import CudaError, CudaUnavailableError

__all__ = ["CudaProgram", "CudaFunction", "CudaError", "CudaUnavailableError", "load"]


def load(path, device: int | None = None, use_graph: bool | None = None, process_group=None):
    """Load a cuda artifact (see :class:`latch.runtime.program.CudaProgram`) onto ``device``
    (default: torch's current device)."""
    from latch.runtime.program import CudaProgram
    return CudaProgram.load(path, device=device, use_graph=use_graph,
                            process_group=process_group)


def __getattr__(name):
    if name == "CudaProgram":
        from latch.runtime.program import CudaProgram
        return CudaProgram
    if name == "CudaFunction":
        from latch.runtime.function import CudaFunction
        return CudaFunction
    raise AttributeError(f"module 'latch.runtime' has no attribute {name!r}")
