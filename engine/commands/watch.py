"""`sizing watch DIR`: the folder service (engine/services/watch)."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.problems import SizingError, report
from engine.services.watch.settings import SETTINGS, resolve_settings

HELP = "folder service: DIR/inbox in; outbox, archive, failed out"
EXAMPLES = (("sizing watch /srv/quotes", "serve the folder with the system's change events"),
            ("sizing watch /srv/quotes --polling", "an SMB/NFS share"),
            ("sizing watch /srv/quotes --config watch.toml", "settings from a file (see docs/watch.md)"),
            ("sizing watch /srv/quotes --status", "what is it doing?"))
EXIT = "0 stopped by SIGTERM or Ctrl-C after the current job; 2 bad settings; --status: 1 if no service runs."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, metavar="DIR",
                        help="service folder: DIR/inbox in; DIR/outbox, archive, failed out")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="TOML file with any of the settings below (top level or [watch])")
    parser.add_argument("--status", action="store_true",
                        help="print the service's status for DIR and exit (1 if not running)")
    for name, (default, text) in SETTINGS.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", default=None, help=text)
        elif name == "calibration":
            parser.add_argument(flag, type=Path, default=None, metavar="FILE", help=text)
        elif name.endswith("_dir"):
            parser.add_argument(flag, type=Path, default=None, metavar="DIR", help=text)
        else:
            parser.add_argument(flag, type=type(default), default=None, metavar="N",
                                help=f"{text} (default: {default})")
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)


def run(args) -> int:
    try:
        settings = resolve_settings(args)
    except SizingError as e:
        return report(e)
    import engine.job
    engine.job.CALIBRATION = settings["calibration"]     # inherited by the quoting workers
    from engine.services.watch.service import Service, print_status
    if args.status:
        return print_status(Path(args.dir))
    return Service(Path(args.dir), settings, parent=args.parent_pid).serve()
