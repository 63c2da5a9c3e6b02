"""Hooks: tensor hooks, retain_grad, node pre/post hooks, post-accumulate hooks and
queue_callback, sync and async, with the sync and the async backward."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

from .helpers import TIMEOUT_S, assert_close, leaf, record_calls

X = [1.0, 2.0, 3.0]
HELPER_LOOP_PREFIX = "asyncgrad-pool-loop-"

Runner = Callable[[ag.Tensor], Awaitable[None]]


async def _await_backward(out: ag.Tensor) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward(out)


async def _sync_backward(out: ag.Tensor) -> None:
    out.backward()  # blocking, from inside the running loop


@pytest.fixture(params=["await", "sync"])
def run_backward(request: pytest.FixtureRequest) -> Runner:
    return _await_backward if request.param == "await" else _sync_backward


# ----------------------------------------------------------------------------- tensor hooks
async def test_leaf_tensor_hook_modifies_gradient(run_backward: Runner) -> None:
    x = leaf(X)
    seen: list[np.ndarray[Any, Any]] = []

    def hook(g: ag.Tensor) -> ag.Tensor:
        seen.append(g.numpy().copy())
        return g * 2

    x.register_hook(hook)
    await run_backward((x * 3).sum())
    assert_close(seen[0], [3.0, 3.0, 3.0])
    assert_close(x.grad, [6.0, 6.0, 6.0])


async def test_non_leaf_tensor_hook_modifies_gradient(run_backward: Runner) -> None:
    x = leaf(X)
    h = x * 2
    h.register_hook(lambda g: g * 10)
    await run_backward((h * h).sum())
    assert_close(x.grad, 10 * 2 * 2 * 2 * np.array(X))


async def test_hook_returning_none_keeps_gradient(run_backward: Runner) -> None:
    x = leaf(X)
    h = x.exp()
    log: list[str] = []
    h.register_hook(record_calls(log, "h"))
    x.register_hook(record_calls(log, "x"))
    await run_backward(h.sum())
    assert log == ["h", "x"]
    assert_close(x.grad, np.exp(X))


def test_tensor_hooks_chain_in_registration_order() -> None:
    x = leaf(X)
    h = x * 1
    h.register_hook(lambda g: g + 1)
    h.register_hook(lambda g: g * 10)
    h.sum().backward()
    assert_close(x.grad, [20.0, 20.0, 20.0])  # (1 + 1) * 10, not 1 * 10 + 1


def test_hook_on_tensor_without_grad_raises() -> None:
    with pytest.raises(RuntimeError, match="doesn't require"):
        ag.tensor(X).register_hook(lambda g: None)


def test_tensor_hook_sees_summed_gradient_once() -> None:
    x = leaf(X)
    h = x * 1
    seen: list[np.ndarray[Any, Any]] = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    (h * 2 + h * 3).sum().backward()
    assert len(seen) == 1
    assert_close(seen[0], [5.0, 5.0, 5.0])


# ----------------------------------------------------------------------------- hook order
async def test_order_tensor_hooks_then_retain_grad_then_prehooks(run_backward: Runner) -> None:
    x = leaf(X)
    h = x * 2
    log: list[tuple[str, list[float]]] = []
    h.retain_grad()  # registered first, still runs after the tensor hooks (as in torch)
    assert h.grad_fn is not None

    def pre(grads: tuple[ag.Tensor, ...]) -> None:
        log.append(("pre", grads[0].tolist()))

    def tensor_hook(g: ag.Tensor) -> ag.Tensor:
        log.append(("tensor", g.tolist()))
        return g * 10

    h.grad_fn.register_prehook(pre)
    h.register_hook(tensor_hook)
    await run_backward((h * h).sum())
    two_h = [4.0, 8.0, 12.0]
    assert log == [("tensor", two_h), ("pre", [40.0, 80.0, 120.0])]
    assert_close(h.grad, [40.0, 80.0, 120.0])  # retain_grad saw the hooked gradient
    assert_close(x.grad, [80.0, 160.0, 240.0])


def test_leaf_tensor_hook_runs_before_accumulation_and_post_accumulate_hook() -> None:
    x = leaf(X)
    log: list[str] = []

    def post_acc(t: ag.Tensor) -> None:
        assert t.grad is not None
        log.append(f"post_acc {t.grad.tolist()}")

    x.register_post_accumulate_grad_hook(post_acc)
    x.register_hook(lambda g: log.append("tensor"))
    (x * 3).sum().backward()
    assert log == ["tensor", "post_acc [3.0, 3.0, 3.0]"]


# ----------------------------------------------------------------------------- removal
def test_handle_remove_for_every_hook_kind() -> None:
    x = leaf(X)
    h = x * 2
    out = (h * h).sum()
    assert h.grad_fn is not None
    log: list[str] = []
    handles = [
        x.register_hook(record_calls(log, "x")),
        h.register_hook(record_calls(log, "h")),
        h.grad_fn.register_prehook(record_calls(log, "pre")),
        h.grad_fn.register_hook(record_calls(log, "post")),
        x.register_post_accumulate_grad_hook(record_calls(log, "post_acc")),
    ]
    kept = h.register_hook(record_calls(log, "kept"))
    out.backward(retain_graph=True)
    assert sorted(log) == sorted(["x", "h", "pre", "post", "post_acc", "kept"])
    log.clear()
    for handle in handles:
        handle.remove()
        handle.remove()  # removing twice is harmless
    out.backward()
    assert log == ["kept"]
    kept.remove()
    assert_close(x.grad, 2 * 8 * np.array(X))


def test_handle_as_context_manager() -> None:
    x = leaf(X)
    with x.register_hook(lambda g: g * 0):
        (x * 1).sum().backward()
    assert_close(x.grad, np.zeros(3))
    (x * 1).sum().backward()
    assert_close(x.grad, np.ones(3))


def test_hook_removed_by_another_hook_during_backward() -> None:
    x = leaf(X)
    h = x * 1
    log: list[str] = []
    second = None

    def first(g: ag.Tensor) -> None:
        log.append("first")
        assert second is not None
        second.remove()

    h.register_hook(first)
    second = h.register_hook(record_calls(log, "second"))
    out = h.sum()
    out.backward(retain_graph=True)
    after_first = log.count("second")
    out.backward()
    assert log.count("first") == 2
    assert log.count("second") == after_first  # removed during the first pass: never again


# ----------------------------------------------------------------------------- retain_grad
async def test_retain_grad_accumulates_and_leaf_is_no_op(run_backward: Runner) -> None:
    x = leaf(X)
    x.retain_grad()  # a leaf: no effect
    h = x + 1.0  # saves nothing, so a second pass through it is allowed
    h.retain_grad()
    h.retain_grad()  # twice: still one copy per pass
    assert h.retains_grad
    assert not x.retains_grad
    out = (h * 3).sum()
    await run_backward(out)
    assert_close(h.grad, [3.0, 3.0, 3.0])
    await run_backward((h * 2).sum())
    assert_close(h.grad, [5.0, 5.0, 5.0])
    assert_close(x.grad, [5.0, 5.0, 5.0])


def test_retain_grad_is_a_copy() -> None:
    x = leaf(X)
    h = x * 1
    h.retain_grad()
    g = ag.tensor([1.0, 2.0, 3.0], dtype=ag.float64)
    h.backward(g)
    assert h.grad is not None
    assert not np.shares_memory(h.grad.array, g.array)
    assert x.grad is not None
    assert not np.shares_memory(h.grad.array, x.grad.array)


def test_retain_grad_without_requires_grad_raises() -> None:
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        ag.tensor(X).retain_grad()


def test_non_leaf_grad_is_none_without_retain_grad() -> None:
    x = leaf(X)
    h = x * 2
    h.sum().backward()
    with pytest.warns(UserWarning, match="not a leaf Tensor"):  # as torch warns
        assert h.grad is None


# ----------------------------------------------------------------------------- node hooks
async def test_node_post_hook_receives_grad_inputs_and_outputs(run_backward: Runner) -> None:
    x, w = leaf(X), leaf([4.0, 5.0, 6.0])
    m = x * w
    seen: list[tuple[Any, Any]] = []

    def post(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        seen.append(
            ([g.tolist() for g in grad_inputs], [g.tolist() for g in grad_outputs]),
        )

    assert m.grad_fn is not None
    m.grad_fn.register_hook(post)
    await run_backward((m * 2).sum())
    assert seen == [([[8.0, 10.0, 12.0], [2.0, 4.0, 6.0]], [[2.0, 2.0, 2.0]])]


def test_node_post_hook_replaces_grad_inputs() -> None:
    x, w = leaf(X), leaf([4.0, 5.0, 6.0])
    m = x * w
    assert m.grad_fn is not None
    m.grad_fn.register_hook(lambda gi, go: (gi[0] * 0, gi[1] * -1))
    m.sum().backward()
    assert_close(x.grad, np.zeros(3))
    assert_close(w.grad, -np.array(X))


def test_node_post_hook_can_drop_a_gradient() -> None:
    x, w = leaf(X), leaf([4.0, 5.0, 6.0])
    m = x * w
    assert m.grad_fn is not None
    m.grad_fn.register_hook(lambda gi, go: (None, gi[1]))
    m.sum().backward()
    assert x.grad is None
    assert_close(w.grad, X)


async def test_node_prehook_receives_and_replaces_grad_outputs(run_backward: Runner) -> None:
    x = leaf(X)
    h = x.exp()
    seen: list[list[float]] = []
    assert h.grad_fn is not None

    def pre(grad_outputs: tuple[ag.Tensor, ...]) -> tuple[ag.Tensor, ...]:
        assert isinstance(grad_outputs, tuple)
        seen.append(grad_outputs[0].tolist())
        return (grad_outputs[0] * 0.5,)

    h.grad_fn.register_prehook(pre)
    await run_backward((h * 4).sum())
    assert seen == [[4.0, 4.0, 4.0]]
    assert_close(x.grad, 2 * np.exp(X))


def test_prehook_returning_wrong_count_raises() -> None:
    x = leaf(X)
    h = x.exp()
    assert h.grad_fn is not None
    h.grad_fn.register_prehook(lambda go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="returned 2 gradients, expected 1"):
        h.sum().backward()


def test_post_accumulate_grad_hook_sees_updated_grad() -> None:
    x = leaf(X)
    seen: list[tuple[bool, list[float]]] = []

    def hook(t: ag.Tensor) -> None:
        assert t.grad is not None
        seen.append((t is x, t.grad.tolist()))

    x.register_post_accumulate_grad_hook(hook)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    assert seen == [(True, [2.0, 2.0, 2.0]), (True, [5.0, 5.0, 5.0])]


def test_post_accumulate_grad_hook_rejects_non_leaf() -> None:
    x = leaf(X)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)


# ----------------------------------------------------------------------------- async hooks
async def test_async_hooks_of_every_kind(run_backward: Runner) -> None:
    """Every kind of hook as ``async def``: awaited on the test's loop by ``await ag.backward``,
    run on a helper loop by a blocking ``t.backward()``."""
    x, w = leaf(X), leaf([4.0, 5.0, 6.0])
    m = x * w
    h = m.exp()
    assert m.grad_fn is not None
    assert h.grad_fn is not None
    log: list[str] = []
    threads: set[str] = set()
    loops: set[int] = set()

    async def suspend(label: str) -> None:
        await asyncio.sleep(0)  # a real suspension, not just a coroutine that returns
        log.append(label)
        threads.add(threading.current_thread().name)
        loops.add(id(asyncio.get_running_loop()))

    async def leaf_hook(g: ag.Tensor) -> ag.Tensor:
        await suspend("leaf")
        return g * 2

    async def non_leaf_hook(g: ag.Tensor) -> None:
        await suspend("non_leaf")

    async def prehook(grad_outputs: tuple[ag.Tensor, ...]) -> tuple[ag.Tensor, ...]:
        await suspend("pre")
        return (grad_outputs[0] * 3,)

    async def posthook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        await suspend("post")

    async def post_acc(t: ag.Tensor) -> None:
        assert t.grad is not None
        await suspend("post_acc")

    x.register_hook(leaf_hook)
    h.register_hook(non_leaf_hook)
    m.grad_fn.register_prehook(prehook)
    m.grad_fn.register_hook(posthook)
    x.register_post_accumulate_grad_hook(post_acc)
    await run_backward(h.sum())
    assert sorted(log) == sorted(["non_leaf", "pre", "post", "leaf", "post_acc"])
    assert log.index("non_leaf") < log.index("pre") < log.index("post")
    assert log.index("leaf") < log.index("post_acc")
    e = np.exp(np.array(X) * [4.0, 5.0, 6.0])
    assert_close(x.grad, 2 * 3 * e * [4.0, 5.0, 6.0])
    assert_close(w.grad, 3 * e * np.array(X))
    if run_backward is _sync_backward:
        assert all(name.startswith(HELPER_LOOP_PREFIX) for name in threads), threads
        assert id(asyncio.get_running_loop()) not in loops
    else:
        assert threads == {threading.current_thread().name}
        assert loops == {id(asyncio.get_running_loop())}


def test_async_hooks_with_sync_backward_and_no_loop() -> None:
    x = leaf(X)
    threads: list[str] = []

    async def hook(g: ag.Tensor) -> ag.Tensor:
        await asyncio.sleep(0)
        threads.append(threading.current_thread().name)
        return g + 1

    x.register_hook(hook)
    (x * 2).sum().backward()
    assert_close(x.grad, [3.0, 3.0, 3.0])
    assert len(threads) == 1
    assert threads[0].startswith(HELPER_LOOP_PREFIX)


async def test_async_hook_awaits_an_event_set_by_another_task() -> None:
    x = leaf(X)
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def hook(g: ag.Tensor) -> ag.Tensor:
        entered.set()
        async with asyncio.timeout(TIMEOUT_S):
            await gate.wait()
        return g * 5

    h = x * 1
    h.register_hook(hook)
    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(ag.backward(h.sum()))
        await entered.wait()
        assert not task.done()
        assert x.grad is None
        gate.set()
        await task
    assert_close(x.grad, [5.0, 5.0, 5.0])


# ----------------------------------------------------------------------------- wrong shapes
def _wrong_shape_tensor_hook(g: ag.Tensor) -> ag.Tensor:
    return ag.ones(7, dtype=g.dtype)


async def _wrong_shape_async_hook(g: ag.Tensor) -> ag.Tensor:
    return ag.ones(7, dtype=g.dtype)


@pytest.mark.parametrize("hook", [_wrong_shape_tensor_hook, _wrong_shape_async_hook])
@pytest.mark.parametrize("on_leaf", [True, False])
async def test_tensor_hook_wrong_shape_raises(
    hook: Callable[..., Any], on_leaf: bool, run_backward: Runner
) -> None:
    x = leaf(X)
    h = x * 2
    (x if on_leaf else h).register_hook(hook)
    with pytest.raises(RuntimeError) as info:
        await run_backward(h.sum())
    msg = str(info.value)
    assert hook.__name__ in msg
    assert "(3,)" in msg
    assert "(7,)" in msg
    assert x.grad is None


def test_prehook_wrong_shape_raises() -> None:
    x = leaf(X)
    h = x.exp()
    assert h.grad_fn is not None

    def bad_prehook(go: tuple[ag.Tensor, ...]) -> tuple[ag.Tensor, ...]:
        return (ag.ones(2, 2, dtype=ag.float64),)

    h.grad_fn.register_prehook(bad_prehook)
    with pytest.raises(RuntimeError) as info:
        h.sum().backward()
    msg = str(info.value)
    assert "bad_prehook" in msg
    assert "(3,)" in msg
    assert "(2, 2)" in msg


def test_posthook_wrong_shape_raises() -> None:
    x = leaf(X)
    h = x.exp()
    assert h.grad_fn is not None
    h.grad_fn.register_hook(lambda gi, go: (ag.ones(5, dtype=ag.float64),))
    with pytest.raises(RuntimeError) as info:
        h.sum().backward()
    msg = str(info.value)
    assert "ExpBackward0" in msg
    assert "(3,)" in msg
    assert "(5,)" in msg


def test_hook_changing_dtype_raises() -> None:
    x = leaf(X, dtype=ag.float32)
    h = x * 2

    def widen(g: ag.Tensor) -> ag.Tensor:
        return g.to(ag.float64)

    h.register_hook(widen)
    with pytest.raises(RuntimeError, match=r"widen.*changed the type of value.*float32.*float64"):
        (h * h).sum().backward()
    assert x.grad is None


def test_hook_returning_non_tensor_raises_type_error() -> None:
    x = leaf(X)
    x.register_hook(lambda g: 3.0)
    with pytest.raises(TypeError, match="Tensor"):
        (x * 1).sum().backward()


# ----------------------------------------------------------------------------- queue_callback
async def test_queue_callback_runs_once_at_the_end_in_order(run_backward: Runner) -> None:
    x, w = leaf(X), leaf(X)
    log: list[str] = []

    def first() -> None:
        # All nodes have run: both leaves have their gradients.
        assert x.grad is not None
        assert w.grad is not None
        log.append("first")

    async def second() -> None:
        await asyncio.sleep(0)
        log.append("second")

    def hook(g: ag.Tensor) -> None:
        log.append("hook")
        ag.autograd.queue_callback(first)
        ag.autograd.queue_callback(second)
        ag.autograd.queue_callback(lambda: log.append("third"))

    h = x * w
    h.register_hook(hook)
    await run_backward((h * 2).sum())
    assert log == ["hook", "first", "second", "third"]


async def test_queue_callback_from_custom_backward(run_backward: Runner) -> None:
    log: list[str] = []

    class Marker(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 1

        @staticmethod
        def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            ag.autograd.queue_callback(lambda: log.append("callback"))
            log.append("backward")
            return g

    x = leaf(X)
    await run_backward(Marker.apply(x).sum())
    assert log == ["backward", "callback"]
    await run_backward(Marker.apply(x).sum())
    assert log == ["backward", "callback"] * 2  # never carried over to the next pass


class CallbackError(Exception):
    pass


@pytest.mark.parametrize("is_async", [False, True])
async def test_queue_callback_exception_reaches_caller(
    is_async: bool, run_backward: Runner
) -> None:
    x = leaf(X)

    def failing() -> None:
        raise CallbackError("from a final callback")

    async def afailing() -> None:
        await asyncio.sleep(0)
        raise CallbackError("from a final callback")

    x.register_hook(lambda g: ag.autograd.queue_callback(afailing if is_async else failing))
    with pytest.raises(CallbackError, match="final callback"):
        await run_backward((x * 1).sum())


async def test_queue_callback_outside_backward_raises() -> None:
    with pytest.raises(RuntimeError, match="during the backward"):
        ag.autograd.queue_callback(lambda: None)
    x = leaf(X)
    (x * 1).sum().backward()
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward((x * 1).sum())
    with pytest.raises(RuntimeError, match="during the backward"):
        ag.autograd.queue_callback(lambda: None)


def test_queue_callback_outside_backward_raises_sync() -> None:
    with pytest.raises(RuntimeError, match="during the backward"):
        ag.autograd.queue_callback(lambda: None)
