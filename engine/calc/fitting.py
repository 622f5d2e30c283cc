"""Choosing the rules' coefficients from published runs: every case as one row of one array pass."""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.calc.evaluate import evaluate_columns, rules_read
from engine.calc.formula import Formula
from engine.calc.lookups import repeat_rows
from engine.calc.yamlfile import line_of, load_yaml_file
from engine.paths import HOME
from engine.problems import Problem, SizingError

FITTING_FILE = HOME / "validation" / "fitting.yaml"
GRID_POINTS = 17          # values tried per coefficient and round
ROUNDS = 3                # coordinate-descent passes over the coefficients
# A converged fit (fit(converge=True), sizing validate --cv --converged-fit):
MAX_ROUNDS = 12           # passes, at most
TOLERANCE = 1e-5          # a pass that lowers the loss less than this ends the fit
SMOOTH = 0.05             # errors within ±5% (about the scatter of repeated runs) count quadratically:
                          # without this, each figure's zero is a kink of the mean |log error| where the
                          # descent stalls (converged fits from six starts: serving_attention_factor
                          # 1.8-3.3; with it 2.3-2.4)
PATTERN_STEPS = (0.5, 1, 1.5, 2, 3, 4, 6, 8)   # multiples of a pass's step tried along it
OUTLIER = math.log(2)     # a figure more than 2× off counts as 2× off, so a few odd runs cannot steer a fit
PRIOR_FIGURES = 2.0       # a coefficient's `prior:` weighs as much as this many figures
CELL = re.compile(r"^([A-Za-z_]\w*)\[(\d+)\]$")   # a table row as a coefficient: "stack_gemm[0]"


@dataclass(frozen=True)
class Coefficient:
    """A number chosen from the published runs of one group: a rule's formula, or one row of a
    rule file's table (`rule` is then "table[row]", the row counted from 0)."""

    rule: str
    group: str
    low: float
    high: float
    where: str
    prior: float | None = None    # the value it has when the figures say nothing (a stack's row: the reference's 1)


