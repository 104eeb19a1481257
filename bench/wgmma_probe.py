"""Which shared-memory layouts and descriptors does the H200's ``wgmma`` read?  A probe.

    .venv/bin/python bench/wgmma_probe.py build        # here: MLIR -> PTX (sm_90a)
    PYTHONPATH=. python bench/wgmma_probe.py run       # GPU: runtime only

The wgmma instruction reads its operands from shared memory through a 64-bit *matrix
descriptor* (start address, leading- and stride-dimension byte offsets, swizzle mode), and
the PTX ISA's description of what the two offsets mean for each layout is terse enough that
public code disagrees about it.  Rather than guess, this probe settles it on the chip: one
warpgroup copies a host-prepared byte image into shared memory (so the host decides the
layout), issues four ``wgmma.mma_async m64n128k16`` (K = 64) with descriptors computed on
the host, and writes its 64 accumulators per thread; the host checks them against
``A @ B^T`` under each hypothesis of the layout (K-major / MN-major operands, no swizzle /
128-byte swizzle, the two readings of the offsets) and of the accumulator fragment layout.
The answer decides the layouts ``passes/form_contraction_kernels.py`` generates and the
SIMT interpreter's reading of wgmma (tests/py/simt.py).  Writes
bench/results/wgmma_probe-<UTC>.json.
"""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ART = os.path.join(ROOT, "bench", "artifacts", "wgmma_probe")
M, N, K = 64, 128, 64
WG = "#gpu.address_space<workgroup>"
ACC = "!llvm.struct<(" + ", ".join(["f32"] * (N // 2)) + ")>"


def kernel_text(trans_a: bool, trans_b: bool) -> str:
    """A gpu.module: copy the images into 1024-aligned shared memory, four wgmma, store."""
    la = "col" if trans_a else "row"
    lb = "row" if trans_b else "col"
    lines = []

    def e(s):
        lines.append("    " + s)

    for v in sorted({0, 8, 64, 128, 512, 1023, 1024, 4096} | set(range(N // 2))):
        e(f"%c{v} = arith.constant {v} : index")
    e("%cm1024 = arith.constant -1024 : index")
    e("%tid = gpu.thread_id x")
    e(f"%dyn = gpu.dynamic_shared_memory : memref<?xi8, {WG}>")
    e(f"%base = memref.extract_aligned_pointer_as_index %dyn : memref<?xi8, {WG}> -> index")
    e("%up = arith.addi %base, %c1023 : index")
    e("%al = arith.andi %up, %cm1024 : index")
    e("%shift = arith.subi %al, %base : index")
    e(f"%sm = memref.view %dyn[%shift][] : memref<?xi8, {WG}> to memref<12288xbf16, {WG}>")
    # A image: 4096 bf16 = 512 chunks of 8; B image: 8192 bf16 = 1024 chunks, after A
    for name, n, off in (("ia", 4096, 0), ("ib", 8192, 4096)):
        e(f"scf.for %i = %tid to %c{n // 8} step %c128 {{")
        e("  %x = arith.muli %i, %c8 : index")
        e(f"  %v = vector.load %{name}[%x] : memref<{n}xbf16>, vector<8xbf16>")
        e(f"  %y = arith.addi %x, %c{off} : index")
        e(f"  vector.store %v, %sm[%y] : memref<12288xbf16, {WG}>, vector<8xbf16>")
        e("}")
    e("nvvm.fence.proxy { kind = #nvvm.proxy_kind<async.shared>, "
      "space = #nvvm.shared_space<cta> }")
    e("gpu.barrier")
    e("%ali = arith.index_cast %al : index to i64")
    e("%i4 = arith.constant 4 : i64")
    e("%adr = arith.shrui %ali, %i4 : i64")
    e("%a0 = arith.addi %da, %adr : i64")
    e("%b0 = arith.addi %db, %adr : i64")
    e("%bofs = arith.constant 512 : i64")        # B image at byte 8192 = 512 units
    e("%b1 = arith.addi %b0, %bofs : i64")
    e("%zero = llvm.mlir.constant(0.0 : f32) : f32")
    e(f"%u = llvm.mlir.undef : {ACC}")
    acc = "%u"
    for j in range(N // 2):
        e(f"%u{j} = llvm.insertvalue %zero, {acc}[{j}] : {ACC}")
        acc = f"%u{j}"
    e("nvvm.wgmma.fence.aligned")
    da, db = "%a0", "%b1"
    for s in range(K // 16):
        e(f"%r{s} = nvvm.wgmma.mma_async {da}, {db}, {acc}, <m = 64, n = {N}, k = 16>, "
          f"D[<f32>, <one>, <wrapped>], A[<bf16>, <one>, <{la}>], B[<bf16>, <one>, <{lb}>] "
          f": {ACC} -> {ACC}")
        acc = f"%r{s}"
        e(f"%da{s} = arith.addi {da}, %sa : i64")
        e(f"%db{s} = arith.addi {db}, %sb : i64")
        da, db = f"%da{s}", f"%db{s}"
    e("nvvm.wgmma.commit.group.sync.aligned")
    e("nvvm.wgmma.wait.group.sync.aligned 0")
    e("%o0 = arith.muli %tid, %c64 : index")
    for j in range(N // 2):
        e(f"%v{j} = llvm.extractvalue {acc}[{j}] : {ACC}")
        e(f"%p{j} = arith.addi %o0, %c{j} : index")
        e(f"memref.store %v{j}, %out[%p{j}] : memref<8192xf32>")
    body = "\n".join(lines)
    name = f"probe_{int(trans_a)}{int(trans_b)}"
    return (f"gpu.module @{name} {{\n  gpu.func @k(%ia: memref<4096xbf16>, "
            f"%ib: memref<8192xbf16>, %out: memref<8192xf32>, %da: i64, %db: i64, %sa: i64, "
            f"%sb: i64) kernel {{\n{body}\n    gpu.return\n  }}\n}}\n")


def build() -> None:
    from mlir import ir

    from latch.targets.cuda import serialize_kernels
    os.makedirs(ART, exist_ok=True)
    for ta in (0, 1):
        for tb in (0, 1):
            text = "module attributes {gpu.container_module} {\n" + kernel_text(ta, tb) + "}\n"
            with ir.Context():
                m = ir.Module.parse(text)
                ptx = serialize_kernels(m, "sm_90a", "+ptx80", jobs=1)
            (ptx_text,) = ptx.values()
            with open(os.path.join(ART, f"probe_{ta}{tb}.ptx"), "w") as f:
                f.write(ptx_text)
            print(f"probe_{ta}{tb}.ptx", len(ptx_text), "bytes")


# -- layout hypotheses: (element (mn, k) -> bf16 index in the image), descriptor fields ------
def _desc(lbo: int, sbo: int, swizzle: int) -> int:
    return ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (swizzle << 62)


def layouts(rows: int, major: str):
    """{name: (index function (mn, k) -> bf16 element index, descriptor, step in 16-byte
    units per k16)} for a rows x 64 operand."""
    out = {}
    if major == "K":
        out["K-sw128"] = (lambda mn, k: mn * 64 + (((k // 8) ^ (mn % 8)) * 8) + k % 8,
                          _desc(16, 1024, 1), 2)
        # no swizzle: core matrices 8 (mn) x 8 (k), 128 contiguous bytes; k-cores 128 B
        # apart, mn-cores 1024 B apart; (LBO, SBO) read as (k, mn) or swapped
        f = (lambda mn, k: (mn // 8) * 512 + (k // 8) * 64 + (mn % 8) * 8 + k % 8)
        out["K-int-lbo=k"] = (f, _desc(128, 1024, 0), 16)
        out["K-int-lbo=mn"] = (f, _desc(1024, 128, 0), 16)
    else:
        g = (lambda mn, k: (mn // 64) * 4096 + k * 64 + ((((mn % 64) // 8) ^ (k % 8)) * 8)
             + mn % 8)
        out["MN-sw128-lbo=mn"] = (g, _desc(8192, 1024, 1), 128)
        out["MN-sw128-lbo=k"] = (g, _desc(1024, 8192, 1), 128)
        f = (lambda mn, k: (mn // 8) * 512 + (k // 8) * 64 + (k % 8) * 8 + mn % 8)
        out["MN-int-lbo=k"] = (f, _desc(128, 1024, 0), 16)
        out["MN-int-lbo=mn"] = (f, _desc(1024, 128, 0), 16)
    return out


def fragment_coords():
    """(row, col) of accumulator register i of thread t (the PTX ISA's m64nNk16 D layout)."""
    import numpy as np
    t = np.arange(128)[:, None]
    i = np.arange(N // 2)[None, :]
    w, lane = t // 32, t % 32
    row = w * 16 + lane // 4 + 8 * ((i % 4) // 2)
    col = 8 * (i // 4) + (lane % 4) * 2 + i % 2
    return row, col


def cases():
    """Every (trans_a, trans_b, A layout, B layout) the probe tries, in order."""
    out = []
    for ta in (0, 1):
        for tb in (0, 1):
            for an in layouts(M, "MN" if ta else "K"):
                for bn in layouts(N, "MN" if tb else "K"):
                    out.append((ta, tb, an, bn))
    return out


def run_cases(first: int) -> None:
    """Run cases first.. in this process, one JSON line each (a fault ends the process:
    the CUDA context is unusable after it)."""
    import numpy as np
    import torch

    from latch.runtime import driver as drv
    dev = drv.Device.get(0)
    torch.cuda.init()
    stream = drv.Stream(dev)
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, size=(M, K)).astype(np.float32)     # exact in bf16 and f32
    b = rng.integers(-4, 5, size=(N, K)).astype(np.float32)
    want = a @ b.T
    row, col = fragment_coords()
    fns = {}
    for n, (ta, tb, an, bn) in enumerate(cases()):
        if n < first:
            continue
        if (ta, tb) not in fns:
            mod = drv.Module(dev, open(os.path.join(ART, f"probe_{ta}{tb}.ptx")).read(),
                             f"probe_{ta}{tb}")
            fn = mod.function("k")
            drv.call("cuFuncSetAttribute", fn, drv.driver().CUfunction_attribute
                     .CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 32768, what="probe")
            fns[ta, tb] = (mod, fn)
        fn = fns[ta, tb][1]
        fa, desc_a, step_a = layouts(M, "MN" if ta else "K")[an]
        fb, desc_b, step_b = layouts(N, "MN" if tb else "K")[bn]
        ia = np.zeros(4096, np.float32)
        ib = np.zeros(8192, np.float32)
        mn, k = np.meshgrid(np.arange(M), np.arange(K), indexing="ij")
        ia[np.vectorize(fa)(mn, k)] = a
        mn, k = np.meshgrid(np.arange(N), np.arange(K), indexing="ij")
        ib[np.vectorize(fb)(mn, k)] = b
        ta_ = torch.tensor(ia).to(torch.bfloat16).cuda()
        tb_ = torch.tensor(ib).to(torch.bfloat16).cuda()
        out = torch.full((8192,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        params = np.array([ta_.data_ptr(), tb_.data_ptr(), out.data_ptr(),
                           desc_a, desc_b, step_a, step_b], dtype=np.uint64)
        ptrs = np.array([params.ctypes.data + 8 * j for j in range(7)], dtype=np.uint64)
        rec = {"case": n, "trans_a": ta, "trans_b": tb, "a_layout": an, "b_layout": bn}
        try:
            drv.launch(fn, (1, 1, 1), (128, 1, 1), 32768, stream, ptrs.ctypes.data, "probe")
            stream.synchronize("probe")
        except Exception as ex:       # a wrong descriptor may fault
            rec["error"] = str(ex)[:300]
            print("CASE " + json.dumps(rec), flush=True)
            sys.exit(3)
        got = out.cpu().numpy().reshape(128, N // 2)
        d = np.full((M, N), np.nan, np.float32)
        d[row, col] = got
        rec["max_abs_err"] = float(np.nanmax(np.abs(d - want)))
        rec["exact"] = bool(np.array_equal(d, want))
        print("CASE " + json.dumps(rec), flush=True)


def run() -> None:
    """All cases, each batch in a child process; after a fault the next child resumes."""
    import subprocess
    records, first, total = [], 0, len(cases())
    while first < total:
        p = subprocess.run([sys.executable, __file__, "cases", str(first)],
                           capture_output=True, text=True)
        got = [json.loads(x[5:]) for x in p.stdout.splitlines() if x.startswith("CASE ")]
        for r in got:
            print(f"trans ({r['trans_a']},{r['trans_b']})  A {r['a_layout']:16s} "
                  f"B {r['b_layout']:16s} "
                  + (f"FAULT {r['error'][:80]}" if "error" in r else
                     f"{'EXACT' if r['exact'] else 'wrong'}  max err {r['max_abs_err']:.3g}"))
        records += got
        if not got:
            print(p.stdout[-2000:], p.stderr[-3000:])
            break
        first = got[-1]["case"] + 1
    _write(records)


def _write(records) -> None:
    import datetime

    import torch
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    path = os.path.join(ROOT, "bench", "results", f"wgmma_probe-{stamp}.json")
    with open(path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "commit": os.environ.get("LATCH_COMMIT", ""), "records": records}, f,
                  indent=1)
    print("wrote", path)


if __name__ == "__main__":
    if sys.argv[1] == "cases":
        run_cases(int(sys.argv[2]))
    else:
        {"build": build, "run": run}[sys.argv[1]]()
