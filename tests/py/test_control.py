"""latch.scan and latch.repeat: eager semantics against hand-written loops, and compiled
(traced once per body, kept as a loop) against eager PyTorch in float64."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import latch
from latch import optim
from latch.frontend import import_to_linalg, trace_function, trace_loss_and_grads


def rel(a, b) -> float:
    a, b = torch.as_tensor(a).detach().double(), torch.as_tensor(b).detach().double()
    return float((a - b).norm() / b.norm())


# ----------------------------------------------------------------------------- eager
def test_scan_eager_tensor_carry_matches_loop():
    torch.manual_seed(0)
    c0, xs = torch.randn(3), torch.randn(5, 3)

    def step(c, x):
        c = torch.tanh(c * 0.5 + x)
        return c, c.sum()

    c, ys = latch.scan(step, c0, xs)
    cc, want = c0, []
    for t in range(5):
        cc, y = step(cc, xs[t])
        want.append(y)
    assert torch.equal(c, cc) and torch.equal(ys, torch.stack(want))
    assert ys.shape == (5,)


def test_scan_eager_pytree_carry_tuple_xs_pytree_y():
    torch.manual_seed(0)
    carry = {"h": torch.randn(2, 3), "n": (torch.zeros(()),)}
    xs = (torch.randn(4, 3), torch.randn(4, 2))

    def step(c, x):
        a, b = x
        h = c["h"] + a + b[:, None]
        return {"h": h, "n": (c["n"][0] + 1,)}, {"out": h * 2, "pair": (a, b.sum())}

    c, ys = latch.scan(step, carry, xs)
    assert c["n"][0].item() == 4
    hc = carry["h"]
    for t in range(4):
        hc = hc + xs[0][t] + xs[1][t][:, None]
        assert torch.equal(ys["out"][t], hc * 2)
    assert torch.equal(c["h"], hc)
    assert ys["out"].shape == (4, 2, 3) and ys["pair"][0].shape == (4, 3)
    assert ys["pair"][1].shape == (4,)


def test_scan_eager_errors():
    with pytest.raises(ValueError, match="same leading size"):
        latch.scan(lambda c, x: (c, x), torch.zeros(1), (torch.zeros(3), torch.zeros(4)))
    with pytest.raises(ValueError, match="at least one tensor"):
        latch.scan(lambda c, x: (c, x), torch.zeros(1), ())


def test_repeat_eager_module_and_function():
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    assert torch.equal(latch.repeat(lin, x, 3), lin(lin(lin(x))))
    assert torch.equal(latch.repeat(lambda h: h * 2 + 1, x, 2), (x * 2 + 1) * 2 + 1)
    assert latch.repeat(lin, x, 0) is x
    with pytest.raises(ValueError, match="times"):
        latch.repeat(lin, x, -1)
    # eager gradients accumulate across visits like a hand loop
    latch.repeat(lin, x, 3).sum().backward()
    g = lin.weight.grad.clone()
    lin.zero_grad()
    lin(lin(lin(x))).sum().backward()
    assert torch.allclose(g, lin.weight.grad)


# ----------------------------------------------------------------------------- compiled scan
H, D, T, ETA = 2, 8, 16, 0.1


def gradlev_step(W, qkv):
    """One fast-weight step: W <- W - eta * grad_W 1/2 |W k - v|^2; o = W q (per head)."""
    q, k, v = qkv

    def inner(W):
        return 0.5 * ((torch.einsum("hij,hj->hi", W, k) - v) ** 2).sum()

    W = W - ETA * torch.func.grad(inner)(W)
    return W, torch.einsum("hij,hj->hi", W, q)


def gradlev(W0, q, k, v):
    return latch.scan(gradlev_step, W0, (q, k, v))


def _gradlev_inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    W0 = torch.randn(H, D, D, generator=g, dtype=torch.float64) * 0.1
    q, k, v = [torch.randn(T, H, D, generator=g, dtype=torch.float64) / D ** 0.5
               for _ in range(3)]
    return tuple(t.to(dtype) for t in (W0, q, k, v))


def _hand_gradlev(W, q, k, v):
    outs = []
    for t in range(T):
        W = W - ETA * torch.einsum("hi,hj->hij", torch.einsum("hij,hj->hi", W, k[t]) - v[t], k[t])
        outs.append(torch.einsum("hij,hj->hi", W, q[t]))
    return W, torch.stack(outs)


def test_gradlev_scan_traced_once_and_kept_as_loop():
    inputs = _gradlev_inputs(torch.float64)
    traced = trace_function(gradlev, inputs)
    nodes = [n for n in traced.graph_module.graph.nodes if n.op == "call_function"
             and str(n.target).startswith("latch.")]
    assert [str(n.target) for n in nodes] == ["latch.scan.default"]
    # the same trace twice gives the same text (deterministic ids and digests)
    assert trace_function(gradlev, inputs).graph_text == traced.graph_text
    text = import_to_linalg(traced, "main")
    assert text.count('"scf.for"') == 1
    assert text.count('"func.func"') == 1
    # the body appears once: two einsums + the gradient's outer product, not 16x that
    assert text.count('"linalg.generic"') < 12


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradlev_scan_matches_eager_fp64(dtype):
    inputs = _gradlev_inputs(dtype)
    fn = latch.compile(gradlev, None, inputs)
    ref64 = _gradlev_inputs(torch.float64)
    want_W, want_o = gradlev(*ref64)
    hand_W, hand_o = _hand_gradlev(*ref64)
    assert rel(want_W, hand_W) < 1e-12 and rel(want_o, hand_o) < 1e-12
    for seed in (0, 1):
        ins = _gradlev_inputs(dtype, seed)
        W, o = fn(*ins)
        rW, ro = gradlev(*_gradlev_inputs(torch.float64, seed))
        assert W.shape == (H, D, D) and o.shape == (T, H, D)
        assert rel(W, rW) <= 1e-5, rel(W, rW)
        assert rel(o, ro) <= 1e-5, rel(o, ro)


class FastWeightStep(nn.Module):
    """A step function that is a module: its parameters are inputs of the traced body."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, carry, x):
        h, n = carry
        h = torch.tanh(self.proj(x) + h)
        return (h, n + 1), {"h": h, "s": h.sum(-1)}


