"""Where a CPU node is worth moving off the loop: the data behind ``offload_threshold``.

For matmul backward nodes of growing size (x of shape (B, K) times w of shape (K, N), both
gradients wanted, so about 2*B*K*N multiply-adds), one awaited ``ag.grad`` is timed with the
node run inline on the loop and with it handed to a compute thread (NOTE [Large nodes]), and a
1 ms ticker records the loop's longest stall meanwhile. The hand-off's cost is the difference;
the threshold is where it stops mattering (a few tens of percent of the node's own time) while
the stall it removes is still small. Everything runs in one process, asyncgrad only: there is
no peer for this row.

Usage: python benchmarks/bench_offload.py [--quick] [--out benchmarks/offload.md]
(run_all.py copies benchmarks/offload.md into RESULTS.md)
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

SHAPES = [(8, 32, 32), (16, 64, 64), (32, 128, 128), (32, 256, 256), (32, 512, 512),
          (64, 512, 512), (32, 1024, 1024), (128, 1024, 1024)]  # fmt: skip
TICK_S = 0.001


async def measure(shape: tuple[int, int, int], threshold: float, reps: int) -> dict[str, float]:
    import numpy as np

    import asyncgrad as ag

    ag.autograd.engine.configure(offload_threshold=threshold)
    b, k, n = shape
    rng = np.random.default_rng(0)
    x = ag.tensor(rng.standard_normal((b, k)).astype(np.float32), requires_grad=True)
    w = ag.tensor(rng.standard_normal((k, n)).astype(np.float32), requires_grad=True)
    lags: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(TICK_S)
            lags.append(time.perf_counter() - t - TICK_S)

    times = []
    for i in range(reps + 3):
        loss = (x @ w).sum()
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        await ag.grad(loss, [x, w])
        t1 = time.perf_counter()
        stop = True
        await tick
        stop = False
        if i >= 3:  # warm-up
            times.append(t1 - t0)
    return {"median_s": statistics.median(times), "max_lag_s": max(lags, default=0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    shapes = SHAPES[:4] if args.quick else SHAPES
    reps = 5 if args.quick else args.reps
    rows: list[list[Any]] = []
    for shape in shapes:
        b, k, n = shape
        work = 2 * b * k * n
        inline = asyncio.run(measure(shape, float("inf"), reps))
        off = asyncio.run(measure(shape, 0.0, reps))
        over = off["median_s"] - inline["median_s"]
        rows.append([
            f"({b}, {k}) @ ({k}, {n})", f"{work:,}",
            f"{inline['median_s'] * 1e6:,.0f}", f"{off['median_s'] * 1e6:,.0f}",
            f"{over * 1e6:+,.0f}", f"{over / inline['median_s']:+.0%}",
            f"{inline['max_lag_s'] * 1e3:.2f}", f"{off['max_lag_s'] * 1e3:.2f}",
        ])  # fmt: skip
    head = ["matmul", "multiply-adds", "inline us", "off loop us", "hand-off us",
            "hand-off %", "max lag inline ms", "max lag off loop ms"]  # fmt: skip
    table = H.table(head, rows)
    section = "\n".join([
        "## Large nodes off the loop (bench_offload.py)",
        "",
        "One awaited `ag.grad` of `(x @ w).sum()` for x and w (float32), the matmul's backward "
        "run inline (`offload_threshold=inf`) and on a compute thread (`offload_threshold=0`); "
        f"median of {reps} after 3 warm-up passes, and the longest lag of a 1 ms ticker over "
        "all of them. The default threshold is 2**25 multiply-adds (33,554,432). BLAS threads: "
        f"{H.blas_threads()}.",
        "",
        table,
        "",
    ])  # fmt: skip
    print(section)
    if args.out:
        args.out.write_text(section)


if __name__ == "__main__":
    main()
