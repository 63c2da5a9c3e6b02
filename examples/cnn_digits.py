"""Train a small CNN on scikit-learn's digits, then look inside one training step.

    python examples/cnn_digits.py [--epochs 20] [--device cpu|cuda] [--out DIR] [--seed 0]

What it does, in order:

* trains a two-layer CNN (conv 1->32, 3x3 -> relu -> max-pool 2 -> conv 32->64, 3x3 -> relu ->
  max-pool 2 -> linear 256->10) on the 8x8 digits with Adam, mini-batches from
  ``ag.utils.data.DataLoader``, a progress bar (tqdm) per epoch, and prints the test accuracy;
* saves the weights with ``ag.save`` (``.npz``: no pickle, so loading runs no code) and checks
  that a fresh model loaded from the file predicts the same;
* profiles one training step with ``ag.autograd.profiler.profile()`` and writes a Chrome trace
  (open it at https://ui.perfetto.dev) and prints the top nodes;
* writes the backward graph of one loss as Graphviz source (``ag.viz.make_dot``), and renders
  it to SVG when the ``graphviz`` package and its ``dot`` program are installed.

It runs on the GPU when one is available (``--device cuda``), otherwise on the CPU, in well
under a minute on two cores.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

# One thread per BLAS call: small matrices gain nothing from more, and a small machine crawls
# when BLAS threads oversubscribe it (set before NumPy loads; the environment can override).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from tqdm import tqdm  # noqa: E402

import asyncgrad as ag  # noqa: E402
from asyncgrad import nn  # noqa: E402
from asyncgrad.utils.data import DataLoader, TensorDataset  # noqa: E402

F = nn.functional
SEED = 0


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.flatten = nn.Flatten()
        self.head = nn.Linear(64 * 2 * 2, 10)

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 32 x 4 x 4
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 64 x 2 x 2
        return self.head(self.flatten(x))


def load_data(device: str) -> tuple[TensorDataset, ag.Tensor, ag.Tensor]:
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # N x 1 x 8 x 8, in [0, 1]
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=SEED, stratify=digits.target
    )
    train = TensorDataset(
        ag.tensor(x_train, device=device), ag.tensor(y_train.astype(np.int64), device=device)
    )
    return (
        train,
        ag.tensor(x_test, device=device),
        ag.tensor(y_test.astype(np.int64), device=device),
    )


def accuracy(model: nn.Module, x: ag.Tensor, y: ag.Tensor) -> float:
    with ag.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean().item())


def train_step(model: nn.Module, opt: ag.optim.Optimizer, xb: ag.Tensor, yb: ag.Tensor) -> float:
    loss = F.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.item())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--device", default="cuda" if ag.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path, default=Path("cnn_digits_out"))
    ap.add_argument("--seed", type=int, default=SEED, help="seeds the weights and the shuffling")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)

    ag.manual_seed(a.seed)
    train, x_test, y_test = load_data(a.device)
    model = DigitsCNN().to(a.device)
    opt = ag.optim.Adam(model.parameters(), lr=3e-3)
    loader = DataLoader(
        train, batch_size=64, shuffle=True, generator=ag.Generator().manual_seed(a.seed)
    )

    print(f"training on {a.device}: {len(train)} images, {len(x_test)} held out")
    t0 = time.perf_counter()
    for epoch in range(1, a.epochs + 1):
        bar = tqdm(loader, desc=f"epoch {epoch:2d}", leave=False, disable=a.no_progress)
        for xb, yb in bar:
            bar.set_postfix(loss=f"{train_step(model, opt, xb, yb):.3f}")
    seconds = time.perf_counter() - t0
    acc = accuracy(model, x_test, y_test)
    print(f"test accuracy {acc:.2%} after {a.epochs} epochs ({seconds:.1f} s)")

    # Weights to a file and back: a fresh model from the file predicts the same.
    path = a.out / "digits_cnn.npz"
    ag.save(model.state_dict(), path)
    fresh = DigitsCNN().to(a.device)
    fresh.load_state_dict(ag.load(path, map_location=a.device))
    same = accuracy(fresh, x_test, y_test) == acc
    print(f"saved the weights to {path}; reloaded model agrees: {same}")

    # One training step under the profiler: a Chrome trace and the nodes that took longest.
    xb, yb = next(iter(loader))
    with ag.autograd.profiler.profile() as prof:
        train_step(model, opt, xb, yb)
    trace = a.out / "step_trace.json"
    prof.export_chrome_trace(trace)
    print(f"trace of one step: {trace} (open it at https://ui.perfetto.dev)")
    print(prof.table(row_limit=8))

    # The backward graph of one loss, as Graphviz source (and SVG when graphviz is installed).
    loss = F.cross_entropy(model(xb), yb)
    dot = ag.viz.make_dot(loss, params=dict(model.named_parameters()))
    src = a.out / "backward_graph.dot"
    src.write_text(dot.source)
    print(f"backward graph: {src}", end="")
    try:
        print(f", rendered to {dot.render(a.out / 'backward_graph', format='svg')}")
    except Exception as e:  # no graphviz package or no `dot` program: the source is enough
        print(f" (not rendered: {e})")


if __name__ == "__main__":
    main()
