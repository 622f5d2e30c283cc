"""Throughput and drop-to-result latency of a real `sizing watch` process.

    .venv/bin/python bench/bench_watch.py [--files 200] [--singles 5] [-- watch options...]

One watcher runs on a fresh temporary folder with the product's rules. First single files
are dropped one at a time (latency = rename into the inbox → quote in the outbox); then
`--files` intakes are dropped at once (throughput, and each file's latency from the
service's own log).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INTAKE = """\
customer: Bench Customer {n}
workload: pretraining
model: custom
params_billion: 0.11
layers: 12
hidden_size: 768
attention_heads: 12
flops_per_sample: 180e9
dataset_gb: 100
sample_kb: 100
epochs: {epochs}
precision: fp16
gpu: V100
gpu_count: 8
utilization: 1.0
scaling_efficiency: 1.0
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200, help="files dropped at once")
    parser.add_argument("--singles", type=int, default=6, help="single drops timed one by one")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("watch_args", nargs="*", help="extra `sizing watch` options, after --")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        root, staging = Path(tmp) / "svc", Path(tmp) / "staging"
        staging.mkdir()
        watcher = subprocess.Popen(
            [sys.executable, "-m", "engine", "watch", str(root), *args.watch_args],
            stderr=open(Path(tmp) / "watch.err", "w"), start_new_session=True)
        try:
            wait(lambda: (root / "status.json").exists() and _status(root).get("ruleset", {})
                 .get("version"), args.timeout, "the watcher to start")
            serial = iter(range(10**9))

            singles, single_drops = [], {}
            for _ in range(args.singles):
                started, dropped_at = time.perf_counter(), time.time()
                name = drop(staging, root, next(serial))
                single_drops[name] = dropped_at
                wait(lambda: done(root) > len(singles), args.timeout, name)
                singles.append(time.perf_counter() - started)
                # A lone drop, not the next of a stream: watchdog's inotify emitter holds every
                # event for up to 0.5 s behind the unpaired "moved out" of the last claim.
                time.sleep(0.6)

            names = [write(staging, next(serial)) for _ in range(args.files)]
            dropped_at = time.time()
            started = time.perf_counter()
            for name in names:
                os.rename(staging / name, root / "inbox" / name)
            wait(lambda: done(root) >= args.singles + args.files, args.timeout, f"{args.files} files")
            elapsed = time.perf_counter() - started
        finally:
            os.killpg(watcher.pid, signal.SIGTERM)
            watcher.wait(timeout=60)

        jobs = [json.loads(line) for line in (root / ".sizing-log.jsonl").open(encoding="utf-8")]
        # Where a single drop's time goes: waiting for the file to settle, then the job.
        single_jobs = [j for j in jobs if j.get("event") == "job" and j["file"] in single_drops][1:]
        settle = statistics.median(j["time"] - j["seconds"] - single_drops[j["file"]]
                                   for j in single_jobs) if single_jobs else float("nan")
        quote = statistics.median(j["seconds"] for j in single_jobs) if single_jobs else float("nan")
        batch = {j["file"]: j for j in jobs if j.get("event") == "job" and j["file"] in set(names)}
        latencies = sorted(j["time"] - dropped_at for j in batch.values())
        outcomes = {o: sum(j["outcome"] == o for j in batch.values())
                    for o in sorted({j["outcome"] for j in batch.values()})}
        job_seconds = statistics.median(j["seconds"] for j in batch.values())

    print(f"sizing watch {' '.join(args.watch_args)}".rstrip()
          + f"   ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    warm = singles[1:] or singles
    print(f"  single file, drop → result: first after start {singles[0]:.2f} s; then median "
          f"{statistics.median(warm):.2f} s, max {max(warm):.2f} s ({len(warm)} drops; "
          f"median {settle:.2f} s settling + {quote:.2f} s quoting)")
    print(f"  {args.files} files at once: {elapsed:.1f} s → {args.files / elapsed:.1f} files/s; "
          f"latency p50 {percentile(latencies, 50):.1f} s, p95 {percentile(latencies, 95):.1f} s, "
          f"max {latencies[-1]:.1f} s; median job {job_seconds * 1000:.0f} ms; outcomes {outcomes}")
    return 0


def write(staging: Path, n: int) -> str:
    name = f"bench-{n:04d}.yaml"
    (staging / name).write_text(INTAKE.format(n=n, epochs=1 + n % 20), encoding="utf-8")
    return name


def drop(staging: Path, root: Path, n: int) -> str:
    name = write(staging, n)
    os.rename(staging / name, root / "inbox" / name)
    return name


def done(root: Path) -> int:
    """Files answered either way (a quote in archive/, or a reason in failed/)."""
    return len(os.listdir(root / "archive")) + sum(
        n.endswith(".reason.txt") for n in os.listdir(root / "failed"))


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)


def percentile(values: list[float], pct: float) -> float:
    return values[min(len(values) - 1, int(round(pct / 100 * (len(values) - 1))))]


def _status(root: Path) -> dict:
    try:
        return json.loads((root / "status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    raise SystemExit(main())
