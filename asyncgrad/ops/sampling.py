"""Random sampling beyond rand/randn: torch's ``bernoulli``, ``normal``, ``poisson``,
``binomial``, and the in-place fills ``normal_``, ``uniform_``, ``bernoulli_``, ``cauchy_``,
``exponential_``, ``geometric_``, ``log_normal_``, ``random_``.

NOTE [Random draws are constants]
A draw's result does not require grad, even from parameters that do: torch records a node whose
gradient is zero everywhere (NormalBackward, BernoulliBackward, PoissonBackward), not the
derivative of the sample path, so leaving the draw out of the graph gives the same gradients
wherever another path exists (the README lists the difference). An in-place fill is a ``copy_``
of the draw, so the values it overwrites get a zero gradient, as torch's, and a leaf that
requires grad refuses it, as torch's. Each sampler is one vectorised transform of uniform or
standard-normal draws of the tensor's own device (inverse CDFs), except ``poisson`` and
``binomial``, which NumPy draws on the host for a CUDA tensor (CuPy's simulated device has no
such samplers).
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from ..graph.grad_mode import no_grad
from ._record import wrap
from .creation import Generator, _size, default_generator, scalar_name

__all__ = ["bernoulli", "binomial", "normal", "poisson"]


def _rng(generator: Generator | None, like: Any) -> backend.RandomState:
    return (generator or default_generator).state(backend.device_of(like))


def _uniform(generator: Generator | None, like: Any, shape: tuple[int, ...]) -> Any:
    """Uniform draws in [0, 1), float64, on ``like``'s device."""
    return _rng(generator, like).random(shape, dtypes.float64)


def _normal(generator: Generator | None, like: Any, shape: tuple[int, ...]) -> Any:
    return _rng(generator, like).normal(shape, dtypes.float64)


def _check_float(name: str, t: Tensor) -> None:
    if t.dtype.kind != "f":
        raise RuntimeError(f"\"{name}\" not implemented for '{scalar_name(t.dtype)}'")


def _fill(t: Tensor, values: Any) -> Tensor:
    """``t.copy_(values)``: the draw written into ``t`` (See NOTE [Random draws are constants])."""
    return t.copy_(Tensor._wrap(values.astype(t.dtype, copy=False)))


def _arr(x: Any, like: Any) -> Any:
    if isinstance(x, Tensor):
        return x._array
    return backend.namespace(like).asarray(x, dtype=dtypes.float64)


# ----- functions -----
def bernoulli(input: Tensor, p: Any = None, *, generator: Generator | None = None) -> Tensor:
    """1 with probability ``input`` (or ``p``), else 0, in ``input``'s dtype."""
    a = input._array
    probs = a if p is None else _arr(p, a)
    if p is None and a.dtype.kind != "f":
        raise RuntimeError(f"bernoulli: expected a floating point tensor, got {a.dtype}")
    xp = backend.namespace(a)
    bad = xp.logical_or(probs < 0, probs > 1)
    if bool(bad.any()):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    u = _uniform(generator, a, tuple(a.shape))
    return wrap((u < probs).astype(a.dtype))


