"""Indexing: ``t[index]`` (a view for basic indices) and ``t[index] = value``."""

from __future__ import annotations

from typing import Any

from .. import backend
from .._tensor import Tensor
from ._record import OPS, arr, as_view, make
from .inplace import copy_, inplace


def _norm_index(index: Any) -> tuple[tuple[Any, ...], bool]:
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    advanced = False
    for i in index:
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


def getitem(input: Tensor, index: Any) -> Tensor:
    idx, advanced = _norm_index(index)
    xa = input._array
    if advanced:
        idx = _on_device_of(idx, xa)
    try:
        out = xa[idx]
    except IndexError as e:
        raise IndexError(f"{e} (indexing a tensor of shape {tuple(xa.shape)})") from None
    t = make(OPS["getitem"], out, (input,), {"index": idx, "in_shape": xa.shape})
    if not advanced:
        as_view(t, input, "getitem", {"index": idx})
    return t


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
    idx = _on_device_of(idx, input._array)
    inplace(input, "index_put", lambda s: _index_put(s, idx, value))


def _index_put(x: Tensor, idx: tuple[Any, ...], value: Any) -> Tensor:
    out = x._array.copy()
    out[idx] = arr(value)
    return make(OPS["index_put"], out, (x, value), {"index": idx})
