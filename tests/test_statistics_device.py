"""Family H2 on a CUDA device (the simulated one unless ASYNCGRAD_SIM_CUDA=0): the same values
and gradients as on the CPU, through CuPy's array functions only (no ``ufunc.accumulate`` for
maximum or logaddexp there, no ``isin``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

pytestmark = pytest.mark.cuda

RNG = np.random.default_rng(3)
X = RNG.standard_normal((3, 5))
X[1, 2] = X[1, 0]  # a tie


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")


DIFFERENTIABLE: list[tuple[str, Callable[[Any], Any]]] = [
    ("median", lambda t: t.median()),
    ("median_dim", lambda t: t.median(1).values),
    ("nanmedian", lambda t: t.nanmedian(0).values),
    ("mode", lambda t: t.mode().values),
    ("kthvalue", lambda t: t.kthvalue(2).values),
    ("quantile", lambda t: t.quantile(0.7, 1)),
    ("cumprod", lambda t: t.cumprod(1)),
    ("cummax", lambda t: t.cummax(1).values),
    ("cummin", lambda t: t.cummin(0).values),
    ("logcumsumexp", lambda t: t.logcumsumexp(1)),
    ("nansum", lambda t: t.nansum(1)),
    ("nanmean", lambda t: t.nanmean()),
    ("diff", lambda t: t.diff()),
    ("cov", lambda t: t.cov()),
    ("corrcoef", lambda t: t.corrcoef()),
    ("trapezoid", lambda t: ag.trapezoid(t)),
    ("cumulative_trapezoid", lambda t: ag.cumulative_trapezoid(t)),
    ("renorm", lambda t: t.renorm(2, 0, 1.0)),
    ("gradient", lambda t: ag.gradient(t)[1]),
    ("aminmax", lambda t: t.aminmax(dim=0).max),
    ("dist", lambda t: t.dist(t * 2)),
]


@pytest.mark.parametrize(("name", "f"), DIFFERENTIABLE, ids=[c[0] for c in DIFFERENTIABLE])
def test_values_and_gradients_as_on_the_cpu(name: str, f: Callable[[Any], Any]) -> None:
    out = []
    for device in ("cpu", "cuda"):
        x = ag.tensor(X, device=device, requires_grad=True)
        y = f(x)
        (g,) = ag.grad_sync(y.sum(), [x])
        assert y.device == x.device
        assert g.device == x.device
        out.append((y.cpu().detach().numpy(), g.cpu().numpy()))
    for a, b in zip(out[0], out[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


NOT_DIFFERENTIABLE: list[tuple[str, Callable[[Any], Any]]] = [
    ("histc", lambda t: t.histc(5)),
    ("histogram", lambda t: t.histogram(4)),
    ("histogramdd", lambda t: ag.histogramdd(t, 2)),
    ("count_nonzero", lambda t: t.count_nonzero(0)),
    ("bincount", lambda t: ag.bincount((t * 3).abs().long().reshape(-1))),
    ("searchsorted", lambda t: ag.searchsorted(t.sort(1).values, t)),
    ("searchsorted_1d", lambda t: ag.searchsorted(t.reshape(-1).sort().values, t)),
    ("bucketize", lambda t: ag.bucketize(t, t[0].sort().values, right=True)),
    ("isin", lambda t: ag.isin(t, t[0])),
    ("isin_invert", lambda t: ag.isin(t, t[:, 1], invert=True)),
    ("unique_consecutive", lambda t: ag.unique_consecutive((t > 0).long(), True, True)),
    ("unique_consecutive_dim", lambda t: ag.unique_consecutive(t, dim=1)),
]


def _arrays(r: Any) -> list[np.ndarray]:
    if isinstance(r, ag.Tensor):
        return [r.cpu().numpy()]
    return [a for x in r for a in _arrays(x)]


@pytest.mark.parametrize(("name", "f"), NOT_DIFFERENTIABLE, ids=[c[0] for c in NOT_DIFFERENTIABLE])
def test_histograms_and_search_as_on_the_cpu(name: str, f: Callable[[Any], Any]) -> None:
    cpu = _arrays(f(ag.tensor(X)))
    cuda = _arrays(f(ag.tensor(X, device="cuda")))
    for a, b in zip(cpu, cuda, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-12)