def test_compiled_scan_module_step_tuple_carry_pytree_y():
    torch.manual_seed(0)
    step = FastWeightStep().double()

    def fn(h0, xs):
        (h, n), ys = latch.scan(step, (h0, torch.zeros((), dtype=h0.dtype)), xs)
        return h, n, ys["h"], ys["s"]

    h0, xs = torch.randn(3, 4, dtype=torch.float64), torch.randn(6, 3, 4, dtype=torch.float64)
    cf = latch.compile(fn, None, (h0, xs))
    got, want = cf(h0, xs), fn(h0, xs)
    assert len(got) == 4
    for a, b in zip(got, want):
        assert a.shape == b.shape
        assert rel(a, b) <= 1e-10
    assert got[1].item() == 6


def test_compiled_scan_step_closing_over_traced_tensors():
    """Tensors of the traced function that step_fn closes over (an input, a computed
    tensor) become inputs of the body, not constants."""
    def fn(c0, xs, s):
        s2 = torch.sigmoid(s) * 2
        return latch.scan(lambda c, x: (c * s2 + x * s, c), c0, xs)

    torch.manual_seed(0)
    args = (torch.randn(3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64),
            torch.randn(3, dtype=torch.float64))
    cf = latch.compile(fn, None, args)
    for seed in (1, 2):
        torch.manual_seed(seed)
        args = tuple(torch.randn_like(a) for a in args)
        for a, b in zip(cf(*args), fn(*args)):
            assert rel(a, b) <= 1e-12


