"""The rule-lowering passes (latch-lower-state, -schedules, -control, -optimizers): output
verifies and contains only upstream dialects, the ABI attribute, loops/scans/every run
correctly on the CPU, a full update with a loss-and-gradients function, and PassErrors."""
from __future__ import annotations

import numpy as np
import pytest

from latch import optim
from latch.errors import PassError
from latch.optim.testing import Runner, lower_rules, make_context

UPSTREAM = {"builtin", "func", "arith", "math", "linalg", "tensor", "scf"}


def all_op_names(module) -> list[str]:
    from mlir import ir
    names = []

    def cb(op):
        names.append(op.name)
        return ir.WalkResult.ADVANCE
    module.operation.walk(cb, ir.WalkOrder.PRE_ORDER)
    return names


def lower_control_only(text: str):
    from mlir import ir
    from latch.passes import get_pass
    ctx = make_context()
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        get_pass("latch-lower-control")().apply(m.operation)
        assert m.operation.verify()
    return m


BIG_RULE = optim.partition({
    "experts.*": optim.every(4, optim.clip_grad_norm(1.0, optim.AdamW(optim.warmup_cosine(1e-3, 2, 10)))),
    "*": optim.SGD(0.1, momentum=0.9, nesterov=True, weight_decay=1e-4),
})
BIG_PARAMS = [("experts.0.w", "tensor<4x3xf32>"), ("emb", "tensor<5x2xf32>"), ("b", "tensor<f32>")]


def test_lowered_program_is_upstream_only_and_verifies():
    m = lower_rules(optim.build_update_module(BIG_PARAMS, BIG_RULE, [], loss_and_grads=None))
    names = set(all_op_names(m))
    assert {n.split(".")[0] for n in names} <= UPSTREAM, names
    assert "scf.if" in names and "linalg.generic" in names and "math.cos" in names
    assert m.operation.verify()


def test_abi_attribute_lists_states_in_declaration_order():
    from mlir import ir
    m = lower_rules(optim.build_update_module(BIG_PARAMS, BIG_RULE, ["tensor<2xf32>"],
                                              loss_and_grads=None))
    decls = optim.declare_states(BIG_PARAMS, BIG_RULE)
    func = [op for op in m.body.operations if op.operation.name == "func.func"][0]
    abi = func.attributes["latch.abi"]
    states = [(ir.StringAttr(d["name"]).value, ir.StringAttr(d["kind"]).value, str(ir.TypeAttr(d["type"]).value))
              for d in abi["states"]]
    assert states == [(d.name, d.kind, d.type) for d in decls]
    assert ir.IntegerAttr(abi["num_inputs"]).value == len(BIG_PARAMS) + 1  # grads + the input
    assert ir.IntegerAttr(abi["num_returns"]).value == 1
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    assert [str(t) for t in ftype.results] == [d.type for d in decls] + ["tensor<f32>"]
    assert [str(t) for t in ftype.inputs][:len(decls)] == [d.type for d in decls]


LG = """func.func @loss_and_grads(%w: tensor<4xf32>, %x: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<4xf32>) {
  // loss = 0.5 * sum((w - x)^2); grad = w - x; extra output = x * 2
  %e = tensor.empty() : tensor<4xf32>
  %d = linalg.sub ins(%w, %x : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<f32>
  %acc = linalg.fill ins(%z : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> ()>], iterator_types = ["reduction"]} ins(%d : tensor<4xf32>) outs(%acc : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %sq = arith.mulf %a, %a : f32
    %h = arith.constant 0.5 : f32
    %hs = arith.mulf %sq, %h : f32
    %r = arith.addf %o, %hs : f32
    linalg.yield %r : f32
  } -> tensor<f32>
  %x2 = linalg.add ins(%x, %x : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  return %s, %d, %x2 : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}"""


