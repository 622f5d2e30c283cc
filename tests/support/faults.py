"""Real faults for the fault-injection suite: a disk that fills, a folder that turns read-only, a
journal locked by another process, a network cable that is cut, a workbook that takes for ever;
and the invariant checkers run after every scenario."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import socket
import sqlite3
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

from engine.files import split_name

RESERVE_LEFT = 16 * 1024      # what a "full" disk still has free: less than any quote needs


# ---------------------------------------------------------------- a disk that fills up

def can_mount() -> bool:
    """Whether this machine lets the tests mount a small tmpfs (root, not in a locked container)."""
    probe = Path("/tmp") / f"sizing-mount-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                                 capture_output=True).returncode == 0
        if mounted:
            subprocess.run(["umount", str(probe)], check=True)
        return mounted
    except OSError:
        return False
    finally:
        probe.rmdir()


class SmallDisk:
    """A real tmpfs of its own, filled with a ballast file and freed by deleting it."""

    how = "tmpfs"
    words = ("no space left",)           # how the service names the fault

    def __init__(self, path: Path, size_mb: int = 16):
        self.path = path
        path.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                       check=True)
        self.ballast = path / "ballast"

    def fill(self, *processes) -> None:
        """Leave only RESERVE_LEFT bytes free (as someone's copy gone wild would)."""
        free = os.statvfs(self.path).f_bavail * os.statvfs(self.path).f_frsize
        with open(self.ballast, "ab") as f:
            f.truncate(0)
            f.write(b"\0" * max(0, free - RESERVE_LEFT))    # tmpfs counts written pages

    def free(self, *processes) -> None:
        self.ballast.unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


class FileSizeLimit:
    """Where no tmpfs can be mounted: the kernel's per-process file size limit (RLIMIT_FSIZE,
    set on the running service with prlimit) makes every larger write fail, as a full disk does."""

    how = "file size limit"
    words = ("file size limit", "disk I/O error")   # SQLite says the latter for the journal

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True)

    def fill(self, *processes) -> None:
        for pid in processes:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (RESERVE_LEFT, resource.RLIM_INFINITY))

    def free(self, *processes) -> None:
        for pid in processes:
            resource.prlimit(pid, resource.RLIMIT_FSIZE,
                             (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- a folder nobody may write

@contextlib.contextmanager
def unwritable(folder: Path):
    """The folder cannot be written for a while. Root ignores file modes, so as root it
    becomes a read-only bind mount of itself; as root where mounting is not allowed (a
    container without CAP_SYS_ADMIN), a file stands in its place, as after a botched share
    mapping; otherwise its write permission is taken away."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
    elif can_mount():
        subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        try:
            yield
        finally:
            subprocess.run(["umount", str(folder)], check=True)
    else:
        aside = folder.with_name(folder.name + ".aside")
        folder.rename(aside)
        folder.write_text("not a folder")
        try:
            yield
        finally:
            folder.unlink()
            aside.rename(folder)


# ---------------------------------------------------------------- a journal someone else holds

@contextlib.contextmanager
def locked_database(path: Path):
    """Another process opens the SQLite file and holds its write lock until released."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "db.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\nsys.stdin.read()\n",
         str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


# ---------------------------------------------------------------- a cable that can be cut

class Cable:
    """A TCP relay on loopback between a client and a server, which a test can cut: at once
    (`cut()`), or in the middle of the next large answer (`cut_after(bytes)`)."""

    def __init__(self, target_port: int):
        from support.mailservers import free_port    # late: pytest loads that module as a plugin
        self.target = target_port
        self.port = free_port()
        self._limit: int | None = None
        self._links: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self.cuts = 0
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_after(self, nbytes: int) -> None:
        """Once: the first connection that has relayed `nbytes` towards the client is cut."""
        self._limit = nbytes

    def cut(self) -> None:
        self.cuts += bool(self._drop_links())

    def close(self) -> None:
        self._listener.close()
        self._drop_links()

    def _drop_links(self) -> list:
        with self._lock:
            links, self._links = self._links, []
        for pair in links:
            _close(*pair)
        return links

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._links.append((client, server))
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, downstream: bool) -> None:
        relayed = 0
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                relayed += len(data)
                if downstream and self._limit is not None and relayed >= self._limit:
                    self._limit = None
                    self.cuts += 1
                    break
        except OSError:
            pass
        _close(source, sink)


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


# ---------------------------------------------------------------- a workbook that takes for ever

SAMPLE_XLSX = Path(__file__).resolve().parents[2] / "samples" / "seed002-bert-base-8xv100.xlsx"


def endless_workbook() -> bytes:
    """The sample intake, 14 KB, with one line added: a merged range over a sheet's last
    billion cells. The reader's size guards let it through (it is small, and a template);
    openpyxl then makes an object for every merged cell — seconds, then minutes, and
    hundreds of MB a second — so only the per-job limits stop it."""
    out = io.BytesIO()
    with zipfile.ZipFile(SAMPLE_XLSX) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as copy:
        for info in source.infolist():
            body = source.read(info.filename)
            if info.filename == "xl/worksheets/sheet3.xml":
                text = body.decode("utf-8")
                at = re.search(r"</sheetData>(<sheetProtection[^>]*/>)?", text).end()
                body = (text[:at] + '<mergeCells count="1"><mergeCell ref="A2000:XFD1048576"/>'
                        "</mergeCells>" + text[at:]).encode("utf-8")
            copy.writestr(info, body)
    return out.getvalue()


# ---------------------------------------------------------------- what must hold after every fault

def check_folder(root: Path, dropped: list[str]) -> dict[str, str]:
    """The folder service's invariants, once it is idle: every dropped file ends in exactly one
    of archive/ (its quote in outbox/) or failed/ (with a non-empty reason); nothing is left in
    work/ or the inbox; no failure note without its file; no quote for a file that failed.
    Returns {name: "archive" | "failed"}."""
    with sqlite3.connect(root / ".sizing-journal.sqlite3") as db:
        rows = db.execute("SELECT name, stem, status FROM jobs").fetchall()
    by_name = {}
    for name, stem, status in rows:
        assert status != "working", f"{name} is still marked working in the journal"
        by_name.setdefault(name, []).append((stem, status))
    ended = {}
    for name in dropped:
        assert len(by_name.get(name, [])) == 1, f"{name}: {by_name.get(name)} (want one job)"
        (stem, status), = by_name[name]
        suffix = split_name(name)[1]
        # lexists: a link, pipe or device dropped by mistake is filed as itself, never followed.
        archived = os.path.lexists(root / "archive" / f"{stem}{suffix}")
        failed = os.path.lexists(root / "failed" / f"{stem}{suffix}")
        assert archived + failed == 1, f"{name}: archived {archived}, failed {failed}"
        outputs = sorted(p.name for p in (root / "outbox").glob(f"{stem}.*"))
        if archived:
            assert status in ("quoted", "duplicate"), (name, status)
            assert any(o.endswith(".quote.json") for o in outputs), (name, outputs)
        else:
            reason = root / "failed" / f"{stem}{suffix}.reason.txt"
            assert reason.is_file() and reason.read_text(encoding="utf-8").strip(), f"{name}: no reason"
            assert outputs == [], f"{name} failed but left {outputs} in outbox/"
        ended[name] = "archive" if archived else "failed"
    claims = [p for p in (root / "work").rglob("*")
              if (p.is_symlink() or not p.is_dir()) and p.name != ".lock"]
    assert claims == [], f"left in work/: {claims}"
    assert [p.name for p in (root / "inbox").iterdir()] == [], "left in the inbox"
    for note in (root / "failed").glob("*.reason.txt"):
        assert os.path.lexists(note.parent / note.name[:-len(".reason.txt")]), f"stale note {note.name}"
        assert note.read_text(encoding="utf-8").strip(), f"empty note {note.name}"
    assert not (root / "SERVICE-DEGRADED.txt").exists(), "the degraded note outlived the fault"
    return ended


def check_mail(box, requests: list, refused: tuple[str, ...] = ()) -> None:
    """The mail service's invariants, once it is idle: every request got exactly one reply
    (none when the SMTP server refused its recipient for good, and then it is filed in Failed
    with a note), the inbox is empty, and every request is filed once."""
    replies: dict[str, int] = {}
    for record in box.sink.received:
        key = record["message"]["In-Reply-To"]
        replies[key] = replies.get(key, 0) + 1
    for request in requests:
        msgid = request["Message-ID"]
        want = 0 if msgid in refused else 1
        assert replies.get(msgid, 0) == want, f"{msgid}: {replies.get(msgid, 0)} replies, want {want}"
    assert set(replies) <= {r["Message-ID"] for r in requests}, replies
    folders = box.folders()
    assert folders["INBOX"] == [], [m["Subject"] for m in folders["INBOX"]]
    filed = [m["Message-ID"] for m in folders["Processed"] + folders["Failed"]
             if not m["Subject"].startswith("[sizing] failed")]
    assert sorted(filed) == sorted(r["Message-ID"] for r in requests), filed
    notes = [m["In-Reply-To"] for m in folders["Failed"] if m["Subject"].startswith("[sizing] failed")]
    failed = [m["Message-ID"] for m in folders["Failed"] if not m["Subject"].startswith("[sizing] failed")]
    assert sorted(notes) == sorted(failed), "every failed request has its note"
    for msgid in refused:
        assert msgid in failed, f"{msgid}, refused by SMTP, is not in Failed"


def status_file(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
