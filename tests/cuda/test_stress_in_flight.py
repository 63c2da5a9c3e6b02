"""Awaited training steps that run ahead of the GPU (NOTE [Passes in flight] in
asyncgrad/backend/cuda.py) beside served gradients on the same loop and device, under stress:
random delays before every piece of stream work, the simulator's ordering check where the suite
turns it on. The steps' kernels are still queued when the optimizer replaces the weights they
read and when other requests allocate from the same pool: the trained weights must be exactly
those of the same steps run one at a time on the CPU, and every served gradient exactly the
CPU's.

Bounded: ``ASYNCGRAD_STRESS_STEPS`` training steps (default 24) and 8 clients of 6 requests,
every wait under a timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import numpy as np

import asyncgrad as ag
import asyncgrad.nn.functional as F

from .conftest import Delays, assert_close, host

STEPS = int(os.environ.get("ASYNCGRAD_STRESS_STEPS", "24"))
CLIENTS, REQUESTS = 8, 6
TIMEOUT_S = 60.0 + STEPS * 0.5
SIZES = (6, 12, 4)


def _params(rng: np.random.Generator, device: str) -> list[ag.Tensor]:
    out = []
    for fan_in, fan_out in itertools.pairwise(SIZES):
        out.append(ag.tensor(rng.standard_normal((fan_out, fan_in)) * 0.4, device=device))
        out.append(ag.tensor(rng.standard_normal(fan_out) * 0.1, device=device))
    for p in out:
        p.requires_grad_(True)
    return out


def _forward(p: list[ag.Tensor], x: ag.Tensor) -> ag.Tensor:
    return F.linear(F.relu(F.linear(x, p[0], p[1])), p[2], p[3])


async def test_steps_in_flight_beside_served_gradients_stay_exact(delays: Delays) -> None:
    """``delays``: random delays before every piece of stream work on the simulator."""
    rng = np.random.default_rng(42)
    init = _params(rng, "cpu")
    train = [ag.tensor(host(t), device="cuda", requires_grad=True) for t in init]
    ref = [ag.tensor(host(t), requires_grad=True) for t in init]
    served = [ag.tensor(host(t) * 0.5, device="cuda", requires_grad=True) for t in init]
    served_cpu = [ag.tensor(host(t) * 0.5, requires_grad=True) for t in init]
    batches = [
        (rng.standard_normal((16, SIZES[0])), rng.integers(0, SIZES[-1], 16)) for _ in range(STEPS)
    ]
    opt = ag.optim.SGD(train, lr=0.05, momentum=0.9)
    opt_ref = ag.optim.SGD(ref, lr=0.05, momentum=0.9)
    answers: list[tuple[Any, Any]] = []

    async def trainer() -> None:
        for xv, yv in batches:
            opt.zero_grad()
            x, y = ag.tensor(xv, device="cuda"), ag.tensor(yv, device="cuda")
            await ag.backward(F.cross_entropy(_forward(train, x), y))
            opt.step()
            await asyncio.sleep(0)

    async def client(c: int) -> None:
        crng = np.random.default_rng(c)
        for _ in range(REQUESTS):
            xv = crng.standard_normal((3, SIZES[0]))
            x = ag.tensor(xv, device="cuda", requires_grad=True)
            (g,) = await ag.grad(_forward(served, x).pow(2).sum(), [x])
            answers.append((xv, host(g)))  # computed: reading it does not wait
            await asyncio.sleep(0)

    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.gather(trainer(), *(client(c) for c in range(CLIENTS)))
        await ag.cuda.synchronize_async()
    for xv, yv in batches:
        opt_ref.zero_grad()
        F.cross_entropy(_forward(ref, ag.tensor(xv)), ag.tensor(yv)).backward()
        opt_ref.step()
    for p, r in zip(train, ref, strict=True):
        assert_close(host(p), r.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert len(answers) == CLIENTS * REQUESTS
    for xv, g in answers:
        x = ag.tensor(xv, requires_grad=True)
        (want,) = ag.grad_sync(_forward(served_cpu, x).pow(2).sum(), [x])
        assert_close(g, want.numpy(), rtol=1e-12, atol=1e-12)
