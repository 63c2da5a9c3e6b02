"""``ag.amp``: ``autocast`` and ``GradScaler`` with torch's API.

NOTE [Autocast changes nothing]
torch's ``autocast`` runs chosen ops in a lower precision (bfloat16 on the CPU, float16 on
CUDA). asyncgrad has no such per-op casting: inside ``with ag.autocast(...)`` every op computes
in its inputs' dtypes, exactly as outside. The block only records its settings, so that
``ag.is_autocast_enabled(...)`` and ``ag.get_autocast_dtype(...)`` answer as torch's, and code
written for mixed precision runs unchanged (in full precision). Cast explicitly (``model.half()``,
``x.to(ag.float16)``) for lower-precision arithmetic. asyncgrad has no bfloat16: the default
autocast dtype is float16 on every device.

``GradScaler`` is torch's loss scaler: ``scale(loss)`` multiplies by the scale, ``step``
unscales the gradients and skips the step when any is inf or NaN, ``update`` grows or backs off
the scale. With ``enabled=False`` (or ``device="cuda"`` without CUDA, where torch warns and
disables it) ``scale`` returns its argument and ``step`` calls ``optimizer.step()``.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from types import MappingProxyType, TracebackType
from typing import Any, Final, TypeVar

from . import cuda, dtypes
from ._tensor import Tensor
from .graph.grad_mode import no_grad

__all__ = [
    "GradScaler",
    "autocast",
    "custom_bwd",
    "custom_fwd",
    "get_autocast_dtype",
    "is_autocast_available",
    "is_autocast_cache_enabled",
    "is_autocast_enabled",
    "set_autocast_cache_enabled",
    "set_autocast_dtype",
    "set_autocast_enabled",
]

_DEVICE_TYPES: Final = ("cpu", "cuda", "ipu", "xla", "xpu", "hpu", "mps", "mtia", "maia")
# Per device type, (enabled, dtype): a read-only mapping, replaced whole by each change.
_state: ContextVar[Mapping[str, tuple[bool, Any]]] = ContextVar(
    "asyncgrad_autocast",
    default=MappingProxyType(dict.fromkeys(_DEVICE_TYPES, (False, dtypes.float16))),
)
_cache = [True]

F = TypeVar("F", bound=Callable[..., Any])


def _device_type(device_type: Any) -> str:
    name = str(getattr(device_type, "type", device_type)).split(":")[0]
    if name not in _DEVICE_TYPES:
        raise RuntimeError(
            f"Expected one of {', '.join(_DEVICE_TYPES)} device type at start of device string: "
            f"{device_type}"
        )
    return name


def is_autocast_available(device_type: str) -> bool:
    """Whether ``autocast`` accepts ``device_type`` (cpu, and cuda where CUDA is available)."""
    return device_type == "cpu" or (device_type == "cuda" and cuda.is_available())


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether an ``autocast`` block for ``device_type`` (CUDA with none given, as torch's) is
    active (See NOTE [Autocast changes nothing])."""
    return _state.get()[_device_type(device_type or "cuda")][0]


def set_autocast_enabled(*args: Any) -> None:
    """``set_autocast_enabled(device_type, enabled)`` (or torch's older ``(enabled)``, for
    CUDA)."""
    device_type, enabled = ("cuda", args[0]) if len(args) == 1 else args
    d = _device_type(device_type)
    st = dict(_state.get())
    st[d] = (bool(enabled), st[d][1])
    _state.set(MappingProxyType(st))


def get_autocast_dtype(device_type: str) -> Any:
    return _state.get()[_device_type(device_type)][1]


def set_autocast_dtype(device_type: str, dtype: Any) -> None:
    d = _device_type(device_type)
    st = dict(_state.get())
    st[d] = (st[d][0], dtypes.to_dtype(dtype))
    _state.set(MappingProxyType(st))


def is_autocast_cache_enabled() -> bool:
    return _cache[0]


def set_autocast_cache_enabled(enabled: bool) -> None:
    _cache[0] = bool(enabled)