def normal(
    mean: Any,
    std: Any = 1.0,
    size: Any = None,
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """Normal draws: ``mean + std * N(0, 1)`` with tensor or number ``mean`` and ``std``
    broadcast together, or of ``size`` when both are numbers (torch's four overloads)."""
    if not isinstance(mean, Tensor) and not isinstance(std, Tensor):
        if size is None:
            raise TypeError("normal() missing 1 required positional argument: 'size'")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        from .creation import randn

        z = randn(
            *_size((size,) if isinstance(size, int) else tuple(size)),
            generator=generator,
            dtype=dtype,
            device=device,
        )
        out = wrap(z._array * std + mean if (std != 1 or mean != 0) else z._array)
        return out.requires_grad_(True) if requires_grad else out
    like = mean._array if isinstance(mean, Tensor) else std._array
    m, s = _arr(mean, like), _arr(std, like)
    if bool((s < 0).any()):
        raise RuntimeError("normal expects all elements of std >= 0.0")
    shape = tuple(backend.np_namespace.broadcast_shapes(m.shape, s.shape))
    dt = (mean if isinstance(mean, Tensor) else std).dtype
    z = _normal(generator, like, shape)
    return wrap((m + s * z).astype(dt, copy=False))


def _host_draw(input: Tensor, draw: Any) -> Tensor:
    """A NumPy draw from ``input``'s values on the host, back on ``input``'s device."""
    a = input._array
    host = backend.to_device(a, backend.CPU) if type(a) is not backend.ndarray else a
    out = draw(host)
    return wrap(backend.on_device(out.astype(a.dtype), backend.device_of(a)))


def poisson(input: Tensor, generator: Generator | None = None) -> Tensor:
    """Poisson draws with rates ``input``."""
    state = (generator or default_generator).state(backend.CPU)
    if bool((input._array < 0).any()):
        raise RuntimeError("Expected lambda >= 0 when calling poisson")
    return _host_draw(input, lambda lam: state._draw("poisson", lam))


def binomial(count: Tensor, prob: Tensor, generator: Generator | None = None) -> Tensor:
    """Binomial draws of ``count`` trials with success probability ``prob``."""
    state = (generator or default_generator).state(backend.CPU)
    p = prob._array
    if type(p) is not backend.ndarray:
        p = backend.to_device(p, backend.CPU)
    return _host_draw(count, lambda n: state._draw("binomial", n.astype("int64"), p))


# ----- in-place fills (Tensor methods) -----
def bernoulli_(self: Tensor, p: Any = 0.5, *, generator: Generator | None = None) -> Tensor:
    a = self._array
    probs = _arr(p, a)
    u = _uniform(generator, a, tuple(a.shape))
    return _fill(self, u < probs)


def normal_(
    self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    _check_float("normal_kernel_cpu", self)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    z = _normal(generator, self._array, tuple(self.shape))
    return _fill(self, z * std + mean)


def uniform_(
    self: Tensor,
    a: float = 0.0,
    b: float = 1.0,
    *,
    generator: Generator | None = None,
    **kwargs: Any,
) -> Tensor:
    a, b = kwargs.pop("from", a), kwargs.pop("to", b)
    if kwargs:
        raise TypeError(f"uniform_() got an unexpected keyword argument {next(iter(kwargs))!r}")
    _check_float("uniform_kernel_cpu", self)
    if a > b:
        raise RuntimeError(
            f"uniform_ expects to return a [from, to) range, but found from={a} > to={b}"
        )
    u = _uniform(generator, self._array, tuple(self.shape))
    return _fill(self, u * (b - a) + a)


def cauchy_(
    self: Tensor, median: float = 0.0, sigma: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    _check_float("cauchy_cpu", self)
    u = _uniform(generator, self._array, tuple(self.shape))
    xp = backend.namespace(u)
    return _fill(self, median + sigma * xp.tan(math.pi * (u - 0.5)))


def exponential_(self: Tensor, lambd: float = 1.0, *, generator: Generator | None = None) -> Tensor:
    _check_float("exponential_cpu", self)
    if lambd <= 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    u = _uniform(generator, self._array, tuple(self.shape))
    xp = backend.namespace(u)
    return _fill(self, -xp.log1p(-u) / lambd)


def geometric_(self: Tensor, p: float, *, generator: Generator | None = None) -> Tensor:
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    u = _uniform(generator, self._array, tuple(self.shape))
    xp = backend.namespace(u)
    return _fill(self, xp.ceil(xp.log1p(-u) / math.log1p(-p)))


def log_normal_(
    self: Tensor, mean: float = 1.0, std: float = 2.0, *, generator: Generator | None = None
) -> Tensor:
    _check_float("log_normal_cpu", self)
    if std <= 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    z = _normal(generator, self._array, tuple(self.shape))
    xp = backend.namespace(z)
    return _fill(self, xp.exp(z * std + mean))


def random_(
    self: Tensor,
    from_: Any = None,
    to: Any = None,
    *,
    generator: Generator | None = None,
    **kwargs: Any,
) -> Tensor:
    """Integers drawn uniformly from [from, to): ``random_(to)``, ``random_(from, to)``, or, with
    neither, [0, 2**mantissa] for a float dtype and the dtype's range for an integer one."""
    from_ = kwargs.pop("from", from_)
    if kwargs:
        raise TypeError(f"random_() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if from_ is not None and to is None:
        from_, to = 0, from_
    lo = 0 if from_ is None else int(from_)
    dt = self.dtype
    if to is None:
        if dt.kind == "f":
            hi = 2 ** {2: 11, 4: 24, 8: 53}[dt.itemsize] + 1
        elif dt.kind == "b":
            hi = 2
        else:
            hi = int(backend.np_namespace.iinfo(dt).max) + 1
    else:
        hi = int(to)
    if lo >= hi:
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={hi}"
        )
    with no_grad():
        draws = (
            (generator or default_generator)
            .state(backend.device_of(self._array))
            .integers(lo, hi, tuple(self.shape))
        )
    return _fill(self, draws)
