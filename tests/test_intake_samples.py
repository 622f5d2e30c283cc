"""Samples: each filled workbook reads, validates and quotes the same as its YAML twin, in every language."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from test_intake_kit import catalogs

from engine.cli import main
from engine.intake.read import read
from engine.intake.form import current_form
from engine.intake.template import fill_template, template_path
from engine.intake.validate import validate
from engine.paths import LANGUAGES, SAMPLES_DIR
from support.modules import load_file

TWINS = sorted(SAMPLES_DIR.glob("*.yaml"))


def _make_samples():
    return load_file(SAMPLES_DIR / "make_samples.py")


def checked(path: Path):
    intake = read(path)
    assert validate(intake, catalogs()) == [], path.name
    return intake


def test_there_is_a_sample_for_every_workload_in_more_than_one_language():
    intakes = [checked(p) for p in TWINS]
    assert {i.values["workload"] for i in intakes} == {"pretraining", "fine-tuning", "online-inference",
                                                       "offline-inference"}
    assert len({i.language for i in intakes}) >= 2
    assert all(p.with_suffix(".xlsx").is_file() for p in TWINS)


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_template_filled_by_names_in_each_language_equals_the_yaml_twin(tmp_path, twin, lang):
    yaml_intake = checked(twin)
    given = {k: v for k, v in yaml_intake.values.items() if yaml_intake.sources[k] != "default"}
    expected = dict(yaml_intake.values)
    if "language" not in given:
        expected["language"] = lang               # an empty language cell means the template's
    path = fill_template(template_path(lang), given, tmp_path / f"{twin.stem}.xlsx", catalogs())
    workbook_intake = checked(path)
    assert workbook_intake.values == expected
    assert workbook_intake.sources["gpu"].startswith(f"{current_form().sheet('intake', lang)}!C")


@pytest.mark.parametrize("twin", TWINS, ids=[p.stem for p in TWINS])
def test_committed_sample_matches_its_twin_and_gives_the_same_results(tmp_path, twin):
    from engine.calc.evaluate import evaluate
    from engine.calc.ruleset import current_ruleset
    xlsx = twin.with_name(twin.name[: -len(".yaml")] + ".xlsx")
    workbook_intake, yaml_intake = checked(xlsx), checked(twin)
    assert workbook_intake.values == yaml_intake.values
    ruleset = current_ruleset()
    assert evaluate(workbook_intake, ruleset).values == evaluate(yaml_intake, ruleset).values
    fresh = _make_samples().make_sample(twin, catalogs(), tmp_path)
    with zipfile.ZipFile(xlsx) as old, zipfile.ZipFile(fresh) as new:
        assert {n: old.read(n) for n in old.namelist()} == {n: new.read(n) for n in new.namelist()}, \
            f"{xlsx.name} is stale: run `.venv/bin/python samples/make_samples.py`"


def test_seed_002_workbook_quotes_thirty_minutes():
    from engine.calc.evaluate import evaluate
    from engine.calc.ruleset import current_ruleset
    results = evaluate(checked(SAMPLES_DIR / "seed002-bert-base-8xv100.xlsx"), current_ruleset())
    assert results.values["training_flops"] == pytest.approx(1.8e18)
    assert results.values["training_time_hours"] == pytest.approx(0.5)


def test_sizing_quote_samples_xlsx_works(tmp_path, capsys):
    workbooks = sorted(str(p) for p in SAMPLES_DIR.glob("*.xlsx"))
    assert main(["quote", *workbooks, "-o", str(tmp_path)]) == 0
    for w in workbooks:
        assert (tmp_path / f"{Path(w).stem}.quote.xlsx").is_file()
