"""The elementwise op right after a product computed in the product's epilogue
(passes/epilogue_readers.py), executed on the CPU by the SIMT interpreter.

A bf16 MoE layer's update (tests/py/test_empty_rows_simt.py's, its products wgmma kernels
that skip the empty capacity slots) is formed into kernels with and without
``epilogue-readers``: the SwiGLU forward ``silu(x @ w1) * (x @ w3)`` goes into the
``x @ w3`` product's epilogue and the SwiGLU backward into the ``dy @ w2^T`` product's, two
launches fewer, and every result is the same bits (the same ops on the same rounded
values); the parameters' change under SGD(1.0) is their float64 gradient within bf16 error."""
from __future__ import annotations

import re

from latch.passes import epilogue_readers
from test_empty_rows_simt import MoELayer, _form, _inputs, _same_bits


def _form_readers(on: bool) -> str:
    """Every reader that matches in its product's epilogue ("all": these products are
    too small for the default's grid size, epilogue_readers.pays; its inputs prefetched to
    L2, off by default), or none."""
    return _form(True).replace("empty-rows=true", "empty-rows=true epilogue-readers="
                               + ("all epilogue-prefetch=true" if on else "none"))


def _launches(text: str) -> int:
    """Kernel launches of a formed module: the products' (outlined) and the others'."""
    return text.count("gpu.launch_func") + text.count("gpu.launch ")


def test_moe_update_with_swiglu_in_the_products_epilogues(tmp_path, monkeypatch):
    model, x, y, runs = _same_bits(MoELayer, _inputs, _form_readers, tmp_path, monkeypatch)
    fused, apart = runs[True][3], runs[False][3]
    assert _launches(fused) == _launches(apart) - 2, (_launches(fused), _launches(apart))
    # the product kernels now hold the reader bodies: silu's exp in two of them
    products = re.split(r"gpu\.module @", fused)
    with_exp = [p for p in products if p.startswith("latch_contract") and "math.exp" in p]
    assert len(with_exp) == 2, len(with_exp)
    ref = MoELayer().double()
    ref.load_state_dict(model.state_dict())
    loss = ref(x.double(), y.double())
    loss.backward()
    new, got_loss = runs[True][0], runs[True][1]
    assert abs(got_loss - float(loss)) < 1e-2 * float(loss)
    for (name, p), p_new in zip(ref.named_parameters(), new):
        err = float(((p.detach() - p_new) - p.grad).norm() / p.grad.norm())
        assert err < 0.05, (name, err)


def test_swiglu_mlp_whole_tiles_load_before_they_store(tmp_path, monkeypatch):
    """A SwiGLU MLP of 128 tokens (tests/py/test_swiglu_program_simt.py's): its products'
    tiles are whole, so the epilogue loads the
    reader's inputs for several pieces before it stores any (epilogue_readers.GROUP); the
    same bits as the readers in launches of their own."""
    import torch

    from test_swiglu_program_simt import SwiGLU

    def inputs():
        return torch.randn(128, 64), torch.randn(128, 64)

    _, _, _, runs = _same_bits(SwiGLU, inputs, _form_readers, tmp_path, monkeypatch)
    fused, apart = runs[True][3], runs[False][3]
    # the SwiGLU forward and backward, and the loss's difference after the output product
    # (its backward passes over the next product's zero fill to reach its reader)
    assert _launches(fused) == _launches(apart) - 3, (_launches(fused), _launches(apart))
    products = [p for p in re.split(r"gpu\.module @", fused) if p.startswith("latch_contract")]
    with_exp = [p for p in products if "math.exp" in p]
    assert len(with_exp) == 2, len(with_exp)
    # grouped: where the reader has inputs besides the product (the backward's gate and up
    # values), a thread loads them for GROUP pieces before its first store
    ahead = []
    for p in with_exp:
        body = p.split("gpu.barrier")[-1]
        before = body[:body.index("vector.store")]
        ahead.append(len(re.findall(r"vector\.load %arg\d+\[", before)))
    assert max(ahead) >= epilogue_readers.GROUP, ahead
    # and asks L2 for those rows before its first multiply (the interpreter checks each
    # prefetch stays inside its buffer); a reader of the product alone asks for nothing
    for p, n in zip(with_exp, ahead):
        if n:
            assert p.index("nvvm.cp.async.bulk.prefetch") < p.index("nvvm.wgmma.mma_async")
        else:
            assert "nvvm.cp.async.bulk.prefetch" not in p


