"""The loop's longest gap while a heavy forward runs off the loop: ``await ag.run`` against
``asyncio.to_thread``.

A ticker task loops on ``await asyncio.sleep(0.001)`` and records when it wakes. While it
runs, one coroutine awaits ``heavy``: six products of 1500 x 1500 float64 matrices, each
followed by tanh (about 0.1 s of single-threaded BLAS work), run

  (a) as NumPy calls through ``asyncio.to_thread`` (the peer: NumPy releases the GIL in its
      kernels, so this is the gap a thread's work leaves the loop),
  (b) as asyncgrad ops through ``await ag.run`` (the engine's compute threads),
  (c) as asyncgrad ops through ``asyncio.to_thread``,
  (d) as NumPy calls through ``await ag.run``.

The longest interval between two wake-ups that overlaps the call is reported with the call's
wall time. Each row runs in fresh processes (interleaved rounds, several calls per process
after one warm-up); no gc.collect() anywhere. ``--tree LABEL=PATH`` adds rows for the
asyncgrad of another checkout (an earlier commit, say).

Usage: python benchmarks/bench_run_gap.py [--rounds R] [--quick] [--tree LABEL=PATH]
"""

from __future__ import annotations

import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

N = 1500
LAYERS = 6
TICK = 0.001
LIBS = ["numpy-thread", "asyncgrad-run", "asyncgrad-thread", "numpy-run"]
LABELS = {
    "numpy-thread": "(a) NumPy via asyncio.to_thread",
    "asyncgrad-run": "(b) asyncgrad ops via await ag.run",
    "asyncgrad-thread": "(c) asyncgrad ops via asyncio.to_thread",
    "numpy-run": "(d) NumPy via await ag.run",
}
BASELINE = "numpy-thread"
# The target: ag.run's longest gap within this factor of the peer's (medians over all calls).
TARGET = 2.0


def heavy_for(lib: str) -> Any:
    """The heavy function of ``lib`` and the arrays it reads."""
    import numpy as np

    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((N, N)) / N**0.5 for _ in range(LAYERS)]
    x0 = rng.standard_normal((N, N))
    if lib.startswith("numpy"):

        def heavy() -> Any:
            x = x0
            for w in ws:
                x = np.tanh(x @ w)
            return x

        return heavy
    import asyncgrad as ag

    tws = [ag.tensor(w) for w in ws]
    tx = ag.tensor(x0)

    def heavy_ag() -> Any:
        x = tx
        for w in tws:
            x = ag.tanh(x @ w)
        return x.numpy()

    return heavy_ag


async def measure(lib: str, runs: int, warm: int) -> dict[str, Any]:
    import asyncio

    heavy = heavy_for(lib)
    if lib.endswith("-run"):
        import asyncgrad as ag

        def call() -> Any:
            return ag.run(heavy)
    else:

        def call() -> Any:
            return asyncio.to_thread(heavy)

    ticks: list[float] = []
    ticked = asyncio.Event()
    stop = False

    async def ticker() -> None:
        ticks.append(time.perf_counter())
        while not stop:
            await asyncio.sleep(TICK)
            ticks.append(time.perf_counter())
            ticked.set()

    task = asyncio.create_task(ticker())
    gaps, walls, first = [], [], []
    check = None
    for i in range(warm + runs):
        await asyncio.sleep(0.02)  # let the ticker settle
        t0 = time.perf_counter()
        out = await call()
        t1 = time.perf_counter()
        while ticks[-1] <= t1:  # wait for the first tick after the call
            ticked.clear()
            await ticked.wait()
        if check is None:
            check = [float(out.sum()), float(abs(out).max())]
        del out
        gap = max(b - a for a, b in pairwise(ticks) if b > t0 and a < t1)
        if i >= warm:
            gaps.append(gap)
            walls.append(t1 - t0)
        else:
            first.append(gap)
        del ticks[:-1]
    stop = True
    await task
    return {"gaps": gaps, "walls": walls, "first": first, "check": check}


def worker_main(lib: str, argv: list[str]) -> None:
    import argparse
    import asyncio

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    a = ap.parse_args(argv)
    H.emit({"lib": lib, **asyncio.run(measure(lib, a.runs, 1))})


