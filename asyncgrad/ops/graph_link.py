"""What a Tensor asks of the graph: its accumulator, its hooks, retain_grad and view replay.

Tensor sits below the graph (See NOTE [Tensor delegates upward]); these are the bodies of its
graph-facing methods.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, cast

from .._tensor import Tensor
from ..graph.accumulate_grad import AccumulateGrad, leaf_hooks
from ..graph.copy_slices import replay_view
from ..graph.grad_mode import _grad_enabled
from ..graph.hooks import RemovableHandle, add_retain, tensor_hooks_of


def grad_accumulator(t: Tensor) -> AccumulateGrad:
    return cast(AccumulateGrad, AccumulateGrad.edge_of(t)[0])


def grad_edge(t: Tensor) -> tuple[AccumulateGrad, int]:
    return cast("tuple[AccumulateGrad, int]", AccumulateGrad.edge_of(t))


def refresh_view(t: Tensor) -> None:
    # NOTE [View grad_fn regeneration]
    # After an in-place op on a base or on one of its views, every view of that base must see
    # the new history: its grad_fn is rebuilt (lazily, when next read) by replaying its view
    # chain on the base under grad mode, as PyTorch does with its view_fn/as_strided fallback.
    base = t._base
    m = t._meta
    if base is None or m is None or m.view_chain is None or m.view_version == t._vc[0]:
        return
    m.view_version = t._vc[0]
    if not base.requires_grad:
        return
    tok = _grad_enabled.set(True)
    try:
        regen = replay_view(base, m.view_chain)
    finally:
        _grad_enabled.reset(tok)
    t._grad_fn = regen._grad_fn
    t._output_nr = regen._output_nr


def grad_mode_enabled() -> bool:
    return _grad_enabled.get()


def warn_non_leaf_grad(t: Tensor) -> None:
    """Reading ``.grad`` of a non-leaf that does not retain it: torch's UserWarning, since
    backward never fills it."""
    if not t.is_leaf and not t.retains_grad:
        warnings.warn(
            "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
            ".grad attribute won't be populated during autograd.backward(). If you indeed want "
            "the .grad field to be populated for a non-leaf Tensor, use .retain_grad() on the "
            "non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure you access "
            "the leaf Tensor instead. See github.com/pytorch/pytorch/pull/30531 for more "
            "information.",
            UserWarning,
            stacklevel=_first_frame_outside(),
        )


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _first_frame_outside() -> int:
    """The stacklevel, for its caller's ``warnings.warn``, of the first frame outside asyncgrad
    (ops may be wrapped: See ops/device_guard.py)."""
    f = sys._getframe(2)
    level = 2
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE):
        f = f.f_back  # type: ignore[assignment]
        level += 1
    return level


def retain_grad(t: Tensor) -> None:
    if not t.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if t.is_leaf:
        return
    m = t._get_meta()
    if m.retains_grad:
        return
    m.retains_grad = True
    fn = t.grad_fn
    assert fn is not None
    add_retain(fn._get_hooks(), t._output_nr, t)


def register_tensor_hook(t: Tensor, hook: Callable[..., Any]) -> RemovableHandle:
    if not t.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    fn = t.grad_fn
    if fn is None:
        hooks = leaf_hooks(t)
        nr = 0
    else:
        hooks = fn._get_hooks()
        nr = t._output_nr
    return RemovableHandle.add(hooks, tensor_hooks_of(hooks, nr), hook)


def register_post_accumulate_grad_hook(t: Tensor, hook: Callable[..., Any]) -> RemovableHandle:
    if not t.is_leaf:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    if not t.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    hooks = leaf_hooks(t)
    return RemovableHandle.add(hooks, hooks.post_acc, hook)
