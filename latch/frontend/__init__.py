"""Latch's frontend: stage 1 (trace) and stage 2 (torch-mlir import to linalg)."""
from latch.frontend.trace import (TensorSpec, TracedGraph, trace_function,
                                  trace_loss_and_grads, tracing_context)
from latch.frontend.support import SUPPORTED_OPS, check_supported, unsupported_ops
from latch.frontend.importer import import_to_linalg, verify_upstream

__all__ = ["TensorSpec", "TracedGraph", "trace_function", "trace_loss_and_grads",
           "tracing_context", "SUPPORTED_OPS", "check_supported", "unsupported_ops",
           "import_to_linalg", "verify_upstream"]
