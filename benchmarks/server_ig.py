"""Integrated gradients over HTTP: asyncgrad's coalescing attributions against Captum on PyTorch
through ``asyncio.to_thread``, in the same FastAPI app (benchmarks/_smoothgrad_app.py).

Each server runs as its own fresh uvicorn process on 127.0.0.1; a client process runs 200
users at once, each sending its requests one after another (the client of
benchmarks/server_smoothgrad.py, NOTE [One client per user]). A request asks for the
integrated gradients of one 64-value input for class ``seed % 10`` of the MLP 64-1024x3-10
(float32), from a zero baseline in 50 Gauss-Legendre steps:

  - asyncgrad: ``await explain.integrated_gradients(x, target, n_steps=50)`` through
    ``ag.attribution.Explainer(model)`` at its defaults: the steps of the requests waiting at
    once go through shared batched passes (NOTE [Attributions that coalesce]);
  - Captum: ``IntegratedGradients(model).attribute(x, target=t, n_steps=50)`` in
    ``await asyncio.to_thread(...)`` (its 50 steps in one batch per request).

Both servers run as a new user runs them: no thread variables in the environment, PyTorch's own
intra-op threads, asyncgrad's own choices (NOTE [Library defaults] in server_smoothgrad.py).
Reported as server_smoothgrad.py reports: requests per second, latency p50/p99, the server
loop's lag and longest stall, the collector's pauses. No gc.collect() and no gc.freeze().
The first request's attributions are checked across servers.

Usage: python benchmarks/server_ig.py [--rounds R] [--quick]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
import server_smoothgrad as S
from _smoothgrad_app import IG_STEPS, SIZES

LIBS = ["asyncgrad-ig", "captum-ig"]
LABELS = {
    "asyncgrad-ig": "asyncgrad ag.attribution.Explainer, library defaults",
    "captum-ig": "Captum + PyTorch via asyncio.to_thread, library defaults",
}
BASELINE = "captum-ig"
TARGET = 3.0  # requests/s against Captum's, with p99 at most its


def worker_main(lib: str, argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if lib not in LIBS:
        raise SystemExit(f"unknown library {lib!r}")
    port = S.free_port()
    cmd = [sys.executable, str(S.APP), "--lib", lib, "--port", str(port), "--loop",
           S.SERVER_LOOP, "--defaults"]  # fmt: skip
    env = dict(os.environ)
    for var in H.THREAD_ENV:  # library defaults: no thread settings of ours
        env.pop(var, None)
    H.emit({"lib": lib, **S.serve_and_measure(lib, cmd, env, port, a.quick)})


ROUNDS = 2


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    if quick:
        rounds = 1
    cmd = (
        "python benchmarks/server_ig.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    per = S.requests_per_client(quick)
    print(
        f"server_ig: integrated gradients over HTTP, MLP {'-'.join(map(str, SIZES))}, "
        f"{IG_STEPS} steps, {S.CONCURRENCY} concurrent clients x {per} requests, {rounds} "
        "interleaved rounds",
        flush=True,
    )
    libs = H.available_libs(LIBS, LABELS)
    args = ["--quick"] if quick else []
    results = H.interleaved_rounds(Path(__file__), libs, rounds, lambda lib, r: args)
    check = S.check_saliency(
        {lib: results[lib][0] for lib in libs}, libs[-1], LABELS, "integrated gradients"
    )
    print(check)

    def per_round(lib: str, key: str) -> list[float]:
        return [r[key] for r in results[lib]]

    def med(lib: str, key: str) -> float:
        return H.median(per_round(lib, key))

    rep = H.Report(title="Integrated gradients over HTTP (FastAPI on uvicorn)", command=cmd)
    rows, summary = [], {}
    for lib in libs:
        s = {k: med(lib, k) for k in ("rps", "p50", "p99", "lag_p99", "health_p99")}
        s["lag_max"] = max(per_round(lib, "lag_max"))
        s["gc_max"] = max(per_round(lib, "gc_max"))
        s["gc_full"] = med(lib, "gc_full")
        cores = [c for c in per_round(lib, "server_cores") if c is not None]
        s["server_cores"] = H.median(cores) if cores else None
        passes = [c for c in per_round(lib, "rows_per_pass") if c is not None]
        s["rows_per_pass"] = H.median(passes) if passes else None
        summary[lib] = s
        base = BASELINE if BASELINE in results and lib != BASELINE else None
        vs = (
            H.fmt_ratio(H.paired_ratio(per_round(lib, "rps"), per_round(base, "rps")))
            if base
            else "n/a"
        )
        rows.append(
            [
                LABELS[lib], H.fmt(s["rps"], ".1f"), vs, H.fmt(s["p50"], ".0f"),
                H.fmt(s["p99"], ".0f"), H.fmt(s["lag_p99"], ".1f"), H.fmt(s["lag_max"], ".1f"),
                H.fmt(s["health_p99"], ".1f"),
                H.fmt(s["gc_max"], ".1f"), H.fmt(s["gc_full"], ".0f"),
                H.fmt(s["server_cores"]),
                H.fmt(s["rows_per_pass"], ".0f") if s["rows_per_pass"] else f"{IG_STEPS}",
            ]
        )  # fmt: skip
    tab = H.table(
        [
            "server", "req/s", "vs Captum", "p50 ms", "p99 ms", "loop lag p99 ms",
            "loop stall max ms", "/health p99 ms", "GC pause max ms", "full GCs", "server cores",
            "rows a pass",
        ],
        rows,
        align=["l"] + ["r"] * 11,
    )  # fmt: skip
    legend = (
        "Each server is a fresh uvicorn process on 127.0.0.1, the client a separate fresh "
        f"process with one httpx.AsyncClient per user; {S.WARMUP_REQUESTS + 1} warm-up requests, "
        f"then {S.CONCURRENCY} users send {per} request{'s' if per > 1 else ''} each, one after "
        "another, all starting at once. A request: the integrated gradients of one 64-value "
        f"input for class seed % 10, zero baseline, {IG_STEPS} Gauss-Legendre steps. req/s = "
        "requests / wall time; p50/p99 of the client's latencies; the server's 1 ms ticker's "
        "lag p99 and longest stall, a /health probe's p99 beside the load (NOTE [Health beside "
        "the load] in server_smoothgrad.py), the collector's longest pause and full collections, "
        f"over the run. Median over {rounds} interleaved rounds (stall and GC pause: the worst "
        "round). Both servers at library defaults: no thread variables, PyTorch's own "
        "intra-op threads, asyncgrad's own choices. `rows a pass`: the rows of one batched "
        "forward and backward, on average (asyncgrad: read from its coalescer's counters; "
        f"Captum: one request's {IG_STEPS} steps)."
    )
    print()
    print(tab)
    rep.sections += [legend, tab, check]
    a, b = summary.get("asyncgrad-ig"), summary.get(BASELINE)
    if a and b:
        r = H.paired_ratio(per_round("asyncgrad-ig", "rps"), per_round(BASELINE, "rps"))
        v = H.verdict_at_least(r, a["rps"] / b["rps"], TARGET)
        rep.targets.append(
            (
                f"integrated gradients over HTTP req/s >= {TARGET}x Captum via asyncio.to_thread",
                v,
                f"paired ratio {H.fmt_ratio(r)}; medians {a['rps']:.1f} vs {b['rps']:.1f} req/s",
            )
        )
        r = H.paired_ratio(per_round("asyncgrad-ig", "p99"), per_round(BASELINE, "p99"))
        v = H.verdict_at_most(r, a["p99"] / b["p99"], 1.0)
        rep.targets.append(
            (
                "integrated gradients over HTTP p99 <= Captum via asyncio.to_thread",
                v,
                f"paired ratio {H.fmt_ratio(r)}; medians {a['p99']:.0f} vs {b['p99']:.0f} ms",
            )
        )
    rep.data = {"summary": summary}
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="one request per client, one round")


if __name__ == "__main__":
    main()
