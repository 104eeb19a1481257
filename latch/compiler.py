"""``latch.compile()``: a PyTorch model plus a learning rule -> a Latch program.

It reads as the stages it runs (DESIGN.md):

1. trace   the loss and its gradients as one functional aten graph      (latch.frontend.trace)
2. linalg  torch-mlir imports it to linalg on tensors                    (latch.frontend.importer)
3. latch   the learning program: state + update + rule ops               (latch.optim.emit)
           lowered by ``latch-lower-rules``                              (latch.passes)
4. buffers bufferization and the static memory plan (``latch-bufferize``)
5. target  cpu: LLVM + ExecutionEngine (latch.targets.cpu)

Each stage's input is dumped to ``$LATCH_DUMP_DIR`` when it is set, and replays with latch-opt.
"""
from __future__ import annotations

import contextlib
import time

import torch

from latch.errors import LatchError
from latch.options import CompileOptions

_DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16",
           torch.float16: "f16", torch.int64: "i64", torch.int32: "i32", torch.bool: "i1"}


def mlir_tensor_type(shape, dtype) -> str:
    if dtype not in _DTYPES:
        raise LatchError(f"tensors of dtype {dtype} are not supported (use one of "
                         f"{', '.join(str(d) for d in _DTYPES)})")
    dims = "".join(f"{int(d)}x" for d in shape)
    return f"tensor<{dims}{_DTYPES[dtype]}>"


class _Timer:
    """Seconds per stage (``with timer("trace"): ...``), each stage reported by
    latch.progress."""

    def __init__(self):
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, stage):
        from latch import progress
        with progress.stage(stage):
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self.times[stage] = self.times.get(stage, 0.0) + time.perf_counter() - t0


def compile(model, rule, example_inputs, target: str = "cpu", precision: str = "fp32",
            on_nonfinite: str = "skip", **kwargs):
    """Compile ``model`` with learning ``rule`` into a :class:`latch.Program`.

    ``model``: an ``nn.Module`` whose ``forward(*inputs)`` returns a scalar loss.
    ``rule``: a rule from :mod:`latch.optim`, or ``None`` to compile ``model`` (a module or a
    function) as a plain function returning tensors.
    ``example_inputs``: a tuple of tensors with the shapes and dtypes of every later batch
    (with ``distributed=True``: one rank's shard of the batch).
    Other keywords are fields of :class:`latch.options.CompileOptions` (``opt_level``,
    ``distributed``, ``bucket_mb``, ``attention``, ``deterministic``, ``repeat``).
    """
    options = CompileOptions(target=target, precision=precision, on_nonfinite=on_nonfinite,
                             **kwargs)
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if rule is None:
        if options.distributed:
            raise LatchError("distributed=True averages gradients between the backward pass and "
                             "a learning rule; a plain function (rule=None) has neither")
        from latch.function import compile_function
        build = lambda: compile_function(model, inputs, options)  # noqa: E731
    else:
        if not isinstance(model, torch.nn.Module):
            raise LatchError("a model compiled with a learning rule must be an nn.Module whose "
                             "forward(*inputs) returns the loss (pass rule=None for a plain "
                             "function)")
        from latch.program import build_program
        build = lambda: build_program(model, rule, inputs, options)  # noqa: E731
    # the persistent compile cache (latch/cache.py): trace, key, hit -> load, miss -> build
    from latch.cache import cached_compile
    from latch.frontend.attention import attention_rounding, traced_mode
    from latch.frontend.structured import repeats_unrolled
    # the traces (key and build) see it; "fused" makes its ops only for a target that lowers
    # them (cuda), elsewhere it traces as "flash"; a repeat is unrolled in the traces where
    # the option says so
    from latch import progress
    with attention_rounding(traced_mode(options.attention_mode, options.target)), \
            repeats_unrolled(options.repeat_mode == "unroll"), progress.compiling():
        return cached_compile(model, rule, inputs, options, build)
