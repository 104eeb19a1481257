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


def _train_against_fp64(prog, model, ref, opt, batches):
    """Train ``prog`` (from ``model``) and the float64 ``ref`` with ``opt`` on ``batches``:
    every loss and, at the end, every parameter within 1e-5."""
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


def test_repeat_unrolled_training_trace_has_no_structured_node():
    """repeat="unroll" (the cuda default): each visit is traced like an ordinary layer, so
    the joint graph holds no latch.repeat node and no loop is imported (the backward reads
    each visit's saved activations instead of rematerializing the forward)."""
    from latch.frontend.structured import repeats_unrolled
    model, inputs = _looped()
    with repeats_unrolled(True):
        traced = trace_loss_and_grads(model, inputs)
    ops = [str(n.target) for n in traced.graph_module.graph.nodes if n.op == "call_function"]
    assert not [o for o in ops if o.startswith("latch.")]
    # the block's one linear layer: 3 visits in the forward, each with its own products in
    # the backward
    assert sum(o in ("aten.mm.default", "aten.addmm.default") for o in ops) >= 3 * 3
    text = import_to_linalg(traced, "loss_and_grads")
    assert '"scf.for"' not in text


def test_repeat_option_checked_and_resolved():
    from latch.options import CompileOptions
    assert CompileOptions(target="cuda").repeat_mode == "unroll"
    assert CompileOptions(target="cpu").repeat_mode == "loop"
    assert CompileOptions(target="cuda", repeat="loop").repeat_mode == "loop"
    assert CompileOptions(repeat="unroll").digest() != CompileOptions(repeat="loop").digest()
    with pytest.raises(latch.LatchError, match=r"(?s)unknown repeat 'unrolled'.*'unroll'"):
        CompileOptions(repeat="unrolled")


@pytest.mark.parametrize("repeat", ["loop", "unroll"])
@pytest.mark.parametrize("rule_name", ["sgd", "adamw"])
def test_repeat_training_matches_fp64(rule_name, repeat):
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
    prog = latch.compile(model, rule, example, repeat=repeat)
    _train_against_fp64(prog, model, ref, opt, batches)


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


# ------------------------------------------------------------------ repeat: pytree carries
class AuxBlock(nn.Module):
    """block(carry) -> carry with carry = (hidden, aux sum): a residual MLP that also adds a
    penalty of its update to the carried sum (what a looped MoE does with its aux loss)."""

    def __init__(self, d=8, h=16):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)

    def forward(self, carry):
        h, aux = carry
        d = self.fc2(torch.tanh(self.fc1(h)))
        return h + d, aux + (d * d).mean()


class LoopedAux(nn.Module):
    def __init__(self, times=3):
        super().__init__()
        self.pre = nn.Linear(6, 8)
        self.block = AuxBlock()
        self.post = nn.Linear(8, 3)
        self.times = times

    def forward(self, x, y):
        h = self.pre(x)
        h, aux = latch.repeat(self.block, (h, h.new_zeros(())), self.times)
        return F.mse_loss(self.post(h), y) + 0.5 * aux


def test_repeat_eager_pytree_carry_matches_hand_loop():
    torch.manual_seed(0)
    blk = AuxBlock()
    x = torch.randn(5, 8)
    h, a = latch.repeat(blk, (x, torch.zeros(())), 3)
    hh, aa = x, torch.zeros(())
    for _ in range(3):
        hh, aa = blk((hh, aa))
    assert torch.equal(h, hh) and torch.equal(a, aa) and a.item() > 0
    out = latch.repeat(lambda c: {"h": c["h"] * 2, "n": (c["n"][0] + 1,)},
                       {"h": x, "n": (torch.zeros(()),)}, 4)
    assert torch.equal(out["h"], x * 16) and out["n"][0].item() == 4
    c = (x, torch.zeros(()))
    assert latch.repeat(blk, c, 0) is c


