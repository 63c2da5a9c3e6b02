"""Family H5 on a CUDA device (simulated by default, see tests/conftest.py): every activation,
distance and loss gives the CPU's values and gradients (float64), and the dropouts run there."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.nn import functional as F

pytestmark = pytest.mark.cuda

RNG = np.random.default_rng(17)
X = RNG.standard_normal((3, 4))
P = RNG.uniform(0.1, 0.9, (3, 4))
SIGNS = np.sign(P - 0.5)


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")


CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
    *((n, getattr(F, n), (X,)) for n in (
        "relu6", "hardtanh", "hardsigmoid", "hardswish", "hardshrink", "softshrink",
        "tanhshrink", "softsign", "selu", "celu", "logsigmoid", "rrelu",
    )),
    ("threshold", lambda a: F.threshold(a, 0.1, 2.0), (X,)),
    ("prelu", F.prelu, (X, RNG.uniform(0.1, 0.3, 4))),
    ("glu", F.glu, (X,)),
    ("softmin", lambda a: F.softmin(a, 1), (X,)),
    ("normalize", F.normalize, (X,)),
    ("cosine_similarity", F.cosine_similarity, (X, P)),
    ("pairwise_distance", F.pairwise_distance, (X, P)),
    ("pdist", F.pdist, (X,)),
    ("cdist", ag.cdist, (X, P)),
    ("binary_cross_entropy", F.binary_cross_entropy, (P, P[::-1].copy())),
    ("kl_div", lambda a, b: F.kl_div(a, b, reduction="batchmean"), (np.log(P), P[::-1].copy())),
    ("smooth_l1_loss", F.smooth_l1_loss, (X, P)),
    ("huber_loss", F.huber_loss, (X, P)),
    ("soft_margin_loss", F.soft_margin_loss, (X, SIGNS)),
    ("multilabel_soft_margin_loss", F.multilabel_soft_margin_loss, (X, (P > 0.5) * 1.0)),
    ("multilabel_margin_loss", F.multilabel_margin_loss,
     (X, np.array([[1, 2, -1, 0], [3, -1, 0, 0], [0, 1, 2, 3]]))),
    ("multi_margin_loss", F.multi_margin_loss, (X, np.array([1, 2, 3]))),
    ("margin_ranking_loss", F.margin_ranking_loss, (X, P, SIGNS)),
    ("hinge_embedding_loss", F.hinge_embedding_loss, (X, SIGNS)),
    ("cosine_embedding_loss", F.cosine_embedding_loss, (X, P, np.array([1.0, -1.0, 1.0]))),
    ("triplet_margin_loss", lambda a, b, c: F.triplet_margin_loss(a, b, c, swap=True),
     (X, P, X * 2)),
    ("triplet_margin_with_distance_loss", F.triplet_margin_with_distance_loss, (X, P, X * 2)),
    ("poisson_nll_loss", lambda a, b: F.poisson_nll_loss(a, b, full=True), (X, np.round(P * 5))),
    ("gaussian_nll_loss", F.gaussian_nll_loss, (X, P, P)),
    ("ctc_loss", lambda a, t, il, tl: F.ctc_loss(F.log_softmax(a, -1), t, il, tl),
     (RNG.standard_normal((6, 2, 4)), np.array([[1, 2], [3, 3]]), np.array([6, 5]),
      np.array([2, 2]))),
    ("linear_cross_entropy", F.linear_cross_entropy,
     (X, RNG.standard_normal((5, 4)), np.array([1, 2, 3]))),
]  # fmt: skip


def _run(fn: Callable[..., Any], arrays: tuple[np.ndarray, ...], device: str) -> Any:
    ts = [ag.tensor(a, device=device, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = fn(*ts)
    w = ag.tensor(RNG.standard_normal(tuple(out.shape)), device=device)
    (out * w).sum().backward()
    grads = [None if t.grad is None else t.grad.to("cpu").numpy() for t in ts]
    return out.detach().to("cpu").numpy(), grads, out.device


@pytest.mark.parametrize(("name", "fn", "arrays"), CASES, ids=[c[0] for c in CASES])
def test_on_cuda_matches_the_cpu(name: str, fn: Any, arrays: tuple[np.ndarray, ...]) -> None:
    state = RNG.bit_generator.state
    oc, gc, _ = _run(fn, arrays, "cpu")
    RNG.bit_generator.state = state  # the same output weights on both devices
    od, gd, dev = _run(fn, arrays, "cuda:0")
    assert dev == ag.device("cuda:0")
    np.testing.assert_allclose(od, oc, rtol=1e-10, atol=1e-12)
    for a, b in zip(gd, gc, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: F.alpha_dropout(a, 0.5, True),
        lambda a: F.feature_alpha_dropout(a, 0.5, True),
        lambda a: F.dropout2d(a, 0.5),
        lambda a: F.dropout3d(a[0], 0.5),
        lambda a: ag.dropout(a, 0.5, True),
        lambda a: F.gumbel_softmax(a, hard=True),
    ],
)
def test_random_ones_run_on_cuda(fn: Any) -> None:
    ag.manual_seed(0)
    x = ag.tensor(RNG.standard_normal((2, 3, 4, 5)), device="cuda:0", requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        y = fn(x)
    assert y.device == ag.device("cuda:0")
    y.sum().backward()
    assert x.grad is not None
    assert x.grad.device == ag.device("cuda:0")
