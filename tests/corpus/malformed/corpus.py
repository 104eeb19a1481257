"""The malformed-input corpus of ``latch-opt``: loading, generating, running and judging cases.

Every case is one file of this directory:

* ``<name>.mlir``: a text case, written by hand;
* ``<name>.bin`` + ``<name>.txt``: a case that cannot (reasonably) be a text file in the
  repository -- binary junk, invalid UTF-8, NUL bytes, megabyte-long lines, 100 000-deep
  nesting.  :data:`GENERATED` below produces the bytes deterministically; the ``.bin`` files
  are written on demand (:func:`generate`, idempotent) and are not committed, the ``.txt``
  sidecars are.

Header lines (at the top of the ``.mlir`` file, or in the ``.txt`` sidecar)::

    // CASE: <category>: <what is wrong>      (required, first line)
    // ARGS: <extra latch-opt arguments>      (optional, shell-quoted)
    // EXPECT: <text the error must contain>  (optional, repeatable)

For category ``verifier`` the first ``latch.<op>`` named in <what is wrong> is the op the
diagnostic must name (``'latch.<op>' op``).

Every case must make ``latch-opt`` exit with status 1, print a located
``<file>:<line>:<col>: error: ...`` (category ``pipeline``: an ``error:`` that names the
pipeline problem, since a pipeline has no location in the input), print no Python traceback,
not die from a signal and not hang.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent
TIMEOUT_S = 60.0

_HEADER = re.compile(r"^//\s*(CASE|ARGS|EXPECT):\s?(.*)$")


# -- generated cases ------------------------------------------------------------------------
def _deep(opening: str, middle: str, closing: str, depth: int) -> str:
    return opening * depth + middle + closing * depth


def _lcg_bytes(seed: int, n: int) -> bytes:
    """Deterministic pseudo-random bytes (no dependence on Python's `random` versions)."""
    out, x = bytearray(), seed
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(x >> 56)
    return bytes(out)


_FUNC = "func.func @f() {\n  return\n}\n"
_DEEP = 100_000   # far deeper than MLIR's recursive-descent parser survives without the pre-check

#: name -> (header lines, bytes).  Keep it deterministic: the test checks the sidecars.
GENERATED: dict[str, tuple[tuple[str, ...], bytes]] = {
    "binary-random-junk": (
        ("binary: 4 KiB of pseudo-random bytes", "EXPECT: neither UTF-8 text nor MLIR bytecode"),
        _lcg_bytes(1, 4096)),
    "binary-elf-header": (
        ("binary: an ELF executable header instead of MLIR", "EXPECT: error"),
        b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"\x02\x00\x3e\x00\x01\x00\x00\x00" + bytes(40)),
    "binary-png-header": (
        ("binary: a PNG image header", "EXPECT: neither UTF-8 text nor MLIR bytecode"),
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + _lcg_bytes(2, 64)),
    "binary-truncated-bytecode": (
        ("binary: the MLIR bytecode magic followed by a truncated header", "EXPECT: error"),
        b"ML\xefR\x06"),
    "binary-bytecode-garbage": (
        ("binary: the MLIR bytecode magic followed by junk sections", "EXPECT: error"),
        b"ML\xefR" + _lcg_bytes(3, 512)),
    "encoding-invalid-utf8-in-comment": (
        ("encoding: a Latin-1 byte (0xe9) inside a comment",
         "EXPECT: neither UTF-8 text nor MLIR bytecode (byte 0xe9)"),
        b"// caf\xe9\n" + _FUNC.encode()),
    "encoding-invalid-utf8-in-string": (
        ("encoding: an overlong UTF-8 encoding (0xc0 0xaf) inside a string attribute",
         "EXPECT: neither UTF-8 text nor MLIR bytecode"),
        b'func.func @f() attributes {s = "a\xc0\xafb"} {\n  return\n}\n'),
    "encoding-truncated-utf8-at-eof": (
        ("encoding: the file ends in the middle of a multi-byte UTF-8 sequence",
         "EXPECT: neither UTF-8 text nor MLIR bytecode"),
        _FUNC.encode() + b"// \xe2\x82"),
    "encoding-utf16": (
        ("encoding: the module saved as UTF-16 with a byte-order mark",
         "EXPECT: neither UTF-8 text nor MLIR bytecode"),
        _FUNC.encode("utf-16")),
    "encoding-utf8-bom": (
        ("encoding: a UTF-8 byte-order mark before the module", "EXPECT: unexpected character"),
        b"\xef\xbb\xbf" + _FUNC.encode()),
    "nul-inside-op": (
        ("nul: a NUL byte in the middle of an op (MLIR's lexer would skip it silently)",
         "EXPECT: NUL byte"),
        b"func.func @f() {\n  ret\x00urn\n}\n"),
    "nul-after-module": (
        ("nul: NUL bytes after a valid module", "EXPECT: NUL byte"),
        _FUNC.encode() + b"\x00" * 16),
    "nul-only": (
        ("nul: a file of NUL bytes only", "EXPECT: NUL byte"),
        b"\x00" * 1024),
    "nesting-arrays": (
        ("nesting: an attribute of 100000 nested arrays [[[[...]]]]", "EXPECT: nesting deeper than"),
        ('"test.op"() {a = ' + _deep("[", "1", "]", _DEEP) + "} : () -> ()\n").encode()),
    "nesting-tensor-types": (
        ("nesting: tensor<tensor<...>> nested 100000 deep", "EXPECT: nesting deeper than"),
        ("func.func private @f(" + _deep("tensor<", "f32", ">", _DEEP) + ")\n").encode()),
    "nesting-regions": (
        ("nesting: 100000 nested regions of generic ops", "EXPECT: nesting deeper than"),
        ('"latch.update"() (' + _deep('{\n"test.op"() (', "{\n", "}) : () -> ()\n", _DEEP)
         + "}) {sym_name = \"u\"} : () -> ()\n").encode()),
    "nesting-dictionaries": (
        ("nesting: dictionary attributes {a = {a = ...}} nested 100000 deep",
         "EXPECT: nesting deeper than"),
        ('"test.op"() {a = ' + _deep("{a = ", "unit", "}", _DEEP) + "} : () -> ()\n").encode()),
    "nesting-affine-parens": (
        ("nesting: an affine expression in 100000 nested parentheses", "EXPECT: nesting deeper than"),
        ("#m = affine_map<(d0) -> (" + _deep("(", "d0", ")", _DEEP) + ")>\n" + _FUNC).encode()),
    "nesting-affine-unary-minus": (
        ("nesting: an affine expression with a chain of 300000 unary minuses",
         "EXPECT: a chain of unary minus"),
        ("#m = affine_map<(d0) -> (" + "- " * 300_000 + "d0)>\n" + _FUNC).encode()),
    "nesting-callsite-locations": (
        ("nesting: callsite locations nested 100000 deep", "EXPECT: nesting deeper than"),
        ("func.func @f() {\n  return loc(" + _deep('callsite("a":1:1 at ', '"b":2:2', ")", _DEEP)
         + ")\n}\n").encode()),
    "nesting-after-escaped-quote": (
        ("nesting: deep arrays after a string containing an escaped quote",
         "EXPECT: nesting deeper than"),
        ('"test.op"() {s = "\\"", a = ' + _deep("[", "1", "]", _DEEP) + "} : () -> ()\n").encode()),
    "nesting-arrays-of-function-types": (
        ("nesting: nested arrays whose function types contain '->' (not a closing bracket)",
         "EXPECT: nesting deeper than"),
        ('"test.op"() {a = ' + _deep("[(i32) -> i32, ", "i32", "]", _DEEP) + "} : () -> ()\n").encode()),
    "nesting-latch-every-at-limit": (
        ("nesting: 254 nested latch.every regions (just inside the nesting limit), the "
         "innermost with period 0", "EXPECT: 'latch.every' op period must be >= 1, got 0"),
        ('"latch.update"() ({\n^bb0(%s: tensor<i64>, %l: tensor<f32>):\n'
         + '"latch.every"(%s) ({\n' * 254 + '"latch.yield"() : () -> ()\n'
         + '}) {period = 0 : i64} : (tensor<i64>) -> ()\n"latch.yield"() : () -> ()\n'
         + '}) {period = 2 : i64} : (tensor<i64>) -> ()\n"latch.yield"() : () -> ()\n' * 252
         + '}) {period = 2 : i64} : (tensor<i64>) -> ()\n'
         + '"latch.return"(%l) : (tensor<f32>) -> ()\n}) {sym_name = "u"} : () -> ()\n').encode()),
    "long-line-decimal-integer": (
        ("long-line: a 2-million-digit integer literal (quadratic to parse: a hang)",
         "EXPECT: numeric literal longer than"),
        ("func.func @f() -> i32 {\n  %c = arith.constant " + "9" * 2_000_000
         + " : i32\n  return %c : i32\n}\n").encode()),
    "long-line-float-literal": (
        ("long-line: a float literal of 200000 digits (APFloat asserts)",
         "EXPECT: numeric literal longer than"),
        ("func.func @f() -> f32 {\n  %c = arith.constant 1." + "9" * 200_000
         + " : f32\n  return %c : f32\n}\n").encode()),
    "long-line-string-then-error": (
        ("long-line: a 4 MB string attribute followed by a syntax error on the same line",
         "EXPECT: error"),
        ('func.func @f() attributes {s = "' + "x" * 4_000_000 + '", } {\n  return\n}\n').encode()),
    "long-line-many-ops": (
        ("long-line: 50000 ops on one line, the last one using an undefined value",
         "EXPECT: use of undeclared SSA value name"),
        ("func.func @f() {\n  " + "".join(f"%c{i} = arith.constant {i} : i32 " for i in range(50_000))
         + "%bad = arith.addi %c0, %nope : i32\n  return\n}\n").encode()),
    "long-line-identifier": (
        ("long-line: a 2-million-character symbol name in an unterminated signature",
         "EXPECT: error"),
        ("func.func @" + "a" * 2_000_000 + "(%x: i32\n").encode()),
}


def generate(directory: Path = CORPUS_DIR) -> list[Path]:
    """Write every generated case (``.bin``) and its sidecar (``.txt``) if missing or stale."""
    paths = []
    for name, (header, data) in GENERATED.items():
        for path, content in ((directory / f"{name}.bin", data),
                              (directory / f"{name}.txt",
                               ("// CASE: " + header[0] + "\n"
                                + "".join(f"// {h}\n" for h in header[1:])).encode())):
            try:
                if path.read_bytes() == content:
                    continue
            except OSError:
                pass
            path.write_bytes(content)
        paths.append(directory / f"{name}.bin")
    return paths


# -- loading --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    path: Path
    category: str
    what: str
    args: tuple[str, ...] = ()
    expects: tuple[str, ...] = ()

    @property
    def op(self) -> str | None:
        """For verifier cases, the Latch op the diagnostic must name."""
        if self.category != "verifier":
            return None
        m = re.search(r"\blatch\.\w+", self.what)
        return m.group(0) if m else None


def _header(lines: list[str], where: Path) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    args: list[str] = []
    expects: list[str] = []
    category = what = None
    for line in lines:
        m = _HEADER.match(line.strip())
        if not m:
            if category is None:
                break
            continue
        key, value = m.groups()
        if key == "CASE":
            category, _, what = value.partition(":")
        elif key == "ARGS":
            args += shlex.split(value)
        else:
            expects.append(value.strip())
    if category is None or not what:
        raise ValueError(f"{where}: first line must be '// CASE: <category>: <what is wrong>'")
    return category.strip(), what.strip(), tuple(args), tuple(expects)


def load_cases(directory: Path = CORPUS_DIR, *, make_generated: bool = True) -> list[Case]:
    if make_generated:
        generate(directory)
    cases = []
    for path in sorted(directory.iterdir()):
        if path.suffix == ".mlir":
            head = path.read_bytes()[:4096].decode("utf-8", "replace").splitlines()[:8]
        elif path.suffix == ".bin":
            side = path.with_suffix(".txt")
            head = side.read_text().splitlines() if side.exists() else []
        else:
            continue
        cases.append(Case(path.stem, path, *_header(head, path)))
    return cases


# -- running and judging --------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    returncode: int | None      # None: timed out
    stderr: str
    seconds: float


def latch_opt_command() -> list[str]:
    script = Path(sys.executable).with_name("latch-opt")
    return [str(script)] if script.exists() else [sys.executable, "-m", "latch.cli.latch_opt"]


def run_case(case: Case, timeout: float = TIMEOUT_S) -> Outcome:
    cmd = latch_opt_command() + [str(case.path), *case.args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=timeout, env={**os.environ, "LATCH_DEBUG": ""})
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode("utf-8", "replace") if e.stderr else ""
        return Outcome(None, err, time.perf_counter() - t0)
    return Outcome(proc.returncode, proc.stderr.decode("utf-8", "replace"),
                   time.perf_counter() - t0)


#: Categories always run as their own subprocess by :func:`run_cases` (crash- and hang-prone).
ISOLATED = frozenset({"nesting", "long-line", "binary", "nul"})


def run_cases(cases: list[Case], timeout: float = TIMEOUT_S, jobs: int = 2,
              batch: bool = True) -> dict[str, Outcome]:
    """Outcomes of all ``cases``.  With ``batch``, ``jobs`` worker processes each run many
    cases through latch-opt's ``main()`` in-process (one interpreter start-up instead of one
    per case); a worker that dies (signal), stalls past ``timeout`` on a case or answers
    garbage has every case it did not finish rerun as its own subprocess (:func:`run_case`),
    so crashes and hangs are still seen, and attributed to the right case."""
    import concurrent.futures
    import json

    results: dict[str, Outcome] = {}
    batched = [c for c in cases if c.category not in ISOLATED] if batch else []
    if batched:
        shards = [batched[i::jobs] for i in range(jobs)]

        def work(shard: list[Case]) -> None:
            import selectors
            proc = subprocess.Popen(
                [sys.executable, __file__, "--batch"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0,
                env={**os.environ, "LATCH_DEBUG": ""})
            proc.stdin.write(json.dumps([[str(c.path), *c.args] for c in shard]).encode())
            proc.stdin.close()
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            fd, pending, done = proc.stdout.fileno(), b"", 0
            while done < len(shard):
                if b"\n" not in pending:
                    if not sel.select(timeout):    # stalled on shard[done]: a hang
                        break
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:                  # died (a crash) or exited early
                        break
                    pending += chunk
                    continue
                line, pending = pending.split(b"\n", 1)
                try:
                    rec = json.loads(line)
                    results[shard[done].name] = Outcome(rec["rc"], rec["stderr"], rec["s"])
                except (ValueError, KeyError):
                    break
                done += 1
            if proc.poll() is None and done < len(shard):
                proc.kill()
            proc.wait()
            sel.close()

        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            list(pool.map(work, shards))
    rest = sorted((c for c in cases if c.name not in results),
                  key=lambda c: -c.path.stat().st_size)     # the slow ones first
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for case, out in zip(rest, pool.map(lambda c: run_case(c, timeout), rest)):
            results[case.name] = out
    return results


def _batch_main() -> None:
    """Child of :func:`run_cases`: argv lists on stdin, one JSON outcome per line on stdout."""
    import contextlib
    import io
    import json

    from latch.cli import latch_opt

    out = sys.stdout
    for argv in json.loads(sys.stdin.read()):
        err = io.StringIO()
        t0 = time.perf_counter()
        sys.argv = ["latch-opt", *argv]
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                latch_opt.main()            # exactly what the console script runs
                rc = 0
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # noqa: BLE001 - escaped main(): what Python would print
                import traceback
                err.write(traceback.format_exc())
                rc = 1
        out.write(json.dumps({"rc": rc, "stderr": err.getvalue(),
                              "s": time.perf_counter() - t0}) + "\n")
        out.flush()


def located_error(case: Case, stderr: str) -> re.Match | None:
    return re.search(rf"^{re.escape(str(case.path))}:(\d+):(\d+): error: (.*)$", stderr, re.M)


def judge(case: Case, out: Outcome) -> dict:
    """{'clear': bool, 'crash': bool, 'traceback': bool, 'hang': bool, 'problems': [...]}."""
    problems = []
    hang = out.returncode is None
    crash = out.returncode is not None and out.returncode < 0
    traceback = "Traceback (most recent call last)" in out.stderr
    if hang:
        problems.append(f"no result within the time limit ({out.seconds:.0f} s)")
    elif crash:
        problems.append(f"killed by signal {-out.returncode}")
    elif out.returncode != 1:
        problems.append(f"exit status {out.returncode}, expected 1")
    if traceback:
        problems.append("printed a Python traceback")
    if "internal error" in out.stderr:
        problems.append("reported an internal error")
    loc = located_error(case, out.stderr)
    if case.category == "pipeline":
        errors = [l for l in out.stderr.splitlines() if "error:" in l]
        if not errors:
            problems.append("no 'error:' line")
        message = "\n".join(errors)
    else:
        if loc is None:
            problems.append(f"no located '{case.path}:<line>:<col>: error:' line")
        message = loc.group(0) if loc else ""
    for text in case.expects:
        if text not in message:
            problems.append(f"the error does not contain {text!r}")
    if case.op and f"'{case.op}' op" not in message:
        problems.append(f"the error does not name '{case.op}' op")
    return {"clear": not problems, "crash": crash or hang, "traceback": traceback,
            "hang": hang, "problems": problems}


if __name__ == "__main__":
    if sys.argv[1:] == ["--batch"]:
        _batch_main()
    else:
        sys.exit("usage: corpus.py --batch  (used by run_cases); see bench/reliability.py")
