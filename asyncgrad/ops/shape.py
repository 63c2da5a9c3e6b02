"""Shape ops and views: reshape/view, transpose/permute, expand, and joining and splitting."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..graph.grad_mode import _grad_enabled
from ..rules import keeps_for_backward
from ._record import OPS, arr, as_view, make, record, wrap
from .creation import scalar_name
from .index import getitem, index_add_zeros, norm_dim, take
from .pointwise import add, masked_fill
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
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int, backend.integer)):
        return view_dtype(input, shape[0])
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
    if type(out) is backend.ndarray and xa.flags.writeable:
        # NOTE [Writing through an expanded view]
        # As torch's, an expanded tensor is a view its writes go through: ``e[0] = v`` writes
        # into x, and the in-place ops refuse only a written region in which several elements
        # share one location (See _overlaps_itself in ops/inplace.py). NumPy's broadcast view
        # is read-only; it is made writable where x is.
        try:
            out.flags.writeable = True
        except ValueError:  # a NumPy that refuses: writes raise, as before
            pass
    return _view_op(input, "expand", out, {"shape": shape})


def expand_as(input: Tensor, other: Tensor) -> Tensor:
    return expand(input, other.shape)


def broadcast_to(input: Tensor, shape: Sequence[int]) -> Tensor:
    return expand(input, tuple(shape))


# ----------------------------------------------------------------------------- join and split
def join_dtype(arrs: Sequence[Any]) -> Any:
    """torch's result dtype of joining ``arrs`` (cat, stack): the widest floating dtype among
    them if any (an int64 with a float32 gives float32, where NumPy widens to float64), else
    NumPy's promotion of the integer and bool dtypes."""
    xp = namespace(arrs[0])
    dts = [a.dtype for a in arrs]
    floats = [d for d in dts if d.kind in "fc"]
    return xp.result_type(*(floats or dts))


def _joined(arrs: list[Any]) -> list[Any]:
    dt = join_dtype(arrs)
    return [a if a.dtype == dt else a.astype(dt) for a in arrs]


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, x in enumerate(tensors):
        if x is None or isinstance(x, (bool, int, float, complex)):
            raise TypeError(
                f"expected Tensor as element {i} in argument 0, but got {type(x).__name__}"
            )
    all_arrs = _joined([arr(x) for x in tensors])
    # torch still accepts legacy empty 1-D tensors (shape (0,)) beside tensors of any rank: they
    # are skipped (their dtype still joins the result's); their gradient is an empty (0,) array.
    legacy = [a.ndim == 1 and a.shape[0] == 0 for a in all_arrs]
    arrs = [a for a, skip in zip(all_arrs, legacy, strict=True) if not skip]
    if not arrs:
        arrs = all_arrs[:1]
        legacy[0] = False
    nd = arrs[0].ndim
    d = dim % builtins.max(nd, 1)
    try:
        out = namespace(arrs[0]).concatenate(arrs, axis=d)
    except ValueError as e:
        other = [a.ndim for a in arrs if a.ndim != arrs[0].ndim]
        if other:
            raise RuntimeError(
                f"Tensors must have same number of dimensions: got {arrs[0].ndim} and {other[0]}"
            ) from None
        raise RuntimeError(
            f"torch.cat(): Sizes of tensors must match except in dimension {d}: "
            f"got shapes {[tuple(a.shape) for a in arrs]} ({e})"
        ) from None
    sizes = [None if skip else a.shape[d] for a, skip in zip(all_arrs, legacy, strict=True)]
    return make(OPS["cat"], out, tensors, {"dim": d, "sizes": sizes})


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    arrs = _joined([arr(x) for x in tensors])
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
    if xa.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = norm_dim(int(dim), xa.ndim)
    lead = (slice(None),) * d
    idxs = [(*lead, i, Ellipsis) for i in range(xa.shape[d])]
    arrs = [xa[i] for i in idxs]
    return _multi_view(input, "unbind", arrs, {"dim": d, "in_shape": xa.shape}, idxs)


# ----- narrow, select, flip, roll, repeat, tile, tril, triu, pad, view(dtype) -----
# See NOTE [Index ops are getitem] in index.py: these record getitem (narrow and select as views,
# through the view machinery of basic indexing), where (tril, triu) or their own rule (repeat).
def _dim(input: Tensor, dim: Any, name: str) -> int:
    if input.ndim == 0 and name:
        raise RuntimeError(f"{name}() cannot be applied to a 0-dim tensor.")
    return norm_dim(int(dim), input.ndim)


