"""Device memory that backward frees while kernels may still read it (NOTE [Deferred frees] in
asyncgrad/backend/cuda.py).

CuPy's memory pool hands the block of a dropped array to the next allocation on the stream that
allocated it at once (the simulator does too: NOTE [Memory pool] in asyncgrad/backend/sim.py).
So an array allocated on one stream and read by a kernel queued on another must stay referenced
until that kernel has run; otherwise the kernel reads the next owner's data (poison on the
simulator). A stream held by a gate makes the race certain; the ``delays`` fixture shakes the
orderings of the rest.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime

from .conftest import Gate, branches_on_two_streams, host, side_stream

REPEAT: Final = 8
RELEASE_TIMEOUT_S: Final = 5.0


def _saved_from_the_default_stream(
    xv: np.ndarray, wv: np.ndarray, vv: np.ndarray
) -> tuple[ag.Tensor, ag.Tensor, ag.Tensor, ag.cuda.Stream]:
    """``h = x + 1`` made on the default stream, where nothing but a product's node keeps it;
    the product, recorded on a side stream, saves ``h`` and reads it in its backward there.
    A branch on the default stream that runs after the product's node in backward (``v * 2``,
    recorded first) allocates arrays of ``h``'s size there, without waiting for the side
    stream."""
    v = ag.tensor(vv, device="cuda", requires_grad=True)
    q = (v * 2.0).sum()
    h = ag.tensor(xv, device="cuda") + 1.0
    w = ag.tensor(wv, device="cuda", requires_grad=True)
    s = side_stream()
    with ag.cuda.stream(s):
        p = (h * w).sum()
    ag.cuda.current_stream().wait_stream(s)
    return p + q, v, w, s


@pytest.mark.usefixtures("delays")
def test_a_saved_array_from_another_stream_outlives_its_nodes_kernels() -> None:
    """The product's node runs on the side stream, held by a gate; the engine drops its saved
    ``h`` after queuing its kernels, and the default stream's next allocation of that size
    takes ``h``'s block: without a deferred free, ``w``'s gradient reads it."""
    rng = np.random.default_rng(0)
    for _ in range(REPEAT):
        xv, wv, vv = rng.standard_normal((3, 64))
        loss, v, w, s = _saved_from_the_default_stream(xv, wv, vv)
        gate = Gate(s)
        loss.backward()
        gate.open()
        assert w.grad is not None
        assert v.grad is not None
        np.testing.assert_allclose(host(w.grad), xv + 1.0, rtol=1e-12)
        np.testing.assert_allclose(host(v.grad), np.full(64, 2.0), rtol=1e-12)


@pytest.mark.usefixtures("delays")
async def test_a_saved_array_from_another_stream_in_an_awaited_backward() -> None:
    rng = np.random.default_rng(1)
    for _ in range(REPEAT):
        xv, wv, vv = rng.standard_normal((3, 64))
        loss, v, w, s = _saved_from_the_default_stream(xv, wv, vv)
        gate = Gate(s)
        task = asyncio.ensure_future(ag.grad(loss, [w, v]))
        for _ in range(20):
            await asyncio.sleep(0)
        gate.open()
        gw, gv = await asyncio.wait_for(task, 10)
        np.testing.assert_allclose(host(gw), xv + 1.0, rtol=1e-12)
        np.testing.assert_allclose(host(gv), np.full(64, 2.0), rtol=1e-12)


def _summed_from_two_streams(
    xv: np.ndarray, vv: np.ndarray
) -> tuple[ag.Tensor, ag.Tensor, ag.Tensor, ag.cuda.Stream, ag.cuda.Stream]:
    """``h``, on the default stream, gets gradients from a branch on ``s1`` and one on ``s2``:
    the engine sums them on the default stream, reading both after waiting for their streams.
    A branch on ``s2`` recorded first (``v * 7``) runs after them in backward and allocates
    arrays of their size there."""
    v = ag.tensor(vv, device="cuda", requires_grad=True)
    s1, s2 = side_stream(), side_stream()
    with ag.cuda.stream(s2):
        u = (v * 7.0).sum()
    x = ag.tensor(xv, device="cuda", requires_grad=True)
    h = x * 1.0
    s1.wait_stream(ag.cuda.current_stream())
    s2.wait_stream(ag.cuda.current_stream())
    with ag.cuda.stream(s1):
        a = h * 3.0
    with ag.cuda.stream(s2):
        b = h * 5.0
    ag.cuda.current_stream().wait_stream(s1)
    ag.cuda.current_stream().wait_stream(s2)
    return (a + b).sum() + u, x, v, s1, s2


@pytest.mark.usefixtures("delays")
def test_gradients_summed_on_another_stream_outlive_the_sum() -> None:
    rng = np.random.default_rng(2)
    for _ in range(REPEAT):
        xv, vv = rng.standard_normal((2, 64))
        loss, x, v, _, _ = _summed_from_two_streams(xv, vv)
        gate = Gate(ag.cuda.current_stream())  # the sum waits behind it
        loss.backward()
        gate.open()
        assert x.grad is not None
        assert v.grad is not None
        np.testing.assert_allclose(host(x.grad), np.full(64, 8.0), rtol=1e-12)
        np.testing.assert_allclose(host(v.grad), np.full(64, 7.0), rtol=1e-12)


async def test_the_root_gradient_outlives_the_root_nodes_kernels() -> None:
    """The root gradient is made on the caller's stream and read by the root node on the
    stream its forward ran on; meanwhile the caller allocates on its own stream."""
    xv = np.linspace(-1.0, 1.0, 16)
    x = ag.tensor(xv, device="cuda", requires_grad=True)
    s = side_stream()
    with ag.cuda.stream(s):
        loss = (x * 2.0).sum()
    gate = Gate(s)
    task = asyncio.ensure_future(ag.grad(loss, [x]))
    for _ in range(50):  # the worker queues the pass's kernels behind the gate
        await asyncio.sleep(0)
    assert not task.done()
    others = [ag.zeros((), device="cuda") for _ in range(4)]
    gate.open()
    (g,) = await asyncio.wait_for(task, 10)
    np.testing.assert_allclose(host(g), np.full(16, 2.0), rtol=1e-12)
    del others


def _released_within(timeout_s: float) -> bool:
    """Whether the deferred arrays are all dropped within ``timeout_s``, by nothing but the
    GPU finishing (no host wait, no other pass)."""
    deadline = time.monotonic() + timeout_s
    while runtime.deferred_count():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _releaser_gone(timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(t.name == "asyncgrad-deferred-frees" for t in threading.enumerate()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


async def test_a_cancelled_pass_frees_its_buffers_once_the_gpu_is_done() -> None:
    """Cancelling an awaited backward while its kernels wait behind a held stream: its arrays
    are kept for them, then dropped once they have run, with nothing else running (an idle
    server keeps no device memory for the requests it cancelled)."""
    runtime.prune_deferred()
    assert runtime.deferred_count() == 0
    x = ag.tensor(np.linspace(-1, 1, 64), device="cuda", requires_grad=True)
    loss = branches_on_two_streams(x)
    gate = Gate(ag.cuda.current_stream())
    task = asyncio.ensure_future(ag.grad(loss, [x]))
    for _ in range(100):
        await asyncio.sleep(0)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert runtime.deferred_count() > 0, "held for the kernels still queued"
    gate.open()
    assert _released_within(RELEASE_TIMEOUT_S), (
        f"{runtime.deferred_count()} deferred frees left after the GPU finished"
    )
    assert _releaser_gone(RELEASE_TIMEOUT_S), "the releaser thread outlived its work"


async def test_many_cancelled_passes_leave_nothing_held_once_the_gpu_is_done() -> None:
    """Forty passes cancelled at different points (before, during and after their nodes ran, the
    GPU held meanwhile): once the GPU has run their kernels, with no other pass after them, no
    array is kept for them and the releaser has gone."""
    if runtime.simulated():
        # This test is about what stays held; the ordering check is off here. Its model gives
        # a thread what it observed itself, and a block the knowledge of the thread that drops
        # the last reference: when the releaser thread has seen a cancelled pass's kernels done
        # and dropped its hold, and the loop thread drops the graph's last reference later (as
        # on Python 3.12, where the cancelled task's frames go later), the check flags the
        # block's reuse although those kernels had run (their queue's count past the read).
        from asyncgrad.backend import sim

        sim.configure(check_order=False)
    runtime.prune_deferred()
    assert runtime.deferred_count() == 0
    xv = np.linspace(-1, 1, 6)
    for i in range(40):
        x = ag.tensor(xv, device="cuda", requires_grad=True)
        loss = branches_on_two_streams(x)
        gate = Gate(ag.cuda.current_stream())
        task = asyncio.ensure_future(ag.grad(loss, [x]))
        for _ in range(i % 7):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        gate.open()
    assert _released_within(RELEASE_TIMEOUT_S), (
        f"{runtime.deferred_count()} deferred frees left after the GPU finished"
    )
    assert _releaser_gone(RELEASE_TIMEOUT_S), "the releaser thread outlived its work"


def test_deferred_arrays_of_a_broken_device_are_dropped(sim: Any) -> None:
    """A kernel that failed breaks its device: its events are never done. The releaser drops
    what waited for them instead of polling for ever."""
    if not hasattr(sim, "inject_fault"):
        pytest.skip("the simulator has no sticky errors")
    s = ag.cuda.Stream()
    gate = Gate(s)
    try:
        sim.inject_fault(s.native)
        refs = [ag.zeros(8, device="cuda")._array]
        runtime.defer_free(runtime.record(s.native, 0), refs)
        del refs
        gate.open()
        assert _released_within(RELEASE_TIMEOUT_S)
        assert _releaser_gone(RELEASE_TIMEOUT_S)
    finally:
        gate.open()
        sim.reset_device(0)


def test_default_streams_alone_keep_no_saved_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until a side stream is in use, every array comes from the stream of every node: the
    engine keeps nothing for the GPU (one stream costs nothing); a node recorded on a stream
    made outside asyncgrad turns the keeping on."""
    monkeypatch.setattr(runtime, "side_streams", False)
    runtime.prune_deferred()
    x = ag.tensor(np.linspace(-1.0, 1.0, 16), device="cuda", requires_grad=True)
    loss = ((x + 1.0) * x).sin().sum()
    gate = Gate(ag.cuda.current_stream())
    loss.backward()
    assert runtime.deferred_count() == 0
    assert not runtime.side_streams
    gate.open()
    native = ag.cuda.current_stream().native
    raw = type(native)(non_blocking=True)  # the runtime's own stream, not ag.cuda.Stream
    raw.wait_event(native.record())  # x was made on the current stream
    with raw:
        loss = ((x + 1.0) * x).sin().sum()
    ag.cuda.current_stream().native.wait_event(raw.record())
    loss.backward()
    assert runtime.side_streams
    xv = np.linspace(-1.0, 1.0, 16)
    assert x.grad is not None
    np.testing.assert_allclose(host(x.grad), 2 * np.cos((xv + 1) * xv) * (2 * xv + 1), rtol=1e-12)
