"""The published runs the estimates are checked against (validation/published.yaml), as cases."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from engine.calc.rulecache import cached_data
from engine.calc.yamlfile import MAX_EVIDENCE_BYTES, line_of, load_yaml_file, plain
from engine.contract import memory_kind
from engine.paths import HELD_OUT_CASES, PUBLISHED_CASES
from engine.problems import Problem, SizingError

DEFAULT_CASES = PUBLISHED_CASES
GROUPS = ("training", "inference", "memory", "facility")
COUNTED = ("output", "prompt and output")
TIMED = ("generation", "forward passes")
# "choose": coefficients were chosen from it; "check": held out; "score": held out and held to its first
# measurement, but no evidence for the quote's bands (an input it rests on is assumed)
USES = ("choose", "check", "score")


@dataclass(frozen=True)
class Case:
    id: str
    group: str
    use: str                  # one of USES
    intake: dict
    measured: dict
    source: dict
    where: str
    counted_tokens: str = "output"   # what a tokens/s figure counts: "output", or "prompt and output"
    timed: str = "generation"        # what the clock ran over: the stack's whole generation loop, or
                                     # "forward passes" alone (no sampling or detokenising on the host)

    def given(self) -> dict:
        """What the figure's timing fixes beyond the intake: a source that timed the model's forward
        passes alone (a speed test that takes the argmax on the GPU) left out the host's work per
        generated token, so its estimate is compared without it (host_token_ms, rules/serving.yaml)."""
        return {"host_token_ms": 0.0} if self.timed == "forward passes" else {}

    def comparable(self, quantity: str, measured: float) -> float:
        """The measured figure as the quantity the rules estimate. A harness that divides the whole
        sequence (prompt and answer) by the time overstates the output rate by (prompt + output) ÷ output;
        the figure stays as published in the file and is converted here."""
        if quantity == "output_tokens_per_s" and self.counted_tokens == "prompt and output":
            out = float(self.intake["output_tokens"])
            return measured * out / (out + float(self.intake["prompt_tokens"]))
        return measured


def load_cases(path: Path) -> list[Case]:
    doc = load_yaml_file(path, path.name, MAX_EVIDENCE_BYTES)
    items = doc.get("cases") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise SizingError([Problem("cases.shape", f"{path.name}:1", "expected `cases:` with a list of cases.",
                                   fixer="rules")])
    cases, problems = [], []
    for index, item in enumerate(items):
        where = f"{path.name}:{line_of(items, index)}"
        if not isinstance(item, dict) or not all(k in item for k in ("id", "group", "intake", "measured")):
            problems.append(Problem("cases.shape", where, "a case needs id, group, intake and measured.",
                                    fixer="rules"))
            continue
        if item["group"] not in GROUPS:
            problems.append(Problem("cases.group", where, f"group must be one of {', '.join(GROUPS)}.",
                                    fixer="rules"))
            continue
        counted = str(item.get("counted_tokens") or "output")
        if counted not in COUNTED:
            problems.append(Problem("cases.counted", where, f"counted_tokens must be one of {', '.join(COUNTED)}.",
                                    fixer="rules"))
            continue
        timed = str(item.get("timed") or "generation")
        if timed not in TIMED:
            problems.append(Problem("cases.timed", where, f"timed must be one of {', '.join(TIMED)}.",
                                    fixer="rules"))
            continue
        use = str(item.get("use") or "check")
        if use not in USES:
            problems.append(Problem("cases.use", where, f"use must be one of {', '.join(USES)}.", fixer="rules"))
            continue
        cases.append(Case(str(item["id"]), item["group"], use,
                          plain(item["intake"]), plain(item["measured"]), plain(item.get("source") or {}), where,
                          counted, timed))
    if problems:
        raise SizingError(problems)
    return cases


def checked_against(group: str, path: Path = DEFAULT_CASES) -> list[dict]:
    """The published runs a group's estimates were checked against: [{id, title, url, training}]."""
    try:
        runs = _runs_cached(Path(path), Path(path).stat().st_mtime_ns)
    except (SizingError, OSError):
        return []
    return [dict(run) for run in runs.get(group, [])]


def band_cases(cases: list[Case]) -> list[Case]:
    """The cases a quote's band may rest on: all but those marked `use: score`."""
    return [c for c in cases if c.use != "score"]


def band_evidence(group: str, workload: str | None) -> list[dict]:
    """The runs a quote's band rests on: the published runs of its group and those held out of every fit,
    memory's of the workload's own kind (a pretraining step's, a fine-tuning step's or a server's, as
    rules/uncertainty.yaml keys the band)."""
    runs = checked_against(group) + checked_against(group, HELD_OUT_CASES)
    return [run for run in runs if group != "memory" or run["memory_kind"] == memory_kind(workload)]


@functools.lru_cache(maxsize=4)
def _runs_cached(path: Path, mtime_ns: int) -> dict[str, list[dict]]:
    """Every quote names its evidence: the cases file is parsed once per version of it, and the
    names kept between processes (parsing it is a quarter of a fresh quote's time)."""
    return cached_data("published-runs", path, lambda: _runs_by_group(band_cases(load_cases(path))))


def _runs_by_group(cases: list[Case]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for c in cases:
        out.setdefault(c.group, []).append({"id": c.id, "title": c.source.get("title", ""),
                                            "url": c.source.get("url", ""),
                                            "memory_kind": memory_kind(c.intake.get("workload"))})
    return out
