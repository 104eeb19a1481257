"""A bf16 SwiGLU MLP's whole update, executed on the CPU by the SIMT interpreter
(tests/py/simt.py): the two backward products that read the same gradient and gate
(``dy * silu(g)`` and ``dy * u * silu'(g)``) become one kernel with two outputs
(latch-fuse-siblings), and the parameters' changes under SGD(1.0) are their gradients,
compared per tensor with float64 PyTorch."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from test_attention_fused_program import _update


class SwiGLU(nn.Module):
    def __init__(self, d=64, hidden=256):
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x, y):
        return F.mse_loss(self.w2(F.silu(self.w1(x)) * self.w3(x)).float(), y)


def test_swiglu_update_with_fused_backward(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = SwiGLU()
    x, y = torch.randn(128, 64), torch.randn(128, 64)
    ref = SwiGLU().double()
    ref.load_state_dict(model.state_dict())
    loss = ref(x.double(), y.double())
    loss.backward()
    new, got_loss, _, _, _ = _update(model, x, y, "math", tmp_path, monkeypatch)
    assert _two_output_elementwise(tmp_path / "cuda-latch-form-kernels.mlir") == 1
    assert abs(got_loss - float(loss)) < 1e-2 * float(loss)
    for (name, p), p_new in zip(ref.named_parameters(), new):
        err = float(((p.detach() - p_new) - p.grad).norm() / p.grad.norm())
        assert err < 0.02, (name, err)


def _two_output_elementwise(path) -> int:
    """How many all-parallel generics with two bf16 outputs the kernel stage receives (the
    optimizer's, which also write the weights' carried bf16 copies, write an f32 too)."""
    from mlir import ir

    import latch.dialect
    from latch.passes.generic_body import segments

    ctx = ir.Context()
    latch.dialect.load(ctx)
    found = []
    with ctx:
        m = ir.Module.parse(path.read_text())

        def visit(op):
            if op.name == "linalg.generic" and segments(op)[1] == 2 and all(
                    "parallel" in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])) \
                    and all(str(ir.ShapedType(v.type).element_type) == "bf16"
                            for v in list(op.operands)[-2:]):
                found.append(op)
            return ir.WalkResult.ADVANCE
        m.operation.walk(visit)
    return len(found)
