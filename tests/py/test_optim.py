"""latch.optim: hyperparameter validation, and numerics of every rule against a PyTorch FP64
reference (torch.optim on float64 copies, stepped by hand), through the whole path:
build_update_module -> latch-lower-{state,schedules,control,optimizers} -> CPU JIT."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from latch import optim
from latch.errors import LatchError
from latch.optim.testing import Runner, lower_rules

TOL = 1e-5


def rel_l2(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    den = np.linalg.norm(ref)
    num = np.linalg.norm(got - ref)
    return float(num / den) if den > 0 else float(num)


# ----------------------------------------------------------------------------- the Latch side
class Program:
    """An optimizer-only update program (gradients are inputs) compiled for the CPU."""

    def __init__(self, params: dict[str, np.ndarray], rule):
        self.specs = [(n, _ttype(a)) for n, a in params.items()]
        self.decls = optim.declare_states(self.specs, rule)
        text = optim.build_update_module(self.specs, rule, [], loss_and_grads=None)
        self.module = lower_rules(text)
        self.run = Runner(self.module, "update")
        init = optim.initial_state(self.decls, params)
        self.state = {d.name: v for d, v in zip(self.decls, init)}
        assert all(self.state[n].dtype == np.float32 for n in params)

    def step(self, grads: dict[str, np.ndarray]) -> float:
        outs = self.run(*[self.state[d.name] for d in self.decls],
                        *[grads[n].astype(np.float32) for n, _ in self.specs])
        for d, v in zip(self.decls, outs):
            self.state[d.name] = v
        return float(outs[len(self.decls)])


def _ttype(a: np.ndarray) -> str:
    dims = "x".join(str(d) for d in a.shape)
    return f"tensor<{dims}xf32>" if dims else "tensor<f32>"


def make_params(seed=0):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((4, 3)), "b": rng.standard_normal(3), "s": np.array(0.7)}


def make_grads(params, steps, seed=1, scale=1.0):
    rng = np.random.default_rng(seed)
    return [{n: scale * rng.standard_normal(a.shape) for n, a in params.items()} for _ in range(steps)]


# ----------------------------------------------------------------------------- the torch side
class TorchRef:
    """float64 copies of the params, one torch optimizer per group."""

    def __init__(self, params):
        self.p = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in params.items()}

    def set_grads(self, grads, names=None):
        for n in names or self.p:
            self.p[n].grad = torch.tensor(grads[n], dtype=torch.float64)


def compare(prog: Program, expected: dict[str, np.ndarray], record: list) -> None:
    for name, ref in expected.items():
        err = rel_l2(prog.state[name], ref)
        record.append((name, err))
        assert err <= TOL, f"{name}: relative L2 {err:.3g} > {TOL}"


SGD_CASES = {
    "plain": dict(lr=0.1),
    "momentum": dict(lr=0.05, momentum=0.9),
    "nesterov": dict(lr=0.05, momentum=0.8, nesterov=True),
    "weight_decay": dict(lr=0.05, momentum=0.9, weight_decay=0.01),
    "weight_decay_no_momentum": dict(lr=0.1, weight_decay=0.05),
}


@pytest.mark.parametrize("case", list(SGD_CASES))
def test_sgd_matches_torch(case):
    kw = SGD_CASES[case]
    params = make_params()
    prog = Program(params, optim.SGD(**kw))
    ref = TorchRef(params)
    opt = torch.optim.SGD(list(ref.p.values()), **kw)
    worst = []
    for i, g in enumerate(make_grads(params, 6)):
        prog.step(g)
        ref.set_grads(g)
        opt.step()
        exp = {n: p.detach().numpy() for n, p in ref.p.items()}
        if kw.get("momentum"):
            exp.update({f"{n}.momentum_buffer": opt.state[p]["momentum_buffer"].numpy()
                        for n, p in ref.p.items()})
        compare(prog, exp, worst)
        assert int(prog.state["step"]) == i + 1
    print(f"SGD[{case}] worst rel L2: {max(e for _, e in worst):.2e}")


ADAMW_CASES = {
    "default": dict(lr=1e-2),
    "custom": dict(lr=3e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    "no_decay": dict(lr=1e-2, weight_decay=0.0),
}


@pytest.mark.parametrize("case", list(ADAMW_CASES))
def test_adamw_matches_torch(case):
    kw = ADAMW_CASES[case]
    params = make_params()
    prog = Program(params, optim.AdamW(**kw))
    ref = TorchRef(params)
    opt = torch.optim.AdamW(list(ref.p.values()), **kw)
    worst = []
    for g in make_grads(params, 8):
        prog.step(g)
        ref.set_grads(g)
        opt.step()
        exp = {n: p.detach().numpy() for n, p in ref.p.items()}
        for n, p in ref.p.items():
            exp[f"{n}.exp_avg"] = opt.state[p]["exp_avg"].numpy()
            exp[f"{n}.exp_avg_sq"] = opt.state[p]["exp_avg_sq"].numpy()
        compare(prog, exp, worst)
    print(f"AdamW[{case}] worst rel L2: {max(e for _, e in worst):.2e}")


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(max_norm):
    params = make_params()
    prog = Program(params, optim.clip_grad_norm(max_norm, optim.AdamW(1e-2)))
    ref = TorchRef(params)
    opt = torch.optim.AdamW(list(ref.p.values()), lr=1e-2)
    worst = []
    for g in make_grads(params, 6, scale=3.0):
        prog.step(g)
        ref.set_grads(g)
        torch.nn.utils.clip_grad_norm_(list(ref.p.values()), max_norm)
        opt.step()
        exp = {n: p.detach().numpy() for n, p in ref.p.items()}
        exp.update({f"{n}.exp_avg": opt.state[p]["exp_avg"].numpy() for n, p in ref.p.items()})
        exp.update({f"{n}.exp_avg_sq": opt.state[p]["exp_avg_sq"].numpy() for n, p in ref.p.items()})
        compare(prog, exp, worst)
    print(f"clip({max_norm}) worst rel L2: {max(e for _, e in worst):.2e}")


def test_warmup_cosine_schedule_matches_torch():
    sched = optim.warmup_cosine(0.1, warmup_steps=3, total_steps=8, final_ratio=0.1)
    params = make_params()
    prog = Program(params, optim.SGD(sched, momentum=0.9))
    ref = TorchRef(params)
    opt = torch.optim.SGD(list(ref.p.values()), lr=0.1, momentum=0.9)
    # torch's own schedulers reproduce the same lr sequence
    lam = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: sched.value_at(s) / 0.1)
    worst = []
    for i, g in enumerate(make_grads(params, 11)):
        assert math.isclose(opt.param_groups[0]["lr"], sched.value_at(i), rel_tol=1e-12)
        prog.step(g)
        ref.set_grads(g)
        opt.step()
        lam.step()
        exp = {n: p.detach().numpy() for n, p in ref.p.items()}
        exp.update({f"{n}.momentum_buffer": opt.state[p]["momentum_buffer"].numpy()
                    for n, p in ref.p.items()})
        compare(prog, exp, worst)
    print(f"warmup_cosine worst rel L2: {max(e for _, e in worst):.2e}")


def test_warmup_cosine_values():
    s = optim.warmup_cosine(1.0, 4, 12, 0.2)
    assert [s.value_at(i) for i in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert s.value_at(4) == 1.0
    assert math.isclose(s.value_at(8), 0.2 + 0.8 * 0.5)
    assert math.isclose(s.value_at(12), 0.2) and math.isclose(s.value_at(100), 0.2)
    assert optim.warmup_cosine(1.0, 0, 10, 0.0).value_at(0) == 1.0


def test_schedule_lowered_values_match_formula():
    """lr as computed inside the program (via a param with grad 1 and plain SGD)."""
    sched = optim.warmup_cosine(0.5, 2, 6, 0.3)
    params = {"x": np.array(0.0)}
    prog = Program(params, optim.SGD(sched))
    prev = 0.0
    for i in range(9):
        prog.step({"x": np.array(-1.0)})
        lr = float(prog.state["x"]) - prev
        prev = float(prog.state["x"])
        assert abs(lr - sched.value_at(i)) <= 1e-6, (i, lr, sched.value_at(i))


def test_partition_every_matches_torch():
    rng = np.random.default_rng(3)
    params = {"experts.0.w": rng.standard_normal((4, 3)), "experts.1.w": rng.standard_normal((4, 3)),
              "shared.w": rng.standard_normal((3, 5)), "b": rng.standard_normal(3)}
    experts = ["experts.0.w", "experts.1.w"]
    others = ["shared.w", "b"]
    rule = optim.partition({"experts.*": optim.every(4, optim.AdamW(1e-2, weight_decay=0.1)),
                            "*": optim.SGD(0.05, momentum=0.9)})
    prog = Program(params, rule)
    names = [d.name for d in prog.decls]
    assert names[:5] == ["experts.0.w", "experts.1.w", "shared.w", "b", "step"]
    assert "group0.every.count" in names and "experts.0.w.grad_acc" in names
    ref = TorchRef(params)
    opt_e = torch.optim.AdamW([ref.p[n] for n in experts], lr=1e-2, weight_decay=0.1)
    opt_o = torch.optim.SGD([ref.p[n] for n in others], lr=0.05, momentum=0.9)
    acc = {n: np.zeros_like(params[n]) for n in experts}
    worst = []
    for i, g in enumerate(make_grads(params, 13, seed=5)):
        before = {k: v.copy() for k, v in prog.state.items()}
        prog.step(g)
        ref.set_grads(g, others)
        opt_o.step()
        for n in experts:
            acc[n] += g[n]
        stepped = (i + 1) % 4 == 0
        if stepped:
            for n in experts:
                ref.p[n].grad = torch.tensor(acc[n] / 4)
                acc[n][...] = 0
            opt_e.step()
        else:
            # between steps the experts and their moments do not change at all
            for n in experts:
                for k in (n, f"{n}.exp_avg", f"{n}.exp_avg_sq"):
                    assert np.array_equal(prog.state[k], before[k]), (i, k)
        exp = {n: p.detach().numpy() for n, p in ref.p.items()}
        exp.update({f"{n}.momentum_buffer": opt_o.state[ref.p[n]]["momentum_buffer"].numpy()
                    for n in others})
        if i >= 3:
            exp.update({f"{n}.exp_avg": opt_e.state[ref.p[n]]["exp_avg"].numpy() for n in experts})
            exp.update({f"{n}.exp_avg_sq": opt_e.state[ref.p[n]]["exp_avg_sq"].numpy() for n in experts})
        exp.update({f"{n}.grad_acc": acc[n] for n in experts})
        compare(prog, exp, worst)
        assert int(prog.state["group0.every.count"]) == i + 1
        assert int(prog.state["step"]) == i + 1
        assert not any(k.startswith("shared") and "exp_avg" in k for k in prog.state)
    print(f"partition+every(4) worst rel L2: {max(e for _, e in worst):.2e}")


def test_every_with_schedule_and_clip_uses_inner_step_count():
    """every(2, clip(AdamW(schedule))): the schedule and bias correction count inner steps."""
    params = make_params()
    sched = optim.warmup_cosine(0.05, 2, 5, 0.1)
    prog = Program(params, optim.every(2, optim.clip_grad_norm(1.0, optim.AdamW(sched))))
    ref = TorchRef(params)
    opt = torch.optim.AdamW(list(ref.p.values()), lr=sched.value_at(0))
    acc = {n: np.zeros_like(a) for n, a in params.items()}
    worst, k = [], 0
    for i, g in enumerate(make_grads(params, 10, seed=9, scale=2.0)):
        prog.step(g)
        for n in acc:
            acc[n] += g[n]
        if (i + 1) % 2 == 0:
            opt.param_groups[0]["lr"] = sched.value_at(k)
            for n in acc:
                ref.p[n].grad = torch.tensor(acc[n] / 2)
                acc[n][...] = 0
            torch.nn.utils.clip_grad_norm_(list(ref.p.values()), 1.0)
            opt.step()
            k += 1
        exp = {n: p.detach().numpy() for n, p in ref.p.items()}
        exp.update({f"{n}.grad_acc": acc[n] for n in acc})
        compare(prog, exp, worst)
    print(f"every(2, clip(AdamW(warmup_cosine))) worst rel L2: {max(e for _, e in worst):.2e}")


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("make, msg", [
    (lambda: optim.SGD(-0.1), "learning rate"),
    (lambda: optim.SGD(float("nan")), "learning rate"),
    (lambda: optim.SGD("fast"), "lr must be a float"),
    (lambda: optim.SGD(0.1, momentum=-0.5), "momentum"),
    (lambda: optim.SGD(0.1, weight_decay=-1), "weight_decay"),
    (lambda: optim.SGD(0.1, nesterov=True), "nesterov"),
    (lambda: optim.AdamW(float("inf")), "learning rate"),
    (lambda: optim.AdamW(1e-3, betas=(1.0, 0.999)), r"betas\[0\]"),
    (lambda: optim.AdamW(1e-3, betas=(0.9, -0.1)), r"betas\[1\]"),
    (lambda: optim.AdamW(1e-3, betas=(0.9, float("nan"))), r"betas\[1\]"),
    (lambda: optim.AdamW(1e-3, betas=0.9), "pair"),
    (lambda: optim.AdamW(1e-3, eps=0.0), "eps"),
    (lambda: optim.AdamW(1e-3, weight_decay=-0.01), "weight_decay"),
    (lambda: optim.every(0, optim.SGD(0.1)), "every: n must be >= 1"),
    (lambda: optim.every(2.5, optim.SGD(0.1)), "integer"),
    (lambda: optim.every(2, "sgd"), "learning rule"),
    (lambda: optim.clip_grad_norm(0.0, optim.SGD(0.1)), "max_norm"),
    (lambda: optim.clip_grad_norm(-1.0, optim.SGD(0.1)), "max_norm"),
    (lambda: optim.warmup_cosine(-1.0, 1, 10), "peak"),
    (lambda: optim.warmup_cosine(1.0, 10, 10), "total_steps"),
    (lambda: optim.warmup_cosine(1.0, -1, 10), "warmup_steps"),
    (lambda: optim.warmup_cosine(1.0, 1, 10, 1.5), "final_ratio"),
    (lambda: optim.partition({}), "at least one"),
    (lambda: optim.partition({"*": 0.1}), "not a learning rule"),
])
def test_bad_hyperparameters_raise(make, msg):
    with pytest.raises(LatchError, match=msg):
        make()


def test_partition_unmatched_parameter_raises():
    rule = optim.partition({"experts.*": optim.SGD(0.1)})
    with pytest.raises(LatchError, match="parameter 'head.w' matches none"):
        optim.build_update_module([("experts.0", "tensor<2xf32>"), ("head.w", "tensor<2xf32>")],
                                  rule, [])


def test_partition_pattern_matching_nothing_raises():
    rule = optim.partition({"experts.*": optim.SGD(0.1), "decoder.*": optim.SGD(0.1),
                            "*": optim.SGD(0.2)})
    with pytest.raises(LatchError, match="pattern 'decoder.\\*' matches no parameter"):
        optim.build_update_module([("experts.0", "tensor<2xf32>"), ("head.w", "tensor<2xf32>")],
                                  rule, [])


def test_partition_first_match_wins():
    rule = optim.partition({"a.*": optim.SGD(0.1), "a.b": optim.SGD(0.2), "*": optim.SGD(0.3)})
    with pytest.raises(LatchError, match="pattern 'a.b' matches no parameter"):
        rule.assign(["a.b", "c"])
    rule2 = optim.partition({"a.*": optim.SGD(0.1), "*": optim.SGD(0.3)})
    assert rule2.assign(["a.b", "c", "a.c"]) == [["a.b", "a.c"], ["c"]]


def test_build_rejects_non_rule_and_bad_types():
    with pytest.raises(LatchError, match="expected a learning rule"):
        optim.build_update_module([("w", "tensor<2xf32>")], 0.1, [])
    with pytest.raises(LatchError, match="element type i32"):
        optim.build_update_module([("w", "tensor<2xi32>")], optim.SGD(0.1), [])
    with pytest.raises(LatchError, match="statically shaped"):
        optim.build_update_module([("w", "tensor<?xf32>")], optim.SGD(0.1), [])
