"""Input gradient of a small MLP: forward + one gradient call, where per-op overhead dominates.

Model 32-64-64-1 with ReLU, batch 8, float32; ``x`` requires grad and so do the weights (as
``nn.Linear`` parameters do). One call = the forward pass and ``grad(out.sum(), x)``: the
gradient with respect to the input only, so the engine must work out which nodes lead to ``x``
and skip the weights' accumulators (``ag.grad_sync`` / ``await ag.grad`` /
``torch.autograd.grad``). Each worker warms up, then times blocks of calls; reported: µs per
call, median over blocks, then median over interleaved rounds, each library in a fresh
single-threaded process. No garbage collection is forced before or inside the timed blocks.

Usage: python benchmarks/bench_small.py [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

SIZES = (32, 64, 64, 1)
BATCH = 8
WARMUP = 300
BLOCK = 500  # calls per timed block

LIBS = ["asyncgrad-sync", "asyncgrad-async", "torch", "numpy-floor"]
LABELS = {
    "asyncgrad-sync": "asyncgrad ag.grad_sync(out, x)",
    "asyncgrad-async": "asyncgrad await ag.grad(out, x)",
    "torch": "PyTorch CPU torch.autograd.grad (1 thread)",
    "numpy-floor": "NumPy floor (hand-written, no engine)",
}
BASELINE = "torch"


def init(sizes: tuple[int, ...] = SIZES, batch: int = BATCH) -> tuple[list[Any], Any]:
    """Shared weights of an MLP of these layer sizes (torch's Linear init), and an input
    batch."""
    import numpy as np

    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in pairwise(sizes):
        bound = 1.0 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, (fan_out,)).astype(np.float32))
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    return params, x


def blocks_for(quick: bool) -> int:
    return 5 if quick else 15


# ---------------------------------------------------------------------------------------------
# Workers: each returns {"us": [µs per call of each block], "grad": dx of the first call}
# ---------------------------------------------------------------------------------------------
def _time_blocks(call: Any, quick: bool) -> list[float]:
    clock = time.perf_counter
    for _ in range(WARMUP):
        call()
    out = []
    for _ in range(blocks_for(quick)):
        t0 = clock()
        for _ in range(BLOCK):
            call()
        out.append((clock() - t0) / BLOCK * 1e6)
    return out


def worker_asyncgrad(mode: str, quick: bool) -> dict[str, Any]:
    import asyncio

    import asyncgrad as ag
    import asyncgrad.nn.functional as F

    w, xv = init()
    p = [ag.nn.Parameter(a) for a in w]
    x = ag.tensor(xv, requires_grad=True)

    def forward() -> Any:
        h = F.relu(F.linear(x, p[0], p[1]))
        h = F.relu(F.linear(h, p[2], p[3]))
        return F.linear(h, p[4], p[5]).sum()

    if mode == "sync":

        def call() -> Any:
            return ag.grad_sync(forward(), x)[0]

        grad = call().numpy().tolist()
        return {"us": _time_blocks(call, quick), "grad": grad}

    # One long-lived event loop; each call awaits the gradient inside it.
    async def main() -> dict[str, Any]:
        clock = time.perf_counter
        grad = (await ag.grad(forward(), x))[0].numpy().tolist()
        for _ in range(WARMUP):
            await ag.grad(forward(), x)
        us = []
        for _ in range(blocks_for(quick)):
            t0 = clock()
            for _ in range(BLOCK):
                await ag.grad(forward(), x)
            us.append((clock() - t0) / BLOCK * 1e6)
        return {"us": us, "grad": grad}

    return asyncio.run(main())


def worker_torch(quick: bool) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    H.pin_torch_threads()
    w, xv = init()
    p = [torch.nn.Parameter(torch.from_numpy(a)) for a in w]
    x = torch.from_numpy(xv).requires_grad_(True)

    def call() -> Any:
        h = F.relu(F.linear(x, p[0], p[1]))
        h = F.relu(F.linear(h, p[2], p[3]))
        out = F.linear(h, p[4], p[5]).sum()
        return torch.autograd.grad(out, x)[0]

    grad = call().numpy().tolist()
    return {"us": _time_blocks(call, quick), "grad": grad}


def worker_floor(quick: bool) -> dict[str, Any]:
    """The same forward and input gradient written out by hand in NumPy (float32)."""
    import numpy as np

    (w1, b1, w2, b2, w3, b3), x = init()

    def call() -> Any:
        a1 = x @ w1.T
        a1 += b1
        h1 = np.maximum(a1, 0)
        a2 = h1 @ w2.T
        a2 += b2
        h2 = np.maximum(a2, 0)
        out = h2 @ w3.T
        out += b3
        out.sum()
        # d out.sum() / d x: ones back through the three layers and the two ReLUs.
        dh = np.ones_like(out) @ w3
        dh *= a2 > 0
        dh = dh @ w2
        dh *= a1 > 0
        return dh @ w1

    grad = call().tolist()
    return {"us": _time_blocks(call, quick), "grad": grad}


def worker_main(lib: str, argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if lib == "asyncgrad-sync":
        res = worker_asyncgrad("sync", a.quick)
    elif lib == "asyncgrad-async":
        res = worker_asyncgrad("async", a.quick)
    elif lib == "torch":
        res = worker_torch(a.quick)
    elif lib == "numpy-floor":
        res = worker_floor(a.quick)
    else:
        raise SystemExit(f"unknown library {lib!r}")
    H.emit({"lib": lib, **res})


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------
def check_gradients(first_round: dict[str, dict[str, Any]]) -> str:
    """Every library's dx must match the NumPy floor's; raise SystemExit otherwise."""
    import numpy as np

    ref = np.asarray(first_round["numpy-floor"]["grad"])
    worst = 0.0
    scale = float(np.max(np.abs(ref))) or 1.0
    for lib, r in first_round.items():
        g = np.asarray(r["grad"])
        if g.shape != ref.shape or not np.allclose(g, ref, rtol=1e-4, atol=1e-6 * scale):
            raise SystemExit(f"bench_small: dx of {LABELS[lib]} does not match the NumPy floor")
        worst = max(worst, float(np.max(np.abs(g - ref))) / scale)
    return (
        "Gradient check passed: dx of every library matches the NumPy floor (float32; max "
        f"difference {worst:.1e} relative to its largest magnitude)."
    )


ROUNDS = 7


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    cmd = (
        "python benchmarks/bench_small.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    print(
        f"bench_small: input gradient of an MLP {'-'.join(map(str, SIZES))}, batch {BATCH}, "
        f"float32, {rounds} interleaved rounds",
        flush=True,
    )
    libs = H.available_libs(LIBS, LABELS)
    skipped = [LABELS[lib] + ": " + str(H.missing_reason(lib)) for lib in LIBS if lib not in libs]
    args = ["--quick"] if quick else []
    results = H.interleaved_rounds(Path(__file__), libs, rounds, lambda lib, r: args)
    check = check_gradients({lib: results[lib][0] for lib in libs})
    print(check)

    summary: dict[str, dict[str, Any]] = {}
    for lib in libs:
        per_round = [H.median(r["us"]) for r in results[lib]]
        m = H.median(per_round)
        summary[lib] = {
            "us": m,
            "us_r": per_round,
            "spread": (max(per_round) - min(per_round)) / 2 / m * 100
            if len(per_round) > 1
            else None,
        }
    base = summary.get(BASELINE)
    floor = summary.get("numpy-floor")
    rows = []
    for lib in libs:
        s = summary[lib]
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["us"], ".1f"),
                H.fmt_ratio(H.paired_ratio(s["us_r"], base and base["us_r"])),
                H.fmt_ratio(H.paired_ratio(s["us_r"], floor and floor["us_r"])),
                "n/a" if s["spread"] is None else f"±{s['spread']:.0f}%",
            ]
        )
    headers = ["library / call", "µs per call", "vs PyTorch", "vs NumPy floor", "spread"]
    tab = H.table(headers, rows)
    legend = (
        f"MLP {'-'.join(map(str, SIZES))}, ReLU, batch {BATCH}, float32; x and the weights "
        "require grad. One call = forward + the gradient of `out.sum()` with respect to x "
        f"alone. {WARMUP} warm-up calls, then {blocks_for(quick)} timed blocks of {BLOCK} "
        f"calls per worker; median over blocks, then over {rounds} interleaved rounds, each "
        "library in a fresh process; no garbage collection is forced around the timed blocks. "
        "The NumPy floor computes the same forward and input gradient by hand. `spread` is "
        "half the range of the per-round medians relative to their median. "
        + H.PAIRED_NOTE
        + " "
        + H.THREADS_NOTE
    )
    print()
    print(tab)
    print()

    rep = H.Report(title="Small MLP: input gradient per call", command=cmd)
    rep.sections += [legend, tab, check]
    if skipped:
        rep.sections.append("Skipped: " + "; ".join(skipped))
    if floor is not None:
        for lib in ("asyncgrad-sync", "asyncgrad-async", "torch"):
            s = summary.get(lib)
            if s is None:
                continue
            rep.notes.append(
                f"{LABELS[lib]}: {s['us']:.1f} µs per call, {s['us'] - floor['us']:.1f} µs more "
                f"than the floor's {floor['us']:.1f}, which does the same NumPy math with no "
                "graph and no engine: the rest is recording and running about a dozen small "
                "nodes."
            )
    spreads = [v["spread"] for v in summary.values() if v["spread"] is not None]
    if spreads:
        rep.notes.append(
            f"Round-to-round spread reaches ±{max(spreads):.0f}% in this run; differences "
            "smaller than that are within this machine's run-to-run variation."
        )
    for lib in ("asyncgrad-sync", "asyncgrad-async"):
        s = summary.get(lib)
        if s is None:
            continue
        name = f"small-MLP input gradient <= PyTorch CPU, {LABELS[lib]}"
        if base is None:
            rep.targets.append((name, "n/a", "PyTorch not installed"))
            continue
        r = H.paired_ratio(s["us_r"], base["us_r"])
        rep.targets.append(
            (
                name,
                H.verdict_at_most(r, s["us"] / base["us"], 1.0),
                f"paired ratio {H.fmt_ratio(r)}; medians {s['us']:.1f} vs {base['us']:.1f} µs",
            )
        )
    rep.data = {"summary": summary}
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="fewer timed blocks per worker")


if __name__ == "__main__":
    main()
