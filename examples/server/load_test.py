"""Load test of the digits server: a fixed number of /saliency requests at a fixed concurrency;
prints throughput and latency percentiles.

    python examples/server/load_test.py                      # starts a server, tests, stops it
    python examples/server/load_test.py --url http://127.0.0.1:8000   # an already running one
    python examples/server/load_test.py --requests 2000 --concurrency 64 --samples 16
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from sklearn.datasets import load_digits

HERE = Path(__file__).resolve().parent
START_TIMEOUT_S = 60.0


async def run(url: str, requests: int, concurrency: int, samples: int) -> None:
    images = (load_digits().images / 16.0).tolist()
    latencies: list[float] = []
    failures = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for k in range(requests):
        queue.put_nowait(k)
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60.0))
        stats_before = (await client.get("/stats")).json()
        before = stats_before["engine"]
        # A client (and its one keep-alive connection) per simulated user: one client shared by
        # many connections spends its own CPU checking every connection of its pool on every
        # request, and then measures itself more than the server. Each is made, and connects,
        # before the timed run: making an httpx client takes tens of milliseconds of this
        # process's loop (it loads TLS certificates), which would otherwise land in the
        # latencies of the requests already sent.
        users = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=60.0))
            for _ in range(concurrency)
        ]
        for user in users:
            (await user.get("/stats")).raise_for_status()

        async def worker(user: httpx.AsyncClient) -> None:
            nonlocal failures
            while not queue.empty():
                k = queue.get_nowait()
                body = {"image": images[k % len(images)], "samples": samples, "seed": k}
                start = time.perf_counter()
                res = await user.post("/saliency", json=body)
                latencies.append(time.perf_counter() - start)
                failures += res.status_code != 200

        start = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for user in users:
                tg.create_task(worker(user))
        wall = time.perf_counter() - start
        stats_after = (await client.get("/stats")).json()
        after = stats_after["engine"]

    ms = np.percentile(np.asarray(latencies), [50, 90, 99]) * 1e3
    print(f"requests:     {requests} at concurrency {concurrency}, samples {samples}")
    print(f"failures:     {failures}")
    print(f"wall time:    {wall:.2f} s")
    print(f"throughput:   {requests / wall:.1f} req/s")
    print(f"latency:      p50 {ms[0]:.1f} ms, p90 {ms[1]:.1f} ms, p99 {ms[2]:.1f} ms")
    nodes = sum(after["nodes"].values()) - sum(before["nodes"].values())
    print(
        f"engine:       {nodes} nodes, longest loop stall {after['longest_stall_s'] * 1e3:.1f} ms"
    )
    c0, c1 = stats_before.get("coalescer"), stats_after.get("coalescer")
    if c1 is None:
        print("coalescer:    off (one pass per request)")
    elif c0 is None or stats_after["model"]["version"] != stats_before["model"]["version"]:
        print("coalescer:    on (the weights changed during the run: not counted)")
    else:
        served, batches = c1["requests"] - c0["requests"], c1["batches"] - c0["batches"]
        print(f"coalescer:    {served} requests in {batches} passes")


def start_server(weights: Path | None) -> tuple[subprocess.Popen[bytes], str]:
    """uvicorn in a subprocess, on a socket opened here; returns it once it answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    url = "http://{}:{}".format(*sock.getsockname())
    env = dict(os.environ)
    if weights is not None:
        env["ASYNCGRAD_SERVER_WEIGHTS"] = str(weights)
    cmd = [sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(HERE)]
    cmd += ["--fd", str(sock.fileno()), "--no-access-log", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, pass_fds=[sock.fileno()], stdin=subprocess.DEVNULL)
    sock.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    with httpx.Client(base_url=url, timeout=5.0) as client:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}")
            try:
                if client.get("/stats").status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"the server did not answer within {START_TIMEOUT_S} s")
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one)")
    parser.add_argument("--weights", type=Path, help="weights for the server started here")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--samples", type=int, default=1, help="1: plain gradient; >1 SmoothGrad")
    args = parser.parse_args()
    proc = None
    url = args.url
    if url is None:
        proc, url = start_server(args.weights)
    try:
        asyncio.run(run(url, args.requests, args.concurrency, args.samples))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
