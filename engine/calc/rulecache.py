"""Parsed rule sets and data files kept between processes, keyed by their contents and the engine's code.

Parsing the rule and catalog YAML is most of what a fresh `sizing quote` spends on rules
(≈ 0.25 s of ≈ 0.3 s). The cache holds the loaded rule set with each formula as its text;
formulas are compiled again on the way in (≈ 25 ms), so no code object or closure is ever
stored. A cache that is missing, stale, damaged, not ours or unreadable is simply not
used: the files are loaded as if there were no cache, and the entry is written afresh.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import logging
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import Any, Callable

import engine
from engine.calc.formula import Formula, compile_formula
from engine.calc.functions import build_functions
from engine.files import write_atomic

log = logging.getLogger(__name__)

MAGIC = b"sizing rule-set cache 2\n"
DIGEST = 32
# What a cached rule set may be made of: the engine's own classes and plain containers.
# Anything else in a file (os.system, say) means it was not written here: it is refused.
ALLOWED_MODULES = ("engine.",)
ALLOWED_BUILTINS = {"set", "frozenset", "dict", "list", "tuple", "str", "int", "float", "bool",
                    "complex", "bytes", "slice", "range"}


def cache_dir() -> Path | None:
    """$SIZING_CACHE_DIR, else the user's cache folder; None when caching is switched off."""
    chosen = os.environ.get("SIZING_CACHE_DIR")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "none", "0") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sizing"


def cached_ruleset(load: Callable[[Path, Path], Any], rules_dir: Path, catalogs_dir: Path) -> Any:
    """`load(rules_dir, catalogs_dir)`, or the rule set it gave for the very same files before.

    Errors from `load` (a broken rule file) pass through and are never cached.
    """
    folder = cache_dir()
    if folder is None:
        return load(rules_dir, catalogs_dir)
    rules_dir, catalogs_dir = Path(rules_dir).resolve(), Path(catalogs_dir).resolve()
    entry = folder / f"ruleset-{_digest(str(rules_dir).encode(), str(catalogs_dir).encode()).hex()[:16]}.bin"
    key = _key(rules_dir, catalogs_dir)
    ruleset = _read(entry, key)
    if ruleset is None:
        ruleset = load(rules_dir, catalogs_dir)
        _write(entry, key, ruleset)
    return ruleset


def _key(rules_dir: Path, catalogs_dir: Path) -> bytes:
    """Everything a loaded rule set depends on: every file of both folders, the engine's
    source (a changed loader must not meet an old entry) and the Python version."""
    digest = hashlib.sha256(MAGIC + sys.version.encode() + _code_digest())
    for folder in (rules_dir, catalogs_dir):
        _add_files(digest, folder, sorted(folder.iterdir()))
    return digest.digest()


@functools.lru_cache(maxsize=1)
def _code_digest() -> bytes:
    """The engine's source, hashed once per process: every cache entry depends on it."""
    code = Path(engine.__file__).resolve().parent
    digest = hashlib.sha256()
    _add_files(digest, code, sorted(code.rglob("*.py")))
    return digest.digest()


def _add_files(digest, folder: Path, files: list[Path]) -> None:
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())


def cached_data(name: str, source: Path, build: Callable[[], Any]) -> Any:
    """`build()`, or what it gave before for the same contents of `source` and the same engine.

    For data read from a file (the published runs a quote cites, the intake form): builtin
    containers, strings and numbers, and the engine's own data classes; anything else in an
    entry (another module's class, a callable) is refused and `build()` runs.
    """
    source = Path(source).resolve()
    return cached_value(f"{name}-{_digest(str(source).encode()).hex()[:16]}", lambda: source.read_bytes(), build)