def test_full_update_with_loss_and_grads_function():
    text = optim.build_update_module([("w", "tensor<4xf32>")], optim.SGD(0.25, momentum=0.5),
                                     ["tensor<4xf32>"], extra_result_types=["tensor<4xf32>"],
                                     functions=LG)
    assert '"latch.call"' in text and '@"loss_and_grads"' in text
    m = lower_rules(text)
    names = all_op_names(m)
    assert "func.call" in names and not any(n.startswith("latch.") for n in names)
    run = Runner(m, "update")
    w = np.array([1.0, -2.0, 3.0, 0.5])
    buf = np.zeros(4)
    state = [w.astype(np.float32), np.zeros((), np.int64), buf.astype(np.float32)]
    rng = np.random.default_rng(0)
    for i in range(5):
        x = rng.standard_normal(4)
        out = run(*state, x)
        loss_ref = 0.5 * np.sum((w - x) ** 2)
        g = w - x
        buf = 0.5 * buf + g
        w = w - 0.25 * buf
        state = out[:3]
        assert abs(float(out[3]) - loss_ref) <= 1e-5 * max(1, loss_ref)
        np.testing.assert_allclose(out[4], 2 * x, rtol=1e-6)
        np.testing.assert_allclose(out[0], w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[2], buf, rtol=1e-5, atol=1e-6)
        assert int(out[1]) == i + 1


def test_func_call_in_update_is_supported_when_requested():
    text = optim.build_update_module([("w", "tensor<4xf32>")], optim.SGD(0.1), ["tensor<4xf32>"],
                                     extra_result_types=["tensor<4xf32>"], functions=LG,
                                     call_op="func.call")
    assert '"func.call"' in text


LOOP = """func.func @f(%x: tensor<3xf32>, %w: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "latch.loop"(%x) ({
  ^bb0(%i: tensor<i64>, %h: tensor<3xf32>):
    %e = tensor.empty() : tensor<3xf32>
    %hw = linalg.mul ins(%h, %w : tensor<3xf32>, tensor<3xf32>) outs(%e : tensor<3xf32>) -> tensor<3xf32>
    %i0 = tensor.extract %i[] : tensor<i64>
    %fi = arith.sitofp %i0 : i64 to f32
    %ft = tensor.from_elements %fi : tensor<f32>
    %r = linalg.generic {indexing_maps = [affine_map<(d) -> (d)>, affine_map<(d) -> ()>, affine_map<(d) -> (d)>], iterator_types = ["parallel"]} ins(%hw, %ft : tensor<3xf32>, tensor<f32>) outs(%e : tensor<3xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    } -> tensor<3xf32>
    "latch.yield"(%r) : (tensor<3xf32>) -> ()
  }) {times = 4 : i64} : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}"""


def test_loop_lowers_to_scf_for_and_runs():
    m = lower_control_only(LOOP)
    assert "scf.for" in all_op_names(m) and not any(n.startswith("latch.") for n in all_op_names(m))
    x, w = np.array([1.0, 2.0, -1.0]), np.array([0.5, -1.0, 2.0])
    (out,) = Runner(m, "f")(x, w)
    h = x.copy()
    for i in range(4):
        h = h * w + i
    np.testing.assert_allclose(out, h, rtol=1e-6)


SCAN = """func.func @f(%c: tensor<2xf32>, %xs: tensor<5x2xf32>, %w: tensor<2xf32>) -> (tensor<2xf32>, tensor<5x2xf32>, tensor<5xf32>) {
  %0:3 = "latch.scan"(%c, %xs) ({
  ^bb0(%carry: tensor<2xf32>, %x: tensor<2xf32>):
    %e = tensor.empty() : tensor<2xf32>
    %m = linalg.mul ins(%carry, %w : tensor<2xf32>, tensor<2xf32>) outs(%e : tensor<2xf32>) -> tensor<2xf32>
    %n = linalg.add ins(%m, %x : tensor<2xf32>, tensor<2xf32>) outs(%e : tensor<2xf32>) -> tensor<2xf32>
    %z = arith.constant 0.0 : f32
    %e0 = tensor.empty() : tensor<f32>
    %a0 = linalg.fill ins(%z : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
    %s = linalg.generic {indexing_maps = [affine_map<(d) -> (d)>, affine_map<(d) -> ()>], iterator_types = ["reduction"]} ins(%n : tensor<2xf32>) outs(%a0 : tensor<f32>) {
    ^bb0(%a: f32, %o: f32):
      %r = arith.addf %a, %o : f32
      linalg.yield %r : f32
    } -> tensor<f32>
    "latch.yield"(%n, %n, %s) : (tensor<2xf32>, tensor<2xf32>, tensor<f32>) -> ()
  }) {num_carries = 1 : i64, length = 5 : i64} : (tensor<2xf32>, tensor<5x2xf32>) -> (tensor<2xf32>, tensor<5x2xf32>, tensor<5xf32>)
  return %0#0, %0#1, %0#2 : tensor<2xf32>, tensor<5x2xf32>, tensor<5xf32>
}"""


