"""Training while serving, under stress: a trainer steps a model on the event loop while requests
compute input gradients of the same model from forwards on the engine's compute threads
(``ag.run``), in a Coalescer's batches off the loop, and on users' own threads. Every request is
checked against a float64 recomputation at the exact weights its forward read.

How a request is checked: it keeps its forward's output and its input gradient. Its forward read
each parameter once, at some version between the versions before and after the request (the
trainer keeps every version's values). The check finds the versions of the first layer whose
hidden activations, and then of the second whose output, reproduce the request's output; the
input gradient must then be the one at those same weights. A torn read (half an update) matches
no version; a gradient taken at other weights than the forward's fails the last comparison.

Bounded in count and time: ``ASYNCGRAD_STRESS_REQUESTS`` requests per loop (default 240, a few
seconds), each wait under a timeout. See NOTE [Serving while training] in
asyncgrad/optim/optimizers.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn

F = nn.functional
REQUESTS = int(os.environ.get("ASYNCGRAD_STRESS_REQUESTS", "240"))
TIMEOUT_S = 30.0 + REQUESTS * 0.05
SIZES = (16, 48, 4)  # input, hidden, output: small enough that the loop steps often


class TwoLayers(nn.Module):
    """``h = tanh(x W1^T + b1)``, ``y = h W2^T + b2``; returns ``[y | h]`` row by row, so that
    every request (coalesced ones too) sees the hidden activations its forward computed."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(SIZES[0], SIZES[1])
        self.second = nn.Linear(SIZES[1], SIZES[2])

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        h = self.first(x).tanh()
        return ag.cat([self.second(h), h], dim=1)


def make_model() -> TwoLayers:
    ag.manual_seed(0)
    return TwoLayers()


