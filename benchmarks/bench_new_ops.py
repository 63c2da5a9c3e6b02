"""Forward + backward of the common ops and modules added for torch's wider API, against PyTorch.

Each case builds its inputs from the same NumPy arrays in both libraries (medium sizes, float32),
then times a step: the op's forward, ``.sum()`` of its (first) output and ``.backward()``.
Written once against torch's API: the same code runs with ``T`` being ``torch`` or ``asyncgrad``.
A worker warms each case up 3 steps, then times REPS steps; reported: the median step in ms,
median over interleaved rounds, each library in a fresh single-threaded process, and the ratio
asyncgrad / PyTorch.

Usage: python benchmarks/bench_new_ops.py [--rounds R] [--quick]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

ROUNDS = 3
REPS = 20
LIBS = ["asyncgrad", "torch"]
LABELS = {"asyncgrad": "asyncgrad", "torch": "PyTorch CPU (1 thread)"}


def _arr(shape: tuple[int, ...], seed: int = 0, low: float | None = None) -> Any:
    import numpy as np

    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(np.float32)
    if low is not None:
        a = np.abs(a) + low
    return a


# Each case: (name, builder). A builder takes the library ``T`` and returns a function that runs
# the forward once (its output's first tensor is summed and back-propagated).
def _cases() -> list[tuple[str, Callable[[Any], Callable[[], Any]]]]:
    import numpy as np

    def leaf(T: Any, shape: tuple[int, ...], seed: int = 0, low: float | None = None) -> Any:
        return T.tensor(_arr(shape, seed, low), requires_grad=True)

    def module(T: Any, make: Callable[[Any], Any], *shapes: tuple[int, ...]) -> Callable[[], Any]:
        m = make(T)
        xs = [leaf(T, s, i) for i, s in enumerate(shapes)]
        return lambda: m(*xs)

    def F(T: Any) -> Any:
        return T.nn.functional

    labels = np.random.default_rng(1).integers(0, 2, (64, 100)).astype(np.float32)
    return [
        (
            "conv_transpose1d 16x32x128, 32->16, k5 s2",
            lambda T: (lambda x, w: lambda: F(T).conv_transpose1d(x, w, stride=2))(
                leaf(T, (16, 32, 128)), leaf(T, (32, 16, 5), 1)
            ),
        ),
        (
            "conv_transpose2d 8x32x32x32, 32->16, k4 s2",
            lambda T: (lambda x, w: lambda: F(T).conv_transpose2d(x, w, stride=2, padding=1))(
                leaf(T, (8, 32, 32, 32)), leaf(T, (32, 16, 4, 4), 1)
            ),
        ),
        (
            "conv3d 4x8x16x16x16, 8->16, k3",
            lambda T: (lambda x, w: lambda: F(T).conv3d(x, w, padding=1))(
                leaf(T, (4, 8, 16, 16, 16)), leaf(T, (16, 8, 3, 3, 3), 1)
            ),
        ),
        (
            "max_pool1d 32x64x256, k3 s2",
            lambda T: (lambda x: lambda: F(T).max_pool1d(x, 3, 2))(leaf(T, (32, 64, 256))),
        ),
        (
            "avg_pool1d 32x64x256, k4",
            lambda T: (lambda x: lambda: F(T).avg_pool1d(x, 4))(leaf(T, (32, 64, 256))),
        ),
        (
            "max_pool3d 4x16x16x16x16, k2",
            lambda T: (lambda x: lambda: F(T).max_pool3d(x, 2))(leaf(T, (4, 16, 16, 16, 16))),
        ),
        (
            "adaptive_avg_pool2d 32x64x28x28 -> 7x7",
            lambda T: (lambda x: lambda: F(T).adaptive_avg_pool2d(x, 7))(leaf(T, (32, 64, 28, 28))),
        ),
        (
            "adaptive_max_pool2d 32x64x28x28 -> 7x7",
            lambda T: (lambda x: lambda: F(T).adaptive_max_pool2d(x, 7))(leaf(T, (32, 64, 28, 28))),
        ),
        (
            "pixel_shuffle 16x64x32x32, r2",
            lambda T: (lambda x: lambda: F(T).pixel_shuffle(x, 2))(leaf(T, (16, 64, 32, 32))),
        ),
        (
            "pad reflect 16x32x64x64, 2",
            lambda T: (lambda x: lambda: F(T).pad(x, (2, 2, 2, 2), mode="reflect"))(
                leaf(T, (16, 32, 64, 64))
            ),
        ),
        (
            "unfold 16x16x32x32, k3",
            lambda T: (lambda x: lambda: F(T).unfold(x, 3, padding=1))(leaf(T, (16, 16, 32, 32))),
        ),
        (
            "LSTMCell 128x256 -> 512",
            lambda T: module(T, lambda T: T.nn.LSTMCell(256, 512), (128, 256)),
        ),
        (
            "GRUCell 128x256 -> 512",
            lambda T: module(T, lambda T: T.nn.GRUCell(256, 512), (128, 256)),
        ),
        (
            "RNN tanh 2 layers, 32x50x128 -> 256",
            lambda T: module(
                T, lambda T: T.nn.RNN(128, 256, num_layers=2, batch_first=True), (32, 50, 128)
            ),
        ),
        (
            "TransformerDecoderLayer d256 h8, 16x32 on 16x32",
            lambda T: module(
                T,
                lambda T: T.nn.TransformerDecoderLayer(256, 8, 1024, dropout=0.0, batch_first=True),
                (16, 32, 256),
                (16, 32, 256),
            ),
        ),
        (
            "Transformer 2+2 layers d128 h4, 16x32",
            lambda T: module(
                T,
                lambda T: T.nn.Transformer(128, 4, 2, 2, 512, dropout=0.0, batch_first=True),
                (16, 32, 128),
                (16, 32, 128),
            ),
        ),
        (
            "BCELoss 64x100",
            lambda T: (lambda x, y: lambda: F(T).binary_cross_entropy(T.sigmoid(x), y))(
                leaf(T, (64, 100)), T.tensor(labels)
            ),
        ),
        (
            "KLDivLoss 256x1000",
            lambda T: (
                lambda x, y: (
                    lambda: F(T).kl_div(
                        F(T).log_softmax(x, -1), F(T).softmax(y, -1), reduction="batchmean"
                    )
                )
            )(leaf(T, (256, 1000)), T.tensor(_arr((256, 1000), 1))),
        ),
        (
            "SmoothL1Loss 256x1000",
            lambda T: (lambda x, y: lambda: F(T).smooth_l1_loss(x, y))(
                leaf(T, (256, 1000)), T.tensor(_arr((256, 1000), 1))
            ),
        ),
        (
            "HuberLoss 256x1000",
            lambda T: (lambda x, y: lambda: F(T).huber_loss(x, y, delta=0.5))(
                leaf(T, (256, 1000)), T.tensor(_arr((256, 1000), 1))
            ),
        ),
        (
            "cosine_similarity 1024x256",
            lambda T: (lambda x, y: lambda: F(T).cosine_similarity(x, y))(
                leaf(T, (1024, 256)), leaf(T, (1024, 256), 1)
            ),
        ),
        (
            "hardswish 256x4096",
            lambda T: (lambda x: lambda: F(T).hardswish(x))(leaf(T, (256, 4096))),
        ),
        (
            "cumprod 256x1024, dim 1",
            lambda T: (lambda x: lambda: T.cumprod(x, 1))(leaf(T, (256, 1024), 0, 0.5)),
        ),
        (
            "addmm 512x512 @ 512x512",
            lambda T: (lambda b, x, y: lambda: T.addmm(b, x, y))(
                leaf(T, (512,)), leaf(T, (512, 512), 1), leaf(T, (512, 512), 2)
            ),
        ),
        (
            "EmbeddingBag 10000x128, 512 bags of 20, mean",
            lambda T: (lambda m, idx: lambda: m(idx))(
                T.nn.EmbeddingBag(10000, 128, mode="mean"),
                T.tensor(np.random.default_rng(2).integers(0, 10000, (512, 20))),
            ),
        ),
    ]


def worker_main(lib: str, args: list[str]) -> None:
    quick = "--quick" in args
    if lib == "torch":
        import torch as T

        H.pin_torch_threads()
    else:
        import asyncgrad as T
    reps = 3 if quick else REPS
    out: dict[str, Any] = {}
    for name, build in _cases():
        try:
            fn = build(T)

            def step(fn: Callable[[], Any] = fn) -> None:
                y = fn()
                y = y[0] if isinstance(y, tuple) else y
                y.sum().backward()

            for _ in range(3):
                step()
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            out[name] = H.median(times) * 1e3
        except Exception as e:  # a missing op shows as n/a in the table, with its error
            out[name] = f"{type(e).__name__}: {e}"[:120]
    H.emit({"cases": out, "blas": H.blas_threads()})


def run(rounds: int, quick: bool) -> H.Report:
    libs = H.available_libs(LIBS, LABELS)
    results = H.interleaved_rounds(
        __file__, libs, rounds, lambda lib, r: ["--quick"] if quick else [], timeout=900
    )
    names = [n for n, _ in _cases()]
    rows = [["case", *(LABELS[lib] + " ms" for lib in libs), "asyncgrad / PyTorch"]]
    worst = None
    errors = []
    for n in names:
        meds: dict[str, float | None] = {}
        for lib in libs:
            vals = [r["cases"][n] for r in results[lib]]
            if all(isinstance(v, float) for v in vals):
                meds[lib] = H.median(vals)
            else:
                meds[lib] = None
                errors.append(f"{lib} {n}: {next(v for v in vals if isinstance(v, str))}")
        a, t = meds.get("asyncgrad"), meds.get("torch")
        ratio = a / t if a is not None and t is not None else None
        if ratio is not None and (worst is None or ratio > worst[1]):
            worst = (n, ratio)
        rows.append([n, *(H.fmt(meds[lib], ".3f") for lib in libs), H.fmt_ratio(ratio)])
    cmd = "python benchmarks/bench_new_ops.py" + (" --quick" if quick else "")
    rep = H.Report(title="New ops and modules: forward + backward against PyTorch", command=cmd)
    rep.sections.append(H.table(rows[0], rows[1:]))
    if errors:
        rep.sections.append("Failed: " + "; ".join(errors))
    if worst is not None:
        rep.targets.append(
            (
                "every new op and module <= 2x PyTorch CPU",
                "MET" if worst[1] <= 2.0 else "NOT MET",
                f"slowest: {worst[0]}, {worst[1]:.2f}x",
            )
        )
    print(rep.text())
    return rep


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main, quick_help="3 timed steps per case")


if __name__ == "__main__":
    main()
