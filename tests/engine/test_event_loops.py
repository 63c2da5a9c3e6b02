"""The awaitable API on every event loop: asyncio, asyncio with uvloop, and trio (through anyio).

See NOTE [Other event loops] in asyncgrad/engine/foreign.py: under trio a graph task runs with
the blocking executor on a worker thread, and cancelling the awaiting task stops it at its next
slice or node boundary before the cancellation goes on.

These tests drive each loop with ``anyio.run`` themselves instead of through anyio's pytest
plugin: in ``asyncio_mode = "auto"`` pytest-asyncio takes every coroutine test function, the
ones marked ``anyio`` included, and runs it on its own asyncio loop. Here they are plain
functions, which pytest-asyncio leaves alone, and each runs once per loop. Every run ends with
the engine idle (``_finish``) under a bound on the whole run.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.engine import metrics

from .helpers import THREAD_TIMEOUT_S, TIMEOUT_S, arr, assert_close, leaf, scale_chain

anyio = pytest.importorskip("anyio")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: blocked by a None in sys.modules
        return False


HAVE_TRIO: Final = _installed("trio")
HAVE_UVLOOP: Final = _installed("uvloop")

BACKENDS: Final = [
    pytest.param(("asyncio", {"debug": True}), id="asyncio"),
    pytest.param(
        ("asyncio", {"debug": True, "use_uvloop": True}),
        id="uvloop",
        marks=pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop is not installed"),
    ),
    pytest.param(
        ("trio", {}),
        id="trio",
        marks=pytest.mark.skipif(not HAVE_TRIO, reason="trio is not installed"),
    ),
]

# The length of the chain whose backward a timeout cuts short (about a second of work).
LONG_CHAIN: Final = 200_000

USER_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("event_loops_user", default="unset")


class Loop:
    """One event loop to run a test's body on."""

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        self.name = name
        self.options = options
        self.is_trio = name == "trio"

    def run(self, body: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``body()`` on this loop, then check that the engine is idle, all under one bound."""
        return anyio.run(self._main, body, backend=self.name, backend_options=self.options)

    async def _main(self, body: Callable[[], Awaitable[Any]]) -> Any:
        loop = asyncio._get_running_loop()
        if loop is not None:
            # Debug mode reports never-awaited coroutines and cross-thread calls into the loop;
            # only a callback slow enough to look like a hang should warn.
            loop.slow_callback_duration = 10.0
        with anyio.fail_after(TIMEOUT_S):
            result = await body()
            await _finish()
        return result


async def _finish() -> None:
    """The engine has nothing left to do: no graph task running anywhere, no task of the
    engine left on an asyncio loop."""
    loop = asyncio._get_running_loop()
    if loop is not None:
        await ag.autograd.engine.wait_idle()
        assert ag.autograd.engine.stats(loop)["graph_tasks"]["running"] == 0
        assert not asyncio.all_tasks(loop) - {asyncio.current_task()}
    assert metrics.BLOCKING.running == 0


@pytest.fixture(params=BACKENDS)
def loop(request: pytest.FixtureRequest) -> Loop:
    name, options = request.param
    return Loop(name, options)


def finite_differences(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> Any:
    g = np.zeros_like(x)
    for i in range(x.size):
        d = np.zeros_like(x)
        d.flat[i] = eps
        g.flat[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_each_backend_runs_on_its_own_loop(loop: Loop) -> None:
    async def body() -> str:
        running = asyncio._get_running_loop()
        return "trio" if running is None else type(running).__module__

    where = loop.run(body)
    expected = {"asyncio": "asyncio", "uvloop": "uvloop", "trio": "trio"}
    kind = "uvloop" if loop.options.get("use_uvloop") else loop.name
    assert where.split(".")[0] == expected[kind]


def test_grad_matches_closed_form_and_finite_differences(loop: Loop) -> None:
    x0 = np.array([0.3, -1.2, 2.0])
    w0 = np.array([[0.5, -0.25, 1.5], [2.0, 0.1, -0.7]])

    def f(x: np.ndarray) -> float:
        return float(np.sum(np.tanh(w0 @ x) ** 2))

    async def body() -> None:
        x = leaf(x0)
        (gx,) = await ag.grad((x.sin() * x.exp()).sum(), x)
        assert_close(gx, (np.cos(x0) + np.sin(x0)) * np.exp(x0), rtol=1e-12, atol=1e-12)

        w = leaf(w0)
        out = ((w @ x).tanh() ** 2).sum()
        gx, gw = await ag.grad(out, [x, w])
        assert_close(gx, finite_differences(f, x0), rtol=1e-6, atol=1e-8)
        t = np.tanh(w0 @ x0)
        assert_close(gw, np.outer(2 * t * (1 - t**2), x0), rtol=1e-12, atol=1e-12)

        # Second order: d/dx sum(x**3) = 3x**2, and the grad of that is 6x.
        (g1,) = await ag.grad((x**3).sum(), x, create_graph=True)
        (g2,) = await ag.grad(g1.sum(), x)
        assert_close(g1, 3 * x0**2, rtol=1e-12, atol=1e-12)
        assert_close(g2, 6 * x0, rtol=1e-12, atol=1e-12)
        assert x.grad is None  # grad() never touches .grad

    loop.run(body)


def test_backward_and_abackward_accumulate_into_leaves(loop: Loop) -> None:
    x0 = np.array([1.0, -2.0, 0.5])

    async def body() -> None:
        x = leaf(x0)
        y = (x * x).sum()
        await ag.backward(y, retain_graph=True)
        assert_close(x.grad, 2 * x0, rtol=1e-12, atol=0)
        await y.abackward()
        assert_close(x.grad, 4 * x0, rtol=1e-12, atol=0)
        await ag.backward(x.exp(), grad_tensors=ag.tensor([1.0, 2.0, 3.0], dtype=ag.float64))
        assert_close(x.grad, 4 * x0 + np.array([1.0, 2.0, 3.0]) * np.exp(x0), rtol=1e-12, atol=0)

    loop.run(body)


def test_concurrent_grads(loop: Loop) -> None:
    n = 8

    async def body() -> None:
        xs = [leaf(np.arange(1.0, 4.0) + i) for i in range(n)]
        shared = leaf([1.0, 2.0])
        results: dict[int, Any] = {}

        async def one(i: int) -> None:
            x = xs[i]
            # A different power per task, so that crossed results would show.
            (g,) = await ag.grad(scale_chain(x ** (i + 1), 200).sum(), x)
            results[i] = g

        async def accumulate() -> None:
            await ag.backward(scale_chain(shared, 300, 1.0).sum())

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
            for _ in range(4):
                tg.start_soon(accumulate)
        for i in range(n):
            x0 = np.arange(1.0, 4.0) + i
            assert_close(results[i], (i + 1) * x0**i, rtol=1e-12, atol=0)
        assert_close(shared.grad, [4.0, 4.0], rtol=0, atol=0)

    loop.run(body)


def test_error_in_a_node_reaches_the_caller_with_the_node_named(loop: Loop) -> None:
    class Boom(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1

        @staticmethod
        def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            raise ValueError("boom in backward")

    async def body() -> None:
        x = leaf([1.0, 2.0])
        w = leaf([3.0])
        bad = scale_chain(Boom.apply(x), 5).sum()
        # retain_graph: the nodes that ran before the error are freed otherwise (x * 1.0 saves
        # its 1.0, as torch's), and the second call would stop at them, as torch's does.
        with pytest.raises(ValueError, match="boom in backward") as info:
            await ag.grad(bad, x, retain_graph=True)
        assert "(raised while computing the backward of BoomBackward)" in info.value.__notes__
        with pytest.raises(ValueError, match="boom in backward"):
            await bad.abackward()
        assert x.grad is None
        # A failed pass leaves the engine usable, and a good one beside a failing one succeeds.
        outcome: dict[str, Any] = {}

        async def failing() -> None:
            try:
                await ag.backward(scale_chain(Boom.apply(x), 5).sum())
            except ValueError as e:
                outcome["error"] = e

        async with anyio.create_task_group() as tg:
            tg.start_soon(failing)
            tg.start_soon(ag.backward, (w * w).sum())
        assert isinstance(outcome["error"], ValueError)
        assert_close(w.grad, [6.0], rtol=0, atol=0)

    loop.run(body)


@pytest.fixture(scope="module")
def long_chain() -> tuple[ag.Tensor, ag.Tensor]:
    """A leaf and the sum of a LONG_CHAIN-node chain on it, kept for several backward passes."""
    x = leaf([1.0])
    return x, scale_chain(x, LONG_CHAIN).sum()


def test_timeout_stops_a_long_backward(loop: Loop, long_chain: tuple[ag.Tensor, ag.Tensor]) -> None:
    x, loss = long_chain
    x.grad = None

    async def body() -> bool:
        try:
            with anyio.fail_after(0.02):
                await ag.backward(loss, retain_graph=True)
        except TimeoutError:
            # The engine stopped the pass before the error reached us: .grad stays untouched
            # (AccumulateGrad is the chain's last node), and stays so.
            assert x.grad is None
            await _finish()
            assert x.grad is None
            return True
        # The whole chain ran within the timeout (a very fast machine): .grad is complete.
        assert_close(x.grad, [1.0], rtol=0, atol=0)
        return False

    loop.run(body)
    if not loop.is_trio:  # one full pass (a second) is enough to show the graph is intact
        return
    # The graph is intact after the cancelled pass: a full pass still runs.
    x.grad = None

    async def again() -> None:
        await ag.backward(loss, retain_graph=True)

    loop.run(again)
    assert_close(x.grad, [1.0], rtol=0, atol=0)


def gate(
    entered: threading.Event, release: threading.Event, left: threading.Event, is_async: bool
) -> Any:
    """A custom Function whose backward signals ``entered``, then waits for ``release`` (and
    sets ``left`` when it returns or is cancelled)."""
    if is_async:

        class AsyncGate(ag.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
                return x * 1

            @staticmethod
            async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
                entered.set()
                try:
                    # On an asyncio loop (the caller's, or a helper loop under trio): a
                    # cancellable wait that blocks no loop.
                    opened = await anyio.to_thread.run_sync(
                        release.wait, THREAD_TIMEOUT_S, abandon_on_cancel=True
                    )
                finally:
                    left.set()
                assert opened, "the gate was never opened"
                return g

        return AsyncGate

    class Gate(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1

        @staticmethod
        def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            entered.set()
            try:
                assert release.wait(THREAD_TIMEOUT_S), "the gate was never opened"
            finally:
                left.set()
            return g

    return Gate


@pytest.mark.parametrize("is_async", [True, False], ids=["async_node", "blocking_node"])
def test_cancelling_the_caller_stops_the_pass_at_the_running_node(
    loop: Loop, is_async: bool
) -> None:
    if not is_async and not loop.is_trio:
        pytest.skip("a blocking node runs on the asyncio loop's own thread: it holds the loop")
    entered, release, left = threading.Event(), threading.Event(), threading.Event()
    fn = gate(entered, release, left, is_async)

    async def body() -> None:
        x = leaf([1.0, 2.0])
        loss = (scale_chain(fn.apply(x), 10) * 3).sum()
        scope = anyio.CancelScope()
        seen: dict[str, Any] = {}

        async def caller() -> None:
            with scope:
                await ag.backward(loss)
                seen["finished"] = True
            # The cancellation has reached the caller: under trio, only once the thread has
            # left the graph task.
            seen["left"] = left.is_set()
            seen["running"] = metrics.BLOCKING.running
            seen["grad"] = None if x.grad is None else arr(x.grad).copy()

        async def canceller() -> None:
            assert await anyio.to_thread.run_sync(entered.wait, THREAD_TIMEOUT_S)
            scope.cancel()
            if not is_async:
                release.set()  # a blocking node cannot be interrupted: it returns, then stops

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(caller)
                tg.start_soon(canceller)
        finally:
            release.set()
        assert "finished" not in seen
        assert scope.cancelled_caught
        if loop.is_trio:
            assert seen["left"]
            assert seen["running"] == 0
        if is_async:
            assert seen["grad"] is None  # the gate never opened: nothing reached the leaf
        elif seen["grad"] is not None:  # the last nodes ran before the flag was seen: complete
            np.testing.assert_array_equal(seen["grad"], [3.0, 3.0])
        await _finish()
        assert (x.grad is None) == (seen["grad"] is None)  # and nothing changed since

    loop.run(body)
    assert left.wait(THREAD_TIMEOUT_S)


@pytest.mark.pure_only(reason="patches engine._execute_sync and the Final foreign.STOP_TIMEOUT_S")
def test_a_node_that_outlasts_the_stop_timeout_is_left_to_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under trio, a cancelled caller waits at most STOP_TIMEOUT_S for a node that does not
    return, warns, and lets the cancellation go on; the pass stops once the node returns."""
    if not HAVE_TRIO:
        pytest.skip("trio is not installed")
    from asyncgrad.engine import engine, foreign

    entered, release, left = threading.Event(), threading.Event(), threading.Event()
    fn = gate(entered, release, left, False)
    thread_done = threading.Event()
    execute_sync = engine._execute_sync

    def watched(*args: Any) -> Any:
        try:
            return execute_sync(*args)
        finally:
            thread_done.set()

    monkeypatch.setattr(engine, "_execute_sync", watched)
    monkeypatch.setattr(foreign, "STOP_TIMEOUT_S", 0.05)

    async def body() -> None:
        x = leaf([1.0])
        scope = anyio.CancelScope()

        async def caller() -> None:
            with pytest.warns(RuntimeWarning, match="still running on its thread"), scope:
                await ag.backward(fn.apply(x).sum())
            assert not left.is_set()  # the node was still running when the caller went on
            release.set()

        async def canceller() -> None:
            assert await anyio.to_thread.run_sync(entered.wait, THREAD_TIMEOUT_S)
            scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(caller)
                tg.start_soon(canceller)
            assert await anyio.to_thread.run_sync(thread_done.wait, THREAD_TIMEOUT_S)
        finally:
            release.set()
        assert scope.cancelled_caught
        # The pass saw its flag at the end of the slice in which the node returned: the nodes
        # after it in that slice (here the leaf's) may have run.
        assert x.grad is None or arr(x.grad).tolist() == [1.0]

    Loop("trio", {}).run(body)


def test_a_pass_cancelled_before_its_thread_starts_never_runs() -> None:
    """Under trio, a pass whose caller is cancelled while it waits for a worker thread (all of
    anyio's are taken) never starts."""
    if not HAVE_TRIO:
        pytest.skip("trio is not installed")
    entered, release, left = threading.Event(), threading.Event(), threading.Event()
    fn = gate(entered, release, left, False)

    async def body() -> None:
        limiter = anyio.to_thread.current_default_thread_limiter()
        saved = limiter.total_tokens
        limiter.total_tokens = 1
        try:
            x = leaf([1.0])
            y = leaf([1.0])
            scope = anyio.CancelScope()

            async def second() -> None:
                with scope:
                    await ag.backward((y * 2).sum())

            async with anyio.create_task_group() as tg:
                tg.start_soon(ag.backward, fn.apply(x).sum())  # takes the only thread
                assert await _wait_in_loop_thread(entered)
                tg.start_soon(second)
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
                await anyio.wait_all_tasks_blocked()
                release.set()
            assert scope.cancelled_caught
            assert y.grad is None
            assert_close(x.grad, [1.0], rtol=0, atol=0)
        finally:
            release.set()
            limiter.total_tokens = saved

    Loop("trio", {}).run(body)


async def _wait_in_loop_thread(event: threading.Event) -> bool:
    """Wait for ``event`` without a worker thread (the limiter may have none left): trio's own
    thread-safe hand-off."""
    import trio

    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def waiter() -> None:
        if event.wait(THREAD_TIMEOUT_S):
            token.run_sync_soon(done.set)

    t = threading.Thread(target=waiter, name="test-gate-waiter")
    t.start()
    try:
        with trio.move_on_after(THREAD_TIMEOUT_S):
            await done.wait()
    finally:
        t.join(THREAD_TIMEOUT_S)
    return done.is_set()


@pytest.fixture
def compute_threads() -> Iterator[None]:
    """Stop the engine's compute threads after the test, so the thread check sees none left."""
    yield
    ag.autograd.engine.compute_pool.shutdown()


@pytest.mark.usefixtures("compute_threads")
def test_run_carries_the_callers_context(loop: Loop) -> None:
    async def body() -> None:
        model = ag.nn.Linear(3, 2)
        x = ag.ones(4, 3)
        out = await ag.run(model, x)
        np.testing.assert_allclose(arr(out), arr(model(x)))
        assert out.requires_grad
        with ag.no_grad():
            assert await ag.run(ag.is_grad_enabled) is False
            assert not (await ag.run(model, x)).requires_grad
        assert await ag.run(ag.is_grad_enabled) is True
        tok = USER_VAR.set("caller")
        try:
            assert await ag.run(USER_VAR.get) == "caller"
        finally:
            USER_VAR.reset(tok)
        with pytest.raises(ZeroDivisionError):
            await ag.run(lambda: 1 / 0)

    loop.run(body)


def test_grad_mode_flows_into_the_pass(loop: Loop) -> None:
    """The pass runs in the caller's context: ``create_graph`` records the backward, and a hook
    sees the caller's context variables."""

    async def body() -> None:
        x = leaf([2.0])
        seen: list[str] = []
        x.register_hook(lambda g: seen.append(USER_VAR.get()))
        tok = USER_VAR.set("caller")
        try:
            (g,) = await ag.grad((x**3).sum(), x, create_graph=True)
        finally:
            USER_VAR.reset(tok)
        assert seen == ["caller"]
        assert g.requires_grad
        assert_close(g, [12.0], rtol=0, atol=0)

    loop.run(body)


def test_async_hooks_and_nested_grads(loop: Loop) -> None:
    """Async hooks that await asyncgrad, asyncio or anyio run on every loop (under trio, on the
    engine's helper asyncio loops)."""

    async def body() -> None:
        x = leaf([1.0, 2.0])
        z = leaf([3.0])

        async def hook(g: ag.Tensor) -> ag.Tensor:
            await asyncio.sleep(0)
            await anyio.sleep(0)
            with ag.enable_grad():  # hooks run with grad off, as every node does
                (gz,) = await ag.grad((z * z).sum(), z)  # a nested pass from inside the hook
            return g * gz

        x.register_hook(hook)
        (gx,) = await ag.grad((x * x).sum(), x)
        assert_close(gx, [12.0, 24.0], rtol=0, atol=0)

        calls: list[str] = []

        async def callback() -> None:
            await asyncio.sleep(0)
            calls.append("done")

        y = leaf([1.0])
        y.register_hook(lambda g: ag.autograd.queue_callback(callback))
        await ag.backward((y * 5).sum())
        assert calls == ["done"]
        assert_close(y.grad, [5.0], rtol=0, atol=0)

    loop.run(body)


def test_blocking_backward_inside_a_trio_task_runs_anyio_hooks() -> None:
    """``t.backward()`` called from a trio task runs async hooks on a helper asyncio loop, where
    anyio must see asyncio, not the trio of the caller's context."""
    if not HAVE_TRIO:
        pytest.skip("trio is not installed")

    async def body() -> None:
        x = leaf([1.0, 2.0])

        async def hook(g: ag.Tensor) -> ag.Tensor:
            await anyio.sleep(0)
            return g * 3.0

        x.register_hook(hook)
        (x * x).sum().backward()
        assert_close(x.grad, [6.0, 12.0], rtol=0, atol=0)

    Loop("trio", {}).run(body)


def test_a_hook_that_awaits_trio_cannot_run_under_trio() -> None:
    """The limitation of NOTE [Other event loops]: async hooks run on a helper asyncio loop,
    where trio's primitives cannot run; the pass fails with the node named."""
    if not HAVE_TRIO:
        pytest.skip("trio is not installed")
    import trio.lowlevel

    async def body() -> None:
        x = leaf([1.0])

        async def hook(g: ag.Tensor) -> ag.Tensor:
            await trio.lowlevel.checkpoint()
            return g

        x.register_hook(hook)
        with pytest.raises(RuntimeError) as info:
            await ag.grad((x * 2).sum(), x)
        assert "(raised while computing the backward of AccumulateGrad)" in info.value.__notes__

    Loop("trio", {}).run(body)


def test_awaiting_without_any_loop_says_so() -> None:
    # ag.backward runs at the call where no loop runs; t.abackward() is always a coroutine.
    x = leaf([1.0])
    coro = (x * 2).sum().abackward()
    with pytest.raises(RuntimeError, match="no running event loop"):
        coro.send(None)
    coro.close()
    assert x.grad is None
