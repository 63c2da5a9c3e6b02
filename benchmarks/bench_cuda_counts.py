"""What a GPU would pay, counted on the simulated CUDA device: asyncgrad beside the same CuPy
calls written by hand (bench_cuda.py's floor), through the same counters.

No GPU is needed: each worker runs on ``ASYNCGRAD_SIM_CUDA=1`` with the device keeping up
(``sim.configure(inline=True)``, NOTE [Counting device work] in asyncgrad/backend/sim.py), so
every count is the host's own and the same in every run. Per unit of work it counts kernel
launches, allocations and their bytes, events recorded and queried, stream waits, host
synchronisations (with the line that caused each) and Python function calls outside the device
runtime (``asyncgrad.testing.count_python_calls``; pure build: compiled modules make no frames).

Workloads (bench_cuda.py's, at its full sizes unless ``--quick``):

  mlp    one training step of MLP 784-4096-4096-10, ReLU, batch 1024, float32, mean
         cross-entropy: grads set to None + forward + loss + awaited backward; asyncgrad also
         with ``optim.SGD``'s step (the floor's: ``p -= lr * g``).
  chain  the backward of 10,000 elementwise ops on float32[16], per node.
  serve  one input gradient of MLP 784-4096-4096-10 at batch 8, one pass per request, copied to
         the host: per request, 16 requests of 4 gradients each gathered on one loop.
  overlap  wall time of awaited training steps (a small MLP) when every kernel takes 80 µs on
         its stream (``sim.configure(kernel_time=...)``, the device on its own threads): the
         host's own time, the device's, awaited steps as written, and the same steps each
         followed by a wait for the GPU.

Usage: python benchmarks/bench_cuda_counts.py [--quick] [--only mlp,chain,serve,overlap]
                                              [--top N] [--markdown PATH] [--tree LABEL=PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
from bench_chain import chain, x0
from bench_cuda import (
    FULL,
    QUICK,
    floor_chain_backward,
    floor_chain_forward,
    floor_input_grad,
    floor_mlp_step,
    mlp_forward,
    mlp_init,
    stream_done,
)

WORKLOADS = {
    "mlp": ["asyncgrad", "asyncgrad-sgd", "floor", "floor-sgd"],
    "chain": ["asyncgrad", "floor"],
    "serve": ["asyncgrad", "floor"],
    "overlap": ["asyncgrad"],
}
LR = 0.01
STEPS = 3  # counted MLP steps (after two uncounted ones)
REQUESTS, ITEMS = 16, 4  # the serving workload: requests x gradients each
# The targets on the counts, per unit (None: none set).
TARGETS = {
    "mlp": {"kernels": "floor + 3", "bytes": "1.1x floor", "host_syncs": 0, "events": 2, "py": 450},
    "chain": {"py": 10},
    "serve": {"py": 320},
}


def counted(run: Any, units: int) -> dict[str, Any]:
    """Run the coroutine function ``run`` inside the counters; the counts per unit."""
    from asyncgrad.backend import sim
    from asyncgrad.testing import count_python_calls

    async def main() -> tuple[Any, Any]:
        with sim.count_device_work() as dev, count_python_calls() as py:
            await run()
        return dev, py

    dev, py = asyncio.run(main())
    d = dev.as_dict()
    per = {k: d[k] / units for k in ("kernels", "allocations", "allocated_bytes")}
    per.update({k: d[k] / units for k in ("events_recorded", "events_queried", "stream_waits")})
    per["host_funcs"] = d["host_funcs"] / units
    per["host_syncs"] = len(d["host_syncs"]) / units
    per["python_calls"] = py.total / units
    return {
        "per": per,
        "launches": {k: v / units for k, v in sorted(d["launches"].items())},
        "sync_sites": sorted({f"{what} at {where}" for what, where in d["host_syncs"]}),
        "top_calls": [[n / units, name] for name, n in py.by_function.most_common(40)],
    }


# ---------------------------------------------------------------------------------------------
# Workers (each in a fresh process on one simulated device)
# ---------------------------------------------------------------------------------------------
def mlp_worker(lib: str, variant: str, cfg: Any) -> dict[str, Any]:
    params, xv, yv = mlp_init(cfg.mlp, cfg.mlp_batch)
    sgd = variant == "sgd"
    if lib == "floor":
        from asyncgrad.backend import sim as cp

        p = [cp.asarray(a) for a in params]
        x, y, rows = cp.asarray(xv), cp.asarray(yv), cp.arange(len(yv))

        async def step() -> None:
            _, grads = floor_mlp_step(cp, p, x, y, rows)
            if sgd:  # the gradients are the caller's: not scaled in place
                for w, g in zip(p, grads, strict=True):
                    w -= LR * g

        sync = cp.cuda.Device().synchronize
    else:
        import asyncgrad as ag
        import asyncgrad.nn.functional as F

        p = [ag.tensor(a, device="cuda", requires_grad=True) for a in params]
        x, y = ag.tensor(xv, device="cuda"), ag.tensor(yv, device="cuda")
        opt = ag.optim.SGD(p, lr=LR) if sgd else None

        async def step() -> None:
            for t in p:
                t.grad = None
            loss = F.cross_entropy(mlp_forward(F, p, x), y)
            await ag.backward(loss)
            if opt is not None:
                opt.step()

        sync = ag.cuda.synchronize

    async def warm() -> None:
        for _ in range(2):
            await step()
        sync()

    async def run() -> None:
        for _ in range(STEPS):
            await step()

    asyncio.run(warm())
    return counted(run, STEPS)


def chain_worker(lib: str, variant: str, cfg: Any) -> dict[str, Any]:
    import numpy as np

    n = cfg.chain_n
    xv = x0().astype(np.float32)
    if lib == "floor":
        from asyncgrad.backend import sim as cp

        xc = cp.asarray(xv)
        fwd = floor_chain_forward(cp, xc, n)

        async def run() -> None:
            floor_chain_backward(cp, fwd, n)

        return counted(run, n)
    import asyncgrad as ag

    x = ag.tensor(xv, device="cuda", requires_grad=True)

    async def warm() -> None:
        await ag.backward(chain(x, 300).sum())

    asyncio.run(warm())
    x.grad = None
    out = chain(x, n).sum()

    async def run_ag() -> None:
        await ag.backward(out)

    return counted(run_ag, n)


def serve_worker(lib: str, variant: str, cfg: Any) -> dict[str, Any]:
    import numpy as np

    params, _, _ = mlp_init(cfg.serve, cfg.serve_batch)
    rng = np.random.default_rng(1)
    shape = (cfg.serve_batch, cfg.serve[0])
    inputs = [rng.standard_normal(shape, dtype=np.float32) for _ in range(8)]
    if lib == "floor":
        from asyncgrad.backend import sim as cp

        pc = [cp.asarray(a) for a in params]
        streams = [cp.cuda.Stream(non_blocking=True) for _ in range(REQUESTS)]

        async def grad_one(xi: Any, r: int) -> Any:
            stream = streams[r]
            with stream:
                _, dx = floor_input_grad(cp, pc, cp.asarray(xi))
                done = stream_done(stream)
            await done
            return cp.asnumpy(dx, stream=stream)
    else:
        import asyncgrad as ag
        import asyncgrad.nn.functional as F

        p = [ag.tensor(a, device="cuda", requires_grad=True) for a in params]

        async def grad_one(xi: Any, r: int) -> Any:
            x = ag.tensor(xi, device="cuda", requires_grad=True)
            out = mlp_forward(F, p, x).sum()
            (dx,) = await ag.grad(out, [x])
            return dx.cpu().numpy()

    async def request(r: int, items: int) -> None:
        for i in range(items):
            await grad_one(inputs[(r + i) % len(inputs)], r)

    async def requests(items: int) -> None:
        await asyncio.gather(*(request(r, items) for r in range(REQUESTS)))

    asyncio.run(requests(1))  # warm-up: streams, pools, threads

    async def run() -> None:
        await requests(ITEMS)

    return counted(run, REQUESTS * ITEMS)


def overlap_worker(lib: str, variant: str, cfg: Any) -> dict[str, Any]:
    """Wall time per training step with every kernel taking KERNEL_S on its stream (NOTE
    [Modelled kernel times]), the device running on its own threads: ``as-is`` awaits each
    step as a user writes it, ``waiting`` also waits for the GPU after each (what an awaited
    backward did before NOTE [Passes in flight]), ``host`` is the same loop with kernels that
    take no time (the host's own time per step)."""
    import time

    from asyncgrad.backend import sim

    sim.configure(inline=False)
    # The simulated device's threads need the GIL to start each kernel: with the default 5 ms
    # switch interval the host's thread would hold them back for milliseconds at a time, which
    # a GPU's stream never waits for.
    sys.setswitchinterval(SWITCH_S)
    params, xv, yv = mlp_init(OVERLAP_SIZES, OVERLAP_BATCH)
    import asyncgrad as ag
    import asyncgrad.nn.functional as F

    p = [ag.tensor(a, device="cuda", requires_grad=True) for a in params]
    x, y = ag.tensor(xv, device="cuda"), ag.tensor(yv, device="cuda")
    opt = ag.optim.SGD(p, lr=LR)
    kernels = 0

    async def step(wait: bool) -> None:
        opt.zero_grad()
        loss = F.cross_entropy(mlp_forward(F, p, x), y)
        await ag.backward(loss)
        opt.step()
        if wait:
            await ag.cuda.synchronize_async()

    async def loop(n: int, wait: bool) -> float:
        ag.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            await step(wait)
        ag.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    async def main() -> dict[str, Any]:
        nonlocal kernels
        await loop(3, False)  # warm-up
        with sim.count_device_work() as c:
            await loop(OVERLAP_STEPS, False)
        kernels = c.kernels // OVERLAP_STEPS
        host = min([await loop(OVERLAP_STEPS, False) for _ in range(3)])
        sim.configure(kernel_time=KERNEL_S)
        try:
            as_is = min([await loop(OVERLAP_STEPS, False) for _ in range(3)])
            # (an earlier tree has no synchronize_async: its awaited backward waited itself)
            has_wait = hasattr(ag.cuda, "synchronize_async")
            waiting = min([await loop(OVERLAP_STEPS, has_wait) for _ in range(3)])
        finally:
            sim.configure(kernel_time=0.0)
        return {
            "host_s": host,
            "device_s": kernels * KERNEL_S,
            "kernels": kernels,
            "as_is_s": as_is,
            "waiting_s": waiting,
        }

    return asyncio.run(main())


OVERLAP_SIZES = (64, 128, 128, 10)
OVERLAP_BATCH = 32
OVERLAP_STEPS = 10
SWITCH_S = 50e-6
KERNEL_S = 80e-6  # a modelled kernel's time: about the host's time per kernel here

WORKERS = {
    "mlp": mlp_worker,
    "chain": chain_worker,
    "serve": serve_worker,
    "overlap": overlap_worker,
}


def worker_main(name: str, argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=WORKERS)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    os.environ["ASYNCGRAD_SIM_CUDA"] = "1"
    from asyncgrad.backend import sim

    sim.configure(devices=1, inline=True)
    lib, _, variant = name.partition("-")
    H.emit(WORKERS[a.workload](lib, variant, QUICK if a.quick else FULL))


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------
UNITS = {"mlp": "training step", "chain": "chain node (backward)", "serve": "serving request"}
COLUMNS = [
    ("kernels", "kernel launches", "{:.2f}"),
    ("allocations", "allocations", "{:.2f}"),
    ("allocated_bytes", "bytes allocated", "bytes"),
    ("events_recorded", "events recorded", "{:.2f}"),
    ("events_queried", "events queried", "{:.2f}"),
    ("stream_waits", "stream waits", "{:.2f}"),
    ("host_syncs", "host syncs", "{:.2f}"),
    ("python_calls", "Python calls", "{:.1f}"),
]


def fmt_value(v: float, spec: str) -> str:
    if spec == "bytes":
        if v >= 1e6:
            return f"{v / 1e6:.1f} MB"
        if v >= 1e3:
            return f"{v / 1e3:.1f} kB"
        return f"{v:.0f} B"
    s = spec.format(v)
    return s.rstrip("0").rstrip(".") if "." in s else s


def verdicts(wl: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    """The issue's targets on this workload, judged on the asyncgrad row against the floor's."""
    out = []
    ag_row, floor = rows.get("asyncgrad"), rows.get("floor")
    t = TARGETS.get(wl, {})
    if ag_row is None:
        return out
    a = ag_row["per"]
    if "kernels" in t and floor is not None:
        limit = floor["per"]["kernels"] + 3
        ok = a["kernels"] <= limit
        out.append(f"kernel launches {a['kernels']:.0f} <= floor + 3 = {limit:.0f}: " + yes(ok))
    if "bytes" in t and floor is not None:
        r = a["allocated_bytes"] / floor["per"]["allocated_bytes"]
        out.append(f"bytes allocated {r:.2f}x the floor's <= 1.1x: " + yes(r <= 1.1))
    if "host_syncs" in t:
        ours = [k for k in rows if k.startswith("asyncgrad") and "@" not in k]
        worst = max(rows[k]["per"]["host_syncs"] for k in ours)
        out.append(f"host syncs {worst:.0f} (with the optimizer's step) = 0: " + yes(worst == 0))
    if "events" in t:
        ev = a["events_recorded"]
        out.append(f"events recorded {ev:.0f} <= {t['events']}: " + yes(ev <= t["events"]))
    if "py" in t:
        n = a["python_calls"]
        out.append(f"Python calls {n:.1f} <= {t['py']}: " + yes(n <= t["py"]))
    return out


def yes(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def label(lib: str) -> str:
    name, _, tree = lib.partition("@")
    base, _, variant = name.partition("-")
    text = {"asyncgrad": "asyncgrad", "floor": "CuPy by hand (floor)"}[base]
    if variant == "sgd":
        text += " + SGD step"
    return text + (f" [{tree}]" if tree else "")


def overlap_rows(quick: bool, trees: list[str]) -> list[str]:
    """The overlap table: medians over rounds, each round a fresh process per tree, the trees
    interleaved."""
    libs = ["asyncgrad"] + [f"asyncgrad@{t}" for t in trees]
    runs: dict[str, list[dict[str, Any]]] = {lib: [] for lib in libs}
    rounds = 1 if quick else 3
    for r in range(rounds):
        for lib in H.rotated(libs, r):
            args = ["--workload", "overlap"]
            runs[lib].append(H.run_worker(__file__, lib, args, timeout=600))
    ms = 1e3
    sizes = "-".join(map(str, OVERLAP_SIZES))
    out = [
        f"\n**Awaited training steps against a modelled GPU** (MLP {sizes}"
        f", batch {OVERLAP_BATCH}, SGD; every kernel {KERNEL_S * 1e6:.0f} µs on its stream; "
        f"ms per step, median of {rounds} processes)\n",
        "| | kernels a step | host alone (kernels take no time) | device alone (kernels x time) "
        "| awaited steps | each step then waits for the GPU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for lib in libs:
        med = {k: H.median([r[k] for r in runs[lib]]) for k in runs[lib][0]}
        out.append(
            f"| {label(lib)} | {med['kernels']:.0f} | {med['host_s'] * ms:.2f} "
            f"| {med['device_s'] * ms:.2f} | {med['as_is_s'] * ms:.2f} "
            f"| {med['waiting_s'] * ms:.2f} |"
        )
    return out


def _commit(path: str) -> str:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=path, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def main() -> None:
    w = H.worker_argv()
    if w is not None:
        worker_main(*w)
        return
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="bench_cuda.py's quick sizes")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--top", type=int, default=0, help="also print the N most called functions")
    ap.add_argument("--markdown", help="also write the tables to this file")
    ap.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH")
    a = ap.parse_args()
    labels = H.parse_trees(a.tree)
    lines = []
    failed = False
    for wl in a.only.split(","):
        if wl == "overlap":
            lines += overlap_rows(a.quick, labels)
            continue
        libs = list(WORKLOADS[wl])
        libs += [f"asyncgrad@{t}" for t in labels]
        rows: dict[str, dict[str, Any]] = {}
        for lib in libs:
            args = ["--workload", wl] + (["--quick"] if a.quick else [])
            try:
                rows[lib] = H.run_worker(__file__, lib, args, timeout=1200)
            except H.WorkerError as e:
                print(e, file=sys.stderr)
                failed = True
        lines.append(f"\n**Per {UNITS[wl]}** ({'quick' if a.quick else 'full'} sizes)\n")
        lines.append("| | " + " | ".join(c[1] for c in COLUMNS) + " |")
        lines.append("|---|" + "---:|" * len(COLUMNS))
        for lib, r in rows.items():
            cells = [fmt_value(r["per"][k], spec) for k, _, spec in COLUMNS]
            lines.append(f"| {label(lib)} | " + " | ".join(cells) + " |")
        for lib, r in rows.items():
            for site in r["sync_sites"]:
                lines.append(f"\n- host sync in {label(lib)}: {site}")
        for v in verdicts(wl, rows):
            lines.append(f"\n- target: {v}")
        if a.top:
            for lib, r in rows.items():
                print(f"\n{wl} / {label(lib)}: launches {r['launches']}")
                for n, name in r["top_calls"][: a.top]:
                    print(f"  {n:8.2f}  {name}")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.markdown:
        import datetime as dt

        facts = H.machine_facts()
        head = ", ".join(f"{k} {facts[k]}" for k in ("Python", "NumPy", "asyncgrad"))
        args = " ".join(["--quick"] if a.quick else [])
        args += "".join(f" --tree {t}=PATH" for t in labels)
        args += " --markdown benchmarks/cuda_counts.md"
        trees = "; ".join(f"[{t}] is git {_commit(H.TREES[t])}" for t in labels)
        intro = [
            "## What a GPU would pay, counted on the simulated device (bench_cuda_counts.py)",
            "",
            f"Command: `python benchmarks/bench_cuda_counts.py{args}`; run "
            f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {head}. No GPU: every count is "
            "the simulated device's (NOTE [Counting device work] in asyncgrad/backend/sim.py), "
            "with the device keeping up (work runs as it is queued), so the counts are the "
            "host's own and the same in every run; the floor is bench_cuda.py's hand-written "
            "CuPy calls through the same counters. Python calls are function calls outside "
            "the device runtime on the pure build (`asyncgrad.testing.count_python_calls`). "
            "A row marked [LABEL] ran the package of another checkout (`--tree`) with this "
            "tree's simulator and counters" + (f" ({trees})." if trees else "."),
        ]
        Path(a.markdown).write_text("\n".join(intro) + "\n" + text)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
