"""latch-form-scan-kernels and the cuda target for compiled functions (rule None) with a
latch.scan: one kernel per scan, the carry in workgroup memory, a cuda-function artifact.

Without a GPU the kernel's numerics are checked by a small SIMT interpreter of the pass's
output (every thread of every block in lock step, masked control flow, warp shuffles),
which also detects data races: an access to a workgroup or global element that another
thread wrote (or read, for a write) since the last ``gpu.barrier`` of the block — a barrier
the pass left out shows up as a race, not as luck.  With a GPU the artifact runs through
the runtime against eager PyTorch in float64."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import latch
from latch.errors import LatchError, PipelineError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gradlev_small import make_step  # noqa: E402

ETA = 0.1


def _adapt_fn():
    step = make_step(ETA)

    def adapt(W0, q, k, v):
        return latch.scan(step, W0, (q, k, v))
    return adapt


def _inputs(H, D, T, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    W0 = torch.randn(H, D, D, generator=g, dtype=torch.float64) * 0.1
    qkv = [torch.randn(T, H, D, generator=g, dtype=torch.float64) / D ** 0.5 for _ in range(3)]
    return tuple(t.to(dtype) for t in (W0, *qkv))


def _rel(x, ref):
    x, ref = torch.as_tensor(x).double(), torch.as_tensor(ref).double()
    return float((x - ref).norm() / ref.norm())


def _bufferized(fn, inputs):
    """The function after latch-bufferize (text)."""
    from mlir import ir

    import latch.dialect
    from latch.frontend.importer import import_to_linalg
    from latch.frontend.trace import trace_function
    from latch.targets.cuda import _run

    text = import_to_linalg(trace_function(fn, inputs), func_name="main")
    with ir.Context() as ctx, ir.Location.unknown():
        latch.dialect.load(ctx)
        m = ir.Module.parse(text)
        _run(m, "builtin.module(inline, latch-bufferize)", "latch-bufferize")
        return str(m)


def _scan_kernel_module(text, pipeline="latch-form-scan-kernels"):
    from latch.pipeline import run_pipeline
    from mlir import ir

    import latch.dialect

    ctx = ir.Context()
    latch.dialect.load(ctx)
    with ctx, ir.Location.unknown():
        m = ir.Module.parse(text)
        run_pipeline(m, f"builtin.module({pipeline})")
    return m, ctx


# -- a SIMT interpreter of the pass's output ------------------------------------------------

class Race(AssertionError):
    pass


class _Mem:
    """A flat buffer with per-element last-writer / last-reader records."""

    def __init__(self, data, shared_blocks=None):
        self.data = data
        n = data.size
        self.w_thread = np.full(n, -1, np.int64)
        self.w_epoch = np.full(n, -1, np.int64)
        self.r_thread = np.full(n, -1, np.int64)
        self.r_epoch = np.full(n, -1, np.int64)
        self.shared_blocks = shared_blocks


class Simt:
    """Runs ``func @main`` (host: constants, allocations, reshapes, one gpu.launch per
    scan) with every kernel thread in lock step."""

    def __init__(self, module):
        self.module = module

    def run(self, args):
        from mlir import ir

        func = next(o for o in self.module.body.operations if o.operation.name == "func.func")
        block = func.regions[0].blocks[0]
        env = {}
        for a, x in zip(block.arguments, args):
            env[a] = _Mem(np.ascontiguousarray(x, dtype=np.float32).reshape(-1).copy())
        for op in block.operations:
            op = op.operation
            n = op.name
            if n == "arith.constant":
                env[op.results[0]] = _const(op)
            elif n == "memref.alloc":
                t = ir.MemRefType(op.results[0].type)
                env[op.results[0]] = _Mem(np.full(int(np.prod(t.shape)), np.nan, np.float32))
            elif n in ("memref.collapse_shape", "memref.expand_shape", "memref.cast"):
                env[op.results[0]] = env[op.operands[0]]
            elif n == "gpu.launch":
                self._launch(op, env)
            elif n == "func.return":
                return [env[v].data.reshape(ir.MemRefType(v.type).shape) for v in op.operands]
            else:
                raise NotImplementedError(f"host op {n}")

    def _launch(self, op, env):
        from mlir import ir

        ops = list(op.operands)
        grid = [int(env[v]) for v in ops[0:3]]
        block = [int(env[v]) for v in ops[3:6]]
        assert grid[1] == grid[2] == 1 and block[1] == block[2] == 1
        G, T = grid[0], block[0]
        L = G * T
        body = op.regions[0].blocks[0]
        lanes = np.arange(L)
        bid, tid = lanes // T, lanes % T
        kenv = dict(env)
        args = list(body.arguments)
        for a, v in zip(args[:12], [bid, 0, 0, tid, 0, 0, G, 1, 1, T, 1, 1]):
            kenv[a] = np.broadcast_to(np.asarray(v, np.int64), (L,)).copy()
        for a in args[12:]:
            t = ir.MemRefType(a.type)
            n = int(np.prod(t.shape))
            kenv[a] = _Mem(np.full(G * n, np.nan, np.float32), shared_blocks=n)
        self.L, self.T, self.bid, self.tid, self.epoch = L, T, bid, tid, 0
        self._region(body, kenv, np.ones(L, bool))

    def _region(self, block, env, mask):
        for op in block.operations:
            op = op.operation
            if op.name in ("gpu.terminator", "scf.yield"):
                return [env[v] for v in op.operands]
            self._op(op, env, mask)
        return []

    def _addr(self, mem, idx):
        idx = np.asarray(idx, np.int64)
        if mem.shared_blocks is not None:
            return self.bid * mem.shared_blocks + idx
        return idx

    def _access(self, mem, addr, mask, write):
        thread = np.arange(self.L)
        a, th = addr[mask], thread[mask]
        assert (a >= 0).all() and (a < mem.data.size).all(), "out-of-bounds access"
        if mem.shared_blocks is None:
            # global memory: another block's write is never ordered (no grid barrier)
            other_block = (mem.w_thread[a] >= 0) & (mem.w_thread[a] // self.T != th // self.T)
            if other_block.any():
                raise Race("a block reads or writes global memory another block wrote")
        same_epoch_w = (mem.w_epoch[a] == self.epoch) & (mem.w_thread[a] != th)
        if same_epoch_w.any():
            raise Race(f"{'write' if write else 'read'} after another thread's write with "
                       "no barrier in between")
        if write:
            same_epoch_r = (mem.r_epoch[a] == self.epoch) & (mem.r_thread[a] != th) & \
                (mem.r_thread[a] != -2)
            many = (mem.r_epoch[a] == self.epoch) & (mem.r_thread[a] == -2)
            if same_epoch_r.any() or many.any():
                raise Race("write after another thread's read with no barrier in between")
            if len(np.unique(a)) != len(a):
                raise Race("two threads write one element in one op")
            mem.w_thread[a], mem.w_epoch[a] = th, self.epoch
        else:
            fresh = mem.r_epoch[a] != self.epoch
            prev = mem.r_thread[a]
            mem.r_thread[a] = np.where(fresh | (prev == th), th, -2)
            mem.r_epoch[a] = self.epoch
            # several readers of one element in one op
            u, counts = np.unique(a, return_counts=True)
            mem.r_thread[u[counts > 1]] = -2

    def _op(self, op, env, mask):
        from mlir import ir

        n = op.name
        val = lambda v: env[v]  # noqa: E731
        if n == "arith.constant":
            env[op.results[0]] = _const(op)
            return
        if n == "memref.load":
            mem = env[op.operands[0]]
            addr = self._addr(mem, np.broadcast_to(val(op.operands[1]), (self.L,)))
            self._access(mem, addr, mask, write=False)
            out = np.zeros(self.L, np.float32)
            out[mask] = mem.data[addr[mask]]
            assert not np.isnan(out[mask]).any(), f"read of an unwritten element ({op})"
            env[op.results[0]] = out
            return
        if n == "memref.store":
            mem = env[op.operands[1]]
            addr = self._addr(mem, np.broadcast_to(val(op.operands[2]), (self.L,)))
            self._access(mem, addr, mask, write=True)
            mem.data[addr[mask]] = np.broadcast_to(val(op.operands[0]), (self.L,))[mask]
            return
        if n == "gpu.barrier":
            assert mask.all(), "a barrier under divergent control flow"
            self.epoch += 1
            return
        if n == "scf.if":
            cond = np.broadcast_to(val(op.operands[0]), (self.L,)).astype(bool)
            self._region(op.regions[0].blocks[0], env, mask & cond)
            if len(op.regions) > 1 and op.regions[1].blocks:
                self._region(op.regions[1].blocks[0], env, mask & ~cond)
            return
        if n == "scf.for":
            lb, ub, st = (np.broadcast_to(val(v), (self.L,)).astype(np.int64)
                          for v in list(op.operands)[:3])
            carried = [np.array(np.broadcast_to(val(v), (self.L,))) for v in list(op.operands)[3:]]
            body = op.regions[0].blocks[0]
            iv = lb.copy()
            while True:
                active = mask & (iv < ub)
                if not active.any():
                    break
                env[body.arguments[0]] = iv.copy()
                for a, c in zip(list(body.arguments)[1:], carried):
                    env[a] = c
                outs = self._region(body, env, active)
                carried = [np.where(active, np.broadcast_to(o, (self.L,)), c)
                           for o, c in zip(outs, carried)]
                iv = np.where(active, iv + st, iv)
            for r, c in zip(op.results, carried):
                env[r] = c
            return
        if n == "gpu.shuffle":
            assert str(op.attributes["mode"]) == "#gpu<shuffle_mode xor>"
            v = np.broadcast_to(val(op.operands[0]), (self.L,))
            off = int(np.broadcast_to(val(op.operands[1]), (self.L,))[0])
            lanes = np.arange(self.L)
            src = lanes ^ off
            warp_all = mask.reshape(-1, 32).all(1) | ~mask.reshape(-1, 32).any(1)
            assert warp_all.all(), "a shuffle with part of a warp"
            env[op.results[0]] = v[src]
            env[op.results[1]] = np.ones(self.L, bool)
            return
        a = [np.broadcast_to(val(v), (self.L,)) for v in op.operands]
        if n == "arith.cmpi":
            pred = ir.IntegerAttr(op.attributes["predicate"]).value
            env[op.results[0]] = _CMPI[pred](a[0], a[1])
            return
        f = _ARITH.get(n)
        if f is None:
            raise NotImplementedError(f"kernel op {n}")
        env[op.results[0]] = f(*a)


def _const(op):
    from mlir import ir

    attr = op.attributes["value"]
    if isinstance(attr, ir.FloatAttr):
        t = str(op.results[0].type)
        return np.float64(ir.FloatAttr(attr).value) if t == "f64" else \
            np.float32(ir.FloatAttr(attr).value)
    return np.int64(ir.IntegerAttr(attr).value)


_ARITH = {
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b, "arith.divui": lambda a, b: a // b,
    "arith.remui": lambda a, b: a % b, "arith.andi": lambda a, b: a & b,
    "arith.addf": lambda a, b: (a + b).astype(np.float32),
    "arith.subf": lambda a, b: (a - b).astype(np.float32),
    "arith.mulf": lambda a, b: (a * b).astype(np.float32),
    "arith.divf": lambda a, b: (a / b).astype(np.float32),
    "arith.maximumf": np.maximum, "arith.minimumf": np.minimum,
    "arith.truncf": lambda a: a.astype(np.float32),
    "arith.extf": lambda a: a.astype(np.float64),
    "math.fpowi": lambda a, b: (a.astype(np.float32) ** b).astype(np.float32),
    "arith.select": lambda c, a, b: np.where(c, a, b),
}
_CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
         5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater,
         9: np.greater_equal}


def _simulate(text, inputs):
    m, ctx = _scan_kernel_module(text)
    with ctx:
        return Simt(m).run([t.numpy() for t in inputs])


# -- the pass ---------------------------------------------------------------------------------

@pytest.mark.parametrize("H,D,T", [(2, 8, 16), (3, 64, 9), (200, 16, 5), (50, 64, 3)])
def test_scan_kernel_matches_float64(H, D, T):
    """The kernel the pass makes (interpreted thread by thread) computes the scan: within
    1e-5 of eager PyTorch in float64 for W and o, with no data race; (3, 64, 9) takes the
    warp-per-output reductions (64-long), (200, 16, 5) packs several problems per block,
    (50, 64, 3) both."""
    adapt = _adapt_fn()
    inputs = _inputs(H, D, T)
    W, o = _simulate(_bufferized(adapt, inputs), inputs)
    rW, ro = adapt(*(t.double() for t in inputs))
    assert _rel(W, rW) < 1e-5 and _rel(o, ro) < 1e-5, (_rel(W, rW), _rel(o, ro))


def test_simulator_catches_a_missing_barrier():
    """The interpreter is not lock-step lucky: with the barriers of the kernel removed it
    reports a race."""
    adapt = _adapt_fn()
    inputs = _inputs(2, 8, 4)
    m, ctx = _scan_kernel_module(_bufferized(adapt, inputs))
    with ctx:
        def walk(op):
            for r in op.regions:
                for b in r.blocks:
                    for o in list(b.operations):
                        if o.operation.name == "gpu.barrier":
                            o.operation.erase()
                        else:
                            walk(o.operation)
        walk(m.operation)
        with pytest.raises(Race):
            Simt(m).run([t.numpy() for t in inputs])


def test_one_launch_carry_in_workgroup_memory():
    adapt = _adapt_fn()
    inputs = _inputs(2, 8, 16)
    m, ctx = _scan_kernel_module(_bufferized(adapt, inputs))
    text = str(m)
    assert text.count("gpu.launch ") == 1
    assert "scf.for" in text and "gpu.barrier" in text
    assert "#gpu.address_space<workgroup>" in text
    host = text.split("gpu.launch ")[0]
    assert "scf.for" not in host and "linalg." not in text


def test_refuses_with_the_op_and_location():
    """An op the scan kernel does not support is named, with its location."""
    from mlir import ir

    text = _bufferized(_adapt_fn(), _inputs(2, 8, 4))
    # a call inside the loop body (not supported)
    bad = text.replace("linalg.generic {indexing_maps = [#map], iterator_types = "
                       "[\"parallel\", \"parallel\", \"parallel\"]} outs(%alloc_5",
                       "func.call @opaque() : () -> ()\n      linalg.generic {indexing_maps = "
                       "[#map], iterator_types = [\"parallel\", \"parallel\", \"parallel\"]} "
                       "outs(%alloc_5", 1)
    assert bad != text
    bad = bad.replace("module {", "module {\n  func.func private @opaque()", 1)
    with pytest.raises((LatchError, ir.MLIRError)) as e:
        _scan_kernel_module(bad)
    msg = str(e.value) + " ".join(str(d.message) for d in getattr(e.value, "error_diagnostics", []))
    assert "func.call" in msg and "latch-form-scan-kernels" in msg


def test_refuses_too_much_workgroup_memory():
    from mlir import ir

    text = _bufferized(_adapt_fn(), _inputs(1, 64, 4))
    with pytest.raises((LatchError, ir.MLIRError)) as e:
        _scan_kernel_module(text, "latch-form-scan-kernels{max-shared=256}")
    msg = str(e.value) + " ".join(str(d.message) for d in getattr(e.value, "error_diagnostics", []))
    assert "max-shared=256" in msg and "workgroup memory" in msg


# -- the cuda target --------------------------------------------------------------------------

def _compile_cuda(H, D, T):
    return latch.compile(_adapt_fn(), None, _inputs(H, D, T), target="cuda")


@pytest.fixture(scope="module")
def small_cuda(tmp_path_factory):
    return _compile_cuda(2, 8, 16)


def test_cuda_function_artifact(small_cuda, tmp_path):
    m = small_cuda.manifest
    assert m["kind"] == "cuda-function"
    assert len(m["launches"]) == 1, m["launches"]
    launch = m["launches"][0]
    assert launch["block"][0] == 256 and launch["grid"][0] >= 1
    ptx = small_cuda.files[m["modules"][launch["module"]]].decode()
    assert ".shared" in ptx and "bar.sync" in ptx
    assert [o["shape"] for o in m["outputs"]] == [[2, 8, 8], [16, 2, 8]]
    a, b = tmp_path / "a.latch", tmp_path / "b.latch"
    small_cuda.save(a)
    _compile_cuda(2, 8, 16).save(b)
    assert a.read_bytes() == b.read_bytes()


def test_cuda_function_loads_without_mlir(small_cuda, tmp_path):
    """The artifact reads back on the runtime side (kind cuda-function); without a GPU
    running it says so."""
    from latch.artifact import read_artifact

    path = tmp_path / "f.latch"
    small_cuda.save(path)
    manifest, files = read_artifact(path)
    assert manifest["kind"] == "cuda-function" and manifest["out_tree"]
    if not torch.cuda.is_available():
        with pytest.raises(LatchError, match="GPU"):
            small_cuda(*_inputs(2, 8, 16))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("H,D,T", [(2, 8, 16), (12, 64, 64)])
def test_cuda_function_numerics_on_gpu(H, D, T, tmp_path):
    from latch.runtime.function import CudaFunction

    fn = _compile_cuda(H, D, T)
    path = tmp_path / "f.latch"
    fn.save(path)
    run = CudaFunction.load(path)
    inputs = _inputs(H, D, T)
    W, o = run(*(t.cuda() for t in inputs))
    rW, ro = _adapt_fn()(*(t.double() for t in inputs))
    assert _rel(W.cpu(), rW) <= 1e-4 and _rel(o.cpu(), ro) <= 1e-4
    with pytest.raises(LatchError, match="shape|dtype"):
        run(*(t.cuda() for t in _inputs(H, D, T + 1)))


def test_function_cuda_rejects_bad_precision():
    with pytest.raises(LatchError, match="precision"):
        latch.compile(_adapt_fn(), None, _inputs(2, 8, 4), target="cuda", precision="bf16")


def test_pipeline_error_type():
    assert issubclass(PipelineError, LatchError)


def test_cuda_function_cache_hit_gives_the_same_artifact(cache_dir, tmp_path):
    """A second compile of the same scan is a cache hit that rebuilds the cuda handle (not
    a 'corrupted entry' recompiled), with the same bytes."""
    from latch.function import CudaFunctionHandle

    first = _compile_cuda(2, 8, 16)
    second = _compile_cuda(2, 8, 16)
    assert first.manifest["cache"]["status"] == "miss"
    assert second.manifest["cache"]["status"] == "hit", second.manifest["cache"]
    assert isinstance(second, CudaFunctionHandle)
    a, b = tmp_path / "a.latch", tmp_path / "b.latch"
    first.save(a)
    second.save(b)
    assert a.read_bytes() == b.read_bytes()
