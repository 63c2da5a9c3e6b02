"""How a gradient function is called: at once where no event loop runs, awaitable inside one.

# NOTE [One rule for gradient calls]
# torch's gradient functions run when called and return their result (a tuple of Tensors, None,
# a Jacobian). asyncgrad's must also serve an event loop without blocking it. The rule, the same
# for ag.grad, ag.backward, ag.autograd.grad/backward and ag.autograd.functional.*:
#   - No event loop running in the calling thread (a script, a worker thread): the call runs the
#     backward pass there and then (the ``_sync`` twin) and returns or raises what torch's does.
#     Ported code computes what it computed.
#   - An event loop running in the calling thread (asyncio's, uvloop's, or trio's): the call
#     returns an awaitable, and the pass runs when it is awaited (``await ag.grad(...)``, a task,
#     ``asyncio.gather``). Anything else done with it raises at once, naming ``await`` and the
#     ``_sync`` twin: unpacking, indexing, ``len``, ``bool``, reading an attribute, and discarding
#     it (``ag.backward(loss)`` as a statement), which would otherwise compute nothing and leave
#     ``.grad`` as it was, with a warning at garbage collection at best.
# Code that cannot await runs a gradient call at once, even on the loop's thread: sync user code
# that a pass calls (a hook, a custom Function's backward: See NOTE [User code in a backward
# leaves no state]), a reentrant blocking pass as torch's in a custom backward; and module-level
# code, a notebook cell say (See NOTE [Module code cannot await]).
# Discarding is seen at the call, from the caller's next bytecode instruction (``POP_TOP``: the
# value is thrown away; ``GET_AWAITABLE``: it is awaited at once, and the bare coroutine is returned
# with no wrapper, so the awaited path costs one frame lookup and one dict lookup). A caller whose
# frame cannot be read that way gets the wrapper, which still refuses every other use. A wrapper
# dropped without ever being awaited warns, naming the call, in place of Python's warning.
"""

from __future__ import annotations

import dis
import inspect
import sys
import warnings
from asyncio import _get_running_loop
from bisect import bisect_right
from collections.abc import Coroutine, Generator
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ..graph.local_state import user_calls

__all__ = ["AT_ONCE", "NotAwaitedError", "awaitable", "call_use", "loop_running"]

_R = TypeVar("_R")


class NotAwaitedError(TypeError):
    """A gradient call's awaitable was used (unpacked, indexed, discarded) without ``await``."""


def loop_running() -> bool:
    """Whether the caller can await: an event loop runs in the calling thread (asyncio's,
    uvloop's or trio's) and the caller is not sync user code that a backward pass called.

    Not sniffio's answer: threads that anyio starts from trio inherit its "trio" context
    variable, and no loop runs in them.
    """
    if _get_running_loop() is not None:
        return not user_calls.depth
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return not user_calls.depth


# What the caller does with a call's value, by (id(code), f_lasti) of its calling instruction,
# with the code object kept in the value: hashing a code object hashes its contents (about
# 200 ns a call), an id does not, and the kept code object keeps its id from being reused.
_OTHER: Final = 0
_AWAITED: Final = 1
_DISCARDED: Final = 2
AT_ONCE: Final = 3  # not a call site's: See NOTE [Module code cannot await]
_USES: dict[tuple[int, int], tuple[CodeType, int]] = {}
_MAX_USES: Final = 4096  # code objects made at run time (exec in a loop) must not pile up
_INSTRUCTIONS: dict[CodeType, tuple[list[int], list[str]]] = {}


def _learn(code: CodeType, lasti: int) -> int:
    """Read what the instruction after the call at ``lasti`` does with its value.

    ``f_lasti`` is the call instruction (3.13) or its last inline cache entry (3.11, 3.12);
    ``dis`` without caches gives the real instructions, so the call is the last one at or before
    ``lasti`` and the next one is what uses the value.
    """
    table = _INSTRUCTIONS.get(code)
    if table is None:
        ins = list(dis.get_instructions(code))
        table = ([i.offset for i in ins], [i.opname for i in ins])
        if len(_INSTRUCTIONS) >= _MAX_USES:
            _INSTRUCTIONS.clear()
        _INSTRUCTIONS[code] = table
    offsets, names = table
    at = bisect_right(offsets, lasti)
    use = _OTHER
    if 0 < at < len(names) and names[at - 1].startswith("CALL"):
        after = names[at]
        if after == "GET_AWAITABLE":
            use = _AWAITED
        elif after == "POP_TOP":
            use = _DISCARDED
    if len(_USES) >= _MAX_USES:
        _USES.clear()
    _USES[id(code), lasti] = (code, use)
    return use


def call_use(caller: FrameType | None) -> int:
    """What the caller of a gradient call inside a running loop does with its value: AWAITED at
    once, DISCARDED, OTHER (kept, passed on), or AT_ONCE: the call must run now, as torch's,
    because the code that made it runs at module level and cannot await (See NOTE [Module code
    cannot await])."""
    if caller is None:
        return _OTHER
    code = caller.f_code
    lasti = caller.f_lasti
    known = _USES.get((id(code), lasti))
    use = known[1] if known is not None and known[0] is code else _learn(code, lasti)
    if use == _AWAITED:
        return use
    return AT_ONCE if _module_code_above(caller) else use


