"""The engine's numbers, this tree against another checkout, side by side in one run.

For a change to the engine that must hold its behaviour: every row below runs this tree's
package and the other tree's (``--tree base=PATH``, a git worktree of the earlier commit, say)
in the same interleaved rounds, each in a fresh process (the workers of the scripts named in
each row: the same workloads, and the same code measuring them, for both trees). The table
gives, per figure, the median over rounds of each tree with its range (min-max: the spread), and
the ratio of the medians (this tree / the other).

  - bench_small: one small-MLP input gradient, blocking and awaited (us);
  - server_load: 64 concurrent requests x 20 gradients on asyncio and uvloop (gradients/s,
    request latency, the loop's lag p99 and max); its extras: one gradient alone, a burst's
    median request latency launched at once vs in turn, small requests' p99 beside a
    20,000-op backward and that backward's time, and two 3,000-op backwards started A then B
    (which ends first);
  - server_smoothgrad: the SmoothGrad HTTP server (requests/s, p50, p99, its loop's lag);
  - priorities (this script's own worker): a 5,000-op backward at priority 0 alone, then while
    8 clients keep the loop busy with one-gradient requests at priority 1; the share of the
    device it kept (its time alone / its time under load; the policy keeps it at least 0.1),
    and the requests' p99 meanwhile.

Usage: python benchmarks/ab_engine.py --tree base=PATH [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

HERE = Path(__file__).resolve().parent

# (script, worker, figure key, label, unit, better: "low" or "high")
Row = tuple[str, str, str, str, str, str]
ROWS: list[Row] = [
    ("bench_small.py", "asyncgrad-sync", "us", "small gradient, blocking", "us", "low"),
    ("bench_small.py", "asyncgrad-async", "us", "small gradient, awaited", "us", "low"),
]
for loop in ("asyncio", "uvloop"):
    w = f"asyncgrad/{loop}"
    ROWS += [
        ("server_load.py", w, "gps", f"64x20 serving, {loop}: gradients/s", "/s", "high"),
        ("server_load.py", w, "p50", f"64x20 serving, {loop}: request p50", "ms", "low"),
        ("server_load.py", w, "p99", f"64x20 serving, {loop}: request p99", "ms", "low"),
        ("server_load.py", w, "lag_p99", f"64x20 serving, {loop}: loop lag p99", "ms", "low"),
        ("server_load.py", w, "lag_max", f"64x20 serving, {loop}: loop lag max", "ms", "low"),
    ]
EXTRAS = "asyncgrad/extras"
ROWS += [
    ("server_load.py", EXTRAS, "alone_p50", "one gradient alone", "us", "low"),
    ("server_load.py", EXTRAS, "gather_us", "2,000 gradients gathered, each", "us", "low"),
    ("server_load.py", EXTRAS, "burst_p50", "burst of 64x20: median latency, at once", "ms", "low"),
    ("server_load.py", EXTRAS, "burst_turn_p50", "burst of 64x20: median, in turn", "ms", "low"),
    (
        "server_load.py",
        EXTRAS,
        "small_loaded_p99",
        "small p99 beside 20,000 ops",
        "ms",
        "low",
    ),
    ("server_load.py", EXTRAS, "small_unloaded_p99", "small p99, nothing else", "ms", "low"),
    ("server_load.py", EXTRAS, "big_ms", "the 20,000-op pass beside them", "ms", "low"),
    ("server_load.py", EXTRAS, "big_lag_max", "loop lag max during it", "ms", "low"),
    ("server_load.py", EXTRAS, "fin_a", "3,000-op passes A then B: A ends", "ms", "low"),
    ("server_load.py", EXTRAS, "fin_b", "3,000-op passes A then B: B ends", "ms", "low"),
    ("server_smoothgrad.py", "asyncgrad", "rps", "SmoothGrad HTTP: requests/s", "/s", "high"),
    ("server_smoothgrad.py", "asyncgrad", "p50", "SmoothGrad HTTP: p50", "ms", "low"),
    ("server_smoothgrad.py", "asyncgrad", "p99", "SmoothGrad HTTP: p99", "ms", "low"),
    ("server_smoothgrad.py", "asyncgrad", "lag_p99", "SmoothGrad HTTP: loop lag p99", "ms", "low"),
    ("ab_engine.py", "priority", "low_share", "priority 0 under priority 1: share", "", "high"),
    ("ab_engine.py", "priority", "high_p99", "priority 1 requests meanwhile: p99", "ms", "low"),
]
ROWS.insert(
    ROWS.index(("server_load.py", EXTRAS, "big_ms", "the 20,000-op pass beside them", "ms", "low")),
    ("server_load.py", EXTRAS, "big_alone_ms", "the 20,000-op pass alone", "ms", "low"),
)
N_LOW = 5_000
HIGH_CLIENTS = 8


async def _priority_worker(quick: bool) -> dict[str, Any]:
    """See the module's docstring: the share a priority-0 pass keeps under priority-1 load."""
    import asyncio
    import time

    import numpy as np

    import asyncgrad as ag

    def chain(n: int) -> tuple[Any, Any]:
        x = ag.tensor(np.linspace(0.5, 1.5, 16), requires_grad=True)
        y = x
        for _ in range(n):
            y = y * 1.0
        return x, y.sum()

    async def low_pass() -> float:
        x, loss = chain(N_LOW)
        t = time.perf_counter()
        await ag.grad(loss, [x], priority=0)
        return time.perf_counter() - t

    reps = 2 if quick else 5
    alone = min([await low_pass() for _ in range(reps)])
    stop = False
    lat: list[float] = []

    async def client() -> None:
        x, small = chain(20)
        while not stop:
            t = time.perf_counter()
            await ag.grad(small, [x], priority=1, retain_graph=True)
            lat.append((time.perf_counter() - t) * 1e3)

    clients = [asyncio.create_task(client()) for _ in range(HIGH_CLIENTS)]
    await asyncio.sleep(0.05)
    loaded = [await low_pass() for _ in range(reps)]
    stop = True
    await asyncio.gather(*clients)
    return {
        "low_share": alone / H.median(loaded),
        "high_p99": float(np.percentile(lat, 99)),
    }


