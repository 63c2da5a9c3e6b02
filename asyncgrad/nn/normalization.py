"""Normalisation layers: torch's BatchNorm1d/2d/3d, SyncBatchNorm, InstanceNorm1d/2d/3d,
GroupNorm, RMSNorm and the lazy batch and instance norms.

Parameter and buffer names (``weight``, ``bias``, ``running_mean``, ``running_var``,
``num_batches_tracked``) and their order are torch's, so a torch state_dict loads as it is.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from ..graph.grad_mode import no_grad
from . import functional as F
from . import functional_layers as FL
from .modules import (
    LazyModuleMixin,
    Module,
    Parameter,
    UninitializedBuffer,
    UninitializedParameter,
    materialize,
)

__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
    "RMSNorm",
    "SyncBatchNorm",
]


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


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over (N, C, D, H, W), as ``torch.nn.BatchNorm3d`` (See
    BatchNorm1d)."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim != 5:
            raise ValueError(f"expected 5D input (got {input.ndim}D input)")
        _check_features(self, input)


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.SyncBatchNorm`` in one process: batch normalisation over (N, C, *) as
    BatchNorm1d/2d/3d (statistics are not reduced across processes; ``process_group`` is
    kept and unused)."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
        device: Any = None,
        dtype: Any = None,
        bias: bool = True,
    ) -> None:
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias
        )
        self.process_group = process_group

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {input.ndim}D input)")
        _check_features(self, input)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: Any = None) -> Module:
        """``module`` with every BatchNorm*D layer in it replaced by a SyncBatchNorm that holds
        the same parameters and buffers (``module`` itself when it is one), as torch's."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = SyncBatchNorm(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_group,
                bias=module.bias is not None,
            )
            if module.affine:
                with no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out


def _check_features(m: _NormBase, input: Tensor) -> None:
    if input.shape[1] != m.num_features:
        raise RuntimeError(
            f"{type(m).__name__}: expected input with {m.num_features} channels (dim 1), got "
            f"input of size {list(input.shape)}"
        )


class _InstanceNorm(_NormBase):
    """Instance normalisation: each sample's channel normalised over its spatial dims.
    ``affine`` and ``track_running_stats`` default to False, as in torch."""

    _spatial: int = 2

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
        k = self._spatial
        if input.ndim not in (k + 1, k + 2):
            raise ValueError(f"expected {k + 1}D or {k + 2}D input (got {input.ndim}D input)")
        batched = input.ndim == k + 2
        feature_dim = input.ndim - (k + 1)
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(
                    f"expected input's size at dim={feature_dim} to match num_features "
                    f"({self.num_features}), but got: {input.shape[feature_dim]}."
                )
            warnings.warn(
                f"input's size at dim={feature_dim} does not match num_features. You can "
                "silence this warning by not passing in num_features, which is not used "
                "because affine=False",
                UserWarning,
                stacklevel=2,
            )
        x = input if batched else ops.unsqueeze(input, 0)
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


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation over (N, C, L) or unbatched (C, L), as
    ``torch.nn.InstanceNorm1d``."""

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation over (N, C, H, W) or unbatched (C, H, W), as
    ``torch.nn.InstanceNorm2d``: each sample's channel normalised over H and W. ``affine`` and
    ``track_running_stats`` default to False, as in torch."""

    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation over (N, C, D, H, W) or unbatched (C, D, H, W), as
    ``torch.nn.InstanceNorm3d``."""

    _spatial = 3


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


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dims, as
    ``torch.nn.RMSNorm``: ``x / sqrt(mean(x**2) + eps) * weight`` (``eps=None``: the dtype's
    machine epsilon); ``weight`` starts at ones."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        dt = dtypes.to_dtype(dtype or dtypes.get_default_dtype())
        self.weight = (
            Parameter(backend.ones(self.normalized_shape, dt)) if elementwise_affine else None
        )
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            with no_grad():
                ops.fill_(self.weight, 1)

    def forward(self, x: Tensor) -> Tensor:
        return FL.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


# ============================================================================ lazy norms
class _LazyNorm(LazyModuleMixin, _NormBase):
    """A norm whose ``num_features`` is read from the first input's dim 1, as torch's
    ``_LazyNormBase``; then it becomes ``cls_to_become``."""

    def __init__(
        self,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
        bias: bool = True,
    ) -> None:
        _NormBase.__init__(self, 0, eps, momentum, affine, track_running_stats, None, dtype, bias)
        self._lazy_device = device
        dt = dtypes.to_dtype(dtype or dtypes.get_default_dtype())
        if affine:
            self.weight = UninitializedParameter(dtype=dt)
            if bias:
                self.bias = UninitializedParameter(dtype=dt)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(dtype=dt)
            self.running_var = UninitializedBuffer(dtype=dt)

    def initialize_parameters(self, input: Tensor, *args: Any, **kwargs: Any) -> None:
        if not self.has_uninitialized_params():
            known = self.weight if self.weight is not None else self.running_mean
            if known is not None:  # given by a loaded state_dict
                self.num_features = known.shape[0]
            return
        if input.ndim < 2:
            return
        self.num_features = c = input.shape[1]
        dev = self._lazy_device
        if self.weight is not None:
            materialize(self.weight, (c,), dev, fill=1.0)
        if self.bias is not None:
            materialize(self.bias, (c,), dev, fill=0.0)
        if self.track_running_stats:
            assert self.running_mean is not None
            assert self.running_var is not None
            self.running_mean = materialize(self.running_mean, (c,), dev, fill=0.0)
            self.running_var = materialize(self.running_var, (c,), dev, fill=1.0)
            if dev is not None and self.num_batches_tracked is not None:
                self.num_batches_tracked = self.num_batches_tracked.to(dev)


class LazyBatchNorm1d(_LazyNorm, BatchNorm1d):
    """A BatchNorm1d whose ``num_features`` is inferred from the first input, as
    ``torch.nn.LazyBatchNorm1d``."""

    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyNorm, BatchNorm2d):
    """A BatchNorm2d whose ``num_features`` is inferred from the first input."""

    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyNorm, BatchNorm3d):
    """A BatchNorm3d whose ``num_features`` is inferred from the first input."""

    cls_to_become = BatchNorm3d


class LazyInstanceNorm1d(_LazyNorm, InstanceNorm1d):
    """An InstanceNorm1d whose ``num_features`` is inferred from the first input's dim 1 (with
    torch's defaults for the lazy norms: ``affine=True``, ``track_running_stats=True``)."""

    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyNorm, InstanceNorm2d):
    """An InstanceNorm2d whose ``num_features`` is inferred from the first input's dim 1."""

    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyNorm, InstanceNorm3d):
    """An InstanceNorm3d whose ``num_features`` is inferred from the first input's dim 1."""

    cls_to_become = InstanceNorm3d
