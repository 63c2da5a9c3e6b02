"""Backward cost per node on a long chain of small elementwise ops.

The graph: one leaf ``x`` (16 float64 values, requires grad), then N ops cycling
``y * MUL``, ``y + ADD``, ``tanh(y)``, then ``loss = y.sum()``. Each repetition builds a fresh
graph (timed separately as "forward") and then runs the backward (timed alone). Times are
reported in microseconds per chain op (divided by N; the final sum node and the leaf's
gradient accumulation are included in the backward time).

The constants keep the gradient in the normal float range for the whole chain (down to about
1e-8 at N = 20,000): with a contracting choice such as MUL = 0.9 the gradient underflows
into subnormal numbers after a few thousand ops and every library slows down on subnormal
arithmetic, which would measure the FPU rather than the engines.

Usage: python benchmarks/bench_chain.py [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

MUL = 0.999
ADD = 1e-5
SIZE = 16
SIZES = (1_000, 10_000)

# Workers, in the order rows are printed.
LIBS = ["asyncgrad-sync", "asyncgrad-async", "torch", "autograd", "numpy-floor"]
LABELS = {
    "asyncgrad-sync": "asyncgrad y.backward()",
    "asyncgrad-async": "asyncgrad await ag.backward(y)",
    "torch": "PyTorch CPU y.backward() (1 thread)",
    "autograd": "HIPS autograd",
    "numpy-floor": "NumPy floor (hand-written, no engine)",
}
BASELINE = "torch"


def x0() -> Any:
    import numpy as np

    return np.linspace(-1.0, 1.0, SIZE, dtype=np.float64)


def reps_for(n: int, quick: bool) -> tuple[int, int]:
    """(warm-up reps, timed reps) per worker for a chain of n ops."""
    if n <= 1_000:
        return (2, 8) if quick else (2, 15)
    return (1, 2) if quick else (1, 4)


# ---------------------------------------------------------------------------------------------
# Workers: each returns {n: {"fwd": [s...], "bwd": [s...], "tot": [s...], "grad": [...]}}
# ---------------------------------------------------------------------------------------------
def _measure(build, backward, get_grad, reset, sizes, quick):
    res = {}
    for n in sizes:
        warm, reps = reps_for(n, quick)
        fwd, bwd = [], []
        grad = None
        for i in range(warm + reps):
            reset()
            H.collect()
            t0 = time.perf_counter()
            loss = build(n)
            t1 = time.perf_counter()
            backward(loss)
            t2 = time.perf_counter()
            if grad is None:
                grad = get_grad()
            del loss
            if i >= warm:
                fwd.append(t1 - t0)
                bwd.append(t2 - t1)
        res[str(n)] = {"fwd": fwd, "bwd": bwd, "grad": grad}
    return res


def chain(y: Any, n: int, tanh: Any = None) -> Any:
    """The benchmark's chain: ``n`` ops cycling ``y*MUL``, ``y+ADD``, ``tanh(y)``."""
    for i in range(n):
        k = i % 3
        if k == 0:
            y = y * MUL
        elif k == 1:
            y = y + ADD
        else:
            y = y.tanh() if tanh is None else tanh(y)
    return y


def worker_asyncgrad(mode: str, sizes, quick) -> dict:
    import asyncio

    import asyncgrad as ag

    x = ag.tensor(x0(), dtype=ag.float64, requires_grad=True)

    def build(n):
        return chain(x, n).sum()

    def reset():
        x.grad = None

    def get_grad():
        return x.grad.numpy().tolist()

    if mode == "sync":
        return _measure(build, lambda loss: loss.backward(), get_grad, reset, sizes, quick)

    # One long-lived event loop; only the await is inside the backward timing.
    async def main():
        res = {}
        for n in sizes:
            warm, reps = reps_for(n, quick)
            fwd, bwd = [], []
            grad = None
            for i in range(warm + reps):
                reset()
                H.collect()
                t0 = time.perf_counter()
                loss = build(n)
                t1 = time.perf_counter()
                await ag.backward(loss)
                t2 = time.perf_counter()
                if grad is None:
                    grad = get_grad()
                del loss
                if i >= warm:
                    fwd.append(t1 - t0)
                    bwd.append(t2 - t1)
            res[str(n)] = {"fwd": fwd, "bwd": bwd, "grad": grad}
        return res

    return asyncio.run(main())


def worker_torch(sizes, quick) -> dict:
    import torch

    H.pin_torch_threads()
    x = torch.tensor(x0(), dtype=torch.float64, requires_grad=True)

    def build(n):
        return chain(x, n).sum()

    def reset():
        x.grad = None

    return _measure(
        build, lambda loss: loss.backward(), lambda: x.grad.numpy().tolist(), reset, sizes, quick
    )


