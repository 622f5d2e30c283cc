"""Plausible values: rule constants and table values within their unit's range, no figure 10× off its
neighbours, and catalog cross-checks (parameters against architecture, FP8 against BF16, unique names)."""

from __future__ import annotations

import ast
import statistics
from dataclasses import dataclass, field

from engine.calc.schema import SCHEMA_FILE, accepted, accepted_context
from engine.problems import Problem

# A value this many times its neighbours' median (or less than its inverse) is a slip of the unit or the
# decimal point, not a difference of hardware or method: 8× is Gb/s for GB/s, the smallest usual slip.
OFF_NEIGHBOURS = 7.5
# What a misplaced unit multiplies a figure by; each is tried to say which slip it probably is.
SLIPS = ((100, "a percent where a fraction is asked", "share"), (1000, "a thousand times off (k, M, G or T)", ""),
         (1e6, "a million times off", ""), (1e9, "a billion times off", ""),
         (8, "bits for bytes (Gb/s for GB/s)", "B"), (24, "days for hours", "time"),
         (60, "minutes for seconds", "time"), (3600, "hours for seconds", "time"),
         (10, "the decimal point one place off", "money"), (100, "the decimal point two places off", "money"))
TIME_UNITS = {"ms", "s", "minutes", "hours", "days"}
SHARES = {"fraction", "×", "%"}
# A model's parameters from its shape may differ from the published count by tied or untied
# embeddings, biases and norms, never by more than this factor (measured on the shipped catalog:
# every model is within 6%, DeepSeek-V3 the farthest; a unit slip is 1,000×).
PARAMS_TOLERANCE = 1.5
# FP8 runs twice the BF16 rate on every tensor core that has it; a GPU that does not must say why.
FP8_PER_BF16 = (1.8, 2.2)


@dataclass
class Findings:
    """What the checks found: errors stop an edit; warnings hold it unless acknowledged (`accept:`)."""

    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    def error(self, code: str, where: str, message: str) -> None:
        self.errors.append(Problem(code, where, message, fixer="rules"))

    def warn(self, code: str, where: str, message: str, accept: str = "") -> None:
        self.warnings.append(Problem(code, where, message, fixer="rules", context=accepted_context(accept)))


def check_values(ruleset, found: Findings) -> None:
    """Every value check of this module, into `found`."""
    ranges = ruleset.catalogs.schema.ranges
    constants = _constants(ruleset)
    for rule, value in constants:
        _in_range(found, f"rule `{rule.name}`", rule.formula_where or rule.where, value, rule.unit,
                  rule.range or ranges.get(rule.unit), rule.accept, "rule")
    for group in _neighbourhoods(constants):
        _neighbours(found, [(f"rule `{r.name}`", r.formula_where or r.where, v, r.accept) for r, v in group],
                    group[0][0].unit)
    for table in ruleset.tables.values():
        for row in table.rows:
            _in_range(found, f"table `{table.name}` row {row.case()}", row.where, row.value, table.unit,
                      table.range or ranges.get(table.unit), row.accept, "table")
        if not table.range:      # a declared range says the rows are not of one size (exchange rates)
            _neighbours(found, [(f"table `{table.name}` row {r.case()}", r.where, r.value, r.accept)
                                for r in table.rows], table.unit)
    flagged = {p.where for p in found.errors if p.code == "value.fraction"}
    found.errors[:] = [p for p in found.errors if not (p.code == "value.neighbours" and p.where in flagged)]
    _catalog_neighbours(ruleset.catalogs, found)
    _parameters(ruleset.catalogs, found)
    _fp8_rates(ruleset.catalogs, found)
    _windows(ruleset.catalogs, found)
    _unique_names(ruleset.catalogs, found)


def _constants(ruleset) -> list[tuple]:
    """Rules whose formula is a plain number, with that number."""
    out = []
    for rule in ruleset.rules.values():
        body = rule.formula.tree.body
        sign = 1
        if isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.USub):
            body, sign = body.operand, -1
        if isinstance(body, ast.Constant) and isinstance(body.value, (int, float)) \
                and not isinstance(body.value, bool):
            out.append((rule, sign * float(body.value)))
    return out


def _neighbourhoods(constants) -> list[list[tuple]]:
    """Constants of one kind: the same unit and the same first two words (gemm_share_ampere, _hopper, ...)."""
    groups: dict[tuple, list] = {}
    for rule, value in constants:
        words = rule.name.split("_")
        if len(words) > 2 and rule.unit:
            groups.setdefault((rule.unit, *words[:2]), []).append((rule, value))
    return [g for g in groups.values() if len(g) >= 3]


