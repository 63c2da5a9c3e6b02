"""Reentrant backward: a node's backward that runs a backward itself, sync or awaited, nested
past the depth limit (where levels move to pool threads), and errors from deep inside."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.engine.reentrant import current_graph_task

from .helpers import TIMEOUT_S, assert_close, leaf

X = [0.3, -1.2, 2.0]
DEPTH_LIMIT: Final = 3
NEST_LEVELS: Final = 10
OFFLOAD_PREFIXES: Final = ("asyncgrad-pool", "asyncgrad-reentrant")


class Boom(Exception):
    pass


@pytest.fixture
def shallow_limit() -> Iterator[None]:
    """Lower the reentrant depth limit so a few levels already reach the thread pool."""
    old = ag.autograd.engine.max_reentrant_depth
    ag.autograd.engine.configure(max_reentrant_depth=DEPTH_LIMIT)
    try:
        yield
    finally:
        ag.autograd.engine.configure(max_reentrant_depth=old)


# ----------------------------------------------------------------------------- one level
class SinViaGradSync(ag.autograd.Function):
    """sin(x), whose backward finds cos(x) with a blocking nested grad()."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            (dx,) = ag.grad_sync(xd.sin().sum(), xd)
        return g * dx


class SinViaAwaitGrad(ag.autograd.Function):
    """sin(x), whose async backward finds cos(x) with an awaited nested grad()."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            (dx,) = await ag.grad(xd.sin().sum(), xd)
        return g * dx


class SinViaGradSyncInAsync(ag.autograd.Function):
    """sin(x), whose ``async def backward`` runs a blocking nested grad() on the loop's thread."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        await asyncio.sleep(0)
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            (dx,) = ag.grad_sync(xd.sin().sum(), xd)
        return g * dx


FUNCTIONS = [SinViaGradSync, SinViaAwaitGrad, SinViaGradSyncInAsync]


@pytest.mark.parametrize("fn", FUNCTIONS)
async def test_reentrant_backward_awaited(fn: Any) -> None:
    x = leaf(X)
    out = (fn.apply(x * 2) * 3).sum()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out)
    assert_close(x.grad, 6 * np.cos(2 * np.array(X)))


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_reentrant_backward_sync(fn: Any) -> None:
    x = leaf(X)
    (g,) = ag.grad_sync((fn.apply(x) * x).sum(), x)
    xs = np.array(X)
    assert_close(g, np.sin(xs) + xs * np.cos(xs))


@pytest.mark.parametrize("fn", FUNCTIONS)
async def test_reentrant_backward_sync_inside_loop(fn: Any) -> None:
    x = leaf(X)
    fn.apply(x).sum().backward()
    assert_close(x.grad, np.cos(X))


async def test_reentrant_from_a_tensor_hook() -> None:
    x = leaf(X)
    h = x * 2
    inner: list[np.ndarray[Any, Any]] = []

    async def hook(g: ag.Tensor) -> None:
        with ag.enable_grad():
            z = leaf([1.0, 2.0])
            (gz,) = await ag.grad((z**2).sum(), z)
        inner.append(gz.numpy())

    h.register_hook(hook)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(h.sum())
    assert_close(inner[0], [2.0, 4.0])
    assert_close(x.grad, [2.0, 2.0, 2.0])


