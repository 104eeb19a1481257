"""A thin, checked wrapper over the CUDA driver API (``cuda.bindings.driver``).

Every driver call goes through :func:`call` (or :func:`check` on a result tuple), which turns
a failing ``CUresult`` into a :class:`CudaError` naming the call and the error's name and
description.  Initialization is lazy: nothing touches the GPU until :func:`init` (or the first
:class:`Device` method) runs.  No MLIR, torch-mlir or Latch compiler module is imported here.

cuda-bindings conventions used: every function returns a tuple ``(CUresult, *results)``;
device pointers, streams and other handles accept plain ``int`` addresses.
"""
from __future__ import annotations

import contextlib

import threading

import numpy as np

from latch.errors import LatchError


class CudaError(LatchError):
    """A CUDA driver call failed.  ``call`` is the call, ``code`` the error name."""

    def __init__(self, message: str, call: str = "", code: str = ""):
        self.call, self.code = call, code
        super().__init__(message)


class CudaUnavailableError(CudaError):
    """No usable CUDA GPU or driver (no cuda-bindings, no driver, no device)."""


_lock = threading.Lock()
_driver = None


def driver():
    """The ``cuda.bindings.driver`` module (imported on first use)."""
    global _driver
    if _driver is None:
        try:
            from cuda.bindings import driver as d
        except ImportError:
            try:  # cuda-python < 12.6 layout
                from cuda import cuda as d  # type: ignore
            except ImportError as e:
                raise CudaUnavailableError(
                    f"no CUDA GPU: the CUDA driver bindings are not installed ({e}); install "
                    "cuda-bindings (pip install cuda-bindings) on a machine with an NVIDIA GPU",
                    "import cuda.bindings") from None
        _driver = d
    return _driver


def error_text(err) -> tuple[str, str]:
    """(name, description) of a CUresult."""
    d = driver()
    name = desc = ""
    try:
        r = d.cuGetErrorName(err)
        if r[0] == d.CUresult.CUDA_SUCCESS and r[1]:
            name = r[1].decode() if isinstance(r[1], bytes) else str(r[1])
        r = d.cuGetErrorString(err)
        if r[0] == d.CUresult.CUDA_SUCCESS and r[1]:
            desc = r[1].decode() if isinstance(r[1], bytes) else str(r[1])
    except Exception:  # noqa: BLE001 - best effort while reporting another error
        pass
    return name or getattr(err, "name", str(err)), desc


def check(result, call: str):
    """Check a driver result tuple; returns the results (None, one value, or a tuple)."""
    d = driver()
    if not isinstance(result, tuple):
        result = (result,)
    err, rest = result[0], result[1:]
    if err != d.CUresult.CUDA_SUCCESS:
        name, desc = error_text(err)
        cls = CudaUnavailableError if name in ("CUDA_ERROR_NO_DEVICE",
                                               "CUDA_ERROR_INSUFFICIENT_DRIVER",
                                               "CUDA_ERROR_STUB_LIBRARY") else CudaError
        prefix = "no CUDA GPU: " if cls is CudaUnavailableError else ""
        raise cls(f"{prefix}{call} failed: {name}" + (f" ({desc})" if desc else ""), call, name)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def call(fn_name: str, *args, what: str = ""):
    """``check(cuda.<fn_name>(*args), ...)``."""
    d = driver()
    fn = getattr(d, fn_name, None)
    if fn is None:
        raise CudaError(f"the installed cuda-bindings has no {fn_name}", fn_name)
    label = f"{fn_name}({what})" if what else fn_name
    return check(fn(*args), label)


_initialized = False


def init() -> None:
    """cuInit once per process.  Raises CudaUnavailableError if there is no GPU."""
    global _initialized
    with _lock:
        if _initialized:
            return
        d = driver()
        try:
            result = d.cuInit(0)
        except Exception as e:  # noqa: BLE001 - e.g. libcuda.so missing
            raise CudaUnavailableError(f"no CUDA GPU: cuInit raised {type(e).__name__}: {e}",
                                       "cuInit") from None
        check(result, "cuInit")
        n = check(d.cuDeviceGetCount(), "cuDeviceGetCount")
        if int(n) == 0:
            raise CudaUnavailableError("no CUDA GPU: cuDeviceGetCount() == 0", "cuDeviceGetCount")
        _initialized = True


def driver_version() -> str:
    init()
    v = int(call("cuDriverGetVersion"))
    return f"{v // 1000}.{(v % 1000) // 10}"


def bindings_version() -> str:
    try:
        import cuda.bindings as b
        return getattr(b, "__version__", "?")
    except ImportError:
        return "?"


