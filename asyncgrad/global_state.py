"""torch's process-wide switches and facts: the default generator's state and seed,
deterministic-algorithm and matmul-precision settings, interop threads, denormals, print
options, anomaly mode, the ``has_*`` build facts, ``get_device_module`` and torch's exception
classes.

NOTE [Settings that change nothing here]
asyncgrad runs one NumPy (or CuPy) kernel per op: on the CPU every op already gives the same
bits on every run, there are no interop threads and no TF32. ``use_deterministic_algorithms``,
``set_float32_matmul_precision`` and ``set_num_interop_threads`` keep the value given, so that
their getters answer as torch's, and change no result; ``set_flush_denormal`` returns False
(torch's answer where flushing denormals is not supported): NumPy keeps denormals.
"""

from __future__ import annotations

import builtins
from typing import Any, Final

from . import _tensor, cpu, cuda, dtypes, ops
from ._tensor import Tensor
from .backend import Device
from .graph.anomaly_mode import (
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_detect_anomaly,
)

__all__ = [
    "AcceleratorError",
    "Event",
    "FatalError",
    "OutOfMemoryError",
    "Stream",
    "are_deterministic_algorithms_enabled",
    "default_generator",
    "get_deterministic_debug_mode",
    "get_device_module",
    "get_float32_matmul_precision",
    "get_num_interop_threads",
    "get_rng_state",
    "has_lapack",
    "has_mkl",
    "has_openmp",
    "has_spectral",
    "init_num_threads",
    "initial_seed",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
    "seed",
    "set_anomaly_enabled",
    "set_deterministic_debug_mode",
    "set_float32_matmul_precision",
    "set_flush_denormal",
    "set_num_interop_threads",
    "set_printoptions",
    "set_rng_state",
    "use_deterministic_algorithms",
]


class OutOfMemoryError(RuntimeError):
    """torch's error for a failed device allocation."""


class AcceleratorError(RuntimeError):
    """torch's error for a failure reported by an accelerator's runtime."""


class FatalError(Exception):
    """torch's error for an unrecoverable internal failure."""


# asyncgrad's build facts: LAPACK and FFTs come with NumPy; MKL and OpenMP are not used.
has_lapack: Final = True
has_spectral: Final = True
has_mkl: Final = False
has_openmp: Final = False


# ----- the default generator -----
def get_rng_state() -> Tensor:
    """The default generator's CPU state, as a uint8 tensor for ``set_rng_state`` (its bytes
    are asyncgrad's, not torch's)."""
    import json  # imported on use (See NOTE [Lazy extras] in asyncgrad/__init__.py)

    state = ops.default_generator.state(None).get_state()
    raw = json.dumps(state, sort_keys=True).encode("ascii")
    return ops.tensor(list(raw), dtype=dtypes.uint8)


def set_rng_state(new_state: Tensor) -> None:
    """Put the default generator back where ``get_rng_state`` found it."""
    if not isinstance(new_state, Tensor) or new_state.dtype != dtypes.uint8:
        raise TypeError(
            "expected a torch.ByteTensor, but got "
            f"{new_state.type() if isinstance(new_state, Tensor) else type(new_state).__name__}"
        )
    import json

    try:
        state = json.loads(bytes(new_state.tolist()).decode("ascii"))
        ops.default_generator.state(None).set_state(state)
    except (ValueError, TypeError, KeyError) as e:
        raise RuntimeError(f"set_rng_state: not a state from get_rng_state ({e})") from None


def seed() -> builtins.int:
    """Seed the default generator with a random number, and return it."""
    import secrets

    s = secrets.randbits(63)
    ops.manual_seed(s)
    return s


def initial_seed() -> builtins.int:
    """The seed of the default generator: the last ``manual_seed``/``seed``, or, when it was
    never seeded, a random one it is seeded with now (asyncgrad's unseeded generator draws from
    OS entropy, with no seed to report)."""
    s = ops.default_generator._seed
    return seed() if s is None else builtins.int(s)


# ----- deterministic algorithms, matmul precision, threads, denormals -----
_deterministic = {"mode": 0}  # 0 default, 1 warn, 2 error (torch's debug modes)
_DEBUG_MODES: Final = {"default": 0, "warn": 1, "error": 2}


