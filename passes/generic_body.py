"""Cloning the body of a ``linalg.generic`` outside it (shared by the passes that turn a
generic into hand-built loops: latch-wrap-host-compute's block reductions and
latch-form-contraction-kernels' operand loads)."""
from __future__ import annotations


def clone_body_ops(ops, mapping: dict, dims) -> None:
    """Clone ``ops`` (body ops of a generic, in order) at the current insertion point.

    ``mapping`` maps the body's values that are already available (block arguments: the
    loaded input elements; outside values) to their replacements and receives every cloned
    result; ``linalg.index d`` becomes ``dims[d]`` (the loop index values)."""
    from mlir import ir

    for op in ops:
        if op.name == "linalg.index":
            mapping[op.results[0]] = dims[ir.IntegerAttr(op.attributes["dim"]).value]
            continue
        new = op.clone()
        for i, operand in enumerate(list(new.operands)):
            if operand in mapping:
                new.operands[i] = mapping[operand]
        for old_r, new_r in zip(op.results, new.results):
            mapping[old_r] = new_r
