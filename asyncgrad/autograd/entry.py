"""How a gradient function is called: at once where no event loop runs, awaitable inside one.

# NOTE [One rule for gradient calls]
# torch's gradient functions run when called and return their result (a tuple of Tensors, None,
# a Jacobian). asyncgrad's must also serve an event loop without blocking it. The rule, the same
# for ag.grad, ag.backward, ag.autograd.grad/backward and ag.autograd.functional.*:
#   - No event loop running in the calling thread (a script, a worker thread): the call runs the
#     backward pass there and then (the ``_sync`` twin) and returns or raises what torch's does.
#     Ported code computes what it computed. ag.grad's tuple and ag.backward's value are also
#     coroutines that are done already, so asyncio, trio and anyio take them wherever they take a
#     coroutine (``asyncio.run(ag.grad(y, [x]))``, ``wait_for``, ``gather``, ``create_task``):
#     awaiting one gives the call's value at once and never runs the pass again. The tuple is a
#     tuple (FinishedTuple: ``==``, unpacking, indexing, its repr, pickling as a plain tuple);
#     ag.backward's value (BACKWARD_DONE) is falsy, shows as ``<ag.backward(...) done>`` and
#     awaits to None. Two places keep torch's plain values: user code that a pass calls (a hook,
#     a custom Function's backward, which may return ag.grad's tuple as its own gradients), and
#     ag.autograd.functional, whose results may be Tensors.
#   - An event loop running in the calling thread (asyncio's, uvloop's, or trio's): the call
#     returns an awaitable, and the pass runs when it is awaited. What the caller does with it is
#     read from the calling frame, and wherever that reading cannot be sure, the call stays
#     awaitable:
#       * awaited at once (the caller's next instruction is ``GET_AWAITABLE``): the bare
#         coroutine, no wrapper; the awaited path costs one frame lookup and one dict lookup;
#       * thrown away, ``ag.backward(loss)`` as a statement (the next instruction is ``POP_TOP``
#         and the callee written at the call is the function itself): NotAwaitedError at once,
#         naming ``await`` and the ``_sync`` twin, and nothing is computed;
#       * anything else (returned from a helper or a lambda, stored and awaited later, handed to
#         a task, ``gather``, ``wait_for``, a decorator, an async generator; called through
#         ``functools.partial``, ``map``, a local alias or code with no Python frame): a wrapper
#         that is a coroutine to everything that runs coroutines, refuses unpacking, indexing,
#         ``len``, ``bool`` and attributes (naming ``await`` and the twin), and warns at the
#         call's line if it is dropped without ever being awaited.
#     So a call that is kept is never refused, and one that is lost is never silent.
# The callee is checked because the frame a call sees is the nearest Python one, and code in
# between that has no frame (C, or compiled) may keep the value while its own is thrown away:
# ``tasks.extend(map(ag.backward, ls))`` is a statement whose callee is ``tasks.extend``. The
# callee is read from the source positions of the caller's instructions (the loads of a global
# and of attributes that start where the call starts, each ending further, the last where the
# arguments begin) and looked up with dict lookups alone (the frame's globals and builtins, then
# modules' own attributes), so that nothing runs; it must be the gradient function itself. A
# callee that is anything else (a local, an object's attribute, a call) reads as not known, as
# does code compiled without positions (``python -X no_debug_ranges``).
# Code that cannot await runs a gradient call at once, even on the loop's thread: sync user code
# that a pass calls (a hook, a custom Function's backward: See NOTE [User code in a backward
# leaves no state]), a reentrant blocking pass as torch's in a custom backward; and module-level
# code, a notebook cell say (See NOTE [Module code cannot await]).
"""

from __future__ import annotations

import dis
import inspect
import sys
import warnings
from asyncio import _get_running_loop
from bisect import bisect_left, bisect_right
from collections.abc import Coroutine, Generator
from types import CodeType, FrameType, ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ..graph.local_state import user_calls

__all__ = [
    "AT_ONCE",
    "BACKWARD_DONE",
    "BackwardDone",
    "Finished",
    "FinishedTuple",
    "NotAwaitedError",
    "awaitable",
    "backward_done",
    "call_use",
    "finished",
    "loop_running",
]

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


