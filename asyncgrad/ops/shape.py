"""Shape ops and views: reshape/view, transpose/permute, expand, and joining and splitting."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from .. import backend
from .._tensor import Tensor
from ..graph.grad_mode import _grad_enabled
from ._record import OPS, arr, as_view, make, record, wrap
from .convert import to
from .reduce import dims

namespace = backend.namespace


def _infer_shape(sizes: Any, numel: int) -> tuple[int, ...]:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = sizes[0]
    shape = tuple(int(s) for s in sizes)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def reshape_to(x: Tensor, shape: tuple[int, ...], must_view: bool) -> Tensor:
    """``x`` reshaped to ``shape`` (a view when the layout allows; with ``must_view``, an error
    otherwise, as torch's ``view``)."""
    xa = x._array
    if must_view:
        out = backend.reshape_view(xa, shape)
        if out is None:
            raise RuntimeError(
                "view size is not compatible with input tensor's size and stride (at least one "
                "dimension spans across two contiguous subspaces). Use .reshape(...) instead."
            )
    else:
        out = xa.reshape(shape)
    t = make(OPS["reshape"], out, (x,), {"shape": shape, "in_shape": xa.shape})
    if backend.shares_base(out, xa):
        as_view(t, x, "reshape", {"shape": shape})
    return t


def reshape(input: Tensor, *shape: Any) -> Tensor:
    return reshape_to(input, _infer_shape(shape, input._array.size), False)


def view(input: Tensor, *shape: Any) -> Tensor:
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        return to(input, shape[0])
    return reshape_to(input, _infer_shape(shape, input._array.size), True)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    s = input.shape
    if not s:
        return reshape(input, (1,))
    a, b = start_dim % len(s), end_dim % len(s)
    n = 1
    for d in s[a : b + 1]:
        n *= d
    return reshape(input, (*s[:a], n, *s[b + 1 :]))


def unflatten(input: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    s = input.shape
    d = dim % len(s)
    new = _infer_shape((tuple(sizes),), s[d])
    return reshape(input, (*s[:d], *new, *s[d + 1 :]))


def squeeze(input: Tensor, dim: Any = None) -> Tensor:
    s = input.shape
    if dim is None:
        new = tuple(d for d in s if d != 1)
    else:
        ds = dims(dim, len(s)) or ()
        new = tuple(d for i, d in enumerate(s) if not (i in ds and d == 1))
    return reshape_to(input, new, False)


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    s = input.shape
    nd = len(s) + 1
    if not -nd <= dim < nd:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})"
        )
    d = dim % nd
    return reshape_to(input, (*s[:d], 1, *s[d:]), False)


def _view_op(x: Tensor, name: str, out: Any, params: dict[str, Any]) -> Tensor:
    t = make(OPS[name], out, (x,), params)
    return as_view(t, x, name, params)


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    xa = input._array
    nd = builtins.max(xa.ndim, 1)
    for d in (dim0, dim1):
        if not -nd <= d < nd:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                f"but got {d})"
            )
    if xa.ndim < 2:
        return _view_op(input, "permute", xa.transpose(), {"dims": tuple(range(xa.ndim))})
    d0, d1 = dim0 % nd, dim1 % nd
    return _view_op(input, "transpose", xa.swapaxes(d0, d1), {"dim0": d0, "dim1": d1})


def t(input: Tensor) -> Tensor:
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return transpose(input, 0, 1) if input.ndim == 2 else view(input, input.shape)


def permute(input: Tensor, *dims: Any) -> Tensor:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    nd = input.ndim
    dd = tuple(int(d) % builtins.max(nd, 1) for d in dims)
    if sorted(dd) != list(range(nd)):
        raise RuntimeError(
            f"permute(sparse_coo): number of dimensions in the tensor input does not match the "
            f"length of the desired ordering of dimensions i.e. input.dim() = {nd} is not equal "
            f"to len(dims) = {len(dims)}"
            if len(dd) != nd
            else f"permute(): duplicate dims are not allowed, got {list(dims)}"
        )
    return _view_op(input, "permute", input._array.transpose(dd), {"dims": dd})


