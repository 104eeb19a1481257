"""latch-map-parallel-loops' kernels executed on the CPU (the SIMT interpreter of
tests/py/simt.py, with its race detection): with several iterations per thread — loads of
all of a thread's iterations issued first where that is legal, one iteration after another
where it is not — every kernel computes what it computes with one iteration per thread.
Each body is checked against numpy for per-thread = 1, 2 and 4 (min-blocks=1 so that small
arrays split), and the structure (how many iterations per thread, whether the loads were
hoisted) is checked on the pass's output; the second half does the same with vector lanes
(16-byte accesses along the fastest loop, passes/vector_lanes.py) and checks where they
are refused."""
from __future__ import annotations

import numpy as np
import pytest

from simt import Simt, formed


def run_mapped(text: str, args, per_thread: int, vector: bool = False, narrow: bool = True,
               whole_stores: bool = True):
    with formed(text, "builtin.module(latch-map-parallel-loops{"
                        f"per-thread={per_thread} min-blocks=1 vector={str(vector).lower()} "
                        f"narrow-lanes={str(narrow).lower()} "
                        f"whole-stores={str(whole_stores).lower()}}}"
                        ",canonicalize,cse)") as m:
        kernel = str(m)
        assert "scf.parallel" not in kernel and "gpu.launch" in kernel
        if args is None:           # a loop whose iterations race: only its form is looked at
            return kernel, None
        sim = Simt(m)
        sim.run(args)
    return kernel, sim.arguments


def _launch_body(kernel: str) -> list[str]:
    body = kernel.split("gpu.launch", 1)[1].split("gpu.terminator")[0]
    return [line.strip() for line in body.splitlines()[1:] if line.strip()]


def _ops(lines, name):
    return [i for i, line in enumerate(lines) if f"{name} " in line]


AXPY = """
func.func @main(%x: memref<8x1024xf32>, %y: memref<8x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c1024 = arith.constant 1024 : index
  %two = arith.constant 2.0 : f32
  scf.parallel (%j, %i) = (%c0, %c0) to (%c1024, %c8) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<8x1024xf32>
    %b = memref.load %y[%i, %j] : memref<8x1024xf32>
    %m = arith.mulf %a, %two : f32
    %s = arith.addf %m, %b : f32
    memref.store %s, %y[%i, %j] : memref<8x1024xf32>
    scf.reduce
  }
  return
}
"""


@pytest.mark.parametrize("per_thread", [1, 2, 4])
def test_in_place_update_hoists_loads(per_thread):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    y = rng.standard_normal((8, 1024)).astype(np.float32)
    kernel, (_, got) = run_mapped(AXPY, [x, y], per_thread)
    np.testing.assert_array_equal(got, 2 * x + y)
    lines = _launch_body(kernel)
    loads, stores = _ops(lines, "memref.load"), _ops(lines, "memref.store")
    assert len(loads) == 2 * per_thread and len(stores) == per_thread
    assert max(loads) < min(stores)          # every load before the first store
    assert f"= %c{8 * 1024 // (256 * per_thread)}," in kernel.split("threads")[0]


# a read after the iteration's own write: hoisting the load above the store would read the
# old value of y
READ_BACK = """
func.func @main(%x: memref<4096xf32>, %y: memref<4096xf32>, %z: memref<4096xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 4096 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %a = memref.load %x[%i] : memref<4096xf32>
    %d = arith.addf %a, %a : f32
    memref.store %d, %y[%i] : memref<4096xf32>
    %b = memref.load %y[%i] : memref<4096xf32>
    %e = arith.addf %b, %one : f32
    memref.store %e, %z[%i] : memref<4096xf32>
    scf.reduce
  }
  return
}
"""


@pytest.mark.parametrize("per_thread", [1, 4])
def test_read_after_write_keeps_iterations_in_order(per_thread):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(4096).astype(np.float32)
    y = np.full(4096, 7.0, np.float32)
    kernel, (_, gy, gz) = run_mapped(READ_BACK, [x, y, np.zeros(4096, np.float32)],
                                     per_thread)
    np.testing.assert_array_equal(gy, 2 * x)
    np.testing.assert_array_equal(gz, 2 * x + 1)
    lines = _launch_body(kernel)
    loads, stores = _ops(lines, "memref.load"), _ops(lines, "memref.store")
    assert len(loads) == 2 * per_thread
    if per_thread > 1:
        assert min(stores) < loads[1]            # not hoisted: the first iteration stores first


