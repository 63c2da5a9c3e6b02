"""One small-CNN training step: forward + backward + SGD update, steady state.

Model: conv 1->8 3x3, ReLU, max-pool 2, conv 8->16 3x3, ReLU, max-pool 2, flatten, linear
400->10; batch 64 of 1x28x28, float32, cross-entropy over integer labels, plain SGD (lr 0.01).
Every library starts from the same weights and batch. A worker warms up 10 steps, then times
100 steps; a step is zero_grad + forward + loss + backward + optimizer step. Reported: mean ms
per step (and the median step), median over interleaved rounds, each library in a fresh
single-threaded process.

Usage: python benchmarks/bench_cnn.py [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

BATCH = 64
LR = 0.01
WARMUP = 10
STEPS = 100
# (out, in, k) of the two convolutions; 28 -> 26 -> pool 13 -> 11 -> pool 5: 16 * 5 * 5 = 400
CONVS = ((8, 1, 3), (16, 8, 3))
FLAT = 16 * 5 * 5
CLASSES = 10

LIBS = ["asyncgrad", "torch", "numpy-floor"]
LABELS = {
    "asyncgrad": "asyncgrad loss.backward()",
    "torch": "PyTorch CPU (1 thread)",
    "numpy-floor": "NumPy floor (hand-written im2col, no engine)",
}
PARAM_NAMES = ["w1", "b1", "w2", "b2", "w3", "b3"]
PHASES = ("fwd", "bwd", "upd")


def init() -> tuple[list[Any], Any, Any]:
    """Shared initial weights (torch's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))) and batch."""
    import numpy as np

    rng = np.random.default_rng(0)
    params = []
    shapes = [((o, i, k, k), i * k * k) for o, i, k in CONVS] + [((CLASSES, FLAT), FLAT)]
    for shape, fan_in in shapes:
        bound = 1.0 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, shape).astype(np.float32))
        params.append(rng.uniform(-bound, bound, (shape[0],)).astype(np.float32))
    x = rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH).astype(np.int64)
    return params, x, y


def _run(forward, backward, update, grads, loss_value, steps, warmup, check_out) -> dict:
    import numpy as np

    loss = forward()
    backward(loss)
    if check_out:
        named = dict(zip(PARAM_NAMES, grads(), strict=True))
        np.savez(check_out, loss=np.float64(loss_value(loss)), **named)
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
    out = {"mean": (clock() - t_all) / steps, "median": H.median(times), "blas": H.blas_threads()}
    for i, name in enumerate(PHASES):
        out[name] = H.median([p[i] for p in phases])
    return out


def worker_asyncgrad(steps: int, warmup: int, check_out: str | None) -> dict:
    import asyncgrad as ag
    import asyncgrad.nn.functional as F

    w, xv, yv = init()
    c1, c2 = (ag.nn.Conv2d(i, o, k) for o, i, k in CONVS)
    fc = ag.nn.Linear(FLAT, CLASSES)
    params = [c1.weight, c1.bias, c2.weight, c2.bias, fc.weight, fc.bias]
    for p, v in zip(params, w, strict=True):
        p.array[...] = v
    opt = ag.optim.SGD(params, lr=LR)
    x, y = ag.tensor(xv), ag.tensor(yv)

    def forward():
        opt.zero_grad()
        h = F.max_pool2d(F.relu(c1(x)), 2)
        h = F.max_pool2d(F.relu(c2(h)), 2)
        return F.cross_entropy(fc(h.flatten(1)), y)

    return _run(
        forward,
        lambda loss: loss.backward(),
        opt.step,
        lambda: [p.grad.numpy().copy() for p in params],
        lambda loss: float(loss.item()),
        steps,
        warmup,
        check_out,
    )


def worker_torch(steps: int, warmup: int, check_out: str | None) -> dict:
    import torch
    import torch.nn.functional as F

    H.pin_torch_threads()
    w, xv, yv = init()
    c1, c2 = (torch.nn.Conv2d(i, o, k) for o, i, k in CONVS)
    fc = torch.nn.Linear(FLAT, CLASSES)
    params = [c1.weight, c1.bias, c2.weight, c2.bias, fc.weight, fc.bias]
    with torch.no_grad():
        for p, v in zip(params, w, strict=True):
            p.copy_(torch.from_numpy(v))
    opt = torch.optim.SGD(params, lr=LR)
    x, y = torch.from_numpy(xv), torch.from_numpy(yv)

    def forward():
        opt.zero_grad(set_to_none=True)
        h = F.max_pool2d(F.relu(c1(x)), 2)
        h = F.max_pool2d(F.relu(c2(h)), 2)
        return F.cross_entropy(fc(h.flatten(1)), y)

    return _run(
        forward,
        lambda loss: loss.backward(),
        opt.step,
        lambda: [p.grad.detach().numpy().copy() for p in params],
        lambda loss: float(loss.item()),
        steps,
        warmup,
        check_out,
    )


