"""ag.nn.init: fill parameters in place, with torch's fan computations and gains.

Every function works under ``no_grad`` (so on parameters that require grad), returns its
argument, and takes ``generator=`` (an ``ag.Generator``; the default generator otherwise).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from ..graph.grad_mode import no_grad
from ..ops import Generator

__all__ = [
    "calculate_gain",
    "constant",
    "constant_",
    "dirac",
    "dirac_",
    "eye",
    "eye_",
    "kaiming_normal",
    "kaiming_normal_",
    "kaiming_uniform",
    "kaiming_uniform_",
    "normal",
    "normal_",
    "ones_",
    "orthogonal",
    "orthogonal_",
    "sparse",
    "sparse_",
    "trunc_normal_",
    "uniform",
    "uniform_",
    "xavier_normal",
    "xavier_normal_",
    "xavier_uniform",
    "xavier_uniform_",
    "zeros_",
]

_LINEAR = (
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
)


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for ``nonlinearity`` (torch's table: linear/conv/sigmoid 1, tanh
    5/3, relu sqrt(2), leaky_relu sqrt(2 / (1 + slope**2)), selu 3/4)."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, numbers.Number) and not isinstance(param, bool):
            slope = float(param)
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _fans(tensor: Tensor) -> tuple[int, int]:
    if tensor.ndim < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _fans(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _fill_random(tensor: Tensor, draw: Any, generator: Generator | None) -> Tensor:
    rng = (generator or ops.default_generator).state(tensor.device)
    values = draw(rng, tuple(tensor.shape))
    with no_grad():
        ops.copy_(tensor, ops.wrap(values.astype(tensor.dtype, copy=False)))
    return tensor


def uniform_(
    tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Fill with values drawn uniformly from ``[a, b)``."""
    return _fill_random(tensor, lambda rng, s: rng.uniform(a, b, s, dtypes.float64), generator)


def normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Fill with values drawn from N(mean, std**2)."""

    def draw(rng: Any, s: tuple[int, ...]) -> Any:
        return rng.normal(s, dtypes.float64) * std + mean

    return _fill_random(tensor, draw, generator)


def constant_(tensor: Tensor, val: float) -> Tensor:
    with no_grad():
        ops.fill_(tensor, val)
    return tensor


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def xavier_uniform_(
    tensor: Tensor, gain: float = 1.0, generator: Generator | None = None
) -> Tensor:
    """Glorot uniform: bound ``gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans(tensor)
    bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Glorot normal: std ``gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def kaiming_uniform_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Tensor:
    """He uniform: bound ``gain * sqrt(3 / fan)``, ``gain = calculate_gain(nonlinearity, a)``."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", UserWarning, stacklevel=2)
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Generator | None = None,
) -> Tensor:
    """He normal: std ``gain / sqrt(fan)``."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", UserWarning, stacklevel=2)
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator)


def _set(tensor: Tensor, values: Any) -> Tensor:
    if tensor.numel() == 0:  # nothing to write (and copy_ refuses some empty layouts)
        return tensor
    with no_grad():
        ops.copy_(tensor, ops.wrap(values.astype(tensor.dtype, copy=False)))
    return tensor


