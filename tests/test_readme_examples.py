"""The README's examples run as written: its YAML intake quotes to a plausible answer, its commands succeed."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, re.M | re.S)
INTAKES = [body for lang, body in BLOCKS if lang == "yaml" and re.search(r"^workload:", body, re.M)]
EVERY_COMMAND = [line.strip() for lang, body in BLOCKS if lang == "sh" for line in body.splitlines()
                 if line.strip().startswith(".venv/bin/sizing ")]
# The README's cross-validation runs in tests/test_accuracy.py, after that module's own, whose answer it reads
# from the test run's cache folder in about a second; here, on another worker, it would wait minutes for it.
CV_COMMANDS = [line for line in EVERY_COMMAND if " validate --cv" in line]
COMMANDS = [line for line in EVERY_COMMAND if line not in CV_COMMANDS]


def sizing(args: list[str], cwd=ROOT):
    # a guard against a hang, not a speed test: `validate --cv` takes minutes, more beside the rest of the suite
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


def test_the_readme_has_examples_to_run():
    assert len(INTAKES) >= 1 and len(COMMANDS) >= 4 and len(CV_COMMANDS) >= 1


@pytest.mark.parametrize("body", INTAKES)
def test_every_readme_intake_quotes_to_an_answer_that_fits(tmp_path, body):
    intake = tmp_path / "readme.yaml"
    intake.write_text(body, encoding="utf-8")
    proc = sizing(["quote", str(intake), "-o", str(tmp_path), "--json"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["results"]["fits_in_memory"], doc["warnings"]
    assert not [w for w in doc["warnings"] if w["severity"] == "warning"], doc["warnings"]


@pytest.mark.parametrize("line", COMMANDS)
def test_every_readme_command_runs_as_written(tmp_path, line):
    run_as_written(line, tmp_path)


def run_as_written(line: str, tmp_path) -> None:
    """A README command line in a process of its own; it must succeed without a traceback."""
    words = shlex.split(line.split("#", 1)[0])[1:]
    # written output goes to a scratch folder instead of the checkout's out/
    words = [str(tmp_path) + "/" if w == "out/" else w for w in words]
    proc = sizing(words)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