class Device:
    """One GPU with its primary context made current (shared with PyTorch's runtime)."""

    _cache: dict[int, "Device"] = {}

    def __init__(self, ordinal: int):
        init()
        d = driver()
        self.ordinal = ordinal
        count = int(call("cuDeviceGetCount"))
        if ordinal >= count:
            raise CudaUnavailableError(f"no CUDA GPU {ordinal}: the machine has {count}")
        self.handle = call("cuDeviceGet", ordinal)
        name = call("cuDeviceGetName", 256, self.handle)
        self.name = (name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name))
        A = d.CUdevice_attribute
        self.capability = (
            int(call("cuDeviceGetAttribute", A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                     self.handle)),
            int(call("cuDeviceGetAttribute", A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                     self.handle)))
        self.context = call("cuDevicePrimaryCtxRetain", self.handle)
        self.make_current()

    @classmethod
    def get(cls, ordinal: int = 0) -> "Device":
        with _lock:
            dev = cls._cache.get(ordinal)
        if dev is None:
            dev = cls(ordinal)
            with _lock:
                cls._cache[ordinal] = dev
        dev.make_current()
        return dev

    def make_current(self) -> None:
        call("cuCtxSetCurrent", self.context)

    @property
    def chip(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def mem_info(self) -> tuple[int, int]:
        free, total = call("cuMemGetInfo")
        return int(free), int(total)

    # -- memory ---------------------------------------------------------------------------
    def alloc(self, nbytes: int, what: str) -> "Allocation":
        return Allocation(self, nbytes, what)

    # -- modules ----------------------------------------------------------------------------
    def load_ptx(self, ptx: bytes | str, name: str) -> "Module":
        return Module(self, ptx, name)


class Allocation:
    """A device buffer from cuMemAlloc; freed by :meth:`free` or when collected."""

    def __init__(self, device: Device, nbytes: int, what: str):
        self.device, self.nbytes, self.what = device, int(nbytes), what
        self.ptr = 0
        self._dptr = None
        if self.nbytes == 0:
            return
        d = driver()
        result = d.cuMemAlloc(self.nbytes)
        if result[0] == d.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            try:
                free, total = device.mem_info()
                extra = f"; {free} of {total} bytes are free on {device.name}"
            except CudaError:
                extra = ""
            raise CudaError(f"out of GPU memory: cuMemAlloc requested {self.nbytes} bytes for "
                            f"{what}{extra}", "cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")
        self._dptr = check(result, f"cuMemAlloc({self.nbytes} bytes for {what})")
        self.ptr = int(self._dptr)

    def free(self) -> None:
        if self._dptr is not None:
            d = driver()
            try:
                d.cuMemFree(self._dptr)
            finally:
                self._dptr, self.ptr = None, 0

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


_LOG_BYTES = 1 << 16


class Module:
    """A CUDA module loaded from PTX text (JIT-compiled by the driver)."""

    def __init__(self, device: Device, ptx: bytes | str, name: str):
        d = driver()
        self.device, self.name = device, name
        data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
        #: its kernels declare several resident blocks an SM (``.minnctapersm``: the
        #: paired contraction kernels, the attention kernels' ``blocks-per-sm``)
        self.declares_resident_blocks = b".minnctapersm" in data
        if not data.endswith(b"\0"):
            data += b"\0"
        self._image = np.frombuffer(data, dtype=np.uint8).copy()
        err_log = b"\0" * _LOG_BYTES
        info_log = b"\0" * _LOG_BYTES
        J = d.CUjit_option
        options = [J.CU_JIT_ERROR_LOG_BUFFER, J.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                   J.CU_JIT_INFO_LOG_BUFFER, J.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES]
        values = [err_log, _LOG_BYTES, info_log, _LOG_BYTES]
        try:
            result = d.cuModuleLoadDataEx(self._image, len(options), options, values)
        except TypeError:   # an older binding that does not take these option values
            result = d.cuModuleLoadData(self._image)
            err_log = b""
        if result[0] != d.CUresult.CUDA_SUCCESS:
            code, desc = error_text(result[0])
            log = err_log.split(b"\0")[0].decode(errors="replace").strip()
            raise CudaError(f"cuModuleLoadDataEx({name}) failed: {code}"
                            + (f" ({desc})" if desc else "")
                            + (f"\nPTX JIT error log:\n{log}" if log else
                               "\n(no JIT error log)"), "cuModuleLoadDataEx", code)
        self.handle = result[1]
        self.info_log = info_log.split(b"\0")[0].decode(errors="replace").strip()
        self._functions: dict[str, object] = {}

    def function(self, name: str):
        f = self._functions.get(name)
        if f is None:
            f = call("cuModuleGetFunction", self.handle, name.encode(), what=f"{self.name}::{name}")
            self._functions[name] = f
        return f

    def unload(self) -> None:
        if getattr(self, "handle", None) is not None:
            driver().cuModuleUnload(self.handle)
            self.handle = None


class Stream:
    """A non-blocking stream of our own (capturable; the legacy default stream is not)."""

    def __init__(self, device: Device, handle: int | None = None,
                 priority: int | None = None):
        d = driver()
        self.device = device
        self.owned = handle is None
        if handle is None and priority is not None:    # see priority_range()
            self.handle = call("cuStreamCreateWithPriority",
                               int(d.CUstream_flags.CU_STREAM_NON_BLOCKING), int(priority))
        elif handle is None:
            self.handle = call("cuStreamCreate", int(d.CUstream_flags.CU_STREAM_NON_BLOCKING))
        else:   # a stream someone else owns (e.g. a torch.cuda.Stream's cuda_stream)
            self.handle = d.CUstream(int(handle))
        self.ptr = int(self.handle)

    def synchronize(self, what: str = "") -> None:
        call("cuStreamSynchronize", self.handle, what=what)

    def wait(self, event: "Event") -> None:
        """Later work on this stream waits for ``event``'s last record (under stream
        capture: a graph edge)."""
        call("cuStreamWaitEvent", self.handle, event.handle, 0)

    def destroy(self) -> None:
        if getattr(self, "handle", None) is not None and self.owned:
            driver().cuStreamDestroy(self.handle)
        self.handle = None


class GreenContext:
    """An SM partition of ``device`` (a CUDA 12.4+ *green context*): kernels launched into
    its streams run on its SMs only, the rest of the GPU stays free for other streams.
    Device memory is shared with the primary context; kernel modules are per context, so a
    kernel runs here from a module loaded again here (:meth:`load`)."""

    def __init__(self, device: Device, sms: int):
        d = driver()
        for fn in ("cuDeviceGetDevResource", "cuDevSmResourceSplitByCount",
                   "cuGreenCtxCreate", "cuGreenCtxStreamCreate", "cuCtxFromGreenCtx"):
            if getattr(d, fn, None) is None:
                raise CudaError(f"green contexts need CUDA 12.4 driver bindings; the installed "
                                f"cuda-bindings has no {fn}", fn)
        self.device = device
        whole = call("cuDeviceGetDevResource", device.handle,
                     d.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM)
        total = int(whole.sm.smCount)
        if not 0 < sms < total:
            raise CudaError(f"a green context of {sms} SMs: the GPU has {total}",
                            "cuDevSmResourceSplitByCount")
        got = call("cuDevSmResourceSplitByCount", 1, whole, 0, int(sms),
                   what=f"{sms} of {total} SMs")
        groups = got[0] if isinstance(got, tuple) else got
        desc = call("cuDevResourceGenerateDesc", [groups[0]], 1)
        self.sms = int(groups[0].sm.smCount)    # rounded up to the architecture's granule
        self.handle = call("cuGreenCtxCreate", desc, device.handle,
                           int(d.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
        self.context = call("cuCtxFromGreenCtx", self.handle)
        self._modules: dict[str, Module] = {}

    def stream(self, priority: int = 0) -> Stream:
        """A non-blocking stream whose kernels run on this partition's SMs."""
        d = driver()
        handle = call("cuGreenCtxStreamCreate", self.handle,
                      int(d.CUstream_flags.CU_STREAM_NON_BLOCKING), int(priority))
        s = Stream(self.device, handle=int(handle))
        s.owned = True                  # created here: destroy() releases it
        return s

    @contextlib.contextmanager
    def current(self):
        """This context current on the calling thread while the block runs."""
        call("cuCtxPushCurrent", self.context)
        try:
            yield self
        finally:
            call("cuCtxPopCurrent")

    def load(self, module: Module) -> Module:
        """``module`` loaded in this context (once; kept until :meth:`destroy`)."""
        found = self._modules.get(module.name)
        if found is None:
            with self.current():
                found = Module(self.device, bytes(module._image), module.name)
            self._modules[module.name] = found
        return found

    def destroy(self) -> None:
        if getattr(self, "handle", None) is None:
            return
        with self.current():
            for m in self._modules.values():
                m.unload()
        self._modules = {}
        driver().cuGreenCtxDestroy(self.handle)
        self.handle = None


class Event:
    def __init__(self, timing: bool = True):
        d = driver()
        flags = 0 if timing else int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        self.handle = call("cuEventCreate", flags)

    def record(self, stream: Stream) -> None:
        call("cuEventRecord", self.handle, stream.handle)

    def synchronize(self) -> None:
        call("cuEventSynchronize", self.handle)

    def elapsed_ms(self, end: "Event") -> float:
        return float(call("cuEventElapsedTime", self.handle, end.handle))

    def destroy(self) -> None:
        if getattr(self, "handle", None) is not None:
            driver().cuEventDestroy(self.handle)
        self.handle = None


class Graph:
    """A CUDA graph captured from a stream and instantiated."""

    def __init__(self, graph, exec_):
        self.graph, self.exec = graph, exec_

    @staticmethod
    def capture(stream: Stream, record, node_priority: bool = False) -> "Graph":
        """Run ``record()`` (which enqueues work on ``stream``) under stream capture.
        ``node_priority``: the graph runs each kernel at the priority it was captured with
        (its stream's: ``Stream(..., priority=)``) instead of the priority of the stream the
        graph is launched into."""
        d = driver()
        mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        call("cuStreamBeginCapture", stream.handle, mode)
        try:
            record()
        except BaseException:
            try:
                d.cuStreamEndCapture(stream.handle)
            except Exception:  # noqa: BLE001
                pass
            raise
        graph = call("cuStreamEndCapture", stream.handle)
        flags = 8 if node_priority else 0   # CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
        try:
            exec_ = call("cuGraphInstantiate", graph, flags)
        except TypeError:   # older bindings: cuGraphInstantiateWithFlags
            exec_ = call("cuGraphInstantiateWithFlags", graph, flags)
        if isinstance(exec_, tuple):   # (exec, errorNode, log...) in some versions
            exec_ = exec_[0]
        return Graph(graph, exec_)

    def launch(self, stream: Stream) -> None:
        call("cuGraphLaunch", self.exec, stream.handle)

    def destroy(self) -> None:
        d = driver()
        if self.exec is not None:
            d.cuGraphExecDestroy(self.exec)
            self.exec = None
        if self.graph is not None:
            d.cuGraphDestroy(self.graph)
            self.graph = None


def launch(function, grid, block, shared_bytes: int, stream: Stream, params_address: int,
           what: str) -> None:
    call("cuLaunchKernel", function, int(grid[0]), int(grid[1]), int(grid[2]),
         int(block[0]), int(block[1]), int(block[2]), int(shared_bytes), stream.handle,
         int(params_address), 0, what=what)


def launch_dependent(function, grid, block, shared_bytes: int, stream: Stream,
                     params_address: int, what: str) -> None:
    """``launch`` with programmatic stream serialization (Hopper's programmatic dependent
    launch): the kernel may start once every block of the kernel before it on ``stream``
    has executed ``griddepcontrol.launch_dependents``; it must itself begin with
    ``griddepcontrol.wait`` (latch-dependent-launches), which returns when that kernel has
    completed and its memory is visible.  Captured into a graph as a programmatic edge."""
    d = driver()
    config = d.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = (int(g) for g in grid)
    config.blockDimX, config.blockDimY, config.blockDimZ = (int(b) for b in block)
    config.sharedMemBytes = int(shared_bytes)
    config.hStream = stream.handle
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    config.attrs = [attr]
    config.numAttrs = 1
    call("cuLaunchKernelEx", config, function, int(params_address), 0, what=what)


def priority_range() -> tuple[int, int]:
    """(least, greatest) scheduling priority of the current context (e.g. (0, -5))."""
    least, greatest = call("cuCtxGetStreamPriorityRange")
    return int(least), int(greatest)


def memcpy_dtod(dst: int, src: int, nbytes: int, stream: Stream, what: str = "") -> None:
    if nbytes:
        call("cuMemcpyDtoDAsync", int(dst), int(src), int(nbytes), stream.handle, what=what)


def memset_zero(dst: int, nbytes: int, stream: Stream, what: str = "") -> None:
    if nbytes:
        call("cuMemsetD8Async", int(dst), 0, int(nbytes), stream.handle, what=what)


def memset_d32(dst: int, value: int, count: int, stream: Stream, what: str = "") -> None:
    """Set ``count`` 32-bit words at ``dst`` to ``value`` (asynchronous; capturable)."""
    if count:
        call("cuMemsetD32Async", int(dst), int(value), int(count), stream.handle, what=what)


def memcpy_htod(dst: int, host_address: int, nbytes: int, what: str = "") -> None:
    """Synchronous host-to-device copy from the host address ``host_address``."""
    if nbytes:
        call("cuMemcpyHtoD", int(dst), int(host_address), int(nbytes), what=what)


def memcpy_dtoh_async(host_address: int, src: int, nbytes: int, stream: Stream,
                      what: str = "") -> None:
    """Asynchronous device-to-host copy into (pinned) host memory at ``host_address``."""
    if nbytes:
        call("cuMemcpyDtoHAsync", int(host_address), int(src), int(nbytes), stream.handle,
             what=what)
