"""Every malformed input of tests/corpus/malformed makes latch-opt exit 1 with a located
``file:line:col: error:`` (pipelines: an ``error:`` naming the problem), no Python traceback,
no signal and no hang.

latch-opt always runs out of this process (so a crash of the MLIR parser is seen as a signal,
not as a dead test run): see ``corpus.run_cases``.  All cases run the first time any case is
asked for; each parametrized test then judges its own outcome.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

CORPUS_DIR = Path(__file__).resolve().parents[1] / "corpus" / "malformed"
sys.path.insert(0, str(CORPUS_DIR))
import corpus  # noqa: E402  (tests/corpus/malformed/corpus.py)

CASES = corpus.load_cases()
BY_NAME = {c.name: c for c in CASES}
CATEGORIES = ("syntax", "type", "verifier", "pipeline", "binary", "encoding", "nul",
              "truncated", "nesting", "long-line", "unknown-dialect")


@pytest.fixture(scope="session")
def outcomes() -> dict[str, corpus.Outcome]:
    # Crash-prone categories run one subprocess per case; the rest run in-process in batch
    # worker subprocesses, and any case a worker did not finish (it crashed or hung) is rerun
    # in its own subprocess -- so a signal or a hang is always seen and attributed.
    return corpus.run_cases(CASES, jobs=max(2, min(4, os.cpu_count() or 2)))


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_case_is_rejected_cleanly(name, outcomes):
    case, out = BY_NAME[name], outcomes[name]
    verdict = corpus.judge(case, out)
    assert out.returncode is not None, f"{name}: hang (> {corpus.TIMEOUT_S:.0f} s)"
    assert out.returncode >= 0, f"{name}: killed by signal {-out.returncode}\n{out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr, out.stderr[-4000:]
    assert out.returncode == 1, f"{name}: exit status {out.returncode}\n{out.stderr[-2000:]}"
    assert verdict["clear"], f"{name}: {verdict['problems']}\nstderr:\n{out.stderr[:2000]}"


def test_corpus_size_and_categories():
    counts = Counter(c.category for c in CASES)
    assert len(CASES) >= 50, counts
    unknown = set(counts) - set(CATEGORIES)
    assert not unknown, f"unknown categories {unknown}; known: {CATEGORIES}"
    thin = {cat: counts[cat] for cat in CATEGORIES if counts[cat] < 3}
    assert not thin, f"categories with fewer than 3 cases: {thin}"


def test_every_latch_op_has_a_verifier_case():
    from latch.dialect import OPS

    covered = {c.op for c in CASES if c.op}
    assert all(c.op for c in CASES if c.category == "verifier"), "a verifier case names no op"
    missing = sorted(set(OPS) - covered)
    assert not missing, f"Latch ops without a verifier case in the corpus: {missing}"


def test_generated_cases_have_sidecars_and_no_orphans():
    sidecars = {p.stem for p in CORPUS_DIR.glob("*.txt")}
    assert sidecars == set(corpus.GENERATED), sidecars ^ set(corpus.GENERATED)
    for name, (header, data) in corpus.GENERATED.items():
        assert (CORPUS_DIR / f"{name}.bin").read_bytes() == data
        assert (CORPUS_DIR / f"{name}.txt").read_text().splitlines()[0] == "// CASE: " + header[0]


@pytest.mark.parametrize("text", ["", " \n\t\n  ", "// only a comment\n\n// another\n"],
                         ids=["empty", "whitespace", "comments"])
def test_empty_input_is_an_empty_module(text, tmp_path):
    """As in mlir-opt, an empty (or blank, or comment-only) file is a valid empty module."""
    path = tmp_path / "empty.mlir"
    path.write_text(text)
    proc = subprocess.run(corpus.latch_opt_command() + [str(path)], capture_output=True,
                          text=True, timeout=corpus.TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["module", "{", "}"], proc.stdout
    assert proc.stderr == ""
