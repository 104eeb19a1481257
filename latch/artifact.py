"""The ``.latch`` artifact: one zip file holding ``manifest.json`` and the program's files.

Written deterministically (sorted names, fixed timestamps, no compression metadata that
varies), so two compilations of the same inputs give byte-identical files.  The manifest
records each file's SHA-256 and the Latch version; loading checks both, so a corrupted or
foreign artifact is rejected with a clear error instead of running.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile

from latch.errors import LatchError

FORMAT = "latch-artifact/1"
_EPOCH = (1980, 1, 1, 0, 0, 0)
# manifest keys that describe one compilation, not the program: never written (they would
# make the artifacts of identical inputs differ)
_VOLATILE = ("compile_seconds", "cache")


def _version() -> str:
    from latch import __version__
    return __version__


def write_artifact(path, manifest: dict, files: dict[str, bytes]) -> None:
    """Write atomically (:func:`atomic_write`)."""
    manifest = {k: v for k, v in manifest.items() if k not in _VOLATILE}
    manifest["artifact"] = {"format": FORMAT, "latch_version": _version(),
                            "files": {n: hashlib.sha256(b).hexdigest()
                                      for n, b in sorted(files.items())}}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        entries = {"manifest.json": json.dumps(manifest, indent=1, sort_keys=True).encode()}
        entries.update(files)
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, entries[name])
    atomic_write(path, buf.getvalue())


def _write_all(f, data: bytes) -> None:
    """Write ``data`` to ``f`` in 1 MiB pieces (a seam for the interruption tests)."""
    view = memoryview(data)
    for i in range(0, len(view), 1 << 20):
        f.write(view[i:i + (1 << 20)])


def atomic_write(path, data: bytes, tmp_prefix: str = ".latch-") -> None:
    """Temporary file in the same folder, write, flush, fsync, rename, fsync the folder:
    a reader sees the old file or the new one, never a torn one.  Used for artifacts,
    checkpoints and the compile cache's index."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=tmp_prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:                                    # make the rename itself durable
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def read_artifact(path) -> tuple[dict, dict[str, bytes]]:
    """(manifest, files); raises LatchError for a missing, corrupted or foreign artifact."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as z:
            entries = {n: z.read(n) for n in z.namelist()}
    except FileNotFoundError:
        raise LatchError(f"no artifact at {path}") from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise LatchError(f"{path} is not a Latch artifact or is corrupted ({e})") from None
    if "manifest.json" not in entries:
        raise LatchError(f"{path} is not a Latch artifact (no manifest.json)")
    try:
        manifest = json.loads(entries.pop("manifest.json"))
        info = manifest["artifact"]
    except (ValueError, KeyError, TypeError):
        raise LatchError(f"{path}: the manifest is unreadable (corrupted artifact)") from None
    if info.get("format") != FORMAT:
        raise LatchError(f"{path}: artifact format {info.get('format')!r}, this Latch reads {FORMAT!r}")
    if info.get("latch_version") != _version():
        raise LatchError(f"{path} was built by Latch {info.get('latch_version')}, this is "
                         f"{_version()}; recompile it")
    for name, digest in info["files"].items():
        if name not in entries or hashlib.sha256(entries[name]).hexdigest() != digest:
            raise LatchError(f"{path}: checksum mismatch in {name} (corrupted artifact)")
    return manifest, entries