def worker_floor(steps: int, warmup: int, check_out: str | None) -> dict:
    """The same math by hand in NumPy (float32): im2col by a strided view and one batched
    matmul per convolution, pooling by reshape, col2im by one strided add per kernel offset."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    (w1, b1, w2, b2, w3, b3), x, y = init()
    params = (w1, b1, w2, b2, w3, b3)
    rows = np.arange(BATCH)
    inv_b = np.float32(1.0 / BATCH)
    lr = np.float32(LR)
    state: dict[str, Any] = {}

    def conv(inp, w, b):
        n, c, h, wd = inp.shape
        o, _, k, _ = w.shape
        oh, ow = h - k + 1, wd - k + 1
        win = sliding_window_view(inp, (k, k), axis=(2, 3))  # (N, C, OH, OW, k, k)
        cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * k * k, oh * ow)  # one copy
        a = w.reshape(o, -1) @ cols
        a += b[:, None]
        return a.reshape(n, o, oh, ow), cols

    def pool(h):
        # 2x2 max by the four offsets (a reduction over a reshaped view is much slower)
        ph, pw = h.shape[2] // 2, h.shape[3] // 2
        q = [h[:, :, i : 2 * ph : 2, j : 2 * pw : 2] for i in (0, 1) for j in (0, 1)]
        return np.maximum(np.maximum(q[0], q[1]), np.maximum(q[2], q[3]))

    def unpool(dp, h, p):
        # the gradient to every position equal to its window's maximum (ties among nonzero
        # values do not occur with these inputs; tied zeros are cut by the ReLU's mask)
        ph, pw = p.shape[2:]
        dh = np.zeros_like(h)
        for i in (0, 1):
            for j in (0, 1):
                sl = (slice(None), slice(None), slice(i, 2 * ph, 2), slice(j, 2 * pw, 2))
                dh[sl] = dp * (h[sl] == p)
        return dh

    def conv_back(da, cols, w, shape_in, need_input):
        n, o = da.shape[:2]
        d2 = da.reshape(n, o, -1)
        gw = (d2 @ cols.transpose(0, 2, 1)).sum(axis=0).reshape(w.shape)
        gb = da.sum(axis=(0, 2, 3))
        if not need_input:
            return gw, gb, None
        k = w.shape[2]
        oh, ow = da.shape[2:]
        dcols = (w.reshape(o, -1).T @ d2).reshape(n, shape_in[1], k, k, oh, ow)
        dx = np.zeros(shape_in, np.float32)
        for i in range(k):
            for j in range(k):
                dx[:, :, i : i + oh, j : j + ow] += dcols[:, :, i, j]
        return gw, gb, dx

    def forward():
        a1, cols1 = conv(x, w1, b1)
        h1 = np.maximum(a1, 0)
        p1 = pool(h1)
        a2, cols2 = conv(p1, w2, b2)
        h2 = np.maximum(a2, 0)
        p2 = pool(h2)
        flat = p2.reshape(BATCH, -1)
        z = flat @ w3.T
        z += b3
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = np.log(s[:, 0]).mean() - z[rows, y].mean()
        return loss, (a1, cols1, h1, p1, a2, cols2, h2, p2, flat, e, s)

    def backward(out):
        _, (a1, cols1, h1, p1, a2, cols2, h2, p2, flat, e, s) = out
        dz = e / s
        dz[rows, y] -= 1
        dz *= inv_b
        gw3 = dz.T @ flat
        gb3 = dz.sum(axis=0)
        dp2 = (dz @ w3).reshape(p2.shape)
        da2 = unpool(dp2, h2, p2)
        da2 *= a2 > 0
        gw2, gb2, dp1 = conv_back(da2, cols2, w2, p1.shape, True)
        da1 = unpool(dp1, h1, p1)
        da1 *= a1 > 0
        gw1, gb1, _ = conv_back(da1, cols1, w1, x.shape, False)
        state["grads"] = (gw1, gb1, gw2, gb2, gw3, gb3)

    def update():
        for p, g in zip(params, state.pop("grads"), strict=True):
            g *= lr
            p -= g

    def grads():
        return [g.copy() for g in state["grads"]]

    return _run(
        forward, backward, update, grads, lambda out: float(out[0]), steps, warmup, check_out
    )


def worker_main(lib: str, argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--check-out")
    a = ap.parse_args(argv)
    workers = {"asyncgrad": worker_asyncgrad, "torch": worker_torch, "numpy-floor": worker_floor}
    if lib not in workers:
        raise SystemExit(f"unknown library {lib!r}")
    H.emit({"lib": lib, **workers[lib](a.steps, a.warmup, a.check_out)})


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------
def check_gradients(files: dict[str, str]) -> str:
    """First-step loss and gradients of every library must match the NumPy floor."""
    return H.check_first_step(files, PARAM_NAMES, LABELS, "bench_cnn", rtol=1e-3, atol=1e-4)


ROUNDS = 5


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    steps, warmup = (30, 5) if quick else (STEPS, WARMUP)
    cmd = (
        "python benchmarks/bench_cnn.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
    )
    print(f"bench_cnn: small CNN step, batch {BATCH}, {rounds} interleaved rounds", flush=True)
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

    summary: dict[str, dict[str, Any]] = {}
    for lib in libs:
        means = [r["mean"] * 1e3 for r in results[lib]]
        m = H.median(means)
        summary[lib] = {
            "mean": m,
            "median": H.median([r["median"] * 1e3 for r in results[lib]]),
            "spread": (max(means) - min(means)) / 2 / m * 100 if len(means) > 1 else None,
            "mean_r": means,
        }
        for ph in PHASES:
            summary[lib][ph] = H.median([r[ph] * 1e3 for r in results[lib]])
    for lib in libs:
        s = summary[lib]
        s["vs_floor"] = H.paired_ratio(s["mean_r"], summary.get("numpy-floor", {}).get("mean_r"))
        s["vs_torch"] = H.paired_ratio(s["mean_r"], summary.get("torch", {}).get("mean_r"))
    rows = [
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
        for lib, s in ((lib, summary[lib]) for lib in libs)
    ]
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
        "Small CNN (conv 1->8 3x3, ReLU, max-pool 2, conv 8->16 3x3, ReLU, max-pool 2, "
        f"linear {FLAT}->{CLASSES}), batch {BATCH} of 1x28x28, float32, cross-entropy over "
        f"integer labels, SGD lr {LR}. One step = zero_grad + forward + loss + backward + SGD "
        f"update; {warmup} warm-up steps, then {steps} timed steps per worker; median over "
        f"{rounds} interleaved rounds, each library in a fresh process. `forward`, `backward` "
        "and `update` are medians over steps of each part of a step. The NumPy floor is the "
        "same math written by hand (im2col through a strided view, one batched matmul per "
        "convolution). `spread` is half the range of the per-round means relative to their "
        "median. " + H.PAIRED_NOTE + " " + H.THREADS_NOTE
    )
    print()
    print(tab)
    print()
    rep = H.Report(title="Small CNN training step", command=cmd)
    rep.sections += [legend, tab, check]
    if skipped:
        rep.sections.append("Skipped: " + "; ".join(skipped))
    s = summary.get("asyncgrad")
    t = summary.get("torch")
    if s is not None and t is not None:
        rep.notes.append(
            f"asyncgrad {s['mean']:.3f} ms/step vs PyTorch's {t['mean']:.3f} (paired ratio "
            f"{s['vs_torch']:.2f}x); by part, asyncgrad minus PyTorch: forward "
            f"{s['fwd'] - t['fwd']:+.3f}, backward {s['bwd'] - t['bwd']:+.3f}, update "
            f"{s['upd'] - t['upd']:+.3f} ms."
        )
        rep.targets.append(
            (
                "CNN step <= 1.5x PyTorch single-threaded",
                H.verdict_at_most(s["vs_torch"], s["mean"] / t["mean"], 1.5),
                f"paired ratio {s['vs_torch']:.2f}x; medians {s['mean']:.3f} vs "
                f"{t['mean']:.3f} ms/step",
            )
        )
    elif s is not None:
        rep.targets.append(
            ("CNN step <= 1.5x PyTorch single-threaded", "n/a", "PyTorch not installed")
        )
    rep.notes.append(
        "BLAS threads seen inside the workers: "
        + "; ".join(f"{LABELS[lib]}: {results[lib][0]['blas']}" for lib in libs)
        + "."
    )
    rep.data = {"summary": summary}
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="fewer steps per worker")


if __name__ == "__main__":
    main()
