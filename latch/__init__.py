"""Latch: a compiler from a PyTorch model plus a learning rule to one training-update program.

    prog = latch.compile(model, optim.AdamW(1e-3), example_inputs, target="cpu")
    state = prog.init(model)
    loss = prog.step(state, *batch)
"""
__version__ = "0.1.0"

from latch.errors import LatchError, NonFiniteError, PipelineError, UnsupportedOpError  # noqa: E402
from latch.control import repeat, scan  # noqa: E402

__all__ = ["compile", "load", "optim", "LatchError", "UnsupportedOpError", "NonFiniteError",
           "PipelineError", "__version__", "scan", "repeat", "load_state"]


def compile(model, rule, example_inputs, target="cpu", precision="fp32", **kwargs):
    """See :func:`latch.compiler.compile`."""
    from latch.compiler import compile as _compile
    return _compile(model, rule, example_inputs, target=target, precision=precision, **kwargs)


def load(path, **runtime_options):
    """Load a program saved with ``prog.save(path)``.  A cuda program takes the runtime's
    options: ``device`` (default: torch's current device), ``use_graph``, ``process_group``
    (data-parallel programs; default: torch.distributed's default group)."""
    from latch.artifact import read_artifact
    manifest, files = read_artifact(path)
    if manifest.get("kind") == "cuda-update":   # runtime only: no MLIR needed
        from latch.runtime.program import CudaProgram
        return CudaProgram(manifest, files, **runtime_options)
    if manifest.get("kind") == "cuda-function":
        from latch.runtime.function import CudaFunction
        return CudaFunction(manifest, files, **runtime_options)
    if runtime_options:
        raise TypeError(f"load() options {sorted(runtime_options)} apply to cuda programs only")
    if manifest.get("kind") == "update":
        from latch.program import Program
        return Program(manifest, files["program.mlir"].decode())
    from latch.function import CompiledFunction
    return CompiledFunction.from_artifact(manifest, files)


def load_state(path, program):
    """Load a training-state checkpoint written by ``state.save(path)`` into a new state of
    ``program`` (verified: format, version, per-tensor checksums, the program's layout)."""
    from latch.checkpoint import load_state as _load_state
    return _load_state(path, program)


def __getattr__(name):
    if name == "optim":
        import importlib
        return importlib.import_module("latch.optim")
    raise AttributeError(f"module 'latch' has no attribute {name!r}")
