"""Sorting and selection: ``sort``, ``argsort``, ``topk`` (values with grad, int64 indices) and
the index-returning ``nonzero``."""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import backend, dtypes
from .._tensor import Tensor
from ..rules import keeps_for_backward
from ._record import OPS, make, wrap
from .reduce import dims

namespace = backend.namespace


class SortResult(NamedTuple):
    """``sort``'s result, as torch's ``return_types.sort``: the values and their indices."""

    values: Tensor
    indices: Tensor


class TopKResult(NamedTuple):
    """``topk``'s result, as torch's ``return_types.topk``: the values and their indices."""

    values: Tensor
    indices: Tensor


def _argsort(xa: Any, d: int, descending: bool) -> Any:
    # Always stable. Descending: a stable ascending sort of the reversed array, reversed back,
    # keeps equal elements in their original order and puts NaNs first, as torch does.
    xp = namespace(xa)
    if not descending:
        return xp.argsort(xa, axis=d, kind="stable")
    n = xa.shape[d]
    rev = (slice(None),) * d + (slice(None, None, -1),)
    return (n - 1) - xp.argsort(xa[rev], axis=d, kind="stable")[rev]


def _full_index(idx: Any, d: int) -> tuple[Any, ...]:
    """The advanced index that picks ``take_along_axis(x, idx, d)`` out of x."""
    xp = namespace(idx)
    nd = idx.ndim
    out = []
    for i in range(nd):
        if i == d:
            out.append(idx)
        else:
            shape = [1] * nd
            shape[i] = idx.shape[i]
            out.append(xp.arange(idx.shape[i]).reshape(shape))
    return tuple(out)


def _select(name: str, input: Tensor, idx: Any, d: int) -> tuple[Tensor, Tensor]:
    xa = input._array
    vals = namespace(xa).take_along_axis(xa, idx, axis=d)
    params = {"index": _full_index(idx, d), "in_shape": xa.shape}
    t = make(OPS[name], vals, (input,), params)
    keeps_for_backward(t._grad_fn)  # torch's SortBackward0 and TopkBackward0 save the indices
    return t, wrap(idx.astype(dtypes.int64))


def _sorted(name: str, input: Tensor, dim: int, descending: bool, k: int | None) -> Any:
    xa = input._array
    if xa.ndim == 0:
        if k is not None and k not in (0, 1):
            raise RuntimeError("selected index k out of range")
        zero = wrap(backend.zeros((), dtypes.int64, input.device))
        vals = make(OPS[name], xa.copy(), (input,), {"index": (), "in_shape": ()})
        return vals, zero
    (d,) = dims(dim, xa.ndim) or (0,)
    if k is not None and not 0 <= k <= xa.shape[d]:
        raise RuntimeError("selected index k out of range")
    idx = None
    if k is not None and type(xa) is backend.ndarray and 0 < k * 8 <= xa.shape[d]:
        idx = _topk_by_partition(xa, d, k, descending)
    if idx is None:
        idx = _argsort(xa, d, descending)
        if k is not None:
            idx = idx[(slice(None),) * d + (slice(0, k),)]
    return _select(name, input, idx, d)


def _topk_by_partition(xa: Any, d: int, k: int, largest: bool) -> Any:
    """topk's indices from a partition and a sort of the k selected (O(n), not O(n log n)), or
    None where the partition's choice among ties (or NaNs) at the k-th value could differ from
    the stable sort's: elements equal to the k-th value left outside the selection."""
    xp = namespace(xa)
    n = xa.shape[d]
    lead = (slice(None),) * d
    kth = n - k if largest else k - 1
    part = xp.argpartition(xa, kth, axis=d)
    sel = part[(*lead, slice(n - k, n) if largest else slice(0, k))]
    t = xp.take_along_axis(xa, part[(*lead, slice(kth, kth + 1))], axis=d)
    if xa.dtype.kind in "fc" and xp.isnan(t).any():
        return None
    if ((xa == t).sum(axis=d) != (xp.take_along_axis(xa, sel, axis=d) == t).sum(axis=d)).any():
        return None
    sel = xp.sort(sel, axis=d)  # in their original order, which the stable sort keeps for ties
    order = _argsort(xp.take_along_axis(xa, sel, axis=d), d, largest)
    return xp.take_along_axis(sel, order, axis=d)


def sort(
    input: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False
) -> SortResult:
    """The values along ``dim`` in order and their original positions (always a stable sort).

    Example:
        >>> import asyncgrad as ag
        >>> ag.tensor([2.0, 1.0, 2.0]).sort(descending=True).indices.tolist()
        [0, 2, 1]
    """
    return SortResult(*_sorted("sort", input, dim, descending, None))


def argsort(
    input: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False
) -> Tensor:
    """The int64 indices that sort ``input`` along ``dim`` (a stable sort)."""
    xa = input._array
    if xa.ndim == 0:
        return wrap(backend.zeros((), dtypes.int64, input.device))
    (d,) = dims(dim, xa.ndim) or (0,)
    return wrap(_argsort(xa, d, descending).astype(dtypes.int64))


def topk(
    input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> TopKResult:
    """The ``k`` largest (``largest=False``: smallest) values along ``dim`` and their indices,
    in order (also when ``sorted=False``, which leaves the order unspecified)."""
    return TopKResult(*_sorted("topk", input, dim, largest, int(k)))


def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:
    """The indices of the non-zero elements: an int64 tensor of shape (count, ndim), or with
    ``as_tuple`` one 1-D tensor per dimension."""
    xa = input._array
    xp = namespace(xa)
    if xa.ndim == 0:
        n = int(bool(xa))
        if as_tuple:
            return (wrap(xp.zeros(n, dtype=dtypes.int64)),)
        return wrap(xp.zeros((n, 0), dtype=dtypes.int64))
    idx = xp.nonzero(xa)
    if as_tuple:
        return tuple(wrap(i.astype(dtypes.int64)) for i in idx)
    return wrap(xp.stack(idx, axis=1).astype(dtypes.int64))
