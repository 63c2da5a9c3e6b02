"""One MLP training step: forward + backward + SGD update, steady state.

Model 784-256-256-10 with ReLU, batch 64, float32, cross-entropy over integer labels, plain
SGD (lr 0.01, no momentum). Every library starts from the same weights and batch. A worker
warms up 20 steps, then times 200 steps; a step is zero_grad + forward + loss + backward +
optimizer step. Reported: mean ms per step over the 200 (and the median step), median over
interleaved rounds, each library in a fresh single-threaded process.

Usage: python benchmarks/bench_mlp.py [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

SIZES = (784, 256, 256, 10)
BATCH = 64
LR = 0.01
WARMUP = 20
STEPS = 200

LIBS = ["asyncgrad-sync", "asyncgrad-async", "torch", "numpy-floor"]
LABELS = {
    "asyncgrad-sync": "asyncgrad loss.backward()",
    "asyncgrad-async": "asyncgrad await ag.backward(loss)",
    "torch": "PyTorch CPU (1 thread)",
    "numpy-floor": "NumPy floor (hand-written, no engine)",
}
PARAM_NAMES = ["w1", "b1", "w2", "b2", "w3", "b3"]


def init() -> tuple[list[Any], Any, Any]:
    """Shared initial weights (torch's Linear init: U(-1/sqrt(in), 1/sqrt(in))) and batch."""
    import numpy as np

    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in pairwise(SIZES):
        bound = 1.0 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, (fan_out,)).astype(np.float32))
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH).astype(np.int64)
    return params, x, y


# ---------------------------------------------------------------------------------------------
# Workers. Each library supplies three pieces of one step:
#   forward()   -> loss      zero_grad, then the forward pass and the loss
#   backward(loss)           gradients into the parameters (a coroutine for the async variant)
#   update()                 the SGD step
# and grads() -> the six gradients as NumPy arrays after a backward.
# ---------------------------------------------------------------------------------------------
PHASES = ("fwd", "bwd", "upd")


def _save_check(check_out: str | None, loss: float, grads: list[Any]) -> None:
    import numpy as np

    if check_out:
        named = dict(zip(PARAM_NAMES, grads, strict=True))
        np.savez(check_out, loss=np.float64(loss), **named)


def _summarise(times: list[float], phases: list[tuple[float, float, float]], total: float):
    n = len(times)
    out = {"mean": total / n, "median": H.median(times), "blas": H.blas_threads()}
    for i, name in enumerate(PHASES):
        out[name] = H.median([p[i] for p in phases])
    return out


def _run_sync(forward, backward, update, grads, loss_value, steps, warmup, check_out) -> dict:
    loss = forward()
    backward(loss)
    _save_check(check_out, loss_value(loss), grads())
    update()
    for _ in range(warmup):
        loss = forward()
        backward(loss)
        update()
    del loss
    H.collect()
    clock = time.perf_counter
    times, phases = [], []
    t_all = clock()
    for _ in range(steps):
        t0 = clock()
        loss = forward()
        t1 = clock()
        backward(loss)
        t2 = clock()
        update()
        t3 = clock()
        times.append(t3 - t0)
        phases.append((t1 - t0, t2 - t1, t3 - t2))
    return _summarise(times, phases, clock() - t_all)


async def _run_async(forward, abackward, update, grads, loss_value, steps, warmup, check_out):
    loss = forward()
    await abackward(loss)
    _save_check(check_out, loss_value(loss), grads())
    update()
    for _ in range(warmup):
        loss = forward()
        await abackward(loss)
        update()
    del loss
    H.collect()
    clock = time.perf_counter
    times, phases = [], []
    t_all = clock()
    for _ in range(steps):
        t0 = clock()
        loss = forward()
        t1 = clock()
        await abackward(loss)
        t2 = clock()
        update()
        t3 = clock()
        times.append(t3 - t0)
        phases.append((t1 - t0, t2 - t1, t3 - t2))
    return _summarise(times, phases, clock() - t_all)


