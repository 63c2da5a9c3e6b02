"""The server's model: an MLP over scikit-learn's bundled 8x8 digits, how it is trained, saved
and loaded, and the two computations the server offers (saliency and one SGD step's gradient).

Nothing here knows about HTTP; ``app.py`` calls these functions from its request handlers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import asyncgrad as ag

F = ag.nn.functional

SEED: Final = 0
SIDE: Final = 8  # the digits are 8x8 images
PIXELS: Final = SIDE * SIDE
CLASSES: Final = 10
HIDDEN: Final = 128
EPOCHS: Final = 30
BATCH_SIZE: Final = 64
LEARNING_RATE: Final = 3e-3
# SmoothGrad's noisy copies go through the model in chunks of this many rows, so that no
# backward node is large: the engine runs nodes on the event loop, a slice of them at a time,
# and a chunk's nodes take microseconds, so other requests are served between slices.
CHUNK: Final = 64


def make_model(device: str = "cpu") -> ag.nn.Sequential:
    return ag.nn.Sequential(
        ag.nn.Linear(PIXELS, HIDDEN), ag.nn.ReLU(), ag.nn.Linear(HIDDEN, CLASSES)
    ).to(device)


def load_data() -> list[np.ndarray]:
    """Rows of 64 pixels in [0, 1] and their labels, split 75/25 as in examples/demo.py."""
    images, labels = load_digits(return_X_y=True)
    images = (images / 16.0).astype(np.float32)
    labels = labels.astype(np.int64)
    return train_test_split(images, labels, test_size=0.25, random_state=SEED, stratify=labels)


@dataclass
class Trained:
    model: ag.nn.Sequential
    accuracy: float  # on the held-out quarter of the digits
    seconds: float  # 0 when loaded from a file


async def train(device: str, epochs: int = EPOCHS) -> Trained:
    """Train a fresh model with Adam; the same seed gives the same weights on the same machine."""
    start = time.perf_counter()
    ag.manual_seed(SEED)
    x_train, x_test, y_train, y_test = load_data()
    model = make_model(device)
    optimizer = ag.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    rng = np.random.default_rng(SEED)
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        for first in range(0, len(order), BATCH_SIZE):
            batch = order[first : first + BATCH_SIZE]
            x = ag.tensor(x_train[batch], device=device)
            loss = F.cross_entropy(model(x), ag.tensor(y_train[batch], device=device))
            optimizer.zero_grad()
            await ag.backward(loss)
            optimizer.step()
    return Trained(model, accuracy(model, x_test, y_test), time.perf_counter() - start)


def accuracy(model: ag.nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    device = next(model.parameters()).device
    with ag.no_grad():
        predicted = to_numpy(model(ag.tensor(images, device=device)).argmax(dim=1))
    return float((predicted == labels).mean())


def to_numpy(t: ag.Tensor) -> np.ndarray:
    return t.cpu().numpy()


def weights(model: ag.nn.Module) -> dict[str, np.ndarray]:
    """The parameters as NumPy arrays (copies), by their state_dict names."""
    return {name: to_numpy(t).copy() for name, t in model.state_dict().items()}


def save(model: ag.nn.Module, path: Path) -> None:
    """Write the weights to ``path`` (an .npz file), atomically: a reader never sees half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as f:
        np.savez(f, **weights(model))
    partial.replace(path)


def load(path: Path, device: str) -> ag.nn.Sequential:
    model = make_model(device)
    with np.load(path, allow_pickle=False) as arrays:
        model.load_state_dict({name: arrays[name] for name in arrays.files})
    return model


def copy_model(model: ag.nn.Module, device: str) -> ag.nn.Sequential:
    """A new model with copies of ``model``'s weights (load_state_dict copies)."""
    copy = make_model(device)
    copy.load_state_dict(model.state_dict())
    return copy


@dataclass
class SaliencyGraph:
    """What the forward pass of a saliency request recorded: the input to differentiate with
    respect to, the score to differentiate, and the clean image's logits."""

    image: ag.Tensor  # (1, 64), requires grad
    score: ag.Tensor  # scalar
    logits: ag.Tensor  # (1, 10)
    target: int


