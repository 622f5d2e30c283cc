"""Writing the quote view out: the customer's `<stem>.quote.xlsx`, `.html`, `.json` and the salesperson's
`<stem>.audit.xlsx`, each whole or not at all."""

from __future__ import annotations

from pathlib import Path

from engine.files import write_atomic
from engine.quote.html_page import html_bytes
from engine.quote.json_doc import json_bytes
from engine.quote.view import Quote
from engine.quote.audit import audit_bytes
from engine.quote.workbook import workbook_bytes

WRITERS = {"xlsx": workbook_bytes, "html": html_bytes, "json": json_bytes, "audit": audit_bytes}
# Each format's file name after the stem: the audit trail is a workbook of its own, for the salesperson.
ENDINGS = {"xlsx": ".quote.xlsx", "html": ".quote.html", "json": ".quote.json", "audit": ".audit.xlsx"}
FOR_CUSTOMER = ("xlsx", "html", "json")


def output_name(stem: str, fmt: str) -> str:
    return stem + ENDINGS[fmt]


def write_outputs(quote: Quote, outdir: Path, stem: str,
                  formats: tuple[str, ...] = ("xlsx", "html", "json", "audit")) -> list[Path]:
    """Write each format's file (`<stem>.quote.xlsx`, …, `<stem>.audit.xlsx`); returns the paths."""
    unknown = [f for f in formats if f not in WRITERS]
    if unknown:
        raise ValueError(f"unknown output format(s): {', '.join(unknown)}")
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = outdir / output_name(stem, fmt)
        write_atomic(path, WRITERS[fmt](quote))
        paths.append(path)
    return paths


def is_audit(path: Path) -> bool:
    """The salesperson's trail, not a document for the customer."""
    return Path(path).name.endswith(ENDINGS["audit"])
