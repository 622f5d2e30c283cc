"""Reading any intake file: a filled workbook, or a YAML/JSON list of canonical keys."""

from __future__ import annotations

from pathlib import Path

from engine.intake.model import Intake
from engine.intake.text import read_text_intake
from engine.problems import Problem, SizingError

TEXT_SUFFIXES = (".yaml", ".yml", ".json")
WORKBOOK_SUFFIXES = (".xlsx", ".xlsm", ".xls", ".xltx")


def read(path: Path) -> Intake:
    """Read any supported intake; raises SizingError with one clear problem if unreadable."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return read_text_intake(path)
    if suffix in WORKBOOK_SUFFIXES:
        from engine.intake.workbook import read_workbook  # openpyxl is loaded only for workbooks
        return read_workbook(path)
    raise SizingError([Problem("file.type", path.name,
                               f"{path.name} is not an intake: use a filled .xlsx template, "
                               "or a .yaml/.json intake.")])
