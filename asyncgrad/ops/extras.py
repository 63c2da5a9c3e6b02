"""torch's other spellings and small ops: ``var_mean``/``std_mean``, the random ``*_like``
factories, ``split_with_sizes``, ``diagonal`` (a view), ``unique``, ``clip``, ``view_as``, the
``Tensor.new_*`` factories and ``Tensor.type()``."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from .. import backend, dtypes
from .._tensor import Size, Tensor
from ._record import OPS, as_view, make, wrap
from .creation import full, rand, randint, randn, tensor
from .index import norm_dim
from .inplace import clamp_
from .pointwise import clamp
from .reduce import _correction, dims, mean, std, var
from .shape import split, view


# ----- var_mean, std_mean -----
def _stat_mean(
    stat: Any, input: Tensor, dim: Any, unbiased: Any, keepdim: bool, correction: Any
) -> tuple[Tensor, Tensor]:
    d, corr = _correction(dim, unbiased, correction)
    s = stat(input, d, keepdim=keepdim, correction=corr)
    xa = input._array
    axis = None if xa.ndim == 0 or d is None or d == () or d == [] else dims(d, xa.ndim)
    m = mean(input, axis, keepdim)
    if keepdim and axis is None and xa.ndim:
        m = m.reshape((1,) * xa.ndim)
    return s, m


def var_mean(
    input: Tensor,
    dim: Any = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: Any = None,
) -> tuple[Tensor, Tensor]:
    """``(var(input, ...), mean(input, ...))`` over the same dims, as ``torch.var_mean``."""
    return _stat_mean(var, input, dim, unbiased, keepdim, correction)


def std_mean(
    input: Tensor,
    dim: Any = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: Any = None,
) -> tuple[Tensor, Tensor]:
    """``(std(input, ...), mean(input, ...))`` over the same dims, as ``torch.std_mean``."""
    return _stat_mean(std, input, dim, unbiased, keepdim, correction)


# ----- rand_like, randn_like, randint_like -----
def _like_args(input: Tensor, dtype: Any, device: Any) -> tuple[Any, Any]:
    return (input.dtype if dtype is None else dtypes.to_dtype(dtype)), (
        input.device if device is None else device
    )


def rand_like(
    input: Tensor,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    generator: Any = None,
) -> Tensor:
    """Uniform [0, 1) samples with ``input``'s shape, dtype and device."""
    dt, dev = _like_args(input, dtype, device)
    return rand(input.shape, generator=generator, dtype=dt, device=dev, requires_grad=requires_grad)


def randn_like(
    input: Tensor,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    generator: Any = None,
) -> Tensor:
    """Standard normal samples with ``input``'s shape, dtype and device."""
    dt, dev = _like_args(input, dtype, device)
    return randn(
        input.shape, generator=generator, dtype=dt, device=dev, requires_grad=requires_grad
    )


def randint_like(
    input: Tensor,
    low: int = 0,
    high: int | None = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
    generator: Any = None,
) -> Tensor:
    """Integers in [low, high) with ``input``'s shape, dtype and device; ``randint_like(input,
    high)`` draws from [0, high)."""
    if high is None:  # randint_like(input, high)
        low, high = 0, _int_arg(low, "high")
    else:
        low, high = _int_arg(low, "low"), _int_arg(high, "high")
    dt, dev = _like_args(input, dtype, device)
    t = randint(low, high, tuple(input.shape), generator=generator, device=dev)
    t = t.to(dt)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _int_arg(v: Any, name: str) -> int:
    if not isinstance(v, (int, backend.integer)) or isinstance(v, bool):
        raise TypeError(f"randint_like(): argument '{name}' must be int, not {type(v).__name__}")
    return int(v)


