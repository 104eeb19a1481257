"""`not CMD`: succeed iff CMD exits with a non-zero status (like LLVM's `not`), but fail if
CMD died from a signal or printed a Python traceback, which Latch tools must never do."""
import subprocess
import sys

proc = subprocess.run(sys.argv[1:], stderr=subprocess.PIPE)
sys.stderr.buffer.write(proc.stderr)
if proc.returncode < 0 or b"Traceback (most recent call last)" in proc.stderr:
    sys.exit(2)
sys.exit(0 if proc.returncode != 0 else 1)
