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


def _compare_grads(fn: Callable[..., Any], inputs: list[np.ndarray], *, second: bool) -> None:
    """``fn`` (given tensors of one library, and that library) on the CPU in torch and on the
    CUDA device in asyncgrad: values and gradients (and, with ``second``, under create_graph)."""
    ts = [torch.tensor(x, requires_grad=True) for x in inputs]
    As = [ag.tensor(x, device="cuda", requires_grad=True) for x in inputs]
    t_out, a_out = fn(torch, *ts), fn(ag, *As)
    np.testing.assert_allclose(_host(a_out), t_out.detach().numpy(), rtol=1e-12)
    cot = RNG.standard_normal(tuple(t_out.shape))
    tg = torch.autograd.grad(t_out, ts, torch.tensor(cot), allow_unused=True)
    ag_ = ag.grad_sync(
        [a_out], As, [ag.tensor(cot, device="cuda")], allow_unused=True, create_graph=second
    )
    for x, y in zip(ag_, tg, strict=True):
        if y is None:
            continue
        assert x is not None
        assert x.device.type == "cuda"
        np.testing.assert_allclose(_host(x), y.numpy(), rtol=1e-12, atol=1e-12)


def _index(lib: Any) -> Any:
    return lib.tensor(np.array([[0, 1, 0], [2, 0, 1]]))


SCATTERS: dict[str, tuple[Callable[..., Any], list[np.ndarray]]] = {
    "index_put": (
        lambda lib, x, v: x.index_put((lib.tensor(np.array([0, 2, 3])),), v),
        [RNG.standard_normal((5, 4)), RNG.standard_normal((3, 4))],
    ),
    "index_put_accumulate": (
        lambda lib, x, v: x.index_put((lib.tensor(np.array([0, 2, 0])),), v, accumulate=True),
        [RNG.standard_normal((5, 4)), RNG.standard_normal((3, 4))],
    ),
    "scatter": (
        lambda lib, x, s: lib.scatter(x, 1, _index(lib), s),
        [RNG.standard_normal((3, 4)), RNG.standard_normal((2, 3))],
    ),
    "scatter_reduce_sum": (
        lambda lib, x, s: lib.scatter_reduce(x, 1, _index(lib), s, "sum"),
        [RNG.standard_normal((3, 4)), RNG.standard_normal((2, 3))],
    ),
    "scatter_reduce_prod": (
        lambda lib, x, s: lib.scatter_reduce(x, 1, _index(lib), s, "prod"),
        [RNG.standard_normal((3, 4)), RNG.standard_normal((2, 3))],
    ),
    "scatter_reduce_mean": (
        lambda lib, x, s: lib.scatter_reduce(x, 1, _index(lib), s, "mean"),
        [RNG.standard_normal((3, 4)), RNG.standard_normal((2, 3))],
    ),
    "masked_scatter": (
        lambda lib, x, s: x.masked_scatter(lib.tensor(np.eye(3, 4, dtype=bool)), s),
        [RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))],
    ),
    "diagonal_scatter": (
        lambda lib, x, s: lib.diagonal_scatter(x, s, 1),
        [RNG.standard_normal((4, 4)), RNG.standard_normal((3,))],
    ),
    "select_scatter": (
        lambda lib, x, s: lib.select_scatter(x, s, 1, 2),
        [RNG.standard_normal((3, 4, 2)), RNG.standard_normal((3, 2))],
    ),
    "slice_scatter": (
        lambda lib, x, s: lib.slice_scatter(x, s, 1, 0, 4, 2),
        [RNG.standard_normal((3, 4)), RNG.standard_normal((3, 2))],
    ),
}


@pytest.mark.cuda
@pytest.mark.parametrize("second", [False, True])
@pytest.mark.parametrize("name", list(SCATTERS))
def test_scatter_backwards_on_cuda(name: str, second: bool) -> None:
    _cuda()
    fn, inputs = SCATTERS[name]
    _compare_grads(fn, inputs, second=second)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_histc_of_the_data_range_on_cuda(dtype: str) -> None:
    _cuda()
    x = (RNG.standard_normal((5, 5)) * 4).astype(dtype)
    t = torch.histc(torch.tensor(x), bins=7)
    a = ag.histc(ag.tensor(x, device="cuda"), bins=7)
    assert a.device.type == "cuda"
    np.testing.assert_array_equal(_host(a), t.numpy())


@pytest.mark.cuda
def test_hermitian_matrix_rank_on_cuda() -> None:
    _cuda()
    b = RNG.standard_normal((2, 4, 2))
    x = b @ b.transpose(0, 2, 1)  # rank 2 each
    t = torch.linalg.matrix_rank(torch.tensor(x), hermitian=True)
    a = ag.linalg.matrix_rank(ag.tensor(x, device="cuda"), hermitian=True)
    assert a.device.type == "cuda"
    np.testing.assert_array_equal(_host(a), t.numpy())
    ev = ag.linalg.eigvalsh(ag.tensor(x, device="cuda"))
    np.testing.assert_allclose(_host(ev), np.linalg.eigvalsh(x), atol=1e-10)
