"""Workbooks saved by LibreOffice Calc: the committed re-saved samples, and LibreOffice itself when it is here.

With LibreOffice installed (scripts/system-packages does it), every template and every sample
is opened and saved by `soffice --headless` in one batch, one template is filled in Calc
through UNO, and each is quoted to the same figures as its original. About 10 s in all.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from test_intake_kit import BASE, catalogs, cell_of, filled

from engine.intake.read import read
from engine.intake.validate import validate
from engine.job import run_job
from engine.paths import SAMPLES_DIR, TEMPLATES_DIR

SAVED = sorted((SAMPLES_DIR / "saved-by-libreoffice").glob("*.xlsx"))
SAMPLES = sorted(SAMPLES_DIR.glob("*.xlsx"))
TEMPLATES = sorted(TEMPLATES_DIR.glob("intake*.xlsx"))
SYSTEM_PYTHON = Path("/usr/bin/python3")
UNO_FILL = Path(__file__).resolve().parent / "support" / "uno_fill.py"

needs_libreoffice = pytest.mark.skipif(
    shutil.which("soffice") is None,
    reason="LibreOffice Calc is not installed (scripts/system-packages installs libreoffice-calc-nogui); "
           "the committed samples/saved-by-libreoffice/ files cover the format")


def checked(path):
    intake = read(path)
    assert validate(intake, catalogs()) == [], path.name
    return intake


def same_figures(a: dict, b: dict) -> list[str]:
    """The result keys whose values differ (NaN equals NaN; floats to 1e-12)."""
    def same(x, y):
        if isinstance(x, float) and isinstance(y, float):
            return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-300)
        return x == y
    return sorted(k for k in a.keys() | b.keys() if not same(a.get(k), b.get(k)))


def quoted(path: Path, out: Path, ruleset):
    job = run_job(path, out, ruleset=ruleset)
    assert job.ok, (path.name, job.problems)
    return job


def test_there_are_libreoffice_saved_samples():
    assert len(SAVED) >= 2


@pytest.mark.parametrize("path", SAVED, ids=[p.name for p in SAVED])
def test_libreoffice_saved_sample_reads_like_its_twin(path):
    twin = SAMPLES_DIR / path.name.replace(".xlsx", ".yaml")
    assert checked(path).values == checked(twin).values


# -- LibreOffice itself ------------------------------------------------------------------------

def soffice(profile: Path, out: Path, *files: Path) -> None:
    """Open and save each file in LibreOffice Calc (headless), as .xlsx into `out`. Calc opens copies:
    it leaves a `.~lock.<name>#` beside every file it opens, and one in templates/ broke another
    worker's copy of that folder (conftest.home_copy) mid-copy."""
    inbox = out.parent / "in"
    inbox.mkdir(exist_ok=True)
    copies = [Path(shutil.copy2(f, inbox / f.name)) for f in files if f.parent != inbox]
    subprocess.run(["soffice", "--headless", f"-env:UserInstallation={profile.as_uri()}",
                    "--convert-to", "xlsx:Calc MS Excel 2007 XML", "--outdir", str(out), *map(str, copies)],
                   check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def resaved(tmp_path_factory) -> dict[str, Path]:
    """Every template and sample, and a workbook with typed formulas, saved by LibreOffice in one run."""
    folder = tmp_path_factory.mktemp("libreoffice")
    typed = filled(folder, BASE, name="typed-formulas.xlsx",
                   typed={"gpu_count": "=4*4", "training_tokens_billion": "1,000"})
    link = filled(folder, BASE, name="link-formula.xlsx",
                  typed={"customer": '=HYPERLINK("http://example.invalid/x","click me")'})
    soffice(folder / "profile", folder / "out", *TEMPLATES, *SAMPLES, typed, link)
    return {p.name: p for p in (folder / "out").glob("*.xlsx")}


@needs_libreoffice
def test_formulas_saved_by_libreoffice_count_by_their_result_only_in_number_fields(resaved, tmp_path,
                                                                                 ruleset):
    from test_intake_values import formulas_in
    job = quoted(resaved["typed-formulas.xlsx"], tmp_path / "counted", ruleset)
    assert job.ok and formulas_in(next(p for p in job.outputs if p.suffix == ".xlsx")) == []
    job = run_job(resaved["link-formula.xlsx"], tmp_path / "link", ruleset=ruleset)
    assert job.status == "failed" and [p.code for p in job.problems] == ["file.formula_not_allowed"]
    assert job.problems[0].where == cell_of("customer") and job.outputs == []


@needs_libreoffice
def test_libreoffice_computes_typed_formulas_and_keeps_the_names(resaved):
    intake = checked(resaved["typed-formulas.xlsx"])
    assert intake.values["gpu_count"] == 16 and intake.sources["gpu_count"] == cell_of("gpu_count")
    assert intake.values["training_tokens_billion"] == 1000.0


@needs_libreoffice
@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_a_sample_saved_by_libreoffice_quotes_to_the_same_figures(resaved, sample, tmp_path, ruleset):
    original = quoted(sample, tmp_path / "original", ruleset)
    again = quoted(resaved[sample.name], tmp_path / "libreoffice", ruleset)
    assert again.intake.values == original.intake.values and again.language == original.language
    assert same_figures(again.results.values, original.results.values) == []


@needs_libreoffice
@pytest.mark.parametrize("template", TEMPLATES, ids=[p.name for p in TEMPLATES])
def test_a_template_saved_by_libreoffice_is_still_the_template(resaved, template):
    blank, again = read(template), read(resaved[template.name])
    assert again.language == blank.language and again.values == blank.values == {}
    assert again.sources == blank.sources              # every named input cell where it was


@needs_libreoffice
@pytest.mark.skipif(not SYSTEM_PYTHON.is_file() or subprocess.run(
    [str(SYSTEM_PYTHON), "-c", "import uno"], capture_output=True).returncode != 0,
    reason="LibreOffice's Python bridge is not installed (python3-uno)")
def test_a_template_filled_in_libreoffice_itself_quotes_like_its_yaml_twin(tmp_path, ruleset):
    from engine.intake.form import current_form
    from engine.intake.template import display_value
    twin = SAMPLES_DIR / "rtx4090-lora-7b.zh-TW.yaml"
    intake = checked(twin)
    form = current_form()
    typed = {key: display_value(form, form.fields[key], value, "zh-TW", catalogs())
             for key, value in intake.values.items() if intake.sources.get(key) != "default" and key in form.fields}
    typed["gpu_count"] = f"=2*{intake.values['gpu_count'] // 2}"     # typed as a formula Calc works out
    values = tmp_path / "values.json"
    values.write_text(json.dumps(typed, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "filled-in-calc.xlsx"
    template = Path(shutil.copy2(TEMPLATES_DIR / "intake.zh-TW.xlsx", tmp_path))     # Calc locks what it opens
    subprocess.run([str(SYSTEM_PYTHON), str(UNO_FILL), str(template), str(values),
                    str(out), str(tmp_path / "profile")], check=True, capture_output=True, timeout=300)
    with zipfile.ZipFile(out) as saved:
        assert b"LibreOffice" in saved.read("docProps/app.xml")       # written by Calc, not by openpyxl
    filled_in_calc = quoted(out, tmp_path / "calc", ruleset)
    from_yaml = quoted(twin, tmp_path / "yaml", ruleset)
    assert filled_in_calc.intake.values == from_yaml.intake.values
    assert filled_in_calc.intake.sources["gpu_count"] == cell_of("gpu_count", "zh-TW")
    assert same_figures(filled_in_calc.results.values, from_yaml.results.values) == []
