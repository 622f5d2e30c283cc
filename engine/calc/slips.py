"""Plain words for the usual slips in rule and catalog files: layout, tabs, brackets, quotes, Excel habits."""

from __future__ import annotations

import ast
import re

PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*%(?=\s*(?:$|[),\]*/+\-<>=!]|and\b|or\b))")
OPENERS, CLOSERS = "([{", ")]}"
EXCEL_WORDS = {"AND": "a and b", "OR": "a or b", "NOT": "not a"}


# ------------------------------------------------------------------ formulas


def formula_syntax(source: str, offset: int | None, lineno: int | None = 1, functions=()) -> str:
    """Why a formula cannot be read, in the author's words (never the parser's)."""
    slips = [*_formula_habits(source)]
    for name in dict.fromkeys(re.findall(r"\b([A-Za-z_]\w*)\s*\(", source)):
        if function_case(name, functions):
            slips.append(function_case(name, functions))
    bracket = bracket_slip(source)
    if bracket:
        slips.append(bracket)
    if slips:
        return " Also, ".join(slips)
    lines = source.splitlines() or [source]
    line = lines[min(max((lineno or 1) - 1, 0), len(lines) - 1)]
    at = line[offset - 1:][:24].strip() if offset else ""
    if not at:
        return (f"the formula ends too early: something is missing after `{source.strip()[-24:]}` "
                "(a number, a name or a closing bracket).")
    where = f"at column {offset}" + (f" of its line {lineno}" if lineno and lineno > 1 else "")
    return (f"this formula cannot be read {where}, at `{at}`: look there for a missing operator "
            "(+ - * /), comma, bracket or quote.")


def _formula_habits(source: str):
    """Spreadsheet habits that are not formula syntax here."""
    if source.lstrip().startswith("="):
        yield "a formula does not start with `=`: remove the `=` at its start."
    for match in PERCENT.finditer(source):
        number = float(match.group(1)) / 100
        yield f"write {number:g}, not {match.group(0).strip()}: shares are written as fractions here."


def bracket_slip(source: str) -> str:
    """The first unbalanced bracket or unclosed quote, with its column (1-based); "" when all is balanced."""
    stack: list[tuple[str, int]] = []
    quote = None
    for index, ch in enumerate(source):
        col = index + 1
        if quote:
            if ch == quote[0]:
                quote = None
            continue
        if ch in "\"'":
            quote = (ch, col)
        elif ch in OPENERS:
            stack.append((ch, col))
        elif ch in CLOSERS:
            want = OPENERS[CLOSERS.index(ch)]
            if not stack:
                return f"the `{ch}` at column {col} has no `{want}` before it: remove it, or add the `{want}`."
            opened, at = stack.pop()
            if opened != want:
                return (f"the `{opened}` at column {at} is closed by `{ch}` at column {col}: close it with "
                        f"`{CLOSERS[OPENERS.index(opened)]}`.")
    if quote:
        return f"the quote {quote[0]} at column {quote[1]} is never closed: end the text with {quote[0]}."
    if stack:
        opened, at = stack[-1]
        return f"the `{opened}` at column {at} is never closed: add `{CLOSERS[OPENERS.index(opened)]}`."
    return ""


def function_case(name: str, known) -> str:
    """`IF(` for `if(`, `AND(a, b)` for `a and b`: the Excel spelling of a function; "" if it is not one."""
    if name.upper() in EXCEL_WORDS and name.lower() not in known:
        return f"write `{EXCEL_WORDS[name.upper()]}`, not `{name}(...)`: there is no {name}() here."
    if name != name.lower() and name.lower() in known:
        return f"write `{name.lower()}(`, not `{name}(`: function names are lower-case."
    return ""


def quote_hint(formula: str, tree: ast.AST, name: str, types: dict[str, str]) -> str:
    """For an unknown name that is really text left unquoted (`workload == online-inference`), say so.

    `tree` is the compiled formula's; its columns are those of `formula` (`if(` is renamed letter for letter).
    """
    if name in ("TRUE", "FALSE"):
        return f"write `{name.lower()}`, not `{name}`."
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for index, side in enumerate(sides):
            words = _bare_words(side)
            if words is None or name not in words:
                continue
            others = [s for i, s in enumerate(sides) if i != index]
            hyphenated = len(words) > 1
            texty = any(isinstance(o, ast.Name) and types.get(o.id) in ("text", "any") for o in others)
            if hyphenated or texty:
                return _quoted_example(formula, node, side)
    return ""


