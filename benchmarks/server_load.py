"""Serving load on one event loop: many concurrent requests, each computing input gradients.

The workload of a gradient-serving process (saliency, attribution): 64 concurrent requests on
one event loop, each computing 20 input gradients one after another (forward + gradient of
``out.sum()`` with respect to the input) of an MLP 32-64-64-1 (ReLU, float32, batch 8; the
weights require grad, as ``nn.Linear`` parameters do). A ticker task sleeps 1 ms at a time and
records how late it wakes: the loop's lag. Three ways to serve, each in its own fresh process,
on the default asyncio loop and on uvloop:

  - asyncgrad: forward in the coroutine, then ``await ag.grad(out.sum(), [x])``;
  - PyTorch inline: forward and ``torch.autograd.grad`` called in the coroutine (blocking the
    loop while they run);
  - PyTorch via ``asyncio.to_thread``: each gradient (forward + ``torch.autograd.grad``) is one
    call on the loop's default thread pool, awaited by the coroutine.

Closed loop: each of the 64 clients sends its next request as soon as the previous one answers;
a request's latency runs from that moment (it includes waiting for the loop) to its last
gradient. After a warm-up, a fixed window is measured: gradients completed per second, latency
p50/p99 of the requests sent in the window, the ticker's lag p99 and max in the window.

Extra measurements, each library in its own process on the default asyncio loop:

  (a) one gradient alone: latency of one call with nothing else running;
  (b) 2,000 gradient calls launched at once with ``asyncio.gather`` vs awaited one after
      another: cost per gradient each way;
  (c) fairness: latency p99 of small requests (one gradient each, 8 clients) while one large
      backward runs (a 20,000-op chain, graph built beforehand) vs with nothing else running;
      and two 3,000-op chain backwards started A then B: which finishes first;
  (d) a burst of 64 requests of 20 gradients each, launched at once with ``asyncio.gather``
      vs the same requests one after another: the median request's latency each way.

No ``gc.collect()`` and no ``gc.freeze()`` anywhere: collector pauses land in the numbers.

Usage: python benchmarks/server_load.py [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
from bench_chain import chain
from bench_small import BATCH, SIZES, init

CLIENTS = 64
GRADS_PER_REQUEST = 20
TICK = 0.001
N_GATHER = 2_000
N_BURST = 64  # (d): requests of GRADS_PER_REQUEST gradients each
BURST_RUNS = 4  # (d): timed runs each way, after one warm-up run of each
SMALL_CLIENTS = 8
N_BIG = 20_000
N_ORDER = 3_000

LIBS = ["asyncgrad", "torch-inline", "torch-thread"]
LOOPS = ["asyncio", "uvloop"]
LABELS = {
    "asyncgrad": "asyncgrad await ag.grad",
    "torch-inline": "PyTorch inline (blocks the loop)",
    "torch-thread": "PyTorch via asyncio.to_thread",
}
BASELINE = "torch-thread"


def variants() -> list[str]:
    """Worker names: ``LIB/LOOP`` for the load runs, ``LIB/extras`` for (a), (b), (c)."""
    return [f"{lib}/{loop}" for loop in LOOPS for lib in LIBS] + [f"{lib}/extras" for lib in LIBS]


def timings(quick: bool) -> dict[str, float]:
    if quick:
        return {"warm": 0.3, "window": 0.6, "alone": 300, "gather_reps": 1, "big_reps": 2}
    return {"warm": 0.5, "window": 1.2, "alone": 1000, "gather_reps": 2, "big_reps": 4}


# ---------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------
def percentile(xs: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


class Ticker:
    """Sleeps TICK at a time; records (wake time, lag): how much later than asked it woke."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self.stop = False

    async def run(self) -> None:
        import asyncio

        clock = time.perf_counter
        while not self.stop:
            t = clock()
            await asyncio.sleep(TICK)
            now = clock()
            self.samples.append((now, now - t - TICK))

    def lags(self, t0: float, t1: float) -> list[float]:
        """Lags (s) of the wake-ups in [t0, t1], plus the one that ends the first stall
        reaching past t1, so a stall that covers the window's end is counted."""
        out = []
        for now, lag in self.samples:
            if now >= t0:
                out.append(lag)
                if now > t1:
                    break
        return out


