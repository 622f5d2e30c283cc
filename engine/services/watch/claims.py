"""Claiming inbox files for one watcher process, and adopting the claims of watchers that died."""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import time
from pathlib import Path

from engine.files import NAME_LIMIT_BYTES, split_name


class WorkArea:
    """This process's own folder under DIR/work, held by an flock for as long as it lives.

    A claimed file is renamed into a folder of its own, `<owner>/<token>/<name>`, so it keeps
    its name (messages quote it) and its temporary outputs sit beside it in `.out/`. When a
    process dies, even by `kill -9`, the kernel drops its lock, and whichever watcher looks
    next adopts its claims.
    """

    def __init__(self, work: Path):
        self.work = work
        self.owner = f"{os.getpid()}-{secrets.token_hex(3)}"
        # Built under a hidden name and renamed into view with the lock already held, so no
        # one can take a half-made folder for the leftovers of a dead process.
        making = work / f".new-{self.owner}"
        making.mkdir()
        self._lock = os.open(making / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.dir = work / self.owner
        os.rename(making, self.dir)

    def claim(self, path: Path) -> Path | None:
        """Atomically take `path` from the inbox; None if another process was faster.

        The claimed copy gets a printable name (see `clean_name`), in the same rename."""
        folder = self.dir / f"{time.time_ns():x}{secrets.token_hex(3)}"
        folder.mkdir()
        name = clean_name(path.name)
        if len(name.encode()) > NAME_LIMIT_BYTES:     # bytes that were not UTF-8 grew into U+FFFD
            name = "".join(split_name(name))
        claimed = folder / name
        try:
            os.rename(path, claimed)
        except FileNotFoundError:
            folder.rmdir()
            return None
        return claimed

    def items(self) -> list[Path]:
        """Claimed files not yet finished (after a crash, or adopted); empty claims are cleared."""
        found = []
        for folder in sorted(self.dir.iterdir()):
            if folder.name.startswith(".") or not folder.is_dir():
                continue
            files = [p for p in folder.iterdir()      # a claimed link or pipe too, never followed
                     if not p.name.startswith(".") and (p.is_symlink() or not p.is_dir())]
            if files:
                found.append(files[0])
            else:                     # the original was filed just before a crash
                shutil.rmtree(folder, ignore_errors=True)
        return found

    def adopt_orphans(self) -> int:
        """Move the claims of dead watchers into this area; returns how many."""
        adopted = 0
        for other in self.work.iterdir():
            if other == self.dir or not other.is_dir():
                continue
            lock = _try_lock(other / ".lock")
            if lock is None:
                if other.name.startswith(".new-") and time.time() - _mtime(other) > 60:
                    shutil.rmtree(other, ignore_errors=True)   # died while being made
                continue
            try:
                for claim in other.iterdir():
                    if not claim.name.startswith(".") and claim.is_dir():
                        try:
                            os.rename(claim, self.dir / claim.name)
                            adopted += 1
                        except FileNotFoundError:
                            pass
                shutil.rmtree(other, ignore_errors=True)
            finally:
                os.close(lock)
        return adopted

    def close(self) -> None:
        if not self.items():
            shutil.rmtree(self.dir, ignore_errors=True)
        os.close(self._lock)


def clean_name(name: str) -> str:
    """A file name every later step can print, log and store: bytes that are not UTF-8
    become U+FFFD and control characters `_` (a newline in a name would split a log line)."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return "".join("_" if ord(c) < 32 or ord(c) == 127 else c for c in text)


def _try_lock(path: Path) -> int | None:
    """An fd holding the lock at `path` if no live process holds it; None otherwise."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def live_owners(work: Path) -> list[str]:
    """Work areas whose process is alive (its lock cannot be taken)."""
    owners = []
    for area in sorted(work.iterdir()) if work.is_dir() else []:
        if area.is_dir() and not area.name.startswith("."):
            fd = _try_lock(area / ".lock")
            if fd is None:
                owners.append(area.name)
            else:
                os.close(fd)
    return owners
