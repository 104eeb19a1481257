"""The pipeline parser: mixing upstream passes, Latch passes and named stage pipelines."""
import pytest

from latch.errors import PipelineError
from latch.pipeline import expand, parse_element, parse_options, split_top_level


def test_split_respects_brackets_and_quotes():
    text = 'a, b{x=1,2 y}, func.func(c, d), e{s="p, q"}'
    assert split_top_level(text) == ["a", "b{x=1,2 y}", "func.func(c, d)", 'e{s="p, q"}']


@pytest.mark.parametrize("bad", ["a, b(", "a)", "x{y"])
def test_split_rejects_unbalanced(bad):
    with pytest.raises(PipelineError, match="unbalanced"):
        split_top_level(bad)


def test_parse_options():
    assert parse_options("{chip=sm_90a features=+ptx80 flag}") == {
        "chip": "sm_90a", "features": "+ptx80", "flag": ""}


def test_parse_element_with_options_and_nesting():
    el = parse_element("func.func(canonicalize, cse)")
    assert el.name == "func.func" and el.nested == "canonicalize, cse"
    el = parse_element("latch-to-ptx{chip=sm_90a}")
    assert el.name == "latch-to-ptx" and el.options == {"chip": "sm_90a"}


def test_named_pipeline_expands_with_options():
    from latch.passes.dependent_launches import DependentLaunches
    from latch.passes.nvptx_data_layout import NvptxDataLayout
    from latch.passes.vector_atomics import VectorAtomics

    steps = expand("builtin.module(latch-kernels-to-ptx{chip=sm_90a})")
    assert steps == [("latch", NvptxDataLayout()),
                     ("latch", VectorAtomics(chip="sm_90a", features="+ptx81")),
                     ("latch", DependentLaunches(chip="sm_90a", features="+ptx81")),
                     ("mlir", "gpu-lower-to-nvvm-pipeline{cubin-chip=sm_90a "
                              "cubin-features=+ptx81 cubin-format=isa opt-level=2 "
                              "kernel-bare-ptr-calling-convention=true}")]


def test_compile_runs_the_named_kernels_to_ptx_pipeline():
    """latch.compile's stage string is the named pipeline's expansion (one definition)."""
    from latch.targets.cuda import kernels_to_ptx_pipeline

    text = kernels_to_ptx_pipeline("sm_90", "+ptx80", 1)
    assert expand(text) == expand(
        "builtin.module(latch-kernels-to-ptx{chip=sm_90 features=+ptx80 opt-level=1})")
    assert "opt-level=1" in text


def test_latch_to_ptx_is_the_composition_of_the_stages():
    names = [s.name if kind == "latch" else s for kind, s in expand("latch-to-ptx")]
    assert names[0] == "latch-verify"
    assert "latch-plan-memory" in names
    assert any("one-shot-bufferize" in str(n) for n in names)
    assert any("gpu-kernel-outlining" in str(n) for n in names)
    assert "sm_90" in str(names[-1])


def test_pass_options_become_typed_fields():
    [(kind, p)] = expand("latch-plan-memory{alignment=64}")
    assert kind == "latch" and p.alignment == 64


def test_bad_pass_option_names_the_valid_ones():
    with pytest.raises(PipelineError, match=r"no option 'align' \(options: alignment, reuse-distance, materialize\)"):
        expand("latch-plan-memory{align=64}")
    with pytest.raises(PipelineError, match="expects int"):
        expand("latch-plan-memory{alignment=lots}")


def test_bad_pipeline_option():
    with pytest.raises(PipelineError, match="has no option 'colour'"):
        expand("latch-to-ptx{colour=red}")
