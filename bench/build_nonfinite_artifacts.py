"""Build the cuda artifacts of the GPU non-finite check (bench/gpu_nonfinite.py) on this
machine (needs MLIR; the GPU side needs only the runtime).

    .venv/bin/python bench/build_nonfinite_artifacts.py [--out bench/artifacts]

Writes, for the MLP of tests/py/models.py (``make_mlp(seed=4)``):

* ``nonfinite-<rule>-<policy>.latch`` for rule ``adamw_clip`` (clip_grad_norm(1.0,
  AdamW(1e-2, weight_decay=0.1))) and ``every2_adamw`` (every(2, AdamW(1e-2))), policy
  ``skip`` and ``raise`` (``latch.compile(..., target="cuda", on_nonfinite=policy)``);
* ``nonfinite-batches.npz``: the initial parameters (``init/<name>``), the clean batches
  (``clean/<i>/<j>``: ``(x + 0.1 i, y)``, i < 4) and the poisoned ones
  (``poison/<kind>/<j>``, kinds ``nan_input``, ``inf_target``, ``overflow``: batch 1 with
  x[0, 0] = NaN, y[0, 0] = inf, or x * 1e30), as bench/reliability.py draws them.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

POLICIES = ("skip", "raise")
KINDS = ("nan_input", "inf_target", "overflow")
CLEAN_STEPS = 4


def rules():
    from latch import optim
    return {
        "adamw_clip": lambda: optim.clip_grad_norm(1.0, optim.AdamW(1e-2, weight_decay=0.1)),
        "every2_adamw": lambda: optim.every(2, optim.AdamW(1e-2)),
    }


def batches():
    """(model, clean batches, {kind: poisoned batch})."""
    from models import make_mlp

    model, (x, y) = make_mlp(seed=4)
    clean = [(x + 0.1 * i, y.clone()) for i in range(CLEAN_STEPS)]
    bx, by = clean[1]
    poison = {}
    for kind in KINDS:
        px, py = bx.clone(), by.clone()
        if kind == "nan_input":
            px[0, 0] = float("nan")
        elif kind == "inf_target":
            py[0, 0] = float("inf")
        else:
            px = px * 1e30
        poison[kind] = (px, py)
    return model, clean, poison


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "artifacts"))
    args = p.parse_args(argv)

    import numpy as np

    import latch

    os.makedirs(args.out, exist_ok=True)
    model, clean, poison = batches()
    example = clean[0]
    for rule_name, make_rule in rules().items():
        for policy in POLICIES:
            prog = latch.compile(model, make_rule(), example, target="cuda",
                                 on_nonfinite=policy)
            assert prog.manifest["options"]["on_nonfinite"] == policy
            path = os.path.join(args.out, f"nonfinite-{rule_name}-{policy}.latch")
            prog.save(path)
            print(f"{path}: {len(prog.manifest['launches'])} launches, "
                  f"{sum('state' in c['dst'] for c in prog.manifest['copies'])} state copies")
    data = {f"init/{n}": t.detach().numpy() for n, t in model.named_parameters()}
    for i, b in enumerate(clean):
        for j, t in enumerate(b):
            data[f"clean/{i}/{j}"] = t.numpy()
    for kind, b in poison.items():
        for j, t in enumerate(b):
            data[f"poison/{kind}/{j}"] = t.numpy()
    np.savez(os.path.join(args.out, "nonfinite-batches.npz"), **data)
    print(f"{os.path.join(args.out, 'nonfinite-batches.npz')}: {len(data)} arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
