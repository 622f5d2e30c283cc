"""Which inbox files are intakes, and which of those have finished arriving."""

from __future__ import annotations

import fnmatch
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

# Files that show up in shared folders but are never intakes: they are logged and left
# alone, never "failed". Checked in order; the first match names the reason.
IGNORED = (
    ("~$*", "an Office lock file (the workbook is open somewhere)"),
    (".*", "a hidden file"),
    ("*.tmp", "a temporary file"),
    ("*.temp", "a temporary file"),
    ("*.part", "a download or copy still in progress"),
    ("*.partial", "a download or copy still in progress"),
    ("*.crdownload", "a download still in progress"),
    ("*.download", "a download still in progress"),
    ("*.swp", "an editor swap file"),
    ("*~", "an editor backup file"),
    ("thumbs.db", "a Windows thumbnail cache"),
    ("desktop.ini", "a Windows folder settings file"),
    ("icon\r", "a macOS folder icon file"),
)


SPECIAL_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                 (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def ignored_reason(name: str) -> str | None:
    """Why a file name is not an intake to take (None if it should be taken)."""
    lowered = name.lower()
    for pattern, reason in IGNORED:
        if fnmatch.fnmatchcase(lowered, pattern):
            return reason
    return None


def signature(path: Path) -> tuple[int, int, int] | None:
    """What must stay unchanged for a file to count as finished; None if it is gone, or a folder.

    Looked at, never followed or opened: a link, a named pipe or a device settles as itself,
    so that the service can move it aside with a note (see `special_kind`)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return None
    # The inode catches a file replaced by rename; size and mtime catch writes. `cp -p`
    # sets an old mtime at the end of the copy, which still counts as a change.
    return st.st_ino, st.st_size, st.st_mtime_ns


def special_kind(path: Path) -> str | None:
    """What `path` is when it is not a plain file ("a symbolic link", "a named pipe (FIFO)"…);
    None for a plain file. Never follows or opens it: reading a link would read its target with
    the service's rights, and opening a pipe waits for ever."""
    mode = os.lstat(path).st_mode
    for test, kind in SPECIAL_KINDS:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a plain file"


@dataclass
class _Entry:
    sig: tuple[int, int, int]
    since: float        # when this signature was first seen (monotonic clock)
    first: float        # when the file was first seen, for first-in first-out


class SettleTracker:
    """Tracks candidate files until their size and mtime stay unchanged for `quiet` seconds.

    The quiet period is measured on our own clock from when we last saw a change, never
    from the file's mtime, so copies that keep an old timestamp still wait their turn.
    """

    def __init__(self, quiet: float, clock=time.monotonic):
        self.quiet = quiet
        self.clock = clock
        self._entries: dict[Path, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, path: Path) -> bool:
        return Path(path) in self._entries

    def changed(self, path: Path) -> None:
        """A file-system event touched `path`: (re)start its quiet period."""
        self._observe(Path(path), restart=True)

    def seen(self, path: Path) -> None:
        """A scan found `path`: track it if new, without delaying a file already waiting."""
        self._observe(Path(path), restart=False)

    def forget(self, path: Path) -> None:
        self._entries.pop(Path(path), None)

    def ready(self) -> list[Path]:
        """Files quiet for long enough, oldest first; they stay tracked until forgotten."""
        now = self.clock()
        done = []
        for path in list(self._entries):
            entry = self._observe(path, restart=False)
            if entry is not None and now - entry.since >= self.quiet:
                done.append((entry.first, path))
        return [path for _, path in sorted(done)]

    def _observe(self, path: Path, restart: bool) -> _Entry | None:
        sig = signature(path)
        if sig is None:
            self._entries.pop(path, None)
            return None
        now = self.clock()
        entry = self._entries.get(path)
        if entry is None:
            entry = self._entries[path] = _Entry(sig, now, now)
        elif restart or entry.sig != sig:
            entry.sig, entry.since = sig, now
        return entry
