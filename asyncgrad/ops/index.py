"""Indexing: ``t[index]`` (a view for basic indices) and ``t[index] = value``."""

from __future__ import annotations

import builtins
from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..rules import keeps_for_backward
from ._record import OPS, arr, as_view, make, wrap
from .inplace import copy_, inplace
from .pointwise import add


def _norm_index(index: Any) -> tuple[tuple[Any, ...], bool]:
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    advanced = False
    for i in index:
        if isinstance(i, range):  # as torch: a range indexes like the list of its values
            i = list(i)
        if isinstance(i, Tensor):
            i = i._array
            if i.dtype.kind not in "biu":
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            advanced = True
        elif isinstance(i, list) or backend.is_array(i):
            i = backend.asarray(i)
            advanced = True
        elif isinstance(i, (bool, backend.bool_scalar)):
            advanced = True
        elif not (i is None or i is Ellipsis or isinstance(i, (int, backend.integer, slice))):
            raise IndexError(
                "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables "
                f"are valid indices (got {type(i).__name__})"
            )
        out.append(i)
    if not advanced and Ellipsis not in out:
        out.append(Ellipsis)  # keeps all-int indexing a 0-d *view*, not a NumPy scalar copy
    return tuple(out), advanced


def _on_device_of(idx: tuple[Any, ...], xa: Any) -> tuple[Any, ...]:
    """Index arrays on the device of the indexed array ``xa``: host index arrays are copied to a
    CUDA device, as torch does; device index arrays for a host array are an error."""
    if type(xa) is backend.ndarray:
        for i in idx:
            if backend.is_device_array(i):
                raise RuntimeError(
                    f"indices should be either on cpu or on the same device as the indexed "
                    f"tensor (cpu), got indices on {backend.device_of(i)}"
                )
        return idx
    dev = backend.device_of(xa)
    return tuple(backend.to_device(i, dev) if backend.is_array(i) else i for i in idx)


# NOTE [Index bounds on CUDA]
# NumPy raises IndexError for an integer index array out of range; CuPy raises nothing and takes
# each index modulo the length of its dimension, so x[[0, 5]] of 3 rows would quietly read rows 0
# and 2. Before indexing a CUDA array with integer arrays, then, the smallest and largest index of
# each are read back (one host synchronisation for the whole index, in the forward; the README
# lists it) and an index outside [-size, size) raises torch's IndexError, naming the op. Boolean
# masks become integer indices there too (``_masks_as_indices``). The CPU path does nothing more:
# NumPy's own check raises.
def _width(k: Any) -> int:
    """How many dimensions of the indexed array the index ``k`` takes."""
    if k is None or k is Ellipsis or isinstance(k, (bool, backend.bool_scalar)):
        return 0
    if backend.is_array(k) and k.dtype.kind == "b":
        return int(k.ndim)
    return 1


def _index_dims(ndim: int, idx: tuple[Any, ...]) -> list[tuple[Any, int]]:
    """The integer index arrays of ``idx`` with the dimension each indexes (``idx`` as
    ``_norm_index`` makes it)."""
    used = builtins.sum(_width(k) for k in idx)
    out: list[tuple[Any, int]] = []
    dim = 0
    for k in idx:
        if k is Ellipsis:
            dim += ndim - used
            continue
        if backend.is_array(k) and k.dtype.kind in "iu" and k.size and dim < ndim:
            out.append((k, dim))  # (beyond ndim: indexing raises "too many indices")
        dim += _width(k)
    return out


