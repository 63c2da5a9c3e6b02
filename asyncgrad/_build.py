"""Which build of asyncgrad is running: pure Python, or with its engine compiled by mypyc.

NOTE [Compiled modules]
A release wheel may carry some modules compiled to C extensions by mypyc (the list is the
``include`` of the mypyc build hook in pyproject.toml); editable installs and sdists are pure
Python. Both builds run the same source: the compiled one is the same program, faster. It keeps
that promise only if the compiled modules follow mypyc's rules, which differ from Python's where
the type annotations say more than Python enforces:

  - Annotations are checked at run time: a compiled function given an argument of another type
    raises ``TypeError``. A public function that validates its arguments itself must take them
    as ``object`` (or ``Any``) and narrow them, or its own clear error never runs. A local
    variable keeps the type of its first assignment, checked at every later one: a sentinel
    (an ``object()``) assigned to a variable that held a node raises (give it a variable of
    its own).
  - Compiled classes are native: their attributes are slots whose declared types are enforced,
    an attribute not set in the class body or ``__init__`` cannot be added, and a class-level
    attribute without ``ClassVar`` becomes a per-instance field (so overriding it in a subclass
    is ignored). Compiled objects take no weak references: ``__weakref__`` in ``__slots__`` is
    ignored, and a compiled class with a Python base, which gets ``__weakref__`` and
    ``__dict__``, frees its objects without clearing their weak references (mypyc's issue
    1102: the callbacks never run and a reference left dangling crashes). A Python subclass
    that names ``__weakref__`` in its own ``__slots__`` takes them safely: See NOTE [Weak
    references to nodes] in asyncgrad/graph/node.py.
  - Python code cannot subclass a compiled class unless it says
    ``@mypyc_attr(allow_interpreted_subclasses=True)`` (from this module); a compiled class
    cannot subclass most built-in types (a list, a tuple) unless it is made a Python class with
    ``@mypyc_attr(native_class=False)``. ``object.__new__(C)`` refuses a compiled class (and
    its Python subclasses): call ``C()``, which only allocates when the class has no
    ``__init__``. Compiled code calls a method of an object of a Python subclass through
    Python (a lookup and Python's calling convention), or directly as ``C.method(obj, ...)``
    where the subclasses are known not to override it (NOTE [Table nodes are called directly]
    in asyncgrad/rules/registry.py).
  - Compiled code calls the compiled functions it names directly and inlines ``Final``
    constants: patching either from outside (``monkeypatch.setattr(module, "name", ...)``) is
    not seen by compiled callers. Tests that must patch internals are marked ``pure_only``.
  - Compiled functions have no Python frames: ``inspect`` and ``cr_frame`` see none, and a
    coroutine cannot ``del`` its locals nor ``break`` out of a ``try`` with a ``finally``
    (rebind the local; set a flag and break after the ``try``).
  - Fixed-length tuple types are unboxed: a value typed ``tuple[int, int]`` (a return type, a
    ``Final`` constant, a value narrowed by ``is not None``) is a new tuple each time it goes
    back to Python, so identity (``is``) of such values is not kept: shared values and
    sentinels are typed as tuples of any length (``tuple[str, ...]``), ``object`` or ``Any``.
  - A compiled module builds a ``NamedTuple``'s field types when its class statement runs: one
    that names a class defined further down crashes the import (define it after that class).
  - An exception thrown into a compiled coroutine (a cancellation) reaches what it awaits as
    ``throw(type, value, traceback)``, which Python 3.12 deprecates for coroutines, generators
    and asyncio's futures: a DeprecationWarning at every cancellation, an error under
    ``-W error``. A compiled module therefore awaits anything but its own coroutines through
    ``adapt_await(...)`` (``tests/engine/test_compiled_traps.py`` checks every ``await``), which
    passes the exception alone where it is needed and costs one call elsewhere.

``ag.__build__`` says which build is running; ``compiled_modules()`` lists the compiled modules.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Generator
from importlib.machinery import EXTENSION_SUFFIXES
from types import TracebackType
from typing import Any, TypeVar, cast

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # mypyc's decorator is needed only to compile; at run time it does nothing

    def mypyc_attr(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        return lambda cls: cls


__all__ = ["adapt_await", "compiled_modules", "kind", "mypyc_attr"]

T = TypeVar("T")

# Whether awaits of compiled coroutines go through _OneArgThrow: set by asyncgrad/__init__.py once
# it knows the build (a compiled engine on Python 3.12 or later).
wrap_awaits = False


class _OneArgThrow:
    """Awaits ``aw``, passing an exception thrown in with three arguments on as one (See NOTE
    [Compiled modules])."""

    __slots__ = ("_it",)

    def __init__(self, aw: Any) -> None:
        self._it = aw.__await__() if hasattr(aw, "__await__") else iter(aw)

    def __await__(self) -> Generator[Any, Any, Any]:
        return self  # type: ignore[return-value]

    def __iter__(self) -> _OneArgThrow:
        return self

    def __next__(self) -> Any:
        return self._it.send(None)

    def send(self, value: Any) -> Any:
        return self._it.send(value)

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> Any:
        exc = val if val is not None else typ() if isinstance(typ, type) else typ
        if tb is not None and exc.__traceback__ is not tb:
            exc = exc.with_traceback(tb)
        try:
            return self._it.throw(exc)
        finally:
            # The error goes on with this frame in its traceback: holding it here would close a
            # cycle that keeps the failed graph alive until the collector runs.
            del exc, typ, val, tb

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


def adapt_await(aw: Awaitable[T]) -> Awaitable[T]:
    """``aw``, or an awaitable over it that a compiled coroutine may throw into with three
    arguments without a DeprecationWarning (Python 3.12 and later; See NOTE [Compiled
    modules])."""
    if wrap_awaits:
        return cast("Awaitable[T]", _OneArgThrow(aw))
    return aw


def compiled_modules() -> tuple[str, ...]:
    """The names of asyncgrad's imported modules that are compiled extensions, sorted."""
    return tuple(
        sorted(
            name
            for name, module in list(sys.modules.items())
            if name.startswith("asyncgrad.")
            and str(getattr(module, "__file__", None) or "").endswith(tuple(EXTENSION_SUFFIXES))
        )
    )


def kind() -> str:
    """``"compiled"`` when the engine is compiled by mypyc, else ``"pure"`` (read once the
    package has imported the engine: this module imports nothing of it)."""
    worker = sys.modules.get("asyncgrad.engine.worker")
    if worker is None:
        raise RuntimeError("asyncgrad._build.kind() needs the engine imported first")
    return "compiled" if str(worker.__file__).endswith(tuple(EXTENSION_SUFFIXES)) else "pure"
