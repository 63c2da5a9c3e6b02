"""gradcheck/gradgradcheck accept torch's check_batched_grad and fast_mode: batched grads are
checked one vector at a time (no vmap), fast mode runs the full check."""

from __future__ import annotations

from typing import Any

import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck
from asyncgrad.autograd.gradcheck import GradcheckError


class _SquaresTheGrad(ag.autograd.Function):
    """d(x^2)/dx written wrongly as ``2 x g^2``: right for every basis grad_output (0 or 1),
    wrong for any other."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * g * g


def _x() -> ag.Tensor:
    return ag.tensor([0.5, -1.0, 2.0], dtype=ag.float64, requires_grad=True)


def test_check_batched_grad_and_fast_mode_are_accepted() -> None:
    x = _x()
    assert gradcheck(lambda t: (t * t).sin(), (x,), check_batched_grad=True, fast_mode=True)
    assert gradgradcheck(lambda t: (t * t).sin(), (x,), check_batched_grad=True, fast_mode=True)
    assert gradcheck(lambda t: (t * t).sin(), x, fast_mode=False, check_batched_grad=False)


def test_check_batched_grad_catches_a_backward_wrong_off_the_basis_vectors() -> None:
    x = _x()
    assert gradcheck(_SquaresTheGrad.apply, (x,))  # the Jacobian check alone misses it
    with pytest.raises(GradcheckError, match="check_batched_grad: the gradient with respect to"):
        gradcheck(_SquaresTheGrad.apply, (x,), check_batched_grad=True)
    assert not gradcheck(
        _SquaresTheGrad.apply, (x,), check_batched_grad=True, raise_exception=False
    )


def test_torch_agrees_about_the_options() -> None:
    torch = pytest.importorskip("torch", reason="torch's gradcheck is the reference")
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t: (t * t).sin(), (x,), check_batched_grad=True, fast_mode=True
    )


class _FlatBackward(ag.autograd.Function):
    """x^2 whose backward ``2 x.detach() g`` is right, but whose own derivative is not."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x.detach() * g


def test_gradgradcheck_catches_a_wrong_second_derivative() -> None:
    x = _x()
    assert gradcheck(_FlatBackward.apply, (x,))
    with pytest.raises(
        GradcheckError, match="Jacobian mismatch for output 0 with respect to input"
    ):
        gradgradcheck(_FlatBackward.apply, (x,))
    assert not gradgradcheck(_FlatBackward.apply, (x,), raise_exception=False)
    assert gradgradcheck(lambda t: (t * t).sin(), (x,))
