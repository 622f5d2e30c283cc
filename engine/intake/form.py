"""The intake form (rules/intake.yaml): fields, choices and wording, loaded once and checked."""

from __future__ import annotations

import difflib
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.calc.rulecache import cached_data
from engine.calc.yamlfile import line_of, load_yaml_file, plain
from engine.paths import LANGUAGES, RULES_DIR
from engine.problems import Problem, SizingError

TYPES = ("text", "email", "number", "integer", "bool", "choice", "gpu", "model")
MEASURES = ("count", "bytes", "fraction")
FIELD_KEYS = ("key", "section", "type", "label", "help", "unit", "choices", "measure", "scale",
              "min", "max", "default", "required", "applies_when", "max_length", "pattern", "expect")
KEY_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
# The template's own defined names: which form version and language a workbook was made from.
VERSION_NAME, LANGUAGE_NAME = "sizing_template_version", "sizing_template_language"


def localized(value: Any, lang: str) -> str:
    """The text for `lang` from {en, zh-TW, zh-CN} (English if missing), or the one text for all."""
    if isinstance(value, dict):
        return str(value.get(lang) or value.get("en") or next(iter(value.values()), ""))
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Choice:
    id: str
    label: Any                 # {lang: text} or one text
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Field:
    """One intake field; see the comment at the top of rules/intake.yaml."""

    key: str
    section: str
    type: str
    label: Any
    help: Any
    unit: Any = None
    choices: str | None = None
    measure: str = "count"
    scale: float = 1.0
    min: float | None = None
    max: float | None = None
    default: Any = None
    required: bool | tuple[str, ...] = False
    applies_when: tuple[str, ...] | None = None
    max_length: int | None = None
    pattern: str | None = None
    expect: Any = None
    line: int = 0

    def applies(self, workload: str | None) -> bool:
        return self.applies_when is None or workload is None or workload in self.applies_when

    def is_required(self, workload: str | None) -> bool:
        if isinstance(self.required, tuple):
            return workload in self.required
        return bool(self.required)


@dataclass(frozen=True)
class Form:
    """The whole form: fields in sheet order, sections, choice lists and the wording tables."""

    version: int
    fields: dict[str, Field]
    sections: dict[str, Any]          # id → label
    choices: dict[str, tuple[Choice, ...]]
    texts: dict[str, Any]
    messages: dict[str, Any]
    sheets: dict[str, Any]
    catalog_words: dict[str, Any]     # words in catalog names' brackets → {zh-TW, zh-CN}

    def text(self, name: str, lang: str, **values: Any) -> str:
        text = localized(self.texts.get(name, name), lang)
        return text.format(**values) if values else text

    def sheet(self, name: str, lang: str) -> str:
        return localized(self.sheets[name], lang)

    def label(self, key: str, lang: str) -> str:
        return localized(self.fields[key].label, lang) if key in self.fields else key

    def choice_label(self, list_name: str, choice_id: str, lang: str) -> str:
        for c in self.choices.get(list_name, ()):
            if c.id == choice_id:
                return localized(c.label, lang)
        return str(choice_id)

    def catalog_name(self, name: str, lang: str) -> str:
        """A GPU's or model's catalog name as the `lang` drop-downs show it: the words in its
        brackets in that language, and in Chinese, Chinese brackets and commas."""
        if lang == "en" or "(" not in name:
            return name

        def bracket(match: re.Match) -> str:
            words = [w.strip() for w in match.group(1).split(",")]
            words = [localized(self.catalog_words[w], lang) if w in self.catalog_words else w for w in words]
            return "（" + "，".join(words) + "）"
        return re.sub(r"\s*\(([^()]*)\)", bracket, name)

    def message(self, code: str, lang: str, **values: Any) -> str:
        """The message for a problem code; {some_field_key} prints that field's label."""
        return localized(self.messages[code], lang).format_map(_Names(self, lang, values))


class _Names(dict):
    def __init__(self, form: Form, lang: str, values: dict):
        super().__init__(values)
        self.form, self.lang = form, lang

    def __missing__(self, key: str) -> str:
        return self.form.label(key, self.lang) if key in self.form.fields else "{" + key + "}"


_cache: dict[Path, tuple[tuple[int, int], Form]] = {}
_lock = threading.Lock()


FORM_PATH = RULES_DIR / "intake.yaml"


def current_form() -> Form:
    return load_form(FORM_PATH)


def form_problems(rules_dir: Path) -> list[Problem]:
    """What is wrong with the form in a rules folder (none when it has no intake.yaml)."""
    path = Path(rules_dir) / "intake.yaml"
    if not path.exists():
        return []
    try:
        load_form(path)
    except SizingError as e:
        return list(e.problems)
    return []


def load_form(path: Path = FORM_PATH) -> Form:
    """Load and check the form (cached until the file changes); SizingError as file:line."""
    path = Path(path)
    try:
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = (0, 0)
    with _lock:
        hit = _cache.get(path)
        if hit and hit[0] == stamp:
            return hit[1]
    display = f"rules/{path.name}"
    # kept between processes too: parsing the form is a sixth of a fresh quote's time
    form = cached_data("form", path, lambda: _build(load_yaml_file(path, display), display))
    with _lock:
        _cache[path] = (stamp, form)
    return form