def narrow(input: Tensor, dim: int, start: Any, length: int) -> Tensor:
    d = _dim(input, dim, "narrow")
    n = input.shape[d]
    if isinstance(start, Tensor):
        if start.ndim != 0 or start._array.dtype.kind not in "iu":
            raise RuntimeError("start must be an 0-dim integral Tensor.")
        start = start.item()
    start = int(start)
    if not -n <= start <= n:
        raise IndexError(
            f"start out of range (expected to be in range of [{-n}, {n}], but got {start})"
        )
    if start < 0:
        start += n
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if start + length > n:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return getitem(input, (*(slice(None),) * d, slice(start, start + length)))


def select(input: Tensor, dim: int, index: int) -> Tensor:
    d = _dim(input, dim, "select")
    n = input.shape[d]
    index = int(index)
    if not -n <= index < n:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {list(input.shape)} at "
            f"dimension {d}"
        )
    return getitem(input, (*(slice(None),) * d, index % n))


def _dims_arg(dims: Any, ndim: int) -> tuple[int, ...]:
    ds = (dims,) if isinstance(dims, (int, backend.integer)) else tuple(dims)
    out = tuple(norm_dim(int(d), ndim) for d in ds)
    for i, d in enumerate(out):
        if d in out[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return out


def flip(input: Tensor, dims: Any) -> Tensor:
    ds = _dims_arg(dims, input.ndim)
    if input.ndim == 0:
        return take(input, (Ellipsis,))
    idx = tuple(slice(None, None, -1) if d in ds else slice(None) for d in range(input.ndim))
    return take(input, idx)


def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    sh = (shifts,) if isinstance(shifts, (int, backend.integer)) else tuple(shifts)
    if dims is None:
        if len(sh) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(sh)}, dims:0")
        return reshape(roll(flatten(input), sh, 0), input.shape)
    ds = (dims,) if isinstance(dims, (int, backend.integer)) else tuple(dims)
    if len(sh) != len(ds):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(sh)}, dims:{len(ds)}")
    ds = tuple(norm_dim(int(d), input.ndim) for d in ds)
    xp = namespace(input._array)
    out = input
    for s, d in zip(sh, ds, strict=True):
        n = input.shape[d]
        if n == 0 or int(s) % n == 0:
            continue
        perm = (xp.arange(n) - int(s)) % n
        out = take(out, (*(slice(None),) * d, perm, Ellipsis))
    return out if out is not input else take(input, (Ellipsis,))


def repeat(input: Tensor, *sizes: Any) -> Tensor:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    reps = tuple(int(s) for s in sizes)
    nd = input.ndim
    if len(reps) < nd:
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions "
            "of tensor"
        )
    x = reshape(input, (1,) * (len(reps) - nd) + input.shape) if len(reps) > nd else input
    if any(r < 0 for r in reps):
        out = [n * r for n, r in zip(x.shape, reps, strict=True)]
        raise RuntimeError(
            f"Trying to create tensor with negative dimension {builtins.min(out)}: {out}"
        )
    xa = x._array
    out = namespace(xa).tile(xa, reps) if reps else xa.copy()
    return make(OPS["repeat"], out, (x,), {"reps": reps, "in_shape": xa.shape})


def tile(input: Tensor, dims: Sequence[int]) -> Tensor:
    reps = tuple(int(d) for d in dims)
    return repeat(input, (1,) * (input.ndim - len(reps)) + reps)


def _triangle(input: Tensor, diagonal: int, name: str) -> Tensor:
    if input.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    xa = input._array
    xp = namespace(xa)
    m, n = xa.shape[-2:]
    above = xp.arange(n) - xp.arange(m).reshape(m, 1)  # column - row
    drop = above > diagonal if name == "tril" else above < diagonal
    out = masked_fill(input, drop, 0)
    keeps_for_backward(out._grad_fn, False)  # torch's TrilBackward0 saves no tensor
    return out


def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(input, diagonal, "tril")


def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(input, diagonal, "triu")


