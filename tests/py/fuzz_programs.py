"""A grammar of small tensor programs for fuzzing the lowering (tests/py/test_fuzz_lowering.py,
bench/reliability.py).

A program is a list of steps applied to a running value ``h`` (the first input), each step
possibly drawing a fresh input of a shape that fits: elementwise unary ops, elementwise
binary ops with broadcasting (either operand may be the broadcast one), scalar affine ops,
reductions (sum / mean / amax over a dim, keepdim or not, or everything), softmax /
log_softmax, matmul / bmm, reshape, transpose, permute, cat, strided slices and where.  Shapes are static and small (rank <= 4, dims 1..5).

``program_strategy()`` draws one with hypothesis (it shrinks toward fewer, simpler steps and
smaller shapes); ``build(program)`` gives ``(fn, inputs)``; ``source(program)`` a readable
Python rendering for failure messages.
"""
from __future__ import annotations

import math

import torch

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "sin": torch.sin, "cos": torch.cos,
    "exp_tanh": lambda x: torch.exp(torch.tanh(x)),
    "sqrt_abs": lambda x: torch.sqrt(torch.abs(x) + 1.0),
    "square": lambda x: x * x,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul,
    "maximum": torch.maximum, "minimum": torch.minimum,
    "div": lambda a, b: a / (torch.abs(b) + 1.0),
}
REDUCE = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax}


def _shape_of(steps, shape0):
    """Shapes after each step (the strategy keeps them consistent)."""
    return [s["out"] for s in steps] or [shape0]