def _build(doc: Any, display: str) -> Form:
    problems: list[Problem] = []

    def bad(node, key, message):
        problems.append(Problem("form.invalid", f"{display}:{line_of(node, key)}", message, fixer="rules"))

    if not isinstance(doc, dict):
        raise SizingError([Problem("form.invalid", f"{display}:1", "the form must be a mapping with "
                                   "`version`, `sections`, `choices`, `fields`, `texts`, `messages`.",
                                   fixer="rules")])
    version = doc.get("version")
    if not isinstance(version, int) or version < 1:
        bad(doc, "version", "`version` must be a whole number from 1 up.")
    sections = {str(s.get("id")): plain(s.get("label")) for s in doc.get("sections") or []
                if isinstance(s, dict)}
    choices = {}
    for name, items in (doc.get("choices") or {}).items():
        if not isinstance(items, list) or not all(isinstance(i, dict) and "id" in i for i in items):
            bad(doc["choices"], name, f"choice list `{name}` must be a list of `- id: ..., label: ...`.")
            continue
        choices[str(name)] = tuple(Choice(str(i["id"]), plain(i.get("label", i["id"])),
                                          tuple(str(a) for a in i.get("aliases") or ())) for i in items)
    workloads = {c.id for c in choices.get("workload", ())}
    fields: dict[str, Field] = {}
    for index, node in enumerate(doc.get("fields") or []):
        f = _field(node, index, doc["fields"], sections, choices, workloads, bad)
        if f is not None:
            if f.key in fields:
                bad(doc["fields"], index, f"field `{f.key}` is listed twice (first at line {fields[f.key].line}).")
            fields[f.key] = f
    if not fields:
        bad(doc, "fields", "the form has no fields.")
    texts, messages = plain(doc.get("texts") or {}), plain(doc.get("messages") or {})
    for table_name, table in (("texts", texts), ("messages", messages)):
        for name, value in table.items():
            if isinstance(value, dict) and not all(lang in value for lang in LANGUAGES):
                bad(doc[table_name], name, f"{table_name}.{name} needs en, zh-TW and zh-CN.")
    for name in ("intake", "how_to", "lists", "problems"):
        if name not in (doc.get("sheets") or {}):
            bad(doc, "sheets", f"`sheets` needs a name for `{name}`.")
    if problems:
        raise SizingError(problems)
    words = plain(doc.get("catalog_words") or {})
    for word, value in words.items():
        if not isinstance(value, dict) or not all(lang in value for lang in LANGUAGES[1:]):
            bad(doc["catalog_words"], word, f"catalog_words.{word} needs zh-TW and zh-CN.")
    if problems:
        raise SizingError(problems)
    return Form(version, fields, sections, choices, texts, messages, plain(doc["sheets"]), words)


def _field(node, index, parent, sections, choices, workloads, bad) -> Field | None:
    if not isinstance(node, dict) or not isinstance(node.get("key"), str):
        bad(parent, index, "each field needs `key:` (a canonical input key).")
        return None
    key, ok = node["key"], True
    for attr in node:
        if attr not in FIELD_KEYS:
            hint = difflib.get_close_matches(str(attr), FIELD_KEYS, n=1)
            bad(node, attr, f"field `{key}`: unknown attribute `{attr}`"
                + (f"; did you mean `{hint[0]}`?" if hint else "."))
            ok = False
    checks = [
        (KEY_PATTERN.fullmatch(key), "key", "keys are lower-case letters, digits and _"),
        (node.get("section") in sections, "section", f"section must be one of {', '.join(sections)}"),
        (node.get("type") in TYPES, "type", f"type must be one of {', '.join(TYPES)}"),
        (node.get("type") != "choice" or node.get("choices") in choices, "choices",
         "a choice field names a list under `choices`"),
        (node.get("measure", "count") in MEASURES, "measure", f"measure must be one of {', '.join(MEASURES)}"),
        (all(lang in (node.get("label") or {}) for lang in LANGUAGES), "label", "label needs en, zh-TW, zh-CN"),
        (all(lang in (node.get("help") or {}) for lang in LANGUAGES), "help", "help needs en, zh-TW, zh-CN"),
        (set(node.get("applies_when") or ()) <= workloads, "applies_when", "applies_when lists workload ids"),
        (isinstance(node.get("required", False), bool) or set(node["required"]) <= workloads, "required",
         "required is true/false or a list of workload ids"),
        (node.get("min") is None or node.get("max") is None or node["min"] <= node["max"], "min",
         "min must not exceed max"),
    ]
    for passed, attr, message in checks:
        if not passed:
            bad(node, attr if attr in node else None, f"field `{key}`: {message}.")
            ok = False
    if not ok:
        return None
    required = node.get("required", False)
    return Field(
        key=key, section=node["section"], type=node["type"], label=plain(node["label"]),
        help=plain(node["help"]), unit=plain(node.get("unit")), choices=node.get("choices"),
        measure=node.get("measure", "count"), scale=float(node.get("scale", 1.0)),
        min=node.get("min"), max=node.get("max"), default=plain(node.get("default")),
        required=required if isinstance(required, bool) else tuple(required),
        applies_when=tuple(node["applies_when"]) if node.get("applies_when") else None,
        max_length=node.get("max_length"), pattern=node.get("pattern"), expect=plain(node.get("expect")),
        line=line_of(parent, index))
