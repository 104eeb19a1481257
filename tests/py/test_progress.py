"""latch.progress: a compile reports its stages on stderr (LATCH_PROGRESS)."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

import latch
from latch import optim


class _Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x, y):
        return ((self.fc(x) - y) ** 2).mean()


def _compile():
    torch.manual_seed(0)
    return latch.compile(_Lin(), optim.SGD(0.1), (torch.randn(3, 4), torch.randn(3, 2)))


def test_every_stage_reported_with_its_time(monkeypatch, capsys):
    monkeypatch.setenv("LATCH_CACHE", "0")
    monkeypatch.setenv("LATCH_PROGRESS", "1")
    _compile()
    lines = capsys.readouterr().err.splitlines()
    starts = [re.fullmatch(r"latch\.compile \[ *[\d.]+ s\] (\S+) \.\.\.", ln) for ln in lines]
    ends = [re.fullmatch(r"latch\.compile \[ *[\d.]+ s\] (\S+) done in [\d.]+ s", ln)
            for ln in lines]
    started = [m.group(1) for m in starts if m]
    assert started[:3] == ["trace", "linalg", "latch"] and "buffers+llvm+jit" in started
    assert [m.group(1) for m in ends if m] == started
    assert all(s or e for s, e in zip(starts, ends))     # nothing else on stderr


def test_quiet_when_off_or_early(monkeypatch, capsys):
    monkeypatch.setenv("LATCH_CACHE", "0")
    monkeypatch.setenv("LATCH_PROGRESS", "0")
    _compile()
    assert "latch.compile" not in capsys.readouterr().err
    from latch import progress
    monkeypatch.setenv("LATCH_PROGRESS", "auto")      # stages that start in the first
    monkeypatch.setattr(progress, "QUIET_S", 1e9)     # QUIET_S seconds say nothing ...
    _compile()
    assert "latch.compile" not in capsys.readouterr().err
    monkeypatch.setattr(progress, "QUIET_S", 0.0)     # ... later ones are reported
    _compile()
    assert "latch.compile" in capsys.readouterr().err


def test_bad_value_named(monkeypatch):
    monkeypatch.setenv("LATCH_PROGRESS", "loud")
    with pytest.raises(latch.LatchError, match=r"LATCH_PROGRESS='loud'"):
        _compile()
