"""torch's other shape, view, join and scatter functions.

Most are compositions of the differentiable ops in shape.py and index.py (their gradients come
from those ops): the joins are ``cat``, the splits and ``narrow``-like ones basic indexing (views),
``rot90``/``fliplr`` flips and transposes. The scatters write with one ``index_put`` node
(``_put``) or add with ``index_add_zeros``; ``scatter_reduce``'s prod/amax/amin have their own
rule (rules/shape_index.py).
"""

from __future__ import annotations

import builtins
import math
import warnings
from collections.abc import Sequence
from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..graph.grad_mode import _grad_enabled
from ..graph.inference import check_writable
from ..rules import keeps_for_backward
from ._record import OPS, arr, as_view, make, wrap
from .convert import clone, contiguous, to
from .creation import (
    asarray,
    empty_like,
    empty_permuted,
    empty_strided,
    frombuffer,
    is_floating_point,
    is_nonzero,
    is_same_size,
    is_storage,
    is_tensor,
    logspace,
    numel,
    range_,
    scalar_tensor,
)
from .extras import diagonal
from .index import (
    _check_bounds,
    _index_array,
    _mesh,
    _on_device_of,
    _Strided,
    getitem,
    index_add_zeros,
    norm_dim,
)
from .index import (
    take as _take_idx,
)
from .inplace import check_inplace, inplace
from .pointwise import add, div, floor_divide, mul, where
from .reduce import sum
from .shape import (
    cat,
    expand,
    flatten,
    flip,
    join_dtype,
    narrow,
    permute,
    reshape,
    select,
    split,
    squeeze,
    stack,
    t,
    transpose,
    tril,
    triu,
    unbind,
    unsqueeze,
    view,
)
from .sorting import nonzero

__all__ = [
    "alias_copy",
    "argwhere",
    "as_strided",
    "as_strided_",
    "as_strided_copy",
    "as_strided_scatter",
    "asarray",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "block_diag",
    "broadcast_tensors",
    "cartesian_prod",
    "column_stack",
    "combinations",
    "concat",
    "concatenate",
    "detach",
    "detach_",
    "detach_copy",
    "diag",
    "diag_embed",
    "diagflat",
    "diagonal_copy",
    "diagonal_scatter",
    "dsplit",
    "dstack",
    "empty_like",
    "empty_permuted",
    "empty_strided",
    "expand_copy",
    "fill",
    "fliplr",
    "flipud",
    "frombuffer",
    "get_device",
    "hsplit",
    "hstack",
    "index_add",
    "index_copy",
    "index_fill",
    "index_put",
    "index_put_",
    "index_reduce",
    "is_distributed",
    "is_floating_point",
    "is_neg",
    "is_nonzero",
    "is_same_size",
    "is_signed",
    "is_storage",
    "is_tensor",
    "logspace",
    "masked_scatter",
    "masked_select",
    "meshgrid",
    "moveaxis",
    "movedim",
    "narrow_copy",
    "numel",
    "permute_copy",
    "put",
    "range",
    "ravel",
    "repeat_interleave",
    "resize_as_",
    "resolve_neg",
    "rot90",
    "row_stack",
    "scalar_tensor",
    "scatter",
    "scatter_reduce",
    "select_copy",
    "select_scatter",
    "slice_copy",
    "slice_scatter",
    "split_copy",
    "split_with_sizes_copy",
    "squeeze_copy",
    "swapaxes",
    "swapdims",
    "t_copy",
    "take",
    "take_along_dim",
    "tensor_split",
    "transpose_copy",
    "tril_indices",
    "triu_indices",
    "unbind_copy",
    "unfold_copy",
    "unravel_index",
    "unsqueeze_copy",
    "view_copy",
    "vsplit",
    "vstack",
]

range = range_  # torch.range: the deprecated inclusive arange (creation.py); builtins.range below


_grad_on = _grad_enabled.get


def _int(v: Any) -> int:
    return int(v.item() if isinstance(v, Tensor) else v)


