"""Static checks of cuda artifacts (no GPU, no MLIR): every launch of every manifest.

    .venv/bin/python bench/gpu_check_manifests.py bench/artifacts/*.latch

Checks: grid within (2^31-1, 65535, 65535) and >= 1; threads per block <= 1024; the
kernel's PTX ``.entry`` exists and its ``.param`` count and types match the launch's
arguments (bare-pointer ABI: ptr/i64 -> .u64/.b64, i32 -> .u32, f32 -> .f32, ...); every
arena location (and copy) lies inside ``arena_bytes``; state/input/output indices exist.
(Extents of pointer arguments against their buffers are checked at compile time, in
passes/extract_launches.py.)  Exit status 1 if anything is wrong.
"""
from __future__ import annotations

import re
import sys

_PTX_TYPES = {"ptr": ("u64", "b64"), "i64": ("u64", "b64", "s64"), "f32": ("f32",),
              "f64": ("f64",), "i32": ("u32", "b32", "s32"), "i16": ("u16", "b16", "s16"),
              "i8": ("u8", "b8", "s8"), "i1": ("u8", "b8", "pred")}


def check(path) -> list[str]:
    from latch.artifact import read_artifact

    manifest, files = read_artifact(path)
    problems = []
    arena = int(manifest["arena_bytes"])
    counts = {k: len(manifest[k + "s"]) for k in ("state", "input", "output")}
    entries = {}
    for mod, f in manifest["modules"].items():
        text = files[f].decode()
        for m in re.finditer(r"\.entry\s+(\w+)\s*\((.*?)\)", text, re.S):
            entries[(mod, m.group(1))] = re.findall(r"\.param\s+\.(\w+)", m.group(2))

    def check_loc(what, loc, nbytes=1):
        if "arena" in loc:
            off = int(loc["arena"]) + int(loc.get("byte_offset", 0))
            if off < 0 or off + nbytes > arena:
                problems.append(f"{what}: arena [{off}, {off + nbytes}) outside {arena} B")
        else:
            for k, n in counts.items():
                if k in loc and not 0 <= int(loc[k]) < n:
                    problems.append(f"{what}: {k} {loc[k]} of {n}")

    for i, launch in enumerate(manifest["launches"]):
        what = f"launch {i} {launch['module']}::{launch['kernel']}"
        g, b = launch["grid"], launch["block"]
        if not (1 <= g[0] <= 2**31 - 1 and 1 <= g[1] <= 65535 and 1 <= g[2] <= 65535):
            problems.append(f"{what}: grid {g}")
        if min(b) < 1 or b[0] * b[1] * b[2] > 1024 or b[2] > 64:
            problems.append(f"{what}: block {b}")
        params = entries.get((launch["module"], launch["kernel"]))
        if params is None:
            problems.append(f"{what}: no .entry in the PTX")
        elif len(params) != len(launch["args"]):
            problems.append(f"{what}: {len(params)} .params, {len(launch['args'])} args")
        else:
            for j, (a, p) in enumerate(zip(launch["args"], params)):
                if p not in _PTX_TYPES.get(a["type"], ()):
                    problems.append(f"{what}: arg {j} is {a['type']}, .param .{p}")
        for j, a in enumerate(launch["args"]):
            if a["type"] == "ptr":
                check_loc(f"{what} arg {j}", a)
    for i, c in enumerate(manifest.get("copies", [])):
        check_loc(f"copy {i} src", c["src"], int(c["bytes"]))
        check_loc(f"copy {i} dst", c["dst"], int(c["bytes"]))
    return problems


def main(paths) -> int:
    bad = 0
    for p in paths:
        problems = check(p)
        print(f"{p}: {'ok' if not problems else f'{len(problems)} problems'}")
        for line in problems[:20]:
            print("  " + line)
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
