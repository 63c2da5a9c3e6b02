"""Per-request parameter gradients: 64 concurrent requests, each wanting the gradient of its
own loss with respect to every parameter of an MLP 784-256-256-10 (float32).

Each request is one sample (784 features and a class) and its cross-entropy loss. Rows:

  - asyncgrad, one pass per request: 64 concurrent ``await ag.grad(loss, params)``;
  - asyncgrad coalesced: 64 concurrent ``await coalescer.parameter_grads(x, y)`` through
    ``ag.serving.Coalescer(per_sample_loss)`` (one batched forward and backward, each
    request's part read back by the layers' per-sample rules);
  - PyTorch, one pass per request: 64 ``torch.autograd.grad`` calls one after another;
  - PyTorch ``torch.func``: ``vmap(grad(loss))`` over the 64 samples in one call (the batched
    per-sample gradients PyTorch offers; not a server of concurrent requests);
  - NumPy by hand: the batch's forward and backward written out, each sample's weight
    gradients as ``einsum`` outer products into new arrays (the floor of one batched pass:
    no engine, no requests).

Beside each burst a ticker task on the same loop wakes every millisecond: the loop's longest
gap is the longest time between two of its wake-ups during a burst (the rows that compute
inline hold the loop for the whole burst).

Timed: the burst of 64, from the first request to the last answer, after warm-up bursts;
medians over bursts and rounds, each library in a fresh process. No gc.collect().
The first request's gradients are checked across libraries.

Usage: python benchmarks/bench_param_grads.py [--rounds R] [--quick]
"""

from __future__ import annotations

import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

SIZES = (784, 256, 256, 10)
REQUESTS = 64
LIBS = ["asyncgrad-alone", "asyncgrad-coalesced", "torch-alone", "torch-vmap", "numpy-floor"]
LABELS = {
    "asyncgrad-alone": "asyncgrad, one pass per request (await ag.grad)",
    "asyncgrad-coalesced": "asyncgrad coalesced (Coalescer.parameter_grads)",
    "torch-alone": "PyTorch, one pass per request (torch.autograd.grad)",
    "torch-vmap": "PyTorch torch.func.vmap(grad) over the 64",
    "numpy-floor": "NumPy by hand, one batched pass (einsum)",
}
BASELINE = "asyncgrad-alone"
TARGET = 10.0  # coalesced requests/s against one pass per request