class Lib:
    """One way to serve: ``grad_call(x)`` is an awaitable computing one input gradient (forward
    included); ``big_backward(loss, leaf)`` differentiates a prebuilt graph."""

    def __init__(self, lib: str) -> None:
        import numpy as np

        self.lib = lib
        w, _ = init()
        if lib.startswith("asyncgrad"):
            import asyncgrad as ag
            import asyncgrad.nn.functional as F

            self.ag = ag
            self.p = [ag.nn.Parameter(a) for a in w]
            self.tensor = lambda a: ag.tensor(a, requires_grad=True)
            self.tanh = ag.tanh
            self.F = F
            if lib == "asyncgrad-coalesced":  # benchmarks/bench_coalesce.py
                self.coalescer = ag.serving.Coalescer(self.per_sample, max_batch=CLIENTS * BATCH)
        else:
            import torch
            import torch.nn.functional as F

            H.pin_torch_threads()
            self.torch = torch
            self.p = [torch.nn.Parameter(torch.from_numpy(a)) for a in w]
            self.tensor = lambda a: torch.tensor(a, requires_grad=True)
            self.tanh = torch.tanh
            self.F = F
        self.np = np

    def per_sample(self, x: Any) -> Any:
        F, p = self.F, self.p
        h = F.relu(F.linear(x, p[0], p[1]))
        h = F.relu(F.linear(h, p[2], p[3]))
        return F.linear(h, p[4], p[5])

    def forward(self, x: Any) -> Any:
        return self.per_sample(x).sum()

    def _torch_grad(self, x: Any) -> Any:
        # Grad mode is thread-local in PyTorch: say it explicitly for pool threads.
        with self.torch.enable_grad():
            return self.torch.autograd.grad(self.forward(x), [x])[0]

    async def grad_call(self, x: Any) -> Any:
        if self.lib == "asyncgrad":
            return (await self.ag.grad(self.forward(x), [x]))[0]
        if self.lib == "asyncgrad-coalesced":
            return await self.coalescer.grad(x)
        if self.lib == "torch-inline":
            return self._torch_grad(x)
        import asyncio

        return await asyncio.to_thread(self._torch_grad, x)

    def build_chain(self, n: int) -> tuple[Any, Any]:
        from bench_chain import x0

        leaf = self.tensor(x0())
        return chain(leaf, n, self.tanh).sum(), leaf

    async def big_backward(self, loss: Any, leaf: Any) -> Any:
        if self.lib.startswith("asyncgrad"):
            return (await self.ag.grad(loss, [leaf]))[0]
        if self.lib == "torch-inline":
            return self.torch.autograd.grad(loss, [leaf])[0]
        import asyncio

        def bwd() -> Any:
            with self.torch.enable_grad():
                return self.torch.autograd.grad(loss, [leaf])[0]

        return await asyncio.to_thread(bwd)

    def inputs(self, n: int) -> list[Any]:
        rng = self.np.random.default_rng(1)
        xs = rng.standard_normal((n, BATCH, SIZES[0])).astype(self.np.float32)
        return [self.tensor(a) for a in xs]

    def to_list(self, g: Any) -> list:
        return g.detach().numpy().tolist()


async def load(lib: str, t: dict[str, float]) -> dict[str, Any]:
    """The 64-client closed loop; measures one window after a warm-up."""
    import asyncio

    L = Lib(lib)
    xs = L.inputs(CLIENTS)
    clock = time.perf_counter
    grad0 = L.to_list(await L.grad_call(xs[0]))
    ticker = Ticker()
    tick_task = asyncio.create_task(ticker.run())
    done = 0
    records: list[tuple[float, float]] = []  # (sent, answered) per request
    stop = False

    async def client(x: Any) -> None:
        nonlocal done
        sent = clock()
        while not stop:
            await asyncio.sleep(0)  # the hop a new request takes through the loop
            for _ in range(GRADS_PER_REQUEST):
                await L.grad_call(x)
                done += 1
            now = clock()
            records.append((sent, now))
            sent = now

    tasks = [asyncio.create_task(client(x)) for x in xs]
    await asyncio.sleep(t["warm"])
    t0, d0 = clock(), done
    await asyncio.sleep(t["window"])
    t1, d1 = clock(), done
    stop = True
    await asyncio.gather(*tasks)
    ticker.stop = True
    await tick_task
    lat = [(b - a) * 1e3 for a, b in records if t0 <= a < t1]
    lags = [v * 1e3 for v in ticker.lags(t0, t1)]
    extra = {"coalescer": L.coalescer.stats()} if hasattr(L, "coalescer") else {}
    return {
        **extra,
        "gps": (d1 - d0) / (t1 - t0),
        "p50": percentile(lat, 50),
        "p99": percentile(lat, 99),
        "requests": len(lat),
        "lag_p99": percentile(lags, 99),
        "lag_max": max(lags) if lags else float("nan"),
        "ticks": len(lags),
        "window_s": t1 - t0,
        "grad": grad0,
    }


