"""GradLev-style token-by-token adaptation with ``latch.scan`` (WORKLOADS.md), small sizes.

Per sequence and head a fast weight W (from W0) takes, for t = 0..T-1 in order, one gradient
step on l_t = 1/2 |W k_t - v_t|^2 with step size eta (``torch.func.grad`` inside the step
function) and emits o_t = W_t q_t.  ``latch.compile(adapt, None, inputs)`` traces the step
once and keeps the scan as one loop: the compile time does not grow with T.

    .venv/bin/python examples/gradlev_small.py [--heads 2] [--d 8] [--tokens 16]
        [--target cuda [--save gradlev.latch]]

With ``--target cuda`` the scan becomes ONE GPU kernel that keeps W in shared memory across
all tokens (latch-form-scan-kernels); without a GPU here the artifact is saved
(``--save``) and summarized, to run elsewhere with
``latch.runtime.function.CudaFunction.load(path)``.
"""
import argparse
import time

import torch

import latch


def make_step(eta):
    def step(W, qkv):
        q, k, v = qkv

        def inner(W):
            return 0.5 * ((torch.einsum("hij,hj->hi", W, k) - v) ** 2).sum()

        W = W - eta * torch.func.grad(inner)(W)
        return W, torch.einsum("hij,hj->hi", W, q)
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--eta", type=float, default=0.1)
    ap.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--save", help="cuda target: write the artifact here")
    a = ap.parse_args()
    step = make_step(a.eta)

    def adapt(W0, q, k, v):
        return latch.scan(step, W0, (q, k, v))

    g = torch.Generator().manual_seed(0)
    W0 = torch.randn(a.heads, a.d, a.d, generator=g, dtype=torch.float64) * 0.1
    q, k, v = [torch.randn(a.tokens, a.heads, a.d, generator=g, dtype=torch.float64) / a.d ** 0.5
               for _ in range(3)]
    inputs32 = tuple(t.float() for t in (W0, q, k, v))
    t0 = time.perf_counter()
    fn = latch.compile(adapt, None, inputs32, target=a.target)
    compile_s = time.perf_counter() - t0
    if a.target == "cuda":
        if a.save:
            fn.save(a.save)
        print(fn.report())
        if not torch.cuda.is_available():
            print(f"compiled for cuda in {compile_s:.2f} s; no GPU here"
                  + (f": run {a.save} where there is one" if a.save else ""))
            return
        inputs32 = tuple(t.cuda() for t in inputs32)
        W0, q, k, v = (t.cuda() for t in (W0, q, k, v))
    W, o = fn(*inputs32)
    rW, ro = adapt(W0, q, k, v)                      # eager PyTorch, float64
    rel = lambda x, r: float((x.double() - r).norm() / r.norm())  # noqa: E731
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(*inputs32)
    if a.target == "cuda":
        torch.cuda.synchronize()
    latch_ms = (time.perf_counter() - t0) / reps * 1e3
    t0 = time.perf_counter()
    for _ in range(reps):
        adapt(*inputs32)
    if a.target == "cuda":
        torch.cuda.synchronize()
    eager_ms = (time.perf_counter() - t0) / reps * 1e3
    print(f"heads {a.heads}, d {a.d}, tokens {a.tokens}: compile {compile_s:.2f} s; "
          f"rel L2 vs fp64 eager: W {rel(W, rW):.2e}, o {rel(o, ro):.2e}; "
          f"{a.target} time per block (wall clock): latch {latch_ms:.2f} ms, "
          f"eager {eager_ms:.2f} ms")


if __name__ == "__main__":
    main()
