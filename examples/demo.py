"""Train a digit classifier and serve saliency maps from it, in one event loop.

One asyncio event loop (uvloop when it is installed) runs these tasks side by side:

* the trainer: an MLP (64-128-10) on scikit-learn's bundled digits, one
  ``await ag.backward(loss)`` and one Adam step per mini-batch;
* clients: each repeatedly asks the current model which pixels matter for one test image,
  the gradient of that image's loss with respect to its pixels (``await ag.grad(loss, [x])``),
  like requests to a model server;
* a ticker: sleeps 1 ms in a loop and records how late it wakes up, that is how long the loop
  was kept from running anything else.

Backward passes are coroutines: while one runs, the others and the ticker keep running.
Requests are awaited with a higher priority than training steps, so if more of them arrive
than the engine can finish (try --clients 8), training slows down and requests do not.

    python examples/demo.py [--epochs 100] [--clients 4]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import asyncgrad as ag

F = ag.nn.functional
SEED = 0
BATCH_SIZE = 32
TICK_S = 0.001
CLIENT_PRIORITY = 1  # requests overtake training steps when both wait for the CPU worker


@dataclass
class Stats:
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


def make_model() -> ag.nn.Sequential:
    return ag.nn.Sequential(ag.nn.Linear(64, 128), ag.nn.ReLU(), ag.nn.Linear(128, 10))


def load_data() -> list[np.ndarray]:
    """8x8 digit images as rows of 64 pixels in [0, 1]; a fixed, stratified 75/25 split."""
    images, labels = load_digits(return_X_y=True)
    images = (images / 16.0).astype(np.float32)
    labels = labels.astype(np.int64)
    return train_test_split(images, labels, test_size=0.25, random_state=SEED, stratify=labels)


async def saliency(model: ag.nn.Module, image: np.ndarray, label: int) -> np.ndarray:
    """d loss / d pixels for one image: what a client asks for."""
    x = ag.tensor(image[None], requires_grad=True)
    loss = F.cross_entropy(model(x), ag.tensor([label]))
    (grad,) = await ag.grad(loss, [x], priority=CLIENT_PRIORITY)
    return grad.numpy()[0]


async def train(
    model: ag.nn.Module,
    x_train: np.ndarray,
    y_train: np.ndarray,
    epochs: int,
    stats: Stats,
    progress: bool,
) -> None:
    optimizer = ag.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(SEED)
    bar = tqdm(range(epochs), desc="training", unit="epoch", disable=not progress)
    for _ in bar:
        order = rng.permutation(len(x_train))
        for start in range(0, len(order), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            logits = model(ag.from_numpy(x_train[batch]))
            loss = F.cross_entropy(logits, ag.from_numpy(y_train[batch]))
            optimizer.zero_grad()
            await ag.backward(loss)  # the clients and the ticker run while this runs
            optimizer.step()
            stats.steps += 1
        stats.loss = loss.item()
        stall_ms = f"{stats.max_stall_s * 1e3:.1f}"
        bar.set_postfix(loss=f"{stats.loss:.3f}", served=stats.served, max_stall_ms=stall_ms)


async def client(
    k: int,
    n_clients: int,
    model: ag.nn.Module,
    x_test: np.ndarray,
    y_test: np.ndarray,
    stop: asyncio.Event,
    stats: Stats,
) -> None:
    # The optimizer updates the weights in place. A request whose backward pass is still
    # pending would then find the weights it saved modified, which asyncgrad reports as an
    # error (as torch does), so each request first copies the current weights (copy on read).
    replica = make_model().requires_grad_(False)
    i = k
    while not stop.is_set():
        replica.load_state_dict(model.state_dict())
        await saliency(replica, x_test[i], int(y_test[i]))
        stats.served += 1
        i = (i + n_clients) % len(x_test)
        await asyncio.sleep(0)  # let the others in before the next request


async def ticker(stop: asyncio.Event, stats: Stats) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(TICK_S)
        stats.stalls_s.append(time.perf_counter() - start - TICK_S)


async def run(epochs: int = 100, clients: int = 4, progress: bool = True) -> Stats:
    """Train for ``epochs`` while ``clients`` tasks request saliency maps; return the stats."""
    start = time.perf_counter()
    ag.manual_seed(SEED)
    x_train, x_test, y_train, y_test = load_data()
    model = make_model()
    stats = Stats(loop=type(asyncio.get_running_loop()).__module__.split(".")[0])
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(ticker(stop, stats))
        for k in range(clients):
            tg.create_task(client(k, clients, model, x_test, y_test, stop, stats))
        try:
            await train(model, x_train, y_train, epochs, stats, progress)
        finally:
            stop.set()  # the clients and the ticker finish their current round and return
    stats.wall_s = time.perf_counter() - start
    with ag.no_grad():
        predicted = model(ag.from_numpy(x_test)).argmax(dim=1).numpy()
    stats.accuracy = float((predicted == y_test).mean())
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=100, help="training epochs (default 100)")
    parser.add_argument("--clients", type=int, default=4, help="client tasks (default 4)")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        stats = asyncio.run(run(args.epochs, args.clients))
    else:
        stats = uvloop.run(run(args.epochs, args.clients))
    median_stall_ms = float(np.median(stats.stalls_s)) * 1e3 if stats.stalls_s else 0.0
    print(f"event loop:          {stats.loop}, {args.clients} clients")
    print(f"test accuracy:       {stats.accuracy:.1%}")
    print(f"gradients served:    {stats.served} ({stats.served / stats.wall_s:.0f}/s)")
    print(f"training steps:      {stats.steps} ({args.epochs} epochs)")
    print(f"wall time:           {stats.wall_s:.1f} s")
    print(
        f"longest loop stall:  {stats.max_stall_s * 1e3:.1f} ms "
        f"(median {median_stall_ms:.2f} ms over {len(stats.stalls_s)} ticks)"
    )


if __name__ == "__main__":
    main()