def expand(input: Tensor, *sizes: Any) -> Tensor:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    xa = input._array
    lead = len(sizes) - xa.ndim
    if lead < 0:
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to the "
            f"number of dimensions in the tensor ({xa.ndim})"
        )
    shape = tuple(
        xa.shape[i - lead] if (s == -1 and i >= lead) else int(s) for i, s in enumerate(sizes)
    )
    try:
        out = namespace(xa).broadcast_to(xa, shape)
    except ValueError:
        raise RuntimeError(
            f"The expanded size of the tensor must match the existing size at non-singleton "
            f"dimensions. Target sizes: {list(sizes)}. Tensor sizes: {list(xa.shape)}"
        ) from None
    return _view_op(input, "expand", out, {"shape": shape})


def expand_as(input: Tensor, other: Tensor) -> Tensor:
    return expand(input, other.shape)


def broadcast_to(input: Tensor, shape: Sequence[int]) -> Tensor:
    return expand(input, tuple(shape))


# ----------------------------------------------------------------------------- join and split
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    nd = tensors[0].ndim
    d = dim % builtins.max(nd, 1)
    arrs = [arr(x) for x in tensors]
    try:
        out = namespace(arrs[0]).concatenate(arrs, axis=d)
    except ValueError as e:
        raise RuntimeError(
            f"torch.cat(): Sizes of tensors must match except in dimension {d}: "
            f"got shapes {[tuple(a.shape) for a in arrs]} ({e})"
        ) from None
    return make(OPS["cat"], out, tensors, {"dim": d, "sizes": [a.shape[d] for a in arrs]})


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    arrs = [arr(x) for x in tensors]
    if len({a.shape for a in arrs}) > 1:
        raise RuntimeError(
            f"stack expects each tensor to be equal size, but got {[list(a.shape) for a in arrs]}"
        )
    d = dim % (arrs[0].ndim + 1)
    out = namespace(arrs[0]).stack(arrs, axis=d)
    return make(OPS["stack"], out, tensors, {"dim": d, "n": len(arrs)})


def _multi_view(
    input: Tensor,
    name: str,
    arrays: list[Any],
    params: dict[str, Any],
    indices: list[tuple[Any, ...]],
) -> tuple[Tensor, ...]:
    outs = [wrap(a) for a in arrays]
    if _grad_enabled.get():
        record(OPS[name], outs, (input,), params)
    for o, idx in zip(outs, indices, strict=True):
        as_view(o, input, "getitem", {"index": idx})
    return tuple(outs)


def split(input: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    xa = input._array
    d = dim % builtins.max(xa.ndim, 1)
    n = xa.shape[d]
    if isinstance(split_size_or_sections, (int, backend.integer)):
        s = int(split_size_or_sections)
        if s <= 0:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got {s}")
        sizes = [builtins.min(s, n - i) for i in range(0, n, s)] or [0]
    else:
        sizes = [int(v) for v in split_size_or_sections]
        if builtins.sum(sizes) != n:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                f"at dimension {d}), but got split_sizes={sizes}"
            )
    lead = (slice(None),) * d
    idxs, arrs, start = [], [], 0
    for s in sizes:
        idx = (*lead, slice(start, start + s), Ellipsis)
        idxs.append(idx)
        arrs.append(xa[idx])
        start += s
    params = {"dim": d, "sizes": sizes, "in_shape": xa.shape}
    return _multi_view(input, "split", arrs, params, idxs)


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = input.shape[dim]
    size = -(-n // chunks) if n else 1
    return split(input, builtins.max(size, 1), dim)


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    xa = input._array
    d = dim % builtins.max(xa.ndim, 1)
    lead = (slice(None),) * d
    idxs = [(*lead, i, Ellipsis) for i in range(xa.shape[d])]
    arrs = [xa[i] for i in idxs]
    return _multi_view(input, "unbind", arrs, {"dim": d, "in_shape": xa.shape}, idxs)
