"""Random sampling (asyncgrad/ops/sampling.py): bernoulli, normal, poisson, binomial and the
in-place fills, by their distributions (seeded, so deterministic), their errors against torch's,
and their gradients (NOTE [Random draws are constants])."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

N = 20000
# Moments of N seeded draws: within 6 standard errors, so a wrong transform fails and a right
# one cannot (the seed fixes the draws).
FILLS: list[tuple[str, Callable[[ag.Tensor], Any], float, float]] = [
    ("normal_", lambda t: t.normal_(2.0, 3.0), 2.0, 3.0),
    ("uniform_", lambda t: t.uniform_(-1.0, 3.0), 1.0, 4.0 / math.sqrt(12)),
    ("exponential_", lambda t: t.exponential_(2.0), 0.5, 0.5),
    ("geometric_", lambda t: t.geometric_(0.25), 4.0, math.sqrt(0.75) / 0.25),
    (
        "log_normal_",
        lambda t: t.log_normal_(0.0, 0.5),
        math.exp(0.125),
        math.sqrt((math.exp(0.25) - 1) * math.exp(0.25)),
    ),
    ("bernoulli_", lambda t: t.bernoulli_(0.3), 0.3, math.sqrt(0.21)),
    ("random_", lambda t: t.random_(0, 10), 4.5, math.sqrt(99 / 12)),
]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize(("name", "fill", "mean", "std"), FILLS, ids=[f[0] for f in FILLS])
def test_fills_draw_from_their_distribution(
    name: str, fill: Callable[[ag.Tensor], Any], mean: float, std: float, device: str
) -> None:
    if device == "cuda" and ag.cuda.device_count() < 1:
        pytest.skip("needs a CUDA device (real or simulated)")
    ag.manual_seed(0)
    t = ag.zeros(N, dtype=ag.float64, device=device)
    assert fill(t) is t
    a = t.cpu().numpy()
    assert abs(a.mean() - mean) < 6 * std / math.sqrt(N)
    assert abs(a.std() - std) < 0.05 * std
    if name in ("geometric_", "random_", "bernoulli_"):
        assert np.array_equal(a, np.round(a))


def test_cauchy_quartiles() -> None:
    ag.manual_seed(0)
    a = ag.zeros(N, dtype=ag.float64).cauchy_(1.0, 2.0).numpy()
    q1, med, q3 = np.quantile(a, [0.25, 0.5, 0.75])
    assert abs(med - 1.0) < 0.1
    assert abs((q3 - q1) / 2 - 2.0) < 0.15  # the half interquartile range is sigma


def test_functions_draw_from_their_distributions() -> None:
    ag.manual_seed(1)
    p = ag.full((N,), 0.3, dtype=ag.float64)
    b = ag.bernoulli(p)
    assert b.dtype == ag.float64
    assert set(np.unique(b.numpy())) <= {0.0, 1.0}
    assert abs(b.numpy().mean() - 0.3) < 0.02
    n = ag.normal(ag.full((N,), 1.0), ag.full((N,), 2.0))
    assert (n.dtype, abs(float(n.mean()) - 1.0) < 0.1, abs(float(n.std()) - 2.0) < 0.1) == (
        ag.float32,
        True,
        True,
    )
    assert ag.normal(0.0, ag.ones(2, 3)).shape == (2, 3)
    assert ag.normal(ag.zeros(3, 1), ag.ones(4)).shape == (3, 4)
    assert ag.normal(0.0, 1.0, (2, 5)).shape == (2, 5)
    lam = ag.poisson(ag.full((N,), 4.0))
    assert abs(float(lam.mean()) - 4.0) < 0.1
    k = ag.binomial(ag.full((N,), 10.0), ag.full((N,), 0.5))
    assert abs(float(k.mean()) - 5.0) < 0.1
    assert float(k.max()) <= 10


def test_a_seed_repeats_the_draws() -> None:
    g = ag.Generator().manual_seed(3)
    a = ag.zeros(5).normal_(generator=g).tolist()
    g.manual_seed(3)
    assert ag.zeros(5).normal_(generator=g).tolist() == a


def test_random_with_no_bounds_covers_the_dtypes_range() -> None:
    ag.manual_seed(0)
    b = ag.zeros(100, dtype=ag.bool_).random_()
    assert set(b.tolist()) == {False, True}
    u = ag.zeros(1000, dtype=ag.uint8).random_()
    assert int(u.min()) >= 0
    assert 200 < int(u.max()) <= 255
    assert ag.zeros(10, dtype=ag.int64).random_(5).max().item() < 5


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (lambda L: L.zeros(2).normal_(0.0, -1.0), RuntimeError),
        (lambda L: L.zeros(2).uniform_(2.0, 1.0), RuntimeError),
        (lambda L: L.zeros(2).exponential_(-1.0), RuntimeError),
        (lambda L: L.zeros(2).geometric_(1.5), RuntimeError),
        (lambda L: L.zeros(2).log_normal_(0.0, -1.0), RuntimeError),
        (lambda L: L.zeros(2).random_(3, 1), RuntimeError),
        (lambda L: L.bernoulli(L.full((2,), 1.5)), RuntimeError),
        (lambda L: L.normal(L.zeros(2), -L.ones(2)), RuntimeError),
        (lambda L: L.poisson(-L.ones(2)), RuntimeError),
        (lambda L: L.zeros(2, dtype=L.int64).normal_(), (RuntimeError, NotImplementedError)),
        (lambda L: L.zeros(2, requires_grad=True).normal_(), RuntimeError),
    ],
)
def test_errors_as_torchs(call: Callable[[Any], Any], kind: Any) -> None:
    torch = pytest.importorskip("torch", reason="compares with torch (pip install torch)")
    with pytest.raises(kind):
        call(torch)
    with pytest.raises(kind):
        call(ag)


def test_a_fill_gives_the_overwritten_values_a_zero_gradient() -> None:
    w = ag.ones(4, requires_grad=True)
    x = w * 2.0
    x[:2].normal_()
    (g,) = ag.grad_sync((x * ag.arange(4.0)).sum(), [w])
    assert g.tolist() == [0.0, 0.0, 4.0, 6.0]  # d(2 w_i * i)/dw_i where not overwritten


def test_a_draw_is_a_constant() -> None:
    m = ag.zeros(3, requires_grad=True)
    assert not ag.normal(m, 1.0).requires_grad
    assert not ag.bernoulli(ag.full((3,), 0.5, requires_grad=True)).requires_grad
