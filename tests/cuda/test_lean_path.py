"""What a training step and a served gradient cost the GPU, counted on the simulated device (NOTE
[Counting device work] in asyncgrad/backend/sim.py): properties that must never regress. No
host synchronisation from the forward to the optimizer's step (one is a bug, named by its line),
no copy of a gradient that can be stolen, and awaited passes that run ahead of the GPU within
their bound (NOTE [Passes in flight] in asyncgrad/backend/cuda.py)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.nn.functional as F
from asyncgrad.backend import cuda as runtime

from .conftest import assert_close, host

WAIT_S = 10.0


def _mlp(rng: np.random.Generator) -> tuple[list[ag.Tensor], ag.Tensor, ag.Tensor]:
    sizes = (12, 16, 16, 5)
    params = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        params.append(ag.tensor(rng.standard_normal((fan_out, fan_in)) * 0.3, device="cuda"))
        params.append(ag.tensor(rng.standard_normal(fan_out) * 0.1, device="cuda"))
    for p in params:
        p.requires_grad_(True)
    x = ag.tensor(rng.standard_normal((8, sizes[0])), device="cuda")
    y = ag.tensor(rng.integers(0, sizes[-1], 8), device="cuda")
    return params, x, y


def _loss(params: list[ag.Tensor], x: ag.Tensor, y: ag.Tensor) -> ag.Tensor:
    h = x
    for i in range(0, len(params) - 2, 2):
        h = F.relu(F.linear(h, params[i], params[i + 1]))
    return F.cross_entropy(F.linear(h, params[-2], params[-1]), y)


@pytest.fixture
def sim(sim: Any) -> Any:
    if not runtime.simulated():
        pytest.skip("counts the simulated device's work")
    return sim


async def test_an_awaited_training_step_never_waits_for_the_gpu_on_the_host(sim: Any) -> None:
    params, x, y = _mlp(np.random.default_rng(0))
    opt = ag.optim.SGD(params, lr=0.1, momentum=0.9)
    with sim.record_host_syncs() as syncs, sim.forbid_host_sync():
        for _ in range(3):
            opt.zero_grad()
            loss = _loss(params, x, y)
            await asyncio.wait_for(ag.backward(loss), WAIT_S)
            opt.step()
    assert syncs == [], f"host synchronisations in a training step: {syncs}"


def test_a_blocking_training_step_never_waits_for_the_gpu_on_the_host(sim: Any) -> None:
    params, x, y = _mlp(np.random.default_rng(1))
    opt = ag.optim.Adam(params, lr=0.01)
    with sim.record_host_syncs() as syncs:
        for _ in range(3):
            opt.zero_grad()
            _loss(params, x, y).backward()
            opt.step()
    assert syncs == [], f"host synchronisations in a training step: {syncs}"


async def test_fresh_gradients_become_grad_fields_without_a_copy(sim: Any) -> None:
    params, x, y = _mlp(np.random.default_rng(2))
    loss = _loss(params, x, y)
    with sim.count_device_work() as counts:
        await asyncio.wait_for(ag.backward(loss), WAIT_S)
    # Every kernel of this backward writes a new array: nothing is copied.
    assert counts.launches["copyto"] == 0, dict(counts.launches)
    # A gradient someone else holds is copied (the caller's own gradient tensor here).
    w = ag.tensor(np.ones(3), device="cuda", requires_grad=True)
    g = ag.tensor(np.full(3, 2.0), device="cuda")
    with sim.count_device_work() as counts:
        await asyncio.wait_for(ag.backward(w, g), WAIT_S)
    assert counts.launches["copyto"] == 1
    assert w.grad is not None
    assert w.grad._array is not g._array
    assert_close(host(w.grad), np.full(3, 2.0))


async def test_awaited_steps_run_ahead_of_the_gpu_within_the_bound(sim: Any) -> None:
    """The host queues the next steps while the GPU works on the first, up to MAX_PASSES_AHEAD
    passes; the results are those of steps run one at a time."""
    rng = np.random.default_rng(3)
    params, x, y = _mlp(rng)
    ref = [ag.tensor(host(p), requires_grad=True) for p in params]
    xr, yr = ag.tensor(host(x)), ag.tensor(host(y))
    opt, opt_ref = ag.optim.SGD(params, lr=0.1), ag.optim.SGD(ref, lr=0.1)
    held = _hold(ag.cuda.current_stream().native)  # the GPU is busy until it is set
    try:
        for step in range(runtime.MAX_PASSES_AHEAD):
            opt.zero_grad()
            await asyncio.wait_for(ag.backward(_loss(params, x, y)), WAIT_S)
            opt.step()
            assert len(runtime.in_flight(0)) == step + 1
        # The next pass waits for the oldest, which the GPU cannot finish while it is held.
        opt.zero_grad()
        third = asyncio.ensure_future(ag.backward(_loss(params, x, y)))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not third.done()
    finally:
        held.set()
    await asyncio.wait_for(third, WAIT_S)
    opt.step()
    await asyncio.wait_for(ag.cuda.synchronize_async(), WAIT_S)
    assert runtime.pending(runtime.in_flight(0)) == []
    for _ in range(runtime.MAX_PASSES_AHEAD + 1):
        opt_ref.zero_grad()
        _loss(ref, xr, yr).backward()
        opt_ref.step()
    for p, r in zip(params, ref, strict=True):
        assert_close(host(p), r.detach().numpy(), rtol=1e-12, atol=1e-12)


def _hold(stream: Any) -> Any:
    """Queue on a simulated stream a kernel that runs until the returned event is set."""
    import threading

    done = threading.Event()
    stream._queue.submit(lambda: done.wait(WAIT_S))
    return done


@pytest.mark.parametrize("consumer_first", [True, False])
def test_relu_overwrites_no_gradient_another_stream_still_reads(
    delays: Any, consumer_first: bool
) -> None:
    """One gradient sent to two relus on two streams (add's rule sends the same array to both):
    the one that runs second may not write into it while the other's kernels may still read it
    (NOTE [Gradients overwritten in place] in asyncgrad/rules/registry.py). The ordering check
    fails the test at such a write; the delays make a wrong value visible too."""
    from .conftest import side_stream

    xv = np.array([-1.0, 2.0, 0.0, 3.0, -0.5])
    wv = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    x = ag.tensor(xv, device="cuda", requires_grad=True)
    s1, s2 = side_stream(), side_stream()
    with ag.cuda.stream(s1):
        r1 = (x * 1.0).relu()
    with ag.cuda.stream(s2):
        r2 = (x * -1.0).relu()
    current = ag.cuda.current_stream()
    current.wait_stream(s1)
    current.wait_stream(s2)
    out = (r1 + r2) if consumer_first else (r2 + r1)
    out.backward(ag.tensor(wv, device="cuda") * 1.0)
    assert_close(host(x.grad), wv * (xv > 0) - wv * (xv < 0))
