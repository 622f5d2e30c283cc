"""Safe formula expressions: parsed once against a whitelist, evaluated on numbers or numpy arrays."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from engine.calc.slips import formula_syntax, function_case, quoted_list_hint

MAX_FORMULA_CHARS = 2000
MAX_DEPTH = 40
MAX_STRING_CHARS = 200
MAX_EXPONENT = 100
IF_NAME = "_f"       # `if` is a Python keyword, so `if(` is renamed (to as many letters: columns stay right)


class FormulaError(Exception):
    """A formula that is refused or fails; `code` is stable, the message says how to fix it."""

    def __init__(self, code: str, message: str):
        self.code, self.message = code, message
        super().__init__(message)


@dataclass(frozen=True)
class Formula:
    """A compiled expression: the names it reads and a function of a scope (name → value)."""

    text: str
    names: frozenset[str]           # variables read (inputs or other rules)
    functions: frozenset[str]
    tree: ast.Expression
    run: Callable[[dict], Any]

    def __call__(self, scope: dict) -> Any:
        return self.run(scope)


_BINOPS = {
    ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.true_divide,
    ast.FloorDiv: np.floor_divide, ast.Mod: np.mod, ast.Pow: None,   # Pow is guarded below
}
_COMPARE = {
    ast.Eq: np.equal, ast.NotEq: np.not_equal, ast.Lt: np.less, ast.LtE: np.less_equal,
    ast.Gt: np.greater, ast.GtE: np.greater_equal,
}
_OP_WORDS = {ast.BitXor: "`^` is not a power here: write a ** b",
             ast.BitAnd: "write `and` instead of `&`", ast.BitOr: "write `or` instead of `|`"}


def compile_formula(text: Any, functions: dict) -> Formula:
    """Parse and compile `text`; FormulaError for anything outside the whitelist."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise FormulaError("formula.type", f"a formula must be text or a number, not {type(text).__name__}.")
    source = str(text).strip()
    if not source:
        raise FormulaError("formula.empty", "the formula is empty.")
    if len(source) > MAX_FORMULA_CHARS:
        raise FormulaError("formula.too_long", f"the formula is longer than {MAX_FORMULA_CHARS} characters; "
                                               "split it into smaller rules.")
    tree = _parse(source, functions)
    compiler = _Compiler(functions, source)
    run = compiler.node(tree.body, depth=0)
    return Formula(source, frozenset(compiler.names), frozenset(compiler.called), tree, run)


def _parse(source: str, functions=()) -> ast.Expression:
    try:
        renamed = _rename_if(source)
        return ast.parse(renamed, mode="eval")
    except (SyntaxError, tokenize.TokenError, IndentationError) as e:
        # The parser's words (EOF, invalid syntax, tokens) mean nothing to a rule author: say what slipped.
        offset, lineno = (e.offset, e.lineno) if isinstance(e, SyntaxError) else (None, None)
        raise FormulaError("formula.syntax", formula_syntax(source, offset, lineno, functions)) from None
    except ValueError:   # e.g. NUL bytes
        raise FormulaError("formula.syntax", "the formula holds characters that are not text (a NUL byte?); "
                                             "retype it.") from None


_IF_WORD = re.compile(r"\bif\b")


def _rename_if(source: str) -> str:
    """Turn the worksheet-style `if(` into a callable name, leaving strings alone."""
    if not _IF_WORD.search(source):
        return source      # most formulas: tokenizing them is most of what compiling costs
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    out = []
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.NAME and tok.string == "if":
            nxt = next((t for t in tokens[i + 1:] if t.type not in (tokenize.NL, tokenize.COMMENT)), None)
            if nxt is not None and nxt.string == "(":
                tok = tok._replace(string=IF_NAME)
        out.append(tok)
    return tokenize.untokenize(out)


def is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.ndim > 0


