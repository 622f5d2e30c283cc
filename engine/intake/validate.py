"""Checking an intake against the form with cerberus: every problem at once, each at its cell."""

from __future__ import annotations

import difflib
import math
import threading
from functools import partial
from typing import Any

import cerberus
from cerberus import errors as cerr
from cerberus.schema import DefinitionSchema

from engine.calc.rulecache import cached_data
from engine.contract import TRAINING_WORKLOADS as TRAINING
from engine.intake import lenient
from engine.intake.form import FORM_PATH, Field, Form, current_form, localized
from engine.intake.model import Intake
from engine.paths import LANGUAGES
from engine.problems import Problem

INFERENCE = ("online-inference", "offline-inference")
EMAIL = r"[^@\s]+@[^@\s]+\.[^@\s]+"
# a stack that runs another's build: llama-cpp-python compiles the llama.cpp it bundles, so a llama.cpp release names it too
BUNDLED_STACK = {"llama-cpp-python": "llama.cpp"}

# cerberus error → our stable problem code (coercion failures depend on the field type).
CODES = {cerr.REQUIRED_FIELD.code: "required", cerr.UNKNOWN_FIELD.code: "unknown_key",
         cerr.BAD_TYPE.code: "type", cerr.MIN_VALUE.code: "min", cerr.MAX_VALUE.code: "max",
         cerr.UNALLOWED_VALUE.code: "allowed", cerr.REGEX_MISMATCH.code: "format",
         cerr.MAX_LENGTH.code: "too_long"}
COERCE_CODES = {"choice": "allowed", "gpu": "unknown_gpu", "model": "unknown_model"}


class IntakeValidator(cerberus.Validator):
    """cerberus with the two look-ups that need the catalogs (passed as `catalogs=`)."""

    def _normalize_coerce_gpu(self, value):
        found = _resolve(self._config["catalogs"], "gpus", value)
        if found is None:
            raise LookupError("unknown GPU")
        return found

    def _normalize_coerce_model(self, value):
        texts = current_form().texts
        if lenient.fold(value) in {lenient.fold(w) for w in [*texts["custom_model"].values(),
                                                             *texts["custom_model_aliases"]]}:
            return "custom"
        found = _resolve(self._config["catalogs"], "models", value)
        if found is None:
            raise LookupError("unknown model")
        return found


def validate(intake: Intake, catalogs) -> list[Problem]:
    """Check and normalise `intake.values` in place; return every problem (empty when valid).

    Numbers become int/float, yes/no bool, choices their canonical id, GPU and model
    their catalog id; static defaults of fields that apply to the workload are filled
    in (source "default").
    """
    form = current_form()
    values = intake.values
    for key in [k for k, v in values.items() if lenient.is_blank(v)]:
        del values[key]                      # an empty cell or `key:` means "not given"
    lang = choice_id(form, "language", intake.language) or "en"
    workload = choice_id(form, "workload", values.get("workload"))
    validator = _validator(form, workload, catalogs)
    validator.validate(dict(values))
    problems, bad = [], set()
    for error in validator._errors:          # cerberus' error records (field, rule, constraint, value)
        key = str(error.document_path[0]) if error.document_path else ""
        if key in bad:
            continue                         # one problem per field: the first (coercion) says it best
        bad.add(key)
        problems.append(_problem(form, intake, lang, key, error, catalogs))
    for key, value in validator.document.items():
        if key not in bad:
            values[key] = value
    _fill_defaults(intake, form, workload, lang)
    problems += _cross_checks(form, intake, lang, workload, bad, catalogs)
    order = {key: i for i, key in enumerate(form.fields)}
    problems.sort(key=lambda p: order.get(p.context.get("key"), -1))
    if not problems:                          # the quote speaks the language asked for; problems
        intake.language = values["language"]  # stay in the language the salesperson filled in
    return problems


def choice_id(form: Form, list_name: str, value: Any) -> str | None:
    """The canonical id for an id, alias or label (any language) of a choice; None if none."""
    if value is None:
        return None
    return _lookups(form).get(list_name, {}).get(lenient.fold(value))


def prepare(catalogs) -> None:
    """Have cerberus check the schema of every workload now, not during the first quote."""
    _schemas_checked(current_form())


