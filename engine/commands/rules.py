"""`sizing rules check|test|diff|publish|doc`: lint the rule and catalog files, run their examples, show what an
edit moves, publish it through the gate, list the functions."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "check, test, diff or publish rule and catalog files"
EXAMPLES = (("sizing rules check", "lint the product's rules/ and catalogs/ after an edit"),
            ("sizing rules test /srv/sizing", "run the examples of a folder holding rules/ and catalogs/"),
            ("sizing rules diff --against HEAD", "what an edit changes in the samples' quotes and the validation set"),
            ("sizing rules publish", "the edit's diff and the gate's verdict; quotes use it once it passes"),
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
    p = actions.add_parser("diff", **help_page(
        "quote the samples and the validation set with two versions of the rules and show what moved",
        (("sizing rules diff", "the working copy against the last commit"),
         ("sizing rules diff --against /srv/sizing-before", "against a copy of the rules folder, without git")),
        "0 compared (whatever moved); 1 either version of the rules is broken."))
    p.add_argument("dir", nargs="?", type=Path, default=None,
                   help="folder holding the edited rules/ and catalogs/ (default: the ones in use)")
    p.add_argument("--against", default="HEAD", metavar="GIT_REF|DIR",
                   help="the version to compare with: a folder holding a copy of rules/ (and catalogs/), "
                        "or a git commit, branch or tag (default: HEAD, the last commit)")
    p.set_defaults(run=run_diff)
    p = actions.add_parser("publish", **help_page(
        "check an edit with the publication gate and, when it passes, publish it for quotes and the services",
        (("sizing rules publish", "the product's rules: what moved since the published set, then the verdict"),
         ("sizing rules publish /srv/sizing", "a deployment's own copy, as its services will see it")),
        "0 published (or already the published set); 1 held: the verdict says why and how to publish it."))
    p.add_argument("dir", nargs="?", type=Path, default=None, help=DIR_HELP)
    p.set_defaults(run=run_publish)
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
    from engine.authoring.check import accepted_line, check_folder
    checked = check_folder(*split_home(args.dir))
    for p in checked.errors:
        print(p)
    if checked.ruleset is None:
        return 1
    ruleset, held = checked.ruleset, checked.held
    for p in held:
        print(f"{p.where}: warning: {p.message}")
    if checked.errors:
        return 1                  # the warnings are said too: a slip often shows as both
    warned = f", {len(held)} warning{'s' * (len(held) != 1)} above" if held else ""
    print(f"ok: {len(ruleset.rules)} rules, {len(ruleset.tables)} tables, {len(ruleset.catalogs.gpus)} GPUs, "
          f"{len(ruleset.catalogs.models)} models (rule set {ruleset.version}){warned}")
    for p in checked.accepted:    # acknowledged beside their values: said, with the reason, after the verdict
        print(accepted_line(p))
    if held:
        print("An edit with a warning is held (not used for quotes) until the value is fixed or the warning "
              "acknowledged beside it with `accept: \"…why…\"`.")
    return 0


def run_test(args) -> int:
    from engine.authoring.examples import run_examples
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


def run_diff(args) -> int:
    import tempfile

    from engine.problems import SizingError
    from engine.authoring.diff import diff, export_git_ref, render, samples
    after = load_or_report(args.dir)
    if after is None:
        return 1
    with tempfile.TemporaryDirectory(prefix="sizing-diff-") as scratch:
        against = Path(args.against)
        try:
            if against.is_dir():
                home, label = against, str(args.against)
            else:
                rules_dir, _ = export_git_ref(args.against, Path(scratch))
                home, label = rules_dir, f"git {args.against}"
        except SizingError as e:
            for p in e.problems:
                print(p)
            return 1
        before = load_or_report(home)
        if before is None:
            print(f"(those problems are in {label}, the version compared with)")
            return 1
        report = diff(before, after, samples())
    print(render(report, label, str(args.dir) if args.dir else "the rules in use"))
    return 0


def run_publish(args) -> int:
    """The edit's diff against the published set (or the last commit), then the gate's verdict, last on screen."""
    import tempfile

    from engine.authoring import gate
    from engine.authoring.diff import diff, export_git_ref, render, samples
    from engine.problems import SizingError
    rules_dir, catalogs_dir = split_home(args.dir)
    publication = gate.consult(rules_dir, catalogs_dir)
    record = publication.record
    edited = _loaded(rules_dir, catalogs_dir)
    copy = gate.published_copy(record)
    with tempfile.TemporaryDirectory(prefix="sizing-publish-") as scratch:
        label, before = "the published set", None
        try:
            if copy and publication.verdict is not None:
                before = _loaded(*copy)
                label = f"the published set ({record['version']}, {record.get('at', '')})"
            elif publication.verdict is not None:
                before, label = _loaded(*export_git_ref("HEAD", Path(scratch))), "the last commit"
        except SizingError:
            before = None
        if edited is not None and before is not None:
            print(render(diff(before, edited, samples()), label, str(args.dir or "the rules in use")))
            print()
    verdict = publication.verdict
    if verdict is None:
        print(f"Already published: rule set {record['version']} (since {record.get('at', '')}) is what quotes use.")
        return 0
    facts = verdict.facts
    print("The gate:")
    medians = ", ".join(f"{g} {m:.1%}" for g, m in facts.medians.items())
    before_medians = (verdict.baseline or record or {}).get("medians") or {}   # on today's validation set
    print(f"  rules check: {len(facts.errors)} error(s), {len(facts.held)} warning(s) not acknowledged, "
          f"{len(facts.accepted)} acknowledged")
    print(f"  examples: {'all hold' if not facts.examples else f'{len(facts.examples)} fail'}")
    if medians:
        was = ", ".join(f"{g} {m:.1%}" for g, m in before_medians.items())
        print(f"  validation median |error|: {medians}" + (f" (published set: {was})" if was else ""))
    for line in verdict.accepted:
        print(f"  validation, accepted in validation/gate.yaml: {line}")
    if facts.unchecked:
        print(f"  validation: {facts.unchecked}")
    if verdict.ok:
        print(f"Published: rule set {facts.version}. Quotes, the folder and the mail services use it now.")
        return 0
    print()
    print(publication.note(rules_dir), end="")
    return 1


def _loaded(rules_dir: Path, catalogs_dir: Path):
    from engine.calc.ruleset import load_ruleset
    from engine.problems import SizingError
    try:
        return load_ruleset(rules_dir, catalogs_dir)
    except SizingError:
        return None