@dataclass
class Rows:
    """Published figures as rows: the planned intake values of each, what was measured, where from."""

    values: list[dict]
    quantity: list[str]
    measured: np.ndarray
    source: list[str]
    case: list[str]
    columns: dict[str, np.ndarray] | None = None     # `values` stacked, one array per key
    rows_used: dict[str, np.ndarray] = field(default_factory=dict)   # table → the row each figure reads
    parts: dict[str, tuple] = field(default_factory=dict)   # coefficient → (moved, its rows, the others)

    def __post_init__(self):
        if self.columns is None:
            self.columns = stack_columns(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def subset(self, keep: np.ndarray) -> Rows:
        idx = np.flatnonzero(keep)
        return Rows([self.values[i] for i in idx], [self.quantity[i] for i in idx], self.measured[idx],
                    [self.source[i] for i in idx], [self.case[i] for i in idx],
                    {k: c[idx] for k, c in self.columns.items()},
                    {t: used[idx] for t, used in self.rows_used.items()})


def load_coefficients(ruleset, path: Path = FITTING_FILE) -> list[Coefficient]:
    """The fitted coefficients (validation/fitting.yaml), each checked against the rule set."""
    doc = load_yaml_file(path, path.name)
    problems, out = [], []
    for group, items in (doc.items() if isinstance(doc, dict) else []):
        for index, item in enumerate(items or []):
            where = f"{path.name}:{line_of(items, index)}"
            rule, span = item.get("rule") if isinstance(item, dict) else None, (item or {}).get("range")
            if isinstance(item, dict) and "table" in item:
                rule, problem = _cell(ruleset, item.get("table"), item.get("when"), where)
                if problem:
                    problems.append(problem)
                    continue
            if rule not in ruleset.rules and not CELL.match(str(rule)):
                problems.append(Problem("fit.rule", where, f"no rule called `{rule}` to fit.", fixer="rules"))
            elif not (isinstance(span, list) and len(span) == 2 and span[0] < span[1]):
                problems.append(Problem("fit.range", where, "`range:` must be [low, high] with low < high.",
                                        fixer="rules"))
            elif not _prior_fits(item.get("prior"), span):
                problems.append(Problem("fit.prior", where, f"`prior:` must be a number within the range "
                                        f"{span[0]}–{span[1]} and above 0 (it is {item.get('prior')!r}); "
                                        "leave it out for a coefficient with no value to fall back on.",
                                        fixer="rules"))
            else:
                prior = item.get("prior")
                out.append(Coefficient(rule, str(group), float(span[0]), float(span[1]), where,
                                       float(prior) if prior is not None else None))
    if problems:
        raise SizingError(problems)
    return out


def _prior_fits(prior, span) -> bool:
    if prior is None:
        return True
    return isinstance(prior, (int, float)) and not isinstance(prior, bool) and 0 < prior and span[0] <= prior <= span[1]


def _cell(ruleset, table, when, where: str) -> tuple[str | None, Problem | None]:
    """`{table: name, when: {column: value, ...}}` → "name[row]": the row a case with those values reads."""
    spec = ruleset.tables.get(table)
    if spec is None:
        return None, Problem("fit.table", where, f"no table called `{table}` to fit.", fixer="rules")
    if not isinstance(when, dict) or set(when) - set(spec.columns):
        return None, Problem("fit.table", where, f"`when:` must give values of the table's columns "
                             f"({', '.join(spec.columns)}), e.g. {{{spec.columns[0]}: ...}}.", fixer="rules")
    if _reader(ruleset, table) is None or not set(spec.columns) <= set(ruleset.rules) | set(ruleset.input_types):
        return None, Problem("fit.table", where, f"table `{table}` can be fitted only when one rule's whole formula is "
                             f"lookup(\"{table}\", ...) over rules named like its columns: a fitted row "
                             f"replaces that rule, so put any other term in a rule of its own.", fixer="rules")
    row = spec.find(tuple(when.get(c, "\0") for c in spec.columns))
    if row is None:
        return None, Problem("fit.table", where, f"no row of table `{table}` matches {when}.", fixer="rules")
    return f"{table}[{spec.rows.index(row)}]", None


_READERS: dict[int, tuple[object, dict[str, str | None]]] = {}


def _reader(ruleset, table: str) -> str | None:
    """The rule whose formula is the table's lookup (its value is what a fitted row replaces);
    remembered per rule set, as a fit asks it for every pass over the rows."""
    held, known = _READERS.get(id(ruleset), (None, None))
    if held is not ruleset:
        if len(_READERS) > 8:
            _READERS.clear()
        known = {}
        _READERS[id(ruleset)] = (ruleset, known)
    if table not in known:
        known[table] = next((r.name for r in ruleset.rules.values() if _only_lookup(r.formula, table)), None)
    return known[table]


def _only_lookup(formula: Formula, table: str) -> bool:
    """Whether the formula is the table's lookup and nothing else: a fitted row replaces the whole rule,
    so a term beside the lookup (`lookup(...) + x`) would silently vanish from every fitted estimate."""
    call = formula.tree.body
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "lookup"
            and bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value == table)


def cell_value(ruleset, key: str) -> float | None:
    """The number a table-row coefficient holds in the rule files; None for a plain rule."""
    m = CELL.match(key)
    return ruleset.tables[m.group(1)].rows[int(m.group(2))].value if m else None


def describe(ruleset, key: str) -> str:
    """A coefficient as the reader knows it: the rule, or "table (row's condition)"."""
    m = CELL.match(key)
    return f"{m.group(1)} ({ruleset.tables[m.group(1)].rows[int(m.group(2))].case()})" if m else key