# a gather: the index of the second load is loaded first; both are hoisted with the
# arithmetic between them
GATHER = """
func.func @main(%ids: memref<2048xi64>, %table: memref<100x4xf32>, %out: memref<2048x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %n = arith.constant 2048 : index
  scf.parallel (%k, %t) = (%c0, %c0) to (%c4, %n) step (%c1, %c1) {
    %id = memref.load %ids[%t] : memref<2048xi64>
    %r = arith.index_cast %id : i64 to index
    %v = memref.load %table[%r, %k] : memref<100x4xf32>
    %w = arith.mulf %v, %v : f32
    memref.store %w, %out[%t, %k] : memref<2048x4xf32>
    scf.reduce
  }
  return
}
"""


@pytest.mark.parametrize("per_thread", [1, 2, 4])
def test_gather(per_thread):
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 100, 2048).astype(np.int64)
    table = rng.standard_normal((100, 4)).astype(np.float32)
    kernel, (_, _, got) = run_mapped(GATHER, [ids, table, np.zeros((2048, 4), np.float32)],
                                     per_thread)
    np.testing.assert_array_equal(got, table[ids] ** 2)
    lines = _launch_body(kernel)
    assert max(_ops(lines, "memref.load")) < min(_ops(lines, "memref.store"))


# lower bounds and steps; 3 x 700 iterations do not fill whole blocks of 512 or 1024, so
# the kernel keeps one iteration per thread (masked past the end)
STEPPED = """
func.func @main(%a: memref<9x1400xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c9 = arith.constant 9 : index
  %c1400 = arith.constant 1400 : index
  scf.parallel (%j, %i) = (%c0, %c1) to (%c1400, %c9) step (%c2, %c3) {
    %v = memref.load %a[%i, %j] : memref<9x1400xf32>
    %w = arith.negf %v : f32
    memref.store %w, %a[%i, %j] : memref<9x1400xf32>
    scf.reduce
  }
  return
}
"""


@pytest.mark.parametrize("per_thread", [1, 4])
def test_steps_and_partial_blocks(per_thread):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 1400)).astype(np.float32)
    kernel, (got,) = run_mapped(STEPPED, [a.copy()], per_thread)
    want = a.copy()
    want[1:9:3, 0:1400:2] *= -1
    np.testing.assert_array_equal(got, want)
    assert len(_ops(_launch_body(kernel), "memref.load")) == 1
    assert "scf.if" in kernel


# ---------------------------------------------------------------------------------------
# vector lanes
# ---------------------------------------------------------------------------------------
def _vector_ops(kernel, name):
    return [line for line in _launch_body(kernel) if f"{name} " in line]


