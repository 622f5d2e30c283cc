"""An intake: canonical key → value, each remembering where it came from (a cell or a line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Intake:
    """Canonical key → value, plus where each value came from.

    `sources[key]` is "Intake!C12" for a workbook cell or "case.yaml:4" for a
    text intake; `raw[key]` is what the person typed, for error messages.
    """

    values: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    origin: Path | None = None
    kind: str = "yaml"            # yaml | json | xlsx
    language: str = "en"
    book: Any = field(default=None, repr=False, compare=False)   # the open workbook, reused by the quote

    def where(self, key: str) -> str:
        return self.sources.get(key, key)
