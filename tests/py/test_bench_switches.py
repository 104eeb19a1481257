"""bench/tinymoe196m_build.py's OFF_SWITCHES: each build-name suffix switches one compiler
step off in the pipelines (for the A/B of that step on the GPU), and only while a build runs."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))


def test_each_switch_changes_its_pass_and_is_undone():
    import tinymoe196m_build as build
    from latch.passes.pipelines import PIPELINES

    before = {name: p.expand({}) for name, p in PIPELINES.items()}
    for suffix, (pipeline, pass_name, option) in build.OFF_SWITCHES.items():
        with build._switched_off([suffix]):
            after = PIPELINES[pipeline].expand({})
            if option is None:
                assert pass_name in before[pipeline] and pass_name not in after, suffix
            else:
                changed = [e for e in after if e.split("{")[0] == pass_name]
                places = [e for e in before[pipeline] if e.split("{")[0] == pass_name]
                assert len(changed) == len(places) >= 1, (suffix, changed)
                key = option.split("=")[0]
                for element in changed:              # at every place the pass runs
                    assert option in element, (suffix, element)
                    assert element.count(key + "=") == 1, element   # replaced, not added twice
            assert {n: p.expand({}) for n, p in PIPELINES.items() if n != pipeline} == \
                {n: e for n, e in before.items() if n != pipeline}
        assert {name: p.expand({}) for name, p in PIPELINES.items()} == before


def test_an_option_switch_of_a_pass_already_off_is_moot():
    """``-readerlaunch`` takes latch-fuse-element-readers out; ``-rowlaunch`` sets one of its
    options.  Together (the eighteenth stop's build) the second has nothing left to set."""
    import tinymoe196m_build as build
    from latch.passes.pipelines import PIPELINES

    pipeline, pass_name, option = build.OFF_SWITCHES["rowlaunch"]
    assert build.OFF_SWITCHES["readerlaunch"][1:] == (pass_name, None)
    with build._switched_off(["readerlaunch", "rowlaunch"]):
        assert all(e.split("{")[0] != pass_name for e in PIPELINES[pipeline].expand({}))
    with build._switched_off(["readerlaunch"]):    # a pass missing for another reason:
        with pytest.raises(AssertionError, match=pass_name):  # the option switch says so
            with build._switched_off(["rowlaunch"]):
                pass


def test_the_bench_runs_switched_builds_as_latch_engines():
    import tinymoe_bench_gpu as bench

    assert bench.latch_suffix("latch") == ""
    assert bench.latch_suffix("latch-padded-gridorder") == "-padded-gridorder"
    assert bench.latch_suffix("latch-nonsense") is None
    # a build switch that sets a module global (GLOBAL_SWITCHES) names a build as well: it
    # was not recognised, and the first run of latch-sideparts on the GPU crashed the bench
    assert bench.latch_suffix("latch-sideparts") == "-sideparts"
    assert bench.latch_suffix("latch-keptrows-sideparts") == "-keptrows-sideparts"
    assert bench.latch_suffix("torch-eager") is None


def test_a_loss_that_never_moves_marks_the_record_invalid():
    """A Latch engine whose 50-update loss curve on the fixed batch never moves did no
    update (the non-finite guard skipped each: the first staged-row build on the GPU); the
    bench marks it invalid and the results table skips it.  A curve that moves, or one too
    short to tell, is kept."""
    import tinymoe_bench_gpu as bench

    assert bench.flat_loss([10.5572] * 50)
    assert not bench.flat_loss([10.5572] * 49 + [10.5571])
    assert not bench.flat_loss([10.5572] * 5)
    assert not bench.flat_loss([])


def test_each_latch_curve_is_compared_with_the_others():
    """The GPU bench compares every Latch build's loss curve with the PyTorch engines' and
    with ``latch-base`` / ``latch`` over the updates both ran (a broken step shows as a
    diverging curve even when nothing else looks at the numerics)."""
    import tinymoe_bench_gpu as bench

    curves = {"latch": [4.0, 3.0, 2.0], "latch-zerofill": [4.0, 3.3, 2.0, 1.0],
              "latch-base": [4.0, 3.0], "torch-compile-graph": [4.0, 3.0, 2.2],
              "torch-eager": []}
    devs = bench.curve_deviations(curves)
    assert set(devs) == {"latch", "latch-zerofill", "latch-base"}
    assert set(devs["latch"]) == {"torch-compile-graph", "latch-base"}
    assert abs(devs["latch"]["torch-compile-graph"] - 0.2 / 2.2) < 1e-12
    assert devs["latch"]["latch-base"] == 0.0
    assert abs(devs["latch-zerofill"]["latch"] - 0.1) < 1e-12
    assert set(devs["latch-zerofill"]) == {"torch-compile-graph", "latch-base", "latch"}
    assert devs["latch-base"] == {"torch-compile-graph": 0.0, "latch": 0.0}


def test_artifacts_record_the_sources_they_were_built_from(tmp_path):
    """build.json keeps each build's source stamp and its artifact's sha256; the GPU
    bench reads them back and warns when a run's label is not the artifact's source (the
    twenty-fourth stop's B32 / selective / looped runs ran be8d363's artifacts labelled
    17bb732) or the file is no longer the one built."""
    import json

    import tinymoe196m_build as tb
    import tinymoe_bench_gpu as bench

    stamp = tb.source_stamp()
    head = stamp.split("+")[0]
    assert stamp == "unknown" or len(head) >= 7
    art = tmp_path / "tinymoe196m-b2-bf16.latch"
    art.write_bytes(b"program")
    (tmp_path / "build.json").write_text(json.dumps({"b2-bf16": {
        "source": "abc1234", "artifact_sha256": tb.file_sha256(str(art))}}))
    rec = tb.artifact_record("b2-bf16", str(tmp_path))
    assert rec == {"artifact_source": "abc1234", "artifact_is_recorded": True,
                   "artifact_sources_match": None}
    res = rec
    assert bench.provenance_warning(res, "abc1234") is None
    assert bench.provenance_warning(res, "abc1234567") is None        # longer sha, same
    assert "built from abc1234, run labelled def5678" in bench.provenance_warning(res, "def5678")
    assert "built from abc1234+dirty" in bench.provenance_warning(
        dict(res, artifact_source="abc1234+dirty"), "abc1234")
    art.write_bytes(b"another program")                              # rebuilt since
    rec = tb.artifact_record("b2-bf16", str(tmp_path))
    assert rec["artifact_is_recorded"] is False
    assert "not the file its build recorded" in bench.provenance_warning(rec, "abc1234")
    # no record (artifacts built before the stamp): nothing known, no warning
    assert tb.artifact_record("b32-bf16", str(tmp_path)) == {
        "artifact_source": None, "artifact_is_recorded": None, "artifact_sources_match": None}
    assert bench.provenance_warning({}, "abc1234") is None
    # the sources' digest decides where it was recorded: this tree's sources, whatever
    # the label; other sources, whatever the label
    (tmp_path / "build.json").write_text(json.dumps({"b2-bf16": {
        "source": "abc1234", "sources_sha256": tb.sources_digest()}}))
    rec = tb.artifact_record("b2-bf16", str(tmp_path))
    assert rec["artifact_sources_match"] is True
    assert bench.provenance_warning(rec, "def5678") is None
    assert "other compiler sources" in bench.provenance_warning(
        dict(rec, artifact_sources_match=False), "abc1234")


def test_the_sources_digest_sees_a_changed_pass(tmp_path):
    """sources_digest changes with any byte of a pass and ignores caches."""
    import tinymoe196m_build as tb

    for top in ("latch", "passes", "dialect", "bench"):
        (tmp_path / top).mkdir()
    (tmp_path / "passes" / "a.py").write_text("x = 1\n")
    (tmp_path / "bench" / "tinymoe_model.py").write_text("")
    before = tb.sources_digest(str(tmp_path))
    (tmp_path / "passes" / "__pycache__").mkdir()
    (tmp_path / "passes" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert tb.sources_digest(str(tmp_path)) == before
    (tmp_path / "passes" / "a.py").write_text("x = 2\n")
    assert tb.sources_digest(str(tmp_path)) != before


def test_the_build_status_counts_the_builds_of_this_run(tmp_path, monkeypatch, capsys):
    """``tinymoe196m_build.py --builds ...`` exits 0 when the builds it ran succeeded, even
    where build.json keeps an older run's failure (it had exited 1 after every run since
    one switched build failed), and 1 when one of its own failed."""
    import json
    import subprocess

    import tinymoe196m_build as build

    monkeypatch.setattr(build, "OUT", str(tmp_path))
    (tmp_path / "build.json").write_text(json.dumps({"b2-bf16-old": {"failed": ["x"]}}))

    def fake_run(cmd, **kwargs):
        name = cmd[cmd.index("--child") + 1]
        if name.endswith("-bad"):
            return subprocess.CompletedProcess(cmd, 1, "", "Traceback\nboom\n")
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"artifact": name}) + "\n", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["tinymoe196m_build.py", "--builds", "b2-bf16"])
    assert build.main() == 0
    monkeypatch.setattr(sys, "argv", ["tinymoe196m_build.py", "--builds", "b2-bf16,b2-bf16-bad"])
    assert build.main() == 1
    kept = json.loads((tmp_path / "build.json").read_text())
    assert kept["b2-bf16-old"] == {"failed": ["x"]} and kept["b2-bf16-bad"]["failed"][-1] == "boom"
    assert kept["b2-bf16"] == {"artifact": "b2-bf16"}
