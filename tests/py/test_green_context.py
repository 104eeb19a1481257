"""``latch.runtime.driver.GreenContext`` (an SM partition for the optimizer's launches,
``PipelinedUpdates(apply_sms=N)``) against a fake ``cuda.bindings.driver``: the calls it
makes, the SMs it reports (the driver rounds the count up), and its errors without a GPU
(the GPU path itself: tests/py/test_pipelined_updates.py, bench/gpu_pipelined_updates.py)."""
from __future__ import annotations

import types

import pytest

from latch.runtime import driver as drv

SUCCESS = "success"


def fake_driver(total_sms: int = 132, granule: int = 8, green: bool = True):
    """A stand-in for the driver bindings: an H100-like SM resource of ``total_sms`` SMs
    that splits in multiples of ``granule``; without ``green`` the green-context calls are
    missing (driver bindings older than CUDA 12.4)."""
    calls = []

    def sm(n):
        return types.SimpleNamespace(sm=types.SimpleNamespace(smCount=n))

    def record(name, result):
        def fn(*args):
            calls.append((name, args))
            return result(*args)
        return fn

    d = types.SimpleNamespace(
        CUresult=types.SimpleNamespace(CUDA_SUCCESS=SUCCESS),
        CUdevResourceType=types.SimpleNamespace(CU_DEV_RESOURCE_TYPE_SM=1),
        CUgreenCtxCreate_flags=types.SimpleNamespace(CU_GREEN_CTX_DEFAULT_STREAM=1),
        CUstream_flags=types.SimpleNamespace(CU_STREAM_NON_BLOCKING=1),
        CUstream=int,
        cuGetErrorName=lambda e: (SUCCESS, b"CUDA_ERROR_INVALID_VALUE"),
        cuGetErrorString=lambda e: (SUCCESS, b"invalid argument"))
    if green:
        d.cuDeviceGetDevResource = record("cuDeviceGetDevResource",
                                          lambda dev, kind: (SUCCESS, sm(total_sms)))
        d.cuDevSmResourceSplitByCount = record(
            "cuDevSmResourceSplitByCount",
            lambda n, whole, flags, want: (SUCCESS, [sm(-(-want // granule) * granule)], 1,
                                           sm(total_sms - want)))
        d.cuDevResourceGenerateDesc = record("cuDevResourceGenerateDesc",
                                             lambda res, n: (SUCCESS, "desc"))
        d.cuGreenCtxCreate = record("cuGreenCtxCreate", lambda desc, dev, f: (SUCCESS, 7))
        d.cuCtxFromGreenCtx = record("cuCtxFromGreenCtx", lambda g: (SUCCESS, 9))
        d.cuGreenCtxStreamCreate = record("cuGreenCtxStreamCreate",
                                          lambda g, f, p: (SUCCESS, 1234))
        d.cuGreenCtxDestroy = record("cuGreenCtxDestroy", lambda g: SUCCESS)
        d.cuCtxPushCurrent = record("cuCtxPushCurrent", lambda c: SUCCESS)
        d.cuCtxPopCurrent = record("cuCtxPopCurrent", lambda: (SUCCESS, 9))
    return d, calls


@pytest.fixture
def device():
    return types.SimpleNamespace(handle=0)


def test_green_context_reports_the_sms_the_driver_granted(monkeypatch, device):
    d, calls = fake_driver(granule=8)
    monkeypatch.setattr(drv, "_driver", d)
    g = drv.GreenContext(device, 30)
    assert g.sms == 32                         # rounded up to the granule
    split = next(args for name, args in calls if name == "cuDevSmResourceSplitByCount")
    assert split[0] == 1 and split[3] == 30    # one group of at least 30 SMs
    s = g.stream()
    assert s.owned and int(s.handle) == 1234
    assert ("cuGreenCtxStreamCreate", (7, 1, 0)) in calls
    g.destroy()
    assert ("cuGreenCtxDestroy", (7,)) in calls
    g.destroy()                                # a second destroy does nothing
    assert sum(name == "cuGreenCtxDestroy" for name, _ in calls) == 1


@pytest.mark.parametrize("sms", [0, 132, 200])
def test_green_context_refuses_a_count_the_gpu_cannot_split(monkeypatch, device, sms):
    d, calls = fake_driver(total_sms=132)
    monkeypatch.setattr(drv, "_driver", d)
    with pytest.raises(drv.CudaError, match=rf"a green context of {sms} SMs: the GPU has 132"):
        drv.GreenContext(device, sms)
    assert not any(name == "cuGreenCtxCreate" for name, _ in calls)


def test_green_context_names_the_missing_binding(monkeypatch, device):
    d, _ = fake_driver(green=False)
    monkeypatch.setattr(drv, "_driver", d)
    with pytest.raises(drv.CudaError, match="need CUDA 12.4 driver bindings.*cuDeviceGetDevResource"):
        drv.GreenContext(device, 32)


def test_a_failed_driver_call_is_named(monkeypatch, device):
    d, _ = fake_driver()
    d.cuGreenCtxCreate = lambda desc, dev, f: ("error", None)
    monkeypatch.setattr(drv, "_driver", d)
    with pytest.raises(drv.CudaError, match="cuGreenCtxCreate failed: CUDA_ERROR_INVALID_VALUE"):
        drv.GreenContext(device, 32)
