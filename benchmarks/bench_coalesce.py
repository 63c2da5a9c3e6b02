"""Serving load with concurrent requests coalesced (``ag.serving.Coalescer``) against one pass each.

The workload of server_load.py: 64 concurrent clients on one event loop, each request 20 input
gradients one after another of the MLP 32-64-64-1 (batch 8, float32), a 1 ms ticker recording
the loop's lag; closed loop, one measured window after a warm-up. Ways to serve, each in a
fresh process, on asyncio and uvloop:

  - asyncgrad, one pass per call: ``await ag.grad(model(x).sum(), [x])``;
  - asyncgrad coalesced: ``await coalescer.grad(x)`` (NOTE [Coalesced gradients]): the calls
    waiting at once run as one forward and one backward over their stacked rows;
  - PyTorch inline (blocks the loop), the fastest PyTorch gets on one loop.

Plus one gradient with nothing else running, each way (what the coalescer costs a request
alone), and server_load.py's burst (d): 64 requests of 20 gradients launched at once with
``asyncio.gather``, against the same requests one after another: the requests' median
latency. Every coalesced gradient of the first client is checked against the one computed
alone.

Usage: python benchmarks/bench_coalesce.py [--rounds R] [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
import server_load as S

LIBS = ["asyncgrad", "asyncgrad-coalesced", "torch-inline"]
LABELS = {
    "asyncgrad": "asyncgrad, one pass per call",
    "asyncgrad-coalesced": "asyncgrad, coalesced",
    "torch-inline": "PyTorch inline (blocks the loop)",
}
LOOPS = ["asyncio", "uvloop"]
ALONE = 500  # calls of one gradient alone


async def _work(lib: str, quick: bool) -> dict[str, Any]:
    L = S.Lib(lib)
    x = L.inputs(1)[0]
    for _ in range(50):
        await L.grad_call(x)
    clock = time.perf_counter
    alone = []
    for _ in range(ALONE // 5 if quick else ALONE):
        t = clock()
        await L.grad_call(x)
        alone.append((clock() - t) * 1e6)
    res = await S.load(lib, S.timings(quick))
    res["alone_us"] = S.percentile(alone, 50)
    res.update(await S.burst(L))
    return res


def worker_main(name: str, argv: list[str]) -> None:
    import asyncio

    lib, _, loop = name.partition("/")
    if lib not in LIBS or loop not in LOOPS:
        raise SystemExit(f"unknown worker {name!r}")
    factory = None
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        res = runner.run(_work(lib, "--quick" in argv))
    H.emit({"name": name, **res})


ROUNDS = 3


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    import importlib.util

    cmd = "python benchmarks/bench_coalesce.py" + (" --quick" if quick else "")
    print(f"bench_coalesce: {S.CLIENTS} clients x {S.GRADS_PER_REQUEST} gradients, {rounds} rounds")
    loops = [lp for lp in LOOPS if lp == "asyncio" or importlib.util.find_spec("uvloop")]
    names = [f"{lib}/{lp}" for lp in loops for lib in LIBS if H.missing_reason(lib) is None]
    results = H.interleaved_rounds(Path(__file__), names, rounds, lambda n, r: ["--quick"] * quick)
    ref = results[names[0]][0]["grad"]
    for n in names:
        got = results[n][0]["grad"]
        if not all(
            abs(a - b) <= 1e-4 * (1 + abs(b)) for a, b in zip(_flat(got), _flat(ref), strict=True)
        ):
            raise SystemExit(f"bench_coalesce: the gradient of {n} differs from {names[0]}'s")
    rep = H.Report(title="Serving load with requests coalesced (bench_coalesce.py)", command=cmd)
    head = ["serving", "gradients/s", "vs PyTorch inline", "request p50 ms", "p99 ms",
            "loop lag p99 ms", "lag max ms", "one gradient alone µs",
            "burst p50 ms: at once / in turn"]  # fmt: skip
    rows = []
    for lp in loops:
        inline = f"torch-inline/{lp}"
        for lib in LIBS:
            n = f"{lib}/{lp}"
            if n not in results:
                continue
            rs = results[n]

            def med(k: str, rs: list[dict[str, Any]] = rs) -> float:
                return H.median([r[k] for r in rs])

            vs = ""
            if inline in results:
                vs = H.fmt_ratio(H.paired_ratio([r["gps"] for r in rs],
                                                [r["gps"] for r in results[inline]]))  # fmt: skip
            lag_max = max(r["lag_max"] for r in rs)
            rows.append(
                [f"{LABELS[lib]}, {lp}", f"{med('gps'):.0f}", vs, f"{med('p50'):.1f}",
                 f"{med('p99'):.1f}", f"{med('lag_p99'):.2f}", f"{lag_max:.2f}",
                 f"{med('alone_us'):.0f}",
                 f"{med('burst_p50'):.1f} / {med('burst_turn_p50'):.1f}"]
            )  # fmt: skip
    rep.sections.append(H.table(head, rows))
    co = [r["coalescer"] for n in names for r in results[n] if "coalescer" in r]
    if co:
        rows_per = H.median([b["rows"] / max(b["batches"], 1) for b in co])
        rep.sections.append(
            f"Coalesced: median {rows_per:.0f} rows per batch ({rows_per / S.BATCH:.1f} requests),"
            f" largest {max(b['largest_batch'] for b in co)} rows. Gradient check passed: the first"
            " client's gradient matches across every way of serving (relative tolerance 1e-4)."
        )
    print(rep.text(), flush=True)
    return rep


def _flat(v: Any) -> list[float]:
    if isinstance(v, list):
        return [y for x in v for y in _flat(x)]
    return [float(v)]


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main)


if __name__ == "__main__":
    main()
