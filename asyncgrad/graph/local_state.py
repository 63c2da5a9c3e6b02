"""The per-task state that user code run by a backward pass may change, and that the pass puts
back when that code returns."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .grad_mode import _grad_enabled, _inference
from .saved_tensor import saved_hooks

__all__ = ["call_user", "user_calls"]


class _Depth(threading.local):
    depth = 0


# How many calls of user code by a backward pass are on this thread's stack: while one runs, a
# gradient call there runs at once (See NOTE [One rule for gradient calls] in
# asyncgrad/autograd/entry.py): a sync hook or custom backward cannot await it.
user_calls = _Depth()


# NOTE [User code in a backward leaves no state]
# torch runs every node of a pass under the thread-local state the pass began with, so a hook or
# a custom Function's backward that opens a saved_tensors_hooks block and never closes it (an
# early return, a swallowed exception), or switches grad mode off, changes nothing for the nodes
# after it, nor for the caller's later passes. Here that state is context variables (grad mode,
# inference mode, the saved-tensor hooks), and a node runs in its caller's context or a worker's,
# which later nodes and later passes share. So every call of user code from the graph (tensor
# and node hooks, post-accumulate-grad hooks, a custom Function's backward, final callbacks) goes
# through call_user, which puts back whatever of that state the call changed. The built-in
# nodes run no user code and pay nothing; an async hook or backward runs in a task of its own,
# whose context is a copy, so what it changes stays there.
def call_user(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, with grad mode, inference mode and the saved-tensor hooks as they were
    before it once it returns or raises."""
    grad = _grad_enabled.get()
    inference = _inference.get()
    hooks = saved_hooks.get()
    user = user_calls
    user.depth += 1
    try:
        return fn(*args)
    finally:
        user.depth -= 1
        if _grad_enabled.get() is not grad:
            _grad_enabled.set(grad)
        if _inference.get() is not inference:
            _inference.set(inference)
        if saved_hooks.get() is not hooks:
            saved_hooks.set(hooks)
