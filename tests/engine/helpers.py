"""Shared pieces of the engine tests: bounds on waits, closed forms and graph builders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final

import numpy as np

import asyncgrad as ag

# Upper bound on any single await in these tests; generous, since a hang is what it catches.
TIMEOUT_S: Final = 10.0
# Upper bound on a blocking wait on a thread or a concurrent future.
THREAD_TIMEOUT_S: Final = 10.0


def arr(t: Any) -> np.ndarray[Any, Any]:
    """The NumPy value of a Tensor (or of an array), for comparisons."""
    return np.asarray(t.array if isinstance(t, ag.Tensor) else t)


def assert_close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert actual is not None, "expected a gradient, got None"
    np.testing.assert_allclose(arr(actual), arr(expected), rtol=rtol, atol=atol)


def leaf(values: Any, dtype: Any = ag.float64) -> ag.Tensor:
    return ag.tensor(values, dtype=dtype, requires_grad=True)


def turn_recorder(turns: list[int]) -> Callable[[Any], None]:
    """A tensor hook that records the turn of the graph task running it."""
    from asyncgrad.engine.reentrant import current_graph_task

    def record(g: Any) -> None:
        gt = current_graph_task.get()
        assert gt is not None
        turns.append(gt.turn)

    return record


def scale_chain(x: ag.Tensor, n: int, factor: float = 1.0) -> ag.Tensor:
    """``x * factor ** n`` as a chain of ``n`` MulBackward0 nodes."""
    y = x
    for _ in range(n):
        y = y * factor
    return y


def record_calls(log: list[str], label: str, result: Any = None) -> Callable[..., Any]:
    """A sync hook that appends ``label`` to ``log`` and returns ``result``."""

    def hook(*args: Any) -> Any:
        log.append(label)
        return result

    hook.__qualname__ = f"record_{label}"
    return hook


@contextmanager
def engine_setting(name: str) -> Iterator[Callable[[Any], None]]:
    """A setter of the engine option ``name`` (``configure(name=...)``); the option is set back
    to what it was on exit."""
    engine = ag.autograd.engine
    old = getattr(engine, name)
    try:
        yield lambda value: engine.configure(**{name: value})
    finally:
        engine.configure(**{name: old})


class ManualClock:
    """A clock for a loop's scheduler that moves only when the test moves it (``now``, in
    seconds), so that what a test sees of slices, turns and shares does not depend on the
    machine's pace."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextmanager
def manual_clock(loop: asyncio.AbstractEventLoop | None = None) -> Iterator[ManualClock]:
    """Give the scheduler of ``loop`` (default: the running one) a ManualClock, which starts
    where its clock was (so turns go on from there); its own clock is back on exit."""
    from asyncgrad.engine import scheduler

    sched = scheduler.of(loop or asyncio.get_running_loop())
    old = (sched.clock, sched.origin)
    clock = ManualClock(sched.clock())
    sched.use_clock(clock)
    try:
        yield clock
    finally:
        sched.clock, sched.origin = old


class Turns:
    """How many turns of the loop another task got (``count``), see ``loop_turns``."""

    count = 0


@asynccontextmanager
async def loop_turns() -> AsyncIterator[Turns]:
    """A task that counts the loop's turns (one ``sleep(0)`` each) while the block runs: how
    often the code in the block let the loop run. The task ends with the block."""
    turns = Turns()
    stop = asyncio.Event()

    async def count() -> None:
        while not stop.is_set():
            turns.count += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(count())
    try:
        yield turns
    finally:
        stop.set()
        async with asyncio.timeout(TIMEOUT_S):
            await task
