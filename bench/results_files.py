"""Where a GPU bench script's records go: ``bench/results/<name>.json`` (kept with the
repository) and ``$OUT/<name>.json`` when ``$OUT`` is set (the device call's folder that
comes back).  Standard library only: the GPU machine runs the runtime without MLIR."""
from __future__ import annotations

import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def save_records(doc, name: str) -> list[str]:
    """Write ``doc`` as JSON to both places; returns the paths written."""
    paths = []
    for folder in (os.path.join(ROOT, "bench", "results"), os.environ.get("OUT")):
        if folder:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"{name}.json")
            with open(path, "w") as f:
                json.dump(doc, f, indent=1)
            paths.append(path)
    return paths
