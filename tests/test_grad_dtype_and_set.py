"""``Tensor.grad_dtype`` and ``Tensor.set_`` against torch: what each gives, and the errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as e:  # the outcome is what is compared
        return type(e).__name__, str(e).split(" '")[0]


def _grad_dtype(lib: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    x = lib.ones(3, requires_grad=True)
    out["default"] = _outcome(lambda: x.grad_dtype == lib.float32)

    def f64() -> Any:
        x.grad_dtype = lib.float64
        (x * 2).sum().backward()
        (x * 3).sum().backward()
        return x.grad.dtype == lib.float64, x.grad.tolist(), x.grad_dtype == lib.float64

    out["float64, accumulated"] = _outcome(f64)
    y = lib.ones(3, requires_grad=True) * 1

    def set_non_leaf() -> None:
        y.grad_dtype = lib.float64

    out["non-leaf set"] = _outcome(set_non_leaf)
    out["non-leaf get"] = _outcome(lambda: y.grad_dtype)
    x2 = lib.ones(3, requires_grad=True)

    def any_dtype() -> Any:
        x2.grad_dtype = None
        (x2.double() * 2).sum().backward()
        first = x2.grad.dtype == lib.float32
        x2.grad = None
        x2.grad = lib.ones(3, dtype=lib.float64)
        return first, x2.grad.dtype == lib.float64, x2.grad_dtype

    out["None"] = _outcome(any_dtype)
    x3 = lib.ones(3, requires_grad=True)

    def assign() -> None:
        x3.grad = lib.ones(3, dtype=lib.float64)

    out["assign another dtype"] = _outcome(assign)
    x4 = lib.ones(3, requires_grad=True)
    (x4 * 2).sum().backward()

    def change() -> None:
        x4.grad_dtype = lib.float64

    out["change with a gradient"] = _outcome(change)
    x5 = lib.ones(3, requires_grad=True)
    x5.grad_dtype = lib.float16

    def through_grad() -> Any:
        (g,) = lib.autograd.grad((x5 * 2).sum(), x5)
        return g.dtype == lib.float16, g.tolist()

    out["autograd.grad"] = _outcome(through_grad)
    return out


def test_grad_dtype_as_torch() -> None:
    got, want = _grad_dtype(ag), _grad_dtype(torch)
    assert got == want


def _set(lib: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    a = lib.zeros(3)
    b = lib.arange(6.0)

    def share() -> Any:
        v0 = a._version
        a.set_(b)
        b[0] = 100
        return a.tolist(), a._version - v0, a.data_ptr() == b.data_ptr()

    out["share"] = _outcome(share)
    out["no source"] = _outcome(lambda: tuple(lib.ones(2, 3).set_().shape))
    out["size, stride, offset"] = _outcome(
        lambda: lib.zeros(1).set_(lib.arange(6.0), 1, (2, 2), (2, 1)).tolist()
    )
    out["size alone"] = _outcome(lambda: lib.zeros(1).set_(lib.arange(6.0), 0, (2, 3)).tolist())
    out["dtype"] = _outcome(lambda: lib.zeros(3).set_(lib.arange(3, dtype=lib.float64)))
    x = lib.zeros(3, requires_grad=True)
    out["leaf"] = _outcome(lambda: x.set_(lib.ones(3)))

    def under_no_grad() -> Any:
        with lib.no_grad():
            x.set_(lib.tensor([1.0, 2.0, 3.0]))
        (x * x).sum().backward()
        return x.tolist(), x.requires_grad, x.grad.tolist()

    out["leaf under no_grad"] = _outcome(under_no_grad)
    return out


def test_set_as_torch() -> None:
    got, want = _set(ag), _set(torch)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k][0] == want[k][0], k
        if want[k][0] == "ok":
            assert got[k] == want[k], k


def test_set_errors_name_what_is_wrong() -> None:
    with pytest.raises(RuntimeError, match="Could not set tensor of type float64 to a tensor"):
        ag.zeros(3).set_(ag.zeros(3, dtype=ag.float64))
    s = ag.ones(3, requires_grad=True)
    y = ag.zeros(3)
    with pytest.raises(RuntimeError, match="set_ is not differentiable"):
        y.set_(s * 2)
    assert y.tolist() == [0.0, 0.0, 0.0]  # nothing changed
    with pytest.raises(TypeError, match="must be a Tensor or None"):
        y.set_([1.0, 2.0])