async def burst(L: Lib) -> dict[str, float]:
    """(d) N_BURST requests of GRADS_PER_REQUEST gradients each: launched at once with
    asyncio.gather, and one after another; the requests' median, first and last end (ms)."""
    import asyncio

    clock = time.perf_counter
    res: dict[str, float] = {}
    xs = L.inputs(N_BURST)

    async def request(x: Any) -> float:
        for _ in range(GRADS_PER_REQUEST):
            await L.grad_call(x)
        return clock()

    burst_p50, turn_p50, burst_total, turn_total = [], [], [], []
    burst_first, turn_first = [], []
    for _ in range(BURST_RUNS + 1):  # the first of each is a warm-up
        await asyncio.sleep(0.01)
        a = clock()
        ends = [await request(x) - a for x in xs]
        turn_p50.append(H.median(ends) * 1e3)
        turn_first.append(ends[0] * 1e3)
        turn_total.append(ends[-1] * 1e3)
        await asyncio.sleep(0.01)
        a = clock()
        ends = [e - a for e in await asyncio.gather(*(request(x) for x in xs))]
        burst_p50.append(H.median(ends) * 1e3)
        burst_first.append(min(ends) * 1e3)
        burst_total.append(max(ends) * 1e3)
    res["burst_turn_p50"] = H.median(turn_p50[1:])
    res["burst_p50"] = H.median(burst_p50[1:])
    res["burst_turn_first"] = H.median(turn_first[1:])
    res["burst_first"] = H.median(burst_first[1:])
    res["burst_turn_total"] = H.median(turn_total[1:])
    res["burst_total"] = H.median(burst_total[1:])
    return res


async def extras(lib: str, t: dict[str, float]) -> dict[str, Any]:
    import asyncio

    L = Lib(lib)
    clock = time.perf_counter
    res: dict[str, Any] = {}

    # Reference: the ticker's lag with nothing else on the loop (the machine's own noise).
    ticker = Ticker()
    tick_task = asyncio.create_task(ticker.run())
    await asyncio.sleep(0.05)
    a = clock()
    await asyncio.sleep(0.3)
    idle = [v * 1e3 for v in ticker.lags(a, clock())]
    res["idle_lag_p99"] = percentile(idle, 99)
    res["idle_lag_max"] = max(idle)
    ticker.stop = True
    await tick_task

    # (a) one gradient alone.
    x = L.inputs(1)[0]
    for _ in range(200):
        await L.grad_call(x)
    alone = []
    for _ in range(int(t["alone"])):
        a = clock()
        await L.grad_call(x)
        alone.append((clock() - a) * 1e6)
    res["alone_p50"] = percentile(alone, 50)
    res["alone_p99"] = percentile(alone, 99)

    # (b) N_GATHER calls at once vs one after another; ticker running for the loop's lag.
    xs = L.inputs(N_GATHER)
    ticker = Ticker()
    tick_task = asyncio.create_task(ticker.run())
    turn, gath, gath_lag, first_done = [], [], [], []
    done_at: list[float] = []

    async def timed(x: Any) -> None:
        await L.grad_call(x)
        done_at.append(clock())

    for _ in range(int(t["gather_reps"]) + 1):  # the first pass of each is a warm-up
        await asyncio.sleep(0.01)
        a = clock()
        for x in xs:
            await L.grad_call(x)
        turn.append((clock() - a) / N_GATHER * 1e6)
        await asyncio.sleep(0.01)
        done_at.clear()
        a = clock()
        await asyncio.gather(*(timed(x) for x in xs))
        b = clock()
        gath.append((b - a) / N_GATHER * 1e6)
        first_done.append((min(done_at) - a) / (b - a))
        await asyncio.sleep(0.005)
        gath_lag.append(max(ticker.lags(a, b)) * 1e3)
    res["turn_us"] = H.median(turn[1:])
    res["gather_us"] = H.median(gath[1:])
    res["gather_lag_max"] = max(gath_lag[1:])
    res["gather_first_done"] = H.median(first_done[1:])
    del xs

    # (d) a burst of requests of several gradients each, at once vs in turn.
    res.update(await burst(L))

    # (c) small requests (one gradient each, SMALL_CLIENTS clients) unloaded, then while one
    # large backward runs.
    big_alone = []
    for _ in range(2):  # the large backward with nothing else running; the first is a warm-up
        loss, leaf = L.build_chain(N_BIG)
        await asyncio.sleep(0.01)
        a = clock()
        await L.big_backward(loss, leaf)
        big_alone.append((clock() - a) * 1e3)
        del loss, leaf
    res["big_alone_ms"] = big_alone[-1]
    xs = L.inputs(SMALL_CLIENTS)
    records: list[tuple[float, float]] = []
    stop = False

    async def client(x: Any) -> None:
        sent = clock()
        while not stop:
            await asyncio.sleep(0)
            await L.grad_call(x)
            now = clock()
            records.append((sent, now))
            sent = now

    tasks = [asyncio.create_task(client(x)) for x in xs]
    await asyncio.sleep(0.1)
    a = clock()
    await asyncio.sleep(0.3)
    b = clock()
    unloaded = [(e - s) * 1e3 for s, e in records if a <= s < b]
    loaded, big_ms, big_lag = [], [], []
    for _ in range(int(t["big_reps"])):
        loss, leaf = L.build_chain(N_BIG)  # blocks the loop: excluded from the window
        await asyncio.sleep(0.05)  # the small clients drain what queued meanwhile
        a = clock()
        await L.big_backward(loss, leaf)
        b = clock()
        del loss, leaf
        big_ms.append((b - a) * 1e3)
        await asyncio.sleep(0.01)
        # Small requests whose time in flight overlaps the large backward.
        loaded += [(e - s) * 1e3 for s, e in records if e > a and s < b]
        big_lag.append(max(ticker.lags(a, b)) * 1e3)
    stop = True
    await asyncio.gather(*tasks)
    res.update(
        small_unloaded_p50=percentile(unloaded, 50),
        small_unloaded_p99=percentile(unloaded, 99),
        small_loaded_p50=percentile(loaded, 50),
        small_loaded_p99=percentile(loaded, 99),
        small_unloaded_n=len(unloaded),
        small_loaded_n=len(loaded),
        big_ms=H.median(big_ms),
        big_lag_max=max(big_lag),
    )

    # Two N_ORDER-op backwards started A then B, nothing else running.
    orders, fin_a, fin_b = [], [], []
    for _ in range(3):
        (la, xa), (lb, xb) = L.build_chain(N_ORDER), L.build_chain(N_ORDER)
        await asyncio.sleep(0.01)
        finished: dict[str, float] = {}
        start = clock()

        async def one(name: str, loss: Any, leaf: Any, finished=finished, start=start) -> None:
            await L.big_backward(loss, leaf)
            finished[name] = (clock() - start) * 1e3

        ta = asyncio.create_task(one("A", la, xa))
        tb = asyncio.create_task(one("B", lb, xb))
        await asyncio.gather(ta, tb)
        orders.append("".join(sorted(finished, key=finished.__getitem__)))
        fin_a.append(finished["A"])
        fin_b.append(finished["B"])
    res.update(orders=orders, fin_a=H.median(fin_a), fin_b=H.median(fin_b))
    ticker.stop = True
    await tick_task
    return res