def test_repeat_forward_dict_carry_compiled_as_one_loop():
    torch.manual_seed(0)
    blk = AuxBlock().double()

    def step(c):
        h, aux = blk((c["h"], c["aux"]))
        return {"aux": aux, "h": h, "n": c["n"] + 1}

    def fn(x):
        c = latch.repeat(step, {"h": x, "aux": x.new_zeros(()),
                                "n": torch.zeros((), dtype=torch.int64)}, 4)
        return c["h"], c["aux"], c["n"]

    x = torch.randn(5, 8, dtype=torch.float64)
    traced = trace_function(fn, (x,))
    assert [str(n.target) for n in traced.graph_module.graph.nodes
            if str(n.target).startswith("latch.")] == ["latch.repeat.default"]
    text = import_to_linalg(traced, "main")
    assert text.count('"scf.for"') == 1
    cf = latch.compile(fn, None, (x,))
    for seed in (1, 2):
        torch.manual_seed(seed)
        x = torch.randn(5, 8, dtype=torch.float64)
        got, want = cf(x), fn(x)
        assert rel(got[0], want[0]) <= 1e-12 and rel(got[1], want[1]) <= 1e-12
        assert int(got[2]) == 4


@pytest.mark.parametrize("rule_name", ["sgd", "adamw"])
def test_repeat_tuple_carry_training_matches_fp64(rule_name):
    """Gradients flow through both carry leaves (the aux sum reaches the loss only through
    the carry) and accumulate over the visits."""
    torch.manual_seed(0)
    model = LoopedAux()
    batches = [(torch.randn(5, 6), torch.randn(5, 3)) for _ in range(4)]
    ref = copy.deepcopy(model).double()
    if rule_name == "sgd":
        rule, opt = optim.SGD(0.05, momentum=0.9), torch.optim.SGD(ref.parameters(), lr=0.05,
                                                                  momentum=0.9)
    else:
        rule = optim.AdamW(1e-2, weight_decay=0.1)
        opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    traced = trace_loss_and_grads(model, batches[0])
    assert import_to_linalg(traced, "loss_and_grads").count('"scf.for"') == 2
    prog = latch.compile(model, rule, batches[0])
    _train_against_fp64(prog, model, ref, opt, batches)


def _one_sgd_step_gradients(model, example):
    """Latch's gradients of one update (plain SGD, lr 1: p1 = p0 - g)."""
    prog = latch.compile(model, optim.SGD(1.0), example)
    state = prog.init(model)
    p0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = prog.step(state, *example)
    p1 = state.parameters()
    return loss, {n: (p0[n] - p1[n]).double() for n in p0}


def _looped_moe_visit_gradients(model, example):
    """Float64 eager gradients of the looped TinyMoE, with each visit of the repeated span
    given its own copy of the span's weights: {visit: {model param name: grad}}, and the
    tied model's gradients."""
    ref = copy.deepcopy(model).double()
    tied_loss = ref(*example)
    tied_loss.backward()
    tied = {n: p.grad.clone() for n, p in ref.named_parameters()}
    start, stop, times = ref.loop
    copies = [copy.deepcopy(ref.span) for _ in range(times)]
    visits = iter(copies)
    ref.__dict__["span"] = lambda carry: next(visits)(carry)
    ref.zero_grad()
    untied_loss = ref(*example)
    untied_loss.backward()
    assert abs(untied_loss.item() - tied_loss.item()) <= 1e-12 * abs(tied_loss.item())
    per_visit = []
    for span in copies:
        per_visit.append({f"layers.{start + int(n.split('.')[1])}." + n.split(".", 2)[2]:
                          p.grad.clone() for n, p in span.named_parameters()})
    return tied_loss.item(), tied, per_visit


