"""Activation checkpointing: peak memory and time of forward+backward of a deep MLP.

Model: DEPTH Linear+ReLU layers of WIDTH features, batch BATCH, float32 (default 32 layers of
256, batch 2048: 64 MB of activations against 8 MB of parameters). One step = forward,
``loss.backward()``. Each configuration runs in a fresh process: without checkpointing, and with
``ag.utils.checkpoint.checkpoint`` around every group of k layers (non-reentrant for several k,
reentrant for one). Peak memory is measured with tracemalloc (NumPy reports its array
allocations to it) over one step, above what is allocated before it (the parameters and the
input), and so counts activations, saved tensors and gradients; "held for backward" is what the
forward leaves allocated when it ends. Time is the median of a few steps without tracemalloc. Every
configuration's gradients are checked against the plain run's (a checksum of every parameter's
gradient).

Checkpointing lowers what is held for backward; it lowers the peak only where activations,
not the parameters' gradients, set it. With 32 layers of 1024 and batch 256 (128 MB of
parameters, 32 MB of activations) the gradients alone reach the peak: measured on 2 shared
cores, 32.1 MB held for backward without checkpointing, 8.1 MB every 4 layers, 4.1 MB every 8,
and a peak of 131 MB in every configuration.

Usage: python benchmarks/bench_checkpoint.py [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

DEPTH, WIDTH, BATCH = 32, 256, 2048
QUICK = (8, 256, 256)
STEPS = 3

# label -> (every k layers, use_reentrant); k 0: no checkpointing
CONFIGS: dict[str, tuple[int, bool]] = {
    "none": (0, False),
    "k=2": (2, False),
    "k=4": (4, False),
    "k=8": (8, False),
    "k=4-reentrant": (4, True),
}
LABELS = {
    "none": "no checkpointing",
    "k=2": "checkpoint every 2 layers (non-reentrant)",
    "k=4": "checkpoint every 4 layers (non-reentrant)",
    "k=8": "checkpoint every 8 layers (non-reentrant)",
    "k=4-reentrant": "checkpoint every 4 layers (reentrant)",
}


def sizes(quick: bool) -> tuple[int, int, int]:
    return QUICK if quick else (DEPTH, WIDTH, BATCH)


def worker(label: str, quick: bool) -> dict[str, Any]:
    import tracemalloc

    import numpy as np

    import asyncgrad as ag

    depth, width, batch = sizes(quick)
    k, reentrant = CONFIGS[label]
    ag.manual_seed(0)
    layers = [ag.nn.Linear(width, width) for _ in range(depth)]
    x = ag.tensor(np.random.default_rng(0).standard_normal((batch, width), dtype=np.float32))
    # The input requires grad: a reentrant checkpoint whose inputs do not gives no gradients.
    x.requires_grad_()

    def group(h: Any, i: int) -> Any:
        for lin in layers[i : i + k]:
            h = lin(h).relu()
        return h

    def step(mark: Any = None) -> None:
        for lin in layers:
            for p in lin.parameters():
                p.grad = None
        x.grad = None
        h = x
        if k == 0:
            for lin in layers:
                h = lin(h).relu()
        else:
            for i in range(0, depth, k):
                h = ag.utils.checkpoint.checkpoint(group, h, i, use_reentrant=reentrant)
        loss = (h * h).mean()
        if mark is not None:
            mark()
        loss.backward()

    step()  # warm-up
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    for lin in layers:
        for p in lin.parameters():
            p.grad = None
    H.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    held: list[int] = []
    step(lambda: held.append(tracemalloc.get_traced_memory()[0] - base))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    checksum = [float(np.abs(p.grad.numpy()).sum()) for lin in layers for p in lin.parameters()]
    return {
        "peak_mb": peak / 2**20,
        "held_mb": held[0] / 2**20,
        "s": H.median(times),
        "checksum": checksum,
    }


def worker_main(lib: str, argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if lib not in CONFIGS:
        raise SystemExit(f"unknown configuration {lib!r}")
    H.emit({"lib": lib, **worker(lib, a.quick)})


ROUNDS = 1


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    depth, width, batch = sizes(quick)
    cmd = (
        "python benchmarks/bench_checkpoint.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    print(
        f"bench_checkpoint: MLP of {depth} Linear+ReLU layers of {width}, batch {batch}, "
        f"float32, {rounds} round(s)",
        flush=True,
    )
    libs = list(CONFIGS)
    args = ["--quick"] if quick else []
    results = H.interleaved_rounds(Path(__file__), libs, rounds, lambda lib, r: args, timeout=900)
    import numpy as np

    ref = np.asarray(results["none"][0]["checksum"])
    for lib in libs:
        got = np.asarray(results[lib][0]["checksum"])
        if not np.allclose(got, ref, rtol=1e-5):
            raise SystemExit(f"bench_checkpoint: gradients of {LABELS[lib]} differ from the plain")
    check = "Gradient check passed: every configuration's gradients match the plain run's."
    summary = {}
    for lib in libs:
        summary[lib] = {
            "peak_mb": H.median([r["peak_mb"] for r in results[lib]]),
            "held_mb": H.median([r["held_mb"] for r in results[lib]]),
            "s": H.median([r["s"] for r in results[lib]]),
        }
    base = summary["none"]
    rows = [
        [
            LABELS[lib],
            H.fmt(s["held_mb"], ".1f"),
            H.fmt(s["peak_mb"], ".1f"),
            f"{s['peak_mb'] / base['peak_mb']:.2f}x",
            H.fmt(s["s"] * 1e3, ".0f"),
            f"{s['s'] / base['s']:.2f}x",
        ]
        for lib, s in summary.items()
    ]
    tab = H.table(
        ["configuration", "held for backward MB", "peak MB", "vs none", "ms per step", "vs none"],
        rows,
    )
    legend = (
        f"MLP of {depth} Linear+ReLU layers of {width} features, batch {batch}, float32; one "
        "step = forward + `loss.backward()`. Peak: tracemalloc's peak over one step above the "
        "memory held before it (parameters, input), so it counts activations, saved tensors "
        "and gradients (the parameters' gradients alone are as large as the parameters). Held for "
        "backward: what the step holds when the forward ends, before backward starts: the "
        "activations kept for backward, which checkpointing replaces by each group's input. "
        f"Time: median of {STEPS} steps after a warm-up, without tracemalloc. "
        "Each configuration in a fresh process. " + H.THREADS_NOTE
    )
    print()
    print(tab)
    print()
    print(check)
    rep = H.Report(title="Activation checkpointing: peak memory of a deep MLP", command=cmd)
    rep.sections += [legend, tab, check]
    best = min(summary, key=lambda lib: summary[lib]["peak_mb"])
    rep.notes.append(
        f"{LABELS[best]}: {summary[best]['held_mb']:.0f} MB held for backward against "
        f"{base['held_mb']:.0f} MB without checkpointing, peak {summary[best]['peak_mb']:.0f} "
        f"MB against {base['peak_mb']:.0f} MB, for "
        f"{summary[best]['s'] / base['s']:.2f}x the time (one more forward of each group)."
    )
    rep.data = {"summary": summary}
    return rep


if __name__ == "__main__":
    H.bench_main(__doc__, ROUNDS, run, worker_main)
