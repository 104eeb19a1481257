"""Deterministic output: the same inputs give byte-identical artifacts (manifest, program
text, PTX) and the same compile-cache key in processes with different PYTHONHASHSEED values.

Three child processes (hash seeds 0, 1, 2; cache off) each compile the MLP of models.py
for the cpu target and for the cuda target (trace → torch-mlir → Latch program → PTX),
save both ``.latch`` artifacts and print the cache key; the artifacts must be
byte-identical across the processes and the keys equal.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CHILD = r"""
import json, sys
sys.path.insert(0, {here!r})
import latch
from latch import optim
from latch.cache import compute_key
from latch.frontend.trace import trace_loss_and_grads
from latch.options import CompileOptions
from models import make_mlp

out = sys.argv[1]
model, example = make_mlp(seed=0)
rule = optim.clip_grad_norm(1.0, optim.AdamW(optim.warmup_cosine(1e-2, 2, 10, 0.1),
                                             weight_decay=0.1))
latch.compile(model, rule, example, target="cpu").save(out + "/cpu.latch")
latch.compile(model, rule, example, target="cuda").save(out + "/cuda.latch")
traced = trace_loss_and_grads(model, example)
key = compute_key(model, traced, rule, example, CompileOptions())
print(json.dumps({{"key": key.key, "digests": key.digests}}))
"""


def _run_children(tmp_path, seeds=(0, 1, 2)):
    procs = {}
    for seed in seeds:
        out = tmp_path / f"seed{seed}"
        out.mkdir()
        env = dict(os.environ, PYTHONHASHSEED=str(seed), LATCH_CACHE="0")
        env.pop("LATCH_DUMP_DIR", None)
        procs[seed] = (out, subprocess.Popen(
            [sys.executable, "-c", CHILD.format(here=HERE), str(out)], cwd=str(tmp_path),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = {}
    for seed, (out, p) in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, f"seed {seed}:\n{stderr[-4000:]}"
        results[seed] = (out, json.loads(stdout.strip().splitlines()[-1]))
    return results


def _first_difference(a: bytes, b: bytes) -> str:
    """Which member of two .latch zips differs, and where (for the failure message)."""
    import io
    za, zb = zipfile.ZipFile(io.BytesIO(a)), zipfile.ZipFile(io.BytesIO(b))
    if za.namelist() != zb.namelist():
        return f"members {za.namelist()} vs {zb.namelist()}"
    for n in za.namelist():
        x, y = za.read(n), zb.read(n)
        if x != y:
            i = next((i for i, (c, d) in enumerate(zip(x, y)) if c != d), min(len(x), len(y)))
            return f"{n} at byte {i}: {x[max(0, i - 80):i + 80]!r} vs {y[max(0, i - 80):i + 80]!r}"
    return "zip metadata"


def test_artifacts_and_cache_keys_are_identical_across_hash_seeds(tmp_path):
    results = _run_children(tmp_path)
    (out0, meta0), *rest = results.values()
    for name in ("cpu.latch", "cuda.latch"):
        ref = (out0 / name).read_bytes()
        for out, _ in rest:
            got = (out / name).read_bytes()
            assert got == ref, f"{name} differs: {_first_difference(ref, got)}"
    for _, meta in rest:
        assert meta == meta0
    # the artifacts hold what they should: the program text, PTX, no timings, no paths
    with zipfile.ZipFile(out0 / "cuda.latch") as z:
        names = z.namelist()
        assert any(n.endswith(".ptx") for n in names)
        manifest = json.loads(z.read("manifest.json"))
        blob = b"".join(z.read(n) for n in names)
    assert "compile_seconds" not in manifest and "cache" not in manifest
    assert str(tmp_path).encode() not in blob and ROOT.encode() not in blob
    with zipfile.ZipFile(out0 / "cpu.latch") as z:
        assert "compile_seconds" not in json.loads(z.read("manifest.json"))
        assert str(tmp_path).encode() not in b"".join(z.read(n) for n in z.namelist())
