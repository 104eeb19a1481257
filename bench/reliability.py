"""Reliability report: run every reliability check and print one markdown table.

    .venv/bin/python bench/reliability.py [--only CHECK ...] [--jobs N] [--timeout S]
                                          [--isolated] [--json PATH]

A *check* is a function returning a list of :class:`Row` (one per category):

* ``malformed-corpus``  the malformed-input corpus of ``latch-opt`` (tests/corpus/malformed)
* ``errors``            bad input to the Python API (tests/py/test_errors.py's CASES)
* ``nonfinite``         non-finite steps under on_nonfinite="skip"/"raise": the state after a
                        poisoned step must be bitwise the state that never saw it
* ``checkpoints``       interrupted saves (exception at each stage, SIGKILL mid-write) and
                        corrupted / foreign / mismatched checkpoints
* ``fuzz``              hypothesis-generated tensor programs compiled for the CPU vs PyTorch

To add one, append ``"name": "module.path:function"`` to :data:`CHECKS`; the module is
imported from the repository root or from bench/.  A check whose module or function is
missing, or which raises, is reported as a row with status ``missing``/``failed`` and does not
stop the others; a row with status ``skipped`` (e.g. no GPU) is reported and not counted.

Prints ``category | cases | clear errors | crashes | tracebacks | wrong results | state
corruptions`` and writes bench/results/reliability.json (the rows, per-case details and
totals).  Exit status 0 iff every case of every check that ran did what it must (a clear
error where one is due, no crash, no traceback, no wrong result, no state corruption);
1 otherwise; 2 for bad arguments.
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
    tracebacks: int = 0     # printed a Python traceback / raised a non-Latch exception
    wrong: int = 0          # ran and gave a result that differs from PyTorch's
    corruptions: int = 0    # left a training state / checkpoint different from what it must be
    status: str = "ok"      # ok | skipped | missing | failed
    clear_applies: bool = True   # False: the cases are not error cases ("-" in the table)
    details: list = dataclasses.field(default_factory=list)   # per-case dicts


#: name -> "module:function"; the function takes (options: argparse.Namespace) -> list[Row].
CHECKS: dict[str, str] = {
    "malformed-corpus": "reliability:malformed_corpus",
    "errors": "reliability:error_cases",
    "nonfinite": "reliability:nonfinite_steps",
    "checkpoints": "reliability:checkpoints",
    "fuzz": "reliability:fuzzed_lowering",
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


# -- shared: the Python test helpers ----------------------------------------------------------
def _tests_on_path() -> None:
    tests = str(ROOT / "tests" / "py")
    if tests not in sys.path:
        sys.path.insert(0, tests)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


# -- errors for bad input (tests/py/test_errors.py) -------------------------------------------
def error_cases(options) -> list[Row]:
    _tests_on_path()
    import test_errors

    rows: dict[str, Row] = {}
    for c in test_errors.CASES:
        out = test_errors.run_case(c)
        row = rows.setdefault(c.category, Row("errors", c.category))
        row.cases += 1
        row.clear += out["clear"]
        row.tracebacks += out["outcome"].startswith("crash")
        row.details.append({"case": c.name, "clear": out["clear"], "outcome": out["outcome"],
                            "error": out["message"],
                            "problems": [out["problem"]] if out["problem"] else []})
    return list(rows.values())


# -- non-finite steps: skipped/raised steps leave the state bitwise unchanged -----------------
def _nonfinite_rules():
    from latch import optim
    return {
        "sgd-momentum": lambda: optim.SGD(0.05, momentum=0.9, weight_decay=0.01),
        "adamw": lambda: optim.AdamW(1e-2, weight_decay=0.1),
        "every(2, adamw)": lambda: optim.every(2, optim.AdamW(1e-2)),
        "clip(adamw(warmup_cosine))": lambda: optim.clip_grad_norm(
            1.0, optim.AdamW(optim.warmup_cosine(1e-2, 2, 20, 0.1))),
    }


def _poison(kind, x, y):
    x, y = x.clone(), y.clone()
    if kind == "nan input":
        x[0, 0] = float("nan")
    elif kind == "inf target":
        y[0, 0] = float("inf")
    else:                                  # "overflow": finite inputs, non-finite activations
        x = x * 1e30
    return x, y


def nonfinite_steps(options) -> list[Row]:
    """For every rule x policy x poison: state A takes good, poisoned, good, good batches,
    state B only the good ones.  The poisoned step must be skipped (skip: counted in
    skipped_steps) or raise NonFiniteError (raise), leave A bitwise as it was, and A must end
    bitwise equal to B (parameters, moments, accumulators, counters)."""
    _tests_on_path()
    import torch

    import latch
    from models import make_mlp

    row = Row("nonfinite", "non-finite steps (cpu)", clear_applies=False)
    model, (x, y) = make_mlp(seed=4)
    good = [(x + 0.1 * i, y) for i in range(3)]
    for rule_name, make_rule in _nonfinite_rules().items():
        for policy in ("skip", "raise"):
            prog = latch.compile(model, make_rule(), (x, y), on_nonfinite=policy)
            for kind in ("nan input", "inf target", "overflow"):
                problems = []
                try:
                    a, b = prog.init(model), prog.init(model)
                    prog.step(a, *good[0])
                    prog.step(b, *good[0])
                    before = {k: v.clone() for k, v in a.tensors().items()}
                    bad = _poison(kind, *good[1])
                    if policy == "raise":
                        try:
                            prog.step(a, *bad)
                            problems.append("no NonFiniteError")
                        except latch.NonFiniteError:
                            pass
                    else:
                        loss = prog.step(a, *bad)
                        if a.skipped_steps != 1 or loss == loss and abs(loss) != float("inf"):
                            problems.append(f"not skipped (loss {loss}, "
                                            f"skipped_steps {a.skipped_steps})")
                    after = a.tensors()
                    changed = [k for k in before if not torch.equal(before[k], after[k])]
                    for batch in good[1:]:
                        prog.step(a, *batch)
                        prog.step(b, *batch)
                    ta, tb = a.tensors(), b.tensors()
                    diverged = [k for k in ta if not torch.equal(ta[k], tb[k])]
                    if changed or diverged:
                        row.corruptions += 1
                        problems.append(f"state changed by the poisoned step: {changed}; "
                                        f"differs from the clean run: {diverged}")
                except Exception as e:  # noqa: BLE001
                    row.tracebacks += 1
                    problems.append(f"raised {type(e).__name__}: {_first_line(e)}")
                row.cases += 1
                row.clear += not problems
                row.details.append({"case": f"{rule_name} / {policy} / {kind}",
                                    "handled": not problems, "problems": problems})
    return [row, nonfinite_steps_cuda(options)]


def nonfinite_steps_cuda(options) -> Row:
    """The same guarantee on the GPU (latch/runtime/guard.py: an in-graph finite check and
    guarded state copies), through bench/gpu_nonfinite.py's check_program: a poisoned step
    after the CUDA graph is captured and as the first step (direct launches).  Compiles the
    rules of the cpu row for the cuda target when MLIR is here; otherwise (a GPU machine
    without MLIR) runs the prebuilt bench/artifacts/nonfinite-*.latch
    (bench/build_nonfinite_artifacts.py).  Skipped without a GPU."""
    row = Row("nonfinite", "non-finite steps (cuda)", clear_applies=False)
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        has_gpu = False
    if not has_gpu:
        row.status = "skipped"
        row.details = [{"why": "no CUDA GPU here (torch.cuda.is_available() is False); "
                               "bench/gpu_nonfinite.py runs it on a GPU machine"}]
        return row
    _tests_on_path()
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import build_nonfinite_artifacts as build
        import gpu_nonfinite
    finally:
        sys.path.remove(str(ROOT / "bench"))
    import tempfile

    import latch
    try:
        import latch.targets.cuda  # noqa: F401
        import mlir.ir  # noqa: F401
        have_mlir = True
    except ImportError:
        have_mlir = False
    records = []
    if have_mlir:
        model, clean, poison = build.batches()
        with tempfile.TemporaryDirectory() as tmp:
            for rule_name, make_rule in _nonfinite_rules().items():
                for policy in ("skip", "raise"):
                    path = os.path.join(tmp, f"{len(records)}.latch")
                    latch.compile(model, make_rule(), clean[0], target="cuda",
                                  on_nonfinite=policy).save(path)
                    records += gpu_nonfinite.check_program(
                        lambda path=path: latch.load(path), policy, model, clean, poison,
                        f"{rule_name} / {policy}")
    else:
        records = gpu_nonfinite.run(str(ROOT / "bench" / "artifacts"))["records"]
    for r in records:
        row.cases += 1
        row.clear += r["ok"]
        row.tracebacks += any(p.startswith("raised ") for p in r["problems"])
        row.corruptions += bool(r.get("changed_by_poisoned_step") or
                                r.get("differs_from_clean_run"))
        row.details.append({"case": f"{r['program']} / {r['poison']} / {r['position']}",
                            "handled": r["ok"], "problems": r["problems"]})
    return row


# -- checkpoints: interrupted saves, corrupted / foreign / mismatched loads --------------------
def checkpoints(options) -> list[Row]:
    _tests_on_path()
    import json as _json
    import signal
    import subprocess
    import tempfile

    import numpy as np
    import torch

    import latch
    import latch.artifact as artifact
    import latch.checkpoint as ckpt
    from latch import optim
    from latch.checkpoint import load_state
    from models import MLPRegression, make_mlp
    import test_checkpoint as tc
    from zip_edit import rewrite_zip

    model, inputs = make_mlp(seed=3)
    rule = lambda: optim.every(2, optim.AdamW(1e-2, weight_decay=0.1))  # noqa: E731
    prog = latch.compile(model, rule(), inputs)
    state = prog.init(model)
    for _ in range(3):
        prog.step(state, *inputs)
    newer = prog.init(model)
    for _ in range(4):
        prog.step(newer, *inputs)

    def same(s1, s2):
        t1, t2 = s1.tensors(), s2.tensors()
        return t1.keys() == t2.keys() and all(torch.equal(t1[k], t2[k]) for k in t1)

    folder = Path(tempfile.mkdtemp(prefix="latch-reliability-ckpt-"))
    inter = Row("checkpoints", "interrupted checkpoint saves", clear_applies=False)

    class Interrupted(BaseException):
        pass

    def interrupt_in(where):
        def run(path):
            saved = {}
            if where == "write":
                def half(f, data):
                    f.write(data[:len(data) // 2])
                    raise Interrupted(where)
                saved["_write_all"], artifact._write_all = artifact._write_all, half
            else:
                def boom(*a, **k):
                    raise Interrupted(where)
                saved[where] = getattr(ckpt.os, where)
                setattr(ckpt.os, where, boom)
            try:
                newer.save(path)
            except Interrupted:
                pass
            finally:
                for k, v in saved.items():
                    setattr(artifact if k == "_write_all" else ckpt.os, k, v)
        return run

    def killed(path):
        (folder / "spec.json").write_text(_json.dumps(
            {"slots": prog.manifest["states"], "param_names": prog.manifest["param_names"]}))
        np.savez(folder / "arrays.npz", **{s["name"]: a for s, a in
                                          zip(prog.manifest["states"], newer.ordered())})
        proc = subprocess.run([sys.executable, "-c", tc._KILLED_CHILD, str(folder / "spec.json"),
                               str(folder / "arrays.npz"), str(path)], capture_output=True)
        if proc.returncode != -signal.SIGKILL:
            raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr.decode()[-300:]}")

    for name, interrupt in [("exception half-way through write", interrupt_in("write")),
                            ("exception in fsync", interrupt_in("fsync")),
                            ("exception in os.replace", interrupt_in("replace")),
                            ("SIGKILL half-way through write (subprocess)", killed)]:
        path = folder / "state.ckpt"
        problems = []
        try:
            state.save(path)
            old = path.read_bytes()
            interrupt(path)
            if path.read_bytes() != old:
                problems.append("the old checkpoint changed")
            elif not same(load_state(path, prog), state):
                problems.append("the old checkpoint loads to another state")
        except Exception as e:  # noqa: BLE001
            problems.append(f"raised {type(e).__name__}: {_first_line(e)}")
        inter.cases += 1
        inter.corruptions += bool(problems)
        inter.details.append({"case": name, "intact": not problems, "problems": problems})
        for p in folder.glob(".latch-ckpt-*"):
            p.unlink()

    # round trip: continued training from a loaded checkpoint is bitwise the uninterrupted run
    problems = []
    try:
        path = folder / "rt.ckpt"
        state.save(path)
        a, b = load_state(path, prog), load_state(path, prog)
        a.skipped_steps = b.skipped_steps = 0
        for i in range(4):
            if prog.step(a, *inputs) != prog.step(b, *inputs):
                problems.append("losses differ")
        ref = load_state(path, prog)
        if not (same(load_state(path, prog), state) and same(a, b)):
            problems.append("state differs after the round trip")
        ref.save(folder / "rt2.ckpt")
        if (folder / "rt2.ckpt").read_bytes() != path.read_bytes():
            problems.append("re-saving gives other bytes")
    except Exception as e:  # noqa: BLE001
        problems.append(f"raised {type(e).__name__}: {_first_line(e)}")
    inter.cases += 1
    inter.corruptions += bool(problems)
    inter.details.append({"case": "round trip + continued training + deterministic bytes",
                          "intact": not problems, "problems": problems})

    bad = Row("checkpoints", "corrupted / foreign / mismatched checkpoints")
    torch.manual_seed(0)
    wide = latch.compile(MLPRegression(hidden=16), rule(), inputs)
    sgd = latch.compile(model, optim.SGD(0.1), inputs)
    cases = [
        ("flipped byte", lambda p: p.write_bytes(tc._flip(p.read_bytes())), prog,
         "corrupted|checksum"),
        ("truncated", lambda p: p.write_bytes(p.read_bytes()[:len(p.read_bytes()) // 2]), prog,
         "corrupted"),
        ("tensor tampered, zip valid", lambda p: rewrite_zip(p, tc._tamper_first_tensor), prog,
         "checksum mismatch in state"),
        ("tensor missing", lambda p: rewrite_zip(p, lambda f: f.pop("tensors/00000")), prog,
         "is missing"),
        ("manifest unreadable", lambda p: rewrite_zip(
            p, lambda f: f.update({"checkpoint.json": b"{"})), prog, "unreadable"),
        ("another Latch version", lambda p: rewrite_zip(p, tc._edit_manifest(
            lambda m: m.update(latch_version="0.0.1"))), prog, "written by Latch 0.0.1"),
        ("another format", lambda p: rewrite_zip(p, tc._edit_manifest(
            lambda m: m.update(format="latch-checkpoint/9"))), prog, "checkpoint format"),
        ("a program artifact, not a checkpoint", lambda p: prog.save(p), prog,
         "no checkpoint.json"),
        ("another rule (SGD: no moments)", lambda p: None, sgd,
         "checkpoint has states the program lacks"),
        ("another model width (shapes)", lambda p: None, wide, "has shape"),
        ("missing file", lambda p: p.unlink(), prog, "no checkpoint at"),
    ]
    import re as _re
    for name, corrupt, target, pattern in cases:
        path = folder / "bad.ckpt"
        state.save(path)
        problems, message = [], ""
        try:
            corrupt(path)
            load_state(path, target)
            problems.append("loaded without an error")
        except latch.LatchError as e:
            message = _first_line(e)
            if not _re.search(pattern, str(e)):
                problems.append(f"message does not match {pattern!r}")
        except Exception as e:  # noqa: BLE001
            bad.tracebacks += 1
            problems.append(f"raised {type(e).__name__}: {_first_line(e)}")
        bad.cases += 1
        bad.clear += not problems
        bad.details.append({"case": name, "clear": not problems, "error": message,
                            "problems": problems})
    return [inter, bad]


# -- fuzzed lowering: random tensor programs on the CPU target vs PyTorch ----------------------
def fuzzed_lowering(options) -> list[Row]:
    _tests_on_path()
    from hypothesis import HealthCheck, Phase, given, settings

    import latch
    from fuzz_programs import build, close, program_strategy, source

    n = getattr(options, "fuzz_examples", 100)
    row = Row("fuzz", f"fuzzed lowering (cpu vs PyTorch, {n} programs)", clear_applies=False)
    old_cache = os.environ.get("LATCH_CACHE")
    os.environ["LATCH_CACHE"] = "0"              # every program really goes through lowering

    @settings(max_examples=n, deadline=None, derandomize=True, database=None,
              phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(program=program_strategy())
    def run(program):
        fn, inputs = build(program)
        ref = fn(*inputs)
        problems = []
        try:
            got = latch.compile(fn, None, inputs)(*inputs)
            if not close(got, ref):
                row.wrong += 1
                problems.append("result differs from PyTorch")
        except latch.LatchError as e:
            row.wrong += 1
            problems.append(f"rejected a supported program: {_first_line(e)}")
        except Exception as e:  # noqa: BLE001
            row.tracebacks += 1
            problems.append(f"raised {type(e).__name__}: {_first_line(e)}")
        row.cases += 1
        if problems:
            from test_fuzz_lowering import write_reproducer
            problems.append(f"reproducer: {write_reproducer(program, problems[0])}")
        row.details.append({"case": f"program {row.cases}",
                            "ops": [st.get("op", st["kind"]) for st in program["steps"]],
                            "source": source(program), "problems": problems})

    try:
        run()
    finally:
        if old_cache is None:
            os.environ.pop("LATCH_CACHE", None)
        else:
            os.environ["LATCH_CACHE"] = old_cache
    kinds: dict[str, int] = {}
    for d in row.details:
        for op in d["ops"]:
            kinds[op] = kinds.get(op, 0) + 1
    row.details.insert(0, {"case": "summary", "op_counts": dict(sorted(kinds.items())),
                           "problems": []})
    return [row]


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
    lines = ["| category | cases | clear errors | crashes | tracebacks | wrong results "
             "| state corruptions |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    multi = len({r.check for r in rows}) > 1
    for r in rows:
        label = f"{r.check}: {r.category}" if multi else r.category
        if r.status != "ok":
            why = next((d.get("why") for d in r.details if isinstance(d, dict) and d.get("why")),
                       "")
            lines.append(f"| {label} ({r.status}{': ' + why if why else ''}) | - | - | - | - "
                         f"| - | - |")
            continue
        clear = f"{r.clear}" if r.clear_applies else "-"
        lines.append(f"| {label} | {r.cases} | {clear} | {r.crashes} | {r.tracebacks} "
                     f"| {r.wrong} | {r.corruptions} |")
    ok = [r for r in rows if r.status == "ok"]
    lines.append(f"| **total** | **{sum(r.cases for r in ok)}** "
                 f"| **{sum(r.clear for r in ok if r.clear_applies)}** "
                 f"| **{sum(r.crashes for r in ok)}** | **{sum(r.tracebacks for r in ok)}** "
                 f"| **{sum(r.wrong for r in ok)}** | **{sum(r.corruptions for r in ok)}** |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=sorted(CHECKS), help="run only these checks")
    p.add_argument("--jobs", type=int, default=max(2, min(4, os.cpu_count() or 2)))
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    p.add_argument("--isolated", action="store_true",
                   help="run every corpus case as its own latch-opt process (slower)")
    p.add_argument("--json", type=Path, default=RESULTS, help=f"default {RESULTS}")
    p.add_argument("--fuzz-examples", type=int, default=100,
                   help="programs the fuzz check generates (default 100)")
    options = p.parse_args(argv)

    t0 = time.perf_counter()
    rows = run_checks(options.only or list(CHECKS), options)
    seconds = time.perf_counter() - t0
    print(markdown(rows))
    bad = [(r.check, d["case"], d["problems"]) for r in rows for d in r.details
           if isinstance(d, dict) and d.get("clear") is False]
    for check, case, problems in bad:
        print(f"  NOT CLEAR {check}/{case}: {'; '.join(problems)}")
    for r in rows:
        if r.status == "ok" and (r.crashes or r.tracebacks or r.wrong or r.corruptions):
            bad.append((r.check, r.category, ["crash/traceback/wrong result/corruption"]))
            for d in r.details:
                if isinstance(d, dict) and d.get("problems"):
                    print(f"  PROBLEM {r.check}/{d.get('case')}: {'; '.join(d['problems'])}")
    print(f"({seconds:.1f} s)")

    ok = [r for r in rows if r.status == "ok"]
    report = {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"python": platform.python_version(), "platform": platform.platform(),
                 "cpus": os.cpu_count()},
        "seconds": round(seconds, 1),
        "totals": {"cases": sum(r.cases for r in ok),
                   "clear": sum(r.clear for r in ok if r.clear_applies),
                   "crashes": sum(r.crashes for r in ok),
                   "tracebacks": sum(r.tracebacks for r in ok),
                   "wrong_results": sum(r.wrong for r in ok),
                   "state_corruptions": sum(r.corruptions for r in ok)},
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    try:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(report, indent=1) + "\n")
    except OSError as e:
        print(f"reliability: cannot write {options.json}: {e}", file=sys.stderr)
    all_ran = all(r.status in ("ok", "skipped") for r in rows)
    return 0 if all_ran and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
