"""What every Latch pass is: a small frozen dataclass with a kebab-case ``name``.

A pass's options are its dataclass fields; ``latch-foo{max-norm=1.0 period=4}`` sets the fields
``max_norm`` and ``period`` (the value is converted to the field's annotated type).  ``apply``
receives the ``builtin.module`` operation and changes it in place; to reject its input it
raises :class:`latch.errors.PassError` with the location of the offending op, which the pass
manager turns into a located ``error:`` diagnostic.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from latch.errors import PipelineError


@dataclasses.dataclass(frozen=True)
class ModulePass:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def apply(self, module) -> None:  # module: mlir.ir.Operation (builtin.module)
        raise NotImplementedError

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "ModulePass":
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, raw in options.items():
            field = fields.get(key.replace("-", "_"))
            if field is None:
                valid = ", ".join(f.name.replace("_", "-") for f in fields.values()) or "none"
                raise PipelineError(f"pass '{cls.name}' has no option '{key}' (options: {valid})")
            kwargs[field.name] = _convert(cls.name, key, raw, field.type)
        return cls(**kwargs)


def function_definitions(module):
    """The ``func.func`` ops of ``module`` that have a body (declarations skipped)."""
    for op in module.regions[0].blocks[0].operations:
        op = operation(op)
        if op.name == "func.func" and op.regions and op.regions[0].blocks:
            yield op


def symbol_names(module) -> set:
    """The ``sym_name``s of ``module``'s top-level ops (to pick names not yet taken)."""
    from mlir import ir

    return {ir.StringAttr(operation(o).attributes["sym_name"]).value
            for o in module.regions[0].blocks[0].operations
            if "sym_name" in operation(o).attributes}


def fresh_symbol(prefix: str, taken: set) -> str:
    """The first ``<prefix>N`` (N = 0, 1, ...) not in ``taken``; added to it."""
    n = 0
    while f"{prefix}{n}" in taken:
        n += 1
    taken.add(f"{prefix}{n}")
    return f"{prefix}{n}"


def operation(o):
    """The ``Operation`` of an op view (or the operation itself): Python wrappers of one op
    are not identical objects, their ``.operation`` compares and exposes the generic API."""
    return o.operation if hasattr(o, "operation") else o


def nested_operations(op):
    """Every op nested in ``op`` (not ``op`` itself), each before the ops nested in it."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = operation(inner)
                yield inner
                yield from nested_operations(inner)


def defining_op(v):
    """The op that defines the value ``v`` (None for a block argument)."""
    owner = v.owner
    if hasattr(owner, "arguments"):
        return None
    return operation(owner)


def has_parallel_work(op) -> bool:
    """Whether a region of ``op`` (at any depth) holds a ``linalg`` op."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = operation(inner)
                if inner.name.startswith("linalg.") or has_parallel_work(inner):
                    return True
    return False


def _constant_value(v, kind):
    """The value of ``v`` when an ``arith.constant`` defines it with an attribute of
    ``kind`` (``ir.IntegerAttr``, ``ir.FloatAttr``), else None."""
    o = defining_op(v)
    if o is None or o.name != "arith.constant":
        return None
    a = o.attributes["value"]
    return kind(a).value if isinstance(a, kind) else None


def int_constant(v):
    """The integer value of ``v`` when an ``arith.constant`` defines it, else None."""
    from mlir import ir

    return _constant_value(v, ir.IntegerAttr)


def float_constant(v):
    """The float value of ``v`` when an ``arith.constant`` defines it, else None."""
    from mlir import ir

    return _constant_value(v, ir.FloatAttr)


def element_bits(t) -> int:
    """Width in bits of an integer or float type (32 for anything else: index)."""
    from mlir import ir

    for cls in (ir.IntegerType, ir.FloatType):
        try:
            return cls(t).width
        except (ValueError, TypeError, AttributeError):
            continue
    return 32


def _convert(pass_name: str, key: str, raw: str, annotation) -> object:
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    try:
        if kind == "bool":
            if raw.lower() in ("1", "true", ""):
                return True
            if raw.lower() in ("0", "false"):
                return False
            raise ValueError(raw)
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind.startswith("tuple"):
            return tuple(int(x) for x in raw.split(",") if x)
        return raw
    except ValueError:
        raise PipelineError(f"pass '{pass_name}': option '{key}' expects {kind}, got '{raw}'") from None


def chip_at_least(chip: str, features: str, sm: int, ptx: int) -> bool:
    """Whether ``chip`` (``sm_90``, ``sm_90a``, ...) is at least ``sm_<sm>`` and the PTX
    ``features`` (``+ptx81``, ...) at least PTX ``ptx`` (8.1 is 81)."""
    import re

    have_sm = re.fullmatch(r"sm_(\d+)a?", chip)
    have_ptx = re.search(r"\+ptx(\d+)", features)
    return bool(have_sm and have_ptx) and int(have_sm.group(1)) >= sm and \
        int(have_ptx.group(1)) >= ptx
