"""The look-ups' shortcuts (codes kept beside arrays, repeated rows, counted combinations) change no value."""

import gc

import numpy as np
import pytest

import engine.calc.lookups as lookups
from engine.calc.evaluate import evaluate_columns
from engine.calc.evidence import DEFAULT_CASES, load_cases
from engine.calc.fitting import estimates
from engine.calc.lookups import repeat_rows
from engine.calc.ruleset import current_ruleset
from engine.validation import rows_of


@pytest.fixture(scope="module")
def serving_rows():
    ruleset = current_ruleset()
    cases = [c for c in load_cases(DEFAULT_CASES) if c.group == "inference"][:80]
    return ruleset, rows_of(cases, ruleset)["inference"]


def _fresh(column: np.ndarray) -> np.ndarray:
    """The same values in a new array the look-ups have never seen."""
    return np.array(column.tolist(), dtype=column.dtype)


def test_every_rule_over_repeated_rows_is_what_it_is_over_plain_copies(serving_rows):
    # the fits evaluate their rows at several coefficient values at once: the repeated rows carry the original's
    # codes, a plain np.tile is factorized afresh; every rule's column must agree to the last bit
    ruleset, rows = serving_rows
    n = len(rows)
    kept = evaluate_columns({}, ruleset, {k: repeat_rows(c, 3) for k, c in rows.columns.items()}, 3 * n)
    plain = evaluate_columns({}, ruleset, {k: _fresh(np.tile(c, 3)) for k, c in rows.columns.items()}, 3 * n)
    assert kept.keys() == plain.keys()
    differ = [k for k in kept if not np.array_equal(np.asarray(kept[k]), np.asarray(plain[k]),
                                                    equal_nan=np.asarray(kept[k]).dtype.kind == "f")]
    assert not differ, differ[:10]
    assert len(kept) > 200                         # the whole rule set ran, not a handful of columns


def test_a_fits_estimates_at_several_points_are_each_points_own(serving_rows):
    # three values of one coefficient in one pass, against each value in a pass of its own
    ruleset, rows = serving_rows
    n = len(rows)
    values = [0.4, 0.7, 1.0]
    rule = "bandwidth_share_16bit"                 # a fitted serving coefficient (validation/fitting.yaml)
    together = estimates(rows, ruleset, {rule: np.repeat(values, n)}, repeat=3).reshape(3, n)
    for i, v in enumerate(values):
        alone = estimates(rows, ruleset, {rule: np.full(n, v)})
        assert np.array_equal(together[i], alone, equal_nan=True)
    assert not np.array_equal(together[0], together[2], equal_nan=True)   # the coefficient moves something


def test_a_looked_up_column_keeps_its_codes_and_they_say_what_a_fresh_factorization_says():
    gpus = np.array(["H100", "A100-80GB", "H100", "MI300X", "A100-80GB"] * 30)
    spread = lookups._spread(["hopper", "ampere", "cdna3"], lookups._factorize(gpus)[0], "text")
    codes, uniques = lookups._factorize(spread)            # from the look-up, no pass over the rows
    again, distinct = lookups._codes(_fresh(spread))
    assert np.array_equal(uniques[codes], distinct[again])
    assert list(uniques[codes][:4]) == ["hopper", "ampere", "hopper", "cdna3"]


def test_counted_combinations_group_rows_as_sorting_them_does():
    rng = np.random.default_rng(7)
    combined = rng.integers(0, 40, size=500)
    codes, present = lookups._combination_codes(combined, 40)
    assert np.array_equal(present[codes], combined)        # each row gets its own combination back
    assert len(present) == len(np.unique(combined))
    wide, wide_present = lookups._combination_codes(combined * 10**9, 40 * 10**9)   # too many to count: sorted
    assert np.array_equal(wide_present[wide], combined * 10**9)


def test_an_arrays_codes_are_forgotten_with_the_array():
    column = np.array([f"gpu-{i % 7}" for i in range(300)])
    lookups._factorize(column)
    key = id(column)
    assert key in lookups._FACTOR_CACHE
    del column
    gc.collect()
    assert key not in lookups._FACTOR_CACHE or lookups._FACTOR_CACHE[key][0]() is not None