def cached_value(name: str, inputs: Callable[[], bytes], build: Callable[[], Any], keep: int | None = None) -> Any:
    """`build()`, or what it gave before for the same `inputs()` — everything the value depends on
    besides the engine's code, which is always part of the key — in the entry `name`.

    Only builtin containers, strings and numbers, and the engine's own data classes, are read back.
    `keep`: the entry is one of a family (`name` up to its last "-"), of which the `keep` most recently
    written stay and older ones are removed.
    """
    folder = cache_dir()
    if folder is None:
        return build()
    entry = folder / f"{name}.bin"
    key = hashlib.sha256(MAGIC + sys.version.encode() + _code_digest() + inputs()).digest()
    found = _load_entry(entry, key)
    if found is not None:
        return found[0]
    # Another process building the same entry (a minutes-long cross-validation) is waited for, not repeated.
    with _building(entry):
        found = _load_entry(entry, key)
        if found is not None:
            return found[0]
        value = build()
        try:
            _write_payload(entry, key, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as e:  # noqa: BLE001 — no cache is only slower
            log.debug("cache not written to %s: %s", entry, e)
        else:
            if keep is not None:
                _prune(folder, name.rsplit("-", 1)[0], keep)
    return value


def _prune(folder: Path, family: str, keep: int) -> None:
    """Remove all but the `keep` newest entries of a family; one that vanishes meanwhile is no matter."""
    def written(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0
    for old in sorted(folder.glob(f"{family}-*.bin"), key=written, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()


def _load_entry(entry: Path, key: bytes) -> tuple[Any] | None:
    """(value,) from an entry fit to use, else None."""
    payload = _read_payload(entry, key)
    if payload is None:
        return None
    try:
        return (_Unpickler(io.BytesIO(payload), None, None).load(),)
    except Exception as e:  # noqa: BLE001 — a damaged entry only costs the build
        log.warning("cache %s could not be used (%s); computing it again", entry, e)
        return None


@contextlib.contextmanager
def _building(entry: Path):
    """Hold the entry's lock file while its value is built; without one (no folder, no flock) just build."""
    try:
        import fcntl
        locks = entry.parent / "locks"
        locks.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = os.open(locks / f"{entry.stem}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)      # closing releases the lock


def _digest(*parts: bytes) -> bytes:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little") + part)
    return digest.digest()


def _write(entry: Path, key: bytes, ruleset: Any) -> None:
    try:
        catalogs, body = io.BytesIO(), io.BytesIO()
        # the catalogs and the rule files' tables first: the function registry is rebuilt from both
        pickle.dump((ruleset.catalogs, ruleset.tables), catalogs, protocol=pickle.HIGHEST_PROTOCOL)
        _Pickler(body, ruleset).dump(ruleset)
        _write_payload(entry, key, len(catalogs.getvalue()).to_bytes(8, "little") + catalogs.getvalue()
                       + body.getvalue())
    except Exception as e:  # noqa: BLE001 — no cache is only slower; it never stops a quote
        log.debug("rule-set cache not written to %s: %s", entry, e)


def _write_payload(entry: Path, key: bytes, payload: bytes) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(entry, MAGIC + key + _digest(key, payload) + payload, mode=0o600)


def _read(entry: Path, key: bytes) -> Any | None:
    """The cached rule set, or None if there is none fit to use."""
    payload = _read_payload(entry, key)
    if payload is None:
        return None
    try:
        size = int.from_bytes(payload[:8], "little")
        catalogs, tables = _Unpickler(io.BytesIO(payload[8:8 + size]), None, None).load()
        functions = build_functions(catalogs, tables)
        return _Unpickler(io.BytesIO(payload[8 + size:]), catalogs, functions, tables).load()
    except Exception as e:  # noqa: BLE001 — whatever is wrong with it, the files are loaded instead
        log.warning("rule-set cache %s could not be used (%s); loading the rule files", entry, e)
        return None


def _read_payload(entry: Path, key: bytes) -> bytes | None:
    """An entry's payload when it is ours, private, for this very key and undamaged; else None."""
    try:
        with open(entry, "rb") as f:
            info = os.fstat(f.fileno())
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                log.warning("cache %s is not private to this user; not used", entry)
                return None
            data = f.read()
    except OSError:
        return None
    head = len(MAGIC)
    stored_key, checksum, payload = data[head:head + DIGEST], data[head + DIGEST:head + 2 * DIGEST], \
        data[head + 2 * DIGEST:]
    if data[:head] != MAGIC or stored_key != key or checksum != _digest(key, payload):
        return None        # stale (the files changed) or damaged
    return payload


class _Pickler(pickle.Pickler):
    """Formulas travel as their text; the catalogs and function registry as references."""

    def __init__(self, file, ruleset):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.ruleset = ruleset

    def persistent_id(self, obj):
        if isinstance(obj, Formula):
            return ("formula", obj.text)
        if obj is self.ruleset.catalogs:
            return ("catalogs",)
        if obj is self.ruleset.functions:
            return ("functions",)
        if obj is self.ruleset.tables:
            return ("tables",)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, catalogs, functions, tables=None):
        super().__init__(file)
        self.catalogs, self.functions, self.tables = catalogs, functions, tables

    def persistent_load(self, pid):
        if pid[0] == "formula" and self.functions is not None:
            return compile_formula(pid[1], self.functions)
        if pid == ("catalogs",) and self.catalogs is not None:
            return self.catalogs
        if pid == ("functions",) and self.functions is not None:
            return self.functions
        if pid == ("tables",) and self.tables is not None:
            return self.tables
        raise pickle.UnpicklingError(f"unexpected reference {pid!r}")

    def find_class(self, module, name):
        if module.startswith(ALLOWED_MODULES) or (module == "builtins" and name in ALLOWED_BUILTINS):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} has no place in a rule set")
