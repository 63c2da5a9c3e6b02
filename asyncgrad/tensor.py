"""Tensor: a NumPy (or CuPy) array plus the autograd state that links it to the backward graph."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .autograd.grad_mode import _grad_enabled, _inference
from .backend import CPU, Device, device_of

if TYPE_CHECKING:
    from .autograd.graph import Node

__all__ = ["Tensor"]

float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
bool_ = np.dtype("bool")

_FLOAT_KINDS = frozenset("fc")


class _Meta:
    """Rarely used autograd state of a tensor, allocated on first use to keep tensors small."""

    __slots__ = (
        "grad_accumulator",
        "hooks",
        "inference",
        "name",
        "post_acc_hooks",
        "retains_grad",
        "view_chain",
        "view_version",
    )

    def __init__(self) -> None:
        self.grad_accumulator: Any = None  # the AccumulateGrad node, made on first use
        self.hooks: Any = None  # graph._Hooks for a leaf's tensor hooks
        self.post_acc_hooks: dict[int, Callable[..., Any]] | None = None
        self.retains_grad = False
        self.view_chain: tuple[tuple[str, Any], ...] | None = None
        self.view_version = 0
        self.inference = False
        self.name: str | None = None


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

    # Tensor defines __array_ufunc__ so NumPy's operators defer to it; see NOTE [Rules are NumPy].
    __array_priority__ = 1000

    def __init__(self, data: Any, *, requires_grad: bool = False, dtype: Any = None) -> None:
        from .ops import _as_array

        arr = _as_array(data, dtype)
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
        t = object.__new__(cls)
        t._array = array
        t._grad_fn = None
        t._output_nr = 0
        t._requires_grad = False
        t._grad = None
        t._vc = [0]
        t._base = None
        t._meta = None
        if _inference.get():
            t._get_meta().inference = True
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
        self._array = value._array

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._array.dtype

    @property
    def device(self) -> Device:
        arr = self._array
        if type(arr) is np.ndarray:
            return CPU
        return device_of(arr)

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def dim(self) -> int:
        return self._array.ndim

    def size(self, dim: int | None = None) -> Any:
        if dim is None:
            return self._array.shape
        return self._array.shape[dim]

    def numel(self) -> int:
        return int(self._array.size)

    def __len__(self) -> int:
        if self._array.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return int(self._array.shape[0])

    def element_size(self) -> int:
        return int(self._array.itemsize)

    def item(self) -> Any:
        if self._array.size != 1:
            raise RuntimeError(
                f"a Tensor with {self._array.size} elements cannot be converted to Scalar"
            )
        return self._array.reshape(()).item()

    def tolist(self) -> Any:
        return self._array.tolist()

    def numpy(self, *, force: bool = False) -> np.ndarray[Any, Any]:
        """The backing array as NumPy (shares memory). Raises for a tensor that requires grad."""
        if self.device.type != "cpu":
            if not force:
                raise TypeError(
                    f"can't convert {self.device} device type tensor to numpy. "
                    "Use Tensor.cpu() to copy the tensor to host memory first."
                )
            return np.asarray(self._array.get())
        if self.requires_grad and not force:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. "
                "Use tensor.detach().numpy() instead."
            )
        return self._array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        arr = self._array
        if type(arr) is not np.ndarray:
            arr = arr.get()
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

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ autograd attributes
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad or self._grad_fn is not None

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
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
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def grad_fn(self) -> Node | None:
        if self._base is not None:
            self._refresh_view()
        return self._grad_fn

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def output_nr(self) -> int:
        return self._output_nr

    @property
    def _version(self) -> int:
        return self._vc[0]

    def _is_view(self) -> bool:
        return self._base is not None

    @property
    def grad(self) -> Tensor | None:
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got grad of type "
                    f"{type(value).__name__}"
                )
            if value.shape != self.shape:
                raise RuntimeError(
                    f"assigned grad has data of a different size: expected {tuple(self.shape)}, "
                    f"got {tuple(value.shape)}"
                )
            if value.device != self.device:
                raise RuntimeError(
                    "assigned grad has data located on a different device: "
                    f"expected {self.device}, got {value.device}"
                )
            if value.dtype != self.dtype:
                raise RuntimeError(
                    f"assigned grad has data of a different type: expected {self.dtype}, "
                    f"got {value.dtype}"
                )
        self._grad = value

    @property
    def retains_grad(self) -> bool:
        m = self._meta
        return bool(m is not None and m.retains_grad)

    @property
    def name(self) -> str | None:
        m = self._meta
        return None if m is None else m.name

    @name.setter
    def name(self, value: str | None) -> None:
        self._get_meta().name = value

    def is_inference(self) -> bool:
        m = self._meta
        return bool(m is not None and m.inference)

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

    def _edge(self) -> Any:
        """The gradient edge of this tensor: ``(grad_fn, output_nr)`` or its AccumulateGrad."""
        if self._base is not None:
            self._refresh_view()
        fn = self._grad_fn
        if fn is not None:
            return fn, self._output_nr
        if self._requires_grad:
            return self._grad_accumulator(), 0
        return None

    def _grad_accumulator(self) -> Any:
        # See NOTE [Accumulator lifetime]: made once, then kept for the tensor's life.
        m = self._meta
        if m is None:
            m = self._get_meta()
        acc = m.grad_accumulator
        if acc is None:
            from .autograd.graph import AccumulateGrad

            acc = m.grad_accumulator = AccumulateGrad(self)
        return acc

    def _refresh_view(self) -> None:
        # NOTE [View grad_fn regeneration]
        # After an in-place op on a base or on one of its views, every view of that base must see
        # the new history: its grad_fn is rebuilt (lazily, when next read) by replaying its view
        # chain on the base under grad mode, as PyTorch does with its view_fn/as_strided fallback.
        base = self._base
        m = self._meta
        if m is None or m.view_chain is None or m.view_version == self._vc[0]:
            return
        m.view_version = self._vc[0]
        if not base.requires_grad:
            return
        from .ops import _replay_view

        tok = _grad_enabled.set(True)
        try:
            regen = _replay_view(base, m.view_chain)
        finally:
            _grad_enabled.reset(tok)
        self._grad_fn = regen._grad_fn
        self._output_nr = regen._output_nr

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` after backward."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.is_leaf:
            return
        m = self._get_meta()
        if m.retains_grad:
            return
        m.retains_grad = True
        fn = self.grad_fn
        assert fn is not None
        fn._get_hooks().retains[self._output_nr] = weakref.ref(self)

    def register_hook(self, hook: Callable[..., Any]) -> Any:
        """Register ``hook(grad) -> Tensor | None``, called with this tensor's gradient.

        The hook may return a new gradient to use in its place, and may be ``async def``.
        """
        from .autograd.graph import RemovableHandle, _Hooks

        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        fn = self.grad_fn
        if fn is None:
            m = self._get_meta()
            if m.hooks is None:
                m.hooks = _Hooks()
            hooks = m.hooks
            nr = 0
        else:
            hooks = fn._get_hooks()
            nr = self._output_nr
        return RemovableHandle.add(hooks, hooks.tensor_pre.setdefault(nr, {}), hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[..., Any]) -> Any:
        """Register ``hook(tensor)``, called after a leaf's ``.grad`` is accumulated."""
        from .autograd.graph import RemovableHandle, _Hooks

        if not self.is_leaf:
            raise RuntimeError(
                "post accumulate grad hooks cannot be registered on non-leaf tensors"
            )
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        m = self._get_meta()
        if m.hooks is None:
            m.hooks = _Hooks()
        return RemovableHandle.add(m.hooks, m.hooks.post_acc, hook)

    # ------------------------------------------------------------------ conversion
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        from .ops import _to

        return _to(self, *args, **kwargs)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self, device: int | None = None) -> Tensor:
        return self.to(f"cuda:{0 if device is None else device}")

    def __repr__(self) -> str:
        from .ops import _format_tensor

        return _format_tensor(self)

    def __bool__(self) -> bool:
        if self._array.size != 1:
            raise RuntimeError(
                f"Boolean value of Tensor with {self._array.size} elements is ambiguous"
            )
        return bool(self._array.reshape(()))

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self._array.dtype.kind not in "iub" or self._array.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __hash__(self) -> int:
        return id(self)

    def __iter__(self) -> Any:
        if self._array.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))  # type: ignore[attr-defined]

    def __reduce_ex__(self, proto: Any) -> Any:
        raise TypeError("asyncgrad tensors are saved with ag.save(), not pickled")

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                "protocol at the moment."
            )
        t = Tensor._wrap(self._array.copy())
        t._requires_grad = self._requires_grad
        if self._grad is not None:
            t._grad = Tensor._wrap(self._grad._array.copy())
        memo[id(self)] = t
        return t
