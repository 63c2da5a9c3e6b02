"""``allow_mutation_on_saved_tensors`` (NOTE [Mutation on saved tensors]),
``disable_saved_tensors_hooks``, and the saved-tensor hooks' stack under unbalanced use, against
torch and closed forms."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.graph.saved_tensor import saved_hooks

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _clone_then_sin(lib: Any, x: Any) -> Any:
    with lib.autograd.graph.allow_mutation_on_saved_tensors():
        b = x.clone()
        out = (b**2).sum()
        b.sin_()
        out.backward()
    return b


def _saved_output(lib: Any, x: Any) -> Any:
    with lib.autograd.graph.allow_mutation_on_saved_tensors():
        y = x.exp()
        y.add_(1)
        y.sum().backward()
    return y


def _slice_written(lib: Any, x: Any) -> Any:
    with lib.autograd.graph.allow_mutation_on_saved_tensors():
        b = x.clone()
        out = b.exp().sum()
        b[2:].zero_()
        out.backward()
    return b


def _twice(lib: Any, x: Any) -> Any:
    with lib.autograd.graph.allow_mutation_on_saved_tensors():
        b = x.clone()
        out = (b * b).sum()
        b.mul_(2)
        out2 = (b * b).sum()
        b.mul_(2)
        (out + out2).backward()
    return b


def _under_no_grad(lib: Any, x: Any) -> Any:
    with lib.autograd.graph.allow_mutation_on_saved_tensors():
        b = x * 1
        out = (b * b).sum()
        with lib.no_grad():
            b.add_(1)
        out.backward()
    return b


def _retained(lib: Any, x: Any) -> Any:
    with lib.autograd.graph.allow_mutation_on_saved_tensors():
        b = x.clone()
        out = (b * b.tanh()).sum()
        b.mul_(3)
        out.backward(retain_graph=True)
        out.backward()
    return b


@pytest.mark.parametrize(
    "program", [_clone_then_sin, _saved_output, _slice_written, _twice, _under_no_grad, _retained]
)
def test_gradients_and_values_as_torch(program: Callable[[Any, Any], Any]) -> None:
    v = np.linspace(0.3, 1.7, 5)
    x = ag.tensor(v, requires_grad=True)
    xt = torch.tensor(v, requires_grad=True)
    b = program(ag, x)
    bt = program(torch, xt)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.detach().numpy(), bt.detach().numpy(), rtol=1e-12)


def test_a_write_through_another_view_is_seen() -> None:
    # The saved tensor is a view; the write goes through its base. The backward reads the
    # values saved: d/dx sum(x[1:3]**2) = 2x there. (torch's reads the written values here.)
    v = np.array([1.0, 2.0, 3.0, 4.0])
    x = ag.tensor(v, requires_grad=True)
    with ag.autograd.graph.allow_mutation_on_saved_tensors():
        b = x.clone()
        w = b[1:3]
        out = (w * w).sum()
        b.mul_(10)
        out.backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 4.0, 6.0, 0.0])


def test_gradcheck_through_a_mutation() -> None:
    def f(x: Any) -> Any:
        with ag.autograd.graph.allow_mutation_on_saved_tensors():
            b = x * 1
            y = b.sin() * b
            b.mul_(3.0)
            (g,) = ag.autograd.grad(y.sum(), x, create_graph=False)
        return g

    x = ag.tensor(np.linspace(-1, 1, 4), requires_grad=True)
    want = np.cos(x.detach().numpy()) * x.detach().numpy() + np.sin(x.detach().numpy())
    np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-12)


def test_errors_as_torch() -> None:
    AM = ag.autograd.graph.allow_mutation_on_saved_tensors
    x = ag.ones(3, requires_grad=True)
    with AM():
        out = (x * x).sum()
    with pytest.raises(AssertionError, match="Trying to backward outside of the"):
        out.backward()
    with AM():
        with pytest.raises(RuntimeError, match="contexts cannot be nested"):
            with AM():
                pass
    with AM():
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            x.add_(1)
    assert saved_hooks.get() is None  # nothing left open


async def test_another_task_s_write_still_raises() -> None:
    # Task A saves inside its block; task B, outside any block, writes the saved array. B's
    # write makes no copy, so A's backward must refuse rather than read B's values.
    x = ag.ones(3, requires_grad=True)
    shared = x * 2
    saved = asyncio.Event()
    written = asyncio.Event()

    async def a() -> str:
        with ag.autograd.graph.allow_mutation_on_saved_tensors():
            out = (shared * shared).sum()
            saved.set()
            await asyncio.wait_for(written.wait(), 10)
            try:
                out.backward()
            except RuntimeError as e:
                return str(e)
        return "no error"

    async def b() -> None:
        await asyncio.wait_for(saved.wait(), 10)
        with ag.no_grad():
            shared.add_(1)
        written.set()

    msg, _ = await asyncio.wait_for(asyncio.gather(a(), b()), 10)
    assert "modified by an inplace operation" in msg


def test_disable_saved_tensors_hooks() -> None:
    for lib in (ag, torch):
        with lib.autograd.graph.disable_saved_tensors_hooks("no hooks here, please"):
            with pytest.raises(RuntimeError, match="no hooks here, please"):
                with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
            with pytest.raises(RuntimeError, match="no hooks here, please"):
                with lib.autograd.graph.save_on_cpu():
                    pass
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            pass  # allowed again


def _exit_in_unpack(lib: Any) -> None:
    def unpack(x: Any) -> Any:
        ctx_1.__exit__()
        return x

    ctx_1 = lib.autograd.graph.saved_tensors_hooks(lambda x: x, unpack)
    ctx_2 = lib.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x)
    for _ in range(3):
        with ctx_2:
            ctx_1.__enter__()
            x = lib.randn(3, 3, requires_grad=True)
            x.sin().sum().backward()
    for _ in range(3):
        ctx_1.__exit__()


def test_extra_exit_in_an_unpack_hook_leaves_the_stack_as_torch() -> None:
    for lib in (ag, torch):
        _exit_in_unpack(lib)
    assert saved_hooks.get() is None
    a = ag.tensor(1.0, requires_grad=True)
    y = a.exp()
    assert type(y.grad_fn._saved[0]).__name__ == "SavedTensor"  # saved with no hook


def test_extra_enter_in_an_unpack_hook_leaks_nothing() -> None:
    def scope() -> Any:
        def unpack(x: Any) -> Any:
            weak_ctx_1().__enter__()
            return x

        ctx_1 = ag.autograd.graph.saved_tensors_hooks(lambda x: x, unpack)
        weak_ctx_1 = weakref.ref(ctx_1)
        x = ag.randn(3, 3, requires_grad=True)
        with ctx_1:
            x.sin().sum().backward()
        return weakref.ref(unpack)

    gc.disable()
    try:
        ref = scope()
        assert ref() is None
        assert saved_hooks.get() is None
    finally:
        gc.enable()
