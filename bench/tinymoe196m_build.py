"""Build the TinyMoE-196M (WORKLOADS.md) update for target cuda: cold compile
(LATCH_CACHE=0), per-stage compile time, launch/kernel counts, arena, artifact size.

    .venv/bin/python bench/tinymoe196m_build.py
        [--builds b2-bf16,b32-bf16,b2-fp32,b2-bf16-every16,b32-bf16-looped,b32-bf16-padded]

Each build is ``b<batch>-<precision>`` with the recipe of its batch (B2 for b2, Q for
b32); ``b<batch>-<precision>-every<N>`` is the selective-updates workload (expert weights
step every N microbatches: tinymoe_model.selective_rule; bench/selective_gpu.py runs it);
``b<batch>-<precision>-looped`` (e.g. b32-bf16-looped) is the looped TinyMoE of WORKLOADS.md
(layers 2-5 applied twice: tinymoe_model.make_looped_tinymoe_196m; bench/tinymoe_bench_gpu.py
--workloads looped-b32 runs it; each visit of the repeat traced as ordinary layers, the
default ``repeat="unroll"`` on cuda, and with a trailing ``-loop``, b32-bf16-looped-loop,
``repeat="loop"``: one loop whose backward rematerializes each visit's forward, for the
bench's ``latch-loop`` engine); a trailing ``-math``, ``-flash`` or ``-fused``
(e.g. b32-bf16-math) compiles with that ``attention`` option instead of the default
(``"auto"``: fused attention kernels on cuda with bf16; latch/frontend/attention.py), for the
bench's ``latch-math`` / ``latch-flash`` / ``latch-fused`` engines; a trailing ``-det``
(e.g. b32-bf16-det) compiles with ``deterministic=True`` (no float atomics: products with a
one-hot factor summed in a fixed order) for the bench's ``latch-det`` engine; trailing
``OFF_SWITCHES`` suffixes (e.g. b32-bf16-padded, b32-bf16-padded-gridorder) switch steps
off for their A/B: ``-padded`` the expert products computing every capacity slot
(``latch-form-contraction-kernels{empty-rows=false}``), ``-gridorder`` the causal attention
blocks in grid order (``latch-form-attention-kernels{heavy-first=false}``), ``-mmasync``
the attention kernels' products as ``mma.sync`` instead of ``wgmma``
(``latch-form-attention-kernels{chip=sm_90}``),
``-unfinished`` row reductions without their elementwise reader
(``latch-wrap-host-compute{finish-rows=false}``), ``-unfused`` no ``latch-fuse-rows``,
``-reuse0`` ``latch-plan-memory{reuse-distance=0}``, ``-widelanes`` elementwise vector lanes
set by the widest element instead of the narrowest
(``latch-map-parallel-loops{narrow-lanes=false}``), ``-arangebuffers`` aranges read from
their buffers (``latch-recompute-elementwise{aranges=false}``, at each of its places in the
pipeline), ``-stridedsums`` the loss's row max and sum of exponentials, the full sums and the
row reductions reading one element a load (``latch-wrap-host-compute{chunks=false}``), ``-serialsums``
a thread's integer sums in one chain (``latch-split-integer-sums{chains=1}``), ``-zerofill``
the zero fills before reductions left to loops kept as launches (no ``latch-fold-zero-fills``,
the default before the nineteenth stop), ``-rowzerofill`` the zero fills of warp row
reductions' totals kept as launches (``latch-wrap-host-compute{fold-zeros=false}``, likewise),
``-readerlaunch`` a parallel loop reading element for element what the one before it stored
in a launch of its own (no ``latch-fuse-element-readers``, likewise), ``-rowlaunch`` a
parallel loop read a row at a time by the next one in a launch of its own
(``latch-fuse-element-readers{rows=false}``, the default before the twentieth stop),
``-walklaunch`` each one-hot gather's overflow walk in a launch of its own
(``latch-form-contraction-kernels{gather-walk=launch}``: the default again since the
twenty-first stop, so a no-op kept for the older builds' names), the on-switch
``-walkinlaunch`` the walk in the gather's own launch (``gather-walk=last``, the
twentieth stop's default), ``-sumlaunch`` a split product's slices added into its f32
output and rounded to bf16 by a launch after (``round-sums=false``, the default before the
twenty-first stop), ``-clampedrows`` the tile rows past a factor shorter than its tile (the
router's 8 rows of 128) copied from the factor's last row instead of zero-filled without a
read (``fill-past-factor=false``, the default before the twenty-second stop),
``-chunkstores`` each unrolled copy of a row kernel's chunk loop loading, working and
storing in turn (``latch-wrap-host-compute{loads-first=false}``), ``-partrows`` those loops
unrolled 4 times with a remainder loop (``whole-rows=false``; both the defaults before the
twenty-second stop),
``-splitloss``
the loss gradient in a launch of its own after the loss's log-sum-exp (no
``latch-hoist-row-readers``), ``-castsperstep`` the weights rounded to bf16 by a cast launch
each at the start of every update instead of carried as state (no ``latch-carry-casts``),
``-heldrows`` the loss's rows held in registers for its gradient instead of kept in shared
memory (``latch-wrap-host-compute{held-chunks=16}``, the sixth stop's form), ``-rereadrows``
the loss's rows read again from memory for its gradient (``latch-wrap-host-compute{staged-rows=0}``,
the default before the ninth stop), ``-onechunkloads`` the loss's online softmax loading one
chunk of a row a loop iteration (``latch-wrap-host-compute{softmax-unroll=1}``, the default
before the tenth stop), ``-partwaves`` the norm weights' gradients (column-tile reductions) cut into
the fewest slices making 264 blocks (``latch-wrap-host-compute{column-waves=false}``, the
default before the tenth stop: 1.45 waves at B32), ``-normlaunch`` the readers of a row
reduction's totals (RMSNorm's normalization) in a launch of their own instead of in the
reduction's warps (``latch-wrap-host-compute{row-readers=false}``, the default before the
eleventh stop), ``-inplacelaunch`` a row reduction's reader that accumulates in place
(RMSNorm's backward, ``dx += ...``) in a launch of its own
(``latch-wrap-host-compute{in-place-readers=false}``, the default before the eighteenth
stop), ``-addlaunch`` the elementwise op writing a row reduction's input (the
residual add before RMSNorm) in a launch of its own
(``latch-wrap-host-compute{row-writers=false}``, the default before the eleventh stop), the
on-switch ``-widecolumns`` column tiles 128
bytes of the input wide instead of 32 (a warp reads whole 128-byte lines of one row:
``latch-wrap-host-compute{column-bytes=128}``: slower for bf16 inputs on an H100), ``-splitstores`` elementwise kernels that read bf16 beside
f32 taking 8 lanes even where they store f32 (``latch-map-parallel-loops{whole-stores=false}``,
the default before the ninth stop), and one step *on* that is off by default:
``-lastblocksums`` the full sums over several blocks (the clip's per-tensor sums of squares)
finished by their last block instead of a second launch
(``latch-wrap-host-compute{last-block-sums=true}``: slower on the H100), the on-switch
``-deepunroll`` row reductions of a block per output on few blocks (the MoE's per-expert
counts) unrolled 16 times instead of 4 (``latch-wrap-host-compute{few-rows-unroll=16}``: gain
not established on an H100), the on-switch ``-classsums`` the routing rank's count as one thread per row of
experts (``latch-wrap-host-compute{class-sums=true}``: slower on an H100); ``-perthread2``,
``-perthread1`` elementwise kernels running at most 2 (1) vector iterations a thread instead
of 4 (``latch-map-parallel-loops{per-thread=2}``: fewer registers, more threads resident); ``-scalargathers``
the one-hot gathers reading a source row one element a load
(``latch-form-contraction-kernels{gather-lanes=false}``), ``-loadpadding`` the elementwise
kernels between the expert products loading their inputs in the capacity rows past each
expert's extent too (``latch-form-contraction-kernels{empty-row-loads=false}``, the default
before the tenth stop), ``-readerapart`` the tied
embedding's gradient sum (LM head + embedding) in a pass of its own after the embedding's
gather (``latch-form-contraction-kernels{gather-readers=false}``), ``-noepiloguereaders``
every elementwise op right after a product in a launch of its own
(``latch-form-contraction-kernels{epilogue-readers=none}``; by default, "large", the
SwiGLU backward of B32 is computed in its product's epilogue), the on-switch
``-allepiloguereaders`` every such op that matches in the product's epilogue (the SwiGLU
forward too, B2's, the selective update's gradient accumulations:
``epilogue-readers=all``; the thirteenth stop's ``-epiloguereaders`` builds),
the on-switch ``-prefetch`` those products asking L2 for their reader's other inputs
before the k-loop (``epilogue-prefetch=true``: slower on an H100), the on-switch
``-unroll16`` sequential loops of up to 16 trips and 1024 ops in a parallel body unrolled
(``latch-unroll-short-loops{max-trips=16 max-ops=1024}``: the routing rank's scan products;
B2 critical path 4.73 -> 4.67 ms on an H100, measured once), ``-indexloads`` the scan's
0/1 triangle loaded by the routing rank's products instead of computed from their loop
indices (no ``latch-recompute-index-functions``, the default before the seventeenth
stop) — the same workload, run by
bench/tinymoe_bench_gpu.py's ``latch-<suffix>`` engines side by side with ``latch``.  Writes bench/artifacts/tinymoe196m/tinymoe196m-<build>.latch
(PTX + manifest, no weights: the GPU side rebuilds the model from the same seed) and
build.json next to them (compile times, counts, and a fingerprint of the initial parameters
so that the GPU side can check it built the same model).  bench/tinymoe_bench_gpu.py runs
them on the GPU, side by side with the PyTorch controls.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
OUT = os.path.join(ROOT, "bench", "artifacts", "tinymoe196m")


#: the tracked sources an artifact is compiled from (a change there makes the stamp dirty)
SOURCES = ("latch", "passes", "dialect", "bench/tinymoe_model.py", "bench/tinymoe196m_build.py")


def source_stamp(root: str = ROOT) -> str:
    """The commit the checkout's compiler sources are at, short, with ``+dirty`` when
    they differ from it (uncommitted edits); "unknown" without git.  Recorded with each
    build (build.json ``source``) so that a GPU run states which program it ran — not
    the commit the person starting it believes (the twenty-fourth stop found B32,
    selective and looped artifacts built at an earlier commit than the one their runs
    were labelled with)."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                *SOURCES], cwd=root, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def sources_digest(root: str = ROOT) -> str:
    """SHA-256 over the relative paths and bytes of the compiler's Python sources
    (:data:`SOURCES`, sorted; no git needed): computed again on the GPU machine from its
    copy of the tree, it tells whether an artifact was built from the sources a run
    carries, whatever commit the run is labelled with."""
    from latch.cache import files_digest, python_sources

    files = []
    for top in SOURCES:
        path = os.path.join(root, top)
        files += [top] if os.path.isfile(path) else \
            [f"{top}/{rel}" for rel in python_sources(path)]
    return files_digest((rel, os.path.join(root, rel)) for rel in sorted(files))


