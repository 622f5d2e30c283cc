"""One Job flows through every channel (CLI, folder, mail): read → validate → evaluate → render."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.calc.results import Notice, Results
from engine.files import environment_fault, output_stem
from engine.intake.model import Intake
from engine.paths import LANGUAGES, SAMPLES_DIR
from engine.problems import Problem, SizingError

log = logging.getLogger(__name__)

FORMATS = ("xlsx", "html", "json", "audit")   # engine.quote.outputs: the last is <stem>.audit.xlsx
# The calibration this process applies (`sizing quote --calibration`, the services' `calibration`
# setting): set once at start, inherited by the processes that quote.
CALIBRATION: Any = None


@dataclass
class Job:
    """An intake file on its way to a quote.

    status: "new" → "quoted" (outputs written), "invalid" (the intake has
    problems a salesperson can fix; an annotated workbook is written for
    workbook input), "failed" (the file is unreadable or something broke) or
    "blocked" (the machine stopped it — a full disk, a folder that cannot be
    written — and the same file will go through once that is fixed).
    """

    source: Path
    outdir: Path
    stem: str = ""
    status: str = "new"
    intake: Intake | None = None
    results: Results | None = None
    problems: list[Problem] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)
    language: str = "en"
    ruleset_version: str = ""
    seconds: float = 0.0
    ruleset: Any = field(default=None, repr=False)   # the rule set this job was quoted with
    quote: Any = field(default=None, repr=False)     # the view the outputs were written from

    def __post_init__(self):
        self.source, self.outdir = Path(self.source), Path(self.outdir)
        self.stem = self.stem or output_stem(self.source.name)

    @property
    def ok(self) -> bool:
        return self.status == "quoted"


def run_job(source: Path, outdir: Path, *, ruleset=None, stem: str | None = None,
            formats: tuple[str, ...] = FORMATS, calibration=None) -> Job:
    """Quote one intake file. Never raises for bad input: the Job says what happened."""
    from engine.calc.ruleset import current_ruleset

    job = Job(source=source, outdir=outdir, stem=stem or "")
    started = time.perf_counter()
    try:
        ruleset = job.ruleset = ruleset or current_ruleset()
        job.ruleset_version = ruleset.version
        job.intake = _read(job)
        if job.intake is not None:
            job.language = job.intake.language
            problems = validate_intake(job.intake, ruleset)
            if problems:
                job.problems, job.status = problems, "invalid"
                job.outputs = _write_errors(job)
            else:
                calibrated(job.intake, calibration or CALIBRATION, ruleset)
                job.results = quote_results(job.intake, ruleset)
                job.status = "quoted"
                job.outputs = write_quote(job, formats)
    except SizingError as e:
        job.problems.extend(e.problems)
        job.status = "failed" if job.status == "new" else job.status
    except MemoryError:
        # Said apart from a bug: the services turn it into their memory-limit sentence.
        job.problems.append(Problem("limit.memory", job.source.name,
                                    "ran out of memory while quoting this file."))
        job.status = "failed"
    except Exception as e:  # noqa: BLE001 — a service must report, never die, on one bad job
        if fault := environment_fault(e):      # the machine, not the file: worth a retry as is
            job.problems.append(Problem("environment", "", fault, fixer="admin", value=e.errno,
                                        context={"path": e.filename}))
            job.status = "blocked"
        else:
            log.exception("unexpected error quoting %s", source)
            job.problems.append(Problem("internal", job.source.name,
                                        f"internal error while quoting ({type(e).__name__}: {e}); "
                                        "the file is kept, please report this.", fixer="developer"))
            job.status = "failed"
    job.seconds = time.perf_counter() - started
    return job


def calibrated(intake: Intake, calibration, ruleset) -> None:
    """The customer's measurement (engine.calc.calibration) joins the intake's values where it applies."""
    if calibration is not None:
        from engine.calc.calibration import calibration_values
        extra = calibration_values(intake.values, calibration, ruleset)
        intake.values.update(extra)
        intake.sources.update({k: f"{calibration.where} {k}" for k in extra})


# Software the intake may leave blank, whose speed the rules' default decides: the intake key, the rule
# naming the software used, and the rule saying whether the workload uses it (rules/serving.yaml,
# rules/training_software.yaml).
DEFAULT_SOFTWARE = (("serving_engine", "serving_engine_used", "is_inference"),
                    ("training_framework", "training_framework_used", "is_training"))


def _default_software(intake: Intake, ruleset) -> None:
    """Speed depends on the software: a blank `serving_engine` or `training_framework` takes the rules'
    default, filled in like a form default, so the quote names it as assumed."""
    from engine.calc.evaluate import evaluate
    blank = [(key, used, guard) for key, used, guard in DEFAULT_SOFTWARE
             if intake.values.get(key) in (None, "") and used in ruleset.rules]
    if not blank:
        return
    shape = evaluate(intake.values, ruleset, only=[r for _, used, guard in blank for r in (guard, used)]).values
    for key, used, guard in blank:
        if shape.get(guard) and shape.get(used):
            intake.values[key] = shape[used]
            intake.sources[key] = "default"


def quote_results(intake: Intake, ruleset) -> Results:
    """The intake evaluated with the planner's layout for its blanks, and the alternatives beside it."""
    from engine.calc.alternatives import alternatives
    results, plan = planned_results(intake, ruleset)
    results.plan = plan
    # The form's defaults for fields the intake left blank are assumptions, not inputs.
    defaults = {k for k, where in intake.sources.items() if where == "default"}
    results.assumptions = {k: results.inputs.pop(k) for k in list(results.inputs) if k in defaults}
    try:
        results.alternatives = alternatives(intake.values, ruleset, requested_layout=plan.chosen,
                                            objective=str(intake.values.get("optimize_for") or "cost"))
    except Exception:  # noqa: BLE001 — the quote stands without its alternatives; the log says why
        log.exception("alternatives for %s could not be computed", intake.origin)
    results.warnings += not_used_notices(intake)
    # before anything is written: every figure a customer reads is checked, or withheld with a reason
    from engine.quote.guards import guard
    guard(results, str(intake.values.get("workload") or ""))
    return results


