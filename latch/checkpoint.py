"""Checkpoints of the training state: ``state.save(path)`` and ``load_state(path, program)``.

A checkpoint is one zip file (stored, not compressed) holding ``checkpoint.json`` and one raw
little-endian tensor file per state slot (``tensors/<index>``), in the program's state order:

    checkpoint.json   {"format": "latch-checkpoint/1", "latch_version", "step",
                       "skipped_steps", "param_names",
                       "states": [{name, kind, shape, dtype, file, sha256}, ...]}

* **Atomic.**  The bytes are written to a temporary file in the destination's folder, flushed
  and fsync'ed, then renamed over the destination (``os.replace``) and the folder is
  fsync'ed.  A save that is interrupted at any point (exception, signal, power loss before
  the rename) leaves the previous checkpoint at ``path`` intact; the temporary file is
  removed when Python gets the chance.
* **Verified on load.**  The format and the Latch version must match; every tensor's
  SHA-256 must match the manifest; and the state layout recorded in the checkpoint (names,
  kinds, shapes, dtypes, in order) must be the layout of the program it is loaded into.
  Anything else raises :class:`latch.LatchError` naming the mismatch.
* **Deterministic.**  The same state gives the same bytes (sorted JSON, fixed zip
  timestamps, fixed order), so checkpoints can be compared or content-addressed.

The program's IR hash is recorded (``program_ir_sha256``) but not enforced: a state may be
loaded into a program compiled with other hyperparameters as long as the layout matches.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile

import numpy as np

from latch.artifact import atomic_write
from latch.errors import LatchError

FORMAT = "latch-checkpoint/1"
MANIFEST = "checkpoint.json"
_EPOCH = (1980, 1, 1, 0, 0, 0)
_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64,
       "i32": np.int32, "i1": np.bool_}


def _version() -> str:
    from latch import __version__
    return __version__


# ----------------------------------------------------------------------------- helpers
def _layout_of_program(program) -> list[dict]:
    """The state slots of a Program (``manifest["states"]``) or a CudaProgram."""
    slots = getattr(program, "states_spec", None)
    if slots is None:
        slots = program.manifest["states"]
    # a parameter's rounded copy (kind "copy") is not saved: loading the parameter remakes it
    return [{"name": s["name"], "kind": s.get("kind"), "shape": [int(d) for d in s["shape"]],
             "dtype": s["dtype"]} for s in slots if s.get("kind") != "copy"]


def _layout_of_state(state) -> list[dict]:
    slots = getattr(state, "_slots", None)
    if slots is None:                       # a CudaTrainingState
        return _layout_of_program(state.program)
    return [{"name": s["name"], "kind": s.get("kind"), "shape": [int(d) for d in s["shape"]],
             "dtype": s["dtype"]} for s in slots]


def _host_arrays(state, layout) -> list[np.ndarray]:
    if hasattr(state, "ordered"):           # latch.state.TrainingState: numpy already
        arrays = state.ordered()
    else:
        tensors = state.tensors()
        arrays = [tensors[s["name"]].detach().cpu().numpy() for s in layout]
    out = []
    for s, a in zip(layout, arrays):
        want = _NP.get(s["dtype"])
        if want is None:
            raise LatchError(f"state {s['name']!r}: dtype {s['dtype']} cannot be checkpointed")
        a = np.array(a, dtype=want, order="C")   # (ascontiguousarray makes 0-d arrays 1-d)
        if list(a.shape) != s["shape"]:
            raise LatchError(f"state {s['name']!r} holds shape {list(a.shape)}, its slot "
                             f"says {s['shape']}")
        out.append(a)
    return out


def _to_bytes(a: np.ndarray) -> bytes:
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes(order="C")


def encode(state) -> bytes:
    """The checkpoint bytes of ``state`` (deterministic)."""
    layout = _layout_of_state(state)
    arrays = _host_arrays(state, layout)
    blobs, entries = {}, []
    for i, (s, a) in enumerate(zip(layout, arrays)):
        name = f"tensors/{i:05d}"
        blob = _to_bytes(a)
        blobs[name] = blob
        entries.append({**s, "file": name, "sha256": hashlib.sha256(blob).hexdigest()})
    step_slot = next((a for s, a in zip(layout, arrays) if s["name"] == "step"), None)
    program = getattr(state, "program", None)
    manifest = {
        "format": FORMAT,
        "latch_version": _version(),
        "step": int(step_slot) if step_slot is not None else None,
        "skipped_steps": int(getattr(state, "skipped_steps", 0)),
        "param_names": list(getattr(state, "_param_names", [])),
        "states": entries,
    }
    if program is not None and "ir_sha256" in getattr(program, "manifest", {}):
        manifest["program_ir_sha256"] = program.manifest["ir_sha256"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        files = {MANIFEST: json.dumps(manifest, indent=1, sort_keys=True).encode(), **blobs}
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            z.writestr(info, files[name])
    return buf.getvalue()


# ----------------------------------------------------------------------------- API
def save_state(state, path) -> None:
    """Write ``state`` to ``path`` atomically (see the module docstring)."""
    atomic_write(path, encode(state), tmp_prefix=".latch-ckpt-")


def read_checkpoint(path) -> tuple[dict, dict[str, np.ndarray]]:
    """(manifest, {state name: array}) after checking the format, version and checksums."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as z:
            files = {n: z.read(n) for n in z.namelist()}
    except FileNotFoundError:
        raise LatchError(f"no checkpoint at {path}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as e:
        raise LatchError(f"{path} is not a Latch checkpoint or is corrupted ({e})") from None
    if MANIFEST not in files:
        raise LatchError(f"{path} is not a Latch checkpoint (no {MANIFEST})")
    try:
        manifest = json.loads(files[MANIFEST])
        fmt, entries = manifest["format"], manifest["states"]
        if not isinstance(entries, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise LatchError(f"{path}: {MANIFEST} is unreadable (corrupted checkpoint)") from None
    if fmt != FORMAT:
        raise LatchError(f"{path}: checkpoint format {fmt!r}, this Latch reads {FORMAT!r}")
    if manifest.get("latch_version") != _version():
        raise LatchError(f"{path} was written by Latch {manifest.get('latch_version')}, this "
                         f"is {_version()}")
    arrays = {}
    for e in entries:
        try:
            name, blob = e["name"], files.get(e["file"])
            dtype, shape = _NP[e["dtype"]], tuple(int(d) for d in e["shape"])
        except (KeyError, TypeError, ValueError):
            raise LatchError(f"{path}: a state entry of {MANIFEST} is malformed "
                             "(corrupted checkpoint)") from None
        if blob is None:
            raise LatchError(f"{path}: the tensor of state {name!r} is missing "
                             "(corrupted checkpoint)")
        if hashlib.sha256(blob).hexdigest() != e.get("sha256"):
            raise LatchError(f"{path}: checksum mismatch in state {name!r} "
                             "(corrupted checkpoint)")
        want = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if len(blob) != want:
            raise LatchError(f"{path}: state {name!r} holds {len(blob)} bytes, "
                             f"{e['dtype']}{list(shape)} needs {want}")
        arrays[name] = np.frombuffer(blob, dtype=np.dtype(dtype).newbyteorder("<")) \
            .astype(dtype).reshape(shape).copy()
    return manifest, arrays


def check_layout(saved: list[dict], expected: list[dict], path: str = "checkpoint") -> None:
    """Raise LatchError naming the first difference between two state layouts."""
    names_s = [s["name"] for s in saved]
    names_e = [s["name"] for s in expected]
    missing = [n for n in names_e if n not in names_s]
    extra = [n for n in names_s if n not in names_e]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"the program has states the checkpoint lacks: {missing}")
        if extra:
            parts.append(f"the checkpoint has states the program lacks: {extra}")
        raise LatchError(f"{path} does not fit this program: " + "; ".join(parts)
                         + " (was it saved from a program with another model or rule?)")
    if names_s != names_e:
        raise LatchError(f"{path} does not fit this program: states in another order "
                         f"({names_s} vs {names_e})")
    for s, e in zip(saved, expected):
        for key in ("kind", "shape", "dtype"):
            if s.get(key) != e.get(key):
                raise LatchError(f"{path} does not fit this program: state {s['name']!r} has "
                                 f"{key} {s.get(key)!r} in the checkpoint, the program expects "
                                 f"{e.get(key)!r}")


def load_state(path, program):
    """A new training state for ``program`` holding the tensors saved at ``path``.

    Raises :class:`latch.LatchError` for a missing, corrupted, foreign or mismatched
    checkpoint; nothing is loaded unless every check passes.
    """
    manifest, arrays = read_checkpoint(path)
    expected = _layout_of_program(program)
    saved = [{k: s.get(k) for k in ("name", "kind", "shape", "dtype")}
             for s in manifest["states"]]
    check_layout(saved, expected, os.fspath(path))
    skipped = int(manifest.get("skipped_steps") or 0)
    if hasattr(program, "states_spec"):          # a CudaProgram (latch.runtime)
        import torch
        from latch.runtime.program import CudaTrainingState
        state = CudaTrainingState(program, {n: torch.from_numpy(a) for n, a in arrays.items()})
    else:
        from latch.state import TrainingState
        state = TrainingState(program.manifest["states"], arrays,
                              program.manifest["param_names"])
    state.skipped_steps = skipped
    return state
