"""`sizing mail --config FILE`: the mail service (engine/services/mail)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "mail service: IMAP in, SMTP replies"
EXAMPLES = (("sizing mail --config mail.toml", "serve: answer each request in the mailbox by reply"),
            ("sizing mail --config mail.toml --once", "one pass over the mailbox, then exit (from cron)"),
            ("sizing mail --config mail.toml --status", "what is it doing? (degraded: why)"))
EXIT = ("0 stopped (SIGTERM or Ctrl-C) or the pass is done; 2 a bad config file; 1 --once failed "
        "(said on stderr); --status: 1 if no service runs.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, metavar="FILE",
                        help="the mail service's TOML file (see docs/mail.md)")
    parser.add_argument("--once", action="store_true", help="check the mailbox once, then exit")
    parser.add_argument("--status", action="store_true",
                        help="print what the running service last reported and exit (1 if none runs)")


def run(args) -> int:
    from engine.services.mail.service import print_status, run_service
    if args.status:
        return print_status(args.config)
    if (code := _use_calibration(args.config)) is not None:
        return code
    return run_service(args.config, once=args.once)


def _use_calibration(config_file) -> int | None:
    """The `[service] calibration` file, read before the service starts (a bad one stops it, exit 2);
    the quoting workers inherit it. A config that does not load is left to the service to report."""
    import engine.job
    from engine.calc.calibration import load_calibration
    from engine.problems import SizingError, report
    from engine.services.mail.config import load_config
    try:
        path = load_config(config_file).calibration
    except (SizingError, OSError):
        return None
    try:
        engine.job.CALIBRATION = load_calibration(path) if path else None
    except SizingError as e:
        return report(e)
    return None
