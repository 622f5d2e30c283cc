"""YAML loading that remembers line numbers and explains syntax errors with the lines around them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from engine.problems import Problem, SizingError

MAX_YAML_BYTES = 2_000_000
MAX_YAML_NODES = 200_000      # guards against alias ("billion laughs") expansion


def _parser() -> YAML:
    yaml = YAML(typ="rt")      # round-trip: keeps line numbers; constructs no Python objects
    yaml.allow_duplicate_keys = False
    return yaml


def load_yaml_file(path: Path, display: str | None = None) -> Any:
    """Load a YAML file as ruamel nodes (which carry `.lc` line info); SizingError on any problem."""
    path = Path(path)
    display = display or str(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SizingError([Problem("yaml.unreadable", display, f"cannot read the file: {e.strerror}.",
                                   fixer="rules")]) from None
    if len(data) > MAX_YAML_BYTES:
        raise SizingError([Problem("yaml.too_big", display,
                                   f"the file is {len(data) // 1000} KB; the limit is "
                                   f"{MAX_YAML_BYTES // 1000} KB.", fixer="rules")])
    text = data.decode("utf-8-sig", errors="replace")
    return parse_yaml(text, display)


def parse_yaml(text: str, display: str) -> Any:
    try:
        node = _parser().load(text)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        reason = (e.problem or e.context or "YAML syntax error").strip()
        raise SizingError([Problem("yaml.syntax", f"{display}:{line}",
                                   f"YAML syntax error: {reason}.\n{numbered_lines(text, line)}",
                                   fixer="rules")]) from None
    except YAMLError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "YAML error"
        raise SizingError([Problem("yaml.syntax", display, f"YAML error: {first}",
                                   fixer="rules")]) from None
    _check_size(node, display)
    return node


def load_yaml_text(text: str, display: str) -> tuple[Any, dict[str, int]]:
    """Plain Python data plus {top-level key: line} for a small YAML document (an intake)."""
    node = parse_yaml(text, display)
    lines = {}
    if isinstance(node, CommentedMap):
        lines = {str(k): line_of(node, k) for k in node}
    return plain(node), lines


def numbered_lines(text: str, line: int, around: int = 2) -> str:
    """The lines around `line` (1-based), numbered, with an arrow at the bad one."""
    rows = text.splitlines()
    lo, hi = max(1, line - around), min(len(rows), line + around)
    return "\n".join(f"{'>' if n == line else ' '} {n:4d} | {rows[n - 1]}" for n in range(lo, hi + 1))


def line_of(node: Any, key: Any = None) -> int:
    """1-based line of a mapping key (or of the node itself) in its source file."""
    try:
        if key is not None and isinstance(node, CommentedMap):
            return node.lc.key(key)[0] + 1
        if key is not None and isinstance(node, CommentedSeq):
            return node.lc.item(key)[0] + 1
        return node.lc.line + 1
    except (AttributeError, KeyError, TypeError, IndexError):
        return 0


def plain(node: Any) -> Any:
    """ruamel nodes → plain dicts, lists and scalars."""
    if isinstance(node, dict):
        return {str(k) if not isinstance(k, (int, float, bool)) else k: plain(v)
                for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    if isinstance(node, str):
        return str(node)
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    return node


def _check_size(node: Any, display: str) -> None:
    count, stack = 0, [node]
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_YAML_NODES:
            raise SizingError([Problem("yaml.too_big", display,
                                       "the document expands to too many values (are anchors/aliases "
                                       "nested?); write the values out plainly.", fixer="rules")])
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
