"""Serialise a traced FX graph (with the static shapes/dtypes torch-mlir needs) so that the
torch-mlir import can run in a separate process.

Why a separate process: torch-mlir's bundled LLVM/MLIR and the upstream ``mlir`` bindings
both export thousands of ``STB_GNU_UNIQUE`` symbols (function-local statics of inline LLVM
code), which the dynamic loader unifies process-wide even under ``RTLD_LOCAL``.  Once both
are loaded, upstream's ExecutionEngine cannot resolve external symbols (``JIT session error:
Symbols not found`` with garbled names) — seen with torch-mlir 20261001 + MLIR 22.1.8.
So the process that JITs (upstream ``mlir``) never loads torch-mlir's native libraries.
"""
from __future__ import annotations

import pickle

import torch
import torch.fx
import torch.utils._pytree as pytree


class _NodeRef:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class _TensorMeta:
    __slots__ = ("shape", "stride", "dtype")

    def __init__(self, t: torch.Tensor):
        self.shape = tuple(int(s) for s in t.shape)
        self.stride = tuple(int(s) for s in t.stride())
        self.dtype = t.dtype


def _target_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return "op:" + target._schema.name + "." + (target._overloadname or "default")
    if target is __import__("operator").getitem:
        return "getitem"
    raise TypeError(f"cannot serialise call target {target!r}")


def _resolve_target(name: str):
    if name == "getitem":
        return __import__("operator").getitem
    qual = name[3:]                                  # "aten::add.Tensor"
    ns, rest = qual.split("::")
    op, overload = rest.rsplit(".", 1) if "." in rest else (rest, "default")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def _meta_of(val):
    if isinstance(val, torch.Tensor):
        return _TensorMeta(val)
    if isinstance(val, (tuple, list)):
        return type(val)(_meta_of(v) for v in val)
    if isinstance(val, (int, float, bool)) or val is None:
        return val
    return None


def dumps(gm: torch.fx.GraphModule) -> bytes:
    nodes = []
    consts = {}
    for n in gm.graph.nodes:
        args, kwargs = pytree.tree_map_only(torch.fx.Node, lambda a: _NodeRef(a.name),
                                            (n.args, n.kwargs))
        entry = {"op": n.op, "name": n.name, "args": args, "kwargs": kwargs,
                 "val": _meta_of(n.meta.get("val"))}
        if n.op == "call_function":
            entry["target"] = _target_name(n.target)
        elif n.op == "get_attr":
            entry["target"] = n.target
            consts[n.target] = getattr(gm, n.target).detach().clone()
        else:
            entry["target"] = n.target
        nodes.append(entry)
    return pickle.dumps({"nodes": nodes, "consts": consts})


def loads(data: bytes) -> torch.fx.GraphModule:
    from torch._subclasses.fake_tensor import FakeTensorMode
    d = pickle.loads(data)
    root = torch.nn.Module()
    for k, v in d["consts"].items():
        root.register_buffer(k, v) if "." not in k else None
        setattr(root, k, v)
    g = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def fake(m):
        if isinstance(m, _TensorMeta):
            with mode:
                return torch.empty_strided(m.shape, m.stride, dtype=m.dtype)
        if isinstance(m, (tuple, list)):
            return type(m)(fake(x) for x in m)
        return m

    for e in d["nodes"]:
        args, kwargs = pytree.tree_map_only(_NodeRef, lambda r: env[r.name],
                                            (e["args"], e["kwargs"]))
        if e["op"] == "placeholder":
            n = g.placeholder(e["name"])
        elif e["op"] == "get_attr":
            n = g.get_attr(e["target"])
        elif e["op"] == "call_function":
            n = g.call_function(_resolve_target(e["target"]), tuple(args), dict(kwargs))
        elif e["op"] == "output":
            n = g.output(args[0])
        else:
            raise ValueError(f"unexpected node kind {e['op']}")
        n.name = e["name"]
        if e["val"] is not None:
            n.meta["val"] = fake(e["val"])
        env[e["name"]] = n
    return torch.fx.GraphModule(root, g)
