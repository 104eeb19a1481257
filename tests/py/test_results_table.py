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


def test_a_run_of_a_reverted_change_is_not_a_result(tmp_path, monkeypatch):
    both = [{"workload": "gradlev", "engine": "latch", "median_ms": 2.0},
            {"workload": "gradlev", "engine": "torch-manual-graph", "median_ms": 10.0}]
    (tmp_path / "gradlev-20990101T000000Z.json").write_text(json.dumps(both))
    reverted = [dict(r, reverted="commit X was reverted") for r in both]
    (tmp_path / "gradlev-20991231T000000Z.json").write_text(json.dumps(reverted))
    monkeypatch.setattr(results_table, "RESULTS", str(tmp_path))
    assert results_table.latest_run("gradlev", "gradlev-*.json")[0] == \
        "gradlev-20990101T000000Z.json"


def test_a_default_build_measured_as_another_engine_is_latchs_time(tmp_path, monkeypatch):
    run = [{"workload": "gradlev", "engine": "latch", "median_ms": 2.0},
           {"workload": "gradlev", "engine": "latch-noprefetch", "median_ms": 1.5,
            "default_build": "main builds this by default since commit X"},
           {"workload": "gradlev", "engine": "torch-manual-graph", "median_ms": 10.0}]
    (tmp_path / "gradlev-20990101T000000Z.json").write_text(json.dumps(run))
    monkeypatch.setattr(results_table, "RESULTS", str(tmp_path))
    name, runs = results_table.latest_run("gradlev", "gradlev-*.json")
    assert runs["latch"]["median_ms"] == 1.5
    monkeypatch.setattr(results_table, "WORKLOADS",
                        {"gradlev": ("GradLev", "gradlev-*.json", 2.8, "block")})
    assert "**1.50**" in results_table.table() and "6.67×" in results_table.table()


def test_a_latch_only_run_does_not_replace_the_comparison(tmp_path, monkeypatch):
    both = [{"workload": "gradlev", "engine": "latch", "median_ms": 2.0},
            {"workload": "gradlev", "engine": "torch-manual-graph", "median_ms": 10.0}]
    (tmp_path / "gradlev-20990101T000000Z.json").write_text(json.dumps(both))
    (tmp_path / "gradlev-20991231T000000Z.json").write_text(json.dumps(both[:1]))
    monkeypatch.setattr(results_table, "RESULTS", str(tmp_path))
    assert results_table.latest_run("gradlev", "gradlev-*.json")[0] == \
        "gradlev-20990101T000000Z.json"


def test_update_work_matches_workloads_md():
    """WORKLOADS.md: B2 about 1.2 TFLOP, B32 about 19 TFLOP, about 5.5 GB of optimizer
    traffic."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
    from tinymoe_bench_gpu import update_work
    b2, b32 = update_work(2), update_work(32)
    assert 1.1e12 < b2["matmul_flop"] < 1.4e12 and 18e12 < b32["matmul_flop"] < 22e12
    assert abs(b2["optimizer_bytes"] - 5.5e9) < 0.1e9
    assert update_work(32, looped=True)["matmul_flop"] > b32["matmul_flop"]


def test_work_figures_of_a_record():
    """The floor of an update at the measured ceilings and an engine's fraction of it."""
    from tinymoe_bench_gpu import add_work_figures
    rec = {"median_ms": 40.0}
    add_work_figures(rec, {"matmul_flop": 8e12, "optimizer_bytes": 4e9},
                     {"matmul_bf16_tflops": 800.0, "copy_gbs": 4000.0})
    assert abs(rec["floor_ms"] - 11.0) < 1e-9               # 10 ms of matmuls + 1 ms of copies
    assert abs(rec["fraction_of_ceilings"] - 11.0 / 40.0) < 1e-12
    assert abs(rec["achieved_matmul_tflops"] - 200.0) < 1e-9
    assert rec["matmul_flop"] == 8e12 and rec["copy_gbs"] == 4000.0
