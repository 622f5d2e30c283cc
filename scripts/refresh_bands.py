"""Rewrite rules/uncertainty.yaml's bands from `sizing validate --cv`: run it after adding evidence or changing a model.

Usage: .venv/bin/python scripts/refresh_bands.py [--check]

The quote's ± ranges are the out-of-sample errors of the published runs nearest to it: the published set's
cross-validated estimates and the held-out set's (validation/holdout.yaml), which no fit saw
(tests/test_accuracy.py holds the file to them). This computes them as the test does and writes
the rows of the `inference_evidence`, `inference_evidence_figures` and `first_token_evidence` tables and the training and
memory rows of `band`, keeping every other line, comment and `accept:` of the file. With
--check it writes nothing and exits 1 when the file is not what the evidence gives.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.calc.evaluate import evaluate  # noqa: E402
from engine.calc.ruleset import current_ruleset  # noqa: E402
from engine.paths import HELD_OUT_CASES, RULES_DIR  # noqa: E402
from engine.calc.evidence import DEFAULT_CASES, load_cases  # noqa: E402
from engine.calc.yamlfile import load_yaml_file  # noqa: E402
from engine.contract import MEMORY_KINDS  # noqa: E402
from engine.validation import (OUTSIDE_MARGIN, band, cross_validate, evidence_bands, evidence_keys,  # noqa: E402
                               first_token_bands, memory_band, out_of_sample_errors)

FILE = RULES_DIR / "uncertainty.yaml"
FAMILIES = {"ampere": "Ampere", "hopper": "Hopper", "blackwell": "Blackwell", "ada": "Ada", "consumer": "consumer",
            "cdna2": "AMD CDNA 2", "cdna3": "AMD CDNA 3", "gaudi2": "Intel Gaudi 2", "gaudi3": "Intel Gaudi 3",
            "volta": "Volta", "turing": "Turing"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    ruleset = current_ruleset()
    cases, held_out = load_cases(DEFAULT_CASES), load_cases(HELD_OUT_CASES)
    oos = out_of_sample_errors(cross_validate(cases, ruleset), held_out, ruleset)
    text = FILE.read_text(encoding="utf-8")
    keys, stacks = evidence_keys(cases + held_out, ruleset), _stack_names()
    new = _serving(text, evidence_bands(oos, keys), stacks)
    new = _first_token(new, first_token_bands(oos, keys), stacks)
    new = _training_and_memory(new, oos, cases, held_out, ruleset)
    if new == text:
        print(f"{FILE}: the bands are what the evidence gives.")
        return 0
    if args.check:
        print(f"{FILE}: out of date with `sizing validate --cv`; run scripts/refresh_bands.py", file=sys.stderr)
        return 1
    FILE.write_text(new, encoding="utf-8")
    print(f"{FILE}: bands rewritten from the out-of-sample errors (see git diff).")
    return 0


def _stack_names() -> dict[str, str]:
    choices = load_yaml_file(RULES_DIR / "intake.yaml")["choices"]["serving_engine"]
    return {c["id"]: (c["label"]["en"] if isinstance(c["label"], dict) else c["label"]) for c in choices}


def _serving(text: str, rows: list[dict], stacks: dict[str, str]) -> str:
    accepted, accepted_bands = _accepts(text, "inference_evidence_figures"), _accepts(text, "inference_evidence")
    outside = ("no published run measured this serving software or GPU family: the widest band of the rows above, "
               f"and at least every serving figure's 80th percentile plus {OUTSIDE_MARGIN * 100:.0f} points")
    bands, figures = [], []
    for row in rows:
        keys, why = _band_row(row, stacks, "estimates", "every serving figure", outside,
                              " (sizing validate --cv, and the held-out runs)")
        bands.append(_row(keys, "band", f"{row['band']:g}", why, accepted_bands.get(keys)))
        count = "published serving figures measured like this" if row["match"] else "none: outside the evidence"
        figures.append(_row(keys, "figures", str(row["figures"]), count, accepted.get(keys)))
    text = _replace_rows(text, "inference_evidence", "".join(bands))
    return _replace_rows(text, "inference_evidence_figures", "".join(figures))


def _first_token(text: str, rows: list[dict], stacks: dict[str, str]) -> str:
    """The first_token_evidence table: the same nearest evidence, of the first-token times alone."""
    accepted, out = _accepts(text, "first_token_evidence"), []
    outside = "first tokens measured unlike any row above: every first-token figure's 80th percentile"
    for row in rows:
        keys, why = _band_row(row, stacks, "first-token times", "every first-token figure", outside)
        out.append(_row(keys, "band", f"{row['band']:g}", why, accepted.get(keys)))
    return _replace_rows(text, "first_token_evidence", "".join(out))


def _band_row(row: dict, stacks: dict[str, str], what: str, every: str, outside: str,
              measured_by: str = "") -> tuple[str, str]:
    """A band row's keys as the file writes them, and why it is that wide, in words."""
    match = row["match"]
    keys = "".join(f"{k}: {v}, " for k, v in match.items())
    if not match:
        return keys, outside
    sources = f"{row['sources']} source{'s' * (row['sources'] != 1)}"
    why = (f"{_where(match, stacks)}: 80th percentile of how far the out-of-sample {what} of {row['figures']} figures "
           f"from {sources} land, as a ratio either way{measured_by}")
    if "widened_by" in row:
        wider = _where(row["widened_by"], stacks) if row["widened_by"] else every
        why += f"; one source, so no narrower than the band of {wider}"
    return keys, why