def test_scan_carry_shape_change_is_an_error():
    def fn(c, xs):
        return latch.scan(lambda c, x: (torch.cat([c, x]), x), c, xs)
    with pytest.raises(latch.LatchError, match="carry"):
        latch.compile(fn, None, (torch.zeros(2), torch.zeros(3, 2)))


# ----------------------------------------------------------------------------- repeat
class Block(nn.Module):
    def __init__(self, d=8, h=16):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(torch.tanh(self.fc1(x)))


class Looped(nn.Module):
    """pre projection, a 2-layer MLP block applied 3 times with shared weights, post."""

    def __init__(self, times=3):
        super().__init__()
        self.pre = nn.Linear(6, 8)
        self.block = Block()
        self.post = nn.Linear(8, 3)
        self.times = times

    def forward(self, x, y):
        h = latch.repeat(self.block, self.pre(x), self.times)
        return F.mse_loss(self.post(h), y)


def _looped(seed=0):
    torch.manual_seed(seed)
    return Looped(), (torch.randn(5, 6), torch.randn(5, 3))


def test_repeat_forward_compiled_as_one_loop():
    torch.manual_seed(0)
    block = Block().double()
    fn = lambda x: latch.repeat(block, x, 4)  # noqa: E731
    x = torch.randn(5, 8, dtype=torch.float64)
    traced = trace_function(fn, (x,))
    text = import_to_linalg(traced, "main")
    assert text.count('"scf.for"') == 1
    cf = latch.compile(fn, None, (x,))
    assert rel(cf(x), fn(x)) <= 1e-12


def test_repeat_training_trace_has_one_forward_and_one_backward_node():
    model, inputs = _looped()
    traced = trace_loss_and_grads(model, inputs)
    ops = [str(n.target) for n in traced.graph_module.graph.nodes if n.op == "call_function"
           and str(n.target).startswith("latch.")]
    assert ops == ["latch.repeat.default", "latch.repeat_bwd.default"]
    text = import_to_linalg(traced, "loss_and_grads")
    assert text.count('"scf.for"') == 2


@pytest.mark.parametrize("rule_name", ["sgd", "adamw"])
def test_repeat_training_matches_fp64(rule_name):
    model, example = _looped()
    batches = [example] + [(torch.randn(5, 6), torch.randn(5, 3)) for _ in range(3)]
    if rule_name == "sgd":
        rule = optim.SGD(0.05, momentum=0.9)
        ref = copy.deepcopy(model).double()
        opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    else:
        rule = optim.AdamW(1e-2, weight_decay=0.1)
        ref = copy.deepcopy(model).double()
        opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    prog = latch.compile(model, rule, example)
    state = prog.init(model)
    for x, y in batches:
        loss = prog.step(state, x, y)
        opt.zero_grad()
        ref_loss = ref(x.double(), y.double())
        ref_loss.backward()
        opt.step()
        assert abs(loss - ref_loss.item()) / abs(ref_loss.item()) <= 1e-5
    got = state.parameters()
    for n, p in ref.named_parameters():
        assert rel(got[n], p.detach()) <= 1e-5, (n, rel(got[n], p.detach()))


def test_scan_in_trained_model_is_unsupported():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            c, ys = latch.scan(lambda c, x: (c + x * self.w, c), torch.zeros(3), x)
            return ys.sum()
    with pytest.raises(latch.UnsupportedOpError, match="latch.scan"):
        latch.compile(M(), optim.SGD(0.1), (torch.ones(4, 3),))


def test_repeat_block_closing_over_trained_weights_is_an_error():
    """A function block reading the model's (traced) weights through a closure would get no
    gradients: it is rejected; passing the module itself works (tests above)."""
    class M(Looped):
        def forward(self, x, y):
            h = latch.repeat(lambda h: self.block(h), self.pre(x), self.times)
            return F.mse_loss(self.post(h), y)
    torch.manual_seed(0)
    with pytest.raises(latch.LatchError, match="closure"):
        latch.compile(M(), optim.SGD(0.1), (torch.randn(5, 6), torch.randn(5, 3)))
