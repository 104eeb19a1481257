"""Child process of :func:`latch.frontend.importer.import_to_linalg` (``isolate=True``).

``python -m latch.frontend._import_worker --serve``: a long-lived worker that reads
length-prefixed pickled requests ``{"graph": bytes, "func_name": str}`` on stdin and writes
length-prefixed pickled results (see ``lower_graph_module``) on stdout.  Anything the
libraries print goes to stderr.
"""
import os
import pickle
import sys
import traceback


def _read_exact(f, n):
    buf = b""
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def serve() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                      # keep the protocol channel clean
    inp = sys.stdin.buffer
    from latch.frontend import _graph_io
    from latch.frontend.importer import lower_graph_module
    # load torch-mlir before the first request arrives (start_worker() overlaps this with
    # the parent's tracing)
    import torch_mlir.dialects.torch  # noqa: F401
    import torch_mlir.extras.fx_importer  # noqa: F401
    import torch_mlir.passmanager  # noqa: F401
    while True:
        hdr = _read_exact(inp, 8)
        if hdr is None:
            return
        req = pickle.loads(_read_exact(inp, int.from_bytes(hdr, "little")))
        try:
            res = lower_graph_module(_graph_io.loads(req["graph"]), req["func_name"])
        except Exception:  # noqa: BLE001 - report everything to the parent
            res = {"ok": False, "stage": "torch-mlir import worker", "ops": [],
                   "diagnostics": traceback.format_exc().splitlines()[-20:]}
        data = pickle.dumps(res)
        out.write(len(data).to_bytes(8, "little"))
        out.write(data)
        out.flush()


if __name__ == "__main__":
    serve()