def _masks_as_indices(xa: Any, idx: tuple[Any, ...]) -> tuple[Any, ...]:
    """``idx`` with each boolean mask array replaced by the integer index arrays of its True
    elements (``nonzero``), for the CUDA array ``xa``: the same selection, read from the device
    once in the forward (as CuPy's masked indexing does anyway), so that the backward scatters by
    integer indices without reading the device (a mask would make it wait)."""
    if not any(backend.is_array(k) and k.dtype.kind == "b" and k.ndim for k in idx):
        return idx
    used = builtins.sum(_width(k) for k in idx)
    out: list[Any] = []
    dim = 0
    for pos, k in enumerate(idx):
        if k is Ellipsis:
            dim += xa.ndim - used
        elif backend.is_array(k) and k.dtype.kind == "b" and k.ndim:
            if tuple(k.shape) != tuple(xa.shape[dim : dim + k.ndim]):
                raise IndexError(
                    f"The shape of the mask {list(k.shape)} at index {pos} does not match the "
                    f"shape of the indexed tensor {list(xa.shape)} at index {dim}"
                )
            out.extend(k.nonzero())  # the host synchronisation
            dim += k.ndim
            continue
        out.append(k)
        dim += _width(k)
    return tuple(out)


def check_index_bounds(op: str, xa: Any, idx: tuple[Any, ...]) -> None:
    """Raise torch's IndexError where an integer index array in ``idx`` is out of range for the
    CUDA array ``xa``, which CuPy would wrap around (See NOTE [Index bounds on CUDA])."""
    if not backend.is_device_array(xa):
        return
    arrays = _index_dims(xa.ndim, idx)
    if not arrays:
        return
    xp = backend.namespace(xa)
    ends = xp.stack([xp.stack([k.min(), k.max()]).astype(dtypes.int64) for k, _ in arrays])
    host = backend.to_device(ends, backend.CPU)  # the host synchronisation
    for (_, dim), (lo, hi) in zip(arrays, host.tolist(), strict=True):
        n = xa.shape[dim]
        bad = hi if hi >= n else lo if lo < -n else None
        if bad is not None:
            raise IndexError(
                f"index {bad} is out of bounds for dimension {dim} with size {n} ({op} of a "
                f"tensor of shape {tuple(xa.shape)} on {backend.device_of(xa)})"
            )


def getitem(input: Tensor, index: Any) -> Tensor:
    return getitem_for("getitem", input, index)


def getitem_for(op: str, input: Tensor, index: Any) -> Tensor:
    """``input[index]``, for ``op`` (which an index out of range names)."""
    if isinstance(index, _Strided):  # See NOTE [Strided views] in ops/views.py
        from .views import as_strided

        return as_strided(input, index.size, index.stride, index.offset)
    idx, advanced = _norm_index(index)
    xa = input._array
    if advanced:
        idx = _on_device_of(idx, xa)
        if backend.is_device_array(xa):
            idx = _masks_as_indices(xa, idx)
            check_index_bounds(op, xa, idx)
    try:
        out = backend.take_runs(xa, idx) if advanced else None
        if out is None:
            out = xa[idx]
    except IndexError as e:
        raise IndexError(f"{e} (indexing a tensor of shape {tuple(xa.shape)})") from None
    t = make(OPS["getitem"], out, (input,), {"index": idx, "in_shape": xa.shape})
    if not advanced:
        as_view(t, input, "getitem", {"index": idx})
    else:
        keeps_for_backward(t._grad_fn)  # torch's IndexBackward0 saves the indices
    return t


class _Strided:
    """The view chain's step of an ``as_strided`` view (``("getitem", {"index": this})``): a
    replay on a Tensor goes through ``getitem``, which makes the view again (See NOTE [Strided
    views] in ops/views.py)."""

    __slots__ = ("offset", "size", "stride")

    def __init__(self, size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> None:
        self.size, self.stride, self.offset = size, stride, offset

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "asyncgrad cannot differentiate an in-place op on an as_strided or unfold view (torch "
            "can): clone() the view first"
        )


def index_add_zeros(g: Tensor, index: tuple[Any, ...], shape: tuple[int, ...]) -> Tensor:
    """Zeros of ``shape`` with ``g`` added at ``index``: the backward of ``getitem``, recorded so
    that double backward sees it."""
    z = backend.index_add_zeros(g._array, index, shape)
    return make(OPS["index_add_zeros"], z, (g,), {"index": index, "shape": shape})


