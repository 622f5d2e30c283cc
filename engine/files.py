"""Writing files so that a reader (a watcher, a mail client, a person) never sees half of one,
and telling a fault of the disk (full, read-only, gone) from a fault of the file being read."""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
from pathlib import Path

# Asked of the kernel as for any new file; it takes away what the user's umask forbids
# (022 → -rw-r--r--, so a shared outbox or a template handed to a colleague is readable).
NEW_FILE_MODE = 0o666

# OSErrors that say something about the machine, not about the content of a file: the work
# is worth retrying unchanged once someone frees space, fixes a permission or remounts a share.
# Each maps to a phrase that names the place; `{where}` is a path.
ENVIRONMENT_ERRORS = {
    errno.ENOSPC: "no space left on {where}",
    errno.EDQUOT: "the disk quota is used up on {where}",
    errno.EFBIG: "a file size limit was reached writing {where}",
    errno.EROFS: "{where} is on a read-only disk",
    errno.EACCES: "no permission to read or write {where}",
    errno.EPERM: "no permission to read or write {where}",
    errno.ENOENT: "{where} is missing (a folder removed, or a network share gone?)",
    errno.ENOTDIR: "{where} is missing (a folder replaced by a file?)",
    errno.EXDEV: "cannot move files into {where} (a different or read-only mount)",
    errno.EIO: "cannot read or write {where} (input/output error)",
    errno.ESTALE: "cannot reach {where} (the network share went away)",
    errno.ENOTCONN: "cannot reach {where} (the network share is disconnected)",
    errno.EHOSTDOWN: "cannot reach {where} (the file server is down)",
    errno.ETIMEDOUT: "cannot reach {where} (the file server does not answer)",
    errno.EBUSY: "{where} is in use by another program",
    errno.EMFILE: "too many files are open (while using {where})",
    errno.ENFILE: "too many files are open on this machine (while using {where})",
    errno.EAGAIN: "the machine is out of processes or memory (while using {where})",
    errno.ENOMEM: "the machine is out of memory (while using {where})",
}


def write_atomic(path: Path, data: bytes, mode: int = NEW_FILE_MODE) -> None:
    """Write beside the target under a dot-name, then rename: watchers never see half a file.

    `mode` is what is asked for; the umask takes its share as for any new file. On any error
    (a full disk) the target is left as it was: whole, or not there at all.
    """
    path = Path(path)
    fd, tmp = _create_beside(path, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        if e.filename is None:        # a failed write names no file; a full disk's note must say which
            e.filename = os.fspath(path)
        raise
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


def environment_fault(error: BaseException, where: str | os.PathLike | None = None) -> str | None:
    """A plain sentence for an OSError caused by the machine (full disk, no permission, a share
    that vanished); None for anything else, which is then a fault of the file or a bug."""
    if not isinstance(error, OSError) or error.errno not in ENVIRONMENT_ERRORS:
        return None
    place = where or error.filename2 or error.filename or "the disk"
    return ENVIRONMENT_ERRORS[error.errno].format(where=os.fsdecode(place))


# ---------------------------------------------------------------- output names

# What the longest ending a service adds to a stem needs: `.<stem><suffix>.reason.txt.<8 hex>.tmp`
# while a note is written (≈ 42 bytes with a 16-byte suffix), `<stem>-<claim token><suffix>` when
# a file of the same name is already filed, `-2`… when a stem was used before. 255 bytes is the
# name limit of ext4, XFS, Btrfs, tmpfs and (in UTF-16 units, which this stays within) NTFS.
NAME_LIMIT_BYTES = 255
STEM_LIMIT_BYTES = 150
SUFFIX_LIMIT_BYTES = 16               # `.xlsx`, `.yaml`; anything longer is part of the stem
HASH_CHARS = 8
# Refused in names by Windows, SMB shares and some mail clients (and `/` everywhere).
REFUSED_CHARACTERS = frozenset('<>:"/\\|?*')


def split_name(name: str) -> tuple[str, str]:
    """A file name as (output stem, suffix): the stem every output of this file is named by.

    The name's own stem when every file system takes it with the endings the channels add;
    otherwise printable, without characters a file system refuses, cut on a character
    boundary, and ended with a short hash of the whole name, so that two long names sharing
    their first 140 bytes still get two stems (`Very long … name-3f2a9c1d`).
    """
    base, dot, ext = name.rpartition(".")
    suffix = dot + ext if base and dot and len((dot + ext).encode()) <= SUFFIX_LIMIT_BYTES else ""
    stem = base if suffix else name
    suffix = "".join(c for c in suffix if _allowed(c))
    clean = "".join(c if _allowed(c) else "_" for c in stem).rstrip(" .")
    if clean == stem and 0 < len(stem.encode()) <= STEM_LIMIT_BYTES:
        return stem, suffix
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    room = STEM_LIMIT_BYTES - HASH_CHARS - 1
    cut = clean.encode("utf-8", "replace")[:room].decode("utf-8", "ignore").rstrip(" .")
    return f"{cut}-{digest}" if cut else f"intake-{digest}", suffix


def output_stem(name: str) -> str:
    """The stem of `name`'s outputs (`<stem>.quote.xlsx`); see split_name."""
    return split_name(name)[0]


def _allowed(c: str) -> bool:
    return c not in REFUSED_CHARACTERS and ord(c) >= 32 and ord(c) != 127 and not 0xD800 <= ord(c) <= 0xDFFF