# NOTE [Module code cannot await]
# Inside a running loop a call is awaitable, but some code running there cannot await anything:
# a notebook cell or an interactive line (IPython and Jupyter run cells on the loop's thread,
# inside its task; ``python -m asyncio`` runs lines in its loop), a module imported from a
# coroutine, and the sync functions these call (``def train_step(): ...`` called from a cell). A
# PyTorch user writes torch's code there, so a call made there runs at once, as torch's (a cell
# with a top-level ``await`` compiles to a coroutine: there calls are awaitable). It is told by
# walking up the caller's sync frames: module-level code (``<module>``) before any coroutine,
# async generator, or frame of an event loop's package (a loop callback, a task step) means at
# once. Only a call not awaited where it is made walks (tasks, gather, the misuses), and the
# walk ends at the first coroutine, usually the caller's own frame.
_ASYNC_CODE: Final = (
    inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR
)
_LOOP_PACKAGES: Final = ("asyncio", "uvloop", "trio", "anyio", "sniffio", "concurrent")
_MAX_WALK: Final = 64


def _module_code_above(frame: FrameType) -> bool:
    f: FrameType | None = frame
    for _ in range(_MAX_WALK):
        if f is None:
            return False
        code = f.f_code
        if code.co_flags & _ASYNC_CODE:
            return False
        if code.co_name == "<module>":
            return True
        package = f.f_globals.get("__name__", "").partition(".")[0]
        if package in _LOOP_PACKAGES:
            return False
        f = f.f_back
    return False


def awaitable(
    coro: Coroutine[Any, Any, _R], use: int, name: str, twin: str
) -> Coroutine[Any, Any, _R]:
    """The value of gradient call ``name`` inside a running loop, given its caller's ``use``
    (call_use; See NOTE [One rule for gradient calls]): ``coro`` itself where the caller awaits
    it at once, a guard that refuses any use but awaiting otherwise; a NotAwaitedError where the
    caller discards it."""
    if use == _AWAITED:
        return coro
    if use == _DISCARDED:
        coro.close()
        raise NotAwaitedError(
            f"{name}(...) inside a running event loop returns an awaitable, and this call "
            f"throws it away: nothing was computed. Write `await {name}(...)`, or call "
            f"{twin}(...) to run it here and block until it is done"
        )
    return _Pending(coro, name, twin)  # type: ignore[abstract]  # slots hold send, throw, close


class _Pending(Coroutine[Any, Any, _R]):
    """A gradient call's awaitable that is not awaited at its call: a coroutine for everything
    that runs coroutines (tasks, ``gather``, ``wait_for``), and an error for anything else."""

    # send, throw and close are the coroutine's own bound methods: a task drives the pass with
    # no Python frame in between (a frame holding the exception a task throws in would be a
    # reference cycle through its own traceback, keeping a cancelled pass's graph alive).
    __slots__ = ("_coro", "_name", "_said", "_twin", "close", "send", "throw")

    def __init__(self, coro: Coroutine[Any, Any, _R], name: str, twin: str) -> None:
        self._coro = coro
        self._name = name
        self._twin = twin
        self._said = False  # an error told the caller already: no warning when it is dropped
        self.send = coro.send  # type: ignore[method-assign]
        self.throw = coro.throw  # type: ignore[method-assign]
        self.close = coro.close  # type: ignore[method-assign]

    def _refuse(self, what: str) -> NotAwaitedError:
        self._said = True
        return NotAwaitedError(
            f"{what} {self._name}(...) without awaiting it: inside a running event loop it "
            f"returns an awaitable, not its result. Write `await {self._name}(...)`, or call "
            f"{self._twin}(...) to run it here and block until it is done"
        )

    def __await__(self) -> Generator[Any, None, _R]:
        return self._coro.__await__()

    def __del__(self) -> None:
        # Only a coroutine that never started is closed: a started one may still be running,
        # awaited through the iterator __await__ gave, after this wrapper was dropped.
        coro = self._coro
        if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            coro.close()  # closing it keeps Python's "never awaited" warning away
            if not self._said:
                warnings.warn(
                    f"{self._name}(...) was never awaited, so nothing was computed: write "
                    f"`await {self._name}(...)`, or call {self._twin}(...)",
                    RuntimeWarning,
                    stacklevel=1,
                )

    def __iter__(self) -> Any:
        raise self._refuse("cannot unpack or iterate over")

    def __len__(self) -> int:
        raise self._refuse("cannot take len() of")

    def __getitem__(self, index: Any) -> Any:
        raise self._refuse("cannot index")

    def __bool__(self) -> bool:
        raise self._refuse("cannot test the truth of")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("cr_"):  # debuggers and asyncio's task repr read the coroutine's
            return getattr(self._coro, attr)
        if attr.startswith("__"):
            raise AttributeError(attr)
        err = self._refuse(f"cannot read .{attr} of")
        raise AttributeError(*err.args)

    def __repr__(self) -> str:
        return f"<{self._name}(...) not awaited yet: await it, or call {self._twin}(...)>"


_G = TypeVar("_G", covariant=True)

if TYPE_CHECKING:
    # What type checkers see (See NOTE [One rule for gradient calls]): both uses check, the
    # script's (``(g,) = ag.grad(y, x)``, ``ag.backward(loss)``) and the loop's (``await``,
    # ``asyncio.create_task``). At run time the value is a plain tuple or None, or an awaitable.

    class TupleCall(tuple[_G, ...], Coroutine[Any, Any, tuple[_G, ...]]):
        """A tuple where no loop runs; an awaitable of that tuple inside a running loop."""

    class NoneCall(Coroutine[Any, Any, None]):
        """None where no loop runs; an awaitable of None inside a running loop."""
