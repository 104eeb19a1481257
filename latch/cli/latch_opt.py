"""latch-opt: run Latch and upstream MLIR passes on ``.mlir`` files, like mlir-opt.

    latch-opt FILE [-o OUT] [--pass-pipeline='builtin.module(...)'] [--emit=mlir|ptx]
              [--split-input-file] [--verify-diagnostics] [--list-passes]

The Latch dialect is always loaded and ``latch-verify`` always runs first.  Malformed input
gives located ``file:line:col: error:`` diagnostics and exit status 1, never a traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys

from latch.diagnostics import Diag, check_expected, collect_expected, from_location, from_mlir
from latch.errors import LatchError, PassError

SPLIT_MARKER = "// -----"
MAX_NESTING = 512
MAX_DIGITS = 1000   # decimal literals: parsing is superlinear, and asserts on huge floats
BYTECODE_MAGIC = b"ML\xefR"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="latch-opt", description=__doc__.splitlines()[0])
    p.add_argument("input", nargs="?", default="-", help="input .mlir file ('-' for stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    p.add_argument("--pass-pipeline", default="",
                   help="e.g. 'builtin.module(latch-lower-rules, canonicalize)'")
    p.add_argument("--emit", choices=["mlir", "ptx"], default="mlir",
                   help="what to print: the module (default) or the PTX of its gpu.binary ops")
    p.add_argument("--split-input-file", action="store_true",
                   help=f"process each chunk between '{SPLIT_MARKER}' lines separately")
    p.add_argument("--verify-diagnostics", action="store_true",
                   help="check diagnostics against expected-error/warning/note comments")
    p.add_argument("--mlir-print-op-generic", action="store_true",
                   help="print every op in generic form")
    p.add_argument("--mlir-print-ir-after-all", action="store_true",
                   help="print the IR after every pass (to stderr)")
    p.add_argument("--list-passes", action="store_true",
                   help="list Latch passes and named pipelines, then exit")
    return p


def _list_passes(out) -> None:
    from latch.passes import available_passes
    from latch.passes.pipelines import PIPELINES

    print("Latch passes:", file=out)
    for name, summary in available_passes().items():
        print(f"  {name:28s} {summary}", file=out)
    print("Named pipelines (stages):", file=out)
    for name, pipe in PIPELINES.items():
        opts = " ".join(f"{k}={v}" for k, v in pipe.defaults)
        print(f"  {name:28s} {pipe.summary}" + (f" [options: {opts}]" if opts else ""), file=out)
    print("Every upstream MLIR pass (as in mlir-opt) can be used in the same pipeline.", file=out)


def _read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as f:
        return f.read()


def _decode(data: bytes, filename: str) -> tuple[str | None, list[Diag]]:
    def at(pos: int, message: str) -> Diag:
        before = data[:pos]
        line = before.count(b"\n") + 1
        col = pos - (before.rfind(b"\n") + 1) + 1
        return Diag("error", filename, line, col, message)

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, [at(e.start, "input is neither UTF-8 text nor MLIR bytecode "
                                  f"(byte 0x{data[e.start]:02x})")]
    nul = data.find(b"\0")
    if nul >= 0:   # MLIR's lexer would skip it silently, or stop reading there
        return None, [at(nul, "input contains a NUL byte; it is neither MLIR text nor bytecode")]
    return text, []


# The scan behind _nesting_problem: what makes MLIR's recursive-descent parser recurse
# (brackets, chains of unary minus in affine expressions) or run for minutes / assert
# (decimal literals of thousands of digits), outside strings and comments.
_SCAN = re.compile(r"""
    "(?:[^"\\\n]|\\.)*"?     # a string literal (MLIR strings cannot span lines)
  | //[^\n]*                 # a comment
  | ->|>=|<=                  # arrows and comparisons: no brackets
  | (?P<open>[({\[<])
  | (?P<close>[)}\]>])
  | (?P<minus>-)
  | (?P<digits>\d{%d,})
""" % (MAX_DIGITS + 1), re.X)


def _nesting_problem(text: str, first_line: int, filename: str) -> Diag | None:
    """A located error if ``text`` would overflow the parser's stack or stall it."""
    def diag(pos: int, message: str) -> Diag:
        line = first_line + text.count("\n", 0, pos)
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        return Diag("error", filename, line, col, message)

    depth, minuses, last = 0, 0, 0
    for m in _SCAN.finditer(text):
        kind = m.lastgroup
        if kind != "minus" and not m.group().startswith("//") or text[last:m.start()].strip():
            minuses = 0
        last = m.end()
        if kind == "open":
            depth += 1
            if depth > MAX_NESTING:
                return diag(m.start(), f"nesting deeper than {MAX_NESTING} levels; refusing to parse")
        elif kind == "close":
            depth = max(0, depth - 1)
        elif kind == "minus":
            minuses += 1
            if minuses > MAX_NESTING:
                return diag(m.start(), f"nesting deeper than {MAX_NESTING} levels (a chain of "
                                       f"unary minus); refusing to parse")
        elif kind == "digits":
            return diag(m.start(), f"numeric literal longer than {MAX_DIGITS} digits; "
                                   "refusing to parse")
    return None


def _chunks(text: str, split: bool) -> list[tuple[int, str]]:
    """(first line number, chunk text) pairs."""
    if not split:
        return [(1, text)]
    chunks, current, start = [], [], 1
    for i, line in enumerate(text.splitlines(keepends=True), start=1):
        if line.strip() == SPLIT_MARKER:
            chunks.append((start, "".join(current)))
            current, start = [], i + 1
        else:
            current.append(line)
    chunks.append((start, "".join(current)))
    return chunks


