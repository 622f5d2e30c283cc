"""The safe formula engine: what it refuses, and what it computes on numbers and arrays."""

import numpy as np
import pytest

from engine.calc.catalogs import load_catalogs
from engine.calc.formula import FormulaError, compile_formula
from engine.calc.functions import build_functions

FUNCTIONS = build_functions(load_catalogs())


def run(text, **scope):
    return compile_formula(text, FUNCTIONS)(scope)


@pytest.mark.parametrize("text, code, words", [
    ("__import__('os').system('true')", "formula.refused", "only the documented functions"),
    ("__import__('os')", "formula.unknown_function", "no function `__import__`"),
    ("__builtins__", "formula.refused", "starting with `_`"),
    ("open('/etc/passwd')", "formula.unknown_function", "no function `open`"),
    ("gpu.__class__", "formula.refused", "attribute access"),
    ("params.real", "formula.refused", "attribute access"),
    ("params[0]", "formula.refused", "indexing"),
    ("(lambda: 1)()", "formula.refused", "only the documented functions"),
    ("[x for x in [1, 2]]", "formula.refused", "comprehensions"),
    ("1 if a else 2", "formula.refused", "if(condition, then, else)"),
    ("2 ^ 8", "formula.refused", "write a ** b"),
    ("min(a=1, b=2)", "formula.refused", "plain arguments"),
    ("min(*[1, 2])", "formula.refused", "plain arguments"),
    ("f'{params}'", "formula.refused", "f-strings"),
    ("(x := 3)", "formula.refused", "`:=`"),
    ("{'a': 1}", "formula.refused", "dictionaries"),
    ("evl(1)", "formula.unknown_function", "no function `evl`"),
    ("mni(1, 2)", "formula.unknown_function", "Did you mean min()"),
    ("gpu_spec(gpu, field)", "formula.refused", "must be quoted text"),
    ("1 +", "formula.syntax", "ends too early"),
    ("", "formula.empty", "empty"),
    ("'" + "x" * 300 + "'", "formula.long_text", "limited"),
    ("1" + " + 1" * 700, "formula.too_long", "longer than"),
    ("-" * 60 + "1", "formula.too_deep", "nested too deeply"),
    ("x is None", "formula.refused", "`is` is not allowed"),
    ("ceil(1, 2)", "formula.arity", "takes 1"),
])
def test_hostile_or_broken_formulas_are_refused_with_a_reason(text, code, words):
    with pytest.raises(FormulaError) as caught:
        compile_formula(text, FUNCTIONS)
    assert caught.value.code == code
    assert words in caught.value.message


def test_unbounded_power_is_refused_at_run_time():
    with pytest.raises(FormulaError, match="exponents are limited"):
        run("10 ** 10 ** 10")


def test_text_cannot_be_multiplied_into_a_huge_string():
    with pytest.raises(FormulaError, match="needs numbers"):
        run("name * 1000000000", name="x")


def test_if_takes_only_the_chosen_branch_for_one_scenario():
    # The untaken branch reads a name that has no value; it must not be evaluated.
    assert run('if(workload == "pretraining", 1, missing_name)', workload="pretraining") == 1


def test_if_and_comparisons_work_elementwise_on_arrays():
    out = run('if(workload in ["pretraining", "fine-tuning"], gpus * 2, gpus)',
              workload=np.array(["pretraining", "online-inference", "fine-tuning"]),
              gpus=np.array([1.0, 2.0, 3.0]))
    assert out.tolist() == [2.0, 2.0, 6.0]


def test_first_takes_the_first_given_value_per_element():
    layers = np.array([np.nan, 32.0, np.nan])
    assert run('first(layers, 80)', layers=layers).tolist() == [80.0, 32.0, 80.0]
    assert run('first(layers, 80)', layers=np.float64("nan")) == 80.0
    assert run('first(fmt, "fp16")', fmt="") == "fp16"


def test_boolean_logic_on_scalars_and_arrays():
    assert run("a > 1 and not b", a=2.0, b=False) is True
    assert run("a > 1 or b", a=np.array([0.0, 2.0]), b=np.array([False, False])).tolist() == [False, True]
    assert run("1 < a <= 3", a=np.array([1.0, 2.0, 3.0, 4.0])).tolist() == [False, True, True, False]


def test_catalog_lookups_resolve_aliases_and_vectorise():
    assert run('gpu_spec(gpu, "memory_gb")', gpu="H100") == 80
    gpus = np.array(["nvidia-v100-sxm2-32gb", "nvidia-rtx-4090", "nvidia-v100-sxm2-32gb"])
    assert run('gpu_spec(gpu, "memory_gb")', gpu=gpus).tolist() == [32.0, 24.0, 32.0]
    # BF16 on a V100 falls back to its FP16 tensor rate (catalogs/precisions.yaml), and says so.
    assert run('dense_peak(gpu, "bf16")', gpu="V100") == 125
    assert run('peak_precision(gpu, "bf16")', gpu="V100") == "fp16"
    assert run('has_precision(gpu, "bf16")', gpu="V100") is False


def test_a_format_computing_at_another_rate_is_not_a_fallback():
    # NVFP4 and MXFP4 run at Blackwell's FP4 rate (B200: 9,000 dense, catalogs/gpus.yaml) without a
    # "no support" warning; an H100 has no FP4 and falls back to FP8 (1,979), and says so.
    assert run('dense_peak(gpu, "nvfp4")', gpu="B200") == 9000
    assert run('has_precision(gpu, "mxfp4")', gpu="B200") is True
    assert run('dense_peak(gpu, "nvfp4")', gpu="H100") == 1979
    assert run('has_precision(gpu, "nvfp4")', gpu="H100") is False
    # the layout fields of the 4-bit formats, and their absence for a plain one
    assert run('precision_spec(p, "scale_bits")', p="mxfp4") == 0.25
    assert run('precision_flag(p, "linear_only")', p="awq") is True
    assert run('precision_flag(p, "linear_only")', p="int4") is False


def test_speedup_table_interpolates_and_keeps_efficiency_beyond_the_last_point():
    # catalogs/scaling.yaml: {1: 1.0, 2: 1.6, 4: 3.0}; 3 GPUs → midway 2.3; 8 GPUs → 8 × 3.0/4 = 6.0
    assert run('speedup("pcie_workstation", n)', n=3.0) == pytest.approx(2.3)
    assert run('speedup("pcie_workstation", n)', n=8.0) == pytest.approx(6.0)


def test_the_function_reference_in_docs_matches_the_registry():
    # docs/functions.md is generated by `sizing rules doc`; a new or changed function must be documented.
    from engine.calc.functions import reference_markdown
    from tests.conftest import ROOT
    assert (ROOT / "docs" / "functions.md").read_text(encoding="utf-8").strip() == reference_markdown().strip(), \
        "regenerate with: sizing rules doc > docs/functions.md"
