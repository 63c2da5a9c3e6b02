"""Gradients do not depend on the order of ready nodes with equal keys.

``scheduler.shuffle_ties(seed)`` breaks ties in a seeded random order instead of push order
(See NOTE [One scheduler], 4); every graph here must give the same gradients under every seed, alone
and with several graph tasks sharing the device queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.engine import scheduler

from .helpers import TIMEOUT_S, arr

SEEDS = [0, 1, 2, 3, 4]


@pytest.fixture
def shuffled() -> Iterator[Callable[[int | None], None]]:
    yield scheduler.shuffle_ties
    scheduler.shuffle_ties(None)


def build(rng: np.random.Generator) -> tuple[list[ag.Tensor], ag.Tensor]:
    """Leaves used many times (their AccumulateGrad nodes tie), fan-out, views, a multi-output
    split, and an in-place op on a view."""
    leaves = [
        ag.tensor(rng.standard_normal(6), dtype=ag.float64, requires_grad=True) for _ in "abcd"
    ]
    a, b, c, d = leaves
    h = a * b + c.tanh()
    p, q = h.split(3)
    r = (p * d[:3]).exp() + q.sin() * a[3:]
    s = h.clone()
    s[1:4] *= b[1:4]
    out = (r.sum() + s.sum() * 0.5 + (a * c * d).sum()).reshape(())
    return leaves, out


def grads(leaves: list[ag.Tensor], out: ag.Tensor) -> list[np.ndarray[Any, Any]]:
    return [arr(g) for g in ag.grad_sync(out, leaves, retain_graph=True)]


@pytest.mark.parametrize("seed", SEEDS)
def test_sync_gradients_do_not_depend_on_tie_order(
    shuffled: Callable[[int | None], None], seed: int
) -> None:
    leaves, out = build(np.random.default_rng(7))
    expected = grads(leaves, out)
    shuffled(seed)
    for got, want in zip(grads(leaves, out), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("seed", SEEDS)
async def test_concurrent_gradients_do_not_depend_on_tie_order(
    shuffled: Callable[[int | None], None], seed: int
) -> None:
    graphs = [build(np.random.default_rng(i)) for i in range(4)]
    expected = [grads(leaves, out) for leaves, out in graphs]
    shuffled(seed)
    async with asyncio.timeout(TIMEOUT_S):
        results = await asyncio.gather(
            *(ag.grad(out, leaves, retain_graph=True) for leaves, out in graphs)
        )
    for got, want in zip(results, expected, strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(arr(g), w, rtol=1e-13, atol=1e-15)
    # backward into .grad, shuffled too: the same sums.
    for leaves, _ in graphs:
        for t in leaves:
            t.grad = None
    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.gather(*(ag.backward(out, retain_graph=True) for _, out in graphs))
    for (leaves, _), want in zip(graphs, expected, strict=True):
        for t, w in zip(leaves, want, strict=True):
            np.testing.assert_allclose(arr(t.grad), w, rtol=1e-13, atol=1e-15)


def test_the_shuffle_changes_the_order_of_ties(shuffled: Callable[[int | None], None]) -> None:
    leaves = [ag.tensor([1.0], requires_grad=True) for _ in range(8)]
    out = ag.stack(leaves).sum()  # StackBackward readies all eight accumulators at once
    orders = set()
    for seed in [None, *SEEDS]:
        shuffled(seed)
        seen: list[int] = []
        handles = [
            t.register_post_accumulate_grad_hook(lambda t, i=i, seen=seen: seen.append(i))
            for i, t in enumerate(leaves)
        ]
        out.backward(retain_graph=True)
        for h in handles:
            h.remove()
        orders.add(tuple(seen))
    # The accumulators all share one key: push order without a seed, another order with one.
    assert len(orders) > 1
