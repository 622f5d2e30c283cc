"""The README's examples run as written: its YAML intake quotes to a plausible answer, its commands succeed."""

from __future__ import annotations

import json

import pytest

from tests.readme import COMMANDS, CV_COMMANDS, INTAKES, run_as_written, sizing


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
    # the one warning it may carry is the memory estimate's likely high (the README says so): a plan that fits
    # the estimate, filling most of the card
    assert not [w for w in doc["warnings"] if w["severity"] == "warning" and w["code"] != "may_not_fit"], doc["warnings"]


@pytest.mark.parametrize("line", COMMANDS)
def test_every_readme_command_runs_as_written(tmp_path, line):
    run_as_written(line, tmp_path)
