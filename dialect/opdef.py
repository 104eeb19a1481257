"""The declarative description of a Latch op, and the vocabulary it is written in.

One :class:`OpDef` per op says everything a reader or a tool needs: operands (with their type
constraint and variadicity), results, attributes (with their kind), regions, the verifier
rules in words, the semantic checks as a function, and the builder that emits it.  The same
description drives the verifier (``latch-verify``), the reference doc (``docgen``) and the
IRDL rendering (``irdl_bridge``).
"""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Callable

from mlir import ir

from latch.errors import PassError


class Variadicity(enum.Enum):
    SINGLE = "single"
    OPTIONAL = "optional"
    VARIADIC = "variadic"


# ---------------------------------------------------------------------------- type constraints
@dataclasses.dataclass(frozen=True)
class TypeConstraint:
    """A predicate on an ``ir.Type`` with the words used for it in docs and messages."""
    text: str
    check: Callable[[ir.Type], bool] = dataclasses.field(compare=False, repr=False)
    irdl_base: str | None = None     # the IRDL base ("!builtin.tensor"), None for "any type"


def _ranked(t: ir.Type) -> ir.RankedTensorType | None:
    return t if isinstance(t, ir.RankedTensorType) else None


def _is_float(t: ir.Type) -> bool:
    return isinstance(t, ir.FloatType)


def _scalar_of(elem: str) -> Callable[[ir.Type], bool]:
    return lambda t: str(t) == f"tensor<{elem}>"


ANY = TypeConstraint("any type", lambda t: True)
TENSOR = TypeConstraint("ranked tensor", lambda t: _ranked(t) is not None, "!builtin.tensor")
FLOAT_TENSOR = TypeConstraint(
    "ranked tensor of floats",
    lambda t: (r := _ranked(t)) is not None and _is_float(r.element_type), "!builtin.tensor")
F32_SCALAR = TypeConstraint("tensor<f32>", _scalar_of("f32"), "!builtin.tensor")
I64_SCALAR = TypeConstraint("tensor<i64>", _scalar_of("i64"), "!builtin.tensor")


def is_float_scalar(t: ir.Type) -> bool:
    r = _ranked(t)
    return r is not None and r.rank == 0 and _is_float(r.element_type)


# ---------------------------------------------------------------------------- attribute kinds
@dataclasses.dataclass(frozen=True)
class AttrKind:
    """What an attribute must be: the words for it, a check, and its IRDL base."""
    text: str
    check: Callable[[ir.Attribute], bool] = dataclasses.field(compare=False, repr=False)
    irdl_base: str


def _float_attr_f64(a) -> bool:
    return isinstance(a, ir.FloatAttr) and isinstance(a.type, ir.F64Type)


def _int_attr_i64(a) -> bool:
    return isinstance(a, ir.IntegerAttr) and str(a.type) == "i64"


def _bool_attr(a) -> bool:
    return isinstance(a, ir.BoolAttr) or (isinstance(a, ir.IntegerAttr) and str(a.type) == "i1")


F64 = AttrKind("f64 FloatAttr", _float_attr_f64, "#builtin.float")
I64 = AttrKind("i64 IntegerAttr", _int_attr_i64, "#builtin.integer")
I1 = AttrKind("i1 IntegerAttr (true/false)", _bool_attr, "#builtin.integer")
STRING = AttrKind("StringAttr", lambda a: isinstance(a, ir.StringAttr), "#builtin.string")
SYMBOL = AttrKind("FlatSymbolRefAttr", lambda a: isinstance(a, ir.FlatSymbolRefAttr),
                  "#builtin.symbol_ref")
TYPE = AttrKind("TypeAttr", lambda a: isinstance(a, ir.TypeAttr), "#builtin.type")


def attr_value(a: ir.Attribute):
    """The Python value of a checked attribute (float, int, bool, str or ir.Type)."""
    if isinstance(a, ir.BoolAttr):
        return bool(a.value)
    if isinstance(a, ir.FloatAttr):
        return a.value
    if isinstance(a, ir.IntegerAttr):
        return bool(a.value) if str(a.type) == "i1" else a.value
    if isinstance(a, (ir.StringAttr, ir.FlatSymbolRefAttr)):
        return a.value
    if isinstance(a, ir.TypeAttr):
        return a.value
    raise TypeError(f"no Python value for attribute {a}")


# ---------------------------------------------------------------------------- the description
@dataclasses.dataclass(frozen=True)
class Operand:
    name: str
    type: TypeConstraint = TENSOR
    variadicity: Variadicity = Variadicity.SINGLE
    doc: str = ""


Result = Operand


@dataclasses.dataclass(frozen=True)
class Attr:
    name: str
    kind: AttrKind
    doc: str = ""


@dataclasses.dataclass(frozen=True)
class Region:
    name: str
    block_args: str           # in words; checked by the op's ``verify``
    terminator: str           # the op that must end its single block
    no_block_args: bool = False


