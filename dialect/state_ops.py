"""Program structure: the training state (``latch.state``), one update (``latch.update``) and
how the update reads, writes and returns (``latch.read``, ``latch.write``, ``latch.return``)."""
from __future__ import annotations

from mlir import ir

from .opdef import (
    ANY, I64_SCALAR, STRING, SYMBOL, TENSOR, TYPE, Attr, OpDef, Operand, Region, Result, Rule,
    Variadicity, VerifyEnv, Violation, attr_value, enclosing, is_float_scalar,
)

STATE_KINDS = ("param", "grad_acc", "moment", "counter")


def collect_symbols(module: ir.Operation, env: VerifyEnv) -> None:
    """Record every ``latch.state`` and ``func.func`` of ``module`` in ``env``.  (Unique names
    are MLIR's job: ``builtin.module`` verifies its symbol table, ``sym_name``s included.)"""
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if "sym_name" not in op.attributes:
            continue
        if op.name == "latch.state":
            env.states[attr_value(op.attributes["sym_name"])] = op
        elif op.name == "func.func":
            env.functions[attr_value(op.attributes["sym_name"])] = op


def _verify_state(op, env: VerifyEnv) -> None:
    kind = attr_value(op.attributes["kind"])
    if kind not in STATE_KINDS:
        raise Violation(op, "kind", f"kind must be one of {', '.join(STATE_KINDS)}; got '{kind}'")
    t = attr_value(op.attributes["type"])
    if not TENSOR.check(t):
        raise Violation(op, "type", f"type must be a ranked tensor type, got {t}")
    if kind == "counter" and not I64_SCALAR.check(t):
        raise Violation(op, "counter-type", f"a counter must be tensor<i64>, got {t}")


def _state_of(op, env: VerifyEnv) -> ir.Operation:
    name = attr_value(op.attributes["state"])
    state = env.states.get(name)
    if state is None:
        raise Violation(op, "symbol", f"'@{name}' does not name a latch.state")
    return state


def _in_update(op):
    update = enclosing(op, "latch.update")
    if update is None:
        raise Violation(op, "in-update", "must be inside a latch.update")
    return update


def _verify_read(op, env: VerifyEnv) -> None:
    _in_update(op)
    state = _state_of(op, env)
    want, got = attr_value(state.attributes["type"]), op.results[0].type
    if want != got:
        raise Violation(op, "type", f"result type {got} differs from the state's type {want}")


def _verify_write(op, env: VerifyEnv) -> None:
    update = _in_update(op)
    state = _state_of(op, env)
    want, got = attr_value(state.attributes["type"]), op.operands[0].type
    if want != got:
        raise Violation(op, "type", f"operand type {got} differs from the state's type {want}")
    name = attr_value(op.attributes["state"])
    key = (update, name)
    if key in env.writes:
        raise Violation(op, "one-write", f"second write of state '@{name}' in this update")
    env.writes[key] = op


def _fmt(types) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def _verify_call(op, env: VerifyEnv) -> None:
    name = attr_value(op.attributes["callee"])
    func = env.functions.get(name)
    if func is None:
        raise Violation(op, "callee", f"'@{name}' does not name a func.func of the module")
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    for what, got, want in (("operand", [v.type for v in op.operands], list(ftype.inputs)),
                            ("result", [r.type for r in op.results], list(ftype.results))):
        if got != want:
            raise Violation(op, "signature", f"{what} types {_fmt(got)} differ from those of "
                            f"@{name}: {_fmt(want)}")


def _verify_update(op, env: VerifyEnv) -> None:
    for i, arg in enumerate(op.regions[0].blocks[0].arguments):
        if not TENSOR.check(arg.type):
            raise Violation(op, "inputs", f"block argument #{i} must be a ranked tensor, "
                            f"got {arg.type}")


def _verify_return(op, env: VerifyEnv) -> None:
    if len(op.operands) == 0 or not is_float_scalar(op.operands[0].type):
        got = op.operands[0].type if len(op.operands) else "no operands"
        raise Violation(op, "loss", f"first operand must be the loss, a rank-0 float tensor; "
                        f"got {got}")


