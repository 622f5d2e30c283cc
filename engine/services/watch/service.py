"""`sizing watch DIR`: the watched-folder service — inbox in; outbox, archive and failed out."""

from __future__ import annotations

import errno
import logging
import os
import queue
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from watchdog import events as fs_events
from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from engine.files import split_name, write_atomic
from engine.job import FORMATS, warm_up
from engine.problems import Problem
from engine.services.health import Health, blocked_error, fault_text
from engine.services.log import ServiceLog, first_line, iso_time, read_status, write_status
from engine.services.rulekeeper import RuleKeeper, describe
from engine.services.sandbox import Limits, Quoting, Sandbox
from engine.services.watch.claims import WorkArea, live_owners
from engine.services.watch.journal import Entry, Journal, file_sha256
from engine.services.watch.reasons import duplicate_text, reason_text
from engine.services.watch.settle import SettleTracker, ignored_reason, special_kind

FOLDERS = ("inbox", "outbox", "archive", "failed", "work")
JOURNAL, LOG, STATUS = ".sizing-journal.sqlite3", ".sizing-log.jsonl", "status.json"
OUTBOX_ENDINGS = (*(f".quote.{fmt}" for fmt in FORMATS), ".duplicate.txt")   # one job's outputs
RULES_BROKEN, DEGRADED = "RULES-BROKEN.txt", "SERVICE-DEGRADED.txt"   # notes beside inbox/
RESERVE, RESERVE_BYTES = ".sizing-reserve", 64 * 1024   # given up so a note fits on a full disk
MAX_RETRY_PAUSE = 30.0     # longest wait between tries while the machine is at fault
SLOW_SECONDS = 1.0         # a quote running longer than this no longer holds up the next file
SPECIAL_NOTE = ("{name} is {kind}, not a file: the service does not follow links or open pipes and "
                "devices (a link would make it read another file with its own rights). Drop the "
                "workbook or YAML file itself.")
MAX_RUNNING = 3            # quotes one watcher runs at once (each may use memory_limit_mb)
# Errors of one inbox file when taking it (locked on a share, no permission): skipped, logged.
FILE_ERRORS = (errno.EACCES, errno.EPERM, errno.EBUSY, errno.ETXTBSY)
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

@dataclass
class _Running:
    """A file being quoted in its own process (engine.services.sandbox)."""

    claimed: Path
    entry: Entry
    tmp: Path
    ruleset_version: str
    started: float
    quoting: Quoting