def file_sha256(path: str) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def artifact_record(name: str, out: str = OUT) -> dict:
    """What build.json says of build ``name``, whether its artifact on disk is the one
    that build wrote and whether it was built from the sources in this tree:
    {"artifact_source": git stamp or None, "artifact_is_recorded": bool or None (no
    record of its bytes), "artifact_sources_match": bool or None (no record of its
    sources)} — for the GPU benches' records."""
    path = os.path.join(out, f"tinymoe196m-{name}.latch")
    try:
        rec = json.load(open(os.path.join(out, "build.json"))).get(name, {})
    except (OSError, ValueError):
        rec = {}
    sha, digest = rec.get("artifact_sha256"), rec.get("sources_sha256")
    return {"artifact_source": rec.get("source"),
            "artifact_is_recorded": (file_sha256(path) == sha) if sha and
            os.path.exists(path) else None,
            "artifact_sources_match": (sources_digest() == digest) if digest else None}


def fingerprint(model) -> dict:
    """Sum and sum of squares (float64) of a few parameters: the same seed must give the
    same model on the GPU machine."""
    named = dict(model.named_parameters())
    out = {}
    for n in ("tok.weight", "pos.weight", "layers.0.qkv.weight", "layers.7.moe.w2"):
        t = named[n].detach().double()
        out[n] = [float(t.sum()), float((t * t).sum())]
    return out


