"""ag.utils.checkpoint on a CUDA device: the recomputation draws the dropout masks of the forward
again from the device's generator, which cannot be deep-copied (CuPy's holds a lock), so the
gradients equal those without checkpointing."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.ops.creation import default_generator
from asyncgrad.utils.checkpoint import checkpoint

DEVICE = "cuda:0"


def _net() -> list[nn.Linear]:
    ag.manual_seed(3)
    return [nn.Linear(6, 6, dtype=ag.float64).to(DEVICE) for _ in range(4)]


def _half(layers: list[nn.Linear], x: Any, k: int) -> Any:
    for lin in layers[2 * k : 2 * k + 2]:
        x = nn.functional.dropout(lin(x).tanh(), 0.4, True)
    return x


def _grads(
    layers: list[nn.Linear], x: ag.Tensor, mode: bool | None, preserve: bool = True
) -> list[np.ndarray]:
    for lin in layers:
        for p in lin.parameters():
            p.grad = None
    x.grad = None
    ag.manual_seed(11)
    h = x
    for k in range(2):
        h = (
            _half(layers, h, k)
            if mode is None
            else checkpoint(_half, layers, h, k, use_reentrant=mode, preserve_rng_state=preserve)
        )
    (h * h).sum().backward()
    params = [p for lin in layers for p in lin.parameters()]
    return [t.grad.cpu().numpy() for t in [x, *params]]


def test_the_device_generator_cannot_be_deep_copied() -> None:
    """As CuPy's: the reason checkpoint must not deep-copy it."""
    ag.manual_seed(0)
    ag.rand(3, device=DEVICE)
    rng = default_generator.state(ag.device(DEVICE))
    with pytest.raises(TypeError, match=r"cannot pickle '_thread\.lock'"):
        copy.deepcopy(rng._rng)


@pytest.mark.parametrize("mode", [True, False], ids=["reentrant", "non-reentrant"])
def test_dropout_is_recomputed_alike(mode: bool) -> None:
    layers = _net()
    x = ag.tensor(
        np.random.default_rng(5).standard_normal((5, 6)), device=DEVICE, requires_grad=True
    )
    ag.rand(2, device=DEVICE)  # the device's generator exists before the checkpointed regions
    want = _grads(layers, x, None)
    got = _grads(layers, x, mode)
    other = _grads(layers, x, mode, preserve=False)  # other masks: other gradients
    assert not np.allclose(other[0], want[0])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_a_snapshot_restores_the_device_generator_twice() -> None:
    rng = ag.ops.default_generator.state(ag.device(DEVICE))
    snapshot = rng.get_state()
    first = ag.ops.wrap(rng.random((4,), ag.float64)).cpu().numpy()
    rng.set_state(snapshot)
    again = ag.ops.wrap(rng.random((4,), ag.float64)).cpu().numpy()
    rng.set_state(snapshot)
    third = ag.ops.wrap(rng.random((4,), ag.float64)).cpu().numpy()
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, third)


async def test_cancelled_recomputations_leave_only_the_generators_state(sim: Any) -> None:
    """Forty awaited passes through a checkpointed region, cancelled at different points: once
    the engine is idle and the GPU done, the one device array they leave is the generator's state
    (each restore puts a copy of a snapshot in its place, so the newest copy is the one alive,
    and the next restore frees it); no snapshot or recomputed value is kept for them."""
    ag.manual_seed(3)
    lin = nn.Linear(6, 6, dtype=ag.float64).to(DEVICE)
    x = ag.tensor(
        np.random.default_rng(5).standard_normal((5, 6)), device=DEVICE, requires_grad=True
    )
    ag.rand(2, device=DEVICE)
    rng = default_generator.state(ag.device(DEVICE))

    def live() -> dict[int, Any]:
        gc.collect()
        return {id(o): o for o in gc.get_objects() if type(o) is sim.ndarray}

    before = set(live())
    for i in range(40):
        h = checkpoint(_half, [lin, lin], x, 0, use_reentrant=False)
        task = asyncio.ensure_future(ag.grad((h * h).sum(), [x]))
        for _ in range(i % 9):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        del h, task
    async with asyncio.timeout(10):
        await ag.autograd.engine.wait_idle()
    ag.cuda.synchronize()
    left = [a for k, a in live().items() if k not in before]
    assert [a is rng._rng.bit_generator._state for a in left] in ([], [True])
