"""torch's dropouts (alpha, feature, 1d/2d/3d; functional, torch-level and modules) tested for
their distribution and behaviour, and the distance functions (cosine_similarity,
pairwise_distance, pdist, cdist, normalize) against torch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

torch = pytest.importorskip("torch", reason="compares with torch")
TF = torch.nn.functional

RNG = np.random.default_rng(11)
SELU_SAT = -1.7580993408473766  # SELU's negative saturation, -scale * alpha


def _compare(fa: Any, ft: Any, *arrays: np.ndarray, rtol: float = 1e-12) -> None:
    a = [ag.tensor(x, requires_grad=True) for x in arrays]
    t = [torch.tensor(x, requires_grad=True) for x in arrays]
    oa, ot = fa(*a), ft(*t)
    np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), rtol=rtol, atol=1e-13)
    assert tuple(oa.shape) == tuple(ot.shape)
    assert oa.dtype == ag.float64
    g = RNG.standard_normal(tuple(ot.shape))
    ga = ag.autograd.grad(oa, a, ag.tensor(g))
    gt = torch.autograd.grad(ot, t, torch.tensor(g))
    for x, y in zip(ga, gt, strict=True):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=rtol, atol=1e-13)


# ----------------------------------------------------------------------------- dropouts
@pytest.mark.parametrize("p", [0.2, 0.5])
def test_alpha_dropout_keeps_mean_and_variance_and_its_two_values(p: float) -> None:
    ag.manual_seed(0)
    xs = RNG.standard_normal(200000)
    xs[np.abs(xs - SELU_SAT) < 1e-3] = 0.0  # a kept value equal to the dropped one
    x = ag.tensor(xs, requires_grad=True)
    y = F.alpha_dropout(x, p, training=True)
    ya, xa = y.detach().numpy(), x.detach().numpy()
    a = 1.0 / np.sqrt((SELU_SAT**2 * p + 1) * (1 - p))
    b_keep = -SELU_SAT * a * p
    kept = np.isclose(ya, a * xa + b_keep)
    dropped = np.isclose(ya, a * SELU_SAT + b_keep)
    assert (kept | dropped).all()
    assert abs(dropped.mean() - p) < 0.01
    assert abs(ya.mean()) < 0.02
    assert abs(ya.std() - 1.0) < 0.02
    (g,) = ag.autograd.grad(y.sum(), x)
    np.testing.assert_allclose(g.numpy(), np.where(kept, a, 0.0))
    assert F.alpha_dropout(x, p) is x  # training=False by default, as torch's
    assert ag.alpha_dropout(x, p, False) is x


@pytest.mark.parametrize("fn", ["feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d"])
def test_channel_dropouts_drop_whole_channels(fn: str) -> None:
    shape = {"dropout1d": (40, 30, 7), "dropout2d": (40, 30, 3, 4), "dropout3d": (40, 30, 2, 2, 3)}
    x = ag.tensor(RNG.standard_normal(shape.get(fn, (40, 30, 5))) + 5.0)
    ag.manual_seed(2)
    y = getattr(F, fn)(x, 0.3, training=True).numpy()
    flat = y.reshape(40, 30, -1)
    per_channel = [np.unique(np.round(c / x.numpy().reshape(40, 30, -1)[i, j], 8))
                   for i, row in enumerate(flat) for j, c in enumerate(row)]  # fmt: skip
    if fn == "feature_alpha_dropout":
        dropped = np.array([np.ptp(c) < 1e-9 for c in flat.reshape(1200, -1)])
        dropped &= np.isclose(flat.reshape(1200, -1)[:, 0], flat.reshape(1200, -1)[:, 1])
        a = 1.0 / np.sqrt((SELU_SAT**2 * 0.3 + 1) * 0.7)
        np.testing.assert_allclose(
            flat.reshape(1200, -1)[dropped], a * SELU_SAT - SELU_SAT * a * 0.3
        )
    else:
        assert all(len(c) == 1 for c in per_channel)  # one scale per channel
        scales = np.array([c[0] for c in per_channel])
        assert set(np.round(scales, 8)) <= {0.0, round(1 / 0.7, 8)}
        dropped = scales == 0
    assert abs(dropped.mean() - 0.3) < 0.05
    assert getattr(F, fn)(x, 0.3, training=False) is x


def test_unbatched_channel_dropouts_and_warnings_as_torch() -> None:
    ag.manual_seed(0)
    y = F.dropout1d(ag.ones(30, 5), 0.5)
    assert tuple(y.shape) == (30, 5)
    rows = y.numpy()
    assert all(len(set(r)) == 1 for r in rows)
    y3 = F.dropout3d(ag.ones(6, 2, 2, 2), 0.5)
    assert tuple(y3.shape) == (6, 2, 2, 2)
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input, but received a 4D"):
        F.dropout1d(ag.ones(1, 2, 3, 4))
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d and assuming"):
        F.dropout2d(ag.ones(2, 3, 4))
    with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d, which is deprecated"):
        F.dropout2d(ag.ones(2, 3))
    with pytest.warns(UserWarning, match="Received a 3-D input to dropout3d, which is deprecated"):
        F.dropout3d(ag.ones(2, 3, 4))
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got"):
        F.dropout2d(ag.ones(2, 3, 4, 4), 1.5)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        ag.feature_dropout(ag.ones(2, 3), -0.1, True)
    with pytest.raises(RuntimeError, match="Feature dropout requires at least 2 dimensions"):
        ag.feature_dropout(ag.ones(3), 0.5, True)
    with pytest.raises(RuntimeError, match="Feature dropout requires at least 2 dimensions"):
        torch.feature_dropout(torch.ones(3), 0.5, True)


def test_inplace_dropouts_overwrite_their_input() -> None:
    ag.manual_seed(3)
    for fn in (
        lambda x: ag.dropout_(x, 0.5, True),
        lambda x: ag.feature_dropout_(x, 0.5, True),
        lambda x: ag.alpha_dropout_(x, 0.5, True),
        lambda x: ag.feature_alpha_dropout_(x, 0.5, True),
        lambda x: F.dropout2d(ag.ops.unsqueeze(x, 0), 0.5, inplace=True),
        lambda x: F.dropout1d(x, 0.5, inplace=True),
        lambda x: F.alpha_dropout(x, 0.5, True, inplace=True),
    ):
        x = ag.ones(8, 6, 4)
        y = fn(x)
        assert y is x or y._base is x
        assert len(np.unique(x.numpy())) == 2


def test_torch_level_dropouts_scale_as_torch() -> None:
    ag.manual_seed(4)
    x = ag.ones(100000, dtype=ag.float32)
    y = ag.dropout(x, 0.25, True).numpy()
    assert y.dtype == np.float32
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.75], rtol=1e-6)
    assert abs((y == 0).mean() - 0.25) < 0.01
    assert ag.dropout(x, 0.25, False) is x
    np.testing.assert_array_equal(ag.alpha_dropout(x, 1.0, True).numpy(), 0.0)
    np.testing.assert_array_equal(
        torch.alpha_dropout(torch.ones(5), 1.0, True).numpy(), np.zeros(5)
    )
    fd = ag.feature_dropout(ag.ones(1000, 4, 3), 0.5, True).numpy()
    assert set(np.unique(fd)) == {0.0, 2.0}


@pytest.mark.parametrize(
    "name", ["AlphaDropout", "FeatureAlphaDropout", "Dropout1d", "Dropout2d", "Dropout3d"]
)
def test_dropout_modules_match_torch_reprs_and_modes(name: str) -> None:
    am, tm = getattr(nn, name)(0.3), getattr(torch.nn, name)(0.3)
    assert repr(am) == repr(tm)
    assert repr(getattr(nn, name)(inplace=True)) == repr(getattr(torch.nn, name)(inplace=True))
    am.eval()
    shapes = {"Dropout1d": (2, 3, 4), "Dropout3d": (2, 3, 2, 2, 2)}
    x = ag.ones(*shapes.get(name, (2, 3, 4, 5)))
    assert am(x) is x
    am.train()
    ag.manual_seed(5)
    assert len(np.unique(am(x).numpy())) == 2
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        getattr(nn, name)(2.0)


# ----------------------------------------------------------------------------- distances
@pytest.mark.parametrize(
    ("s1", "s2", "dim"),
    [((4, 5), (4, 5), 1), ((4, 5), (4, 5), 0), ((3, 1, 5), (1, 4, 5), -1), ((5,), (5,), 0),
     ((2, 3, 4), (2, 1, 4), 1)],
)  # fmt: skip
def test_cosine_similarity_matches_torch(s1: Any, s2: Any, dim: int) -> None:
    x1, x2 = RNG.standard_normal(s1), RNG.standard_normal(s2)
    _compare(
        lambda a, b: F.cosine_similarity(a, b, dim), lambda a, b: TF.cosine_similarity(a, b, dim),
        x1, x2,
    )  # fmt: skip
    _compare(
        lambda a, b: ag.cosine_similarity(a, b, dim),
        lambda a, b: torch.cosine_similarity(a, b, dim),
        x1, x2,
    )  # fmt: skip
    m, tm = nn.CosineSimilarity(dim, 1e-6), torch.nn.CosineSimilarity(dim, 1e-6)
    _compare(m, tm, x1, x2)
    a1, a2 = ag.tensor(x1, requires_grad=True), ag.tensor(x2, requires_grad=True)
    assert ag.autograd.gradcheck(lambda a, b: F.cosine_similarity(a, b, dim), (a1, a2))


def test_cosine_similarity_of_zero_vectors_is_zero_as_torch() -> None:
    x = np.zeros((2, 3))
    y = RNG.standard_normal((2, 3))
    out = F.cosine_similarity(ag.tensor(x), ag.tensor(y)).numpy()
    np.testing.assert_array_equal(
        out, TF.cosine_similarity(torch.tensor(x), torch.tensor(y)).numpy()
    )


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance_matches_torch(p: float, keepdim: bool) -> None:
    x1, x2 = RNG.standard_normal((4, 6)), RNG.standard_normal((4, 6))
    x2[0] = x1[0]  # a zero difference (eps keeps it off the kink)
    _compare(
        lambda a, b: F.pairwise_distance(a, b, p, 1e-6, keepdim),
        lambda a, b: TF.pairwise_distance(a, b, p, 1e-6, keepdim), x1, x2,
    )  # fmt: skip
    _compare(
        lambda a, b: ag.pairwise_distance(a, b, p, keepdim=keepdim),
        lambda a, b: torch.pairwise_distance(a, b, p, keepdim=keepdim), x1, x2[1],
    )  # fmt: skip
    m, tm = nn.PairwiseDistance(p, keepdim=keepdim), torch.nn.PairwiseDistance(p, keepdim=keepdim)
    assert repr(m) == repr(tm)
    _compare(m, tm, x1[0], x2[1])


@pytest.mark.parametrize("p", [2.0, 1.0, 0.5, 3.0, float("inf"), 0.0])
def test_pdist_matches_torch(p: float) -> None:
    x = RNG.standard_normal((5, 3))
    _compare(lambda a: F.pdist(a, p), lambda t: TF.pdist(t, p), x)
    _compare(lambda a: ag.pdist(a, p), lambda t: torch.pdist(t, p), x)
    if p >= 1:
        xa = ag.tensor(x, requires_grad=True)
        assert ag.autograd.gradcheck(lambda a: F.pdist(a, p), (xa,))


def test_pdist_edge_cases_and_errors_as_torch() -> None:
    assert tuple(F.pdist(ag.zeros(1, 3)).shape) == tuple(TF.pdist(torch.zeros(1, 3)).shape)
    assert tuple(F.pdist(ag.zeros(0, 3)).shape) == (0,)
    with pytest.raises(RuntimeError, match="pdist only supports 2D tensors, got: 3D"):
        F.pdist(ag.zeros(2, 2, 2))
    with pytest.raises(RuntimeError, match="pdist only supports 2D tensors, got: 3D"):
        TF.pdist(torch.zeros(2, 2, 2))
    with pytest.raises(RuntimeError, match="pdist only supports non-negative p values"):
        F.pdist(ag.zeros(2, 2), -1.0)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf"), 0.0])
@pytest.mark.parametrize(
    ("s1", "s2"), [((4, 3), (5, 3)), ((2, 4, 3), (2, 5, 3)), ((2, 1, 4, 3), (3, 5, 3))]
)
def test_cdist_matches_torch(p: float, s1: Any, s2: Any) -> None:
    x1, x2 = RNG.standard_normal(s1), RNG.standard_normal(s2)
    _compare(lambda a, b: ag.cdist(a, b, p), lambda a, b: torch.cdist(a, b, p), x1, x2, rtol=1e-10)


def test_cdist_errors_as_torch() -> None:
    with pytest.raises(RuntimeError, match="X1 and X2 must have the same number of columns"):
        ag.cdist(ag.zeros(2, 3), ag.zeros(2, 4))
    with pytest.raises(RuntimeError, match="X1 and X2 must have the same number of columns"):
        torch.cdist(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(RuntimeError, match="cdist only supports at least 2D tensors, X1 got: 1D"):
        ag.cdist(ag.zeros(3), ag.zeros(2, 3))
    for lib in (ag, torch):
        with pytest.raises(ValueError, match="bad is not a valid value for compute_mode"):
            lib.cdist(lib.zeros(2, 3), lib.zeros(2, 3), compute_mode="bad")
    x1, x2 = RNG.standard_normal((30, 3)), RNG.standard_normal((40, 3))  # torch's mm path
    for mode in ("use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"):
        np.testing.assert_allclose(
            ag.cdist(ag.tensor(x1), ag.tensor(x2), compute_mode=mode).numpy(),
            torch.cdist(torch.tensor(x1), torch.tensor(x2), compute_mode=mode).numpy(),
            rtol=1e-9,
        )


@pytest.mark.parametrize(("p", "dim"), [(2.0, 1), (1.0, 0), (3.0, -1), (float("inf"), 1)])
def test_normalize_matches_torch(p: float, dim: int) -> None:
    x = RNG.standard_normal((3, 4))
    x[1] = 0.0  # a zero row: the eps clamp
    _compare(lambda a: F.normalize(a, p, dim), lambda t: TF.normalize(t, p, dim), x)
    out = ag.zeros(3, 4, dtype=ag.float64)
    assert F.normalize(ag.tensor(x), p, dim, out=out) is out
    np.testing.assert_allclose(out.numpy(), TF.normalize(torch.tensor(x), p, dim).numpy())
    xa = ag.tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    assert ag.autograd.gradgradcheck(lambda a: F.normalize(a, 2.0, dim), (xa,))