def use_deterministic_algorithms(mode: builtins.bool, *, warn_only: builtins.bool = False) -> None:
    """Recorded for torch's getters (See NOTE [Settings that change nothing here])."""
    if not isinstance(mode, builtins.bool):
        raise TypeError(
            f"use_deterministic_algorithms(): argument 'mode' must be bool, not "
            f"{type(mode).__name__}"
        )
    _deterministic["mode"] = (1 if warn_only else 2) if mode else 0


def are_deterministic_algorithms_enabled() -> builtins.bool:
    return _deterministic["mode"] != 0


def is_deterministic_algorithms_warn_only_enabled() -> builtins.bool:
    return _deterministic["mode"] == 1


def set_deterministic_debug_mode(debug_mode: builtins.int | str) -> None:
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError(
                "invalid value of debug_mode, expected one of `default`, `warn`, `error`, but "
                f"got {debug_mode}"
            )
        debug_mode = _DEBUG_MODES[debug_mode]
    elif isinstance(debug_mode, builtins.int) and not isinstance(debug_mode, builtins.bool):
        if debug_mode not in (0, 1, 2):
            raise RuntimeError(
                f"invalid value of debug_mode, expected 0, 1, or 2, but got {debug_mode}"
            )
    else:
        raise TypeError(f"debug_mode must be str or int, but got {type(debug_mode).__name__}")
    _deterministic["mode"] = debug_mode


def get_deterministic_debug_mode() -> builtins.int:
    return _deterministic["mode"]


_matmul_precision = ["highest"]


def get_float32_matmul_precision() -> str:
    return _matmul_precision[0]


def set_float32_matmul_precision(precision: str) -> None:
    """Recorded (See NOTE [Settings that change nothing here]); torch warns and keeps the old
    value for a name other than "highest", "high" or "medium", and so does this."""
    if precision not in ("highest", "high", "medium"):
        import warnings

        warnings.warn(
            f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
            "setFloat32MatmulPrecision call has no effect.",
            UserWarning,
            stacklevel=2,
        )
        return
    _matmul_precision[0] = precision


_interop = [1]


def get_num_interop_threads() -> builtins.int:
    return _interop[0]


def set_num_interop_threads(num: builtins.int) -> None:
    if isinstance(num, builtins.bool) or not isinstance(num, builtins.int) or num < 1:
        raise RuntimeError("set_num_interop_threads expects a positive integer")
    _interop[0] = num


def init_num_threads() -> None:
    """Nothing to initialise: asyncgrad's threads start on first use."""


def set_flush_denormal(mode: builtins.bool) -> builtins.bool:
    """False: flushing denormals is not supported (See NOTE [Settings that change nothing
    here])."""
    return False


# ----- print options -----
_PROFILES: Final = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": 2**63 - 1, "edgeitems": 3, "linewidth": 80},
}
_PRINT_GLOBALS: Final = {
    "precision": "_PRECISION",
    "threshold": "_THRESHOLD",
    "edgeitems": "_EDGEITEMS",
    "linewidth": "_LINEWIDTH",
}


def set_printoptions(
    precision: builtins.int | None = None,
    threshold: builtins.float | None = None,
    edgeitems: builtins.int | None = None,
    linewidth: builtins.int | None = None,
    profile: str | None = None,
    sci_mode: builtins.bool | None = None,
) -> None:
    """How tensors print, as torch's: ``precision`` digits, summarised beyond ``threshold``
    elements with ``edgeitems`` at each end, lines of ``linewidth``; ``profile`` ("default",
    "short", "full") sets all four first. ``sci_mode`` is accepted; asyncgrad picks fixed or
    scientific notation by the values, as torch's default does."""
    values: dict[str, Any] = {}
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"Invalid profile: {profile}")
        values.update(_PROFILES[profile])
    given = {
        "precision": precision,
        "threshold": threshold,
        "edgeitems": edgeitems,
        "linewidth": linewidth,
    }
    values.update({k: v for k, v in given.items() if v is not None})
    for k, v in values.items():
        setattr(_tensor, _PRINT_GLOBALS[k], builtins.int(min(v, 2**63 - 1)))


