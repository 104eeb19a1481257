"""The training state: every persistent tensor of a program (parameters, optimizer moments,
gradient accumulators, counters), held as numpy arrays in the program's state order."""
from __future__ import annotations

import numpy as np
import torch


class TrainingState:
    """Created by ``Program.init(model)``; advanced in place by ``Program.step``.

    A step is committed all at once: ``Program.step`` computes the new state into fresh
    buffers and swaps them in only when the step is finite (see ``on_nonfinite``), so a
    failed or skipped step leaves every tensor bitwise unchanged.
    """

    def __init__(self, slots, arrays: dict[str, np.ndarray], param_names: list[str]):
        self._slots = slots                    # list of manifest state slots (dicts)
        self._arrays = arrays                  # name -> np.ndarray
        self._param_names = list(param_names)  # model parameter names, in model order
        self.skipped_steps = 0

    @property
    def step(self) -> int:
        """Number of updates taken (the program's ``step`` counter)."""
        return int(self._arrays["step"])

    def parameters(self) -> dict[str, torch.Tensor]:
        """{parameter name: tensor} — copies of the current parameters."""
        return {n: torch.from_numpy(self._arrays[n].copy()) for n in self._param_names}

    def tensors(self, kind: str | None = None) -> dict[str, torch.Tensor]:
        """Every state tensor (or those of one kind: param, moment, grad_acc, counter)."""
        return {s["name"]: torch.from_numpy(np.array(self._arrays[s["name"]]))
                for s in self._slots if kind is None or s["kind"] == kind}

    def ordered(self) -> list[np.ndarray]:
        return [self._arrays[s["name"]] for s in self._slots]

    def commit(self, new_arrays: list[np.ndarray]) -> None:
        for s, a in zip(self._slots, new_arrays):
            self._arrays[s["name"]] = a

    def save(self, path) -> None:
        """Checkpoint atomically; reload with ``latch.checkpoint.load_state(path, prog)``."""
        from latch.checkpoint import save_state; save_state(self, path)  # noqa: E702

    def __repr__(self) -> str:
        kinds = {}
        for s in self._slots:
            kinds[s["kind"]] = kinds.get(s["kind"], 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in kinds.items())
        return f"TrainingState(step={self.step}, {parts}, skipped={self.skipped_steps})"