def worker_main(name: str, argv: list[str]) -> None:
    import asyncio

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    lib, _, mode = name.partition("/")
    if lib not in LIBS or mode not in (*LOOPS, "extras"):
        raise SystemExit(f"unknown worker {name!r}")
    t = timings(a.quick)
    factory = None
    if mode == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        if mode == "extras":
            res = runner.run(extras(lib, t))
        else:
            res = runner.run(load(lib, t))
        loop_name = type(runner.get_loop()).__module__
    H.emit({"name": name, "loop": loop_name, **res})


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------
def check_gradients(rows: dict[str, dict[str, Any]]) -> str:
    import numpy as np

    ref_name = next((n for n in rows if n.startswith("torch")), next(iter(rows)))
    ref = np.asarray(rows[ref_name]["grad"])
    scale = float(np.max(np.abs(ref))) or 1.0
    worst = 0.0
    for name, r in rows.items():
        g = np.asarray(r["grad"])
        if g.shape != ref.shape or not np.allclose(g, ref, rtol=1e-4, atol=1e-6 * scale):
            raise SystemExit(f"server_load: the gradient of {name} does not match {ref_name}'s")
        worst = max(worst, float(np.max(np.abs(g - ref))) / scale)
    return (
        f"Gradient check passed: the first input gradient of every load worker matches "
        f"{ref_name}'s (max difference {worst:.1e} relative to its largest magnitude)."
    )


def verdict_both(median_v: float, worst_v: float, ok: Any) -> str:
    """MET when the median over rounds and the worst round both pass, NOT MET when neither
    does, INCONCLUSIVE when they differ."""
    a, b = ok(median_v), ok(worst_v)
    if a != b:
        return "INCONCLUSIVE"
    return "MET" if a else "NOT MET"


