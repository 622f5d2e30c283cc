"""What a long-running service tells its operators: one line per job or event, and a status file."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from engine.files import write_atomic


class ServiceLog:
    """Each record goes to `stream` as a readable line and to `jsonl` as one JSON object.

    The JSON file is opened in append mode for every record: appends of one short line
    from several processes land whole, and log rotation by rename is picked up at once.
    """

    def __init__(self, jsonl: Path | None, stream: TextIO | None = None, **always: Any):
        self.jsonl = Path(jsonl) if jsonl else None
        self.stream = stream if stream is not None else sys.stderr
        self.always = always      # fields added to every JSON record (e.g. pid, service)

    def job(self, *, file: str, outcome: str, seconds: float, ruleset: str,
            outputs: list[str] = (), problems: list[str] = (), note: str = "", **extra) -> None:
        """The one line per job: file, outcome, duration, rule-set version."""
        text = f"{outcome:<9} {file}  {seconds:.2f} s  rules {ruleset or '-'}"
        if outputs:
            text += "  → " + ", ".join(outputs)
        if note:
            text += f"  ({note})"
        if problems:
            text += f"  — {first_line(problems[0])}"
            if len(problems) > 1:
                text += f" (+{len(problems) - 1} more)"
        self._write(text, event="job", file=file, outcome=outcome, seconds=round(seconds, 4),
                    ruleset=ruleset, outputs=list(outputs), problems=list(problems), note=note,
                    **extra)

    def event(self, event: str, message: str, **fields) -> None:
        """Anything else worth a line: started, ignored, rules loaded or broken, stopped."""
        self._write(f"{event:<9} {message}", event=event, message=message, **fields)

    def _write(self, text: str, **record) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        # A full disk or a closed stderr must not stop the service: logging is best effort.
        try:
            print(f"{stamp} {text}", file=self.stream, flush=True)
        except (OSError, ValueError):
            pass
        if self.jsonl is None:
            return
        line = json.dumps({"time": round(now, 3), **self.always, **record},
                          ensure_ascii=False, default=str) + "\n"
        try:
            with open(self.jsonl, "a", encoding="utf-8", errors="backslashreplace") as f:
                f.write(line)
        except OSError as e:
            print(f"{stamp} cannot write {self.jsonl}: {e}", file=sys.stderr)


def iso_time(seconds: float | None) -> str | None:
    """A Unix time as ISO 8601 in local time with its offset (2025-03-01T10:12:04+01:00)."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def first_line(text: str) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def write_status(path: Path, status: dict) -> None:
    """Replace the status file atomically, so a reader never sees half of it."""
    text = json.dumps(status, ensure_ascii=False, indent=2, default=str) + "\n"
    write_atomic(Path(path), text.encode("utf-8"))


def read_status(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
