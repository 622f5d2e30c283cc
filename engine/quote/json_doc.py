"""The quote as JSON for other systems: inputs, results, warnings, trace and rule-set version."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from engine.calc.results import plain

if TYPE_CHECKING:
    from engine.quote.view import Quote


def quote_document(quote: Quote) -> dict:
    """`Results.to_json` (the `--json` document) plus who, when, the headline, the key figures as
    the quote words them and the scaling table."""
    return {
        "customer": quote.customer,
        "project": quote.project,
        "language": quote.lang,
        "generated_at": quote.generated_at.isoformat(),
        "headline": quote.headline,
        "key_figures": [{"key": f.key, "label": f.label, "text": f.text} for f in quote.key_figures],
        **quote.results.to_json(quote.lang),
        "scaling": [{c.key: plain(c.values[i]) for c in quote.scaling}
                    for i in range(len(quote.scaling[0].values))] if quote.scaling else [],
        **({"facility": quote.facility.to_json()} if quote.facility is not None else {}),
    }


def json_bytes(quote: Quote) -> bytes:
    return json.dumps(quote_document(quote), ensure_ascii=False, indent=2).encode("utf-8")

