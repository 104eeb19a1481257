"""The errors Latch raises on purpose.  All derive from :class:`LatchError`."""
from __future__ import annotations


class LatchError(Exception):
    """Base class of every error Latch raises on purpose.

    ``reproducer`` (a path to a dumped ``.mlir`` file) and ``command`` (the ``latch-opt``
    command line that replays the failing stage) are set when a pipeline failed.
    """

    def __init__(self, message: str, *, diagnostics: list[str] | None = None,
                 reproducer: str | None = None, command: str | None = None):
        self.message = message
        self.diagnostics = list(diagnostics or [])
        self.reproducer = reproducer
        self.command = command
        super().__init__(self._render())

    def _render(self) -> str:
        lines = [self.message]
        lines += [f"  {d}" for d in self.diagnostics]
        if self.reproducer:
            lines.append(f"  reproducer: {self.reproducer}")
        if self.command:
            lines.append(f"  replay with: {self.command}")
        return "\n".join(lines)


class UnsupportedOpError(LatchError):
    """An operation of the model that Latch cannot compile (raised at compile time)."""


class PassError(LatchError):
    """A pass found something wrong with its input.  ``location`` is an ``mlir.ir.Location``."""

    def __init__(self, message: str, location=None):
        self.location = location
        super().__init__(message)


class PipelineError(LatchError):
    """A pass pipeline failed or could not be parsed."""


class NonFiniteError(LatchError):
    """A step produced a non-finite loss or gradient under ``on_nonfinite="raise"``."""