def _ptx_of(module) -> str:
    from mlir.dialects import gpu

    texts = []
    for op in module.body.operations:
        if op.operation.name != "gpu.binary":
            continue
        name = op.operation.attributes["sym_name"]
        for obj in op.operation.attributes["objects"]:
            data = gpu.ObjectAttr(obj).object
            texts.append(f"// gpu.binary {name}\n" + bytes(data).decode("utf-8", "replace"))
    return "\n".join(texts)


class _Collector:
    def __init__(self, filename: str):
        self.filename = filename
        self.diags: list[Diag] = []

    def __call__(self, diag) -> bool:
        self.diags.append(from_mlir(diag, self.filename))
        return True


def process_chunk(chunk: str | bytes, first_line: int, args, filename: str):
    """Parse, verify and transform one chunk.  Returns (output text or None, diagnostics)."""
    from mlir import ir

    import latch.dialect
    from latch.pipeline import build_pass_manager

    collector = _Collector(filename)
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        ctx.attach_diagnostic_handler(collector)
        if isinstance(chunk, str):
            problem = _nesting_problem(chunk, first_line, filename)
            if problem:
                return None, [problem]
            source = "\n" * (first_line - 1) + chunk   # keep the file's line numbers
        else:
            source = chunk
        try:
            module = ir.Module.parse(source)
        except ir.MLIRError as e:
            diags = collector.diags + [from_mlir(d, filename) for d in e.error_diagnostics]
            if not isinstance(chunk, str):   # bytecode has no lines: point at its start
                diags = [d if d.line else dataclasses.replace(d, line=1, col=1) for d in diags]
            return None, diags
        try:
            from latch.passes.latch_verify import verify_module
            verify_module(module.operation)
        except PassError as e:
            return None, collector.diags + [from_location("error", e.location, e.message, filename)]
        if args.pass_pipeline:
            try:
                pm = build_pass_manager(args.pass_pipeline, ctx)
                if args.mlir_print_ir_after_all:
                    pm.enable_ir_printing()
                pm.run(module.operation)
            except ir.MLIRError as e:
                diags = collector.diags + [from_mlir(d, filename) for d in e.error_diagnostics]
                if not any(d.severity == "error" for d in diags):   # a pass failed silently
                    diags.append(Diag("error", filename, 0, 0, f"{e.message} "
                                      f"{args.pass_pipeline!r}; no pass reported why"))
                return None, diags
            except LatchError as e:   # a malformed pipeline: no location in the input
                why = [re.sub(r"^.*?:\d+:\d+: error: ", "", d.strip())
                       for d in e.diagnostics if d.strip()][:1]   # MLIR's reason, if any
                notes = tuple(Diag("note", filename, 0, 0, w) for w in why)
                return None, collector.diags + [Diag("error", filename, 0, 0, e.message, notes)]
        if collector.diags and any(d.severity == "error" for d in collector.diags):
            return None, collector.diags
        if args.emit == "ptx":
            ptx = _ptx_of(module)
            if not ptx:
                return None, [Diag("error", filename, 0, 0, "--emit=ptx: the module has no "
                                   "gpu.binary; run a pipeline that ends in one, e.g. "
                                   "--pass-pipeline='builtin.module(latch-to-ptx)'")]
            return ptx, collector.diags
        text = module.operation.get_asm(print_generic_op_form=args.mlir_print_op_generic,
                                        assume_verified=True)
        return text, collector.diags


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = sys.stdout if args.output == "-" else None
    if args.list_passes:
        _list_passes(sys.stdout)
        return 0
    filename = "<stdin>" if args.input == "-" else args.input
    try:
        data = _read_input(args.input)
    except OSError as e:
        print(f"latch-opt: error: cannot read {filename}: {e.strerror}", file=sys.stderr)
        return 1
    if data.startswith(BYTECODE_MAGIC):
        chunks: list[tuple[int, str | bytes]] = [(1, data)]
        expected = []
    else:
        text, diags = _decode(data, filename)
        if text is None:
            for d in diags:
                print(d.render(), file=sys.stderr)
            return 1
        chunks = _chunks(text, args.split_input_file)
        expected = collect_expected(text, 1) if args.verify_diagnostics else []

    outputs, all_diags, failed = [], [], False
    for first_line, chunk in chunks:
        result, diags = process_chunk(chunk, first_line, args, filename)
        all_diags += diags
        if result is None:
            failed = True
        else:
            outputs.append(result)

    if args.verify_diagnostics:
        problems = check_expected(expected, all_diags, filename)
        for p in problems:
            print(p, file=sys.stderr)
        status = 1 if problems else 0
    else:
        for d in all_diags:
            print(d.render(), file=sys.stderr)
        status = 1 if failed else 0
    if outputs and (status == 0 or not args.verify_diagnostics):
        joined = ("\n" + SPLIT_MARKER + "\n").join(o.rstrip("\n") for o in outputs) + "\n"
        if out is None:
            with open(args.output, "w") as f:
                f.write(joined)
        else:
            out.write(joined)
    return status


def main() -> None:
    try:
        status = run()
    except KeyboardInterrupt:
        status = 130
    except Exception as e:  # noqa: BLE001 - a compiler bug must not print a traceback
        if os.environ.get("LATCH_DEBUG"):
            raise
        print(f"latch-opt: internal error: {type(e).__name__}: {e} "
              "(set LATCH_DEBUG=1 for a traceback; please report it)", file=sys.stderr)
        status = 1
    sys.stdout.flush()
    sys.exit(status)


if __name__ == "__main__":
    main()
