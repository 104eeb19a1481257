"""Fuzzed lowering: hypothesis-generated tensor programs (tests/py/fuzz_programs.py: elementwise
ops with broadcasting, reductions, matmul/bmm, reshape/transpose chains on random static
shapes) compiled for the CPU target with ``latch.compile(fn, None, inputs)`` and compared with
PyTorch in float32.

Deterministic (``derandomize=True``: the same examples every run) and bounded for CI.  On a
failure hypothesis shrinks the program; the minimal one's linalg MLIR (the input of the CPU
pipeline, ``latch-opt F --pass-pipeline='builtin.module(latch-to-llvm)'``) is written to
``$LATCH_FUZZ_DIR`` (default ``<tmp>/latch-fuzz``) and the failure message says where.
Reproducers of real bugs are kept as lit tests under tests/lit/fuzz/.
"""
from __future__ import annotations

import hashlib
import os
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import latch
from fuzz_programs import build, close, program_strategy, source

MAX_EXAMPLES = int(os.environ.get("LATCH_FUZZ_EXAMPLES", "25"))
MAX_STEPS = int(os.environ.get("LATCH_FUZZ_STEPS", "5"))


@pytest.fixture(autouse=True)
def _no_compile_cache(monkeypatch):
    monkeypatch.setenv("LATCH_CACHE", "0")     # every example really goes through lowering


def write_reproducer(program, why: str) -> str:
    """Write the program's linalg MLIR (+ its Python source) and return the .mlir path."""
    from latch.frontend.importer import import_to_linalg
    from latch.frontend.trace import trace_function

    folder = os.environ.get("LATCH_FUZZ_DIR", os.path.join(tempfile.gettempdir(), "latch-fuzz"))
    os.makedirs(folder, exist_ok=True)
    src = source(program)
    name = "fuzz-" + hashlib.sha256(src.encode()).hexdigest()[:12]
    path = os.path.join(folder, name + ".mlir")
    header = "".join(f"// {line}\n" for line in (why.splitlines() + [""] + src.splitlines()))
    header += ("// replay: latch-opt %s --pass-pipeline='builtin.module(latch-to-llvm)'\n"
               % os.path.basename(path))
    try:
        fn, inputs = build(program)
        text = import_to_linalg(trace_function(fn, inputs), "main")
    except Exception as e:  # noqa: BLE001 - the failure may be in the import itself
        text = f"// (no linalg: the import failed: {type(e).__name__}: {e})\n"
    with open(path, "w") as f:
        f.write(header + text)
    return path


def check_program(program) -> None:
    """Compile ``program`` and compare it with PyTorch; AssertionError names a reproducer."""
    fn, inputs = build(program)
    ref = fn(*inputs)
    try:
        compiled = latch.compile(fn, None, inputs)
        got = compiled(*inputs)
    except Exception as e:  # noqa: BLE001
        why = f"compile/run raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise AssertionError(f"{why}\n{source(program)}\nreproducer: "
                             f"{write_reproducer(program, why)}") from e
    if not close(got, ref):
        diff = ((got - ref).abs().max().item() if got.shape == ref.shape else "shape")
        why = (f"mismatch: latch {got.dtype}{list(got.shape)} vs torch "
               f"{ref.dtype}{list(ref.shape)}, max |diff| {diff}")
        raise AssertionError(f"{why}\n{source(program)}\nreproducer: "
                             f"{write_reproducer(program, why)}")


@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=program_strategy(MAX_STEPS))
def test_random_programs_match_torch(program):
    check_program(program)


def test_write_reproducer_names_a_replayable_file(tmp_path, monkeypatch):
    """The failure path itself: a reproducer is written where the message says, and it is
    the linalg input of the CPU pipeline."""
    monkeypatch.setenv("LATCH_FUZZ_DIR", str(tmp_path))
    program = {"inputs": [(2, 3), (3,)], "seed": 0, "steps": [
        {"kind": "binary", "op": "add", "other": 1, "swap": False, "out": (2, 3)},
        {"kind": "reduce", "op": "sum", "dim": 1, "keepdim": False, "out": (2,)}]}
    path = write_reproducer(program, "a test")
    text = open(path).read()
    assert path.startswith(str(tmp_path)) and "sym_name = \"main\"" in text
    assert "linalg.generic" in text and "h = add(h, x1)" in text
