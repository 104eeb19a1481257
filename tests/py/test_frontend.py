"""Frontend tests: tracing, the supported-op check, import to linalg, determinism."""
import os
import sys

import pytest
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402

from latch.errors import UnsupportedOpError  # noqa: E402
from latch.frontend import (import_to_linalg, trace_function,  # noqa: E402
                            trace_loss_and_grads, verify_upstream)


def test_trace_mlp_signature():
    model, inputs = models.make_mlp(0)
    tg = trace_loss_and_grads(model, inputs)
    names = [n for n, _ in model.named_parameters()]
    assert tg.param_names == names
    assert [s.name for s in tg.input_specs] == names + ["input0", "input1"]
    assert tg.output_specs[0].shape == () and tg.output_specs[0].name == "loss"
    assert [s.shape for s in tg.output_specs[1:]] == [tuple(p.shape) for p in model.parameters()]
    # one functional graph: no mutation, no attention kernels
    assert not [op for op in tg.aten_ops() if op.split(".")[1].endswith("_")]
    assert all("flash" not in op and "efficient" not in op for op in tg.aten_ops())


def test_trace_char_lm_has_no_fused_attention_or_scatter():
    model, inputs = models.make_char_lm(0)
    ops = trace_loss_and_grads(model, inputs).aten_ops()
    assert not [op for op in ops if "attention" in op or "scatter" in op
                or "index_put" in op or "empty_permuted" in op]


def test_trace_tiny_moe_static_one_hot_and_no_scan():
    model, inputs = models.make_tiny_moe(0)
    ops = trace_loss_and_grads(model, inputs).aten_ops()
    assert not [op for op in ops if "one_hot" in op or "cumsum" in op or "topk" in op
                or "index_put" in op or "index_add" in op]


@pytest.mark.parametrize("shape,dim,dtype", [
    ((4096, 8), 0, torch.int64),        # TinyMoE B2's routing rank: two levels
    ((65536, 8), 0, torch.int64),       # B32: three levels
    ((130, 3), -2, torch.int32),        # padded to whole blocks; int32 promotes to int64
    ((65, 2), 0, torch.bool),
    ((64,), 0, torch.int64),            # one block
    ((5,), 0, torch.float32),
    ((3, 200, 7), 1, torch.float64),    # a middle dimension
    ((4, 4097), -1, torch.float64),     # the last dimension, one past a whole block
])
def test_cumsum_decomposes_to_blocked_triangular_products(shape, dim, dtype):
    """``aten.cumsum`` → blocks of 64 summed by a triangular product, block totals scanned
    the same way: torch's dtype and shape; exact for integers, float sums within rounding."""
    from latch.frontend.decompositions import _cumsum

    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, dtype=dtype, generator=g) if dtype.is_floating_point else \
        torch.randint(0, 3, shape, generator=g).to(dtype)
    want, got = torch.cumsum(x, dim), _cumsum(x, dim)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype.is_floating_point:
        tol = 64 * torch.finfo(dtype).eps * x.abs().sum(dim, keepdim=True)
        assert ((got - want).abs() <= tol).all()
    else:
        assert torch.equal(got, want)
    # the traced graph has matmuls, not one add per log-step round
    ops = trace_function(lambda t: torch.cumsum(t, dim), (x,)).aten_ops()
    assert not [op for op in ops if "cumsum" in op] and [op for op in ops if "mm" in op]


def test_determinism_trace_and_import():
    model, inputs = models.make_mlp(0)
    a = trace_loss_and_grads(model, inputs)
    b = trace_loss_and_grads(*models.make_mlp(0))
    assert a.graph_text == b.graph_text
    ta = import_to_linalg(a)
    tb = import_to_linalg(b)
    assert ta == tb
    assert '"func.func"' in ta and 'sym_name = "loss_and_grads"' in ta
    for bad in ('"torch.', '"tm_tensor.', '"ml_program.', '"torch_c.'):
        assert bad not in ta
    verify_upstream(ta)


class Exotic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        h = torch.special.bessel_j0(h)  # EXOTIC-LINE
        return h.sum()


def _line_of(marker):
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return i
    raise AssertionError(marker)


def test_unsupported_op_names_op_and_line():
    tg = trace_loss_and_grads(Exotic(), (torch.randn(2, 4),))
    with pytest.raises(UnsupportedOpError) as ei:
        import_to_linalg(tg)
    msg = str(ei.value)
    assert "aten.special_bessel_j0" in msg
    assert f"test_frontend.py:{_line_of('EXOTIC-LINE')}" in msg
    assert "hint:" in msg
    assert ei.value.op.startswith("aten.special_bessel_j0")


def test_unsupported_from_torch_mlir_is_mapped(monkeypatch):
    """An op that passes the pre-check but that torch-mlir lowers to tm_tensor is reported
    by its aten name (here: sort, which becomes tm_tensor.sort)."""
    import latch.frontend.support as support

    def f(x):
        return torch.sort(x, dim=-1).values * 2.0  # SORT-LINE

    tg = trace_function(f, (torch.randn(3, 5),))
    monkeypatch.setattr(support, "SUPPORTED_OPS", support.SUPPORTED_OPS | {"aten.sort.default"})
    with pytest.raises(UnsupportedOpError) as ei:
        import_to_linalg(tg)
    msg = str(ei.value)
    assert "aten.sort" in msg
    assert f"test_frontend.py:{_line_of('SORT-LINE')}" in msg


def test_data_dependent_shape_is_rejected():
    def f(x):
        return x[x > 0].sum()
    with pytest.raises(UnsupportedOpError):
        trace_function(f, (torch.randn(8),))


def test_trace_function_params_as_inputs():
    model, inputs = models.make_mlp(0)
    tg = trace_function(model, inputs, params="inputs")
    assert tg.param_names == [n for n, _ in model.named_parameters()]
    assert len(tg.input_specs) == len(tg.param_names) + 2
    tg2 = trace_function(model, inputs)
    assert len(tg2.input_specs) == 2 and tg2.param_names == []