# ------------------------------------------------------------------------- reading the caller
# What a call site does with a call's value, by (id(code), f_lasti) of its calling instruction,
# with the code object kept in the value: hashing a code object hashes its contents (about
# 200 ns a call), an id does not, and the kept code object keeps its id from being reused. The
# value is (code, use, the callee as a chain of names where the value is thrown away).
_OTHER: Final = 0
_AWAITED: Final = 1
_DISCARDED: Final = 2
AT_ONCE: Final = 3  # not a call site's: See NOTE [Module code cannot await]
_POPPED: Final = 4  # the value is thrown away: a discard if the callee is the function itself
_SITES: dict[tuple[int, int], tuple[CodeType, int, tuple[str, ...]]] = {}
_MAX_SITES: Final = 4096  # code objects made at run time (exec in a loop) must not pile up
_INSTRUCTIONS: dict[CodeType, tuple[list[int], list[str], list[Any]]] = {}
_CALLS: Final = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})
# Instructions that pass the value on unchanged: the arms of ``a() if c else b()`` meet by a
# jump.
_JUMPS: Final = frozenset(
    {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP", "JUMP_NO_INTERRUPT", "JUMP_BACKWARD_NO_INTERRUPT"}
)
_MAX_HOPS: Final = 4
# What a callee that is a global, or a module's attribute, is loaded with.
_CHAIN_LOADS: Final = frozenset({"LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD"})
_MISSING: Final = object()


def _learn(code: CodeType, lasti: int) -> tuple[CodeType, int, tuple[str, ...]]:
    """Read what the instruction after the call at ``lasti`` does with its value.

    ``f_lasti`` is the call instruction (3.13) or its last inline cache entry (3.11, 3.12);
    ``dis`` without caches gives the real instructions, so the call is the last one at or before
    ``lasti`` and the next one (past jumps that pass the value on) is what uses the value.
    """
    table = _INSTRUCTIONS.get(code)
    if table is None:
        ins = list(dis.get_instructions(code))
        table = ([i.offset for i in ins], [i.opname for i in ins], [i.argval for i in ins])
        if len(_INSTRUCTIONS) >= _MAX_SITES:
            _INSTRUCTIONS.clear()
        _INSTRUCTIONS[code] = table
    offsets, names, args = table
    at = bisect_right(offsets, lasti)
    use = _OTHER
    callee: tuple[str, ...] = ()
    if 0 < at < len(names) and names[at - 1] in _CALLS:
        call = at - 1
        after = ""
        for _ in range(_MAX_HOPS):
            after = names[at]
            if after == "NOP" and at + 1 < len(names):
                at += 1
            elif after in _JUMPS:  # on at its target, or not known
                target = args[at]
                at = bisect_left(offsets, target) if isinstance(target, int) else len(offsets)
                if at == len(offsets) or offsets[at] != target:
                    after = ""
                    break
            else:
                break
        if after == "GET_AWAITABLE":
            use = _AWAITED
        elif after == "POP_TOP":
            use = _POPPED
            callee = _callee_chain(code, call)
    if len(_SITES) >= _MAX_SITES:
        _SITES.clear()
    site = (code, use, callee)
    _SITES[id(code), lasti] = site
    return site


def _callee_chain(code: CodeType, call: int) -> tuple[str, ...]:
    """The callee of the ``call``-th instruction of ``code`` as a global and the attributes read
    from it (``("ag", "autograd", "backward")`` for ``ag.autograd.backward(y)``), read from the
    source positions of the instructions; none where the callee is anything else (a local, a
    call, a subscript) or positions are missing."""
    ins = list(dis.get_instructions(code))
    pos = ins[call].positions
    if pos is None or None in (pos.lineno, pos.col_offset, pos.end_lineno, pos.end_col_offset):
        return ()
    start = (pos.lineno, pos.col_offset)
    end = (pos.end_lineno, pos.end_col_offset)
    # The callee's instructions start where the call does and end before it does, each load of
    # a plain chain further than the one before; the callee ends last. Its span may also hold
    # bookkeeping that loads no name (PUSH_NULL, the keyword names of the call).
    part: list[tuple[tuple[int, int], dis.Instruction]] = []
    for i in ins[:call]:
        p = i.positions
        if p is None or p.end_lineno is None or p.end_col_offset is None:
            continue
        span = (p.end_lineno, p.end_col_offset)
        if (p.lineno, p.col_offset) == start and span < end:
            part.append((span, i))
    if not part:
        return ()
    longest = max(span for span, _ in part)
    chain: list[str] = []
    last = start
    for span, i in part:
        first = not chain
        if i.opname in _CHAIN_LOADS and isinstance(i.argval, str) and span > last:
            if first != (i.opname == "LOAD_GLOBAL"):
                return ()
            chain.append(i.argval)
            last = span
        elif span != longest or (i.opname.startswith("LOAD_") and isinstance(i.argval, str)):
            return ()
    return tuple(chain) if last == longest else ()


def _is_callee(caller: FrameType, chain: tuple[str, ...], fn: Any) -> bool:
    """Whether ``chain`` (_callee_chain) names ``fn`` in ``caller``: read with dict lookups alone
    (globals, builtins, then modules' own attributes), so that nothing runs."""
    if not chain:
        return False
    missing = _MISSING
    obj = caller.f_globals.get(chain[0], missing)
    if obj is missing:
        obj = caller.f_builtins.get(chain[0], missing)
    for attr in chain[1:]:
        if not isinstance(obj, ModuleType):
            return False
        obj = obj.__dict__.get(attr, missing)
    return obj is fn


def call_use(caller: FrameType | None, fn: Any) -> int:
    """What the caller of gradient function ``fn`` does with its value inside a running loop:
    AWAITED at once, DISCARDED, OTHER (kept, passed on, or not known), or AT_ONCE: the call must
    run now, as torch's, because the code that made it runs at module level and cannot await
    (See NOTE [Module code cannot await])."""
    if caller is None:
        return _OTHER
    code = caller.f_code
    lasti = caller.f_lasti
    site = _SITES.get((id(code), lasti))
    if site is None or site[0] is not code:
        site = _learn(code, lasti)
    use = site[1]
    if use == _AWAITED:
        return use
    if use == _POPPED:
        use = _DISCARDED if _is_callee(caller, site[2], fn) else _OTHER
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
# walk ends at the first coroutine, usually the caller's own frame. What such a call returns is
# what a script's returns, so ``asyncio.ensure_future(ag.grad(...))`` in a cell still works.
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


# ------------------------------------------------------------------------- inside a running loop
def awaitable(
    coro: Coroutine[Any, Any, _R], use: int, caller: FrameType | None, name: str, twin: str
) -> Coroutine[Any, Any, _R]:
    """The value of gradient call ``name`` inside a running loop, given its caller's ``use``
    (call_use; See NOTE [One rule for gradient calls]): ``coro`` itself where the caller awaits
    it at once, a NotAwaitedError where the caller throws it away, and otherwise a wrapper that
    refuses any use but running it, and warns at the caller's line if it is never run."""
    if use == _AWAITED:
        return coro
    if use == _DISCARDED:
        coro.close()
        raise NotAwaitedError(
            f"{name}(...) inside a running event loop returns an awaitable, and this call "
            f"throws it away: nothing was computed. Write `await {name}(...)`, or call "
            f"{twin}(...) to run it here and block until it is done"
        )
    return _Pending(coro, name, twin, caller)  # type: ignore[abstract]  # slots hold send, ...


class _Pending(Coroutine[Any, Any, _R]):
    """A gradient call's awaitable that is not awaited at its call: a coroutine for everything
    that runs coroutines (tasks, ``gather``, ``wait_for``, ``await``), and an error for anything
    else."""

    # send, throw and close are the coroutine's own bound methods: a task drives the pass with
    # no Python frame in between (a frame holding the exception a task throws in would be a
    # reference cycle through its own traceback, keeping a cancelled pass's graph alive).
    __slots__ = (
        "__name__",  # what asyncio's task repr names a coroutine by
        "_code",
        "_coro",
        "_handed",
        "_lasti",
        "_name",
        "_told",
        "_twin",
        "close",
        "send",
        "throw",
    )

    def __init__(
        self, coro: Coroutine[Any, Any, _R], name: str, twin: str, caller: FrameType | None
    ) -> None:
        self._coro = coro
        self._name = self.__name__ = name
        self._twin = twin
        self._told = False  # an error told the caller already: no warning when it is dropped
        # ``__await__`` handed the coroutine on: the iterator it gave holds the coroutine, which
        # may not have started yet when this wrapper is dropped (``await helper()``).
        self._handed = False
        # Where the call was made, for the warning: the code and the instruction, whose line is
        # looked up only to warn (the frame itself is not kept).
        self._code = None if caller is None else caller.f_code
        self._lasti = -1 if caller is None else caller.f_lasti
        self.send = coro.send  # type: ignore[method-assign]
        self.throw = coro.throw  # type: ignore[method-assign]
        self.close = coro.close  # type: ignore[method-assign]

    def _refuse(self, what: str) -> NotAwaitedError:
        self._told = True
        return NotAwaitedError(
            f"{what} {self._name}(...) without awaiting it: inside a running event loop it "
            f"returns an awaitable, not its result. Write `await {self._name}(...)`, or call "
            f"{self._twin}(...) to run it here and block until it is done"
        )

    def __await__(self) -> Generator[Any, None, _R]:
        self._handed = True
        return self._coro.__await__()

    def __del__(self) -> None:
        # Only a coroutine that never started and was never handed on is closed: one that is
        # awaited through the iterator __await__ gave may still run after this wrapper is gone.
        coro = self._coro
        if not self._handed and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            coro.close()  # closing it keeps Python's "never awaited" warning away
            if self._told:
                return
            code = self._code
            warnings.warn_explicit(
                f"{self._name}(...) was never awaited, so nothing was computed: write "
                f"`await {self._name}(...)`, or call {self._twin}(...)",
                RuntimeWarning,
                "<unknown>" if code is None else code.co_filename,
                0 if code is None else _line_of(code, self._lasti),
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
        if attr.startswith("cr_"):  # debuggers, trio and asyncio's task repr read the coroutine's
            return getattr(self._coro, attr)
        if attr.startswith("__"):
            raise AttributeError(attr)
        # Not _refuse: libraries probe attributes with getattr(..., default) and hasattr, which
        # must not silence the warning of a call that is then never awaited.
        raise AttributeError(
            f"cannot read .{attr} of {self._name}(...) without awaiting it: inside a running "
            f"event loop it returns an awaitable, not its result. Write "
            f"`await {self._name}(...)`, or call {self._twin}(...) to run it here and block "
            f"until it is done"
        )

    def __repr__(self) -> str:
        return f"<{self._name}(...) not awaited yet: await it, or call {self._twin}(...)>"


def _line_of(code: CodeType, lasti: int) -> int:
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line or 0
    return 0


# ------------------------------------------------------------------------- no running loop
class Finished(Coroutine[Any, Any, Any]):
    """A gradient call that ran at once, as a coroutine that is done already: anything that
    runs coroutines (``asyncio.run``, tasks, ``wait_for``, ``gather``, trio, anyio) gets the
    call's value from it at once, however often, and the pass never runs again."""

    __slots__ = ()

    def _value(self) -> Any:
        raise NotImplementedError

    def send(self, value: Any) -> Any:
        raise StopIteration(self._value())

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: BaseException | object = None,
        tb: TracebackType | None = None,
    ) -> Any:
        # As a coroutine that has not started: what is thrown in is raised.
        exc = val if isinstance(val, BaseException) else typ() if isinstance(typ, type) else typ
        if tb is not None:
            exc = exc.with_traceback(tb)
        try:
            raise exc
        finally:
            # The error goes on with this frame in its traceback: holding it here would be a
            # cycle that keeps the result alive until the collector runs.
            del exc, typ, val, tb

    def close(self) -> None:
        pass

    def __await__(self) -> Generator[Any, None, Any]:
        yield from ()
        return self._value()


class FinishedTuple(tuple[Any, ...], Finished):
    """``ag.grad``'s tuple where it ran at once: torch's tuple, that awaits to itself."""

    __slots__ = ()
    __name__ = "ag.grad"  # what asyncio's task repr names a coroutine by

    def _value(self) -> Any:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))  # pickles and copies as the plain tuple


