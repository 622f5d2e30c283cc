"""`sizing explain INPUT FIGURE`: how one figure of a quote was derived, down to intake cells and catalog lines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.commands import limits
from engine.commands.quote import add_calibration_argument, apply_calibration

HELP = "show how one figure was derived: its formula with values, the inputs and catalog lines it rests on"
EXAMPLES = (("sizing explain samples/seed002-bert-base-8xv100.xlsx training_time_hours",
             "the training time: its formula, the values in it, what it reads and the intake cells below"),
            ('sizing explain samples/llama-8b-pretraining-256xh100.zh-CN.yaml "总成本"',
             "a figure by its label, in any of the three languages"),
            ("sizing explain intake.yaml cost_total --full", "every rule below the total cost, as a tree"),
            ("sizing explain intake.yaml cost_total --rules /srv/sizing", "the same against a deployment's own rules"),
            ("sizing explain intake.yaml tpot_ms --calibration calibration.yaml",
             "the figure as a calibrated quote derives it, your measurement's factors among its inputs"))
EXIT = ("0 explained; 1 the rule files are broken; 2 an invalid intake or a figure no rule or input has, or "
        "past the time or memory limit.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path, help="the intake: .xlsx, .yaml or .json")
    parser.add_argument("figure", help="the figure to explain: its key (cost_total) or its label in English, "
                                       "繁體中文 or 简体中文 (\"Total cost\", 總成本, 总成本)")
    parser.add_argument("--full", action="store_true",
                        help="print the whole derivation as a tree, every rule down to the intake and catalogs "
                             "(without it: a short derivation of a screenful)")
    parser.add_argument("--rules", type=Path, default=None, metavar="DIR",
                        help="folder holding rules/ and catalogs/ (default: the ones in use)")
    add_calibration_argument(parser)
    limits.add_arguments(parser)


def run(args) -> int:
    from engine.calc.explain import closest_figures, figure_key
    from engine.commands.rules import load_or_report
    ruleset = load_or_report(args.rules)
    if ruleset is None:
        return 1
    labels = _input_labels(ruleset)
    key = figure_key(args.figure, ruleset, labels)
    if key is None:
        near = closest_figures(args.figure, ruleset, labels, n=1)
        hint = "".join(f". Did you mean `{k}` ({_english(ruleset, k, labels)})?" for k, _ in near) or "."
        print(f"{args.figure}: no figure or input has this name{hint}", file=sys.stderr)
        return 2
    args.key = key
    if not apply_calibration(args):
        return 2
    return limits.run_one(args, args.input, ruleset, explain_one)      # in a process of its own, under the limits


def explain_one(ruleset, args) -> int:
    """The derivation printed; its exit status."""
    from engine.calc.explain import count_steps, explain, render, render_short
    from engine.job import CALIBRATION, calibrated, planned_results, read_checked
    from engine.problems import SizingError
    from engine.quote.messages import messages
    key = args.key
    try:
        intake = read_checked(args.input, ruleset)
        calibrated(intake, CALIBRATION, ruleset)       # `--calibration`: as the calibrated quote has it
        # the quote's own path: the serving default and the planner's layout, then the rules
        results, _ = planned_results(intake, ruleset)
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    typed = {**intake.values, **intake.raw}
    named = messages(intake.language)
    tree = explain(key, results, ruleset, _places(intake), typed, intake.language,
                   {k: _label(named, k) for k in ruleset.input_types})
    if args.full:
        print(render(tree))
        return 0
    words = named.table["explain"]
    hint = words["full"].format(steps=count_steps(tree), command=f"sizing explain {args.input} {key} --full")
    memory = key in ruleset.rules and ruleset.rules[key].group == "capacity"
    print(render_short(tree, words, hint, _as_quoted(named, tree.value, tree.unit, memory), named.unit))
    return 0


def _as_quoted(m, value, unit: str, gpu_memory: bool = False) -> str:
    """The figure as the quote writes it, where that is not the rule's own unit (GB as the GPU's name
    counts them, times by magnitude, parameters in billions); "" where the quote writes it as is."""
    from engine.quote.messages import finite
    if not finite(value):
        return ""
    shown, shown_unit = m.shown(value, unit, gpu_memory)
    return "" if (shown, shown_unit) == (value, unit) else m.value(shown, shown_unit)


def _english(ruleset, key: str, labels: dict[str, str]) -> str:
    """A figure's English label, to say which one a suggestion means."""
    rule = ruleset.rules.get(key)
    if rule is not None:
        return rule.label.get("en") or key
    from engine.quote.messages import messages
    return _label(messages("en"), key) or key


def _input_labels(ruleset) -> dict[str, str]:
    """Each intake field's label in every language → its key."""
    from engine.paths import LANGUAGES
    from engine.quote.messages import messages
    out = {}
    for lang in LANGUAGES:
        m = messages(lang)
        for key in ruleset.input_types:
            if label := _label(m, key):
                out.setdefault(label, key)
    return out


def _label(m, key: str) -> str:
    """An intake field's name in the catalogue's language; "" for a field the form does not name."""
    try:
        return m.input_label(key) or ""
    except (KeyError, LookupError, AttributeError):
        return ""


def _places(intake) -> dict[str, str]:
    """Where each input came from; a value the form filled in names the form's line."""
    from engine.intake.form import current_form
    fields = current_form().fields
    return {key: f"the form's default, rules/intake.yaml:{fields[key].line}" if where == "default" and key in fields
            else where for key, where in intake.sources.items()}