def _where(match: dict[str, str], stacks: dict[str, str]) -> str:
    """The evidence a row matches, in words: 'dense models on one GPU each, vLLM on Hopper GPUs with 16-bit weights'."""
    stack, family = stacks.get(match.get("serving_engine_used", ""), ""), match.get("gpu_family")
    where = (f"{stack} on {FAMILIES.get(family, family)} GPUs" if stack and family
             else stack or (f"{FAMILIES.get(family, family)} GPUs" if family else ""))
    if kind := match.get("weight_kind"):
        where += f" with {'16-bit' if kind == '16-bit' else 'quantised'} weights"
    if model := match.get("model_kind"):
        shape = (f"{'dense models' if model == 'dense' else 'mixtures of experts'} "
                 f"{'on one GPU each' if match.get('replica_span') == 'one-gpu' else 'split over several GPUs'}")
        where = f"{shape}, {where}" if where else shape
    return where


def _row(keys: str, field: str, value: str, evidence: str, accept: str | None) -> str:
    """One table row as the file writes it, keeping the `accept:` reason it had."""
    return (f"      - {{{keys}{field}: {value},\n         evidence: \"{evidence}\""
            + (f",\n         accept: \"{accept}\"}}\n" if accept else "}\n"))


def _accepts(text: str, table: str) -> dict[str, str]:
    """The rows' `accept:` reasons by their keys, kept across a rewrite."""
    out = {}
    for keys, reason in re.findall(r"- \{((?:\w+: [\w.\-]+, )*)\w+: [\d.]+,\n\s+evidence: \"[^\"]*\",\n\s+accept: \"([^\"]*)\"\}",
                                   _rows(text, table)):
        out[keys] = reason
    return out


def _table(text: str, table: str) -> int:
    """Where the table starts (its rule of the same name, above `tables:`, is not it)."""
    return text.index(f"  - name: {table}\n", text.index("\ntables:\n"))


def _rows(text: str, table: str) -> str:
    start = _table(text, table)
    body = text.index("    rows:\n", start) + len("    rows:\n")
    end = re.compile(r"^(  - name: |\S)", re.M).search(text, body).start()
    return text[body:end]


def _replace_rows(text: str, table: str, rows: str) -> str:
    old = _rows(text, table)
    start = text.index(old, _table(text, table))
    return text[:start] + rows + text[start + len(old):]


def _training_and_memory(text: str, oos, cases, held_out, ruleset) -> str:
    # training: the published runs' cross-validated errors and the held-out training runs' (H29 on); memory: those
    # and the held-out memory figures, training runs' and serving's apart
    family = {c.id: evaluate({"gpu": c.intake.get("gpu")}, ruleset, only=["fitted_gpu_family"])
              .values["fitted_gpu_family"] for c in cases + held_out}
    rows = oos[oos["group"] == "training"]
    fitted = rows["case"].map(family).astype(bool)
    trained = band(rows[fitted], "training")
    other = max(band(rows[~fitted], "training"), trained + OUTSIDE_MARGIN)
    for keys, value in (("group: training, coefficients: fitted", trained),
                        ("group: training, coefficients: default", other),
                        *((f"group: memory, workload: {kind}", memory_band(oos, cases + held_out, kind))
                          for kind in MEMORY_KINDS)):
        text = re.sub(rf"(- \{{{keys}, band: )[\d.]+", lambda m: f"{m[1]}{round(value, 6):.2f}", text)
    return text


if __name__ == "__main__":
    raise SystemExit(main())
