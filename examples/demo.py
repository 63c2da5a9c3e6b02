"""Train a digit classifier and serve saliency maps from it, in one event loop, four ways.

One asyncio event loop (uvloop when it is installed) runs these tasks side by side:

* the trainer: an MLP (64-512-512-10) on scikit-learn's bundled digits, one Adam step per
  mini-batch;
* clients: each repeatedly asks the live model which pixels matter for one test image, the
  gradient of that image's loss with respect to its pixels, like requests to a model server;
* a ticker: sleeps 1 ms in a loop and records how late it wakes up, that is how long the loop
  was kept from running anything else (a stall: every other request waits that long).

The same work is done each way, and measured:

* asyncgrad, awaited: ``await ag.backward(loss)`` and ``await ag.grad(...)``, the trainer's
  forward on a compute thread with ``await ag.run(...)``. Backward passes are coroutines that
  yield to the loop about every millisecond; requests are awaited with a higher priority than
  training steps (and, in the second row, with the same priority). The clients use the live
  model while it trains: an optimizer step never changes the weights a pending backward pass
  saved (See NOTE [Serving while training]).
* asyncgrad, blocking: ``loss.backward()`` and ``ag.grad_sync(...)`` called inside the loop,
  which is what calling PyTorch inline does: the loop waits for each whole step.
* with PyTorch installed, PyTorch inline, and PyTorch through ``asyncio.to_thread`` (where a
  lock keeps torch's in-place optimizer step from racing the requests' backward passes).

It ends with a verdict computed from the numbers it printed.

    python examples/demo.py [--epochs 15] [--clients 4] [--no-torch]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import os
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

# One thread per BLAS call (set before NumPy and PyTorch load; the environment can override):
# the loop, the engine's compute threads and PyTorch's threads already share the cores, and
# BLAS's own threads on top of them oversubscribe a small machine, which then crawls.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from tqdm import tqdm  # noqa: E402

import asyncgrad as ag  # noqa: E402

F = ag.nn.functional
SEED = 0
SIZES = (64, 512, 512, 10)
BATCH_SIZE = 64
LR = 1e-3
TICK_S = 0.001
CLIENT_PRIORITY = 1  # requests overtake training steps when both wait for the CPU worker

AWAITED = "asyncgrad, awaited"
AWAITED_EQUAL = "asyncgrad, awaited, equal priority"
BLOCKING = "asyncgrad, blocking"
TORCH_INLINE = "PyTorch, inline"
TORCH_THREAD = "PyTorch, to_thread"
ASYNCGRAD_WAYS = (AWAITED, AWAITED_EQUAL, BLOCKING)
TORCH_WAYS = (TORCH_INLINE, TORCH_THREAD)


@dataclass
class Stats:
    way: str = AWAITED
    steps: int = 0
    served: int = 0
    loss: float = 0.0  # of the last training batch
    accuracy: float = 0.0
    wall_s: float = 0.0
    loop: str = ""
    stalls_s: list[float] = field(default_factory=list)  # how late each tick woke up

    @property
    def max_stall_s(self) -> float:
        return max(self.stalls_s, default=0.0)

    @property
    def p99_stall_s(self) -> float:
        return float(np.percentile(self.stalls_s, 99)) if self.stalls_s else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s else 0.0

    @property
    def served_per_s(self) -> float:
        return self.served / self.wall_s if self.wall_s else 0.0


def load_data() -> list[np.ndarray]:
    """8x8 digit images as rows of 64 pixels in [0, 1]; a fixed, stratified 75/25 split."""
    images, labels = load_digits(return_X_y=True)
    images = (images / 16.0).astype(np.float32)
    labels = labels.astype(np.int64)
    return train_test_split(images, labels, test_size=0.25, random_state=SEED, stratify=labels)


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


# ============================================================================ the model, two ways
class Model:
    """What a way needs from its library: a training step and a request, both on the live
    model. ``step`` and ``serve`` return awaitables; how they run is the way's business."""

    def step(self, x: np.ndarray, y: np.ndarray) -> Awaitable[float]:
        raise NotImplementedError

    def serve(self, image: np.ndarray, label: int) -> Awaitable[np.ndarray]:
        raise NotImplementedError

    def predict(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def asyncgrad_mlp() -> ag.nn.Sequential:
    layers: list[ag.nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(SIZES):
        layers += [ag.nn.Linear(fan_in, fan_out), ag.nn.ReLU()]
    return ag.nn.Sequential(*layers[:-1])


class AsyncgradModel(Model):
    def __init__(self, awaited: bool, client_priority: int = CLIENT_PRIORITY) -> None:
        ag.manual_seed(SEED)
        self.net = asyncgrad_mlp()
        self.optimizer = ag.optim.Adam(self.net.parameters(), lr=LR)
        self.awaited = awaited
        self.client_priority = client_priority

    def _loss(self, x: np.ndarray, y: np.ndarray) -> ag.Tensor:
        return F.cross_entropy(self.net(ag.from_numpy(x)), ag.from_numpy(y))

    async def step(self, x: np.ndarray, y: np.ndarray) -> float:
        self.optimizer.zero_grad()
        if self.awaited:
            # The forward on a compute thread (NumPy releases the GIL in its matmuls), the
            # backward as a coroutine: the loop serves clients while both run.
            loss = await ag.run(self._loss, x, y)
            await ag.backward(loss)
        else:
            loss = self._loss(x, y)
            loss.backward()  # blocks the loop until the whole backward pass is done
        self.optimizer.step()
        return loss.item()

    async def serve(self, image: np.ndarray, label: int) -> np.ndarray:
        """d loss / d pixels for one image: what a client asks for."""
        x = ag.tensor(image[None], requires_grad=True)
        loss = F.cross_entropy(self.net(x), ag.tensor([label]))
        if self.awaited:
            (grad,) = await ag.grad(loss, [x], priority=self.client_priority)
        else:
            (grad,) = ag.grad_sync(loss, [x])
        return grad.numpy()[0]

    def predict(self, x: np.ndarray) -> np.ndarray:
        with ag.no_grad():
            return self.net(ag.from_numpy(x)).argmax(dim=1).numpy()


class TorchModel(Model):
    def __init__(self, threaded: bool) -> None:
        import torch

        self.torch = torch
        torch.manual_seed(SEED)
        layers: list[Any] = []
        for fan_in, fan_out in itertools.pairwise(SIZES):
            layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*layers[:-1])
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=LR)
        self.threaded = threaded
        # torch's optimizer step updates the weights in place, so a request whose backward runs
        # on another thread at that moment would fail: the threads take turns.
        self.lock = threading.Lock()

    def _step(self, x: np.ndarray, y: np.ndarray) -> float:
        torch = self.torch
        with self.lock:
            self.optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                self.net(torch.from_numpy(x)), torch.from_numpy(y)
            )
            loss.backward()
            self.optimizer.step()
            return float(loss.item())

    def _serve(self, image: np.ndarray, label: int) -> np.ndarray:
        torch = self.torch
        with self.lock:
            x = torch.from_numpy(image[None]).requires_grad_()
            loss = torch.nn.functional.cross_entropy(self.net(x), torch.tensor([label]))
            (grad,) = torch.autograd.grad(loss, [x])
            return grad.numpy()[0]

    async def step(self, x: np.ndarray, y: np.ndarray) -> float:
        if self.threaded:
            return await asyncio.to_thread(self._step, x, y)
        return self._step(x, y)

    async def serve(self, image: np.ndarray, label: int) -> np.ndarray:
        if self.threaded:
            return await asyncio.to_thread(self._serve, image, label)
        return self._serve(image, label)

    def predict(self, x: np.ndarray) -> np.ndarray:
        with self.torch.no_grad():
            return self.net(self.torch.from_numpy(x)).argmax(dim=1).numpy()