# ----- split_with_sizes, diagonal, view_as -----
def split_with_sizes(input: Tensor, split_sizes: Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Views of ``input`` along ``dim`` of the given sizes (which must add up to its size)."""
    if isinstance(split_sizes, (int, backend.integer)):
        raise TypeError(
            "split_with_sizes(): argument 'split_sizes' must be tuple of ints, but found int"
        )
    return split(input, list(split_sizes), dim)


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal ``offset`` (above the main one when > 0) of the matrices over ``dim1`` and
    ``dim2``, appended as the last dim: a view, as torch's (writes go through to ``input``)."""
    xa = input._array
    nd = xa.ndim
    if nd < 2:
        raise RuntimeError(f"diagonal(): input must be at least 2-D, got {nd}-D")
    d1, d2 = norm_dim(int(dim1), nd), norm_dim(int(dim2), nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    offset = int(offset)
    out = backend.diagonal_view(xa, offset, d1, d2)
    params = {"offset": offset, "dim1": d1, "dim2": d2}
    t = make(OPS["diagonal"], out, (input,), {**params, "in_shape": xa.shape})
    return as_view(t, input, "diagonal", params)


def view_as(input: Tensor, other: Tensor) -> Tensor:
    """``input.view(other.shape)``."""
    return view(input, tuple(other.shape))


# ----- clip, clip_ (torch's aliases of clamp) -----
def clip(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """``clamp`` under NumPy's name, as ``torch.clip``."""
    return clamp(input, min, max)


def clip_(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    return clamp_(input, min, max)


# ----- unique -----
def unique(
    input: Tensor,
    sorted: bool = True,
    return_inverse: bool = False,
    return_counts: bool = False,
    dim: int | None = None,
) -> Any:
    """The distinct elements of ``input`` (``dim=None``), or its distinct slices along ``dim``,
    in ascending order (also with ``sorted=False``, which torch allows); with
    ``return_inverse`` the index of each element (slice) in the result, with
    ``return_counts`` how often each occurs. Not differentiable."""
    xa = input._array
    axis = None if dim is None else norm_dim(int(dim), xa.ndim)
    vals, inv, counts = backend.unique(xa, axis)
    out = wrap(vals)
    if axis is None:
        inv = inv.reshape(xa.shape)
    else:
        inv = inv.reshape((xa.shape[axis],))
    extra: list[Tensor] = []
    if return_inverse:
        extra.append(wrap(inv.astype(dtypes.int64, copy=False)))
    if return_counts:
        extra.append(wrap(counts.astype(dtypes.int64, copy=False)))
    return (out, *extra) if extra else out


# ----- Tensor.new_*, Tensor.type() -----
def _size_of(size: Any) -> tuple[int, ...]:
    """A size given as ints, a sequence of ints, or a one-item sequence holding one."""
    if isinstance(size, (int, backend.integer)):
        return (int(size),)
    size = tuple(size)
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def new_full(
    self: Tensor,
    size: Any,
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value``, with ``self``'s dtype and device unless
    given."""
    return full(
        _size_of(size),
        fill_value,
        dtype=self.dtype if dtype is None else dtype,
        device=self.device if device is None else device,
        requires_grad=requires_grad,
    )


def new_tensor(
    self: Tensor, data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A copy of ``data`` with ``self``'s dtype and device unless given."""
    if isinstance(data, Tensor):
        data = data.detach()
    return tensor(
        data,
        dtype=self.dtype if dtype is None else dtype,
        device=self.device if device is None else device,
        requires_grad=requires_grad,
    )


def new(self: Tensor, *args: Any) -> Tensor:
    """torch's legacy ``Tensor.new``: ``new()`` an empty 1-D tensor, ``new(2, 3)`` an
    uninitialised one of that size, ``new(data)`` a copy of a sequence, all with ``self``'s
    dtype and device."""
    if not args:
        return new_full(self, (0,), 0)
    if len(args) == 1 and isinstance(args[0], Tensor):
        return args[0].detach()
    if builtins.all(isinstance(a, (int, backend.integer)) for a in args) or (
        len(args) == 1 and isinstance(args[0], Size)
    ):
        size = _size_of(args)
        return wrap(backend.empty(size, self.dtype, self.device))
    if len(args) == 1:
        return new_tensor(self, args[0])
    raise TypeError(f"new(): invalid arguments {args!r}")


# NOTE [Tensor.type() strings]
# ``t.type()`` returns torch's strings ("torch.FloatTensor", "torch.cuda.LongTensor"): code
# that ports compares it with those literals, which changing the import does not change. The
# same strings (or "asyncgrad." in place of "torch.", or a dtype) name a conversion target.
_TYPE_NAMES: dict[str, str] = {
    "float16": "HalfTensor",
    "float32": "FloatTensor",
    "float64": "DoubleTensor",
    "int8": "CharTensor",
    "uint8": "ByteTensor",
    "int16": "ShortTensor",
    "int32": "IntTensor",
    "int64": "LongTensor",
    "bool": "BoolTensor",
}
_TYPE_DTYPES: dict[str, str] = {v: k for k, v in _TYPE_NAMES.items()}


def type_(self: Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    """Without ``dtype``, the type string ("torch.FloatTensor"; See NOTE [Tensor.type()
    strings]); with one, the tensor converted to it (itself when it has it already)."""
    if dtype is None:
        name = _TYPE_NAMES.get(str(self.dtype), f"{self.dtype}Tensor")
        where = "torch.cuda." if self.device.type == "cuda" else "torch."
        return where + name
    if isinstance(dtype, str) and dtype.endswith("Tensor"):
        prefix, _, cls = dtype.rpartition(".")
        if cls not in _TYPE_DTYPES or prefix not in (
            "torch",
            "asyncgrad",
            "torch.cuda",
            "asyncgrad.cuda",
        ):
            raise ValueError(f"invalid type: '{dtype}'")
        dt = dtypes.to_dtype(_TYPE_DTYPES[cls])
        target = "cuda" if prefix.endswith(".cuda") else None
        if target is not None and self.device.type != "cuda":
            return self.to(target, dt)
        if target is None and self.device.type == "cuda":
            return self.to("cpu", dt)
        return self if self.dtype == dt else self.to(dt)
    dt = dtypes.to_dtype(dtype)
    return self if self.dtype == dt else self.to(dt)


def data_ptr(self: Tensor) -> int:
    """The address of the tensor's first element."""
    return backend.data_ptr(self._array)