def worker_asyncgrad(mode: str, steps: int, warmup: int, check_out: str | None) -> dict:
    import asyncio

    import asyncgrad as ag
    import asyncgrad.nn.functional as F

    w, xv, yv = init()
    layers = []
    for i, (fi, fo) in enumerate(pairwise(SIZES)):
        lin = ag.nn.Linear(fi, fo)
        lin.weight.array[...] = w[2 * i]
        lin.bias.array[...] = w[2 * i + 1]
        layers.append(lin)
    params = [p for lin in layers for p in (lin.weight, lin.bias)]
    opt = ag.optim.SGD(params, lr=LR)
    x = ag.tensor(xv)
    y = ag.tensor(yv)
    l1, l2, l3 = layers

    def forward():
        opt.zero_grad()
        h = F.relu(l1(x))
        h = F.relu(l2(h))
        return F.cross_entropy(l3(h), y)

    def grads():
        return [p.grad.numpy().copy() for p in params]

    def loss_value(loss):
        return float(loss.item())

    if mode == "sync":
        return _run_sync(
            forward,
            lambda loss: loss.backward(),
            opt.step,
            grads,
            loss_value,
            steps,
            warmup,
            check_out,
        )
    return asyncio.run(
        _run_async(forward, ag.backward, opt.step, grads, loss_value, steps, warmup, check_out)
    )


def worker_torch(steps: int, warmup: int, check_out: str | None) -> dict:
    import torch
    import torch.nn.functional as F

    H.pin_torch_threads()
    w, xv, yv = init()
    layers = []
    for i, (fi, fo) in enumerate(pairwise(SIZES)):
        lin = torch.nn.Linear(fi, fo)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w[2 * i]))
            lin.bias.copy_(torch.from_numpy(w[2 * i + 1]))
        layers.append(lin)
    params = [p for lin in layers for p in (lin.weight, lin.bias)]
    opt = torch.optim.SGD(params, lr=LR)
    x = torch.from_numpy(xv)
    y = torch.from_numpy(yv)
    l1, l2, l3 = layers

    def forward():
        opt.zero_grad(set_to_none=True)
        h = F.relu(l1(x))
        h = F.relu(l2(h))
        return F.cross_entropy(l3(h), y)

    def grads():
        return [p.grad.detach().numpy().copy() for p in params]

    return _run_sync(
        forward,
        lambda loss: loss.backward(),
        opt.step,
        grads,
        lambda loss: float(loss.item()),
        steps,
        warmup,
        check_out,
    )


def worker_floor(steps: int, warmup: int, check_out: str | None) -> dict:
    """The same math written out by hand in NumPy (float32), with no autodiff engine."""
    import numpy as np

    (w1, b1, w2, b2, w3, b3), x, y = init()
    params = (w1, b1, w2, b2, w3, b3)
    assert all(p.dtype == np.float32 for p in params)
    rows = np.arange(BATCH)
    inv_b = np.float32(1.0 / BATCH)
    lr = np.float32(LR)
    state: dict[str, Any] = {}

    def forward():
        # Forward and mean cross-entropy via a stable log-softmax; keep what backward needs.
        a1 = x @ w1.T
        a1 += b1
        h1 = np.maximum(a1, 0)
        a2 = h1 @ w2.T
        a2 += b2
        h2 = np.maximum(a2, 0)
        z = h2 @ w3.T
        z += b3
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = np.log(s[:, 0]).mean() - z[rows, y].mean()
        return loss, (a1, h1, a2, h2, e, s)

    def backward(out):
        _, (a1, h1, a2, h2, e, s) = out
        dz = e / s
        dz[rows, y] -= 1
        dz *= inv_b
        gw3 = dz.T @ h2
        gb3 = dz.sum(axis=0)
        dh = dz @ w3
        dh *= a2 > 0
        gw2 = dh.T @ h1
        gb2 = dh.sum(axis=0)
        dh = dh @ w2
        dh *= a1 > 0
        gw1 = dh.T @ x
        gb1 = dh.sum(axis=0)
        state["grads"] = (gw1, gb1, gw2, gb2, gw3, gb3)

    def update():
        for p, g in zip(params, state.pop("grads"), strict=True):
            g *= lr
            p -= g

    def grads():
        return [g.copy() for g in state["grads"]]

    return _run_sync(
        forward, backward, update, grads, lambda out: float(out[0]), steps, warmup, check_out
    )