def _as_columns(rows: Rows, ruleset, overrides: dict[str, np.ndarray], count: int) -> dict[str, np.ndarray]:
    """Overrides of table rows become the reading rule's column: each figure gets the value of the
    row it reads, the overridden ones from the override."""
    out, cells = {}, {}
    for key, column in overrides.items():
        m = CELL.match(key)
        if m:
            cells.setdefault(m.group(1), []).append((int(m.group(2)), column))
        else:
            out[key] = np.asarray(column, dtype=float)
    for table, given in cells.items():
        idx = np.tile(_rows_used(rows, ruleset, table), count // max(len(rows), 1))
        spec = ruleset.tables[table]
        # each figure the value of the row it reads; -1 (no row) picks the NaN at the end
        column = np.array([r.value for r in spec.rows] + [np.nan], dtype=float)[idx.astype(np.intp)]
        for i, value in given:
            column = np.where(idx == i, np.broadcast_to(np.asarray(value, dtype=float), count), column)
        out[_reader(ruleset, table)] = column
    return out


def _rows_used(rows: Rows, ruleset, table: str) -> np.ndarray:
    """The index of the table row each figure reads (-1: none)."""
    if table not in rows.rows_used:
        spec = ruleset.tables[table]
        frame = evaluate_columns({}, ruleset, dict(rows.columns), len(rows),
                                 only=[c for c in spec.columns if c in ruleset.rules])
        keys = [np.broadcast_to(frame[c] if c in frame else rows.columns.get(c, np.full(len(rows), "")), len(rows))
                for c in spec.columns]
        found = [spec.find(tuple(_plain(k[i]) for k in keys)) for i in range(len(rows))]
        rows.rows_used[table] = np.array([spec.rows.index(r) if r is not None else -1 for r in found])
    return rows.rows_used[table]


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def estimates(rows: Rows, ruleset, overrides: dict[str, np.ndarray] | None = None,
              repeat: int = 1) -> np.ndarray:
    """Each row's estimated quantity, the rows repeated `repeat` times with per-copy overrides
    (of rules, or of table rows named "table[row]")."""
    columns = {k: repeat_rows(c, repeat) for k, c in rows.columns.items()}
    count = len(rows) * repeat
    for name, column in _as_columns(rows, ruleset, overrides or {}, count).items():
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


def _losses(rows: Rows, ruleset, points: list[dict[str, float]], smooth: float = 0.0,
            coefficients: list[Coefficient] = ()) -> np.ndarray:
    """The mean capped |log error| of the rows at each point (coefficient values), in one array pass;
    with `smooth` (δ) each error is rounded off below δ (pseudo-Huber: sqrt(e² + δ²) − δ, |e| − δ beyond);
    plus each of `coefficients`' pull toward its prior (_pull)."""
    est = _estimates_at(rows, ruleset, points)
    return _loss_of(est, rows.measured, smooth) + _pull(len(rows), coefficients, points)


def _loss_of(est: np.ndarray, measured: np.ndarray, smooth: float) -> np.ndarray:
    """Per line of estimates, the mean capped |log error| against what was measured."""
    error = np.minimum(log_errors(est, np.tile(measured, (len(est), 1))), OUTLIER)
    loss = (np.sqrt(error * error + smooth * smooth) - smooth if smooth else error).mean(axis=1)
    return np.where(np.isnan(loss), np.inf, loss)


def _estimates_at(rows: Rows, ruleset, points: list[dict[str, float]]) -> np.ndarray:
    """The rows' estimates at each point, one line per point."""
    n, k = len(rows), len(points)
    columns = {key: np.repeat([p[key] for p in points], n) for key in points[0]}
    return estimates(rows, ruleset, columns, repeat=k).reshape(k, n)


def _pull(count: int, coefficients: list[Coefficient], points: list[dict[str, float]]) -> np.ndarray:
    """Each point's distance from the coefficients' priors, |log(value / prior)|, weighed as
    PRIOR_FIGURES figures among the `count` rows: a coefficient few figures move stays near its prior,
    one many figures move goes where they say."""
    weight = PRIOR_FIGURES / max(count, 1)
    pulled = [c for c in coefficients if c.prior]
    return np.array([weight * sum(abs(math.log(max(p[c.rule], 1e-9) / c.prior)) for c in pulled if c.rule in p)
                     for p in points])


def loss_at(rows: Rows, ruleset, points: list[dict[str, float]],
            coefficients: list[Coefficient] = ()) -> np.ndarray:
    """What a converged fit minimises, at each point."""
    return _losses(rows, ruleset, points, SMOOTH, coefficients)


def _line(rows: Rows, ruleset, current: dict[str, float], key: str, values: np.ndarray,
          smooth: float = 0.0, coefficients: list[Coefficient] = ()) -> tuple[float, float]:
    """The value of one coefficient along `values` with the lowest loss, the others held; and that loss."""
    loss = _losses(rows, ruleset, [{**current, key: float(v)} for v in values], smooth, coefficients)
    best = int(np.argmin(loss))
    return float(values[best]), float(loss[best])


def fit(rows: Rows, ruleset, coefficients: list[Coefficient], start: dict[str, float],
        converge: bool = False) -> dict[str, float]:
    """Coordinate descent on the mean |log error| of the rows (outliers capped): each coefficient in
    turn takes the best of a grid over its whole range, refined around the best grid point, the others
    held; ROUNDS passes.

    `converge` (sizing validate --cv --converged-fit): passes repeat until none lowers the loss (at most
    MAX_ROUNDS); after each, a pattern move (Hooke and Jeeves 1961) searches along the pass's overall
    step, so coefficients that trade along a ridge move together instead of zig-zagging; and errors
    within ±SMOOTH count quadratically, so a figure's zero is no kink where the descent stalls. The
    three passes alone stop where the start leads them: serving_attention_factor 1.9-3.4 from four
    starts (docs/accuracy.md, serve5)."""
    current = dict(start)
    if not len(rows) or not coefficients:
        return current
    smooth = SMOOTH if converge else 0.0
    span = {c.rule: (c.low, c.high) for c in coefficients}
    best_loss = float(_losses(rows, ruleset, [current], smooth, coefficients)[0]) if converge else math.inf
    for _ in range(MAX_ROUNDS if converge else ROUNDS):
        before, before_loss = dict(current), best_loss
        for c in coefficients:
            value, loss = _line(rows, ruleset, current, c.rule, _whole_range(c), smooth, coefficients)
            if not math.isfinite(loss):
                continue
            fine = _around(c, value)
            if converge:          # never a worse value than the one held
                fine = np.append(fine, current[c.rule])
            current[c.rule], loss = _line(rows, ruleset, current, c.rule, fine, smooth, coefficients)
            best_loss = min(best_loss, loss)
        if not converge:
            continue
        move = {k: current[k] - before[k] for k in span}
        if any(move.values()):
            points = [{**current, **{k: float(np.clip(current[k] + t * d, *span[k])) for k, d in move.items()}}
                      for t in PATTERN_STEPS]
            loss = _losses(rows, ruleset, points, smooth, coefficients)
            if loss.min() < best_loss:
                current, best_loss = points[int(np.argmin(loss))], float(loss.min())
        if before_loss - best_loss < TOLERANCE:
            break
    return current


def _whole_range(c: Coefficient) -> np.ndarray:
    """A pass's first grid for one coefficient: GRID_POINTS values over its whole range."""
    return np.linspace(c.low, c.high, GRID_POINTS)


def _around(c: Coefficient, value: float) -> np.ndarray:
    """The refining grid: GRID_POINTS values one coarse step either side of the best, kept in range."""
    step = (c.high - c.low) / (GRID_POINTS - 1)
    return np.clip(np.linspace(value - step, value + step, GRID_POINTS), c.low, c.high)


def fit_folds(rows: Rows, ruleset, coefficients: list[Coefficient], start: dict[str, float],
              folds: list[tuple[np.ndarray, list[Coefficient]]]) -> list[dict[str, float]]:
    """`fit` (its ROUNDS passes, not converged) of many folds at once: fold i on the rows its mask keeps,
    over its own coefficients, from `start`. The values are those of one fit per fold, but each line of
    every fold is one array pass, and only over the rows the line's coefficient can move: a
    leave-one-source-out's sixty fits cost about what a few did (an evaluation's cost is mostly per pass)."""
    currents = [dict(start) for _ in folds]
    names = [{c.rule for c in mine} for _, mine in folds]
    live = [i for i, (keep, mine) in enumerate(folds) if keep.any() and mine]
    for _ in range(ROUNDS):
        for c in coefficients:
            who = [i for i in live if c.rule in names[i]]
            coarse = _fold_lines(rows, ruleset, c.rule, [(currents[i], _whole_range(c), folds[i]) for i in who])
            refine = [(i, _around(c, value)) for i, (value, loss) in zip(who, coarse) if math.isfinite(loss)]
            fine = _fold_lines(rows, ruleset, c.rule, [(currents[i], values, folds[i]) for i, values in refine])
            for (i, _), (value, _) in zip(refine, fine):
                currents[i][c.rule] = value
    return currents


FOLD_LINE_CELLS = 20_000    # rows × points evaluated in one pass, at most: as fast as 200,000 (the cost is per pass
                            # only below a few thousand), and the process stays near 200 MB rather than 1 GB


def _fold_lines(rows: Rows, ruleset, key: str, lines: list) -> list[tuple[float, float]]:
    """Each fold's `_line`: (its current values, the values of `key` to try, (its rows' mask, its
    coefficients)) → the best value and its loss. The rows `key` cannot move are estimated once per fold."""
    moved, changing, fixed = _parts(rows, ruleset, key)
    size = max(1, FOLD_LINE_CELLS // (max(len(changing), 1) * GRID_POINTS))     # lines a pass
    out = []
    for first in range(0, len(lines), size):
        batch = lines[first:first + size]
        points = [[{**current, key: float(v)} for v in values] for current, values, _ in batch]
        flat = [p for line in points for p in line]
        varying = _estimates_at(changing, ruleset, flat) if len(changing) else None
        steady = _estimates_at(fixed, ruleset, [current for current, _, _ in batch]) if fixed is not None else None
        for j, ((_, values, (keep, mine)), line) in enumerate(zip(batch, points)):
            est = np.empty((len(values), len(rows)))
            if steady is not None:
                est[:, ~moved] = steady[j]
            if varying is not None:
                est[:, moved] = varying[j * len(values):(j + 1) * len(values)]
            loss = _loss_of(est[:, keep], rows.measured[keep], 0.0) + _pull(int(keep.sum()), mine, line)
            best = int(np.argmin(loss))
            out.append((float(values[best]), float(loss[best])))
    return out


def _parts(rows: Rows, ruleset, key: str) -> tuple[np.ndarray, Rows, Rows | None]:
    """The rows a coefficient can move (their quantity reads its rule and, for a table row, they read
    that row), those rows, and the others (None when it can move them all)."""
    if key not in rows.parts:
        m = CELL.match(key)
        rule = _reader(ruleset, m.group(1)) if m else key
        reads = {q: rule in rules_read(ruleset, [q]) for q in set(rows.quantity)}
        moved = np.array([reads[q] for q in rows.quantity], dtype=bool)
        if m:
            moved &= _rows_used(rows, ruleset, m.group(1)) == int(m.group(2))
        rows.parts[key] = (moved, rows.subset(moved), rows.subset(~moved) if not moved.all() else None)
    return rows.parts[key]


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


def stack_columns(values: list[dict]) -> dict[str, np.ndarray]:
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
