"""In-place ops: they write into a tensor, bump its version and rebase its history (CopySlices
for a view)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import backend
from .._tensor import Tensor
from ..backend import silent_fp
from ..graph.copy_slices import CopySlices
from ..graph.grad_mode import _grad_enabled
from ..graph.hooks import move_retain
from ..graph.inference import check_writable
from ..graph.saved_mutation import before_write
from ..rules import keeps_for_backward
from ._record import (
    OPS,
    InferenceModeView,
    NoGradView,
    ViewOfInferenceModeView,
    ViewOfNoGradView,
    arr,
    make,
)
from .convert import to
from .pointwise import _binary, clamp, masked_fill, mul, pow, relu

_CLARIFY_NO_GRAD_VIEW = (
    "created in no_grad mode and is being modified inplace with grad mode enabled. Given that "
    "this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by "
    "moving both the view and the inplace either both inside the no_grad block (if you don't "
    "want the inplace to be tracked) or both outside (if you want the inplace to be tracked)."
)


_CLARIFY_INFERENCE_VIEW = (
    "created in inference mode and is being modified inplace in normal mode. Given that this "
    "use case is ambiguous and error-prone, it is forbidden. You can clarify your code by "
    "moving both the view and the inplace either both inside the inference_mode block or both "
    "outside."
)


def check_no_grad_view(self: Tensor) -> None:
    """Raise for an in-place op, recorded, on a view made under no_grad or inference mode (See
    NOTE [Views made under no_grad] in ops/_record.py)."""
    m = self._meta
    chain = None if m is None else m.view_chain
    ty = type(chain)
    if ty is NoGradView:
        raise RuntimeError("A view was " + _CLARIFY_NO_GRAD_VIEW)
    if ty is InferenceModeView:
        raise RuntimeError("A view was " + _CLARIFY_INFERENCE_VIEW)
    if ty is ViewOfNoGradView or ty is ViewOfInferenceModeView:
        assert chain is not None
        made_by = OPS[chain[-1][0]].node_cls.__name__
        why = _CLARIFY_NO_GRAD_VIEW if ty is ViewOfNoGradView else _CLARIFY_INFERENCE_VIEW
        raise RuntimeError(f"Output 0 of {made_by} is a view of a view which was " + why)


def _check_not_expanded(self: Tensor) -> None:
    """A recorded in-place op through an expanded view: its CopySlices would write the
    gradient through the expansion, which asyncgrad's backward does not do (torch's does), so
    it is refused here rather than failing in backward. Unrecorded writes go through (See NOTE
    [Writing through an expanded view] in ops/shape.py)."""
    m = self._meta
    chain = () if m is None or m.view_chain is None else m.view_chain
    if any(name == "expand" for name, _ in chain):
        raise RuntimeError(
            "unsupported operation: an in-place op on an expanded view of a tensor that requires "
            "grad cannot be differentiated by asyncgrad (torch can). Please clone() the tensor "
            "before performing the operation."
        )


def check_inplace(self: Tensor) -> None:
    if self._grad_fn is None and self._requires_grad:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation."
        )
    base = self._base
    if base is not None and base.requires_grad:
        check_no_grad_view(self)
    if base is not None and base._grad_fn is None and base._requires_grad:
        raise RuntimeError(
            "a view of a leaf Variable that requires grad is being used in an in-place operation."
        )


def _overlaps_itself(a: Any) -> bool:
    """torch's rule for the tensor an in-place op writes: refused where a dimension of more than
    one element has stride 0 (an expanded view); also NumPy's read-only arrays (See NOTE
    [Writing through an expanded view] in ops/shape.py)."""
    if a.size == 0:  # an empty array's zero strides write nothing twice
        return False
    if backend.overlaps_itself(a):
        return True
    if type(a) is not backend.ndarray:
        return False
    return any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape, strict=True))


_OVERLAP_MESSAGE = (
    "unsupported operation: more than one element of the written-to tensor refers to a "
    "single memory location. Please clone() the tensor before performing the operation."
)


def _write(self: Tensor, res: Any) -> None:
    dst = self._array
    if res.shape != dst.shape:
        raise RuntimeError(
            f"output with shape {list(dst.shape)} doesn't match the broadcast shape "
            f"{list(res.shape)}"
        )
    if res.dtype != dst.dtype and not backend.can_cast(res.dtype, dst.dtype):
        raise RuntimeError(
            f"result type {res.dtype} can't be cast to the desired output type {dst.dtype}"
        )
    if _overlaps_itself(dst):
        raise RuntimeError(_OVERLAP_MESSAGE)
    backend.copy_into(dst, res)
    self._vc[0] += 1


def inplace(self: Tensor, name: str, compute: Callable[[Tensor], Tensor]) -> Tensor:
    """Run ``compute(alias)`` (an out-of-place op on self's value), write the result into self
    and rebase self's history onto the op's node (CopySlices for a view)."""
    if not _grad_enabled.get():
        if type(self._vc) is not list:  # See NOTE [Inference tensors]
            check_writable(self)
        before_write(self)  # See NOTE [Mutation on saved tensors]
        _write(self, compute(self)._array)
        return self
    check_inplace(self)  # before the inference check, as torch's order of errors
    if type(self._vc) is not list:
        check_writable(self)
    before_write(self)
    op = OPS.get(name)
    if op is None or 1 in op.save:
        # The op's backward needs self's old value, which the write below destroys: save a copy
        # that carries self's place in the graph. (``name`` not in the table: ``compute`` is a
        # composite of several ops, which may read self in any of them.)
        self._edge()  # brings a view's grad_fn up to date
        alias = Tensor._wrap(self._array.copy())
        alias._grad_fn, alias._output_nr = self._grad_fn, self._output_nr
    else:
        alias = self
    res = compute(alias)
    base = self._base
    fn = res._grad_fn
    base_edge = base._edge() if (base is not None and fn is not None) else None
    if fn is not None and base is not None:
        check_no_grad_view(self)  # the value written requires grad
        _check_not_expanded(self)
    _write(self, res._array)
    if fn is None:
        return self
    if base is None:
        old, old_nr = self._grad_fn, self._output_nr
        self._grad_fn = fn
        self._output_nr = res._output_nr
        move_retain(self, old, old_nr)
    else:
        assert self._meta is not None
        assert self._meta.view_chain is not None
        # torch's CopySlices gives up its node after one backward, whatever that node saved.
        keeps_for_backward(fn)
        cs = CopySlices(base_edge, self._meta.view_chain, fn, base)
        old, old_nr = base._grad_fn, base._output_nr
        base._grad_fn = cs
        base._output_nr = 0
        move_retain(base, old, old_nr)
        # self and every other view of base now regenerate their grad_fn on next use.
    return self


@silent_fp  # See NOTE [Silent floating point]
def _inplace_arith(self: Tensor, name: str, fname: str, other: Any) -> Tensor:
    oa = arr(other)
    if not _grad_enabled.get() or not (
        self.requires_grad or (isinstance(other, Tensor) and other.requires_grad)
    ):
        if _grad_enabled.get():
            check_inplace(self)
        if type(self._vc) is not list:  # See NOTE [Inference tensors]
            check_writable(self)
        before_write(self)  # See NOTE [Mutation on saved tensors]
        dst = self._array
        if _overlaps_itself(dst):
            raise RuntimeError(_OVERLAP_MESSAGE)
        try:
            getattr(backend.namespace(dst), fname)(dst, oa, out=dst, casting="same_kind")
        except (TypeError, ValueError) as e:
            raise RuntimeError(f"{name}_: {e} (self: {dst.dtype}{list(dst.shape)})") from None
        self._vc[0] += 1
        return self
    return inplace(self, name, lambda s: _binary(OPS[name], fname, s, other))


def add_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha) if isinstance(other, Tensor) else other * alpha
    return _inplace_arith(self, "add", "add", other)


def sub_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha) if isinstance(other, Tensor) else other * alpha
    return _inplace_arith(self, "sub", "subtract", other)


def mul_(self: Tensor, other: Any) -> Tensor:
    return _inplace_arith(self, "mul", "multiply", other)


def div_(self: Tensor, other: Any) -> Tensor:
    return _inplace_arith(self, "div", "true_divide", other)


def pow_(self: Tensor, exponent: Any) -> Tensor:
    return inplace(self, "pow", lambda s: pow(s, exponent))


def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    return inplace(self, "clamp", lambda s: clamp(s, min, max))


def relu_(self: Tensor) -> Tensor:
    return inplace(self, "relu", relu)


def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)


def fill_(self: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(
                f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} "
                "dimensions."
            )
        return copy_(self, value)

    def compute(s: Tensor) -> Tensor:
        a = s._array
        filled = backend.namespace(a).full_like(a, value)
        return make(OPS["fill"], filled, (s,), {"value": value})

    return inplace(self, "fill", compute)


@silent_fp  # See NOTE [Silent floating point]
def copy_(self: Tensor, src: Any) -> Tensor:
    dev = self.device
    if isinstance(src, Tensor) and src.device is not dev:
        src = to(src, dev)  # a copy between devices, recorded (ToCopyBackward0)
    sa = arr(src)
    if not hasattr(sa, "shape"):
        sa = backend.asarray(sa)
    if backend.device_of(sa) is not dev:
        sa = backend.to_device(sa, dev)  # host data (a NumPy array, a list) into a CUDA tensor

    def compute(s: Tensor) -> Tensor:
        try:
            out = backend.namespace(sa).broadcast_to(sa, s.shape).astype(s.dtype, copy=True)
        except ValueError:
            raise RuntimeError(
                f"The size of tensor a ({list(s.shape)}) must match the size of tensor b "
                f"({list(sa.shape)}) (copy_ of a {list(sa.shape)} source into {list(s.shape)})"
            ) from None
        return make(OPS["copy"], out, (s, src))

    return inplace(self, "copy", compute)


def inplace_variant(name: str, fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """The in-place form ``t.<name>_(*args)`` of the out-of-place ``fn``: ``fn(t, *args)``
    written into ``t`` through ``inplace`` (version counter, views, leaf checks)."""

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return inplace(self, name, lambda s: fn(s, *args, **kwargs))

    method.__name__ = method.__qualname__ = name + "_"
    return method


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    return inplace(self, "where", lambda s: masked_fill(s, mask, value))