def _tensors(args: Sequence[Any]) -> list[Tensor]:
    """``f(a, b)`` and ``f([a, b])``, as torch's ``*tensors`` functions take them."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


# ----- movedim, swapaxes, ravel -----
def _dim_list(d: Any) -> list[int]:
    return [int(d)] if isinstance(d, (int, backend.integer)) else [int(v) for v in d]


def movedim(input: Tensor, source: Any, destination: Any) -> Tensor:
    """``input`` with its dims ``source`` moved to positions ``destination`` (a view).

    Args:
        input: the tensor.
        source: a dim or a sequence of dims to move.
        destination: where each goes, in the same order.

    Returns:
        A view of ``input``; the other dims keep their order.

    Raises:
        RuntimeError: ``source`` and ``destination`` differ in length or repeat a dim.

    Example:
        >>> import asyncgrad as ag
        >>> ag.movedim(ag.zeros(2, 3, 4), 0, -1).shape
        asyncgrad.Size([3, 4, 2])
    """
    src, dst = _dim_list(source), _dim_list(destination)
    nd = input.ndim
    if len(src) != len(dst):
        raise RuntimeError(
            f"movedim: Invalid source or destination dims: source ({src} dims) should contain the "
            f"same number of dims as destination ({dst} dims)"
        )
    s = [norm_dim(d, nd) for d in src]
    e = [norm_dim(d, nd) for d in dst]
    for name, ds, given in (("source", s, src), ("destination", e, dst)):
        if len(set(ds)) != len(ds):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({given})")
    rest = [d for d in builtins.range(nd) if d not in s]
    order: list[int] = [-1] * nd
    for a, b in zip(s, e, strict=True):
        order[b] = a
    it = iter(rest)
    perm = tuple(o if o != -1 else next(it) for o in order)
    if nd == 0:
        return view(input, ())
    return permute(input, perm)


moveaxis = movedim


def swapaxes(input: Tensor, axis0: int, axis1: int) -> Tensor:
    return transpose(input, axis0, axis1)


def swapdims(input: Tensor, dim0: int, dim1: int) -> Tensor:
    return transpose(input, dim0, dim1)


def ravel(input: Tensor) -> Tensor:
    """``input`` flattened (a view where its layout allows)."""
    return reshape(input, (-1,))


# ----- atleast_nd, the stacks, concat -----
def _atleast(n: int, args: Sequence[Any]) -> Any:
    one = len(args) == 1 and isinstance(args[0], Tensor)
    outs = []
    for x in _tensors(args):
        s = x.shape
        if len(s) >= n:
            outs.append(x)
        elif n == 3 and len(s) == 2:
            outs.append(reshape(x, (*s, 1)))
        elif n == 3 and len(s) == 1:
            outs.append(reshape(x, (1, *s, 1)))
        else:
            outs.append(reshape(x, (1,) * (n - len(s)) + tuple(s)))
    return outs[0] if one else tuple(outs)


def atleast_1d(*tensors: Any) -> Any:
    """Each tensor with at least 1 dim (0-d ones become shape ``(1,)``)."""
    return _atleast(1, tensors)


def atleast_2d(*tensors: Any) -> Any:
    """Each tensor with at least 2 dims (1-d ``(n,)`` becomes ``(1, n)``)."""
    return _atleast(2, tensors)


def atleast_3d(*tensors: Any) -> Any:
    """Each tensor with at least 3 dims (``(n,)`` becomes ``(1, n, 1)``, ``(m, n)``
    ``(m, n, 1)``)."""
    return _atleast(3, tensors)


def _seq(tensors: Any, name: str) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        raise TypeError(
            f"{name}(): argument 'tensors' (position 1) must be tuple of Tensors, not Tensor"
        )
    return list(tensors)


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    ts = list(_atleast(1, (_seq(tensors, "hstack"),)))
    if not ts:
        raise RuntimeError("hstack expects a non-empty TensorList")
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    ts = list(_atleast(2, (_seq(tensors, "vstack"),)))
    if not ts:
        raise RuntimeError("vstack expects a non-empty TensorList")
    return cat(ts, 0)


row_stack = vstack


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    ts = list(_atleast(3, (_seq(tensors, "dstack"),)))
    if not ts:
        raise RuntimeError("dstack expects a non-empty TensorList")
    return cat(ts, 2)


def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    ts = [reshape(x, (-1, 1)) if x.ndim <= 1 else x for x in _seq(tensors, "column_stack")]
    if not ts:
        raise RuntimeError("column_stack expects a non-empty TensorList")
    return cat(ts, 1)


def concat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    return cat(tensors, dim)


def concatenate(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    return cat(tensors, axis)


# ----- tensor_split, hsplit, vsplit, dsplit (views) -----
def _slice_along(input: Tensor, d: int, start: int, stop: int) -> Tensor:
    return getitem(input, (*(slice(None),) * d, slice(start, stop)))


def tensor_split(
    input: Tensor,
    indices_or_sections: Any = None,
    dim: int = 0,
    *,
    sections: Any = None,
    indices: Any = None,
    tensor_indices_or_sections: Any = None,
) -> tuple[Tensor, ...]:
    """Views of ``input`` split along ``dim`` into ``n`` near-equal parts (an int) or at the
    given indices (a sequence or a 1-d tensor), as ``torch.tensor_split``.

    Example:
        >>> import asyncgrad as ag
        >>> [p.tolist() for p in ag.tensor_split(ag.arange(5), 2)]
        [[0, 1, 2], [3, 4]]
    """
    given = [
        v
        for v in (indices_or_sections, sections, indices, tensor_indices_or_sections)
        if v is not None
    ]
    if len(given) != 1:
        raise TypeError(
            "tensor_split() takes one of indices_or_sections, sections, indices or "
            "tensor_indices_or_sections"
        )
    indices_or_sections = given[0]
    if input.ndim == 0:
        raise RuntimeError(
            "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims"
        )
    d = norm_dim(int(dim), input.ndim)
    n = input.shape[d]
    ios = indices_or_sections
    if isinstance(ios, Tensor):
        if ios.dtype != dtypes.int64:
            raise RuntimeError(
                "tensor_split expected tensor_indices_or_sections to have dtype of long, but got "
                f"{ios.dtype}"
            )
        if ios.ndim > 1:
            raise RuntimeError(
                "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                f"one-dimensional tensor, but got a tensor with {ios.ndim} dims"
            )
        ios = int(ios.item()) if ios.ndim == 0 else [int(v) for v in ios.tolist()]
    if isinstance(ios, (int, backend.integer)):
        k = int(ios)
        if k <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {k}")
        q, r = divmod(n, k)
        bounds = [i * q + builtins.min(i, r) for i in builtins.range(k + 1)]
    else:
        bounds = [0, *(int(v) for v in ios), n]
    return tuple(
        _slice_along(input, d, bounds[i], builtins.max(bounds[i], bounds[i + 1]))
        for i in builtins.range(len(bounds) - 1)
    )


def _nsplit(input: Tensor, ios: Any, dim: int, need: int, name: str) -> tuple[Tensor, ...]:
    if input.ndim < need:
        raise RuntimeError(
            f"torch.{name} requires a tensor with at least {need} dimension, but got a tensor "
            f"with {input.ndim} dimensions!"
        )
    ints = (int, backend.integer)
    if not isinstance(ios, (*ints, Tensor)) and not (
        isinstance(ios, (list, tuple)) and builtins.all(isinstance(v, ints) for v in ios)
    ):
        raise TypeError(
            f"{name}() received an invalid combination of arguments - got (Tensor, "
            f"{type(ios).__name__}), but expected one of:\n * (Tensor input, int sections)\n"
            " * (Tensor input, tuple of ints indices)\n"
        )
    if isinstance(ios, (int, backend.integer)):
        n = input.shape[dim]
        if int(ios) == 0 or n % int(ios):
            raise RuntimeError(
                f"torch.{name} attempted to split along dimension {dim}, but the size of the "
                f"dimension {n} is not divisible by the split_size {int(ios)}!"
            )
    return tensor_split(input, ios, dim)


def hsplit(input: Tensor, indices_or_sections: Any) -> tuple[Tensor, ...]:
    return _nsplit(input, indices_or_sections, 1 if input.ndim > 1 else 0, 1, "hsplit")


def vsplit(input: Tensor, indices_or_sections: Any) -> tuple[Tensor, ...]:
    return _nsplit(input, indices_or_sections, 0, 2, "vsplit")


def dsplit(input: Tensor, indices_or_sections: Any) -> tuple[Tensor, ...]:
    return _nsplit(input, indices_or_sections, 2, 3, "dsplit")


# ----- rot90, fliplr, flipud -----
def rot90(input: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """``input`` rotated by 90 degrees ``k`` times in the plane of ``dims`` (from the first
    towards the second)."""
    ds = list(dims)
    if len(ds) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(ds)}")
    if input.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    d0, d1 = norm_dim(int(ds[0]), input.ndim), norm_dim(int(ds[1]), input.ndim)
    if d0 == d1:
        raise RuntimeError(
            f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}"
        )
    k = int(k) % 4
    if k == 1:
        return transpose(flip(input, (d1,)), d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return transpose(flip(input, (d0,)), d0, d1)
    return clone(input)


def fliplr(input: Tensor) -> Tensor:
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(input, (1,))


def flipud(input: Tensor) -> Tensor:
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, (0,))


# ----- diag, diag_embed, diagflat, block_diag -----
def _diag_index(xp: Any, shape: tuple[int, ...], offset: int, d1: int, d2: int) -> tuple[Any, ...]:
    """The advanced index of the diagonal ``offset`` over dims ``d1``, ``d2`` of an array of
    ``shape``: its result has the shape of ``diagonal(offset, d1, d2)`` (the others, then the
    diagonal)."""
    rest = [d for d in builtins.range(len(shape)) if d not in (d1, d2)]
    n = builtins.max(
        0,
        builtins.min(shape[d1] + builtins.min(offset, 0), shape[d2] - builtins.max(offset, 0)),
    )
    k = len(rest) + 1
    i = xp.arange(n)
    idx: list[Any] = [None] * len(shape)
    for pos, d in enumerate(rest):
        idx[d] = xp.arange(shape[d]).reshape((shape[d],) + (1,) * (k - pos - 1))
    idx[d1] = i + builtins.max(-offset, 0)
    idx[d2] = i + builtins.max(offset, 0)
    return tuple(idx)


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """A tensor whose diagonals (``offset``, over ``dim1`` and ``dim2``) hold ``input``'s last
    dim, zeros elsewhere."""
    nd = input.ndim + 1
    d1, d2 = norm_dim(int(dim1), nd), norm_dim(int(dim2), nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if input.ndim == 0:
        input = reshape(input, (1,))
        nd = 2
    n = input.shape[-1] + builtins.abs(int(offset))
    rest = list(input.shape[:-1])
    shape: list[int] = []
    it = iter(rest)
    for d in builtins.range(nd):
        shape.append(n if d in (d1, d2) else next(it))
    idx = _diag_index(backend.namespace(input._array), tuple(shape), int(offset), d1, d2)
    return index_add_zeros(input, idx, tuple(shape))


def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A square matrix with the 1-d ``input`` on diagonal ``diagonal``, or the diagonal of the
    2-d ``input`` (a copy)."""
    if input.ndim == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.ndim != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    return clone(_diagonal(input, diagonal, 0, 1))


def _diagonal(input: Tensor, offset: int, dim1: int, dim2: int) -> Tensor:
    return diagonal(input, offset, dim1, dim2)


def diagflat(input: Tensor, offset: int = 0) -> Tensor:
    return diag_embed(flatten(input), offset, 0, 1)


def block_diag(*tensors: Tensor) -> Tensor:
    """The tensors (0-, 1- or 2-d) placed along the diagonal of one matrix, zeros elsewhere."""
    if not tensors:
        return wrap(backend.empty((1, 0), dtypes.float32, None) * 0)
    mats = []
    for i, x in enumerate(tensors):
        if x.ndim > 2:
            raise RuntimeError(
                f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {i} has "
                f"{x.ndim} dimensions"
            )
        mats.append(reshape(x, (1, -1)) if x.ndim < 2 else x)
    dt = join_dtype([m._array for m in mats])
    rows = builtins.sum(m.shape[0] for m in mats)
    cols = builtins.sum(m.shape[1] for m in mats)
    out: Tensor | None = None
    r = c = 0
    for m in mats:
        idx = (slice(r, r + m.shape[0]), slice(c, c + m.shape[1]))
        part = index_add_zeros(to(m, dt), idx, (rows, cols))
        out = part if out is None else add(out, part)
        r, c = r + m.shape[0], c + m.shape[1]
    assert out is not None
    return out