#: build-name suffix -> (pipeline, pass, its option ``key=value`` or None to drop the
#: pass): the A/B builds of a step (the artifact is the same workload: run it in place of
#: the default, or side by side as bench/tinymoe_bench_gpu.py's ``latch-<suffix>`` engine)
OFF_SWITCHES = {
    "padded": ("latch-form-kernels", "latch-form-contraction-kernels", "empty-rows=false"),
    "gridorder": ("latch-form-kernels", "latch-form-attention-kernels", "heavy-first=false"),
    "mmasync": ("latch-form-kernels", "latch-form-attention-kernels", "chip=sm_90"),
    "unfinished": ("latch-form-kernels", "latch-wrap-host-compute", "finish-rows=false"),
    "unfused": ("latch-form-kernels", "latch-fuse-rows", None),
    "reuse0": ("latch-bufferize", "latch-plan-memory", "reuse-distance=0"),
    "widelanes": ("latch-form-kernels", "latch-map-parallel-loops", "narrow-lanes=false"),
    "splitstores": ("latch-form-kernels", "latch-map-parallel-loops", "whole-stores=false"),
    "perthread2": ("latch-form-kernels", "latch-map-parallel-loops", "per-thread=2"),
    "perthread1": ("latch-form-kernels", "latch-map-parallel-loops", "per-thread=1"),
    "arangebuffers": ("latch-bufferize", "latch-recompute-elementwise", "aranges=false"),
    "stridedsums": ("latch-form-kernels", "latch-wrap-host-compute", "chunks=false"),
    "serialsums": ("latch-form-kernels", "latch-split-integer-sums", "chains=1"),
    "zerofill": ("latch-form-kernels", "latch-fold-zero-fills", None),
    "rowzerofill": ("latch-form-kernels", "latch-wrap-host-compute", "fold-zeros=false"),
    "readerlaunch": ("latch-form-kernels", "latch-fuse-element-readers", None),
    "rowlaunch": ("latch-form-kernels", "latch-fuse-element-readers", "rows=false"),
    "walklaunch": ("latch-form-kernels", "latch-form-contraction-kernels",
                   "gather-walk=launch"),
    "walkinlaunch": ("latch-form-kernels", "latch-form-contraction-kernels",
                     "gather-walk=last"),
    "sumlaunch": ("latch-form-kernels", "latch-form-contraction-kernels", "round-sums=false"),
    "clampedrows": ("latch-form-kernels", "latch-form-contraction-kernels",
                    "fill-past-factor=false"),
    "twoblocks": ("latch-form-kernels", "latch-form-contraction-kernels", "blocks-per-sm=2"),
    # a block a tile (persistent products are the default since the twenty-fifth stop)
    "tilewise": ("latch-form-kernels", "latch-form-contraction-kernels", "persistent=false"),
    "splitkv4": ("latch-form-kernels", "latch-form-attention-kernels", "kv-split=4"),
    "splitkv8": ("latch-form-kernels", "latch-form-attention-kernels", "kv-split=8"),
    # the flash kernels' resident blocks an SM: 3 (dK/dV's registers capped, 2 -> 3 blocks)
    # or 4 (also the forward's, 3 -> 4); dQ stays at 3 (its shared memory)
    "attnblocks3": ("latch-form-kernels", "latch-form-attention-kernels", "blocks-per-sm=3"),
    "attnblocks4": ("latch-form-kernels", "latch-form-attention-kernels", "blocks-per-sm=4"),
    "chunkstores": ("latch-form-kernels", "latch-wrap-host-compute", "loads-first=false"),
    "partrows": ("latch-form-kernels", "latch-wrap-host-compute", "whole-rows=false"),
    "keptrows": ("latch-form-kernels", "latch-wrap-host-compute", "held-rows=true"),
    "splitloss": ("latch-bufferize", "latch-hoist-row-readers", None),
    "castsperstep": ("latch-bufferize", "latch-carry-casts", None),
    "heldrows": ("latch-form-kernels", "latch-wrap-host-compute", "held-chunks=16"),
    "rereadrows": ("latch-form-kernels", "latch-wrap-host-compute", "staged-rows=0"),
    "onechunkloads": ("latch-form-kernels", "latch-wrap-host-compute", "softmax-unroll=1"),
    "partwaves": ("latch-form-kernels", "latch-wrap-host-compute", "column-waves=false"),
    "normlaunch": ("latch-form-kernels", "latch-wrap-host-compute", "row-readers=false"),
    "inplacelaunch": ("latch-form-kernels", "latch-wrap-host-compute",
                      "in-place-readers=false"),
    "addlaunch": ("latch-form-kernels", "latch-wrap-host-compute", "row-writers=false"),
    "widecolumns": ("latch-form-kernels", "latch-wrap-host-compute", "column-bytes=128"),
    "lastblocksums": ("latch-form-kernels", "latch-wrap-host-compute", "last-block-sums=true"),
    "deepunroll": ("latch-form-kernels", "latch-wrap-host-compute", "few-rows-unroll=16"),
    "classsums": ("latch-form-kernels", "latch-wrap-host-compute", "class-sums=true"),
    "loadpadding": ("latch-form-kernels", "latch-form-contraction-kernels",
                    "empty-row-loads=false"),
    "scalargathers": ("latch-form-kernels", "latch-form-contraction-kernels",
                      "gather-lanes=false"),
    "readerapart": ("latch-form-kernels", "latch-form-contraction-kernels",
                    "gather-readers=false"),
    "noepiloguereaders": ("latch-form-kernels", "latch-form-contraction-kernels",
                          "epilogue-readers=none"),
    "allepiloguereaders": ("latch-form-kernels", "latch-form-contraction-kernels",
                           "epilogue-readers=all"),
    "prefetch": ("latch-form-kernels", "latch-form-contraction-kernels",
                 "epilogue-prefetch=true"),
    "unroll16": ("latch-form-kernels", "latch-unroll-short-loops", "max-trips=16 max-ops=1024"),
    "indexloads": ("latch-form-kernels", "latch-recompute-index-functions", None),
}


