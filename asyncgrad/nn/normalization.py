"""Normalisation layers: torch's BatchNorm1d/2d, InstanceNorm2d and GroupNorm.

Parameter and buffer names (``weight``, ``bias``, ``running_mean``, ``running_var``,
``num_batches_tracked``) and their order are torch's, so a torch state_dict loads as it is.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from ..graph.grad_mode import no_grad
from . import functional as F
from .modules import Module, Parameter

__all__ = ["BatchNorm1d", "BatchNorm2d", "GroupNorm", "InstanceNorm2d"]


class _NormBase(Module):
    """Shared state of the batch and instance norms: affine parameters and running stats."""

    running_mean: Tensor | None
    running_var: Tensor | None
    num_batches_tracked: Tensor | None

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.use_bias = affine and bias
        self.track_running_stats = track_running_stats
        dt = dtypes.to_dtype(dtype or dtypes.get_default_dtype())
        self.weight = Parameter(backend.ones((num_features,), dt)) if affine else None
        self.bias = Parameter(backend.zeros((num_features,), dt)) if affine and bias else None
        if track_running_stats:
            self.register_buffer("running_mean", Tensor._wrap(backend.zeros((num_features,), dt)))
            self.register_buffer("running_var", Tensor._wrap(backend.ones((num_features,), dt)))
            self.register_buffer(
                "num_batches_tracked", Tensor._wrap(backend.zeros((), dtypes.int64))
            )
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        if device is not None:
            self.to(device)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            assert self.running_mean is not None
            assert self.running_var is not None
            assert self.num_batches_tracked is not None
            with no_grad():
                ops.zero_(self.running_mean)
                ops.fill_(self.running_var, 1)
                ops.zero_(self.num_batches_tracked)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        with no_grad():
            if self.weight is not None:
                ops.fill_(self.weight, 1)
            if self.bias is not None:
                ops.zero_(self.bias)

    def _check_input_dim(self, input: Tensor) -> None:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.use_bias}, "
            f"track_running_stats={self.track_running_stats}"
        )


class _BatchNorm(_NormBase):
    @property
    def _uses_batch_statistics(self) -> bool:
        """Whether forward normalizes with the batch's own statistics (in training mode, or
        without running statistics), so that one sample's output depends on the others'."""
        return self.training or (self.running_mean is None and self.running_var is None)

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                ops.add_(self.num_batches_tracked, 1)
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked.item())
        # As torch: batch statistics in training, and in eval too when no running stats exist.
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over (N, C) or (N, C, L), as ``torch.nn.BatchNorm1d``: batch
    statistics (biased variance) in training, which update the running statistics
    (``momentum``, or a cumulative average with ``momentum=None``); the running statistics in
    eval."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.ndim}D input)")
        _check_features(self, input)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over (N, C, H, W), as ``torch.nn.BatchNorm2d`` (See BatchNorm1d)."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim != 4:
            raise ValueError(f"expected 4D input (got {input.ndim}D input)")
        _check_features(self, input)


def _check_features(m: _NormBase, input: Tensor) -> None:
    if input.shape[1] != m.num_features:
        raise RuntimeError(
            f"{type(m).__name__}: expected input with {m.num_features} channels (dim 1), got "
            f"input of size {list(input.shape)}"
        )


class InstanceNorm2d(_NormBase):
    """Instance normalisation over (N, C, H, W) or unbatched (C, H, W), as
    ``torch.nn.InstanceNorm2d``: each sample's channel normalised over H and W. ``affine`` and
    ``track_running_stats`` default to False, as in torch."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device: Any = None,
        dtype: Any = None,
        bias: bool = True,
    ) -> None:
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias
        )

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in (3, 4):
            raise ValueError(f"expected 3D or 4D input (got {input.ndim}D input)")
        batched = input.ndim == 4
        x = input if batched else ops.unsqueeze(input, 0)
        if x.shape[1] != self.num_features:
            if self.affine:
                raise ValueError(
                    f"expected input's size at dim=1 to match num_features "
                    f"({self.num_features}), but got: {x.shape[1]}."
                )
            warnings.warn(
                "input's size at dim=1 does not match num_features. You can silence this "
                "warning by not passing in num_features, which is not used because "
                "affine=False",
                UserWarning,
                stacklevel=2,
            )
        out = F.instance_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            self.momentum if self.momentum is not None else 0.0,
            self.eps,
        )
        return out if batched else ops.squeeze(out, 0)


class GroupNorm(Module):
    """Group normalisation, as ``torch.nn.GroupNorm``: the channels split into
    ``num_groups`` groups, each normalised per sample; per-channel ``weight`` and ``bias``."""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: Any = None,
        dtype: Any = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self.use_bias = affine and bias
        dt = dtypes.to_dtype(dtype or dtypes.get_default_dtype())
        self.weight = Parameter(backend.ones((num_channels,), dt)) if affine else None
        self.bias = Parameter(backend.zeros((num_channels,), dt)) if affine and bias else None
        if device is not None:
            self.to(device)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"bias={self.use_bias}"
        )
