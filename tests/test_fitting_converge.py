"""A converged fit (fit(converge=True), sizing validate --cv --converged-fit) lands in the same place
from any start where the evidence pins the coefficients, and on the ridge where it does not. (The
three-pass default's spread on these rows depends on the other coefficients: 37% when written, 1% after
the training refit that followed — so it is not held here; docs/accuracy.md, serve5, gives the full
set's 12.3–13.3%.)"""

import pytest

from engine.calc.evidence import DEFAULT_CASES, load_cases
from engine.calc.fitting import Coefficient, fit, load_coefficients
from engine.calc.ruleset import current_ruleset
from engine.validation import rows_of, shipped_coefficients

# Three sources' time-to-first-token and throughput figures (23): the prompt's multiplies and the decode's
# multiplies both shape them, so the two factors trade against each other. (The prompt's attention, once
# a third fitted factor on this ridge, is a measured kernel share now: rules/inference.yaml.)
SOURCES = {"lmdeploy-benchmark-a100-fp16", "nim-llm-benchmarking", "trtllm-blog-h100"}
RIDGE = [Coefficient("prompt_gemm_factor", "inference", 0.6, 2.0, "test"),
         Coefficient("serving_gemm_factor", "inference", 0.3, 1.5, "test")]
STARTS = [(0.8, 0.6), (1.8, 1.4), (1.21, 0.92)]     # (prompt factor, serving multiplies factor) to start from


def _converged_fits(sources: set[str] | None):
    """The converged fit from each start, on these sources' inference figures (None: all of them)."""
    ruleset = current_ruleset()
    cases = [c for c in load_cases(DEFAULT_CASES)
             if c.group == "inference" and (sources is None or c.source.get("id") in sources)]
    rows = rows_of(cases, ruleset)["inference"]
    shipped = shipped_coefficients(ruleset, load_coefficients(ruleset))
    return rows, [fit(rows, ruleset, RIDGE, {**shipped, "prompt_gemm_factor": p, "serving_gemm_factor": g},
                      converge=True) for p, g in STARTS]


def _spread(values):
    return max(values) / min(values) - 1


def test_the_converged_fit_does_not_depend_on_where_it_starts():
    # On every inference figure (280) the two factors are pinned: 1.322 and 0.787 from all three starts
    # (serve17, 2026-12-05) — within 6% required, as the shipped fit needs.
    rows, fits = _converged_fits(None)
    assert len(rows) >= 280
    for c in RIDGE:
        assert _spread([r[c.rule] for r in fits]) < 0.06, c.rule


def test_on_a_true_ridge_the_converged_fit_finds_the_ridge():
    # The three sources alone: since TensorRT-LLM's joining prompts run at the prompt's multiply share
    # (serve17), their figures fix only the product of the two factors — a flat ridge. From the three
    # starts: 1.387 × 0.825 = 1.144, 0.928 × 1.219 = 1.131, 1.125 × 1.013 = 1.140; each lands on it (the
    # products within 3%) though where along it depends on the start (0.93 … 1.39, measured when written).
    rows, fits = _converged_fits(SOURCES)
    assert len(rows) == 23
    products = [r["prompt_gemm_factor"] * r["serving_gemm_factor"] for r in fits]
    assert _spread(products) < 0.03, products


