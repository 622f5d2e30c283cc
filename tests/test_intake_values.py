"""Values that are not what they seem: NaN and infinities, formulas, control characters — each
refused with its field named or carried as plain text, through real files and `sizing quote`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


# ---------------------------------------------------------------- values, never formulas

LINK = '=HYPERLINK("http://example.invalid/x","click me")'
DDE = "=cmd|' /C calc'!A0"


def formulas_in(path) -> list[str]:
    """Every cell of a saved workbook that Excel would evaluate, as Sheet!Cell = formula."""
    from openpyxl import load_workbook
    wb = load_workbook(path)
    return [f"{ws.title}!{c.coordinate} = {c.value}" for ws in wb.worksheets
            for row in ws.iter_rows() for c in row if c.data_type == "f"]


def cached_dde(path, out):
    """The DDE formula at Intake!H2 with a saved result of 0, as Excel leaves it after a refused link."""
    import re
    from test_intake_kit import rezip
    return rezip(path, out, lambda name, body: re.sub(rb'(<c r="H2"[^>]*>)<f>(.*?)</f><v ?/>', rb"\1<f>\2</f><v>0</v>",
                                                      body) if name.startswith("xl/worksheets/") else body)


def test_a_formula_in_a_text_field_is_refused(tmp_path):
    from test_intake_kit import with_cached_formula
    path = filled(tmp_path, BASE, typed={"customer": LINK})
    saved = with_cached_formula(path, tmp_path / "link.xlsx", LINK[1:], "click me")   # as LibreOffice saves it
    proc = sizing("quote", saved, "-o", tmp_path / "out")
    assert proc.returncode == 2, proc.stdout
    assert (f"{cell_of('customer')}: Customer holds a formula ({LINK}); only number fields may be "
            "calculated. Type the Customer itself.") in proc.stderr
    assert list((tmp_path / "out").iterdir()) == []


def test_a_workbook_handed_back_with_its_errors_holds_values_not_formulas(tmp_path):
    from openpyxl import load_workbook
    from test_intake_kit import with_cached_formula
    path = filled(tmp_path, BASE, typed={"gpu_count": "eight"})
    wb = load_workbook(path)
    wb["Intake"]["H2"] = DDE                                           # beside the form, not an input
    wb["Intake"]["H3"] = LINK                                          # no saved result: kept as text
    wb.save(path)
    saved = cached_dde(path, tmp_path / "dde.xlsx")
    proc = sizing("quote", saved, "-o", tmp_path / "out")
    assert proc.returncode == 2 and "Number of GPUs" in proc.stderr, proc.stderr
    errors = tmp_path / "out" / "dde.errors.xlsx"
    assert formulas_in(errors) == []
    intake = load_workbook(errors)["Intake"]
    assert intake["H2"].value == 0 and intake["H3"].value == LINK and intake["H3"].data_type == "s"


def test_a_number_field_counts_by_its_saved_result_and_no_formula_reaches_the_quote(tmp_path):
    from openpyxl import load_workbook
    from test_intake_kit import with_cached_formula
    path = filled(tmp_path, BASE, typed={"gpu_count": "=4*2"})
    wb = load_workbook(path)
    wb["Intake"]["H2"] = DDE                                           # beside the form, not an input
    wb.save(path)
    once = with_cached_formula(path, tmp_path / "once.xlsx", "4*2", "8")
    saved = cached_dde(once, tmp_path / "dde.xlsx")
    proc = sizing("quote", saved, "-o", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["inputs"]["gpu_count"] == 8
    quote = tmp_path / "out" / "dde.quote.xlsx"
    assert formulas_in(quote) == []
    intake = load_workbook(quote)["Intake"]
    sheet, cell = cell_of("gpu_count").split("!")
    assert intake[cell].value == 8 and intake["H2"].value == 0


@pytest.mark.parametrize("text", [LINK, "@SUM(1+1)*cmd|' /C calc'!A0", "+1+1", "-2+3"])
def test_text_that_looks_like_a_formula_stays_text_in_every_output(text, tmp_path):
    from openpyxl import load_workbook
    book = filled(tmp_path, BASE, name="typed.xlsx")
    wb = load_workbook(book)
    sheet, cell = cell_of("customer").split("!")
    wb[sheet][cell].value = text
    wb[sheet][cell].data_type = "s"                                   # typed as text, e.g. after '
    wb.save(book)
    (tmp_path / "typed.yaml").write_text(
        json.dumps({**BASE, "customer": text}, ensure_ascii=False), encoding="utf-8")   # JSON is YAML
    proc = sizing("quote", book, tmp_path / "typed.yaml", "-o", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [d["inputs"]["customer"] for d in json.loads(proc.stdout)] == [text, text]
    for name in ("typed.xlsx", "typed.yaml"):
        quote = tmp_path / "out" / f"{Path(name).stem}.quote.xlsx"
        assert formulas_in(quote) == []
        shown = [c for ws in load_workbook(quote).worksheets for row in ws.iter_rows() for c in row
                 if c.value == text]
        assert shown and all(c.data_type == "s" and c.quotePrefix for c in shown), name
        html = (tmp_path / "out" / f"{Path(name).stem}.quote.html").read_text(encoding="utf-8")
        assert "click me" not in html or "HYPERLINK" in html          # shown as typed, never as a link


# ---------------------------------------------------------------- control characters

def test_control_characters_never_reach_a_page_a_workbook_or_json(tmp_path):
    import re
    (tmp_path / "bell.yaml").write_text(
        yaml_with("gpu_count: 8").replace("customer: Example Co.",
                                          'customer: "Acme\\0 Co\\a\\e[31m red\\x7f \\u202egnp.exe"'),
        encoding="utf-8")
    proc = sizing("quote", tmp_path / "bell.yaml", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    controls = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
    html = (tmp_path / "bell.quote.html").read_text(encoding="utf-8")
    assert "Acme Co[31m red gnp.exe" in html and not controls.search(html)
    assert not controls.search((tmp_path / "bell.quote.json").read_text(encoding="utf-8"))
    import zipfile
    with zipfile.ZipFile(tmp_path / "bell.quote.xlsx") as z:
        text = "".join(z.read(n).decode("utf-8") for n in z.namelist() if n.endswith(".xml"))
    assert "Acme Co[31m red gnp.exe" in text and not controls.search(text) and "_x001b_" not in text


def test_control_characters_in_a_key_never_reach_a_note(tmp_path):
    (tmp_path / "key.yaml").write_text(yaml_with("gpu_count: 8\n\"gpu\\a\\e[2J_cuont\": 8"), encoding="utf-8")
    proc = sizing("quote", tmp_path / "key.yaml", "-o", tmp_path)
    assert proc.returncode == 2 and "gpu[2J_cuont" in proc.stderr, proc.stderr
    assert "\x07" not in proc.stderr and "\x1b" not in proc.stderr