ROUNDS = 3


def run(rounds: int = ROUNDS, quick: bool = False, trees: list[str] | None = None) -> H.Report:
    runs = 2 if quick else 4
    cmd = (
        "python benchmarks/bench_run_gap.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
        + "".join(f" --tree {t}=PATH" for t in trees or ())
    )
    print(
        f"bench_run_gap: ticker gaps during {LAYERS} products of {N} x {N} float64 off the loop, "
        f"{rounds} interleaved rounds",
        flush=True,
    )
    libs = H.available_libs(LIBS, LABELS)
    extra = [f"{lib}@{t}" for t in trees or () for lib in libs if lib.startswith("asyncgrad")]
    labels = dict(LABELS)
    for e in extra:
        lib, _, t = e.partition("@")
        labels[e] = f"{LABELS[lib]} [{t}]"
    results = H.interleaved_rounds(
        Path(__file__), libs + extra, rounds, lambda lib, r: ["--runs", str(runs)]
    )
    ref = results[BASELINE][0]["check"]
    for lib, res in results.items():
        got = res[0]["check"]
        if any(abs(g - r) > 1e-9 * max(1.0, abs(r)) for g, r in zip(got, ref, strict=True)):
            raise SystemExit(f"bench_run_gap: the result of {labels[lib]} differs from NumPy's")
    check = (
        "Result check passed: every row's output has NumPy's sum and largest magnitude "
        "(relative tolerance 1e-9)."
    )
    print(check)

    summary: dict[str, Any] = {}
    rows = []
    for lib in results:
        gaps = [g * 1e3 for r in results[lib] for g in r["gaps"]]
        walls = [w * 1e3 for r in results[lib] for w in r["walls"]]
        firsts = [g * 1e3 for r in results[lib] for g in r["first"]]
        s = summary[lib] = {
            "first": H.median(firsts),
            "gap": H.median(gaps),
            "gap_max": max(gaps),
            "wall": H.median(walls),
            "runs": len(gaps),
        }
        base = summary.get(BASELINE)
        vs = f"{s['gap'] / base['gap']:.2f}x" if base and lib != BASELINE else "n/a"
        rows.append(
            [
                labels[lib],
                H.fmt(s["first"], ".1f"),
                H.fmt(s["gap"], ".1f"),
                H.fmt(s["gap_max"], ".1f"),
                vs,
                H.fmt(s["wall"], ".0f"),
                str(s["runs"]),
            ]
        )
    headers = [
        "heavy forward",
        "first call: longest gap ms",
        "later calls: longest gap ms (median)",
        "later calls: longest gap ms (worst call)",
        "vs (a)",
        "call wall ms",
        "calls",
    ]
    legend = (
        f"Ticker: `await asyncio.sleep({TICK})` in a loop; per call, the longest interval between "
        f"two of its wake-ups that overlaps the call. `heavy`: {LAYERS} products of {N} x {N} "
        "float64 matrices, each followed by tanh. "
        f"{runs} calls per process after 1 warm-up, {rounds} interleaved rounds, fresh process "
        "each; `first call`: a process's first call (its arrays are all new memory, whose pages "
        "the kernel faults in as they are first written), median over processes; the other "
        "columns: medians over the later calls (`worst call`: the longest gap of any). "
        "Default asyncio "
        "loop; no gc.collect(). All workers run single-threaded: "
        "OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1 in every worker's environment."
    )
    rep = H.Report(title="The loop while a heavy forward runs off it", command=cmd)
    rep.sections += [legend, H.table(headers, rows), check]
    a, b = summary[BASELINE], summary.get("asyncgrad-run")
    if b is not None:
        ratio = b["gap"] / a["gap"]
        rep.targets.append(
            (
                f"await ag.run(heavy): longest gap within {TARGET}x of asyncio.to_thread's "
                "with the same NumPy calls",
                "MET" if ratio <= TARGET else "NOT MET",
                f"medians {b['gap']:.1f} vs {a['gap']:.1f} ms, {ratio:.2f}x; worst calls "
                f"{b['gap_max']:.1f} vs {a['gap_max']:.1f} ms",
            )
        )
    rep.data = {"summary": summary}
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="fewer calls per worker")


if __name__ == "__main__":
    main()
