"""``ag.autograd.Variable``: torch's deprecated wrapper, kept so that old code runs."""

from __future__ import annotations

import warnings
from typing import Any

from .._tensor import Tensor

__all__ = ["Variable"]


class _VariableMeta(type):
    def __instancecheck__(cls, other: Any) -> bool:
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(t, requires_grad=...)`` returns a Tensor, as torch's does since 0.4: a new
    tensor sharing ``t``'s data (detached from its graph), requiring grad when asked. Every
    Tensor is an instance of Variable."""

    def __new__(  # type: ignore[misc]
        cls, data: Any = None, requires_grad: bool = False, volatile: bool = False
    ) -> Tensor:
        if volatile:
            warnings.warn(
                "volatile was removed and now has no effect. Use `with ag.no_grad():` instead.",
                UserWarning,
                stacklevel=2,
            )
        if data is None:
            t = Tensor._wrap(Tensor([])._array)
        elif isinstance(data, Tensor):
            t = data.detach()
        else:
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        if requires_grad:
            t.requires_grad_(True)
        return t
