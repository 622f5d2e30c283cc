"""Hot reload of rules and catalogs: the last published rule set serves until an edit passes the gate.

An edit that cannot be loaded is *broken* (RULES-BROKEN.txt); one that loads but fails the publication
gate (engine.authoring.gate: a check error, a warning nobody acknowledged, a failing example, worse
validation errors) is *held* (RULES-HELD.txt). Either way quotes keep the last published set.
"""

from __future__ import annotations

import time
from pathlib import Path

from engine.files import write_atomic
from engine.problems import SizingError
from engine.services.log import ServiceLog, first_line, iso_time

HELD_NOTICE = "RULES-HELD.txt"


class RuleKeeper:
    """Holds the last good rule set; reloads the whole set when its folders change.

    With `notice` (the folder service's RULES-BROKEN.txt), a broken edit is also said in a
    plain file where people look, a held one in RULES-HELD.txt beside it, and each file goes
    away when a good edit lands.
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
        self.held = None               # the gate's Publication when the files on disk are held
        self._noticed: dict[Path, str | None] = {}  # each notice's text as last written ("": failed)

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
        held = self.held.verdict if self.held else None
        return {"version": self.current.version if self.current else None,
                "files_ok": not self.problems,
                "running_on_last_good": bool(self.problems or held) and self.current is not None,
                "problems": self.problems, "checked_at": iso_time(self.checked_at or None),
                "held": {"version": held.facts.version, "reasons": held.reasons()} if held else None,
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

    def held_text(self) -> str | None:
        """RULES-HELD.txt: which edit is held, why, and how to publish it; None when none is."""
        if self.held is None or self.problems:
            return None              # a broken edit is said in RULES-BROKEN.txt instead
        checked = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.checked_at))
        return self.held.note(self.dirs[0]) + f"\nChecked {checked}.\n"

    def _show_notice(self) -> None:
        """Write or remove each notice when what it should say changes (again, if it failed)."""
        if self.notice is None:
            return
        for path, text in ((self.notice, self.notice_text()),
                           (self.notice.with_name(HELD_NOTICE), self.held_text())):
            if path in self._noticed and text == self._noticed[path]:
                continue
            try:
                if text is None:
                    path.unlink(missing_ok=True)
                else:
                    write_atomic(path, text.encode("utf-8"))
                self._noticed[path] = text
            except OSError as e:        # a full disk: the log and the status still say it
                if self._noticed.get(path) != "":
                    self.log.event("error", f"cannot update {path.name}: {e.strerror}")
                self._noticed[path] = ""       # tried again at the next poll, logged once

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
            return self._admit(ruleset)
        keeping = (f"keeping rule set {self.current.version}" if self.current
                   else "no valid rule set yet: files wait in the inbox")
        self.log.event("rules", f"rule or catalog edit is broken; {keeping}:\n  "
                       + "\n  ".join(first_line(p) for p in self.problems),
                       problems=self.problems,
                       ruleset=self.current.version if self.current else None)
        return True


    def _admit(self, ruleset) -> bool:
        """A rule set that loads goes through the publication gate; one that fails it is held."""
        from engine.authoring.gate import admit
        was_off, self.problems = self.held is not None or bool(self.problems), []
        try:
            publication = admit(ruleset, *self.dirs)
        except Exception as e:  # noqa: BLE001 — a failing gate must never stop the service: nothing is published
            self.log.event("error", f"the publication gate failed ({type(e).__name__}: {e}); "
                                    "the edit is not published")
            return True
        if publication.held:
            self.held = publication
            if self.current is None and publication.ruleset is not None:
                self.current = publication.ruleset     # a restart while an edit is held: the last published copy
            keeping = (f"keeping rule set {self.current.version}" if self.current
                       else "no published rule set yet: files wait in the inbox")
            reasons = publication.verdict.reasons()
            self.log.event("rules", f"rule edit {publication.verdict.facts.version} is held, not published; "
                           f"{keeping}:\n  " + "\n  ".join(first_line(r) for r in reasons),
                           held=reasons, ruleset=self.current.version if self.current else None)
            return True
        news = was_off or self.current is None or self.current.version != ruleset.version
        self.current, self.held = ruleset, None
        if news:
            self.log.event("rules", f"rule set {ruleset.version} in use", ruleset=ruleset.version)
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
    held = status.get("held") or {}
    if status.get("problems"):
        line += (" — the latest edit is broken; running on this last good set:"
                 if status.get("version") else " — no valid rule set yet; files wait:")
    elif held:
        line += (f" — the latest edit ({held.get('version')}) is held, not published; running on this "
                 "last published set:" if status.get("version") else
                 f" — the latest edit ({held.get('version')}) is held and none is published yet; files wait:")
    return [line] + [f"  {first_line(p)}" for p in status.get("problems") or held.get("reasons") or []]