class Service:
    """Takes settled files from the inbox; never loses or repeats one, and never blames a file
    for a fault of the machine (that waits, and is retried with growing pauses)."""

    def __init__(self, root: Path, settings: dict, parent: int | None = None):
        self.root = Path(root).resolve()
        self.settings = settings
        self.parent = parent               # set in the extra worker processes
        self.dirs = {name: self.root / name for name in FOLDERS}
        self.quiet = float(settings["quiet_seconds"])
        self.tick = max(0.02, min(0.1, self.quiet / 4))
        self.limits = Limits(float(settings["time_limit_seconds"]), float(settings["memory_limit_mb"]))
        self.sandbox = Sandbox(self.limits)
        self.stopping: str | bool = False      # or why we are stopping
        self.children: list[subprocess.Popen] = []
        self.running: list[_Running] = []
        self.health = Health(longest=MAX_RETRY_PAUSE)
        self.journal: Journal | None = None
        self._wake = threading.Event()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._noted: set[str] = set()
        self._stuck: set[Path] = set()
        self._status_at = 0.0
        self._status_failing = False
        self._warm = False

    # ---- lifecycle

    def serve(self) -> int:
        for path in self.dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        self.area = WorkArea(self.dirs["work"])
        self.log = ServiceLog(self.root / LOG, pid=os.getpid(), owner=self.area.owner)
        self.tracker = SettleTracker(self.quiet)
        self.rules = RuleKeeper(self.settings["rules_dir"], self.settings["catalogs_dir"],
                                self.log, settle=self.quiet, notice=self.root / RULES_BROKEN)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        targets = [(_Forward("inbox", self._events, self._wake), self.dirs["inbox"], False)]
        targets += [(_Forward("rules", self._events, self._wake), d, True)
                    for d in self.rules.dirs if d.is_dir()]
        observer, self.observer_kind = start_observer(
            targets, bool(self.settings["polling"]), min(1.0, self.quiet), self.log)
        self.log.event("started", f"watching {self.dirs['inbox']} ({self.observer_kind}, quiet "
                                  f"{self.quiet:g} s, rescan {self.settings['rescan_seconds']:g} s)",
                       observer=self.observer_kind)
        self._show_degraded()          # a note left by an earlier run goes; the reserve is made
        try:
            self.rules.poll(force_check=True)
            if self.parent is None:
                self.children = [self._spawn() for _ in range(int(self.settings["workers"]) - 1)]
            self._loop()
        finally:
            for job in self.running:           # a second Ctrl-C: redone at the next start
                job.quoting.stop()
            self.sandbox.close()
            _stop(observer)
            for child in self.children:
                _wait_child(child)
            for s, handler in previous.items():
                signal.signal(s, handler)
            self._write_status("stopped", force=True)
            self.area.close()
            if self.journal is not None:
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
                   "--rescan-seconds", str(s["rescan_seconds"]),
                   "--time-limit-seconds", str(s["time_limit_seconds"]),
                   "--memory-limit-mb", str(s["memory_limit_mb"]), "--rules-dir", str(s["rules_dir"]),
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
            self._collect()
            if self.rules.current is not None and self.health.may_try() and self._open_journal():
                self._warm_up()
                self._work()
            self._write_status()
            if self.parent is not None and os.getppid() != self.parent:
                self.stopping = "the main watcher process is gone"
            self._sleep()
        self.log.event("stopping", f"{self.stopping}: stopping, no job left half-done")
        while self.running:                    # each is bounded by the time limit
            self._collect()
            self._write_status()
            self._sleep()

    def _sleep(self) -> None:
        """One tick, cut short by a file event or by a quote that is done."""
        done = [fd for job in self.running if (fd := job.quoting.fileno()) is not None]
        if done:
            select.select(done, [], [], self.tick)
        else:
            self._wake.wait(self.tick)
        self._wake.clear()

    def _open_journal(self) -> bool:
        if self.journal is None:
            try:
                self.journal = Journal(self.root / JOURNAL)
            except Exception as e:  # noqa: BLE001 — locked or unreadable: wait, say so, retry
                self._fault(e)
                return False
        return True

    def _warm_up(self) -> None:
        """Once: quote a sample here, so every quote's forked process starts warm."""
        if not self._warm:
            self._warm = True
            try:
                warm_up(self.rules.current)
            except Exception as e:  # noqa: BLE001 — only speed is at stake
                self.log.event("error", f"warm-up quote failed ({type(e).__name__}: {e})")

    def _work(self) -> None:
        """Recovered claims first, then settled inbox files, while there is room; rules may
        change between jobs. A fault of the machine stops the round until the next try."""
        try:
            busy = {job.claimed for job in self.running}
            for claimed in self.area.items():
                if claimed in self._stuck or claimed in busy:
                    continue
                if self.stopping or not self._room() or not self._start(claimed):
                    return
            for path in self.tracker.ready():
                if self.stopping or not self._room():
                    return
                self.tracker.forget(path)
                try:
                    claimed = self.area.claim(path)
                except OSError as e:
                    if e.errno not in FILE_ERRORS:
                        raise             # our own work folder cannot be written
                    self._note_once(path.name, f"cannot take {path.name} yet ({e.strerror})")
                    continue
                if claimed is not None and not self._start(claimed):
                    return
                self._drain_events()
                self.rules.poll()
        except Exception as e:  # noqa: BLE001 — e.g. the work folder vanished with its share
            self._fault(e)

    def _room(self) -> bool:
        """One quote at a time; another beside quotes that take long, so that a stuck file
        (a data export dropped by mistake) does not hold up the files behind it."""
        return not self.running or (len(self.running) < MAX_RUNNING and
                                    all(r.quoting.seconds > SLOW_SECONDS for r in self.running))

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
        try:
            for path in self.dirs.values():      # someone may have removed one: recreate it
                path.mkdir(exist_ok=True)        # but not the service folder: a share that went away
            if self.area.adopt_orphans():
                self.log.event("recovered", "taking over files left in work/ by a stopped watcher")
            for path in sorted(self.dirs["inbox"].iterdir(), key=_mtime):   # oldest first
                if self._wanted(path):
                    self.tracker.seen(path)
        except OSError as e:
            self._fault(e)
        self.rules.poll(force_check=True)
        for i, child in enumerate(self.children):
            if child.poll() is not None and not self.stopping:
                self.log.event("worker", f"worker {child.pid} exited ({child.returncode}); restarting")
                self.children[i] = self._spawn()

    def _wanted(self, path: Path) -> bool:
        """True for a file to take; anything else is logged once and left where it is."""
        if not os.path.lexists(path):
            return False
        if path.is_dir() and not path.is_symlink():
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

    # ---- one file: started here, finished in _complete once its quote is done

    def _start(self, claimed: Path) -> bool:
        """Begin a claimed file: record it, answer a duplicate at once, or start its quote.
        False if the machine is at fault (the claim waits for the next try)."""
        token, name = claimed.parent.name, claimed.name
        started = time.perf_counter()
        try:
            special = special_kind(claimed)
            # Such a file has no content of its own to compare: a token, which matches nothing.
            entry, earlier = self.journal.begin(token, name, f"{special}: {token}" if special
                                                else file_sha256(claimed), self.rules.current.version,
                                                taken=self._taken_on_disk(split_name(name)[1]))
            if entry.done:               # answered just before a crash: only the filing is left
                self._file_original(claimed, entry)
                self._finished(entry, started)
                return True
            tmp = claimed.parent / ".out"
            shutil.rmtree(tmp, ignore_errors=True)     # a half-done attempt before a crash
            tmp.mkdir()
            ruleset = self.rules.current
            if special:
                self._refuse_special(claimed, entry, tmp, special, started)
                return True
            outputs = self._copy_earlier(earlier, entry, tmp) if earlier else None
            if outputs is not None:
                shutil.rmtree(tmp, ignore_errors=True)
                entry = self.journal.finish(token, "duplicate", outputs, [],
                                            time.perf_counter() - started, ruleset.version,
                                            earlier.name)
                self._file_original(claimed, entry)
                self._finished(entry, started)
                return True
            self.running.append(_Running(claimed, entry, tmp, ruleset.version, started,
                                         self.sandbox.start(claimed, tmp, entry.stem, ruleset)))
            self._write_status()
            return True
        except Exception as e:  # noqa: BLE001 — a disk or journal error must not lose the file
            return self._trouble(claimed, e)

    def _refuse_special(self, claimed: Path, entry: Entry, tmp: Path, kind: str, started: float) -> None:
        """A link, pipe or device goes to failed/ as it is, with a note: never followed or opened."""
        from engine.job import Job
        self.log.event("refused", f"{entry.name} is {kind}; moved to failed/ without reading it",
                       file=entry.name)
        job = Job(source=claimed, outdir=tmp, status="failed", ruleset_version=self.rules.current.version)
        job.problems.append(Problem("file.special", entry.name, SPECIAL_NOTE.format(name=entry.name, kind=kind)))
        self._complete(_Running(claimed, entry, tmp, job.ruleset_version, started, None), job)

    def _collect(self) -> None:
        """Finish every quote that is done (or was stopped at a limit)."""
        for job in list(self.running):
            result = job.quoting.result()
            if result is None:
                continue
            self.running.remove(job)
            if result is False:                      # stopped: redone at the next start
                continue
            try:
                self._complete(job, result)
            except Exception as e:  # noqa: BLE001 — as in _start: the claim is kept
                self._trouble(job.claimed, e)

    def _complete(self, running: _Running, job) -> None:
        """Put every output in place and record the outcome — all before the original moves."""
        if job.status == "blocked":                  # the quote's process met a fault of the machine
            raise blocked_error(job)
        entry, tmp = running.entry, running.tmp
        target = "outbox" if job.ok else "failed"
        if not job.ok:
            reason = tmp / f"{entry.stem}{split_name(entry.name)[1]}.reason.txt"
            write_atomic(reason, reason_text(entry.name, job).encode("utf-8"))
            job.outputs.append(reason)
        self._remove_earlier_attempts(entry)
        # Written under temporary names in work/; each appears in place by one rename.
        for produced in job.outputs:
            os.replace(produced, self.dirs[target] / Path(produced).name)
        shutil.rmtree(tmp, ignore_errors=True)
        entry = self.journal.finish(entry.token, job.status,
                                    [f"{target}/{Path(p).name}" for p in job.outputs],
                                    [str(p) for p in job.problems],
                                    time.perf_counter() - running.started, running.ruleset_version)
        self._file_original(running.claimed, entry)
        self._finished(entry, running.started)

    def _finished(self, entry: Entry, started: float) -> None:
        self.log.job(file=entry.name, outcome=entry.status, seconds=time.perf_counter() - started,
                     ruleset=entry.ruleset, outputs=[Path(o).name for o in entry.outputs],
                     problems=list(entry.problems), stem=entry.stem,
                     note=f"same content as {entry.duplicate_of}" if entry.duplicate_of else "")
        if self.health.recovered("folder"):
            self.log.event("recovered", "the folder works again; carrying on")
            self._show_degraded()
        self._write_status()

    def _remove_earlier_attempts(self, entry: Entry) -> None:
        """Outputs an interrupted attempt at this very job left in outbox/ or failed/ (the
        stem is this job's alone), and a note from a give-up whose file was then redone."""
        (own, suffix), stem = split_name(entry.name), entry.stem
        # Named one by one: `a.*` would also take `a.b.quote.json`, another file's quote.
        stale = [self.dirs["outbox"] / f"{stem}{end}" for end in OUTBOX_ENDINGS]
        stale += [self.dirs["failed"] / f"{stem}.errors.xlsx",
                  self.dirs["failed"] / f"{stem}{suffix}.reason.txt",
                  self.dirs["failed"] / f"{own}-{entry.token}{suffix}.reason.txt"]
        for path in stale:
            path.unlink(missing_ok=True)

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
            except FileNotFoundError:
                return None        # someone cleared the outbox: quote it afresh instead
            copies.append(copy)
        if not copies:
            return None
        note = tmp / f"{entry.stem}.duplicate.txt"
        write_atomic(note, duplicate_text(entry.name, earlier, [c.name for c in copies]).encode())
        copies.append(note)
        self._remove_earlier_attempts(entry)
        for copy in copies:
            os.replace(copy, self.dirs["outbox"] / copy.name)
        return [f"outbox/{c.name}" for c in copies]

    def _file_original(self, claimed: Path, entry: Entry) -> None:
        folder = self.dirs["archive" if entry.status in ("quoted", "duplicate") else "failed"]
        suffix = split_name(entry.name)[1]
        dest = folder / f"{entry.stem}{suffix}"
        if os.path.lexists(dest):         # put there by hand after the stem was chosen: keep both
            dest = folder / f"{entry.stem}-{entry.token}{suffix}"
        os.replace(claimed, dest)
        shutil.rmtree(claimed.parent, ignore_errors=True)

    # ---- faults

    def _trouble(self, claimed: Path, error: Exception) -> bool:
        """A step of one file failed. A fault of the machine keeps the claim for the next try
        (False); anything else is a bug, and the file goes to failed/ with a note (True)."""
        if self._fault(error):
            shutil.rmtree(claimed.parent / ".out", ignore_errors=True)   # give the space back
            return False
        self._give_up(claimed, error)
        return True

    def _fault(self, error: Exception) -> bool:
        """Degraded, if `error` is a fault of the machine: say it everywhere; True if it was."""
        text = fault_text(error, self._place(error))
        if text is None:
            if self.journal is None:          # the journal cannot be opened: nothing can go on
                text = f"the journal {self.root / JOURNAL} cannot be opened ({error})"
            else:
                return False
        first = self.health.degraded != text
        pause = self.health.failed("folder", text)
        if first:
            self.log.event("degraded", f"{text}; files wait, trying again by itself",
                           reason=text)
            self._show_degraded()
        else:
            self.log.event("retry", f"still {text}; next try in {pause:g} s", reason=text)
        self._write_status(force=True)
        return True

    def _place(self, error: Exception) -> str | None:
        """Where a fault is, in the terms of the service folder: `/srv/quotes/outbox`."""
        if isinstance(error, sqlite3.Error):
            return f"the journal {self.root / JOURNAL}"
        path = getattr(error, "filename2", None) or getattr(error, "filename", None)
        if not path:
            return None
        try:
            inside = Path(os.fsdecode(path)).resolve().relative_to(self.root)
        except ValueError:
            return None
        return str(self.root / inside.parts[0]) if inside.parts else str(self.root)

    def _show_degraded(self) -> None:
        """SERVICE-DEGRADED.txt while degraded, where people look; gone once work goes on.
        A small reserve file is given up first, so the note fits on a full disk."""
        note, reserve = self.root / DEGRADED, self.root / RESERVE
        try:
            if self.health.degraded:
                reserve.unlink(missing_ok=True)
                write_atomic(note, degraded_text(self.health, self.root).encode("utf-8"))
            else:
                note.unlink(missing_ok=True)
                write_atomic(reserve, bytes(RESERVE_BYTES))
        except OSError as e:
            self.log.event("error", f"cannot update {note.name}: {e.strerror}")

    def _give_up(self, claimed: Path, error: Exception) -> None:
        """Last resort for a bug in the service: the file goes to failed/ with a note (written
        whole or not at all), or, if even that fails, stays in work/ until the next start."""
        name = claimed.name
        self.log.event("error", f"{name}: {type(error).__name__}: {error}", file=name)
        stem, suffix = split_name(name)
        dest = self.dirs["failed"] / f"{stem}-{claimed.parent.name}{suffix}"
        note = dest.parent / f"{dest.name}.reason.txt"
        try:
            write_atomic(note, (
                f"{name} could not be quoted because of an error in the folder service, not in the "
                f"file ({type(error).__name__}: {error}). Please tell the sizing team; the file is "
                "kept here and can be dropped into the inbox again.\n").encode("utf-8"))
            try:
                os.replace(claimed, dest)
            except OSError:
                note.unlink(missing_ok=True)          # no note without its file
                raise
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
        state = state or ("stopping" if self.stopping else "degraded" if self.health.degraded
                          else "running" if self.rules.current else "waiting for a valid rule set")
        try:
            folder = collect_status(self.root, self.journal)
            if state == "stopped":            # our own lock is held until the very end
                folder["watchers"] -= 1
                state = "running" if folder["watchers"] else state
            write_status(self.root / STATUS, {
                "service": "sizing watch", "state": state, "pid": os.getpid(),
                "observer": self.observer_kind, "updated": iso_time(time.time()),
                "degraded": self.health.status(),
                "working_on": [job.claimed.name for job in self.running], **folder,
                "limits": {"seconds": self.limits.seconds, "memory_mb": self.limits.memory_mb},
                "ruleset": self.rules.status()})
            self._status_failing = False
        except (OSError, sqlite3.Error) as e:     # the status is a convenience; the work goes on
            if not self._status_failing:
                self.log.event("error", f"cannot write {STATUS}: {e}")
            self._status_failing = True


