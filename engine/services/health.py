"""When the machine around a service fails (a full disk, a locked journal, a mail server that is
down): what to call it, and when to try again. None of it is the fault of the file or mail at hand."""

from __future__ import annotations

import os
import sqlite3
import time

from engine.files import environment_fault
from engine.services.log import iso_time

FIRST_PAUSE = 0.5


class Unavailable(Exception):
    """Something the service relies on does not work; the work waits and is retried as it is."""


def fault_text(error: BaseException, where: str | None = None) -> str | None:
    """A plain sentence if `error` is a fault of the machine (disk, database, server); None if it
    is not, and so a fault of the input or a bug."""
    if isinstance(error, Unavailable):
        return str(error)
    if isinstance(error, sqlite3.Error):
        return _database_fault(error, where or "the database")
    return environment_fault(error, where)


def blocked_error(job) -> Exception:
    """The fault of the machine that stopped a "blocked" job in its own process, raised again
    in the service, which decides what to do about it."""
    problem = job.problems[0]
    if problem.value:
        return OSError(problem.value, os.strerror(problem.value), problem.context.get("path"))
    return Unavailable(problem.message)


def _database_fault(error: sqlite3.Error, where: str) -> str | None:
    name = getattr(error, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return f"{where} is locked by another program"
    if name.startswith("SQLITE_FULL"):
        return f"no space left for {where}"
    if name.startswith("SQLITE_READONLY"):
        return f"{where} cannot be written (read-only)"
    if name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_PROTOCOL")):
        return f"cannot read or write {where} ({error})"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return f"{where} is damaged ({error}); restore it from a backup or move it away"
    return None


class Health:
    """What is failing now (by part: "folder", "imap", "smtp"), since when, and when to try
    again: the pause doubles from half a second up to `longest` while the fault lasts."""

    def __init__(self, longest: float = 30.0, clock=time.monotonic):
        self.longest, self.clock = longest, clock
        self.troubles: dict[str, str] = {}
        self.since: float | None = None              # wall clock, for people
        self.pause = 0.0
        self.next_try = 0.0                          # monotonic

    @property
    def degraded(self) -> str | None:
        return "; ".join(self.troubles.values()) or None

    def failed(self, part: str, reason: str) -> float:
        """Record a fault; returns how long to wait before the next try."""
        if not self.troubles:
            self.since = time.time()
        self.troubles[part] = reason
        self.pause = min(self.longest, max(FIRST_PAUSE, self.pause * 2))
        self.next_try = self.clock() + self.pause
        return self.pause

    def recovered(self, part: str) -> bool:
        """The part works again; True if it had been failing."""
        was = self.troubles.pop(part, None) is not None
        if not self.troubles:
            self.pause, self.next_try, self.since = 0.0, 0.0, None
        return was

    def may_try(self) -> bool:
        return self.clock() >= self.next_try

    def status(self) -> dict | None:
        """For status files: the reason, since when, and the next try (ISO 8601)."""
        if not self.troubles:
            return None
        next_try = time.time() + max(0.0, self.next_try - self.clock())
        return {"reason": self.degraded, "since": iso_time(self.since),
                "next_try": iso_time(next_try)}