def setitem(input: Tensor, index: Any, value: Any) -> None:
    idx, advanced = _norm_index(index)
    if not advanced:
        copy_(getitem(input, idx), value)
        return
    xa = input._array
    idx = _on_device_of(idx, xa)
    if backend.is_device_array(xa):
        idx = _masks_as_indices(xa, idx)
        check_index_bounds("setitem", xa, idx)
    inplace(input, "index_put", lambda s: _index_put(s, idx, value))


def _index_put(x: Tensor, idx: tuple[Any, ...], value: Any) -> Tensor:
    out = x._array.copy()
    out[idx] = arr(value)
    t = make(OPS["index_put"], out, (x, value), {"index": idx})
    keeps_for_backward(t._grad_fn)  # torch's IndexPutBackward0 saves the indices
    return t


# ----- gather, scatter_add, index_select, one_hot -----
# NOTE [Index ops are getitem]
# gather, index_select, flip, roll, repeat and pad (reflect, replicate, circular) are advanced
# (or basic) indexing with an index built from the op's arguments: they record a ``getitem``
# node, whose backward (``index_add_zeros``, repeated positions adding up) is itself
# differentiable, so one rule serves them all to any order. scatter_add is the same backward
# used forward: ``self + index_add_zeros(src, index)``. The index arrays are made on the device
# of the indexed array (see ``_on_device_of``).


def take(input: Tensor, idx: tuple[Any, ...]) -> Tensor:
    """``input[idx]`` as a new tensor (never a view), recorded as ``getitem``; ``idx`` holds
    slices, ints and index arrays on input's device."""
    xa = input._array
    out = backend.take_runs(xa, idx)  # by slices, where the index is a few runs
    if out is None:
        out = xa[idx]
        if backend.shares_base(out, xa):
            out = out.copy()
    return make(OPS["getitem"], out, (input,), {"index": idx, "in_shape": xa.shape})


def norm_dim(dim: int, ndim: int) -> int:
    """``dim`` in ``[0, ndim)`` (a 0-d tensor has one dimension to name), with torch's error."""
    nd = builtins.max(ndim, 1)
    if not -nd <= dim < nd:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})"
        )
    return dim % nd


def _index_array(index: Any, name: str, xa: Any) -> Any:
    if not isinstance(index, Tensor):
        raise TypeError(f"{name}(): argument 'index' must be Tensor, not {type(index).__name__}")
    ia = index._array
    if ia.dtype.kind not in "iu":
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    return _on_device_of((ia,), xa)[0]


def _mesh(xp: Any, shape: tuple[int, ...], dim: int, ia: Any) -> tuple[Any, ...]:
    """The advanced index that picks ``ia[..., i, ...]`` along ``dim`` and ``i`` along every other
    dimension, broadcast over ``shape`` (the index's shape)."""
    out = []
    for d, n in enumerate(shape):
        if d == dim:
            out.append(ia)
        else:
            out.append(xp.arange(n).reshape((n,) + (1,) * (len(shape) - d - 1)))
    return tuple(out)