def degraded_text(health: Health, root: Path) -> str:
    """SERVICE-DEGRADED.txt: what is wrong, that nothing is lost, and who must do what."""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(health.since or time.time()))
    return (f"The sizing folder service cannot work at the moment: {health.degraded}.\n\n"
            f"Since {since}. Nothing is lost: files you drop wait in inbox/ (or in work/, if the "
            "service had already taken them) and are quoted by themselves once this is fixed. "
            "You do not need to drop them again.\n\n"
            f"For the operator of {root}: fix the cause above (free some space, make the folder "
            "writable, release the journal, bring the share back). The service tries again by "
            f"itself, at least every {MAX_RETRY_PAUSE:g} s, and removes this note when it works again.\n")


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
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
    waiting = sorted(e.name for e in os.scandir(inbox) if not e.is_dir(follow_symlinks=False)
                     and not ignored_reason(e.name)) if inbox.is_dir() else []
    working = sorted(p.name for p in (root / "work").glob("*/*/*")
                     if not p.name.startswith(".") and (p.is_symlink() or not p.is_dir()))
    status = {"watchers": len(live_owners(root / "work")), "queue": len(waiting),
              "in_progress": working, "done": {}, "last_errors": []}
    if journal is not None:
        status["done"] = journal.counts()
        status["last_errors"] = [
            {"file": e.name, "outcome": e.status, "finished": iso_time(e.finished),
             "problems": [first_line(p) for p in e.problems[:5]]}
            for e in journal.recent_problems(5)]
    return status


