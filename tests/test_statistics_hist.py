"""Family H2 against torch: histograms (histc, histogram, histogramdd, bincount), search
(searchsorted, bucketize, isin) and unique_consecutive: values, dtypes, shapes and errors."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(5)


def _np(r: Any) -> Any:
    if isinstance(r, (ag.Tensor, torch.Tensor)):
        return r.detach().numpy()
    if isinstance(r, (tuple, list)):
        return [_np(x) for x in r]
    return r


def _assert_same(a: Any, t: Any, rtol: float = 1e-6) -> None:
    an, tn = _np(a), _np(t)
    if isinstance(tn, list):
        assert isinstance(an, list)
        assert len(an) == len(tn)
        for x, y in zip(an, tn, strict=True):
            _assert_same(x, y, rtol)
        return
    assert an.shape == tn.shape, (an.shape, tn.shape)
    assert an.dtype == tn.dtype, (an.dtype, tn.dtype)
    np.testing.assert_allclose(an, tn, rtol=rtol, atol=1e-7, equal_nan=True)


def _both(f: Callable[..., Any], *arrays: Any) -> None:
    a = [ag.tensor(x) if isinstance(x, np.ndarray) else x for x in arrays]
    t = [torch.tensor(x) if isinstance(x, np.ndarray) else x for x in arrays]
    _assert_same(f(ag, *a), f(torch, *t))


F32 = RNG.standard_normal(50).astype(np.float32)
F64 = RNG.standard_normal((10, 3))
SORTED = np.sort(RNG.integers(0, 10, 8)).astype(np.float64)

CASES: list[tuple[str, Callable[..., Any], list[Any]]] = [
    ("histc", lambda m, x: m.histc(x, 10), [F32]),
    ("histc_range", lambda m, x: m.histc(x, 7, -1.0, 1.0), [F32]),
    ("histc_f64_method", lambda m, x: x.histc(5, min=-0.5, max=2), [F64]),
    ("histc_const", lambda m, x: m.histc(x, 4), [np.full(3, 2.0, dtype=np.float32)]),
    ("histc_empty", lambda m, x: m.histc(x, 3), [np.zeros(0, dtype=np.float32)]),
    ("histc_edges", lambda m, x: m.histc(x, 4, 0, 4), [np.arange(5, dtype=np.float32)]),
    ("histogram", lambda m, x: m.histogram(x, 6), [F32]),
    ("histogram_range", lambda m, x: m.histogram(x, 4, range=(-1.0, 1.0)), [F32]),
    ("histogram_density", lambda m, x: m.histogram(x, 5, density=True), [F64]),
    (
        "histogram_weight",
        lambda m, x, w: m.histogram(x, 5, weight=w),
        [F64, RNG.uniform(0, 2, (10, 3))],
    ),
    ("histogram_edges", lambda m, x, b: m.histogram(x, b), [F64, np.array([-2.0, -0.5, 0.0, 3.0])]),
    (
        "histogram_edges_density",
        lambda m, x, b: x.histogram(b, density=True),
        [F64, np.array([-1.0, 0.0, 0.5, 3.0])],
    ),
    ("histogram_empty", lambda m, x: m.histogram(x, 3), [np.zeros(0, dtype=np.float32)]),
    ("histogram_const", lambda m, x: m.histogram(x, 2), [np.ones(4)]),
    ("histogramdd", lambda m, x: m.histogramdd(x, 3), [F64]),
    ("histogramdd_bins", lambda m, x: m.histogramdd(x, [2, 3, 4]), [F64]),
    (
        "histogramdd_range_density",
        lambda m, x: m.histogramdd(x, [2, 3], range=[-1.0, 1.0, 0.0, 2.0], density=True),
        [RNG.standard_normal((4, 5, 2))],
    ),
    (
        "histogramdd_edges_weight",
        lambda m, x, e0, e1, w: m.histogramdd(x, [e0, e1], weight=w),
        [
            RNG.standard_normal((20, 2)),
            np.array([-3.0, 0.0, 3.0]),
            np.array([-1.0, 0.0, 0.5, 1.0]),
            RNG.uniform(0, 1, 20),
        ],
    ),
    ("bincount", lambda m, x: m.bincount(x), [RNG.integers(0, 6, 20)]),
    ("bincount_minlength", lambda m, x: x.bincount(minlength=10), [RNG.integers(0, 6, 20)]),
    ("bincount_empty", lambda m, x: m.bincount(x, minlength=3), [np.zeros(0, dtype=np.int64)]),
    (
        "bincount_w32",
        lambda m, x, w: m.bincount(x, w),
        [np.array([0, 2, 2]), np.array([1.0, 2, 3], dtype=np.float32)],
    ),
    (
        "bincount_w64",
        lambda m, x, w: m.bincount(x, w),
        [np.array([0, 2, 2]), np.array([1.0, 2, 3])],
    ),
    ("bincount_wint", lambda m, x, w: m.bincount(x, w), [np.array([0, 2, 2]), np.array([1, 2, 3])]),
    ("bincount_uint8", lambda m, x: m.bincount(x), [np.array([1, 3], dtype=np.uint8)]),
    (
        "searchsorted",
        lambda m, s, v: m.searchsorted(s, v),
        [SORTED, RNG.integers(-1, 11, (3, 4)).astype(np.float64)],
    ),
    ("searchsorted_right", lambda m, s, v: m.searchsorted(s, v, right=True), [SORTED, SORTED]),
    ("searchsorted_side", lambda m, s, v: m.searchsorted(s, v, side="right"), [SORTED, SORTED]),
    (
        "searchsorted_int32",
        lambda m, s, v: m.searchsorted(s, v, out_int32=True),
        [SORTED, SORTED[:3]],
    ),
    ("searchsorted_scalar", lambda m, s: m.searchsorted(s, 4.0), [SORTED]),
    (
        "searchsorted_batched",
        lambda m, s, v: m.searchsorted(s, v),
        [
            np.sort(RNG.integers(0, 5, (2, 3, 6)), -1).astype(float),
            RNG.integers(0, 6, (2, 3, 4)).astype(float),
        ],
    ),
    (
        "searchsorted_batched_right",
        lambda m, s, v: m.searchsorted(s, v, right=True),
        [np.sort(RNG.integers(0, 5, (3, 6)), -1), RNG.integers(0, 6, (3, 7))],
    ),
    (
        "searchsorted_sorter",
        lambda m, s, v, o: m.searchsorted(s, v, sorter=o),
        [np.array([3.0, 1.0, 2.0, 5.0]), np.array([0.0, 2.0, 2.5, 6.0]), np.array([1, 2, 0, 3])],
    ),
    ("searchsorted_empty_values", lambda m, s, v: m.searchsorted(s, v), [SORTED, np.zeros(0)]),
    (
        "bucketize",
        lambda m, x, b: m.bucketize(x, b),
        [RNG.integers(0, 10, (2, 5)).astype(float), np.array([1.0, 3.0, 7.0])],
    ),
    (
        "bucketize_right",
        lambda m, x, b: m.bucketize(x, b, right=True, out_int32=True),
        [np.arange(9.0), np.array([1.0, 3.0, 7.0])],
    ),
    ("bucketize_scalar", lambda m, b: m.bucketize(3, b), [np.array([1, 3, 7])]),
    ("isin", lambda m, x, y: m.isin(x, y), [RNG.integers(0, 6, (3, 4)), np.array([1, 4, 9])]),
    (
        "isin_invert",
        lambda m, x, y: m.isin(x, y, invert=True),
        [RNG.integers(0, 6, 8), np.array([1, 4])],
    ),
    ("isin_scalar_test", lambda m, x: m.isin(x, 2), [np.array([1, 2, 3])]),
    ("isin_scalar_elem", lambda m, y: m.isin(2, y), [np.array([1, 2, 3])]),
    (
        "isin_float",
        lambda m, x, y: m.isin(x, y),
        [np.array([1.0, math.nan, 2.5]), np.array([2.5, math.nan])],
    ),
    (
        "unique_consecutive",
        lambda m, x: m.unique_consecutive(x),
        [np.array([1, 1, 2, 2, 3, 1, 1, 2])],
    ),
    (
        "unique_consecutive_all",
        lambda m, x: m.unique_consecutive(x, return_inverse=True, return_counts=True),
        [np.array([[1, 1, 2], [2, 3, 3]])],
    ),
    (
        "unique_consecutive_dim",
        lambda m, x: m.unique_consecutive(x, True, True, dim=0),
        [np.array([[1, 2], [1, 2], [3, 4], [1, 2]])],
    ),
    (
        "unique_consecutive_dim1",
        lambda m, x: x.unique_consecutive(return_counts=True, dim=1),
        [np.array([[1.0, 1.0, 2.0], [5.0, 5.0, 5.0]])],
    ),
    (
        "unique_consecutive_empty",
        lambda m, x: m.unique_consecutive(x, return_counts=True),
        [np.zeros(0)],
    ),
]


@pytest.mark.parametrize(("case_id", "f", "arrays"), CASES, ids=[c[0] for c in CASES])
def test_values_match_torch(case_id: str, f: Callable[..., Any], arrays: list[Any]) -> None:
    _both(f, *arrays)


def test_histograms_have_no_gradient() -> None:
    x = ag.tensor(F64, requires_grad=True)
    assert not ag.histc(x, 4).requires_grad
    assert not ag.histogram(x, 4).hist.requires_grad
    r = ag.histogramdd(x, 2)
    assert isinstance(r.bin_edges, tuple)
    assert len(r.bin_edges) == 3


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda m: m.histc(m.tensor([1, 2])), NotImplementedError, "not implemented for 'Long'"),
        (lambda m: m.histc(m.tensor([1.0]), 4, 2, 1), RuntimeError, "max must be larger than min"),
        (
            lambda m: m.bincount(m.tensor([-1, 2])),
            RuntimeError,
            "bincount only supports 1-d non-negative integral inputs",
        ),
        (
            lambda m: m.bincount(m.tensor([[1, 2]])),
            RuntimeError,
            "bincount only supports 1-d non-negative integral inputs",
        ),
        (
            lambda m: m.bincount(m.tensor([1.0])),
            RuntimeError,
            "\"bincount_cpu\" not implemented for 'Float'",
        ),
        (
            lambda m: m.searchsorted(m.tensor([1, 2]), m.tensor([1]), side="left", right=True),
            RuntimeError,
            "side and right can't be set to opposites",
        ),
        (
            lambda m: m.searchsorted(m.tensor([[1, 2]]), m.tensor([[1], [2]])),
            RuntimeError,
            "boundaries tensor should be 1 dimension or the first N-1 dimensions",
        ),
        (
            lambda m: m.bucketize(m.tensor([1]), m.tensor([[1, 2]])),
            RuntimeError,
            "boundaries tensor must be 1 dimension",
        ),
        (
            lambda m: m.histogramdd(m.tensor([1.0, 2.0]), 2),
            RuntimeError,
            "input tensor should have at least 2 dimensions",
        ),
    ],
)
def test_errors_match_torch(call: Callable[[Any], Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        call(torch)
    with pytest.raises(exc, match=match):
        call(ag)
