"""Each quote in a process of its own, under a time and a memory limit (folder and mail services alike)."""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from engine.problems import Problem

WORKBOOK_SUFFIXES = (".xlsx", ".xlsm", ".xls", ".xltx")
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Limits:
    """How long one quote may take and how much memory its process may hold."""

    seconds: float = 30.0
    memory_mb: float = 1024.0

    def memory_text(self) -> str:
        gb = self.memory_mb / 1024
        return f"{gb:g} GB" if gb >= 1 and gb == round(gb, 1) else f"{self.memory_mb:g} MB"


class Quoting:
    """One `run_job` in a forked child: `result()` is None while it runs, then the Job.

    Forked, not spawned: the child starts with the service's imports, caches and rule set
    (which holds compiled formulas and cannot be pickled), in a few milliseconds. Past a
    limit the child is killed, and only that file fails; the service goes on.
    """

    def __init__(self, source: Path, outdir: Path, stem: str, ruleset, limits: Limits):
        self.source, self.limits = Path(source), limits
        self.started = time.monotonic()
        self._job = None
        self._data = bytearray()
        read_end, write_end = os.pipe()
        parent = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:                                      # the child never returns
            os.close(read_end)
            _child(write_end, parent, Path(source), Path(outdir), stem, ruleset, limits)
        os.close(write_end)
        os.set_blocking(read_end, False)
        self._pipe = read_end

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def result(self):
        """The Job once done, or a failed Job when a limit was reached or the child died."""
        if self._job is None:
            self._job = self._read() or self._check_limits()
        return self._job

    def wait(self):
        """Block until `result()` is there, checking the limits as it runs."""
        while (job := self.result()) is None:
            select.select([self._pipe], [], [], 0.05)
        return job

    def stop(self) -> None:
        """Kill it (the service is being interrupted); its file is redone at the next start."""
        if self._job is None:
            self._kill()
            self._job = False

    def _read(self):
        while True:
            try:
                chunk = os.read(self._pipe, 1 << 16)
            except BlockingIOError:
                return None                                    # more to come
            if not chunk:
                break                                          # the child closed its end
            self._data += chunk
        os.close(self._pipe)
        _, wait_status = os.waitpid(self.pid, 0)
        if self._data:
            return pickle.loads(bytes(self._data))
        return self._failed("crashed", "the quoting process stopped unexpectedly "
                            f"({_how(wait_status)}) while reading this file; please tell the "
                            "sizing team. The file is kept.", fixer="developer")

    def _check_limits(self):
        if self.seconds > self.limits.seconds:
            self._kill()
            return self._failed("limit.time", _over_limit(self.source, self.limits, "time"))
        if _resident_mb(self.pid) > self.limits.memory_mb:
            self._kill()
            return self._failed("limit.memory", _over_limit(self.source, self.limits, "memory"))
        return None

    def _kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass                                               # already reaped
        try:
            os.close(self._pipe)
        except OSError:
            pass

    def _failed(self, code: str, message: str, fixer: str = "sales"):
        from engine.job import Job
        job = Job(source=self.source, outdir=self.source.parent, status="failed")
        job.problems.append(Problem(code, self.source.name, message, fixer=fixer))
        job.seconds = self.seconds
        return job


def run_limited(source: Path, outdir: Path, stem: str, ruleset, limits: Limits):
    """`run_job` under the limits, waiting for it (the mail service quotes one file at a time)."""
    return Quoting(source, outdir, stem, ruleset, limits).wait()


def _over_limit(source: Path, limits: Limits, which: str) -> str:
    """The plain sentence for a file stopped at a limit; such files are rarely intakes."""
    kind = "workbook" if source.suffix.lower() in WORKBOOK_SUFFIXES else "file"
    if which == "time":
        return f"this {kind} took longer than {limits.seconds:g} s to read — is it the sizing intake?"
    return (f"this {kind} needed more than {limits.memory_text()} of memory to read "
            "— is it the sizing intake?")


def _child(pipe: int, parent: int, source: Path, outdir: Path, stem: str, ruleset,
           limits: Limits) -> None:
    code = 1
    try:
        _die_with(parent)
        # The service decides when a quote stops: a Ctrl-C or a SIGTERM sent to the whole
        # process group must not kill the quote half-way and make its file look broken.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _cap_address_space(limits)
        from engine.job import run_job
        job = run_job(source, outdir, ruleset=ruleset, stem=stem)
        if any(p.code == "limit.memory" for p in job.problems):     # hit the address cap
            job.problems = [Problem("limit.memory", source.name,
                                    _over_limit(source, limits, "memory"))]
        # What the services read of a job; the rule set and workbook stay behind.
        job.ruleset = job.intake = job.results = None
        data = pickle.dumps(job)
        with os.fdopen(pipe, "wb") as out:
            out.write(data)
        code = 0
    finally:
        os._exit(code)                   # never run the parent's cleanup (or tests) in the child


def _die_with(parent: int) -> None:
    """Linux: the kernel kills this child if the service dies (even by kill -9)."""
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
