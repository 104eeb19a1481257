"""Communication between the processes of a data-parallel run (``latch.all_reduce``).

One op, in two forms (as linalg ops have a tensor and a buffer form):

* **tensor form** (the learning program, ``latch.compile(..., distributed=True)``): the
  gradients of one *bucket* in, the same types out: each result is the mean (or sum) of that
  operand over every process of the job;
* **buffer form** (after ``latch-lower-collectives``): one flat buffer that holds the whole
  bucket, reduced in place, no results.  The cuda target turns it into an entry of the
  manifest's ``collectives`` list, which the runtime carries out with
  ``torch.distributed.all_reduce`` (NCCL) on the program's stream.
"""
from __future__ import annotations

from mlir import ir

from .opdef import ANY, I64, STRING, Attr, OpDef, Operand, Result, Rule, Variadicity, \
    VerifyEnv, Violation, attr_value

REDUCTIONS = ("mean", "sum")


def _verify_all_reduce(op, env: VerifyEnv) -> None:
    reduction = attr_value(op.attributes["reduction"])
    if reduction not in REDUCTIONS:
        raise Violation(op, "reduction", f"reduction must be one of {', '.join(REDUCTIONS)}; "
                        f"got '{reduction}'")
    if attr_value(op.attributes["bucket"]) < 0:
        raise Violation(op, "bucket", "bucket must be >= 0")
    operands = [v.type for v in op.operands]
    if not operands:
        raise Violation(op, "form", "needs at least one operand")
    if all(isinstance(t, ir.RankedTensorType) for t in operands):
        got = [r.type for r in op.results]
        if got != operands:
            raise Violation(op, "form", "tensor form: the result types must equal the operand "
                            f"types ({', '.join(map(str, operands))}), got "
                            f"({', '.join(map(str, got))})")
        elements = {str(t.element_type) for t in operands}
        if len(elements) != 1 or not isinstance(operands[0].element_type, ir.FloatType):
            raise Violation(op, "element-type", "the operands of one bucket share one "
                            f"floating-point element type; got {', '.join(sorted(elements))}")
    elif len(operands) == 1 and isinstance(operands[0], ir.MemRefType):
        t = operands[0]
        if len(op.results) or t.rank != 1 or not isinstance(t.element_type, ir.FloatType):
            raise Violation(op, "form", "buffer form: one 1-D floating-point memref (the "
                            f"bucket), no results; got {t} -> {len(op.results)} results")
    else:
        raise Violation(op, "form", "operands must be ranked tensors (tensor form) or one "
                        "memref (buffer form)")


ALL_REDUCE = OpDef(
    "latch.all_reduce", family="distributed", builder="all_reduce",
    summary="average (or sum) a bucket of tensors over the processes of a data-parallel job",
    doc="""Combines values across the processes (ranks) of a data-parallel job that all run
the same update on their own shard of the batch.  `latch.compile(..., distributed=True)`
puts one `latch.all_reduce` per *bucket* of gradients (and the loss in the first bucket)
between the backward pass and the learning rule, so every rank applies the rule to the
gradient of the global batch's mean loss and ends the step with the same parameters.

Tensor form: `%r:n = latch.all_reduce %g1, ..., %gn {bucket, reduction}`; result i has
operand i's type.  Buffer form (after `latch-lower-collectives`): one flat 1-D buffer
holding the bucket's values back to back, reduced in place.  `latch-schedule-collectives`
moves each buffer-form op to just after the last write of its gradients, so the reduction
of early buckets overlaps the rest of the backward pass; on the GPU it becomes a NCCL
all-reduce (`torch.distributed`) recorded into the step's CUDA graph.""",
    operands=(Operand("values", ANY, Variadicity.VARIADIC,
                      "tensors of one floating-point element type, or one 1-D buffer"),),
    results=(Result("reduced", ANY, Variadicity.VARIADIC, "tensor form: the reduced values"),),
    attributes=(
        Attr("bucket", I64, "the bucket's number (the order buckets are reduced in)"),
        Attr("reduction", STRING, "`mean` (average over ranks) or `sum`"),
    ),
    rules=(
        Rule("reduction", "`reduction` is `mean` or `sum`."),
        Rule("bucket", "`bucket` is >= 0."),
        Rule("form", "either ranked tensors with results of the same types, or one 1-D "
                     "floating-point memref and no results."),
        Rule("element-type", "the tensors of one bucket share one floating-point element "
                             "type."),
    ),
    verify=_verify_all_reduce,
)

OPS = (ALL_REDUCE,)
