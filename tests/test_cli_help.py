"""A command-line tool that behaves: --help with examples and defaults, agreeing with the README; pipes closed early."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys

import pytest

from engine.cli import BROKEN_PIPE, build_parser
from engine.paths import SAMPLES_DIR
from tests.conftest import ROOT

TRIVIAL_DEFAULTS = (None, False, [], "", argparse.SUPPRESS)


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(("quote",), its parser), (("rules", "check"), …): every command and sub-action."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from commands(sub, path + (name,))


COMMANDS = list(commands(build_parser()))
IDS = [" ".join(path) for path, _ in COMMANDS]


def examples(page: str) -> list[str]:
    """The command lines under `examples:` in a help page."""
    block = page.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0]
    return [re.split(r"\s{2,}", line.strip())[0] for line in block.splitlines() if line.startswith("  sizing ")]


def parse_example(line: str) -> argparse.Namespace:
    """The example as the shell would hand it over, up to a pipe or a redirection."""
    words = []
    for word in shlex.split(line)[1:]:
        if word in ("|", ">"):
            break
        words.append(word)
    return build_parser().parse_args(words)


@pytest.mark.parametrize("path, parser", COMMANDS, ids=IDS)
def test_every_command_has_runnable_examples_defaults_and_exit_status(path, parser):
    page = parser.format_help()
    lines = examples(page)
    assert lines and all(line.startswith("sizing " + " ".join(path)) for line in lines), page
    for line in lines:
        if "COMMAND" not in line:
            assert parse_example(line).run, line         # each example is a real command line
    assert "exit status: " in page
    for action in parser._actions:
        if action.default not in TRIVIAL_DEFAULTS and not isinstance(action, argparse._HelpAction) \
                and action.default is not argparse.SUPPRESS:
            shown = parser._get_formatter()._format_action(action)
            assert "default" in shown, (path, action.dest, shown)


def test_the_top_level_help_shows_examples_too():
    page = build_parser().format_help()
    assert [line.split()[1] for line in examples(page)] == ["template", "quote", "COMMAND"]


def readme_rows() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [m.group(1).replace("\\|", "|") for m in re.finditer(r"^\| `(sizing [^`]+)` \|", text, re.M)]


def test_the_readme_names_every_command_and_only_options_that_exist_with_the_same_choices():
    parsers = dict(COMMANDS)
    seen = set()
    for row in readme_rows():
        words = shlex.split(row.replace("[", " ").replace("]", " "))[1:]
        path = tuple(words[:2]) if tuple(words[:2]) in parsers else tuple(words[:1])
        seen.add(path)
        options = {s: a for a in parsers[path]._actions for s in a.option_strings}
        for word, following in zip(words, words[1:] + [""]):
            if word.startswith("-"):
                assert word in options, f"README: `{row}` names {word}, which `sizing {' '.join(path)}` lacks"
                if options[word].choices and "|" in following:
                    assert following.split("|") == list(options[word].choices), (row, word)
    assert seen == {path for path in parsers if path != ("rules",)}


def test_sweep_by_lists_the_same_objectives_as_the_engine():
    from engine.calc.sweep import OBJECTIVES
    parser = dict(COMMANDS)[("sweep",)]
    (by,) = [a for a in parser._actions if "--by" in a.option_strings]
    assert sorted(by.choices) == sorted(OBJECTIVES)


# -- pipes closed early: `sizing validate | head -2` ends quietly ---------------------------------

def closed_stdout(*args: str) -> subprocess.CompletedProcess:
    """Run `sizing ARGS` with its stdout's reader gone before a byte is written (`| head -0`)."""
    proc = subprocess.Popen([sys.executable, "-m", "engine", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    proc.stdout.close()
    err = proc.stderr.read()
    return subprocess.CompletedProcess(proc.args, proc.wait(timeout=180), "", err)


@pytest.mark.parametrize("args", [["validate"], ["quote", str(SAMPLES_DIR / "seed002-bert-base-8xv100.yaml"),
                                                 "--json", "-o", "{tmp}"]], ids=["validate", "quote --json"])
def test_a_reader_that_stops_early_gets_no_traceback(tmp_path, args):
    proc = closed_stdout(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert proc.returncode == BROKEN_PIPE, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr and "Exception" not in proc.stderr


def test_validate_into_head_ends_quietly():
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", f'"{sys.executable}" -m engine validate | head -2'],
                          capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert len(proc.stdout.splitlines()) == 2 and proc.returncode in (0, BROKEN_PIPE)
    assert proc.stderr == ""


# -- set-up scripts: a second run does no work, and every script says what it is doing -----------

def test_a_second_setup_does_not_reinstall_and_says_so():
    venv = ROOT / ".venv"
    if not (venv / ".installed").is_file():
        pytest.skip(".venv was not made by scripts/setup-venv")
    log = venv / "install.log"
    before = log.stat().st_mtime_ns if log.exists() else None
    proc = subprocess.run([str(ROOT / "scripts" / "setup-venv"), "test"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "setup-venv: .venv is up to date (delete .venv/.installed to reinstall)."
    assert (log.stat().st_mtime_ns if log.exists() else None) == before      # pip never ran


@pytest.mark.parametrize("script", ["demo", "setup-venv", "system-packages", "test"])
def test_every_setup_script_announces_its_steps(script):
    text = (ROOT / "scripts" / script).read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n# ")               # what it is for, at the top
    assert re.search(r'(say|echo) "[^"]*…', text), f"scripts/{script} works in silence"
