"""Child process of :func:`latch.targets.cuda.serialize_kernels` (parallel PTX lowering).

``python -m latch.targets._ptx_worker``: reads one pickled request ``{"text", "keep",
"chip", "features", "opt_level"}`` on stdin, lowers the kernel modules named in ``keep``
and writes one pickled reply on stdout: ``{"ptx": {module name: ptx}}`` or, on failure,
``{"error": message, "diagnostics": [...], "reproducer": path, "command": str}``.  A plain
module run with ``-m`` (not multiprocessing): the user's ``__main__`` is never re-imported.
"""
import os
import pickle
import sys


def main() -> int:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                      # keep the reply channel clean
    req = pickle.loads(sys.stdin.buffer.read())
    from latch.errors import LatchError
    from latch.targets.cuda import _serialize_group
    try:
        reply = {"ptx": _serialize_group(req["text"], req["keep"], req["chip"],
                                         req["features"], req["opt_level"])}
    except LatchError as e:
        reply = {"error": getattr(e, "message", None) or str(e),
                 "diagnostics": list(getattr(e, "diagnostics", []) or []),
                 "reproducer": getattr(e, "reproducer", None),
                 "command": getattr(e, "command", None)}
    out.write(pickle.dumps(reply))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
