"""Simulates a closed-loop serving test run step by step, to show when its requests come back in groups (rules/inference.yaml, repeat_waves)."""

from __future__ import annotations

import argparse
import random
import statistics


BUDGET, FIXED_S, PER_TOKEN_S = 8192, 0.015, 4e-5      # tokens a step; a step's fixed time and time per token


def step_s(tokens: int) -> float:
    """A step of `tokens` tokens."""
    return FIXED_S + PER_TOKEN_S * tokens


def simulate(concurrency: int, prompt: int, output: int, spread: float, separate_prefill: bool,
             requests: int = 3000, seed: int = 0) -> tuple[float, float]:
    """(mean time to first token of the first wave, of the requests after it). Each step runs the running
    requests' decode tokens and, up to the token budget, the waiting prompts in order; a step costs
    step_s of its tokens. A scheduler that prefills apart (SGLang) runs a step of prompts alone
    while any wait. Answers are drawn from [(1 - spread) x output, output]; a finished request is replaced
    as a test run with --max-concurrency does: the client sends it when the last token arrives, by which
    time the scheduler has launched the next step, so it is received during that step and waits it out
    (an idle server receives it at once)."""
    rng = random.Random(seed)
    clock, running, ttfts, done = 0.0, [], [], 0

    def arrive(now: float) -> dict:
        length = output if spread == 0 else rng.randint(int(output * (1 - spread)), output)
        return {"prompt": prompt, "answer": length, "made": 0, "sent": now}

    waiting, in_transit = [arrive(0.0) for _ in range(concurrency)], []
    while done < requests:
        if not running and not waiting:
            waiting, in_transit = in_transit, []
        decoding = [] if separate_prefill and waiting else list(running)
        room = BUDGET - len(decoding)
        chunks = []
        for r in waiting:
            if room <= 0:
                break
            take = min(r["prompt"], room)
            chunks.append((r, take))
            room -= take
        clock += step_s(BUDGET - room)
        waiting += in_transit
        in_transit = []
        for r in decoding:
            r["made"] += 1
        for r, take in chunks:
            r["prompt"] -= take
            if r["prompt"] == 0:
                waiting.remove(r)
                r["made"] = 1
                running.append(r)
                ttfts.append(clock - r["sent"])
        for r in [r for r in decoding if r["made"] >= r["answer"]]:
            running.remove(r)
            done += 1
            in_transit.append(arrive(clock))
    return statistics.mean(ttfts[:concurrency]), statistics.mean(ttfts[concurrency:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--output", type=int, default=1024)
    args = parser.parse_args()
    print(f"a prompt alone {step_s(args.prompt):.3f} s, one full pass {step_s(BUDGET):.3f} s")
    print("scheduler          in flight  lengths        first wave  later requests")
    for separate in (False, True):
        for c in args.concurrency:
            for spread, words in ((0.0, "fixed"), (0.2, "80-100%")):
                first, later = simulate(c, args.prompt, args.output, spread, separate)
                name = "prefills apart" if separate else "folds prompts in"
                print(f"{name:18} {c:9}  {words:12} {first:9.3f} s  {later:9.3f} s")


if __name__ == "__main__":
    main()