def _in_range(found: Findings, what: str, where: str, value: float, unit: str, bounds, accept: str,
              kind: str) -> None:
    if unit == "fraction" and not 0 <= value <= 1:
        hint = f" Write {_show(value / 100)}, not {_show(value)}." if 2 <= value <= 100 else ""
        found.error("value.fraction", where, f"{what} is {_show(value)}, but its unit is `fraction`, a share "
                    f"between 0 and 1.{hint} A ratio that may pass 1 has the unit `×`.")
        return
    if bounds is None or bounds[0] <= value <= bounds[1]:
        return
    unit_text = f" {unit}" if unit else ""
    scaled = [f"{_show(value / factor if value > bounds[1] else value * factor)} ({why})"
              for factor, why in _slips(unit) if bounds[0] <= (value / factor if value > bounds[1] else value * factor)
              <= bounds[1]]
    hint = f" If it is a slip, write {scaled[0]}." if scaled else ""
    where_range = (f"`range:` beside it" if kind == "rule" else "the table's `range:`")
    found.warn("value.range", where, f"{what} is {_show(value)}{unit_text}, outside the plausible range "
               f"{_show(bounds[0])}–{_show(bounds[1])}{unit_text} (catalogs/{SCHEMA_FILE}, `ranges:`).{hint} "
               f"If it is right, declare {where_range} or say why: `accept: \"…why…\"`.", accept)


def _neighbours(found: Findings, items: list[tuple], unit: str, how: str = '`accept: "…why…"`') -> None:
    """Each value against the median of the others of its kind."""
    if len(items) < 3:
        return
    for index, (what, where, value, accept) in enumerate(items):
        others = [v for i, (_, _, v, _) in enumerate(items) if i != index and v > 0]
        if value <= 0 or len(others) < 2:
            continue
        middle = statistics.median(others)
        ratio = value / middle
        if 1 / OFF_NEIGHBOURS < ratio < OFF_NEIGHBOURS:
            continue
        factor = _nearest_slip(ratio, unit)
        hint = f" — {factor[1]}? Then write {_show(value / factor[0] if ratio > 1 else value * factor[0])}" \
            if factor else ""
        shown = f" {unit}" if unit and unit != "fraction" else ""
        message = (f"{what} is {_show(value)}{shown}, {_times(ratio)} its neighbours "
                   f"(median {_show(middle)}){hint}. If it is right, say why beside it: {how}.")
        if accept:
            found.warn("value.neighbours", where, message, accept)     # acknowledged: shown, not held
        else:
            found.error("value.neighbours", where, message)


def _slips(unit: str) -> list[tuple[float, str]]:
    """The slips a figure in `unit` can make: bits only for bytes, days and minutes only for times."""
    kind = "time" if unit in TIME_UNITS else "B" if "B" in unit else "share" if unit in SHARES \
        else "money" if "USD" in unit or "currency" in unit else "?"
    return [(factor, why) for factor, why, only in SLIPS if not only or only == kind]


def _nearest_slip(ratio: float, unit: str):
    ratio = ratio if ratio >= 1 else 1 / ratio
    best = min(_slips(unit), key=lambda s: abs(ratio / s[0] - 1))
    return best if 1 / 1.5 < ratio / best[0] < 1.5 else None


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}×" if ratio >= 1 else f"1/{1 / ratio:,.0f} of"


def _catalog_neighbours(catalogs, found: Findings) -> None:
    """A GPU figure against the GPUs of its own architecture and segment (a Gb/s figure among GB/s ones)."""
    spec = catalogs.schema.files.get("gpus.yaml")
    if spec is None:
        return
    numeric = [f for f in spec.fields.values() if f.type in ("number", "integer") and f.unit]
    by_arch: dict[str, list[str]] = {}
    for gid, gpu in catalogs.gpus.items():
        by_arch.setdefault(f"{gpu.get('architecture')} {gpu.get('segment')}", []).append(gid)
    for ids in by_arch.values():
        for spec_field in numeric:
            items = []
            for gid in ids:
                value = _field(catalogs.gpus[gid], spec_field.path)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                    why = accepted(catalogs.nodes.get(("gpus", gid)) or {}).get(spec_field.path, "")
                    items.append((f"`{spec_field.path}` of `{gid}`",
                                  catalogs.field_where("gpus", gid, spec_field.path), float(value), why))
            _neighbours(found, items, spec_field.unit, f'`accept: {{{spec_field.path}: "…why…"}}` in the entry')


def _field(entry: dict, path: str):
    value = entry
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def model_parameters(model: dict) -> float | None:
    """Parameters from a model's shape: attention, MLP (every expert) and embeddings; None if the shape is
    incomplete. The published count differs by biases and norms, a few percent."""
    try:
        d, layers = float(model["hidden_size"]), float(model["layers"])
        heads = float(model["attention_heads"])
        head_dim = float(model.get("head_dim") or d / heads)
        kv = float(model.get("kv_heads") or heads)
        ffn = float(model.get("ffn_size") or 4 * d)
        matrices = float(model.get("ffn_matrices") or 2)
        vocab = float(model.get("vocab_size") or 0)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    experts = model.get("experts") or {}
    count = float((experts.get("total") or 1) + (experts.get("shared") or 0))
    attention = 2 * d * heads * head_dim + 2 * d * kv * head_dim
    if model.get("kv_cache_dim"):
        attention = 2 * d * heads * head_dim + d * float(model["kv_cache_dim"]) * 2
    mlp = matrices * d * ffn * count
    embeddings = vocab * d * (1 if model.get("tied_embeddings") else 2)
    return layers * (attention + mlp) + embeddings


