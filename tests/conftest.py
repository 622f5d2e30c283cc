"""Shared fixtures: the shipped rule set, and a scratch copy of rules/catalogs to break."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The rule-set cache (engine.calc.rulecache) of a test run, and of the commands it starts,
# lives in a folder of its own: never the developer's ~/.cache, never one from an earlier run.
# pytest-xdist's workers share the one their controller made (they inherit its environment): an entry
# one worker built is read by the other, and one being built is waited for rather than built twice.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("SIZING_TEST_RUN_CACHE"):
    os.environ["SIZING_CACHE_DIR"] = os.environ["SIZING_TEST_RUN_CACHE"]
else:
    os.environ["SIZING_CACHE_DIR"] = os.environ["SIZING_TEST_RUN_CACHE"] = tempfile.mkdtemp(prefix="sizing-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SIZING_CACHE_DIR"], ignore_errors=True)


@pytest.fixture(scope="session")
def ruleset():
    from engine.calc.ruleset import load_ruleset
    return load_ruleset(ROOT / "rules", ROOT / "catalogs")


@pytest.fixture
def home_copy(tmp_path) -> Path:
    """A private copy of rules/, catalogs/ and templates/ that a test may edit or break."""
    for name in ("rules", "catalogs", "templates"):
        if (ROOT / name).is_dir():
            # an office program's lock file (".~lock.x.xlsx#") may come and go while this copies
            shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns(".~lock.*"))
    return tmp_path


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml's addopts): two workers per CPU. About half of the suite's time
    is spent waiting — on the `sizing` processes it starts, on Dovecot, SMTP, LibreOffice and
    Chromium, on services polling folders — so twice as many workers as CPUs keeps them busy."""
    return 2 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