ROUNDS = 3


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    if quick:
        rounds = 1  # a smoke check: every worker once
    cmd = (
        "python benchmarks/server_load.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    t = timings(quick)
    print(
        f"server_load: {CLIENTS} concurrent requests x {GRADS_PER_REQUEST} input gradients of an "
        f"MLP {'-'.join(map(str, SIZES))} on one loop, {rounds} interleaved rounds",
        flush=True,
    )
    names = [n for n in variants() if H.missing_reason(n) is None]
    skipped = sorted({n.split("/")[0] for n in variants()} - {n.split("/")[0] for n in names})
    for lib in skipped:
        print(f"  skipped {LABELS[lib]}: {H.missing_reason(lib)}", flush=True)
    import importlib.util

    if importlib.util.find_spec("uvloop") is None:
        names = [n for n in names if not n.endswith("/uvloop")]
        skipped.append("uvloop")
        print("  skipped the uvloop rows: uvloop is not installed", flush=True)
    args = ["--quick"] if quick else []
    results = H.interleaved_rounds(Path(__file__), names, rounds, lambda n, r: args)
    check = check_gradients({n: results[n][0] for n in names if not n.endswith("/extras")})
    print(check)

    def med(name: str, key: str) -> float:
        return H.median([r[key] for r in results[name]])

    def worst(name: str, key: str) -> float:
        return max(r[key] for r in results[name])

    def per_round(name: str, key: str) -> list[float]:
        return [r[key] for r in results[name]]

    rep = H.Report(title="Serving load: concurrent input gradients on one event loop", command=cmd)
    summary: dict[str, Any] = {}

    # -- load table --
    rows = []
    for loop in LOOPS:
        base = f"{BASELINE}/{loop}"
        inline = f"torch-inline/{loop}"
        for lib in LIBS:
            n = f"{lib}/{loop}"
            if n not in results:
                continue
            s = {k: med(n, k) for k in ("gps", "p50", "p99", "lag_p99", "requests", "ticks")}
            s["lag_p99_worst"] = worst(n, "lag_p99")
            s["lag_max"] = worst(n, "lag_max")
            s["lag_max_median"] = med(n, "lag_max")
            summary[n] = s
            target = ""
            if lib == "asyncgrad":
                verdicts = []
                for other, limit, what in ((base, 2.0, "to_thread"), (inline, 1.0, "inline")):
                    if other not in results:
                        continue
                    r = H.paired_ratio(per_round(n, "gps"), per_round(other, "gps"))
                    v = H.verdict_at_least(r, s["gps"] / med(other, "gps"), limit)
                    verdicts.append(f">={limit:g}x {what}: {v}")
                    rep.targets.append(
                        (
                            f"serving throughput >= {limit:g}x {LABELS[other.split('/')[0]]}, "
                            f"{loop}",
                            v,
                            f"paired ratio {H.fmt_ratio(r)}; medians {s['gps']:.0f} vs "
                            f"{med(other, 'gps'):.0f} gradients/s",
                        )
                    )
                v99 = verdict_both(s["lag_p99"], s["lag_p99_worst"], lambda v: v <= 2.0)
                vmax = "MET" if s["lag_max"] < 5.0 else "NOT MET"
                verdicts += [f"lag p99 <=2 ms: {v99}", f"lag max <5 ms: {vmax}"]
                rep.targets.append(
                    (
                        f"loop lag p99 <= 2 ms under serving load, {loop}",
                        v99,
                        f"median over rounds {s['lag_p99']:.2f} ms, worst round "
                        f"{s['lag_p99_worst']:.2f} ms",
                    )
                )
                rep.targets.append(
                    (
                        f"loop lag max < 5 ms under serving load, {loop}",
                        vmax,
                        f"worst over rounds {s['lag_max']:.2f} ms, median "
                        f"{s['lag_max_median']:.2f} ms",
                    )
                )
                target = "; ".join(verdicts)
            rows.append(
                [
                    LABELS[lib],
                    loop,
                    H.fmt(s["gps"], ".0f"),
                    H.fmt_ratio(H.paired_ratio(per_round(n, "gps"), per_round(base, "gps")))
                    if base in results
                    else "n/a",
                    H.fmt(s["p50"], ".1f"),
                    H.fmt(s["p99"], ".1f"),
                    H.fmt(s["lag_p99"]),
                    H.fmt(s["lag_max"]),
                    f"{s['requests']:.0f}",
                    target,
                ]
            )
    load_tab = H.table(
        [
            "serving",
            "loop",
            "gradients/s",
            "vs to_thread",
            "request p50 ms",
            "request p99 ms",
            "loop lag p99 ms",
            "loop lag max ms",
            "requests",
            "target",
        ],
        rows,
        align=["l", "l"] + ["r"] * 7 + ["l"],
    )
    load_legend = (
        f"{CLIENTS} clients, closed loop: each sends its next request when the previous one "
        f"answers; a request computes {GRADS_PER_REQUEST} input gradients one after another "
        f"(forward + gradient of `out.sum()` with respect to x) of an MLP "
        f"{'-'.join(map(str, SIZES))}, ReLU, float32, batch {BATCH}, one input per client. "
        "A request's latency runs from the moment its client sends it (its previous answer) "
        "to its last gradient, so it includes waiting for the loop. "
        f"{t['warm']:g} s warm-up, then a {t['window']:g} s window: gradients completed in the "
        "window per second; latency of the requests sent in the window; lag = how much later "
        f"than asked a `asyncio.sleep({TICK})` ticker on the same loop woke. to_thread runs each "
        "gradient (forward + `torch.autograd.grad` under `torch.enable_grad()`) as one call on "
        "the loop's default thread pool (min(32, cores + 4) threads). Medians over "
        f"{rounds} interleaved rounds, each (library, loop) in a fresh process; `loop lag max` "
        "is the worst round's; `vs to_thread` is the median of per-round ratios to PyTorch via "
        "to_thread on the same loop. " + H.THREADS_NOTE
    )

    # -- extras --
    ext = {lib: f"{lib}/extras" for lib in LIBS if f"{lib}/extras" in results}
    rows = []
    ref = ext.get("torch-inline")
    for lib, n in ext.items():
        s = {k: med(n, k) for k in ("alone_p50", "alone_p99", "idle_lag_p99")}
        s["idle_lag_max"] = worst(n, "idle_lag_max")
        summary[n] = s
        target = ""
        if lib == "asyncgrad" and ref:
            r = H.paired_ratio(per_round(n, "alone_p50"), per_round(ref, "alone_p50"))
            v = H.verdict_at_most(r, s["alone_p50"] / med(ref, "alone_p50"), 1.0)
            target = f"<= PyTorch inline: {v}"
            rep.targets.append(
                (
                    "one gradient alone <= PyTorch inline",
                    v,
                    f"paired ratio {H.fmt_ratio(r)}; medians {s['alone_p50']:.1f} vs "
                    f"{med(ref, 'alone_p50'):.1f} µs",
                )
            )
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["alone_p50"], ".1f"),
                H.fmt(s["alone_p99"], ".1f"),
                H.fmt_ratio(H.paired_ratio(per_round(n, "alone_p50"), per_round(ref, "alone_p50")))
                if ref
                else "n/a",
                H.fmt(s["idle_lag_p99"]),
                H.fmt(s["idle_lag_max"]),
                target,
            ]
        )
    alone_tab = H.table(
        [
            "(a) one gradient alone",
            "µs p50",
            "µs p99",
            "p50 vs PyTorch inline",
            "idle loop lag p99 ms",
            "idle loop lag max ms",
            "target",
        ],
        rows,
        align=["l", "r", "r", "r", "r", "r", "l"],
    )

    rows = []
    for lib, n in ext.items():
        s = {k: med(n, k) for k in ("turn_us", "gather_us", "gather_first_done")}
        s["gather_lag_max"] = worst(n, "gather_lag_max")
        r = H.paired_ratio(per_round(n, "gather_us"), per_round(n, "turn_us"))
        s["ratio"] = r
        summary[n].update(s)
        target = ""
        if lib == "asyncgrad":
            v = H.verdict_at_most(r, s["gather_us"] / s["turn_us"], 1.0)
            target = f"gather <= in turn: {v}"
            rep.targets.append(
                (
                    f"{N_GATHER:,} gradients by asyncio.gather cost no more each than in turn",
                    v,
                    f"paired ratio {H.fmt_ratio(r)}; medians {s['gather_us']:.1f} vs "
                    f"{s['turn_us']:.1f} µs per gradient",
                )
            )
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["turn_us"], ".1f"),
                H.fmt(s["gather_us"], ".1f"),
                H.fmt_ratio(r),
                f"{s['gather_first_done'] * 100:.0f}%",
                H.fmt(s["gather_lag_max"], ".1f"),
                target,
            ]
        )
    gather_tab = H.table(
        [
            f"(b) {N_GATHER:,} gradients",
            "in turn µs/grad",
            "gather µs/grad",
            "gather / in turn",
            "first answer at",
            "loop lag max ms during gather",
            "target",
        ],
        rows,
        align=["l", "r", "r", "r", "r", "r", "l"],
    )

    rows = []
    for lib, n in ext.items():
        s = {
            k: med(n, k)
            for k in ("burst_turn_p50", "burst_p50", "burst_turn_first", "burst_first",
                      "burst_turn_total", "burst_total")
        }  # fmt: skip
        r = H.paired_ratio(per_round(n, "burst_p50"), per_round(n, "burst_turn_p50"))
        s["burst_ratio"] = r
        summary[n].update(s)
        target = ""
        if lib == "asyncgrad":
            v = H.verdict_at_most(r, s["burst_p50"] / s["burst_turn_p50"], 1.0)
            target = f"median <= in turn: {v}"
            rep.targets.append(
                (
                    f"a burst of {N_BURST} requests of {GRADS_PER_REQUEST} gradients: median "
                    "latency no worse than in turn",
                    v,
                    f"paired ratio {H.fmt_ratio(r)}; medians {s['burst_p50']:.1f} vs "
                    f"{s['burst_turn_p50']:.1f} ms",
                )
            )
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["burst_turn_p50"], ".1f"),
                H.fmt(s["burst_p50"], ".1f"),
                H.fmt_ratio(r),
                H.fmt(s["burst_turn_first"], ".1f"),
                H.fmt(s["burst_first"], ".1f"),
                H.fmt(s["burst_turn_total"], ".1f"),
                H.fmt(s["burst_total"], ".1f"),
                target,
            ]
        )
    burst_tab = H.table(
        [
            f"(d) {N_BURST} requests of {GRADS_PER_REQUEST} gradients",
            "in turn p50 ms",
            "burst p50 ms",
            "burst p50 / in turn",
            "in turn first done ms",
            "burst first done ms",
            "in turn all done ms",
            "burst all done ms",
            "target",
        ],
        rows,
        align=["l", "r", "r", "r", "r", "r", "r", "r", "l"],
    )

    rows = []
    for lib, n in ext.items():
        s = {
            k: med(n, k)
            for k in (
                "small_unloaded_p50",
                "small_unloaded_p99",
                "small_loaded_p50",
                "small_loaded_p99",
                "small_loaded_n",
                "big_ms",
                "big_alone_ms",
            )
        }
        s["big_lag_max"] = worst(n, "big_lag_max")
        r = H.paired_ratio(per_round(n, "small_loaded_p99"), per_round(n, "small_unloaded_p99"))
        s["ratio"] = r
        summary[n].update(s)
        target = ""
        if lib == "asyncgrad":
            v = H.verdict_at_most(r, s["small_loaded_p99"] / s["small_unloaded_p99"], 2.0)
            target = f"< 2x unloaded: {v}"
            rep.targets.append(
                (
                    f"small-request p99 while a {N_BIG:,}-op backward runs < 2x unloaded",
                    v,
                    f"paired ratio {H.fmt_ratio(r)}; medians {s['small_loaded_p99']:.2f} vs "
                    f"{s['small_unloaded_p99']:.2f} ms",
                )
            )
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["small_unloaded_p50"]),
                H.fmt(s["small_unloaded_p99"]),
                H.fmt(s["small_loaded_p50"]),
                H.fmt(s["small_loaded_p99"]),
                H.fmt_ratio(r),
                H.fmt(s["big_alone_ms"], ".1f"),
                H.fmt(s["big_ms"], ".1f"),
                H.fmt(s["big_lag_max"], ".1f"),
                f"{s['small_loaded_n']:.0f}",
                target,
            ]
        )
    fair_tab = H.table(
        [
            "(c) small requests",
            "unloaded p50 ms",
            "unloaded p99 ms",
            "during large p50 ms",
            "during large p99 ms",
            "p99 ratio",
            "large alone ms",
            "large during ms",
            "loop lag max ms",
            "samples during",
            "target",
        ],
        rows,
        align=["l"] + ["r"] * 9 + ["l"],
    )

    rows = []
    for lib, n in ext.items():
        orders = [o for r in results[n] for o in r["orders"]]
        a_first = sum(o == "AB" for o in orders)
        summary[n].update(orders=orders, fin_a=med(n, "fin_a"), fin_b=med(n, "fin_b"))
        rows.append(
            [
                LABELS[lib],
                " ".join(orders),
                f"{a_first}/{len(orders)}",
                H.fmt(summary[n]["fin_a"], ".1f"),
                H.fmt(summary[n]["fin_b"], ".1f"),
            ]
        )
    order_tab = H.table(
        [
            f"two {N_ORDER:,}-op backwards, A started first",
            "finish order per run",
            "A first",
            "A done ms",
            "B done ms",
        ],
        rows,
        align=["l", "l", "r", "r", "r"],
    )
    extras_legend = (
        "Extras, each library in its own process on the default asyncio loop, "
        f"{rounds} interleaved rounds, medians over rounds. "
        f"(a) one gradient of the same MLP with nothing else running: {int(t['alone'])} timed "
        "calls after 200 warm-up calls; p50 and p99 of the single calls. The idle loop lag "
        "columns are the ticker's lag over 0.3 s with nothing else on the loop in the same "
        "process (worst round for max): the floor set by the machine and the OS. "
        f"(b) {N_GATHER:,} gradient calls (forward + gradient, each its own input) launched at "
        "once with `asyncio.gather`, against the same calls awaited one after another; time "
        "per gradient (median of "
        f"{int(t['gather_reps'])} passes after one warm-up pass of each); the loop-lag column "
        "is the worst ticker lag during a gather (the forwards of all the launched calls run on "
        "the loop before their first await, so part of it is forward, not backward); `first "
        "answer at` is when the first of the gathered calls returned, as a share of the "
        "gather's wall time. "
        f"(c) {SMALL_CLIENTS} clients sending small requests (one gradient each) in a closed "
        f"loop: their latency with nothing else running (0.3 s) vs the requests in flight while "
        f"one {N_BIG:,}-op chain backward (the graph of bench_chain.py, built beforehand, "
        f"followed by a 50 ms pause so the graph's construction is not counted) runs; "
        f"{int(t['big_reps'])} large backwards per process; `p99 ratio` is the median of "
        "per-round ratios; `large alone` is the same backward's wall time with nothing else "
        "running, `large during` its wall time among the small requests. The order table "
        "launches two "
        f"{N_ORDER:,}-op chain backwards as tasks, A then B, with nothing else running, 3 runs "
        "per process; finish times in ms after the launch (medians). "
        f"(d) {N_BURST} requests (each its own input) of {GRADS_PER_REQUEST} gradients one "
        "after another, launched at once with `asyncio.gather`, against the same requests "
        "awaited one after another: the median request's latency from the launch, when the "
        f"first and the last one ended (median of {BURST_RUNS} runs after one warm-up run of "
        "each); `burst p50 / in turn` is the median of per-round ratios. In a burst the first "
        "request's gradients share the loop with the first forward of every other request, "
        "which `asyncio.gather` starts at once: `first done` shows what that costs it."
    )
    print()
    for tab in (load_tab, alone_tab, gather_tab, fair_tab, order_tab, burst_tab):
        print(tab)
        print()

    rep.sections += [
        load_legend,
        load_tab,
        check,
        extras_legend,
        alone_tab,
        gather_tab,
        fair_tab,
        order_tab,
        burst_tab,
    ]
    if skipped:
        rep.sections.append("Skipped: " + ", ".join(skipped) + " (not installed).")
    rep.notes += notes(summary)
    rep.data = {"summary": summary}
    return rep


