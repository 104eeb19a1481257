"""Expert products that skip the capacity slots no token took (passes/empty_rows.py),
executed on the CPU.

A bf16 MoE layer (d = hidden = 64, so that its products take the wgmma kernel; 4 experts,
top-2, capacity 160) routes its 256 tokens as its inputs steer the router: expert 0 takes
20, expert 1 160 (all its slots), expert 2 236 (76 dropped) and expert 3 96.  Its whole update is formed
into kernels with and without ``empty-rows`` and every launch runs in the SIMT interpreter
(tests/py/simt.py): the results must be the same bits (a skipped k-tile only adds zeros),
and the parameters' change under SGD(1.0) their float64 gradients within bf16 error."""
from __future__ import annotations

import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from models import LoopedTinyMoE, MoE
from test_attention_fused_program import FORM, _update


class MoELayer(nn.Module):
    """A linear layer (initially the identity, so that its input steers the routing; it
    makes the MoE's input gradient needed) and the MoE."""

    def __init__(self, d=64, hidden=64, experts=4):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.moe = MoE(d, hidden, experts, top_k=2)
        with torch.no_grad():
            self.inp.weight.copy_(torch.eye(d))
            self.inp.bias.zero_()
            self.moe.router.weight.zero_()
            self.moe.router.weight[:, :4] = torch.eye(4)

    def forward(self, x, y):
        out, aux = self.moe(self.inp(x))
        return F.mse_loss(out.float(), y) + 0.01 * aux


def _inputs(n: int = 256):
    """(x, y) whose router logits pick experts (0, 1) for the first 20 tokens, (1, 2) for
    the next 140 and (2, 3) for the rest: the router reads x's first 4 features alone."""
    x, y = torch.randn(n, 64), torch.randn(n, 64)
    x[:, :4] = 0.0
    for first, count, (a, b) in ((0, 20, (0, 1)), (20, 140, (1, 2)), (160, n - 160, (2, 3))):
        x[first:first + count, a] = 10.0
        x[first:first + count, b] = 9.0
    return x, y


def _form(empty_rows: bool) -> str:
    return FORM.replace("latch-form-contraction-kernels{chip=sm_90a}",
                        "latch-form-contraction-kernels{chip=sm_90a empty-rows=%s}"
                        % str(empty_rows).lower())


def _same_bits(cls, inputs, form_of, tmp_path, monkeypatch):
    """(model, x, y, {True: run, False: run}): a fresh ``cls`` model updated in the SIMT
    interpreter with the module formed by ``form_of(True)`` and by ``form_of(False)``
    (test_attention_fused_program._update's results), every product skipping wherever the
    rows allow it; the two runs' parameters and loss are the same bits."""
    from latch.passes import empty_rows

    monkeypatch.setattr(empty_rows, "MIN_WAVES", 0)     # these products are small: skip
    monkeypatch.setattr(empty_rows, "MIN_K_TILES", 0)   # wherever the rows allow it
    torch.manual_seed(0)
    model = cls()
    x, y = inputs()
    runs = {}
    for on in (True, False):
        (tmp_path / str(on)).mkdir()
        runs[on] = _update(model, x, y, "math", tmp_path / str(on), monkeypatch,
                           form=form_of(on))
    for a, b in zip(runs[True][0], runs[False][0]):
        assert torch.equal(a, b)
    assert runs[True][1] == runs[False][1]
    return model, x, y, runs


def _skipping_and_not(cls, tmp_path, monkeypatch, inputs=_inputs,
                      reference: bool = True) -> tuple[str, int]:
    """Update a fresh ``cls`` model with and without ``empty-rows`` in the SIMT interpreter:
    the same bits; with ``reference``, the parameters' change under SGD(1.0) is their
    float64 gradient within bf16 error.  Returns the skipping module's text and the number
    of its product kernels that load extents."""
    model, x, y, runs = _same_bits(cls, inputs, _form, tmp_path, monkeypatch)
    new, got_loss, _, text, _ = runs[True]
    assert _loading(runs[False][3]) == 0
    if reference:
        ref = cls().double()
        ref.load_state_dict(model.state_dict())
        loss = ref(x.double(), y.double())
        loss.backward()
        assert abs(got_loss - float(loss)) < 1e-2 * float(loss)
        for (name, p), p_new in zip(ref.named_parameters(), new):
            err = float(((p.detach() - p_new) - p.grad).norm() / p.grad.norm())
            assert err < 0.05, (name, err)
    return text, _loading(text)