def worker_autograd(sizes, quick) -> dict:
    import autograd.numpy as anp
    from autograd import grad, make_vjp

    def f(x):
        return anp.sum(chain(x, f.n, anp.tanh))

    g = grad(f)
    xv = x0()
    res = {}
    for n in sizes:
        f.n = n
        warm, reps = reps_for(n, quick)
        tot, fwd, bwd = [], [], []
        gval = None
        for i in range(warm + reps):
            # grad(f)(x): HIPS autograd's usual call, forward trace and backward together.
            H.collect()
            t0 = time.perf_counter()
            gx = g(xv)
            t1 = time.perf_counter()
            del gx
            # The same work split in two: make_vjp traces the forward, vjp(1.0) runs backward.
            H.collect()
            t2 = time.perf_counter()
            vjp, _ans = make_vjp(f)(xv)
            t3 = time.perf_counter()
            gx2 = vjp(1.0)
            t4 = time.perf_counter()
            if gval is None:
                gval = gx2.tolist()
            del vjp, _ans, gx2
            if i >= warm:
                tot.append(t1 - t0)
                fwd.append(t3 - t2)
                bwd.append(t4 - t3)
        res[str(n)] = {"tot_grad": tot, "fwd": fwd, "bwd": bwd, "grad": gval}
    return res


def worker_floor(sizes, quick) -> dict:
    """No engine: the forward records a tape of what each op needs, the backward walks it."""
    import numpy as np

    xv = x0()
    one = np.float64(1.0)
    state = {"grad": None}

    def build(n):
        tape = []
        y = xv
        for i in range(n):
            k = i % 3
            if k == 0:
                y = y * MUL
                tape.append((0, None))
            elif k == 1:
                y = y + ADD
                tape.append((1, None))
            else:
                y = np.tanh(y)
                tape.append((2, y))
        return (y.sum(), y.shape, tape)

    def backward(loss):
        _, shape, tape = loss
        g = np.full(shape, one)  # d sum / d y
        for k, saved in reversed(tape):
            if k == 0:
                g = g * MUL  # d(y*c)/dy = c
            elif k == 2:
                g = g * (1.0 - saved * saved)  # d tanh(y)/dy = 1 - tanh(y)^2
            # k == 1: d(y+c)/dy = 1, the gradient passes through unchanged
        state["grad"] = g if state["grad"] is None else state["grad"] + g

    def reset():
        state["grad"] = None

    return _measure(build, backward, lambda: state["grad"].tolist(), reset, sizes, quick)


