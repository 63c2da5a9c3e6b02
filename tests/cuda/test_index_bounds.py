"""Integer indices out of range raise on a CUDA device as on the CPU: CuPy (and the simulator,
which models it) wraps them around instead (NOTE [Index bounds on CUDA])."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.nn import functional as F

DEVICE = "cuda:0"


def _x() -> ag.Tensor:
    return ag.tensor(np.arange(12.0).reshape(3, 4), device=DEVICE, requires_grad=True)


def _i(values: Any) -> ag.Tensor:
    return ag.tensor(values, device=DEVICE)


def _setitem(index: Any) -> None:
    y = _x().detach().clone()
    y[index] = 1.0


# Each case: the call, the error's type and message.
CASES: Final[dict[str, tuple[Callable[[], Any], type[Exception], str]]] = {
    "getitem": (
        lambda: _x()[_i([0, 5])],
        IndexError,
        r"index 5 is out of bounds for dimension 0 with size 3 \(getitem of a tensor of shape "
        r"\(3, 4\) on cuda:0\)",
    ),
    "getitem, negative": (
        lambda: _x()[_i([-4])],
        IndexError,
        "index -4 is out of bounds for dimension 0 with size 3",
    ),
    "getitem, host list": (
        lambda: _x()[[0, 3]],
        IndexError,
        "index 3 is out of bounds for dimension 0 with size 3",
    ),
    "getitem, CPU index tensor": (
        lambda: _x()[ag.tensor([7])],
        IndexError,
        "index 7 is out of bounds for dimension 0 with size 3",
    ),
    "getitem, second dimension": (
        lambda: _x()[_i([0, 1]), _i([1, 4])],
        IndexError,
        "index 4 is out of bounds for dimension 1 with size 4",
    ),
    "getitem, after an ellipsis": (
        lambda: _x()[..., _i([-5])],
        IndexError,
        "index -5 is out of bounds for dimension 1 with size 4",
    ),
    "setitem": (
        lambda: _setitem(_i([3])),
        IndexError,
        r"index 3 is out of bounds for dimension 0 with size 3 \(setitem",
    ),
    "embedding": (
        lambda: F.embedding(_i([[0, 2], [3, 1]]), _x()),
        IndexError,
        r"index 3 is out of bounds for dimension 0 with size 3 \(embedding",
    ),
    "boolean mask of another shape": (
        lambda: _x()[_i([True, False])],
        IndexError,
        r"The shape of the mask \[2\] at index 0 does not match the shape of the indexed tensor "
        r"\[3, 4\] at index 0",
    ),
    "too many indices": (lambda: _x()[0, 1, _i([0])], IndexError, "too many indices"),
    "index_select": (
        lambda: ag.index_select(_x(), 1, _i([4])),
        IndexError,
        "index out of range in self",
    ),
    "gather": (
        lambda: ag.gather(_x(), 1, _i([[0], [4], [1]])),
        RuntimeError,
        "index 4 is out of bounds for dimension 1 with size 4",
    ),
    "scatter_add": (
        lambda: ag.scatter_add(_x(), 0, _i([[3, 0, 0, 0]]), _x()),
        RuntimeError,
        "index 3 is out of bounds for dimension 0 with size 3",
    ),
    "one_hot": (
        lambda: F.one_hot(_i([0, 3]), 3),
        RuntimeError,
        "Class values must be smaller than num_classes",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_an_index_out_of_range_raises(name: str) -> None:
    call, error, message = CASES[name]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target", [[0, 1, 4], [0, -1, 1], [-100, 7, 2]])
def test_a_class_index_out_of_range_makes_the_loss_and_gradients_nan(
    reduction: str, target: list[int]
) -> None:
    # NOTE [Class indices on a device]: no host read, and nothing silently wrong.
    from asyncgrad.backend import sim

    x = _x()
    with sim.forbid_host_sync():
        loss = F.cross_entropy(x, _i(target), reduction=reduction)
        loss.backward(ag.ones_like(loss))
    if reduction == "none":
        assert np.isnan(loss.detach().cpu().numpy()).all()
    else:
        assert np.isnan(loss.item())
    g = x.grad.cpu().numpy()
    assert np.isnan(g[[i for i, t in enumerate(target) if t != -100]]).all()
    # On the CPU the same call raises torch's IndexError.
    bad = next(t for t in target if t not in (-100, 0, 1, 2, 3))
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        F.cross_entropy(x.detach().cpu(), ag.tensor(target), reduction=reduction)


def test_indices_in_range_give_the_cpu_values_and_gradients() -> None:
    x = _x()
    xc = ag.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    rows, cols = [2, -3, 0, 2], [-1, 3, 0, -4]
    y = x[_i(rows), _i(cols)] * ag.tensor([1.0, 2.0, 3.0, 4.0], device=DEVICE)
    yc = xc[ag.tensor(rows), ag.tensor(cols)] * ag.tensor([1.0, 2.0, 3.0, 4.0])
    y.sum().backward()
    yc.sum().backward()
    np.testing.assert_array_equal(y.detach().cpu().numpy(), yc.detach().numpy())
    assert x.grad is not None
    assert xc.grad is not None
    np.testing.assert_array_equal(x.grad.cpu().numpy(), xc.grad.numpy())
