"""Anomaly detection: its mode (a context variable), and the forward tracebacks nodes record."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast, overload

if TYPE_CHECKING:
    from .node import Node

__all__ = [
    "detect_anomaly",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "set_detect_anomaly",
]

F = TypeVar("F", bound=Callable[..., Any])

# NOTE [Anomaly mode is a context variable]
# As grad mode (See NOTE [Grad mode is a context variable]), anomaly mode belongs to a task or
# thread, not to the process: one request debugged in anomaly mode neither slows nor changes the
# others. Its value is OFF, ON or ON_CHECK_NAN. It is read twice, as in torch:
#   - when a node is made (ops/_record.py): in anomaly mode the node records where the forward
#     made it (FORWARD_TRACEBACK in its metadata);
#   - when a backward pass is built (engine/graph_task.py): the pass then takes the engine's
#     watched path (See NOTE [Watched graph tasks] in engine/watch.py), which checks every node's
#     gradients for NaN (ON_CHECK_NAN), and an error in a node reports its forward traceback.
# So, as in torch, the forward traceback appears when both passes ran in anomaly mode.
OFF: Final = 0
ON: Final = 1
ON_CHECK_NAN: Final = 2
_anomaly: ContextVar[int] = ContextVar("asyncgrad_anomaly_mode", default=OFF)
anomaly_mode: Final = _anomaly.get

# The key of the forward traceback in Node.metadata (torch's name).
FORWARD_TRACEBACK: Final = "traceback_"
# How many frames a node keeps, innermost first (the recording's own frames included).
MAX_FRAMES: Final = 64
_PACKAGE_DIR: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on in the current task or thread."""
    return _anomaly.get() != OFF


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly detection is on and checks backward gradients for NaN."""
    return _anomaly.get() == ON_CHECK_NAN


def _mode(enabled: bool, check_nan: bool) -> int:
    if not isinstance(enabled, bool):
        raise TypeError(f"anomaly mode must be a bool, got {enabled!r} ({type(enabled).__name__})")
    if not isinstance(check_nan, bool):
        raise TypeError(f"check_nan must be a bool, got {check_nan!r} ({type(check_nan).__name__})")
    if not enabled:
        return OFF
    return ON_CHECK_NAN if check_nan else ON


class _AnomalyMode:
    """A context manager and decorator (of sync and async functions) setting anomaly mode."""

    target: int

    def __init__(self) -> None:
        self._open: list[Token[int]] = []

    def __enter__(self) -> None:
        self._open.append(_anomaly.set(self.target))

    def __exit__(self, *exc: object) -> None:
        # The most recent block of this object opened in the current context (a shared object
        # may be entered by several tasks: See NOTE [Shared mode objects]).
        for tok in reversed(list(self._open)):
            try:
                _anomaly.reset(tok)
            except ValueError:
                continue
            self._open.remove(tok)
            return

    def _clone(self) -> _AnomalyMode:
        raise NotImplementedError

    def __call__(self, fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"{type(self).__name__} decorates a function, got {fn!r}")
        factory = self._clone
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with factory():
                    return await fn(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with factory():
                return fn(*args, **kwargs)

        return cast(F, wrapper)


class detect_anomaly(_AnomalyMode):
    """Anomaly detection for the backward passes and graphs built inside (per task or thread).

    Nodes made inside record the traceback of the forward call that made them; a backward pass
    run inside reports, when a node fails, that traceback (as a note on the exception) and, with
    ``check_nan``, raises ``RuntimeError`` at the first node whose gradients hold NaN, as torch
    does. Meant for debugging: it makes graph building and backward slower.

    Args:
        check_nan: check every node's gradients for NaN during backward.

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.tensor([0.0], requires_grad=True)
        >>> with ag.autograd.detect_anomaly():
        ...     y = (x.sqrt() * 0.0).sum()
        ...     try:
        ...         y.backward()
        ...     except RuntimeError as e:
        ...         print(e)
        Function 'SqrtBackward0' returned nan values in its 0th output.
    """

    def __init__(self, check_nan: bool = True) -> None:
        super().__init__()
        self.check_nan = check_nan
        self.target = _mode(True, check_nan)

    def _clone(self) -> detect_anomaly:
        return detect_anomaly(self.check_nan)

    def __repr__(self) -> str:
        return f"detect_anomaly(check_nan={self.check_nan})"


class set_detect_anomaly(_AnomalyMode):
    """Turn anomaly detection on or off. As torch's, the constructor switches it at once (a plain
    call works); as a context manager the previous mode comes back when the block exits.

    Args:
        mode: on or off.
        check_nan: with ``mode``, check every node's gradients for NaN during backward.
    """

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        super().__init__()
        self.mode = mode
        self.check_nan = check_nan
        self.target = _mode(mode, check_nan)
        self.prev = _anomaly.get()
        _anomaly.set(self.target)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        _anomaly.set(self.prev)

    def __call__(self, fn: F) -> F:
        _anomaly.set(self.prev)
        return super().__call__(fn)

    def _clone(self) -> set_detect_anomaly:
        return set_detect_anomaly(self.mode, self.check_nan)

    def __repr__(self) -> str:
        return f"set_detect_anomaly(mode={self.mode}, check_nan={self.check_nan})"


# ----------------------------------------------------------------------------- forward traceback
# NOTE [Forward tracebacks are lazy]
# A node made in anomaly mode keeps only (code object, line number) pairs of the frames above it:
# a short walk up the stack, without reading any source file or keeping any frame (which would
# keep its local variables alive). The text is made only when someone reads it (an error, or
# node.metadata["traceback_"]).
class ForwardTraceback(Sequence[str]):
    """Where the forward made a node: a sequence of lines as ``traceback.format_stack`` gives
    (outermost call first), formatted on first use."""

    __slots__ = ("_frames", "_lines")

    def __init__(self, frames: tuple[tuple[Any, int], ...]) -> None:
        self._frames = frames
        self._lines: list[str] | None = None

    def _format(self) -> list[str]:
        lines = self._lines
        if lines is None:
            frames = list(self._frames)
            # Leave out the recording's own frames (the innermost ones inside the package), but
            # keep the package frames the user's code called through (nn modules, say).
            while len(frames) > 1 and frames[0][0].co_filename.startswith(_PACKAGE_DIR):
                if os.sep + "nn" + os.sep in frames[0][0].co_filename:
                    break
                frames.pop(0)
            summary = traceback.StackSummary.from_list(
                [
                    traceback.FrameSummary(code.co_filename, lineno, code.co_name)
                    for code, lineno in reversed(frames)
                ]
            )
            lines = self._lines = summary.format()
        return lines

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self._format()[i]

    def __len__(self) -> int:
        return len(self._format())

    def __iter__(self) -> Iterator[str]:
        return iter(self._format())

    def __str__(self) -> str:
        return "".join(self._format())

    def __repr__(self) -> str:
        return f"<ForwardTraceback of {len(self._frames)} frames>"


def forward_metadata() -> dict[str, Any]:
    """A new node's metadata in anomaly mode: the traceback of the forward call making it."""
    f: Any = sys._getframe(1)
    frames = []
    n = 0
    while f is not None and n < MAX_FRAMES:
        frames.append((f.f_code, f.f_lineno))
        f = f.f_back
        n += 1
    return {FORWARD_TRACEBACK: ForwardTraceback(tuple(frames))}


def anomaly_note(node: Node) -> str:
    """What an error in ``node`` during a backward pass in anomaly mode adds (torch's words)."""
    md = node._metadata
    tb = None if md is None else md.get(FORWARD_TRACEBACK)
    if tb is None:
        return (
            f"Error detected in {node.name()}. No forward pass information available. Enable "
            "detect anomaly during forward pass for more information."
        )
    return (
        f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
        + ("".join(tb))
    )
