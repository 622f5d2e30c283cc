"""Writing the quote view out: `<stem>.quote.xlsx`, `.html` and `.json`, each whole or not at all."""

from __future__ import annotations

from pathlib import Path

from engine.files import write_atomic
from engine.quote.html_page import html_bytes
from engine.quote.json_doc import json_bytes
from engine.quote.view import Quote
from engine.quote.workbook import workbook_bytes

WRITERS = {"xlsx": workbook_bytes, "html": html_bytes, "json": json_bytes}


def write_outputs(quote: Quote, outdir: Path, stem: str,
                  formats: tuple[str, ...] = ("xlsx", "html", "json")) -> list[Path]:
    """Write `<stem>.quote.<format>` for each format; returns the paths."""
    unknown = [f for f in formats if f not in WRITERS]
    if unknown:
        raise ValueError(f"unknown output format(s): {', '.join(unknown)}")
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = outdir / f"{stem}.quote.{fmt}"
        write_atomic(path, WRITERS[fmt](quote))
        paths.append(path)
    return paths
