"""``ag.grad(...)`` used as torch's ``torch.autograd.grad(...)``, without ``await``.

Where no event loop runs in the calling thread (a plain script, a worker thread), the value
``ag.grad`` returns is a coroutine that may also be unpacked, indexed or measured: that runs the
backward pass there and then. Inside a running loop ``ag.grad`` returns a plain coroutine, as
before. Neither way leaves a "coroutine was never awaited" warning behind.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag

TIMEOUT_S: Final = 10.0


@pytest.fixture
def no_never_awaited() -> Iterator[None]:
    """Fail the test if a "coroutine ... was never awaited" warning is raised while it runs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    found = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert not found, found


def problem() -> tuple[ag.Tensor, ag.Tensor, ag.Tensor]:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    w = ag.tensor([3.0, -1.0], requires_grad=True)
    return x, w, (x * x * w).sum()


def check(gx: Any, gw: Any) -> None:
    np.testing.assert_allclose(gx.numpy(), [6.0, -4.0])
    np.testing.assert_allclose(gw.numpy(), [1.0, 4.0])


def make_in_thread(fn: Any) -> Any:
    """Call ``fn`` on a thread with no event loop and return its result."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(timeout=TIMEOUT_S)
    assert not t.is_alive()
    return out[0]


# --------------------------------------------------------------------------- no running loop
def test_unpacking_runs_the_backward_like_torch(no_never_awaited: None) -> None:
    x, w, y = problem()
    (gx, gw) = ag.grad(y, [x, w], retain_graph=True)
    check(gx, gw)
    (gx,) = ag.grad(y, [x], retain_graph=True)
    np.testing.assert_allclose(gx.numpy(), [6.0, -4.0])
    assert x.grad is None  # grad() never touches .grad


def test_indexing_len_and_iteration(no_never_awaited: None) -> None:
    x, w, y = problem()
    res = ag.grad(y, [x, w])
    assert len(res) == 2
    check(res[0], res[1])
    assert tuple(res) == (res[0], res[1])  # computed once: the same tensors each time
    assert res[-1] is res[1]
    assert "ag.grad result" in repr(res)


def test_unused_call_still_warns_never_awaited() -> None:
    # The check the other tests rely on: a call that is neither awaited nor used is reported.
    x, _, y = problem()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pending = ag.grad(y, x)
        assert "not run yet" in repr(pending)
        del pending
        gc.collect()
    assert any("coroutine 'grad' was never awaited" in str(w.message) for w in caught)


def test_argument_errors_surface_at_use(no_never_awaited: None) -> None:
    _, _, y = problem()
    with pytest.raises(TypeError, match=r"inputs\[0\] must be a Tensor, got numpy\.ndarray"):
        (_,) = ag.grad(y, [np.ones(2)])
    with pytest.raises(RuntimeError, match="does not require grad"):
        (_,) = ag.grad(y, [ag.ones(2)])


def test_asyncio_run_of_a_call_made_without_a_loop(no_never_awaited: None) -> None:
    x, w, y = problem()
    check(*asyncio.run(ag.grad(y, [x, w])))


def test_used_then_awaited_gives_the_same_result(no_never_awaited: None) -> None:
    x, w, y = problem()
    res = ag.grad(y, [x, w])
    first = tuple(res)

    async def later() -> Any:
        return await res

    assert asyncio.run(later()) == first


def test_awaited_then_indexed_is_an_error(no_never_awaited: None) -> None:
    x, w, y = problem()
    res = ag.grad(y, [x, w])
    check(*asyncio.run(res))
    with pytest.raises(RuntimeError, match="already awaited"):
        res[0]


def test_worker_thread_without_a_loop(no_never_awaited: None) -> None:
    x, w, y = problem()
    check(*make_in_thread(lambda: tuple(ag.grad(y, [x, w]))))


def test_a_plain_script() -> None:
    script = (
        "import asyncgrad as ag\n"
        "x = ag.tensor([1.0, 2.0], requires_grad=True)\n"
        "y = (x * x).sum()\n"
        "(g,) = ag.grad(y, [x])\n"
        "print(g.tolist())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[2.0, 4.0]"
    assert proc.stderr == ""


# ---------------------------------------------------------------------------- running loop
async def test_inside_a_loop_grad_returns_a_plain_coroutine() -> None:
    x, w, y = problem()
    coro = ag.grad(y, [x, w])
    assert inspect.iscoroutine(coro)  # the fast path: nothing wraps it
    async with asyncio.timeout(TIMEOUT_S):
        check(*await coro)


async def test_call_made_without_a_loop_used_inside_one_asks_for_await(
    no_never_awaited: None,
) -> None:
    x, w, y = problem()
    pending = await asyncio.to_thread(ag.grad, y, [x, w])
    with pytest.raises(TypeError, match=r"`await ag\.grad\(\.\.\.\)`.*grad_sync"):
        (_, _) = pending
    with pytest.raises(TypeError, match="await"):
        pending[0]
    async with asyncio.timeout(TIMEOUT_S):
        check(*await pending)


async def test_call_made_without_a_loop_runs_as_a_task(no_never_awaited: None) -> None:
    x, w, y = problem()
    pending = await asyncio.to_thread(ag.grad, y, [x, w], retain_graph=True)
    async with asyncio.timeout(TIMEOUT_S):
        check(*await asyncio.create_task(pending))
        check(*(await asyncio.gather(ag.grad(y, [x, w])))[0])


async def test_run_coroutine_threadsafe_from_a_thread_without_a_loop(
    no_never_awaited: None,
) -> None:
    x, w, y = problem()
    loop = asyncio.get_running_loop()

    def submit() -> Any:
        fut = asyncio.run_coroutine_threadsafe(ag.grad(y, [x, w]), loop)
        return fut.result(timeout=TIMEOUT_S)

    async with asyncio.timeout(TIMEOUT_S):
        check(*await asyncio.to_thread(submit))


async def test_cancelling_a_task_running_a_call_made_without_a_loop(
    no_never_awaited: None,
) -> None:
    x, _, y = problem()
    entered, release = asyncio.Event(), asyncio.Event()

    async def hook(g: ag.Tensor) -> None:
        entered.set()
        await release.wait()  # never set: the task is cancelled while here

    h = x.register_hook(hook)
    try:
        pending = await asyncio.to_thread(ag.grad, y, x)
        async with asyncio.timeout(TIMEOUT_S):
            task = asyncio.create_task(pending)
            await entered.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await ag.autograd.engine.wait_idle()
    finally:
        h.remove()
