"""`sizing rules check|test|doc`: lint the rule and catalog files, run their examples, list the functions."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "check or test rule and catalog files"
EXAMPLES = (("sizing rules check", "lint the product's rules/ and catalogs/ after an edit"),
            ("sizing rules test /srv/sizing", "run the examples of a folder holding rules/ and catalogs/"),
            ("sizing rules doc", "the formula functions rule authors may use"))
EXIT = "0 all good; 1 a problem (each as file:line: message) or a failing example."
DIR_HELP = "folder holding rules/ and catalogs/, or a rules folder with catalogs/ beside it (default: the product's own)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.commands import help_page
    actions = parser.add_subparsers(title="rules commands", metavar="ACTION")
    for name, summary, what, own, exit_status, run in (
            ("check", "lint rules and catalogs", "the product's rules/ and catalogs/", "a deployment's own copy",
             "0 no problem; 1 problems, each as file:line: message.", run_check),
            ("test", "run the examples written inside the rule files",
             "every `examples:` entry of the product's rule files", "those of a deployment's own copy",
             "0 every example holds; 1 a failing example or a broken rule file.", run_test)):
        p = actions.add_parser(name, **help_page(
            summary, ((f"sizing rules {name}", what), (f"sizing rules {name} /srv/sizing", own)), exit_status))
        p.add_argument("dir", nargs="?", type=Path, default=None, help=DIR_HELP)
        p.set_defaults(run=run)
    p = actions.add_parser("doc", **help_page(
        "print the reference of formula functions",
        (("sizing rules doc > docs/functions.md", "the reference page, as Markdown"),), "0."))
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
    print(f"ok: {len(ruleset.rules)} rules, {len(ruleset.catalogs.gpus)} GPUs, "
          f"{len(ruleset.catalogs.models)} models (rule set {ruleset.version})")
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