# ----- broadcast_tensors, meshgrid, cartesian_prod, combinations -----
def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    ts = _tensors(tensors)
    shape: tuple[int, ...] = ()
    try:
        shape = tuple(backend.broadcast_shapes(*(x.shape for x in ts)))
    except ValueError:
        raise RuntimeError(
            f"shape mismatch: objects cannot be broadcast to a single shape: "
            f"{[list(x.shape) for x in ts]}"
        ) from None
    return tuple(expand(x, shape) for x in ts)


def meshgrid(*tensors: Any, indexing: str | None = None) -> tuple[Tensor, ...]:
    """Coordinate grids of the 1-d ``tensors``: ``indexing="ij"`` (matrix, torch's default) or
    ``"xy"`` (Cartesian: the first two dims swapped)."""
    ts = _tensors(tensors)
    if indexing is None:
        warnings.warn(
            "torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
            "argument.",
            UserWarning,
            stacklevel=2,
        )
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(
            f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}'
        )
    if not ts:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for x in ts:
        if x.ndim > 1:
            raise RuntimeError(
                f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {x}"
            )
    if len({x.dtype for x in ts}) > 1:
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    flat = [reshape(x, (-1,)) for x in ts]
    swap = indexing == "xy" and len(flat) >= 2
    if swap:
        flat[0], flat[1] = flat[1], flat[0]
    shape = tuple(x.shape[0] for x in flat)
    n = len(flat)
    grids = [
        expand(reshape(x, (1,) * i + (-1,) + (1,) * (n - i - 1)), shape) for i, x in enumerate(flat)
    ]
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cartesian_prod(*tensors: Tensor) -> Tensor:
    ts = _tensors(tensors)
    if len(ts) == 1:
        return ts[0]
    grids = meshgrid(*ts, indexing="ij")
    return stack([reshape(g, (-1,)) for g in grids], 1)


def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The length-``r`` combinations of the 1-d ``input``'s elements (rows of the result), as
    ``itertools.combinations`` (``combinations_with_replacement``) orders them."""
    if input.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return wrap(backend.namespace(input._array).zeros((0,), dtype=input._array.dtype))
    n = input.shape[0]
    xp = backend.namespace(input._array)
    axes = [
        xp.broadcast_to(xp.arange(n).reshape((1,) * i + (n,) + (1,) * (r - i - 1)), (n,) * r)
        for i in builtins.range(r)
    ]
    grid = xp.stack([a.reshape(-1) for a in axes])
    keep = xp.ones(grid.shape[1], dtype=bool)
    for i in builtins.range(r - 1):
        keep &= grid[i] <= grid[i + 1] if with_replacement else grid[i] < grid[i + 1]
    sel = grid[:, keep]
    return stack([_take_idx(input, (sel[i],)) for i in builtins.range(r)], 1)


def _tri_indices(row: int, col: int, offset: int, dtype: Any, device: Any, upper: bool) -> Tensor:
    from .creation import tensor

    xp_rows = backend.namespace(backend.empty((0,), dtypes.int64, None))
    i = xp_rows.arange(row).reshape(-1, 1)
    j = xp_rows.arange(col).reshape(1, -1)
    mask = (j - i >= offset) if upper else (j - i <= offset)
    r, c = xp_rows.nonzero(mask)
    dt = dtypes.int64 if dtype is None else dtypes.to_dtype(dtype)
    return tensor(xp_rows.stack([r, c]).astype(dt), device=device)


def tril_indices(
    row: int,
    col: int,
    offset: int = 0,
    *,
    dtype: Any = None,
    device: Any = None,
    layout: Any = None,
) -> Tensor:
    """The (row, column) indices of the lower triangle of a ``row`` x ``col`` matrix, a 2 x N
    tensor in row-major order."""
    return _tri_indices(row, col, offset, dtype, device, False)


def triu_indices(
    row: int,
    col: int,
    offset: int = 0,
    *,
    dtype: Any = None,
    device: Any = None,
    layout: Any = None,
) -> Tensor:
    """The (row, column) indices of the upper triangle of a ``row`` x ``col`` matrix."""
    return _tri_indices(row, col, offset, dtype, device, True)


# ----- take, take_along_dim, unravel_index, argwhere, masked_select -----
def _check_flat_index(ia: Any, n: int) -> None:
    """torch's IndexError for the first of the indices ``ia`` outside a flattened tensor of
    ``n`` elements (``-n <= i < n``), as ``take`` and ``put`` raise it."""
    if ia.size and bool(((ia < -n) | (ia >= n)).any()):
        bad = int(ia[(ia < -n) | (ia >= n)].ravel()[0])
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} elements.")


def take(input: Tensor, index: Tensor) -> Tensor:
    """``input`` read as 1-d at ``index`` (negative indices count from the end); the result
    has index's shape."""
    xa = input._array
    ia = _index_array(index, "take", xa)
    _check_flat_index(ia, xa.size)
    t = _take_idx(reshape(input, (-1,)), (ia,))
    keeps_for_backward(t._grad_fn)
    return t


def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """``input`` gathered at ``indices`` along ``dim`` (both broadcast over the other dims);
    with no ``dim``, both read as 1-d."""
    if not isinstance(indices, Tensor) or indices._array.dtype.kind not in "iu":
        raise RuntimeError(
            "torch.take_along_dim(): dtype of indices should be Long but got "
            f"{getattr(indices, 'dtype', type(indices).__name__)}"
        )
    if dim is None:
        return _gather(reshape(input, (-1,)), 0, reshape(indices, (-1,)))
    if input.ndim != indices.ndim:
        raise RuntimeError(
            "torch.take_along_dim(): input and indices should have the same number of "
            f"dimensions, but got {input.ndim} dimensions for input, and {indices.ndim} "
            "dimensions for indices"
        )
    d = norm_dim(int(dim), input.ndim)
    si, sx = list(input.shape), list(indices.shape)
    si[d] = sx[d] = 1
    b = tuple(backend.broadcast_shapes(tuple(si), tuple(sx)))
    xs = list(b)
    xs[d] = input.shape[d]
    js = list(b)
    js[d] = indices.shape[d]
    # As torch's: with a dim, a negative index counts from the end of that dim.
    ia = indices._array
    if ia.dtype.kind == "i" and ia.size and bool((ia < 0).any()):
        xp = backend.namespace(ia)
        indices = wrap(xp.where(ia < 0, ia + input.shape[d], ia))
    return _gather(expand(input, tuple(xs)), d, expand(indices, tuple(js)))


def _gather(input: Tensor, d: int, index: Tensor) -> Tensor:
    from .index import gather

    return gather(input, d, index)