#: build switches that set a module global of the compiler for the build (not a pass
#: option): suffix -> (module, name, value)
GLOBAL_SWITCHES = {
    # launch ranges carry strided rows (passes/extract_launches.py STRIDED_ROWS): attention's
    # dQ and dK/dV kernels, writing parts of one fused gradient, not ordered
    "sideparts": ("latch.passes.extract_launches", "STRIDED_ROWS", True),
}


def _with_option(element: str, option: str) -> str:
    """A pipeline element (a pass with ``{{...}}`` options, format-escaped) with ``option``
    (``key=value``) set, replacing the key's value if it has one."""
    key = option.split("=")[0]
    if "{{" not in element:
        return element + "{{" + option + "}}"
    name, rest = element.split("{{", 1)
    options = [o for o in rest[:-2].split() if o.split("=")[0] != key]
    return name + "{{" + " ".join([option] + options) + "}}"


@contextlib.contextmanager
def _switched_off(suffixes: list):
    """The pipelines with the OFF_SWITCHES of ``suffixes`` applied while the block runs."""
    import dataclasses

    from latch.passes.pipelines import PIPELINES

    import importlib

    saved = dict(PIPELINES)
    saved_globals = []
    removed = set()                            # passes an earlier switch took out
    for suffix in suffixes:
        if suffix in GLOBAL_SWITCHES:
            module, name, value = GLOBAL_SWITCHES[suffix]
            mod = importlib.import_module(module)
            saved_globals.append((mod, name, getattr(mod, name)))
            setattr(mod, name, value)
            continue
        pipeline, pass_name, option = OFF_SWITCHES[suffix]
        named = PIPELINES[pipeline]
        elements = list(named.elements)
        at = [i for i, e in enumerate(elements) if e.split("{")[0] == pass_name]
        if not at and (pipeline, pass_name) in removed:
            continue                           # an option of a pass already off: moot
        assert at, f"{pass_name} not in {pipeline}"
        if option is None:
            removed.add((pipeline, pass_name))
        for i in reversed(at):                 # every place the pass runs
            if option is None:
                del elements[i]
            else:
                elements[i] = _with_option(elements[i], option)
        PIPELINES[pipeline] = dataclasses.replace(named, elements=tuple(elements))
    try:
        yield
    finally:
        PIPELINES.clear()
        PIPELINES.update(saved)
        for mod, name, value in reversed(saved_globals):
            setattr(mod, name, value)


