"""`sizing calibrate`: fit the engine's efficiency factors on a benchmark run of the customer's own system."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

HELP = "fit efficiency factors on your own benchmark result"
EXAMPLES = (("sizing calibrate --intake poc.yaml --result vllm-result.json -o calibration.yaml",
             "vLLM benchmark_serving.py --save-result JSON"),
            ("sizing calibrate --intake poc.xlsx --result profile_export_genai_perf.json -o cal.yaml",
             "GenAI-Perf or AIPerf profile export"),
            ("sizing calibrate --intake train.yaml --result megatron.log -o cal.yaml",
             "a Megatron-LM/NeMo or torchtitan training log; then: sizing quote X --calibration cal.yaml"))
EXIT = ("0 the calibration file is written; 2 the intake, the result file or the output cannot be used "
        "(each problem on stderr with its file and field); 1 the rule files are broken.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--intake", type=Path, required=True, metavar="SETUP",
                        help="the intake of the system the benchmark ran on (.xlsx, .yaml, .json): GPU, count, "
                             "model, precision, serving software; batch and lengths come from the result")
    parser.add_argument("--result", type=Path, required=True, metavar="RESULT",
                        help="the benchmark tool's result file")
    parser.add_argument("-o", "--output", type=Path, default=Path("calibration.yaml"), metavar="FILE",
                        help="where to write the factors (default: calibration.yaml)")


def run(args) -> int:
    from engine.calc.calibration import calibration_document, describe, fit, read_result
    from engine.calc.ruleset import current_ruleset
    from engine.files import write_atomic
    from engine.job import read_checked
    from engine.problems import SizingError, report
    from ruamel.yaml import YAML

    try:
        ruleset = current_ruleset()
    except SizingError as e:
        report(e)
        return 1
    try:
        if not args.intake.is_file():
            raise SizingError([_missing(args.intake, "intake")])
        if not args.result.is_file():
            raise SizingError([_missing(args.result, "result")])
        intake = read_checked(args.intake, ruleset)
        measurement = read_result(args.result)
        factors, reproduced = fit(intake.values, measurement, ruleset)
        words, applies, at = describe(intake.values, measurement, ruleset)
    except SizingError as e:
        return report(e)
    document = calibration_document(words, applies, at, factors, measurement.values, reproduced,
                                    measurement.tool, {"intake": args.intake.name, "result": args.result.name})
    text = io.StringIO()
    yaml = YAML()
    yaml.default_flow_style = False
    text.write("# Written by `sizing calibrate`; use it with `sizing quote INTAKE --calibration FILE`.\n")
    yaml.dump(document, text)
    try:
        write_atomic(args.output, text.getvalue().encode())
    except OSError as e:
        print(f"{args.output}: cannot write: {e.strerror}.", file=sys.stderr)
        return 2
    print(f"calibrated on {words}")
    for name, value in factors.items():
        print(f"  {name}: {value:.3g}")
    for quantity, value in reproduced.items():
        print(f"  {quantity}: measured {measurement.values[quantity]:,.4g}, quoted now {value:,.4g}")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _missing(path: Path, what: str):
    from engine.problems import Problem
    return Problem("calibrate.missing", str(path), f"no such {what} file.")