@dataclasses.dataclass(frozen=True)
class Rule:
    """One verifier rule: a stable id (``Violation.rule``) and its statement for the doc.
    ``by_mlir``: MLIR's own verifier already enforces it (latch-verify runs that first)."""
    id: str
    text: str
    by_mlir: bool = False


#: The rules every op is held to, checked by latch-verify from its OpDef (ids as in
#: ``Violation.rule``).
GENERIC_RULES = {
    "unknown-op": "a `latch.*` op is one of the ops of this reference.",
    "unregistered-op": "an op of another dialect is registered (its dialect is loaded).",
    "unregistered-type": "no operand, result, block argument or attribute uses a type or "
                         "attribute of a dialect that is not loaded (`!foo.bar`, `#foo.baz`).",
    "parent": "ops with a fixed parent (`latch.state`, `latch.update`: the module; "
              "`latch.return`: `latch.update`; `latch.yield`: `latch.every`/`loop`/`scan`) "
              "are directly inside it.",
    "operand-count": "the number of operands fits the operand groups (single, optional, "
                     "variadic).",
    "operand-type": "each operand satisfies its group's type constraint.",
    "result-count": "the number of results fits the result groups.",
    "result-type": "each result satisfies its group's type constraint.",
    "attribute-missing": "every listed attribute is present (others are allowed).",
    "attribute-kind": "every listed attribute has its kind (f64 FloatAttr, i64 IntegerAttr, ...).",
    "region-count": "the op has exactly the listed regions.",
    "region-blocks": "each region has exactly one block.",
    "region-args": "a region documented without block arguments has none.",
    "terminator": "each region's block ends with its terminator (`latch.return`/`latch.yield`).",
    "dominance": "inside Latch regions, every value is defined before it is used.",
}


class Violation(PassError):
    """A broken verifier rule, located at the offending op.  ``rule`` is the :class:`Rule` id."""

    def __init__(self, op, rule: str, message: str):
        op = op.operation if hasattr(op, "operation") else op
        self.rule = rule
        super().__init__(f"'{op.name}' op {message}", location=op.location)


Verifier = Callable[["ir.Operation", "object"], None]


@dataclasses.dataclass(frozen=True)
class OpDef:
    name: str                                  # "latch.adamw"
    summary: str
    doc: str                                   # semantics, in Markdown
    family: str                                # "program structure", "learning rules", ...
    operands: tuple[Operand, ...] = ()
    results: tuple[Result, ...] = ()
    attributes: tuple[Attr, ...] = ()
    regions: tuple[Region, ...] = ()
    parents: tuple[str, ...] = ()              # allowed parent op names; () = anywhere
    rules: tuple[Rule, ...] = ()               # op-specific rules checked by ``verify``
    verify: Verifier | None = None
    builder: str = ""                          # name of its function in latch.dialect.builders

    def __post_init__(self):
        for group in (self.operands, self.results):
            if sum(o.variadicity is not Variadicity.SINGLE for o in group) > 1:
                raise ValueError(f"{self.name}: at most one optional/variadic operand and result "
                                 "group (otherwise segment sizes would be needed)")

    @property
    def mnemonic(self) -> str:
        return self.name.split(".", 1)[1]

    def attr(self, name: str) -> Attr:
        return next(a for a in self.attributes if a.name == name)


def segments(defs: tuple[Operand, ...], count: int) -> list[tuple[Operand, int, int]] | None:
    """Split ``count`` values over ``defs``: ``(def, start, size)`` per def, or None if impossible."""
    singles = sum(d.variadicity is Variadicity.SINGLE for d in defs)
    rest = count - singles
    flexible = [d for d in defs if d.variadicity is not Variadicity.SINGLE]
    if rest < 0 or (not flexible and rest != 0):
        return None
    if flexible and flexible[0].variadicity is Variadicity.OPTIONAL and rest > 1:
        return None
    out, start = [], 0
    for d in defs:
        size = 1 if d.variadicity is Variadicity.SINGLE else rest
        out.append((d, start, size))
        start += size
    return out


@dataclasses.dataclass
class VerifyEnv:
    """What the op checks may consult: the module's states and functions by name, and the
    writes seen so far per enclosing ``latch.update`` (keyed by the update op and state name)."""
    states: dict[str, "ir.Operation"] = dataclasses.field(default_factory=dict)
    functions: dict[str, "ir.Operation"] = dataclasses.field(default_factory=dict)
    writes: dict[tuple[object, str], "ir.Operation"] = dataclasses.field(default_factory=dict)


def enclosing(op, name: str):
    """The nearest ancestor op called ``name`` (or None)."""
    parent = op.operation.parent
    while parent is not None:
        if parent.name == name:
            return parent.operation
        parent = parent.parent
    return None


def float_attr(op, name: str) -> float:
    return attr_value(op.operation.attributes[name])


def check_finite(op, names: tuple[str, ...], rule: str = "finite") -> None:
    for n in names:
        x = float_attr(op, n)
        if not math.isfinite(x):
            raise Violation(op, rule, f"{n} must be finite, got {x}")
