"""Reading what people type: "1,000", "8 GPUs", "70B", "1 TB", "40%", full-width digits, 是/否."""

from __future__ import annotations

import math
import re
import unicodedata
from datetime import date, datetime, time
from typing import Any

# C0 and C1 controls but tab, line feed and carriage return; DEL; the bidirectional overrides.
CONTROLS = dict.fromkeys([*(c for c in range(32) if c not in (9, 10, 13)), *range(127, 160),
                          *range(0x202A, 0x202F), *range(0x2066, 0x206A)])

# Words for a multiplier after a number. Latin ones must end the token ("70B", "2T tokens"),
# so "8 GPUs" or "100 ms" are not read as giga/milli.
MULTIPLIERS = {"k": 1e3, "thousand": 1e3, "m": 1e6, "mn": 1e6, "million": 1e6, "b": 1e9,
               "bn": 1e9, "billion": 1e9, "t": 1e12, "tn": 1e12, "trillion": 1e12}
CJK_MULTIPLIERS = {"百萬": 1e6, "百万": 1e6, "千": 1e3, "萬": 1e4, "万": 1e4, "億": 1e8, "亿": 1e8, "兆": 1e12}
BYTE_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}
TRUE_WORDS = {"yes", "y", "true", "t", "1", "on", "是", "對", "对", "有", "開", "开", "啟用", "启用", "要"}
FALSE_WORDS = {"no", "n", "false", "f", "0", "off", "否", "不", "不是", "錯", "错", "無", "无", "關", "关",
               "停用", "不要"}

_NUMBER = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*(.*)", re.IGNORECASE | re.DOTALL)
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)")
_DECIMAL_COMMA = re.compile(r"([+-]?\d+),(\d+)(?!\d)")
_WORD = re.compile(r"[a-z]+", re.IGNORECASE)


def clean(text: Any) -> str:
    """Text as a person meant it: full-width forms folded (ＡＢＣ１２３ → ABC123), spaces trimmed."""
    text = unicodedata.normalize("NFKC", str(text))
    return " ".join(text.split())


def fold(text: Any) -> str:
    """A matching key: cleaned, case-folded, without spaces, hyphens, underscores or dots."""
    return re.sub(r"[\s\-_.·]+", "", clean(text).casefold())


def printable(value: Any) -> Any:
    """Text without control characters (tabs and line breaks stay) and without the invisible
    marks that reverse the reading order; other values as they are."""
    if isinstance(value, str):
        return value.translate(CONTROLS)
    if isinstance(value, list):
        return [printable(v) for v in value]
    if isinstance(value, dict):
        return {k: printable(v) for k, v in value.items()}
    return value


def is_blank(value: Any) -> bool:
    """None or empty text. NaN is not blank: `.nan` (YAML) or `NaN` (JSON) is refused like any
    other value that is not a number, not quoted as if the field were left out."""
    return value is None or (isinstance(value, str) and not clean(value))


def parse_number(value: Any, measure: str = "count", scale: float = 1.0) -> float:
    """A number in the field's unit; ValueError if it is not one.

    `scale` is one field unit in base units (1e9 for *_billion), so "70B" → 70 and
    "7000M" → 7 for a billions field, "1 TB" → 1000 for a GB field (measure "bytes"),
    "40%" → 0.4 for a fraction.
    """
    if isinstance(value, bool) or isinstance(value, (datetime, date, time)):
        raise ValueError("not a number")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return float(value)
    text = clean(value).replace("_", "").replace("\u2212", "-")
    thousands = _THOUSANDS.match(text)
    if thousands:
        text = text[:thousands.end()].replace(",", "") + text[thousands.end():]
    else:
        text = _DECIMAL_COMMA.sub(r"\1.\2", text, count=1)   # "0,4" from a comma-decimal locale
    match = _NUMBER.fullmatch(text)
    if not match:
        raise ValueError("not a number")
    factor, rest = _unit_factor(match.group(2).strip(), measure)
    if re.search(r"\d", rest):
        raise ValueError("more than one number")      # "8 x 4", "1-2": ambiguous, so ask
    result = _in_field_unit(float(match.group(1)), factor, scale)
    if not math.isfinite(result):
        raise ValueError("not a finite number")
    return result


def _in_field_unit(number: float, factor: float | None, scale: float) -> float:
    # factor None: no multiplier, byte unit or %, so the number is already in the field's unit.
    return number if factor is None else number * factor / scale


def _unit_factor(rest: str, measure: str) -> tuple[float | None, str]:
    """(multiplier in base units or None, what is left) for the text after the number."""
    if not rest:
        return None, ""
    if rest.startswith("%"):
        if measure != "fraction":
            raise ValueError("a percentage is not allowed here")
        return 0.01, rest[1:].strip()
    for word, factor in CJK_MULTIPLIERS.items():
        if rest.startswith(word):
            return factor, rest[len(word):].strip()
    word = _WORD.match(rest)
    if word:
        token = word.group(0).casefold()
        if measure == "bytes" and token in BYTE_UNITS:
            return BYTE_UNITS[token], rest[word.end():].strip()
        if measure != "bytes" and token in MULTIPLIERS:
            return MULTIPLIERS[token], rest[word.end():].strip()
    return None, rest        # a unit word such as "GPUs", "ms", "tokens", "張": ignored


def parse_integer(value: Any, measure: str = "count", scale: float = 1.0) -> int:
    number = parse_number(value, measure, scale)
    if abs(number - round(number)) > 1e-9 * max(1.0, abs(number)):
        raise ValueError("not a whole number")
    return int(round(number))


def parse_bool(value: Any, extra_true: tuple[str, ...] = (), extra_false: tuple[str, ...] = ()) -> bool:
    """yes/no, true/false, 1/0, 是/否 (and the given labels); ValueError otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    word = fold(value)
    if word in TRUE_WORDS or word in {fold(w) for w in extra_true}:
        return True
    if word in FALSE_WORDS or word in {fold(w) for w in extra_false}:
        return False
    raise ValueError("not yes or no")