def program_strategy(max_steps: int = 5):
    from hypothesis import strategies as st

    dim = st.integers(1, 5)

    @st.composite
    def program(draw):
        shape = tuple(draw(st.lists(dim, min_size=1, max_size=3)))
        inputs = [shape]
        steps = []
        for _ in range(draw(st.integers(1, max_steps))):
            kinds = ["unary", "binary", "affine", "reshape"]
            if len(shape) >= 1:
                kinds += ["reduce", "matmul", "softmax", "cat", "slice", "where"]
            if len(shape) >= 2:
                kinds += ["transpose"]
            kind = draw(st.sampled_from(kinds))
            step = {"kind": kind}
            if kind == "unary":
                step["op"] = draw(st.sampled_from(sorted(UNARY)))
                out = shape
            elif kind == "affine":
                step["a"] = draw(st.sampled_from([0.5, -2.0, 3.0]))
                step["b"] = draw(st.sampled_from([0.0, 1.0, -0.25]))
                out = shape
            elif kind == "binary":
                step["op"] = draw(st.sampled_from(sorted(BINARY)))
                # the other operand: some dims of h set to 1, maybe fewer leading dims, or
                # one extra leading dim (then h is the operand that broadcasts)
                mode = draw(st.sampled_from(["same", "ones", "drop", "extra"]))
                other = list(shape)
                if mode == "ones":
                    other = [1 if draw(st.booleans()) else d for d in other]
                elif mode == "drop":
                    other = other[draw(st.integers(0, len(other))):]
                elif mode == "extra" and len(shape) < 4:
                    other = [draw(dim)] + other
                step["other"] = len(inputs)
                inputs.append(tuple(other))
                step["swap"] = draw(st.booleans())
                out = tuple(torch.broadcast_shapes(shape, tuple(other)))
            elif kind == "reduce":
                step["op"] = draw(st.sampled_from(sorted(REDUCE)))
                if draw(st.integers(0, 4)) == 0:
                    step["dim"] = None
                    out = ()
                else:
                    d = draw(st.integers(-len(shape), len(shape) - 1))
                    step["dim"], step["keepdim"] = d, draw(st.booleans())
                    out = list(shape)
                    if step["keepdim"]:
                        out[d] = 1
                    else:
                        del out[d]
                    out = tuple(out)
            elif kind == "matmul":
                k = shape[-1]
                n = draw(dim)
                if len(shape) == 3 and draw(st.booleans()):
                    other = (shape[0], k, n)          # bmm
                    step["op"] = "bmm"
                elif len(shape) >= 2 and draw(st.booleans()):
                    other = (k, n)                    # broadcast matmul
                    step["op"] = "matmul"
                else:
                    other = (k,) if draw(st.booleans()) else (k, n)
                    step["op"] = "matmul"
                step["other"] = len(inputs)
                inputs.append(other)
                out = tuple(torch.matmul(torch.empty(shape), torch.empty(other)).shape)
            elif kind == "softmax":
                step["op"] = draw(st.sampled_from(["softmax", "log_softmax"]))
                step["dim"] = draw(st.integers(-len(shape), len(shape) - 1))
                out = shape
            elif kind == "cat":
                d = draw(st.integers(-len(shape), len(shape) - 1))
                step["dim"] = d
                out = list(shape)
                out[d] *= 2
                out = tuple(out)
            elif kind == "slice":
                d = draw(st.integers(0, len(shape) - 1))
                start = draw(st.integers(0, shape[d] - 1))
                stride = draw(st.integers(1, 2))
                step["dim"], step["start"], step["stride"] = d, start, stride
                out = list(shape)
                out[d] = len(range(start, shape[d], stride))
                out = tuple(out)
            elif kind == "where":
                step["other"] = len(inputs)
                inputs.append(shape)
                out = shape
            elif kind == "transpose":
                if len(shape) >= 3 and draw(st.booleans()):
                    perm = tuple(draw(st.permutations(range(len(shape)))))
                    step["perm"] = perm
                    out = tuple(shape[p] for p in perm)
                else:
                    a = draw(st.integers(0, len(shape) - 1))
                    b = draw(st.integers(0, len(shape) - 1))
                    step["dims"] = (a, b)
                    out = list(shape)
                    out[a], out[b] = out[b], out[a]
                    out = tuple(out)
            else:   # reshape: flatten, or split the element count into two factors
                numel = math.prod(shape)
                divisors = [d for d in range(1, numel + 1) if numel % d == 0]
                d = draw(st.sampled_from(divisors))
                out = draw(st.sampled_from([(numel,), (d, numel // d), (1, numel)]))
                step["shape"] = out
            step["out"] = tuple(out)
            steps.append(step)
            shape = tuple(out)
        seed = draw(st.integers(0, 2**16))
        return {"inputs": inputs, "steps": steps, "seed": seed}

    return program()


def apply(program, args):
    h = args[0]
    for s in program["steps"]:
        k = s["kind"]
        if k == "unary":
            h = UNARY[s["op"]](h)
        elif k == "affine":
            h = h * s["a"] + s["b"]
        elif k == "binary":
            o = args[s["other"]]
            h = BINARY[s["op"]](o, h) if s["swap"] else BINARY[s["op"]](h, o)
        elif k == "reduce":
            if s["dim"] is None:
                h = REDUCE[s["op"]](h)
            else:
                h = REDUCE[s["op"]](h, dim=s["dim"], keepdim=s["keepdim"])
        elif k == "matmul":
            o = args[s["other"]]
            h = torch.bmm(h, o) if s["op"] == "bmm" else torch.matmul(h, o)
        elif k == "softmax":
            h = getattr(torch, s["op"])(h, dim=s["dim"])
        elif k == "cat":
            h = torch.cat([h, h * 2.0], dim=s["dim"])
        elif k == "slice":
            idx = [slice(None)] * h.dim()
            idx[s["dim"]] = slice(s["start"], None, s["stride"])
            h = h[tuple(idx)]
        elif k == "where":
            o = args[s["other"]]
            h = torch.where(o > 0, h, o)
        elif k == "transpose":
            h = h.permute(*s["perm"]) if "perm" in s else h.transpose(*s["dims"])
        else:
            h = h.reshape(s["shape"])
    return h


def build(program):
    g = torch.Generator().manual_seed(program["seed"])
    inputs = tuple(torch.randn(tuple(shape), generator=g) for shape in program["inputs"])

    def fn(*args):
        return apply(program, args)
    return fn, inputs


def source(program) -> str:
    """The program as Python (for failure messages and reproducers)."""
    args = ", ".join(f"x{i}" for i in range(len(program["inputs"])))
    lines = [f"def f({args}):   # shapes {[list(s) for s in program['inputs']]}, "
             f"seed {program['seed']}", "    h = x0"]
    for s in program["steps"]:
        k = s["kind"]
        if k == "unary":
            rhs = f"{s['op']}(h)"
        elif k == "affine":
            rhs = f"h * {s['a']} + {s['b']}"
        elif k == "binary":
            a, b = ("h", f"x{s['other']}")
            rhs = f"{s['op']}({b}, {a})" if s["swap"] else f"{s['op']}({a}, {b})"
        elif k == "reduce":
            rhs = (f"h.{s['op']}()" if s["dim"] is None else
                   f"h.{s['op']}(dim={s['dim']}, keepdim={s['keepdim']})")
        elif k == "matmul":
            rhs = f"torch.{s['op']}(h, x{s['other']})"
        elif k == "softmax":
            rhs = f"torch.{s['op']}(h, dim={s['dim']})"
        elif k == "cat":
            rhs = f"torch.cat([h, h * 2.0], dim={s['dim']})"
        elif k == "slice":
            rhs = "h[" + ", ".join([":"] * s["dim"] + [f"{s['start']}::{s['stride']}"]) + "]"
        elif k == "where":
            rhs = f"torch.where(x{s['other']} > 0, h, x{s['other']})"
        elif k == "transpose":
            rhs = f"h.permute{s['perm']}" if "perm" in s else f"h.transpose{s['dims']}"
        else:
            rhs = f"h.reshape{s['shape']}"
        lines.append(f"    h = {rhs}   # -> {list(s['out'])}")
    lines.append("    return h")
    return "\n".join(lines)


def close(got: torch.Tensor, ref: torch.Tensor, rtol: float = 1e-5) -> bool:
    """float32 comparison: rtol, plus an atol scaled by the output's magnitude (sums and
    matmuls accumulate in another order than PyTorch's kernels)."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return False
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    return torch.allclose(got, ref, rtol=rtol, atol=rtol * max(1.0, scale), equal_nan=True)