def _pad_index(xp: Any, n: int, lo: int, hi: int, mode: str) -> Any:
    """The source positions of a dimension of size ``n`` padded by ``lo`` and ``hi``."""
    if mode == "circular":
        return xp.arange(-builtins.max(lo, 0), n + builtins.max(hi, 0)) % n
    i = xp.arange(-lo, n + hi)
    if mode == "replicate":
        return xp.clip(i, 0, n - 1)
    # reflect: mirror about the first and last elements, without repeating them
    period = 2 * (n - 1)
    i = xp.abs(i) % period if period else i * 0
    return xp.where(i >= n, period - i, i)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: Any = None) -> Tensor:
    """torch.nn.functional.pad: ``pad`` holds (left, right) pairs from the last dimension
    backward; negative amounts crop."""
    p = [int(v) for v in pad]
    if len(p) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    k = len(p) // 2
    nd = input.ndim
    if k > nd:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input "
            "dimension but got padding length "
            f"{len(p)} and input of dimension {nd}"
        )
    pairs = {nd - 1 - j: (p[2 * j], p[2 * j + 1]) for j in range(k)}
    if mode == "constant":
        return _pad_constant(input, pairs, 0.0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value not in (None, 0):
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    if not 1 <= k <= 3 or nd not in (k + 1, k + 2):
        raise NotImplementedError(f"Padding size {len(p)} is not supported for {nd}D input tensor.")
    xp = namespace(input._array)
    out = input
    for d, (lo, hi) in sorted(pairs.items()):
        n = input.shape[d]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input "
                f"dimension, but got: padding ({lo}, {hi}) at dimension {d} of input "
                f"{list(input.shape)}"
            )
        if mode == "circular" and (lo > n or hi > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if n == 0 and (lo > 0 or hi > 0):
            raise RuntimeError(
                f"input tensor has an empty dimension {d}: cannot pad it in mode {mode}"
            )
        if mode == "circular":  # negative amounts crop first, then it wraps what is left
            start, stop = builtins.max(-lo, 0), n - builtins.max(-hi, 0)
            src = xp.arange(start, stop)[_pad_index(xp, stop - start, lo, hi, mode)]
        else:
            src = _pad_index(xp, n, lo, hi, mode)
        out = take(out, (*(slice(None),) * d, src, Ellipsis))
    keeps_for_backward(out._grad_fn)  # as torch's padding nodes, freed after one backward
    return out


def _pad_constant(input: Tensor, pairs: dict[int, tuple[int, int]], value: Any) -> Tensor:
    crop: list[slice] = []
    place: list[slice] = []
    shape: list[int] = []
    for d, n in enumerate(input.shape):
        lo, hi = pairs.get(d, (0, 0))
        if n + lo + hi < 0:
            raise RuntimeError(
                f"The input size {n}, plus negative padding {lo} and {hi} resulted in a "
                f"negative output size, which is invalid. Check dimension {d} of your input."
            )
        start, stop = builtins.max(-lo, 0), n - builtins.max(-hi, 0)
        kept = builtins.max(stop - start, 0)
        crop.append(slice(start, start + kept))
        place.append(slice(builtins.max(lo, 0), builtins.max(lo, 0) + kept))
        shape.append(n + lo + hi)
    x = input
    if any(c != slice(0, n) for c, n in zip(crop, input.shape, strict=True)):
        x = getitem(input, tuple(crop))
    idx = (*place, Ellipsis)
    out = index_add_zeros(x, idx, tuple(shape))
    if value == 0:
        return out
    xa = x._array
    fill = namespace(xa).full(tuple(shape), value, dtype=xa.dtype)
    fill[idx] = 0
    return add(out, fill)


def view_dtype(input: Tensor, dtype: Any) -> Tensor:
    """``input``'s bits read as ``dtype`` (torch's ``Tensor.view(dtype)``): no gradient; the
    result shares input's memory and version counter."""
    xa = input._array
    dt = dtypes.to_dtype(dtype)
    a, b = xa.dtype.itemsize, dt.itemsize
    if a != b:
        what = f"to view {scalar_name(xa.dtype)} as {scalar_name(dt)} (different element sizes)"
        if xa.ndim == 0:
            raise RuntimeError(f"self.dim() cannot be 0 {what}")
        if xa.shape[-1] != 1 and xa.strides[-1] != a:
            raise RuntimeError(f"self.stride(-1) must be 1 {what}, but got {xa.strides[-1] // a}")
        if b > a and xa.shape[-1] % (b // a):
            raise RuntimeError(
                f"self.size(-1) must be divisible by {b // a} {what}, but got {xa.shape[-1]}"
            )
    try:
        out = xa.view(dt)
    except ValueError as e:
        raise RuntimeError(
            f"view(dtype): cannot view {scalar_name(xa.dtype)} as {scalar_name(dt)} here: {e}"
        ) from None
    t = wrap(out)
    t._vc = input._vc
    return t