def notes(summary: dict[str, Any]) -> list[str]:
    out = []
    for loop in LOOPS:
        a = summary.get(f"asyncgrad/{loop}")
        i = summary.get(f"torch-inline/{loop}")
        th = summary.get(f"torch-thread/{loop}")
        if a and i and th:
            out.append(
                f"{loop}: asyncgrad serves {a['gps']:.0f} gradients/s with the loop's lag p99 at "
                f"{a['lag_p99']:.2f} ms; PyTorch inline {i['gps']:.0f}/s but its loop lags up to "
                f"{i['lag_max']:.1f} ms (each request's {GRADS_PER_REQUEST} gradients run without "
                f"a break); PyTorch via to_thread {th['gps']:.0f}/s (a thread hand-off per "
                "gradient, and its pool threads contend for the GIL with the loop)."
            )
    a = summary.get("asyncgrad/extras")
    if a:
        out.append(
            f"Gather of {N_GATHER:,} asyncgrad gradients: {a['gather_us']:.1f} µs each against "
            f"{a['turn_us']:.1f} µs in turn; the first answer comes at "
            f"{a['gather_first_done'] * 100:.0f}% of the gather's wall time and the loop stalls "
            f"up to {a['gather_lag_max']:.1f} ms during it (every launched call runs its forward "
            "and the start of its ag.grad on the loop before its first await)."
        )
        out.append(
            f"While one {N_BIG:,}-op asyncgrad backward runs ({a['big_ms']:.1f} ms; "
            f"{a['big_alone_ms']:.1f} ms with nothing else running), small "
            f"requests' p99 goes from {a['small_unloaded_p99']:.2f} ms to "
            f"{a['small_loaded_p99']:.2f} ms; two {N_ORDER:,}-op backwards started A then B "
            f"finish {' '.join(a['orders'])} (A at {a['fin_a']:.1f} ms, B at {a['fin_b']:.1f} "
            "ms, medians)."
        )
    return out


def main() -> None:
    H.bench_main(
        __doc__,
        ROUNDS,
        run,
        worker_main,
        quick_help="shorter windows, fewer reps, one round (a smoke check)",
    )


if __name__ == "__main__":
    main()
