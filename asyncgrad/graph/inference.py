"""Inference tensors: what ``inference_mode`` makes, told apart by their version counter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .grad_mode import _inference

if TYPE_CHECKING:
    from .._tensor import Tensor

__all__ = ["InferenceVersion", "check_writable", "inference_version", "is_inference"]

# NOTE [Inference tensors]
# As torch's: a tensor made by an op under ``inference_mode`` is an inference tensor, and so is
# every view or detached alias of one, wherever it is made; a view made under inference mode of
# a normal tensor stays normal. Outside inference mode an inference tensor may be read but not
# changed in place, made to require grad, or saved for backward, and it has no version.
#
# What marks one is its version counter: an ``InferenceVersion`` instead of the one-item list of
# every other tensor. Views and detached aliases share their base's counter, so they are marked
# with nothing more to copy; a normal tensor's ops pay nothing (they test ``type(vc) is list``
# only where a check is due). The counter also refuses, outside inference mode, the write that
# every in-place path makes to it: the in-place entry points check before they write (so a
# refused update changes nothing), and the counter is the backstop for any write path that
# reaches it without passing one of them (an optimizer's step, a custom Function's mark_dirty).

_INPLACE = (
    "Inplace update to inference tensor outside InferenceMode is not allowed. You can make a "
    "clone to get a normal tensor before doing inplace update. See "
    "https://github.com/pytorch/rfcs/pull/17 for more details."
)


class InferenceVersion(list[int]):
    """An inference tensor's version counter (See NOTE [Inference tensors])."""

    __slots__ = ()

    def __setitem__(self, i: Any, v: Any) -> None:
        if not _inference.get():
            raise RuntimeError(_INPLACE)
        list.__setitem__(self, i, v)

    # For Tensor's own methods, which sit below this module (they call these on the counter).
    def refuse_write(self) -> None:
        if not _inference.get():
            raise RuntimeError(_INPLACE)

    def refuse_requires_grad(self) -> None:
        if not _inference.get():
            raise RuntimeError(
                "Setting requires_grad=True on inference tensor outside InferenceMode is not "
                "allowed."
            )


def inference_version() -> list[int]:
    """A new inference tensor's version counter."""
    return InferenceVersion((0,))


def is_inference(t: Tensor) -> bool:
    return type(t._vc) is not list


def check_writable(t: Tensor) -> None:
    """Raise torch's error for an in-place update of an inference tensor (or a view of one)
    outside inference mode; nothing is written yet when this is called."""
    if type(t._vc) is not list and not _inference.get():
        shape = list(t._array.shape)
        raise RuntimeError(f"{_INPLACE} (the tensor updated: an inference tensor of shape {shape})")