def worker_main(lib: str, argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    if lib == "asyncgrad-sync":
        res = worker_asyncgrad("sync", sizes, a.quick)
    elif lib == "asyncgrad-async":
        res = worker_asyncgrad("async", sizes, a.quick)
    elif lib == "torch":
        res = worker_torch(sizes, a.quick)
    elif lib == "autograd":
        res = worker_autograd(sizes, a.quick)
    elif lib == "numpy-floor":
        res = worker_floor(sizes, a.quick)
    else:
        raise SystemExit(f"unknown library {lib!r}")
    H.emit({"lib": lib, "sizes": res, "blas": H.blas_threads()})


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------
def check_gradients(first_round: dict[str, dict], sizes) -> str:
    """Every library's x.grad must match the NumPy floor; raise SystemExit otherwise."""
    import numpy as np

    lines = []
    for n in sizes:
        ref = np.asarray(first_round["numpy-floor"]["sizes"][str(n)]["grad"])
        for lib, r in first_round.items():
            g = np.asarray(r["sizes"][str(n)]["grad"])
            if g.shape != ref.shape or not np.allclose(g, ref, rtol=1e-9, atol=0.0):
                err = float(np.max(np.abs(g - ref) / np.abs(ref))) if g.shape == ref.shape else -1
                raise SystemExit(
                    f"bench_chain: gradient of {LABELS[lib]} at N={n} does not "
                    f"match the NumPy floor (max relative error {err:.3g})"
                )
            lines.append(float(np.max(np.abs(g - ref) / np.abs(ref))))
    return (
        f"Gradient check passed: x.grad of every library matches the NumPy floor at every N "
        f"(max relative difference {max(lines):.1e}; tolerance 1e-9)."
    )


ROUNDS = 7


def run(rounds: int = ROUNDS, quick: bool = False, trees: Sequence[str] = ()) -> H.Report:
    """``trees``: labels registered with H.parse_trees; their asyncgrad rows run in the same
    rounds."""
    cmd = (
        "python benchmarks/bench_chain.py"
        + (f" --rounds {rounds}" if rounds != ROUNDS else "")
        + (" --quick" if quick else "")
        + "".join(f" --tree {t}=..." for t in trees)
    )
    print(
        f"bench_chain: chain of N ops on {SIZE}-element float64 tensors, "
        f"{rounds} interleaved rounds",
        flush=True,
    )
    if H.missing_reason("numpy-floor") is not None:  # pragma: no cover
        raise SystemExit("numpy is required")
    libs = H.available_libs(LIBS, LABELS)
    skipped = [LABELS[lib] + ": " + str(H.missing_reason(lib)) for lib in LIBS if lib not in libs]
    tree_libs = [f"{lib}@{t}" for t in trees for lib in ("asyncgrad-sync", "asyncgrad-async")]
    for tl in tree_libs:
        name, _, t = tl.partition("@")
        LABELS[tl] = f"{LABELS[name]} [{t}]"
    libs += tree_libs
    args = ["--sizes", ",".join(map(str, SIZES))] + (["--quick"] if quick else [])
    results = H.interleaved_rounds(Path(__file__), libs, rounds, lambda lib, r: args)
    check = check_gradients({lib: results[lib][0] for lib in libs}, SIZES)
    print(check)

    # Per round: median over reps inside the worker; then median over rounds.
    summary: dict[tuple[str, int], dict[str, Any]] = {}

    def entry(
        per: list[dict], fwd_key: str | None, bwd_key: str | None, tot_key: str | None, n: int
    ) -> dict[str, Any]:
        def rounds_of(key):
            return None if key is None else [H.median(p[key]) / n * 1e6 for p in per]

        fwd_r, bwd_r = rounds_of(fwd_key), rounds_of(bwd_key)
        tot_r = (
            rounds_of(tot_key) if tot_key else [f + b for f, b in zip(fwd_r, bwd_r, strict=True)]
        )
        main = bwd_r if bwd_r is not None else tot_r
        m = H.median(main)
        return {
            "fwd": None if fwd_r is None else H.median(fwd_r),
            "bwd": None if bwd_r is None else H.median(bwd_r),
            "tot": H.median(tot_r),
            "fwd_r": fwd_r,
            "bwd_r": bwd_r,
            "tot_r": tot_r,
            "spread": (max(main) - min(main)) / 2 / m * 100 if len(main) > 1 else None,
        }

    for lib in libs:
        for n in SIZES:
            per = [r["sizes"][str(n)] for r in results[lib]]
            if lib == "autograd":
                summary[("autograd-grad", n)] = entry(per, None, None, "tot_grad", n)
                summary[("autograd-vjp", n)] = entry(per, "fwd", "bwd", None, n)
            else:
                summary[(lib, n)] = entry(per, "fwd", "bwd", None, n)

    labels = dict(LABELS)
    labels["autograd-grad"] = "HIPS autograd grad(f)(x): fwd+bwd total only"
    labels["autograd-vjp"] = "HIPS autograd make_vjp(f)(x) + vjp(1.0)"
    order = [
        "asyncgrad-sync",
        "asyncgrad-async",
        *tree_libs,
        "torch",
        "autograd-grad",
        "autograd-vjp",
        "numpy-floor",
    ]
    rows = []
    for n in SIZES:
        base = summary.get((BASELINE, n))
        for key in order:
            s = summary.get((key, n))
            if s is None:
                continue
            rows.append(
                [
                    labels[key],
                    f"{n:,}",
                    H.fmt(s["fwd"]),
                    H.fmt(s["bwd"]),
                    H.fmt(s["tot"]),
                    H.fmt_ratio(H.paired_ratio(s["bwd_r"], base and base["bwd_r"])),
                    H.fmt_ratio(H.paired_ratio(s["tot_r"], base and base["tot_r"])),
                    "n/a" if s["spread"] is None else f"±{s['spread']:.0f}%",
                ]
            )
    headers = [
        "library / call",
        "N",
        "forward µs/op",
        "backward µs/op",
        "fwd+bwd µs/op",
        "backward vs PyTorch",
        "fwd+bwd vs PyTorch",
        "spread",
    ]
    tab = H.table(headers, rows)
    legend = (
        f"Chain: x (16 float64, requires grad) -> N ops cycling `y*{MUL}`, `y+{ADD}`, `tanh(y)` "
        "-> `y.sum()`. Times are µs per chain op (time / N): backward timed alone on a freshly "
        "built graph; forward (graph construction) timed separately. Every repetition starts "
        "with a full `gc.collect()` outside the timed regions, so the previous repetition's "
        "garbage is not charged to it; the collector runs as usual inside them (a growing "
        "graph of Python objects triggers its collections during the forward). "
        "Median over reps within a "
        f"worker, then median over {rounds} rounds, each library in a fresh process, rounds "
        "interleaved. Ratios use PyTorch CPU as the baseline (below 1.00x = faster than "
        "PyTorch). `spread` is half the range of the backward (or, for grad(f)(x), the "
        "total) across rounds, relative to the median. HIPS autograd has no separate backward "
        "in its grad(f)(x) call, so that row has only a fwd+bwd total; the make_vjp row "
        "splits the same work into tracing (forward) and vjp(1.0) (backward). "
        + H.PAIRED_NOTE
        + " "
        + H.THREADS_NOTE
    )
    print()
    print(tab)
    print()

    rep = H.Report(title="Chain backward: µs per node", command=cmd)
    rep.sections.append(legend)
    rep.sections.append(tab)
    rep.sections.append(check)
    if skipped:
        rep.sections.append("Skipped: " + "; ".join(skipped))

    # Notes: only what the numbers show.
    for n in SIZES:
        fl = summary.get(("numpy-floor", n))
        t = summary.get(("torch", n))
        for key in ("asyncgrad-sync", "asyncgrad-async"):
            s = summary.get((key, n))
            if s is None or fl is None:
                continue
            over = s["bwd"] - fl["bwd"]
            rep.notes.append(
                f"N={n:,}, {labels[key]}: backward {s['bwd']:.2f} µs/op, {over:.2f} µs/op "
                f"({over / s['bwd'] * 100:.0f}% of it) more than the floor's {fl['bwd']:.2f}, "
                "which does the same elementwise math with no engine"
                + (f"; PyTorch's backward is {t['bwd']:.2f} µs/op." if t else ".")
            )
        a = summary.get(("asyncgrad-sync", n))
        if t is not None and fl is not None and a is not None:
            rep.notes.append(
                f"N={n:,}: PyTorch's backward ({t['bwd']:.2f} µs/op) is "
                f"{t['bwd'] / fl['bwd']:.1f}x the floor's ({fl['bwd']:.2f}); forward (graph "
                f"building) costs {a['fwd']:.2f} µs/op in asyncgrad, {t['fwd']:.2f} in PyTorch "
                f"and {fl['fwd']:.2f} in the floor."
            )

    spreads = [v["spread"] for v in summary.values() if v["spread"] is not None]
    if spreads:
        rep.notes.append(
            f"Round-to-round spread reaches ±{max(spreads):.0f}% in this run; differences "
            "smaller than that are within this machine's run-to-run variation."
        )
    for key in ("asyncgrad-sync", "asyncgrad-async"):
        for n in SIZES:
            s, t = summary.get((key, n)), summary.get(("torch", n))
            name = f"chain backward µs/node <= PyTorch CPU, {labels[key]}, N={n:,}"
            if s is None or t is None:
                rep.targets.append((name, "n/a", "PyTorch not installed"))
            else:
                r = H.paired_ratio(s["bwd_r"], t["bwd_r"])
                rep.targets.append(
                    (
                        name,
                        H.verdict_at_most(r, s["bwd"] / t["bwd"], 1.0),
                        f"paired ratio {r:.2f}x; medians {s['bwd']:.2f} vs {t['bwd']:.2f} µs/op",
                    )
                )
    # The backward per node against another tree's, measured in the same rounds.
    for tl in tree_libs:
        name = tl.partition("@")[0]
        for n in SIZES:
            s, o = summary.get((name, n)), summary.get((tl, n))
            if s is None or o is None:
                continue
            r = H.paired_ratio(s["bwd_r"], o["bwd_r"])
            rep.targets.append(
                (
                    f"chain backward µs/node within 5% of {labels[tl]}, {labels[name]}, N={n:,}",
                    H.verdict_at_most(r, s["bwd"] / o["bwd"], 1.05),
                    f"paired ratio {r:.2f}x; medians {s['bwd']:.2f} vs {o['bwd']:.2f} µs/op",
                )
            )
    # The forward (graph building) of one op, and forward + backward, against PyTorch's.
    for key, limit, what, field in (
        ("asyncgrad-sync", 1.5, "chain forward µs/op <= 1.5x PyTorch CPU", "fwd_r"),
        ("asyncgrad-sync", 1.0, "chain fwd+bwd µs/op <= PyTorch CPU", "tot_r"),
        ("asyncgrad-async", 1.0, "chain fwd+bwd µs/op <= PyTorch CPU", "tot_r"),
    ):
        for n in SIZES:
            s, t = summary.get((key, n)), summary.get(("torch", n))
            name = f"{what}, {labels[key]}, N={n:,}"
            if s is None or t is None:
                rep.targets.append((name, "n/a", "PyTorch not installed"))
                continue
            part = "fwd" if field == "fwd_r" else "tot"
            r = H.paired_ratio(s[field], t[field])
            rep.targets.append(
                (
                    name,
                    H.verdict_at_most(r, s[part] / t[part], limit),
                    f"paired ratio {r:.2f}x; medians {s[part]:.2f} vs {t[part]:.2f} µs/op",
                )
            )
    rep.data = {
        "summary": {f"{k[0]}@{k[1]}": v for k, v in summary.items()},
        "blas": {lib: results[lib][0]["blas"] for lib in libs},
    }
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="fewer reps per worker")


if __name__ == "__main__":
    main()
