"""Large nodes of every kind off the loop: the loop's stall in an elementwise-heavy backward,
and each node's time against its work estimate.

1. Stall: ``x, loss = await ag.run(heavy)``, where ``heavy`` runs six (1500, 1500) matmuls, each
   followed by ``tanh``, from a leaf ``x`` (float64) and sums the result; then
   ``await ag.grad(loss, [x])`` while a 1 ms ticker runs on the loop. Reported: the backward's
   median time, the ticker's longest lag (the loop's stall as a user sees it) and the engine's
   own ``stats()["longest_stall_s"]``, per tree (``--tree LABEL=PATH`` adds another checkout,
   for a before/after in one run). Each tree runs in a fresh process, BLAS single-threaded.
2. Estimates (this tree only): for the backward nodes of common ops over a (1024, 1024) float64
   input, the node's time run inline against ``Node._work``, as nanoseconds per estimated
   multiply-add, beside a matmul's; NOTE [Work estimates] in asyncgrad/graph/node.py wants
   them comparable, so that ``offload_threshold`` means the same time for every kind of node.

Usage: python benchmarks/bench_large_nodes.py [--quick] [--tree LABEL=PATH ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

N = 1500
LAYERS = 6
TICK_S = 0.001


# ---------------------------------------------------------------------------------------------
# Workers (fresh processes)
# ---------------------------------------------------------------------------------------------
async def stall(reps: int) -> dict[str, Any]:
    import numpy as np

    import asyncgrad as ag

    rng = np.random.default_rng(0)
    ws = [ag.tensor(rng.standard_normal((N, N)) / np.sqrt(N)) for _ in range(LAYERS)]
    x0 = rng.standard_normal((N, N))

    def heavy() -> tuple[Any, Any]:
        x = ag.tensor(x0, requires_grad=True)
        h = x
        for w in ws:
            h = (h @ w).tanh()
        return x, h.sum()

    lags: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(TICK_S)
            lags.append(time.perf_counter() - t - TICK_S)

    times, max_lags, stalls = [], [], []
    for i in range(reps + 1):
        x, loss = await ag.run(heavy)
        ag.autograd.engine.reset_stats()
        lags.clear()
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        await ag.grad(loss, [x])
        t1 = time.perf_counter()
        stop = True
        await tick
        stop = False
        if i:  # the first is a warm-up
            times.append(t1 - t0)
            max_lags.append(max(lags, default=0.0))
            stalls.append(ag.autograd.engine.stats()["longest_stall_s"])
    return {
        "median_s": statistics.median(times),
        "max_lag_s": max(max_lags),
        "median_max_lag_s": statistics.median(max_lags),
        "longest_stall_s": max(stalls),
    }


def estimates() -> list[list[str]]:
    import numpy as np

    import asyncgrad as ag

    rng = np.random.default_rng(0)
    f = ag.nn.functional
    cases = {
        "x @ w (1024 x 1024 x 1024)": lambda x: x @ ag.tensor(rng.standard_normal((1024, 1024))),
        "einsum ij,jk->ik (1024 x 1024 x 1024)": lambda x: ag.einsum(
            "ij,jk->ik", x, ag.tensor(rng.standard_normal((1024, 1024)))
        ),
        "x * x": lambda x: x * x,
        "x / (x + 1)": lambda x: x / (x + 1),
        "tanh": lambda x: x.tanh(),
        "exp": lambda x: x.exp(),
        "sin": lambda x: x.sin(),
        "relu": lambda x: x.relu(),
        "gelu": lambda x: f.gelu(x),
        "softmax(1)": lambda x: x.softmax(1),
        "log_softmax(1)": lambda x: x.log_softmax(1),
        "amax(1)": lambda x: x.amax(1),
        "var(1)": lambda x: x.var(1),
        "x[::2]": lambda x: x[::2],
        "cumsum(1)": lambda x: x.cumsum(1),
        "where": lambda x: ag.where(x > 0, x, x * 0),
        "linalg.inv (256 x 256)": lambda x: ag.linalg.inv(x[:256, :256] + 30 * ag.eye(256)),
    }
    rows = []
    for name, make in cases.items():
        x = ag.tensor(rng.standard_normal((1024, 1024)), requires_grad=True)
        y = make(x)
        node = y.grad_fn
        g = np.ones(y.shape)
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            node.apply([g], None, False)
            ts.append(time.perf_counter() - t0)
        t = min(ts)
        work = node._work(node, [g])
        per = f"{t / work * 1e9:.3f}" if work else "-"
        rows.append([name, type(node).__name__, f"{t * 1e3:.2f}", f"{work:,.0f}", per])
    return rows


def worker(lib: str, args: list[str]) -> None:
    reps = int(args[0])
    res = asyncio.run(stall(reps))
    if lib == "asyncgrad-estimates":
        res["estimates"] = estimates()
    H.emit(res)


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------
def main() -> None:
    w = H.worker_argv()
    if w is not None:
        worker(*w)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH")
    args = ap.parse_args()
    reps = 3 if args.quick else args.reps
    labels = H.parse_trees(args.tree)
    rows = []
    table2: list[list[str]] = []
    for lib in ["asyncgrad-estimates", *(f"asyncgrad@{t}" for t in labels)]:
        res = H.run_worker(__file__, lib, [str(reps)], timeout=900)
        if "estimates" in res:
            table2 = res["estimates"]
        rows.append([
            "this tree" if lib == "asyncgrad-estimates" else lib.partition("@")[2],
            f"{res['median_s'] * 1e3:.1f}", f"{res['max_lag_s'] * 1e3:.1f}",
            f"{res['median_max_lag_s'] * 1e3:.1f}", f"{res['longest_stall_s'] * 1e3:.1f}",
        ])  # fmt: skip
    head = ["tree", "backward ms (median)", "ticker max lag ms", "ticker max lag ms (median)",
            "engine longest_stall ms"]  # fmt: skip
    print(
        f"## Stall in an elementwise-heavy backward ({LAYERS} x ({N}, {N}) matmul + tanh, "
        f"float64; {reps} passes after one warm-up; BLAS threads: {H.blas_threads()})\n"
    )
    print(H.table(head, rows))
    print("\n## Node time against its work estimate ((1024, 1024) float64 input, inline)\n")
    print(H.table(["op", "node", "ms", "estimate (multiply-adds)", "ns per estimated one"], table2))


if __name__ == "__main__":
    main()
