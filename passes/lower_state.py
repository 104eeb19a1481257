"""latch-lower-state: the training state and each ``latch.update`` -> one ``func.func``.

    func.func @<update>(<state values, declaration order>..., <inputs>...)
        -> (<new state values, declaration order>..., <latch.return operands: loss, ...>)
        attributes {latch.abi = {states = [{name, kind, type}, ...], num_inputs, num_returns}}

``latch.call @f(...)`` (the call to the loss-and-gradients function; a ``func.call`` cannot sit
inside ``latch.update`` while Latch ops are unregistered, because MLIR cannot resolve a symbol
through an unregistered op) becomes ``func.call @f``.  ``latch.read @s`` becomes the state's
block argument, ``latch.write @s %v`` makes ``%v`` the
state's result (a state that is not written passes through unchanged), ``latch.return``
becomes ``func.return``.  The ``latch.state`` declarations are erased.  ``latch.abi`` names the
calling convention so a runtime can map the arguments/results to its state.
"""
from __future__ import annotations

import dataclasses

from latch.errors import PassError
from latch.passes.base import ModulePass
from latch.passes.lower_optimizers import collect, create, ir


def calls_to_func_call(root) -> None:
    """Every ``latch.call`` under ``root`` becomes the ``func.call`` it stands for (legal once
    the call no longer sits inside an op MLIR does not know)."""
    I = ir()
    for op in collect(root, ("latch.call",)):
        with I.InsertionPoint(op), op.location:
            call = create("func.call", list(op.operands), [r.type for r in op.results],
                          {"callee": op.attributes["callee"]})
        for r, n in zip(op.results, call.results):
            r.replace_all_uses_with(n)
        op.erase()


def _str(op, name):
    I = ir()
    return I.StringAttr(op.attributes[name]).value


def _sym(op, name="state"):
    I = ir()
    return I.FlatSymbolRefAttr(op.attributes[name]).value


@dataclasses.dataclass(frozen=True)
class LowerState(ModulePass):
    name = "latch-lower-state"
    summary = "turn latch.state + latch.update into a func.func(state..., inputs...) -> (state'..., loss, ...)"

    def apply(self, module) -> None:
        I = ir()
        mod = getattr(module, "operation", module)
        top = list(mod.regions[0].blocks[0].operations)
        states = [o.operation for o in top if o.operation.name == "latch.state"]
        updates = [o.operation for o in top if o.operation.name == "latch.update"]
        decls = []  # (name, kind, type)
        index = {}
        for s in states:
            name = _str(s, "sym_name")
            if name in index:
                raise PassError(f"duplicate latch.state '{name}'", s.location)
            t = I.TypeAttr(s.attributes["type"]).value
            index[name] = len(decls)
            decls.append((name, _str(s, "kind"), t))
        for u in updates:
            with u.location:
                self._lower_update(u, decls, index)
        for op in collect(mod, ("latch.read", "latch.write")):
            raise PassError(f"'{op.name}' outside a latch.update", op.location)
        for s in states:
            s.erase()

    def _lower_update(self, u, decls, index):
        I = ir()
        if len(u.regions) != 1 or len(u.regions[0].blocks) != 1:
            raise PassError("'latch.update': expected one region with one block", u.location)
        block = u.regions[0].blocks[0]
        ops = list(block.operations)
        if not ops or ops[-1].operation.name != "latch.return":
            raise PassError("'latch.update': body must end with latch.return", u.location)
        ret = ops[-1].operation
        in_types = [a.type for a in block.arguments]
        state_types = [t for _, _, t in decls]
        ret_types = [v.type for v in ret.operands]
        ftype = I.FunctionType.get(state_types + in_types, state_types + ret_types)
        name = _str(u, "sym_name")
        abi = I.DictAttr.get({
            "states": I.ArrayAttr.get([I.DictAttr.get({
                "name": I.StringAttr.get(n), "kind": I.StringAttr.get(k), "type": I.TypeAttr.get(t)})
                for n, k, t in decls]),
            "num_inputs": I.IntegerAttr.get(I.IntegerType.get_signless(64), len(in_types)),
            "num_returns": I.IntegerAttr.get(I.IntegerType.get_signless(64), len(ret_types)),
        })
        with I.InsertionPoint(u):
            func = create("func.func", attrs={
                "sym_name": I.StringAttr.get(name),
                "function_type": I.TypeAttr.get(ftype),
                "latch.abi": abi,
            }, regions=1)
        fblock = func.regions[0].blocks.append(*(state_types + in_types))
        fargs = list(fblock.arguments)
        state_args, input_args = fargs[:len(decls)], fargs[len(decls):]
        # reads -> block args, writes -> results
        written = {}
        for op in collect(u, ("latch.read", "latch.write")):
            sname = _sym(op)
            if sname not in index:
                raise PassError(f"'{op.name}' of unknown state '@{sname}'", op.location)
            i = index[sname]
            if op.name == "latch.read":
                if op.results[0].type != decls[i][2]:
                    raise PassError(f"latch.read of '@{sname}': type {op.results[0].type} "
                                    f"!= state type {decls[i][2]}", op.location)
                op.results[0].replace_all_uses_with(state_args[i])
                op.erase()
            else:
                if op.parent.operation.name != "latch.update":
                    raise PassError(f"latch.write of '@{sname}' must be directly in the "
                                    "latch.update body", op.location)
                if sname in written:
                    raise PassError(f"state '@{sname}' is written twice in one update", op.location)
                v = op.operands[0]
                if v.type != decls[i][2]:
                    raise PassError(f"latch.write of '@{sname}': type {v.type} != state type "
                                    f"{decls[i][2]}", op.location)
                written[sname] = v
                op.erase()
        calls_to_func_call(u)
        for old, new in zip(block.arguments, input_args):
            old.replace_all_uses_with(new)
        results = [written.get(n, state_args[i]) for i, (n, _, _) in enumerate(decls)]
        with I.InsertionPoint(fblock):
            term = create("func.return", results + list(ret.operands))
        for op in list(block.operations)[:-1]:
            op.operation.move_before(term)
        u.erase()