def _loading(text: str) -> int:
    """The product kernels of a module that take extents (an i32 buffer, last argument)."""
    signatures = re.findall(r"gpu\.func @contract\(([^)]*)\)", text)
    return sum(bool(re.search(r"memref<\d+xi32>$", s)) for s in signatures)


def test_moe_update_skipping_empty_slots_is_bitwise_the_same(tmp_path, monkeypatch):
    text, loading = _skipping_and_not(MoELayer, tmp_path, monkeypatch)
    # the dispatch and the combine gradient's gathers raise extents (per expert; the
    # combine gradient's buffer has a fifth segment, the dropped tokens' row) and all nine
    # expert products load them: x @ w1, x @ w3 and dy @ w2^T read the gathered buffers
    # with their rows as output rows, the weight gradients h^T dy, x^T dg, x^T du reduce
    # over them, and silu(x @ w1) * (x @ w3) @ w2, dg @ w1^T and du @ w3^T read rows that
    # those products (and the SwiGLU's elementwise code) left zero
    assert text.count("atomic_rmw maxs") == 2, text.count("atomic_rmw maxs")
    assert loading == 9


def _body_generic(body: str, n_in: int):
    """A one-output elementwise generic on f32 buffers with ``body`` (MLIR text using the
    block arguments %a, %b and yielding %r), parsed in a fresh context."""
    from mlir import ir

    ins = ", ".join(f"%i{j}" for j in range(n_in))
    types = ", ".join(["memref<4xf32>"] * n_in)
    args = ", ".join(f"%{n}: f32" for n in "ab"[:n_in]) + ", %o: f32"
    maps = ", ".join(["affine_map<(d0) -> (d0)>"] * (n_in + 1))
    text = f"""
    func.func @f({", ".join(f"%i{j}: memref<4xf32>" for j in range(n_in))}, %out: memref<4xf32>) {{
      %zero = arith.constant 0.0 : f32
      %one = arith.constant 1.0 : f32
      linalg.generic {{indexing_maps = [{maps}], iterator_types = ["parallel"]}}
          ins({ins} : {types}) outs(%out : memref<4xf32>) {{
      ^bb0({args}):
        {body}
        linalg.yield %r : f32
      }}
      return
    }}"""
    ctx = ir.Context()
    module = ir.Module.parse(text, ctx)
    func = module.body.operations[0]
    generic = [o for o in func.regions[0].blocks[0].operations
               if o.operation.name == "linalg.generic"][0]
    return ctx, module, generic.operation


def test_a_zero_input_is_known_zero_only_where_the_body_keeps_it():
    from latch.passes.empty_rows import _zero_results, maps_zero_to_zero

    cases = [  # (body, does a zero %a give a zero %r for any finite %b)
        ("%s = arith.mulf %a, %b : f32\n %r = arith.negf %s : f32", True),
        # silu(a) * b as the frontend writes it: a * (1 / (1 + exp(-a))) * b
        ("%n = arith.negf %a : f32\n %e = math.exp %n : f32\n %d = arith.addf %e, %one : f32\n"
         " %q = arith.divf %one, %d : f32\n %s = arith.mulf %a, %q : f32\n"
         " %r = arith.mulf %s, %b : f32", True),
        ("%r = arith.addf %a, %b : f32", False),
        ("%r = arith.divf %b, %a : f32", False),
        ("%e = math.exp %a : f32\n %r = arith.mulf %e, %b : f32", False),
        ("%s = arith.mulf %a, %b : f32\n %r = arith.addf %s, %zero : f32", True),
    ]
    for body, zero in cases:
        ctx, module, generic = _body_generic(body, 2)
        with ctx:
            block = generic.regions[0].blocks[0]
            assert _zero_results(block, block.arguments[0]) == [zero], body
    # a rounding copy: zero stays zero unless a nonzero constant is added
    for body, zero in (("%r = arith.addf %a, %zero : f32", True),
                       ("%r = arith.addf %a, %one : f32", False)):
        ctx, module, generic = _body_generic(body, 1)
        with ctx:
            assert maps_zero_to_zero(generic) == zero, body