class _CheckedSchema(DefinitionSchema):
    """A schema cerberus has already found sound for this very form and engine (_schemas_checked)."""

    def validate(self, schema=None):
        pass


def _validator(form: Form, workload: str | None, catalogs) -> IntakeValidator:
    schema = _schema(form, workload)
    if not _schemas_checked(form):
        return IntakeValidator(schema, catalogs=catalogs)     # cerberus checks it, as always
    validator = IntakeValidator(catalogs=catalogs)
    validator.schema = _CheckedSchema(validator, schema)
    return validator


def _schemas_checked(form: Form) -> bool:
    """cerberus checks a schema before its first use (≈ 30 ms in each fresh process, a twentieth
    of a quote). The schemas follow from the form file and the engine's code alone, so they are checked
    once for each version of both (the cache remembers, keyed by both) and trusted after; a schema
    cerberus refuses raises its SchemaError here, as it would have in the first quote."""
    with _lock:
        if id(form) in _checked:
            return True
    if form is not current_form():
        return False                  # a form from elsewhere: checked on every use, the plain way

    def check() -> bool:
        for workload in (None, *TRAINING, *INFERENCE):
            IntakeValidator(_schema(form, workload))
        return True

    cached_data("intake-schemas", FORM_PATH, check)
    with _lock:
        _checked[id(form)] = form     # kept alive, so its id stays unique
    return True


def _schema(form: Form, workload: str | None) -> dict:
    with _lock:
        key = (id(form), workload)
        if key not in _schemas:        # the entry keeps `form` alive, so its id stays unique
            _schemas[key] = form, {f.key: _rules(form, f, workload) for f in form.fields.values()}
        return _schemas[key][1]


def _rules(form: Form, f: Field, workload: str | None) -> dict:
    rules: dict[str, Any] = {"required": f.is_required(workload)}
    if f.type in ("number", "integer"):
        parse = lenient.parse_number if f.type == "number" else lenient.parse_integer
        rules |= {"type": f.type, "coerce": partial(parse, measure=f.measure, scale=f.scale)}
    elif f.type == "bool":
        words = form.texts["yes"], form.texts["no"]
        rules |= {"type": "boolean", "coerce": partial(lenient.parse_bool, extra_true=tuple(words[0].values()),
                                                        extra_false=tuple(words[1].values()))}
    elif f.type == "choice":
        ids = [c.id for c in form.choices[f.choices]]
        rules |= {"type": "string", "allowed": ids, "coerce": partial(_choose, form, f.choices)}
    elif f.type in ("gpu", "model"):
        rules |= {"type": "string", "coerce": f.type}
    else:
        rules |= {"type": "string", "coerce": _text}
        if f.type == "email":
            rules["regex"] = EMAIL
        if f.pattern:
            rules["regex"] = f.pattern
    for name in ("min", "max"):
        if getattr(f, name) is not None:
            rules[name] = getattr(f, name)
    if f.max_length:
        rules["maxlength"] = f.max_length
    return rules


def _choose(form: Form, list_name: str, value: Any) -> str:
    # An unknown word passes through unchanged, so cerberus' `allowed` rule reports it.
    return choice_id(form, list_name, value) or lenient.clean(value)


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)                   # a customer "2024" typed into a number-formatted cell
    text = lenient.clean(value)
    return text.upper() if len(text) == 3 and text.isalpha() and text.isascii() else text


def _resolve(catalogs, table: str, value: Any) -> str | None:
    if catalogs is None:
        return None
    text = lenient.clean(value)
    found = catalogs.resolve(table, text)
    if found is None:                        # the drop-downs show display names, in each language
        form = current_form()
        names = {lenient.fold(form.catalog_name(str(e.get("name", i)), lang)): i
                 for i, e in catalogs.table(table).items() for lang in LANGUAGES}
        found = names.get(lenient.fold(text))
    return found