def test_looped_tiny_moe_accumulates_shared_gradients_across_both_visits():
    """One ``latch.repeat`` over layers 1-2 of a 4-layer mini TinyMoE (0,1,2,1,2,3), carry
    (hidden, aux sum): Latch's gradient of every shared weight is the sum of its two visits'
    gradients (float64 eager with the visits untied), not either visit alone; the layers
    outside the loop and the embeddings match too."""
    from models import make_looped_tiny_moe

    model, example = make_looped_tiny_moe(seed=0)
    assert model.loop == (1, 3, 2) and model.applications == 6
    loss, got = _one_sgd_step_gradients(model, example)
    ref_loss, tied, per_visit = _looped_moe_visit_gradients(model, example)
    assert abs(loss - ref_loss) <= 1e-5 * abs(ref_loss)
    shared = [n for n in tied if n.startswith(("layers.1.", "layers.2."))]
    assert len(shared) == 16 and set(shared) == set(per_visit[0]) == set(per_visit[1])
    for n in shared:
        total = per_visit[0][n] + per_visit[1][n]
        assert rel(total, tied[n]) <= 1e-12, n
        assert rel(got[n], tied[n]) <= 1e-4, (n, rel(got[n], tied[n]))
        # both visits matter: a program that kept one visit's gradient would fail
        assert min(rel(got[n], per_visit[0][n]), rel(got[n], per_visit[1][n])) > 1e-2, n
    for n in tied:
        assert rel(got[n], tied[n]) <= 1e-4, (n, rel(got[n], tied[n]))


def test_looped_tiny_moe_same_parameters_as_tiny_moe():
    from models import LoopedTinyMoE, TinyMoE, make_looped_tiny_moe

    model, (idx, tgt) = make_looped_tiny_moe(seed=0)
    plain = TinyMoE(vocab=64, seq=16, n_layers=4)
    plain.load_state_dict(model.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in plain.named_parameters()]
    # eager: the looped model is the plain one with layers applied 0,1,2,1,2,3 and the aux
    # loss averaged over the 6 applications
    B, T = idx.shape
    x = plain.tok(idx) + plain.pos(torch.arange(T))
    aux = 0.0
    for i in (0, 1, 2, 1, 2, 3):
        x, a = plain.layers[i](x)
        aux = aux + a
    logits = plain.norm(x) @ plain.tok.weight.t()
    want = F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(B * T)) + 0.01 * aux / 6
    assert torch.allclose(model(idx, tgt), want, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="loop"):
        LoopedTinyMoE(n_layers=4, loop=(2, 6, 2))


@pytest.mark.parametrize("repeat", ["loop", "unroll"])
def test_looped_tiny_moe_compiles_for_cuda(repeat):
    """The cuda target unrolls both loops of the repeat (forward and reverse) into the
    launch list (repeat="loop"), or traces every visit as ordinary layers ("unroll", the
    default): the manifest is sane and holds every parameter under its model name."""
    from models import make_looped_tiny_moe

    model, example = make_looped_tiny_moe(seed=0)
    rule = optim.clip_grad_norm(0.5, optim.AdamW(1e-2, betas=(0.9, 0.95), weight_decay=0.1))
    prog = latch.compile(model, rule, example, target="cuda", repeat=repeat)
    m = prog.manifest
    assert m["kind"] == "cuda-update" and m["launches"]
    assert m["arena_bytes"] >= m["planned_arena_bytes"] > 0
    params = dict(model.named_parameters())
    assert m["param_names"] == list(params)
    states = {s["name"]: s for s in m["states"]}
    for n, p in params.items():
        assert states[n]["kind"] == "param" and states[n]["shape"] == list(p.shape)
        assert f"{n}.exp_avg" in states and f"{n}.exp_avg_sq" in states
    assert [(o["shape"], o["dtype"]) for o in m["outputs"]] == [([], "f32")]
    for launch in m["launches"]:
        assert launch["module"] in m["modules"]
        assert all(g >= 1 for g in launch["grid"] + launch["block"])
        for loc in (a for a in launch["args"] if a["type"] == "ptr"):
            if "arena" in loc:
                assert 0 <= loc["arena"] < m["arena_bytes"]
    assert len(m["modules"]) <= len(m["launches"])
    for path in m["modules"].values():
        assert prog.files[path].startswith(b"//") and b".entry" in prog.files[path]


