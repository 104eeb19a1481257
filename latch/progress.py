"""Progress lines of a long compile, on stderr.

A cuda compile of TinyMoE-196M takes 40 s to two minutes, most of it in two stages
(``latch-form-kernels``, ``latch-kernels-to-ptx``); without a word in between it looks hung.
Each timed stage of a compile (the ``_Timer`` of latch/compiler.py, ``_timed`` of the cuda
target) reports here: when it starts and when it ends, with the seconds since the compile
began::

    latch.compile [  4.1 s] latch-form-kernels ...
    latch.compile [ 21.8 s] latch-form-kernels done in 17.7 s

``LATCH_PROGRESS`` chooses: ``auto`` (the default) prints the stages that start once the
compile has run for :data:`QUIET_S` seconds — a compile that is quick stays silent, a long
one says what it is doing —; ``1`` prints every stage; ``0`` nothing.
"""
from __future__ import annotations

import contextlib
import sys
import time

#: seconds a compile runs silently in the ``auto`` mode
QUIET_S = 10.0
MODES = ("auto", "1", "0")

_started: float | None = None       # when the current compile began (None: no compile)


def mode() -> str:
    from latch.runtime.env import choice
    return choice("LATCH_PROGRESS", "auto", MODES)


@contextlib.contextmanager
def compiling():
    """The extent of one compile (the outermost one, if compiles nest)."""
    global _started
    outer = _started is None
    if outer:
        mode()                       # a bad value fails before any work
        _started = time.perf_counter()
    try:
        yield
    finally:
        if outer:
            _started = None


def _print(line: str) -> None:
    print(f"latch.compile [{time.perf_counter() - _started:5.1f} s] {line}", file=sys.stderr,
          flush=True)


@contextlib.contextmanager
def stage(name: str):
    """Report stage ``name`` around its work (see the module docstring)."""
    m = mode() if _started is not None else "0"
    shown = m == "1" or (m == "auto" and time.perf_counter() - _started >= QUIET_S)
    if shown:
        _print(f"{name} ...")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        if shown:
            _print(f"{name} done in {time.perf_counter() - t0:.1f} s")
