"""`rules check` in full: the loader's checks, then values, choices and units; errors, and warnings that hold
an edit until they are acknowledged beside the value (`accept: "…why…"`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.authoring.choices import check_choices
from engine.authoring.units import check_units
from engine.authoring.values import Findings, check_values
from engine.problems import Problem, SizingError


@dataclass
class Checked:
    """What `rules check` found in one folder; `ruleset` is None when it cannot even be loaded."""

    ruleset: Any
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)        # acknowledged ones included

    @property
    def held(self) -> list[Problem]:
        """Warnings nobody has acknowledged: they keep an edit from being published."""
        return [w for w in self.warnings if not w.context.get("accepted")]

    @property
    def accepted(self) -> list[Problem]:
        return [w for w in self.warnings if w.context.get("accepted")]


def check_folder(rules_dir: Path, catalogs_dir: Path) -> Checked:
    """Every check of `rules check` on one pair of folders; never raises for what is in the files."""
    from engine.calc.ruleset import load_ruleset
    from engine.intake.form import form_problems, load_form
    problems = list(form_problems(rules_dir))
    try:
        ruleset = load_ruleset(rules_dir, catalogs_dir)
    except SizingError as e:
        return Checked(None, problems + e.problems)
    found = Findings(errors=problems)
    if not problems:
        own = Path(rules_dir) / "intake.yaml"
        form = load_form(own) if own.exists() else load_form()
        check_values(ruleset, found)
        check_choices(ruleset, form, found.errors)
        check_units(ruleset, form, found.errors)
    return Checked(ruleset, found.errors, [*ruleset.lint, *found.warnings])


def accepted_line(problem: Problem) -> str:
    """An acknowledged warning in one line: where, what, and the reason given."""
    what = problem.message.split(" If it is right")[0].split("; check the figure")[0].split("; tensor cores")[0]
    return f"{problem.where}: accepted: {what.rstrip('.')} — \"{problem.context['accepted']}\""
