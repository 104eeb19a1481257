"""Errors for bad input (the Reliability issue, item 1): every case must raise a
``latch.LatchError`` subclass whose message names the problem — never a torch or Python
traceback from deep inside the compiler, never a crash, never a silently wrong result.

The cases are one table, :data:`CASES` (category, name, the call, the error class, a regex
the message must match), shared with ``bench/reliability.py`` (the "errors" rows of the
reliability table).  Some categories are also tested in depth elsewhere: hyperparameters in
test_optim.py, unsupported ops in test_frontend.py, step inputs and artifacts in
test_api.py, checkpoints in test_checkpoint.py; here every case goes through the public API.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
import tempfile
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn as nn

import latch
from latch import optim
from models import make_mlp
from zip_edit import rewrite_zip


@dataclasses.dataclass
class Case:
    category: str
    name: str
    call: Callable[[], object]
    error: type
    pattern: str


CASES: list[Case] = []


def case(category: str, pattern: str, error: type = latch.LatchError):
    def register(fn):
        CASES.append(Case(category, fn.__name__, fn, error, pattern))
        return fn
    return register


def run_case(c: Case) -> dict:
    """Run one case: {"clear": bool, "outcome": str, "message": first line}."""
    try:
        c.call()
    except latch.LatchError as e:
        msg = str(e)
        ok = isinstance(e, c.error) and re.search(c.pattern, msg) is not None
        return {"clear": ok, "outcome": type(e).__name__,
                "message": msg.splitlines()[0][:300],
                "problem": None if ok else f"expected {c.error.__name__} matching {c.pattern!r}"}
    except Exception as e:  # noqa: BLE001 - a non-Latch exception is the failure we look for
        return {"clear": False, "outcome": f"crash: {type(e).__name__}",
                "message": str(e).splitlines()[0][:300] if str(e) else "",
                "problem": "not a LatchError"}
    return {"clear": False, "outcome": "no error", "message": "", "problem": "nothing raised"}


# ----------------------------------------------------------------------------- helpers
@functools.cache
def _mlp():
    model, inputs = make_mlp(seed=0)
    return model, inputs, latch.compile(model, optim.AdamW(1e-2), inputs)


@functools.cache
def _fn():
    def f(a, b):
        return torch.tanh(a @ b)
    a, b = torch.randn(4, 3), torch.randn(3, 2)
    return (a, b), latch.compile(f, None, (a, b))


class _Spy:
    """Wraps a program's executable and counts launches (inputs must fail before one)."""
    def __init__(self, exe):
        self.exe, self.calls = exe, 0

    def __call__(self, *a):
        self.calls += 1
        return self.exe(*a)


def _step_rejected(args_of):
    """step() with bad inputs: raises before any launch, state bitwise untouched."""
    model, inputs, prog = _mlp()
    state = prog.init(model)
    prog.step(state, *inputs)
    before = {k: v.clone() for k, v in state.tensors().items()}
    spy = _Spy(prog._exe)
    prog._exe = spy
    try:
        prog.step(state, *args_of(inputs))
    finally:
        prog._exe = spy.exe
        assert spy.calls == 0, "the program was launched"
        after = state.tensors()
        assert all(torch.equal(before[k], after[k]) for k in before), "state changed"
        assert state.step == 1 and state.skipped_steps == 0


def _artifact(edit=None, raw=None) -> Path:
    """A saved program artifact, optionally with its zip entries edited or bytes mangled."""
    _, _, prog = _mlp()
    path = Path(tempfile.mkdtemp(prefix="latch-errors-")) / "mlp.latch"
    prog.save(path)
    if edit is not None:
        rewrite_zip(path, edit)
    if raw is not None:
        path.write_bytes(raw(path.read_bytes()))
    return path


def _manifest_edit(fn):
    def edit(files):
        m = json.loads(files["manifest.json"])
        fn(m)
        files["manifest.json"] = json.dumps(m).encode()
    return edit


class _Linear(nn.Module):
    def __init__(self, out=lambda h: h.sum()):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.out = out

    def forward(self, x):
        return self.out(self.fc(x))


_X = torch.randn(2, 4)


# ----------------------------------------------------------------------------- unsupported ops
class _Exotic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.special.bessel_j0(self.fc(x)).sum()  # EXOTIC-OP-LINE


@case("unsupported op", r"aten\.special_bessel_j0(.|\n)*test_errors\.py:\d+(.|\n)*hint:",
      latch.UnsupportedOpError)
def unsupported_op_names_op_line_and_workaround():
    latch.compile(_Exotic(), optim.SGD(0.1), (_X,))


