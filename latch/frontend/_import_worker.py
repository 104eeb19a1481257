"""Child process of :func:`latch.frontend.importer.import_to_linalg` (``isolate=True``):
``python -m latch.frontend._import_worker IN.pkl OUT.pkl``."""
import pickle
import sys


def main(src: str, dst: str) -> None:
    from latch.frontend import _graph_io
    from latch.frontend.importer import lower_graph_module
    with open(src, "rb") as f:
        req = pickle.load(f)
    gm = _graph_io.loads(req["graph"])
    res = lower_graph_module(gm, req["func_name"])
    with open(dst, "wb") as f:
        pickle.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
