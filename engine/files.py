"""Writing files so that a reader (a watcher, a mail client, a person) never sees half of one,
and telling a fault of the disk (full, read-only, gone) from a fault of the file being read."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

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


def write_atomic(path: Path, data: bytes) -> None:
    """Write beside the target under a dot-name, then rename: watchers never see half a file.
    On any error (a full disk) the target is left as it was: whole, or not there at all."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def environment_fault(error: BaseException, where: str | os.PathLike | None = None) -> str | None:
    """A plain sentence for an OSError caused by the machine (full disk, no permission, a share
    that vanished); None for anything else, which is then a fault of the file or a bug."""
    if not isinstance(error, OSError) or error.errno not in ENVIRONMENT_ERRORS:
        return None
    place = where or error.filename2 or error.filename or "the disk"
    return ENVIRONMENT_ERRORS[error.errno].format(where=os.fsdecode(place))
