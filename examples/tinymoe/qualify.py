"""FP64 qualification of TinyMoE training states (issue: training to quality, item 3).

At a given training state (a checkpoint of ``train.py``: ``state-<step>.pt`` of the torch
engines or ``state-<step>.latchckpt`` of Latch, or the fresh initialization), each engine's
bf16 gradients of one fixed batch are compared, tensor by tensor, with a float64 reference
computed from the same parameters on the same batch:

* ``torch``: PyTorch autocast bf16 (the control's numerics), ``loss.backward()``;
* ``latch``: one update of a Latch program compiled with ``precision="bf16"`` and the rule
  ``optim.SGD(1.0)`` (no momentum, no weight decay) from that state, the gradient read back
  as ``p_before - p_after`` (float32 master weights: the subtraction adds only float32
  rounding).  On a GPU machine without MLIR pass ``--latch-probe P`` (compiled here with
  ``--save-probe P``).

With ``--pinned`` each engine is measured a second time with its top-k routing *pinned* to
the float64 reference's choices (the same expert indices, in top-k order, passed as an
input: ``MoE.pinned_routes``; gates are still the engine's own probabilities of those
experts).  bf16 rounding flips a few tokens' routing (a discrete choice: the flipped token's
gradient goes to another expert, and every later layer sees it), which dominates the plain
comparison at states where routing is near ties (the fresh state); the pinned comparison
measures the program's arithmetic alone.  The Latch program for it takes the routes as a
third input (``--save-probe-pinned`` / ``--latch-probe-pinned``).

Relative L2 per tensor, ``|g - g64| / |g64|``; the limit is 0.08.  Prints, per engine, the
worst tensors and writes a JSON (``--out``) with every tensor's error, the losses and the
state's step.

    python examples/tinymoe/qualify.py --data data/tinymoe --state runs/q/state-00001000.pt
    python examples/tinymoe/qualify.py --data data/tinymoe --fresh          # step 0
    .venv/bin/python examples/tinymoe/qualify.py --tiny --synthetic --fresh --device cpu
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "py"), ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

import torch  # noqa: E402

LIMIT = 0.08
SYNTHETIC_VOCAB = 512


def rel_l2(a, b) -> float:
    a, b = a.double(), b.double()
    d = float(b.norm())
    return float((a - b).norm()) / d if d > 0 else float((a - b).norm())


def load_parameters(model, path: str) -> int:
    """Copy the parameters of checkpoint ``path`` into ``model``; returns its step."""
    if path.endswith(".pt"):
        ck = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(ck["model"])
        return int(ck["step"])
    from latch.checkpoint import read_checkpoint
    manifest, arrays = read_checkpoint(path)
    named = dict(model.named_parameters())
    missing = [n for n in named if n not in arrays]
    if missing:
        raise SystemExit(f"{path} has no values for parameters {missing[:5]}")
    with torch.no_grad():
        for n, p in named.items():
            p.copy_(torch.from_numpy(arrays[n].copy()).reshape(p.shape))
    return int(manifest["step"])


def build_model_for_test(seed: int = 0):
    """The --tiny model with the --synthetic vocabulary (tests)."""
    from train import build_model
    return build_model(argparse.Namespace(seed=seed, tiny=True, seq=None), SYNTHETIC_VOCAB)[0]


def fixed_batch(args, vocab: int, seq: int):
    """(x, y): the first validation batch, or random tokens with --synthetic."""
    if args.synthetic:
        g = torch.Generator().manual_seed(1234)
        data = torch.randint(0, vocab, (args.batch, seq + 1), generator=g)
    else:
        import data as tmdata
        data = tmdata.validation_batches(args.data, args.batch, seq, max_batches=1)[0]
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def _moes(m) -> list:
    from models import MoE
    return [mod for mod in m.modules() if isinstance(mod, MoE)]


def _record_routing(m) -> list:
    """Forward hooks on every MoE router: the top-k experts it chose per token and layer
    (``[N, k]``, in top-k order, as the dispatch ranks them)."""
    chosen = []
    for moe in _moes(m):
        moe.router.register_forward_hook(
            lambda _m, _i, out, k=moe.k: chosen.append(
                torch.topk(out.float(), k, dim=-1).indices.cpu()))
    return chosen


def routing_flips(routes, routes64) -> list[float]:
    """Per layer: the fraction of tokens whose top-k expert *set* differs from float64's."""
    return [float((r.sort(-1).values != r64.sort(-1).values).any(-1).float().mean())
            for r, r64 in zip(routes, routes64)]


