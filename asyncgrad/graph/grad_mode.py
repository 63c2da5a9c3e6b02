"""Grad modes held in context variables, so each asyncio task and each thread has its own."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, Self, TypeVar, cast, overload

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


# NOTE [Shared mode objects]
# One mode object may be entered by several tasks or threads at once (``m = no_grad()`` shared by
# two tasks, each doing ``with m:`` across awaits), and by itself while already entered. Each
# ``__enter__`` keeps the tokens of the context variables it set; a token can only be reset in
# the context that made it, and resetting it in another raises ValueError without changing
# anything. So ``__exit__`` resets the most recent of the object's tokens that belongs to the
# current context: at once in the usual case (one block at a time, or blocks nested in one task),
# after a search when tasks or threads share the object.


def _describe(obj: object) -> str:
    return f"{obj!r} ({type(obj).__name__})"


def _reset(tokens: tuple[Token[bool], ...]) -> None:
    """Reset tokens made together by one ``__enter__``. Raises ValueError, having changed
    nothing, when they were made in another context."""
    for tok in reversed(tokens):
        tok.var.reset(tok)


class _Mode:
    """Base of the grad-mode managers: a context manager and a decorator of sync/async functions.

    ``grad_target`` and ``inference_target`` are the modes the block runs under; ``None`` leaves
    that mode as it is.
    """

    grad_target: bool | None = None
    inference_target: bool | None = None
    # Tokens of the blocks open on this object, in every context (see NOTE [Shared mode objects]).
    # Made with the object, so that threads entering it at once share one list.
    _open: list[tuple[Token[bool], ...]]
    # set_grad_enabled: a block restores the mode from before the constructor switched it.
    _restores_prev = False
    prev = True

    def __enter__(self) -> None:
        g = self.grad_target
        i = self.inference_target
        if i is None:
            assert g is not None  # a mode sets grad mode, inference mode, or both
            tokens: tuple[Token[bool], ...] = (_grad_enabled.set(g),)
        elif g is None:
            tokens = (_inference.set(i),)
        else:
            tokens = (_grad_enabled.set(g), _inference.set(i))
        self._open.append(tokens)

    def __exit__(self, *exc: object) -> None:
        open_ = self._open
        if not open_:
            return
        tokens = open_[-1]
        try:
            _reset(tokens)
        except ValueError:
            # Another task or thread entered this object after us (or we entered it in another
            # context, and there is nothing of ours to undo here).
            for tokens in reversed(list(open_)):
                try:
                    _reset(tokens)
                except ValueError:
                    continue
                break
            else:
                return
        open_.remove(tokens)  # by identity; not pop(): another thread may have appended
        if self._restores_prev:
            _grad_enabled.set(self.prev)

    def clone(self) -> _Mode:
        """A fresh manager with the same settings (the decorator enters one per call)."""
        return self.__class__()

    def __call__(self, fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"{type(self).__name__} decorates a function, got {_describe(fn)}")
        if inspect.isclass(fn):
            _warn_class_decorated()
        return _decorate(self.clone, fn)


def _warn_class_decorated() -> None:
    # torch's FutureWarning, pointed at the decorated class's line (past __call__, and __new__
    # for the bare form). The class becomes a function that constructs it under the mode.
    frame = inspect.currentframe()
    level = 2
    f = frame.f_back if frame is not None else None
    while f is not None and f.f_code.co_filename == __file__:
        level += 1
        f = f.f_back
    warnings.warn(
        "Decorating classes is deprecated and will be disabled in future versions. You should "
        "only decorate functions or methods. To preserve the current behavior of class "
        "decoration, you can directly decorate the `__init__` method and nothing else.",
        FutureWarning,
        stacklevel=level,
    )


def _decorate(factory: Callable[[], _Mode], fn: F) -> F:
    """Wrap ``fn`` so that each call (each step, for generators) runs inside ``factory()``."""
    # Unlike PyTorch's, the mode is entered inside the coroutine body, so it covers the code
    # that runs when the coroutine is awaited, not just the call that creates it. Generators get
    # the mode each time they are resumed, and give the caller's back at each yield.
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            with factory():
                return await fn(*args, **kwargs)

        return cast(F, async_wrapper)
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
            gen = fn(*args, **kwargs)
            try:
                with factory():
                    item = await gen.asend(None)
                while True:
                    try:
                        sent = yield item
                    except GeneratorExit:
                        with factory():
                            await gen.aclose()
                        raise
                    except BaseException as exc:
                        with factory():
                            item = await gen.athrow(exc)
                    else:
                        with factory():
                            item = await gen.asend(sent)
            except StopAsyncIteration:
                return

        return cast(F, agen_wrapper)
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
            gen = fn(*args, **kwargs)
            try:
                with factory():
                    item = gen.send(None)
                while True:
                    try:
                        sent = yield item
                    except GeneratorExit:
                        with factory():
                            gen.close()
                        raise
                    except BaseException as exc:
                        with factory():
                            item = gen.throw(exc)
                    else:
                        with factory():
                            item = gen.send(sent)
            except StopIteration as stop:
                return stop.value

        return cast(F, gen_wrapper)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with factory():
            return fn(*args, **kwargs)

    return cast(F, wrapper)


class _BareDecorator(_Mode):
    """A mode that takes no arguments, so it may decorate without parentheses: ``@no_grad``."""

    # mypy wants __new__ to return an instance; this one returns the decorated function when
    # the class is used as a bare decorator (``@no_grad``), as torch's does.
    @overload
    def __new__(cls, fn: F) -> F: ...  # type: ignore[misc]
    @overload
    def __new__(cls, fn: None = None) -> Self: ...

    def __new__(cls, fn: F | None = None) -> Self | F:  # type: ignore[misc]
        if fn is None:
            self = object.__new__(cls)
            self._open = []
            return self
        return cls()(fn)


class no_grad(_BareDecorator):
    """Disable graph recording in the current task/thread.

    A context manager, or a decorator with or without parentheses (``@no_grad`` or
    ``@no_grad()``) of functions, coroutine functions and (async) generators.

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.ones(2, requires_grad=True)
        >>> with ag.no_grad():
        ...     y = x * 2
        >>> y.requires_grad
        False
    """

    grad_target = False


class enable_grad(_BareDecorator):
    """Enable graph recording in the current task/thread (inside a ``no_grad``, say)."""

    grad_target = True


class set_grad_enabled(_Mode):
    """Set grad mode on or off.

    As in torch, the constructor switches the mode at once (so a plain call works:
    ``ag.set_grad_enabled(False)``); used as a context manager the previous mode comes back when
    the block exits, and used as a decorator the previous mode comes back right away and each
    call of the decorated function runs with ``mode``.
    """

    _restores_prev = True

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled expects a bool, got {_describe(mode)}")
        self.mode = mode
        self.grad_target = mode
        self._open = []
        self.prev = _grad_enabled.get()
        _grad_enabled.set(mode)

    def __call__(self, fn: F) -> F:
        _grad_enabled.set(self.prev)
        return super().__call__(fn)

    def clone(self) -> set_grad_enabled:
        return self.__class__(self.mode)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode})"


class inference_mode(_Mode):
    """Like ``no_grad``; tensors made inside are inference tensors, which cannot be saved for
    backward. ``inference_mode(False)`` turns inference mode off and grad mode on, as torch's
    does. Decorates with or without parentheses."""

    @overload
    def __new__(cls, mode: F) -> F: ...  # type: ignore[misc]
    @overload
    def __new__(cls, mode: bool = True) -> Self: ...

    def __new__(cls, mode: bool | F = True) -> Self | F:  # type: ignore[misc]
        if isinstance(mode, bool):
            return object.__new__(cls)
        if callable(mode):
            return cls()(mode)
        raise TypeError(f"inference_mode expects a bool or a function, got {_describe(mode)}")

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode
        self.grad_target = not mode
        self.inference_target = mode
        self._open = []

    def clone(self) -> inference_mode:
        return self.__class__(self.mode)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode})"
