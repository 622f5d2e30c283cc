"""The leave-one-source-out folds fitted in step (fit_folds, which `sizing validate --cv` uses) choose
exactly the values that one fit per fold would: the speed-up changes no number."""

from collections import Counter

import numpy as np
import pytest

import engine.calc.fitting as fitting
from engine.calc.evidence import DEFAULT_CASES, load_cases
from engine.calc.fitting import fit, fit_folds, informed_by, load_coefficients
from engine.calc.ruleset import current_ruleset
from engine.validation import leave_one_source_out, rows_of, shipped_coefficients


@pytest.fixture(scope="module")
def setting():
    """The inference figures of the six sources with the most of them, and the coefficients they inform."""
    ruleset = current_ruleset()
    cases = [c for c in load_cases(DEFAULT_CASES) if c.group == "inference"]
    biggest = {s for s, _ in Counter(c.source.get("id") for c in cases).most_common(6)}
    rows = rows_of([c for c in cases if c.source.get("id") in biggest], ruleset)["inference"]
    coefficients = load_coefficients(ruleset)
    shipped = shipped_coefficients(ruleset, coefficients)
    informed = informed_by(rows, ruleset, [c for c in coefficients if c.group == "inference"], shipped)
    usable = [c for c in coefficients if c.group == "inference" and informed[c.rule]]
    _, plan = leave_one_source_out(rows, usable, informed)
    plan.append((np.zeros(len(rows), dtype=bool), usable))       # a fold with no rows left keeps its start
    plan.append((plan[0][0], []))                                # and one with nothing to fit
    one_fit_each = [fit(rows.subset(keep), ruleset, fold, shipped) for keep, fold in plan]
    return ruleset, rows, usable, shipped, plan, one_fit_each


@pytest.mark.parametrize("cells", [fitting.FOLD_LINE_CELLS, 2000])
def test_folds_fitted_in_step_choose_what_one_fit_each_chooses(setting, cells, monkeypatch):
    # 2,000 cells: a line over many figures is split into passes of a fold or a few, which must not matter either
    ruleset, rows, usable, shipped, plan, one_fit_each = setting
    monkeypatch.setattr(fitting, "FOLD_LINE_CELLS", cells)
    in_step = fit_folds(rows, ruleset, usable, shipped, plan)
    assert in_step == one_fit_each
    # the test means something: the fits moved, and some line split its rows into moved and not
    assert any(f[c.rule] != shipped[c.rule] for f in in_step for c in usable)
    assert any(fitting._parts(rows, ruleset, c.rule)[2] is not None for c in usable)
    assert in_step[-2] == shipped and in_step[-1] == shipped
