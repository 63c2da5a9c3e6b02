"""Regression tests for conformance-harness findings (cat, gather, diff, take_along_dim,
unravel_index, index_fill, batch_norm, fractional_max_pool3d), each compared with torch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.nn.functional as F

torch = pytest.importorskip("torch", reason="compares with torch (pip install torch)")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _dev(device: str) -> str:
    if device == "cuda" and ag.cuda.device_count() < 1:
        pytest.skip("needs a CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    return device


def _np(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return t.detach().cpu().numpy()


def _pair(a: np.ndarray, device: str) -> tuple[Any, torch.Tensor]:
    return (
        ag.tensor(a, device=device, requires_grad=True),
        torch.tensor(a, requires_grad=True),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_cat_skips_legacy_empty_1d_tensors(device: str) -> None:
    device = _dev(device)
    rng = np.random.default_rng(0)
    e, x = np.zeros(0), rng.standard_normal((5, 5))
    ae, te = _pair(e, device)
    ax, tx = _pair(x, device)
    for dim in (1, -1, 0):
        got = ag.cat([ae, ax, ae], dim=dim)
        want = torch.cat([te, tx, te], dim=dim)
        np.testing.assert_allclose(_np(got), _np(want))
        g = rng.standard_normal(tuple(want.shape))
        ae.grad = ax.grad = None
        te.grad = tx.grad = None
        got.backward(ag.tensor(g, device=device))
        want.backward(torch.tensor(g))
        assert tuple(ae.grad.shape) == tuple(te.grad.shape) == (0,)
        np.testing.assert_allclose(_np(ax.grad), _np(tx.grad))
    # only legacy empties: a (0,) result
    assert tuple(ag.cat([ae, ae]).shape) == tuple(torch.cat([te, te]).shape) == (0,)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_with_an_empty_index_skips_the_shape_checks(device: str) -> None:
    device = _dev(device)
    x = np.arange(5.0)
    for xa, ia in ((x, np.zeros((2, 0), np.int64)), (np.array(3.0), np.zeros((0, 3), np.int64))):
        ax, tx = _pair(xa, device)
        got = ag.gather(ax, 0, ag.tensor(ia, device=device))
        want = torch.gather(tx, 0, torch.tensor(ia))
        assert tuple(got.shape) == tuple(want.shape)
        got.sum().backward()
        want.sum().backward()
        np.testing.assert_allclose(_np(ax.grad), _np(tx.grad))


def test_diff_of_order_0_ignores_prepend_and_append() -> None:
    rng = np.random.default_rng(1)
    x, p, a = rng.standard_normal((5, 5)), rng.standard_normal((1, 5)), rng.standard_normal((2, 5))
    for pre, app in ((p, a), (None, a), (p, None)):
        ax, tx = _pair(x, "cpu")
        got = ag.diff(
            ax,
            0,
            0,
            None if pre is None else ag.tensor(pre),
            None if app is None else ag.tensor(app),
        )
        want = torch.diff(
            tx,
            0,
            0,
            None if pre is None else torch.tensor(pre),
            None if app is None else torch.tensor(app),
        )
        np.testing.assert_allclose(_np(got), _np(want))
        got.sum().backward()
        want.sum().backward()
        np.testing.assert_allclose(_np(ax.grad), _np(tx.grad))
    with pytest.raises(RuntimeError):
        ag.diff(ag.tensor(x), 0, 0, ag.tensor(np.zeros(5)))


@pytest.mark.parametrize("device", DEVICES)
def test_take_along_dim_takes_negative_indices_along_a_dim(device: str) -> None:
    device = _dev(device)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 5))
    idx = rng.integers(-5, 5, (5, 5))
    ax, tx = _pair(x, device)
    got = ag.take_along_dim(ax, ag.tensor(idx, device=device), 1)
    want = torch.take_along_dim(tx, torch.tensor(idx), 1)
    np.testing.assert_allclose(_np(got), _np(want))
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(_np(ax.grad), _np(tx.grad))
    with pytest.raises(RuntimeError):  # still out of bounds after one wrap
        ag.take_along_dim(ag.tensor(x, device=device), ag.tensor([[-6]], device=device), 1)


def test_unravel_index_with_an_empty_shape_gives_no_outputs() -> None:
    assert ag.unravel_index(ag.tensor(0), ()) == torch.unravel_index(torch.tensor(0), ()) == ()
    got = ag.unravel_index(ag.tensor([7, 2]), (2, 3))
    want = torch.unravel_index(torch.tensor([7, 2]), (2, 3))
    assert len(got) == len(want) == 2
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(_np(g), _np(w))


@pytest.mark.parametrize("device", DEVICES)
def test_index_fill_value_gradient_counts_repeated_indices_once(device: str) -> None:
    device = _dev(device)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 5))
    g = rng.standard_normal((5, 5))
    idx = np.array([4, 3, 3, 4, 0])
    for dim in (-1, 0):
        ax, tx = _pair(x, device)
        av, tv = _pair(np.array(2.5), device)
        got = ag.index_fill(ax, dim, ag.tensor(idx, device=device), av)
        want = torch.index_fill(tx, dim, torch.tensor(idx), tv)
        np.testing.assert_allclose(_np(got), _np(want))
        got.backward(ag.tensor(g, device=device))
        want.backward(torch.tensor(g))
        np.testing.assert_allclose(_np(av.grad), _np(tv.grad))
        np.testing.assert_allclose(_np(ax.grad), _np(tx.grad))


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_an_empty_1d_input(training: bool) -> None:
    for c in (0, 3):
        got = F.batch_norm(ag.zeros(0), ag.zeros(c), ag.ones(c), training=training)
        want = torch.nn.functional.batch_norm(
            torch.zeros(0), torch.zeros(c), torch.ones(c), training=training
        )
        assert tuple(got.shape) == tuple(want.shape) == (0,)
    w = np.array([2.0, 3.0])
    aw, tw = _pair(w, "cpu")
    got = F.batch_norm(ag.zeros(0), None, None, aw, aw, training=True)
    want = torch.nn.functional.batch_norm(torch.zeros(0), None, None, tw, tw, training=True)
    assert tuple(got.shape) == tuple(want.shape) == (0,)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(_np(aw.grad), _np(tw.grad))


@pytest.mark.parametrize("device", DEVICES)
def test_fractional_max_pool_takes_more_samples_than_the_batch(device: str) -> None:
    device = _dev(device)
    rng = np.random.default_rng(4)
    u = rng.random((2, 4, 3))
    for shape in ((4, 5, 5, 5), (1, 4, 5, 5, 5)):
        x = rng.standard_normal(shape)
        ax, tx = _pair(x, device)
        got = F.fractional_max_pool3d(
            ax, 2, output_ratio=0.5, _random_samples=ag.tensor(u, device=device)
        )
        want = torch.nn.functional.fractional_max_pool3d(
            tx, 2, output_ratio=0.5, _random_samples=torch.tensor(u)
        )
        np.testing.assert_allclose(_np(got), _np(want))
        got.sum().backward()
        want.sum().backward()
        np.testing.assert_allclose(_np(ax.grad), _np(tx.grad))
    u2 = rng.random((3, 4, 2))
    x = rng.standard_normal((2, 4, 5, 5))
    got = F.fractional_max_pool2d(
        ag.tensor(x, device=device), 2, (2, 2), _random_samples=ag.tensor(u2, device=device)
    )
    want = torch.nn.functional.fractional_max_pool2d(
        torch.tensor(x), 2, (2, 2), _random_samples=torch.tensor(u2)
    )
    np.testing.assert_allclose(_np(got), _np(want))
    x3 = ag.tensor(rng.standard_normal((2, 4, 5, 5, 5)), device=device)
    for bad, msg in (
        ((1, 4, 3), "no less then input batch size"),
        ((2, 5, 3), "equals to input channel size"),
        ((2, 4, 2), "equals to 3; got 2"),
        ((4, 3), "to have 3 dimensions"),
    ):
        with pytest.raises(RuntimeError, match=msg):
            F.fractional_max_pool3d(
                x3, 2, output_size=2, _random_samples=ag.tensor(rng.random(bad), device=device)
            )
