"""The quote as JSON for other systems: inputs, results, warnings, trace and rule-set version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from engine.results import plain

if TYPE_CHECKING:
    from engine.job import Job
    from engine.render import Quote


def quote_document(job: Job, quote: Quote) -> dict:
    """`Results.to_json` (the `--json` document) plus who, when, the headline and the scaling table."""
    return {
        "customer": quote.customer,
        "project": quote.project,
        "language": quote.lang,
        "generated_at": quote.generated_at.isoformat(),
        "headline": quote.headline,
        **job.results.to_json(quote.lang),
        "scaling": [{c.key: plain(c.values[i]) for c in quote.scaling}
                    for i in range(len(quote.scaling[0].values))] if quote.scaling else [],
    }


def json_bytes(job: Job, quote: Quote) -> bytes:
    return json.dumps(quote_document(job, quote), ensure_ascii=False, indent=2).encode("utf-8")


def write_quote_json(job: Job) -> Path:
    """Write `<stem>.quote.json` alone (atomically)."""
    from engine.render import write_outputs   # render imports this module
    return write_outputs(job, ("json",))[0]