def test_repeat_carry_errors_name_what_was_passed():
    torch.manual_seed(0)
    blk = AuxBlock()
    x = torch.randn(5, 8)

    def compile_fn(fn):
        return latch.compile(fn, None, (x,))

    with pytest.raises(latch.LatchError, match=r"carry\[1\] is a float; a carry is a tensor, "
                                               r"or a tuple/list/dict"):
        compile_fn(lambda x: latch.repeat(blk, (x, 0.0), 2)[0])
    with pytest.raises(latch.LatchError, match="holds no tensor"):
        compile_fn(lambda x: latch.repeat(lambda c: c, (), 2) or x)
    with pytest.raises(latch.LatchError,
                       match=r"same structure as its input, \(torch.float32\[5, 8\], "
                             r"torch.float32\[\]\); it returned \(torch.float32\[5, 8\], "
                             r"torch.float32\[\], torch.float32\[\]\)"):
        compile_fn(lambda x: latch.repeat(lambda c: (c[0], c[1], c[1]), (x, x.sum()), 2)[0])
    with pytest.raises(latch.LatchError,
                       match=r"changes carry\[1\] from torch.float32\[\] to torch.float32\[8\]"):
        compile_fn(lambda x: latch.repeat(lambda c: (c[0], c[1] + c[0][0]), (x, x.sum()), 2)[0])
    with pytest.raises(latch.LatchError, match="must return one tensor"):
        compile_fn(lambda x: latch.repeat(lambda h: (h, h), x, 2))

    class CountedLooped(LoopedAux):
        def forward(self, x, y):
            h, n = latch.repeat(lambda c: (self.block((c[0], c[0].sum()))[0], c[1] + 1),
                                (self.pre(x), torch.zeros((), dtype=torch.int64)), 2)
            return F.mse_loss(self.post(h), y)
    with pytest.raises(latch.LatchError, match=r"carry\[1\] is a torch.int64 tensor.*"
                                               r"floating-point"):
        latch.compile(CountedLooped(), optim.SGD(0.1), (torch.randn(5, 6), torch.randn(5, 3)))


def test_gradient_accumulation_and_clipping_compose_with_a_repeat():
    """every(2, clip(AdamW)) on a looped model (latch.repeat, shared weights): each update
    steps on the mean gradient of two microbatches, clipped, and leaves the weights
    unchanged on the first of each pair — against the same done by hand in float64."""
    import copy

    from latch import optim
    from models import make_looped

    model, _ = make_looped(seed=3, batch=8)
    gen = torch.Generator().manual_seed(5)
    batches = [(torch.randn(8, 8, generator=gen), torch.randn(8, 4, generator=gen))
               for _ in range(6)]
    rule = optim.every(2, optim.clip_grad_norm(0.05, optim.AdamW(1e-2, betas=(0.9, 0.95),
                                                                 weight_decay=0.1)))
    prog = latch.compile(model, rule, batches[0])
    state = prog.init(model)
    got = []
    for x, y in batches:
        prog.step(state, x, y)
        got.append({n: t.clone() for n, t in state.parameters().items()})

    ref = copy.deepcopy(model).double()
    params = list(ref.parameters())
    opt = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    acc = [torch.zeros_like(p) for p in params]
    for i, (x, y) in enumerate(batches):
        loss = ref(x.double(), y.double())
        for a, g in zip(acc, torch.autograd.grad(loss, params)):
            a.add_(g)
        if i % 2 == 1:
            for p, a in zip(params, acc):
                p.grad = a / 2
            torch.nn.utils.clip_grad_norm_(params, 0.05)
            opt.step()
            acc = [torch.zeros_like(p) for p in params]
        want = dict(ref.named_parameters())
        for n, t in got[i].items():
            err = float((t.double() - want[n].detach()).norm() / want[n].detach().norm())
            assert err < 1e-5, (i, n, err)
    first, second = got[0], got[1]
    assert all(torch.equal(first[n], dict(model.named_parameters())[n].detach())
               for n in first)                           # unchanged after microbatch 0
    assert any(not torch.equal(first[n], second[n]) for n in first)   # stepped after 1
