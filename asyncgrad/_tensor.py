"""Tensor: a NumPy (or CuPy) array plus the autograd state that links it to the backward graph."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any, SupportsIndex, overload

from . import backend, dtypes
from .backend import CPU, Device, device_of

if TYPE_CHECKING:
    from .graph.accumulate_grad import AccumulateGrad
    from .graph.copy_slices import ViewChain
    from .graph.hooks import Hooks, RemovableHandle
    from .graph.node import Edge, Node

__all__ = ["Size", "Tensor"]

# The builtins, for annotations inside Tensor, whose methods int(), bool() and float() shadow them.
_int = int
_bool = bool
_float = float

_FLOAT_KINDS = dtypes.FLOAT_KINDS
_object_new = object.__new__


def _comparable(other: Any) -> _bool:
    """Whether ``t == other`` compares elements: a tensor, a number or an array (NumPy's, CuPy's
    or the simulated device's); torch treats anything else as unequal."""
    return isinstance(other, (Tensor, _int, _float, complex, backend.generic)) or (
        hasattr(other, "shape") and hasattr(other, "dtype")
    )


# ----- Size -----
# NOTE [Size]
# ``t.shape`` and ``t.size()`` are a ``Size``, as torch's: a tuple (equal to and hashed like the
# plain tuple, usable wherever one is) that prints as ``asyncgrad.Size([2, 3])``, in step with a
# tensor's ``dtype=asyncgrad.float64``, and whose slices and sums stay Sizes. Reading ``shape``
# builds one from the array's shape tuple with tuple's own constructor (Size defines no
# ``__new__``): about 0.1 us more per read than the plain tuple, and ``shape[i]`` pays for the
# Python-level ``__getitem__`` that keeps slices Sizes (both measured in a tight loop; torch's
# C++ ``shape`` costs about the same). Nothing inside asyncgrad reads ``Tensor.shape`` on the
# way of a training step: ops, rules and the engine read ``_array.shape``, and an MLP step
# (784-256-256-10, batch 64) times the same before and after Size.
class Size(tuple[_int, ...]):
    """The shape of a tensor: a tuple of ints that prints as ``asyncgrad.Size([2, 3])``.

    Example:
        >>> import asyncgrad as ag
        >>> s = ag.zeros(2, 3).shape
        >>> s, s == (2, 3), s.numel(), s[1:]
        (asyncgrad.Size([2, 3]), True, 6, asyncgrad.Size([3]))
    """

    __slots__ = ()

    def numel(self) -> _int:
        """The number of elements of a tensor of this shape."""
        return math.prod(self)

    def __repr__(self) -> str:
        return f"asyncgrad.Size({list(self)})"

    __str__ = __repr__

    @overload
    def __getitem__(self, key: SupportsIndex) -> _int: ...
    @overload
    def __getitem__(self, key: slice) -> Size: ...
    def __getitem__(self, key: SupportsIndex | slice) -> _int | Size:
        if type(key) is slice:
            return Size(tuple.__getitem__(self, key))
        return tuple.__getitem__(self, key)

    def __add__(self, other: tuple[Any, ...]) -> Size:
        return Size(tuple.__add__(self, other))

    def __radd__(self, other: tuple[Any, ...]) -> Size:
        return Size(tuple.__add__(other, self))

    def __mul__(self, n: SupportsIndex) -> Size:
        return Size(tuple.__mul__(self, n))

    __rmul__ = __mul__

    def __reduce__(self) -> tuple[Any, ...]:
        return (Size, (tuple(self),))


# ----- end of Size -----


class _Meta:
    """Rarely used autograd state of a tensor, allocated on first use to keep tensors small."""

    __slots__ = (
        "grad_dtype",
        "grad_edge",
        "hooks",
        "name",
        "post_acc_hooks",
        "published",
        "retains_grad",
        "view_chain",
        "view_version",
    )

    def __init__(self) -> None:
        # A leaf's gradient edge, (its AccumulateGrad, 0): made on first use, then shared by
        # every node that consumes the leaf (See NOTE [Accumulator lifetime]).
        self.grad_edge: tuple[AccumulateGrad, int] | None = None
        self.hooks: Hooks | None = None  # a leaf's tensor hooks
        self.post_acc_hooks: dict[int, Callable[..., Any]] | None = None
        # A leaf's grad_dtype: SAME_DTYPE (its own dtype), None (any) or a dtype.
        self.grad_dtype: Any = SAME_DTYPE
        self.retains_grad = False
        self.view_chain: ViewChain | None = None
        self.view_version = 0
        self.name: str | None = None
        # The arrays optimizer steps published for this tensor, newest first, as (id(array),
        # version counter) pairs (See NOTE [Serving while training] in optim/optimizers.py).
        self.published: tuple[tuple[_int, list[_int]], ...] | None = None


# A leaf's default grad_dtype, its own dtype (See Tensor.grad_dtype).
SAME_DTYPE: Any = "same as the tensor"


class Tensor:
    """An n-dimensional array that can record the operations applied to it.

    ``_array`` is the backing ``numpy.ndarray`` (always an ndarray, never a NumPy scalar);
    ``_vc`` is the version counter, a one-item list shared by a base and all its views.
    """

    __slots__ = (
        "__weakref__",
        "_array",
        "_base",
        "_grad",
        "_grad_fn",
        "_meta",
        "_output_nr",
        "_requires_grad",
        "_vc",
    )

    _array: Any
    _grad_fn: Node | None
    _grad: Tensor | None
    _base: Tensor | None
    _meta: _Meta | None
    _output_nr: _int
    _requires_grad: _bool
    _vc: list[_int]

    # Tensor defines __array_ufunc__ so NumPy's operators defer to it; see NOTE [Rules are NumPy].
    __array_priority__ = 1000

    def __init__(self, data: Any, *, requires_grad: _bool = False, dtype: Any = None) -> None:
        arr = _ops.as_array(data, dtype)
        self._array = arr
        self._grad_fn = None
        self._output_nr = 0
        self._requires_grad = False
        self._grad = None
        self._vc = [0]
        self._base = None
        self._meta = None
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _wrap(cls, array: Any) -> Tensor:
        """Wrap an ndarray with no autograd state (the hot path: no checks, no copies)."""
        # The elementwise ops in ops/pointwise.py set these same fields inline: keep them in step.
        t = _object_new(cls)
        t._array = array
        t._grad_fn = None
        t._output_nr = 0
        t._requires_grad = False
        t._grad = None
        t._vc = [0]
        t._base = None
        t._meta = None
        return t

    def _get_meta(self) -> _Meta:
        m = self._meta
        if m is None:
            m = self._meta = _Meta()
        return m

    # ------------------------------------------------------------------ array-like attributes
    @property
    def array(self) -> Any:
        """The backing ``numpy.ndarray`` (or ``cupy.ndarray``), without a copy."""
        return self._array

    @property
    def data(self) -> Tensor:
        """A tensor sharing storage with this one, detached from the graph."""
        return self.detach()

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        if self.requires_grad and value._array.dtype.kind not in _FLOAT_KINDS:
            raise RuntimeError(
                "data set to a tensor that requires gradients must be floating point or complex "
                f"dtype (got {value._array.dtype})"
            )
        self._array = value._array
        if self._meta is not None:
            self._meta.published = None  # the arrays steps published are no longer its own

    @property
    def shape(self) -> Size:
        return Size(self._array.shape)  # See NOTE [Size]

    @property
    def dtype(self) -> dtypes.dtype[Any]:
        dt: dtypes.dtype[Any] = self._array.dtype
        return dt

    @property
    def device(self) -> Device:
        arr = self._array
        if type(arr) is backend.ndarray:
            return CPU
        return device_of(arr)

    @property
    def ndim(self) -> _int:
        n: _int = self._array.ndim
        return n

    @property
    def is_cuda(self) -> _bool:
        return self.device.type == "cuda"

    def dim(self) -> _int:
        n: _int = self._array.ndim
        return n

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point type (float16, float32, float64)."""
        return dtypes.is_floating(self._array.dtype)

    def size(self, dim: _int | None = None) -> Any:
        if dim is None:
            return Size(self._array.shape)
        return self._array.shape[dim]

    def numel(self) -> _int:
        return int(self._array.size)

    def __len__(self) -> _int:
        if self._array.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return int(self._array.shape[0])

    def element_size(self) -> _int:
        return int(self._array.itemsize)

    def item(self) -> Any:
        if self._array.size != 1:
            raise RuntimeError(
                f"a Tensor with {self._array.size} elements cannot be converted to Scalar"
            )
        return _on_host(self._array).reshape(()).item()

    def tolist(self) -> Any:
        return _on_host(self._array).tolist()

    def numpy(self, *, force: _bool = False) -> Any:
        """The backing array as NumPy (shares memory). Raises for a tensor that requires grad."""
        if self.device.type != "cpu":
            if not force:
                raise TypeError(
                    f"can't convert {self.device} device type tensor to numpy. "
                    "Use Tensor.cpu() to copy the tensor to host memory first."
                )
            return backend.to_device(self._array, CPU)
        # As torch's: allowed under no_grad, where nothing can record on the shared memory.
        if self.requires_grad and not force and _ops.grad_mode_enabled():
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. "
                "Use tensor.detach().numpy() instead."
            )
        return self._array

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        arr = self._array
        if type(arr) is not backend.ndarray:
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first."
            )
        if dtype is not None and arr.dtype != dtype:
            return arr.astype(dtype)
        if copy:
            return arr.copy()
        return arr

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        if self.requires_grad:
            raise RuntimeError(
                "Can't export a tensor that requires grad through DLPack; "
                "use tensor.detach() first."
            )
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[_int, _int]:
        dev: tuple[_int, _int] = self._array.__dlpack_device__()
        return dev

    # ------------------------------------------------------------------ autograd attributes
    @property
    def requires_grad(self) -> _bool:
        return self._requires_grad or self._grad_fn is not None

    @requires_grad.setter
    def requires_grad(self, flag: _bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad: _bool = True) -> Tensor:
        if self._grad_fn is not None:
            if not requires_grad:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf variables. If you want to "
                    "use a computed variable in a subgraph that doesn't require differentiation "
                    "use var_no_grad = var.detach()."
                )
            return self
        if requires_grad and self._array.dtype.kind not in _FLOAT_KINDS:
            raise RuntimeError(
                "only Tensors of floating point dtype can require gradients, "
                f"got {self._array.dtype}"
            )
        if requires_grad and type(self._vc) is not list:  # an inference tensor
            self._vc.refuse_requires_grad()  # type: ignore[attr-defined]
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def grad_fn(self) -> Node | None:
        if self._base is not None:
            self._refresh_view()
        return self._grad_fn

    @property
    def is_leaf(self) -> _bool:
        return self.grad_fn is None

    @property
    def output_nr(self) -> _int:
        return self._output_nr

    @property
    def _version(self) -> _int:
        vc = self._vc
        if type(vc) is not list:  # See NOTE [Inference tensors] in graph/inference.py
            raise RuntimeError("Inference tensors do not track version counter.")
        return vc[0]

    def _is_view(self) -> _bool:
        return self._base is not None

    @property
    def grad(self) -> Tensor | None:
        if (self._grad_fn is not None or self._base is not None) and self._grad is None:
            _ops.warn_non_leaf_grad(self)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got grad of type "
                    f"{type(value).__name__}"
                )
            if value._array.shape != self._array.shape:
                raise RuntimeError(
                    f"assigned grad has data of a different size: expected {tuple(self.shape)}, "
                    f"got {tuple(value.shape)}"
                )
            if value.device != self.device:
                raise RuntimeError(
                    "assigned grad has data located on a different device: "
                    f"expected {self.device}, got {value.device}"
                )
            m = self._meta
            want = self.dtype if m is None or m.grad_dtype is SAME_DTYPE else m.grad_dtype
            if want is not None and value.dtype != want:
                raise RuntimeError(
                    f"attempting to assign a gradient with dtype '{value.dtype}' to a tensor "
                    f"with grad_dtype '{want}'. The gradient must match the tensor's grad_dtype "
                    "(defaults to the tensor's dtype). You can set the tensor's grad_dtype "
                    "attribute with a specific dtype, or None to allow any dtype."
                )
        self._grad = value

    @property
    def grad_dtype(self) -> Any:
        """The dtype a gradient accumulated into ``.grad`` is cast to (the tensor's own by
        default; None: whatever dtype it comes in), as torch's. Leaf tensors only."""
        if self._grad_fn is not None:
            raise RuntimeError("grad_dtype can only be accessed on leaf tensors.")
        m = self._meta
        return self.dtype if m is None or m.grad_dtype is SAME_DTYPE else m.grad_dtype

    @grad_dtype.setter
    def grad_dtype(self, value: Any) -> None:
        if self._grad_fn is not None:
            raise RuntimeError("grad_dtype can only be set on leaf tensors.")
        if value is not None:
            value = dtypes.to_dtype(value)
        g = self._grad
        if g is not None and value is not None and g.dtype != value:
            raise RuntimeError(
                f"Cannot set grad_dtype to '{value}' because there is already a gradient with "
                f"dtype '{g.dtype}'. Please clear the gradient (.grad = None) before changing "
                "grad_dtype, or ensure the new grad_dtype matches the existing gradient's dtype."
            )
        self._get_meta().grad_dtype = SAME_DTYPE if value == self.dtype else value

    @property
    def retains_grad(self) -> _bool:
        m = self._meta
        return bool(m is not None and m.retains_grad)

    @property
    def name(self) -> str | None:
        m = self._meta
        return None if m is None else m.name

    @name.setter
    def name(self, value: str | None) -> None:
        self._get_meta().name = value

    def is_inference(self) -> _bool:
        """Whether this is an inference tensor (See NOTE [Inference tensors] in
        graph/inference.py)."""
        return type(self._vc) is not list

    def detach(self) -> Tensor:
        """A new tensor sharing storage and version counter, outside the graph."""
        t = Tensor._wrap(self._array)
        t._vc = self._vc
        return t

    def detach_(self) -> Tensor:
        if self._base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self._grad_fn = None
        self._output_nr = 0
        self._requires_grad = False
        return self

    def _edge(self) -> Edge | None:
        """The gradient edge of this tensor: ``(grad_fn, output_nr)`` or its AccumulateGrad."""
        if self._base is not None:
            self._refresh_view()
        # Plain tuples: Edge's namedtuple constructor is a Python-level call, and the engine
        # indexes edges faster when they are exact tuples. They compare equal to Edge(...).
        fn = self._grad_fn
        if fn is not None:
            return (fn, self._output_nr)  # type: ignore[return-value]
        if self._requires_grad:
            m = self._meta
            e = None if m is None else m.grad_edge
            if e is None:  # made on first use, under a lock
                e = _ops.grad_edge(self)
            return e  # type: ignore[return-value]
        return None

    def _grad_accumulator(self) -> Node:
        """This leaf's AccumulateGrad node (made once, kept for the tensor's life)."""
        return _ops.grad_accumulator(self)

    def _refresh_view(self) -> None:
        _ops.refresh_view(self)

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` after backward."""
        _ops.retain_grad(self)

    def register_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Register ``hook(grad) -> Tensor | None``, called with this tensor's gradient.

        The hook may return a new gradient to use in its place, and may be ``async def``.
        """
        return _ops.register_tensor_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Register ``hook(tensor)``, called after a leaf's ``.grad`` is accumulated."""
        return _ops.register_post_accumulate_grad_hook(self, hook)

    # ------------------------------------------------------------------ gradients
    def backward(
        self,
        gradient: Any = None,
        retain_graph: _bool | None = None,
        create_graph: _bool = False,
        inputs: Any = None,
    ) -> None:
        """Accumulate this tensor's gradient into the leaves' ``.grad`` (blocking).

        Works with no event loop and inside a running one (see ``ag.backward_sync``).
        """
        from .autograd.api import backward_sync

        backward_sync(self, gradient, retain_graph, create_graph, inputs)

    async def abackward(
        self,
        gradient: Any = None,
        retain_graph: _bool | None = None,
        create_graph: _bool = False,
        inputs: Any = None,
    ) -> None:
        """``await t.abackward()``: the coroutine form of ``t.backward()``, wherever it is called
        (a coroutine even where no loop runs yet: ``asyncio.run(t.abackward())``)."""
        from .autograd.api import _backward

        await _backward(self, gradient, retain_graph, create_graph, inputs, 0)

    # ------------------------------------------------------------------ conversion
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        return _ops.to(self, *args, **kwargs)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self, device: _int | None = None) -> Tensor:
        return self.to(f"cuda:{0 if device is None else device}")

    def __repr__(self) -> str:
        return _format_tensor(self)

    def __bool__(self) -> _bool:
        if self._array.size != 1:
            raise RuntimeError(
                f"Boolean value of Tensor with {self._array.size} elements is ambiguous"
            )
        return bool(_on_host(self._array).reshape(()))

    def __float__(self) -> _float:
        return float(self.item())

    def __int__(self) -> _int:
        return int(self.item())

    def __index__(self) -> _int:
        if self._array.dtype.kind not in "iub" or self._array.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __iter__(self) -> Iterator[Tensor]:
        if self._array.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __reduce_ex__(self, proto: Any) -> Any:
        return _reduce_tensor(self)  # See NOTE [Pickling tensors]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        ForkingPickler.register(cls, _reduce_for_process)

    def __deepcopy__(self, memo: dict[_int, Any]) -> Tensor:
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                "protocol at the moment."
            )
        t = Tensor._wrap(backend.copy(self._array))
        t._requires_grad = self._requires_grad
        if self._grad is not None:
            t._grad = Tensor._wrap(backend.copy(self._grad._array))
        memo[id(self)] = t
        return t

    # ------------------------------------------------------------------ ops (see asyncgrad.ops)
    def add(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return _ops.add(self, other, alpha=alpha)

    def sub(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return _ops.sub(self, other, alpha=alpha)

    def mul(self, other: Any) -> Tensor:
        return _ops.mul(self, other)

    def div(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        return _ops.div(self, other, rounding_mode=rounding_mode)

    def pow(self, exponent: Any) -> Tensor:
        return _ops.pow(self, exponent)

    def neg(self) -> Tensor:
        return _ops.neg(self)

    def exp(self) -> Tensor:
        return _ops.exp(self)

    def log(self) -> Tensor:
        return _ops.log(self)

    def log1p(self) -> Tensor:
        return _ops.log1p(self)

    def expm1(self) -> Tensor:
        return _ops.expm1(self)

    def sqrt(self) -> Tensor:
        return _ops.sqrt(self)

    def rsqrt(self) -> Tensor:
        return _ops.rsqrt(self)

    def reciprocal(self) -> Tensor:
        return _ops.reciprocal(self)

    def sin(self) -> Tensor:
        return _ops.sin(self)

    def cos(self) -> Tensor:
        return _ops.cos(self)

    def tan(self) -> Tensor:
        return _ops.tan(self)

    def tanh(self) -> Tensor:
        return _ops.tanh(self)

    def sigmoid(self) -> Tensor:
        return _ops.sigmoid(self)

    def relu(self) -> Tensor:
        return _ops.relu(self)

    def abs(self) -> Tensor:
        return _ops.abs(self)

    def sign(self) -> Tensor:
        return _ops.sign(self)

    def erf(self) -> Any:
        return _ops.erf(self)

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:
        return _ops.clamp(self, min, max)

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        return _ops.clamp(self, min, max)

    def maximum(self, other: Any) -> Tensor:
        return _ops.maximum(self, other)

    def minimum(self, other: Any) -> Tensor:
        return _ops.minimum(self, other)

    def floor_divide(self, other: Any) -> Tensor:
        return _ops.floor_divide(self, other)

    def remainder(self, other: Any) -> Tensor:
        return _ops.remainder(self, other)

    def eq(self, other: Any) -> Tensor:
        return _ops.eq(self, other)

    def equal(self, other: Any) -> _bool:
        """Whether ``other`` has this tensor's shape and elements (``ag.equal``)."""
        return _ops.equal(self, other)

    def allclose(
        self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: _bool = False
    ) -> _bool:
        """Whether every element is close to ``other``'s (``ag.allclose``)."""
        return _ops.allclose(self, other, rtol=rtol, atol=atol, equal_nan=equal_nan)

    def ne(self, other: Any) -> Tensor:
        return _ops.ne(self, other)

    def lt(self, other: Any) -> Tensor:
        return _ops.lt(self, other)

    def le(self, other: Any) -> Tensor:
        return _ops.le(self, other)

    def gt(self, other: Any) -> Tensor:
        return _ops.gt(self, other)

    def ge(self, other: Any) -> Tensor:
        return _ops.ge(self, other)

    def isnan(self) -> Tensor:
        return _ops.isnan(self)

    def isfinite(self) -> Tensor:
        return _ops.isfinite(self)

    def logical_not(self) -> Tensor:
        return _ops.logical_not(self)

    def sum(self, dim: Any = None, keepdim: _bool = False, *, dtype: Any = None) -> Tensor:
        return _ops.sum(self, dim, keepdim, dtype=dtype)

    def mean(self, dim: Any = None, keepdim: _bool = False, *, dtype: Any = None) -> Tensor:
        return _ops.mean(self, dim, keepdim, dtype=dtype)

    def amax(self, dim: Any = (), keepdim: _bool = False) -> Tensor:
        return _ops.amax(self, dim, keepdim)

    def amin(self, dim: Any = (), keepdim: _bool = False) -> Tensor:
        return _ops.amin(self, dim, keepdim)

    def max(self, dim: Any = None, keepdim: _bool = False) -> Any:
        return _ops.max(self, dim, keepdim)

    def min(self, dim: Any = None, keepdim: _bool = False) -> Any:
        return _ops.min(self, dim, keepdim)

    def argmax(self, dim: _int | None = None, keepdim: _bool = False) -> Tensor:
        return _ops.argmax(self, dim, keepdim)

    def argmin(self, dim: _int | None = None, keepdim: _bool = False) -> Tensor:
        return _ops.argmin(self, dim, keepdim)

    def logsumexp(self, dim: Any, keepdim: _bool = False) -> Tensor:
        return _ops.logsumexp(self, dim, keepdim)

    def matmul(self, other: Tensor) -> Tensor:
        return _ops.matmul(self, other)

    def mm(self, mat2: Tensor) -> Tensor:
        return _ops.mm(self, mat2)

    def bmm(self, mat2: Tensor) -> Tensor:
        return _ops.bmm(self, mat2)

    def reshape(self, *shape: Any) -> Tensor:
        return _ops.reshape(self, *shape)

    def view(self, *shape: Any) -> Tensor:
        return _ops.view(self, *shape)

    def flatten(self, start_dim: _int = 0, end_dim: _int = -1) -> Tensor:
        return _ops.flatten(self, start_dim, end_dim)

    def unflatten(self, dim: _int, sizes: Sequence[_int]) -> Tensor:
        return _ops.unflatten(self, dim, sizes)

    def squeeze(self, dim: Any = None) -> Tensor:
        return _ops.squeeze(self, dim)

    def unsqueeze(self, dim: _int) -> Tensor:
        return _ops.unsqueeze(self, dim)

    def transpose(self, dim0: _int, dim1: _int) -> Tensor:
        return _ops.transpose(self, dim0, dim1)

    def swapaxes(self, dim0: _int, dim1: _int) -> Tensor:
        return _ops.transpose(self, dim0, dim1)

    def permute(self, *dims: Any) -> Tensor:
        return _ops.permute(self, *dims)

    def t(self) -> Tensor:
        return _ops.t(self)

    def expand(self, *sizes: Any) -> Tensor:
        return _ops.expand(self, *sizes)

    def expand_as(self, other: Tensor) -> Tensor:
        return _ops.expand_as(self, other)

    def broadcast_to(self, shape: Sequence[_int]) -> Tensor:
        return _ops.broadcast_to(self, shape)

    def split(self, split_size_or_sections: Any, dim: _int = 0) -> tuple[Tensor, ...]:
        return _ops.split(self, split_size_or_sections, dim)

    def chunk(self, chunks: _int, dim: _int = 0) -> tuple[Tensor, ...]:
        return _ops.chunk(self, chunks, dim)

    def unbind(self, dim: _int = 0) -> tuple[Tensor, ...]:
        return _ops.unbind(self, dim)

    def masked_fill(self, mask: Any, value: Any) -> Tensor:
        return _ops.masked_fill(self, mask, value)

    def clone(self, *, memory_format: Any = None) -> Tensor:
        return _ops.clone(self, memory_format=memory_format)

    def contiguous(self, memory_format: Any = None) -> Tensor:
        return _ops.contiguous(self, memory_format)

    def softmax(self, dim: _int, dtype: Any = None) -> Tensor:
        return _ops.softmax(self, dim, dtype)

    def log_softmax(self, dim: _int, dtype: Any = None) -> Tensor:
        return _ops.log_softmax(self, dim, dtype)

    def add_(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return _ops.add_(self, other, alpha=alpha)

    def sub_(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return _ops.sub_(self, other, alpha=alpha)

    def mul_(self, other: Any) -> Tensor:
        return _ops.mul_(self, other)

    def div_(self, other: Any) -> Tensor:
        return _ops.div_(self, other)

    def pow_(self, exponent: Any) -> Tensor:
        return _ops.pow_(self, exponent)

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:
        return _ops.clamp_(self, min, max)

    def relu_(self) -> Tensor:
        return _ops.relu_(self)

    def zero_(self) -> Tensor:
        return _ops.zero_(self)

    def fill_(self, value: Any) -> Tensor:
        return _ops.fill_(self, value)

    def copy_(self, src: Any) -> Tensor:
        return _ops.copy_(self, src)

    def masked_fill_(self, mask: Any, value: Any) -> Tensor:
        return _ops.masked_fill_(self, mask, value)

    def type_as(self, other: Tensor) -> Tensor:
        return _ops.to(self, other.dtype)

    def float(self) -> Tensor:
        return _ops.to(self, dtypes.float32)

    def double(self) -> Tensor:
        return _ops.to(self, dtypes.float64)

    def half(self) -> Tensor:
        return _ops.to(self, dtypes.float16)

    def long(self) -> Tensor:
        return _ops.to(self, dtypes.int64)

    def int(self) -> Tensor:
        return _ops.to(self, dtypes.int32)

    def bool(self) -> Tensor:
        return _ops.to(self, dtypes.bool_)

    @property
    def T(self) -> Tensor:
        return _ops.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self) -> Tensor:
        return _ops.transpose(self, -2, -1)

    # ----- shape, indexing and random ops -----
    def narrow(self, dim: _int, start: Any, length: _int) -> Tensor:
        return _ops.narrow(self, dim, start, length)

    def select(self, dim: _int, index: _int) -> Tensor:
        return _ops.select(self, dim, index)

    def flip(self, *dims: Any, **kwargs: Any) -> Tensor:
        if kwargs:  # t.flip(dims=...)
            if dims or set(kwargs) != {"dims"}:
                raise TypeError(f"flip() got an unexpected keyword argument {next(iter(kwargs))!r}")
            return _ops.flip(self, kwargs["dims"])
        return _ops.flip(self, dims[0] if len(dims) == 1 else dims)

    def roll(self, shifts: Any, dims: Any = None) -> Tensor:
        return _ops.roll(self, shifts, dims)

    def repeat(self, *sizes: Any) -> Tensor:
        return _ops.repeat(self, *sizes)

    def tile(self, *dims: Any) -> Tensor:
        return _ops.tile(
            self, dims[0] if len(dims) == 1 and not isinstance(dims[0], _int) else dims
        )

    def tril(self, diagonal: _int = 0) -> Tensor:
        return _ops.tril(self, diagonal)

    def triu(self, diagonal: _int = 0) -> Tensor:
        return _ops.triu(self, diagonal)

    def gather(self, dim: _int, index: Tensor, *, sparse_grad: _bool = False) -> Tensor:
        return _ops.gather(self, dim, index)

    def scatter_add(self, dim: _int, index: Tensor, src: Tensor) -> Tensor:
        return _ops.scatter_add(self, dim, index, src)

    def scatter_add_(self, dim: _int, index: Tensor, src: Tensor) -> Tensor:
        return _ops.scatter_add_(self, dim, index, src)

    def index_select(self, dim: _int, index: Tensor) -> Tensor:
        return _ops.index_select(self, dim, index)

    def multinomial(
        self, num_samples: _int, replacement: _bool = False, *, generator: Any = None
    ) -> Tensor:
        return _ops.multinomial(self, num_samples, replacement, generator=generator)

    def _index_add_zeros(self, index: tuple[Any, ...], shape: tuple[_int, ...]) -> Tensor:
        """Zeros of ``shape`` with this tensor added at ``index`` (getitem's backward)."""
        return _ops.index_add_zeros(self, index, shape)

    # ----- var, std, prod, norm, cumsum, all, any; dot, outer; sort, topk, nonzero -----
    def var(
        self,
        dim: Any = None,
        unbiased: _bool | None = None,
        keepdim: _bool = False,
        *,
        correction: Any = None,
    ) -> Tensor:
        return _ops.var(self, dim, unbiased, keepdim, correction=correction)

    def std(
        self,
        dim: Any = None,
        unbiased: _bool | None = None,
        keepdim: _bool = False,
        *,
        correction: Any = None,
    ) -> Tensor:
        return _ops.std(self, dim, unbiased, keepdim, correction=correction)

    def prod(self, dim: _int | None = None, keepdim: _bool = False, *, dtype: Any = None) -> Tensor:
        return _ops.prod(self, dim, keepdim, dtype=dtype)

    def norm(
        self, p: Any = "fro", dim: Any = None, keepdim: _bool = False, dtype: Any = None
    ) -> Tensor:
        return _ops.norm(self, p, dim, keepdim, dtype)

    def cumsum(self, dim: _int, *, dtype: Any = None) -> Tensor:
        return _ops.cumsum(self, dim, dtype=dtype)

    def all(self, dim: Any = None, keepdim: _bool = False) -> Tensor:
        return _ops.all(self, dim, keepdim)

    def any(self, dim: Any = None, keepdim: _bool = False) -> Tensor:
        return _ops.any(self, dim, keepdim)

    def dot(self, other: Tensor) -> Tensor:
        return _ops.dot(self, other)

    def outer(self, vec2: Tensor) -> Tensor:
        return _ops.outer(self, vec2)

    def sort(self, dim: _int = -1, descending: _bool = False, *, stable: _bool = False) -> Any:
        return _ops.sort(self, dim, descending, stable=stable)

    def argsort(
        self, dim: _int = -1, descending: _bool = False, *, stable: _bool = False
    ) -> Tensor:
        return _ops.argsort(self, dim, descending, stable=stable)

    def topk(self, k: _int, dim: _int = -1, largest: _bool = True, sorted: _bool = True) -> Any:
        return _ops.topk(self, k, dim, largest, sorted)

    def nonzero(self, *, as_tuple: _bool = False) -> Any:
        return _ops.nonzero(self, as_tuple=as_tuple)

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Tensor:
        return _ops.pointwise.plain_add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _ops.add(other, self)

    def __iadd__(self, other: Any) -> Tensor:
        return _ops.add_(self, other)

    def __sub__(self, other: Any) -> Tensor:
        return _ops.pointwise.plain_sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _ops.sub(other, self)

    def __isub__(self, other: Any) -> Tensor:
        return _ops.sub_(self, other)

    def __mul__(self, other: Any) -> Tensor:
        return _ops.mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _ops.mul(other, self)

    def __imul__(self, other: Any) -> Tensor:
        return _ops.mul_(self, other)

    def __truediv__(self, other: Any) -> Tensor:
        return _ops.pointwise.plain_div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _ops.div(other, self)

    def __itruediv__(self, other: Any) -> Tensor:
        return _ops.div_(self, other)

    def __floordiv__(self, other: Any) -> Tensor:
        return _ops.floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return _ops.floor_divide(other, self)

    def __mod__(self, other: Any) -> Tensor:
        return _ops.remainder(self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return _ops.remainder(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _ops.pow(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _ops.pow(other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return _ops.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _ops.matmul(other, self)

    def __neg__(self) -> Tensor:
        return _ops.neg(self)

    def __abs__(self) -> Tensor:
        return _ops.abs(self)

    # Comparisons are elementwise and return Tensors, as torch's (object's return bool).
    # ``t == other`` compares elements only with a tensor, an array or a number; anything else
    # (None, a string, a list) is unequal, as torch's (Python's identity fallback).
    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        if not _comparable(other):
            return NotImplemented
        return _ops.eq(self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        if not _comparable(other):
            return NotImplemented
        return _ops.ne(self, other)

    def __lt__(self, other: Any) -> Tensor:
        return _ops.lt(self, other)

    def __le__(self, other: Any) -> Tensor:
        return _ops.le(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return _ops.gt(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return _ops.ge(self, other)

    # ``&``, ``|`` and ``~`` are bitwise, as torch's: logical on bool tensors, bitwise on integers.
    def __and__(self, other: Any) -> Tensor:
        return _ops.bitwise_and(self, other)

    def __or__(self, other: Any) -> Tensor:
        return _ops.bitwise_or(self, other)

    def __invert__(self) -> Tensor:
        return _ops.bitwise_not(self)

    def __getitem__(self, index: Any) -> Tensor:
        return _ops.getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        _ops.setitem(self, index, value)

    # __eq__ returns a Tensor, so hashing is by identity (as torch's).
    __hash__ = object.__hash__

    # ------------------------------------------------------------------ NumPy protocols
    # See NOTE [Rules are NumPy]: NumPy calls on Tensors run asyncgrad ops.
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return _ops.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return _ops.array_function(func, args, kwargs)

    # ----- torch's other names: view_as, new_*, diagonal, unique, data_ptr, type() -----
    def view_as(self, other: Tensor) -> Tensor:
        return _ops.view_as(self, other)

    def diagonal(self, offset: _int = 0, dim1: _int = 0, dim2: _int = 1) -> Tensor:
        return _ops.diagonal(self, offset, dim1, dim2)

    def split_with_sizes(self, split_sizes: Sequence[_int], dim: _int = 0) -> tuple[Tensor, ...]:
        return _ops.split_with_sizes(self, split_sizes, dim)

    def unique(
        self,
        sorted: _bool = True,
        return_inverse: _bool = False,
        return_counts: _bool = False,
        dim: _int | None = None,
    ) -> Any:
        return _ops.unique(self, sorted, return_inverse, return_counts, dim)

    def clip_(self, min: Any = None, max: Any = None) -> Tensor:
        return _ops.clip_(self, min, max)

    def data_ptr(self) -> _int:
        """The address of the first element (as torch's, for identity checks of storage)."""
        return _ops.data_ptr(self)

    def const_data_ptr(self) -> _int:
        """``data_ptr()``, for read-only use (torch's name)."""
        return _ops.data_ptr(self)

    @property
    def layout(self) -> dtypes.layout:
        """``ag.strided``: every asyncgrad tensor is dense and strided."""
        return dtypes.strided

    def new(self, *args: Any) -> Tensor:
        return _ops.new(self, *args)

    def new_tensor(
        self, data: Any, *, dtype: Any = None, device: Any = None, requires_grad: _bool = False
    ) -> Tensor:
        return _ops.new_tensor(self, data, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_full(
        self,
        size: Any,
        fill_value: Any,
        *,
        dtype: Any = None,
        device: Any = None,
        requires_grad: _bool = False,
    ) -> Tensor:
        return _ops.new_full(
            self, size, fill_value, dtype=dtype, device=device, requires_grad=requires_grad
        )

    def new_zeros(
        self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: _bool = False
    ) -> Tensor:
        return _ops.new_full(self, size, 0, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_ones(
        self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: _bool = False
    ) -> Tensor:
        return _ops.new_full(self, size, 1, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_empty(
        self, *size: Any, dtype: Any = None, device: Any = None, requires_grad: _bool = False
    ) -> Tensor:
        return _ops.new_full(self, size, 0, dtype=dtype, device=device, requires_grad=requires_grad)

    # ----- section H1 -----
    def acos(self) -> Tensor:
        return _ops.acos(self)

    def acosh(self) -> Tensor:
        return _ops.acosh(self)

    def asin(self) -> Tensor:
        return _ops.asin(self)

    def asinh(self) -> Tensor:
        return _ops.asinh(self)

    def atan(self) -> Tensor:
        return _ops.atan(self)

    def atanh(self) -> Tensor:
        return _ops.atanh(self)

    def arccos(self) -> Tensor:
        return _ops.arccos(self)

    def arccosh(self) -> Tensor:
        return _ops.arccosh(self)

    def arcsin(self) -> Tensor:
        return _ops.arcsin(self)

    def arcsinh(self) -> Tensor:
        return _ops.arcsinh(self)

    def arctan(self) -> Tensor:
        return _ops.arctan(self)

    def arctanh(self) -> Tensor:
        return _ops.arctanh(self)

    def cosh(self) -> Tensor:
        return _ops.cosh(self)

    def sinh(self) -> Tensor:
        return _ops.sinh(self)

    def ceil(self) -> Tensor:
        return _ops.ceil(self)

    def floor(self) -> Tensor:
        return _ops.floor(self)

    def trunc(self) -> Tensor:
        return _ops.trunc(self)

    def fix(self) -> Tensor:
        return _ops.fix(self)

    def frac(self) -> Tensor:
        return _ops.frac(self)

    def sgn(self) -> Tensor:
        return _ops.sgn(self)

    def signbit(self) -> Tensor:
        return _ops.signbit(self)

    def exp2(self) -> Tensor:
        return _ops.exp2(self)

    def log2(self) -> Tensor:
        return _ops.log2(self)

    def log10(self) -> Tensor:
        return _ops.log10(self)

    def sinc(self) -> Tensor:
        return _ops.sinc(self)

    def deg2rad(self) -> Tensor:
        return _ops.deg2rad(self)

    def rad2deg(self) -> Tensor:
        return _ops.rad2deg(self)

    def square(self) -> Tensor:
        return _ops.square(self)

    def erfc(self) -> Tensor:
        return _ops.erfc(self)

    def erfinv(self) -> Tensor:
        return _ops.erfinv(self)

    def lgamma(self) -> Tensor:
        return _ops.lgamma(self)

    def digamma(self) -> Tensor:
        return _ops.digamma(self)

    def i0(self) -> Tensor:
        return _ops.i0(self)

    def isinf(self) -> Tensor:
        return _ops.isinf(self)

    def isposinf(self) -> Tensor:
        return _ops.isposinf(self)

    def isneginf(self) -> Tensor:
        return _ops.isneginf(self)

    def isreal(self) -> Tensor:
        return _ops.isreal(self)

    def angle(self) -> Tensor:
        return _ops.angle(self)

    def positive(self) -> Tensor:
        return _ops.positive(self)

    def absolute(self) -> Tensor:
        return _ops.absolute(self)

    def negative(self) -> Tensor:
        return _ops.negative(self)

    def bitwise_not(self) -> Tensor:
        return _ops.bitwise_not(self)

    def atan2(self, other: Any) -> Tensor:
        return _ops.atan2(self, other)

    def arctan2(self, other: Any) -> Tensor:
        return _ops.arctan2(self, other)

    def hypot(self, other: Any) -> Tensor:
        return _ops.hypot(self, other)

    def copysign(self, other: Any) -> Tensor:
        return _ops.copysign(self, other)

    def nextafter(self, other: Any) -> Tensor:
        return _ops.nextafter(self, other)

    def ldexp(self, other: Any) -> Tensor:
        return _ops.ldexp(self, other)

    def fmod(self, other: Any) -> Tensor:
        return _ops.fmod(self, other)

    def fmax(self, other: Any) -> Tensor:
        return _ops.fmax(self, other)

    def fmin(self, other: Any) -> Tensor:
        return _ops.fmin(self, other)

    def logaddexp(self, other: Any) -> Tensor:
        return _ops.logaddexp(self, other)

    def logaddexp2(self, other: Any) -> Tensor:
        return _ops.logaddexp2(self, other)

    def xlogy(self, other: Any) -> Tensor:
        return _ops.xlogy(self, other)

    def igamma(self, other: Any) -> Tensor:
        return _ops.igamma(self, other)

    def igammac(self, other: Any) -> Tensor:
        return _ops.igammac(self, other)

    def gcd(self, other: Any) -> Tensor:
        return _ops.gcd(self, other)

    def lcm(self, other: Any) -> Tensor:
        return _ops.lcm(self, other)

    def bitwise_and(self, other: Any) -> Tensor:
        return _ops.bitwise_and(self, other)

    def bitwise_or(self, other: Any) -> Tensor:
        return _ops.bitwise_or(self, other)

    def bitwise_xor(self, other: Any) -> Tensor:
        return _ops.bitwise_xor(self, other)

    def bitwise_left_shift(self, other: Any) -> Tensor:
        return _ops.bitwise_left_shift(self, other)

    def bitwise_right_shift(self, other: Any) -> Tensor:
        return _ops.bitwise_right_shift(self, other)

    def logical_xor(self, other: Any) -> Tensor:
        return _ops.logical_xor(self, other)

    def logical_and(self, other: Any) -> Tensor:
        return _ops.logical_and(self, other)

    def logical_or(self, other: Any) -> Tensor:
        return _ops.logical_or(self, other)

    def greater(self, other: Any) -> Tensor:
        return _ops.greater(self, other)

    def greater_equal(self, other: Any) -> Tensor:
        return _ops.greater_equal(self, other)

    def less(self, other: Any) -> Tensor:
        return _ops.less(self, other)

    def less_equal(self, other: Any) -> Tensor:
        return _ops.less_equal(self, other)

    def not_equal(self, other: Any) -> Tensor:
        return _ops.not_equal(self, other)

    def multiply(self, other: Any) -> Tensor:
        return _ops.multiply(self, other)

    def heaviside(self, values: Any) -> Tensor:
        return _ops.heaviside(self, values)

    def float_power(self, exponent: Any) -> Tensor:
        return _ops.float_power(self, exponent)

    def true_divide(self, value: Any) -> Tensor:
        return _ops.true_divide(self, value)

    def abs_(self) -> Tensor:
        return _ops.abs_(self)

    def absolute_(self) -> Tensor:
        return _ops.pointwise_math.absolute_(self)

    def acos_(self) -> Tensor:
        return _ops.acos_(self)

    def acosh_(self) -> Tensor:
        return _ops.acosh_(self)

    def arccos_(self) -> Tensor:
        return _ops.arccos_(self)

    def arccosh_(self) -> Tensor:
        return _ops.arccosh_(self)

    def arcsin_(self) -> Tensor:
        return _ops.arcsin_(self)

    def arcsinh_(self) -> Tensor:
        return _ops.arcsinh_(self)

    def arctan_(self) -> Tensor:
        return _ops.arctan_(self)

    def arctanh_(self) -> Tensor:
        return _ops.arctanh_(self)

    def asin_(self) -> Tensor:
        return _ops.asin_(self)

    def asinh_(self) -> Tensor:
        return _ops.asinh_(self)

    def atan_(self) -> Tensor:
        return _ops.atan_(self)

    def atanh_(self) -> Tensor:
        return _ops.atanh_(self)

    def bitwise_not_(self) -> Tensor:
        return _ops.pointwise_math.bitwise_not_(self)

    def ceil_(self) -> Tensor:
        return _ops.ceil_(self)

    def cos_(self) -> Tensor:
        return _ops.cos_(self)

    def cosh_(self) -> Tensor:
        return _ops.cosh_(self)

    def deg2rad_(self) -> Tensor:
        return _ops.deg2rad_(self)

    def digamma_(self) -> Tensor:
        return _ops.pointwise_math.digamma_(self)

    def erf_(self) -> Tensor:
        return _ops.erf_(self)

    def erfc_(self) -> Tensor:
        return _ops.erfc_(self)

    def erfinv_(self) -> Tensor:
        return _ops.pointwise_math.erfinv_(self)

    def exp2_(self) -> Tensor:
        return _ops.exp2_(self)

    def exp_(self) -> Tensor:
        return _ops.exp_(self)

    def expm1_(self) -> Tensor:
        return _ops.expm1_(self)

    def fix_(self) -> Tensor:
        return _ops.fix_(self)

    def floor_(self) -> Tensor:
        return _ops.floor_(self)

    def frac_(self) -> Tensor:
        return _ops.frac_(self)

    def i0_(self) -> Tensor:
        return _ops.i0_(self)

    def lgamma_(self) -> Tensor:
        return _ops.pointwise_math.lgamma_(self)

    def log10_(self) -> Tensor:
        return _ops.log10_(self)

    def log1p_(self) -> Tensor:
        return _ops.log1p_(self)

    def log2_(self) -> Tensor:
        return _ops.log2_(self)

    def log_(self) -> Tensor:
        return _ops.log_(self)

    def logical_not_(self) -> Tensor:
        return _ops.pointwise_math.logical_not_(self)

    def neg_(self) -> Tensor:
        return _ops.neg_(self)

    def negative_(self) -> Tensor:
        return _ops.negative_(self)

    def rad2deg_(self) -> Tensor:
        return _ops.rad2deg_(self)

    def reciprocal_(self) -> Tensor:
        return _ops.reciprocal_(self)

    def rsqrt_(self) -> Tensor:
        return _ops.rsqrt_(self)

    def sgn_(self) -> Tensor:
        return _ops.pointwise_math.sgn_(self)

    def sigmoid_(self) -> Tensor:
        return _ops.sigmoid_(self)

    def sign_(self) -> Tensor:
        return _ops.pointwise_math.sign_(self)

    def sin_(self) -> Tensor:
        return _ops.sin_(self)

    def sinc_(self) -> Tensor:
        return _ops.sinc_(self)

    def sinh_(self) -> Tensor:
        return _ops.sinh_(self)

    def sqrt_(self) -> Tensor:
        return _ops.sqrt_(self)

    def square_(self) -> Tensor:
        return _ops.square_(self)

    def tan_(self) -> Tensor:
        return _ops.tan_(self)

    def tanh_(self) -> Tensor:
        return _ops.tanh_(self)

    def trunc_(self) -> Tensor:
        return _ops.trunc_(self)

    def arctan2_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.arctan2_(self, other)

    def atan2_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.atan2_(self, other)

    def bitwise_and_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_and_(self, other)

    def bitwise_left_shift_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_left_shift_(self, other)

    def bitwise_or_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_or_(self, other)

    def bitwise_right_shift_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_right_shift_(self, other)

    def bitwise_xor_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_xor_(self, other)

    def copysign_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.copysign_(self, other)

    def eq_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.eq_(self, other)

    def floor_divide_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.floor_divide_(self, other)

    def fmod_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.fmod_(self, other)

    def gcd_(self, other: Any) -> Tensor:
        return _ops.gcd_(self, other)

    def ge_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.ge_(self, other)

    def greater_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.greater_(self, other)

    def greater_equal_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.greater_equal_(self, other)

    def gt_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.gt_(self, other)

    def hypot_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.hypot_(self, other)

    def igamma_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.igamma_(self, other)

    def igammac_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.igammac_(self, other)

    def lcm_(self, other: Any) -> Tensor:
        return _ops.lcm_(self, other)

    def ldexp_(self, other: Any) -> Tensor:
        return _ops.ldexp_(self, other)

    def le_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.le_(self, other)

    def less_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.less_(self, other)

    def less_equal_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.less_equal_(self, other)

    def logical_and_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.logical_and_(self, other)

    def logical_or_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.logical_or_(self, other)

    def logical_xor_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.logical_xor_(self, other)

    def lt_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.lt_(self, other)

    def multiply_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.multiply_(self, other)

    def ne_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.ne_(self, other)

    def nextafter_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.nextafter_(self, other)

    def not_equal_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.not_equal_(self, other)

    def remainder_(self, other: Any) -> Tensor:
        return _ops.pointwise_math.remainder_(self, other)

    def xlogy_(self, other: Any) -> Tensor:
        return _ops.xlogy_(self, other)

    def divide(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        return _ops.divide(self, other, rounding_mode=rounding_mode)

    def divide_(self, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        return _ops.pointwise_math.divide_(self, other, rounding_mode=rounding_mode)

    def true_divide_(self, value: Any) -> Tensor:
        return _ops.pointwise_math.true_divide_(self, value)

    def subtract(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return _ops.subtract(self, other, alpha=alpha)

    def subtract_(self, other: Any, *, alpha: Any = 1) -> Tensor:
        return _ops.pointwise_math.subtract_(self, other, alpha=alpha)

    def heaviside_(self, values: Any) -> Tensor:
        return _ops.pointwise_math.heaviside_(self, values)

    def float_power_(self, exponent: Any) -> Tensor:
        return _ops.pointwise_math.float_power_(self, exponent)

    def round(self, decimals: _int = 0) -> Tensor:
        return _ops.round(self, decimals=decimals)

    def round_(self, decimals: _int = 0) -> Tensor:
        return _ops.round_(self, decimals=decimals)

    def logit(self, eps: _float | None = None) -> Tensor:
        return _ops.logit(self, eps)

    def logit_(self, eps: _float | None = None) -> Tensor:
        return _ops.logit_(self, eps)

    def polygamma(self, n: _int) -> Tensor:
        return _ops.polygamma(n, self)

    def polygamma_(self, n: _int) -> Tensor:
        return _ops.pointwise_math.polygamma_(self, n)

    def mvlgamma(self, p: _int) -> Tensor:
        return _ops.mvlgamma(self, p)

    def mvlgamma_(self, p: _int) -> Tensor:
        return _ops.pointwise_math.mvlgamma_(self, p)

    def nan_to_num(
        self, nan: _float = 0.0, posinf: _float | None = None, neginf: _float | None = None
    ) -> Tensor:
        return _ops.nan_to_num(self, nan, posinf, neginf)

    def nan_to_num_(
        self, nan: _float = 0.0, posinf: _float | None = None, neginf: _float | None = None
    ) -> Tensor:
        return _ops.nan_to_num_(self, nan, posinf, neginf)

    def isclose(
        self, other: Any, rtol: _float = 1e-05, atol: _float = 1e-08, equal_nan: _bool = False
    ) -> Tensor:
        return _ops.isclose(self, other, rtol, atol, equal_nan)

    def lerp(self, end: Any, weight: Any) -> Tensor:
        return _ops.lerp(self, end, weight)

    def lerp_(self, end: Any, weight: Any) -> Tensor:
        return _ops.pointwise_math.lerp_(self, end, weight)

    def addcmul(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        return _ops.addcmul(self, tensor1, tensor2, value=value)

    def addcmul_(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        return _ops.pointwise_math.addcmul_(self, tensor1, tensor2, value=value)

    def addcdiv(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        return _ops.addcdiv(self, tensor1, tensor2, value=value)

    def addcdiv_(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        return _ops.pointwise_math.addcdiv_(self, tensor1, tensor2, value=value)

    def clamp_min(self, min: Any) -> Tensor:
        return _ops.clamp_min(self, min)

    def clamp_min_(self, min: Any) -> Tensor:
        return _ops.clamp_min_(self, min)

    def clamp_max(self, max: Any) -> Tensor:
        return _ops.clamp_max(self, max)

    def clamp_max_(self, max: Any) -> Tensor:
        return _ops.clamp_max_(self, max)

    def where(self, condition: Any, y: Any) -> Tensor:
        return _ops.where(condition, self, y)

    def frexp(self) -> Any:
        return _ops.frexp(self)

    @property
    def real(self) -> Tensor:
        """The real part: the tensor itself for a real dtype, as torch's."""
        return self

    # Python's bitwise operators, as torch's (the bitwise_* ops).
    def __xor__(self, other: Any) -> Tensor:
        return _ops.bitwise_xor(self, other)

    def __rxor__(self, other: Any) -> Tensor:
        return _ops.bitwise_xor(other, self)

    def __rand__(self, other: Any) -> Tensor:
        return _ops.bitwise_and(other, self)

    def __ror__(self, other: Any) -> Tensor:
        return _ops.bitwise_or(other, self)

    def __lshift__(self, other: Any) -> Tensor:
        return _ops.bitwise_left_shift(self, other)

    def __rlshift__(self, other: Any) -> Tensor:
        return _ops.bitwise_left_shift(other, self)

    def __rshift__(self, other: Any) -> Tensor:
        return _ops.bitwise_right_shift(self, other)

    def __rrshift__(self, other: Any) -> Tensor:
        return _ops.bitwise_right_shift(other, self)

    def __iand__(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_and_(self, other)

    def __ior__(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_or_(self, other)

    def __ixor__(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_xor_(self, other)

    def __ilshift__(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_left_shift_(self, other)

    def __irshift__(self, other: Any) -> Tensor:
        return _ops.pointwise_math.bitwise_right_shift_(self, other)

    def __pos__(self) -> Tensor:
        return _ops.positive(self)

    # ----- end of section H1 -----

    # ----- section H2 -----
    def median(self, dim: Any = None, keepdim: _bool = False) -> Any:
        return _ops.median(self, dim, keepdim)

    def nanmedian(self, dim: Any = None, keepdim: _bool = False) -> Any:
        return _ops.nanmedian(self, dim, keepdim)

    def mode(self, dim: _int = -1, keepdim: _bool = False) -> Any:
        return _ops.mode(self, dim, keepdim)

    def kthvalue(self, k: _int, dim: _int = -1, keepdim: _bool = False) -> Any:
        return _ops.kthvalue(self, k, dim, keepdim)

    def quantile(
        self, q: Any, dim: Any = None, keepdim: _bool = False, *, interpolation: str = "linear"
    ) -> Tensor:
        return _ops.quantile(self, q, dim, keepdim, interpolation=interpolation)

    def nanquantile(
        self, q: Any, dim: Any = None, keepdim: _bool = False, *, interpolation: str = "linear"
    ) -> Tensor:
        return _ops.nanquantile(self, q, dim, keepdim, interpolation=interpolation)

    def msort(self) -> Tensor:
        return _ops.msort(self)

    def aminmax(self, *, dim: Any = None, keepdim: _bool = False) -> Any:
        return _ops.aminmax(self, dim=dim, keepdim=keepdim)

    def cumprod(self, dim: _int, *, dtype: Any = None) -> Tensor:
        return _ops.cumprod(self, dim, dtype=dtype)

    def cumprod_(self, dim: _int, *, dtype: Any = None) -> Tensor:
        return _ops.cumprod_(self, dim, dtype=dtype)

    def cumsum_(self, dim: _int, *, dtype: Any = None) -> Tensor:
        return _ops.cumsum_(self, dim, dtype=dtype)

    def cummax(self, dim: _int) -> Any:
        return _ops.cummax(self, dim)

    def cummin(self, dim: _int) -> Any:
        return _ops.cummin(self, dim)

    def logcumsumexp(self, dim: _int) -> Tensor:
        return _ops.logcumsumexp(self, dim)

    def nansum(self, dim: Any = None, keepdim: _bool = False, *, dtype: Any = None) -> Tensor:
        return _ops.nansum(self, dim, keepdim, dtype=dtype)

    def nanmean(self, dim: Any = None, keepdim: _bool = False, *, dtype: Any = None) -> Tensor:
        return _ops.nanmean(self, dim, keepdim, dtype=dtype)

    def count_nonzero(self, dim: Any = None) -> Tensor:
        return _ops.count_nonzero(self, dim)

    def diff(self, n: _int = 1, dim: _int = -1, prepend: Any = None, append: Any = None) -> Tensor:
        return _ops.diff(self, n, dim, prepend, append)

    def trace(self) -> Tensor:
        return _ops.trace(self)

    def dist(self, other: Tensor, p: Any = 2) -> Tensor:
        return _ops.dist(self, other, p)

    def cov(self, *, correction: _int = 1, fweights: Any = None, aweights: Any = None) -> Tensor:
        return _ops.cov(self, correction=correction, fweights=fweights, aweights=aweights)

    def corrcoef(self) -> Tensor:
        return _ops.corrcoef(self)

    def histc(self, bins: _int = 100, min: Any = 0, max: Any = 0) -> Tensor:
        return _ops.histc(self, bins, min, max)

    def histogram(
        self, bins: Any = 100, *, range: Any = None, weight: Any = None, density: _bool = False
    ) -> Any:
        return _ops.histogram(self, bins, range=range, weight=weight, density=density)

    def bincount(self, weights: Any = None, minlength: _int = 0) -> Tensor:
        return _ops.bincount(self, weights, minlength)

    def unique_consecutive(
        self, return_inverse: _bool = False, return_counts: _bool = False, dim: Any = None
    ) -> Any:
        return _ops.unique_consecutive(self, return_inverse, return_counts, dim)

    def renorm(self, p: Any, dim: _int, maxnorm: Any) -> Tensor:
        return _ops.renorm(self, p, dim, maxnorm)

    def renorm_(self, p: Any, dim: _int, maxnorm: Any) -> Tensor:
        return _ops.renorm_(self, p, dim, maxnorm)

    # ----- end of section H2 -----

    # ----- section H3 -----
    # shapes and views (asyncgrad/ops/views.py)
    def movedim(self, source: Any, destination: Any) -> Tensor:
        return _ops.movedim(self, source, destination)

    def moveaxis(self, source: Any, destination: Any) -> Tensor:
        return _ops.movedim(self, source, destination)

    def swapdims(self, dim0: _int, dim1: _int) -> Tensor:
        return _ops.transpose(self, dim0, dim1)

    def swapdims_(self, dim0: _int, dim1: _int) -> Tensor:
        return _ops.views.transpose_(self, dim0, dim1)

    def swapaxes_(self, axis0: _int, axis1: _int) -> Tensor:
        return _ops.views.transpose_(self, axis0, axis1)

    def transpose_(self, dim0: _int, dim1: _int) -> Tensor:
        return _ops.views.transpose_(self, dim0, dim1)

    def t_(self) -> Tensor:
        return _ops.views.t_(self)

    def squeeze_(self, dim: Any = None) -> Tensor:
        return _ops.views.squeeze_(self, dim)

    def unsqueeze_(self, dim: _int) -> Tensor:
        return _ops.views.unsqueeze_(self, dim)

    def ravel(self) -> Tensor:
        return _ops.ravel(self)

    def reshape_as(self, other: Tensor) -> Tensor:
        return _ops.reshape(self, tuple(other.shape))

    def unfold(self, dimension: _int, size: _int, step: _int) -> Tensor:
        return _ops.views.unfold(self, dimension, size, step)

    def as_strided(
        self, size: Sequence[_int], stride: Sequence[_int], storage_offset: _int | None = None
    ) -> Tensor:
        return _ops.as_strided(self, size, stride, storage_offset)

    def as_strided_(
        self, size: Sequence[_int], stride: Sequence[_int], storage_offset: _int | None = None
    ) -> Tensor:
        return _ops.as_strided_(self, size, stride, storage_offset)

    def as_strided_scatter(
        self,
        src: Tensor,
        size: Sequence[_int],
        stride: Sequence[_int],
        storage_offset: _int | None = None,
    ) -> Tensor:
        return _ops.as_strided_scatter(self, src, size, stride, storage_offset)

    def tensor_split(self, indices_or_sections: Any, dim: _int = 0) -> tuple[Tensor, ...]:
        return _ops.tensor_split(self, indices_or_sections, dim)

    def hsplit(self, sections: Any) -> tuple[Tensor, ...]:
        return _ops.hsplit(self, sections)

    def vsplit(self, sections: Any) -> tuple[Tensor, ...]:
        return _ops.vsplit(self, sections)

    def dsplit(self, sections: Any) -> tuple[Tensor, ...]:
        return _ops.dsplit(self, sections)

    def rot90(self, k: _int = 1, dims: Sequence[_int] = (0, 1)) -> Tensor:
        return _ops.rot90(self, k, dims)

    def fliplr(self) -> Tensor:
        return _ops.fliplr(self)

    def flipud(self) -> Tensor:
        return _ops.flipud(self)

    def diag(self, diagonal: _int = 0) -> Tensor:
        return _ops.diag(self, diagonal)

    def diag_embed(self, offset: _int = 0, dim1: _int = -2, dim2: _int = -1) -> Tensor:
        return _ops.diag_embed(self, offset, dim1, dim2)

    def diagflat(self, offset: _int = 0) -> Tensor:
        return _ops.diagflat(self, offset)

    def narrow_copy(self, dim: _int, start: _int, length: _int) -> Tensor:
        return _ops.narrow_copy(self, dim, start, length)

    def repeat_interleave(
        self, repeats: Any = None, dim: _int | None = None, *, output_size: _int | None = None
    ) -> Tensor:
        return _ops.repeat_interleave(self, repeats, dim, output_size=output_size)

    def take(self, index: Tensor) -> Tensor:
        return _ops.take(self, index)

    def take_along_dim(self, indices: Tensor, dim: _int | None = None) -> Tensor:
        return _ops.take_along_dim(self, indices, dim)

    def argwhere(self) -> Tensor:
        return _ops.argwhere(self)

    def masked_select(self, mask: Tensor) -> Tensor:
        return _ops.masked_select(self, mask)

    def tril_(self, diagonal: _int = 0) -> Tensor:
        return _ops.views.tril_(self, diagonal)

    def triu_(self, diagonal: _int = 0) -> Tensor:
        return _ops.views.triu_(self, diagonal)

    def sum_to_size(self, *size: Any) -> Tensor:
        return _ops.views.sum_to_size(self, *size)

    # scatter and index_* (asyncgrad/ops/views.py)
    def scatter(
        self, dim: _int, index: Tensor, src: Any = None, *, value: Any = None, reduce: Any = None
    ) -> Tensor:
        return _ops.scatter(self, dim, index, src, value=value, reduce=reduce)

    def scatter_(
        self, dim: _int, index: Tensor, src: Any = None, *, value: Any = None, reduce: Any = None
    ) -> Tensor:
        return _ops.views.scatter_(self, dim, index, src, value=value, reduce=reduce)

    def scatter_reduce(
        self, dim: _int, index: Tensor, src: Tensor, reduce: str, *, include_self: _bool = True
    ) -> Tensor:
        return _ops.scatter_reduce(self, dim, index, src, reduce, include_self=include_self)

    def scatter_reduce_(
        self, dim: _int, index: Tensor, src: Tensor, reduce: str, *, include_self: _bool = True
    ) -> Tensor:
        return _ops.views.scatter_reduce_(self, dim, index, src, reduce, include_self=include_self)

    def index_add(self, dim: _int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
        return _ops.index_add(self, dim, index, source, alpha=alpha)

    def index_add_(self, dim: _int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
        return _ops.views.index_add_(self, dim, index, source, alpha=alpha)

    def index_copy(self, dim: _int, index: Tensor, source: Tensor) -> Tensor:
        return _ops.index_copy(self, dim, index, source)

    def index_copy_(self, dim: _int, index: Tensor, source: Tensor) -> Tensor:
        return _ops.views.index_copy_(self, dim, index, source)

    def index_fill(self, dim: _int, index: Tensor, value: Any) -> Tensor:
        return _ops.index_fill(self, dim, index, value)

    def index_fill_(self, dim: _int, index: Tensor, value: Any) -> Tensor:
        return _ops.views.index_fill_(self, dim, index, value)

    def index_put(self, indices: Any, values: Any, accumulate: _bool = False) -> Tensor:
        return _ops.index_put(self, indices, values, accumulate)

    def index_put_(self, indices: Any, values: Any, accumulate: _bool = False) -> Tensor:
        return _ops.index_put_(self, indices, values, accumulate)

    def index_reduce(
        self, dim: _int, index: Tensor, source: Tensor, reduce: str, *, include_self: _bool = True
    ) -> Tensor:
        return _ops.index_reduce(self, dim, index, source, reduce, include_self=include_self)

    def index_reduce_(
        self, dim: _int, index: Tensor, source: Tensor, reduce: str, *, include_self: _bool = True
    ) -> Tensor:
        return _ops.views.index_reduce_(self, dim, index, source, reduce, include_self=include_self)

    def masked_scatter(self, mask: Tensor, source: Tensor) -> Tensor:
        return _ops.masked_scatter(self, mask, source)

    def masked_scatter_(self, mask: Tensor, source: Tensor) -> Tensor:
        return _ops.views.masked_scatter_(self, mask, source)

    def put(self, index: Tensor, source: Tensor, accumulate: _bool = False) -> Tensor:
        return _ops.put(self, index, source, accumulate)

    def put_(self, index: Tensor, source: Tensor, accumulate: _bool = False) -> Tensor:
        return _ops.views.put_(self, index, source, accumulate)

    def select_scatter(self, src: Tensor, dim: _int, index: _int) -> Tensor:
        return _ops.select_scatter(self, src, dim, index)

    def slice_scatter(
        self, src: Tensor, dim: _int = 0, start: Any = None, end: Any = None, step: _int = 1
    ) -> Tensor:
        return _ops.slice_scatter(self, src, dim, start, end, step)

    def diagonal_scatter(
        self, src: Tensor, offset: _int = 0, dim1: _int = 0, dim2: _int = 1
    ) -> Tensor:
        return _ops.diagonal_scatter(self, src, offset, dim1, dim2)

    def fill_diagonal_(self, fill_value: Any, wrap: _bool = False) -> Tensor:
        return _ops.views.fill_diagonal_(self, fill_value, wrap)

    # tensor facts: layout, dtype and device questions
    def stride(self, dim: _int | None = None) -> Any:
        a = self._array
        st = tuple(_int(s) // a.itemsize for s in a.strides)
        if a.size == 0:  # NumPy gives an empty array zero strides; torch a contiguous layout's
            acc, out = 1, []
            for n in reversed(a.shape):
                out.append(acc)
                acc *= max(_int(n), 1)
            st = tuple(reversed(out))
        if dim is None:
            return st
        nd = max(a.ndim, 1)
        if not -nd <= dim < nd:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got "
                f"{dim})"
            )
        return st[dim] if a.ndim else 1

    def storage_offset(self) -> _int:
        """The element offset of this tensor's first element in its base's memory."""
        base = self._base
        if base is None:
            return 0
        a, b = self._array, base._array
        return _int((backend.data_ptr(a) - backend.data_ptr(b)) // a.itemsize) if a.size else 0

    def is_contiguous(self, memory_format: Any = None) -> _bool:
        a = self._array
        if a.size <= 1:
            return True
        expect = 1
        for n, s in reversed(list(zip(a.shape, a.strides, strict=True))):
            if n != 1 and s != expect * a.itemsize:
                return False
            expect *= n
        return True

    def nelement(self) -> _int:
        return _int(self._array.size)

    def ndimension(self) -> _int:
        return _int(self._array.ndim)

    @property
    def nbytes(self) -> _int:
        return _int(self._array.size * self._array.itemsize)

    @property
    def itemsize(self) -> _int:
        return _int(self._array.itemsize)

    def is_signed(self) -> _bool:
        return _bool(self._array.dtype.kind in "fic")

    def is_nonzero(self) -> _bool:
        return _ops.is_nonzero(self)

    def is_same_size(self, other: Tensor) -> _bool:
        return _ops.is_same_size(self, other)

    def get_device(self) -> _int:
        """-1 for a CPU tensor, else the CUDA device's index."""
        d = self.device
        return -1 if d.type == "cpu" else _int(d.index or 0)

    @property
    def is_cpu(self) -> _bool:
        return self.device.type == "cpu"

    def is_neg(self) -> _bool:
        return False  # asyncgrad has no lazy negation (torch's conjugate views of complex)

    def resolve_neg(self) -> Tensor:
        return self

    def is_pinned(self, device: Any = None) -> _bool:
        return False

    def pin_memory(self, device: Any = None) -> Tensor:
        return self  # no page-locked host memory: the tensor as it is

    def is_shared(self) -> _bool:
        return False

    def share_memory_(self) -> Tensor:
        return self

    def is_distributed(self) -> _bool:
        return False

    def new_empty_strided(
        self,
        size: Sequence[_int],
        stride: Sequence[_int],
        *,
        dtype: Any = None,
        device: Any = None,
        requires_grad: _bool = False,
    ) -> Tensor:
        return _ops.empty_strided(
            size,
            stride,
            dtype=self.dtype if dtype is None else dtype,
            device=self.device if device is None else device,
            requires_grad=requires_grad,
        )

    def byte(self) -> Tensor:
        return _ops.to(self, dtypes.uint8)

    def char(self) -> Tensor:
        return _ops.to(self, dtypes.int8)

    def short(self) -> Tensor:
        return _ops.to(self, dtypes.int16)

    def bfloat16(self) -> Tensor:
        raise TypeError(
            "bfloat16 is not supported: NumPy (asyncgrad's CPU arrays) has no bfloat16 dtype; "
            "use half() or float()"
        )

    def resize_(self, *sizes: Any) -> Tensor:
        """Give the tensor shape ``sizes``, keeping its first elements (in order) and leaving
        any new ones uninitialised."""
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        shape = tuple(_int(s) for s in sizes)
        if any(s < 0 for s in shape):
            raise RuntimeError(f"Trying to create tensor with negative dimension: {list(shape)}")
        if type(self._vc) is not list:  # an inference tensor
            self._vc.refuse_write()  # type: ignore[attr-defined]
        if self.requires_grad:
            raise RuntimeError("cannot resize variables that require grad")
        a = self._array
        if shape == tuple(a.shape):
            return self
        n = math.prod(shape)
        if n == a.size and a.flags.c_contiguous:
            self._array = a.reshape(shape)
            return self
        out = backend.empty((n,), a.dtype, self.device)
        k = min(n, a.size)
        out[:k] = a.reshape(-1)[:k]
        self._array = out.reshape(shape)
        self._vc[0] += 1
        return self

    def resize_as_(self, other: Tensor, memory_format: Any = None) -> Tensor:
        return self.resize_(tuple(other.shape))

    def set_(
        self,
        source: Any = None,
        storage_offset: _int = 0,
        size: Any = None,
        stride: Any = None,
    ) -> Tensor:
        return _ops.views.set_(self, source, storage_offset, size, stride)

    # ----- end of section H3 -----

    # ----- section H4 -----
    # matrix products, ag.linalg's functions under torch's names (See asyncgrad/ops/matrix.py)
    def addmm(self, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def addmm_(self, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.matrix.addmm_(self, mat1, mat2, beta=beta, alpha=alpha)

    def addbmm(self, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.addbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def addbmm_(self, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.matrix.addbmm_(self, batch1, batch2, beta=beta, alpha=alpha)

    def baddbmm(self, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def baddbmm_(self, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.matrix.baddbmm_(self, batch1, batch2, beta=beta, alpha=alpha)

    def addmv(self, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.addmv(self, mat, vec, beta=beta, alpha=alpha)

    def addmv_(self, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.addmv_(self, mat, vec, beta=beta, alpha=alpha)

    def addr(self, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.addr(self, vec1, vec2, beta=beta, alpha=alpha)

    def addr_(self, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        return _ops.matrix.addr_(self, vec1, vec2, beta=beta, alpha=alpha)

    def mv(self, vec: Tensor) -> Tensor:
        return _ops.mv(self, vec)

    def ger(self, vec2: Tensor) -> Tensor:
        return _ops.ger(self, vec2)

    def inner(self, other: Tensor) -> Tensor:
        return _ops.inner(self, other)

    def vdot(self, other: Tensor) -> Tensor:
        return _ops.vdot(self, other)

    def kron(self, other: Tensor) -> Tensor:
        return _ops.kron(self, other)

    def cross(self, other: Tensor, dim: _int | None = None) -> Tensor:
        return _ops.cross(self, other, dim)

    def det(self) -> Tensor:
        return _ops.det(self)

    def logdet(self) -> Tensor:
        return _ops.logdet(self)

    def slogdet(self) -> Any:
        return _ops.slogdet(self)

    def inverse(self) -> Tensor:
        return _ops.inverse(self)

    def pinverse(self, rcond: Any = 1e-15) -> Tensor:
        return _ops.pinverse(self, rcond)

    def matrix_power(self, n: _int) -> Tensor:
        return _ops.matrix_power(self, n)

    def matrix_exp(self) -> Tensor:
        return _ops.matrix_exp(self)

    def cholesky(self, upper: _bool = False) -> Tensor:
        return _ops.cholesky(self, upper)

    def cholesky_inverse(self, upper: _bool = False) -> Tensor:
        return _ops.cholesky_inverse(self, upper)

    def cholesky_solve(self, input2: Tensor, upper: _bool = False) -> Tensor:
        return _ops.cholesky_solve(self, input2, upper)

    def qr(self, some: _bool = True) -> Any:
        return _ops.qr(self, some)

    def svd(self, some: _bool = True, compute_uv: _bool = True) -> Any:
        return _ops.svd(self, some, compute_uv)

    def lu(self, pivot: _bool = True, get_infos: _bool = False) -> Any:
        return _ops.lu(self, pivot, get_infos)

    def lu_solve(self, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:
        return _ops.lu_solve(self, LU_data, LU_pivots)

    def triangular_solve(
        self, A: Tensor, upper: _bool = True, transpose: _bool = False, unitriangular: _bool = False
    ) -> Any:
        return _ops.triangular_solve(self, A, upper, transpose, unitriangular)

    def geqrf(self) -> Any:
        return _ops.geqrf(self)

    def orgqr(self, input2: Tensor) -> Tensor:
        return _ops.orgqr(self, input2)

    def ormqr(
        self, input2: Tensor, input3: Tensor, left: _bool = True, transpose: _bool = False
    ) -> Tensor:
        return _ops.ormqr(self, input2, input3, left, transpose)

    def lstsq(self, other: Tensor) -> Any:
        raise _ops.matrix.removed("lstsq")

    def eig(self, eigenvectors: _bool = False) -> Any:
        raise _ops.matrix.removed("eig")

    def symeig(self, eigenvectors: _bool = False) -> Any:
        raise _ops.matrix.removed("symeig")

    def solve(self, other: Tensor) -> Any:
        raise _ops.matrix.removed("solve")

    # ----- end of section H4 -----

    # ----- section H5 -----
    def hardshrink(self, lambd: _float = 0.5) -> Tensor:
        return _ops.activations.hardshrink(self, lambd)

    def prelu(self, weight: Tensor) -> Tensor:
        return _ops.activations.prelu(self, weight)

    # ----- end of section H5 -----

    # ----- section H6 -----
    # ----- end of section H6 -----

    # ----- section H7 -----
    # ----- end of section H7 -----

    # ----- section H8 -----
    # ----- end of section H8 -----

    # ----- random draws (See NOTE [Random draws are constants] in asyncgrad/ops/sampling.py) -----
    def bernoulli(self, p: Any = None, *, generator: Any = None) -> Tensor:
        return _ops.bernoulli(self, p, generator=generator)

    def bernoulli_(self, p: Any = 0.5, *, generator: Any = None) -> Tensor:
        return _ops.sampling.bernoulli_(self, p, generator=generator)

    def normal_(self, mean: _float = 0.0, std: _float = 1.0, *, generator: Any = None) -> Tensor:
        return _ops.sampling.normal_(self, mean, std, generator=generator)

    def uniform_(
        self, a: _float = 0.0, b: _float = 1.0, *, generator: Any = None, **kwargs: Any
    ) -> Tensor:
        """``t.uniform_(from=0, to=1)``: draws from [from, to) (``a``/``b`` by position)."""
        return _ops.sampling.uniform_(self, a, b, generator=generator, **kwargs)

    def cauchy_(
        self, median: _float = 0.0, sigma: _float = 1.0, *, generator: Any = None
    ) -> Tensor:
        return _ops.sampling.cauchy_(self, median, sigma, generator=generator)

    def exponential_(self, lambd: _float = 1.0, *, generator: Any = None) -> Tensor:
        return _ops.sampling.exponential_(self, lambd, generator=generator)

    def geometric_(self, p: _float, *, generator: Any = None) -> Tensor:
        return _ops.sampling.geometric_(self, p, generator=generator)

    def log_normal_(
        self, mean: _float = 1.0, std: _float = 2.0, *, generator: Any = None
    ) -> Tensor:
        return _ops.sampling.log_normal_(self, mean, std, generator=generator)

    def random_(
        self, from_: Any = None, to: Any = None, *, generator: Any = None, **kwargs: Any
    ) -> Tensor:
        """``t.random_(from, to)``, ``t.random_(to)`` or ``t.random_()`` (``from=`` by keyword)."""
        return _ops.sampling.random_(self, from_, to, generator=generator, **kwargs)

    if not TYPE_CHECKING:  # type checkers report a mistyped name (See NOTE [Names torch has])

        def __getattr__(self, name: str) -> Any:
            from ._torch_names import missing

            raise missing("asyncgrad.Tensor", name, self)

    # Last in the class: the name ``type`` shadows the builtin in the class body below it.
    def type(self, dtype: Any = None, non_blocking: _bool = False, **kwargs: Any) -> Any:
        """``t.type()``: torch's type string ("torch.FloatTensor"); ``t.type(dtype)``: ``t``
        converted (See NOTE [Tensor.type() strings] in asyncgrad/ops/extras.py)."""
        return _ops.type_(self, dtype, non_blocking, **kwargs)


# ----- pickling -----
# NOTE [Pickling tensors]
# As torch's: a pickled tensor keeps its data (a host copy, in the array's layout), dtype,
# device, class (a Parameter stays a Parameter) and requires_grad, and nothing of the graph: no
# grad_fn, no .grad, no hooks. A non-leaf that requires grad comes back as a leaf that requires
# grad, as with torch's plain pickle; through multiprocessing (ForkingPickler, which torch also
# hooks) it is refused, since a graph cannot cross a process boundary. Views come back as
# tensors of their own: storage shared between tensors is not kept. A tensor unpickled over a
# read-only buffer (pickle protocol 5's out-of-band buffers, as Ray passes arrays out of its
# object store) gets a copy it may write, as torch's does. ``_rebuild_tensor`` is the name
# pickles refer to: keep it stable.
def _reduce_tensor(t: Tensor) -> tuple[Any, ...]:
    arr = t._array
    dev = t.device
    host = arr if dev is CPU else backend.to_device(arr, CPU)
    state = getattr(t, "__dict__", None) or None
    where = None if dev is CPU else str(dev)
    return (_rebuild_tensor, (type(t), host, where, t.requires_grad, state))


def _reduce_for_process(t: Tensor) -> tuple[Any, ...]:
    if t.requires_grad and t._grad_fn is not None:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd "
            "does not support crossing process boundaries.  If you just want to transfer the "
            "data, call detach() on the tensor before serializing (e.g., putting it on the queue)."
        )
    return _reduce_tensor(t)


def _rebuild_tensor(
    cls: type[Tensor],
    array: Any,
    device: str | None,
    requires_grad: _bool,
    state: dict[str, Any] | None = None,
) -> Tensor:
    if device is not None:
        array = backend.to_device(array, Device(device))
    t = cls._wrap(backend.writable(array))
    if requires_grad:
        t.requires_grad_(True)
    if state:
        t.__dict__.update(state)
    return t


ForkingPickler.register(Tensor, _reduce_for_process)


# ----- end of pickling -----


# ----- repr -----
# NOTE [Tensor repr]
# torch's printing (torch/_tensor_str.py) with its default options: 4 digits after the point;
# integral floats as ``1.``; scientific notation when the finite non-zero magnitudes span more
# than 1000x or pass 1e8 (or, for non-integral values, fall below 1e-4); columns padded to the
# widest entry; lines wrapped at 80 characters; tensors of more than 1000 elements summarised
# with the first and last 3 entries per dimension. The widths are measured on the summarised
# entries only. Suffixes as torch's: device unless it is the default one, dtype unless it is
# float32, int64 or bool, then grad_fn or requires_grad. We print ``asyncgrad.float64`` where
# torch prints ``torch.float64``.
_PRECISION = 4
_THRESHOLD = 1000
_EDGEITEMS = 3
_LINEWIDTH = 80
_PLAIN_DTYPES = (dtypes.float32, dtypes.int64, dtypes.bool_)


class _Formatter:
    """How every entry of one tensor is written (torch's ``_Formatter``)."""

    def __init__(self, values: list[Any], floating: _bool) -> None:
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        if not floating:
            for v in values:
                self.max_width = max(self.max_width, len(f"{v}"))
            return
        finite = [v for v in values if math.isfinite(v) and v != 0]
        if not finite:
            return
        mags = [abs(v) for v in finite]
        lo, hi = min(mags), max(mags)
        self.int_mode = all(v == math.ceil(v) for v in finite)
        if self.int_mode:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8
        else:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        if self.sci_mode:
            widths = (len(f"{v:.{_PRECISION}e}") for v in finite)
        elif self.int_mode:
            widths = (len(f"{v:.0f}") + 1 for v in finite)
        else:
            widths = (len(f"{v:.{_PRECISION}f}") for v in finite)
        self.max_width = max(self.max_width, *widths)

    def format(self, v: Any) -> str:
        if not self.floating:
            out = f"{v}"
        elif self.sci_mode:
            out = f"{v:{self.max_width}.{_PRECISION}e}"
        elif self.int_mode:
            out = f"{v:.0f}"
            if math.isfinite(v):
                out += "."
        else:
            out = f"{v:.{_PRECISION}f}"
        return " " * (self.max_width - len(out)) + out


def _summarized_values(a: Any, summarize: _bool) -> list[Any]:
    """The entries that will be printed, flattened (torch's ``get_summarized_data``)."""
    if a.ndim == 0:
        return [a.item()]
    n = a.shape[0]
    if summarize and n > 2 * _EDGEITEMS:
        rows = [*range(_EDGEITEMS), *range(n - _EDGEITEMS, n)]
    else:
        rows = list(range(n))
    if a.ndim == 1:
        return [a[i].item() for i in rows]
    return [v for i in rows for v in _summarized_values(a[i], summarize)]


def _vector_str(a: Any, indent: _int, summarize: _bool, fmt: _Formatter) -> str:
    per_line = max(1, math.floor((_LINEWIDTH - indent) / (fmt.max_width + 2)))
    n = a.shape[0]
    if summarize and n > 2 * _EDGEITEMS:
        data = [
            *(fmt.format(v) for v in a[:_EDGEITEMS].tolist()),
            " ...",
            *(fmt.format(v) for v in a[n - _EDGEITEMS :].tolist()),
        ]
    else:
        data = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(data[i : i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _array_str(a: Any, indent: _int, summarize: _bool, fmt: _Formatter) -> str:
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector_str(a, indent, summarize, fmt)
    n = a.shape[0]
    if summarize and n > 2 * _EDGEITEMS:
        rows: list[Any] = [*range(_EDGEITEMS), None, *range(n - _EDGEITEMS, n)]
    else:
        rows = list(range(n))
    parts = ["..." if i is None else _array_str(a[i], indent + 1, summarize, fmt) for i in rows]
    sep = "," + "\n" * (len(a.shape) - 1) + " " * (indent + 1)
    return "[" + sep.join(parts) + "]"


def _format_tensor(t: Tensor) -> str:
    prefix = "tensor("
    indent = len(prefix)
    a = t._array
    if type(a) is not backend.ndarray:
        a = backend.to_device(a, CPU)
    suffixes = []
    dev = t.device
    if dev is not backend.get_default_device():
        suffixes.append(f"device='{dev}'")
    if a.size == 0:
        if a.ndim != 1:
            suffixes.append(f"size={tuple(a.shape)}")
        if a.dtype != dtypes.float32:
            suffixes.append(f"dtype=asyncgrad.{a.dtype}")
        body = "[]"
    else:
        if a.dtype not in _PLAIN_DTYPES:
            suffixes.append(f"dtype=asyncgrad.{a.dtype}")
        summarize = a.size > _THRESHOLD
        fmt = _Formatter(_summarized_values(a, summarize), a.dtype.kind in _FLOAT_KINDS)
        body = _array_str(a, indent, summarize, fmt)
    try:
        fn = t.grad_fn
        fn_name = None if fn is None else fn.name()
    except RuntimeError:  # a view whose base was changed in place where it cannot be rebased
        fn_name = "Invalid"
    if fn_name is not None:
        suffixes.append(f"grad_fn=<{fn_name}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    out = [prefix + body]
    last_len = len(out[0]) - out[0].rfind("\n") + 1
    for suffix in suffixes:
        if last_len + len(suffix) + 2 > _LINEWIDTH:
            out.append(",\n" + " " * indent + suffix)
            last_len = indent + len(suffix)
        else:
            out.append(", " + suffix)
            last_len += len(suffix) + 2
    out.append(")")
    return "".join(out)


# ----- end of repr -----


def _on_host(a: Any) -> Any:
    """A tensor's array to read on the host: a device array is copied after the current stream
    of ITS device (CuPy's reads wait for the current device's current stream)."""
    return a if type(a) is backend.ndarray else backend.to_device(a, CPU)


# NOTE [Tensor delegates upward]
# Tensor sits below the graph and the ops in the layers (See NOTE [Layers] in
# asyncgrad/__init__.py), yet its methods are the ops (``t.exp()``) and the backward calls
# (``t.backward()``). They are declared here, typed, so editors and type checkers see them, and
# delegate at call time: to ``asyncgrad.ops``, imported below once the class exists, and to
# ``asyncgrad.autograd`` inside the two backward methods. These are the only imports that point up
# a layer; the import-linter contract in pyproject.toml names them as its ignored edges.
from . import ops as _ops  # noqa: E402
