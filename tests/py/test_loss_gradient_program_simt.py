"""A bf16 language-model head's whole update under the SIMT interpreter: the
cross-entropy's gradient moves next to the loss's log-sum-exp (latch-hoist-row-readers)
and is computed in that launch, row by row after the row's maximum and sum
(passes/online_softmax_sums.py); the parameters' changes under SGD(1.0) are their
gradients, compared per tensor with float64 PyTorch, and the loss with float64's."""
from __future__ import annotations

import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from test_attention_fused_program import _update

VOCAB = 4096            # two chunks of 8 a thread per row: the shortest row of the launch


class Head(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False)
        self.out = nn.Linear(d, VOCAB, bias=False)

    def forward(self, x, tgt):
        logits = self.out(torch.tanh(self.proj(x)))
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), tgt.reshape(-1),
                               ignore_index=-100)


def test_loss_gradient_in_the_log_sum_exp_launch(tmp_path, monkeypatch):
    from latch.passes.hoist_row_readers import HoistRowReaders
    from latch.passes.row_reductions import _BLOCK_MIN

    assert HoistRowReaders.min_row == _BLOCK_MIN          # hoisted only where it fuses
    torch.manual_seed(0)
    model = Head()
    x = torch.randn(2, 8, 32)
    tgt = torch.randint(0, VOCAB, (2, 8))
    tgt[1, 3] = -100                                     # an ignored token: weight 0
    ref = Head().double()
    ref.load_state_dict(model.state_dict())
    loss = ref(x.double(), tgt)
    loss.backward()
    new, got_loss, _, text, _ = _update(model, x, tgt, "math", tmp_path, monkeypatch)
    launch = _launch_with_sums_and_gradient(text)
    assert launch is not None, "no launch computes the sums and the gradient together"
    assert abs(got_loss - float(loss.detach())) < 1e-2 * float(loss.detach())
    for (name, p), p_new in zip(ref.named_parameters(), new):
        err = float(((p.detach() - p_new) - p.grad).norm() / p.grad.norm())
        assert err < 0.02, (name, err)              # bf16: 0.005-0.006 measured


def _launch_with_sums_and_gradient(text: str):
    """The host-side launch body that reduces a maximum and a sum over its block —
    ``gpu.all_reduce``, or (rows staged in dynamic shared memory) warp shuffles combined
    through that memory — and then stores vectors of 8 bf16 (the gradient's chunks), or
    None."""
    host = text.split("gpu.module")[0]
    for body in re.split(r"\bgpu\.launch\b", host)[1:]:
        body = body.split("gpu.terminator")[0]
        reduced = ("all_reduce  maximumf" in body and "all_reduce  add" in body) or (
            "gpu.dynamic_shared_memory" in body and "gpu.shuffle  xor" in body and
            "arith.maximumf" in body)
        if reduced and re.search(r"vector\.store .*vector<8xbf16>", body):
            return body
    return None
