"""The folder service's settings: each declared once with its default and help; TOML and flags."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

from engine.paths import CATALOGS_DIR, RULES_DIR
from engine.problems import Problem, SizingError

# Every setting, declared once: its default and its help. The command-line flags, the
# TOML keys and docs/watch.md all follow this table (a test checks the docs).
SETTINGS = {
    "quiet_seconds": (1.0, "a file is taken once its size and time have not changed for this long"),
    "rescan_seconds": (10.0, "how often the inbox and rule folders are listed in full, in case "
                             "a change event was missed (network shares, event overflow)"),
    "polling": (False, "poll the folders instead of using the system's change events "
                       "(for SMB/NFS shares; used automatically when events are unavailable)"),
    "workers": (2, "watcher processes sharing the inbox; more take bursts of files faster "
                   "(each quotes one file at a time on one CPU)"),
    "time_limit_seconds": (30.0, "longest a quote may take; a file past it goes to failed/ and its "
                                 "process is replaced"),
    "memory_limit_mb": (1024, "most memory a quote's process may use; a file past it goes to "
                              "failed/ and its process is replaced"),
    "rules_dir": (None, "rule folder to load and watch (default: the product's rules/)"),
    "catalogs_dir": (None, "catalog folder to load and watch (default: the product's catalogs/)"),
    "calibration": (None, "a file written by `sizing calibrate`, applied to every quote it matches"),
}


def resolve_settings(args) -> dict:
    """Defaults, then the TOML file, then command-line flags."""
    settings = {name: default for name, (default, _) in SETTINGS.items()}
    if args.config:
        settings.update(read_config(Path(args.config)))
    for name in SETTINGS:
        if getattr(args, name, None) is not None:
            settings[name] = getattr(args, name)
    problems = [Problem("config.value", f"--{name.replace('_', '-')}", "must be above 0.",
                        fixer="developer")
                for name in ("quiet_seconds", "rescan_seconds", "workers", "time_limit_seconds",
                             "memory_limit_mb") if settings[name] <= 0]
    if problems:
        raise SizingError(problems)
    settings["rules_dir"] = Path(settings["rules_dir"] or RULES_DIR).resolve()
    settings["catalogs_dir"] = Path(settings["catalogs_dir"] or CATALOGS_DIR).resolve()
    if settings["calibration"]:              # read now: a bad file stops the start, not every quote
        from engine.calc.calibration import load_calibration
        settings["calibration"] = load_calibration(Path(settings["calibration"]))
    return settings


def read_config(path: Path) -> dict:
    """Settings from TOML; folders are relative to the file, unknown keys are mistakes."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SizingError([Problem("config.unreadable", str(path), f"cannot read: {e.strerror}.",
                                   fixer="developer")]) from None
    except tomllib.TOMLDecodeError as e:
        raise SizingError([Problem("config.syntax", str(path), f"not valid TOML: {e}.",
                                   fixer="developer")]) from None
    data = data.get("watch", data)
    problems, settings = [], {}
    for key, value in data.items():
        if key not in SETTINGS:
            close = difflib.get_close_matches(key, SETTINGS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(Problem("config.unknown", str(path), f"unknown setting {key!r}{hint}.",
                                    fixer="developer"))
            continue
        default = SETTINGS[key][0]
        if key.endswith("_dir") or key == "calibration":
            settings[key] = (path.parent / str(value)).resolve()
        elif isinstance(default, bool) != isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "true or false" if isinstance(default, bool) else "a number"
            problems.append(Problem("config.type", str(path), f"{key} must be {kind}.",
                                    fixer="developer"))
        else:
            settings[key] = type(default)(value)
    if problems:
        raise SizingError(problems)
    return settings
