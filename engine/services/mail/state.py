"""What the mail service has already done, in SQLite: replies by Message-ID, mailbox slots by UIDVALIDITY+UID."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from engine.problems import Problem, SizingError

SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key        TEXT PRIMARY KEY,  -- the request's Message-ID, or a hash of its headers
    status     TEXT NOT NULL,     -- sending | sent | silent
    recipient  TEXT,
    reply_id   TEXT,              -- Message-ID of our reply: the same on every (re)send
    reply      BLOB,              -- exact bytes to resend while status = sending
    folder     TEXT NOT NULL,     -- where the request is filed once answered
    reason     TEXT,
    attempts   INTEGER NOT NULL DEFAULT 0,
    noted      INTEGER NOT NULL DEFAULT 0,
    updated    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS slots (
    folder      TEXT NOT NULL,
    uidvalidity INTEGER NOT NULL,
    uid         INTEGER NOT NULL,
    status      TEXT NOT NULL,    -- deferred | done | retry
    until       REAL,             -- deferred: not looked at again before this time
    attempts    INTEGER NOT NULL DEFAULT 0,
    reason      TEXT,
    updated     REAL NOT NULL,
    PRIMARY KEY (folder, uidvalidity, uid)
);
CREATE TABLE IF NOT EXISTS sends (recipient TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS sends_by_recipient ON sends (recipient, at);
"""


@dataclass(frozen=True)
class Decision:
    """What was decided for one request (by its key) and how far it got."""

    key: str
    status: str
    recipient: str | None
    reply_id: str | None
    reply: bytes | None
    folder: str
    reason: str | None
    attempts: int
    noted: bool


