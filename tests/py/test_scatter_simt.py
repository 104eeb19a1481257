"""The scatter kernels of latch-form-contraction-kernels (passes/one_hot_scatter.py: a
one-hot product ``C[t(k)] += V[k]``, i.e. ``index_add``) executed on the CPU by the SIMT
interpreter (tests/py/simt.py) and compared with ``torch.index_add``: duplicate targets
(atomic adds), targets out of range (skipped), and the four-columns-a-thread form (whose
four adds latch-vector-atomics turns into one ``red.global.add.v4.f32``) next to the
one-column form it falls back to when the rows do not split into aligned 16-byte groups."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from simt import Simt
from test_contraction_simt import run_pass


def scatter_text(sources: int, rows: int, cols: int) -> str:
    """@main(tok, v, out): out[tok[k], n] += v[k, n] as the frontend leaves index_add (a
    [rows, sources] one-hot mask generic, then the product)."""
    return f"""
#hit = affine_map<(d0, d1, d2) -> (d0, d2)>
#val = affine_map<(d0, d1, d2) -> (d2, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @main(%tok: memref<{sources}xi64>, %v: memref<{sources}x{cols}xf32>,
                %o: memref<{rows}x{cols}xf32>) {{
  %h = memref.alloc() : memref<{rows}x{sources}xf32>
  linalg.generic {{indexing_maps = [#col, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%tok : memref<{sources}xi64>) outs(%h : memref<{rows}x{sources}xf32>) {{
  ^bb0(%t: i64, %x: f32):
    %r = linalg.index 0 : index
    %ri = arith.index_cast %r : index to i64
    %c = arith.cmpi eq, %t, %ri : i64
    %f = arith.uitofp %c : i1 to f32
    linalg.yield %f : f32
  }}
  linalg.generic {{indexing_maps = [#hit, #val, #out],
                  iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%h, %v : memref<{rows}x{sources}xf32>, memref<{sources}x{cols}xf32>)
      outs(%o : memref<{rows}x{cols}xf32>) {{
  ^bb0(%p: f32, %x: f32, %acc: f32):
    %m = arith.mulf %p, %x : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }}
  return
}}"""


@pytest.mark.parametrize("cols,per_thread", [(48, 4), (50, 1)], ids=["v4", "scalar"])
def test_scatter_kernel_adds_like_index_add(cols, per_thread):
    sources, rows = 60, 13
    m, ctx = run_pass(scatter_text(sources, rows, cols), "{gather=false}")
    text = str(m)
    host = text.split("gpu.module")[0]
    assert "linalg.generic" not in host and "latch_contract" not in text
    blocks, threads = map(int, re.search(
        r"gpu.launch blocks\(.*\) in \(%\w+ = %c(\d+), .*threads\(.*\) in \(%\w+ = %c(\d+),",
        host).groups())
    assert blocks * threads >= sources * cols // per_thread > (blocks - 1) * threads
    assert text.count("memref.atomic_rmw addf") == per_thread
    g = torch.Generator().manual_seed(0)
    tok = torch.randint(-2, rows + 2, (sources,), generator=g)      # some out of range
    tok[:6] = 4                                                      # duplicates
    v = torch.randn(sources, cols, generator=g, dtype=torch.float64).float()
    out = torch.randn(rows, cols, generator=g, dtype=torch.float64).float()
    got = _run_scatter(m, ctx, tok, v, out).double()
    keep = (tok >= 0) & (tok < rows)
    ref = out.double().index_add(0, tok[keep], v.double()[keep])
    assert float((got - ref).norm() / ref.norm()) < 1e-6


def _run_scatter(m, ctx, tok, v, out):
    with ctx:
        sim = Simt(m)
        sim.run([tok.numpy(), v.numpy(), out.numpy()])
    return torch.from_numpy(np.asarray(sim.arguments[2], np.float32).copy())


@pytest.mark.parametrize("cols", [48, 50], ids=["v4-columns", "one-column"])
def test_fixed_point_scatter_is_exact_and_order_free(cols):
    """deterministic=true (passes/fixed_point_scatter.py): four launches (zero, bound,
    integer adds, finish) and no float atomics; the sums match float64 to float32's
    rounding even across a 2^40 range of magnitudes with cancellation, and reordering the
    sources (what a different order of the atomic adds amounts to) gives the same bits."""
    sources, rows = 64, 5
    m, ctx = run_pass(scatter_text(sources, rows, cols), "{deterministic=true}")
    text = str(m)
    assert "atomic_rmw addf" not in text
    assert "atomic_rmw maxs" in text and "atomic_rmw addi" in text
    assert text.split("gpu.module")[0].count("gpu.launch ") == 4
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(-1, rows + 1, (sources,), generator=g)       # some out of range
    tok[:20] = 2                                                      # many to one row
    scale = 2.0 ** torch.randint(-20, 20, (sources, 1), generator=g).double()
    v = (torch.randn(sources, cols, generator=g, dtype=torch.float64) * scale).float()
    v[1], v[2] = v[0], -v[0]                                          # cancellation
    out = torch.randn(rows, cols, generator=g, dtype=torch.float64).float()
    got = _run_scatter(m, ctx, tok, v, out)
    keep = (tok >= 0) & (tok < rows)
    exact = torch.zeros(rows, cols, dtype=torch.float64).index_add(
        0, tok[keep], v.double()[keep])
    want = (out.double() + exact.float().double()).float()   # one rounding of the sum, one of the add
    bound = exact.abs().max(dim=0).values.clamp(min=1) * 2.0 ** -22
    assert ((got.double() - want.double()).abs() <= bound).all()
    for seed in (2, 3):                                       # the sources in other orders
        perm = torch.randperm(sources, generator=torch.Generator().manual_seed(seed))
        again = _run_scatter(m, ctx, tok[perm], v[perm], out)
        assert torch.equal(again.view(torch.int32), got.view(torch.int32))


def test_fixed_point_scatter_non_finite_terms():
    """A NaN or infinity added to an element makes it NaN; one from a source whose target is
    out of range adds nothing (as the float scatter)."""
    sources, rows, cols = 12, 3, 8
    m, ctx = run_pass(scatter_text(sources, rows, cols), "{deterministic=true}")
    assert "atomic_rmw addi" in str(m)
    tok = torch.tensor([0, 1, 1, 2, 9, -1, 0, 2, 5, 5, 5, 5])
    v = torch.ones(sources, cols)
    v[1, 0] = float("inf")
    v[4, :] = float("nan")                       # target 9: out of range
    v[5, 1] = float("inf")                       # target -1: out of range
    out = torch.zeros(rows, cols)
    got = _run_scatter(m, ctx, tok, v, out)
    assert torch.isnan(got[1, 0])
    finite = torch.ones(rows, cols, dtype=torch.bool)
    finite[1, 0] = False
    assert torch.equal(got[finite], torch.full((rows, cols), 2.0)[finite])


def rounded_scatter_text(sources: int, rows: int, cols: int, live: int,
                         plus_zero: bool = False) -> str:
    """@main(tok, v, out): an MoE dispatch's shape: a zero-filled f32 buffer of ``rows``
    rows, ``buf[tok[k]] += v[k]``, then its first ``live`` rows rounded to bf16 into ``out``
    (the last rows, like the dummy row of dropped tokens, read by nothing)."""
    return scatter_text(sources, rows, cols).replace(
        f"%o: memref<{rows}x{cols}xf32>) {{",
        f"""%out: memref<{live}x{cols}xbf16>) {{
  %o = memref.alloc() : memref<{rows}x{cols}xf32>
  linalg.generic {{indexing_maps = [#id], iterator_types = ["parallel", "parallel"]}}
      outs(%o : memref<{rows}x{cols}xf32>) {{
  ^bb0(%x: f32):
    %z = arith.constant 0.0 : f32
    linalg.yield %z : f32
  }}""").replace("  return\n", f"""  %lead = memref.subview %o[0, 0] [{live}, {cols}] [1, 1]
      : memref<{rows}x{cols}xf32> to memref<{live}x{cols}xf32, strided<[{cols}, 1]>>
  %b = memref.alloc() : memref<{live}x{cols}xbf16>
  linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%lead : memref<{live}x{cols}xf32, strided<[{cols}, 1]>>)
      outs(%b : memref<{live}x{cols}xbf16>) {{
  ^bb0(%x: f32, %y: bf16):
    %r = arith.truncf %x : f32 to bf16
{"    %zb = arith.constant 0.0 : bf16" if plus_zero else ""}
{"    %r0 = arith.addf %r, %zb : bf16" if plus_zero else ""}
    linalg.yield {"%r0" if plus_zero else "%r"} : bf16
  }}
  memref.copy %b, %out : memref<{live}x{cols}xbf16> to memref<{live}x{cols}xbf16>
  return
""")


def _sequential(out, tok, v, rows):
    """index_add in float32 adding the sources one at a time in k order (the dense
    product's order)."""
    acc = out.clone()
    for k in range(len(tok)):
        if 0 <= tok[k] < rows:
            acc[tok[k]] = acc[tok[k]] + v[k]
    return acc


@pytest.mark.parametrize("walk", ["last", "first", "launch"])
def test_gather_form_sums_each_row_in_source_order(walk):
    """The default form (passes/one_hot_gather.py): three launches (zero counts, group,
    gather — whose last blocks walk the overflow list; ``gather-walk=first``: its first
    blocks; ``gather-walk=launch``: the walk a fourth launch); rows with at most SLOTS
    sources are summed in ascending k — the same bits as a float32 loop in k order,
    whatever order the grouping took — and a heavier row's sums arrive by atomics (float32
    accuracy); targets out of range add nothing; the output's initial values are added
    to.  A thread's columns of a source row are read as one vector."""
    from latch.passes.one_hot_gather import SLOTS

    sources, rows, cols = 60, 13, 48
    m, ctx = run_pass(scatter_text(sources, rows, cols), f"{{gather-walk={walk}}}")
    text = str(m)
    host = text.split("gpu.module")[0]
    assert host.count("gpu.launch ") == (4 if walk == "launch" else 3)
    assert "linalg.generic" not in host
    # a thread's four columns of a source row: one 16-byte load (one_hot_gather._lane_values)
    assert re.search(r"vector\.load %\w+\[%\w+, %\w+\] .*memref<60x48xf32>, vector<4xf32>",
                     host)
    g = torch.Generator().manual_seed(0)
    tok = torch.randint(-2, rows + 2, (sources,), generator=g)      # some out of range
    tok[tok == 4] = 5
    tok[:SLOTS + 3] = 4                                              # one heavy row
    v = torch.randn(sources, cols, generator=g, dtype=torch.float64).float()
    out = torch.randn(rows, cols, generator=g, dtype=torch.float64).float()
    got = _run_scatter(m, ctx, tok, v, out)
    want = _sequential(out, tok, v, rows)
    counts = torch.bincount(tok[(tok >= 0) & (tok < rows)], minlength=rows)
    light = counts <= SLOTS
    assert counts.max() > SLOTS and int(((counts > 1) & light).sum()) >= 2
    assert torch.equal(got[light].view(torch.int32), want[light].view(torch.int32))
    keep = (tok >= 0) & (tok < rows)
    ref = out.double().index_add(0, tok[keep], v.double()[keep])
    assert float((got.double() - ref).norm() / ref.norm()) < 1e-6
    for seed in (1, 2):                # other source orders: still the k-order sums
        perm = torch.randperm(sources, generator=torch.Generator().manual_seed(seed))
        again = _run_scatter(m, ctx, tok[perm], v[perm], out)
        want = _sequential(out, tok[perm], v[perm], rows)
        assert torch.equal(again[light].view(torch.int32), want[light].view(torch.int32))


@pytest.mark.parametrize("walk", ["last", "first", "launch"])
@pytest.mark.parametrize("plus_zero", [False, True], ids=["truncf", "truncf-plus-zero"])
def test_gather_writes_the_rounded_copy_of_the_rows_read(plus_zero, walk):
    """A zero-filled output whose only reader rounds its leading rows to bf16 (and, as a
    gradient accumulated into zeros, adds 0.0): the fill and the rounding copy go, the
    gather writes the bf16 rows itself (heavy rows summed in f32 first — zeroed by the
    grouping, added to by atomics — each piece of a row then rounded by whichever thread
    added its last sum: three launches; the interpreter runs a launch's blocks in order, so
    ``gather-walk=last`` has the walk's threads round, ``first`` the gather's), and sources
    aimed at the rows nobody reads are skipped.  ``gather-walk=launch``: the walk, then a
    launch rounding the heavy rows, after the gather."""
    sources, rows, cols, live = 40, 9, 32, 8
    m, ctx = run_pass(rounded_scatter_text(sources, rows, cols, live, plus_zero),
                      f"{{gather-walk={walk}}}")
    host = str(m).split("gpu.module")[0]
    assert "linalg.generic" not in host
    assert host.count("gpu.launch ") == (5 if walk == "launch" else 3)
    g = torch.Generator().manual_seed(3)
    tok = torch.randint(0, rows + 1, (sources,), generator=g)
    tok[:9] = 2                                                      # a heavy row
    tok[9:12] = rows - 1                                             # the unread row
    v = torch.randn(sources, cols, generator=g, dtype=torch.float64).float()
    with ctx:
        sim = Simt(m)
        sim.run([tok.numpy(), v.numpy(), np.zeros((live, cols), np.float32)])
    got = torch.from_numpy(np.asarray(sim.arguments[2], np.float32).copy())
    want = _sequential(torch.zeros(rows, cols), tok, v, rows)[:live]
    counts = torch.bincount(tok[tok < rows], minlength=rows)[:live]
    light = counts <= 4
    assert torch.equal(got[light], want[light].bfloat16().float())
    heavy = ~light
    assert heavy.any()
    ref = want[heavy].double()
    assert float((got[heavy].double() - ref).norm() / ref.norm()) < 1e-2   # bf16 rounding


def added_scatter_text(sources: int, rows: int, cols: int, loops: str = "#id") -> str:
    """@main(tok, v, w, o): o = 0; o[tok[k], n] += v[k, n]; o = f32(w) + o — the tied
    embedding's gradient: the LM head's bf16 weight gradient added after the scatter (its
    loops in the output's order, ``#id``, or swapped, ``#tr``)."""
    return scatter_text(sources, rows, cols).replace(
        "#col = ", "#tr = affine_map<(d0, d1) -> (d1, d0)>\n#col = ").replace(
        f"%o: memref<{rows}x{cols}xf32>) {{",
        f"%w: memref<{rows}x{cols}xbf16>, %o: memref<{rows}x{cols}xf32>) {{\n"
        f"  %zero = arith.constant 0.0 : f32\n"
        f"  linalg.fill ins(%zero : f32) outs(%o : memref<{rows}x{cols}xf32>)").replace(
        "  return\n}", f"""  linalg.generic {{indexing_maps = [{loops}, {loops}, {loops}],
                  iterator_types = ["parallel", "parallel"]}}
      ins(%w, %o : memref<{rows}x{cols}xbf16>, memref<{rows}x{cols}xf32>)
      outs(%o : memref<{rows}x{cols}xf32>) {{
  ^bb0(%a: bf16, %c: f32, %x: f32):
    %e = arith.extf %a : bf16 to f32
    %s = arith.addf %e, %c : f32
    linalg.yield %s : f32
  }}
  return
}}""")


@pytest.mark.parametrize("loops", ["#id", "#tr"])
def test_gather_adds_the_term_of_its_reader(loops):
    """An output read right after the product by ``o = h(w) + o`` in place: the reader goes,
    the gather's threads add ``h(w)`` to their rows' sums before they store — the reader's
    bits for rows of up to SLOTS sources — and heavy rows' further sources still arrive by
    atomics (the walk's launch after the gather's: zero, group, gather, walk)."""
    sources, rows, cols = 50, 11, 48
    m, ctx = run_pass(added_scatter_text(sources, rows, cols, loops))
    host = str(m).split("gpu.module")[0]
    assert "linalg.generic" not in host and host.count("gpu.launch ") == 4
    g = torch.Generator().manual_seed(5)
    tok = torch.randint(0, rows, (sources,), generator=g)
    tok[:7] = 3                                                      # a heavy row
    v = torch.randn(sources, cols, generator=g, dtype=torch.float64).float()
    w = torch.randn(rows, cols, generator=g, dtype=torch.float64).bfloat16()
    with ctx:
        sim = Simt(m)
        sim.run([tok.numpy(), v.numpy(), w.float().numpy(), np.zeros((rows, cols), np.float32)])
    got = torch.from_numpy(np.asarray(sim.arguments[3], np.float32).copy())
    counts = torch.bincount(tok, minlength=rows)
    light = counts <= 4
    want = w.float() + _sequential(torch.zeros(rows, cols), tok, v, rows)   # as the reader
    assert torch.equal(got[light].view(torch.int32), want[light].view(torch.int32))
    ref = w.double() + torch.zeros(rows, cols, dtype=torch.float64).index_add(
        0, tok, v.double())
    assert float((got.double() - ref).norm() / ref.norm()) < 1e-6
