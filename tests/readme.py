"""The README's examples as data: its YAML intakes and its `sizing` command lines, and how to run one as written."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, re.M | re.S)
INTAKES = [body for lang, body in BLOCKS if lang == "yaml" and re.search(r"^workload:", body, re.M)]
EVERY_COMMAND = [line.strip() for lang, body in BLOCKS if lang == "sh" for line in body.splitlines()
                 if line.strip().startswith(".venv/bin/sizing ")]
# The README's cross-validation runs in tests/test_accuracy.py, after that module's own, whose answer it reads
# from the test run's cache folder in about a second; in tests/test_readme_examples.py, on another worker, it
# would wait minutes for it.
CV_COMMANDS = [line for line in EVERY_COMMAND if " validate --cv" in line]
COMMANDS = [line for line in EVERY_COMMAND if line not in CV_COMMANDS]


def sizing(args: list[str], cwd=ROOT):
    # a guard against a hang, not a speed test: `validate --cv` takes minutes, more beside the rest of the suite
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900)


def run_as_written(line: str, tmp_path) -> None:
    """A README command line in a process of its own; it must succeed without a traceback."""
    words = shlex.split(line.split("#", 1)[0])[1:]
    # written output goes to a scratch folder instead of the checkout's out/
    words = [str(tmp_path) + "/" if w == "out/" else w for w in words]
    proc = sizing(words)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