class MailState:
    """The service's memory. Every method commits before it returns: a crash loses nothing recorded."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Two services on one state would both answer the same mail: the second refuses to start.
        self._lock = _lock(self.path)
        if self._lock is None:
            raise SizingError([Problem("state.locked", str(self.path), "another mail service is "
                                       "running on this state file.", fixer="admin")])
        # Stored replies hold prices: the database (and SQLite's -wal and -shm files, which take
        # the database's mode) is the service user's alone.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        for path in (self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm"))):
            if path.exists():
                path.chmod(0o600)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")   # "reply sent" must survive a power cut
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()
        self._lock.close()

    # -- replies, keyed on the request's Message-ID ------------------------------------------

    def decision(self, key: str) -> Decision | None:
        row = self.db.execute("SELECT key, status, recipient, reply_id, reply, folder, reason, "
                              "attempts, noted FROM replies WHERE key = ?", (key,)).fetchone()
        return Decision(*row[:8], bool(row[8])) if row else None

    def plan_reply(self, key: str, recipient: str, reply_id: str, reply: bytes, folder: str,
                   reason: str | None = None) -> None:
        """Record the intent to send, with the exact reply, before the first byte goes to SMTP."""
        self.db.execute("INSERT INTO replies (key, status, recipient, reply_id, reply, folder, reason, "
                        "updated) VALUES (?, 'sending', ?, ?, ?, ?, ?, ?)",
                        (key, recipient, reply_id, reply, folder, reason, time.time()))

    def plan_silence(self, key: str, folder: str, reason: str) -> None:
        """No reply is due (auto-reply, outsider): only the filing is left to do."""
        self.db.execute("INSERT INTO replies (key, status, folder, reason, updated) "
                        "VALUES (?, 'silent', ?, ?, ?)", (key, folder, reason, time.time()))

    def mark_sent(self, key: str) -> None:
        now = time.time()
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("UPDATE replies SET status = 'sent', reply = NULL, updated = ? "
                            "WHERE key = ?", (now, key))
            self.db.execute("INSERT INTO sends (recipient, at) SELECT recipient, ? FROM replies "
                            "WHERE key = ?", (now, key))

    def send_failed(self, key: str, reason: str) -> int:
        """Count a refused send; returns the attempts so far (the reply is kept for a retry)."""
        self.db.execute("UPDATE replies SET attempts = attempts + 1, reason = ?, updated = ? "
                        "WHERE key = ?", (reason, time.time(), key))
        return self.db.execute("SELECT attempts FROM replies WHERE key = ?", (key,)).fetchone()[0]

    def give_up(self, key: str, folder: str, reason: str) -> None:
        """The reply cannot be delivered: file the request as failed without a reply."""
        self.db.execute("UPDATE replies SET status = 'silent', reply = NULL, folder = ?, reason = ?, "
                        "updated = ? WHERE key = ?", (folder, reason, time.time(), key))

    def counts(self) -> dict[str, int]:
        """Requests by how far their answer got: sent, sending (waiting to go out), silent."""
        return dict(self.db.execute("SELECT status, COUNT(*) FROM replies GROUP BY status").fetchall())

    def mark_noted(self, key: str) -> None:
        self.db.execute("UPDATE replies SET noted = 1 WHERE key = ?", (key,))

    def replies_within(self, recipient: str, seconds: float) -> tuple[int, float | None]:
        """How many replies went to `recipient` in the last `seconds`, and when the oldest did."""
        count, oldest = self.db.execute("SELECT COUNT(*), MIN(at) FROM sends WHERE recipient = ? "
                                        "AND at > ?", (recipient, time.time() - seconds)).fetchone()
        return count, oldest

    # -- mailbox slots, keyed on folder + UIDVALIDITY + UID ----------------------------------

    def skip_uids(self, folder: str, uidvalidity: int) -> set[int]:
        """UIDs not to fetch now: finished ones, and deferred ones whose time has not come."""
        rows = self.db.execute("SELECT uid FROM slots WHERE folder = ? AND uidvalidity = ? AND "
                               "(status = 'done' OR (status = 'deferred' AND until > ?))",
                               (folder, uidvalidity, time.time()))
        return {r[0] for r in rows}

    def defer(self, folder: str, uidvalidity: int, uid: int, until: float, reason: str) -> None:
        """Leave the message in the inbox, unread, until `until` (waiting is not a failed try)."""
        self._slot(folder, uidvalidity, uid, "deferred", until, reason)
        self.db.execute("UPDATE slots SET attempts = 0 WHERE folder = ? AND uidvalidity = ? AND "
                        "uid = ?", (folder, uidvalidity, uid))

    def mark_done(self, folder: str, uidvalidity: int, uid: int, reason: str = "") -> None:
        self._slot(folder, uidvalidity, uid, "done", None, reason)

    def begin_attempt(self, folder: str, uidvalidity: int, uid: int) -> int:
        """Count a try at deciding a message, before it starts: a message that kills the
        process every time is noticed after a few restarts instead of looping for ever."""
        self.db.execute("INSERT INTO slots (folder, uidvalidity, uid, status, attempts, updated) "
                        "VALUES (?, ?, ?, 'retry', 1, ?) ON CONFLICT (folder, uidvalidity, uid) "
                        "DO UPDATE SET attempts = attempts + 1, updated = excluded.updated",
                        (folder, uidvalidity, uid, time.time()))
        return self._slot_row(folder, uidvalidity, uid)[0]

    def refund_attempt(self, folder: str, uidvalidity: int, uid: int) -> None:
        """The try was cut short by the machine (a dropped connection, a full disk), not by the
        message: it does not count towards giving up on the message."""
        self.db.execute("UPDATE slots SET attempts = MAX(0, attempts - 1) WHERE folder = ? AND "
                        "uidvalidity = ? AND uid = ?", (folder, uidvalidity, uid))

    def note_error(self, folder: str, uidvalidity: int, uid: int, reason: str) -> None:
        self.db.execute("UPDATE slots SET reason = ?, updated = ? WHERE folder = ? AND "
                        "uidvalidity = ? AND uid = ?", (reason, time.time(), folder, uidvalidity, uid))

    def last_error(self, folder: str, uidvalidity: int, uid: int) -> str:
        row = self._slot_row(folder, uidvalidity, uid)
        return (row[1] if row else "") or "unknown error"

    def _slot_row(self, folder, uidvalidity, uid):
        return self.db.execute("SELECT attempts, reason FROM slots WHERE folder = ? AND "
                               "uidvalidity = ? AND uid = ?", (folder, uidvalidity, uid)).fetchone()

    def _slot(self, folder, uidvalidity, uid, status, until, reason) -> None:
        self.db.execute("INSERT INTO slots (folder, uidvalidity, uid, status, until, reason, updated) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (folder, uidvalidity, uid) DO UPDATE "
                        "SET status = excluded.status, until = excluded.until, "
                        "reason = excluded.reason, updated = excluded.updated",
                        (folder, uidvalidity, uid, status, until, reason, time.time()))

    def prune(self, days: float = 90) -> None:
        """Forget old slots and send times; reply keys stay, so an old duplicate is still known."""
        cutoff = time.time() - days * 86400
        self.db.execute("DELETE FROM slots WHERE updated < ? AND status != 'deferred'", (cutoff,))
        self.db.execute("DELETE FROM sends WHERE at < ?", (cutoff,))


def _lock(path: Path, write_pid: bool = True):
    """The lock file beside the state, held for as long as a service runs, with its process ID
    in it; None if taken (and then left as it is: the holder's ID stays readable)."""
    lock = os.fdopen(os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600), "r+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    if write_pid:
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
    return lock


def service_running(path: Path) -> int | None:
    """The process ID of the mail service holding this state file now (0 if it did not say),
    or None when none runs (for `--status`)."""
    lock_path = Path(path).with_name(Path(path).name + ".lock")
    if not lock_path.exists():
        return None
    lock = _lock(Path(path), write_pid=False)
    if lock is not None:
        lock.close()
        return None
    try:
        return int(lock_path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0