def not_used_notices(intake: Intake) -> list:
    """One notice per field the intake gives that does not apply to its workload (the form's
    `applies_when`): the quote says it was not used rather than silently ignoring it."""
    from engine.intake.form import current_form
    form = current_form()
    workload = str(intake.values.get("workload") or "")
    notices = []
    for key in intake.values:
        field = form.fields.get(key)
        if field is None or field.applies(workload) or intake.sources.get(key) == "default":
            continue
        text = {lang: form.message("not_used", lang, label=form.label(key, lang),
                                   workload=form.choice_label("workload", workload, lang),
                                   applies=_listed(form, field.applies_when, lang))
                for lang in LANGUAGES}
        notices.append(Notice("not_used", text, intake.where(key), "info"))
    return notices


def _listed(form, workloads, lang: str) -> str:
    """The workloads as alternatives: "Pretraining or Fine-tuning", "預訓練、微調"."""
    *rest, last = [form.choice_label("workload", w, lang) for w in workloads]
    if not rest:
        return last
    return form.text("list_separator", lang).join(rest) + form.text("list_last_or", lang) + last


def planned_results(intake: Intake, ruleset):
    """(Results, Plan) of the configuration quoted: the serving software's default filled in, the
    planner's layout for the blanks. The quote and `sizing explain` both evaluate through here."""
    from engine.calc.planner import planned
    _default_software(intake, ruleset)
    return planned(intake, ruleset)


def read_checked(source: Path, ruleset) -> Intake:
    """Read and validate one intake; SizingError lists every problem."""
    from engine.intake.read import read
    intake = read(source)
    problems = validate_intake(intake, ruleset)
    if problems:
        raise SizingError(problems)
    return intake


def validate_intake(intake: Intake, ruleset) -> list[Problem]:
    from engine.intake.validate import validate
    return validate(intake, ruleset.catalogs)


def write_quote(job: Job, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Build the quote view of an evaluated job and write `<stem>.quote.<format>` for each format."""
    from engine.quote import view
    from engine.quote.facility import build_facility
    from engine.quote.outputs import write_outputs
    ruleset = job.ruleset
    if ruleset is None:
        from engine.calc.ruleset import current_ruleset
        ruleset = current_ruleset()
    layout = job.results.plan.chosen if job.results.plan is not None else {}
    job.quote = view.build_quote(job.intake, job.results,
                                 view.scaling_grid(job.intake, job.results, ruleset, layout))
    job.quote.facility = build_facility(job.quote, ruleset)
    return write_outputs(job.quote, job.outdir, job.stem, formats)


def _read(job: Job) -> Intake | None:
    from engine.intake.read import read
    try:
        return read(job.source)
    except SizingError as e:
        job.problems.extend(e.problems)
        job.status = "failed"
        return None


def _write_errors(job: Job) -> list[Path]:
    if job.intake is None or job.intake.kind != "xlsx":
        return []
    from engine.intake.errors_workbook import write_errors_workbook
    return [write_errors_workbook(job.source, job.problems, job.outdir / f"{job.stem}.errors.xlsx",
                                  job.intake.language)]


def warm_up(ruleset) -> None:
    """Make every import and cache a quote needs ready in this process, so that the processes
    forked from it (engine.services.sandbox) start warm: quote a shipped sample workbook once,
    and have the intake schema of every workload checked."""
    import tempfile

    from engine.intake.validate import prepare
    prepare(ruleset.catalogs)
    for sample in sorted(SAMPLES_DIR.glob("*.xlsx"))[:1]:
        with tempfile.TemporaryDirectory(prefix="sizing-warm-up-") as tmp:
            run_job(sample, Path(tmp), ruleset=ruleset)