def print_status(root: Path) -> int:
    """`sizing watch DIR --status`: live counts, and the rule-set and fault state from status.json."""
    root = Path(root)
    try:
        journal = Journal(root / JOURNAL, readonly=True) if (root / JOURNAL).exists() else None
        live = collect_status(root, journal)
    except sqlite3.Error as e:               # locked or damaged: say so, show the rest
        journal, live = None, collect_status(root, None)
        print(f"  (cannot read the journal: {e})")
    if journal is not None:
        journal.close()
    saved = read_status(root / STATUS) or {}
    n = live["watchers"]
    degraded = (saved.get("degraded") or {}) if n else {}
    state = (f"degraded: {degraded['reason']} (since {_clock(degraded['since'])}, next try "
             f"{_clock(degraded['next_try'])})" if degraded.get("reason") else "running")
    print(f"sizing watch {root}: " + (f"{state} ({n} watcher{'s' * (n != 1)})" if n else "not running"))
    print(f"  queue: {live['queue']} waiting in inbox, {len(live['in_progress'])} in progress"
          + (f" ({', '.join(live['in_progress'])})" if live["in_progress"] else ""))
    for line in describe(saved.get("ruleset") or {}):
        print(f"  {line}")
    print("  done: " + (", ".join(f"{c} {s}" for s, c in sorted(live["done"].items()))
                        or "nothing yet"))
    if live["last_errors"]:
        print("  last errors:")
    for error in live["last_errors"]:
        print(f"    {_clock(error['finished'])} {error['file']} ({error['outcome']}): "
              + (error["problems"][0] if error["problems"] else ""))
    return 0 if n else 1


def _clock(iso: str | None) -> str:
    """2025-03-01T10:12:04+01:00 → 2025-03-01 10:12:04, for the terminal."""
    return (iso or "?")[:19].replace("T", " ")
