"""What batching buys a gradient: cost per call and per sample as the batch grows.

Before coalescing concurrent gradient requests into one pass, measure what it can save: for a
batch of B samples, one forward and one ``grad(out.sum(), x)`` with respect to the input
(``x`` of shape (B, features), the weights requiring grad as ``nn.Linear`` parameters do),
timed per call and per sample. The per-call overhead (the engine's, Python's) is what batching
amortises; the per-sample cost at large B is the kernels' floor. Two models, float32:

  - serving: the MLP 32-64-64-1 of server_load.py (a request there is 8 samples);
  - smoothgrad: the MLP 64-1024-1024-1024-10 of server_smoothgrad.py (a request there is 32
    noisy copies of one input), the gradient of the first class's score.

Libraries: asyncgrad (``await ag.grad`` on an event loop) and PyTorch CPU
(``torch.autograd.grad``), each in a fresh single-threaded process, interleaved rounds; medians
over rounds. No garbage collection is forced before or inside the timed blocks.

Usage: python benchmarks/bench_batching.py [--rounds R] [--quick]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
from bench_small import init

MODELS = {"serving": (32, 64, 64, 1), "smoothgrad": (64, 1024, 1024, 1024, 10)}
BATCHES = {"serving": (1, 8, 16, 32, 64, 128, 256, 512), "smoothgrad": (1, 8, 32, 64, 128, 256)}
LIBS = ["asyncgrad", "torch"]
LABELS = {"asyncgrad": "asyncgrad await ag.grad", "torch": "PyTorch CPU (1 thread)"}
TARGET_S = 0.05  # time per measurement, about


def _reps(one_s: float, quick: bool) -> int:
    return max(3, int((TARGET_S / 3 if quick else TARGET_S) / max(one_s, 1e-7)))


def worker_asyncgrad(quick: bool) -> dict[str, Any]:
    import asyncio

    import asyncgrad as ag
    import asyncgrad.nn.functional as F

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for model, sizes in MODELS.items():
            for b in BATCHES[model]:
                w, xv = init(sizes, b)
                p = [ag.nn.Parameter(a) for a in w]
                x = ag.tensor(xv, requires_grad=True)
                n = len(p) // 2

                async def call(p: Any = p, x: Any = x, n: int = n) -> Any:
                    h = x
                    for i in range(n):
                        h = F.linear(h, p[2 * i], p[2 * i + 1])
                        if i < n - 1:
                            h = F.relu(h)
                    return (await ag.grad(h[:, 0].sum(), x))[0]

                g = await call()
                t0 = time.perf_counter()
                await call()
                reps = _reps(time.perf_counter() - t0, quick)
                t0 = time.perf_counter()
                for _ in range(reps):
                    await call()
                out[f"{model}/{b}"] = (time.perf_counter() - t0) / reps * 1e6
                out[f"{model}/{b}/grad"] = float(g.sum().item())
        return out

    return asyncio.run(main())


def worker_torch(quick: bool) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    H.pin_torch_threads()
    out: dict[str, Any] = {}
    for model, sizes in MODELS.items():
        for b in BATCHES[model]:
            w, xv = init(sizes, b)
            p = [torch.nn.Parameter(torch.from_numpy(a)) for a in w]
            x = torch.from_numpy(xv).requires_grad_(True)
            n = len(p) // 2

            def call(p: Any = p, x: Any = x, n: int = n) -> Any:
                h = x
                for i in range(n):
                    h = F.linear(h, p[2 * i], p[2 * i + 1])
                    if i < n - 1:
                        h = F.relu(h)
                return torch.autograd.grad(h[:, 0].sum(), x)[0]

            g = call()
            t0 = time.perf_counter()
            call()
            reps = _reps(time.perf_counter() - t0, quick)
            t0 = time.perf_counter()
            for _ in range(reps):
                call()
            out[f"{model}/{b}"] = (time.perf_counter() - t0) / reps * 1e6
            out[f"{model}/{b}/grad"] = float(g.sum().item())
    return out


def worker_main(lib: str, argv: list[str]) -> None:
    quick = "--quick" in argv
    if lib == "asyncgrad":
        res = worker_asyncgrad(quick)
    elif lib == "torch":
        res = worker_torch(quick)
    else:
        raise SystemExit(f"unknown library {lib!r}")
    H.emit({"lib": lib, **res})


ROUNDS = 3


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    cmd = "python benchmarks/bench_batching.py" + (" --quick" if quick else "")
    print(
        f"bench_batching: per-call and per-sample cost by batch size, {rounds} rounds", flush=True
    )
    libs = [lib for lib in LIBS if H.missing_reason(lib) is None]
    results = H.interleaved_rounds(Path(__file__), libs, rounds, lambda lib, r: ["--quick"] * quick)
    rep = H.Report(
        title="Batching: gradient cost per call and per sample by batch size", command=cmd
    )
    for model in MODELS:
        for b in BATCHES[model]:
            ref = results[libs[0]][0][f"{model}/{b}/grad"]
            for lib in libs:
                got = results[lib][0][f"{model}/{b}/grad"]
                if abs(got - ref) > 1e-3 * max(1.0, abs(ref)):
                    raise SystemExit(f"bench_batching: {lib}'s gradient differs at {model}/{b}")
    for model, sizes in MODELS.items():
        rows = []
        for b in BATCHES[model]:
            row = [str(b)]
            med = {lib: H.median([r[f"{model}/{b}"] for r in results[lib]]) for lib in libs}
            for lib in libs:
                row += [f"{med[lib]:.1f}", f"{med[lib] / b:.2f}"]
            if len(libs) == 2:
                row.append(f"{med[libs[0]] / med[libs[1]]:.2f}x")
            rows.append(row)
        head = ["samples per call"]
        for lib in libs:
            head += [f"{LABELS[lib]}: µs/call", "µs/sample"]
        if len(libs) == 2:
            head.append("asyncgrad / PyTorch")
        rep.sections += [f"MLP {'-'.join(map(str, sizes))} ({model}):", H.table(head, rows)]
    rep.sections.append(
        "Gradient check passed: at every batch size, both libraries' input gradients sum to the "
        "same value (relative tolerance 1e-3)."
    )
    print(rep.text(), flush=True)
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main)


if __name__ == "__main__":
    main()
