"""Parse and run pass pipelines that mix upstream MLIR passes, Latch passes and named pipelines.

``builtin.module(latch-verify, canonicalize, func.func(cse), latch-to-ptx{chip=sm_90a})``:
Latch passes (see ``latch.passes.PASSES``) run as Python passes inside the same
``PassManager`` as the upstream ones; named pipelines (``latch.passes.pipelines``) expand in
place; everything else is handed to MLIR's own pipeline parser.
"""
from __future__ import annotations

import dataclasses
import re

from latch.errors import PassError, PipelineError

_ELEMENT = re.compile(r"^([A-Za-z_][\w.\-]*)\s*(\{.*\})?\s*(\(.*\))?$", re.S)


@dataclasses.dataclass(frozen=True)
class Element:
    """One pipeline element: a pass or pipeline name, its options, and a nested pipeline."""
    name: str
    options: dict
    nested: str | None  # text inside the parentheses, for anchors such as func.func(...)
    text: str


def split_top_level(text: str) -> list[str]:
    """Split ``a, b{x=1,y}, c(d, e)`` at commas that are not inside (), {} or quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{ch}' in pass pipeline at character {i}: {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth != 0 or quote:
        raise PipelineError(f"unbalanced brackets or quotes in pass pipeline: {text!r}")
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return [p for p in parts if p]


def parse_options(text: str) -> dict[str, str]:
    """``{a=1 b=x,y flag}`` -> {"a": "1", "b": "x,y", "flag": ""}."""
    body = text.strip()[1:-1].strip()
    out: dict[str, str] = {}
    token, depth = "", 0
    tokens = []
    for ch in body:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch.isspace() and depth == 0:
            if token:
                tokens.append(token)
            token = ""
        else:
            token += ch
    if token:
        tokens.append(token)
    for tok in tokens:
        key, _, value = tok.partition("=")
        out[key] = value
    return out


def parse_element(text: str) -> Element:
    m = _ELEMENT.match(text.strip())
    if not m:
        raise PipelineError(f"cannot parse pass pipeline element {text!r}")
    name, opts, nested = m.groups()
    return Element(name, parse_options(opts) if opts else {}, nested[1:-1] if nested else None,
                   text.strip())


def strip_module_anchor(pipeline: str) -> str:
    """``builtin.module(x, y)`` -> ``x, y``; a bare list is accepted as is."""
    text = pipeline.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        return text[len("builtin.module("):-1]
    if text.startswith("builtin.module"):
        split_top_level(text)  # names unbalanced brackets precisely
        raise PipelineError(f"malformed pass pipeline {pipeline!r}: expected 'builtin.module(...)'")
    return text


def expand(pipeline: str, _depth: int = 0) -> list[tuple[str, object]]:
    """Flatten a module-level pipeline into steps: ("latch", pass) or ("mlir", text)."""
    from latch.passes import PASSES, get_pass
    from latch.passes.pipelines import PIPELINES

    if _depth > 16:
        raise PipelineError("named pipelines nest more than 16 deep (a cycle?)")
    steps: list[tuple[str, object]] = []
    for raw in split_top_level(strip_module_anchor(pipeline)):
        el = parse_element(raw)
        if el.name in PIPELINES:
            if el.nested is not None:
                raise PipelineError(f"pipeline '{el.name}' takes no nested pipeline")
            try:
                parts = PIPELINES[el.name].expand(el.options)
            except KeyError as e:
                raise PipelineError(str(e.args[0])) from None
            steps += expand(", ".join(parts), _depth + 1)
        elif el.name in PASSES:
            if el.nested is not None:
                raise PipelineError(f"'{el.name}' is a module pass; it takes no nested pipeline")
            steps.append(("latch", get_pass(el.name).from_options(el.options)))
        else:
            steps.append(("mlir", el.text))
    return steps


def _python_pass(latch_pass):
    def run(op, pass_):
        try:
            latch_pass.apply(op)
        except PassError as e:
            loc = e.location
            if loc is None:
                from mlir import ir
                loc = op.location if op is not None else ir.Location.unknown()
            loc.emit_error(e.message)
            pass_.signal_pass_failure()
    run.__name__ = latch_pass.name.replace("-", "_")
    return run


def build_pass_manager(pipeline: str, context=None):
    """A ``PassManager`` on builtin.module running ``pipeline`` (raises PipelineError)."""
    from mlir import ir, passmanager

    ctx = context or ir.Context.current
    pm = passmanager.PassManager("builtin.module", context=ctx)
    for kind, step in expand(pipeline):
        if kind == "latch":
            pm.add(_python_pass(step), name=step.name, argument=step.name)
        else:
            try:
                pm.add(step)
            except ValueError as e:
                msg = str(e).strip().splitlines()
                raise PipelineError(f"unknown pass or bad options in {step!r}",
                                    diagnostics=msg) from None
    return pm


def run_pipeline(module, pipeline: str) -> None:
    """Run ``pipeline`` on ``module`` (an ``mlir.ir.Module``) in place; raises MLIRError."""
    pm = build_pass_manager(pipeline, module.context)
    pm.run(module.operation)
