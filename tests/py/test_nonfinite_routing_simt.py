"""A non-finite step of an MoE model never makes its update address memory out of bounds:
the top-k routing, the per-expert counts and ranks, the dispatch and combine gathers and the
expert products index buffers with values computed from the router's logits, and with NaN
logits a careless kernel could produce an index out of any range (a fault on the GPU, which
would kill the process instead of letting the non-finite guard skip the step).  The whole
bf16 update of the small TinyMoE runs in the SIMT interpreter (tests/py/simt.py), which
checks every load and store against its buffer, with one NaN in the position embedding: the
causal attention spreads it to every later token, so every MoE layer routes NaN logits."""
from __future__ import annotations

import numpy as np
import torch

from test_attention_fused_program import _update


def test_nan_logits_route_within_bounds(tmp_path, monkeypatch):
    from models import make_tiny_moe

    model, (idx, tgt) = make_tiny_moe(seed=0)
    with torch.no_grad():
        model.pos.weight[0, 0] = float("nan")
    new, loss, launches, _, _ = _update(model, idx, tgt, "math", tmp_path, monkeypatch)
    assert launches > 100 and np.isnan(loss)
    # the new values are non-finite (the runtime's guard would not commit them) ...
    assert not all(np.isfinite(p.numpy()).all() for p in new)
    # ... and the interpreter found no access outside a buffer on the way (it raises)
