"""The persistent compile cache: ``latch.compile`` looks a program up before building it.

The key is the SHA-256 of a canonical JSON of these components (each hashed on its own,
so that a miss can say which one changed):

  graph       the traced aten graph's text and every constant baked into it (buffers, and
              for compiled functions the parameters: their bytes)
  params      parameter names, shapes and dtypes, in order
  inputs      the example inputs' shapes and dtypes
  rule        ``rule.describe()`` (type and every hyperparameter, schedules included)
  options     every field of :class:`latch.options.CompileOptions`
  target      the target name
  latch       Latch's version and a digest of its Python sources (latch/, passes/, dialect/)
  mlir, torch-mlir, torch    the installed versions (importlib.metadata)

Nothing process-specific goes in: no ``id()``, no addresses, no ``hash()`` (so no
PYTHONHASHSEED dependence), no paths, no timestamps.  The values of the *parameters* of a
model compiled with a rule are not part of the key: the program takes them as state
(``prog.init(model)`` copies them), so one program serves any weights of the same shapes.

Entries are ``.latch`` artifacts (the bytes :meth:`Program.save` writes, for the cpu and
the cuda target alike), stored atomically (temporary file, fsync, rename) under
``$LATCH_CACHE_DIR`` (default ``$XDG_CACHE_HOME/latch`` or ``~/.cache/latch``).  An entry
that fails its checksums is a miss with reason ``corrupted`` and is replaced.  Every model
identity (the model's type and parameter names) keeps a small index of the component
digests of its recent entries, so a miss names the components that differ from the
closest previous entry ("miss: rule changed", "miss: torch version changed") or says
"new model".  ``LATCH_CACHE=0`` disables the cache.

Finding an entry without tracing.  Tracing takes seconds in a new process, so the key is
not where a lookup starts: first the model is *fingerprinted*
(:mod:`latch.frontend.fingerprint`: one eager run of the model on copies of its tensors
recording every torch call it makes, milliseconds; a model too large for that runs on fake
tensors instead, TinyMoE-196M in 0.3 s plus 0.5 s importing sympy; it declines models whose
record might not determine the trace).  The
*fingerprint key* has the same components as the key with the fingerprint in place of the
traced graph; when a compile has traced, keyed and found or stored its entry, the
fingerprint key is recorded as leading to it (``<root>/v1/fingerprints/``), and a later
compile with the same fingerprint key loads that entry directly.  Without a fingerprint,
or without a record of it, ``latch.compile`` traces and keys as described above.

Each lookup logs one line on the ``latch.cache`` logger and is recorded in
``manifest["cache"]`` (not written into saved artifacts) and in ``prog.report()``.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import time

from latch.artifact import atomic_write

log = logging.getLogger("latch.cache")

SCHEMA = "latch-cache/1"
COMPONENTS = ("graph", "params", "inputs", "rule", "options", "target",
              "latch", "mlir", "torch-mlir", "torch")
_VERSIONED = {"latch": "Latch", "mlir": "MLIR", "torch-mlir": "torch-mlir", "torch": "torch"}
_INDEX_KEEP = 32
_DISTS = {"mlir": "xtc-mlir-python-bindings", "torch-mlir": "torch-mlir", "torch": "torch"}


# ----------------------------------------------------------------------------- settings
def cache_enabled() -> bool:
    return os.environ.get("LATCH_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> str:
    """``$LATCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/latch``, else ``~/.cache/latch``."""
    d = os.environ.get("LATCH_CACHE_DIR")
    if d:
        return os.path.abspath(os.path.expanduser(d))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "latch")


# ----------------------------------------------------------------------------- the key
def canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dist_version(dist: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def python_sources(root: str) -> list[str]:
    """The paths, relative to ``root``, of the ``.py`` files under it (``__pycache__``
    left out), sorted."""
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        files += [os.path.relpath(os.path.join(folder, n), root) for n in names
                  if n.endswith(".py")]
    return sorted(files)


def files_digest(entries) -> str:
    """SHA-256 over ``(label, path)`` entries, in their order: each label, then the
    SHA-256 of its file's bytes."""
    h = hashlib.sha256()
    for label, path in entries:
        h.update(f"{label}\0".encode())
        with open(path, "rb") as f:
            h.update(_sha(f.read()).encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _latch_source_digest() -> str:
    """SHA-256 over the relative paths and bytes of Latch's Python sources (sorted), so a
    changed compiler misses even when ``__version__`` did not move.  The packages are found,
    not imported (latch.dialect and latch.passes import MLIR, which a hit does not need)."""
    from importlib.util import find_spec

    entries = []
    for name in ("latch", "latch.passes", "latch.dialect"):
        root = os.path.abspath(find_spec(name).submodule_search_locations[0])
        entries += [(f"{name}/{rel}", os.path.join(root, rel)) for rel in python_sources(root)]
    return files_digest(entries)


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    from latch import __version__
    out = {"latch": {"version": __version__, "sources": _latch_source_digest()}}
    out.update({k: _dist_version(d) for k, d in _DISTS.items()})
    return out


def tensor_digest(t) -> dict:
    """Shape, dtype and the SHA-256 of the bytes of tensor ``t`` (a constant in a key)."""
    import torch
    t = t.detach().cpu().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return {"shape": list(t.shape), "dtype": str(t.dtype), "sha256": _sha(raw)}


def graph_component(traced) -> dict:
    """The traced graph's text and the digests of the constants it reads (``get_attr``)."""
    import torch

    gm = traced.graph_module
    consts = {}
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        obj = gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        consts[str(node.target)] = (tensor_digest(obj) if isinstance(obj, torch.Tensor)
                                    else {"type": type(obj).__qualname__})
    return {"kind": traced.kind, "precision": traced.precision,
            "text_sha256": _sha(traced.graph_text.encode()), "constants": consts}


def target_component(options) -> dict:
    """The target (also among the options; kept apart so that a miss can name it)."""
    return {"name": options.target}


@dataclasses.dataclass
class CacheKey:
    key: str                 # SHA-256 of the component digests
    identity: str            # SHA-256 of the model's type and parameter names
    digests: dict            # component -> SHA-256 of its canonical JSON


def _components(graph: dict, params: list, rule, inputs, options) -> dict:
    return {
        "graph": graph,
        "params": params,
        "inputs": [[list(t.shape), str(t.dtype)] for t in inputs],
        "rule": None if rule is None else rule.describe(),
        "options": dataclasses.asdict(options),
        "target": target_component(options),
        **versions(),
    }


def _digest_key(components: dict) -> tuple[str, dict]:
    digests = {k: _sha(canonical_json(components[k])) for k in COMPONENTS}
    return _sha(canonical_json({"schema": SCHEMA, "components": digests})), digests


def compute_key(model, traced, rule, inputs, options) -> CacheKey:
    """The cache key of compiling ``model`` (traced as ``traced``) with ``rule`` on
    ``inputs`` with ``options``.  Raises TypeError when the rule has no canonical form."""
    params = [[n, list(s), str(d)] for n, s, d in
              zip(traced.param_names, traced.param_shapes, traced.param_dtypes)]
    key, digests = _digest_key(_components(graph_component(traced), params, rule, inputs,
                                           options))
    return CacheKey(key, model_identity(model, rule), digests)


def fingerprint_key(model, fingerprint, rule, inputs, options) -> str:
    """The key under which a fingerprint (latch.frontend.fingerprint) finds its entry: every
    component of :func:`compute_key`, with the fingerprint in place of the traced graph.
    Raises TypeError as compute_key does."""
    params = ([[n, list(p.shape), str(p.dtype)] for n, p in model.named_parameters()]
              if fingerprint.kind == "loss_and_grads" else [])
    graph = {"kind": fingerprint.kind, "precision": fingerprint.precision,
             "fingerprint": fingerprint.digest}
    return _digest_key(_components(graph, params, rule, inputs, options))[0]


def model_identity(model, rule) -> str:
    """What groups entries in one index: the model's type (or the function's qualified
    name) and its parameter names.  Known before tracing."""
    import torch
    if isinstance(model, torch.nn.Module):
        owner = type(model)
        names = [n for n, _ in model.named_parameters()] if rule is not None else []
    else:
        owner, names = model, []
    ident = {"kind": "update" if rule is not None else "function",
             "model": f"{getattr(owner, '__module__', '')}.{getattr(owner, '__qualname__', '')}",
             "params": names}
    return _sha(canonical_json(ident))


def miss_reason(changed: list[str] | None) -> str:
    """'new model' (no previous entry of this model), or the components that changed."""
    if changed is None:
        return "new model"
    if not changed:
        return "entry missing"
    names = [f"{_VERSIONED[c]} version" if c in _VERSIONED else c for c in changed]
    if "latch" in changed:
        names[changed.index("latch")] = "Latch version or sources"
    return ", ".join(names) + " changed"


# ----------------------------------------------------------------------------- the store
@dataclasses.dataclass
class Lookup:
    status: str                   # "hit" | "miss" | "off"
    key: str | None = None
    reason: str | None = None     # for a miss
    manifest: dict | None = None  # for a hit
    files: dict | None = None

    def describe(self) -> str:
        if self.status == "hit":
            return f"hit (key {self.key[:16]})"
        if self.status == "off":
            return f"off ({self.reason})"
        return f"miss ({self.reason}; key {self.key[:16]})" if self.key else f"miss ({self.reason})"


class CompileCache:
    """A folder of ``.latch`` entries, per-model indexes and fingerprint records::

        <root>/v1/entries/<key[:2]>/<key>.latch
        <root>/v1/entries/<key[:2]>/<key>.llvm       (cpu target: the lowered module)
        <root>/v1/index/<model identity>.json       {"entries": [{"key", "components"}, ...]}
        <root>/v1/fingerprints/<fkey[:2]>/<fkey>.json   {"key": <key>}
    """

    def __init__(self, root: str):
        self.root = os.path.join(root, "v1")

    def entry_path(self, key: str) -> str:
        return os.path.join(self.root, "entries", key[:2], f"{key}.latch")

    def jit_path(self, key: str) -> str:
        """The cpu target's LLVM-dialect module of an entry (so a hit skips lowering)."""
        return os.path.join(self.root, "entries", key[:2], f"{key}.llvm")

    def load_lowered(self, key: str):
        """(llvm text, memory plan) stored with entry ``key``, or None."""
        from latch.artifact import read_artifact
        from latch.errors import LatchError
        try:
            manifest, files = read_artifact(self.jit_path(key))
            return files["llvm.mlir"].decode(), manifest["memory_plan"]
        except (LatchError, KeyError, ValueError):
            return None

    def store_lowered(self, key: str, program) -> None:
        from latch.artifact import write_artifact
        from latch.targets.cpu import CpuExecutable
        exe = getattr(program, "_exe", None)
        if isinstance(exe, CpuExecutable):
            os.makedirs(os.path.dirname(self.jit_path(key)), exist_ok=True)
            write_artifact(self.jit_path(key), {"kind": "cpu-llvm",
                                                "memory_plan": exe.memory_plan},
                           {"llvm.mlir": exe.llvm_text().encode()})

    def fingerprint_path(self, fkey: str) -> str:
        """The file naming the entry a fingerprint key led to (see :func:`fingerprint_key`)."""
        return os.path.join(self.root, "fingerprints", fkey[:2], f"{fkey}.json")

    def lookup_fingerprint(self, fkey: str) -> Lookup | None:
        """A hit on the entry fingerprint key ``fkey`` led to before, or None (no such
        record, or its entry is gone or does not read: the caller traces and keys)."""
        from latch.artifact import read_artifact
        from latch.errors import LatchError
        try:
            with open(self.fingerprint_path(fkey)) as f:
                key = json.load(f)["key"]
            if not (isinstance(key, str) and len(key) == 64 and
                    all(c in "0123456789abcdef" for c in key)):
                return None
            manifest, files = read_artifact(self.entry_path(key))
        except (OSError, ValueError, KeyError, TypeError, LatchError):
            return None
        return Lookup("hit", key, manifest=manifest, files=files)

    def store_fingerprint(self, fkey: str, key: str) -> None:
        path = self.fingerprint_path(fkey)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, json.dumps({"key": key}).encode())

    def _index_path(self, identity: str) -> str:
        return os.path.join(self.root, "index", f"{identity}.json")

    def lookup(self, k: CacheKey) -> Lookup:
        from latch.artifact import read_artifact
        from latch.errors import LatchError

        path = self.entry_path(k.key)
        if os.path.exists(path):
            try:
                manifest, files = read_artifact(path)
                return Lookup("hit", k.key, manifest=manifest, files=files)
            except LatchError as e:
                return Lookup("miss", k.key,
                              reason=f"corrupted entry ({str(e).splitlines()[0]}); replaced")
        return Lookup("miss", k.key, reason=miss_reason(self._closest_changes(k)))

    def has_index(self, identity: str) -> bool:
        return os.path.exists(self._index_path(identity))

    def _read_index(self, identity: str) -> list[dict]:
        try:
            with open(self._index_path(identity)) as f:
                entries = json.load(f)["entries"]
            return [e for e in entries if isinstance(e, dict) and "components" in e]
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def _closest_changes(self, k: CacheKey) -> list[str] | None:
        best = None
        for e in self._read_index(k.identity):
            changed = [c for c in COMPONENTS if e["components"].get(c) != k.digests[c]]
            if best is None or len(changed) < len(best):
                best = changed
        return best

    def store(self, k: CacheKey, program) -> None:
        """Write ``program``'s artifact as the entry of ``k`` (atomically: Program.save
        writes a temporary file in the same folder and renames it), then update the index."""
        path = self.entry_path(k.key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        program.save(path)
        entries = [e for e in self._read_index(k.identity) if e.get("key") != k.key]
        entries.append({"key": k.key, "components": k.digests})
        index = self._index_path(k.identity)
        os.makedirs(os.path.dirname(index), exist_ok=True)
        atomic_write(index, json.dumps({"entries": entries[-_INDEX_KEEP:]}, indent=1,
                                       sort_keys=True).encode())


# ----------------------------------------------------------------------------- compile()
def _load(cache: CompileCache, key: str, manifest: dict, files: dict, out_treedef,
          times: dict):
    """A program object from a cached artifact.  For the cpu target the JIT runs here, from
    the stored LLVM-dialect module when there is one (else lowering again, and storing it)."""
    import contextlib

    kind = manifest.get("kind")
    times = {k: round(v, 4) for k, v in times.items()}
    if kind == "cuda-update":
        from latch.targets.cuda import CudaProgramHandle
        return CudaProgramHandle(manifest, files, times)
    if kind == "cuda-function":
        from latch.function import CudaFunctionHandle
        return CudaFunctionHandle(manifest, files, times)
    from latch.targets.cpu import prelowered

    t0 = time.perf_counter()
    text = (files["program.mlir"] if kind == "update" else files["function.mlir"]).decode()
    lowered = cache.load_lowered(key)
    with prelowered(text, *lowered) if lowered else contextlib.nullcontext():
        if kind == "update":
            from latch.program import Program
            prog = Program(manifest, text)
        else:
            from latch.function import CompiledFunction
            manifest["compile_seconds"] = times
            prog = CompiledFunction(manifest, text, out_treedef)
    if kind == "update":
        times["cache-load+jit"] = round(time.perf_counter() - t0, 4)
        manifest["compile_seconds"] = times
    if lowered is None:
        _store_quietly(cache.store_lowered, key, prog)
    return prog


def _store_quietly(fn, *args) -> None:
    try:
        fn(*args)
    except OSError as e:          # a read-only or full cache folder: compile anyway
        key = args[0]
        log.warning("could not store %s: %s", getattr(key, "key", key)[:16], e)


def _stage_times(prog) -> dict:
    if hasattr(prog, "compile_seconds"):          # CudaProgramHandle
        return prog.compile_seconds
    return prog.manifest.setdefault("compile_seconds", {})


def _annotate(prog, info: Lookup) -> None:
    """Record the lookup in ``prog.manifest["cache"]`` and add a ``cache:`` line to
    ``prog.report()`` (``write_artifact`` leaves ``cache`` out of saved artifacts)."""
    prog.manifest["cache"] = {"status": info.status, "key": info.key, "reason": info.reason}
    report = prog.report

    def report_with_cache():
        return report() + f"\ncache: {info.describe()}"
    prog.report = report_with_cache


def _fingerprint(model, rule, inputs, options):
    """The fingerprint of what ``latch.compile`` would trace, or None when there is none
    (latch.frontend.fingerprint says when; the model then is traced and keyed as usual)."""
    from latch.frontend.fingerprint import (NotFingerprintable, fingerprint_function,
                                            fingerprint_loss_and_grads)
    try:
        if rule is None:           # as latch.function.compile_function traces
            return fingerprint_function(model, inputs)
        return fingerprint_loss_and_grads(model, inputs, precision=options.precision)
    except NotFingerprintable as e:
        log.debug("no fingerprint (%s): tracing", e)
    except Exception as e:  # noqa: BLE001 - the model fails on its inputs: the trace says how
        log.debug("no fingerprint (%s: %s): tracing", type(e).__name__, e)
    return None


def cached_compile(model, rule, inputs, options, build):
    """``build()`` (which compiles from scratch) behind the persistent cache.

    1. Fingerprint the model (an eager run, milliseconds: latch.frontend.fingerprint); a
       fingerprint that led to an entry before is a hit without tracing.
    2. Otherwise trace, key (:func:`compute_key`): hit → load the artifact; miss → build
       from the same trace and store.  Either way the fingerprint is then recorded as
       leading to that entry."""
    from latch.errors import LatchError

    off = ("LATCH_CACHE=0" if not cache_enabled() else
           "LATCH_DUMP_DIR is set: every stage runs" if os.environ.get("LATCH_DUMP_DIR")
           else None)
    if off:
        from latch.frontend.importer import start_worker
        start_worker()
        prog = build()
        _annotate(prog, Lookup("off", reason=off))
        return prog
    cache = CompileCache(cache_dir())
    if not cache.has_index(model_identity(model, rule)):
        from latch.frontend.importer import start_worker
        start_worker()             # a new model: surely a miss, so import in parallel
    times = {}
    t0 = time.perf_counter()
    fingerprint, fkey = _fingerprint(model, rule, inputs, options), None
    if fingerprint is not None:
        try:
            fkey = fingerprint_key(model, fingerprint, rule, inputs, options)
        except TypeError:          # a rule with no canonical description: not cacheable
            pass                   # (the keyed path below says so)
    times["fingerprint"] = time.perf_counter() - t0
    if fkey is not None:
        t0 = time.perf_counter()
        info = cache.lookup_fingerprint(fkey)
        times["cache-lookup"] = time.perf_counter() - t0
        if info is not None:
            try:
                prog = _load(cache, info.key, info.manifest, info.files,
                             fingerprint.out_treedef, times)
            except (LatchError, KeyError, ValueError):
                pass               # unusable: the keyed lookup below finds and replaces it
            else:
                log.info("hit %s by fingerprint (%s)", info.key[:16],
                         cache.entry_path(info.key))
                _annotate(prog, info)
                return prog
    prog, k = _traced_compile(cache, model, rule, inputs, options, build, times)
    if fkey is not None and k is not None:
        _store_quietly(cache.store_fingerprint, fkey, k.key)
    return prog


def _traced_compile(cache, model, rule, inputs, options, build, times):
    """Trace, key, then hit → load, miss → build and store; returns (program, key or
    None)."""
    from latch.errors import LatchError
    from latch.frontend.trace import reuse_trace, trace_function, trace_loss_and_grads

    t0 = time.perf_counter()
    if rule is None:               # as latch.function.compile_function traces
        traced = trace_function(model, inputs)
    else:
        traced = trace_loss_and_grads(model, inputs, precision=options.precision)
    times["trace"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        k = compute_key(model, traced, rule, inputs, options)
    except TypeError as e:         # a user rule with no canonical description
        info, k = Lookup("off", reason=f"not cacheable: {e}"), None
    else:
        info = cache.lookup(k)
    times["cache-lookup"] = times.get("cache-lookup", 0.0) + time.perf_counter() - t0
    if info.status == "hit":
        try:
            prog = _load(cache, k.key, info.manifest, info.files, traced.out_treedef, times)
        except (LatchError, KeyError, ValueError) as e:   # readable but unusable: rebuild
            info = Lookup("miss", k.key, reason=f"corrupted entry (does not load: "
                                                f"{str(e).splitlines()[0]}); replaced")
        else:
            log.info("hit %s (%s)", k.key[:16], cache.entry_path(k.key))
            _annotate(prog, info)
            return prog, k
    log.info("%s", info.describe())
    with reuse_trace(traced, model, inputs):
        prog = build()
    stage_times = _stage_times(prog)
    for stage in ("fingerprint", "trace", "cache-lookup"):   # the build reused this trace
        stage_times[stage] = round(times[stage], 4)
    if k is not None:
        t0 = time.perf_counter()
        _store_quietly(cache.store_lowered, k.key, prog)
        _store_quietly(cache.store, k, prog)
        stage_times["cache-store"] = round(time.perf_counter() - t0, 4)
    _annotate(prog, info)
    return prog, k