class BiasedExperts(MoELayer):
    """The MoE with biases after the expert products (the empty slots' rows are then not
    zero: silu(b1) * b3) and a penalty on every row of the experts' output, so that
    products skipping those rows would change the loss and the gradients."""

    def __init__(self):
        super().__init__()
        self.b1 = nn.Parameter(torch.randn(4, 1, 64) * 0.5)
        self.b3 = nn.Parameter(torch.randn(4, 1, 64) * 0.5)

    def forward(self, x, y):
        m = self.moe
        h_in = self.inp(x)
        N, D = h_in.shape
        E, k, C = m.E, m.k, 160
        probs = torch.softmax(m.router(h_in).float(), dim=-1)
        top_p, top_e = torch.topk(probs, k, dim=-1)
        gates = top_p / top_p.sum(-1, keepdim=True)
        flat_e = top_e.reshape(N * k)
        onehot = F.one_hot(flat_e, E)
        rank = ((torch.cumsum(onehot, dim=0) - 1) * onehot).sum(-1)
        keep = rank < C
        slot = torch.where(keep, flat_e * C + rank, torch.full_like(rank, E * C))
        tok = torch.arange(N * k) // k
        buf = h_in.new_zeros(E * C + 1, D).index_add(0, slot, h_in[tok])
        h = buf[: E * C].view(E, C, D)
        hidden = F.silu(torch.bmm(h, m.w1) + self.b1) * (torch.bmm(h, m.w3) + self.b3)
        o = torch.bmm(hidden, m.w2)
        penalty = (o.float() ** 2).mean()
        o = torch.cat([o.reshape(E * C, D), o.new_zeros(1, D)], dim=0)
        w = (gates.reshape(N * k) * keep.to(gates.dtype)).to(h_in.dtype)
        out = (o[slot] * w.unsqueeze(-1)).view(N, k, D).sum(1)
        return F.mse_loss(out.float(), y) + 0.01 * penalty


def test_rows_that_the_experts_biases_fill_are_not_skipped(tmp_path, monkeypatch):
    _, loading = _skipping_and_not(BiasedExperts, tmp_path, monkeypatch)
    # only x @ w1, x @ w3 and the weight gradients x^T dg, x^T du skip: the biases fill the
    # empty rows of the hidden layer, and the penalty's gradient those of the output's
    assert loading == 4


class LoopedMoE(LoopedTinyMoE):
    """A 2-layer MoE transformer whose second layer is applied twice (one ``latch.repeat``):
    gathers and products inside the loop's forward and backward bodies."""

    def __init__(self):
        super().__init__(vocab=64, d=64, n_layers=2, n_heads=1, seq=64, hidden=64,
                         n_experts=4, top_k=2, loop=(1, 2, 2))


def _tokens():
    data = torch.randint(0, 64, (2, 65))
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def test_looped_moe_update_skipping_empty_slots_is_bitwise_the_same(tmp_path, monkeypatch):
    _, loading = _skipping_and_not(LoopedMoE, tmp_path, monkeypatch, inputs=_tokens,
                                   reference=False)
    assert loading >= 3 * 9        # 3 layer applications, 9 expert products each


def test_small_products_do_not_skip(tmp_path, monkeypatch):
    """With the default thresholds (empty_rows.pays) this layer's products are too small
    for the extent's load to pay: none skips, the gathers still record extents."""
    torch.manual_seed(0)
    model = MoELayer()
    x, y = _inputs()
    _, _, _, text, _ = _update(model, x, y, "math", tmp_path, monkeypatch, form=_form(True))
    assert _loading(text) == 0 and text.count("atomic_rmw maxs") == 2


def _guarded_loads(text: str) -> int:
    """Loads issued under a condition yielding 0 elsewhere (latch-map-parallel-loops'
    guarded loads: an ``scf.if`` whose then-branch is one load)."""
    return len(re.findall(r"scf\.if %\S+ -> \([^)]*\) \{\n\s*%\S+ = (?:vector|memref)\.load",
                          text))


def test_elementwise_kernels_load_only_rows_before_the_extent(tmp_path, monkeypatch):
    """empty-row-loads: the elementwise kernels between the expert products (the SwiGLU
    forward and backward) read their inputs only in rows
    before their expert's extent; past it the body sees zeros, as it read there before.
    Same bits as loading every row, and the loads are guarded only with the option."""
    def form_of(loads: bool) -> str:      # the SwiGLU in kernels of its own, not in the
        return _form(True).replace(        # products' epilogues (epilogue-readers)
            "empty-rows=true", "empty-rows=true epilogue-readers=none empty-row-loads="
            + str(loads).lower())
    _, _, _, runs = _same_bits(MoELayer, _inputs, form_of, tmp_path, monkeypatch)
    skipping, loading = _guarded_loads(runs[True][3]), _guarded_loads(runs[False][3])
    # the SwiGLU forward's gate and up rows, its backward's output gradient, gate and up
    # rows (the products' bf16 roundings are written by the products themselves)
    assert skipping == loading + 5, (skipping, loading)
