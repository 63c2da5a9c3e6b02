"""Order statistics, nan-reductions, scans and histograms: median, quantile, mode, cumprod,
cummax, nansum, histc, bincount, ...

Order statistics along a dim (median, kthvalue, mode) and cummax/cummin pick elements with a
gather, so the gradient goes to the indices they return (torch's value-selecting backward);
median() of all elements shares it among the elements equal to the median, as max(). quantile,
nansum, diff, cov, trapezoid, renorm and gradient are composites of differentiable ops, so their
gradients (and double backward) come from those ops. cumprod and logcumsumexp have rules of
their own (asyncgrad/rules/statistics.py); histograms, counts and searches have no gradient.
"""

from __future__ import annotations

import builtins
import math
from typing import Any, NamedTuple

from .. import backend, dtypes
from .._tensor import Tensor
from ..backend import silent_fp
from ..rules.statistics import scan
from ._record import OPS, as_array, make, wrap
from .creation import as_tensor, zeros
from .index import gather
from .inplace import inplace
from .pointwise import where
from .reduce import _TORCH_NAMES, amax, amin, cumsum, dims, norm
from .reduce import sum as _sum
from .shape import cat
from .sorting import sort

__all__ = [
    "aminmax",
    "bincount",
    "bucketize",
    "corrcoef",
    "count_nonzero",
    "cov",
    "cummax",
    "cummin",
    "cumprod",
    "cumprod_",
    "cumsum_",
    "cumulative_trapezoid",
    "diff",
    "dist",
    "frobenius_norm",
    "gradient",
    "histc",
    "histogram",
    "histogramdd",
    "isin",
    "kthvalue",
    "logcumsumexp",
    "median",
    "mode",
    "msort",
    "nanmean",
    "nanmedian",
    "nanquantile",
    "nansum",
    "nuclear_norm",
    "quantile",
    "renorm",
    "renorm_",
    "searchsorted",
    "trace",
    "trapezoid",
    "trapz",
    "unique_consecutive",
]

namespace = backend.namespace


def _tname(dt: Any) -> str:
    return _TORCH_NAMES.get(
        str(dt), {"float32": "Float", "float64": "Double"}.get(str(dt), str(dt))
    )


def _dim(dim: Any, ndim: int) -> int:
    (d,) = dims(int(dim), ndim) or (0,)
    return d


def _idx_tensor(a: Any) -> Tensor:
    return wrap(a.astype(dtypes.int64, copy=False))


# ----- return types, as torch.return_types -----
class MedianResult(NamedTuple):
    """``median``/``nanmedian`` along a dim: the values (differentiable) and their indices."""

    values: Tensor
    indices: Tensor


class KthvalueResult(NamedTuple):
    values: Tensor
    indices: Tensor


class ModeResult(NamedTuple):
    values: Tensor
    indices: Tensor


class CumResult(NamedTuple):
    """``cummax``/``cummin``: the running values and the indices they were taken from."""

    values: Tensor
    indices: Tensor


class AminmaxResult(NamedTuple):
    min: Tensor
    max: Tensor


class HistogramResult(NamedTuple):
    hist: Tensor
    bin_edges: Any


# ----- median, nanmedian, kthvalue, mode -----
def _pick(input: Tensor, idx: Any, d: int, keepdim: bool) -> tuple[Tensor, Tensor]:
    """The elements at ``idx`` (keepdims along ``d``): a gather, so the gradient goes to them
    (torch's value_selecting_reduction_backward)."""
    vals = gather(input, d, _idx_tensor(idx))
    if not keepdim:
        idx = idx.squeeze(d)
        vals = vals.squeeze(d)
    return vals, _idx_tensor(idx)


def _zero_dim(input: Tensor) -> tuple[Tensor, Tensor]:
    return input.clone(), wrap(backend.zeros((), dtypes.int64, input.device))


def _nonempty(xa: Any, d: int, what: str) -> None:
    if xa.shape[d] == 0:
        raise IndexError(f"{what}(): Expected reduction dim {d} to have non-zero size.")


def _is_float(xa: Any) -> bool:
    return bool(xa.dtype.kind in "fc")