async def test_queue_callback_in_nested_backward_runs_with_the_nested_pass() -> None:
    log: list[str] = []

    class Outer(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1

        @staticmethod
        async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            ag.autograd.queue_callback(lambda: log.append("outer callback"))
            with ag.enable_grad():
                z = leaf([1.0])
                inner = z * 2.0
                inner.register_hook(
                    lambda gz: ag.autograd.queue_callback(lambda: log.append("inner callback"))
                )
                inner_out = inner.sum()
            await ag.grad(inner_out, z)
            log.append("outer backward done")
            return g

    x = leaf(X)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(Outer.apply(x).sum())
    assert log == ["inner callback", "outer backward done", "outer callback"]


async def test_reentrant_depth_is_tracked() -> None:
    depths: list[int] = []

    class Probe(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1

        @staticmethod
        async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            gt = current_graph_task.get()
            assert gt is not None
            depths.append(gt.depth)
            with ag.enable_grad():
                z = leaf([1.0])
                inner = SinViaGradSync.apply(z).sum()
            await ag.grad(inner, z)
            return g

    x = leaf(X)
    assert current_graph_task.get() is None
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(Probe.apply(x).sum())
    assert current_graph_task.get() is None
    assert depths == [0]
    assert_close(x.grad, np.ones(3))


# ----------------------------------------------------------------------------- deep nesting
# (level, thread name, reentrant depth, depth on this thread's stack) of each nested backward
# call, appended from whichever thread runs it.
NEST_CALLS: list[tuple[int, str, int, int]] = []


def _record(level: int) -> None:
    gt = current_graph_task.get()
    assert gt is not None
    NEST_CALLS.append((level, threading.current_thread().name, gt.depth, gt.local_depth))


class Nest(ag.autograd.Function):
    """``x * 2 ** (level + 1)``; its backward gets ``2 ** level`` from a blocking nested backward
    through ``Nest(level - 1)``, so ``level + 1`` backward passes are nested inside each other."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor, level: int) -> ag.Tensor:
        ctx.save_for_backward(x)
        ctx.level = level
        return x * 2.0 ** (level + 1)

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> Any:
        _record(ctx.level)
        if ctx.level == 0:
            return g * 2.0, None
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            (inner,) = ag.grad_sync(Nest.apply(xd, ctx.level - 1).sum(), xd)
        return g * inner * 2.0, None


class ANest(ag.autograd.Function):
    """Nest with an ``async def backward`` that awaits the nested backward."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor, level: int) -> ag.Tensor:
        ctx.save_for_backward(x)
        ctx.level = level
        return x * 2.0 ** (level + 1)

    @staticmethod
    async def backward(ctx: Any, g: ag.Tensor) -> Any:
        _record(ctx.level)
        if ctx.level == 0:
            return g * 2.0, None
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            (inner,) = await ag.grad(ANest.apply(xd, ctx.level - 1).sum(), xd)
        return g * inner * 2.0, None


NESTS = {"sync": Nest, "async": ANest}


@pytest.fixture
def nest_calls() -> Iterator[list[tuple[int, str, int, int]]]:
    NEST_CALLS.clear()
    yield NEST_CALLS
    NEST_CALLS.clear()


def _check_deep_calls(calls: list[tuple[int, str, int, int]], outer_on_caller: bool) -> None:
    assert sorted(c[0] for c in calls) == list(range(NEST_LEVELS))
    outer = NEST_LEVELS - 1
    by_level = {level: (name, depth, local) for level, name, depth, local in calls}
    for level, (_, depth, local) in by_level.items():
        assert depth == outer - level  # each level runs one reentrant level deeper
        assert local <= DEPTH_LIMIT  # no thread's stack holds more than the limit
    # Past the limit the nested graph tasks moved to other threads, whose stacks start afresh.
    moved = [name for name, depth, local in by_level.values() if local != depth]
    assert len(moved) >= NEST_LEVELS - 1 - DEPTH_LIMIT
    assert all(name.startswith(OFFLOAD_PREFIXES) for name in moved), by_level
    if outer_on_caller:
        assert by_level[outer][0] == threading.current_thread().name


@pytest.mark.usefixtures("shallow_limit")
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_nesting_past_depth_limit_awaited(
    mode: str, nest_calls: list[tuple[int, str, int, int]]
) -> None:
    x = leaf(X)
    out = NESTS[mode].apply(x, NEST_LEVELS - 1).sum()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out)
    assert_close(x.grad, np.full(3, 2.0**NEST_LEVELS))
    _check_deep_calls(nest_calls, outer_on_caller=True)


@pytest.mark.usefixtures("shallow_limit")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_nesting_past_depth_limit_sync(
    mode: str, nest_calls: list[tuple[int, str, int, int]]
) -> None:
    x = leaf(X)
    NESTS[mode].apply(x, NEST_LEVELS - 1).sum().backward()
    assert_close(x.grad, np.full(3, 2.0**NEST_LEVELS))
    # A blocking caller runs an async backward on a helper loop thread, even the outermost.
    _check_deep_calls(nest_calls, outer_on_caller=mode == "sync")


@pytest.mark.usefixtures("shallow_limit")
async def test_concurrent_deep_nesting(nest_calls: list[tuple[int, str, int, int]]) -> None:
    async def one(k: int) -> tuple[ag.Tensor | None, ...]:
        x = leaf([float(k)])
        return await ag.grad((ANest if k % 2 else Nest).apply(x, 6).sum(), x)

    async with asyncio.timeout(TIMEOUT_S):
        results = await asyncio.gather(*(one(k) for k in range(6)))
    for (g,) in results:
        assert_close(g, [2.0**7])
    assert len(nest_calls) == 6 * 7


# ----------------------------------------------------------------------------- errors
class FailDeep(ag.autograd.Function):
    """Nests like Nest (blocking), and raises Boom from the innermost level."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor, level: int) -> ag.Tensor:
        ctx.save_for_backward(x)
        ctx.level = level
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> Any:
        if ctx.level == 0:
            raise Boom("innermost backward failed")
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            ag.grad_sync(FailDeep.apply(xd, ctx.level - 1).sum(), xd)
        return g, None


class AFailDeep(ag.autograd.Function):
    """FailDeep with an awaited nested backward."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor, level: int) -> ag.Tensor:
        ctx.save_for_backward(x)
        ctx.level = level
        return x * 1

    @staticmethod
    async def backward(ctx: Any, g: ag.Tensor) -> Any:
        if ctx.level == 0:
            raise Boom("innermost backward failed")
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xd = x.detach().requires_grad_()
            await ag.grad(AFailDeep.apply(xd, ctx.level - 1).sum(), xd)
        return g, None


@pytest.mark.parametrize("levels", [1, 2 * DEPTH_LIMIT + 1])
@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.usefixtures("shallow_limit")
async def test_reentrant_error_reaches_outermost_caller_awaited(
    levels: int, is_async: bool
) -> None:
    x = leaf(X)
    out = (AFailDeep if is_async else FailDeep).apply(x, levels).sum()
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(Boom, match="innermost"):
            await ag.backward(out)
    assert x.grad is None


@pytest.mark.parametrize("levels", [1, 2 * DEPTH_LIMIT + 1])
@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.usefixtures("shallow_limit")
def test_reentrant_error_reaches_outermost_caller_sync(levels: int, is_async: bool) -> None:
    x = leaf(X)
    out = (AFailDeep if is_async else FailDeep).apply(x, levels).sum()
    with pytest.raises(Boom, match="innermost") as info:
        out.backward()
    assert x.grad is None
    notes = getattr(info.value, "__notes__", [])
    assert any("FailDeepBackward" in n for n in notes), notes  # names the failing node


async def test_reentrant_error_does_not_break_later_backward() -> None:
    x = leaf(X)
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(Boom):
            await ag.backward(AFailDeep.apply(x, 2).sum())
        await ag.backward(SinViaAwaitGrad.apply(x).sum())
    assert current_graph_task.get() is None
    assert_close(x.grad, np.cos(X))


def test_sync_backward_returning_awaitable_is_a_clear_type_error() -> None:
    class Sneaky(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1

        @staticmethod
        def backward(ctx: Any, g: ag.Tensor) -> Any:
            async def later() -> ag.Tensor:
                return g

            return later()

    x = ag.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=r"Sneaky\.backward returned an awaitable.*async def"):
        Sneaky.apply(x).sum().backward()
    assert x.grad is None
