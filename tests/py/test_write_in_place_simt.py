"""latch-write-in-place (passes/write_in_place.py) executed on the CPU by the SIMT
interpreter (tests/py/simt.py): a padded expert buffer (``cat([a + b, zero row])``) and a
transposed gradient put in its column block of a fused q/k/v buffer are written in place —
fewer kernels, no copy — with the same bits as the program without the pass (and as
PyTorch's concatenation)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from simt import Simt, formed

LIT = __file__.rsplit("/py/", 1)[0] + "/lit/passes/latch-write-in-place.mlir"

FORM = ("builtin.module({PASS}latch-wrap-host-compute, latch-forward-zero-fills, "
        "latch-form-contraction-kernels, func.func(convert-linalg-to-parallel-loops), "
        "latch-map-parallel-loops{block=32,8}, lower-affine, canonicalize, cse)")


def _case(name: str) -> str:
    """The function ``name`` of the lit test's split input."""
    for part in open(LIT).read().split("// -----"):
        if f"func.func @{name}(" in part:
            return "\n".join(line for line in part.splitlines()
                             if not line.startswith("// "))
    raise KeyError(name)


def _run(text: str, args: list, in_place: bool):
    with formed(text, FORM.replace("{PASS}", "latch-write-in-place, " if in_place else "")) as m:
        host = str(m).split("gpu.module")[0]
        outs = Simt(m).run([a.numpy() for a in args])
    return host, [torch.from_numpy(np.asarray(o, np.float64)) for o in outs]


def _launches(host: str) -> int:
    return len(re.findall(r"gpu\.launch[ (]", host))


def test_padded_rows_written_in_place():
    """cat([a + b, zero row]): the sum is written into the first rows, one row is zeroed
    (not the whole buffer), the copy is gone; values equal PyTorch's, bit for bit."""
    g = torch.Generator().manual_seed(5)
    a, b = (torch.randn(2, 3, 4, generator=g) for _ in range(2))
    text = _case("padded_rows")
    host, (got,) = _run(text, [a, b], True)
    base, (want,) = _run(text, [a, b], False)
    assert _launches(host) == _launches(base) - 1          # no copy kernel
    assert torch.equal(got, want)
    ref = torch.cat([(a + b).reshape(6, 4), torch.zeros(1, 4)])
    assert torch.equal(got, ref.double())


def test_transposed_block_written_in_place():
    """The k block of a [B, T, 3·H·D] buffer written by the transpose itself."""
    g = torch.Generator().manual_seed(6)
    dk = torch.randn(2, 2, 3, 4, generator=g)
    q, v = torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    text = _case("side_by_side")
    host, (got,) = _run(text, [dk, q, v], True)
    base, (want,) = _run(text, [dk, q, v], False)
    assert _launches(host) == _launches(base) - 1
    assert torch.equal(got, want)
    ref = torch.cat([q, dk.transpose(1, 2).reshape(2, 3, 8), v], dim=2)
    assert torch.equal(got, ref.double())


@pytest.mark.parametrize("name", ["slot_shared_with_input", "read_twice"])
def test_left_alone(name):
    """Where writing early is unsafe (the destination's slot is the input's) or the result
    has another reader, the program is unchanged."""
    g = torch.Generator().manual_seed(7)
    args = [torch.randn(6, 4, generator=g)] + ([torch.zeros(6, 4)] if name == "read_twice"
                                                 else [])
    host, got = _run(_case(name), args, True)
    base, want = _run(_case(name), args, False)
    assert host == base
    for x, y in zip(got, want):
        assert torch.equal(x, y)
