"""The cost of anomaly mode and of the profiler on bench_mlp.py's training step.

The MLP step of bench_mlp.py (784-256-256-10, batch 64, float32, forward + loss + backward +
SGD), asyncgrad only, run plain, inside ``ag.autograd.detect_anomaly()`` (forward tracebacks
and NaN checks of every node's gradients), and inside ``ag.autograd.profiler.profile()``; each
variant in a fresh single-threaded process per round, rounds interleaved. Reported: mean ms per
step (median over rounds) and each variant's ratio to the plain step, paired by round. Target:
anomaly mode under 1.5x the plain step.

Usage: python benchmarks/bench_anomaly.py [--rounds R] [--quick]
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
import bench_mlp as M

VARIANTS = ["plain", "anomaly", "profiled"]
LABELS = {
    "plain": "asyncgrad loss.backward()",
    "anomaly": "the same in detect_anomaly()",
    "profiled": "the same in profiler.profile()",
}
TARGET = 1.5
ROUNDS = 7


def worker_main(variant: str, argv: list[str]) -> None:
    import argparse

    import asyncgrad as ag

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=M.STEPS)
    ap.add_argument("--warmup", type=int, default=M.WARMUP)
    a = ap.parse_args(argv)
    block: Any
    if variant == "anomaly":
        block = ag.autograd.detect_anomaly()
    elif variant == "profiled":
        block = ag.autograd.profiler.profile()
    else:
        block = contextlib.nullcontext()
    with block:
        res = M.worker_asyncgrad("sync", a.steps, a.warmup, None)
    H.emit({"lib": variant, **res})


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    steps, warmup = (60, 10) if quick else (M.STEPS, M.WARMUP)
    print(f"bench_anomaly: bench_mlp's step, {rounds} interleaved rounds", flush=True)
    results = H.interleaved_rounds(
        Path(__file__),
        VARIANTS,
        rounds,
        lambda lib, r: ["--steps", str(steps), "--warmup", str(warmup)],
    )
    means = {v: [r["mean"] * 1e3 for r in results[v]] for v in VARIANTS}
    rows = []
    ratios = {}
    for v in VARIANTS:
        ratios[v] = H.paired_ratio(means[v], means["plain"])
        rows.append([LABELS[v], H.fmt(H.median(means[v]), ".3f"), H.fmt_ratio(ratios[v])])
    text = H.table(["variant", "ms/step (mean of steps)", "vs plain"], rows)
    print(text)
    verdict = H.verdict_at_most(
        ratios["anomaly"], H.median(means["anomaly"]) / H.median(means["plain"]), TARGET
    )
    return H.Report(
        title="Anomaly mode and profiler on the MLP step",
        command="python benchmarks/bench_anomaly.py",
        sections=[text],
        targets=[(f"anomaly mode under {TARGET}x the plain step", verdict, "paired by round")],
        data={"means_ms": means, "ratios": ratios},
    )


if __name__ == "__main__":
    H.bench_main(__doc__, ROUNDS, run, worker_main)