def smoothgrad_noise(samples: int, noise: float, seed: int) -> np.ndarray:
    """SmoothGrad's noise for ``samples`` copies of an image: Gaussian of standard deviation
    ``noise`` from NumPy's generator seeded with ``seed`` (a request is reproducible), float32."""
    jitter = np.random.default_rng(seed).normal(0.0, noise, size=(samples, PIXELS))
    return jitter.astype(np.float32)


def saliency_forward(
    model: ag.nn.Module,
    image: np.ndarray,
    target: int | None,
    samples: int,
    noise: float,
    seed: int,
) -> SaliencyGraph:
    """The forward pass of a saliency request; blocking array work, for ``ag.run``.

    ``samples == 1``: the score is the logit of ``target`` (default: the predicted class) for
    the image itself, so its gradient is the plain saliency map. ``samples > 1``: SmoothGrad,
    the mean of that logit over ``samples`` copies of the image with Gaussian noise of standard
    deviation ``noise`` (drawn from NumPy's generator seeded with ``seed``, so a request is
    reproducible), whose gradient is the mean of their saliency maps.
    """
    device = next(model.parameters()).device
    x = ag.tensor(image.reshape(1, PIXELS), device=device, requires_grad=True)
    logits = model(x)
    if target is None:
        target = int(to_numpy(logits.argmax(dim=1))[0])
    if samples == 1:
        return SaliencyGraph(x, logits[0, target], logits, target)
    jitter = smoothgrad_noise(samples, noise, seed)
    score: ag.Tensor | None = None
    for first in range(0, samples, CHUNK):
        part = model(x + ag.tensor(jitter[first : first + CHUNK], device=device))
        part = part[:, target].sum()
        score = part if score is None else score + part
    assert score is not None
    return SaliencyGraph(x, score / samples, logits, target)


@dataclass
class SaliencyRows:
    """A saliency request as rows for a coalescer (``ag.serving.Coalescer``): the gradient of
    ``<grad_output, model(rows)>`` with respect to ``rows``, summed over the rows, is the
    request's saliency map (the mean over SmoothGrad's noisy copies of their maps)."""

    rows: ag.Tensor  # (samples, 64): the image, or its noisy copies
    grad_output: ag.Tensor  # (samples, 10): 1 / samples at the target's column, else 0
    logits: ag.Tensor  # (1, 10): the clean image's, no graph
    target: int


def saliency_rows(
    model: ag.nn.Module,
    image: np.ndarray,
    target: int | None,
    samples: int,
    noise: float,
    seed: int,
) -> SaliencyRows:
    """What ``saliency_forward`` computes, as rows for a coalescer: the clean image's logits
    (and the predicted class, when no target is given), and the rows to differentiate; blocking
    array work, for ``ag.run``. The same noise as ``saliency_forward``'s."""
    device = next(model.parameters()).device
    x = image.reshape(1, PIXELS)
    with ag.no_grad():
        logits = model(ag.tensor(x, device=device))
    if target is None:
        target = int(to_numpy(logits.argmax(dim=1))[0])
    if samples > 1:
        x = x + smoothgrad_noise(samples, noise, seed)
    weight = np.zeros((samples, CLASSES), dtype=np.float32)
    weight[:, target] = 1.0 / samples
    return SaliencyRows(
        ag.tensor(x, device=device), ag.tensor(weight, device=device), logits, target
    )


@dataclass
class StepGraph:
    loss: ag.Tensor
    params: list[ag.Tensor]


def step_forward(model: ag.nn.Module, image: np.ndarray, label: int) -> StepGraph:
    """The forward pass of one online SGD step on a labelled image; blocking, for ``ag.run``."""
    device = next(model.parameters()).device
    x = ag.tensor(image.reshape(1, PIXELS), device=device)
    loss = F.cross_entropy(model(x), ag.tensor([label], device=device))
    return StepGraph(loss, list(model.parameters()))


def apply_step(
    model: ag.nn.Module, optimizer: ag.optim.Optimizer, grads: tuple[Any, ...], lr: float
) -> None:
    """Apply one SGD step with ``grads`` (one per parameter, in order) to ``model``'s weights.

    The gradients go into ``.grad`` here only, just before ``step()``, and are taken out again
    right after, so nothing else ever reads or adds to them. Blocking, for ``ag.run``.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    params = list(model.parameters())
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