class autocast:  # torch's name
    """A context manager (and decorator) recording an autocast region for ``device_type``; it
    changes no op's dtype (See NOTE [Autocast changes nothing])."""

    def __init__(
        self,
        device_type: str,
        dtype: Any = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = _device_type(device_type)
        self.fast_dtype = (
            get_autocast_dtype(self.device) if dtype is None else dtypes.to_dtype(dtype)
        )
        self._enabled = bool(enabled)
        self._cache_enabled = cache_enabled
        self._saved: list[Any] = []

    def __enter__(self) -> autocast:
        st = dict(_state.get())
        st[self.device] = (self._enabled, self.fast_dtype)
        self._saved.append((_state.set(MappingProxyType(st)), _cache[0]))
        if self._cache_enabled is not None:
            _cache[0] = bool(self._cache_enabled)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, cache = self._saved.pop()
        _state.reset(token)
        _cache[0] = cache

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def custom_fwd(fwd: Any = None, *, device_type: str = "cuda", cast_inputs: Any = None) -> Any:
    """torch's decorator for a custom Function's forward: returns it unchanged (See NOTE
    [Autocast changes nothing])."""
    if fwd is None:
        return lambda f: f
    return fwd


def custom_bwd(bwd: Any = None, *, device_type: str = "cuda") -> Any:
    """torch's decorator for a custom Function's backward: returns it unchanged."""
    if bwd is None:
        return lambda f: f
    return bwd


class GradScaler:
    """torch's dynamic loss scaler (See NOTE [Autocast changes nothing])."""

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        self._device = device
        self._enabled = enabled
        if enabled and device == "cuda" and not cuda.is_available():
            warnings.warn(
                "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                UserWarning,
                stacklevel=2,
            )
            self._enabled = False
        if not growth_factor > 1.0:
            raise AssertionError("The growth factor must be > 1.0.")
        if not backoff_factor < 1.0:
            raise AssertionError("The backoff factor must be < 1.0.")
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        # per optimizer: "unscaled" once unscale_ ran this step, with whether it found an inf
        self._per_optimizer: dict[int, dict[str, Any]] = {}

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a tensor, or containers of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer: Any) -> None:
        """Divide ``optimizer``'s gradients by the scale (once per step), noting any inf/NaN."""
        if not self._enabled:
            return
        st = self._per_optimizer.setdefault(id(optimizer), {})
        if st.get("unscaled"):
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        inv = 1.0 / self._scale
        found = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = p.grad.mul_(inv)
                    if not bool(g.isfinite().all()):
                        found = True
        st.update(unscaled=True, found_inf=found)

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """``optimizer.step()`` unless the (unscaled) gradients hold an inf or NaN."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        st = self._per_optimizer.setdefault(id(optimizer), {})
        if st.get("stepped"):
            raise RuntimeError("step() has already been called since the last update().")
        if not st.get("unscaled"):
            self.unscale_(optimizer)
        st["stepped"] = True
        if st["found_inf"]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Back off the scale where a step found inf/NaN, else grow it every
        ``growth_interval`` clean steps; or set it to ``new_scale``."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        else:
            found = any(st.get("found_inf") for st in self._per_optimizer.values())
            if found:
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = self._scale * self._growth_factor
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_optimizer.clear()

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def state_dict(self) -> dict[str, Any]:
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled "
                "instance of GradScaler."
            )
        self._scale = float(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._growth_tracker = state_dict["_growth_tracker"]


# ----- torch's per-device spellings (torch.is_autocast_cpu_enabled, ...) -----
def _per_device(device_type: str) -> tuple[Any, Any, Any, Any]:
    def is_enabled() -> bool:
        return is_autocast_enabled(device_type)

    def set_enabled(enabled: bool) -> None:
        set_autocast_enabled(device_type, enabled)

    def get_dtype() -> Any:
        return get_autocast_dtype(device_type)

    def set_dtype(dtype: Any) -> None:
        set_autocast_dtype(device_type, dtype)

    return is_enabled, set_enabled, get_dtype, set_dtype


(
    is_autocast_cpu_enabled,
    set_autocast_cpu_enabled,
    get_autocast_cpu_dtype,
    set_autocast_cpu_dtype,
) = _per_device("cpu")
_, _, get_autocast_gpu_dtype, set_autocast_gpu_dtype = _per_device("cuda")
(
    is_autocast_ipu_enabled,
    set_autocast_ipu_enabled,
    get_autocast_ipu_dtype,
    set_autocast_ipu_dtype,
) = _per_device("ipu")
(
    is_autocast_xla_enabled,
    set_autocast_xla_enabled,
    get_autocast_xla_dtype,
    set_autocast_xla_dtype,
) = _per_device("xla")

__all__ += [
    "get_autocast_cpu_dtype",
    "get_autocast_gpu_dtype",
    "get_autocast_ipu_dtype",
    "get_autocast_xla_dtype",
    "is_autocast_cpu_enabled",
    "is_autocast_ipu_enabled",
    "is_autocast_xla_enabled",
    "set_autocast_cpu_dtype",
    "set_autocast_cpu_enabled",
    "set_autocast_gpu_dtype",
    "set_autocast_ipu_dtype",
    "set_autocast_ipu_enabled",
    "set_autocast_xla_dtype",
    "set_autocast_xla_enabled",
]
