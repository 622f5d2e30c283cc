"""One module per `sizing` subcommand: its arguments, cheap to declare, and what it runs, imported only when it runs.

Each module declares HELP (one line), EXAMPLES ((command line, what it does), …) and
EXIT (what its exit status means); `help_for` turns them into its --help page.
"""

from __future__ import annotations

import argparse
import textwrap


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' columns as written and says every default a reader cannot guess."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default is None or default is False or default in ([], "", argparse.SUPPRESS) \
                or not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)):
            return text
        return f"{text} (default: %(default)s)"


def help_for(module) -> dict:
    """add_parser() keywords for a command module: its help, examples and exit status."""
    return help_page(module.HELP, module.EXAMPLES, getattr(module, "EXIT", ""))


def help_page(summary: str, examples: tuple[tuple[str, str], ...], exit_status: str = "") -> dict:
    """add_parser() keywords: the summary, then examples (one column, or two lines each when
    a line would not fit in 79 characters) and the exit status after the options."""
    width = max(len(line) for line, _ in examples) + 2
    if width + max(len(what) for _, what in examples) <= 77:
        lines = [f"  {line:<{width}}{what}".rstrip() for line, what in examples]
    else:
        lines = [f"  {line}" + (f"\n      {what}" if what else "") for line, what in examples]
    epilog = "examples:\n" + "\n".join(lines) + "\n"
    if exit_status:
        epilog += "\n" + textwrap.fill(f"exit status: {exit_status}", 79, subsequent_indent="  ") + "\n"
    return {"help": summary, "description": summary[:1].upper() + summary[1:] + ".", "epilog": epilog,
            "formatter_class": HelpFormatter}