def _bare_words(node: ast.AST) -> list[str] | None:
    """The names of `online-inference` read as online minus inference; None for anything else."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        left, right = _bare_words(node.left), _bare_words(node.right)
        return left + right if left is not None and right is not None else None
    return None


def _quoted_example(formula: str, compare: ast.Compare, side: ast.AST) -> str:
    whole = ast.get_source_segment(formula, compare) or ""
    word = ast.get_source_segment(formula, side) or ""
    fixed = _joined(word)
    start = side.col_offset - compare.col_offset
    example = whole[:start] + f'"{fixed}"' + whole[start + len(word):]
    return f"put text in quotes: `{example}`."


def _joined(word: str) -> str:
    """`online - inference` as the one word it was meant to be."""
    return re.sub(r"\s*-\s*", "-", word)


def quoted_list_hint(formula: str, compare: ast.Compare) -> str:
    """`workload in [pretraining, fine-tuning]` → the same list with its words in quotes."""
    right = compare.comparators[0]
    if not all(_bare_words(e) is not None or isinstance(e, ast.Constant) for e in right.elts):
        return ""
    items = []
    for element in right.elts:
        text = ast.get_source_segment(formula, element) or ""
        items.append(text if isinstance(element, ast.Constant) else '"' + _joined(text) + '"')
    left = ast.get_source_segment(formula, compare.left) or "x"
    word = "not in" if isinstance(compare.ops[0], ast.NotIn) else "in"
    return f"put text in quotes: `{left} {word} [{', '.join(items)}]`."


# ------------------------------------------------------------------ YAML layout


def yaml_slip(text: str, line: int, reason: str) -> tuple[int, str]:
    """(line, plain sentence) for a YAML syntax error the parser reported near `line` with `reason`."""
    rows = text.splitlines()
    for n in _nearby(rows, line):
        tab = rows[n - 1].find("\t")
        if tab >= 0 and not rows[n - 1][:tab].strip():
            return n, (f"replace the tab at column {tab + 1} with spaces (shown as → below): rule and catalog "
                       "files are indented with spaces only.")
    for n in _nearby(rows, line):
        row = rows[n - 1]
        if re.match(r"^\s*(- )?[A-Za-z_][\w.-]*:[^\s/]", row) and "://" not in row.split(":", 1)[1][:3]:
            return n, "put a space after the colon (`formula: 30`, not `formula:30`)."
    indent = _indent_slip(rows, line)
    if indent:
        return indent
    bracket = _flow_slip(rows, line)
    if bracket:
        return bracket
    if "mapping values" in reason and 0 < line <= len(rows):
        value = rows[line - 1].split(": ", 1)[-1]
        if ": " in value:
            return line, ("this text holds `: `, which starts a new field here: put the whole text in quotes, "
                          "or write `>-` and the text on the next lines, indented.")
    return line, ("this line does not fit the layout of the lines above: compare its indentation, dashes, "
                  "colons and quotes with theirs.")


def _nearby(rows: list[str], line: int) -> list[int]:
    """The reported line first, then the ones just above (the parser often notices a slip one line late)."""
    return [n for n in (line, line - 1, line - 2) if 1 <= n <= len(rows)]


def _meaningful(row: str) -> bool:
    stripped = row.strip()
    return bool(stripped) and not stripped.startswith("#")


def _indent(row: str) -> int:
    return len(row) - len(row.lstrip(" "))


def _indent_slip(rows: list[str], line: int) -> tuple[int, str] | None:
    """A key or list item indented differently from its neighbours."""
    for n in _nearby(rows, line):
        row = rows[n - 1]
        if not _meaningful(row):
            continue
        above = next((m for m in range(n - 1, 0, -1) if _meaningful(rows[m - 1])), None)
        if above is None:
            continue
        prev = rows[above - 1]
        mine = _indent(row)
        if row.lstrip().startswith("- "):
            siblings = [_indent(rows[m - 1]) for m in range(n - 1, 0, -1)
                        if rows[m - 1].lstrip().startswith("- ") and abs(_indent(rows[m - 1]) - mine) <= 2]
            if siblings and siblings[0] != mine:
                return n, (f"indent this line like the other items of the list above ({siblings[0]} spaces "
                           f"before the `-`, not {mine}).")
            continue
        # A key continues the mapping of the line above: at its indentation, or inside a `- ` item.
        expected = _indent(prev) + (2 if prev.lstrip().startswith("- ") else 0)
        opens_block = prev.rstrip().endswith(":") or prev.rstrip().endswith((">-", "|", ">", "|-"))
        if not opens_block and mine != expected and abs(mine - expected) <= 3:
            return n, f"indent this line like the one above ({expected} spaces, not {mine})."
    return None


def _flow_slip(rows: list[str], line: int) -> tuple[int, str] | None:
    """An unclosed `{`, `[` or quote on the reported line or one of the lines above it (nearest first)."""
    for n in range(min(line, len(rows)), max(line - 12, 0), -1):
        row = rows[n - 1]
        if not _meaningful(row):
            continue
        value = row.split(": ", 1)[1] if ": " in row else row.lstrip(" -")
        slip = _unclosed(value.strip())
        if slip:
            return n, f"on this line, {slip}"
    return None


def _unclosed(value: str) -> str:
    """What a YAML value leaves open: a quoted text or a {…}/[…] list ("" when nothing is)."""
    if not value or value[0] not in "\"'{[":
        return ""                   # plain text: apostrophes and brackets in it are just characters
    depth: list[str] = []
    quote, after_separator = None, True
    for index, ch in enumerate(value):
        if quote:
            if ch == quote and not (quote == '"' and value[index - 1] == "\\"):
                quote = None
            continue
        if ch in "\"'" and after_separator:
            quote = ch
        elif ch in "{[":
            depth.append(ch)
        elif ch in "}]" and depth:
            depth.pop()
        elif ch == "#" and value[index - 1:index] == " " and not depth:
            break                   # a comment
        if not depth and index > 0 and quote is None and ch in "}]":
            break
        after_separator = ch in "{[,:" or (ch == " " and after_separator)
    if quote:
        return f"the quote {quote} is never closed: end the text with {quote}."
    if depth:
        return f"the `{depth[-1]}` is never closed: add `{CLOSERS[OPENERS.index(depth[-1])]}`."
    return ""


def show_tabs(excerpt: str) -> str:
    """Tabs made visible in a quoted excerpt."""
    return excerpt.replace("\t", "→")