class _Compiler:
    """Turns each whitelisted AST node into a closure; any other node is refused."""

    def __init__(self, functions: dict, source: str = ""):
        self.functions, self.source = functions, source
        self.names: set[str] = set()
        self.called: set[str] = set()

    def node(self, node: ast.AST, depth: int) -> Callable[[dict], Any]:
        if depth > MAX_DEPTH:
            raise FormulaError("formula.too_deep", "the formula is nested too deeply; split it into rules.")
        handler = getattr(self, f"_{type(node).__name__}", None)
        if handler is None:
            raise FormulaError("formula.refused", _refusal(node))
        return handler(node, depth + 1)

    def _Constant(self, node, depth):
        value = node.value
        if isinstance(value, bool):
            return lambda scope: value
        if isinstance(value, (int, float)):
            number = np.float64(value)
            return lambda scope: number
        if isinstance(value, str):
            if len(value) > MAX_STRING_CHARS:
                raise FormulaError("formula.long_text", f"text constants are limited to {MAX_STRING_CHARS} characters.")
            return lambda scope: value
        raise FormulaError("formula.refused", f"the constant {value!r} is not allowed; use numbers, "
                                              "text in quotes, true or false.")

    def _Name(self, node, depth):
        name = node.id
        if name.startswith("_"):
            raise FormulaError("formula.refused", f"names starting with `_` (here `{name}`) are not allowed.")
        if name in ("true", "True"):
            return lambda scope: True
        if name in ("false", "False"):
            return lambda scope: False
        self.names.add(name)

        def read(scope, name=name):
            try:
                return scope[name]
            except KeyError:
                raise FormulaError("formula.unknown_name", f"`{name}` has no value here.") from None
        return read

    def _BinOp(self, node, depth):
        op = type(node.op)
        if op not in _BINOPS:
            raise FormulaError("formula.refused", _OP_WORDS.get(op, f"the operator {op.__name__} is not allowed."))
        left, right = self.node(node.left, depth), self.node(node.right, depth)
        if op is ast.Pow:
            return lambda scope: _power(left(scope), right(scope))
        fn = _BINOPS[op]
        return lambda scope: _numeric(fn, left(scope), right(scope))

    def _UnaryOp(self, node, depth):
        operand = self.node(node.operand, depth)
        if isinstance(node.op, ast.USub):
            return lambda scope: -_number(operand(scope))
        if isinstance(node.op, ast.UAdd):
            return lambda scope: _number(operand(scope))
        if isinstance(node.op, ast.Not):
            return lambda scope: _not(operand(scope))
        raise FormulaError("formula.refused", "the operator `~` is not allowed; write `not`.")

    def _BoolOp(self, node, depth):
        parts = [self.node(v, depth) for v in node.values]
        is_and = isinstance(node.op, ast.And)

        def run(scope):
            result = None
            for part in parts:
                value = part(scope)
                if not is_array(value) and not is_array(result):
                    truth = bool(value)
                    if is_and and not truth:
                        return False
                    if not is_and and truth:
                        return True
                    result = truth if result is None else result
                else:
                    result = value if result is None else (
                        np.logical_and(result, value) if is_and else np.logical_or(result, value))
            return result
        return run

    def _Compare(self, node, depth):
        left = self.node(node.left, depth)
        steps = []
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.List, ast.Tuple)):
                    raise FormulaError("formula.refused", "`in` needs a list written out, e.g. "
                                                          'workload in ["pretraining", "fine-tuning"].')
                try:
                    choices = [self._literal(e) for e in right.elts]
                except FormulaError as e:
                    hint = quoted_list_hint(self.source, node) if self.source else ""
                    raise FormulaError(e.code, hint or e.message) from None
                steps.append((_membership(choices, isinstance(op, ast.NotIn)), None))
            elif type(op) in _COMPARE:
                steps.append((_COMPARE[type(op)], self.node(right, depth)))
            else:
                raise FormulaError("formula.refused", "`is` is not allowed; compare with == or !=.")

        def run(scope):
            current, result = left(scope), None
            for fn, right in steps:
                if right is None:
                    outcome = fn(current)
                else:
                    other = right(scope)
                    outcome = fn(current, other)
                    current = other
                outcome = outcome if is_array(outcome) else bool(outcome)
                result = outcome if result is None else np.logical_and(result, outcome)
            return result
        return run

    def _literal(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
                and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float)):
            return -node.operand.value
        raise FormulaError("formula.refused", "a list after `in` may hold only numbers and quoted text.")

    def _Call(self, node, depth):
        if not isinstance(node.func, ast.Name):
            raise FormulaError("formula.refused", "only the documented functions can be called "
                                                  "(e.g. min(a, b)); methods and attributes are not allowed.")
        name = node.func.id
        shown = "if" if name == IF_NAME else name
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise FormulaError("formula.refused", f"{shown}(...) takes plain arguments, without names or *.")
        spec = self.functions.get(shown)
        if spec is None and function_case(shown, self.functions):
            raise FormulaError("formula.unknown_function", function_case(shown, self.functions))
        if spec is None:
            from difflib import get_close_matches
            near = get_close_matches(shown, list(self.functions), n=1)
            hint = f" Did you mean {near[0]}()?" if near else ""
            raise FormulaError("formula.unknown_function",
                               f"there is no function `{shown}`.{hint} See `sizing rules doc`.")
        spec.check_arity(len(node.args))
        for index, arg in enumerate(node.args):
            if index in spec.constant_args and not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                example = f'{shown}(gpu, "memory_gb")' if index == 1 else f'{shown}("table_name", ...)'
                raise FormulaError("formula.refused", f"argument {index + 1} of {shown}() must be quoted text, "
                                                      f"e.g. {example}.")
        self.called.add(shown)
        args = [self.node(a, depth) for a in node.args]
        if spec.lazy:
            return lambda scope: spec.fn(scope, *args)
        fn = spec.fn
        if len(args) == 1:
            a0 = args[0]
            return lambda scope: fn(a0(scope))
        if len(args) == 2:
            a0, a1 = args
            return lambda scope: fn(a0(scope), a1(scope))
        return lambda scope: fn(*[a(scope) for a in args])


