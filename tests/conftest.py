"""Suite-wide fixtures: deterministic seeds, and checks that no test leaks threads or tasks."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Final

import numpy as np
import pytest
import pytest_asyncio

# CUDA tests run on two simulated devices (asyncgrad/backend/sim.py) unless the environment says
# otherwise: ASYNCGRAD_SIM_CUDA=0 runs them on the real GPU through CuPy.
os.environ.setdefault("ASYNCGRAD_SIM_CUDA", "2")

try:
    import asyncgrad
except ModuleNotFoundError as exc:  # only a missing package is tolerated, not a broken one
    if exc.name != "asyncgrad":
        raise
    asyncgrad = None

# How long a test's own threads get to finish after it returns.
THREAD_JOIN_TIMEOUT_S: Final = 2.0
# How many loop iterations a test's own tasks get to finish after it returns.
TASK_SETTLE_ITERATIONS: Final = 50
# The engine's thread pools (reentrant levels, compute threads) outlive single tests on purpose.
PERSISTENT_THREAD_PREFIX: Final = ("asyncgrad-pool", "asyncgrad-compute")


def _loop_factories() -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop
    }
    try:
        import uvloop
    except ImportError:  # an optional extra: without it the async tests run on asyncio alone
        return factories
    factories["uvloop"] = uvloop.new_event_loop
    return factories


LOOP_FACTORIES: Final = _loop_factories()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where the engine is compiled, skip the tests marked ``pure_only``, with their reason."""
    if asyncgrad is None or asyncgrad.__build__ != "compiled":
        return
    for item in items:
        marker = item.get_closest_marker("pure_only")
        if marker is not None:
            why = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.skip(reason=f"pure build only: {why}"))


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async test runs once on asyncio's loop and once on uvloop's (when installed)."""
    return LOOP_FACTORIES


@pytest.fixture(autouse=True)
def seed() -> None:
    """Seed NumPy's global generator and asyncgrad's, so every test starts alike."""
    np.random.seed(0)
    if asyncgrad is not None and hasattr(asyncgrad, "manual_seed"):
        asyncgrad.manual_seed(0)


def _suspect(thread: threading.Thread) -> bool:
    """A thread that must not outlive the test that started it."""
    if thread.name.startswith(PERSISTENT_THREAD_PREFIX):
        return False
    return not thread.daemon or thread.name.startswith("asyncgrad")


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a non-daemon thread or an asyncgrad thread running."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_JOIN_TIMEOUT_S
    for thread in threading.enumerate():
        if thread not in before and _suspect(thread):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive() and _suspect(t)]
    assert not leaked, "test leaked threads: " + ", ".join(
        f"{t.name!r}{' (daemon)' if t.daemon else ''}" for t in leaked
    )


def _make_no_leaked_tasks(loop_scope: str) -> object:
    # One fixture per loop scope, so the check runs on the loop the test ran on: an async
    # fixture runs on the loop of its own loop_scope, not on the test's.
    @pytest_asyncio.fixture(name=f"_no_leaked_tasks_{loop_scope}", loop_scope=loop_scope)
    async def _no_leaked_tasks() -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        # Debug mode is on (asyncio_debug in pyproject.toml); only warn about callbacks that
        # are slow enough to look like a hang, not about ordinary NumPy work.
        loop.slow_callback_duration = 10.0
        before = asyncio.all_tasks(loop)
        yield
        ignored = before | {asyncio.current_task()}
        for _ in range(TASK_SETTLE_ITERATIONS):
            if not asyncio.all_tasks(loop) - ignored:
                return
            await asyncio.sleep(0)
        leaked = asyncio.all_tasks(loop) - ignored
        if leaked:
            pytest.fail("test leaked tasks:\n" + "\n".join(f"  {t!r}" for t in leaked))

    return _no_leaked_tasks


for _scope in ("function", "class", "module", "package", "session"):
    globals()[f"_no_leaked_tasks_{_scope}"] = _make_no_leaked_tasks(_scope)


@pytest.fixture(autouse=True)
def no_leaked_tasks(request: pytest.FixtureRequest, no_leaked_threads: None) -> None:
    """For async tests: after the test, only the fixture's own task may be left on its loop.

    Sync tests are left alone (no event loop is made for them). Requesting
    ``no_leaked_threads`` makes the thread check run after the loop has been closed, so the
    loop's default executor threads have been joined by then.
    """
    if not pytest_asyncio.is_async_test(request.node):
        return
    marker = request.node.get_closest_marker("asyncio")
    loop_scope = (marker.kwargs.get("loop_scope") if marker else None) or request.config.getini(
        "asyncio_default_test_loop_scope"
    )
    request.getfixturevalue(f"_no_leaked_tasks_{loop_scope}")
