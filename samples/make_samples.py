"""Write samples/<name>.xlsx from each YAML twin, by filling the committed template through its names.

Run from the checkout: `.venv/bin/python samples/make_samples.py` (after `sizing template`
has refreshed templates/). The language of each workbook is the twin's `language:` (default en).

samples/saved-by-libreoffice/ holds three of these workbooks re-saved by LibreOffice Calc 7.4
(`soffice --headless --convert-to xlsx <file>`): real files from another program, read in the
tests. They are not regenerated here; refresh them only when the template `version` changes.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from engine.calc.catalogs import load_catalogs  # noqa: E402
from engine.intake.read import read  # noqa: E402
from engine.intake.template import fill_template, template_path  # noqa: E402
from engine.intake.validate import validate  # noqa: E402


def twin_values(path: Path, catalogs) -> tuple[str, dict]:
    """(language, canonical values the person gave) of a YAML twin; refuses an invalid twin."""
    intake = read(path)
    problems = validate(intake, catalogs)
    if problems:
        raise SystemExit("\n".join(f"{path.name}: {p}" for p in problems))
    given = {k: v for k, v in intake.values.items() if intake.sources.get(k) != "default"}
    return intake.language, given


def make_sample(path: Path, catalogs, out_dir: Path | None = None) -> Path:
    """samples/<name>.xlsx (or out_dir/<name>.xlsx) from samples/<name>.yaml."""
    lang, values = twin_values(path, catalogs)
    out = (out_dir or path.parent) / f"{path.name[: -len('.yaml')]}.xlsx"
    return fill_template(template_path(lang), values, out, catalogs)


def main() -> int:
    catalogs = load_catalogs()
    for path in sorted(HERE.glob("*.yaml")):
        print(f"wrote {make_sample(path, catalogs).relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