@pytest.mark.parametrize("per_thread", [1, 2, 4])
def test_vector_lanes_in_place_update(per_thread):
    """AXPY on f32: four lanes, one 16-byte load per operand and one store per vector,
    loads of all the thread's vectors first."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    y = rng.standard_normal((8, 1024)).astype(np.float32)
    kernel, (_, got) = run_mapped(AXPY, [x, y], per_thread, vector=True)
    np.testing.assert_array_equal(got, 2 * x + y)
    loads = _vector_ops(kernel, "vector.load")
    stores = _vector_ops(kernel, "vector.store")
    assert len(loads) == 2 * per_thread and len(stores) == per_thread
    assert all("vector<4xf32>" in x and "alignment = 16" in x for x in loads + stores)
    assert not _vector_ops(kernel, "memref.load")
    lines = _launch_body(kernel)
    assert max(_ops(lines, "vector.load")) < min(_ops(lines, "vector.store"))
    assert f"= %c{8 * 1024 // (4 * 256 * per_thread)}," in kernel.split("threads")[0]


# a bf16 head permutation ([B, H, T, 64] -> [B, T, H, 64], attention's layout change) and
# an f32 -> bf16 rounding of the same elements: 8 lanes for the copy (16 bytes of bf16), 4
# for the rounding (16 bytes of f32)
PERMUTE = """
func.func @main(%x: memref<2x3x4x64xbf16>, %y: memref<2x4x3x64xbf16>, %f: memref<2x3x4x64xf32>,
                %g: memref<2x3x4x64xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  scf.parallel (%d, %t, %h, %b) = (%c0, %c0, %c0, %c0) to (%c64, %c4, %c3, %c2)
      step (%c1, %c1, %c1, %c1) {
    %v = memref.load %x[%b, %h, %t, %d] : memref<2x3x4x64xbf16>
    memref.store %v, %y[%b, %t, %h, %d] : memref<2x4x3x64xbf16>
    scf.reduce
  }
  scf.parallel (%d, %t, %h, %b) = (%c0, %c0, %c0, %c0) to (%c64, %c4, %c3, %c2)
      step (%c1, %c1, %c1, %c1) {
    %v = memref.load %f[%b, %h, %t, %d] : memref<2x3x4x64xf32>
    %r = arith.truncf %v : f32 to bf16
    memref.store %r, %g[%b, %h, %t, %d] : memref<2x3x4x64xbf16>
    scf.reduce
  }
  return
}
"""


@pytest.mark.parametrize("narrow", [True, False])
def test_vector_lanes_by_element_size(narrow):
    # narrow lanes: 16 bytes of the narrowest element (the f32 -> bf16 rounding: 8 lanes, the
    # f32 read as 32 bytes); otherwise of the widest (4 lanes, the bf16 stored as 8 bytes)
    import torch
    rng = np.random.default_rng(4)
    x = torch.tensor(rng.standard_normal((2, 3, 4, 64))).bfloat16().double().numpy()
    f = rng.standard_normal((2, 3, 4, 64)).astype(np.float32)
    kernel, (_, y, _, g) = run_mapped(
        PERMUTE, [x, np.zeros((2, 4, 3, 64)), f, np.zeros((2, 3, 4, 64))], 1, vector=True,
        narrow=narrow)
    np.testing.assert_array_equal(y, x.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(g, torch.tensor(f).bfloat16().double().numpy())
    body = kernel.split("gpu.launch")
    lanes = 8 if narrow else 4
    assert "vector<8xbf16>" in body[1] and f"vector<{lanes}xf32>" in body[2]
    assert "vector.store %{{" not in body[2] and f"vector<{lanes}xbf16>" in body[2]
    assert f"vector<{12 - lanes}xf32>" not in body[2]


# a fill (a stored value that does not vary: broadcast) and a per-row scale (a load that
# does not depend on the fastest loop: loaded once for the lanes)
ROWS = """
func.func @main(%x: memref<16x256xf32>, %s: memref<16xf32>, %y: memref<16x256xf32>,
                %z: memref<16x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c256 = arith.constant 256 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%j, %i) = (%c0, %c0) to (%c256, %c16) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<16x256xf32>
    %r = memref.load %s[%i] : memref<16xf32>
    %p = arith.mulf %a, %r : f32
    memref.store %p, %y[%i, %j] : memref<16x256xf32>
    scf.reduce
  }
  scf.parallel (%j, %i) = (%c0, %c0) to (%c256, %c16) step (%c1, %c1) {
    memref.store %zero, %z[%i, %j] : memref<16x256xf32>
    scf.reduce
  }
  return
}
"""


def test_vector_lanes_share_row_values_and_broadcast_fills():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 256)).astype(np.float32)
    s = rng.standard_normal(16).astype(np.float32)
    kernel, (_, _, y, z) = run_mapped(
        ROWS, [x, s, np.zeros((16, 256)), np.ones((16, 256))], 1, vector=True)
    np.testing.assert_array_equal(y, x * s[:, None])
    np.testing.assert_array_equal(z, np.zeros((16, 256)))
    first, second = kernel.split("gpu.launch")[1:3]
    assert first.count("memref.load") == 1 and first.count("arith.mulf") == 4
    assert "vector.store" in second and "memref.store" not in second   # a splat, stored


# an i8 mask beside f32 data: 8 lanes (8 bytes of the mask, 32 of the data), not 16
MASKED = """
func.func @main(%m: memref<4x64xi8>, %x: memref<4x64xf32>, %y: memref<4x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%j, %i) = (%c0, %c0) to (%c64, %c4) step (%c1, %c1) {
    %k = memref.load %m[%i, %j] : memref<4x64xi8>
    %a = memref.load %x[%i, %j] : memref<4x64xf32>
    %b = arith.trunci %k : i8 to i1
    %r = arith.select %b, %a, %zero : f32
    memref.store %r, %y[%i, %j] : memref<4x64xf32>
    scf.reduce
  }
  return
}
"""


def test_vector_lanes_of_mixed_widths_stop_at_eight():
    rng = np.random.default_rng(8)
    m = rng.integers(0, 2, (4, 64)).astype(np.int8)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    kernel, (_, _, y) = run_mapped(MASKED, [m, x, np.zeros((4, 64), np.float32)], 1,
                                   vector=True, whole_stores=False)
    np.testing.assert_array_equal(y, np.where(m == 1, x, 0.0))
    assert "vector<8xi8>" in kernel and "vector<8xf32>" in kernel and "vector<16x" not in kernel


def test_vector_lanes_store_whole_sixteen_bytes():
    """The default caps the lanes at 16 bytes of every element stored: the f32 result takes
    4 lanes (one 16-byte store a thread), the i8 mask is read 4 bytes a load."""
    rng = np.random.default_rng(9)
    m = rng.integers(0, 2, (4, 64)).astype(np.int8)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    kernel, (_, _, y) = run_mapped(MASKED, [m, x, np.zeros((4, 64), np.float32)], 1,
                                   vector=True)
    np.testing.assert_array_equal(y, np.where(m == 1, x, 0.0))
    assert "vector<4xi8>" in kernel and "vector<4xf32>" in kernel and "vector<8x" not in kernel


# the fastest loop's index as a value (an arange recomputed where it is read: a one-hot
# [j == t[i]] of a cross-entropy's gradient): lane j takes the first lane's index + j
ONE_HOT = """
func.func @main(%x: memref<16x256xbf16>, %t: memref<16xi64>, %y: memref<16x256xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%j, %i) = (%c0, %c0) to (%c256, %c16) step (%c1, %c1) {
    %a = memref.load %x[%i, %j] : memref<16x256xbf16>
    %ti = memref.load %t[%i] : memref<16xi64>
    %jj = arith.index_cast %j : index to i64
    %hit = arith.cmpi eq, %jj, %ti : i64
    %one = arith.uitofp %hit : i1 to bf16
    %d = arith.subf %a, %one : bf16
    memref.store %d, %y[%i, %j] : memref<16x256xbf16>
    scf.reduce
  }
  return
}
"""


@pytest.mark.parametrize("per_thread", [1, 4])
def test_vector_lanes_take_the_index_as_a_value(per_thread):
    import torch
    rng = np.random.default_rng(6)
    x = torch.tensor(rng.standard_normal((16, 256))).bfloat16().double().numpy()
    t = rng.integers(0, 256, 16)
    kernel, (_, _, y) = run_mapped(ONE_HOT, [x, t, np.zeros((16, 256))], per_thread,
                                   vector=True)
    want = torch.tensor(x - (np.arange(256)[None, :] == t[:, None])).bfloat16().double()
    np.testing.assert_array_equal(y, want.numpy())
    assert "vector<8xbf16>" in kernel and kernel.count("arith.cmpi eq") % 8 == 0   # per lane


# refused: an index computed from the fastest loop's (x[i + 1]), a transposing store, a misaligned view, a
# buffer stored and read at another index (a loop whose iterations race: lanes must not
# make it worse)
REFUSED = {
    "computed-index": """