def test_a_fitted_table_must_be_read_by_a_rule_that_is_only_its_lookup(home_copy):
    """A fitted row replaces the whole rule that reads its table; a term written beside the lookup would
    vanish from every fitted estimate without a word (serve9's first eager-mode term did: no figure
    moved). So the fitting file refuses such a table, saying why, instead."""
    from engine.calc.fitting import FITTING_FILE
    from engine.calc.ruleset import load_ruleset
    from engine.problems import SizingError
    path = home_copy / "rules" / "serving.yaml"
    text = path.read_text(encoding="utf-8")
    old = 'formula: lookup("stack_token_overhead_ms", serving_engine_used)'
    assert old in text
    path.write_text(text.replace(old, 'formula: lookup("stack_token_overhead_ms", serving_engine_used) + 0.1'),
                    encoding="utf-8")
    ruleset = load_ruleset(home_copy / "rules", home_copy / "catalogs")
    with pytest.raises(SizingError) as raised:
        load_coefficients(ruleset, FITTING_FILE)
    said = [p.message for p in raised.value.problems]
    assert any("table `stack_token_overhead_ms` can be fitted only when one rule's whole formula is" in m
               and "put any other term in a rule of its own" in m for m in said), said
    # the shipped rules pass: every fitted table is read by a rule that is its lookup alone
    assert load_coefficients(load_ruleset(), FITTING_FILE)


GAUDI = {"intel-gaudi2-perf", "intel-gaudi3-perf", "hf-bloomz-gaudi2"}


def _gaudi_fits(prior):
    """Converged fits of Gaudi's multiply and all-reduce rows on Gaudi's own 15 figures, from three starts."""
    fits, ruleset = [], current_ruleset()
    cases = [c for c in load_cases(DEFAULT_CASES) if c.group == "inference" and c.source.get("id") in GAUDI]
    rows = rows_of(cases, ruleset)["inference"]
    shipped = shipped_coefficients(ruleset, load_coefficients(ruleset))
    pair = [Coefficient("stack_gemm[0]", "inference", 0.2, 2, "test", prior),
             Coefficient("stack_allreduce[0]", "inference", 0.1, 3, "test", prior)]
    for gemm, allreduce in ((0.5, 0.2), (1.9, 2.8), (1.2, 0.5)):
        fits.append(fit(rows, ruleset, pair, {**shipped, "stack_gemm[0]": gemm, "stack_allreduce[0]": allreduce},
                        converge=True))
    return rows, fits


def test_where_few_figures_pin_a_coefficient_its_prior_decides():
    # Gaudi's 15 figures barely tell the two rows apart: their mean |log error| is 0.132 at (1.14, 0.36), 0.137
    # at (1.0, 1.0) and at (1.38, 0.24), the all-sources fit of the twelfth stop (measured when written). Without
    # a prior the converged fit takes the all-reduce row to about a third of NVIDIA's share per byte, a value
    # nothing but that flat stretch supports; with the reference's 1 as prior (weighed as 2 figures) both rows
    # land at the reference, within 1%, from every start.
    rows, fits = _gaudi_fits(None)
    assert len(rows) == 15
    assert all(f["stack_allreduce[0]"] < 0.6 for f in fits), fits
    _, fits = _gaudi_fits(1.0)
    for f in fits:
        assert f["stack_gemm[0]"] == pytest.approx(1, rel=0.01) and f["stack_allreduce[0]"] == pytest.approx(1, rel=0.01)


def test_a_prior_outside_its_range_is_refused_where_it_is_written(home_copy):
    from engine.calc.fitting import FITTING_FILE
    from engine.calc.ruleset import load_ruleset
    from engine.problems import SizingError
    path = home_copy / "fitting.yaml"
    text = FITTING_FILE.read_text(encoding="utf-8")
    old = "{table: stack_allreduce, when: {serving_engine_used: optimum-habana}, range: [0.1, 3], prior: 1}"
    assert old in text
    path.write_text(text.replace(old, old.replace("prior: 1", "prior: 5")), encoding="utf-8")
    ruleset = load_ruleset(home_copy / "rules", home_copy / "catalogs")
    with pytest.raises(SizingError) as raised:
        load_coefficients(ruleset, path)
    [problem] = raised.value.problems
    line = text[:text.index(old)].count("\n") + 1
    assert problem.code == "fit.prior" and problem.where == f"fitting.yaml:{line}", problem
    assert "within the range 0.1–3" in problem.message and "it is 5" in problem.message
