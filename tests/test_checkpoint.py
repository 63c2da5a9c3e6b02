"""ag.utils.checkpoint: gradients equal the un-checkpointed ones in both modes, with sync and
awaited backward, dropout recomputed identically, and torch's errors."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.graph.saved_tensor import HookedSavedTensor
from asyncgrad.utils.checkpoint import checkpoint


class _Net:
    """Four Linear+tanh+dropout layers, run as two checkpointed halves or plainly."""

    def __init__(self, p: float = 0.3) -> None:
        ag.manual_seed(3)
        self.layers = [nn.Linear(6, 6, dtype=ag.float64) for _ in range(4)]
        self.p = p
        self.calls = 0

    def half(self, x: Any, k: int) -> Any:
        self.calls += 1
        for lin in self.layers[2 * k : 2 * k + 2]:
            x = nn.functional.dropout(lin(x).tanh(), self.p, True)
        return x

    def params(self) -> list[Any]:
        return [p for lin in self.layers for p in lin.parameters()]

    def zero(self) -> None:
        for p in self.params():
            p.grad = None


def _loss(net: _Net, x: Any, mode: bool | None) -> Any:
    ag.manual_seed(11)
    for k in range(2):
        x = net.half(x, k) if mode is None else checkpoint(net.half, x, k, use_reentrant=mode)
    return (x * x).sum()


def _grads(net: _Net, x: Any) -> list[Any]:
    return [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in net.params()]


@pytest.mark.parametrize("mode", [True, False], ids=["reentrant", "non-reentrant"])
@pytest.mark.parametrize("awaited", [False, True], ids=["sync", "awaited"])
def test_gradients_equal_the_plain_ones(mode: bool, awaited: bool) -> None:
    net = _Net()
    xn = np.random.randn(5, 6)
    x = ag.tensor(xn, requires_grad=True)
    _loss(net, x, None).backward()
    want = _grads(net, x)
    net.zero()
    x.grad = None
    loss = _loss(net, x, mode)
    if awaited:

        async def main() -> None:
            await ag.backward(loss)

        asyncio.run(main())
    else:
        loss.backward()
    got = _grads(net, x)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    # forward once per half, and one recomputation per half in backward
    assert net.calls == 2 + 2 + 2


async def test_awaited_backward_inside_a_loop() -> None:
    net = _Net()
    x = ag.tensor(np.random.randn(5, 6), requires_grad=True)
    _loss(net, x, None).backward()
    want = _grads(net, x)
    for mode in (True, False):
        for blocking in (False, True):
            net.zero()
            x.grad = None
            loss = _loss(net, x, mode)
            if blocking:  # a blocking backward called inside the running loop
                loss.backward()
            else:
                await ag.backward(loss)
            for a, b in zip(_grads(net, x), want, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_dropout_recomputed_with_the_forward_mask() -> None:
    # Without restoring the generator the recomputation would draw another mask: check that
    # the gradient of x is zero exactly where the forward's output is zero.
    x = ag.tensor(np.random.randn(200), requires_grad=True)

    def f(t: Any) -> Any:
        return nn.functional.dropout(t * 1.0, 0.5, True)

    for mode in (True, False):
        x.grad = None
        y = checkpoint(f, x, use_reentrant=mode)
        y.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy() == 0, y.detach().numpy() == 0)


def test_preserve_rng_state_false_draws_again() -> None:
    x = ag.tensor(np.random.randn(200), requires_grad=True)

    def f(t: Any) -> Any:
        return nn.functional.dropout(t * 1.0, 0.5, True)

    y = checkpoint(f, x, use_reentrant=False, preserve_rng_state=False)
    y.sum().backward()
    assert ((x.grad.numpy() == 0) != (y.detach().numpy() == 0)).any()


def test_non_reentrant_keeps_handles_not_activations() -> None:
    x = ag.randn(4, 6, dtype=ag.float64, requires_grad=True)
    w = ag.randn(6, 6, dtype=ag.float64, requires_grad=True)
    y = checkpoint(lambda t: (t @ w).tanh().exp(), x, use_reentrant=False)
    saved = [s for s in y.grad_fn._saved if s is not None]
    assert saved
    assert all(type(s) is HookedSavedTensor for s in saved)
    y.sum().backward()
    xn, wn = x.detach().numpy(), w.detach().numpy()
    th = np.tanh(xn @ wn)
    gz = np.exp(th) * (1 - th**2)
    np.testing.assert_allclose(x.grad.numpy(), gz @ wn.T)
    np.testing.assert_allclose(w.grad.numpy(), xn.T @ gz)


def test_non_reentrant_with_grad_retain_graph_and_kwargs() -> None:
    x = ag.randn(3, dtype=ag.float64, requires_grad=True)
    calls = [0]

    def f(t: Any, *, scale: float) -> Any:
        calls[0] += 1
        return (t.sin() * scale).exp()

    y = checkpoint(f, x, use_reentrant=False, scale=2.0).sum()
    (g1,) = ag.grad_sync(y, [x], retain_graph=True)
    (g2,) = ag.grad_sync(y, [x])
    xn = x.detach().numpy()
    want = np.exp(2 * np.sin(xn)) * 2 * np.cos(xn)
    np.testing.assert_allclose(g1.numpy(), want)
    np.testing.assert_allclose(g2.numpy(), want)
    assert calls[0] == 3  # the forward, then one recomputation per backward


def test_non_reentrant_double_backward() -> None:
    x = ag.randn(3, dtype=ag.float64, requires_grad=True)
    y = checkpoint(lambda t: t.sin() * t, x, use_reentrant=False).sum()
    (g,) = ag.grad_sync(y, [x], create_graph=True)
    (gg,) = ag.grad_sync(g.sum(), [x])
    xn = x.detach().numpy()
    np.testing.assert_allclose(gg.numpy(), 2 * np.cos(xn) - xn * np.sin(xn))


def test_nested_checkpoints() -> None:
    x = ag.randn(3, dtype=ag.float64, requires_grad=True)

    def inner(t: Any) -> Any:
        return t.exp() * t

    def outer(t: Any) -> Any:
        return checkpoint(inner, t.sin(), use_reentrant=False).cos()

    for mode in (True, False):
        x.grad = None
        checkpoint(outer, x, use_reentrant=mode).sum().backward()
        xn = x.detach().numpy()
        s = np.sin(xn)
        u = np.exp(s) * s
        want = -np.sin(u) * np.exp(s) * (1 + s) * np.cos(xn)
        np.testing.assert_allclose(x.grad.numpy(), want)


def test_reentrant_errors_as_torch() -> None:
    x = ag.randn(3, requires_grad=True)
    y = checkpoint(lambda t: t.exp(), x, use_reentrant=True).sum()
    with pytest.raises(RuntimeError, match=r"incompatible with \.grad\(\)"):
        ag.grad_sync(y, [x])
    with pytest.raises(ValueError, match=r"^Unexpected keyword arguments: scale$"):
        checkpoint(lambda t, scale: t, x, use_reentrant=True, scale=2.0)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        checkpoint(lambda t: t.exp(), ag.randn(3), use_reentrant=True)
    with pytest.raises(TypeError, match="use_reentrant must be"):
        checkpoint(lambda t: t, x, use_reentrant="yes")  # type: ignore[arg-type]


def test_non_reentrant_recomputation_must_save_the_same() -> None:
    x = ag.randn(3, requires_grad=True)
    state = {"first": True}

    def f(t: Any) -> Any:
        if state["first"]:
            state["first"] = False
            return t.exp().exp()
        return t.exp() * 1.0

    y = checkpoint(f, x, use_reentrant=False).sum()
    with pytest.raises(RuntimeError, match="A different number of tensors was saved"):
        y.backward()


@pytest.mark.cuda
def test_dropout_on_a_cuda_device() -> None:
    if ag.cuda.device_count() < 1:
        pytest.skip("needs a CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    x = ag.randn(200, device="cuda", requires_grad=True)

    def f(t: Any) -> Any:
        return nn.functional.dropout(t * 1.0, 0.5, True)

    for mode in (True, False):
        x.grad = None
        y = checkpoint(f, x, use_reentrant=mode)
        y.sum().backward()
        np.testing.assert_array_equal(x.grad.cpu().numpy() == 0, y.detach().cpu().numpy() == 0)


def test_checkpoint_is_a_module_as_torch() -> None:
    # torch.utils.checkpoint is a module holding checkpoint; ag.utils.checkpoint(...), the call
    # this package documented before, still works.
    import types

    import asyncgrad.utils.checkpoint as module

    assert isinstance(ag.utils.checkpoint, types.ModuleType)
    assert ag.utils.checkpoint is module
    assert ag.utils.checkpoint.checkpoint is checkpoint
    assert issubclass(ag.utils.checkpoint.CheckpointError, RuntimeError)
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    ag.utils.checkpoint(lambda t: t.exp(), x, use_reentrant=False).sum().backward()  # type: ignore[operator]
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0]))


class _ReadsTwice(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        first = ctx.saved_tensors
        second = ctx.saved_tensors  # a second read of the same save
        return g * 2 + 0 * (first[0] + second[0])


def test_non_reentrant_unpacking_twice_raises() -> None:
    x = ag.ones(2, requires_grad=True)
    y = checkpoint(lambda t: _ReadsTwice.apply(t.sin()), x, use_reentrant=False)
    with pytest.raises(
        ag.utils.checkpoint.CheckpointError,
        match="Unpack is being triggered for a tensor that was already unpacked once",
    ):
        y.sum().backward()


def test_non_reentrant_each_backward_recomputes_once() -> None:
    calls = []

    def f(t: Any) -> Any:
        calls.append(1)
        return t.sin().exp()

    x = ag.ones(2, requires_grad=True)
    y = checkpoint(f, x, use_reentrant=False).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert len(calls) == 3  # the forward, and one recomputation per backward
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos(1.0) * np.exp(np.sin(1.0)) * np.ones(2))


class _SavesSecond(ag.autograd.Function):
    got: ClassVar[list[Any]] = []

    @staticmethod
    def forward(ctx: Any, x: Any, y: Any) -> Any:
        ctx.save_for_backward(y)
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        _SavesSecond.got.extend(ctx.saved_tensors)
        return g, None


def test_non_reentrant_keeps_the_identity_of_saved_tensors_that_need_no_grad() -> None:
    # torch's test_checkpointing_without_reentrant_saved_object_identity
    a = ag.tensor(1.0, requires_grad=True)
    b = ag.tensor(1.0)
    _SavesSecond.apply(a, b).backward()
    assert _SavesSecond.got[-1] is b
    checkpoint(_SavesSecond.apply, a, b, use_reentrant=False).backward()
    assert _SavesSecond.got[-1] is b
