"""Regressions found by the conformance harness: softmax-like ops on empty and 0-d tensors,
argmax/argmin of a 0-d tensor, the scatter-like backwards and histc on a CUDA device, and
matrix_rank(hermitian=True) on a CUDA device; each compared with torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(11)


def _cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")


def _host(t: Any) -> np.ndarray:
    return np.asarray(t.detach().cpu().numpy())


SOFTMAXES: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "softmax": (ag.softmax, torch.softmax),
    "log_softmax": (ag.log_softmax, torch.log_softmax),
    "softmin": (ag.nn.functional.softmin, torch.nn.functional.softmin),
}


@pytest.mark.parametrize("name", list(SOFTMAXES))
@pytest.mark.parametrize(("shape", "dim"), [((5, 0, 0), -1), ((0, 3), 1), ((3, 0), 1)])
@pytest.mark.parametrize("dtype", [None, "float64"])
def test_softmaxes_of_an_empty_tensor(
    name: str, shape: tuple[int, ...], dim: int, dtype: str | None
) -> None:
    ours, theirs = SOFTMAXES[name]
    x = np.zeros(shape, dtype=np.float32)
    t = torch.tensor(x, requires_grad=True)
    a = ag.tensor(x, requires_grad=True)
    kw = {} if dtype is None else {"dtype": getattr(torch, dtype)}
    akw = {} if dtype is None else {"dtype": getattr(ag, dtype)}
    t_out, a_out = theirs(t, dim, **kw), ours(a, dim, **akw)
    assert tuple(a_out.shape) == tuple(t_out.shape)
    assert str(a_out.dtype).removeprefix("asyncgrad.") == str(t_out.dtype).removeprefix("torch.")
    (tg,) = torch.autograd.grad(t_out.sum(), t)
    (ag_,) = ag.grad_sync([a_out.sum()], [a])
    assert tuple(ag_.shape) == tuple(tg.shape)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("name", list(SOFTMAXES))
@pytest.mark.parametrize("dim", [0, -1])
def test_softmaxes_of_a_0d_tensor(device: str, name: str, dim: int) -> None:
    if device == "cuda":
        _cuda()
    ours, theirs = SOFTMAXES[name]
    t = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    a = ag.tensor(np.float64(0.7), device=device, requires_grad=True)
    t_out, a_out = theirs(t, dim), ours(a, dim)
    assert a_out.shape == ()
    assert a_out.device.type == device
    np.testing.assert_allclose(_host(a_out), t_out.detach().numpy())
    cot = np.float64(1.3)
    (tg,) = torch.autograd.grad(t_out, t, torch.tensor(cot))
    (g,) = ag.grad_sync([a_out], [a], [ag.tensor(cot, device=device)])
    np.testing.assert_allclose(_host(g), tg.numpy(), atol=1e-12)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_arg_extremes_of_a_0d_tensor(device: str, name: str, dim: int, keepdim: bool) -> None:
    if device == "cuda":
        _cuda()
    t = getattr(torch, name)(torch.tensor(2.5), dim, keepdim)
    a = getattr(ag, name)(ag.tensor(np.float32(2.5), device=device), dim, keepdim)
    assert a.shape == tuple(t.shape)
    assert str(a.dtype).removeprefix("asyncgrad.") == "int64"
    assert int(_host(a)) == int(t)
    with pytest.raises(IndexError):
        getattr(ag, name)(ag.tensor(np.float32(2.5), device=device), 1)