def _refusal(node: ast.AST) -> str:
    kind = type(node).__name__
    words = {
        "Attribute": "attribute access (`x.y`) is not allowed; use a function such as gpu_spec(gpu, \"memory_gb\")",
        "Subscript": "indexing (`x[...]`) is not allowed; use a look-up function",
        "Lambda": "lambda is not allowed in a formula",
        "ListComp": "comprehensions are not allowed", "GeneratorExp": "comprehensions are not allowed",
        "DictComp": "comprehensions are not allowed", "SetComp": "comprehensions are not allowed",
        "IfExp": "write if(condition, then, else) instead of `a if c else b`",
        "NamedExpr": "`:=` is not allowed", "Await": "await is not allowed",
        "List": "a list is only allowed after `in`", "Tuple": "a list is only allowed after `in`",
        "Dict": "dictionaries are not allowed", "Set": "sets are not allowed",
        "JoinedStr": "f-strings are not allowed", "Starred": "`*` arguments are not allowed",
    }
    return words.get(kind, f"`{kind}` is not allowed in a formula") + "."


def _number(value):
    if isinstance(value, (str, bool)) or (is_array(value) and value.dtype.kind not in "fiu"):
        raise FormulaError("formula.type", "arithmetic needs numbers, but got text or true/false.")
    return value


def _numeric(fn, a, b):
    return fn(_number(a), _number(b))


def _power(base, exponent):
    base, exponent = _number(base), _number(exponent)
    if np.any(np.abs(exponent) > MAX_EXPONENT):
        raise FormulaError("formula.power", f"exponents are limited to ±{MAX_EXPONENT}.")
    return np.power(np.float64(base) if not is_array(base) else base.astype(float), exponent)


def _not(value):
    return np.logical_not(value) if is_array(value) else not bool(value)


def _membership(choices: list, negate: bool):
    def check(value):
        if is_array(value):
            hit = np.isin(value, choices)
        else:
            hit = value in choices
        return np.logical_not(hit) if negate else hit
    return check