def trunc_normal_(
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator: Generator | None = None,
) -> Tensor:
    """Fill with values from N(mean, std**2) truncated to ``[a, b]``, by rejection as torch's:
    normal draws redrawn where they fall outside when the interval holds more than 30% of the
    mass, else uniform draws in ``[a, b]`` accepted with the normal density's ratio to its
    peak. torch warns when ``mean`` is more than 2 std outside ``[a, b]``, and so does this."""
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn(
            "mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of "
            "values may be incorrect.",
            UserWarning,
            stacklevel=2,
        )
    rng = (generator or ops.default_generator).state(tensor.device)
    shape = tuple(tensor.shape)

    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = float(a), float(b)
    if cdf((b - mean) / std) - cdf((a - mean) / std) > 0.3:

        def draw(n: tuple[int, ...]) -> Any:
            return rng.normal(n, dtypes.float64) * std + mean

        def accept(v: Any) -> Any:
            return (v >= lo) & (v <= hi)
    else:
        mode = max(a, min(mean, b))
        log_peak = -0.5 * ((mode - mean) / std) ** 2

        def draw(n: tuple[int, ...]) -> Any:
            return rng.uniform(lo, hi, n, dtypes.float64)

        def accept(v: Any) -> Any:
            xp = backend.namespace(v)
            log_p = -0.5 * ((v - mean) / std) ** 2 - log_peak
            return xp.log(rng.random(v.shape, dtypes.float64)) < log_p

    values = draw(shape)
    xp = backend.namespace(values)
    bad = ~accept(values)
    while bool(bad.any()):  # each round redraws only the rejected values
        n = int(bad.sum())
        fresh = draw((n,))
        values[bad] = xp.where(accept(fresh), fresh, xp.nan)
        bad = xp.isnan(values)
    return _set(tensor, values)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity (ones on the diagonal)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _set(tensor, backend.namespace(tensor._array).eye(*tensor.shape))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-D convolution weight with the Dirac delta: each of the first
    ``min(out_channels // groups, in_channels)`` channels of each group passes its input
    channel through unchanged (a one at the kernel's centre)."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tuple(tensor.shape)
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    per_group = sizes[0] // groups
    min_dim = min(per_group, sizes[1])
    xp = backend.namespace(tensor._array)
    values = xp.zeros(sizes)
    d = xp.arange(min_dim)
    out = (xp.arange(groups)[:, None] * per_group + d[None, :]).reshape(-1)
    centre = tuple(s // 2 for s in sizes[2:])
    values[(out, xp.tile(d, groups), *centre)] = 1
    return _set(tensor, values)


def orthogonal_(tensor: Tensor, gain: float = 1, generator: Generator | None = None) -> Tensor:
    """Fill with a (semi-)orthogonal matrix, as torch's: the Q of a QR decomposition of a
    normal matrix, its columns' signs fixed by R's diagonal, times ``gain``; dims after the
    first are flattened."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    rng = (generator or ops.default_generator).state(tensor.device)
    flat = rng.normal((rows, cols), dtypes.float64)
    if rows < cols:
        flat = flat.T
    xp = backend.namespace(flat)
    q, r = xp.linalg.qr(flat)
    q = q * xp.sign(xp.diagonal(r))
    if rows < cols:
        q = q.T
    return _set(tensor, q.reshape(tuple(tensor.shape)) * gain)


def sparse_(
    tensor: Tensor, sparsity: float, std: float = 0.01, generator: Generator | None = None
) -> Tensor:
    """Fill a 2-D tensor from N(0, std**2), then zero ``ceil(sparsity * rows)`` random entries
    of each column."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    num_zeros = math.ceil(sparsity * rows)
    rng = (generator or ops.default_generator).state(tensor.device)
    values = rng.normal((rows, cols), dtypes.float64) * std
    xp = backend.namespace(values)
    # Each column's random permutation of the rows: argsort of independent uniform keys.
    perm = xp.argsort(rng.random((rows, cols), dtypes.float64), axis=0)
    zero_rows = perm[:num_zeros]
    values[zero_rows, xp.broadcast_to(xp.arange(cols), zero_rows.shape)] = 0
    return _set(tensor, values)


# ----- torch's deprecated spellings without the trailing underscore -----
def _deprecated(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    new, old = fn.__name__, fn.__name__[:-1]

    def deprecated_init(*args: Any, **kwargs: Any) -> Tensor:
        warnings.warn(
            f"`nn.init.{old}` is now deprecated in favor of `nn.init.{new}`.",
            FutureWarning,
            stacklevel=2,
        )
        return fn(*args, **kwargs)

    deprecated_init.__name__ = deprecated_init.__qualname__ = old
    deprecated_init.__doc__ = f"Deprecated (as in torch): use ``{new}``."
    return deprecated_init


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)