class BackwardDone(Finished):
    """``ag.backward``'s value where it ran at once: falsy, as torch's None, and it awaits to
    None. There is one, BACKWARD_DONE."""

    __slots__ = ()
    __name__ = "ag.backward"

    def _value(self) -> None:
        return None

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<ag.backward(...) done>"

    def __reduce__(self) -> str:
        return "BACKWARD_DONE"


BACKWARD_DONE: Final = BackwardDone()


def finished(value: tuple[Any, ...]) -> tuple[Any, ...]:
    """``ag.grad``'s value where it ran at once (See NOTE [One rule for gradient calls])."""
    return value if user_calls.depth else FinishedTuple(value)


def backward_done() -> BackwardDone | None:
    """``ag.backward``'s value where it ran at once (See NOTE [One rule for gradient calls])."""
    return None if user_calls.depth else BACKWARD_DONE


_G = TypeVar("_G", covariant=True)

if TYPE_CHECKING:
    # What type checkers see (See NOTE [One rule for gradient calls]): both uses check, the
    # script's (``(g,) = ag.grad(y, x)``, ``ag.backward(loss)``) and the loop's (``await``,
    # ``asyncio.create_task``). At run time the value is a FinishedTuple or BACKWARD_DONE (a
    # plain tuple or None in user code a pass calls), or an awaitable.

    class TupleCall(tuple[_G, ...], Coroutine[Any, Any, tuple[_G, ...]]):
        """A tuple where no loop runs; an awaitable of that tuple inside a running loop."""

    class NoneCall(Coroutine[Any, Any, None]):
        """None (falsy) where no loop runs; an awaitable of None inside a running loop."""