def pinned(model):
    """A copy of ``model`` whose forward takes a third input ``routes`` ([layers, N, k]
    expert indices) that replaces every MoE layer's top-k choice (same parameter names)."""
    from models import TinyMoE

    class PinnedTinyMoE(TinyMoE):
        def forward(self, idx, targets, routes):
            moes = _moes(self)
            try:
                for i, moe in enumerate(moes):
                    moe.pinned_routes = routes[i]
                return super().forward(idx, targets)
            finally:
                for moe in moes:
                    moe.pinned_routes = None

    m = copy.deepcopy(model)
    m.__class__ = PinnedTinyMoE
    return m


def _inputs(x, y, routes, device):
    extra = () if routes is None else (torch.stack(list(routes)).to(device),)
    return (x.to(device), y.to(device)) + extra


def _recomputed_layers(m) -> None:
    """Each layer of ``m`` keeps only its input for the backward, which computes the layer
    again (``torch.utils.checkpoint``): the float64 activations of a 32 x 1024 batch (8 layers,
    ~8 GB each) do not fit an 80 GB GPU.  The same float64 arithmetic runs again, so the
    gradients are the same."""
    from torch.utils.checkpoint import checkpoint
    for layer in m.layers:
        layer.forward = lambda *a, f=layer.forward: checkpoint(f, *a, use_reentrant=False)


def grads_f64(model, x, y, device):
    m = copy.deepcopy(model).double().to(device)
    _recomputed_layers(m)
    recorded = _record_routing(m)
    loss = m(x.to(device), y.to(device))
    routes = list(recorded)         # the forward's choices (the backward records them again)
    names = [n for n, _ in m.named_parameters()]
    gs = torch.autograd.grad(loss, list(m.parameters()))
    return float(loss.detach()), {n: g.cpu() for n, g in zip(names, gs)}, routes


def grads_torch_bf16(model, x, y, device, routes=None):
    """Autocast bf16 gradients; ``routes``: pinned to these top-k choices."""
    m = (pinned(model) if routes is not None else copy.deepcopy(model)).to(device)
    chosen = _record_routing(m)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = m(*_inputs(x, y, routes, device))
    names = [n for n, _ in m.named_parameters()]
    gs = torch.autograd.grad(loss.float(), list(m.parameters()))
    return float(loss.detach()), {n: g.float().cpu() for n, g in zip(names, gs)}, chosen


def probe_program(model, x, y, device, routes=None, attention="auto"):
    """The Latch SGD(1.0) bf16 probe; with ``routes`` (an example), the pinned variant."""
    import latch
    from latch import optim
    target = "cuda" if device.type == "cuda" else "cpu"
    m = model if routes is None else pinned(model)
    return latch.compile(m, optim.SGD(1.0), _inputs(x, y, routes, torch.device("cpu")),
                         target=target, precision="bf16", attention=attention)


def grads_latch(prog, model, x, y, device, routes=None):
    names = [n for n, _ in model.named_parameters()]
    cuda = prog.manifest.get("kind") == "cuda-update"
    m = copy.deepcopy(model).to(device) if cuda else model
    state = prog.init(m)
    p0 = {n: t.detach().clone() for n, t in state.tensors().items() if n in names}
    inputs = _inputs(x, y, routes, device if cuda else torch.device("cpu"))
    loss = float(prog.step(state, *inputs))
    p1 = state.tensors()
    return loss, {n: (p0[n] - p1[n]).float().cpu() for n in names}


