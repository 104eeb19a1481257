"""bench/results_table.py: the README's headline table comes from bench/results/."""
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))

import results_table  # noqa: E402


def test_every_row_is_the_newest_run_with_a_latch_time():
    text = results_table.table()
    for wl, (label, pattern, target, _) in results_table.WORKLOADS.items():
        name, runs = results_table.latest_run(wl, pattern)
        row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
        if name is None:
            assert "not measured" in row
            continue
        assert name in row
        med = results_table._median(runs["latch"])[0]
        assert results_table._fmt((med, None, None)) in row


def test_the_readme_holds_the_generated_table():
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = readme.split(results_table.BEGIN, 1)[1].split(results_table.END, 1)[0]
    assert block.strip() == results_table.table().strip(), \
        "README's results table is stale: run python bench/results_table.py --write"


def test_a_failed_or_skipped_latch_run_is_not_a_result(tmp_path, monkeypatch):
    rec = {"workload": "gradlev", "engine": "latch", "failed": "exit 1"}
    (tmp_path / "gradlev-20991231T000000Z.json").write_text(json.dumps([rec]))
    monkeypatch.setattr(results_table, "RESULTS", str(tmp_path))
    assert results_table.latest_run("gradlev", "gradlev-*.json") == (None, {})
