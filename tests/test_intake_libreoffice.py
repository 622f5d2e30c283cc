"""Workbooks saved by LibreOffice Calc: the committed re-saved samples, and a live round trip when Calc is here."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from test_intake_kit import BASE, catalogs, cell_of, filled

from engine.intake.read import read
from engine.intake.validate import validate
from engine.paths import SAMPLES_DIR

SAVED = sorted((SAMPLES_DIR / "saved-by-libreoffice").glob("*.xlsx"))


def checked(path):
    intake = read(path)
    assert validate(intake, catalogs()) == [], path.name
    return intake


def test_there_are_libreoffice_saved_samples():
    assert len(SAVED) >= 2


@pytest.mark.parametrize("path", SAVED, ids=[p.name for p in SAVED])
def test_libreoffice_saved_sample_reads_like_its_twin(path):
    twin = SAMPLES_DIR / path.name.replace(".xlsx", ".yaml")
    assert checked(path).values == checked(twin).values


@pytest.mark.skipif(shutil.which("soffice") is None,
                    reason="LibreOffice Calc is not installed (apt-get install libreoffice-calc-nogui); "
                           "the committed samples/saved-by-libreoffice/ files cover the format")
def test_live_libreoffice_round_trip_computes_formulas(tmp_path):
    source = filled(tmp_path, BASE, typed={"gpu_count": "=4*4", "training_tokens_billion": "1,000"})
    out = tmp_path / "calc"
    subprocess.run(["soffice", "--headless", f"-env:UserInstallation=file://{tmp_path}/profile",
                    "--convert-to", "xlsx:Calc MS Excel 2007 XML", "--outdir", str(out), str(source)],
                   check=True, capture_output=True, timeout=180)
    intake = checked(out / source.name)
    assert intake.values["gpu_count"] == 16 and intake.sources["gpu_count"] == cell_of("gpu_count")
    assert intake.values["training_tokens_billion"] == 1000.0
