"""Where the product's editable data lives (rules, catalogs, templates, samples)."""

import os
from pathlib import Path

# The data folders sit beside the package in a checkout; SIZING_HOME points elsewhere
# (e.g. a deployment that keeps its own edited rules) without reinstalling.
HOME = Path(os.environ.get("SIZING_HOME") or Path(__file__).resolve().parent.parent)
RULES_DIR = HOME / "rules"
CATALOGS_DIR = HOME / "catalogs"
TEMPLATES_DIR = HOME / "templates"
SAMPLES_DIR = HOME / "samples"
PUBLISHED_CASES = HOME / "validation" / "published.yaml"   # the published runs `sizing validate` checks
HELD_OUT_CASES = HOME / "validation" / "holdout.yaml"      # published runs kept out of every fit (docs/holdout.md)

LANGUAGES = ("en", "zh-TW", "zh-CN")
