"""Run a ``cuda-function`` artifact (``latch.compile(fn, None, inputs, target="cuda")``):
torch CUDA tensors in, torch CUDA tensors out, no state.

    fn = CudaFunction.load("gradlev.latch")      # current device; loads the PTX
    W, o = fn(W0, q, k, v)                        # (the traced function's output structure)

Memory: one allocation for the arena (the compiler's temporaries), one staging buffer per
input and one buffer per output.  A call checks every input (count, type, device, dtype,
shape) before anything is launched, copies the inputs into the staging buffers (one
device-to-device copy each, skipped for a tensor that already is the staging buffer:
:meth:`input_views`), runs the launch list — directly the first time, recorded into one
CUDA graph the second time and replayed after that (``use_graph=False`` or
``LATCH_CUDA_GRAPH=0`` turns the graph off) — and copies the outputs into fresh tensors.
Work runs on a stream of its own, ordered after PyTorch's current stream and before it.

Importable without MLIR or torch-mlir (numpy, torch and cuda-bindings only).
"""
from __future__ import annotations

import os
import time

from latch.errors import LatchError
from latch.runtime import driver as drv
from latch.runtime.program import (_Buffer, make_launches, open_device,
                                   resolve_location, torch_dtype)

KIND = "cuda-function"


class CudaFunction:
    def __init__(self, manifest: dict, files: dict[str, bytes], device: int | None = None,
                 use_graph: bool | None = None):
        import torch

        if manifest.get("kind") != KIND:
            raise LatchError(f"not a cuda function artifact (kind {manifest.get('kind')!r})")
        self.manifest = manifest
        self.inputs_spec = manifest["inputs"]
        self.outputs_spec = manifest["outputs"]
        if use_graph is None:
            use_graph = os.environ.get("LATCH_CUDA_GRAPH", "1") != "0"
        self.use_graph = use_graph
        self.calls = 0
        self.timings: dict[str, float] = {}
        self._tree = None
        if manifest.get("out_tree"):
            import torch.utils._pytree as pytree
            try:
                self._tree = pytree.treespec_loads(manifest["out_tree"])
            except Exception:  # noqa: BLE001 - another torch's format: flat outputs
                self._tree = None
        t0 = time.perf_counter()
        self.device, self.torch_device, self.modules = open_device(manifest, files, device)
        self.timings["load_modules_s"] = time.perf_counter() - t0
        dev = self.device
        self.arena = dev.alloc(int(manifest["arena_bytes"]), "the arena")
        self.input_buffers = [_Buffer(dev.alloc(s["bytes"], f"input {i}"), s, f"input {i}")
                              for i, s in enumerate(self.inputs_spec)]
        self.output_buffers = [_Buffer(dev.alloc(s["bytes"], f"output {i}"), s, f"output {i}")
                               for i, s in enumerate(self.outputs_spec)]
        self.torch_stream = torch.cuda.Stream(device=self.torch_device)
        self.stream = drv.Stream(dev, handle=self.torch_stream.cuda_stream)
        self.launches = make_launches(manifest["launches"], self.modules, self._resolve)
        # results that are not computed in place: copied into the output buffers
        self.copies = [(self._resolve(c["src"]), self._resolve(c["dst"]), int(c["bytes"]))
                       for c in manifest.get("copies", [])]
        self.graph: drv.Graph | None = None
        drv.memset_zero(self.arena.ptr, self.arena.nbytes, self.stream, "the arena")
        self.stream.synchronize("function initialization")

    @classmethod
    def load(cls, path, device: int | None = None, use_graph: bool | None = None):
        from latch.artifact import read_artifact

        manifest, files = read_artifact(path)
        return cls(manifest, files, device=device, use_graph=use_graph)

    def _resolve(self, loc: dict) -> int:
        return resolve_location(loc, self.arena, {"input": self.input_buffers,
                                                  "output": self.output_buffers})

    def check_inputs(self, tensors) -> list:
        import torch

        if len(tensors) != len(self.inputs_spec):
            raise LatchError(f"the compiled function takes {len(self.inputs_spec)} tensors, "
                             f"got {len(tensors)}")
        for i, (t, spec) in enumerate(zip(tensors, self.inputs_spec)):
            if not isinstance(t, torch.Tensor):
                raise LatchError(f"argument {i} must be a torch.Tensor, got {type(t).__name__}")
            want = torch_dtype(spec["dtype"])
            if t.dtype != want or list(t.shape) != list(spec["shape"]):
                raise LatchError(f"argument {i} is {t.dtype}{list(t.shape)}, the function was "
                                 f"compiled for {want}{list(spec['shape'])} (shape and dtype "
                                 "are fixed at compile time)")
            if t.device != self.torch_device:
                raise LatchError(f"argument {i} is on {t.device}; this function runs on "
                                 f"{self.torch_device}")
        return [t if t.is_contiguous() else t.contiguous() for t in tensors]

    def input_views(self) -> list:
        """Torch tensors aliasing the staging buffers: pass them (filled in place) to skip
        the input copies."""
        return [b.view() for b in self.input_buffers]

    def _record(self) -> None:
        for launch in self.launches:
            launch.enqueue(self.stream)
        for src, dst, n in self.copies:
            drv.memcpy_dtod(dst, src, n, self.stream, "output")

    def run_staged(self) -> None:
        """Run the kernels on what the staging buffers hold (no input or output copies):
        the first call launches directly, the second records a CUDA graph, later calls
        replay it.  Asynchronous on :attr:`torch_stream`."""
        if self.graph is not None:
            self.graph.launch(self.stream)
        elif self.calls == 0 or not self.use_graph:
            self._record()
        else:
            t0 = time.perf_counter()
            self.graph = drv.Graph.capture(self.stream, self._record)
            self.timings["graph_capture_s"] = time.perf_counter() - t0
            self.graph.launch(self.stream)
        self.calls += 1

    def __call__(self, *inputs):
        import torch

        tensors = self.check_inputs(inputs)
        self.device.make_current()
        current = torch.cuda.current_stream(self.torch_device)
        self.torch_stream.wait_stream(current)
        for t, buf in zip(tensors, self.input_buffers):
            if t.data_ptr() != buf.ptr:
                drv.memcpy_dtod(buf.ptr, t.data_ptr(), buf.nbytes, self.stream, buf.label)
            t.record_stream(self.torch_stream)
        self.run_staged()
        outs = []
        for buf in self.output_buffers:
            o = torch.empty(tuple(buf.spec["shape"]), dtype=torch_dtype(buf.spec["dtype"]),
                            device=self.torch_device)
            o.record_stream(self.torch_stream)
            drv.memcpy_dtod(o.data_ptr(), buf.ptr, buf.nbytes, self.stream, buf.label)
            outs.append(o)
        current.wait_stream(self.torch_stream)
        if self._tree is not None:
            import torch.utils._pytree as pytree
            return pytree.tree_unflatten(outs, self._tree)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @property
    def graph_captured(self) -> bool:
        return self.graph is not None

    def synchronize(self) -> None:
        self.stream.synchronize("synchronize")

    def close(self) -> None:
        try:
            self.synchronize()
        finally:
            if self.graph is not None:
                self.graph.destroy()
                self.graph = None
            for m in self.modules.values():
                m.unload()
            self.modules = {}
            for b in self.input_buffers + self.output_buffers:
                b.alloc.free()
            self.arena.free()
