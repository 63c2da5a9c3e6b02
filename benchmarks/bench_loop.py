"""Event-loop responsiveness while a long backward runs.

A ticker task loops on ``await asyncio.sleep(0.001)`` and records when it wakes. While it
runs, a 20,000-op chain (the graph of bench_chain.py: x of 16 float64 values, ops cycling
mul, add, tanh, then sum) is differentiated by

  (a) ``await ag.backward(y)`` (the engine's default time slice),
  (b) asyncgrad's sync ``y.backward()`` called from a coroutine on the loop,
  (c) PyTorch's ``y.backward()`` called from a coroutine on the loop,

and the longest gap between ticks that overlaps the backward is reported with the backward's
wall time. A reference row shows the gap with nothing else running on the loop. Each library
runs in fresh processes (interleaved rounds, several backward runs per process); medians over
all runs. The loop is the default asyncio loop.

Usage: python benchmarks/bench_loop.py [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
from bench_chain import ADD, MUL, chain, x0

N = 20_000
TICK = 0.001
LIBS = ["idle", "asyncgrad-async", "asyncgrad-sync", "torch"]
LABELS = {
    "idle": "reference: nothing else on the loop",
    "asyncgrad-async": "(a) asyncgrad await ag.backward(y)",
    "asyncgrad-sync": "(b) asyncgrad y.backward() inside the loop",
    "torch": "(c) PyTorch y.backward() inside the loop (1 thread)",
}


def build_ops(lib: str):
    """(make_graph() -> loss, backward(loss) -> awaitable or None, get_grad())."""
    if lib.startswith("asyncgrad"):
        import asyncgrad as ag

        x = ag.tensor(x0(), dtype=ag.float64, requires_grad=True)
        tanh = ag.tanh
    else:
        import torch

        H.pin_torch_threads()
        x = torch.tensor(x0(), dtype=torch.float64, requires_grad=True)
        tanh = torch.tanh

    def make():
        x.grad = None
        return chain(x, N, tanh).sum()

    if lib == "asyncgrad-async":

        async def backward(loss):
            await ag.backward(loss)
    else:

        async def backward(loss):
            loss.backward()  # a blocking call made from a coroutine on the loop

    return make, backward, lambda: x.grad.numpy().tolist()


async def measure(lib: str, runs: int, warm: int) -> dict[str, Any]:
    import asyncio

    ticks: list[float] = []
    ticked = asyncio.Event()
    stop = False

    async def ticker():
        ticks.append(time.perf_counter())
        while not stop:
            await asyncio.sleep(TICK)
            ticks.append(time.perf_counter())
            ticked.set()

    if lib == "idle":
        make = backward = get_grad = None
    else:
        make, backward, get_grad = build_ops(lib)
    task = asyncio.create_task(ticker())
    gaps, gap_at, typical, walls = [], [], [], []
    grad = None
    for i in range(warm + runs):
        loss = make() if make else None
        H.collect()
        await asyncio.sleep(0.02)  # let the ticker settle
        t0 = time.perf_counter()
        if backward is None:
            await asyncio.sleep(0.1)  # idle reference window
        else:
            await backward(loss)
        t1 = time.perf_counter()
        while ticks[-1] <= t1:  # wait for the first tick after the backward
            ticked.clear()
            await ticked.wait()
        if grad is None and get_grad is not None:
            grad = get_grad()
        del loss
        if i < warm:
            continue
        during = [(b - a, a - t0) for a, b in pairwise(ticks) if b > t0 and a < t1]
        gap, at = max(during)
        gaps.append(gap)
        gap_at.append(at)
        typical.append(H.median([g for g, _ in during]))
        walls.append(t1 - t0)
        del ticks[:-1]
    stop = True
    await task
    slice_s = None
    if lib.startswith("asyncgrad"):
        import asyncgrad as ag

        slice_s = ag.autograd.engine.slice_s
    return {
        "gaps": gaps,
        "gap_at": gap_at,
        "typical": typical,
        "walls": walls,
        "grad": grad,
        "slice_s": slice_s,
    }


def worker_main(lib: str, argv: list[str]) -> None:
    import asyncio

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--warm", type=int, default=1)
    a = ap.parse_args(argv)
    res = asyncio.run(measure(lib, a.runs, a.warm))
    H.emit({"lib": lib, **res})


def floor_grad() -> Any:
    import numpy as np

    y = x0()
    tape = []
    for i in range(N):
        k = i % 3
        if k == 0:
            y = y * MUL
        elif k == 1:
            y = y + ADD
        else:
            y = np.tanh(y)
            tape.append(y)
    g = np.ones_like(y)
    for i in reversed(range(N)):
        k = i % 3
        if k == 0:
            g = g * MUL
        elif k == 2:
            t = tape.pop()
            g = g * (1.0 - t * t)
    return g


ROUNDS = 5


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    import numpy as np

    runs = 2 if quick else 4
    cmd = (
        "python benchmarks/bench_loop.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    print(
        f"bench_loop: ticker gaps during a {N:,}-op chain backward, {rounds} interleaved rounds",
        flush=True,
    )
    libs = H.available_libs(LIBS, LABELS)
    skipped = [LABELS[lib] + ": " + str(H.missing_reason(lib)) for lib in LIBS if lib not in libs]
    results = H.interleaved_rounds(
        Path(__file__), libs, rounds, lambda lib, r: ["--runs", str(runs), "--warm", "1"]
    )
    ref = floor_grad()
    worst = 0.0
    for lib in libs:
        if lib == "idle":
            continue
        g = np.asarray(results[lib][0]["grad"])
        if g.shape != ref.shape or not np.allclose(g, ref, rtol=1e-9, atol=0.0):
            raise SystemExit(f"bench_loop: x.grad of {LABELS[lib]} does not match the NumPy floor")
        worst = max(worst, float(np.max(np.abs(g - ref) / np.abs(ref))))
    check = (
        "Gradient check passed: x.grad from every backward matches a hand-written NumPy "
        f"backward (max relative difference {worst:.1e}; tolerance 1e-9)."
    )
    print(check)

    summary = {}
    rows = []
    for lib in libs:

        def flat(key, lib=lib):
            return [v * 1e3 for r in results[lib] for v in r[key]]

        gaps, walls = flat("gaps"), flat("walls")
        summary[lib] = {
            "gap": H.median(gaps),
            "gap_max": max(gaps),
            "gap_at": H.median(flat("gap_at")),
            "typical": H.median(flat("typical")),
            "wall": H.median(walls),
            "runs": len(gaps),
        }
        s = summary[lib]
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["gap"]),
                H.fmt(s["gap_max"]),
                H.fmt(s["typical"]),
                "n/a" if lib == "idle" else H.fmt(s["gap_at"], ".1f"),
                "n/a" if lib == "idle" else H.fmt(s["wall"], ".1f"),
                "n/a" if lib == "idle" else f"{s['wall'] / N * 1e3:.2f}",
                str(s["runs"]),
            ]
        )
    headers = [
        "backward",
        "longest gap ms (median)",
        "longest gap ms (worst run)",
        "median gap ms",
        "longest gap starts at ms",
        "backward wall ms",
        "µs/op",
        "runs",
    ]
    tab = H.table(headers, rows)
    legend = (
        f"Ticker: `await asyncio.sleep({TICK})` in a loop; the longest interval between two "
        f"of its wake-ups that overlaps the backward. Chain of {N:,} ops on 16 float64 values "
        f"(graph built before timing). {runs} runs per process after 1 warm-up, {rounds} "
        "interleaved rounds, fresh process each; medians over all runs. `median gap` is the "
        "median interval between wake-ups during the backward; `longest gap starts at` is "
        "when the longest interval began, in ms after the backward was called (median over "
        "runs; negative when it began just before the call); `µs/op` is wall time / N. "
        "Default asyncio event loop; asyncgrad's engine slice left at its default. "
        + H.THREADS_NOTE
    )
    print()
    print(tab)
    print()

    rep = H.Report(title="Event-loop responsiveness during backward", command=cmd)
    rep.sections += [legend, tab, check]
    if skipped:
        rep.sections.append("Skipped: " + "; ".join(skipped))
    idle = summary.get("idle")
    a = summary.get("asyncgrad-async")
    if idle:
        rep.notes.append(
            f"With nothing else on the loop the ticker's longest gap is "
            f"{idle['gap']:.2f} ms (median gap {idle['typical']:.2f} ms): the "
            "smallest gap this measurement can show on this machine."
        )
    for lib in ("asyncgrad-sync", "torch"):
        s = summary.get(lib)
        if s:
            rep.notes.append(
                f"{LABELS[lib]}: the longest gap ({s['gap']:.1f} ms) is about the "
                f"backward's wall time ({s['wall']:.1f} ms): the loop does not run "
                "while a blocking backward runs."
            )
    if a:
        sync = summary.get("asyncgrad-sync")
        sl = results["asyncgrad-async"][0].get("slice_s")
        slice_ms = "slice_s not reported" if sl is None else f"slice_s = {sl * 1e3:g} ms"
        rep.notes.append(
            f"{LABELS['asyncgrad-async']}: longest gap {a['gap']:.2f} ms (worst run "
            f"{a['gap_max']:.2f} ms), median gap {a['typical']:.2f} ms with the engine's "
            f"default slice ({slice_ms}), longest gap starting {a['gap_at']:.1f} ms after the "
            "call; "
            f"the backward takes {a['wall']:.1f} ms"
            + (
                f", {a['wall'] / sync['wall']:.2f}x the blocking call's {sync['wall']:.1f} ms "
                "(the awaited backward's wall time includes the ticker's turns)."
                if sync
                else "."
            )
        )
        rep.targets.append(
            (
                "loop longest gap < 5 ms during the awaited backward",
                "MET" if a["gap"] < 5.0 else "NOT MET",
                f"median {a['gap']:.2f} ms, worst run {a['gap_max']:.2f} ms",
            )
        )
    rep.data = {"summary": summary}
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="fewer runs per worker")


if __name__ == "__main__":
    main()