def data() -> tuple[list[Any], Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    ws = []
    for fan_in, fan_out in pairwise(SIZES):
        bound = 1.0 / np.sqrt(fan_in)
        ws.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        ws.append(rng.uniform(-bound, bound, (fan_out,)).astype(np.float32))
    x = rng.standard_normal((REQUESTS, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], REQUESTS)
    return ws, x, y


def make_burst(lib: str) -> Any:
    """An ``async burst() -> first request's gradients (list of arrays)`` for the library."""
    ws, xs, ys = data()
    if lib == "numpy-floor":
        return _floor_burst(ws, xs, ys)
    if lib.startswith("asyncgrad"):
        import asyncio

        import asyncgrad as ag
        import asyncgrad.nn.functional as F

        class Loss(ag.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layers = ag.nn.ModuleList()
                for i in range(0, len(ws), 2):
                    lin = ag.nn.Linear(ws[i].shape[1], ws[i].shape[0])
                    lin.weight = ag.nn.Parameter(ag.tensor(ws[i]))
                    lin.bias = ag.nn.Parameter(ag.tensor(ws[i + 1]))
                    self.layers.append(lin)

            def forward(self, x: Any, y: Any) -> Any:
                for lin in self.layers[:-1]:
                    x = F.relu(lin(x))
                return F.cross_entropy(self.layers[-1](x), y, reduction="none")

        model = Loss()
        params = list(model.parameters())
        rows = [(ag.tensor(xs[i : i + 1]), ag.tensor(ys[i : i + 1])) for i in range(REQUESTS)]
        if lib == "asyncgrad-alone":

            async def one(x: Any, y: Any) -> Any:
                loss = await ag.run(model, x, y)
                return await ag.grad(loss.sum(), params)
        else:
            c = ag.serving.Coalescer(model)

            async def one(x: Any, y: Any) -> Any:
                g = await c.parameter_grads(x, y)
                return [g[n] for n, _ in model.named_parameters()]

        async def burst() -> Any:
            got = await asyncio.gather(*(one(x, y) for x, y in rows))
            return [g.numpy() for g in got[0]]

        return burst

    import torch
    import torch.nn.functional as TF

    H.pin_torch_threads()
    tp = [torch.from_numpy(w) for w in ws]
    for p in tp:
        p.requires_grad_(True)

    def loss_of(params: Any, x: Any, y: Any) -> Any:
        for i in range(0, len(params) - 2, 2):
            x = TF.relu(TF.linear(x, params[i], params[i + 1]))
        return TF.cross_entropy(TF.linear(x, params[-2], params[-1]), y)

    tx, ty = torch.from_numpy(xs), torch.from_numpy(ys)
    if lib == "torch-alone":

        async def burst() -> Any:
            # Every request's gradients are kept until the burst ends, as a server answering
            # them holds them (as the other rows do).
            got = [
                torch.autograd.grad(loss_of(tp, tx[i : i + 1], ty[i : i + 1]), tp)
                for i in range(REQUESTS)
            ]
            return [t.numpy() for t in got[0]]

        return burst
    from torch.func import grad, vmap

    frozen = tuple(p.detach() for p in tp)
    per_sample = vmap(grad(lambda ps, x, y: loss_of(ps, x[None], y[None])), in_dims=(None, 0, 0))

    async def burst() -> Any:
        g = per_sample(frozen, tx, ty)
        return [t[0].numpy() for t in g]

    return burst


def _floor_burst(ws: list[Any], xs: Any, ys: Any) -> Any:
    """The hand-written floor: one batched forward and backward in NumPy, each sample's
    gradients read off as outer products (``einsum``) into new arrays."""
    import numpy as np

    w1, b1, w2, b2, w3, b3 = ws
    n = len(ys)
    rows = np.arange(n)

    async def burst() -> Any:
        a1 = xs @ w1.T + b1
        h1 = np.maximum(a1, 0)
        a2 = h1 @ w2.T + b2
        h2 = np.maximum(a2, 0)
        z = h2 @ w3.T + b3
        e = np.exp(z - z.max(1, keepdims=True))
        dz = e / e.sum(1, keepdims=True)  # each sample's own loss: no 1/n
        dz[rows, ys] -= 1
        d2 = (dz @ w3) * (a2 > 0)
        d1 = (d2 @ w2) * (a1 > 0)
        per = [
            np.einsum("ri,rj->rij", d1, xs), d1,
            np.einsum("ri,rj->rij", d2, h1), d2,
            np.einsum("ri,rj->rij", dz, h2), dz,
        ]  # fmt: skip
        return [g[0] for g in per]

    return burst


async def measure(lib: str, bursts: int, warm: int) -> dict[str, Any]:
    import asyncio

    burst = make_burst(lib)
    times, gaps = [], []
    first = None
    ticks = [time.perf_counter()]
    ticked = asyncio.Event()

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.001)
            ticks.append(time.perf_counter())
            ticked.set()

    task = asyncio.create_task(ticker())
    try:
        for i in range(warm + bursts):
            t0 = time.perf_counter()
            got = await burst()
            t1 = time.perf_counter()
            while ticks[-1] <= t1:  # the first wake-up after the burst ends its last gap
                ticked.clear()
                await ticked.wait()
            if first is None:  # every 997th value of each parameter's gradient
                first = [g.ravel()[::997].tolist() for g in got]
            if i >= warm:
                times.append(t1 - t0)
                gaps.append(max(b - a for a, b in pairwise(ticks) if b > t0 and a < t1))
            del ticks[:-1]
    finally:
        task.cancel()
    return {"times": times, "gaps": gaps, "first": first}


def worker_main(lib: str, argv: list[str]) -> None:
    import argparse
    import asyncio

    ap = argparse.ArgumentParser()
    ap.add_argument("--bursts", type=int, default=10)
    a = ap.parse_args(argv)
    H.emit({"lib": lib, **asyncio.run(measure(lib, a.bursts, 2))})


ROUNDS = 3


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    import numpy as np

    bursts = 3 if quick else 10
    cmd = (
        "python benchmarks/bench_param_grads.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    print(
        f"bench_param_grads: {REQUESTS} concurrent per-request parameter gradients, MLP "
        f"{'-'.join(map(str, SIZES))}, {rounds} interleaved rounds",
        flush=True,
    )
    libs = H.available_libs(LIBS, LABELS)
    results = H.interleaved_rounds(
        Path(__file__), libs, rounds, lambda lib, r: ["--bursts", str(bursts)]
    )
    ref = results[libs[0]][0]["first"]
    for lib in libs:
        for g, r in zip(results[lib][0]["first"], ref, strict=True):
            if not np.allclose(g, r, rtol=1e-4, atol=1e-6):
                raise SystemExit(f"bench_param_grads: {LABELS[lib]} differs from {LABELS[libs[0]]}")
    check = (
        "Gradient check passed: the first request's gradients (every 997th value of each "
        f"parameter's) agree across every row to rtol 1e-4 (float32), against {LABELS[libs[0]]}."
    )
    print(check)
    summary: dict[str, Any] = {}
    rows = []
    for lib in libs:
        per_round = [H.median(r["times"]) for r in results[lib]]
        t = H.median([t for r in results[lib] for t in r["times"]])
        gap = H.median([g for r in results[lib] for g in r["gaps"]])
        worst = max(g for r in results[lib] for g in r["gaps"])
        summary[lib] = {
            "ms": t * 1e3, "rps": REQUESTS / t, "per_round": per_round,
            "gap_ms": gap * 1e3, "worst_gap_ms": worst * 1e3,
        }  # fmt: skip
    base = summary.get(BASELINE)
    for lib in libs:
        s = summary[lib]
        vs = f"{s['rps'] / base['rps']:.2f}x" if base else "n/a"
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["ms"], ".1f"),
                H.fmt(s["rps"], ".0f"),
                vs,
                H.fmt(s["gap_ms"], ".1f"),
                H.fmt(s["worst_gap_ms"], ".1f"),
            ]
        )
    headers = [
        "per-request parameter gradients",
        "burst of 64 ms",
        "requests/s",
        "vs one pass each",
        "loop's longest gap ms (median)",
        "(worst)",
    ]
    legend = (
        f"{REQUESTS} requests, one sample each, their cross-entropy loss's gradient with respect "
        f"to all {sum(a * b + b for a, b in pairwise(SIZES)):,} parameters "
        f"of an MLP {'-'.join(map(str, SIZES))} (float32). Burst: from the first request to the "
        f"last answer; {bursts} bursts per process after 2 warm-up bursts, {rounds} interleaved "
        "rounds, fresh process each; medians over all bursts. No gc.collect(). " + H.THREADS_NOTE
    )
    rep = H.Report(title="Per-request parameter gradients", command=cmd)
    rep.sections += [legend, H.table(headers, rows), check]
    floor, co = summary.get("numpy-floor"), summary.get("asyncgrad-coalesced")
    if floor and base and co:
        mb = REQUESTS * sum(a * b + b for a, b in pairwise(SIZES)) * 4 / 1e6
        rep.sections.append(
            f"What limits it (from the numbers above): every burst hands out {mb:.0f} MB of new "
            f"gradients. The hand-written floor, one batched pass that computes nothing else, "
            f"takes {floor['ms']:.1f} ms a burst ({mb / floor['ms']:.1f} GB/s of gradients), "
            f"{floor['rps'] / base['rps']:.2f}x the requests/s of one pass per request; the "
            f"coalescer's burst is {co['ms'] / floor['ms']:.2f}x the floor's."
        )
    if co and base:
        r = H.paired_ratio([1 / t for t in co["per_round"]], [1 / t for t in base["per_round"]])
        ratio = co["rps"] / base["rps"]
        rep.targets.append(
            (
                f"per-request parameter gradients coalesced >= {TARGET}x one pass per request",
                "MET" if ratio >= TARGET else "NOT MET",
                f"paired ratio {H.fmt_ratio(r)}; medians {co['rps']:.0f} vs {base['rps']:.0f} "
                "requests/s",
            )
        )
    rep.data = {"summary": summary}
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="fewer bursts per worker")


if __name__ == "__main__":
    main()