def example_routes(model, x, y) -> list:
    """Top-k choices of a float32 forward (the example input of the pinned probe)."""
    m = copy.deepcopy(model)
    routes = _record_routing(m)
    with torch.no_grad():
        m(x, y)
    return routes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="folder written by data.py build (not with --synthetic)")
    ap.add_argument("--state", help="a checkpoint of train.py (.pt or .latchckpt)")
    ap.add_argument("--fresh", action="store_true", help="the initialization (step 0)")
    ap.add_argument("--seed", type=int, default=0, help="model init (--fresh)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--tiny", action="store_true", help="train.py's --tiny model")
    ap.add_argument("--synthetic", action="store_true", help="random tokens, no data folder")
    ap.add_argument("--engines", default="latch,torch")
    ap.add_argument("--latch-probe", help="a saved SGD(1.0) bf16 probe program to run")
    ap.add_argument("--save-probe", help="compile the probe program for cuda, save, stop")
    ap.add_argument("--attention", choices=("auto", "math", "flash", "fused"), default="auto",
                    help="the Latch probe's attention rounding (latch.compile's option)")
    ap.add_argument("--pinned", action="store_true",
                    help="also measure each engine with routing pinned to float64's choices")
    ap.add_argument("--latch-probe-pinned", help="a saved pinned-routing probe program")
    ap.add_argument("--save-probe-pinned",
                    help="compile the pinned-routing probe for cuda, save (with --save-probe "
                         "or alone), stop")
    ap.add_argument("--device", default=None)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--out", help="JSON report (default: print only)")
    a = ap.parse_args(argv)
    if not (a.fresh or a.state or a.save_probe or a.save_probe_pinned) or (a.fresh and a.state):
        ap.error("give exactly one of --state or --fresh")
    if not a.synthetic and not a.data:
        ap.error("--data is needed (or --synthetic)")
    from train import build_model
    vocab = SYNTHETIC_VOCAB if a.synthetic and a.tiny else 32768
    if a.data and not a.synthetic:
        import data as tmdata
        vocab = tmdata.load_manifest(a.data)["tokenizer"]["vocab_size"]
    model, seq = build_model(argparse.Namespace(seed=a.seed, tiny=a.tiny, seq=None), vocab)
    x, y = fixed_batch(a, vocab, seq)
    if a.save_probe or a.save_probe_pinned:
        for path, routes in ((a.save_probe, None),
                             (a.save_probe_pinned, example_routes(model, x, y))):
            if path:
                probe_program(model, x, y, torch.device("cuda"), routes,
                              a.attention).save(path)
                print(f"wrote {path}", flush=True)
        return 0
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    step = 0 if a.fresh else load_parameters(model, a.state)
    print(f"state: step {step} ({a.state or 'fresh'}), batch {tuple(x.shape)}, "
          f"device {device}", flush=True)
    loss64, g64, routes64 = grads_f64(model, x, y, device)
    report = {"step": step, "state": a.state or "fresh", "batch": list(x.shape),
              "loss_f64": loss64, "limit": LIMIT, "engines": {},
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": os.environ.get("LATCH_COMMIT", "unknown"),
              "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
              "torch": torch.__version__}
    modes = [("engines", None)] + ([("engines_pinned", routes64)] if a.pinned else [])
    for key, routes in modes:
        ok = True
        report[key] = {}
        what = "" if routes is None else " (routing pinned to float64's)"
        for engine in [e for e in a.engines.split(",") if e]:
            if engine == "torch":
                loss, g, chosen = grads_torch_bf16(model, x, y, device, routes)
                if routes is None:
                    # how often bf16 rounding changes a token's top-k expert set (a routing
                    # flip changes which expert's weights see the token: gradients of every
                    # later layer move with it, whatever the program)
                    flips = routing_flips(chosen, routes64)
                    report["torch_bf16_routing_flips_per_layer"] = flips
                    print("torch bf16: tokens whose top-k experts differ from float64, per "
                          "MoE layer: " + ", ".join(f"{f:.1%}" for f in flips), flush=True)
            elif engine == "latch":
                import latch
                saved = a.latch_probe if routes is None else a.latch_probe_pinned
                prog = latch.load(saved) if saved else \
                    probe_program(model, x, y, device, routes, a.attention)
                loss, g = grads_latch(prog, model, x, y, device, routes)
                if hasattr(prog, "close"):
                    prog.close()
            else:
                raise SystemExit(f"unknown engine {engine!r} (latch, torch)")
            errs = {n: rel_l2(g[n], g64[n]) for n in g64}
            worst = sorted(errs.items(), key=lambda kv: -kv[1])
            beyond = [n for n, e in worst if e > LIMIT]
            ok &= not beyond
            report[key][engine] = {"loss": loss, "loss_rel": abs(loss - loss64) / abs(loss64),
                                   "errors": errs, "beyond_limit": beyond,
                                   "worst": worst[0][0], "worst_rel_l2": worst[0][1]}
            print(f"\n{engine}{what}: loss {loss:.6f} (float64 {loss64:.6f}); {len(beyond)} "
                  f"of {len(errs)} tensors beyond {LIMIT}", flush=True)
            print(f"  {'tensor':40s} rel L2 vs float64")
            for n, e in worst[:a.top]:
                print(f"  {n:40s} {e:.3e}{'  > limit' if e > LIMIT else ''}")
        report["pass" if routes is None else "pass_pinned"] = ok
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {a.out}")
    for key, label in (("pass", "plain"), ("pass_pinned", "routing pinned")):
        if key in report:
            print(f"{label}: " + ("PASS" if report[key] else
                                  f"FAIL: tensors beyond {LIMIT} (see above)"))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
