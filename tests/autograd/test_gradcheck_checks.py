"""gradcheck's other checks, against torch's gradcheck on the same functions: the input checks,
reentrancy (``nondet_tol``), undefined output gradients, outputs that should not depend on the
inputs, ``raise_exception=False``, and ``grad(is_grads_batched=True)``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch's gradcheck is the reference")


def _x(lib: Any, dtype: Any = None) -> Any:
    return lib.tensor([0.5, -1.0, 2.0], dtype=dtype or lib.float64, requires_grad=True)


def _outcome(fn: Callable[[], Any]) -> tuple[str, str]:
    try:
        return "ok", repr(fn())
    except Exception as e:  # the outcome is what is compared
        return type(e).__name__, str(e).split("\n")[0]


def _noisy(lib: Any) -> Any:
    class Noisy(lib.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            return g * 2 + lib.rand(()) * 1e-9  # within the tolerances, never twice the same

    return Noisy.apply


def _two_outputs_needing_both(lib: Any) -> Any:
    class Both(lib.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx: Any, g1: Any, g2: Any) -> Any:
            return g1 * 2 + g2 * 3  # fails when either is None

    return Both.apply


def _cases(lib: Any) -> dict[str, Callable[[], Any]]:
    gc = lib.autograd.gradcheck
    return {
        "nothing requires grad": lambda: gc(lambda t: t * 2, (lib.ones(3, dtype=lib.float64),)),
        "expanded input": lambda: gc(
            lambda t: t * 2,
            (lib.ones(1, dtype=lib.float64).expand(3).requires_grad_(),),
        ),
        "not reentrant": lambda: gc(_noisy(lib), (_x(lib),)),
        "not reentrant, tolerated": lambda: gc(_noisy(lib), (_x(lib),), nondet_tol=1e-6),
        "undefined grads": lambda: gc(_two_outputs_needing_both(lib), (_x(lib),)),
        "undefined grads unchecked": lambda: gc(
            _two_outputs_needing_both(lib), (_x(lib),), check_undefined_grad=False
        ),
        "should not depend": lambda: gc(lambda t: t.detach() * 2 + 0 * t, (_x(lib),)),
        "not reentrant, no raise": lambda: gc(_noisy(lib), (_x(lib),), raise_exception=False),
        "no check at all": lambda: gc(lambda t: t, (_x(lib),), check_backward_ad=False),
    }


@pytest.mark.parametrize(
    "case",
    [
        "nothing requires grad",
        "expanded input",
        "not reentrant",
        "not reentrant, tolerated",
        "undefined grads",
        "undefined grads unchecked",
        "should not depend",
        "not reentrant, no raise",
        "no check at all",
    ],
)
def test_outcomes_as_torch(case: str) -> None:
    got = _outcome(_cases(ag)[case])
    want = _outcome(_cases(torch)[case])
    assert got[0] == want[0]
    assert got[1] == want[1]


def test_a_float32_input_warns_as_torch_and_is_checked() -> None:
    for lib in (ag, torch):
        with pytest.warns(UserWarning, match=r"Input #0 requires gradient and is not a double"):
            assert lib.autograd.gradcheck(
                lambda t: t * 3, (_x(lib, lib.float32),), eps=1e-2, atol=1e-2, rtol=1e-2
            )


def test_gradgradcheck_options_as_torch() -> None:
    for lib in (ag, torch):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert lib.autograd.gradgradcheck(
                lambda t: (t * t).sin(),
                (_x(lib),),
                gen_non_contig_grad_outputs=True,
                nondet_tol=0.0,
                check_undefined_grad=True,
                check_grad_dtypes=True,
            )


def _batched(lib: Any, create: bool) -> list[np.ndarray]:
    x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
    y = lib.tensor([0.5, -1.0], dtype=lib.float64, requires_grad=True)
    out = (x[:2] * y).sin()
    go = lib.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 3.0]], dtype=lib.float64)
    gx, gy = lib.autograd.grad(out, (x, y), go, is_grads_batched=True, create_graph=create)
    res = [gx.detach().numpy(), gy.detach().numpy()]
    if create:
        (h,) = lib.autograd.grad(gx.sum() + gy.sum(), x)
        res.append(h.numpy())
    return res


@pytest.mark.parametrize("create", [False, True])
def test_is_grads_batched_as_torch(create: bool) -> None:
    for a, b in zip(_batched(ag, create), _batched(torch, create), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_is_grads_batched_errors() -> None:
    x = ag.ones(3, requires_grad=True)
    out = x * 2
    with pytest.raises(RuntimeError, match="we interpret the first dimension of each grad_output"):
        ag.autograd.grad(out, x, ag.ones(3, 4), is_grads_batched=True)
    with pytest.raises(RuntimeError, match="needs grad_outputs"):
        ag.autograd.grad(out, x, is_grads_batched=True)
    z = ag.ones(1, requires_grad=True)
    gx, gz = ag.autograd.grad(out, (x, z), ag.eye(3), is_grads_batched=True, allow_unused=True)
    assert gz is None
    np.testing.assert_array_equal(gx.numpy(), 2 * np.eye(3))


async def test_is_grads_batched_awaited() -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    (g,) = await ag.autograd.grad(x * x, x, ag.eye(2), is_grads_batched=True)
    np.testing.assert_array_equal(g.numpy(), [[2.0, 0.0], [0.0, 4.0]])
