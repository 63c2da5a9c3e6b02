"""Ops run on their operands' CUDA device, as torch's run under a device guard.

NOTE [Ops run on their operands' device]
CuPy launches every kernel on the current device and refuses an operand on another one (See
NOTE [Kernels run on the current device] in asyncgrad/backend/sim.py), so ``a1 * 2`` for a
``cuda:1`` tensor fails while ``cuda:0`` is current, unless something makes ``cuda:1`` current
around the op. torch runs every op under a guard of its operands' device; here the ops compute
inline in many places (operators and methods of the arrays), so the guard is put around the op
functions themselves, where every caller enters them: in the modules given to ``guard_module``
(``asyncgrad.ops``, whose functions ``Tensor``'s methods call at call time, ``asyncgrad`` and
``asyncgrad.nn.functional``) the public op functions are replaced by guarded ones (of
``asyncgrad.ops.pointwise`` only those ``Tensor``'s operators call; recording's helpers never).
That happens only once the process uses a second CUDA device (See NOTE [Several devices in use] in
asyncgrad/backend/cuda.py): on the CPU and with one device the ops stay as they are and cost
nothing more. The guard makes the device of the first CUDA tensor (or device array) among the
arguments current (looking inside lists and tuples of them, as ``cat`` takes) and puts the
previous one back. The rules of backward need none: the engine runs each node with its
device current.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any, Final

from .. import backend
from .._tensor import Tensor
from ..backend import cuda

__all__ = ["guard_module", "guarded"]

ndarray: Final = backend.ndarray
_lock: Final = threading.Lock()
_modules: list[tuple[str, tuple[str, ...]]] = []
_guards: dict[Callable[..., Any], Callable[..., Any]] = {}
_wrappers: set[Callable[..., Any]] = set()
_installed = False
# Arguments that are never arrays.
_PLAIN: Final = frozenset((int, float, bool, complex, str, type(None)))
# Functions defined in these packages are ops (their names start so).
_OP_MODULES: Final = ("asyncgrad.ops", "asyncgrad.nn.functional")


def _device_index(values: Iterable[Any]) -> int:
    """The CUDA device index of the first CUDA tensor or device array in ``values`` (inside
    lists and tuples that start with one, or with another list or tuple); -1 if none."""
    for v in values:
        if isinstance(v, Tensor):
            a = v._array
            if type(a) is not ndarray:
                return int(a.device.id)
        elif isinstance(v, (tuple, list)):  # a tuple subclass too: ag.grad's result
            if v and (isinstance(v[0], (Tensor, tuple, list)) or backend.is_device_array(v[0])):
                i = _device_index(v)
                if i >= 0:
                    return i
        elif backend.is_device_array(v):
            return int(v.device.id)
    return -1


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with its operands' CUDA device current (the same wrapper for the same
    function)."""
    g = _guards.get(fn)
    if g is not None:
        return g

    @functools.wraps(fn)
    def on_operands_device(*args: Any, **kwargs: Any) -> Any:
        idx = -1
        for v in args:  # _device_index, inline for the usual tensors and numbers
            if isinstance(v, Tensor):
                a = v._array
                if type(a) is not ndarray:
                    idx = int(a.device.id)
                    break
            elif type(v) not in _PLAIN:
                idx = _device_index((v,))
                if idx >= 0:
                    break
        else:
            if kwargs:
                idx = _device_index(kwargs.values())
        if idx < 0:
            return fn(*args, **kwargs)
        prev = cuda.use_device(idx)
        if prev == idx:
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            cuda.use_device(prev)

    _guards[fn] = on_operands_device
    _wrappers.add(on_operands_device)
    return on_operands_device


def _is_op(value: Any) -> bool:
    """A public function of a public op module (not a helper of ``ops._record``), not guarded
    yet."""
    if type(value) is not types.FunctionType or value in _wrappers:
        return False
    where = str(value.__module__)
    return where.startswith(_OP_MODULES) and "._" not in where


def _guard(name: str, only: tuple[str, ...]) -> None:
    module = sys.modules[name]
    for attr, value in list(vars(module).items()):
        if not attr.startswith("_") and (not only or attr in only) and _is_op(value):
            setattr(module, attr, guarded(value))


def guard_module(name: str, only: tuple[str, ...] = ()) -> None:
    """Guard the op functions of module ``name`` (only those named ``only``, when given) once
    several devices are in use (See NOTE [Ops run on their operands' device])."""
    with _lock:
        _modules.append((name, only))
        if not _installed:
            return
    _guard(name, only)


def _install() -> None:
    global _installed
    with _lock:
        _installed = True
        modules = list(_modules)
    for name, only in modules:
        _guard(name, only)


guard_module("asyncgrad.ops")
# Tensor's operators call these there.
guard_module("asyncgrad.ops.pointwise", ("plain_add", "plain_sub", "plain_div"))
cuda.on_several_devices(_install)
