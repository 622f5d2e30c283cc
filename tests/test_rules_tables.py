"""Numbers as tables: a rule file's `tables:` (one row per case, with evidence), read by lookup() in one pass."""

from __future__ import annotations

import shutil
import textwrap

import numpy as np
import pytest

from engine.calc.evaluate import evaluate, evaluate_grid
from engine.calc.ruleset import load_ruleset
from engine.calc.tables import Table
from engine.problems import SizingError
from tests.conftest import ROOT

TABLE = """\
group: shares
rules:
  - name: share
    unit: fraction
    formula: lookup("shares", precision, gpu_info(gpu, "segment"), gpu_info(gpu, "architecture"))
    why: "Sustained share of peak: {shares}."
tables:
  - name: shares
    columns: [precision, segment, architecture]
    value: share
    unit: fraction
    rows:
      - {precision: fp8, share: 0.41, evidence: "FP8 run: 776 of 1,979 TFLOPS"}
      - {segment: [consumer, workstation, edge], share: 0.42, evidence: "seed 000's table"}
      - {architecture: [hopper, blackwell], share: 0.51, evidence: "Llama 3 405B"}
      - {share: 0.59, evidence: "A100 BF16 runs"}
"""


def folder(tmp_path, text=TABLE):
    """A rule folder holding one file, beside a copy of the shipped catalogs."""
    (tmp_path / "rules").mkdir(parents=True)
    (tmp_path / "rules" / "shares.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    shutil.copytree(ROOT / "catalogs", tmp_path / "catalogs")
    return tmp_path


def problems(tmp_path, text):
    with pytest.raises(SizingError) as caught:
        load_ruleset(folder(tmp_path, text) / "rules", tmp_path / "catalogs")
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize("gpu, precision, row", [
    ("H100", "fp8", 0), ("RTX 4090", "bf16", 1), ("H100", "bf16", 2), ("A100", "bf16", 3), ("V100", "fp16", 3),
])
def test_the_first_matching_row_gives_the_number_and_the_trace_names_it(tmp_path, gpu, precision, row):
    rules = load_ruleset(folder(tmp_path) / "rules", tmp_path / "catalogs")
    table = rules.tables["shares"]
    results = evaluate({"gpu": gpu, "precision": precision}, rules)
    assert results.values["share"] == table.rows[row].value
    step = results.step("share")
    used = [s for s in step.sources if s.what.startswith("table shares")]
    assert [s.where for s in used] == [table.rows[row].where]
    assert used[0].note == table.rows[row].evidence
    # the catalog fields the match read are named with their lines too
    assert any(s.what.endswith(" segment") and s.where.startswith("catalogs/gpus.yaml:") for s in step.sources)


def test_a_grid_matches_each_distinct_case_once(tmp_path, monkeypatch):
    rules = load_ruleset(folder(tmp_path) / "rules", tmp_path / "catalogs")
    calls = []
    real = Table.find
    monkeypatch.setattr(Table, "find", lambda self, key: calls.append(key) or real(self, key))
    gpus, precisions = ["H100", "RTX 4090", "A100", "V100"], ["fp8", "bf16", "fp16"]
    grid = evaluate_grid({}, rules, {"gpu": gpus * 50, "precision": precisions})
    assert len(grid["share"]) == 600
    assert len(calls) == len(set(calls)) <= len(gpus) * len(precisions)   # per distinct case, not per row
    for gpu in gpus:
        for precision in precisions:
            one = evaluate({"gpu": gpu, "precision": precision}, rules).values["share"]
            picked = grid["share"][(grid["gpu"] == gpu) & (grid["precision"] == precision)]
            assert np.allclose(picked, one)


def test_a_why_that_names_the_table_is_written_from_it(tmp_path):
    rules = load_ruleset(folder(tmp_path) / "rules", tmp_path / "catalogs")
    why = rules.rules["share"].why
    assert why == ("Sustained share of peak: 0.41 when precision fp8; 0.42 when segment consumer or "
                   "workstation or edge; 0.51 when architecture hopper or blackwell; 0.59 otherwise.")
    assert not rules.lint


def test_a_why_that_writes_out_a_table_number_is_warned(tmp_path):
    text = TABLE.replace('why: "Sustained share of peak: {shares}."', "why: H100 BF16 sustains 0.51 of peak.")
    rules = load_ruleset(folder(tmp_path, text) / "rules", tmp_path / "catalogs")
    (warning,) = rules.lint
    assert warning.where == "rules/shares.yaml:3"
    assert "writes out 0.51, a number of table `shares` (line 15)" in warning.message
    assert "write {shares} instead" in warning.message


@pytest.mark.parametrize("old, new, words, line", [
    (', evidence: "Llama 3 405B"', "", "needs `evidence:` — where the number comes from", 15),
    ("{architecture: [hopper", "{architectur: [hopper", "`architectur` is not a column. Did you mean `architecture`?", 15),
    ("      - {share: 0.59, evidence: \"A100 BF16 runs\"}\n",
     "      - {share: 0.59, evidence: \"A100 BF16 runs\"}\n      - {precision: fp16, share: 0.3, evidence: x}\n",
     "this row is never used, because the row at line 16 matches every case", 17),
    ('lookup("shares", precision, gpu_info', 'lookup("shrares", precision, gpu_info',
     "there is no table `shrares`. Did you mean `shares`?", 5),
    (', gpu_info(gpu, "architecture"))', ")", "takes one value per column of the table (precision, segment, "
     "architecture), 3 in all, not 2", 5),
    ("{shares}", "{shraes}", "there is no table `shraes`. Did you mean `shares`?", 3),
    ("share: 0.42,", "share: forty-two,", "needs its number in `share:`", 14),
    ("    unit: fraction\n    rows:", "    unit: fractoin\n    rows:", "unknown unit `fractoin`. Did you mean `fraction`?", 11),
])
def test_each_table_slip_is_reported_at_its_line(tmp_path, old, new, words, line):
    assert old in TABLE
    found = problems(tmp_path, TABLE.replace(old, new))
    hit = [p for p in found if words in p]
    assert hit, found
    assert hit[0].startswith(f"rules/shares.yaml:{line}:"), hit


def test_a_changed_table_number_shows_in_the_diff(tmp_path):
    from engine.authoring.diff import edits
    before = load_ruleset(folder(tmp_path / "a") / "rules", tmp_path / "a" / "catalogs")
    after = load_ruleset(folder(tmp_path / "b", TABLE.replace("share: 0.51", "share: 0.55")) / "rules",
                         tmp_path / "b" / "catalogs")
    assert edits(before, after) == ["rules/shares.yaml:15: table `shares` row architecture hopper or blackwell: "
                                    "0.51 → 0.55"]
