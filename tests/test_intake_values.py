"""Values that are not what they seem: NaN and infinities, formulas, control characters — each
refused with its field named or carried as plain text, through real files and `sizing quote`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_intake_kit import BASE, cell_of, filled

from tests.conftest import ROOT

SEED = (ROOT / "samples" / "seed002-bert-base-8xv100.yaml").read_text(encoding="utf-8")


def sizing(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=180)


def yaml_with(line: str) -> str:
    return SEED.replace("gpu_count: 8", line)


# ---------------------------------------------------------------- NaN and infinities

# (file name, content, the line on stderr that names the field)
NOT_NUMBERS = [
    ("nan.yaml", yaml_with("gpu_count: .nan"), "Number of GPUs: “nan” is not a whole number"),
    ("inf.yaml", yaml_with("gpu_count: .inf"), "Number of GPUs: “inf” is not a whole number"),
    ("minus-inf.yaml", SEED.replace("utilization: 1.0", "utilization: -.inf"), "Utilization (MFU): “-inf” is not a number"),
    ("nan.json", "NaN", "gpu_count: Number of GPUs: “nan” is not a whole number"),
    ("inf.json", "Infinity", "gpu_count: Number of GPUs: “inf” is not a whole number"),
]


@pytest.mark.parametrize("name, content, said", NOT_NUMBERS, ids=[n for n, _, _ in NOT_NUMBERS])
def test_nan_and_infinities_are_refused_with_the_field_named(name, content, said, tmp_path):
    if name.endswith(".json"):
        values = {k: v for k, v in BASE.items() if k != "gpu_count"}
        content = json.dumps(values)[:-1] + f', "gpu_count": {content}}}'
    (tmp_path / name).write_text(content, encoding="utf-8")
    proc = sizing("quote", tmp_path / name, "-o", tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert said in proc.stderr
    assert not list(tmp_path.glob("*.quote.*"))


@pytest.mark.parametrize("typed", ["NaN", "nan", "Infinity", "-inf", "∞"])
def test_nan_and_infinities_typed_into_a_workbook_cell_are_refused_there(typed, tmp_path):
    path = filled(tmp_path, BASE, typed={"gpu_count": typed})
    proc = sizing("quote", path, "-o", tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert f"{cell_of('gpu_count')}: Number of GPUs: “{typed}” is not a whole number" in proc.stderr


def test_a_number_past_the_largest_float_in_a_workbook_cell_is_refused_there(tmp_path):
    from test_intake_kit import rezip
    path = filled(tmp_path, BASE, typed={"gpu_count": 12345})
    out = rezip(path, tmp_path / "huge.xlsx",
                lambda name, body: body.replace(b"<v>12345</v>", b"<v>1E+999</v>"))   # read as inf
    proc = sizing("quote", out, "-o", tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert f"{cell_of('gpu_count')}: Number of GPUs: “inf” is not a whole number" in proc.stderr
