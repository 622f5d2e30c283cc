"""The short plain-text summary `sizing quote` prints: headline, verdicts, key figures, warnings."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.quote.view import Quote

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")   # a typed name must not drive the terminal


def summary_text(q: Quote) -> str:
    lines = [f"{q.customer}: {q.headline}" if q.customer else q.headline]
    lines += [f"  {line}" for line in q.verdicts]
    lines += [f"  {f.label}: {f.text}" for f in q.key_figures]
    if q.warnings:
        lines.append(q.m("sections.warnings"))
        lines += [f"  ! {w}" for w in q.warnings]
    return CONTROL.sub("", "\n".join(lines))
