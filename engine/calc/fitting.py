"""Choosing the rules' coefficients from published runs: every case as one row of one array pass."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.calc.evaluate import evaluate_columns
from engine.calc.yamlfile import line_of, load_yaml_file
from engine.paths import HOME
from engine.problems import Problem, SizingError

FITTING_FILE = HOME / "validation" / "fitting.yaml"
GRID_POINTS = 17          # values tried per coefficient and round
ROUNDS = 3                # coordinate-descent passes over the coefficients
OUTLIER = math.log(2)     # a figure more than 2× off counts as 2× off, so a few odd runs cannot steer a fit


@dataclass(frozen=True)
class Coefficient:
    """A rule whose formula is a number chosen from the published runs of one group."""

    rule: str
    group: str
    low: float
    high: float
    where: str


@dataclass
class Rows:
    """Published figures as rows: the planned intake values of each, what was measured, where from."""

    values: list[dict]
    quantity: list[str]
    measured: np.ndarray
    source: list[str]
    case: list[str]
    columns: dict[str, np.ndarray] | None = None     # `values` stacked, one array per key

    def __post_init__(self):
        if self.columns is None:
            self.columns = _stack(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def subset(self, keep: np.ndarray) -> Rows:
        idx = np.flatnonzero(keep)
        return Rows([self.values[i] for i in idx], [self.quantity[i] for i in idx], self.measured[idx],
                    [self.source[i] for i in idx], [self.case[i] for i in idx],
                    {k: c[idx] for k, c in self.columns.items()})


def load_coefficients(ruleset, path: Path = FITTING_FILE) -> list[Coefficient]:
    """The fitted coefficients (validation/fitting.yaml), each checked against the rule set."""
    doc = load_yaml_file(path, path.name)
    problems, out = [], []
    for group, items in (doc.items() if isinstance(doc, dict) else []):
        for index, item in enumerate(items or []):
            where = f"{path.name}:{line_of(items, index)}"
            rule, span = item.get("rule") if isinstance(item, dict) else None, (item or {}).get("range")
            if rule not in ruleset.rules:
                problems.append(Problem("fit.rule", where, f"no rule called `{rule}` to fit.", fixer="rules"))
            elif not (isinstance(span, list) and len(span) == 2 and span[0] < span[1]):
                problems.append(Problem("fit.range", where, "`range:` must be [low, high] with low < high.",
                                        fixer="rules"))
            else:
                out.append(Coefficient(rule, str(group), float(span[0]), float(span[1]), where))
    if problems:
        raise SizingError(problems)
    return out


def estimates(rows: Rows, ruleset, overrides: dict[str, np.ndarray] | None = None,
              repeat: int = 1) -> np.ndarray:
    """Each row's estimated quantity, the rows repeated `repeat` times with per-copy overrides."""
    columns = {k: np.tile(c, repeat) for k, c in rows.columns.items()}
    count = len(rows) * repeat
    for name, column in (overrides or {}).items():
        columns[name] = np.asarray(column, dtype=float)
    wanted = sorted(set(rows.quantity))
    frame = evaluate_columns({}, ruleset, columns, count, only=wanted)
    table = {q: np.asarray(frame[q], dtype=float) for q in wanted}
    quantity = np.tile(np.asarray(rows.quantity), repeat)
    out = np.full(count, np.nan)
    for q, column in table.items():
        out = np.where(quantity == q, column, out)
    return out


def log_errors(estimated: np.ndarray, measured: np.ndarray) -> np.ndarray:
    ratio = estimated / measured
    return np.where(np.isfinite(ratio) & (ratio > 0), np.abs(np.log(np.where(ratio > 0, ratio, 1))), OUTLIER)


def fit(rows: Rows, ruleset, coefficients: list[Coefficient], start: dict[str, float]) -> dict[str, float]:
    """Coordinate descent: each coefficient in turn takes the grid value that minimises the mean
    |log error| of the rows (outliers capped), the others held; a few passes."""
    current = dict(start)
    if not len(rows) or not coefficients:
        return current
    n = len(rows)
    for _ in range(ROUNDS):
        for c in coefficients:
            grid = np.linspace(c.low, c.high, GRID_POINTS)
            fixed = {k: np.full(n * len(grid), v) for k, v in current.items() if k != c.rule}
            fixed[c.rule] = np.repeat(grid, n)
            est = estimates(rows, ruleset, fixed, repeat=len(grid)).reshape(len(grid), n)
            loss = np.minimum(log_errors(est, np.tile(rows.measured, (len(grid), 1))), OUTLIER).mean(axis=1)
            if np.all(np.isnan(loss)):
                continue
            best = int(np.nanargmin(loss))
            # refine once around the best grid point
            step = (c.high - c.low) / (GRID_POINTS - 1)
            fine = np.clip(np.linspace(grid[best] - step, grid[best] + step, GRID_POINTS), c.low, c.high)
            fixed[c.rule] = np.repeat(fine, n)
            est = estimates(rows, ruleset, fixed, repeat=len(fine)).reshape(len(fine), n)
            loss = np.minimum(log_errors(est, np.tile(rows.measured, (len(fine), 1))), OUTLIER).mean(axis=1)
            current[c.rule] = float(fine[int(np.nanargmin(loss))])
    return current


def informed_by(rows: Rows, ruleset, coefficients: list[Coefficient], start: dict[str, float]) -> dict[str, set[str]]:
    """For each coefficient, the sources whose figures move when it moves."""
    n, out = len(rows), {}
    for c in coefficients:
        probe = {k: np.full(2 * n, v) for k, v in start.items()}
        probe[c.rule] = np.repeat([c.low + 0.25 * (c.high - c.low), c.low + 0.75 * (c.high - c.low)], n)
        est = estimates(rows, ruleset, probe, repeat=2).reshape(2, n)
        moved = np.abs(est[0] - est[1]) > 1e-6 * np.maximum(np.abs(est[0]), 1e-30)
        out[c.rule] = {rows.source[i] for i in np.flatnonzero(moved)}
    return out


def _stack(values: list[dict]) -> dict[str, np.ndarray]:
    """One column per key over all rows; a row without a key gets a blank of that key's kind."""
    keys = sorted({k for v in values for k in v})
    columns = {}
    for key in keys:
        column = [v.get(key) for v in values]
        kinds = {type(x) for x in column if x is not None}
        if kinds <= {bool}:
            columns[key] = np.array([bool(x) for x in column])
        elif kinds <= {int, float, bool}:
            columns[key] = np.array([np.nan if x is None else float(x) for x in column])
        else:
            columns[key] = np.array(["" if x is None else str(x) for x in column])
    return columns