def _order_index(xa: Any, d: int, ignore_nan: bool) -> Any:
    """The index (keepdims along d) of the lower median: torch's choice, NaN first."""
    xp = namespace(xa)
    order = xp.argsort(xa, axis=d, kind="stable")  # NaNs last
    n = xa.shape[d]
    if not _is_float(xa):
        k = xp.full((*order.shape[:d], 1, *order.shape[d + 1 :]), (n - 1) // 2)
        return xp.take_along_axis(order, k, axis=d)
    nan = xp.isnan(xa)
    if ignore_nan:
        cnt = n - nan.sum(axis=d, keepdims=True)
        k = xp.maximum((cnt - 1) // 2, 0)
        return xp.take_along_axis(order, k, axis=d)
    k = xp.full((*nan.shape[:d], 1, *nan.shape[d + 1 :]), (n - 1) // 2)
    idx = xp.take_along_axis(order, k, axis=d)
    has_nan = nan.any(axis=d, keepdims=True)
    return xp.where(has_nan, xp.argmax(nan, axis=d, keepdims=True), idx)


@silent_fp  # See NOTE [Silent floating point] (an empty int tensor's median: NaN cast, as torch)
def _median(name: str, input: Tensor, dim: Any, keepdim: bool) -> Any:
    xa = input._array
    ignore_nan = name == "nanmedian"
    xp = namespace(xa)
    if dim is None:
        flat = xa.reshape(-1)
        if flat.size == 0:
            out = xp.full((), xp.nan, dtype=xa.dtype)
        else:
            i = _order_index(flat, 0, ignore_nan)
            out = flat[i].reshape(())
        # The gradient is shared among the elements equal to the median (among the NaNs where it
        # is NaN): torch's evenly_distribute_backward, the rule of max() without a dim, whose
        # node this records (AmaxBackward0 where torch names MedianBackward0).
        params = {"dim": None, "keepdim": False, "in_shape": xa.shape, "evenly": True}
        return make(OPS["amax"], out, (input,), params, (xa,))
    if xa.ndim == 0:
        _dim(dim, 0)
        return MedianResult(*_zero_dim(input))
    d = _dim(dim, xa.ndim)
    _nonempty(xa, d, name)
    return MedianResult(*_pick(input, _order_index(xa, d, ignore_nan), d, keepdim))


def median(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """The lower median of all elements (a tensor), or along ``dim`` (values and indices).

    A NaN in a slice makes its median NaN (at the first NaN's index).

    Example:
        >>> import asyncgrad as ag
        >>> ag.median(ag.tensor([[3.0, 1.0, 2.0, 5.0]]), 1).indices.tolist()
        [2]
    """
    return _median("median", input, dim, keepdim)


def nanmedian(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """``median`` ignoring NaNs (NaN where a slice holds only NaNs)."""
    return _median("nanmedian", input, dim, keepdim)


def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> KthvalueResult:
    """The ``k``-th smallest element along ``dim`` (NaN counts as the largest) and its index."""
    xa = input._array
    d = _dim(dim, xa.ndim)
    n = xa.shape[d] if xa.ndim else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    if xa.ndim == 0:
        return KthvalueResult(*_zero_dim(input))
    xp = namespace(xa)
    order = xp.argsort(xa, axis=d, kind="stable")
    idx = order[(slice(None),) * d + (slice(k - 1, k),)]
    return KthvalueResult(*_pick(input, idx, d, keepdim))


def mode(input: Tensor, dim: int = -1, keepdim: bool = False) -> ModeResult:
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and the
    last index where it occurs."""
    xa = input._array
    d = _dim(dim, xa.ndim)
    if xa.ndim == 0:
        return ModeResult(*_zero_dim(input))
    _nonempty(xa, d, "mode")
    xp = namespace(xa)
    n = xa.shape[d]
    s = xp.moveaxis(xp.sort(xa, axis=d), d, -1)
    pos = xp.arange(n)
    new = xp.ones(s.shape, dtype=bool)
    new[..., 1:] = s[..., 1:] != s[..., :-1]
    end = xp.ones(s.shape, dtype=bool)
    end[..., :-1] = new[..., 1:]
    start = scan("maximum", xp.where(new, pos, 0), s.ndim - 1)
    stop = xp.flip(scan("minimum", xp.flip(xp.where(end, pos, n), -1), s.ndim - 1), -1)
    best = xp.argmax(stop - start, axis=-1)[..., None]  # the first (smallest) of the longest runs
    value = xp.moveaxis(xp.take_along_axis(s, best, axis=-1), -1, d)
    hit = xa == value
    if _is_float(xa):
        hit |= xp.isnan(xa) & xp.isnan(value)
    shape = [1] * xa.ndim
    shape[d] = n
    idx = xp.max(xp.where(hit, pos.reshape(shape), -1), axis=d, keepdims=True)
    return ModeResult(*_pick(input, idx, d, keepdim))


def msort(input: Tensor) -> Tensor:
    """``input`` sorted along its first dim."""
    return sort(input, 0).values


def aminmax(input: Tensor, *, dim: int | None = None, keepdim: bool = False) -> AminmaxResult:
    """The min and the max (over ``dim``, or all elements), as ``amin`` and ``amax``."""
    xa = input._array
    if xa.size == 0 and dim is not None and xa.ndim and xa.shape[_dim(dim, xa.ndim)] == 0:
        d = _dim(dim, xa.ndim)
        raise IndexError(f"aminmax: Expected reduction dim {d} to have non-zero size.")
    if xa.size == 0 and (dim is None or xa.ndim == 0 or xa.shape[_dim(dim, xa.ndim)] == 0):
        raise RuntimeError(
            "aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
            "identity."
        )
    if dim is None:
        lo, hi = amin(input), amax(input)
        if keepdim:
            shape = (1,) * xa.ndim
            return AminmaxResult(lo.reshape(shape), hi.reshape(shape))
        return AminmaxResult(lo, hi)
    return AminmaxResult(amin(input, dim, keepdim), amax(input, dim, keepdim))


# ----- quantile, nanquantile -----
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


@silent_fp  # See NOTE [Silent floating point]
def _quantile(
    name: str, input: Tensor, q: Any, dim: Any, keepdim: bool, interpolation: str
) -> Tensor:
    xa = input._array
    xp = namespace(xa)
    if xa.dtype.kind != "f":
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    if xa.size == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    if isinstance(q, Tensor):
        qa = q._array
        if qa.ndim > 1:
            raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
        if qa.dtype != xa.dtype:
            raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor")
        if qa.size and not bool(((qa >= 0) & (qa <= 1)).all()):
            raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
        scalar_q = qa.ndim == 0
    else:
        if not 0 <= float(q) <= 1:
            raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {float(q)}")
        qa = xp.asarray(float(q), dtype=xa.dtype)
        scalar_q = True
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(
            f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest. "
            f"Got {interpolation}"
        )
    if dim is None:
        x = input.reshape(-1)
        rest: list[int] = []
    else:
        d = _dim(dim, xa.ndim)
        x = input.reshape(1) if xa.ndim == 0 else input
        nd = builtins.max(xa.ndim, 1)
        rest = [i for i in range(nd) if i != d]
        x = x.permute(*rest, d)
    s = sort(x, -1).values  # NaNs last; differentiable
    sa = s._array
    n = sa.shape[-1]
    qv = qa.reshape(-1)
    nan = xp.isnan(sa)
    if name == "nanquantile":
        last = (n - nan.sum(axis=-1, keepdims=True) - 1).astype(xa.dtype)
        ranks = xp.maximum(qv * last, 0)  # a row of NaNs: rank 0, a NaN
    else:
        ranks = qv * xa.dtype.type(n - 1) + xp.zeros((*sa.shape[:-1], 1), dtype=xa.dtype)
        ranks = xp.where(nan.any(axis=-1, keepdims=True), xa.dtype.type(n - 1), ranks)
    if interpolation == "lower":
        ranks = xp.floor(ranks)
    elif interpolation == "higher":
        ranks = xp.ceil(ranks)
    elif interpolation == "nearest":
        ranks = xp.round(ranks)  # half to even, as torch's round
    below_i = ranks.astype(dtypes.int64)
    below = gather(s, -1, wrap(below_i))
    if interpolation in ("linear", "midpoint"):
        above = gather(s, -1, wrap(xp.ceil(ranks).astype(dtypes.int64)))
        w = (
            (ranks - below_i).astype(xa.dtype)
            if interpolation == "linear"
            else xp.full_like(ranks, 0.5)
        )
        wt: Any = w
        if interpolation == "linear" and isinstance(q, Tensor) and q.requires_grad:
            # torch's ranks are q * (count - 1), so the weight's gradient reaches q: the same
            # ranks as a tensor of q (0 where a NaN row or an empty one fixed the rank)
            fixed = ranks != qv * last if name == "nanquantile" else nan.any(-1, keepdims=True)
            qt = q.reshape(-1).to(xa.dtype)
            wt = where(fixed, ranks, qt * (last if name == "nanquantile" else float(n - 1)))
            wt = wt - below_i.astype(xa.dtype)
        # torch's lerp. Its gradients, g * (1 - w) and g * w, come from the weighted sum (an
        # infinite g stays infinite, where differentiating below + (above - below) * w gives
        # inf - inf); its value, from the nearer end, is added as a constant correction
        # (exact - lin is exact for such close numbers, so lin + it is exactly torch's value).
        ba, aa = below._array, above._array
        exact = xp.where(w < 0.5, ba + (aa - ba) * w, aa - (aa - ba) * (1 - w))
        lin = below * (1 - wt) + above * wt
        fix = exact - lin._array
        nan_or_0 = xp.where(xp.isnan(exact), xp.nan, 0).astype(xa.dtype)
        out: Tensor = lin + xp.where(xp.isfinite(fix), fix, nan_or_0)
    else:
        out = below
    if scalar_q:
        out = out.squeeze(-1)
    elif out.ndim > 1:
        out = out.permute(out.ndim - 1, *range(out.ndim - 1))
    if keepdim:
        lead = () if scalar_q else (qv.shape[0],)
        if dim is None:
            out = out.reshape(lead + (1,) * xa.ndim)
        elif xa.ndim:
            out = out.unsqueeze(d + len(lead))
    return out


def quantile(
    input: Tensor, q: Any, dim: Any = None, keepdim: bool = False, *, interpolation: str = "linear"
) -> Tensor:
    """The ``q``-quantiles (a number or a 1-D tensor, its dim first in the result) of ``input``
    along ``dim`` (of all elements when None); NaN where a slice holds a NaN.

    Example:
        >>> import asyncgrad as ag
        >>> ag.quantile(ag.tensor([1.0, 2.0, 3.0, 4.0]), 0.5).item()
        2.5
    """
    return _quantile("quantile", input, q, dim, keepdim, interpolation)


def nanquantile(
    input: Tensor, q: Any, dim: Any = None, keepdim: bool = False, *, interpolation: str = "linear"
) -> Tensor:
    """``quantile`` ignoring NaNs (NaN where a slice holds only NaNs)."""
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation)


# ----- cumprod, cummax, cummin, logcumsumexp, cumsum_ -----
@silent_fp  # See NOTE [Silent floating point]
def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Cumulative products along ``dim``; integers and bools give int64. The gradient is exact
    where the input holds zeros, as torch's."""
    xa = input._array
    d = _dim(dim, xa.ndim)
    dt = None if dtype is None else dtypes.to_dtype(dtype)
    if dt is None and xa.dtype.kind in "biu":
        dt = dtypes.int64
    if xa.ndim == 0:
        out = xa.astype(dt) if dt is not None else xa.copy()
    else:
        out = xa.cumprod(axis=d, dtype=dt)
    return make(OPS["cumprod"], out, (input,), {"dim": d if xa.ndim else None}, (xa,))


def cumprod_(self: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    return inplace(self, "cumprod", lambda s: cumprod(s, dim, dtype=dtype))


def cumsum_(self: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    return inplace(self, "cumsum", lambda s: cumsum(s, dim, dtype=dtype))


def _cum_extreme(name: str, input: Tensor, dim: int) -> CumResult:
    xa = input._array
    d = _dim(dim, xa.ndim)
    if xa.ndim == 0:
        return CumResult(*_zero_dim(input))
    xp = namespace(xa)
    n = xa.shape[d]
    if n == 0:
        return CumResult(input.clone(), wrap(xp.zeros(xa.shape, dtype=dtypes.int64)))
    vals = scan("maximum" if name == "cummax" else "minimum", xa, d)
    lead = (slice(None),) * d
    prev = xp.concatenate([xa[(*lead, slice(0, 1))], vals[(*lead, slice(0, n - 1))]], axis=d)
    # torch's cummax_helper: a new index where x >= the running max (x <= for cummin), or x is
    # NaN; once the running value is NaN only NaNs take over.
    upd = xa >= prev if name == "cummax" else xa <= prev
    if _is_float(xa):
        upd = xp.isnan(xa) | (~xp.isnan(prev) & upd)
    shape = [1] * xa.ndim
    shape[d] = n
    pos = xp.arange(n).reshape(shape)
    idx = scan("maximum", xp.where(upd, pos, 0), d)
    return CumResult(gather(input, d, _idx_tensor(idx)), _idx_tensor(idx))


def cummax(input: Tensor, dim: int) -> CumResult:
    """The running max along ``dim`` and the index (the last, on ties) it comes from."""
    return _cum_extreme("cummax", input, dim)


def cummin(input: Tensor, dim: int) -> CumResult:
    """The running min along ``dim`` and the index (the last, on ties) it comes from."""
    return _cum_extreme("cummin", input, dim)


@silent_fp  # See NOTE [Silent floating point]
def logcumsumexp(input: Tensor, dim: int) -> Tensor:
    """``log(cumsum(exp(input), dim))``, computed stably."""
    xa = input._array
    d = _dim(dim, xa.ndim)
    if xa.dtype.kind not in "fc":
        raise RuntimeError(f"\"logcumsumexp_out_cpu\" not implemented for '{_tname(xa.dtype)}'")
    if xa.ndim == 0 or xa.shape[d] == 0:
        out = xa.copy()
    else:
        out = scan("logaddexp", xa, d)
    return make(OPS["logcumsumexp"], out, (input,), {"dim": d if xa.ndim else None}, (xa,))


# ----- nansum, nanmean, count_nonzero -----
def nansum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``sum`` treating NaNs as zero (their gradient is 0)."""
    xa = input._array
    x = where(namespace(xa).isnan(xa), 0, input) if _is_float(xa) else input
    return _sum(x, dim, keepdim, dtype=dtype)


def nanmean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``mean`` of the non-NaN elements (NaN where there are none)."""
    xa = input._array
    if not _is_float(xa):
        raise RuntimeError(
            "nanmean(): expected input to have floating point or complex dtype but got "
            f"{_tname(xa.dtype)}"
        )
    xp = namespace(xa)
    nan = xp.isnan(xa)
    axis = None if dim is None or xa.ndim == 0 else dims(dim, xa.ndim)
    cnt = (~nan).sum(axis=axis, keepdims=keepdim)
    if keepdim and axis is None and xa.ndim:
        cnt = backend.ensure_array(cnt).reshape((1,) * xa.ndim)
    total = nansum(input, dim, keepdim, dtype=dtype)
    out: Tensor = total / backend.ensure_array(cnt).astype(total.dtype)
    return out


def count_nonzero(input: Tensor, dim: Any = None) -> Tensor:
    """The number of non-zero elements (along ``dim``, an int or a tuple): int64."""
    xa = input._array
    axis = None if dim is None else dims(dim, xa.ndim)
    if xa.ndim == 0:
        axis = None
    out = backend.ensure_array((xa != 0).sum(axis=axis)).astype(dtypes.int64)
    return wrap(out)


# ----- diff, trace, dist, trapezoid -----
def diff(
    input: Tensor, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None
) -> Tensor:
    """The ``n``-th forward difference along ``dim``, after joining ``prepend`` and ``append``
    on that dim (``!=`` for bool tensors)."""
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = _dim(dim, input.ndim)
    parts = []
    for extra in (prepend, input, append):
        if extra is None:
            continue
        t = extra if isinstance(extra, Tensor) else as_tensor(extra, device=input.device)
        if t.ndim != input.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
        parts.append(t)
    if n == 0:
        # As torch's: order 0 is a copy of input; prepend and append are not joined.
        return input.clone()
    x = cat(parts, d) if len(parts) > 1 else input
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi, lo = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
        x = hi != lo if x.dtype == dtypes.bool_ else hi - lo
    return x


def trace(input: Tensor) -> Tensor:
    """The sum of the main diagonal of a matrix; integers give int64."""
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return input.diagonal().sum()


def dist(input: Tensor, other: Tensor, p: Any = 2) -> Tensor:
    """The ``p``-norm of ``input - other`` (broadcast)."""
    return norm(input - other, float(p))


def _trapezoid_parts(y: Tensor, x: Any, dx: Any, dim: int) -> tuple[Tensor, Any, int]:
    if x is not None and dx is not None:
        raise RuntimeError("trapezoid: x and dx cannot both be given")
    d = _dim(dim, y.ndim)
    n = y.shape[d]
    if n == 0:
        return y, None, d
    s = y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1)
    if isinstance(x, Tensor):
        if x.ndim == 1:
            if x.shape[0] != n:
                raise RuntimeError("trapezoid: There must be one `x` value for each sample point")
            shape = [1] * y.ndim
            shape[d] = n - 1
            w = (x[1:] - x[:-1]).reshape(shape)
        else:
            w = diff(x, dim=d)
        return s, w, d
    return s, 1.0 if x is None and dx is None else float(x if x is not None else dx), d


def trapezoid(y: Tensor, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """The trapezoidal rule along ``dim``: sample points ``x`` (a tensor) or spacing ``dx``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.trapezoid(ag.tensor([1.0, 2.0, 3.0])).item()
        4.0
    """
    s, w, d = _trapezoid_parts(y, x, dx, dim)
    if w is None:  # no samples: zeros
        shape = list(y.shape)
        del shape[d]
        dt = y.dtype if _is_float(y._array) else dtypes.float32
        return zeros(*shape, dtype=dt, device=y.device)
    if isinstance(w, Tensor):
        return ((s * w).sum(d)) / 2.0
    # torch's form for a uniform spacing: the sum less half the two ends
    out: Tensor = (y.sum(d) - (y.select(d, 0) + y.select(d, -1)) * 0.5) * w
    return out


def trapz(y: Tensor, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """``trapezoid``'s older name."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y: Tensor, x: Any = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """The running trapezoidal rule along ``dim`` (one element fewer on that dim)."""
    s, w, d = _trapezoid_parts(y, x, dx, dim)
    if w is None:
        return y.clone()
    if isinstance(w, Tensor):
        return (s * w).cumsum(d) / 2.0
    out: Tensor = (w / 2.0) * s
    return out.cumsum(d)


# ----- cov, corrcoef -----
def _check_weights(w: Tensor, name: str, num_obs: int) -> None:
    a = w._array
    if w.ndim > 1:
        raise RuntimeError(
            f"cov(): expected {name} to have one or fewer dimensions but got {name} with "
            f"{w.ndim} dimensions"
        )
    want = "integral" if name == "fweights" else "floating point"
    if (a.dtype.kind not in "iu") if name == "fweights" else (a.dtype.kind != "f"):
        raise RuntimeError(
            f"cov(): expected {name} to have {want} dtype but got {name} with "
            f"{_tname(a.dtype)} dtype"
        )
    if a.size != num_obs:
        raise RuntimeError(
            f"cov(): expected {name} to have the same numel as there are observations in the "
            f"input but got {a.size} != {num_obs}"
        )
    if a.size and float(a.min()) < 0:
        raise RuntimeError(f"cov(): {name} cannot be negative")


@silent_fp  # See NOTE [Silent floating point]
def cov(
    input: Tensor, *, correction: int = 1, fweights: Tensor | None = None, aweights: Any = None
) -> Tensor:
    """The covariance matrix of the variables in the rows of ``input`` (observations in the
    columns), with frequency and observation weights, as ``torch.cov``."""
    if input.ndim > 2:
        raise RuntimeError(
            "cov(): expected input to have two or fewer dimensions but got an input with "
            f"{input.ndim} dimensions"
        )
    x = input if input.ndim == 2 else input.reshape(1, -1)
    if not _is_float(x._array):
        x = x.to(dtypes.get_default_dtype())
    num_obs = x.shape[1]
    w: Tensor | None = None
    if fweights is not None:
        _check_weights(fweights, "fweights", num_obs)
        w = fweights
    if aweights is not None:
        _check_weights(aweights, "aweights", num_obs)
        w = aweights if w is None else w * aweights
    if w is None:
        avg = x.mean(1)
        w_sum: Any = float(num_obs)
        norm_factor: Any = w_sum - correction
    else:
        w_sum = w.sum()
        avg = (x * w).sum(1) / w_sum
        if aweights is not None and correction != 0:
            norm_factor = w_sum - correction * (w * aweights).sum() / w_sum
        else:
            norm_factor = w_sum - correction
    if isinstance(norm_factor, Tensor):
        norm_factor = where(norm_factor <= 0, 0, norm_factor)
    elif norm_factor <= 0:
        norm_factor = 0.0
    xc = x - avg.unsqueeze(1)
    c = xc.mm((xc if w is None else xc * w).t())
    out: Tensor = c / norm_factor
    return out.squeeze()


@silent_fp  # See NOTE [Silent floating point]
def corrcoef(input: Tensor) -> Tensor:
    """Pearson's correlation coefficients of the rows of ``input``, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    sd = c.diagonal().sqrt()
    c = c / sd.unsqueeze(1)
    c = c / sd.unsqueeze(0)
    return c.clamp(-1, 1)


# ----- histc, histogram, histogramdd, bincount -----
def _check_hist_dtype(xa: Any, what: str) -> None:
    if xa.dtype.kind != "f":
        raise NotImplementedError(f"\"{what}\" not implemented for '{_tname(xa.dtype)}'")


def histc(input: Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Tensor:
    """A histogram of ``bins`` equal bins over [min, max] (the data's range where min == max);
    elements outside are ignored. Not differentiable."""
    xa = input._array
    _check_hist_dtype(xa, "histogram_histc_cpu")
    if bins <= 0:
        raise RuntimeError("torch.histc(): bins must be > 0, but got " + str(bins))
    xp = namespace(xa)
    t = xa.dtype.type
    lo, hi = t(min), t(max)
    if lo == hi and xa.size:
        lo, hi = t(xa.min().item()), t(xa.max().item())  # .item(): a device scalar
    if lo == hi:
        lo, hi = lo - t(1), hi + t(1)
    if not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    x = xa.reshape(-1)
    inside = (x >= lo) & (x <= hi)
    x = x[inside]
    pos = ((x - lo) * t(bins) / (hi - lo)).astype(dtypes.int64)  # torch's linear interpolation
    pos = xp.minimum(pos, bins - 1)
    return wrap(xp.bincount(pos, minlength=bins).astype(xa.dtype))


def _edges_from(xa: Any, bins: Any, rng: Any, D: int) -> list[Any]:
    xp = namespace(xa)
    if isinstance(bins, Tensor):
        bins = [bins]
    if isinstance(bins, (int, backend.integer)):
        bins = [int(bins)] * D
    bins = list(bins)
    if len(bins) != D:
        raise RuntimeError(
            f"torch.histogramdd: expected {D} sequences of bin edges for each of the {D} "
            f"dimensions of the input, but got {len(bins)} bins"
        )
    if rng is not None and len(rng) != 2 * D:
        raise RuntimeError(
            f"torch.histogramdd: for a {D}-dimensional histogram range should have {2 * D} "
            f"elements, but got {len(rng)}"
        )
    edges = []
    for i, b in enumerate(bins):
        if isinstance(b, Tensor):
            e = b._array
            if e.ndim != 1 or e.size < 1:
                raise RuntimeError(
                    "torch.histogramdd: bins tensor should have one dimension and at least 1 "
                    "element"
                )
            edges.append(e.astype(xa.dtype, copy=False))
            continue
        b = int(b)
        if b <= 0:
            raise RuntimeError(
                f"torch.histogramdd(): bins must be > 0, but got {b} for dimension {i}"
            )
        col = xa[:, i]
        if rng is not None:
            lo, hi = float(rng[2 * i]), float(rng[2 * i + 1])
        elif col.size:
            lo, hi = float(col.min()), float(col.max())
        else:
            lo, hi = 0.0, 1.0  # torch's range for no data
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"torch.histogramdd: dimension {i}'s range [{lo}, {hi}] is not finite")
        if lo > hi:
            raise ValueError(
                f"torch.histogramdd: min should not exceed max, but got min {lo} max {hi} for "
                f"dimension {i}"
            )
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges.append(xp.linspace(lo, hi, b + 1, dtype=xa.dtype))
    return edges


@silent_fp  # See NOTE [Silent floating point]
def _histogramdd(
    input: Tensor, bins: Any, rng: Any, weight: Any, density: bool, D: int
) -> tuple[Tensor, list[Tensor]]:
    xa = input._array
    _check_hist_dtype(xa, "histogramdd")
    xp = namespace(xa)
    pts = xa.reshape(-1, D)
    edges = _edges_from(pts, bins, rng, D)
    nb = [e.shape[0] - 1 for e in edges]
    keep = xp.ones(pts.shape[0], dtype=bool)
    flat = xp.zeros(pts.shape[0], dtype=dtypes.int64)
    for i, e in enumerate(edges):
        col = pts[:, i]
        keep &= (col >= e[0]) & (col <= e[-1])
        pos = xp.searchsorted(e, col, side="right") - 1
        pos = xp.clip(pos, 0, builtins.max(nb[i] - 1, 0))
        flat = flat * nb[i] + pos
    wa = None
    if weight is not None:
        wa = weight._array.reshape(-1)
        if wa.shape[0] != pts.shape[0]:
            raise RuntimeError(
                "torch.histogramdd: if weight tensor is provided it should have the same shape "
                "as the input tensor excluding its innermost dimension"
            )
        wa = wa[keep]
    total = math.prod(nb)
    if total == 0:
        hist = xp.zeros(nb, dtype=xa.dtype)
    else:
        hist = xp.bincount(flat[keep], weights=wa, minlength=total).astype(xa.dtype)
        hist = hist.reshape(nb)
    if density:
        hist = hist / hist.sum()
        for i, e in enumerate(edges):
            shape = [1] * D
            shape[i] = nb[i]
            hist = hist / (e[1:] - e[:-1]).reshape(shape)
    return wrap(hist), [wrap(e) for e in edges]


def histogram(
    input: Tensor,
    bins: Any = 100,
    *,
    range: Any = None,
    weight: Tensor | None = None,
    density: bool = False,
) -> HistogramResult:
    """A histogram of ``input`` and its bin edges: ``bins`` equal bins over ``range`` (the
    data's range when None), or the edges in a 1-D tensor ``bins``. Not differentiable."""
    if isinstance(bins, Tensor) and bins.ndim != 1:
        raise RuntimeError("torch.histogram(): bins tensor should have one dimension")
    hist, edges = _histogramdd(input.reshape(-1, 1), [bins], range, weight, density, 1)
    return HistogramResult(hist, edges[0])


def histogramdd(
    input: Tensor,
    bins: Any = 10,
    *,
    range: Any = None,
    weight: Tensor | None = None,
    density: bool = False,
) -> HistogramResult:
    """A histogram of the points in the last dim of ``input`` and a tuple of its bin edges."""
    if input.ndim < 2:
        raise RuntimeError(
            "torch.histogramdd: input tensor should have at least 2 dimensions, but got "
            f"{input.ndim}"
        )
    D = input.shape[-1]
    hist, edges = _histogramdd(input, bins, range, weight, density, D)
    return HistogramResult(hist, tuple(edges))


def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """How often each value 0, 1, ... occurs in a 1-D non-negative int tensor (the sum of
    ``weights`` there when given)."""
    xa = input._array
    xp = namespace(xa)
    if xa.dtype.kind not in "iub":
        raise RuntimeError(f"\"bincount_cpu\" not implemented for '{_tname(xa.dtype)}'")
    if xa.ndim != 1 or (xa.size and int(xa.min()) < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is None:
        return wrap(xp.bincount(xa, minlength=minlength).astype(dtypes.int64))
    wa = weights._array
    if wa.shape != xa.shape:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    dt = wa.dtype if wa.dtype.kind == "f" else dtypes.float64
    return wrap(xp.bincount(xa, weights=wa, minlength=minlength).astype(dt))


# ----- searchsorted, bucketize, isin, unique_consecutive -----
def searchsorted(
    sorted_sequence: Tensor,
    input: Any,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: Tensor | None = None,
) -> Tensor:
    """For each value of ``input``, the index in the innermost dim of ``sorted_sequence`` where
    it would be inserted to keep it sorted (after equal elements when ``right`` or
    ``side="right"``). A 1-D sequence serves all values; else its leading dims match input's."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(
                f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}"
            )
        if (side == "left") == bool(right) and right:
            raise RuntimeError(
                "torch.searchsorted(): side and right can't be set to opposites, got side of "
                f"{side} while right was {right}"
            )
        right = side == "right"
    sa = sorted_sequence._array
    va = input._array if isinstance(input, Tensor) else as_array(input)
    xp = namespace(sa)
    if sorter is not None:
        so = sorter._array
        if so.shape != sa.shape:
            raise RuntimeError(
                "torch.searchsorted(): boundary and sorter must have the same size, but got "
                f"boundary tensor {list(sa.shape)} and got sorter tensor {list(so.shape)}"
            )
        sa = xp.take_along_axis(sa, so.astype(dtypes.int64), axis=-1)
    dt = dtypes.int32 if out_int32 else dtypes.int64
    if sa.ndim == 0:
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
            "dimension"
        )
    how = "right" if right else "left"
    if sa.ndim == 1:
        return wrap(xp.searchsorted(sa, va.reshape(-1), side=how).reshape(va.shape).astype(dt))
    if va.ndim != sa.ndim or va.shape[:-1] != sa.shape[:-1]:
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
            "dimensions of boundaries tensor and input value tensor must match, but we got "
            f"boundaries tensor {list(sa.shape)} and input value tensor {list(va.shape)}"
        )
    n, m = sa.shape[-1], va.shape[-1]
    vv = va.astype(xp.result_type(sa, va), copy=False)
    ss = sa.astype(vv.dtype, copy=False)
    # A stable sort of values and sequence together: a value's place in it, less the number of
    # values before it, counts the sequence elements before it (values first among equals for
    # side="left", last for "right").
    both = xp.concatenate([ss, vv] if right else [vv, ss], axis=-1)
    order = xp.argsort(both, axis=-1, kind="stable")
    place = xp.argsort(order, axis=-1, kind="stable")
    pv = place[..., n:] if right else place[..., :m]
    rank = xp.argsort(xp.argsort(vv, axis=-1, kind="stable"), axis=-1, kind="stable")
    return wrap((pv - rank).astype(dt))


def bucketize(
    input: Any, boundaries: Tensor, *, out_int32: bool = False, right: bool = False
) -> Tensor:
    """The index of the bucket of ``boundaries`` (1-D, sorted) that each value falls in."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def isin(
    elements: Any, test_elements: Any, *, assume_unique: bool = False, invert: bool = False
) -> Tensor:
    """Whether each element of ``elements`` is in ``test_elements`` (either may be a number)."""
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError(
            "isin() received an invalid combination of arguments: expected at least one Tensor"
        )
    ea = elements._array if isinstance(elements, Tensor) else as_array(elements)
    ta = test_elements._array if isinstance(test_elements, Tensor) else as_array(test_elements)
    xp = namespace(ea if isinstance(elements, Tensor) else ta)
    if hasattr(xp, "isin"):
        out = xp.isin(ea, ta, invert=invert)
    else:  # CuPy: each element's place in the sorted test elements
        t = xp.sort(ta.reshape(-1))
        e = ea.reshape(-1)
        if t.size == 0:
            out = xp.zeros(e.shape, dtype=bool)
        else:
            out = t[xp.clip(xp.searchsorted(t, e), 0, t.size - 1)] == e
        out = ~out if invert else out
    return wrap(backend.ensure_array(out).reshape(ea.shape))


def unique_consecutive(
    input: Tensor, return_inverse: bool = False, return_counts: bool = False, dim: Any = None
) -> Any:
    """``input`` with each run of equal consecutive elements (slices along ``dim``) kept once;
    with ``return_inverse`` each element's run, with ``return_counts`` the runs' lengths."""
    xa = input._array
    xp = namespace(xa)
    if dim is None:
        flat = xa.reshape(-1)
        new = xp.ones(flat.shape, dtype=bool)
        new[1:] = flat[1:] != flat[:-1]
        out = flat[new]
        inv = (xp.cumsum(new) - 1).reshape(xa.shape)
        n = flat.shape[0]
    else:
        d = _dim(dim, xa.ndim)
        n = xa.shape[d] if xa.ndim else 1
        rows = xp.moveaxis(xa, d, 0).reshape(n, -1) if xa.ndim else xa.reshape(1, 1)
        new = xp.ones(n, dtype=bool)
        new[1:] = (rows[1:] != rows[:-1]).any(axis=1)
        out = xp.compress(new, xa, axis=d) if xa.ndim else xa.copy()
        inv = xp.cumsum(new) - 1
    res: list[Tensor] = [wrap(out)]
    if return_inverse:
        res.append(_idx_tensor(inv))
    if return_counts:
        starts = xp.nonzero(new)[0]
        res.append(_idx_tensor(xp.diff(xp.concatenate([starts, xp.asarray([n])]))))
    return tuple(res) if len(res) > 1 else res[0]


# ----- renorm, frobenius_norm, nuclear_norm -----
def renorm(input: Tensor, p: Any, dim: int, maxnorm: Any) -> Tensor:
    """``input`` with each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled to
    norm ``maxnorm`` (divided by norm + 1e-7, as torch)."""
    xa = input._array
    if float(p) <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if float(maxnorm) < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {float(maxnorm)}")
    if xa.ndim <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {xa.ndim} dimensions")
    d = _dim(dim, xa.ndim)
    other = tuple(i for i in range(xa.ndim) if i != d)
    nrm = norm(input, float(p), other, True)
    over = nrm._array > maxnorm
    return where(over, input * (float(maxnorm) / (nrm + 1e-7)), input)


def renorm_(self: Tensor, p: Any, dim: int, maxnorm: Any) -> Tensor:
    return inplace(self, "clone", lambda s: renorm(s.clone(), p, dim, maxnorm))


def frobenius_norm(input: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    """The square root of the sum of squares over ``dim`` (at most two dims)."""
    dd = (dim,) if isinstance(dim, (int, backend.integer)) else tuple(dim)
    if len(dd) > 2:
        raise RuntimeError(f"Expected at most 2 dimensions, but got {len(dd)} dimensions instead.")
    return norm(input, 2.0, dd if dd else None, keepdim)


def nuclear_norm(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """The sum of the singular values of the matrices in the last two dims (in the two dims
    ``dim``)."""
    from .decomp import matrix_norm

    if isinstance(dim, bool):  # nuclear_norm(input, keepdim)
        dim, keepdim = None, dim
    if dim is None:
        dim = (-2, -1)  # the last two dims, batched over the others
    return matrix_norm(input, "nuc", tuple(dim), keepdim)


# ----- gradient -----
def _edge_slices(t: Tensor, d: int, a: int, b: int | None) -> Tensor:
    n = t.shape[d]
    a = a % n if a < 0 else a
    end = n if b is None else (b % n if b < 0 else b)
    return t.narrow(d, a, end - a)


def gradient(
    input: Tensor, *, spacing: Any = 1, dim: Any = None, edge_order: int = 1
) -> tuple[Tensor, ...]:
    """Estimates of the partial derivatives of ``input`` (one tensor per dim of ``dim``) by
    central differences inside and one-sided ones of order ``edge_order`` at the edges, with
    uniform ``spacing`` (a number or one per dim) or sample coordinates (1-D tensors).

    Example:
        >>> import asyncgrad as ag
        >>> ag.gradient(ag.tensor([1.0, 4.0, 9.0]))[0].tolist()
        [3.0, 4.0, 5.0]
    """
    nd = input.ndim
    if dim is None:
        dd = list(range(nd))
    elif isinstance(dim, (int, backend.integer)):
        dd = [_dim(dim, nd)]
    else:
        dd = [_dim(x, nd) for x in dim]
        for i, d in enumerate(dd):
            if d in dd[:i]:
                raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    if spacing is None:  # unspecified: unit spacing
        spacing = 1
    if isinstance(spacing, (list, tuple)):
        sp = list(spacing)
        if len(sp) != len(dd) and dim is None:
            raise RuntimeError(
                "torch.gradient expected spacing to be unspecified, a scalar, or a list of "
                f"length equal to 'self.dim() = {nd}', since dim argument was not given, but "
                f"got a list of length {len(sp)}"
            )
        if len(sp) != len(dd):
            raise RuntimeError(
                "torch.gradient expected spacing to be unspecified, a scalar or it's spacing and "
                "dim arguments to have the same length, but got a spacing argument of length "
                f"{len(sp)} and a dim argument of length {len(dd)}."
            )
    else:
        sp = [spacing] * len(dd)
    for d in dd:
        if input.shape[d] < edge_order + 1:
            raise RuntimeError(
                "torch.gradient expected each dimension size to be at least edge_order+1"
            )
    x = input if _is_float(input._array) else input.to(dtypes.get_default_dtype())
    out = []
    for d, h in zip(dd, sp, strict=True):
        if isinstance(h, Tensor) and h.ndim == 1:
            out.append(_gradient_coords(x, h, d, edge_order))
        else:
            h = float(h.item() if isinstance(h, Tensor) else h)
            center = (_edge_slices(x, d, 2, None) - _edge_slices(x, d, 0, -2)) / (2.0 * h)
            f0, f1 = _edge_slices(x, d, 0, 1), _edge_slices(x, d, 1, 2)
            l1, l2 = _edge_slices(x, d, -1, None), _edge_slices(x, d, -2, -1)
            if edge_order == 1:
                pre, app = (f1 - f0) / h, (l1 - l2) / h
            else:
                f2, l3 = _edge_slices(x, d, 2, 3), _edge_slices(x, d, -3, -2)
                pre = (4.0 * f1 - 3.0 * f0 - f2) / (2.0 * h)
                app = (3.0 * l1 - 4.0 * l2 + l3) / (2.0 * h)
            out.append(cat([pre, center, app], d))
    return tuple(out)


def _gradient_coords(x: Tensor, c: Tensor, d: int, edge_order: int) -> Tensor:
    if c.shape[0] != x.shape[d]:
        raise RuntimeError(
            "torch.gradient expected each tensor to be on the same device, and each tensor in "
            "spacing to have as many elements as the input has along its dim"
        )
    c = c.to(x.dtype)
    shape = [1] * x.ndim
    shape[d] = -1
    h = c[1:] - c[:-1]
    dx1, dx2 = h[:-1], h[1:]
    a = (-dx2 / (dx1 * (dx1 + dx2))).reshape(shape)
    b = ((dx2 - dx1) / (dx1 * dx2)).reshape(shape)
    cc = (dx1 / (dx2 * (dx1 + dx2))).reshape(shape)
    center = (
        a * _edge_slices(x, d, 0, -2)
        + b * _edge_slices(x, d, 1, -1)
        + cc * _edge_slices(x, d, 2, None)
    )
    f0, f1 = _edge_slices(x, d, 0, 1), _edge_slices(x, d, 1, 2)
    l1, l2 = _edge_slices(x, d, -1, None), _edge_slices(x, d, -2, -1)
    if edge_order == 1:
        pre = (f1 - f0) / h[0]
        app = (l1 - l2) / h[-1]
    else:
        h0, h1, hl, hm = h[0], h[1], h[-1], h[-2]
        f2, l3 = _edge_slices(x, d, 2, 3), _edge_slices(x, d, -3, -2)
        pre = (
            -(2.0 * h0 + h1) / (h0 * (h0 + h1)) * f0
            + (h0 + h1) / (h0 * h1) * f1
            - h0 / (h1 * (h0 + h1)) * f2
        )
        app = (
            hl / (hm * (hl + hm)) * l3
            - (hl + hm) / (hl * hm) * l2
            + (2.0 * hl + hm) / (hl * (hl + hm)) * l1
        )
    return cat([pre, center, app], d)
