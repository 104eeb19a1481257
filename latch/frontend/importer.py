"""Stage 2 (linalg): import a traced graph with torch-mlir and lower it to linalg-on-tensors.

``import_to_linalg(traced, func_name)`` returns generic-form MLIR text holding one
``func.func @<func_name>`` on builtin tensors, made only of dialects upstream MLIR 22 reads
(func, linalg, tensor, arith, math, scf, cf, bufferization, …).  The text is verified by
parsing it with the upstream ``mlir`` bindings in a fresh context.

Steps (all inside torch-mlir's bundled MLIR, by default in a long-lived child process: see
:mod:`latch.frontend._graph_io` for why torch-mlir must not be loaded in the process that
uses upstream MLIR's ExecutionEngine; before them, :func:`latch.frontend.support.check_supported`
runs on the FX graph):
  1. ``FxImporter.import_stateless_graph`` (the FX graph → ``torch`` dialect);
  2. ``torchdynamo-export-to-torch-backend-pipeline`` (torch backend contract);
  3. the conversion half of ``torch-backend-to-linalg-on-tensors-backend-pipeline``, after
     which any op still in the ``torch`` dialect is reported as unsupported, by name and
     by the model's source line;
  4. the finalising half (type conversion, backend-contract verification);
  5. a check that no ``torch``/``torch_c``/``tm_tensor``/``ml_program`` op is left.
"""
from __future__ import annotations

import re

from latch.errors import LatchError
from latch.frontend.support import check_supported, unsupported_from_mlir_ops
from latch.frontend.trace import TracedGraph

TORCH_BACKEND_PIPELINE = (
    "builtin.module(func.func(torch-match-quantized-custom-ops),"
    "torchdynamo-export-to-torch-backend-pipeline)")

_CANON = "canonicalize"
LINALG_CONVERSION_PIPELINE = (
    "builtin.module(func.func(torch-restructure-non-constant-axes),"
    "func.func(torch-fuse-quantized-ops),"
    "func.func(convert-torch-to-tmtensor{allow-non-finites=true}),"
    f"func.func({_CANON}),"
    "func.func(convert-torch-to-linalg{allow-non-finites=true}),"
    f"func.func({_CANON}),"
    "func.func(convert-torch-to-scf),func.func(convert-torch-to-arith),"
    "func.func(convert-torch-to-tensor))")
LINALG_FINALIZE_PIPELINE = (
    "builtin.module(convert-torch-conversion-to-mlprogram,func.func(memref-expand),"
    f"func.func({_CANON}),func.func(resolve-shaped-type-result-dims),func.func(cse),"
    f"torch-func-backend-type-conversion,func.func({_CANON}),"
    "func.func(torch-finalizing-backend-type-conversion),"
    "torch-verify-linalg-on-tensors-backend-contract)")

# dialects that must not cross into upstream MLIR
_FOREIGN = ("torch.", "torch_c.", "tm_tensor.", "ml_program.")


def _run(module, pipeline: str, what: str):
    """Run a torch-mlir pipeline, collecting diagnostics; returns (ok, diagnostics)."""
    from torch_mlir.passmanager import PassManager
    diags: list[str] = []

    def handler(d):
        diags.append(f"{d.message}")
        for n in d.notes:
            diags.append(f"  note: {n.message}")
        return True

    ctx = module.context
    h = ctx.attach_diagnostic_handler(handler)
    try:
        with ctx:
            pm = PassManager.parse(pipeline)
            try:
                pm.run(module.operation)
                ok = True
            except Exception as e:  # MLIRError
                ok = False
                if not diags:
                    diags.append(str(e))
    finally:
        h.detach()
    return ok, diags


def _op_names(text: str, prefixes=_FOREIGN) -> list[str]:
    names = set()
    for m in re.finditer(r'"((?:torch|torch_c|tm_tensor|ml_program)\.[\w.]+)"', text):
        names.add(m.group(1))
    # torch.operator carries the real op name in an attribute
    for m in re.finditer(r'name = "(torch\.[\w.]+)"', text):
        names.add(m.group(1))
    return sorted(n for n in names if n.startswith(prefixes))


def _remaining_compute_ops(module) -> list[str]:
    """Ops of the torch/tm_tensor dialects still present (ignoring constants, casts)."""
    text = module.operation.get_asm(print_generic_op_form=True, large_elements_limit=16)
    skip = ("torch.constant.", "torch_c.", "torch.vtensor.literal", "torch.prim.ListConstruct",
            "torch.prim.TupleConstruct", "torch.operator")
    return [n for n in _op_names(text) if not n.startswith(skip)]


