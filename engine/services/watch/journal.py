"""The folder service's SQLite journal: one row per claimed file, found again by claim or content."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from engine.files import output_stem

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS jobs (
        token        TEXT PRIMARY KEY,      -- the claim: one per file taken from the inbox
        name         TEXT NOT NULL,         -- file name as dropped
        stem         TEXT NOT NULL UNIQUE,  -- names this job's outputs (unique: none is overwritten)
        sha256       TEXT NOT NULL,
        ruleset      TEXT NOT NULL,
        status       TEXT NOT NULL,         -- working | quoted | duplicate | invalid | failed
        duplicate_of TEXT,                  -- name of the earlier file whose quote answered this one
        outputs      TEXT NOT NULL DEFAULT '[]',  -- JSON list of "outbox/<file>" or "failed/<file>"
        problems     TEXT NOT NULL DEFAULT '[]',  -- JSON list of "where: message"
        started      REAL NOT NULL,
        finished     REAL,
        seconds      REAL)""",
    "CREATE INDEX IF NOT EXISTS jobs_by_content ON jobs (sha256, ruleset, status)",
    "CREATE INDEX IF NOT EXISTS jobs_by_finish ON jobs (finished)",
)

ANSWERED = ("quoted", "duplicate")
# How long a watcher waits for another one's transaction (they last milliseconds). Longer
# means someone else holds the journal: the service says so and retries later.
LOCK_WAIT_SECONDS = 3.0


@dataclass(frozen=True)
class Entry:
    token: str
    name: str
    stem: str
    sha256: str
    ruleset: str
    status: str
    duplicate_of: str | None
    outputs: tuple[str, ...]
    problems: tuple[str, ...]
    started: float
    finished: float | None
    seconds: float | None

    @property
    def done(self) -> bool:
        return self.status != "working"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Journal:
    """Safe to share between several watcher processes: WAL mode, and every decision that
    must not race (which stem a job gets) runs inside one `BEGIN IMMEDIATE` transaction."""

    def __init__(self, path: Path, readonly: bool = False):
        self.path = Path(path)
        if readonly:                     # `--status`: look, never wait for a writer
            self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                      timeout=LOCK_WAIT_SECONDS, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            return
        self.db = sqlite3.connect(self.path, timeout=LOCK_WAIT_SECONDS, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")   # WAL + NORMAL survives process crashes
            with self._transaction():
                for statement in SCHEMA:
                    self.db.execute(statement)
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    def begin(self, token: str, name: str, sha256: str, ruleset: str,
              taken: Callable[[str], bool] = lambda stem: False) -> tuple[Entry, Entry | None]:
        """Record a claimed file, or find it again after a crash.

        Returns (this job's entry, an earlier answered job with the same content and rule
        set, if any). A new job gets the file's stem, or `stem-2`, `stem-3`… when an
        earlier job (in the journal, or `taken` on disk) already used it.
        """
        with self._transaction():
            row = self._get(token)
            if row is None:
                stem = self._free_stem(output_stem(name), taken)
                self.db.execute(
                    "INSERT INTO jobs (token, name, stem, sha256, ruleset, status, started) "
                    "VALUES (?, ?, ?, ?, ?, 'working', ?)",
                    (token, name, stem, sha256, ruleset, time.time()))
                row = self._get(token)
            earlier = None
            if not row.done:
                found = self.db.execute(
                    "SELECT * FROM jobs WHERE sha256 = ? AND ruleset = ? AND status IN (?, ?) "
                    "AND token != ? ORDER BY finished DESC LIMIT 1",
                    (row.sha256, row.ruleset, *ANSWERED, token)).fetchone()
                earlier = _entry(found) if found else None
            return row, earlier

    def finish(self, token: str, status: str, outputs: list[str], problems: list[str],
               seconds: float, ruleset: str, duplicate_of: str | None = None) -> Entry:
        with self._transaction():
            self.db.execute(
                "UPDATE jobs SET status = ?, outputs = ?, problems = ?, seconds = ?, ruleset = ?, "
                "duplicate_of = ?, finished = ? WHERE token = ?",
                (status, json.dumps(outputs), json.dumps(problems, ensure_ascii=False),
                 seconds, ruleset, duplicate_of, time.time(), token))
            return self._get(token)

    def get(self, token: str) -> Entry | None:
        return self._get(token)

    def recent_problems(self, limit: int = 10) -> list[Entry]:
        """The last jobs that ended in `invalid` or `failed`, newest first."""
        rows = self.db.execute(
            "SELECT * FROM jobs WHERE status IN ('invalid', 'failed') "
            "ORDER BY finished DESC LIMIT ?", (limit,)).fetchall()
        return [_entry(r) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self.db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        return {status: n for status, n in rows}

    def _free_stem(self, stem: str, taken: Callable[[str], bool]) -> str:
        candidate, n = stem, 1
        while (self.db.execute("SELECT 1 FROM jobs WHERE stem = ?", (candidate,)).fetchone()
               or taken(candidate)):
            n += 1
            candidate = f"{stem}-{n}"
        return candidate

    def _get(self, token: str) -> Entry | None:
        row = self.db.execute("SELECT * FROM jobs WHERE token = ?", (token,)).fetchone()
        return _entry(row) if row else None

    @contextmanager
    def _transaction(self):
        # BEGIN IMMEDIATE takes the write lock up front, so two processes can never both
        # read "this stem is free" and then both insert it.
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:   # SQLite may have rolled back already (a full disk)
                with suppress(sqlite3.Error):
                    self.db.execute("ROLLBACK")
            raise


def _entry(row: sqlite3.Row) -> Entry:
    return Entry(token=row["token"], name=row["name"], stem=row["stem"], sha256=row["sha256"],
                 ruleset=row["ruleset"], status=row["status"], duplicate_of=row["duplicate_of"],
                 outputs=tuple(json.loads(row["outputs"])),
                 problems=tuple(json.loads(row["problems"])), started=row["started"],
                 finished=row["finished"], seconds=row["seconds"])
