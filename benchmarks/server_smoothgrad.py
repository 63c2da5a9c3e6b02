"""A real server under load: SmoothGrad saliency over HTTP (FastAPI on uvicorn).

Each library's server (benchmarks/_smoothgrad_app.py) runs as its own fresh process on
127.0.0.1 and a free port; a client process (this script's worker) runs CONCURRENCY users at
once, each sending REQUESTS_PER_CLIENT requests one after another.
A request asks for the SmoothGrad saliency of a 64-value input: the input gradient of the
predicted class's score averaged over 32 noisy copies, batched in one forward and one
backward of an MLP 64-1024-1024-1024-10 (float32). Servers:

  - asyncgrad: ``await ag.run(model, x)`` for the forward, then ``await ag.grad(...)``;
  - asyncgrad coalesced: ``await coalescer.vjp(x, grad_output=predicted)``: the noisy copies of
    the requests waiting at once go through one forward and one backward (up to 256 rows, one
    batch in flight per compute thread; NOTE [Coalesced gradients]);
  - PyTorch inline: forward and ``torch.autograd.grad`` in the async handler (blocks the loop);
  - PyTorch via ``asyncio.to_thread``: the whole computation on the loop's default thread pool.

Each server runs a 1 ms ticker on its loop; after the timed run the client reads its lag
statistics from GET /lag (reset after the warm-up). Reported: requests per second, latency
p50/p99 seen by the client, the server loop's lag p99 and longest stall (with the number of
requests the server began during it, and for asyncgrad the engine's own longest stall), and
the CPU the server process used (cores busy on average). No gc.collect() and no gc.freeze() in
client or server, except in the row that says so.

NOTE [Library defaults]
Every other row runs its server with one BLAS thread per call and PyTorch pinned to one
thread (the harness's settings, for a like-for-like comparison). The "library defaults" rows
run theirs as a new user does: no thread variables in the environment, PyTorch's own
intra-op threads, asyncgrad's own choices (it limits BLAS to one thread per call when its
compute threads start: NOTE [BLAS threads of the compute threads] in asyncgrad/backend/blas.py).

NOTE [One client per user]
Every user has an httpx.AsyncClient of its own, with one keep-alive connection opened before
the timed run, as separate users would. One shared client with a pool of CONCURRENCY
connections cannot keep up: httpcore's pool checks every connection on every request, so at
200 connections the client process spent its whole core in that bookkeeping (cProfile: 2.2
million ``is_idle`` calls for 400 requests), capped every server's throughput near 80 req/s
and set their latencies by its own queueing.

Usage: python benchmarks/server_smoothgrad.py [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
from _smoothgrad_app import SAMPLES, SIZES

APP = H.HERE / "_smoothgrad_app.py"
CONCURRENCY = 200
WARMUP_REQUESTS = 24
# NOTE [Health beside the load]
# During the timed run a separate client (its own keep-alive connection) sends GET /health,
# which the server answers at once, waits HEALTH_EVERY_S after each answer, and records how
# long each took: what a load balancer's or an orchestrator's probe sees while the server is
# busy. Its p50, p99 and worst are reported beside the loop's own lag.
HEALTH_EVERY_S = 0.02
LIBS = [
    "asyncgrad", "asyncgrad-coalesced", "asyncgrad-frozen", "asyncgrad-spare", "torch-inline",
    "torch-thread", "asyncgrad-defaults", "asyncgrad-coalesced-defaults", "torch-thread-defaults",
]  # fmt: skip
# Rows with the libraries' own thread settings, as a new user runs them (See NOTE [Library
# defaults]).
DEFAULTS = "-defaults"
# One core left to the loop (and the client): See NOTE [A core for the loop].
SPARE_THREADS = max(1, (os.cpu_count() or 1) - 1)
LABELS = {
    "asyncgrad": "asyncgrad await ag.run + await ag.grad",
    "asyncgrad-coalesced": "asyncgrad, requests coalesced (ag.serving.Coalescer)",
    "asyncgrad-frozen": "asyncgrad, as above, gc.freeze() after start-up",
    "asyncgrad-spare": f"asyncgrad, as above, compute_threads={SPARE_THREADS} (cores - 1)",
    "torch-inline": "PyTorch inline (blocks the loop)",
    "torch-thread": "PyTorch via asyncio.to_thread",
    "asyncgrad-defaults": "asyncgrad await ag.run + await ag.grad, library defaults",
    "asyncgrad-coalesced-defaults": "asyncgrad coalesced, library defaults",
    "torch-thread-defaults": "PyTorch via asyncio.to_thread, library defaults",
}
BASELINE = "torch-thread"
# Rows judged against their baseline: the throughput ratio they must reach (and p50, p99 at or
# below the baseline's, the loop's longest stall under 5 ms).
TARGETS = {"asyncgrad": 1.3, "asyncgrad-coalesced-defaults": 1.5}
# uvicorn's default: uvloop when it is installed.
SERVER_LOOP = "auto"


def requests_per_client(quick: bool) -> int:
    return 1 if quick else 2


# ---------------------------------------------------------------------------------------------
# Worker: starts the server, is its client
# ---------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_body(i: int) -> dict[str, Any]:
    import numpy as np

    x = np.random.default_rng(1000 + i).standard_normal(SIZES[0]).astype(np.float32)
    return {"x": x.tolist(), "seed": i}


async def client(lib: str, port: int, per_client: int, server_pid: int) -> dict[str, Any]:
    import asyncio
    import contextlib

    import httpx
    import numpy as np

    base = f"http://127.0.0.1:{port}"
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=300.0))
        deadline = time.monotonic() + 120
        while True:
            try:
                (await http.get("/lag")).raise_for_status()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        first = await http.post("/saliency", json=request_body(0))
        first.raise_for_status()
        for k in range(0, WARMUP_REQUESTS, 4):
            rs = await asyncio.gather(
                *(http.post("/saliency", json=request_body(k + j)) for j in range(4))
            )
            for r in rs:
                r.raise_for_status()
        # One client, with its one keep-alive connection, per user (See NOTE [One client per
        # user]); each connects before the timed run.
        users = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=300.0))
            for _ in range(CONCURRENCY)
        ]
        for k in range(0, CONCURRENCY, 20):
            rs = await asyncio.gather(*(u.get("/lag") for u in users[k : k + 20]))
            for r in rs:
                r.raise_for_status()
        bodies = [request_body(i) for i in range(CONCURRENCY)]
        lat: list[float] = []
        clock = time.perf_counter

        async def one_client(user: httpx.AsyncClient, body: dict[str, Any]) -> None:
            for _ in range(per_client):
                t = clock()
                r = await user.post("/saliency", json=body)
                r.raise_for_status()
                lat.append((clock() - t) * 1e3)

        # A health probe beside the load, on a connection of its own (See NOTE [Health beside
        # the load]).
        probe = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=300.0))
        (await probe.get("/health")).raise_for_status()
        health: list[float] = []
        done = asyncio.Event()

        async def probing() -> None:
            while not done.is_set():
                t = clock()
                (await probe.get("/health")).raise_for_status()
                health.append((clock() - t) * 1e3)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), HEALTH_EVERY_S)

        (await http.post("/lag/reset")).raise_for_status()
        cpu0, cc0 = cpu_seconds(server_pid), time.process_time()
        t0 = clock()
        prober = asyncio.create_task(probing())
        await asyncio.gather(*(one_client(u, b) for u, b in zip(users, bodies, strict=True)))
        wall = clock() - t0
        done.set()
        await prober
        cpu1, cc1 = cpu_seconds(server_pid), time.process_time()
        lag = (await http.get("/lag")).json()
    n = len(lat)
    return {
        "rps": n / wall,
        "p50": float(np.percentile(lat, 50)),
        "p99": float(np.percentile(lat, 99)),
        "requests": n,
        "wall_s": wall,
        "lag_p99": lag.get("p99_ms"),
        "lag_max": lag.get("max_ms"),
        "ticks": lag.get("ticks"),
        "gc_max": lag.get("gc_max_ms"),
        "gc_full": lag.get("gc_full"),
        "begun_at_max": lag.get("begun_at_max"),
        "engine_stall": lag.get("engine_stall_ms"),
        "rows_per_pass": lag.get("rows_per_pass"),
        "server_loop": lag.get("loop"),
        "server_cores": None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / wall,
        "client_cores": (cc1 - cc0) / wall,
        "health_p50": float(np.percentile(health, 50)),
        "health_p99": float(np.percentile(health, 99)),
        "health_max": max(health),
        "health_probes": len(health),
        "saliency": first.json()["saliency"],
    }


def worker_main(lib: str, argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if lib not in LIBS:
        raise SystemExit(f"unknown library {lib!r}")
    port = free_port()
    defaults = lib.endswith(DEFAULTS)
    app_lib = lib.removesuffix(DEFAULTS).removesuffix("-frozen").removesuffix("-spare")
    cmd = [sys.executable, str(APP), "--lib", app_lib, "--port", str(port), "--loop", SERVER_LOOP]
    env = dict(os.environ)
    if defaults:
        cmd.append("--defaults")
        for var in H.THREAD_ENV:  # the server starts with no thread settings of ours
            env.pop(var, None)
    if lib.endswith("-frozen"):
        cmd.append("--gc-freeze")
    if lib.endswith("-spare"):
        cmd += ["--compute-threads", str(SPARE_THREADS)]
    H.emit({"lib": lib, **serve_and_measure(lib, cmd, env, port, a.quick)})


def serve_and_measure(
    lib: str, cmd: list[str], env: dict[str, str], port: int, quick: bool
) -> dict[str, Any]:
    """Start the server ``cmd`` (listening on ``port``), run the client against it, stop it;
    the client's measurements (the server's stderr is shown when the run fails)."""
    import asyncio

    with tempfile.TemporaryFile() as err:
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            res = asyncio.run(client(lib, port, requests_per_client(quick), server.pid))
        except BaseException:
            server.terminate()
            server.wait(10)
            err.seek(0)
            sys.stderr.write(err.read().decode(errors="replace")[-3000:])
            raise
        server.terminate()
        server.wait(30)
    return res


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------
def check_saliency(
    first_round: dict[str, dict[str, Any]],
    ref_lib: str | None = None,
    labels: dict[str, str] | None = None,
    what: str = "saliency map",
) -> str:
    """Every server's answer to the first request (its ``saliency`` field) against
    ``ref_lib``'s (default: PyTorch inline where it ran); exits naming the first that differs,
    else the line the report prints."""
    import numpy as np

    labels = LABELS if labels is None else labels
    if ref_lib is None:
        ref_lib = "torch-inline" if "torch-inline" in first_round else next(iter(first_round))
    ref = np.asarray(first_round[ref_lib]["saliency"])
    scale = float(np.max(np.abs(ref))) or 1.0
    worst = 0.0
    for lib, r in first_round.items():
        g = np.asarray(r["saliency"])
        if g.shape != ref.shape or not np.allclose(g, ref, rtol=1e-3, atol=1e-4 * scale):
            raise SystemExit(f"the {what} from {lib} differs from {ref_lib}'s")
        worst = max(worst, float(np.max(np.abs(g - ref))) / scale)
    return (
        f"Check passed: the first request's {what} from every server matches "
        f"{labels[ref_lib]}'s (max difference {worst:.1e} relative to its largest magnitude)."
    )


ROUNDS = 2


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    if quick:
        rounds = 1  # a smoke check: every worker once
    cmd = (
        "python benchmarks/server_smoothgrad.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    per = requests_per_client(quick)
    print(
        f"server_smoothgrad: SmoothGrad over HTTP, MLP {'-'.join(map(str, SIZES))}, "
        f"{SAMPLES} samples per request, {CONCURRENCY} concurrent clients x {per} requests, "
        f"{rounds} interleaved rounds",
        flush=True,
    )
    libs = H.available_libs(LIBS, LABELS)
    skipped = [LABELS[lib] + ": " + str(H.missing_reason(lib)) for lib in LIBS if lib not in libs]
    args = ["--quick"] if quick else []
    results = H.interleaved_rounds(Path(__file__), libs, rounds, lambda lib, r: args)
    check = check_saliency({lib: results[lib][0] for lib in libs})
    print(check)

    def per_round(lib: str, key: str) -> list[float]:
        return [r[key] for r in results[lib]]

    def med(lib: str, key: str) -> float:
        return H.median(per_round(lib, key))

    rep = H.Report(title="SmoothGrad server over HTTP (FastAPI on uvicorn)", command=cmd)
    summary: dict[str, Any] = {}

    def base_of(lib: str) -> str | None:
        """The row a row is compared with: PyTorch via to_thread run the same way."""
        b = BASELINE + DEFAULTS if lib.endswith(DEFAULTS) else BASELINE
        return b if b in results else None

    rows = []
    for lib in libs:
        s = {
            k: med(lib, k)
            for k in ("rps", "p50", "p99", "lag_p99", "client_cores", "health_p50", "health_p99")
        }
        s["health_max"] = max(per_round(lib, "health_max"))
        s["lag_max"] = max(per_round(lib, "lag_max"))
        s["gc_max"] = max(per_round(lib, "gc_max"))
        s["gc_full"] = med(lib, "gc_full")
        # The worst round's longest stall, and how many requests began in it.
        worst = max(results[lib], key=lambda r: r["lag_max"])
        s["begun_at_max"] = worst["begun_at_max"]
        stalls = [r["engine_stall"] for r in results[lib] if r.get("engine_stall") is not None]
        s["engine_stall"] = max(stalls) if stalls else None
        cores = [c for c in per_round(lib, "server_cores") if c is not None]
        s["server_cores"] = H.median(cores) if cores else None
        s["loop"] = results[lib][0]["server_loop"]
        summary[lib] = s
        target = ""
        lib_base = base_of(lib)
        if lib in TARGETS and lib_base:
            need = TARGETS[lib]
            who = f"{LABELS[lib]} vs {LABELS[lib_base]}"
            verdicts = []
            r = H.paired_ratio(per_round(lib, "rps"), per_round(lib_base, "rps"))
            v = H.verdict_at_least(r, s["rps"] / med(lib_base, "rps"), need)
            verdicts.append(f"req/s >={need}x: {v}")
            rep.targets.append(
                (
                    f"SmoothGrad server req/s >= {need}x, {who}",
                    v,
                    f"paired ratio {H.fmt_ratio(r)}; medians {s['rps']:.1f} vs "
                    f"{med(lib_base, 'rps'):.1f} req/s",
                )
            )
            for key in ("p50", "p99"):
                r = H.paired_ratio(per_round(lib, key), per_round(lib_base, key))
                v = H.verdict_at_most(r, s[key] / med(lib_base, key), 1.0)
                verdicts.append(f"{key} <=: {v}")
                rep.targets.append(
                    (
                        f"SmoothGrad server latency {key} <=, {who}",
                        v,
                        f"paired ratio {H.fmt_ratio(r)}; medians {s[key]:.0f} vs "
                        f"{med(lib_base, key):.0f} ms",
                    )
                )
            v = "MET" if s["health_p99"] < 5.0 else "NOT MET"
            verdicts.append(f"/health p99 <5 ms: {v}")
            rep.targets.append(
                (
                    f"SmoothGrad server /health p99 < 5 ms beside the load, {LABELS[lib]}",
                    v,
                    f"median over rounds {s['health_p99']:.1f} ms, worst probe "
                    f"{s['health_max']:.1f} ms",
                )
            )
            v = "MET" if s["lag_max"] < 5.0 else "NOT MET"
            verdicts.append(f"stall <5 ms: {v}")
            rep.targets.append(
                (
                    f"SmoothGrad server loop stall max < 5 ms, {LABELS[lib]}",
                    v,
                    f"worst over rounds {s['lag_max']:.1f} ms, median {med(lib, 'lag_max'):.1f} ms",
                )
            )
            target = "; ".join(verdicts)
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["rps"], ".1f"),
                H.fmt_ratio(H.paired_ratio(per_round(lib, "rps"), per_round(lib_base, "rps")))
                if lib_base
                else "n/a",
                H.fmt(s["p50"], ".0f"),
                H.fmt(s["p99"], ".0f"),
                H.fmt(s["lag_p99"], ".1f"),
                H.fmt(s["lag_max"], ".1f"),
                f"{s['health_p50']:.1f} / {s['health_p99']:.1f} / {s['health_max']:.1f}",
                H.fmt(s["begun_at_max"], ".0f"),
                H.fmt(s["engine_stall"], ".1f"),
                H.fmt(s["gc_max"], ".1f"),
                H.fmt(s["gc_full"], ".0f"),
                H.fmt(s["server_cores"]),
                H.fmt(s["client_cores"]),
                target,
            ]
        )
    tab = H.table(
        [
            "server",
            "req/s",
            "vs to_thread",
            "p50 ms",
            "p99 ms",
            "loop lag p99 ms",
            "loop stall max ms",
            "/health p50 / p99 / max ms",
            "requests begun in it",
            "engine's stall max ms",
            "GC pause max ms",
            "full GCs",
            "server cores",
            "client cores",
            "target",
        ],
        rows,
        align=["l"] + ["r"] * 13 + ["l"],
    )
    loops = sorted({s["loop"] for s in summary.values()})
    legend = (
        f"Each server is a fresh uvicorn process (loop `{SERVER_LOOP}`: "
        f"{', '.join(loops)} in this run; httptools or h11 as uvicorn picks) on 127.0.0.1; the "
        "client is a separate fresh process on the same machine, with one httpx.AsyncClient "
        "(one keep-alive connection, opened before the timed run) per user. "
        f"{WARMUP_REQUESTS + 1} warm-up requests, then {CONCURRENCY} users send {per} "
        f"request{'s' if per > 1 else ''} each, one after another, all starting at once; "
        "req/s = requests / wall time of the run; p50/p99 of the latencies the client saw. "
        "The server's 1 ms ticker's lag p99 and max (longest stall) over the run, read from "
        "GET /lag; `/health`: a probe on a connection of its own beside the load, one GET "
        f"/health every {HEALTH_EVERY_S * 1e3:.0f} ms after the last answer, its latency p50, p99 "
        "(medians over rounds) and worst (NOTE [Health beside the load]); `requests begun in "
        "it`: how many requests entered their handler during "
        "the worst round's longest stall (the users' first requests arrive together, and the "
        "loop runs each handler up to its first await in one go); `engine's stall max`: the "
        "longest the engine itself held the loop (`ag.autograd.engine.stats()`, worst "
        "round). With them, the cyclic garbage collector's longest pause and its full "
        "collections over the same time (`GC pause max`: the worst round; `full GCs`: the "
        "median). The `gc.freeze()` row is the same asyncgrad server calling `gc.collect(); "
        "gc.freeze()` once when start-up ends, as the server example does; every other "
        "server does neither. `server cores` / `client cores`: CPU seconds each process used "
        f"during the run / wall time. Median over {rounds} interleaved rounds (stall max: the "
        "worst round). The to_thread server uses the loop's default pool (min(32, cores + 4) "
        "threads); asyncgrad's compute threads are left at their default (one per core). "
        "`vs to_thread`: against PyTorch via to_thread run the same way (the library-defaults "
        "rows against PyTorch's library-defaults row). The coalesced rows serve through "
        "`ag.serving.Coalescer(model, max_batch=256)` (one batch in flight per compute thread; "
        "each batch's forward on the loop or off it by its measured time, the default). "
        + H.THREADS_NOTE
        + " Except the `library defaults` rows: their servers start with no thread variables "
        "and PyTorch's own intra-op threads, as a new user runs them (asyncgrad then limits "
        "BLAS to one thread per call itself when its compute threads start)."
    )
    print()
    print(tab)
    print()
    rep.sections += [legend, tab, check]
    if skipped:
        rep.sections.append("Skipped: " + "; ".join(skipped))
    a, th, i = (summary.get(k) for k in ("asyncgrad", "torch-thread", "torch-inline"))
    if a and th and i:
        rep.notes.append(
            f"asyncgrad {a['rps']:.1f} req/s with server cores {H.fmt(a['server_cores'])}, "
            f"PyTorch via to_thread {th['rps']:.1f} req/s with {H.fmt(th['server_cores'])}, "
            f"PyTorch inline {i['rps']:.1f} req/s with {H.fmt(i['server_cores'])} (the loop "
            f"stalls up to {i['lag_max']:.0f} ms there, one request's compute at a time). "
            f"The client process uses about {a['client_cores']:.2f} of the 2 cores itself."
        )
    rep.data = {"summary": summary}
    return rep


def main() -> None:
    H.bench_main(
        __doc__,
        ROUNDS,
        run,
        worker_main,
        quick_help="one request per client, one round (a smoke check)",
    )


if __name__ == "__main__":
    main()