def lower_graph_module(gm, func_name: str) -> dict:
    """Steps 1–5 in *this* process (it loads torch-mlir's native libraries).

    Returns ``{"ok": True, "text": generic-form MLIR}`` or ``{"ok": False, "stage": …,
    "ops": [torch/tm_tensor op names involved], "diagnostics": [...]}``.
    """
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d
    from torch_mlir.extras.fx_importer import FxImporter

    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    importer = FxImporter(context=ctx)
    try:
        importer.import_stateless_graph(gm.graph, func_name=func_name)
    except Exception as e:  # noqa: BLE001 - the importer raises plain exceptions
        return {"ok": False, "stage": "FX import", "ops": [],
                "diagnostics": [f"{type(e).__name__}: {e}"]}
    module = importer.module
    ok, diags = _run(module, TORCH_BACKEND_PIPELINE, "torch backend")
    if not ok:
        return {"ok": False, "stage": "torch backend lowering",
                "ops": _op_names("\n".join(diags)), "diagnostics": diags}
    ok, diags = _run(module, LINALG_CONVERSION_PIPELINE, "linalg conversion")
    left = _remaining_compute_ops(module)
    if not ok or left:
        return {"ok": False, "stage": "lowering to linalg-on-tensors",
                "ops": left or _op_names("\n".join(diags)), "diagnostics": diags}
    ok, diags = _run(module, LINALG_FINALIZE_PIPELINE, "linalg finalize")
    if not ok:
        text = module.operation.get_asm(print_generic_op_form=True, large_elements_limit=16)
        return {"ok": False, "stage": "linalg backend contract",
                "ops": _op_names(text) or _op_names("\n".join(diags)), "diagnostics": diags}
    attrs = module.operation.attributes
    for a in [a.name for a in attrs if a.name.startswith("torch.")]:
        del attrs[a]
    text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
    foreign = _op_names(text)
    if foreign:
        return {"ok": False, "stage": "final linalg check", "ops": foreign,
                "diagnostics": []}
    return {"ok": True, "text": text}


class _Worker:
    """A long-lived ``python -m latch.frontend._import_worker`` child (started on first use,
    restarted if it dies), so that only the first import pays the process start."""

    def __init__(self):
        import subprocess
        import sys
        import tempfile
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "latch.frontend._import_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, n=20) -> list[str]:
        self.log.seek(0)
        return self.log.read().decode(errors="replace").strip().splitlines()[-n:]

    def request(self, payload: bytes):
        import pickle
        try:
            self.proc.stdin.write(len(payload).to_bytes(8, "little") + payload)
            self.proc.stdin.flush()
            hdr = self.proc.stdout.read(8)
            if len(hdr) == 8:
                return pickle.loads(self.proc.stdout.read(int.from_bytes(hdr, "little")))
        except (BrokenPipeError, OSError):
            pass
        self.proc.wait()
        tail = self.stderr_tail()
        return {"ok": False, "stage": "torch-mlir import worker (crashed)",
                "ops": _op_names("\n".join(tail)), "diagnostics": tail}

    def close(self):
        if self.alive():
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


_WORKER: _Worker | None = None
_WORKER_LOCK = __import__("threading").Lock()


def start_worker() -> None:
    """Start the import worker now unless it runs: its start-up (importing torch and
    torch-mlir, seconds) then overlaps with tracing in this process (``latch.compile``
    calls this before it traces a graph that will need importing)."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None or not _WORKER.alive():
            _WORKER = _Worker()


def _lower_isolated(gm, func_name: str) -> dict:
    """:func:`lower_graph_module` in a child process (see :mod:`latch.frontend._graph_io`
    for why torch-mlir must not share a process with upstream MLIR's JIT)."""
    import pickle
    from latch.frontend import _graph_io
    global _WORKER
    payload = pickle.dumps({"graph": _graph_io.dumps(gm), "func_name": func_name})
    with _WORKER_LOCK:
        if _WORKER is None or not _WORKER.alive():
            _WORKER = _Worker()
        res = _WORKER.request(payload)
        if not _WORKER.alive():
            _WORKER = None
    return res


def import_to_linalg(traced: TracedGraph, func_name: str = "loss_and_grads",
                     isolate: bool = True) -> str:
    """Import ``traced`` and lower it to linalg-on-tensors; returns generic-form MLIR text
    (``func.func @<func_name>``) verified to parse in upstream MLIR.

    ``isolate=True`` (default) runs torch-mlir in a child process so that this process can
    use upstream MLIR's ExecutionEngine afterwards; ``isolate=False`` runs it here (faster,
    but then upstream's JIT no longer resolves external symbols in this process).
    """
    from latch.frontend import structured   # latch.structured hook: scan/repeat as loops
    if structured.has_structured(traced):
        text = structured.import_structured(
            traced, func_name, _lower_isolated if isolate else lower_graph_module,
            check_supported)
        verify_upstream(text)
        return text
    check_supported(traced)
    res = (_lower_isolated if isolate else lower_graph_module)(traced.graph_module, func_name)
    if not res["ok"]:
        raise unsupported_from_mlir_ops(traced, res["ops"], res["diagnostics"],
                                        stage=res["stage"])
    text = res["text"]
    verify_upstream(text)
    return text


def verify_upstream(text: str):
    """Parse ``text`` with the upstream ``mlir`` bindings in a fresh context.  Latch ops the
    import leaves in place (``latch.attention`` / ``latch.attention_grad`` of
    ``attention="fused"``) are accepted there and checked by ``latch-verify``."""
    import mlir.ir as uir
    with uir.Context() as ctx:
        latch_ops = '"latch.' in text
        if latch_ops:
            import latch.dialect
            latch.dialect.load(ctx)
        try:
            m = uir.Module.parse(text)
        except Exception as e:
            raise LatchError("the imported linalg IR does not parse in upstream MLIR",
                             diagnostics=[str(e)[:2000]]) from e
        if not m.operation.verify():
            raise LatchError("the imported linalg IR does not verify in upstream MLIR")
        if latch_ops:
            from latch.passes.latch_verify import verify_module
            try:
                verify_module(m)
            except Exception as e:  # noqa: BLE001 - a Violation: say which rule
                raise LatchError("the imported IR's Latch ops do not verify",
                                 diagnostics=[str(e)[:2000]]) from e
