"""Hot reload of rules and catalogs: the last good rule set serves until a valid one replaces it."""

from __future__ import annotations

import time
from pathlib import Path

from engine.problems import SizingError
from engine.services.log import ServiceLog, first_line


class RuleKeeper:
    """Holds the last good rule set; reloads the whole set when its folders change."""

    def __init__(self, rules_dir: Path, catalogs_dir: Path, log: ServiceLog, settle: float):
        self.dirs = (Path(rules_dir), Path(catalogs_dir))
        self.log, self.settle = log, settle
        self.current = None            # the last good RuleSet
        self.problems: list[str] = []  # why the files on disk are not in use, if they are not
        self.checked_at = 0.0
        self._due: float | None = None
        self._fingerprint = None

    def changed(self) -> None:
        """A rule or catalog file changed: reload once the edits settle (a save is often
        several events: write a temp file, rename it over the old one)."""
        self._due = time.monotonic() + self.settle

    def poll(self, force_check: bool = False) -> bool:
        """Reload if an edit has settled (or, on a rescan, if the files differ). True if
        a reload was attempted."""
        if self._due is not None and time.monotonic() >= self._due:
            self._due = None
            return self._reload_if_changed()
        if force_check:
            return self._reload_if_changed()
        return False

    def status(self) -> dict:
        return {"version": self.current.version if self.current else None,
                "files_ok": not self.problems,
                "running_on_last_good": bool(self.problems) and self.current is not None,
                "problems": self.problems, "checked_at": self.checked_at,
                "rules_dir": str(self.dirs[0]), "catalogs_dir": str(self.dirs[1])}

    def _reload_if_changed(self) -> bool:
        fingerprint = _fingerprint(*self.dirs)
        if fingerprint == self._fingerprint:
            return False
        self._fingerprint = fingerprint
        self.checked_at = time.time()
        try:
            from engine.calc.ruleset import load_ruleset
            from engine.intake.form import form_problems
            ruleset = load_ruleset(*self.dirs)
            if problems := form_problems(self.dirs[0]):
                raise SizingError(problems)
        except SizingError as e:
            self.problems = [str(p) for p in e.problems] or ["the rule set could not be loaded."]
        except Exception as e:  # noqa: BLE001 — a broken edit must never stop the service
            self.problems = [f"{self.dirs[0]}: the rule set could not be loaded "
                             f"({type(e).__name__}: {e})."]
        else:
            news = self.problems or self.current is None or self.current.version != ruleset.version
            self.current, self.problems = ruleset, []
            if news:
                self.log.event("rules", f"rule set {ruleset.version} in use",
                               ruleset=ruleset.version)
            return True
        keeping = (f"keeping rule set {self.current.version}" if self.current
                   else "no valid rule set yet: files wait in the inbox")
        self.log.event("rules", f"rule or catalog edit is broken; {keeping}:\n  "
                       + "\n  ".join(first_line(p) for p in self.problems),
                       problems=self.problems,
                       ruleset=self.current.version if self.current else None)
        return True


def _fingerprint(*dirs: Path) -> tuple:
    """Name, size, mtime and inode of every file: cheap to take, changes with any save."""
    entries = []
    for d in dirs:
        for path in sorted(d.rglob("*")) if d.is_dir() else []:
            try:
                st = path.stat()
            except OSError:
                continue
            entries.append((str(path), st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(entries)