@dataclass
class History:
    """Every version of every parameter the trainer published, by parameter and version."""

    params: list[ag.Tensor]
    values: list[dict[int, np.ndarray]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.values = [{p._version: p.array.copy()} for p in self.params]

    def record(self) -> None:  # called on the loop thread right after each step
        for vals, p in zip(self.values, self.params, strict=True):
            vals[p._version] = p.array.copy()

    def versions(self) -> list[int]:
        return [p._version for p in self.params]

    def candidates(self, i: int, lo: list[int], hi: list[int]) -> Iterator[np.ndarray]:
        for v in range(lo[i], hi[i] + 1):
            if v in self.values[i]:
                yield self.values[i][v]


@dataclass
class Outcome:
    checked: int = 0
    overlapped: int = 0  # requests during which the trainer stepped
    failures: list[str] = field(default_factory=list)


def check(
    hist: History,
    lo: list[int],
    hi: list[int],
    x: np.ndarray,
    r: np.ndarray,
    out: np.ndarray,
    gx: np.ndarray,
    outcome: Outcome,
    what: str,
) -> None:
    """``out`` = model(x) = ``[y | h]`` and ``gx`` = d(sum(out * r))/dx at one version of each
    weight, found layer by layer from the request's own ``h`` and ``y``."""
    close = {"rtol": 1e-11, "atol": 1e-12}
    outcome.overlapped += lo != hi
    y, h = out[:, : SIZES[2]], out[:, SIZES[2] :]
    first = [
        w1
        for w1 in hist.candidates(0, lo, hi)
        for b1 in hist.candidates(1, lo, hi)
        if np.allclose(h, np.tanh(x @ w1.T + b1), **close)
    ]
    second = [
        w2
        for w2 in hist.candidates(2, lo, hi)
        for b2 in hist.candidates(3, lo, hi)
        if np.allclose(y, h @ w2.T + b2, **close)
    ]
    if not first or not second:
        layer = "first" if not first else "second"
        outcome.failures.append(f"{what}: no version of the {layer} layer gives it (torn read)")
        return
    ry, rh = r[:, : SIZES[2]], r[:, SIZES[2] :]
    want = ((ry @ second[0] + rh) * (1 - h * h)) @ first[0]
    if np.allclose(gx, want, **close):
        outcome.checked += 1
    else:
        err = float(np.abs(gx - want).max())
        outcome.failures.append(f"{what}: wrong gradient (error {err:.3g})")


async def scenario(n_requests: int) -> Outcome:
    model = make_model().to(ag.float64)
    params = list(model.parameters())
    opt = ag.optim.Adam(params, lr=0.05, weight_decay=0.01)
    hist = History(params)
    outcome = Outcome()
    done = asyncio.Event()
    rng = np.random.default_rng(0)
    coalescer = ag.serving.Coalescer(model, max_batch=64, forward_off_loop=True)

    def request_data(k: int) -> tuple[np.ndarray, np.ndarray]:
        g = np.random.default_rng(1000 + k)
        return g.standard_normal((3, SIZES[0])), g.standard_normal((3, SIZES[1] + SIZES[2]))

    async def trainer() -> None:
        s = 0
        while not done.is_set():
            xb = ag.tensor(rng.standard_normal((32, SIZES[0])))
            yb = ag.tensor(rng.standard_normal((32, SIZES[1] + SIZES[2])))
            opt.zero_grad()
            await ag.backward(F.mse_loss(model(xb), yb))
            opt.step()
            hist.record()
            s += 1
            await asyncio.sleep(0)  # a turn for the requests' awaits

    async def via_run(k: int) -> None:
        x, r = request_data(k)
        lo = hist.versions()
        xt = ag.tensor(x, requires_grad=True)
        out = await ag.run(model, xt)
        (gx,) = await ag.grad((out * ag.tensor(r)).sum(), [xt])
        check(hist, lo, hist.versions(), x, r, out.array, gx.array, outcome, f"ag.run {k}")

    async def via_coalescer(k: int) -> None:
        x, r = request_data(k)
        lo = hist.versions()
        out, gx = await coalescer.vjp(ag.tensor(x), grad_output=ag.tensor(r))
        check(hist, lo, hist.versions(), x, r, out.array, gx.array, outcome, f"coalesced {k}")

    def on_thread(x: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xt = ag.tensor(x, requires_grad=True)
        out = model(xt)
        (gx,) = ag.grad_sync((out * ag.tensor(r)).sum(), [xt])
        return out.array, gx.array

    async def via_thread(k: int) -> None:
        x, r = request_data(k)
        lo = hist.versions()
        out, gx = await asyncio.to_thread(on_thread, x, r)
        check(hist, lo, hist.versions(), x, r, out, gx, outcome, f"user thread {k}")

    kinds: list[Callable[[int], Any]] = [via_run, via_coalescer, via_thread]
    sem = asyncio.Semaphore(12)

    async def one(k: int) -> None:
        async with sem:
            await kinds[k % len(kinds)](k)

    async with asyncio.timeout(TIMEOUT_S):
        async with asyncio.TaskGroup() as tg:
            tg.create_task(trainer())
            async with asyncio.TaskGroup() as requests:
                for k in range(n_requests):
                    requests.create_task(one(k))
            done.set()
    return outcome


@pytest.fixture
def fine_switching() -> Iterator[None]:
    # Threads switch every few microseconds instead of 5 ms: far more interleavings of the
    # trainer's steps with the forwards on other threads.
    before = sys.getswitchinterval()
    sys.setswitchinterval(2e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def loop_factories() -> list[Any]:
    out: list[Any] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:
        out.append(
            pytest.param(
                None, id="uvloop", marks=pytest.mark.skip(reason="uvloop is not installed")
            )
        )
    else:
        out.append(pytest.param(uvloop.new_event_loop, id="uvloop"))
    return out


@pytest.mark.timeout(int(TIMEOUT_S) + 60)
@pytest.mark.parametrize("loop_factory", loop_factories())
def test_every_gradient_is_at_the_weights_its_forward_read(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], fine_switching: None
) -> None:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        outcome = runner.run(scenario(REQUESTS))
    assert outcome.failures == [], outcome.failures[:5]
    assert outcome.checked == REQUESTS
    assert outcome.overlapped > 0  # the test tested something: steps came during requests