def _parameters(catalogs, found: Findings) -> None:
    for mid, model in catalogs.models.items():
        shaped = model_parameters(model)
        stated = model.get("params_billion")
        if not shaped or not isinstance(stated, (int, float)) or stated <= 0:
            continue
        ratio = stated * 1e9 / shaped
        if 1 / PARAMS_TOLERANCE <= ratio <= PARAMS_TOLERANCE:
            continue
        why = accepted(catalogs.nodes.get(("models", mid)) or {}).get("params_billion", "")
        factor = _nearest_slip(ratio, "billion parameters")
        hint = f" — {factor[1]}? Then write {_show(stated / factor[0] if ratio > 1 else stated * factor[0])}" \
            if factor else ""
        found.warn("value.parameters", catalogs.field_where("models", mid, "params_billion"),
                   f"`params_billion` of `{mid}` is {_show(stated)}, but its layers, width and vocabulary make "
                   f"{_show(shaped / 1e9)} billion ({_times(ratio)} that; within {PARAMS_TOLERANCE}× is "
                   f"expected){hint}. If it is right, say why: `accept: {{params_billion: \"…why…\"}}`.", why)


def _fp8_rates(catalogs, found: Findings) -> None:
    low, high = FP8_PER_BF16
    for gid, gpu in catalogs.gpus.items():
        rates = gpu.get("dense_tflops") or {}
        fp8, bf16 = rates.get("fp8"), rates.get("bf16")
        if not (isinstance(fp8, (int, float)) and isinstance(bf16, (int, float)) and bf16 > 0):
            continue
        if low <= fp8 / bf16 <= high:
            continue
        why = accepted(catalogs.nodes.get(("gpus", gid)) or {}).get("dense_tflops.fp8", "")
        found.warn("value.fp8", catalogs.field_where("gpus", gid, "dense_tflops"),
                   f"`dense_tflops.fp8` of `{gid}` is {_show(fp8)}, {fp8 / bf16:.2g}× its BF16 rate "
                   f"({_show(bf16)}); tensor cores run FP8 at about twice BF16 ({low}–{high}×). Check both "
                   "figures on the datasheet (dense, not sparse); if they are right, say why: "
                   "`accept: {dense_tflops.fp8: \"…why…\"}`.", why)


def _windows(catalogs, found: Findings) -> None:
    """A sliding window needs both its size and how many layers use it, and no more layers than the model has."""
    for mid, model in catalogs.models.items():
        window, count, layers = (model.get(k) for k in ("sliding_window", "sliding_window_layers", "layers"))
        if window is None and count is None:
            continue
        if window is None or count is None:
            given, missing = ("sliding_window", "sliding_window_layers") if count is None else \
                ("sliding_window_layers", "sliding_window")
            found.error("value.window", catalogs.field_where("models", mid, given),
                        f"`{mid}` gives `{given}` without `{missing}`; a window is counted only with both: "
                        "the window in tokens and how many layers use it (the config's sliding_window and "
                        "layer_types or sliding_window_pattern).")
        elif isinstance(layers, int) and count > layers:
            found.error("value.window", catalogs.field_where("models", mid, "sliding_window_layers"),
                        f"`sliding_window_layers` of `{mid}` is {count}, more than its {layers} layers; write "
                        "how many of them use the window (gpt-oss and Gemma 2: half; Gemma 3: five in six).")


def _unique_names(catalogs, found: Findings) -> None:
    """Two entries showing the same name make a quote say "8 × B200" for a B300."""
    for catalog in ("gpus", "models"):
        seen: dict[str, str] = {}
        for eid, entry in catalogs.table(catalog).items():
            name = " ".join(str(entry.get("name") or "").split()).casefold()
            if not name:
                continue
            if name in seen:
                first = catalogs.where.get((catalog, seen[name]), "")
                found.error("value.name", catalogs.field_where(catalog, eid, "name"),
                            f"`{eid}` shows the name \"{entry.get('name')}\", as `{seen[name]}` does "
                            f"({first}); quotes could not tell them apart. Give it its own name.")
            else:
                seen[name] = eid


def _show(value: float) -> str:
    value = float(value)
    return f"{value:,.0f}" if value.is_integer() and abs(value) >= 1 else f"{value:,.6g}"