func.func @main(%x: memref<1025xf32>, %y: memref<1024xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %k = arith.addi %i, %c1 : index
    %v = memref.load %x[%k] : memref<1025xf32>
    memref.store %v, %y[%i] : memref<1024xf32>
    scf.reduce
  }
  return
}""",
    "transpose": """
func.func @main(%x: memref<64x64xf32>, %y: memref<64x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 64 : index
  scf.parallel (%j, %i) = (%c0, %c0) to (%n, %n) step (%c1, %c1) {
    %v = memref.load %x[%i, %j] : memref<64x64xf32>
    memref.store %v, %y[%j, %i] : memref<64x64xf32>
    scf.reduce
  }
  return
}""",
    "misaligned": """
func.func @main(%x: memref<1025xf32>, %y: memref<1024xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  %x1 = memref.subview %x[1] [1024] [1] : memref<1025xf32> to memref<1024xf32, strided<[1], offset: 1>>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %v = memref.load %x1[%i] : memref<1024xf32, strided<[1], offset: 1>>
    memref.store %v, %y[%i] : memref<1024xf32>
    scf.reduce
  }
  return
}""",
    "shifted": """
func.func @main(%x: memref<1025xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  %x0 = memref.subview %x[0] [1024] [1] : memref<1025xf32> to memref<1024xf32, strided<[1]>>
  %x1 = memref.subview %x[1] [1024] [1] : memref<1025xf32> to memref<1024xf32, strided<[1], offset: 1>>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %v = memref.load %x1[%i] : memref<1024xf32, strided<[1], offset: 1>>
    memref.store %v, %x0[%i] : memref<1024xf32, strided<[1]>>
    scf.reduce
  }
  return
}""",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_vector_lanes_refused(case):
    """The refused loops keep scalar iterations, and (but for the racing one) compute what
    they computed."""
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    args, want = {
        "computed-index": ([np.arange(1025, dtype=np.float32), np.zeros(1024, np.float32)],
                           [np.arange(1025, dtype=np.float32),
                            np.arange(1, 1025, dtype=np.float32)]),
        "transpose": ([x, np.zeros((64, 64), np.float32)], [x, x.T]),
        "misaligned": ([np.arange(1025, dtype=np.float32), np.zeros(1024, np.float32)],
                       [np.arange(1025, dtype=np.float32),
                        np.arange(1, 1025, dtype=np.float32)]),
        "shifted": (None, []),
    }[case]
    text, got = run_mapped(REFUSED[case], args, 4, vector=True)
    assert "vector.load" not in text and "vector.store" not in text
    for g, w in zip(got or [], want):
        np.testing.assert_array_equal(g, w)