def test_accumulating_variant_sums_gradients_in_the_products_epilogues(tmp_path,
                                                                        monkeypatch):
    """every(2) on w1 and w3 of the SwiGLU MLP: the update variant that only accumulates
    their gradients adds each weight gradient to its accumulator in the product's epilogue
    (the reader is found past the rest of the backward pass, which touches neither buffer),
    both variants run in the SIMT interpreter, twice each in turn, and every state and the
    loss come out the same bits as with the readers in launches of their own."""
    import numpy as np
    import torch

    import latch
    import latch.dialect
    from simt import Simt, formed
    from test_attention_fused_program import _states
    from test_swiglu_program_simt import SwiGLU

    torch.manual_seed(0)
    model = SwiGLU()
    x, y = torch.randn(128, 64), torch.randn(128, 64)
    monkeypatch.setenv("LATCH_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("LATCH_CACHE", "0")
    rule = latch.optim.partition({"w[13].*": latch.optim.every(2, latch.optim.SGD(0.1)),
                                  "*": latch.optim.SGD(0.05, momentum=0.9)})
    prog = latch.compile(model, rule, (x, y), target="cuda", precision="bf16")
    entries = [v["entry"] for v in prog.manifest["variants"]]
    assert len(entries) == 2
    text = (tmp_path / "cuda-latch-form-kernels.mlir").read_text()
    results, launches = {}, {}
    for on in (True, False):
        with formed(text, _form_readers(on)) as m:
            kernels = str(m)
            launches[on] = [_launches(f) for f in kernels.split("func.func @")[1:]
                            if f.startswith(tuple(entries))]
            states = _states(model, prog.manifest)
            outs = []
            for entry in entries + entries:        # accumulate, step, accumulate, step
                res = Simt(m).run(states + [x.double().numpy(), y.double().numpy()],
                                  func=entry)
                states = [np.asarray(r, np.float64) for r in res[:len(states)]]
                outs.append([np.asarray(r, np.float64) for r in res])
            results[on] = outs
    for got, want in zip(results[True], results[False]):
        for a, b in zip(got, want):
            assert np.array_equal(a, b)
    # both variants: the SwiGLU forward and backward and the loss's difference; the
    # accumulating one also its two accumulations
    fewer = [b - a for a, b in zip(launches[True], launches[False])]
    assert max(fewer) >= 5 and min(fewer) >= 3, (launches[True], launches[False])


def test_persistent_products_update_the_same_bits(tmp_path, monkeypatch):
    """``persistent=true`` with one block (so every product of several tiles walks them
    all in one block, staging the next tile's k-tiles under each epilogue): the MoE layer's
    update — products skipping empty capacity slots, the SwiGLU forward and backward in
    their products' epilogues — gives the same bits as a block a tile."""
    import latch.passes.contraction_wgmma as wg

    monkeypatch.setattr(wg, "PERSISTENT_BLOCKS", 1)

    def form(on: bool) -> str:
        return _form_readers(True).replace(
            "epilogue-prefetch=true", "epilogue-prefetch=false persistent=" +
            ("true" if on else "false"))

    _, _, _, runs = _same_bits(MoELayer, _inputs, form, tmp_path, monkeypatch)
    persistent = runs[True][3]
    walked = [p for p in re.split(r"gpu\.module @", persistent)
              if p.startswith("latch_contract") and "nvvm.wgmma" in p and
              p.count("nvvm.cp.async.commit.group") == 2 * (wg.STAGES - 2) + 1]
    # among them products that skip empty slots and that compute a reader
    assert any("math.exp" in p for p in walked), "no reader in a walking product"
    assert any("memref.load %arg" in p.split("nvvm.wgmma")[0] for p in walked)
