"""Stream semantics of backward (NOTE [Streams in the graph]): each case of ordering a producer's
and a consumer's stream, side streams, the caller's streams at the end, cross-device graphs,
and what an awaiting caller may read when it resumes.

On the simulator, streams run on their own threads with random delays (the ``delays``
fixture), and fresh device memory holds NaN until a kernel writes it: a missing
synchronisation shows as NaN or a wrong value. On a GPU and on the simulator, the cases hold the
producer's stream where it matters (``delays.hold``, NOTE [Slow producers on a GPU] in
conftest.py). Each case runs many times.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime

from .conftest import (
    Delays,
    Gate,
    assert_close,
    branches_on_two_streams,
    host,
    leaf,
    needs_devices,
    side_stream,
)

REPEAT = 12


def unordered_read(t: ag.Tensor) -> np.ndarray:
    """``t``'s device memory as it is now, read without waiting for any stream: on the
    simulator its buffer; on a GPU a copy on a new stream that waits for nothing."""
    if runtime.simulated():
        return np.array(t._array._data)
    idx = t.device.index
    rt = runtime.require(idx)
    with rt.cuda.Device(idx):
        s = rt.cuda.Stream(non_blocking=True)
        return np.asarray(t._array.get(stream=s))


def assert_ready(t: ag.Tensor, expected: Any, rtol: float = 1e-12) -> None:
    """``t`` is computed already: its memory, read without any synchronisation, holds the
    values."""
    assert_close(unordered_read(t), expected, rtol=rtol)
    assert_close(host(t), expected, rtol=rtol)


# ----------------------------------------------------------------------------- the cases
def _grad_branches(x: np.ndarray) -> np.ndarray:
    return 3.0 * np.cos(3.0 * x) + np.exp(x) * (1.0 + x)


def test_gradients_from_two_streams_are_summed_in_order(delays: Delays) -> None:
    rng = np.random.default_rng(0)
    for _ in range(REPEAT):
        xv = rng.standard_normal(64)
        x = leaf(xv)
        branches_on_two_streams(x, delays).backward()
        assert x.grad is not None
        assert_close(host(x.grad), _grad_branches(xv), rtol=1e-10)


def test_backward_of_a_graph_recorded_on_a_side_stream(delays: Delays) -> None:
    """Forward and backward on a side stream; the caller, on the default stream, reads the
    gradient after backward returns (the caller's stream waited for the leaf streams)."""
    rng = np.random.default_rng(1)
    for _ in range(REPEAT):
        xv, wv = rng.standard_normal((8, 16)), rng.standard_normal((16, 4))
        x = ag.tensor(xv, device="cuda")
        w = leaf(wv)
        s = side_stream()
        with ag.cuda.stream(s):
            loss = (x @ w).tanh().sum()
        ag.cuda.current_stream().wait_stream(s)
        delays.hold(s)  # the backward's work on s starts late
        loss.backward()
        assert w.grad is not None
        expect = xv.T @ (1.0 - np.tanh(xv @ wv) ** 2)
        assert_close(host(w.grad * 1.0), expect, rtol=1e-10)


def test_backward_called_inside_the_side_stream(delays: Delays) -> None:
    rng = np.random.default_rng(2)
    for _ in range(REPEAT):
        xv = rng.standard_normal(32)
        x = leaf(xv)
        s = side_stream()
        with ag.cuda.stream(s):
            delays.hold(s)  # everything on s (forward, backward, the copy) starts late
            (x * x).sum().backward()
            doubled = x.grad * 1.0  # type: ignore[operator]
        ag.cuda.current_stream().wait_stream(s)
        assert_close(host(doubled), 2.0 * xv, rtol=1e-12)


def test_root_gradient_made_on_the_callers_stream(delays: Delays) -> None:
    """A gradient passed to backward, computed on the caller's stream just before, is ready
    before the first node (on another stream) reads it."""
    rng = np.random.default_rng(3)
    for _ in range(REPEAT):
        xv, gv = rng.standard_normal(16), rng.standard_normal(16)
        x = leaf(xv)
        s = side_stream()
        with ag.cuda.stream(s):
            y = x.sin()
        ag.cuda.current_stream().wait_stream(s)
        delays.hold()  # the root gradient, made on the caller's stream, comes late
        g = ag.tensor(gv, device="cuda") * 2.0
        y.backward(g)
        assert_close(host(x.grad), 2.0 * gv * np.cos(xv), rtol=1e-12)  # type: ignore[arg-type]


def test_graph_across_two_devices(delays: Delays) -> None:
    """cuda:0 -> cuda:1 -> cuda:0: the copy nodes' gradients cross devices, and each node runs
    on its own device's worker."""
    needs_devices(2)
    rng = np.random.default_rng(4)
    for _ in range(REPEAT):
        xv = rng.standard_normal(24)
        x = leaf(xv, "cuda:0")
        y = x.to("cuda:1").exp()
        z = (y * x.to("cuda:1")).to("cuda:0")
        loss = (z + x).sum()
        delays.hold(ag.cuda.current_stream(1))  # the gradients made on cuda:1 come late
        loss.backward()
        assert_close(host(x.grad), np.exp(xv) * (1 + xv) + 1, rtol=1e-12)  # type: ignore[arg-type]
        assert x.grad.device == ag.device("cuda:0")  # type: ignore[union-attr]


def test_graph_between_cpu_and_cuda(delays: Delays) -> None:
    rng = np.random.default_rng(5)
    for _ in range(REPEAT):
        xv, wv = rng.standard_normal((4, 3)), rng.standard_normal(3)
        x = ag.tensor(xv, requires_grad=True)  # on the CPU
        w = leaf(wv)  # on cuda:0
        h = (x.cuda() * w).relu()
        loss = (h.cpu() ** 2).sum()
        delays.hold()  # the gradients made on cuda:0 come late
        loss.backward()
        r = np.maximum(xv * wv, 0)
        assert_close(host(x.grad), 2 * r * (xv * wv > 0) * wv, rtol=1e-12)  # type: ignore[arg-type]
        assert_close(host(w.grad), (2 * r * (xv * wv > 0) * xv).sum(0), rtol=1e-12)  # type: ignore[arg-type]


def test_gradient_copied_to_a_device_whose_consumer_is_on_a_side_stream(delays: Delays) -> None:
    """A copy node's backward copies the gradient onto the destination device's current stream;
    a consumer there recorded on a side stream must wait for that stream."""
    rng = np.random.default_rng(8)
    for dest in ("cpu", "cuda:1"):
        if dest == "cuda:1" and ag.cuda.device_count() < 2:
            continue
        for _ in range(REPEAT):
            xv = rng.standard_normal(32)
            x = leaf(xv)
            s = side_stream()
            with ag.cuda.stream(s):
                y = (x * 2.0).sin()
            ag.cuda.current_stream().wait_stream(s)
            loss = (y.to(dest) * 3.0).sum()
            delays.hold()  # the copy lands on cuda:0's current stream, late
            if dest == "cuda:1":
                delays.hold(ag.cuda.current_stream(1))  # the gradient made on cuda:1 is late
            loss.backward()
            assert_close(host(x.grad), 6.0 * np.cos(2.0 * xv), rtol=1e-12)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- awaiting
async def _await_grad(
    make: Callable[[], tuple[ag.Tensor, ag.Tensor]],
) -> tuple[ag.Tensor, ag.Tensor]:
    loss, x = make()
    (g,) = await asyncio.wait_for(ag.grad(loss, [x]), 10)
    return g, x


async def test_await_resumes_when_the_gradient_is_computed(delays: Delays) -> None:
    """After ``await ag.grad`` the gradient's memory holds its values: read without any
    synchronisation (``unordered_read``), nothing is left to compute."""
    rng = np.random.default_rng(6)
    for _ in range(REPEAT):
        xv = rng.standard_normal(64)
        x = leaf(xv)
        (g,) = await asyncio.wait_for(ag.grad(branches_on_two_streams(x, delays), [x]), 10)
        assert_ready(g, _grad_branches(xv), rtol=1e-10)


async def test_await_waits_for_the_gpu_without_blocking_the_loop() -> None:
    x = leaf(np.linspace(-1, 1, 8))
    loss = (x * x).sum()
    gate = Gate(ag.cuda.current_stream())  # the GPU is busy before the backward's kernels
    task = asyncio.ensure_future(ag.grad(loss, [x]))
    ticks = 0
    for _ in range(200):  # the loop keeps running while the GPU is held
        await asyncio.sleep(0)
        ticks += 1
    assert not task.done()
    gate.open()
    (g,) = await asyncio.wait_for(task, 10)
    assert ticks == 200
    assert_ready(g, 2 * np.linspace(-1, 1, 8))


async def test_event_can_be_awaited() -> None:
    s = ag.cuda.current_stream()
    gate = Gate(s)
    ev = s.record_event()
    assert not ev.query()
    waiter = asyncio.ensure_future(_wait(ev))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not waiter.done()
    gate.open()
    await asyncio.wait_for(waiter, 10)
    assert ev.query()


async def _wait(ev: ag.cuda.Event) -> None:
    await ev


async def test_cancel_while_gpu_work_is_in_flight_frees_buffers_after_it() -> None:
    """Cancelling the awaiting caller while kernels it queued have not run: the caller gets
    CancelledError at once; the graph task's arrays stay allocated until the GPU is done."""
    x = leaf(np.linspace(-1, 1, 16))
    loss = branches_on_two_streams(x)
    gate = Gate(ag.cuda.current_stream())
    before = runtime.deferred_count()
    task = asyncio.ensure_future(ag.grad(loss, [x]))
    for _ in range(100):
        await asyncio.sleep(0)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert runtime.deferred_count() > before  # held for the kernels still queued
    gate.open()
    ag.cuda.synchronize()
    for i in range(ag.cuda.device_count()):
        ag.cuda.synchronize(i)
    runtime.prune_deferred()
    assert runtime.deferred_count() == 0


def test_sync_backward_does_not_wait_for_the_gpu() -> None:
    """``backward()`` in a script returns once the work is queued (as torch's); the caller's
    stream is ordered after it, so reading the gradient waits for it."""
    x = leaf(np.arange(4.0))
    loss = (x * x).sum()
    s = ag.cuda.current_stream()
    gate = Gate(s)
    loss.backward()  # returns with the stream still held
    assert not s.query()
    gate.open()
    np.testing.assert_array_equal(host(x.grad), 2 * np.arange(4.0))  # type: ignore[arg-type]


def test_hold_keeps_later_work_on_the_stream_waiting(delays: Delays) -> None:
    """``delays.hold`` holds the stream for about the time asked (NOTE [Slow producers on a
    GPU]): work queued after it waits, and the host does not."""
    delays.hold(seconds=1e-6)  # on a GPU the first hold compiles the kernel
    ag.cuda.synchronize()
    seconds = 0.2
    x = ag.tensor(np.arange(4.0), device="cuda")
    start = time.perf_counter()
    delays.hold(seconds=seconds)
    queued = time.perf_counter() - start
    y = x * 2.0
    done = ag.cuda.current_stream().record_event()
    assert not done.query()
    done.synchronize()
    took = time.perf_counter() - start
    assert queued < seconds / 2, queued
    # A GPU whose clock is below its peak spins longer (the cycles are counted at the peak).
    assert seconds * 0.9 <= took < seconds * 20, took
    np.testing.assert_array_equal(host(y), 2.0 * np.arange(4.0))


# ----------------------------------------------------------------------------- ag.cuda
def test_streams_and_events_api() -> None:
    s = ag.cuda.Stream()
    assert s.device == ag.device("cuda:0")
    assert ag.cuda.current_stream() == ag.cuda.default_stream()
    with ag.cuda.stream(s):
        assert ag.cuda.current_stream() == s
    assert ag.cuda.current_stream() == ag.cuda.default_stream()
    ev = ag.cuda.Event()
    assert ev.query()  # never recorded
    s.record_event(ev)
    s.synchronize()
    assert ev.query()
    assert s.query()


def test_device_selection() -> None:
    n = ag.cuda.device_count()
    assert n >= 1
    assert ag.cuda.current_device() == 0
    ag.cuda.set_device(n - 1)
    assert ag.cuda.current_device() == n - 1
    ag.cuda.set_device(0)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        ag.zeros(3, device=f"cuda:{n}")


def test_tf32_switch_mirrors_torch() -> None:
    assert ag.cuda.matmul.allow_tf32 is False
    ag.cuda.matmul.allow_tf32 = True
    try:
        assert ag.cuda.matmul.allow_tf32 is True
    finally:
        ag.cuda.matmul.allow_tf32 = False


def test_mixing_devices_names_both() -> None:
    a = ag.ones(3, device="cuda")
    b = ag.ones(3)
    with pytest.raises(RuntimeError, match=r"cuda:0 and cpu|cpu and cuda:0"):
        _ = a + b


def test_cuda_tensor_is_not_a_numpy_array() -> None:
    t = ag.ones(3, device="cuda")
    with pytest.raises(TypeError, match="cuda:0 device type tensor to numpy"):
        np.asarray(t)
    assert t.cpu().tolist() == [1.0, 1.0, 1.0]
    assert repr(t) == "tensor([1., 1., 1.], device='cuda:0')"


def test_random_numbers_are_drawn_on_the_device() -> None:
    ag.manual_seed(7)
    a = ag.randn(5, device="cuda")
    ag.manual_seed(7)
    b = ag.randn(5, device="cuda")
    assert a.device == ag.device("cuda:0")
    np.testing.assert_array_equal(host(a), host(b))


async def test_worker_runs_at_most_a_bounded_distance_ahead_of_the_gpu() -> None:
    """With the GPU held, a CUDA worker launches a couple of slices of nodes and then waits
    (without blocking the loop) instead of queuing the whole backward pass."""
    from asyncgrad.engine import worker

    x = leaf(np.ones(4))
    y = x
    ran: list[int] = []
    for _ in range(600):
        y = y * 1.0
        assert y.grad_fn is not None
        y.grad_fn.register_prehook(lambda g: ran.append(1))
    loss = y.sum()
    old = ag.autograd.engine.slice_s
    ag.autograd.engine.configure(slice_s=1e-9)  # a slice is then the 16 nodes between checks
    try:
        gate = Gate(ag.cuda.current_stream())
        task = asyncio.ensure_future(ag.grad(loss, [x]))
        for _ in range(300):
            await asyncio.sleep(0)
        # Two slices ahead of the held GPU, plus the slice that found them unfinished.
        assert worker.MAX_SLICES_AHEAD == 2
        assert 0 < len(ran) <= 4 * 16, len(ran)
        assert not task.done()
        gate.open()
        (g,) = await asyncio.wait_for(task, 10)
    finally:
        ag.autograd.engine.configure(slice_s=old)
    assert len(ran) == 600
    assert_ready(g, np.ones(4))


async def test_abackward_returns_with_its_grad_fields_ordered_on_the_callers_stream(
    delays: Delays,
) -> None:
    """NOTE [Passes in flight]: the awaited backward returns once its kernels are queued; a host
    read on the caller's stream waits for them, and ``synchronize_async`` waits for them without
    blocking the loop."""
    rng = np.random.default_rng(9)
    for i in range(REPEAT):
        xv = rng.standard_normal(64)
        x = leaf(xv)
        await asyncio.wait_for(branches_on_two_streams(x, delays).abackward(), 10)
        assert x.grad is not None
        if i % 2:
            await asyncio.wait_for(ag.cuda.synchronize_async(), 10)
            assert_ready(x.grad, _grad_branches(xv), rtol=1e-10)
        else:
            assert_close(host(x.grad), _grad_branches(xv), rtol=1e-10)


async def test_agrad_resumes_when_its_gradients_are_computed(delays: Delays) -> None:
    """A pass that returns gradients ends only once the GPU has computed them: reading them
    does not block the loop."""
    rng = np.random.default_rng(10)
    for _ in range(REPEAT):
        xv = rng.standard_normal(64)
        x = leaf(xv)
        (g,) = await asyncio.wait_for(ag.grad(branches_on_two_streams(x, delays), [x]), 10)
        assert_ready(g, _grad_branches(xv), rtol=1e-10)


async def test_each_device_has_its_own_worker(delays: Delays) -> None:
    """An awaited backward across cuda:0 and cuda:1 runs each node on its device's worker."""
    needs_devices(2)
    from asyncgrad.engine import scheduler

    seen: dict[str, set[str]] = {"cuda:0": set(), "cuda:1": set()}

    def note(dev: str) -> Callable[[Any], None]:
        def hook(_: Any) -> None:
            task = asyncio.current_task()
            seen[dev].add(task.get_name() if task is not None else "")

        return hook

    xv = np.linspace(-1, 1, 8)
    x = leaf(xv, "cuda:0")
    a = x.sin()
    assert a.grad_fn is not None
    a.grad_fn.register_prehook(note("cuda:0"))
    b = a.to("cuda:1").exp()
    assert b.grad_fn is not None
    b.grad_fn.register_prehook(note("cuda:1"))
    delays.hold(ag.cuda.current_stream(1))  # the gradient made on cuda:1 comes late
    (g,) = await asyncio.wait_for(ag.grad(b.sum(), [x]), 10)
    assert_close(host(g), np.exp(np.sin(xv)) * np.cos(xv), rtol=1e-12)
    assert seen == {"cuda:0": {"asyncgrad-worker-cuda:0"}, "cuda:1": {"asyncgrad-worker-cuda:1"}}
    loop = asyncio.get_running_loop()
    assert {str(q.device) for q in scheduler.of(loop).queues.values()} >= {"cuda:0", "cuda:1"}


def test_dlpack_exchange_with_torch_shares_memory() -> None:
    torch = pytest.importorskip("torch")
    if runtime.simulated():
        pytest.skip("simulated device memory cannot be exported through DLPack")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    src = torch.arange(4.0, device="cuda")
    t = ag.from_dlpack(src)
    assert t.device == ag.device("cuda:0")
    src[0] = 7.0
    torch.cuda.synchronize()
    assert t.cpu().tolist() == [7.0, 1.0, 2.0, 3.0]
    back = torch.from_dlpack(ag.ones(3, device="cuda"))
    assert back.device.type == "cuda"
    assert back.sum().item() == 3.0


async def test_copy_to_the_host_in_an_awaited_backward_does_not_block_the_loop() -> None:
    """The backward of ``x.cuda()`` for a CPU ``x`` reads the GPU's gradient on the host; an
    awaiting caller's loop keeps running while the GPU is still computing it."""
    xv = np.linspace(-1, 1, 8)
    x = ag.tensor(xv, requires_grad=True)
    loss = (x.cuda() ** 2).sum()
    gate = Gate(ag.cuda.current_stream())
    task = asyncio.ensure_future(ag.grad(loss, [x]))
    for _ in range(200):
        await asyncio.sleep(0)
    assert not task.done()
    gate.open()
    (g,) = await asyncio.wait_for(task, 10)
    assert not gate.timed_out  # opened by this coroutine: the loop was never blocked
    assert g.device == ag.device("cpu")
    np.testing.assert_allclose(g.numpy(), 2 * xv)


def test_backward_on_the_second_device_makes_its_arrays_there() -> None:
    """Rules that allocate (the backward of indexing makes zeros) run with their node's device
    current, whatever device the caller has selected."""
    needs_devices(2)
    xv = np.arange(6.0).reshape(3, 2)
    x = leaf(xv, "cuda:1")
    y = x[ag.tensor([0, 2, 0])] * 2.0
    ag.cuda.set_device(0)
    y.sum().backward()
    assert x.grad is not None
    assert x.grad.device == ag.device("cuda:1")
    np.testing.assert_array_equal(host(x.grad), [[4.0, 4.0], [0.0, 0.0], [2.0, 2.0]])


def test_copy_between_devices_in_place() -> None:
    """``dst.copy_(src)`` across devices (as torch): the gradient reaches a CPU source."""
    src = ag.tensor([1.0, 2.0, 3.0], requires_grad=True)
    dst = ag.zeros(3, device="cuda")
    dst.copy_(src * 2.0)
    assert dst.device == ag.device("cuda:0")
    (dst * dst).sum().backward()
    assert src.grad is not None
    assert src.grad.device == ag.device("cpu")
    np.testing.assert_allclose(src.grad.numpy(), 8.0 * np.array([1.0, 2.0, 3.0]))
    host_data = ag.zeros(2, device="cuda")
    host_data.copy_(np.array([5.0, 6.0]))
    host_data[0] = 7.0
    assert host_data.device == ag.device("cuda:0")
    assert host_data.cpu().tolist() == [7.0, 6.0]
    filled = ag.ones(3, device="cuda").masked_fill(ag.tensor([True, False, True], device="cuda"), 4)
    assert filled.cpu().tolist() == [4.0, 1.0, 4.0]


def test_every_stream_test_can_run_on_a_gpu(request: pytest.FixtureRequest) -> None:
    """No test here depends on the ``sim`` fixture, which skips off the simulator: slow
    producers come from ``delays``, which works on a GPU too."""
    here = [i for i in request.session.items if i.path == request.node.path]
    needing = [i.name for i in here if "sim" in getattr(i, "fixturenames", ())]
    assert not needing, f"these skip on a GPU: {needing}"