def test_scan_lowers_to_scf_for_with_slices_and_runs():
    m = lower_control_only(SCAN)
    names = all_op_names(m)
    assert {"scf.for", "tensor.extract_slice", "tensor.insert_slice"} <= set(names)
    rng = np.random.default_rng(0)
    c, xs, w = rng.standard_normal(2), rng.standard_normal((5, 2)), rng.standard_normal(2)
    fc, ys, sums = Runner(m, "f")(c, xs, w)
    h, ref_ys = c.copy(), []
    for t in range(5):
        h = h * w + xs[t]
        ref_ys.append(h.copy())
    np.testing.assert_allclose(fc, h, rtol=1e-5)
    np.testing.assert_allclose(ys, np.stack(ref_ys), rtol=1e-5)
    np.testing.assert_allclose(sums, np.stack(ref_ys).sum(1), rtol=1e-5, atol=1e-6)


EVERY = """func.func @f(%n: tensor<i64>, %p: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "latch.every"(%n, %p) ({
    %e = tensor.empty() : tensor<3xf32>
    %d = linalg.add ins(%p, %p : tensor<3xf32>, tensor<3xf32>) outs(%e : tensor<3xf32>) -> tensor<3xf32>
    "latch.yield"(%d) : (tensor<3xf32>) -> ()
  }) {period = 3 : i64} : (tensor<i64>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}"""


def test_every_runs_only_on_multiples_of_period():
    m = lower_control_only(EVERY)
    run = Runner(m, "f")
    p = np.array([1.0, 2.0, 3.0])
    for n in range(1, 8):
        (out,) = run(np.array(n), p)
        np.testing.assert_array_equal(out, 2 * p if n % 3 == 0 else p)


def test_f64_params_lower_and_run():
    m = lower_rules(optim.build_update_module([("w", "tensor<3xf64>")], optim.AdamW(0.1),
                                              [], loss_and_grads=None))
    run = Runner(m, "update")
    out = run(np.ones(3), np.array(0), np.zeros(3), np.zeros(3), np.full(3, 2.0))
    # first AdamW step moves every weight by ~lr (sign of the gradient), after decay
    np.testing.assert_allclose(out[0], 1.0 * (1 - 0.1 * 0.01) - 0.1, rtol=1e-6)


# ----------------------------------------------------------------------------- pass errors
def _apply(pass_name: str, text: str):
    from mlir import ir
    from latch.passes import get_pass
    ctx = make_context()
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        get_pass(pass_name)().apply(m.operation)
    return m


STATE_HEAD = '''"latch.state"() {sym_name = "w", type = tensor<2xf32>, kind = "param"} : () -> ()'''


