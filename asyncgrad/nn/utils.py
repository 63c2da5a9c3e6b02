"""ag.nn.utils: gradient clipping; parameters to and from one flat vector."""

from __future__ import annotations

import math
from collections.abc import Iterable

from .. import ops
from .._tensor import Tensor
from ..graph.grad_mode import no_grad

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "get_total_norm",
    "parameters_to_vector",
    "vector_to_parameters",
]


def _grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


def get_total_norm(
    tensors: Tensor | Iterable[Tensor],
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """The ``norm_type`` norm of all ``tensors`` together (as if concatenated)."""
    ts = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if not ts:
        return ops.tensor(0.0)
    with no_grad():
        flat = [ops.reshape(t.detach().to(ts[0].device), (-1,)) for t in ts]
        # As torch: the norm of the tensors' norms (an empty tensor has no max or min).
        keep = [f for f in flat if f.numel() or not math.isinf(norm_type)]
        total = ops.norm(ops.stack([ops.norm(f, p=norm_type) for f in keep]), p=norm_type)
    if error_if_nonfinite and not bool(ops.isfinite(total).item()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
            "so it cannot be clipped. To disable this error and scale the gradients by the "
            "non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    return total


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Scale the gradients in place so that their total ``norm_type`` norm is at most
    ``max_norm``; returns the total norm before clipping (a tensor), as torch does."""
    grads = _grads(parameters)
    if not grads:
        return ops.tensor(0.0)
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    # As torch: the factor is clamped to 1 (no branch on the norm's value).
    coef = ops.clamp(ops.div(float(max_norm), ops.add(total, 1e-6)), max=1.0)
    with no_grad():
        for g in grads:
            ops.mul_(g, coef.to(g.device).to(g.dtype))
    return total


def clip_grad_value_(
    parameters: Tensor | Iterable[Tensor], clip_value: float, foreach: bool | None = None
) -> None:
    """Clamp every gradient in place to ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            ops.clamp_(g, -clip_value, clip_value)


def _same_device(params: list[Tensor]) -> None:
    for p in params[1:]:
        if p.device is not params[0].device:
            raise TypeError(
                "Found two parameters on different devices, this is currently not supported "
                f"({params[0].device} and {p.device})."
            )


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All of ``parameters`` flattened and concatenated into one 1-D tensor (recorded, so it is
    differentiable with respect to them), as torch's."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    _same_device(params)
    return ops.cat([ops.reshape(p, (-1,)) for p in params])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Give each of ``parameters``, in order, the next ``numel()`` values of the 1-D ``vec`` as
    its data (not recorded), as torch's: each then shares memory with ``vec``."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    _same_device(params)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.numel() < total:
        raise RuntimeError(
            f"vector_to_parameters: expected a 1-D vector of at least {total} elements (the "
            f"parameters' total), got one of shape {list(vec.shape)}"
        )
    start = 0
    with no_grad():
        for p in params:
            n = p.numel()
            p.data = ops.reshape(vec.detach()[start : start + n], tuple(p.shape))
            start += n