# ----- anomaly mode, device modules -----
def set_anomaly_enabled(enabled: builtins.bool, check_nan: builtins.bool = True) -> None:
    """Turn anomaly detection on or off (``ag.autograd.set_detect_anomaly``)."""
    set_detect_anomaly(enabled, check_nan)


def get_device_module(device: Any = None) -> Any:
    """The device module of ``device`` ("cpu", "cuda", a device): ``ag.cpu`` or ``ag.cuda``;
    with none, the current accelerator's (``ag.cuda`` where CUDA is available, else
    ``ag.cpu``)."""
    if device is None:
        return cuda if cuda.is_available() else cpu
    name = str(getattr(device, "type", device)).split(":")[0]
    if name == "cuda":
        return cuda
    if name == "cpu":
        return cpu
    raise RuntimeError(
        f"Device '{device}' does not have a corresponding module registered as 'torch.{name}'."
    )


# ----- device-generic streams and events -----
# NOTE [Generic streams]
# ``torch.Stream`` and ``torch.Event`` take a device (the current accelerator's by default, else
# the CPU). A CUDA device gives ``ag.cuda.Stream`` / ``ag.cuda.Event`` objects; the CPU gives
# torch's CPU stream: its work is done when each call returns, so ``query()`` is True and
# ``synchronize()`` returns at once, and, as in torch, a CPU stream records no events.
_NO_CPU_EVENTS: Final = "cpu backend doesn't support events."

default_generator: Final = ops.default_generator


def _stream_device(device: Any) -> Device:
    if device is None:
        return Device("cuda") if cuda.is_available() else Device("cpu")
    return Device(device)


class Stream:
    """A stream of work on ``device`` (See NOTE [Generic streams])."""

    device: Device
    priority: builtins.int

    def __new__(cls, device: Any = None, priority: builtins.int = 0) -> Any:
        dev = _stream_device(device)
        if dev.type == "cuda":
            return cuda.Stream(dev, priority)
        self = super().__new__(cls)
        self.device = dev
        self.priority = priority
        return self

    stream_id: Final = 0
    device_index: Final = -1
    device_type: Final = "cpu"

    def query(self) -> builtins.bool:
        return True

    def synchronize(self) -> None:
        """Returns at once: CPU work is done when its call returns."""

    def wait_event(self, event: Any) -> None:
        """Nothing to wait for on the CPU."""

    def wait_stream(self, stream: Any) -> None:
        raise RuntimeError(_NO_CPU_EVENTS)

    def record_event(self, event: Any = None) -> Any:
        raise RuntimeError(_NO_CPU_EVENTS)

    def __eq__(self, other: object) -> builtins.bool:
        return type(other) is Stream

    def __hash__(self) -> builtins.int:
        return hash(Stream)

    def __repr__(self) -> str:
        return "torch.Stream device_type=cpu, device_index=-1, stream_id=0"


class Event:
    """A point in a stream's work (See NOTE [Generic streams]): a CUDA event on a CUDA device;
    on the CPU, where nothing is queued, it has always been reached."""

    device: Device

    def __new__(
        cls,
        device: Any = None,
        *,
        enable_timing: builtins.bool = False,
        blocking: builtins.bool = False,
        interprocess: builtins.bool = False,
    ) -> Any:
        dev = _stream_device(device)
        if dev.type == "cuda":
            return cuda.Event(enable_timing, blocking, interprocess)
        self = super().__new__(cls)
        self.device = dev
        return self

    def record(self, stream: Any = None) -> None:
        raise RuntimeError(_NO_CPU_EVENTS)

    def query(self) -> builtins.bool:
        return True

    def synchronize(self) -> None:
        """Returns at once."""

    def wait(self, stream: Any = None) -> None:
        """Returns at once."""

    def elapsed_time(self, end_event: Any) -> builtins.float:
        raise RuntimeError(_NO_CPU_EVENTS)

    def __repr__(self) -> str:
        return "torch.Event device_type=cpu, device_index=-1, event_flag=0, event_id=0"
