"""MLIR diagnostics as located ``file:line:col: error: message`` lines, and the
``--verify-diagnostics`` checker (``// expected-error @+1 {{message}}``) used by latch-opt."""
from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Diag:
    severity: str          # "error" | "warning" | "note" | "remark"
    file: str
    line: int              # 0 when unknown
    col: int
    message: str
    notes: tuple["Diag", ...] = ()

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}: " if self.line else f"{self.file}: "
        text = f"{where}{self.severity}: {self.message}"
        for note in self.notes:
            text += "\n" + note.render()
        return text


def _file_location(loc):
    """Unwrap name/callsite/fused locations to the first file location (or None)."""
    seen = 0
    while loc is not None and seen < 32:
        seen += 1
        if loc.is_a_file():
            return loc
        if loc.is_a_name():
            loc = loc.child_loc
        elif loc.is_a_callsite():
            loc = loc.callee
        elif loc.is_a_fused():
            subs = list(loc.locations)
            loc = subs[0] if subs else None
        else:
            return None
    return None


_SEVERITY = {"DiagnosticSeverity.ERROR": "error", "DiagnosticSeverity.WARNING": "warning",
             "DiagnosticSeverity.NOTE": "note", "DiagnosticSeverity.REMARK": "remark"}


def from_mlir(diag, filename: str) -> Diag:
    """Convert an ``mlir.ir.Diagnostic`` or ``DiagnosticInfo`` into a :class:`Diag`."""
    loc = _file_location(diag.location)
    sev = _SEVERITY.get(str(diag.severity), str(diag.severity).split(".")[-1].lower())
    notes = tuple(from_mlir(n, filename) for n in getattr(diag, "notes", ()) or ())
    if loc is None:
        return Diag(sev, filename, 0, 0, diag.message, notes)
    file = loc.filename if loc.filename not in ("-", "", "<stdin>") else filename
    return Diag(sev, file, loc.start_line, loc.start_col, diag.message, notes)


def from_location(severity: str, loc, message: str, filename: str) -> Diag:
    floc = _file_location(loc) if loc is not None else None
    if floc is None:
        return Diag(severity, filename, 0, 0, message)
    file = floc.filename if floc.filename not in ("-", "") else filename
    return Diag(severity, file, floc.start_line, floc.start_col, message)


# --verify-diagnostics --------------------------------------------------------------------
_EXPECTED = re.compile(
    r"expected-(error|warning|note|remark)\s*(@[+-]?\d+|@above|@below)?\s*\{\{(.*?)\}\}")


@dataclasses.dataclass
class Expected:
    severity: str
    line: int
    message: str
    written_at: int
    matched: bool = False


def collect_expected(text: str, first_line: int) -> list[Expected]:
    """Expectations in ``text`` whose first line is line ``first_line`` of the file."""
    out = []
    for i, line in enumerate(text.splitlines()):
        lineno = first_line + i
        for m in _EXPECTED.finditer(line):
            sev, offset, msg = m.groups()
            target = lineno
            if offset in ("@above",):
                target = lineno - 1
            elif offset in ("@below",):
                target = lineno + 1
            elif offset:
                target = lineno + int(offset[1:])
            out.append(Expected(sev, target, msg, lineno))
    return out


def check_expected(expected: list[Expected], actual: list[Diag], filename: str) -> list[str]:
    """Problems as rendered lines (empty list: everything matched)."""
    problems = []
    flat = []
    for d in actual:
        flat.append(d)
        flat.extend(d.notes)
    for d in flat:
        hit = next((e for e in expected if not e.matched and e.severity == d.severity
                    and e.line == d.line and e.message in d.message), None)
        if hit:
            hit.matched = True
        elif d.severity in ("error", "warning"):
            problems.append(f"{filename}:{d.line}:{d.col}: error: unexpected {d.severity}: "
                            f"{d.message}")
    for e in expected:
        if not e.matched:
            problems.append(f"{filename}:{e.written_at}:1: error: expected {e.severity} "
                            f"\"{e.message}\" was not produced")
    return problems