STATE = OpDef(
    "latch.state", family="program structure", builder="state",
    summary="declares one persistent tensor of the training state",
    doc="""Declares one persistent tensor of the training state at module level: a parameter,
a gradient accumulator, an optimizer moment or a counter.  Its value survives from one update
to the next; inside an update it is read with `latch.read` and replaced with `latch.write`.
States start at zero unless the runtime initialises them (parameters from the model).""",
    attributes=(
        Attr("sym_name", STRING, "the state's name (a symbol of the module)"),
        Attr("type", TYPE, "its type, a ranked tensor; counters are `tensor<i64>`"),
        Attr("kind", STRING, "one of `param`, `grad_acc`, `moment`, `counter`"),
    ),
    parents=("builtin.module",),
    rules=(
        Rule("kind", "`kind` is one of `param`, `grad_acc`, `moment`, `counter`."),
        Rule("type", "`type` is a ranked tensor type."),
        Rule("counter-type", "a `counter` state is `tensor<i64>`."),
        Rule("unique-symbol", "symbol names are unique among the module's states and updates "
                              "(checked by MLIR's own verifier of `builtin.module`: "
                              "\"redefinition of symbol named 'w'\").", by_mlir=True),
    ),
    verify=_verify_state,
)

UPDATE = OpDef(
    "latch.update", family="program structure", builder="update",
    summary="one complete training update",
    doc="""One complete training update (forward, backward, optimizer, schedule) for one
microbatch.  The block arguments are the microbatch inputs.  The body reads states, computes,
writes states and ends with `latch.return` whose first operand is the loss.  All reads see the
values at the start of the update; all writes take effect at its end.""",
    attributes=(Attr("sym_name", STRING, "the update's name (a symbol of the module)"),),
    regions=(Region("body", "the microbatch inputs (ranked tensors)", "latch.return"),),
    parents=("builtin.module",),
    rules=(Rule("inputs", "the block arguments are ranked tensors."),),
    verify=_verify_update,
)

READ = OpDef(
    "latch.read", family="program structure", builder="read",
    summary="the value of a state at the start of the update",
    doc="""The current value of a state: its value at the start of the enclosing update, even if
the update also writes it.""",
    results=(Result("value", TENSOR, doc="the state's value; its type is the state's type"),),
    attributes=(Attr("state", SYMBOL, "the `latch.state` read"),),
    rules=(
        Rule("in-update", "it is nested in a `latch.update`."),
        Rule("symbol", "`state` names a `latch.state` of the module."),
        Rule("type", "the result type equals the state's type."),
    ),
    verify=_verify_read,
)

WRITE = OpDef(
    "latch.write", family="program structure", builder="write",
    summary="the value of a state after the update",
    doc="""Sets the value the state has after the enclosing update.  A state is written at most
once per update; a state that is not written keeps its value.""",
    operands=(Operand("value", TENSOR, doc="the new value; its type is the state's type"),),
    attributes=(Attr("state", SYMBOL, "the `latch.state` written"),),
    rules=(
        Rule("in-update", "it is nested in a `latch.update`."),
        Rule("symbol", "`state` names a `latch.state` of the module."),
        Rule("type", "the operand type equals the state's type."),
        Rule("one-write", "a state is written at most once per `latch.update`."),
    ),
    verify=_verify_write,
)

RETURN = OpDef(
    "latch.return", family="program structure", builder="return_",
    summary="terminator of latch.update: the loss, then any other outputs",
    doc="""Ends a `latch.update`.  Its operands are the update's outputs: the loss first (a
rank-0 float tensor, normally `tensor<f32>`), then anything else the program reports.""",
    operands=(Operand("values", TENSOR, Variadicity.VARIADIC, "the loss, then other outputs"),),
    parents=("latch.update",),
    rules=(Rule("loss", "it has at least one operand and the first (the loss) is a rank-0 "
                        "float tensor."),),
    verify=_verify_return,
)

CALL = OpDef(
    "latch.call", family="program structure", builder="call",
    summary="call a func.func of the module from inside Latch regions",
    doc="""Calls the `func.func` named `callee` (typically the loss-and-gradients function) and
returns its results.  It exists because `func.call` cannot sit inside a `latch.update`: the
Latch ops are unregistered operations (see above), and MLIR does not resolve symbols through
an unregistered op with a region.  `latch-lower-state` turns it into `func.call`.""",
    operands=(Operand("args", ANY, Variadicity.VARIADIC),),
    results=(Result("results", ANY, Variadicity.VARIADIC),),
    attributes=(Attr("callee", SYMBOL, "the `func.func` called"),),
    rules=(
        Rule("callee", "`callee` names a `func.func` of the module."),
        Rule("signature", "operand and result types equal the function's input and result "
                          "types."),
    ),
    verify=_verify_call,
)

OPS = (STATE, UPDATE, READ, WRITE, RETURN, CALL)
