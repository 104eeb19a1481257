"""Switches read from the environment (``LATCH_*``): one checked reader for the ones that
take a word from a fixed set, so that a misspelt value fails with the variable named instead
of falling back silently."""
from __future__ import annotations

import os


def choice(name: str, default: str, choices) -> str:
    """``os.environ[name]`` (``default`` when unset), one of ``choices``; a
    :class:`latch.errors.LatchError` naming the variable and the valid words otherwise."""
    value = os.environ.get(name, default)
    if value not in choices:
        from latch.errors import LatchError
        raise LatchError(f"{name}={value!r}; expected one of {tuple(choices)}")
    return value
