"""A problem is a frozen record: what is wrong, where, and who can fix it."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any


class SizingError(Exception):
    """Raised when a stage must stop; carries every problem it collected."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, a rule file or a catalog.

    `where` is `Sheet!Cell`, `file:line` or an intake key; `message` is the
    human sentence (already in the reader's language); `code` is stable for
    tests and tooling; `fixer` says who can fix it (sales, rules, developer).
    """

    code: str
    where: str
    message: str
    fixer: str = "sales"
    value: Any = None
    context: dict = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


def report(error: SizingError) -> int:
    """A command that cannot start: every problem on stderr, one a line; exit status 2."""
    for problem in error.problems:
        print(problem, file=sys.stderr)
    return 2