def worker_main(name: str, argv: Sequence[str]) -> None:
    import asyncio

    if name != "priority":
        raise SystemExit(f"unknown worker {name!r}")
    H.emit({"name": name, **asyncio.run(_priority_worker("--quick" in argv))})


def _value(v: Any) -> float:
    """A figure of one round: a number, or the median of a worker's blocks."""
    return H.median([float(x) for x in v]) if isinstance(v, list) else float(v)


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def _cell(vals: Sequence[float]) -> str:
    return f"{_fmt(H.median(list(vals)))} [{_fmt(min(vals))}-{_fmt(max(vals))}]"


def run(rounds: int, quick: bool, trees: Sequence[str], only: Sequence[str] = ()) -> str:
    """The table; ``only``: the scripts whose rows to run (default: all)."""
    labels = ["this", *trees]
    rows = [r for r in ROWS if not only or r[0] in only]
    workers: dict[str, list[str]] = {}
    for script, worker, *_ in rows:
        if worker not in workers.setdefault(script, []):
            workers[script].append(worker)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def args(lib: str, r: int) -> Sequence[str]:
        return ["--quick"] if quick else []

    for script, names in workers.items():
        libs = [n if t == "this" else f"{n}@{t}" for n in names for t in labels]
        print(f"{script}: {len(libs)} workers x {rounds} rounds", flush=True)
        out = H.interleaved_rounds(HERE / script, libs, rounds, args, timeout=900.0)
        for lib, res in out.items():
            results[(script, lib)] = res
    head = "| figure | " + " | ".join(labels) + " | ratio |"
    lines = [head, "|" + "---|" * (len(labels) + 2)]
    for script, worker, key, label, unit, better in rows:
        cells = []
        meds = []
        for t in labels:
            lib = worker if t == "this" else f"{worker}@{t}"
            vals = [_value(r[key]) for r in results[(script, lib)] if r.get(key) is not None]
            cells.append(_cell(vals) if vals else "-")
            meds.append(H.median(vals) if vals else float("nan"))
        ratio = meds[0] / meds[1] if len(meds) > 1 and meds[1] else float("nan")
        arrow = "higher is better" if better == "high" else "lower is better"
        lines.append(f"| {label} ({unit}; {arrow}) | " + " | ".join(cells) + f" | {ratio:.2f} |")
    if ("server_load.py", EXTRAS) not in results:
        return "\n".join(lines)
    orders = {
        t: [
            o
            for r in results[("server_load.py", EXTRAS if t == "this" else f"{EXTRAS}@{t}")]
            for o in r["orders"]
        ]
        for t in labels
    }
    lines.append(
        "| 3,000-op passes A then B: which ends first | "
        + " | ".join(" ".join(orders[t]) for t in labels)
        + " | |"
    )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="LABEL=PATH of a checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated scripts whose rows to run")
    a = ap.parse_args()
    trees = H.parse_trees(a.tree)
    print(run(a.rounds, a.quick, trees, [s for s in a.only.split(",") if s]))


if __name__ == "__main__":
    main()