def worker_main(lib: str, argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--check-out")
    a = ap.parse_args(argv)
    if lib == "asyncgrad-sync":
        res = worker_asyncgrad("sync", a.steps, a.warmup, a.check_out)
    elif lib == "asyncgrad-async":
        res = worker_asyncgrad("async", a.steps, a.warmup, a.check_out)
    elif lib == "torch":
        res = worker_torch(a.steps, a.warmup, a.check_out)
    elif lib == "numpy-floor":
        res = worker_floor(a.steps, a.warmup, a.check_out)
    else:
        raise SystemExit(f"unknown library {lib!r}")
    H.emit({"lib": lib, **res})


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------
def check_gradients(files: dict[str, str]) -> str:
    """First-step loss and gradients of every library must match the NumPy floor."""
    return H.check_first_step(files, PARAM_NAMES, LABELS, "bench_mlp", rtol=1e-4, atol=1e-5)


ROUNDS = 7


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    steps, warmup = (60, 10) if quick else (STEPS, WARMUP)
    cmd = (
        "python benchmarks/bench_mlp.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    print(
        f"bench_mlp: MLP {'-'.join(map(str, SIZES))} step, batch {BATCH}, float32, "
        f"{rounds} interleaved rounds",
        flush=True,
    )
    libs = H.available_libs(LIBS, LABELS)
    skipped = [LABELS[lib] + ": " + str(H.missing_reason(lib)) for lib in LIBS if lib not in libs]
    with tempfile.TemporaryDirectory() as tmp:
        files = {lib: str(Path(tmp) / f"{lib}.npz") for lib in libs}

        def args_for(lib: str, r: int) -> list[str]:
            a = ["--steps", str(steps), "--warmup", str(warmup)]
            return a + (["--check-out", files[lib]] if r == 0 else [])

        results = H.interleaved_rounds(Path(__file__), libs, rounds, args_for)
        check = check_gradients(files)
    print(check)

    summary = {}
    for lib in libs:
        means = [r["mean"] * 1e3 for r in results[lib]]
        meds = [r["median"] * 1e3 for r in results[lib]]
        m = H.median(means)
        summary[lib] = {
            "mean": m,
            "median": H.median(meds),
            "spread": (max(means) - min(means)) / 2 / m * 100 if len(means) > 1 else None,
        }
        summary[lib]["mean_r"] = means
        for ph in PHASES:
            summary[lib][ph] = H.median([r[ph] * 1e3 for r in results[lib]])
    floor = summary.get("numpy-floor", {}).get("mean")
    torch_ms = summary.get("torch", {}).get("mean")
    for lib in libs:
        s = summary[lib]
        s["vs_floor"] = H.paired_ratio(s["mean_r"], summary.get("numpy-floor", {}).get("mean_r"))
        s["vs_torch"] = H.paired_ratio(s["mean_r"], summary.get("torch", {}).get("mean_r"))
    rows = []
    for lib in libs:
        s = summary[lib]
        rows.append(
            [
                LABELS[lib],
                H.fmt(s["mean"], ".3f"),
                H.fmt(s["median"], ".3f"),
                H.fmt(s["fwd"], ".3f"),
                H.fmt(s["bwd"], ".3f"),
                H.fmt(s["upd"], ".3f"),
                H.fmt_ratio(s["vs_floor"]),
                H.fmt_ratio(s["vs_torch"]),
                "n/a" if s["spread"] is None else f"±{s['spread']:.0f}%",
            ]
        )
    headers = [
        "library",
        "ms/step (mean of steps)",
        "median step ms",
        "forward ms",
        "backward ms",
        "update ms",
        "vs NumPy floor",
        "vs PyTorch",
        "spread",
    ]
    tab = H.table(headers, rows)
    legend = (
        f"MLP {'-'.join(map(str, SIZES))}, ReLU, batch {BATCH}, float32, cross-entropy over "
        f"integer labels, SGD lr {LR} without momentum. One step = zero_grad + forward + loss "
        f"+ backward + SGD update; {warmup} warm-up steps, then {steps} timed steps per worker "
        f"(mean = total time / {steps}); median over {rounds} interleaved rounds, each library "
        "in a fresh process; one full `gc.collect()` runs after the warm-up, before the timed "
        "steps. `forward` (zero_grad, forward and loss), `backward` and "
        "`update` are medians over steps of each part of a step. Ratios compare mean step "
        "times; "
        "the NumPy floor is the same math written by hand with no engine (its forward keeps "
        "what its backward needs). `spread` is half the range of the per-round means relative "
        "to their median. " + H.PAIRED_NOTE + " " + H.THREADS_NOTE
    )
    print()
    print(tab)
    print()

    rep = H.Report(title="MLP training step", command=cmd)
    rep.sections += [legend, tab, check]
    if skipped:
        rep.sections.append("Skipped: " + "; ".join(skipped))
    for lib in ("asyncgrad-sync", "asyncgrad-async"):
        s = summary.get(lib)
        if s is None or floor is None:
            continue
        fl = summary["numpy-floor"]
        over = s["mean"] - floor
        parts = ", ".join(
            f"{name} {round(s[ph] - fl[ph], 3) + 0.0:+.3f} ms"
            for ph, name in zip(PHASES, ("forward", "backward", "update"), strict=True)
        )
        med_step = s["fwd"] + s["bwd"] + s["upd"]
        fl_step = fl["fwd"] + fl["bwd"] + fl["upd"]
        rep.notes.append(
            f"{LABELS[lib]}: mean step {s['mean']:.3f} ms vs the floor's {floor:.3f} ms "
            f"(+{over:.3f} ms; paired ratio {s['vs_floor']:.2f}x). In the median step its "
            f"parts sum to {med_step:.3f} ms vs the floor's {fl_step:.3f} ms; asyncgrad minus "
            f"floor by part: {parts}."
        )
    if torch_ms is not None and floor is not None:
        t = summary["torch"]
        rep.notes.append(
            f"PyTorch single-threaded: mean step {torch_ms:.3f} ms vs the floor's {floor:.3f} "
            f"(paired ratio {t['vs_floor']:.2f}x); median-step parts: forward {t['fwd']:.3f}, "
            f"backward {t['bwd']:.3f}, update {t['upd']:.3f} ms. PyTorch does not use NumPy's "
            "BLAS for its matmuls, so its ratio to the floor compares matmul kernels as well "
            "as framework overhead."
        )
    mean_vs_median = [
        f"{LABELS[lib]} {summary[lib]['mean']:.3f} vs {summary[lib]['median']:.3f}" for lib in libs
    ]
    rep.notes.append(
        "Mean vs median step (ms): " + "; ".join(mean_vs_median) + ". Where the mean is well "
        "above the median, a minority of slow steps carries a share of the total."
    )
    spreads = [summary[lib]["spread"] for lib in libs if summary[lib]["spread"] is not None]
    if spreads:
        rep.notes.append(
            f"Round-to-round spread reaches ±{max(spreads):.0f}% in this run; differences "
            "smaller than that are within this machine's run-to-run variation."
        )
    rep.notes.append(
        "BLAS threads seen inside the workers: "
        + "; ".join(f"{LABELS[lib]}: {results[lib][0]['blas']}" for lib in libs)
        + "."
    )
    for lib in ("asyncgrad-sync", "asyncgrad-async"):
        s = summary.get(lib)
        if s is None:
            continue
        rep.targets.append(
            (
                f"MLP step within 1.3x of the NumPy floor, {LABELS[lib]}",
                H.verdict_at_most(s["vs_floor"], s["mean"] / floor, 1.3),
                f"paired ratio {s['vs_floor']:.2f}x; medians {s['mean']:.3f} vs {floor:.3f} "
                "ms/step",
            )
        )
        if torch_ms is None:
            rep.targets.append(
                (
                    f"MLP step <= PyTorch single-threaded, {LABELS[lib]}",
                    "n/a",
                    "PyTorch not installed",
                )
            )
        else:
            rep.targets.append(
                (
                    f"MLP step <= PyTorch single-threaded, {LABELS[lib]}",
                    H.verdict_at_most(s["vs_torch"], s["mean"] / torch_ms, 1.0),
                    f"paired ratio {s['vs_torch']:.2f}x; medians {s['mean']:.3f} vs "
                    f"{torch_ms:.3f} ms/step",
                )
            )
    rep.data = {"summary": summary}
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="fewer steps per worker")


if __name__ == "__main__":
    main()
