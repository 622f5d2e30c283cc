"""`sizing watch DIR`: the watched-folder service — inbox in; outbox, archive and failed out."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from watchdog import events as fs_events
from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from engine.problems import Problem
from engine.services.log import ServiceLog, first_line, read_status, write_status
from engine.services.rulekeeper import RuleKeeper
from engine.services.watch.claims import WorkArea, live_owners
from engine.services.watch.journal import Entry, Journal, file_sha256
from engine.services.watch.reasons import duplicate_text, reason_text
from engine.services.watch.settle import SettleTracker, ignored_reason

FOLDERS = ("inbox", "outbox", "archive", "failed", "work")
JOURNAL, LOG, STATUS = ".sizing-journal.sqlite3", ".sizing-log.jsonl", "status.json"
# Events that can mean "a file arrived or changed". Opening and reading do not count:
# loading the rules reads them, and must not trigger the next reload.
EVENTS = [fs_events.FileCreatedEvent, fs_events.FileModifiedEvent, fs_events.FileMovedEvent,
          fs_events.FileDeletedEvent, fs_events.FileClosedEvent, fs_events.FileAttribEvent,
          fs_events.DirMovedEvent, fs_events.DirCreatedEvent, fs_events.DirDeletedEvent]


# ---------------------------------------------------------------- watching

class _Forward(FileSystemEventHandler):
    """The watchdog side stays thin: it only hands paths to the service loop."""

    def __init__(self, kind: str, events: queue.SimpleQueue, wake: threading.Event):
        self.kind, self.events, self.wake = kind, events, wake

    def on_any_event(self, event) -> None:
        for path in (event.src_path, event.dest_path):
            if path:
                self.events.put((self.kind, Path(os.fsdecode(path))))
        self.wake.set()


def start_observer(targets: list[tuple[FileSystemEventHandler, Path, bool]], polling: bool,
                   poll_seconds: float, log: ServiceLog):
    """Native change events if possible; polling if asked for, or if they fail to start."""
    if not polling:
        observer = Observer()
        try:
            for handler, path, recursive in targets:
                observer.schedule(handler, str(path), recursive=recursive, event_filter=EVENTS)
            observer.start()
            return observer, type(observer).__name__
        except Exception as e:  # noqa: BLE001 — e.g. the inotify watch limit; polling still works
            log.event("observer", f"native file events unavailable ({type(e).__name__}: {e}); "
                                  "polling instead")
            _stop(observer)
    observer = PollingObserver(timeout=poll_seconds)
    for handler, path, recursive in targets:
        observer.schedule(handler, str(path), recursive=recursive, event_filter=EVENTS)
    observer.start()
    return observer, "PollingObserver"


def _stop(observer) -> None:
    # Stopping inotify can race its reader thread, which then logs a harmless error.
    logging.getLogger("watchdog.observers").setLevel(logging.CRITICAL)
    try:
        observer.stop()
        if observer.is_alive():
            observer.join(timeout=5)
    except Exception:  # noqa: BLE001 — a half-started observer may fail to stop; nothing to keep
        pass


# ---------------------------------------------------------------- the service

class Service:
    """Takes settled files from the inbox one at a time; never loses or repeats one."""

    def __init__(self, root: Path, settings: dict, parent: int | None = None):
        self.root = Path(root).resolve()
        self.settings = settings
        self.parent = parent               # set in the extra worker processes
        self.dirs = {name: self.root / name for name in FOLDERS}
        self.quiet = float(settings["quiet_seconds"])
        self.tick = max(0.02, min(0.1, self.quiet / 4))
        self.stopping: str | bool = False      # or why we are stopping
        self.current: str | None = None
        self.children: list[subprocess.Popen] = []
        self._wake = threading.Event()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._noted: set[str] = set()
        self._stuck: set[Path] = set()
        self._status_at = 0.0

    # ---- lifecycle

    def serve(self) -> int:
        for path in self.dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        self.area = WorkArea(self.dirs["work"])
        self.log = ServiceLog(self.root / LOG, pid=os.getpid(), owner=self.area.owner)
        self.journal = Journal(self.root / JOURNAL)
        self.tracker = SettleTracker(self.quiet)
        self.rules = RuleKeeper(self.settings["rules_dir"], self.settings["catalogs_dir"],
                                self.log, settle=self.quiet)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        targets = [(_Forward("inbox", self._events, self._wake), self.dirs["inbox"], False)]
        targets += [(_Forward("rules", self._events, self._wake), d, True)
                    for d in self.rules.dirs if d.is_dir()]
        observer, self.observer_kind = start_observer(
            targets, bool(self.settings["polling"]), min(1.0, self.quiet), self.log)
        self.log.event("started", f"watching {self.dirs['inbox']} ({self.observer_kind}, quiet "
                                  f"{self.quiet:g} s, rescan {self.settings['rescan_seconds']:g} s)",
                       observer=self.observer_kind)
        try:
            self.rules.poll(force_check=True)
            if self.parent is None:
                self.children = [self._spawn() for _ in range(int(self.settings["workers"]) - 1)]
            self._loop()
        finally:
            _stop(observer)
            for child in self.children:
                _wait_child(child)
            for s, handler in previous.items():
                signal.signal(s, handler)
            self._write_status("stopped", force=True)
            self.area.close()
            self.journal.close()
            self.log.event("stopped", "service stopped")
        return 0

    def _on_signal(self, signum, frame) -> None:
        # Only a flag here: the handler runs inside the main thread, perhaps while it holds
        # the wake-up Event's lock or writes the log, so setting the Event or logging could
        # deadlock. The loop sleeps at most one tick, so it notices soon enough.
        if self.stopping:          # a second Ctrl-C: stop now; the next start redoes the file
            raise KeyboardInterrupt
        self.stopping = signal.Signals(signum).name
        for child in self.children:
            child.send_signal(signal.SIGTERM)

    def _spawn(self) -> subprocess.Popen:
        """Another watcher on the same folder; claims keep them from sharing a file."""
        s = self.settings
        command = [sys.executable, "-m", "engine", "watch", str(self.root), "--workers", "1",
                   "--parent-pid", str(os.getpid()), "--quiet-seconds", str(s["quiet_seconds"]),
                   "--rescan-seconds", str(s["rescan_seconds"]), "--rules-dir", str(s["rules_dir"]),
                   "--catalogs-dir", str(s["catalogs_dir"])] + (["--polling"] if s["polling"] else [])
        # Its own session: a terminal's Ctrl-C reaches only us, and we pass on one SIGTERM.
        return subprocess.Popen(command, start_new_session=True)

    def _loop(self) -> None:
        next_rescan = 0.0
        while not self.stopping:
            self._drain_events()
            if time.monotonic() >= next_rescan:
                self._rescan()
                next_rescan = time.monotonic() + float(self.settings["rescan_seconds"])
            self.rules.poll()
            if self.rules.current is not None:
                self._work()
            self._write_status()
            if self.parent is not None and os.getppid() != self.parent:
                self.stopping = "the main watcher process is gone"
            self._wake.wait(self.tick)
            self._wake.clear()
        self.log.event("stopping", f"{self.stopping}: stopping, no job left half-done")

    def _work(self) -> None:
        """Recovered claims first, then settled inbox files; rules may change between jobs."""
        for claimed in self.area.items():
            if self.stopping:
                return
            if claimed not in self._stuck:
                self._process(claimed)
        for path in self.tracker.ready():
            if self.stopping:
                return
            self.tracker.forget(path)
            try:
                claimed = self.area.claim(path)
            except OSError as e:     # locked on a share, or no permission: try again later
                self._note_once(path.name, f"cannot take {path.name} yet ({e.strerror})")
                continue
            if claimed is not None:
                self._process(claimed)
            self._drain_events()
            self.rules.poll()

    def _drain_events(self) -> None:
        while True:
            try:
                kind, path = self._events.get_nowait()
            except queue.Empty:
                return
            if kind == "rules":
                self.rules.changed()
            elif path.parent == self.dirs["inbox"]:
                if self._wanted(path):
                    self.tracker.changed(path)
                else:
                    self.tracker.forget(path)

    def _rescan(self) -> None:
        """Catch what arrived while down, or whose event was missed; adopt dead watchers' work."""
        for path in self.dirs.values():      # someone may have removed one: recreate it
            path.mkdir(parents=True, exist_ok=True)
        if self.area.adopt_orphans():
            self.log.event("recovered", "taking over files left in work/ by a stopped watcher")
        for path in sorted(self.dirs["inbox"].iterdir(), key=_mtime):   # oldest first
            if self._wanted(path):
                self.tracker.seen(path)
        self.rules.poll(force_check=True)
        for i, child in enumerate(self.children):
            if child.poll() is not None and not self.stopping:
                self.log.event("worker", f"worker {child.pid} exited ({child.returncode}); restarting")
                self.children[i] = self._spawn()

    def _wanted(self, path: Path) -> bool:
        """True for a file to take; anything else is logged once and left where it is."""
        if not path.exists():
            return False
        if path.is_dir():
            self._note_once(path.name, f"{path.name}/ is a folder; only files in inbox/ are read")
            return False
        reason = ignored_reason(path.name)
        if reason:
            self._note_once(path.name, f"{path.name} is {reason}; left alone")
            return False
        return True

    def _note_once(self, name: str, message: str) -> None:
        if name not in self._noted:
            self._noted.add(name)
            self.log.event("ignored", message, file=name)

    # ---- one file

    def _process(self, claimed: Path) -> None:
        token, name = claimed.parent.name, claimed.name
        self.current = name
        self._write_status()
        started = time.perf_counter()
        try:
            entry, earlier = self.journal.begin(token, name, file_sha256(claimed),
                                                self.rules.current.version,
                                                taken=self._taken_on_disk(Path(name).suffix))
            if not entry.done:           # otherwise it was answered just before a crash
                entry = self._answer(claimed, entry, earlier, started)
            self._file_original(claimed, entry)
        except Exception as e:  # noqa: BLE001 — a disk or journal error must not lose the file
            self._give_up(claimed, e)
            return
        finally:
            self.current = None
        self.log.job(file=name, outcome=entry.status, seconds=time.perf_counter() - started,
                     ruleset=entry.ruleset, outputs=[Path(o).name for o in entry.outputs],
                     problems=list(entry.problems), stem=entry.stem,
                     note=f"same content as {entry.duplicate_of}" if entry.duplicate_of else "")
        self._write_status()

    def _answer(self, claimed: Path, entry: Entry, earlier: Entry | None, started: float) -> Entry:
        """Quote the file (or copy an earlier quote of the same content), put every output
        in place, and record it in the journal — all before the original is moved."""
        tmp = claimed.parent / ".out"
        shutil.rmtree(tmp, ignore_errors=True)     # a half-done attempt before a crash
        tmp.mkdir()
        ruleset = self.rules.current
        outputs = self._copy_earlier(earlier, entry, tmp) if earlier else None
        status, problems, duplicate_of = "duplicate", [], earlier and earlier.name
        if outputs is None:
            job = self._run_job(claimed, tmp, ruleset, entry.stem)
            status, problems, duplicate_of = job.status, [str(p) for p in job.problems], None
            target = "outbox" if job.ok else "failed"
            if not job.ok:
                reason = tmp / f"{entry.stem}{Path(entry.name).suffix}.reason.txt"
                reason.write_text(reason_text(entry.name, job), encoding="utf-8")
                job.outputs.append(reason)
            # Written under temporary names in work/; each appears in place by one rename.
            for produced in job.outputs:
                os.replace(produced, self.dirs[target] / Path(produced).name)
            outputs = [f"{target}/{Path(p).name}" for p in job.outputs]
        shutil.rmtree(tmp, ignore_errors=True)
        return self.journal.finish(entry.token, status, outputs, problems,
                                   time.perf_counter() - started, ruleset.version, duplicate_of)

    def _run_job(self, claimed: Path, tmp: Path, ruleset, stem: str):
        from engine.job import Job, run_job
        try:
            return run_job(claimed, tmp, ruleset=ruleset, stem=stem)
        except Exception as e:  # noqa: BLE001 — run_job should not raise; if it does, keep the file
            job = Job(source=claimed, outdir=tmp, stem=stem, status="failed")
            job.problems.append(Problem("internal", claimed.name,
                                        f"internal error while quoting ({type(e).__name__}: {e}).",
                                        fixer="developer"))
            return job

    def _copy_earlier(self, earlier: Entry, entry: Entry, tmp: Path) -> list[str] | None:
        """The earlier quote's files under this job's stem, plus a note; None if they are gone."""
        copies = []
        for output in earlier.outputs:
            source = self.root / output
            if not output.startswith("outbox/") or source.name.endswith(".duplicate.txt"):
                continue
            copy = tmp / (entry.stem + source.name[len(earlier.stem):])
            try:
                shutil.copyfile(source, copy)
            except OSError:
                return None        # someone cleared the outbox: quote it afresh instead
            copies.append(copy)
        if not copies:
            return None
        note = tmp / f"{entry.stem}.duplicate.txt"
        note.write_text(duplicate_text(entry.name, earlier, [c.name for c in copies]),
                        encoding="utf-8")
        copies.append(note)
        for copy in copies:
            os.replace(copy, self.dirs["outbox"] / copy.name)
        return [f"outbox/{c.name}" for c in copies]

    def _file_original(self, claimed: Path, entry: Entry) -> None:
        folder = self.dirs["archive" if entry.status in ("quoted", "duplicate") else "failed"]
        suffix = Path(entry.name).suffix
        dest = folder / f"{entry.stem}{suffix}"
        if dest.exists():                 # put there by hand after the stem was chosen: keep both
            dest = folder / f"{entry.stem}-{entry.token}{suffix}"
        os.replace(claimed, dest)
        shutil.rmtree(claimed.parent, ignore_errors=True)

    def _give_up(self, claimed: Path, error: Exception) -> None:
        """Last resort for an error in the service itself: the file goes to failed/ with a note,
        or, if even that fails, stays in work/ to be redone at the next start."""
        name = claimed.name
        self.log.event("error", f"{name}: {type(error).__name__}: {error}", file=name)
        try:
            dest = self.dirs["failed"] / f"{Path(name).stem}-{claimed.parent.name}{Path(name).suffix}"
            (dest.parent / f"{dest.name}.reason.txt").write_text(
                f"{name} could not be quoted because of an error in the folder service, not in the "
                f"file ({type(error).__name__}: {error}). Please tell the sizing team; the file is "
                "kept here and can be dropped into the inbox again.\n", encoding="utf-8")
            os.replace(claimed, dest)
            shutil.rmtree(claimed.parent, ignore_errors=True)
        except Exception:  # noqa: BLE001 — leave it in work/; never retry it in a tight loop
            self._stuck.add(claimed)

    def _taken_on_disk(self, suffix: str):
        """A stem is taken if a file in outbox, archive or failed already uses it."""
        names: set[str] | None = None

        def taken(stem: str) -> bool:
            nonlocal names
            if names is None:
                names = {n for d in ("outbox", "archive", "failed") for n in os.listdir(self.dirs[d])}
            return stem + suffix in names or any(n.startswith(stem + ".") for n in names)
        return taken

    # ---- status

    def _write_status(self, state: str | None = None, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._status_at < 0.5:
            return
        self._status_at = now
        state = state or ("stopping" if self.stopping else "running" if self.rules.current
                          else "waiting for a valid rule set")
        try:
            folder = collect_status(self.root, self.journal)
            if state == "stopped":            # our own lock is held until the very end
                folder["watchers"] -= 1
                state = "running" if folder["watchers"] else state
            write_status(self.root / STATUS, {
                "service": "sizing watch", "state": state, "pid": os.getpid(),
                "observer": self.observer_kind, "updated": time.time(),
                "working_on": self.current, **folder, "ruleset": self.rules.status()})
        except (OSError, sqlite3.Error) as e:     # the status is a convenience; the work goes on
            self.log.event("error", f"cannot write {STATUS}: {e}")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _wait_child(child: subprocess.Popen) -> None:
    try:
        child.wait(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()          # its claim stays in work/ and is redone at the next start


# ---------------------------------------------------------------- status

def collect_status(root: Path, journal: Journal | None) -> dict:
    """What any watcher (or `--status`) can see of the whole folder, whoever is running."""
    inbox = root / "inbox"
    waiting = sorted(e.name for e in os.scandir(inbox)
                     if e.is_file() and not ignored_reason(e.name)) if inbox.is_dir() else []
    working = sorted(p.name for p in (root / "work").glob("*/*/*")
                     if not p.name.startswith(".") and p.is_file())
    status = {"watchers": len(live_owners(root / "work")), "queue": len(waiting),
              "in_progress": working, "done": {}, "last_errors": []}
    if journal is not None:
        status["done"] = journal.counts()
        status["last_errors"] = [
            {"file": e.name, "outcome": e.status, "finished": e.finished,
             "problems": [first_line(p) for p in e.problems[:5]]}
            for e in journal.recent_problems(5)]
    return status


def print_status(root: Path) -> int:
    """`sizing watch DIR --status`: live counts, and the rule-set state from status.json."""
    root = Path(root)
    journal = Journal(root / JOURNAL) if (root / JOURNAL).exists() else None
    live = collect_status(root, journal)
    if journal is not None:
        journal.close()
    saved = read_status(root / STATUS) or {}
    n = live["watchers"]
    print(f"sizing watch {root}: " + (f"running ({n} watcher{'s' * (n != 1)})" if n else "not running"))
    print(f"  queue: {live['queue']} waiting in inbox, {len(live['in_progress'])} in progress"
          + (f" ({', '.join(live['in_progress'])})" if live["in_progress"] else ""))
    rules = saved.get("ruleset") or {}
    if rules:
        line = f"  rule set: {rules.get('version') or 'none'}"
        if rules.get("problems"):
            line += (" — the latest edit is broken; running on this last good set:"
                     if rules.get("version") else " — no valid rule set yet; files wait:")
        print(line)
        for problem in rules.get("problems") or []:
            print(f"    {first_line(problem)}")
    print("  done: " + (", ".join(f"{c} {s}" for s, c in sorted(live["done"].items()))
                        or "nothing yet"))
    if live["last_errors"]:
        print("  last errors:")
    for error in live["last_errors"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(error["finished"] or 0))
        print(f"    {when} {error['file']} ({error['outcome']}): "
              + (error["problems"][0] if error["problems"] else ""))
    return 0 if n else 1
