"""Each quote in a worker process of its own, under a time and a memory limit (folder and mail
services alike): past a limit only that file fails, and its worker is replaced."""

from __future__ import annotations

import gc
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from engine.problems import Problem, SizingError

WORKBOOK_SUFFIXES = (".xlsx", ".xlsm", ".xls", ".xltx")
PR_SET_PDEATHSIG = 1
JOBS_PER_WORKER = 500        # then a fresh one: whatever a long run accumulates is let go


@dataclass(frozen=True)
class Limits:
    """How long one quote may take and how much memory its process may hold."""

    seconds: float = 30.0
    memory_mb: float = 1024.0

    def memory_text(self) -> str:
        gb = self.memory_mb / 1024
        return f"{gb:g} GB" if gb >= 1 and gb == round(gb, 1) else f"{self.memory_mb:g} MB"


class Sandbox:
    """Quotes files in forked worker processes, keeping idle workers for the next file.

    Forked, not spawned: a worker starts in milliseconds with the service's imports, caches
    and rule set (whose compiled formulas cannot be pickled); it then quotes one file after
    another, its caches warm, until the rule set changes, it has grown, or a limit stops it.
    """

    def __init__(self, limits: Limits):
        self.limits = limits
        self._idle: list[_Worker] = []

    def start(self, source: Path, outdir: Path, stem: str, ruleset) -> Quoting:
        """Begin quoting `source` into `outdir`; poll the Quoting for its Job."""
        source = Path(source)
        return self._begin(source, ruleset, (_quote, (source, Path(outdir), stem, self.limits)))

    def call(self, source: Path, ruleset, function, *args):
        """`function(ruleset, *args)` for one input in a worker, under the limits, waiting for it
        (the one-shot commands); its return value. Past a limit, or when the worker died, a
        SizingError with the plain sentence. `function` and what it returns cross a pipe:
        a module-level function, and plain data."""
        quoting = self._begin(Path(source), ruleset, (_boxed, (function, args)))
        outcome = quoting.wait()
        if quoting.stopped:
            raise SizingError(outcome.problems)
        return outcome[0]

    def _begin(self, source: Path, ruleset, request: tuple) -> Quoting:
        for stale in [w for w in self._idle if w.ruleset is not ruleset]:   # the rules changed
            self._idle.remove(stale)
            stale.stop()
        worker = self._idle.pop() if self._idle else _Worker(ruleset, self.limits)
        return Quoting(self, worker, source, request)

    def run(self, source: Path, outdir: Path, stem: str, ruleset):
        """`run_job` under the limits, waiting for it (the mail service quotes one at a time)."""
        return self.start(source, outdir, stem, ruleset).wait()

    def close(self) -> None:
        for worker in self._idle:
            worker.stop()
        self._idle = []

    def _done_with(self, worker: _Worker) -> None:
        if (worker.jobs < JOBS_PER_WORKER and _resident_mb(worker.pid) < self.limits.memory_mb / 2
                and len(self._idle) < 4):
            self._idle.append(worker)
        else:
            worker.stop()


class Quoting:
    """One file being quoted: `result()` is None while it runs, then the Job."""

    def __init__(self, sandbox: Sandbox, worker: _Worker, source: Path, request: tuple):
        self.sandbox, self.worker, self.source = sandbox, worker, source
        self.limits = sandbox.limits
        self.started = time.monotonic()
        self.stopped = False           # True once a limit or a crash ended it: result() is a failed Job
        self._job = None
        _flush()                       # what this process printed comes before what the worker prints
        worker.requests.send(request)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def fileno(self) -> int | None:
        """Readable (for select) when the result is ready; None once it has been taken."""
        return self.worker.results.fileno() if self._job is None else None

    def result(self):
        """The Job once done, or a failed Job when a limit was reached or the worker died."""
        if self._job is None:
            self._job = self._read() or self._check_limits()
        return self._job

    def wait(self):
        """Block until `result()` is there, checking the limits as it runs."""
        while (job := self.result()) is None:
            select.select([self.worker.results], [], [], 0.05)
        return job

    def stop(self) -> None:
        """Kill it (the service is being interrupted); its file is redone at the next start."""
        if self._job is None:
            self.worker.kill()
            self._job = False

    def _read(self):
        if not self.worker.results.poll():
            return None
        try:
            job = self.worker.results.recv()
        except (EOFError, OSError):
            status = self.worker.kill()
            return self._failed("crashed", "the quoting process stopped unexpectedly "
                                f"({_how(status)}) while reading this file; please tell the "
                                "sizing team. The file is kept.", fixer="developer")
        self.worker.jobs += 1
        self.sandbox._done_with(self.worker)
        if isinstance(job, _OutOfMemory):        # met the address-space cap inside the worker
            return self._failed("limit.memory", _over_limit(self.source, self.limits, "memory"))
        return job

    def _check_limits(self):
        if self.seconds > self.limits.seconds:
            self.worker.kill()
            return self._failed("limit.time", _over_limit(self.source, self.limits, "time"))
        if _resident_mb(self.worker.pid) > self.limits.memory_mb:
            self.worker.kill()
            return self._failed("limit.memory", _over_limit(self.source, self.limits, "memory"))
        return None

    def _failed(self, code: str, message: str, fixer: str = "sales"):
        from engine.job import Job
        job = Job(source=self.source, outdir=self.source.parent, status="failed",
                  ruleset_version=getattr(self.worker.ruleset, "version", ""))
        job.problems.append(Problem(code, self.source.name, message, fixer=fixer))
        job.seconds = self.seconds
        self.stopped = True
        return job


