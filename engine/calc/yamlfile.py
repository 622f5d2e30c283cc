"""YAML loading that remembers line numbers and explains syntax errors with the lines around them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import ConstructorError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import CollectionEndEvent, CollectionStartEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from engine.calc.slips import show_tabs, yaml_slip
from engine.problems import Problem, SizingError

MAX_YAML_BYTES = 2_000_000
# The published and held-out evidence files are the maintainers' own record, every case with its source's
# quoted lines, and grow by a block each stop; a bound still keeps a stray file from filling the memory.
MAX_EVIDENCE_BYTES = 8_000_000
MAX_YAML_NODES = 200_000      # guards against alias ("billion laughs") expansion
# Rule files nest 5 deep, intakes 1. The C composer recurses with no guard (`- - - …` 50,000
# deep crashes the process), so nesting is counted on libyaml's flat event stream first.
MAX_YAML_DEPTH = 32
VALUE_KINDS = {"tag:yaml.org,2002:int": "a number", "tag:yaml.org,2002:float": "a number",
               "tag:yaml.org,2002:timestamp": "a date"}
PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


class LineDict(dict):
    """A mapping that remembers the line of each key (1-based)."""

    def __init__(self, line: int):
        super().__init__()
        self.line, self.lines = line, {}


class LineList(list):
    """A sequence that remembers the line of each item (1-based)."""

    def __init__(self, line: int):
        super().__init__()
        self.line, self.lines = line, []


def _parser() -> YAML:
    # The safe loader with the C parser when ruamel.yaml.clib is present: YAML 1.2 types,
    # no Python objects, and composing nodes (which carry line marks) is ~10× the round-trip speed.
    return YAML(typ="safe", pure=False)


def load_yaml_file(path: Path, display: str | None = None, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """Load a YAML file as ruamel nodes (which carry `.lc` line info); SizingError on any problem."""
    path = Path(path)
    display = display or str(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SizingError([Problem("yaml.unreadable", display, f"cannot read the file: {e.strerror}.",
                                   fixer="rules")]) from None
    if len(data) > max_bytes:
        raise SizingError([Problem("yaml.too_big", display,
                                   f"the file is {len(data) // 1000} KB; the limit is "
                                   f"{max_bytes // 1000} KB.", fixer="rules")])
    text = data.decode("utf-8-sig", errors="replace")
    return parse_yaml(text, display)


def parse_yaml(text: str, display: str, max_nodes: int = MAX_YAML_NODES) -> Any:
    """Text → LineDict/LineList/scalars; SizingError (with numbered lines) on any problem.

    `max_nodes` bounds the values, aliases expanded, so the time any document can take.
    """
    yaml = _parser()
    try:
        _check_shape(text, display, max_nodes)
        root = yaml.compose(text)
        node = _build(root, yaml.constructor, display, [0], max_nodes) if root is not None else None
    except ConstructorError as e:    # a `!!python/...` tag: never built, only named
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        raise SizingError([Problem("yaml.tag", f"{display}:{line}", "tags such as `!!python/...` are not "
                                   f"allowed: write plain values.\n"
                                   f"{numbered_lines(text, line)}", fixer="rules")]) from None
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, message = yaml_slip(text, mark.line + 1 if mark else 0, str(e.problem or e.context or ""))
        raise SizingError([Problem("yaml.syntax", f"{display}:{line}",
                                   f"{message}\n{show_tabs(numbered_lines(text, line))}",
                                   fixer="rules")]) from None
    except YAMLError:
        # Not a layout slip: characters no text file holds (a spreadsheet saved under this name?).
        raise SizingError([Problem("yaml.syntax", display, "this file holds characters that are not text "
                                   "(control characters or binary data); was another kind of file saved "
                                   "under this name?", fixer="rules")]) from None
    except RecursionError:       # not expected below MAX_YAML_DEPTH; never a crash if it happens
        raise SizingError([Problem("yaml.too_deep", display, "lists and mappings are nested too deeply; "
                                   "write the values out plainly.", fixer="rules")]) from None
    return node


def _check_shape(text: str, display: str, max_nodes: int) -> None:
    """Refuse documents nested deeper than MAX_YAML_DEPTH, or holding more than `max_nodes`
    values, from libyaml's events alone: before anything recursive or slow reads them."""
    depth = count = 0
    for event in _parser().parse(text):
        count += 1
        if count > 2 * max_nodes + 4:          # a collection is two events, the stream and document four
            raise SizingError([Problem("yaml.too_big", display, f"the file holds more than {max_nodes:,} "
                                       "values, more than it can need; write only the ones that matter.",
                                       fixer="rules")])
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise SizingError([Problem("yaml.too_deep", f"{display}:{event.start_mark.line + 1}",
                                           f"lists and mappings are nested more than {MAX_YAML_DEPTH} "
                                           "levels deep here; write the values out plainly.", fixer="rules")])
        elif isinstance(event, CollectionEndEvent):
            depth -= 1