@case("unsupported op", r"aten\.index\.Tensor: its output shape depends on tensor values(.|\n)*hint:",
      latch.UnsupportedOpError)
def data_dependent_shape():
    latch.compile(lambda x: x[x > 0].sum(), None, (torch.randn(8),))


# ----------------------------------------------------------------------------- the loss
@case("loss", r"scalar loss tensor, it returned a tensor of shape \[2, 3\]")
def non_scalar_loss():
    latch.compile(_Linear(lambda h: h), optim.SGD(0.1), (_X,))


@case("loss", r"scalar loss tensor, it returned a tuple")
def tuple_loss():
    latch.compile(_Linear(lambda h: (h.sum(), h.mean())), optim.SGD(0.1), (_X,))


@case("loss", r"floating-point loss(.|\n)*torch\.int64")
def integer_loss():
    latch.compile(_Linear(lambda h: h.sum().long()), optim.SGD(0.1), (_X,))


@case("loss", r"floating-point loss(.|\n)*torch\.bool")
def bool_loss():
    latch.compile(_Linear(lambda h: h.sum() > 0), optim.SGD(0.1), (_X,))


@case("loss", r"must be an nn\.Module")
def function_with_a_rule():
    latch.compile(lambda x: x.sum(), optim.SGD(0.1), (_X,))


# ----------------------------------------------------------------------------- example inputs
@case("example inputs", r"forward\(x, y\)(.|\n)*missing 1 required positional argument: 'y'"
                        r"(.|\n)*example inputs: \(float32\[16, 8\]\)")
def too_few_example_inputs():
    model, (x, y) = make_mlp(0)
    latch.compile(model, optim.SGD(0.1), (x,))


@case("example inputs", r"forward\(x, y\)(.|\n)*takes 3 positional arguments but 4")
def too_many_example_inputs():
    model, (x, y) = make_mlp(0)
    latch.compile(model, optim.SGD(0.1), (x, y, y))


@case("example inputs", r"tracing MLPRegression\.forward(.|\n)*\[16, 5\] X \[8, 32\]"
                        r"(.|\n)*models\.py:\d+")
def wrong_example_shape():
    model, (x, y) = make_mlp(0)
    latch.compile(model, optim.SGD(0.1), (torch.randn(16, 5), y))


@case("example inputs", r"example input 0 is torch\.float64 but the model's parameters are "
                        r"torch\.float32")
def wrong_example_dtype():
    model, (x, y) = make_mlp(0)
    latch.compile(model, optim.SGD(0.1), (x.double(), y))


@case("example inputs", r"example input 1 is a int, not a tensor")
def non_tensor_example_input():
    model, (x, y) = make_mlp(0)
    latch.compile(model, optim.SGD(0.1), (x, 3))


@case("example inputs", r"tracing <lambda>\(a, b\)(.|\n)*\[2, 3\] X \[4, 5\]")
def function_example_shapes_do_not_fit():
    latch.compile(lambda a, b: a @ b, None, (torch.randn(2, 3), torch.randn(4, 5)))


@case("example inputs", r"tracing <lambda>\(a, b\)(.|\n)*missing 1 required positional")
def function_example_count():
    latch.compile(lambda a, b: a @ b, None, (torch.randn(2, 3),))


# ----------------------------------------------------------------------------- step inputs
@case("step inputs", r"input 0 is f32\[15, 8\], the program was compiled for f32\[16, 8\]")
def step_wrong_shape():
    _step_rejected(lambda i: (i[0][:-1], i[1]))


@case("step inputs", r"input 0 is f64\[16, 8\], the program was compiled for f32\[16, 8\]")
def step_wrong_dtype():
    _step_rejected(lambda i: (i[0].double(), i[1]))


@case("step inputs", r"input 0 is on meta; this program runs on the cpu")
def step_wrong_device():
    _step_rejected(lambda i: (torch.empty(16, 8, device="meta"), i[1]))


@case("step inputs", r"step\(\) takes 2 input tensors, got 1")
def step_wrong_count():
    _step_rejected(lambda i: (i[0],))


@case("step inputs", r"input 1 must be a torch\.Tensor, got ndarray")
def step_non_tensor():
    _step_rejected(lambda i: (i[0], i[1].numpy()))


@case("step inputs", r"argument 0 is torch\.float32\[2, 3\], the function was compiled for "
                     r"torch\.float32\[4, 3\]")
def function_call_wrong_shape():
    (a, b), fn = _fn()
    fn(a[:2], b)


