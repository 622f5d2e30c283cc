"""Reading any intake file: a filled workbook, or a YAML/JSON list of canonical keys."""

from __future__ import annotations

from pathlib import Path

from engine.intake.lenient import printable
from engine.intake.model import Intake
from engine.intake.text import read_text_intake
from engine.problems import Problem, SizingError

TEXT_SUFFIXES = (".yaml", ".yml", ".json")
WORKBOOK_SUFFIXES = (".xlsx", ".xlsm", ".xls", ".xltx")


def read(path: Path) -> Intake:
    """Read any supported intake; raises SizingError with one clear problem if unreadable.

    Control characters are taken out of every text value here, so that none reaches a quote's
    page, workbook or mail (a NUL, a bell or a terminal escape typed or pasted into a name)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        intake = read_text_intake(path)
    elif suffix in WORKBOOK_SUFFIXES:
        from engine.intake.workbook import read_workbook  # openpyxl is loaded only for workbooks
        intake = read_workbook(path)
    else:
        raise _not_an_intake(path)
    intake.values = {printable(key): printable(value) for key, value in intake.values.items()}
    intake.raw = {printable(key): printable(value) for key, value in intake.raw.items()}
    intake.sources = {printable(key): where for key, where in intake.sources.items()}
    return intake


def _not_an_intake(path: Path) -> SizingError:
    return SizingError([Problem("file.type", path.name,
                               f"{path.name} is not an intake: use a filled .xlsx template, "
                               "or a .yaml/.json intake.")])
