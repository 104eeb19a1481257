"""One optimizer kernel of a Latch artifact, alone, against kernels of the same I/O (GPU side).

    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=. python bench/optimizer_kernel_gpu.py \
        --kernel update_kernel_808:6291456 --kernel update_kernel_802:25165824 \
        bench/artifacts/tinymoe196m/tinymoe196m-b32-bf16.latch \
        bench/artifacts/tinymoe196m/tinymoe196m-b32-bf16-splitstores.latch

For each ``--kernel MODULE:ELEMENTS`` (an AdamW launch of the artifacts' manifests over a
tensor of ELEMENTS parameters) and each artifact: the module's PTX is loaded with the
runtime's driver and launched alone on random buffers with the manifest's grid (every
pointer argument a buffer of ELEMENTS f32, so values stay finite and in range), and the
median of 30 launches is reported with the bytes the manifest's ``arg_bytes`` gives.
Beside them, in the same run: a Triton kernel with the same reads and writes (f32 weight,
bf16 gradient, f32 moments in; f32 weight and moments and the bf16 copy out: 28 bytes a
parameter) at three block sizes, torch's fused AdamW (f32 gradient, no bf16 copy: 32 bytes
a parameter) and a copy of 16 bytes a parameter.  This is the comparison that found the
AdamW kernels' split stores (passes/vector_lanes.py, ``whole_stores``).  Prints one line
per kernel and writes the records to bench/results/optimizer_kernel-<date>.json (and $OUT).
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import re
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def median_ms(torch, fn, n: int = 30) -> float:
    """Median ms of ``n`` timed calls of ``fn`` after three warm-up calls."""
    from tinymoe_bench_gpu import events_ms

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return events_ms(fn, n)["median_ms"]


def artifact_kernel(torch, dev, path: str, module: str, elements: int):
    """(launch function, manifest launch, what must stay alive) for ``module`` of the
    artifact at ``path``, its pointer arguments random f32 buffers of ``elements``."""
    from latch.runtime import driver as D

    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        ptx = z.read(f"kernels/{module}.ptx").decode()
    launch = next(la for la in manifest["launches"] if la["module"] == module)
    mod = D.Module(dev, ptx, module)
    fn = mod.function(launch["kernel"])
    n = len(re.findall(r"\.param \.u64", ptx))
    bufs = [torch.rand(elements, device="cuda") * 0.01 + 0.001 for _ in range(n)]
    ptrs = (ctypes.c_void_p * n)(*[b.data_ptr() for b in bufs])
    params = (ctypes.c_void_p * n)(*[ctypes.addressof(ptrs) + 8 * i for i in range(n)])
    stream = D.Stream(dev, torch.cuda.current_stream().cuda_stream)

    def run():
        D.launch(fn, launch["grid"], launch["block"], launch.get("shared_bytes", 0), stream,
                 ctypes.addressof(params), module)
    return run, launch, (mod, bufs, ptrs, params)


def triton_adamw():
    import triton
    import triton.language as tl

    @triton.jit
    def adamw(w, g, m, v, wo, mo, vo, wb, n, lr, b1, b2, bc1, bc2s, eps, wd,
              BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        k = o < n
        x = tl.load(w + o, mask=k)
        gr = tl.load(g + o, mask=k).to(tl.float32)
        mm = tl.load(m + o, mask=k)
        vv = tl.load(v + o, mask=k)
        x = x * (1 - lr * wd)
        mm = b1 * mm + (1 - b1) * gr
        vv = b2 * vv + (1 - b2) * gr * gr
        x = x - (lr / bc1) * mm / (tl.sqrt(vv) / bc2s + eps)
        tl.store(wo + o, x, mask=k)
        tl.store(mo + o, mm, mask=k)
        tl.store(vo + o, vv, mask=k)
        tl.store(wb + o, x.to(tl.bfloat16), mask=k)
    return triton, adamw


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("artifacts", nargs="+")
    p.add_argument("--kernel", action="append", required=True,
                   help="MODULE:ELEMENTS, e.g. update_kernel_808:6291456")
    args = p.parse_args(argv)
    import torch

    from latch.runtime import driver as D

    dev = D.Device.get(0)
    triton, adamw = triton_adamw()
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    records = []

    def record(kernel, engine, ms, nbytes, **extra):
        rec = dict(env, kernel=kernel, engine=engine, median_ms=round(ms, 5), bytes=nbytes,
                   gbs=round(nbytes / ms / 1e6, 1), **extra)
        records.append(rec)
        print(f"{kernel:20s} {engine:42s} {ms * 1e3:8.1f} us {nbytes / 1e6:8.1f} MB "
              f"{rec['gbs']:7.0f} GB/s", flush=True)

    for spec in args.kernel:
        module, elements = spec.split(":")
        elements = int(elements)
        for path in args.artifacts:
            run, launch, keep = artifact_kernel(torch, dev, path, module, elements)
            record(module, os.path.basename(path), median_ms(torch, run),
                   launch.get("arg_bytes") or 0, grid=launch["grid"])
            del keep
        w, m, v = (torch.rand(elements, device="cuda") for _ in range(3))
        g = torch.rand(elements, device="cuda").to(torch.bfloat16)
        wo, mo, vo = (torch.empty_like(w) for _ in range(3))
        wb = torch.empty_like(g)
        for block, warps in ((1024, 4), (2048, 8), (4096, 8)):
            def tri(block=block, warps=warps):
                adamw[(triton.cdiv(elements, block),)](
                    w, g, m, v, wo, mo, vo, wb, elements, 1e-3, 0.9, 0.95, 0.9, 0.9, 1e-8, 0.1,
                    BLOCK=block, num_warps=warps)
            record(module, f"triton same I/O, block {block}, {warps} warps",
                   median_ms(torch, tri), 28 * elements)
        param = torch.rand(elements, device="cuda")
        param.grad = torch.rand(elements, device="cuda")
        opt = torch.optim.AdamW([param], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1,
                                fused=True)
        record(module, "torch fused AdamW (f32 gradient)", median_ms(torch, opt.step),
               32 * elements)
        a = torch.rand(elements * 4, device="cuda")
        b = torch.empty_like(a)
        record(module, "copy", median_ms(torch, lambda: b.copy_(a)), 32 * elements)
    stamp = env["date"].replace(":", "").replace("-", "")
    from results_files import save_records
    save_records(records, f"optimizer_kernel-{stamp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