@case("step inputs", r"argument 1 is on meta")
def function_call_wrong_device():
    (a, b), fn = _fn()
    fn(a, torch.empty(3, 2, device="meta"))


# ----------------------------------------------------------------------------- rules
@case("hyperparameters", r"SGD: invalid learning rate -0\.1")
def negative_lr():
    optim.SGD(-0.1)


@case("hyperparameters", r"SGD: invalid learning rate nan")
def nan_lr():
    optim.SGD(float("nan"))


@case("hyperparameters", r"AdamW: invalid learning rate nan")
def adamw_nan_lr():
    optim.AdamW(float("nan"))


@case("hyperparameters", r"AdamW: invalid learning rate inf")
def adamw_inf_lr():
    optim.AdamW(float("inf"))


@case("hyperparameters", r"betas\[0\]")
def beta1_is_one():
    optim.AdamW(1e-3, betas=(1.0, 0.999))


@case("hyperparameters", r"betas\[1\]")
def beta2_negative():
    optim.AdamW(1e-3, betas=(0.9, -0.1))


@case("hyperparameters", r"betas\[1\]")
def beta2_nan():
    optim.AdamW(1e-3, betas=(0.9, float("nan")))


@case("hyperparameters", r"every: n must be >= 1, got 0")
def every_zero():
    optim.every(0, optim.SGD(0.1))


@case("hyperparameters", r"warmup_cosine: peak must be finite, got nan")
def schedule_nan_peak():
    optim.warmup_cosine(float("nan"), 1, 10)


@case("hyperparameters", r"pattern 'decoder\.\*' matches no parameter \(parameters: fc1\.weight")
def partition_pattern_matches_nothing():
    model, inputs = make_mlp(0)
    latch.compile(model, optim.partition({"decoder.*": optim.SGD(0.1), "*": optim.SGD(0.1)}),
                  inputs)


@case("hyperparameters", r"parameter 'fc2\.weight' matches none of the patterns 'fc1\.\*'")
def parameter_matched_by_no_pattern():
    model, inputs = make_mlp(0)
    latch.compile(model, optim.partition({"fc1.*": optim.SGD(0.1)}), inputs)


@case("hyperparameters", r"unknown on_nonfinite 'ignore'(.|\n)*'skip'")
def bad_on_nonfinite():
    model, inputs = make_mlp(0)
    latch.compile(model, optim.SGD(0.1), inputs, on_nonfinite="ignore")


# ----------------------------------------------------------------------------- artifacts
@case("artifacts", r"was built by Latch 0\.0\.1, this is " + re.escape(latch.__version__))
def artifact_from_another_version():
    latch.load(_artifact(edit=_manifest_edit(
        lambda m: m["artifact"].update(latch_version="0.0.1"))))


@case("artifacts", r"artifact format 'latch-artifact/9'")
def artifact_of_another_format():
    latch.load(_artifact(edit=_manifest_edit(
        lambda m: m["artifact"].update(format="latch-artifact/9"))))


@case("artifacts", r"checksum mismatch in program\.mlir")
def artifact_checksum_mismatch():
    latch.load(_artifact(edit=lambda f: f.update(
        {"program.mlir": f["program.mlir"].replace(b"arith.addf", b"arith.subf", 1)})))


@case("artifacts", r"corrupted|not a Latch artifact")
def artifact_flipped_byte():
    def flip(data):
        data = bytearray(data)
        data[len(data) // 2] ^= 0xFF
        return bytes(data)
    latch.load(_artifact(raw=flip))


@case("artifacts", r"not a Latch artifact or is corrupted")
def artifact_truncated():
    latch.load(_artifact(raw=lambda d: d[:len(d) // 3]))


@case("artifacts", r"no manifest\.json")
def artifact_without_manifest():
    latch.load(_artifact(edit=lambda f: f.pop("manifest.json")))


@case("artifacts", r"no artifact at")
def artifact_missing():
    latch.load(Path(tempfile.mkdtemp()) / "nothing.latch")


# ----------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("c", CASES, ids=[f"{c.category.replace(' ', '-')}:{c.name}"
                                          for c in CASES])
def test_error_case(c):
    with pytest.raises(c.error) as info:
        c.call()
    assert re.search(c.pattern, str(info.value)), str(info.value)
    assert "Traceback" not in str(info.value)


def test_every_category_of_the_issue_has_cases():
    cats = {c.category for c in CASES}
    assert cats == {"unsupported op", "loss", "example inputs", "step inputs",
                    "hyperparameters", "artifacts"}
    assert all(issubclass(c.error, latch.LatchError) for c in CASES)
