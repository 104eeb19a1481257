"""Reliability report: run every reliability check and print one markdown table.

    .venv/bin/python bench/reliability.py [--only CHECK ...] [--jobs N] [--timeout S]
                                          [--isolated] [--json PATH]

A *check* is a function returning a list of :class:`Row` (one per category) -- today the
malformed-input corpus of ``latch-opt`` (tests/corpus/malformed).  To add one, append
``"name": "module.path:function"`` to :data:`CHECKS`; the module is imported from the
repository root or from bench/.  A check whose module or function is missing, or which raises,
is reported as a row with status ``missing``/``failed`` and does not stop the others.

Prints ``category | cases | clear errors | crashes | tracebacks`` and writes
bench/results/reliability.json (the rows, per-case details and totals).  Exit status 0 iff
every case of every check that ran gave a clear error (1 otherwise; 2 for bad arguments).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "reliability.json"


@dataclasses.dataclass
class Row:
    check: str
    category: str
    cases: int = 0
    clear: int = 0          # rejected with a clear (located) error, as required
    crashes: int = 0        # killed by a signal, or hung past the time limit
    tracebacks: int = 0     # printed a Python traceback
    status: str = "ok"      # ok | missing | failed
    details: list = dataclasses.field(default_factory=list)   # per-case dicts


#: name -> "module:function"; the function takes (options: argparse.Namespace) -> list[Row].
CHECKS: dict[str, str] = {
    "malformed-corpus": "reliability:malformed_corpus",
}


# -- the malformed-input corpus -------------------------------------------------------------
def malformed_corpus(options) -> list[Row]:
    corpus_dir = ROOT / "tests" / "corpus" / "malformed"
    sys.path.insert(0, str(corpus_dir))
    try:
        import corpus
    finally:
        sys.path.remove(str(corpus_dir))
    cases = corpus.load_cases(corpus_dir)
    outcomes = corpus.run_cases(cases, options.timeout, jobs=options.jobs,
                                batch=not options.isolated)
    rows: dict[str, Row] = {}
    for case in cases:
        out = outcomes[case.name]
        v = corpus.judge(case, out)
        row = rows.setdefault(case.category, Row("malformed-corpus", case.category))
        row.cases += 1
        row.clear += v["clear"]
        row.crashes += v["crash"]
        row.tracebacks += v["traceback"]
        first_error = next((line for line in out.stderr.splitlines() if "error:" in line), "")
        row.details.append({
            "case": case.name, "file": str(case.path.relative_to(ROOT)), "what": case.what,
            "returncode": out.returncode, "seconds": round(out.seconds, 3),
            "clear": v["clear"], "problems": v["problems"],
            "error": first_error.replace(str(case.path), case.path.name)[:300]})
    for row in rows.values():
        row.details.sort(key=lambda d: d["case"])
    return [rows[k] for k in sorted(rows)]


# -- driver ---------------------------------------------------------------------------------
def _resolve(spec: str):
    module_name, _, func_name = spec.partition(":")
    for base in (ROOT, ROOT / "bench"):
        if str(base) not in sys.path:
            sys.path.insert(0, str(base))
    if module_name == "reliability":        # this script, whether imported or run
        return globals()[func_name]
    return getattr(importlib.import_module(module_name), func_name)


def run_checks(names: list[str], options) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        try:
            fn = _resolve(CHECKS[name])
        except (ImportError, AttributeError, KeyError) as e:
            rows.append(Row(name, "-", status="missing", details=[{"error": repr(e)}]))
            continue
        try:
            rows += fn(options)
        except Exception as e:  # noqa: BLE001 - one broken check must not hide the others
            rows.append(Row(name, "-", status="failed",
                            details=[{"error": repr(e), "traceback": traceback.format_exc()}]))
    return rows


def markdown(rows: list[Row]) -> str:
    lines = ["| category | cases | clear errors | crashes | tracebacks |",
             "|---|---:|---:|---:|---:|"]
    multi = len({r.check for r in rows}) > 1
    for r in rows:
        label = f"{r.check}: {r.category}" if multi else r.category
        if r.status != "ok":
            lines.append(f"| {r.check} ({r.status}) | - | - | - | - |")
            continue
        lines.append(f"| {label} | {r.cases} | {r.clear} | {r.crashes} | {r.tracebacks} |")
    ok = [r for r in rows if r.status == "ok"]
    lines.append(f"| **total** | **{sum(r.cases for r in ok)}** | **{sum(r.clear for r in ok)}** "
                 f"| **{sum(r.crashes for r in ok)}** | **{sum(r.tracebacks for r in ok)}** |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=sorted(CHECKS), help="run only these checks")
    p.add_argument("--jobs", type=int, default=max(2, min(4, os.cpu_count() or 2)))
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    p.add_argument("--isolated", action="store_true",
                   help="run every corpus case as its own latch-opt process (slower)")
    p.add_argument("--json", type=Path, default=RESULTS, help=f"default {RESULTS}")
    options = p.parse_args(argv)

    t0 = time.perf_counter()
    rows = run_checks(options.only or list(CHECKS), options)
    seconds = time.perf_counter() - t0
    print(markdown(rows))
    bad = [(r.check, d["case"], d["problems"]) for r in rows for d in r.details
           if isinstance(d, dict) and d.get("clear") is False]
    for check, case, problems in bad:
        print(f"  NOT CLEAR {check}/{case}: {'; '.join(problems)}")
    print(f"({seconds:.1f} s)")

    ok = [r for r in rows if r.status == "ok"]
    report = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"python": platform.python_version(), "platform": platform.platform(),
                 "cpus": os.cpu_count()},
        "seconds": round(seconds, 1),
        "totals": {"cases": sum(r.cases for r in ok), "clear": sum(r.clear for r in ok),
                   "crashes": sum(r.crashes for r in ok),
                   "tracebacks": sum(r.tracebacks for r in ok)},
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    try:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(report, indent=1) + "\n")
    except OSError as e:
        print(f"reliability: cannot write {options.json}: {e}", file=sys.stderr)
    all_ran = all(r.status == "ok" for r in rows)
    return 0 if all_ran and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