def _problem(form: Form, intake: Intake, lang: str, key: str, error, catalogs) -> Problem:
    f = form.fields.get(key)
    raw = intake.raw.get(key, intake.values.get(key))
    code = CODES.get(error.code, "type")
    if error.code == cerr.COERCION_FAILED.code:
        code = COERCE_CODES.get(f.type, "type") if f else "type"
    words = {"label": form.label(key, lang), "value": show(raw), "allowed": allowed(form, f, lang) if f else ""}
    if code == "unknown_key":
        match = difflib.get_close_matches(key, list(form.fields), n=1, cutoff=0.6)
        words |= {"value": key, "suggestion": form.message("did_you_mean", lang, match=match[0]) if match else ""}
        raw = key
    elif code in ("unknown_gpu", "unknown_model"):
        near = (catalogs.closest_gpus if code == "unknown_gpu" else catalogs.closest_models)(lenient.clean(raw), 3) \
            if catalogs is not None else []
        words |= {"closest": form.text("list_separator", lang).join(name for _, name in near) or "—",
                  "custom": form.text("custom_model", lang)}
    elif code == "allowed" and f is not None and f.type == "choice":
        match = _closest_choice(form, f, lenient.clean(raw), lang)
        words["suggestion"] = form.message("did_you_mean", lang, match=match) if match else ""
    elif code == "too_long":
        words["max"] = f.max_length
    return Problem(code, intake.where(key), form.message(code, lang, **words), "sales", raw,
                   context={"key": key, "rule": error.rule})


def _closest_choice(form: Form, f: Field, typed: str, lang: str) -> str | None:
    """The choice a misspelling most resembles — by its id, its label in any language or an
    alias (the words choice_id knows) — named as the drop-down shows it in `lang`; None when
    nothing is close."""
    words = _lookups(form).get(f.choices, {})
    near = difflib.get_close_matches(lenient.fold(typed), list(words), n=1, cutoff=0.75)
    if not near:
        return None
    return next(localized(c.label, lang) for c in form.choices[f.choices] if c.id == words[near[0]])


def allowed(form: Form, f: Field, lang: str) -> str:
    """What the field accepts, in words: "a whole number from 1 to 1,024", "yes or no", the choices."""
    if f.type in ("number", "integer"):
        lo, hi = (_limit(f, f.min), _limit(f, f.max))
        return form.text(f"allowed_{f.type}", lang, min=lo, max=hi)
    if f.type == "bool":
        return form.text("allowed_bool", lang)
    if f.type == "choice":
        return form.text("list_separator", lang).join(localized(c.label, lang) for c in form.choices[f.choices])
    if f.type == "email":
        return form.text("allowed_email", lang)
    if f.expect:
        return localized(f.expect, lang)
    return form.text("allowed_text", lang)


def _limit(f: Field, value: float | None) -> str:
    if value is None:
        return "…"
    if f.measure == "fraction":
        return f"{value * 100:g}%"
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


SHOWN_CHARACTERS = 80      # a message quotes the start of a long value; the cell keeps all of it


def show(value: Any) -> str:
    """A value as the person typed it, for messages (a long one cut after its first characters)."""
    if isinstance(value, float):
        return f"{int(value)}" if value.is_integer() and abs(value) < 1e15 else f"{value:.10g}"
    text = lenient.clean(value) if value is not None else ""
    return text if len(text) <= SHOWN_CHARACTERS else f"{text[:SHOWN_CHARACTERS - 1]}… ({len(text):,} characters)"


def _fill_defaults(intake: Intake, form: Form, workload: str | None, lang: str) -> None:
    for f in form.fields.values():
        if f.key not in intake.values and f.default is not None and f.applies(workload):
            intake.values[f.key] = f.default
            intake.sources[f.key] = "default"
    if "language" not in intake.values:      # the quote speaks the template's (or intake's) language
        intake.values["language"] = lang
        intake.sources["language"] = "default"