def make_model(way: str) -> Model:
    if way in ASYNCGRAD_WAYS:
        return AsyncgradModel(
            awaited=way != BLOCKING, client_priority=0 if way == AWAITED_EQUAL else CLIENT_PRIORITY
        )
    if way in TORCH_WAYS:
        return TorchModel(threaded=way == TORCH_THREAD)
    raise ValueError(f"unknown way {way!r}; the ways are {ASYNCGRAD_WAYS + TORCH_WAYS}")


# ============================================================================ the tasks
async def train(
    model: Model,
    x_train: np.ndarray,
    y_train: np.ndarray,
    epochs: int,
    stats: Stats,
    progress: bool,
) -> None:
    rng = np.random.default_rng(SEED)
    bar = tqdm(range(epochs), desc=stats.way, unit="epoch", disable=not progress, leave=False)
    for _ in bar:
        order = rng.permutation(len(x_train))
        for start in range(0, len(order), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            stats.loss = await model.step(x_train[batch], y_train[batch])
            stats.steps += 1
            await asyncio.sleep(0)  # a turn for the others, whichever way the step ran
        bar.set_postfix(loss=f"{stats.loss:.3f}", served=stats.served)


async def client(
    k: int,
    n_clients: int,
    model: Model,
    x_test: np.ndarray,
    y_test: np.ndarray,
    stop: asyncio.Event,
    stats: Stats,
) -> None:
    i = k
    while not stop.is_set():
        await model.serve(x_test[i], int(y_test[i]))  # on the live model, while it trains
        stats.served += 1
        i = (i + n_clients) % len(x_test)
        await asyncio.sleep(0)  # let the others in before the next request


async def ticker(stop: asyncio.Event, stats: Stats) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(TICK_S)
        stats.stalls_s.append(time.perf_counter() - start - TICK_S)


async def run(
    epochs: int = 15, clients: int = 4, progress: bool = True, way: str = AWAITED
) -> Stats:
    """Train for ``epochs`` while ``clients`` tasks request saliency maps, the ``way`` given;
    return the stats."""
    x_train, x_test, y_train, y_test = load_data()
    model = make_model(way)
    stats = Stats(way=way, loop=type(asyncio.get_running_loop()).__module__.split(".")[0])
    stop = asyncio.Event()
    start = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(ticker(stop, stats))
        for k in range(clients):
            tg.create_task(client(k, clients, model, x_test, y_test, stop, stats))
        try:
            await train(model, x_train, y_train, epochs, stats, progress)
        finally:
            stop.set()  # the clients and the ticker finish their current round and return
    stats.wall_s = time.perf_counter() - start
    stats.accuracy = float((model.predict(x_test) == y_test).mean())
    return stats


async def compare(
    epochs: int = 15, clients: int = 4, progress: bool = True, torch: bool | None = None
) -> list[Stats]:
    """The same work (``run``) done each way: asyncgrad's two, and PyTorch's two when ``torch``
    (by default: when it is installed)."""
    ways = ASYNCGRAD_WAYS
    if torch is None:
        torch = torch_available()
    if torch:
        ways += TORCH_WAYS
    return [await run(epochs, clients, progress, way) for way in ways]


def report(rows: list[Stats], epochs: int, clients: int) -> str:
    first = rows[0]
    width = max(len(s.way) for s in rows) + 1
    lines = [
        f"A {'-'.join(map(str, SIZES))} MLP trained on scikit-learn's digits for {epochs} epochs "
        f"({first.steps} Adam steps) while {clients} clients request saliency maps from it, "
        f"in one {first.loop} event loop:",
        "",
        f"{'way':<{width}} {'steps/s':>8} {'served/s':>9} {'p99 stall':>10} {'longest stall':>14} "
        f"{'accuracy':>9}",
    ]
    for s in rows:
        lines.append(
            f"{s.way:<{width}} {s.steps_per_s:>8.0f} {s.served_per_s:>9.0f} "
            f"{s.p99_stall_s * 1e3:>7.1f} ms {s.max_stall_s * 1e3:>11.1f} ms {s.accuracy:>9.1%}"
        )
    lines += [
        "",
        "A stall is how late a 1 ms timer fired: while the loop is stalled, nothing else in the",
        "process is served. Blocking calls hold the loop for a whole training step; awaited",
        "backward passes give it back about every millisecond and take no lock or weight copy.",
        "The first row serves requests before training steps (priority=1), the second gives",
        "both the same priority.",
        "",
        *verdict(rows),
    ]
    return "\n".join(lines)


def verdict(rows: list[Stats]) -> list[str]:
    """What the numbers printed say, computed from them: asyncgrad awaited against the way a
    server would otherwise choose (PyTorch through to_thread, which keeps the loop free; without
    PyTorch, asyncgrad's blocking calls), and why asyncgrad loses a column where it does."""
    by = {s.way: s for s in rows}
    first, equal = by.get(AWAITED), by.get(AWAITED_EQUAL)
    rival = by.get(TORCH_THREAD) or by.get(BLOCKING)
    if first is None or equal is None or rival is None:
        return []
    said = [
        f"Verdict, against {rival.way}: asyncgrad awaited served "
        f"{first.served_per_s / rival.served_per_s:.1f}x its requests with requests first "
        f"({first.served_per_s:.0f} vs {rival.served_per_s:.0f} per second) and "
        f"{equal.served_per_s / rival.served_per_s:.1f}x at equal priority, training at "
        f"{equal.steps_per_s / rival.steps_per_s:.2f}x its steps per second there."
    ]
    if equal.steps_per_s < rival.steps_per_s:
        said.append(
            "It trains slower at equal priority: the loop runs every request's backward pass "
            "between the training step's slices; with requests first (the first row), "
            "training gets only what they leave. To train faster, run the trainer in a "
            "process of its own."
        )
    p99 = min(first.p99_stall_s, equal.p99_stall_s)
    if p99 > rival.p99_stall_s:
        said.append(
            f"Its p99 stall is longer ({p99 * 1e3:.1f} vs {rival.p99_stall_s * 1e3:.1f} ms): "
            "backward nodes run on the loop in slices of about 1 ms, where to_thread runs "
            "everything on another thread; lower ag.configure(slice_s=...) for a loop that "
            "must answer sooner."
        )
    if not any(s.way in TORCH_WAYS for s in rows):
        said.append(
            "PyTorch's rows: pip install torch (the CPU build is enough), then run this again."
        )
    return [line for text in said for line in textwrap.wrap(text, 92)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15, help="training epochs (default 15)")
    parser.add_argument("--clients", type=int, default=4, help="client tasks (default 4)")
    parser.add_argument(
        "--no-torch", action="store_true", help="leave out the PyTorch ways even if installed"
    )
    args = parser.parse_args()
    runner: Callable[[Any], list[Stats]]
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    rows = runner(compare(args.epochs, args.clients, torch=False if args.no_torch else None))
    print(report(rows, args.epochs, args.clients))


if __name__ == "__main__":
    main()
