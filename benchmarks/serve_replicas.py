"""One gradient service, served by uvicorn and by Ray Serve replicas (``agd.serve.deployment``).

The handler: the input gradient of an MLP 32-64-64-1 (float32) for a request of 8 rows, the
same code in each way. Ways, each in a fresh process that also runs the clients (aiohttp, one
event loop, closed loop: each client sends its next request when the last is answered; httpx
was the bottleneck at 32 clients: an echo app under uvicorn answered it 351 requests/s against
aiohttp's 5,002):

  - uvicorn: one process, a Starlette app (the peer: what a single server gets);
  - Ray Serve, 1 replica; Ray Serve, 2 replicas (``num_cpus=1`` each), through Serve's HTTP
    proxy on 127.0.0.1.

At 1 client and at 32 concurrent clients: requests per second and latency percentiles over a
measured window after a warm-up. Every answer is checked against the gradient computed in the
client's process. On one 2-core machine the replicas share the cores with the proxy and the
clients: replicas pay off across hosts; this shows what the extra hop costs.

Usage: python benchmarks/serve_replicas.py [--rounds R] [--quick]
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

WAYS = ["uvicorn", "serve-1", "serve-2"]
LABELS = {
    "uvicorn": "uvicorn, 1 process",
    "serve-1": "Ray Serve, 1 replica",
    "serve-2": "Ray Serve, 2 replicas",
}
CLIENTS = [1, 32]
ROWS = 8


def make_model() -> Any:
    import asyncgrad as ag

    ag.manual_seed(0)
    nn = ag.nn
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 1))  # fmt: skip


class Saliency:
    """The service (a Serve deployment, or called by the Starlette route)."""

    def __init__(self) -> None:
        self.model = make_model()

    async def grad(self, rows: list[list[float]]) -> list[list[float]]:
        import asyncgrad as ag

        x = ag.tensor(rows, requires_grad=True)
        (g,) = await ag.grad(self.model(x).sum(), [x])
        return g.tolist()

    async def __call__(self, request: Any) -> dict[str, Any]:
        body = await request.json()
        return {"grad": await self.grad(body["x"])}


def starlette_app() -> Any:
    """The uvicorn way: ``uvicorn serve_replicas:starlette_app --factory``."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    service = Saliency()

    async def saliency(request: Any) -> JSONResponse:
        return JSONResponse(await service(request))

    return Starlette(routes=[Route("/saliency", saliency, methods=["POST"])])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _load(url: str, clients: int, seconds: float) -> dict[str, float]:
    import aiohttp

    import asyncgrad as ag

    g = ag.Generator().manual_seed(3)
    bodies = [ag.randn(ROWS, 32, generator=g).tolist() for _ in range(16)]
    want = []
    model = make_model()
    for b in bodies:
        x = ag.tensor(b, requires_grad=True)
        model(x).sum().backward()
        want.append(x.grad)
    latencies: list[float] = []
    stop = 0.0

    async def client(c: aiohttp.ClientSession, k: int, record: bool) -> None:
        i = k
        while time.perf_counter() < stop:
            t = time.perf_counter()
            async with c.post(url, json={"x": bodies[i % len(bodies)]}) as r:
                r.raise_for_status()
                answer = await r.json()
            if record:
                latencies.append(time.perf_counter() - t)
            got = ag.tensor(answer["grad"])
            if not ag.allclose(got, want[i % len(bodies)], rtol=1e-4, atol=1e-6):
                raise SystemExit(f"{url}: a gradient differs from the local one")
            i += clients

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=clients), timeout=timeout
    ) as c:
        stop = time.perf_counter() + min(2.0, seconds / 2)  # warm-up
        await asyncio.gather(*[client(c, k, False) for k in range(clients)])
        stop = time.perf_counter() + seconds
        t0 = time.perf_counter()
        await asyncio.gather(*[client(c, k, True) for k in range(clients)])
        elapsed = time.perf_counter() - t0
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1e3

    return {"rps": len(latencies) / elapsed, "p50_ms": pct(50), "p99_ms": pct(99)}


def _measure(url: str, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in CLIENTS:
        for k, v in asyncio.run(_load(url, n, seconds)).items():
            out[f"{k}@{n}"] = v
    return out


def _uvicorn(seconds: float) -> dict[str, Any]:
    import httpx

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "serve_replicas:starlette_app", "--factory",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=str(H.HERE),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("uvicorn did not start") from None
                time.sleep(0.1)
        return _measure(f"http://127.0.0.1:{port}/saliency", seconds)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _serve(replicas: int, seconds: float) -> dict[str, Any]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray import serve

    import asyncgrad.distributed as agd

    agd.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = agd.serve.deployment(
            num_replicas=replicas, ray_actor_options={"runtime_env": {"env_vars": H.THREAD_ENV}}
        )(Saliency)
        serve.run(app.bind(), route_prefix="/saliency")
        return _measure(f"http://127.0.0.1:{port}/saliency", seconds)
    finally:
        serve.shutdown()
        ray.shutdown()


def worker_main(name: str, argv: list[str]) -> None:
    seconds = 2.0 if "--quick" in argv else 6.0
    if name == "uvicorn":
        res = _uvicorn(seconds)
    elif name in ("serve-1", "serve-2"):
        res = _serve(int(name[-1]), seconds)
    else:
        raise SystemExit(f"unknown worker {name!r}")
    H.emit({"name": name, **res})


ROUNDS = 3


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    import importlib.util

    cmd = "python benchmarks/serve_replicas.py" + (" --quick" if quick else "")
    print(f"serve_replicas: clients {CLIENTS}, {rounds} rounds")
    ways = list(WAYS)
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.serve") is None:
        ways = ["uvicorn"]
        print("serve_replicas: Ray Serve is not installed, its rows are left out", file=sys.stderr)
    results = H.interleaved_rounds(
        Path(__file__), ways, rounds, lambda n, r: ["--quick"] * quick, timeout=600
    )
    rep = H.Report(
        title="A gradient service on Ray Serve replicas (serve_replicas.py)", command=cmd
    )
    head = ["way", "clients", "requests/s", "vs uvicorn", "p50 ms", "p99 ms"]
    rows = []
    for n in CLIENTS:
        for w in ways:
            rs = results[w]
            rps = H.median([r[f"rps@{n}"] for r in rs])
            vs = ""
            if w != "uvicorn":
                base = [r[f"rps@{n}"] for r in results["uvicorn"]]
                vs = H.fmt_ratio(H.paired_ratio([r[f"rps@{n}"] for r in rs], base))
            rows.append([LABELS[w], str(n), f"{rps:.0f}", vs,
                         f"{H.median([r[f'p50_ms@{n}'] for r in rs]):.1f}",
                         f"{H.median([r[f'p99_ms@{n}'] for r in rs]):.1f}"])  # fmt: skip
    rep.sections.append(H.table(head, rows))
    rep.sections.append(
        '"vs uvicorn": requests per second over uvicorn\'s, above 1.0 is more. The replicas, '
        "Serve's proxy and the clients share this machine's cores. " + H.THREADS_NOTE
    )
    print(rep.text(), flush=True)
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main)


if __name__ == "__main__":
    main()
