"""The `sizing` command: template, quote, watch, mail, rules check/test, sweep, validate."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from engine.paths import LANGUAGES


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s")
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sizing", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    p = sub.add_parser("template", help="write a blank intake workbook")
    p.add_argument("-o", "--output", type=Path, default=None, help="file to write (default intake.xlsx)")
    p.add_argument("--lang", choices=LANGUAGES, default="en", help="language of labels and help")
    p.set_defaults(run=cmd_template)

    p = sub.add_parser("quote", help="quote intake files (.xlsx, .yaml, .json)")
    p.add_argument("inputs", nargs="+", type=Path, metavar="INPUT")
    p.add_argument("-o", "--outdir", type=Path, default=Path("."), help="where to write the quote files")
    p.add_argument("--json", action="store_true", help="print the result document as JSON on stdout")
    p.set_defaults(run=cmd_quote)

    p = sub.add_parser("watch", help="folder service: DIR/inbox in; outbox, archive, failed out")
    _service_arguments("engine.watch", p)

    p = sub.add_parser("mail", help="mail service: IMAP in, SMTP replies")
    _service_arguments("engine.mail", p)

    rules = sub.add_parser("rules", help="check or test rule and catalog files")
    rules_sub = rules.add_subparsers(title="rules commands", metavar="ACTION")
    p = rules_sub.add_parser("check", help="lint rules and catalogs (exit 1 on problems)")
    p.add_argument("dir", nargs="?", type=Path, default=None, help="folder holding rules/ and catalogs/")
    p.set_defaults(run=cmd_rules_check)
    p = rules_sub.add_parser("test", help="run the examples written inside the rule files")
    p.add_argument("dir", nargs="?", type=Path, default=None, help="folder holding rules/ and catalogs/")
    p.set_defaults(run=cmd_rules_test)
    p = rules_sub.add_parser("doc", help="print the reference of formula functions")
    p.set_defaults(run=cmd_rules_doc)

    p = sub.add_parser("sweep", help="evaluate a grid of configurations and recommend")
    _service_arguments("engine.sweep", p)

    p = sub.add_parser("validate", help="compare estimates with published measurements")
    _service_arguments("engine.accuracy", p)
    return parser


def _service_arguments(module: str, parser: argparse.ArgumentParser) -> None:
    """Commands owned by another module declare their own arguments and runner."""
    import importlib
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        parser.set_defaults(run=lambda args, e=e: _unavailable(module, e))
        return
    mod.add_arguments(parser)
    parser.set_defaults(run=mod.run)


def _unavailable(module: str, error: Exception) -> int:
    print(f"sizing: {module} is not available in this build ({error}).", file=sys.stderr)
    return 2


def _split_home(path: Path | None) -> tuple[Path, Path]:
    from engine.paths import CATALOGS_DIR, RULES_DIR
    if path is None:
        return RULES_DIR, CATALOGS_DIR
    path = Path(path)
    if (path / "rules").is_dir() or (path / "catalogs").is_dir():
        return path / "rules", path / "catalogs"
    return path, path.parent / "catalogs"


def cmd_template(args) -> int:
    from engine.template import write_template
    out = args.output or Path("intake.xlsx" if args.lang == "en" else f"intake.{args.lang}.xlsx")
    write_template(out, args.lang)
    print(f"wrote {out}")
    return 0


def cmd_quote(args) -> int:
    from engine.job import run_job
    from engine.problems import SizingError
    from engine.rules import current_ruleset
    from engine.summary_text import summary_text

    try:
        ruleset = current_ruleset()
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 1
    args.outdir.mkdir(parents=True, exist_ok=True)
    code, documents = 0, []
    for source in args.inputs:
        if not source.is_file():
            print(f"{source}: no such file.", file=sys.stderr)
            code = max(code, 2)
            continue
        job = run_job(source, args.outdir, ruleset=ruleset)
        if job.ok:
            if args.json:
                documents.append(job.results.to_json(job.language))
            else:
                print(summary_text(job))
            for out in job.outputs:
                print(f"wrote {out}", file=sys.stderr)
        else:
            code = 2 if job.status == "invalid" or job.status == "failed" else 1
            for p in job.problems:
                print(f"{p.where}: {p.message}" if p.where else p.message, file=sys.stderr)
            for out in job.outputs:
                print(f"wrote {out}", file=sys.stderr)
    if args.json:
        json.dump(documents[0] if len(documents) == 1 else documents, sys.stdout,
                  ensure_ascii=False, indent=2)
        print()
    return code


def _load_or_report(directory: Path | None):
    """The rule set of a folder, or None after printing each problem as file:line: message."""
    from engine.problems import SizingError
    from engine.rules import load_ruleset
    rules_dir, catalogs_dir = _split_home(directory)
    try:
        return load_ruleset(rules_dir, catalogs_dir)
    except SizingError as e:
        for p in e.problems:
            print(p)
        return None


def cmd_rules_check(args) -> int:
    ruleset = _load_or_report(args.dir)
    if ruleset is None:
        return 1
    print(f"ok: {len(ruleset.rules)} rules, {len(ruleset.catalogs.gpus)} GPUs, "
          f"{len(ruleset.catalogs.models)} models (rule set {ruleset.version})")
    return 0


def cmd_rules_test(args) -> int:
    from engine.rule_examples import run_examples
    ruleset = _load_or_report(args.dir)
    if ruleset is None:
        return 1
    failures, count = run_examples(ruleset)
    for f in failures:
        print(f)
    print(f"{count - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def cmd_rules_doc(args) -> int:
    from engine.functions import reference_markdown
    print(reference_markdown())
    return 0
