"""`sizing rules check|test|doc`: lint the rule and catalog files, run their examples, list the functions."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "check or test rule and catalog files"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(title="rules commands", metavar="ACTION")
    p = actions.add_parser("check", help="lint rules and catalogs (exit 1 on problems)")
    p.add_argument("dir", nargs="?", type=Path, default=None, help="folder holding rules/ and catalogs/")
    p.set_defaults(run=run_check)
    p = actions.add_parser("test", help="run the examples written inside the rule files")
    p.add_argument("dir", nargs="?", type=Path, default=None, help="folder holding rules/ and catalogs/")
    p.set_defaults(run=run_test)
    p = actions.add_parser("doc", help="print the reference of formula functions")
    p.set_defaults(run=run_doc)


def split_home(path: Path | None) -> tuple[Path, Path]:
    """A folder holding rules/ and catalogs/, or a rules folder with catalogs/ beside it."""
    from engine.paths import CATALOGS_DIR, RULES_DIR
    if path is None:
        return RULES_DIR, CATALOGS_DIR
    path = Path(path)
    if (path / "rules").is_dir() or (path / "catalogs").is_dir():
        return path / "rules", path / "catalogs"
    return path, path.parent / "catalogs"


def load_or_report(directory: Path | None):
    """The rule set of a folder, or None after printing each problem as file:line: message."""
    from engine.calc.ruleset import load_ruleset
    from engine.intake.form import form_problems
    from engine.problems import SizingError
    rules_dir, catalogs_dir = split_home(directory)
    problems = form_problems(rules_dir)
    try:
        ruleset = load_ruleset(rules_dir, catalogs_dir)
    except SizingError as e:
        problems += e.problems
    for p in problems:
        print(p)
    return None if problems else ruleset


def run_check(args) -> int:
    ruleset = load_or_report(args.dir)
    if ruleset is None:
        return 1
    for p in ruleset.lint:
        print(f"{p.where}: warning: {p.message}")
    warned = f", {len(ruleset.lint)} warning{'s' * (len(ruleset.lint) != 1)} above" if ruleset.lint else ""
    print(f"ok: {len(ruleset.rules)} rules, {len(ruleset.tables)} tables, {len(ruleset.catalogs.gpus)} GPUs, "
          f"{len(ruleset.catalogs.models)} models (rule set {ruleset.version}){warned}")
    return 0


def run_test(args) -> int:
    from engine.calc.examples import run_examples
    ruleset = load_or_report(args.dir)
    if ruleset is None:
        return 1
    failures, count = run_examples(ruleset)
    for f in failures:
        print(f)
    print(f"{count - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def run_doc(args) -> int:
    from engine.calc.functions import reference_markdown
    print(reference_markdown())
    return 0
