"""Hot reload of rules and catalogs: the last good rule set serves until a valid one replaces it."""

from __future__ import annotations

import time
from pathlib import Path

from engine.files import write_atomic
from engine.problems import SizingError
from engine.services.log import ServiceLog, first_line, iso_time


class RuleKeeper:
    """Holds the last good rule set; reloads the whole set when its folders change.

    With `notice` (the folder service's RULES-BROKEN.txt), a broken edit is also said in a
    plain file where people look, and the file goes away when a good edit lands.
    """

    def __init__(self, rules_dir: Path, catalogs_dir: Path, log: ServiceLog, settle: float,
                 notice: Path | None = None):
        self.dirs = (Path(rules_dir), Path(catalogs_dir))
        self.log, self.settle, self.notice = log, settle, notice
        self.current = None            # the last good RuleSet
        self.problems: list[str] = []  # why the files on disk are not in use, if they are not
        self.checked_at = 0.0
        self._due: float | None = None
        self._fingerprint = None
        self._noticed: str | None = "?"  # the notice's text as last written ("": failed, "?": not yet)

    def changed(self) -> None:
        """A rule or catalog file changed: reload once the edits settle (a save is often
        several events: write a temp file, rename it over the old one)."""
        self._due = time.monotonic() + self.settle

    def poll(self, force_check: bool = False) -> bool:
        """Reload if an edit has settled (or, on a rescan, if the files differ). True if
        a reload was attempted."""
        reloaded = False
        if self._due is not None and time.monotonic() >= self._due:
            self._due = None
            reloaded = self._reload_if_changed()
        elif force_check:
            reloaded = self._reload_if_changed()
        self._show_notice()
        return reloaded

    def status(self) -> dict:
        return {"version": self.current.version if self.current else None,
                "files_ok": not self.problems,
                "running_on_last_good": bool(self.problems) and self.current is not None,
                "problems": self.problems, "checked_at": iso_time(self.checked_at or None),
                "rules_dir": str(self.dirs[0]), "catalogs_dir": str(self.dirs[1])}

    def notice_text(self) -> str | None:
        """RULES-BROKEN.txt: what is wrong with the edit, in plain words; None when all is well."""
        if not self.problems:
            return None
        if self.current is not None:
            effect = (f"Quotes are still made, with the last good rule set ({self.current.version}); "
                      "they do not show the edit yet.")
        else:
            effect = ("No quote can be made until this is fixed: files dropped into inbox/ wait "
                      "there and are quoted by themselves afterwards.")
        checked = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.checked_at))
        return ("The latest edit of the sizing rules or catalogs cannot be used.\n\n"
                f"{effect}\n\nWhat is wrong (each line says the file and line):\n"
                + "".join(f"  - {first_line(p)}\n" for p in self.problems)
                + "\nFix the file and save it; this note goes away by itself as soon as the "
                  f"rules are good again.\n\nChecked {checked}.\n")

    def _show_notice(self) -> None:
        """Write or remove the notice when what it should say changes (again, if it failed)."""
        if self.notice is None:
            return
        text = self.notice_text()
        if text == self._noticed:
            return
        try:
            if text is None:
                self.notice.unlink(missing_ok=True)
            else:
                write_atomic(self.notice, text.encode("utf-8"))
            self._noticed = text
        except OSError as e:        # a full disk: the log and the status still say it
            if self._noticed != "":
                self.log.event("error", f"cannot update {self.notice.name}: {e.strerror}")
            self._noticed = ""       # tried again at the next poll, logged once

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


def describe(status: dict) -> list[str]:
    """The rule-set lines of `--status`, from a status file's `ruleset` part."""
    if not status:
        return []
    line = f"rule set: {status.get('version') or 'none'}"
    if status.get("problems"):
        line += (" — the latest edit is broken; running on this last good set:"
                 if status.get("version") else " — no valid rule set yet; files wait:")
    return [line] + [f"  {first_line(p)}" for p in status.get("problems") or []]