def _scalar(node, constructor, display: str) -> Any:
    """A plain value; one that looks like a number or date but cannot be one is said, with its line."""
    try:
        return constructor.construct_object(node, deep=True)
    except (ValueError, OverflowError) as e:
        text = str(node.value)
        shown = text if len(text) <= 40 else f"{text[:20]}…{text[-8:]} ({len(text)} characters)"
        kind = VALUE_KINDS.get(str(node.tag), "a value")
        reason = "too many digits" if kind == "a number" else str(e)
        raise SizingError([Problem("yaml.value", f"{display}:{node.start_mark.line + 1}",
                                   f"`{shown}` looks like {kind} but cannot be read as one ({reason}); "
                                   "write it plainly, or in quotes if it is text.", fixer="rules")]) from None


def _build(node, constructor, display: str, count: list[int], max_nodes: int = MAX_YAML_NODES) -> Any:
    """Plain containers that remember lines; duplicate keys and alias floods are refused."""
    count[0] += 1
    if count[0] > max_nodes:
        raise SizingError([Problem("yaml.too_big", display,
                                   "the document expands to too many values (are anchors/aliases "
                                   "nested?); write the values out plainly.", fixer="rules")])
    line = node.start_mark.line + 1
    if isinstance(node, (MappingNode, SequenceNode)) and str(node.tag) not in PLAIN_TAGS:
        raise SizingError([Problem("yaml.tag", f"{display}:{line}",
                                   f"the tag `{node.tag}` is not allowed; write plain mappings and lists.",
                                   fixer="rules")])
    if isinstance(node, MappingNode):
        out, merged = LineDict(line), []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":     # `<<: *anchor` — explicit keys win
                value = _build(value_node, constructor, display, count, max_nodes)
                merged.extend(value if isinstance(value, list) else [value])
                continue
            key = _scalar(key_node, constructor, display) if isinstance(key_node, ScalarNode) \
                else f"<{type(key_node).__name__}>"
            key_line = key_node.start_mark.line + 1
            if isinstance(key, (list, dict)) or not isinstance(key, (str, int, float, bool, type(None))):
                key = str(key)
            if key in out:
                raise SizingError([Problem("yaml.duplicate_key", f"{display}:{key_line}",
                                           f"the key `{key}` appears twice in one mapping (first at line "
                                           f"{out.lines[key]}); keep one.", fixer="rules")])
            out[key] = _build(value_node, constructor, display, count, max_nodes)
            out.lines[key] = key_line
        for extra in merged:
            if isinstance(extra, LineDict):
                for key, value in extra.items():
                    if key not in out:
                        out[key], out.lines[key] = value, extra.lines.get(key, line)
        return out
    if isinstance(node, SequenceNode):
        out = LineList(line)
        for item in node.value:
            out.append(_build(item, constructor, display, count, max_nodes))
            out.lines.append(item.start_mark.line + 1)
        return out
    return _scalar(node, constructor, display)


def load_yaml_text(text: str, display: str, max_nodes: int = MAX_YAML_NODES) -> tuple[Any, dict[str, int]]:
    """Plain Python data plus {top-level key: line} for a small YAML document (an intake)."""
    node = parse_yaml(text, display, max_nodes)
    lines = {str(k): line_of(node, k) for k in node} if isinstance(node, LineDict) else {}
    return plain(node), lines


def numbered_lines(text: str, line: int, around: int = 2) -> str:
    """The lines around `line` (1-based), numbered, with an arrow at the bad one."""
    rows = text.splitlines()
    lo, hi = max(1, line - around), min(len(rows), line + around)
    return "\n".join(f"{'>' if n == line else ' '} {n:4d} | {rows[n - 1]}" for n in range(lo, hi + 1))


def line_of(node: Any, key: Any = None) -> int:
    """1-based line of a mapping key (or of the node itself) in its source file."""
    try:
        if key is not None and isinstance(node, LineDict):
            return node.lines[key]
        if key is not None and isinstance(node, LineList):
            return node.lines[key]
        return node.line
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