def _check_bounds(ia: Any, n: int, dim: int) -> None:
    if ia.size and bool(((ia < 0) | (ia >= n)).any()):
        bad = int(ia[(ia < 0) | (ia >= n)].ravel()[0])
        raise RuntimeError(f"index {bad} is out of bounds for dimension {dim} with size {n}")


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    xa = input._array
    ia = _index_array(index, "gather", xa)
    if ia.size == 0:
        # As torch's: an empty index skips the shape checks; the result is empty, of its shape.
        norm_dim(dim, builtins.max(xa.ndim, 1))
        x1 = getitem(input, (None,)) if xa.ndim == 0 else input
        return take(x1, (ia,) * x1.ndim)
    if builtins.max(ia.ndim, 1) != builtins.max(xa.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    if ia.ndim != xa.ndim:
        # As torch's: a 0-d input or index counts as 1-d of one element.
        x1 = getitem(input, (None,)) if xa.ndim == 0 else input
        out = _gather(x1, norm_dim(dim, 1), ia.reshape(1) if ia.ndim == 0 else ia)
        return getitem(out, 0) if ia.ndim == 0 else out
    return _gather(input, dim, ia)


def _gather(input: Tensor, dim: int, ia: Any) -> Tensor:
    xa = input._array
    d = norm_dim(dim, xa.ndim)
    for k in range(xa.ndim):
        if k != d and ia.shape[k] > xa.shape[k]:
            raise RuntimeError(
                f"Size does not match at dimension {k} expected index {list(ia.shape)} to be "
                f"no larger than self {list(xa.shape)} apart from dimension {d}"
            )
    if xa.ndim == 0:
        _check_bounds(ia, 1, d)
        return take(input, (Ellipsis,))
    _check_bounds(ia, xa.shape[d], d)
    t = take(input, _mesh(backend.namespace(xa), ia.shape, d, ia))
    keeps_for_backward(t._grad_fn)  # torch's GatherBackward0 saves the index
    return t


def _scatter_add_src(input: Tensor, dim: int, index: Tensor, src: Any) -> Tensor:
    """``index_add_zeros(src, index)`` of input's shape: what scatter_add adds to input."""
    xa = input._array
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_add(): argument 'src' must be Tensor, not {type(src).__name__}")
    sa = src._array
    ia = _index_array(index, "scatter", xa)
    if sa.dtype != xa.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    if not (ia.ndim == xa.ndim == sa.ndim):
        raise RuntimeError(
            "Index tensor must have the same number of dimensions as self tensor"
            if ia.ndim != xa.ndim
            else "Index tensor must have the same number of dimensions as src tensor"
        )
    d = norm_dim(dim, xa.ndim)
    for k in range(xa.ndim):
        if ia.shape[k] > sa.shape[k] or (k != d and ia.shape[k] > xa.shape[k]):
            raise RuntimeError(
                f"Expected index {list(ia.shape)} to be no larger than self {list(xa.shape)} apart "
                f"from dimension {d} and to be no larger size than src {list(sa.shape)}"
            )
    if xa.ndim == 0:
        _check_bounds(ia, 1, d)
        return index_add_zeros(src, (Ellipsis,), ())
    _check_bounds(ia, xa.shape[d], d)
    part = src
    if ia.shape != sa.shape:
        part = getitem(src, tuple(slice(0, n) for n in ia.shape))
    idx = _mesh(backend.namespace(xa), ia.shape, d, ia)
    t = index_add_zeros(part, idx, xa.shape)
    keeps_for_backward(t._grad_fn)  # torch's ScatterAddBackward0 saves the index
    return t


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return add(input, _scatter_add_src(input, dim, index, src))


def scatter_add_(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    contrib = _scatter_add_src(input, dim, index, src)
    return inplace(input, "add", lambda s: add(s, contrib))


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    xa = input._array
    if not isinstance(index, Tensor):
        raise TypeError(
            f"index_select(): argument 'index' must be Tensor, not {type(index).__name__}"
        )
    ia = index._array
    if ia.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if ia.dtype.kind not in "iu":
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    ia = _on_device_of((ia.reshape(-1),), xa)[0]
    d = norm_dim(dim, xa.ndim)
    n = xa.shape[d] if xa.ndim else 1
    if ia.size and bool(((ia < 0) | (ia >= n)).any()):
        raise IndexError("index out of range in self")
    if xa.ndim == 0:
        return take(input, (Ellipsis,))
    t = take(input, (*(slice(None),) * d, ia, Ellipsis))
    keeps_for_backward(t._grad_fn)  # torch's IndexSelectBackward0 saves the index
    return t


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``tensor``'s values as one-hot rows of ``num_classes`` (int64), as torch's one_hot."""
    ta = tensor._array
    if ta.dtype != dtypes.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if ta.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(ta.max()) + 1
    if ta.size:
        if int(ta.min()) < 0:
            raise RuntimeError("Class values must be non-negative.")
        if int(ta.max()) >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    xp = backend.namespace(ta)
    out = (ta[..., None] == xp.arange(num_classes)).astype(ta.dtype)
    return wrap(out)