@pytest.mark.parametrize("pass_name, body, msg", [
    ("latch-lower-state", STATE_HEAD + '''
      "latch.update"() ({
        %w = "latch.read"() {state = @w} : () -> tensor<2xf32>
        "latch.write"(%w) {state = @w} : (tensor<2xf32>) -> ()
        "latch.write"(%w) {state = @w} : (tensor<2xf32>) -> ()
        %l = arith.constant dense<0.0> : tensor<f32>
        "latch.return"(%l) : (tensor<f32>) -> ()
      }) {sym_name = "u"} : () -> ()''', "written twice"),
    ("latch-lower-state", STATE_HEAD + '''
      "latch.update"() ({
        %v = "latch.read"() {state = @v} : () -> tensor<2xf32>
        %l = arith.constant dense<0.0> : tensor<f32>
        "latch.return"(%l) : (tensor<f32>) -> ()
      }) {sym_name = "u"} : () -> ()''', "unknown state '@v'"),
    ("latch-lower-state", STATE_HEAD + '''
      "latch.update"() ({
        %w = "latch.read"() {state = @w} : () -> tensor<3xf32>
        %l = arith.constant dense<0.0> : tensor<f32>
        "latch.return"(%l) : (tensor<f32>) -> ()
      }) {sym_name = "u"} : () -> ()''', "type tensor<3xf32> != state type"),
    ("latch-lower-optimizers", '''func.func @f(%p: tensor<2xf32>, %lr: tensor<f32>, %b: tensor<2xf32>) -> tensor<2xf32> {
        %0:2 = "latch.sgd"(%p, %p, %lr, %b) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
        return %0#0 : tensor<2xf32> }''', "momentum buffer"),
    ("latch-lower-optimizers", '''func.func @f(%p: tensor<2xf32>, %g: tensor<3xf32>, %lr: tensor<f32>) -> tensor<2xf32> {
        %0 = "latch.sgd"(%p, %g, %lr) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<2xf32>, tensor<3xf32>, tensor<f32>) -> tensor<2xf32>
        return %0 : tensor<2xf32> }''', "share one type"),
    ("latch-lower-optimizers", '''func.func @f(%p: tensor<?xf32>, %lr: tensor<f32>) -> tensor<?xf32> {
        %0 = "latch.sgd"(%p, %p, %lr) {momentum = 0.0 : f64, weight_decay = 0.0 : f64, nesterov = false} : (tensor<?xf32>, tensor<?xf32>, tensor<f32>) -> tensor<?xf32>
        return %0 : tensor<?xf32> }''', "static shape"),
    ("latch-lower-control", '''func.func @f(%n: tensor<i64>, %p: tensor<2xf32>) -> tensor<2xf32> {
        %0 = "latch.every"(%n, %p) ({ "latch.yield"(%p) : (tensor<2xf32>) -> () }) {period = 0 : i64} : (tensor<i64>, tensor<2xf32>) -> tensor<2xf32>
        return %0 : tensor<2xf32> }''', "period must be >= 1"),
    ("latch-lower-schedules", '''func.func @f(%s: tensor<i64>) -> tensor<f32> {
        %0 = "latch.warmup_cosine"(%s) {peak = 1.0 : f64, warmup_steps = 5 : i64, total_steps = 5 : i64, final_ratio = 0.0 : f64} : (tensor<i64>) -> tensor<f32>
        return %0 : tensor<f32> }''', "total_steps"),
])
def test_pass_errors(pass_name, body, msg):
    with pytest.raises(PassError, match=msg) as info:
        _apply(pass_name, "module {\n" + body + "\n}")
    assert info.value.location is not None


def test_pass_registry_names():
    from latch.passes import get_pass
    for name, cls in [("latch-lower-state", "LowerState"), ("latch-lower-schedules", "LowerSchedules"),
                      ("latch-lower-control", "LowerControl"), ("latch-lower-optimizers", "LowerOptimizers")]:
        p = get_pass(name)
        assert p.__name__ == cls and p.name == name and p.summary


def test_emitted_program_passes_latch_verify_and_the_lower_rules_pipeline():
    """The lead's named pipeline (latch-verify first) accepts and lowers what the emitter builds."""
    pipeline = pytest.importorskip("latch.pipeline")
    pytest.importorskip("latch.passes.latch_verify")
    from mlir import ir
    text = optim.build_update_module(BIG_PARAMS, BIG_RULE, ["tensor<2xf32>"], loss_and_grads=None)
    ctx = make_context()
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        pipeline.run_pipeline(m, "builtin.module(latch-lower-rules)")
        assert m.operation.verify()
        names = set(all_op_names(m))
    assert {n.split(".")[0] for n in names} <= UPSTREAM, names


def test_initial_state_layout():
    decls = optim.declare_states([("w", "tensor<2x2xf32>")], optim.every(2, optim.AdamW(1e-3)))
    init = optim.initial_state(decls, {"w": np.ones((2, 2))})
    assert [d.name for d in decls] == ["w", "step", "every.count", "w.grad_acc", "w.exp_avg",
                                       "w.exp_avg_sq"]
    assert init[0].dtype == np.float32 and init[0].sum() == 4 and init[1].dtype == np.int64
    assert all(not v.any() for v in init[1:])