def unravel_index(indices: Any, shape: Any) -> tuple[Tensor, ...]:
    """The coordinates in a tensor of ``shape`` of the flat ``indices`` (one tensor per dim)."""
    if not isinstance(indices, Tensor):
        indices = asarray(indices)
    ia = indices._array
    if ia.dtype.kind not in "iu":
        raise TypeError(f"expected 'indices' to be integer dtype, but got {indices.dtype}")
    dims_ = (
        (int(shape),) if isinstance(shape, (int, backend.integer)) else tuple(int(s) for s in shape)
    )
    if any(s < 0 for s in dims_):
        raise ValueError("'shape' cannot have negative values, but got " + str(dims_))
    ia = ia.astype(dtypes.int64)
    out = []
    step = 1
    for s in reversed(dims_):
        out.append(wrap((ia // step) % s if s else ia * 0))
        step *= s
    # As torch's: an empty shape has no coordinates, so no outputs.
    return tuple(reversed(out))


def argwhere(input: Tensor) -> Tensor:
    """The indices of ``input``'s nonzero elements, one row each (``nonzero``)."""
    out: Tensor = nonzero(input)
    return out


def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """The elements of ``input`` where ``mask`` (broadcast with it) is True, as a 1-d tensor."""
    if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    x, m = broadcast_tensors(input, mask)
    return getitem(x, m)


# ----- unfold, as_strided (strided views) -----
# NOTE [Strided views]
# ``as_strided`` and ``Tensor.unfold`` views read their base's memory through a layout that the
# view replay (graph/copy_slices.py) has no step for. Their step in the view chain is a
# ``getitem`` whose index is a ``_Strided``; ``getitem`` (index.py) hands that index back here,
# so a view's grad_fn is rebuilt after an in-place op on its base. An in-place op on the strided
# view itself, recorded, fails in backward with a clear error (its replay on an array), not with a
# wrong gradient. The gradient reads the output as an advanced index into the flattened input:
# each output element's storage position mapped back to the input element stored there.
def _storage(x: Tensor) -> tuple[Any, int]:
    """The 1-d storage array (the base tensor's memory, in memory order) and x's offset in it."""
    base = x._base if x._base is not None else x
    ba = base._array
    xp = backend.namespace(ba)
    if not (ba.flags.c_contiguous or ba.flags.f_contiguous):
        raise RuntimeError("as_strided: asyncgrad needs a contiguous base tensor")
    item = ba.itemsize
    flat = xp.lib.stride_tricks.as_strided(ba, (ba.size,), (item,))
    off = (backend.data_ptr(x._array) - backend.data_ptr(ba)) // item if ba.size else 0
    return flat, int(off)


def _elem_strides(a: Any) -> tuple[int, ...]:
    return tuple(int(s) // a.itemsize for s in a.strides)


def _positions(xp: Any, size: Sequence[int], stride: Sequence[int], offset: int) -> Any:
    pos = xp.full(tuple(size), offset, dtype=dtypes.int64)
    for d, (n, s) in enumerate(zip(size, stride, strict=True)):
        pos = pos + (xp.arange(n, dtype=dtypes.int64) * s).reshape(
            (n,) + (1,) * (len(size) - d - 1)
        )
    return pos


def as_strided(
    input: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
) -> Tensor:
    """A view of ``input``'s storage with the given ``size``, ``stride`` (in elements) and
    ``storage_offset`` (input's own by default)."""
    sz, st = tuple(int(v) for v in size), tuple(int(v) for v in stride)
    if len(sz) != len(st):
        raise RuntimeError("mismatch in length of strides and shape")
    if any(s < 0 for s in st):
        raise RuntimeError(
            f"as_strided: Negative strides are not supported at the moment, got strides: {list(st)}"
        )
    storage, own = _storage(input)
    off = own if storage_offset is None else int(storage_offset)
    need = 1 + builtins.sum((n - 1) * s for n, s in zip(sz, st, strict=True)) if 0 not in sz else 0
    if need and off + need > storage.shape[0]:
        raise RuntimeError(
            f"setStorage: sizes {list(sz)}, strides {list(st)}, storage offset {off}, and itemsize "
            f"{storage.itemsize} requiring a storage size of {(off + need) * storage.itemsize} are "
            f"out of bounds for storage of size {storage.shape[0] * storage.itemsize}"
        )
    xp = backend.namespace(storage)
    item = storage.itemsize
    out = xp.lib.stride_tricks.as_strided(storage[off:], sz, tuple(s * item for s in st))
    xa = input._array
    if input.requires_grad:
        # See NOTE [Strided views]: which input element each output element reads.
        pos = _positions(xp, sz, st, off)
        inv = xp.full(storage.shape[0] + 1, -1, dtype=dtypes.int64)
        inv[_positions(xp, xa.shape, _elem_strides(xa), own).reshape(-1)] = xp.arange(
            xa.size, dtype=dtypes.int64
        )
        idx = inv[pos]
        if idx.size and bool((idx < 0).any()):
            raise RuntimeError(
                "as_strided: asyncgrad differentiates only a view of the input's own elements"
            )
        flat_in = reshape(input, (-1,))
        t = make(OPS["getitem"], out, (flat_in,), {"index": (idx,), "in_shape": (xa.size,)})
        keeps_for_backward(t._grad_fn)
    else:
        t = make(OPS["getitem"], out, (), {})
    return as_view(t, input, "getitem", {"index": _Strided(sz, st, off)})


def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """``Tensor.unfold``: a view of every slice of ``size`` elements along ``dimension``,
    ``step`` apart, in a new last dim.

    Example:
        >>> import asyncgrad as ag
        >>> ag.arange(5).unfold(0, 3, 2).tolist()
        [[0, 1, 2], [2, 3, 4]]
    """
    nd = input.ndim
    d = norm_dim(int(dimension), nd)
    n = input.shape[d] if nd else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    xa = input._array
    st = list(_elem_strides(xa))
    sz = list(xa.shape)
    if nd == 0:
        return as_strided(input, (size,), (1,))
    sz[d] = (n - size) // step + 1
    inner = st[d]
    st[d] = inner * step
    _, own = _storage(input)
    return as_strided(input, (*sz, size), (*st, inner), own)


# ----- repeat_interleave, narrow_copy and the *_copy functions -----
def repeat_interleave(
    input: Tensor, repeats: Any = None, dim: int | None = None, *, output_size: int | None = None
) -> Tensor:
    """Each element (slice along ``dim``) of ``input`` repeated ``repeats`` times (an int, or a
    tensor with one count per element); ``repeat_interleave(counts)`` repeats the indices."""
    if repeats is None:
        ca = input._array
        if ca.ndim > 1 or ca.dtype.kind not in "iu":
            raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
        xp = backend.namespace(ca)
        return wrap(xp.repeat(xp.arange(ca.shape[0] if ca.ndim else 1), ca.reshape(-1)))
    x = input
    if dim is None:
        x = reshape(x, (-1,))
        d = 0
    else:
        d = norm_dim(int(dim), x.ndim)
        if x.ndim == 0:
            x = reshape(x, (1,))
    n = x.shape[d]
    xp = backend.namespace(x._array)
    if isinstance(repeats, Tensor):
        ra = repeats._array.reshape(-1)
        if ra.shape[0] == 1:
            ra = xp.repeat(ra, n)
        if ra.shape[0] != n:
            raise RuntimeError("repeats must have the same size as input along dim")
        if ra.size and bool((ra < 0).any()):
            raise RuntimeError("repeats can not be negative")
        ra = _on_device_of((ra,), x._array)[0]
    else:
        if int(repeats) < 0:
            raise RuntimeError("repeats can not be negative")
        ra = int(repeats)
    idx = xp.repeat(xp.arange(n), ra)
    return _take_idx(x, (*(slice(None),) * d, idx, Ellipsis))


def narrow_copy(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    if input.ndim and int(dim) >= input.ndim:  # torch's narrow_copy checks this one itself
        raise RuntimeError(
            "Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false."
        )
    if length < 0:  # torch's message for it is narrow_copy's own (after narrow's other checks)
        narrow(input, dim, start, 0)
        n = input.shape[norm_dim(int(dim), input.ndim)]
        s = int(start) + n if int(start) < 0 else int(start)
        raise RuntimeError(f"start ({s}) + length ({length}) exceeds dimension size ({n}).")
    return clone(narrow(input, dim, start, length))


def _copy(v: Tensor) -> Tensor:
    return clone(v)


def alias_copy(input: Tensor) -> Tensor:
    return clone(input)


def as_strided_copy(
    input: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
) -> Tensor:
    return clone(as_strided(input, size, stride, storage_offset))


def detach(input: Tensor) -> Tensor:
    return input.detach()


def detach_(input: Tensor) -> Tensor:
    return input.detach_()


def detach_copy(input: Tensor) -> Tensor:
    return wrap(input._array.copy())


def diagonal_copy(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    return clone(diagonal(input, offset, dim1, dim2))


def expand_copy(input: Tensor, size: Sequence[int], *, implicit: bool = False) -> Tensor:
    return clone(expand(input, tuple(size)))


def permute_copy(input: Tensor, dims: Sequence[int]) -> Tensor:
    return clone(permute(input, tuple(dims)))


def select_copy(input: Tensor, dim: int, index: int) -> Tensor:
    return clone(select(input, dim, index))


def _slice_index(input: Tensor, dim: int, start: Any, end: Any, step: int) -> tuple[Any, ...]:
    d = norm_dim(int(dim), input.ndim)
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    return (*(slice(None),) * d, slice(start, end, step))


def slice_copy(
    input: Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Tensor:
    return clone(getitem(input, _slice_index(input, dim, start, end, step)))


def split_copy(input: Tensor, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
    return tuple(clone(v) for v in split(input, split_size, dim))


def split_with_sizes_copy(
    input: Tensor, split_sizes: Sequence[int], dim: int = 0
) -> tuple[Tensor, ...]:
    return tuple(clone(v) for v in split(input, list(split_sizes), dim))


def squeeze_copy(input: Tensor, dim: Any = None) -> Tensor:
    return clone(squeeze(input, dim))


def t_copy(input: Tensor) -> Tensor:
    return clone(t(input))


def transpose_copy(input: Tensor, dim0: int, dim1: int) -> Tensor:
    return clone(transpose(input, dim0, dim1))


def unbind_copy(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    return tuple(clone(v) for v in unbind(input, dim))


def unfold_copy(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    return clone(unfold(input, dimension, size, step))


def unsqueeze_copy(input: Tensor, dim: int) -> Tensor:
    return clone(unsqueeze(input, dim))


def view_copy(input: Tensor, *size: Any) -> Tensor:
    return clone(view(input, *size))


# ----- in-place view ops: squeeze_, unsqueeze_, t_, transpose_, swapdims_, as_strided_ -----
def _become(self: Tensor, v: Tensor) -> Tensor:
    """Make ``self`` the view ``v`` of itself (torch's in-place view ops change a tensor's
    shape and strides, and record the view op in its history)."""
    if self._grad_fn is None and self._requires_grad and v._grad_fn is not None:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation."
        )
    if type(self._vc) is not list:  # See NOTE [Inference tensors]
        check_writable(self)
    self._array = v._array
    if v._grad_fn is not None:
        self._grad_fn, self._output_nr = v._grad_fn, v._output_nr
    if self._base is not None and v._meta is not None:
        m = self._get_meta()
        m.view_chain = v._meta.view_chain
        m.view_version = v._meta.view_version
    return self


def squeeze_(input: Tensor, dim: Any = None) -> Tensor:
    return _become(input, squeeze(input, dim))


def unsqueeze_(input: Tensor, dim: int) -> Tensor:
    return _become(input, unsqueeze(input, dim))


def t_(input: Tensor) -> Tensor:
    return _become(input, t(input))


def transpose_(input: Tensor, dim0: int, dim1: int) -> Tensor:
    return _become(input, transpose(input, dim0, dim1))


swapdims_ = transpose_


def as_strided_(
    input: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
) -> Tensor:
    return _become(input, as_strided(input, size, stride, storage_offset))


def tril_(input: Tensor, diagonal: int = 0) -> Tensor:
    return inplace(input, "where", lambda s: tril(s, diagonal))


def triu_(input: Tensor, diagonal: int = 0) -> Tensor:
    return inplace(input, "where", lambda s: triu(s, diagonal))


def fill(input: Tensor, value: Any) -> Tensor:
    """A tensor of input's shape and dtype filled with ``value`` (a number or a 0-d tensor)."""
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(
                f"fill only supports 0-dimension value tensor but got tensor with {value.ndim} "
                "dimensions."
            )
        value = to(value, input.dtype)
    xa = input._array
    full = backend.namespace(xa).ones(xa.shape, dtype=bool)
    out = where(full, value, input)
    return out if out.dtype == input.dtype else to(out, input.dtype)


# ----- scatter and index_* (write with index_put, add with index_add_zeros) -----
def _put(x: Tensor, idx: tuple[Any, ...], value: Any) -> Tensor:
    """``x`` with ``value`` written at ``idx`` (one ``index_put`` node: value's gradient is the
    gradient at idx, x's the gradient elsewhere)."""
    out = x._array.copy()
    try:
        out[idx] = arr(value)
    except OverflowError:
        raise RuntimeError(
            f"value cannot be converted to type {out.dtype} without overflow: {value}"
        ) from None
    t = make(OPS["index_put"], out, (x, value), {"index": idx})
    keeps_for_backward(t._grad_fn)
    return t


def _add_at(x: Tensor, idx: tuple[Any, ...], value: Tensor) -> Tensor:
    """``x`` with ``value`` (broadcast to the indexed region) added at ``idx``; repeated
    indices add up."""
    region = x._array[idx].shape
    v = value if tuple(value.shape) == tuple(region) else expand(value, region)
    return add(x, index_add_zeros(v, idx, x.shape))


def _scatter_args(
    input: Tensor, dim: int, index: Tensor, src: Any, name: str
) -> tuple[tuple[Any, ...], int, Any]:
    """The advanced index of scatter's ``index`` along ``dim`` and the part of ``src`` (a tensor
    or a number) it writes, after torch's checks."""
    xa = input._array
    ia = _index_array(index, name, xa)
    if isinstance(src, Tensor):
        sa = src._array
        if sa.dtype != xa.dtype:
            raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
        if sa.ndim != ia.ndim and ia.size:
            raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    if ia.ndim != xa.ndim and ia.size and not (xa.ndim == 0 and ia.ndim <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    d = norm_dim(int(dim), xa.ndim)
    if xa.ndim == 0:
        _check_bounds(ia, 1, d)
        idx: tuple[Any, ...] = (Ellipsis,)
        part = src if not isinstance(src, Tensor) else reshape(src, (-1,))[0] if ia.size else None
        return (idx if ia.size else (slice(0, 0),)), d, part
    for k in builtins.range(xa.ndim):
        if (isinstance(src, Tensor) and ia.shape[k] > src.shape[k]) or (
            k != d and ia.shape[k] > xa.shape[k]
        ):
            extra = (
                f" and to be no larger size than src {list(src.shape)}"
                if isinstance(src, Tensor)
                else ""
            )
            raise RuntimeError(
                f"Expected index {list(ia.shape)} to be no larger than self {list(xa.shape)} apart "
                f"from dimension {d}{extra}"
            )
    _check_bounds(ia, xa.shape[d], d)
    idx = _mesh(backend.namespace(xa), ia.shape, d, ia)
    part = src
    if isinstance(src, Tensor) and tuple(ia.shape) != tuple(src.shape):
        part = getitem(src, tuple(slice(0, n) for n in ia.shape))
    return idx, d, part


# torch also takes "max" and "min" for amax and amin
_REDUCE_NAMES = {
    "sum": "sum",
    "prod": "prod",
    "mean": "mean",
    "amax": "amax",
    "amin": "amin",
    "max": "amax",
    "min": "amin",
}


def scatter(
    input: Tensor,
    dim: int,
    index: Tensor,
    src: Any = None,
    *,
    value: Any = None,
    reduce: str | None = None,
) -> Tensor:
    """``input`` with ``src`` (a tensor) or ``value`` (a number) written at ``index`` along
    ``dim``: ``out[i][index[i][j]] = src[i][j]`` (dim 1); ``reduce="add"``/``"multiply"``
    combines instead.

    Example:
        >>> import asyncgrad as ag
        >>> ag.zeros(2, 3).scatter(1, ag.tensor([[2], [0]]), 7.0).tolist()
        [[0.0, 0.0, 7.0], [7.0, 0.0, 0.0]]
    """
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() missing required argument 'src' or 'value'")
    if isinstance(src, Tensor) and src.ndim == 0 and index.ndim != 0:
        src = src.item()
    idx, _d, part = _scatter_args(input, dim, index, src, "scatter")
    if reduce is None:
        return _put(input, idx, part)
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"reduce argument must be either add or multiply. Got {reduce}")
    if isinstance(src, Tensor):
        warnings.warn(
            "The reduce argument of torch.scatter with Tensor src is deprecated and will be "
            "removed in a future PyTorch release. Use torch.scatter_reduce instead for more "
            "reduction options.",
            UserWarning,
            stacklevel=2,
        )
    if not isinstance(part, Tensor):
        xa = input._array
        part = wrap(backend.namespace(xa).full(xa[idx].shape, part, dtype=xa.dtype))
    if reduce == "add":
        return _add_at(input, idx, part)
    return _scatter_prod(input, idx, part, True)


def scatter_(
    input: Tensor,
    dim: int,
    index: Tensor,
    src: Any = None,
    *,
    value: Any = None,
    reduce: str | None = None,
) -> Tensor:
    return inplace(input, "mul", lambda s: scatter(s, dim, index, src, value=value, reduce=reduce))


# NOTE [scatter_reduce's prod, amax and amin]
# These are compositions too, so that they need no rule of their own and differentiate to any
# order. prod multiplies ``x`` by one ``index_put`` of src per round, the k-th occurrence of every
# target in round k (a round has no repeated target; there are as many rounds as the most
# repeated target has occurrences), so the product rule gives torch's gradients, zeros included.
# amax and amin take their value from the array reduction, recorded as a ``clone`` of
# ``x * w_self + scatter(src * w_src)``: the weights are torch's (ties share the gradient evenly,
# scatter_reduce_backward's N_to_distribute), constant where the result is, so the first
# derivative is torch's and the second zero, as for any max.
def _targets(shape: tuple[int, ...], idx: tuple[Any, ...]) -> Any:
    """The flat position in an array of ``shape`` that each element of the index array tuple
    ``idx`` names (broadcast to one shape)."""
    xp = backend.namespace(idx[0])
    parts = xp.broadcast_arrays(*idx)
    lin = xp.zeros(parts[0].shape, dtype=dtypes.int64)
    step = 1
    for a, n in zip(reversed(parts), reversed(shape), strict=False):
        lin = lin + (a % n) * step
        step *= n
    return lin


def _ranks(lin: Any) -> Any:
    """For each flat target, how many earlier elements name the same target."""
    xp = backend.namespace(lin)
    flat = lin.reshape(-1)
    order = xp.argsort(flat, kind="stable")
    srt = flat[order]
    rank = xp.empty_like(flat)
    rank[order] = xp.arange(srt.size) - xp.searchsorted(srt, srt, side="left")
    return rank.reshape(lin.shape)


def _scatter_prod(input: Tensor, idx: tuple[Any, ...], src: Tensor, include_self: bool) -> Tensor:
    xa = input._array
    xp = backend.namespace(xa)
    if idx[0] is Ellipsis:  # a 0-d input
        return mul(input, src) if include_self else clone(src)
    lin = _targets(xa.shape, idx)
    flat = reshape(input, (-1,))
    if not include_self and lin.size:
        flat = _put(flat, (lin.reshape(-1),), 1)
    rank = _ranks(lin).reshape(-1)
    vals = reshape(expand(src, lin.shape), (-1,))
    ones = wrap(xp.ones(xa.size, dtype=xa.dtype))
    for k in builtins.range(int(rank.max()) + 1 if rank.size else 0):
        (sel,) = xp.nonzero(rank == k)
        flat = mul(flat, _put(ones, (lin.reshape(-1)[sel],), _take_idx(vals, (sel,))))
    return reshape(flat, xa.shape)


@backend.silent_fp  # See NOTE [Silent floating point]: 0/0 where NaN is the result, as torch
def _scatter_max(
    input: Tensor, idx: tuple[Any, ...], src: Tensor, reduce: str, include_self: bool
) -> Tensor:
    xa, sa = input._array, src._array
    out = scatter_reduce_array(xa, idx, sa, reduce, include_self)
    if not (_grad_on() and (input.requires_grad or src.requires_grad)):
        return wrap(out)
    xp = backend.namespace(xa)
    self_is = xp.asarray(xa == out, dtype=xa.dtype)  # an array also for 0-d operands
    src_is = xp.asarray(sa == out[idx], dtype=xa.dtype)
    n = self_is.copy()
    xp.add.at(n, idx, src_is)
    w_self = xp.asarray(self_is / n)
    w_src = xp.asarray(src_is / n[idx])
    if not include_self:
        w_self[idx] = 0
    weighted = add(mul(input, w_self), index_add_zeros(mul(src, w_src), idx, xa.shape))
    return make(OPS["clone"], out, (weighted,))


def scatter_reduce(
    input: Tensor,
    dim: int,
    index: Tensor,
    src: Tensor,
    reduce: str,
    *,
    include_self: bool = True,
) -> Tensor:
    """``input`` with ``src`` combined in at ``index`` along ``dim`` by ``reduce``.

    Args:
        input: the tensor scattered into.
        dim: the dim ``index`` indexes.
        index: int64 positions along ``dim``, one per element of ``src`` it reads.
        src: the values, of input's dtype.
        reduce: "sum", "prod", "mean", "amax" or "amin" ("max", "min" too).
        include_self: whether input's own values take part where something is scattered.

    Returns:
        A new tensor; ties of amax and amin share the gradient evenly, as torch's.

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.zeros(3)
        >>> i = ag.tensor([0, 2, 2])
        >>> ag.scatter_reduce(x, 0, i, ag.tensor([1.0, 2.0, 5.0]), "amax").tolist()
        [1.0, 0.0, 5.0]
    """
    if reduce not in _REDUCE_NAMES:
        raise RuntimeError(
            "reduce argument must be either sum, prod, mean, amax or amin, got " + str(reduce)
        )
    if not isinstance(src, Tensor):
        raise TypeError(
            "scatter_reduce(): argument 'src' (position 4) must be Tensor, not "
            + type(src).__name__
        )
    idx, _d, part = _scatter_args(input, dim, index, src, "scatter_reduce")
    return _reduce_at(input, idx, part, _REDUCE_NAMES[reduce], include_self)


def _reduce_at(
    input: Tensor, idx: tuple[Any, ...], part: Tensor, reduce: str, include_self: bool
) -> Tensor:
    if reduce == "mean" and input.dtype == dtypes.bool_:
        raise NotImplementedError(
            '"scatter_reduce" with reduce="mean" not implemented for \'Bool\''
        )
    if reduce in ("sum", "mean"):
        base = input if include_self else _put(input, idx, 0)
        s = _add_at(base, idx, part)
        if reduce == "sum":
            return s
        xa = input._array
        xp = backend.namespace(xa)
        count = xp.zeros(xa.shape, dtype=xa.dtype)
        xp.add.at(count, idx, 1)
        if include_self:
            count = count + 1
        count = xp.maximum(count, 1)
        if dtypes.is_floating(xa.dtype):
            return div(s, count)
        return floor_divide(s, count)
    if reduce == "prod":
        return _scatter_prod(input, idx, part, include_self)
    return _scatter_max(input, idx, part, reduce, include_self)


def scatter_reduce_(
    input: Tensor,
    dim: int,
    index: Tensor,
    src: Tensor,
    reduce: str,
    *,
    include_self: bool = True,
) -> Tensor:
    return inplace(
        input,
        "mul",
        lambda s: scatter_reduce(s, dim, index, src, reduce, include_self=include_self),
    )


def _index_along(input: Tensor, dim: int, index: Any, name: str) -> tuple[int, Any]:
    xa = input._array
    if not isinstance(index, Tensor):
        raise TypeError(f"{name}(): argument 'index' must be Tensor, not {type(index).__name__}")
    ia = index._array
    if ia.dtype.kind not in "iu":
        raise RuntimeError(f"{name}_(): Expected dtype int64 for index")
    if ia.ndim > 1:
        raise IndexError(f"{name}_(): Index is supposed to be a vector")
    ia = _on_device_of((ia.reshape(-1),), xa)[0]
    d = norm_dim(int(dim), xa.ndim)
    n = xa.shape[d] if xa.ndim else 1
    lo = -n if name == "index_fill" else 0  # as torch: only index_fill takes negative indices
    if ia.size and bool(((ia < lo) | (ia >= n)).any()):
        bad = int(ia[(ia < lo) | (ia >= n)].ravel()[0])
        what = f"index {bad} is out of bounds for dimension {d} with size {n}"
        if name == "index_add":
            if xa.ndim <= 1:
                raise IndexError("index out of range in self")
            raise RuntimeError(what)
        if name == "index_copy":
            raise IndexError(f"index_copy_(): {what}")
        if name == "index_fill":
            raise IndexError(what)
        raise IndexError(f"index out of range in self ({what})")
    return d, ia


def _source_check(input: Tensor, d: int, ia: Any, source: Tensor, name: str) -> None:
    if not isinstance(source, Tensor):
        raise TypeError(f"{name}(): argument 'source' must be Tensor, not {type(source).__name__}")
    if source.dtype != input.dtype:
        raise RuntimeError(
            f"{name}_(): self ({input.dtype}) and source ({source.dtype}) must have the same "
            "scalar type"
        )
    want = list(input.shape)
    if want:
        want[d] = int(ia.shape[0])
    if list(source.shape) != want and not (source.ndim == 0 and ia.shape[0] == 1):
        raise RuntimeError(
            f"{name}_(): Source/destination tensor must have same slice shapes. Destination "
            f"slice shape: {list(input.shape)} at dimension {d} and source slice shape: "
            f"{list(source.shape)} at dimension {d}."
        )


def _along(input: Tensor, d: int, ia: Any) -> tuple[Any, ...]:
    return (*(slice(None),) * d, ia, Ellipsis) if input.ndim else (Ellipsis,)


def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
    """``input`` with ``alpha * source[..., i, ...]`` added at ``input[..., index[i], ...]``."""
    d, ia = _index_along(input, dim, index, "index_add")
    _source_check(input, d, ia, source, "index_add")
    src = source if alpha == 1 else to(mul(source, alpha), source.dtype)
    if input.ndim == 0:
        return add(input, reshape(src, ()) if ia.size else mul(src, 0))
    return _add_at(input, _along(input, d, ia), src)


def index_add_(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
    return inplace(input, "add", lambda s: index_add(s, dim, index, source, alpha=alpha))


def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """``input`` with ``source[..., i, ...]`` written at ``input[..., index[i], ...]``."""
    d, ia = _index_along(input, dim, index, "index_copy")
    _source_check(input, d, ia, source, "index_copy")
    if input.ndim == 0:
        return _put(input, (Ellipsis,), reshape(source, ())) if ia.size else clone(input)
    return _put(input, _along(input, d, ia), source)


def index_copy_(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    return inplace(input, "add", lambda s: index_copy(s, dim, index, source))


def index_fill(input: Tensor, dim: int, index: Tensor, value: Any) -> Tensor:
    """``input`` with ``value`` written at every ``input[..., index[i], ...]``."""
    d, ia = _index_along(input, dim, index, "index_fill")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(
                "index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                f"{value.ndim} dimension(s)."
            )
        value = to(value, input.dtype)
    if input.ndim and ia.size:
        # Each position written once, so that value's gradient counts it once, as torch's (which
        # sums the gradient over the unique indices).
        xp = backend.namespace(ia)
        ia = xp.unique(xp.where(ia < 0, ia + input.shape[d], ia))
    return _put(input, _along(input, d, ia), value)


def index_fill_(input: Tensor, dim: int, index: Tensor, value: Any) -> Tensor:
    return inplace(input, "add", lambda s: index_fill(s, dim, index, value))


def _index_tuple(input: Tensor, indices: Any) -> tuple[Any, ...]:
    if not isinstance(indices, (tuple, list)):
        raise TypeError("index_put(): argument 'indices' must be tuple of Tensors")
    if len(indices) > builtins.max(input.ndim, 1):
        raise IndexError(
            f"too many indices for tensor of dimension {input.ndim} (got {len(indices)})"
        )
    out: list[Any] = []
    for i in indices:
        if i is None:
            out.append(slice(None))
        elif isinstance(i, Tensor):
            out.append(i)
        else:
            raise TypeError("index_put(): indices must be Tensors or None")
    return tuple(out)


def index_put(input: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    """``input`` with ``values`` written (``accumulate``: added) at ``input[indices]``."""
    from .index import _masks_as_indices, _norm_index, check_index_bounds

    idx, _ = _norm_index(_index_tuple(input, indices))
    xa = input._array
    idx = _on_device_of(idx, xa)
    if backend.is_device_array(xa):  # See NOTE [Index bounds on CUDA] in ops/index.py
        idx = _masks_as_indices(xa, idx)
        check_index_bounds("index_put", xa, idx)
    if isinstance(values, Tensor) and values.dtype != input.dtype:
        raise RuntimeError(
            f"Index put requires the source and destination dtypes match, got {input.dtype} "
            f"for the destination and {values.dtype} for the source."
        )
    if not accumulate:
        return _put(input, idx, values)
    if not isinstance(values, Tensor):
        values = wrap(backend.namespace(input._array).asarray(values, dtype=input.dtype))
    return _add_at(input, idx, values)


def index_put_(input: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    return inplace(input, "add", lambda s: index_put(s, indices, values, accumulate))


def index_reduce(
    input: Tensor,
    dim: int,
    index: Tensor,
    source: Tensor,
    reduce: str,
    *,
    include_self: bool = True,
) -> Tensor:
    """``input`` with ``source[..., i, ...]`` combined into ``input[..., index[i], ...]`` by
    ``reduce`` ("prod", "mean", "amax", "amin")."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(
            "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got "
            f"{reduce}."
        )
    if input.dtype == dtypes.bool_ and (reduce == "mean" or not include_self):
        raise NotImplementedError("\"index_reduce\" not implemented for 'Bool'")
    d, ia = _index_along(input, dim, index, "index_reduce")
    _source_check(input, d, ia, source, "index_reduce")
    if input.ndim == 0:
        return _reduce_at(input, (Ellipsis,), reshape(source, ()), reduce, include_self)
    xp = backend.namespace(input._array)
    ia = xp.where(ia < 0, ia + input.shape[d], ia)
    full = _mesh(xp, tuple(source.shape), d, ia.reshape((-1,) + (1,) * (source.ndim - d - 1)))
    full = tuple(xp.broadcast_to(k, source.shape) for k in full)
    return _reduce_at(input, full, source, reduce, include_self)


def index_reduce_(
    input: Tensor,
    dim: int,
    index: Tensor,
    source: Tensor,
    reduce: str,
    *,
    include_self: bool = True,
) -> Tensor:
    return inplace(
        input,
        "mul",
        lambda s: index_reduce(s, dim, index, source, reduce, include_self=include_self),
    )


def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """``input`` with ``source``'s first elements written, in order, where ``mask`` (broadcast
    with input) is True."""
    if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool_:
        raise RuntimeError(
            "masked_scatter_ only supports boolean masks, but got mask with dtype "
            f"{getattr(mask, 'dtype', type(mask).__name__)}"
        )
    if source.dtype != input.dtype:
        raise RuntimeError(
            "masked_scatter: expected self and source to have same dtypes but got "
            f"{input.dtype} and {source.dtype}"
        )
    x, m = broadcast_tensors(input, mask)
    ma = m._array
    nz = backend.namespace(ma).nonzero(ma)
    k = int(nz[0].shape[0]) if nz else int(bool(ma))
    if k > source.numel():
        raise RuntimeError(
            "masked_scatter: expected source to have at least as many elements as "
            "the number of ones in mask"
        )
    x = contiguous(x) if x is not input else x
    if x._array.ndim == 0:
        return _put(x, (Ellipsis,), reshape(source, (-1,))[0]) if k else clone(x)
    return _put(x, tuple(nz), getitem(reshape(source, (-1,)), slice(0, k)))


def masked_scatter_(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    if tuple(backend.broadcast_shapes(input.shape, mask.shape)) != tuple(input.shape):
        raise RuntimeError(
            f"masked_scatter_: mask of shape {list(mask.shape)} cannot be broadcast to the "
            f"shape of self {list(input.shape)}"
        )
    return inplace(input, "add", lambda s: masked_scatter(s, mask, source))


def put(input: Tensor, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
    """``input`` read as 1-d with ``source`` written (``accumulate``: added) at ``index``."""
    xa = input._array
    ia = _index_array(index, "put", xa)
    _check_flat_index(ia, xa.size)
    if source.dtype != input.dtype:
        raise RuntimeError(
            f"put_(): self ({input.dtype}) and source ({source.dtype}) must have the same "
            "scalar type"
        )
    if source.numel() != ia.size:
        raise IndexError(
            f"put_(): Expected source and index to have the same number of elements, but got "
            f"source.numel() = {source.numel()}, index.numel() = {ia.size}"
        )
    flat = reshape(input, (-1,))
    src = reshape(source, (-1,))
    fi = (ia.reshape(-1),)
    out = _add_at(flat, fi, src) if accumulate else _put(flat, fi, src)
    return reshape(out, input.shape)


def put_(input: Tensor, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
    return inplace(input, "add", lambda s: put(s, index, source, accumulate))


# ----- select_scatter, slice_scatter, diagonal_scatter, as_strided_scatter -----
def _region_check(region: tuple[int, ...], src: Tensor, name: str) -> None:
    if tuple(src.shape) != tuple(region):
        raise RuntimeError(
            f"expected src to have a size equal to the slice of self. src size = "
            f"{list(src.shape)}, slice size = {list(region)}"
        )


def select_scatter(input: Tensor, src: Tensor, dim: int, index: int) -> Tensor:
    """``input`` with ``src`` written at ``input.select(dim, index)``."""
    v = select(input, dim, index)
    _region_check(v.shape, src, "select_scatter")
    d = norm_dim(int(dim), input.ndim)
    return _put(input, (*(slice(None),) * d, int(index) % input.shape[d], Ellipsis), src)


def slice_scatter(
    input: Tensor, src: Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Tensor:
    """``input`` with ``src`` written at ``input[..., start:end:step, ...]`` (along ``dim``)."""
    idx = _slice_index(input, dim, start, end, step)
    _region_check(input._array[idx].shape, src, "slice_scatter")
    return _put(input, idx, src)


def diagonal_scatter(
    input: Tensor, src: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1
) -> Tensor:
    """``input`` with ``src`` written at ``input.diagonal(offset, dim1, dim2)``."""
    v = diagonal(input, offset, dim1, dim2)
    _region_check(v.shape, src, "diagonal_scatter")
    nd = input.ndim
    d1, d2 = norm_dim(int(dim1), nd), norm_dim(int(dim2), nd)
    idx = _diag_index(backend.namespace(input._array), input.shape, int(offset), d1, d2)
    return _put(input, idx, src)


def as_strided_scatter(
    input: Tensor,
    src: Tensor,
    size: Sequence[int],
    stride: Sequence[int],
    storage_offset: int | None = None,
) -> Tensor:
    """``input`` (read in its contiguous layout) with ``src`` written at
    ``input.as_strided(size, stride, storage_offset)``."""
    sz, st = tuple(int(v) for v in size), tuple(int(v) for v in stride)
    _region_check(sz, src, "as_strided_scatter")
    n = input.numel()
    off = 0 if storage_offset is None else int(storage_offset)
    xp = backend.namespace(input._array)
    pos = _positions(xp, sz, st, off)
    if pos.size and int(pos.max()) >= n:
        raise RuntimeError(
            f"setStorage: sizes {list(sz)}, strides {list(st)}, storage offset {off} are out of "
            f"bounds for storage of size {n}"
        )
    flat = reshape(contiguous(input), (-1,))
    return reshape(_put(flat, (pos,), src), input.shape)


# ----- fill_diagonal_ -----
def fill_diagonal_(input: Tensor, fill_value: Any, wrap: bool = False) -> Tensor:
    """Write ``fill_value`` on the main diagonal of ``input`` (all dims equal when more than
    2); with ``wrap``, a tall matrix's diagonal starts again every ``cols + 1`` rows."""
    nd = input.ndim
    if nd < 2:
        raise RuntimeError("dimensions must larger than 1")
    s = input.shape
    if nd > 2 and len(set(s)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    xp = backend.namespace(input._array)
    if nd == 2:
        rows, cols = s
        step = cols + 1
        end = rows * cols if (wrap and rows > cols + 1) else builtins.min(rows, cols) * cols
        flat = xp.arange(0, end, step)
        if not wrap:
            flat = flat[: builtins.min(rows, cols)]
        idx: tuple[Any, ...] = (flat // cols, flat % cols)
    else:
        i = xp.arange(s[0])
        idx = (i,) * nd
    return inplace(input, "add", lambda t_: _put(t_, idx, fill_value))


def sum_to_size(input: Tensor, *size: Any) -> Tensor:
    """``input`` summed down to ``size`` (which must broadcast to input's shape)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    target = tuple(int(v) for v in size)
    shape = input.shape
    try:
        ok = tuple(backend.broadcast_shapes(target, shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok or len(target) > len(shape):
        raise RuntimeError(
            f"size {{{', '.join(map(str, target))}}} is not expandable to size "
            f"{{{', '.join(map(str, shape))}}}."
        )
    lead = len(shape) - len(target)
    axes = tuple(builtins.range(lead)) + tuple(
        lead + i for i, n in enumerate(target) if n == 1 and shape[lead + i] != 1
    )
    out = sum(input, axes, keepdim=True) if axes else input
    return reshape(out, target) if tuple(out.shape) != target else out


# ----- tensor facts at torch level (the Tensor methods' bodies are in _tensor.py) -----
def get_device(input: Tensor) -> int:
    return input.get_device()


def is_distributed(input: Tensor) -> bool:
    return input.is_distributed()


def is_neg(input: Tensor) -> bool:
    return input.is_neg()


def is_signed(input: Tensor) -> bool:
    return input.is_signed()


def resolve_neg(input: Tensor) -> Tensor:
    return input.resolve_neg()


def resize_as_(input: Tensor, the_template: Tensor, *, memory_format: Any = None) -> Tensor:
    return input.resize_as_(the_template)


# ----- the array reductions of scatter_reduce (See NOTE [scatter_reduce's prod, amax and amin])
def _identity(dtype: Any, reduce: str) -> Any:
    if reduce == "prod":
        return 1
    if dtype.kind == "b":
        return reduce == "amin"
    if dtype.kind == "f":
        return -math.inf if reduce == "amax" else math.inf
    info = backend.xp.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


_UFUNC = {"prod": "multiply", "amax": "maximum", "amin": "minimum"}


@backend.silent_fp  # See NOTE [Silent floating point]
def scatter_reduce_array(
    x: Any, index: tuple[Any, ...], src: Any, reduce: str, include_self: bool
) -> Any:
    """``x`` with ``src`` combined in at ``index`` by ``reduce`` ("prod", "amax", "amin")."""
    xp = backend.namespace(x)
    out = x.copy()
    if not include_self:
        out[index] = _identity(x.dtype, reduce)
    ufunc = getattr(xp, _UFUNC[reduce])
    try:
        ufunc.at(out, index, src)
    except NotImplementedError:  # CuPy has no multiply.at: one round per repeated target
        if index[0] is Ellipsis:
            out[...] = ufunc(out, src)
            return out
        lin = _targets(x.shape, index)
        vals = xp.broadcast_to(src, lin.shape).reshape(-1)
        rank = _ranks(lin).reshape(-1)
        lin = lin.reshape(-1)
        flat = out.reshape(-1)
        for k in builtins.range(int(rank.max()) + 1 if rank.size else 0):
            sel = rank == k
            flat[lin[sel]] = ufunc(flat[lin[sel]], vals[sel])
    return out


def set_(
    input: Tensor,
    source: Any = None,
    storage_offset: int = 0,
    size: Sequence[int] | None = None,
    stride: Sequence[int] | None = None,
) -> Tensor:
    """``Tensor.set_``: ``input`` takes ``source``'s memory (with ``size``/``stride``/
    ``storage_offset``: a strided view of it), or an empty array when there is no source. The
    two share their elements, not their version counters, as torch's. Not differentiable."""
    if type(input._vc) is not list:  # See NOTE [Inference tensors]
        check_writable(input)
    if _grad_enabled.get():
        check_inplace(input)
    if source is None:
        new = backend.empty((0,), input.dtype, input.device)
    elif isinstance(source, Tensor):
        if source.dtype != input.dtype:
            raise RuntimeError(
                f"Could not set tensor of type {source.dtype} to a tensor of type {input.dtype}"
            )
        if source.device != input.device:
            raise RuntimeError(
                f'Attempted to set the storage of a tensor on device "{input.device}" to a '
                f'storage on different device "{source.device}".  This is no longer allowed; '
                "the devices must match."
            )
        if _grad_enabled.get() and source.requires_grad:
            raise RuntimeError(
                "set_: the source requires grad, and set_ is not differentiable (torch's backward "
                "raises 'derivative for set_ is not implemented'); call it under no_grad() or "
                "pass source.detach()"
            )
        if size is None:
            new = source._array
        else:
            st = stride
            if st is None:  # C-contiguous strides for ``size``
                acc, rev = 1, []
                for n in reversed(tuple(size)):
                    rev.append(acc)
                    acc *= int(n)
                st = tuple(reversed(rev))
            new = as_strided(source.detach(), size, st, storage_offset)._array
    else:
        raise TypeError(
            f"set_(): argument 'source' must be a Tensor or None, not {type(source).__name__}"
        )
    input._array = new
    input._vc[0] += 1
    return input
