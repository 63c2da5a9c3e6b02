"""Family H2 against torch: order statistics (median, kthvalue, mode, quantile), scans (cumprod,
cummax, logcumsumexp), nan-reductions, diff, trace, dist, cov, trapezoid, renorm, norms and
torch.gradient: values, dtypes, shapes, gradients (torch.autograd.grad and finite differences)
and second derivatives."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="compares with torch")

# torch deprecates its frobenius_norm and nuclear_norm, and warns
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning"),
]

RNG = np.random.default_rng(11)
NAN = math.nan


def _distinct(*shape: int) -> np.ndarray:
    """Distinct values (no ties: order statistics' gradients are unambiguous)."""
    n = math.prod(shape)
    return (RNG.permutation(n).astype(np.float64) - n / 2 + RNG.uniform(0, 0.5, n)).reshape(shape)


def _np(r: Any) -> Any:
    if isinstance(r, ag.Tensor):
        return r.detach().numpy()
    if isinstance(r, torch.Tensor):
        return r.detach().numpy()
    if isinstance(r, (tuple, list)):
        return [_np(x) for x in r]
    return r


def _assert_same(a: Any, t: Any, *, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    an, tn = _np(a), _np(t)
    if isinstance(tn, list):
        assert isinstance(an, list)
        assert len(an) == len(tn)
        for x, y in zip(an, tn, strict=True):
            _assert_same(x, y, rtol=rtol, atol=atol)
        return
    assert an.shape == tn.shape, (an.shape, tn.shape)
    assert an.dtype == tn.dtype, (an.dtype, tn.dtype)
    np.testing.assert_allclose(an, tn, rtol=rtol, atol=atol, equal_nan=True)


def _first(r: Any) -> Any:
    return r[0] if isinstance(r, tuple) else r


Case = tuple[str, Callable[..., Any], list[np.ndarray]]

# (id, f(module_or_tensor_ns, *inputs), inputs): f runs with m=ag and m=torch on the same data.
VALUE_CASES: list[Case] = [
    ("median_all", lambda m, x: m.median(x), [_distinct(3, 4)]),
    ("median_all_even", lambda m, x: m.median(x), [_distinct(4)]),
    ("median_dim", lambda m, x: m.median(x, 1), [_distinct(3, 4)]),
    ("median_dim_neg_keepdim", lambda m, x: m.median(x, -2, keepdim=True), [_distinct(4, 3)]),
    ("median_0d", lambda m, x: m.median(x, 0), [np.array(3.0)]),
    ("median_nan", lambda m, x: m.median(x, 1), [np.array([[1.0, NAN, 2.0], [3.0, 1.0, 2.0]])]),
    ("median_all_nan", lambda m, x: m.median(x), [np.array([1.0, NAN, 2.0])]),
    ("median_empty", lambda m, x: m.median(x), [np.zeros((0,))]),
    ("median_method", lambda m, x: x.median(0), [_distinct(5, 2)]),
    ("nanmedian_all", lambda m, x: m.nanmedian(x), [np.array([1.0, NAN, 3.0, 2.0])]),
    ("nanmedian_dim", lambda m, x: m.nanmedian(x, 1), [np.array([[1.0, NAN, 3.0, 2.0]] * 2)]),
    ("nanmedian_only_nan", lambda m, x: m.nanmedian(x, 0), [np.array([NAN, NAN])]),
    ("nanmedian_plain", lambda m, x: x.nanmedian(1, True), [_distinct(2, 5)]),
    ("kthvalue", lambda m, x: m.kthvalue(x, 2, 1), [_distinct(3, 4)]),
    ("kthvalue_dim0_keepdim", lambda m, x: m.kthvalue(x, 3, 0, True), [_distinct(3, 4)]),
    ("kthvalue_method", lambda m, x: x.kthvalue(1), [_distinct(6)]),
    ("kthvalue_0d", lambda m, x: m.kthvalue(x, 1), [np.array(2.0)]),
    ("median_int", lambda m, x: m.median(x), [np.array([[4, 1, 3], [2, 9, 7]])]),
    ("median_int_dim", lambda m, x: m.median(x, 0), [np.array([[4, 1, 3], [2, 9, 7]])]),
    ("kthvalue_int", lambda m, x: m.kthvalue(x, 2, 0), [np.array([[4, 1, 3], [2, 9, 7]])]),
    ("mode_int", lambda m, x: m.mode(x, 1), [np.array([[4, 4, 3], [2, 9, 9]], dtype=np.int32)]),
    ("cummax_bool", lambda m, x: m.cummax(x, 0), [np.array([False, True, False])]),
    ("msort_int", lambda m, x: m.msort(x), [np.array([[4, 1], [2, 9], [0, 3]])]),
    ("aminmax_int", lambda m, x: m.aminmax(x, dim=0), [np.array([[4, 1], [2, 9], [0, 3]])]),
    (
        "quantile_f32",
        lambda m, x: m.quantile(x, 0.25, -1),
        [RNG.standard_normal((2, 5)).astype(np.float32)],
    ),
    ("mode", lambda m, x: m.mode(x), [np.array([[1.0, 2, 2, 1, 3], [3, 3, 1, 1, 1]])]),
    ("mode_dim0", lambda m, x: m.mode(x, 0, True), [RNG.integers(0, 3, (6, 4)).astype(float)]),
    ("mode_method", lambda m, x: x.mode(), [np.array([4.0, 4.0, 2.0, 2.0, 9.0])]),
    ("msort", lambda m, x: m.msort(x), [_distinct(4, 3)]),
    ("aminmax", lambda m, x: m.aminmax(x), [_distinct(3, 4)]),
    ("aminmax_dim", lambda m, x: m.aminmax(x, dim=1, keepdim=True), [_distinct(3, 4)]),
    ("aminmax_keepdim_all", lambda m, x: x.aminmax(keepdim=True), [_distinct(3, 4)]),
    ("aminmax_0d", lambda m, x: m.aminmax(x, dim=0), [np.array(1.5)]),
    ("quantile", lambda m, x: m.quantile(x, 0.3), [_distinct(10)]),
    ("quantile_dim", lambda m, x: m.quantile(x, 0.75, 1), [_distinct(3, 5)]),
    ("quantile_keepdim_all", lambda m, x: m.quantile(x, 0.5, keepdim=True), [_distinct(3, 5)]),
    ("quantile_0d", lambda m, x: m.quantile(x, 0.5, 0), [np.array(2.0)]),
    ("quantile_nan", lambda m, x: m.quantile(x, 0.5, 1), [np.array([[1.0, NAN, 2.0], [1, 2, 3]])]),
    ("nanquantile", lambda m, x: m.nanquantile(x, 0.4, 1), [np.array([[1.0, NAN, 2, 5]] * 2)]),
    ("nanquantile_only_nan", lambda m, x: m.nanquantile(x, 0.5), [np.array([NAN, NAN])]),
    ("cumprod", lambda m, x: m.cumprod(x, 1), [RNG.standard_normal((3, 4))]),
    ("cumprod_zeros", lambda m, x: m.cumprod(x, 0), [np.array([2.0, 0.0, 3.0, 0.0, 4.0])]),
    ("cumprod_int", lambda m, x: m.cumprod(x, 0), [np.array([1, 2, 3], dtype=np.int32)]),
    ("cumprod_bool", lambda m, x: m.cumprod(x, 0), [np.array([True, False])]),
    ("cumprod_dtype", lambda m, x: m.cumprod(x, 0, dtype=m.float64), [np.array([1, 2, 3])]),
    ("cumprod_0d", lambda m, x: x.cumprod(-1), [np.array(3.0)]),
    ("cummax", lambda m, x: m.cummax(x, 0), [np.array([1.0, 1.0, 0.0, 1.0, 2.0])]),
    ("cummax_2d", lambda m, x: m.cummax(x, 1), [RNG.standard_normal((3, 5))]),
    ("cummin_nan", lambda m, x: m.cummin(x, 0), [np.array([1.0, 1.0, NAN, 1.0, NAN])]),
    ("cummax_nan", lambda m, x: x.cummax(0), [np.array([1.0, NAN, 5.0, NAN, 0.0])]),
    ("cummin_int", lambda m, x: m.cummin(x, 0), [np.array([3, 1, 2, 1, 0])]),
    ("cummax_0d", lambda m, x: m.cummax(x, 0), [np.array(3.0)]),
    ("logcumsumexp", lambda m, x: m.logcumsumexp(x, 1), [RNG.standard_normal((3, 4)) * 30]),
    ("logcumsumexp_inf", lambda m, x: x.logcumsumexp(0), [np.array([-math.inf, 1.0, -2.0])]),
    ("nansum", lambda m, x: m.nansum(x), [np.array([[1.0, NAN], [2.0, 3.0]])]),
    ("nansum_dim", lambda m, x: m.nansum(x, 1, keepdim=True), [np.array([[1.0, NAN], [2, 3]])]),
    ("nansum_int", lambda m, x: m.nansum(x), [np.array([1, 2], dtype=np.int32)]),
    ("nanmean", lambda m, x: m.nanmean(x, 0), [np.array([[1.0, NAN], [2.0, NAN]])]),
    ("nanmean_all", lambda m, x: x.nanmean(), [np.array([[1.0, NAN], [2.0, 4.0]])]),
    ("count_nonzero", lambda m, x: m.count_nonzero(x), [np.array([[1.0, 0.0], [2.0, 0.0]])]),
    ("count_nonzero_dims", lambda m, x: m.count_nonzero(x, (0, 1)), [np.array([[1, 0], [2, 3]])]),
    ("count_nonzero_dim", lambda m, x: x.count_nonzero(-1), [np.array([[1, 0], [2, 3]])]),
    ("diff", lambda m, x: m.diff(x), [RNG.standard_normal((3, 4))]),
    ("diff_n2_dim0", lambda m, x: m.diff(x, 2, 0), [RNG.standard_normal((4, 3))]),
    ("diff_bool", lambda m, x: m.diff(x), [np.array([True, False, False])]),
    ("diff_int", lambda m, x: m.diff(x), [np.array([1, 5, 2], dtype=np.int32)]),
    ("diff_large_n", lambda m, x: x.diff(5), [RNG.standard_normal(3)]),
    (
        "diff_prepend_append",
        lambda m, x, p, a: m.diff(x, 1, 1, p, a),
        [RNG.standard_normal((2, 3)), RNG.standard_normal((2, 1)), RNG.standard_normal((2, 2))],
    ),
    ("trace", lambda m, x: m.trace(x), [RNG.standard_normal((3, 3))]),
    ("trace_rect", lambda m, x: x.trace(), [RNG.standard_normal((2, 4))]),
    ("trace_int", lambda m, x: m.trace(x), [np.array([[1, 2], [3, 4]], dtype=np.int32)]),
    ("dist", lambda m, x, y: m.dist(x, y), [RNG.standard_normal((3, 4)), RNG.standard_normal(4)]),
    ("dist_p1", lambda m, x, y: x.dist(y, 1), [RNG.standard_normal(4), RNG.standard_normal(4)]),
    ("dist_inf", lambda m, x, y: m.dist(x, y, math.inf), [RNG.standard_normal(4)] * 2),
    ("dist_p3", lambda m, x, y: m.dist(x, y, 3), [RNG.standard_normal(4), RNG.standard_normal(4)]),
    ("cov", lambda m, x: m.cov(x), [RNG.standard_normal((3, 6))]),
    ("cov_1d", lambda m, x: m.cov(x), [RNG.standard_normal(6)]),
    ("cov_correction0", lambda m, x: x.cov(correction=0), [RNG.standard_normal((2, 5))]),
    ("cov_int", lambda m, x: m.cov(x), [np.array([[1, 2, 4], [3, 4, 9]])]),
    ("corrcoef", lambda m, x: m.corrcoef(x), [RNG.standard_normal((3, 6))]),
    ("corrcoef_1d", lambda m, x: x.corrcoef(), [RNG.standard_normal(5)]),
    ("trapezoid", lambda m, y: m.trapezoid(y), [RNG.standard_normal((3, 5))]),
    ("trapezoid_dx", lambda m, y: m.trapezoid(y, dx=0.5, dim=0), [RNG.standard_normal((3, 5))]),
    (
        "trapezoid_x",
        lambda m, y, x: m.trapezoid(y, x),
        [RNG.standard_normal((3, 5)), np.sort(RNG.standard_normal(5))],
    ),
    (
        "trapezoid_x_nd",
        lambda m, y, x: m.trapezoid(y, x, dim=0),
        [RNG.standard_normal((4, 2)), np.sort(RNG.standard_normal((4, 2)), 0)],
    ),
    ("trapezoid_empty", lambda m, y: m.trapezoid(y), [np.zeros((2, 0))]),
    ("trapz", lambda m, y: m.trapz(y, dx=2.0), [RNG.standard_normal(5)]),
    (
        "trapz_x",
        lambda m, y, x: m.trapz(y, x),
        [RNG.standard_normal(5), np.sort(RNG.standard_normal(5))],
    ),
    ("cumulative_trapezoid", lambda m, y: m.cumulative_trapezoid(y), [RNG.standard_normal((2, 5))]),
    (
        "cumulative_trapezoid_x",
        lambda m, y, x: m.cumulative_trapezoid(y, x, dim=0),
        [RNG.standard_normal((5, 2)), np.sort(RNG.standard_normal(5))],
    ),
    ("renorm", lambda m, x: m.renorm(x, 2, 0, 1.0), [RNG.standard_normal((3, 4))]),
    ("renorm_p1_dim1", lambda m, x: x.renorm(1, 1, 0.5), [RNG.standard_normal((3, 4))]),
    ("renorm_3d", lambda m, x: m.renorm(x, 3, -1, 2.0), [RNG.standard_normal((2, 3, 2))]),
    ("frobenius_norm", lambda m, x: m.frobenius_norm(x, (0, 1)), [RNG.standard_normal((3, 4))]),
    (
        "frobenius_norm_dim",
        lambda m, x: m.frobenius_norm(x, [1], True),
        [RNG.standard_normal((3, 4))],
    ),
    ("nuclear_norm", lambda m, x: m.nuclear_norm(x), [RNG.standard_normal((3, 4))]),
    ("nuclear_norm_keepdim", lambda m, x: m.nuclear_norm(x, True), [RNG.standard_normal((3, 4))]),
    ("nuclear_norm_dim", lambda m, x: m.nuclear_norm(x, (0, 2)), [RNG.standard_normal((3, 2, 4))]),
    ("nuclear_norm_batch", lambda m, x: m.nuclear_norm(x), [RNG.standard_normal((3, 2, 4))]),
    (
        "frobenius_norm_empty_dim",
        lambda m, x: m.frobenius_norm(x, ()),
        [RNG.standard_normal((3, 2))],
    ),
    ("norm_nuc", lambda m, x: m.norm(x, p="nuc"), [RNG.standard_normal((3, 4))]),
    ("norm_nuc_dim", lambda m, x: x.norm(p="nuc", dim=(1, 2)), [RNG.standard_normal((2, 3, 4))]),
    ("norm_fro_dim", lambda m, x: m.norm(x, p="fro", dim=1), [RNG.standard_normal((2, 3))]),
    (
        "norm_fro_dims",
        lambda m, x: m.norm(x, "fro", (0, 2), True),
        [RNG.standard_normal((2, 3, 2))],
    ),
    ("norm_p3_dims", lambda m, x: m.norm(x, 3, (0, 1)), [RNG.standard_normal((2, 3))]),
    ("norm_p_half", lambda m, x: m.norm(x, 0.5), [RNG.standard_normal((2, 3))]),
    ("norm_p_neg1", lambda m, x: m.norm(x, -1, 1), [RNG.standard_normal((2, 3))]),
    ("norm_p0", lambda m, x: m.norm(x, 0), [np.array([1.0, 0.0, 2.0])]),
    ("norm_inf", lambda m, x: m.norm(x, math.inf, 0), [RNG.standard_normal((2, 3))]),
    ("norm_0d_dim", lambda m, x: m.norm(x, 2, 0), [np.array(-3.0)]),
    ("std_empty", lambda m, x: m.std(x), [np.zeros((0,))]),
    ("var_one", lambda m, x: m.var(x, 0), [np.array([2.0])]),
    ("var_correction2", lambda m, x: m.var(x, 1, correction=2, keepdim=True), [_distinct(2, 4)]),
    ("std_0d", lambda m, x: m.std(x, correction=0), [np.array(2.0)]),
    ("var_unbiased_false", lambda m, x: m.var(x, 1, False), [_distinct(2, 4)]),
    ("logsumexp_0d", lambda m, x: m.logsumexp(x, 0), [np.array(2.0)]),
    ("logsumexp_0d_neg", lambda m, x: m.logsumexp(x, -1, True), [np.array(2.0)]),
    ("amax_0d", lambda m, x: m.amax(x, 0), [np.array(2.0)]),
    ("amin_0d", lambda m, x: m.amin(x, -1, True), [np.array(2.0)]),
    ("amax_0d_tuple", lambda m, x: x.amax((0,)), [np.array(2.0)]),
    ("gradient", lambda m, x: m.gradient(x), [RNG.standard_normal((4, 5))]),
    ("gradient_edge2", lambda m, x: m.gradient(x, edge_order=2), [RNG.standard_normal(6)]),
    (
        "gradient_spacing",
        lambda m, x: m.gradient(x, spacing=2.0, dim=1),
        [RNG.standard_normal((3, 4))],
    ),
    (
        "gradient_spacings",
        lambda m, x: m.gradient(x, spacing=[0.5, 2.0], dim=[1, 0], edge_order=2),
        [RNG.standard_normal((4, 5))],
    ),
]


def _inputs(arrays: list[np.ndarray], requires_grad: bool) -> tuple[list[Any], list[Any]]:
    a, t = [], []
    for x in arrays:
        rg = requires_grad and x.dtype.kind == "f"
        a.append(ag.tensor(x, requires_grad=rg))
        t.append(torch.tensor(x, requires_grad=rg))
    return a, t


def _coords(case_id: str, a: list[Any], t: list[Any]) -> None:
    # torch.gradient's tensor spacing: coordinates as a tuple of 1-D tensors
    del case_id, a, t


@pytest.mark.parametrize(("case_id", "f", "arrays"), VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_match_torch(case_id: str, f: Callable[..., Any], arrays: list[np.ndarray]) -> None:
    a, t = _inputs(arrays, False)
    _assert_same(f(ag, *a), f(torch, *t))


def _grad_outputs(r: Any) -> list[Any]:
    if isinstance(r, tuple) and not hasattr(r, "indices") and not hasattr(r, "min"):
        return list(r)  # torch.gradient's tuple
    if hasattr(r, "min") and hasattr(r, "max") and isinstance(r, tuple):
        return [r[0], r[1]]
    return [_first(r)]


GRAD_CASES = [
    c
    for c in VALUE_CASES
    if all(x.dtype.kind == "f" for x in c[2])
    and not any(x.size == 0 for x in c[2])
    # nanmean over a column of NaNs: torch's gradient there is 0 * (g / 0) = NaN, asyncgrad's
    # 0 (a NaN gets no gradient: see test_nan_reductions_give_zero_gradient_at_nans)
    and c[0] not in ("norm_p0", "nanmean")
]


@pytest.mark.parametrize(("case_id", "f", "arrays"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients_match_torch(
    case_id: str, f: Callable[..., Any], arrays: list[np.ndarray]
) -> None:
    a, t = _inputs(arrays, True)
    outs_a, outs_t = _grad_outputs(f(ag, *a)), _grad_outputs(f(torch, *t))
    if not any(o.requires_grad for o in outs_t):  # count_nonzero, ...: no gradient
        assert not any(o.requires_grad for o in outs_a)
        return
    ws = [RNG.standard_normal(o.shape) for o in outs_t]
    loss_t = sum((o * torch.tensor(w)).sum() for o, w in zip(outs_t, ws, strict=True))
    loss_a = sum((o * ag.tensor(w)).sum() for o, w in zip(outs_a, ws, strict=True))
    gt = torch.autograd.grad(loss_t, t, allow_unused=True)
    ga = ag.grad_sync(loss_a, a, allow_unused=True)
    for x, y in zip(ga, gt, strict=True):
        if y is None:
            assert x is None or not np.any(_np(x))
            continue
        _assert_same(x, y, rtol=1e-5, atol=1e-8)


# Finite differences (away from NaNs, ties and kinks) and second derivatives.
FD_CASES: list[tuple[str, Callable[..., Any], list[np.ndarray]]] = [
    ("median_dim", lambda x: ag.median(x, 1).values, [_distinct(3, 4)]),
    ("median_all", lambda x: ag.median(x), [_distinct(3, 3)]),
    ("nanmedian", lambda x: ag.nanmedian(x, 0).values, [_distinct(5, 2)]),
    ("kthvalue", lambda x: ag.kthvalue(x, 2, 0).values, [_distinct(3, 4)]),
    (
        "quantile_linear",
        lambda x: ag.quantile(x, ag.tensor([0.2, 0.9], dtype=ag.float64), 1),
        [_distinct(3, 5)],
    ),
    (
        "quantile_midpoint",
        lambda x: ag.quantile(x, 0.5, 0, interpolation="midpoint"),
        [_distinct(4, 2)],
    ),
    ("quantile_nearest", lambda x: x.quantile(0.4, interpolation="nearest"), [_distinct(6)]),
    ("nanquantile", lambda x: ag.nanquantile(x, 0.3, 1), [_distinct(2, 5)]),
    ("cumprod", lambda x: ag.cumprod(x, 1), [RNG.standard_normal((2, 4))]),
    (
        "cumprod_zeros",  # rows with one zero, two zeros, none
        lambda x: ag.cumprod(x, 1),
        [np.array([[0.0, 0.7, -1.3, 1.1], [0.0, 0.0, 0.9, 1.2], [0.8, -0.6, 1.4, 0.5]])],
    ),
    (
        "cumprod_zeros_dim0",
        lambda x: x.cumprod(0),
        [np.array([[1.2, 0.0], [0.0, 0.5], [0.9, -1.1]])],
    ),
    ("cummax", lambda x: ag.cummax(x, 1).values, [_distinct(2, 5)]),
    ("cummin", lambda x: ag.cummin(x, 0).values, [_distinct(5, 2)]),
    ("logcumsumexp", lambda x: ag.logcumsumexp(x, 1), [RNG.standard_normal((2, 4))]),
    ("nansum", lambda x: ag.nansum(x, 0), [RNG.standard_normal((3, 2))]),
    ("nanmean", lambda x: ag.nanmean(x, 1), [RNG.standard_normal((3, 2))]),
    ("diff", lambda x: ag.diff(x, 2), [RNG.standard_normal((2, 5))]),
    ("trace", lambda x: ag.trace(x), [RNG.standard_normal((3, 3))]),
    ("dist", lambda x, y: ag.dist(x, y, 3), [RNG.standard_normal(4), RNG.standard_normal(4)]),
    ("cov", lambda x: ag.cov(x), [RNG.standard_normal((2, 5))]),
    (
        "cov_weights",
        lambda x, a: ag.cov(x, fweights=ag.tensor([1, 2, 1, 3]), aweights=a),
        [RNG.standard_normal((2, 4)), RNG.uniform(0.5, 2.0, 4)],
    ),
    ("corrcoef", lambda x: ag.corrcoef(x), [RNG.standard_normal((2, 5))]),
    (
        "trapezoid_x",
        lambda y, x: ag.trapezoid(y, x),
        [RNG.standard_normal((2, 4)), np.arange(4.0) ** 2],
    ),
    (
        "cumulative_trapezoid",
        lambda y: ag.cumulative_trapezoid(y, dx=0.3),
        [RNG.standard_normal(5)],
    ),
    ("renorm", lambda x: ag.renorm(x, 2, 0, 1.0), [RNG.standard_normal((3, 4)) * 2]),
    ("nuclear_norm", lambda x: ag.nuclear_norm(x), [RNG.standard_normal((3, 2))]),
    ("gradient", lambda x: ag.gradient(x, edge_order=2)[0], [RNG.standard_normal(5)]),
    (
        "gradient_coords",
        lambda x, c: ag.gradient(x, spacing=(c,), edge_order=2)[0],
        [RNG.standard_normal(6), np.cumsum(RNG.uniform(0.5, 1.5, 6))],
    ),
]


@pytest.mark.parametrize(("case_id", "f", "arrays"), FD_CASES, ids=[c[0] for c in FD_CASES])
def test_gradcheck(case_id: str, f: Callable[..., Any], arrays: list[np.ndarray]) -> None:
    inputs = [ag.tensor(x, dtype=ag.float64, requires_grad=True) for x in arrays]
    assert gradcheck(f, inputs)


GG_CASES = [
    c
    for c in FD_CASES
    if c[0]
    in {
        "median_dim",
        "quantile_linear",
        "cumprod",
        "cumprod_zeros",
        "cumprod_zeros_dim0",
        "cummax",
        "logcumsumexp",
        "nanmean",
        "cov",
        "renorm",
        "gradient",
        "kthvalue",
        "trapezoid_x",
        "dist",
        "median_all",
        "nanquantile",
        "corrcoef",
        "nuclear_norm",
    }
]


@pytest.mark.parametrize(("case_id", "f", "arrays"), GG_CASES, ids=[c[0] for c in GG_CASES])
def test_gradgradcheck(case_id: str, f: Callable[..., Any], arrays: list[np.ndarray]) -> None:
    inputs = [ag.tensor(x, dtype=ag.float64, requires_grad=True) for x in arrays]
    assert gradgradcheck(f, inputs)


def test_gradient_coordinates_match_torch() -> None:
    x = RNG.standard_normal((4, 5))
    c0, c1 = np.cumsum(RNG.uniform(0.5, 1.5, 4)), np.cumsum(RNG.uniform(0.5, 1.5, 5))
    for order in (1, 2):
        ra = ag.gradient(ag.tensor(x), spacing=(ag.tensor(c0), ag.tensor(c1)), edge_order=order)
        rt = torch.gradient(
            torch.tensor(x), spacing=(torch.tensor(c0), torch.tensor(c1)), edge_order=order
        )
        _assert_same(ra, rt)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
def test_quantile_interpolations_match_torch(name: str, interpolation: str) -> None:
    x = RNG.standard_normal((3, 4, 5))
    x[0, 1, 2] = NAN
    q = np.array([0.0, 0.1, 0.5, 0.625, 1.0])
    for dim in (None, 0, -1):
        for keepdim in (False, True):
            ra = getattr(ag, name)(
                ag.tensor(x), ag.tensor(q), dim, keepdim, interpolation=interpolation
            )
            rt = getattr(torch, name)(
                torch.tensor(x), torch.tensor(q), dim, keepdim, interpolation=interpolation
            )
            _assert_same(ra, rt)


def test_quantile_gradient_goes_through_the_interpolation() -> None:
    x = _distinct(2, 7)
    xa = ag.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    q = [0.0, 0.33, 0.5, 1.0]
    (ga,) = ag.grad_sync(ag.quantile(xa, ag.tensor(q, dtype=ag.float64), 1).sum(), [xa])
    (gt,) = torch.autograd.grad(
        torch.quantile(xt, torch.tensor(q, dtype=torch.float64), 1).sum(), [xt]
    )
    _assert_same(ga, gt)


def test_cumprod_gradient_at_zeros_matches_torch() -> None:
    for x in (
        np.array([[2.0, 0.0, 3.0, 0.0, 4.0], [0.0, 1.5, 2.0, 3.0, 0.5]]),
        np.array([[0.0, 0.0, 1.0], [1.0, 2.0, 0.0]]),
    ):
        xa = ag.tensor(x, requires_grad=True)
        xt = torch.tensor(x, requires_grad=True)
        w = RNG.standard_normal(x.shape)
        (ga,) = ag.grad_sync((ag.cumprod(xa, 1) * ag.tensor(w)).sum(), [xa])
        (gt,) = torch.autograd.grad((torch.cumprod(xt, 1) * torch.tensor(w)).sum(), [xt])
        _assert_same(ga, gt)
    assert gradcheck(
        lambda t: ag.cumprod(t, 0),
        [ag.tensor([2.0, 0.0, 3.0], requires_grad=True, dtype=ag.float64)],
    )


def test_nan_reductions_give_zero_gradient_at_nans() -> None:
    x = np.array([[1.0, NAN, 2.0], [NAN, NAN, 3.0]])
    for name in ("nansum", "nanmean"):
        xa = ag.tensor(x, requires_grad=True)
        xt = torch.tensor(x, requires_grad=True)
        (ga,) = ag.grad_sync(getattr(ag, name)(xa, 1).sum(), [xa])
        (gt,) = torch.autograd.grad(getattr(torch, name)(xt, 1).sum(), [xt])
        _assert_same(ga, gt)
        assert not np.isnan(_np(ga)).any()


def test_median_gradient_goes_to_the_returned_index_with_ties() -> None:
    x = np.array([[1.0, 2.0, 2.0, 2.0, 3.0, 1.0], [5.0, 5.0, 1.0, 1.0, 3.0, 3.0]])
    xa = ag.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    ra, rt = ag.median(xa, 1), torch.median(xt, 1)
    _assert_same(ra, rt)
    (ga,) = ag.grad_sync(ra.values.sum(), [xa])
    (gt,) = torch.autograd.grad(rt.values.sum(), [xt])
    _assert_same(ga, gt)
    # without a dim, shared among the ties, as torch's evenly_distribute_backward
    (ga,) = ag.grad_sync(ag.median(xa), [xa])
    (gt,) = torch.autograd.grad(torch.median(xt), [xt])
    _assert_same(ga, gt)


def test_inplace_scans_and_renorm() -> None:
    x = RNG.standard_normal((3, 4))
    for name, args in (("cumprod_", (1,)), ("cumsum_", (0,)), ("renorm_", (2, 0, 1.0))):
        la = ag.tensor(x, requires_grad=True)
        lt = torch.tensor(x, requires_grad=True)
        ya, yt = la * 1.0, lt * 1.0
        ra = getattr(ya, name)(*args)
        getattr(yt, name)(*args)
        assert ra is ya
        _assert_same(ya, yt)
        (ga,) = ag.grad_sync((ya * ya).sum(), [la])
        (gt,) = torch.autograd.grad((yt * yt).sum(), [lt])
        _assert_same(ga, gt)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda m: m.median(m.tensor([]), 0), IndexError, "median\\(\\): Expected reduction dim 0"),
        (
            lambda m: m.kthvalue(m.tensor([1.0, 2.0]), 3),
            RuntimeError,
            "kthvalue\\(\\): selected number k out of range",
        ),
        (
            lambda m: m.quantile(m.tensor([1.0]), 1.5),
            RuntimeError,
            "q must be in the range \\[0, 1\\]",
        ),
        (
            lambda m: m.quantile(m.tensor([1, 2]), 0.5),
            RuntimeError,
            "input tensor must be either float or double",
        ),
        (lambda m: m.quantile(m.tensor([]), 0.5), RuntimeError, "input tensor must be non-empty"),
        (
            lambda m: m.quantile(m.tensor([1.0]), m.tensor([0.5], dtype=m.float64)),
            RuntimeError,
            "q tensor must be same dtype",
        ),
        (
            lambda m: m.quantile(m.tensor([1.0]), 0.5, interpolation="bad"),
            RuntimeError,
            "interpolation must be one of",
        ),
        (
            lambda m: m.nanquantile(m.tensor([1.0]), m.tensor([[0.5]])),
            RuntimeError,
            "q must be a scalar or 1D tensor",
        ),
        (
            lambda m: m.diff(m.tensor(1.0)),
            RuntimeError,
            "diff expects input to be at least one-dimensional",
        ),
        (
            lambda m: m.diff(m.ones(2, 2), prepend=m.tensor(1.0)),
            RuntimeError,
            "diff expects prepend or append to be the same dimension as input",
        ),
        (
            lambda m: m.diff(m.tensor([1.0, 2.0]), -1),
            RuntimeError,
            "order must be non-negative but got -1",
        ),
        (
            lambda m: m.trace(m.tensor([1.0])),
            RuntimeError,
            "trace: expected a matrix, but got tensor with dim 1",
        ),
        (
            lambda m: m.nanmean(m.tensor([1, 2])),
            RuntimeError,
            "nanmean\\(\\): expected input to have floating point",
        ),
        (lambda m: m.cumprod(m.tensor([1.0]), 1), IndexError, "Dimension out of range"),
        (
            lambda m: m.renorm(m.ones(2, 2), 0, 0, 1.0),
            RuntimeError,
            "renorm: non-positive-norm not supported",
        ),
        (
            lambda m: m.renorm(m.ones(2, 2), 2, 0, -1.0),
            RuntimeError,
            "renorm: expected maxnorm to be >= 0",
        ),
        (
            lambda m: m.cov(m.ones(2, 3), fweights=m.tensor([1.0, 1.0, 1.0])),
            RuntimeError,
            "fweights to have integral dtype",
        ),
        (
            lambda m: m.cov(m.ones(2, 3), aweights=m.tensor([1.0, -1.0, 1.0])),
            RuntimeError,
            "aweights cannot be negative",
        ),
        (
            lambda m: m.cov(m.ones(2, 3), fweights=m.tensor([1, 1])),
            RuntimeError,
            "fweights to have the same numel",
        ),
        (
            lambda m: m.gradient(m.ones(3), edge_order=3),
            RuntimeError,
            "only supports edge_order=1 and edge_order=2",
        ),
        (
            lambda m: m.gradient(m.ones(2), edge_order=2),
            RuntimeError,
            "each dimension size to be at least edge_order\\+1",
        ),
        (
            lambda m: m.gradient(m.ones(3, 3), spacing=[1.0, 2.0, 3.0]),
            RuntimeError,
            "but got a list of length 3",
        ),
        (lambda m: m.logsumexp(m.tensor(2.0), 1), IndexError, "Dimension out of range"),
        (lambda m: m.mode(m.tensor([]), 0), IndexError, "mode\\(\\): Expected reduction dim 0"),
        (
            lambda m: m.norm(m.ones(2, 2, 2), "nuc"),
            RuntimeError,
            "dim must be a 2-tuple. Got 0 1 2",
        ),
        (
            lambda m: m.norm(m.ones(2, 2), "fro", (0, 1, 1)),
            RuntimeError,
            "dim must be a 2-tuple. Got 0 1 1",
        ),
        (lambda m: m.norm(m.ones(2), "nuc"), RuntimeError, "must have at least 2 dimensions"),
        (lambda m: m.norm(m.ones(2, 2), "nuc", 0), RuntimeError, "dim must be a 2-tuple. Got 0"),
        (lambda m: m.norm(m.ones(2, 2), "bad"), RuntimeError, "Order bad not supported"),
        (
            lambda m: m.norm(m.tensor([1, 2])),
            RuntimeError,
            "Expected a floating point or complex tensor",
        ),
        (
            lambda m: m.std(m.tensor([1, 2])),
            RuntimeError,
            "std and var only support floating point",
        ),
        (
            lambda m: m.nuclear_norm(m.ones(2)),
            RuntimeError,
            "must have at least 2 dimensions",
        ),
        (
            lambda m: m.searchsorted(m.tensor([1.0]), m.tensor([1.0]), side="up"),
            RuntimeError,
            "side can only be 'left' or 'right'",
        ),
        (
            lambda m: m.aminmax(m.tensor([])),
            RuntimeError,
            "cannot compute aminmax over an empty dimension",
        ),
    ],
)
def test_errors_match_torch(call: Callable[[Any], Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        call(torch)
    with pytest.raises(exc, match=match):
        call(ag)


# ----- special values: NaN, +-inf, zeros and ties in the input, infinite and NaN gradients -----
SPECIAL_INPUTS = [
    np.array([1.0, math.inf, 2.0, -math.inf]),
    np.array([NAN, 1.0, 0.0, 2.0]),
    np.array([0.0, 0.0, 3.0, -1.0]),
    np.array([1.5, 0.0, 3.0, 0.0, 2.0]),
    np.array([-math.inf, -math.inf, 1.0]),
    np.array([math.inf, 1.0]),
    np.array([2.0, 2.0, 2.0]),
]
SPECIAL_OPS: list[tuple[str, Callable[[Any], Any]]] = [
    ("cumprod", lambda t: t.cumprod(0)),
    ("logcumsumexp", lambda t: t.logcumsumexp(0)),
    ("median", lambda t: t.median()),
    ("nanmedian", lambda t: t.nanmedian()),
    ("median_dim", lambda t: t.median(0).values),
    ("nanmedian_dim", lambda t: t.nanmedian(0, True).values),
    ("kthvalue", lambda t: t.kthvalue(2).values),
    ("mode", lambda t: t.mode().values),
    ("cummax", lambda t: t.cummax(0).values),
    ("cummin", lambda t: t.cummin(0).values),
    ("std", lambda t: t.std()),
    ("quantile", lambda t: t.quantile(0.3)),
    ("quantile_midpoint", lambda t: t.quantile(0.5, interpolation="midpoint")),
    ("nanquantile", lambda t: t.nanquantile(0.7)),
    ("diff", lambda t: t.diff()),
    ("trapezoid", lambda t: (ag if isinstance(t, ag.Tensor) else torch).trapezoid(t)),
]
# Which of several equal elements torch's kthvalue returns comes from its quickselect, and
# mode's order of a NaN among numbers from std::sort: not reproduced (see the README).
SKIP_SPECIAL: dict[str, Callable[[np.ndarray], bool]] = {
    "kthvalue": lambda x: len(set(x.tolist())) < len(x),
    "mode": lambda x: bool(np.isnan(x).any()),
}


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("gout", [1.0, math.inf, NAN])
@pytest.mark.parametrize(("name", "f"), SPECIAL_OPS, ids=[o[0] for o in SPECIAL_OPS])
def test_special_values_match_torch(
    name: str, f: Callable[[Any], Any], gout: float, create_graph: bool
) -> None:
    for x in SPECIAL_INPUTS:
        if name in SKIP_SPECIAL and SKIP_SPECIAL[name](x):
            continue
        xa = ag.tensor(x, requires_grad=True)
        xt = torch.tensor(x, requires_grad=True)
        ya, yt = f(xa), f(xt)
        _assert_same(ya, yt)
        g = np.full(yt.shape, gout)
        (ga,) = ag.grad_sync(ya, [xa], ag.tensor(g), create_graph=create_graph)
        (gt,) = torch.autograd.grad(yt, [xt], torch.tensor(g))
        _assert_same(ga, gt)


def test_nansum_gradient_at_nans_is_zero_even_for_infinite_gradients() -> None:
    # torch multiplies (g * 0 = NaN for an infinite g); asyncgrad's nansum selects: 0.
    xa = ag.tensor([NAN, 1.0], requires_grad=True)
    (ga,) = ag.grad_sync(ag.nansum(xa), [xa], ag.tensor(math.inf, dtype=ag.float64))
    assert ga.tolist() == [0.0, math.inf]


@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
def test_quantile_gradient_reaches_q_as_torch(name: str) -> None:
    x = np.array([[1.0, 4.0, 9.0, 16.0, NAN], [2.0, 3.0, 5.0, 7.0, 11.0]])
    w = RNG.standard_normal((3, 2))
    qa = ag.tensor([0.3, 0.5, 1.0], dtype=ag.float64, requires_grad=True)
    qt = torch.tensor([0.3, 0.5, 1.0], dtype=torch.float64, requires_grad=True)
    xa, xt = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya, yt = getattr(ag, name)(xa, qa, 1), getattr(torch, name)(xt, qt, 1)
    ga = ag.grad_sync((ya * ag.tensor(w)).sum(), [xa, qa])
    gt = torch.autograd.grad((yt * torch.tensor(w)).sum(), [xt, qt])
    _assert_same(list(ga), list(gt))
    assert gradcheck(
        lambda q: getattr(ag, name)(ag.tensor(x[1:]), q, 1),
        [ag.tensor([0.1, 0.45, 0.8], dtype=ag.float64, requires_grad=True)],
    )
