"""The processed-state store: replies by Message-ID, mailbox slots by UIDVALIDITY+UID, one owner."""

from __future__ import annotations

import sqlite3
import time

import pytest

from engine.problems import SizingError
from engine.services.mail.state import MailState


@pytest.fixture
def state(tmp_path):
    s = MailState(tmp_path / "state.sqlite3")
    yield s
    s.close()


def test_a_planned_reply_survives_a_restart_with_its_exact_bytes(tmp_path):
    first = MailState(tmp_path / "s.db")
    first.plan_reply("<m@x>", "a@example.com", "<reply@x>", b"bytes", "Processed", "quoted")
    first.close()                                     # as if the process died here
    again = MailState(tmp_path / "s.db")
    decision = again.decision("<m@x>")
    assert (decision.status, decision.reply, decision.reply_id) == ("sending", b"bytes", "<reply@x>")
    again.mark_sent("<m@x>")
    decision = again.decision("<m@x>")
    assert decision.status == "sent" and decision.reply is None   # no need to keep the bytes
    assert again.replies_within("a@example.com", 3600)[0] == 1
    again.close()


def test_the_key_is_unique_so_a_duplicate_cannot_plan_a_second_reply(state):
    state.plan_reply("<m@x>", "a@example.com", "<r1@x>", b"1", "Processed")
    with pytest.raises(sqlite3.IntegrityError):
        state.plan_reply("<m@x>", "a@example.com", "<r2@x>", b"2", "Processed")


def test_slots_are_per_uidvalidity(state):
    state.mark_done("INBOX", 1, 7)
    state.defer("INBOX", 1, 8, time.time() + 60, "rate limit")
    state.defer("INBOX", 1, 9, time.time() - 1, "rate limit")      # its time has come
    assert state.skip_uids("INBOX", 1) == {7, 8}
    assert state.skip_uids("INBOX", 2) == set()                      # a recreated mailbox
    assert state.skip_uids("Other", 1) == set()


def test_attempts_count_and_waiting_does_not(state):
    assert [state.begin_attempt("INBOX", 1, 5) for _ in range(3)] == [1, 2, 3]
    state.note_error("INBOX", 1, 5, "ValueError: x")
    assert state.last_error("INBOX", 1, 5) == "ValueError: x"
    state.defer("INBOX", 1, 5, time.time() - 1, "rate limit")
    assert state.begin_attempt("INBOX", 1, 5) == 1


def test_refusals_are_counted_and_then_given_up(state):
    state.plan_reply("<m@x>", "a@example.com", "<r@x>", b"1", "Processed")
    assert state.send_failed("<m@x>", "550 no") == 1
    state.give_up("<m@x>", "Failed", "550 no")
    decision = state.decision("<m@x>")
    assert (decision.status, decision.folder, decision.reply) == ("silent", "Failed", None)


def test_only_one_service_per_state_file(state, tmp_path):
    with pytest.raises(SizingError, match="another mail service"):
        MailState(tmp_path / "state.sqlite3")


def test_the_database_and_the_stored_replies_are_the_owners_alone(tmp_path):
    """Stored replies carry prices: the database, SQLite's -wal/-shm and the lock are 0600,
    also when the process's umask would let others read, and an older 0644 file is tightened."""
    import os
    import stat
    old = tmp_path / "old.sqlite3"
    sqlite3.connect(old).close()
    old.chmod(0o644)
    previous = os.umask(0o022)
    try:
        for path in (tmp_path / "new.sqlite3", old):
            state = MailState(path)
            state.plan_reply("<m@x>", "a@example.com", "<r@x>", b"price: 12 345 USD", "Processed")
            files = [path, *(path.with_name(path.name + s) for s in ("-wal", "-shm", ".lock"))]
            assert all(f.exists() for f in files)
            for f in files:
                assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
            state.close()
    finally:
        os.umask(previous)