class _Worker:
    """The parent's end of one worker process: requests go in, Jobs come out."""

    def __init__(self, ruleset, limits: Limits):
        self.ruleset, self.jobs = ruleset, 0
        request_in, request_out = os.pipe()
        result_in, result_out = os.pipe()
        parent = os.getpid()
        _flush()                         # or the child inherits, and prints again, what is buffered
        try:
            self.pid = os.fork()
        except OSError:                  # out of processes or memory: the caller says so
            for fd in (request_in, request_out, result_in, result_out):
                os.close(fd)
            raise
        if self.pid == 0:                                      # the child never returns
            _serve(request_in, result_out, parent, ruleset, limits)
        os.close(request_in)
        os.close(result_out)
        self.requests = Connection(request_out, readable=False)
        self.results = Connection(result_in, writable=False)

    def kill(self) -> int:
        """Stop it now; returns its wait status."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self._reap()

    def stop(self) -> None:
        """An idle worker: closing its requests ends it."""
        self.requests.close()
        self._reap()

    def _reap(self) -> int:
        for end in (self.requests, self.results):
            end.close()
        try:
            return os.waitpid(self.pid, 0)[1]
        except ChildProcessError:
            return 0


def _serve(request_fd: int, result_fd: int, parent: int, ruleset, limits: Limits) -> None:
    code = 1
    try:
        gc.freeze()          # the inherited objects are never collected here: their pages stay shared
        _close_inherited(keep={request_fd, result_fd})
        _die_with(parent)
        # The service decides when a quote stops: a Ctrl-C or a SIGTERM sent to the whole
        # process group must not kill a quote half-way and make its file look broken.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _cap_address_space(limits)
        requests = Connection(request_fd, writable=False)
        results = Connection(result_fd, readable=False)
        while True:
            try:
                function, args = requests.recv()
            except EOFError:
                code = 0                                       # the service let this worker go
                return
            try:
                outcome = function(ruleset, *args)
            except MemoryError:
                outcome = _OutOfMemory()
            _flush()
            results.send(outcome)
    finally:
        _flush()
        os._exit(code)                   # never run the parent's cleanup (or tests) in the child


def _quote(ruleset, source: Path, outdir: Path, stem: str, limits: Limits):
    """One quote in a worker: the Job, without what the services never read."""
    from engine.job import run_job
    job = run_job(source, outdir, ruleset=ruleset, stem=stem)
    if any(p.code == "limit.memory" for p in job.problems):   # hit the address cap
        job.problems = [Problem("limit.memory", source.name, _over_limit(source, limits, "memory"))]
    # The rule set and workbook stay behind.
    job.ruleset = job.intake = job.results = None
    return job


def _boxed(ruleset, function, args: tuple) -> list:
    """A call's return value in a list: a Quoting takes a falsy result (0, None) for "not yet"."""
    return [function(ruleset, *args)]


class _OutOfMemory:
    """What a worker sends back when its call met the address-space cap."""


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):     # closed, or a broken pipe
            pass


def _over_limit(source: Path, limits: Limits, which: str) -> str:
    """The plain sentence for a file stopped at a limit; such files are rarely intakes."""
    kind = "workbook" if source.suffix.lower() in WORKBOOK_SUFFIXES else "file"
    if which == "time":
        return f"this {kind} took longer than {limits.seconds:g} s to read — is it the sizing intake?"
    return (f"this {kind} needed more than {limits.memory_text()} of memory to read "
            "— is it the sizing intake?")


def _close_inherited(keep: set[int]) -> None:
    """Other workers' pipes (they must see the end of their own), the watcher's locks and
    databases: none of it is this worker's to hold."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(3, 1024)
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _die_with(parent: int) -> None:
    """Linux: the kernel kills this worker if the service dies (even by kill -9)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def _cap_address_space(limits: Limits) -> None:
    """A backstop against one huge allocation between two looks at the resident size:
    twice the limit above what the process maps already."""
    try:
        import resource
        mapped = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = mapped + int(2 * limits.memory_mb * 1024 * 1024)
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY
                                                else min(cap, hard), hard))
    except (OSError, ValueError, ImportError):
        pass


def _resident_mb(pid: int) -> float:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0                        # not Linux, or just exited: the address cap still holds
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def _how(wait_status: int) -> str:
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exit status {os.waitstatus_to_exitcode(wait_status)}"