def build(name: str) -> dict:
    os.environ["LATCH_CACHE"] = "0"
    import latch
    from tinymoe_model import (make_looped_tinymoe_196m, make_tinymoe_196m, selective_rule,
                               tinymoe_rule)

    batch_s, precision, *variant = name.split("-")
    batch = int(batch_s[1:])
    recipe = "B2" if batch == 2 else "Q"
    rule = tinymoe_rule(recipe)
    make = make_tinymoe_196m
    attention = "auto"           # latch.compile's default (fused attention on cuda with bf16)
    switches = []                  # e.g. b32-bf16-padded: empty-rows=false (OFF_SWITCHES)
    while variant[-1:] and (variant[-1] in OFF_SWITCHES or variant[-1] in GLOBAL_SWITCHES):
        switches.insert(0, variant.pop())
    repeat = "auto"     # latch.compile's default: each latch.repeat unrolled on cuda
    if variant[-1:] == ["loop"]:    # e.g. b32-bf16-looped-loop: repeat="loop"
        repeat, variant = "loop", variant[:-1]
    deterministic = variant[-1:] == ["det"]      # e.g. b32-bf16-det: deterministic=True
    if deterministic:
        variant = variant[:-1]
    if variant[-1:] in (["math"], ["flash"], ["fused"]):   # e.g. b32-bf16-math: attention="math"
        attention, variant = variant[-1], variant[:-1]
    if variant == ["looped"]:   # e.g. b32-bf16-looped: the looped TinyMoE (layers 2-5 twice)
        make = make_looped_tinymoe_196m
    elif variant:        # e.g. b2-bf16-every16: the selective-updates workload
        if len(variant) != 1 or not variant[0].startswith("every"):
            raise SystemExit(f"unknown build {name!r}")
        rule = selective_rule(recipe, int(variant[0][len("every"):]))
    model, example = make(batch=batch)
    rec = {"precision": precision, "batch": batch, "recipe": recipe, "attention": attention,
           "deterministic": deterministic, "repeat": repeat, "fingerprint": fingerprint(model),
           "source": source_stamp(), "sources_sha256": sources_digest()}
    if make is make_looped_tinymoe_196m:
        rec["loop"] = list(model.loop)
        rec["layer_applications"] = model.applications
    rec["switched_off"] = [OFF_SWITCHES.get(w) or GLOBAL_SWITCHES[w] for w in switches]
    t0 = time.perf_counter()
    try:
        with _switched_off(switches):
            prog = latch.compile(model, rule, example, target="cuda", precision=precision,
                                 attention=attention, deterministic=deterministic,
                                 repeat=repeat)
    except Exception as e:  # noqa: BLE001 - record where the cuda path stops
        rec["failed"] = f"{type(e).__name__}: {str(e)[:2000]}"
        rec["traceback_tail"] = traceback.format_exc().splitlines()[-8:]
        rec["total_s"] = round(time.perf_counter() - t0, 3)
        return rec
    rec["total_s"] = round(time.perf_counter() - t0, 3)
    rec["stages_s"] = {k: round(v, 3) for k, v in prog.compile_seconds.items()}
    m = prog.manifest
    rec["launches"] = len(m["launches"])
    rec["kernel_modules"] = len(m["modules"])
    rec["state_copies"] = len(m["copies"])
    one_block = [la for la in m["launches"] if [int(x) for x in la["grid"]] == [1, 1, 1]]
    rec["one_block_launches"] = len(one_block)   # serial kernels and block reductions
    rec["memory"] = m["memory"]
    rec["ptx_bytes"] = sum(len(v) for v in prog.files.values())
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"tinymoe196m-{name}.latch")
    prog.save(path)
    rec["artifact"] = os.path.relpath(path, ROOT)
    rec["artifact_bytes"] = os.path.getsize(path)
    rec["artifact_sha256"] = file_sha256(path)
    rec["report"] = prog.report().splitlines()
    return rec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--builds", default="b2-bf16,b32-bf16")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(build(args.child)))
        return 0
    import subprocess
    os.makedirs(OUT, exist_ok=True)
    bpath = os.path.join(OUT, "build.json")
    results = json.load(open(bpath)) if os.path.exists(bpath) else {}
    results = {k: v for k, v in results.items() if "-" in k}   # older layout: by precision
    for prec in args.builds.split(","):
        # a fresh process per build: cold compile, nothing shared
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", prec],
                           capture_output=True, text=True, cwd=ROOT,
                           env=dict(os.environ, LATCH_CACHE="0"))
        if r.returncode != 0:
            results[prec] = {"failed": r.stderr.strip().splitlines()[-15:]}
        else:
            results[prec] = json.loads(r.stdout.strip().splitlines()[-1])
        res = results[prec]
        print(prec, json.dumps({k: v for k, v in res.items() if k != "report"})[:3000],
              flush=True)
        for line in res.get("report", []):
            print("   ", line)
    with open(bpath, "w") as f:
        json.dump(results, f, indent=1)
    # this run's builds decide the status; build.json may keep older runs' failures
    return 0 if all("failed" not in results[b] for b in args.builds.split(",")) else 1


if __name__ == "__main__":
    sys.exit(main())
