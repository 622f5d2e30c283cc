"""Writing files so that a reader (a watcher, a mail client, a person) never sees half of one."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

# Asked of the kernel as for any new file; it takes away what the user's umask forbids
# (022 → -rw-r--r--, so a shared outbox or a template handed to a colleague is readable).
NEW_FILE_MODE = 0o666


def write_atomic(path: Path, data: bytes, mode: int = NEW_FILE_MODE) -> None:
    """Write beside the target under a dot-name, then rename: watchers never see half a file.

    `mode` is what is asked for; the umask takes its share as for any new file.
    """
    path = Path(path)
    fd, tmp = _create_beside(path, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _create_beside(path: Path, mode: int) -> tuple[int, Path]:
    """A new, exclusively created temporary file next to `path`.

    Not tempfile.mkstemp: it forces -rw------- whatever the umask, and changing the
    umask to read it would race with the services' other threads.
    """
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                           mode), tmp
        except FileExistsError:
            continue