def _cross_checks(form: Form, intake: Intake, lang: str, workload: str | None, bad: set,
                  catalogs) -> list[Problem]:
    """Rules between fields; each runs only when the fields it reads are valid."""
    v = intake.values
    given = lambda *keys: all(k in v for k in keys)             # noqa: E731 — present, valid or not
    ok = lambda *keys: all(k in v and k not in bad for k in keys)  # noqa: E731
    out = []

    def add(code, key, **words):
        out.append(Problem(code, intake.where(key), form.message(code, lang, label=form.label(key, lang),
                                                                 **words), "sales", intake.raw.get(key),
                           context={"key": key}))

    if workload in TRAINING:
        if not (given("training_tokens_billion") or given("samples") or given("dataset_gb")):
            add("needs_training_size", "training_tokens_billion")
        elif given("dataset_gb") and not given("sample_kb") and not given("samples"):
            add("needs_sample_size", "sample_kb")
    if ok("model") and v["model"] == "custom" and not (given("params_billion") or given("layers", "hidden_size")):
        add("needs_model_size", "params_billion")
    if workload in INFERENCE:
        for key in ("prompt_tokens", "output_tokens"):
            if not given(key):
                add("needs_inference_tokens", key)
        window = _context_window(v, catalogs) if ok("prompt_tokens", "output_tokens") else None
        if window and v["prompt_tokens"] + v["output_tokens"] > window:
            add("context_exceeded", "prompt_tokens", total=show(v["prompt_tokens"] + v["output_tokens"]),
                window=show(window))
    if ok("serving_engine_release"):          # a release names its stack: tensorrt-llm-0.5 is TensorRT-LLM's
        stack = next((c.id for c in form.choices["serving_engine"]
                      if v["serving_engine_release"].startswith(c.id + "-")), None)
        if stack and BUNDLED_STACK.get(v.get("serving_engine"), v.get("serving_engine")) != stack:
            add("release_stack", "serving_engine_release",
                release=form.choice_label("serving_engine_release", v["serving_engine_release"], lang),
                stack=form.choice_label("serving_engine", stack, lang))
    layout = [k for k in ("tensor_parallel", "pipeline_parallel", "context_parallel") if k in v]
    if ok("gpu_count", *layout) and layout:
        product = math.prod(v[k] for k in layout)
        if v["gpu_count"] % product:
            add("parallel_divides", layout[0], product=product, gpus=v["gpu_count"])
    if ok("kv_heads", "attention_heads") and v["attention_heads"] % v["kv_heads"]:
        add("heads_divide", "kv_heads", kv=v["kv_heads"], heads=v["attention_heads"])
    if ok("active_params_billion", "params_billion") and v["active_params_billion"] > v["params_billion"]:
        add("active_exceeds_total", "active_params_billion", active=show(v["active_params_billion"]),
            total=show(v["params_billion"]))
    if ok("experts_active", "experts_total") and v["experts_active"] > v["experts_total"]:
        add("experts_exceed_total", "experts_active", active=show(v["experts_active"]), total=show(v["experts_total"]))
    if workload == "online-inference" and given("request_lengths") and given("requests_per_second"):
        add("lengths_without_run", "request_lengths")
    if ok("experts_active") and not given("experts_total"):
        add("experts_without_total", "experts_active")
    if given("experts_total") and v.get("model") == "custom" and not given("active_params_billion"):
        add("experts_need_active", "active_params_billion")
    return out


def _context_window(values: dict, catalogs) -> float | None:
    """The longest request the model takes: the intake's sequence length, else the catalog's context."""
    if isinstance(values.get("seq_len"), (int, float)):
        return values["seq_len"]
    entry = catalogs.models.get(values.get("model")) if values.get("model") != "custom" else None
    window = (entry or {}).get("context_length")
    return window if isinstance(window, (int, float)) and not isinstance(window, bool) else None


_lock = threading.Lock()
_schemas: dict[tuple[int, str | None], tuple[Form, dict]] = {}
_checked: dict[int, Form] = {}
_lookup_cache: dict[int, tuple[Form, dict[str, dict[str, str]]]] = {}


def _lookups(form: Form) -> dict[str, dict[str, str]]:
    """Per choice list: folded id / alias / label in every language → id."""
    cached = _lookup_cache.get(id(form))
    if cached is None:
        table = {}
        for name, items in form.choices.items():
            words = table.setdefault(name, {})
            for c in items:
                labels = c.label.values() if isinstance(c.label, dict) else [c.label]
                for word in (c.id, *c.aliases, *labels):
                    words.setdefault(lenient.fold(word), c.id)
        cached = _lookup_cache[id(form)] = form, table
    return cached[1]
