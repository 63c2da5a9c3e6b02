"""Grad modes held in context variables, so each asyncio task and each thread has its own."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = [
    "enable_grad",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "set_grad_enabled",
]

F = TypeVar("F", bound=Callable[..., Any])

# NOTE [Grad mode is a context variable]
# PyTorch keeps grad mode thread-local. Under asyncio many tasks share one thread, so a thread-local
# would let `with no_grad()` in one request leak into another that runs while the first is
# suspended. A ContextVar is per task (and per thread), and tasks created inside a mode inherit it.
_grad_enabled: ContextVar[bool] = ContextVar("asyncgrad_grad_enabled", default=True)
_inference: ContextVar[bool] = ContextVar("asyncgrad_inference_mode", default=False)


def is_grad_enabled() -> bool:
    """Whether operations record a backward graph in the current task or thread."""
    return _grad_enabled.get()


def is_inference_mode_enabled() -> bool:
    return _inference.get()


class _Mode:
    """Base of the grad-mode managers: a context manager and a decorator of sync/async functions."""

    def _enter(self) -> list[Any]:
        raise NotImplementedError

    def __enter__(self) -> None:
        tokens = self._enter()
        stack = self.__dict__.setdefault("_stack", [])
        stack.append(tokens)

    def __exit__(self, *exc: object) -> None:
        tokens = self.__dict__["_stack"].pop()
        for var, tok in reversed(tokens):
            var.reset(tok)

    def clone(self) -> _Mode:
        return self.__class__()

    def __call__(self, fn: F) -> F:
        # Unlike PyTorch's, the mode is entered inside the coroutine body, so it covers the code
        # that runs when the coroutine is awaited, not just the call that creates it.
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.clone():
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]
        if inspect.isasyncgenfunction(fn):

            @functools.wraps(fn)
            async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
                gen = fn(*args, **kwargs)
                try:
                    while True:
                        with self.clone():
                            item = await gen.__anext__()
                        yield item
                except StopAsyncIteration:
                    return
                finally:
                    await gen.aclose()

            return agen_wrapper  # type: ignore[return-value]
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
                gen = fn(*args, **kwargs)
                try:
                    while True:
                        with self.clone():
                            item = next(gen)
                        yield item
                except StopIteration as stop:
                    return stop.value
                finally:
                    gen.close()

            return gen_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.clone():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class no_grad(_Mode):
    """Disable graph recording in the current task/thread.

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.ones(2, requires_grad=True)
        >>> with ag.no_grad():
        ...     y = x * 2
        >>> y.requires_grad
        False
    """

    def _enter(self) -> list[Any]:
        return [(_grad_enabled, _grad_enabled.set(False))]


class enable_grad(_Mode):
    """Enable graph recording in the current task/thread (inside a ``no_grad``, say)."""

    def _enter(self) -> list[Any]:
        return [(_grad_enabled, _grad_enabled.set(True))]


class set_grad_enabled(_Mode):
    """Set grad mode on or off; takes effect at once as a call, and scoped as a context manager."""

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled expects a bool, got {type(mode).__name__}")
        self.mode = mode
        self._prev = _grad_enabled.get()
        self._token = _grad_enabled.set(mode)

    def _enter(self) -> list[Any]:
        return [(_grad_enabled, _grad_enabled.set(self.mode))]

    def __enter__(self) -> None:
        # The constructor already switched the mode (as torch's does); entering keeps it scoped.
        super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        _grad_enabled.set(self._prev)

    def clone(self) -> _Mode:
        prev = _grad_enabled.get()
        m = set_grad_enabled(self.mode)
        _grad_enabled.set(prev)
        m._prev = prev
        return m


class inference_mode(_Mode):
    """Like ``no_grad``; tensors made inside are inference tensors, which cannot be saved for
    backward."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode

    def _enter(self) -> list[Any]:
        if not self.mode:
            return []
        return [
            (_grad_enabled, _grad_enabled.set(False)),
            (_inference, _inference.set(True)),
        ]

    def clone(self) -> _Mode:
        return inference_mode(self.mode)
