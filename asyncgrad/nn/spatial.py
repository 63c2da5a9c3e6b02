"""Convolution, pooling, padding, upsampling and patch modules."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import backend, dtypes
from .._tensor import Tensor
from . import functional as F
from .modules import Module, Parameter, Upsample, _uniform

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool1d",
    "AvgPool3d",
    "ChannelShuffle",
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "CrossMapLRN2d",
    "Fold",
    "FractionalMaxPool2d",
    "FractionalMaxPool3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LocalResponseNorm",
    "MaxPool1d",
    "MaxPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
    "PixelShuffle",
    "PixelUnshuffle",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "Unfold",
    "UpsamplingBilinear2d",
    "UpsamplingNearest2d",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(v: Any, n: int) -> tuple[Any, ...]:
    return (v,) * n if isinstance(v, int) else tuple(v)


# ----- convolutions -----
class _ConvBase(Module):
    """Shared by the convolutions and their transposes: weights initialised as torch does
    (kaiming_uniform with a = sqrt(5), uniform in +-1/sqrt(fan_in), the bias likewise), where
    fan_in is the weight's dim 1 times the kernel's size."""

    _n: int = 3
    _transposed: bool = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
        output_padding: Any = 0,
    ) -> None:
        super().__init__()
        n = self._n
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"padding_mode must be one of {_PADDING_MODES}, but got padding_mode="
                f"'{padding_mode}'"
            )
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(
                    f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}"
                )
            if padding == "same" and any(s != 1 for s in _ntuple(stride, n)):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride = _ntuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n)
        self.dilation = _ntuple(dilation, n)
        self.output_padding = _ntuple(output_padding, n)
        self.groups = groups
        self.padding_mode = padding_mode
        self._dtype = dtype
        self._device = device
        self._has_bias = bias
        if in_channels:
            self._make_parameters()
        else:  # a lazy module: See _LazyMixin
            self.weight: Any = None
            self.bias: Any = None

    def _make_parameters(self) -> None:
        k = self.kernel_size
        if self._transposed:
            shape = (self.in_channels, self.out_channels // self.groups, *k)
        else:
            shape = (self.out_channels, self.in_channels // self.groups, *k)
        fan_in = shape[1] * math.prod(k)
        bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = Parameter(_uniform(bound, shape, self._dtype))
        self.bias = (
            Parameter(_uniform(bound, (self.out_channels,), self._dtype))
            if self._has_bias
            else None
        )
        if self._device is not None:
            self.to(self._device)

    def _padding_amounts(self) -> tuple[int, ...]:
        """F.pad's amounts (last dim first) for a padding_mode other than zeros."""
        out: list[int] = []
        for a in range(self._n - 1, -1, -1):
            if self.padding == "same":
                total = self.dilation[a] * (self.kernel_size[a] - 1)
                out += [total // 2, total - total // 2]
            elif self.padding == "valid":
                out += [0, 0]
            else:
                p = int(self.padding[a])
                out += [p, p]
        return tuple(out)

    def extra_repr(self) -> str:
        n = self._n
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None and self.weight is not None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvBase):
    def forward(self, input: Tensor) -> Tensor:
        conv = (F.conv1d, F.conv2d, F.conv3d)[self._n - 1]
        if self.padding_mode != "zeros":
            x = F.pad(input, self._padding_amounts(), mode=self.padding_mode)
            return conv(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return conv(
            input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )


class Conv3d(_Conv):
    """3-D convolution over (N, C, D, H, W), as ``torch.nn.Conv3d`` (with ``padding_mode``
    zeros, reflect, replicate or circular).

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.Conv3d(1, 4, 3, padding=1)(ag.zeros(2, 1, 4, 5, 5)).shape
        asyncgrad.Size([2, 4, 4, 5, 5])
    """

    _n = 3

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
        )


class _ConvTranspose(_ConvBase):
    _transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: Any = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        if isinstance(padding, str):
            raise ValueError(f'{type(self).__name__} does not support padding="{padding}"')
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
            output_padding,
        )

    def _output_padding(self, input: Tensor, output_size: Any) -> tuple[int, ...]:
        """torch's: the output_padding that reaches ``output_size`` (with or without N, C)."""
        n = self._n
        if output_size is None:
            return self.output_padding
        sizes = [int(s) for s in output_size]
        if len(sizes) > n:
            sizes = sizes[-n:]
        if len(sizes) != n:
            raise ValueError(
                f"ConvTranspose{n}D: for {input.ndim}D input, output_size must have {n} or "
                f"{n + 2} elements (got {len(output_size)})"
            )
        out = []
        for a in range(n):
            lo = (
                (input.shape[input.ndim - n + a] - 1) * self.stride[a]
                - 2 * self.padding[a]
                + self.dilation[a] * (self.kernel_size[a] - 1)
                + 1
            )
            hi = lo + self.stride[a] - 1
            if not lo <= sizes[a] <= hi:
                raise ValueError(
                    f"requested an output size of {sizes}, but valid sizes range from {lo} to "
                    f"{hi} (for an input of {list(input.shape[input.ndim - n :])})"
                )
            out.append(sizes[a] - lo)
        return tuple(out)

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:
        conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[self._n - 1]
        out_pad = self._output_padding(input, output_size)
        return conv(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            out_pad,
            self.groups,
            self.dilation,
        )


class ConvTranspose1d(_ConvTranspose):
    """1-D transposed convolution, as ``torch.nn.ConvTranspose1d``: weight
    (in_channels, out_channels / groups, k)."""

    _n = 1


class ConvTranspose2d(_ConvTranspose):
    """2-D transposed convolution, as ``torch.nn.ConvTranspose2d``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.ConvTranspose2d(4, 2, 3, stride=2)(ag.zeros(1, 4, 5, 5)).shape
        asyncgrad.Size([1, 2, 11, 11])
    """

    _n = 2


class ConvTranspose3d(_ConvTranspose):
    """3-D transposed convolution, as ``torch.nn.ConvTranspose3d``."""

    _n = 3


class _LazyMixin:
    """in_channels inferred at the first call (dim 1 of a batched input, dim 0 of an unbatched
    one), as torch's lazy modules: the parameters exist only after it (an optimiser made
    before the first call does not see them)."""

    _n: int
    in_channels: int
    groups: int
    weight: Any
    _make_parameters: Callable[[], None]

    def _materialize(self, input: Tensor) -> None:
        if self.weight is not None:
            return
        self.in_channels = input.shape[0] if input.ndim == self._n + 1 else input.shape[1]
        if self.in_channels % self.groups:
            raise ValueError("in_channels must be divisible by groups")
        self._make_parameters()
        self._materialize_on_device()

    def has_uninitialized_params(self) -> bool:
        return self.weight is None

    def to(self, *args: Any, **kwargs: Any) -> Any:
        # Before the first call there are no parameters to move: remember the dtype and the
        # device, which the parameters get when they are made.
        if self.weight is None:
            for a in (*args, *kwargs.values()):
                if isinstance(a, dtypes.dtype):
                    self._dtype = a
                elif isinstance(a, (str, backend.Device)):
                    self._lazy_device = a
        return super().to(*args, **kwargs)  # type: ignore[misc]

    def _materialize_on_device(self) -> None:
        dev = getattr(self, "_lazy_device", None)
        if dev is not None:
            self.to(dev)


def _lazy(
    base: type[_ConvBase], n: int, name: str, becomes: type[_ConvBase] | None
) -> type[_ConvBase]:
    """A lazy convolution class; once its parameters exist it ``becomes`` the eager class, as
    torch's ``cls_to_become``."""

    def __init__(self: Any, out_channels: int, kernel_size: Any, *args: Any, **kw: Any) -> None:
        base.__init__(self, 0, out_channels, kernel_size, *args, **kw)

    def forward(self: Any, input: Tensor, *args: Any) -> Tensor:
        self._materialize(input)
        out: Tensor = base.forward(self, input, *args)
        if becomes is not None:
            self.__class__ = becomes
        return out

    doc = f"``torch.nn.{name}``: the {name[4:]} whose in_channels is the first input's."
    cls = type(
        name,
        (_LazyMixin, base),
        {"_n": n, "__init__": __init__, "forward": forward, "__doc__": doc},
    )
    cls.__module__ = __name__
    return cls


# Conv1d and Conv2d (asyncgrad/nn/modules.py) take no padding_mode but zeros: their lazy forms
# stay lazy classes, with padding_mode.
LazyConv1d = _lazy(_Conv, 1, "LazyConv1d", None)
LazyConv2d = _lazy(_Conv, 2, "LazyConv2d", None)
LazyConv3d = _lazy(_Conv, 3, "LazyConv3d", Conv3d)
LazyConvTranspose1d = _lazy(_ConvTranspose, 1, "LazyConvTranspose1d", ConvTranspose1d)
LazyConvTranspose2d = _lazy(_ConvTranspose, 2, "LazyConvTranspose2d", ConvTranspose2d)
LazyConvTranspose3d = _lazy(_ConvTranspose, 3, "LazyConvTranspose3d", ConvTranspose3d)


# ----- pooling -----
class _MaxPool(Module):
    _fn: Any = None

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        dilation: Any = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input: Tensor) -> Any:
        return type(self)._fn(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            ceil_mode=self.ceil_mode,
            return_indices=self.return_indices,
        )

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class MaxPool1d(_MaxPool):
    """``F.max_pool1d`` as a module, as ``torch.nn.MaxPool1d``."""

    _fn = staticmethod(F.max_pool1d)


class MaxPool3d(_MaxPool):
    """``F.max_pool3d`` as a module, as ``torch.nn.MaxPool3d``."""

    _fn = staticmethod(F.max_pool3d)


class AvgPool1d(Module):
    """``F.avg_pool1d`` as a module, as ``torch.nn.AvgPool1d``."""

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        self.kernel_size = _ntuple(kernel_size, 1)
        self.stride = _ntuple(kernel_size if stride is None else stride, 1)
        self.padding = _ntuple(padding, 1)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool3d(Module):
    """``F.avg_pool3d`` as a module, as ``torch.nn.AvgPool3d``."""

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool3d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AdaptiveAvgPool(Module):
    _fn: Any = None

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        out: Tensor = type(self)._fn(input, self.output_size)
        return out

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    """``F.adaptive_avg_pool1d`` as a module, as ``torch.nn.AdaptiveAvgPool1d``."""

    _fn = staticmethod(F.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    """``F.adaptive_avg_pool2d`` as a module, as ``torch.nn.AdaptiveAvgPool2d``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.AdaptiveAvgPool2d((1, 1))(ag.ones(2, 3, 5, 7)).shape
        asyncgrad.Size([2, 3, 1, 1])
    """

    _fn = staticmethod(F.adaptive_avg_pool2d)


class AdaptiveAvgPool3d(_AdaptiveAvgPool):
    """``F.adaptive_avg_pool3d`` as a module, as ``torch.nn.AdaptiveAvgPool3d``."""

    _fn = staticmethod(F.adaptive_avg_pool3d)


class _AdaptiveMaxPool(Module):
    _fn: Any = None

    def __init__(self, output_size: Any, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, input: Tensor) -> Any:
        return type(self)._fn(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """``F.adaptive_max_pool1d`` as a module, as ``torch.nn.AdaptiveMaxPool1d``."""

    _fn = staticmethod(F.adaptive_max_pool1d)


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """``F.adaptive_max_pool2d`` as a module, as ``torch.nn.AdaptiveMaxPool2d``."""

    _fn = staticmethod(F.adaptive_max_pool2d)


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """``F.adaptive_max_pool3d`` as a module, as ``torch.nn.AdaptiveMaxPool3d``."""

    _fn = staticmethod(F.adaptive_max_pool3d)


class _LPPool(Module):
    _fn: Any = None

    def __init__(
        self, norm_type: float, kernel_size: Any, stride: Any = None, ceil_mode: bool = False
    ) -> None:
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def forward(self, input: Tensor) -> Tensor:
        out: Tensor = type(self)._fn(
            input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode
        )
        return out

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"ceil_mode={self.ceil_mode}"
        )


class LPPool1d(_LPPool):
    """``F.lp_pool1d`` as a module, as ``torch.nn.LPPool1d``."""

    _fn = staticmethod(F.lp_pool1d)


class LPPool2d(_LPPool):
    """``F.lp_pool2d`` as a module, as ``torch.nn.LPPool2d``."""

    _fn = staticmethod(F.lp_pool2d)


class LPPool3d(_LPPool):
    """``F.lp_pool3d`` as a module, as ``torch.nn.LPPool3d``."""

    _fn = staticmethod(F.lp_pool3d)


class _FractionalMaxPool(Module):
    _fn: Any = None
    _n: int = 2

    def __init__(
        self,
        kernel_size: Any,
        output_size: Any = None,
        output_ratio: Any = None,
        return_indices: bool = False,
        _random_samples: Tensor | None = None,
    ) -> None:
        super().__init__()
        n = self._n
        self.kernel_size = _ntuple(kernel_size, n)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = None if output_size is None else _ntuple(output_size, n)
        self.output_ratio = (
            None
            if output_ratio is None
            else (
                (output_ratio,) * n
                if isinstance(output_ratio, (int, float))
                else tuple(output_ratio)
            )
        )
        if output_size is None and output_ratio is None:
            raise ValueError(
                f"FractionalMaxPool{n}d requires specifying either an output size, or a pooling "
                "ratio"
            )
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input: Tensor) -> Any:
        return type(self)._fn(
            input,
            self.kernel_size,
            self.output_size,
            self.output_ratio,
            self.return_indices,
            _random_samples=getattr(self, "_random_samples", None),
        )


class FractionalMaxPool2d(_FractionalMaxPool):
    """``F.fractional_max_pool2d`` as a module, as ``torch.nn.FractionalMaxPool2d``."""

    _fn = staticmethod(F.fractional_max_pool2d)
    _n = 2


class FractionalMaxPool3d(_FractionalMaxPool):
    """``F.fractional_max_pool3d`` as a module, as ``torch.nn.FractionalMaxPool3d``."""

    _fn = staticmethod(F.fractional_max_pool3d)
    _n = 3


class _MaxUnpool(Module):
    _fn: Any = None
    _n: int = 2

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        n = self._n
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride = _ntuple(kernel_size if stride is None else stride, n)
        self.padding = _ntuple(padding, n)

    def forward(self, input: Tensor, indices: Tensor, output_size: Any = None) -> Tensor:
        out: Tensor = type(self)._fn(
            input, indices, self.kernel_size, self.stride, self.padding, output_size
        )
        return out

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpool):
    """``F.max_unpool1d`` as a module, as ``torch.nn.MaxUnpool1d``."""

    _fn = staticmethod(F.max_unpool1d)
    _n = 1


class MaxUnpool2d(_MaxUnpool):
    """``F.max_unpool2d`` as a module, as ``torch.nn.MaxUnpool2d``."""

    _fn = staticmethod(F.max_unpool2d)
    _n = 2


class MaxUnpool3d(_MaxUnpool):
    """``F.max_unpool3d`` as a module, as ``torch.nn.MaxUnpool3d``."""

    _fn = staticmethod(F.max_unpool3d)
    _n = 3


# ----- padding -----
class _Pad(Module):
    _n: int = 1
    _mode: str = "constant"

    def __init__(self, padding: Any) -> None:
        super().__init__()
        self.padding = _ntuple(padding, 2 * self._n)
        if len(self.padding) != 2 * self._n:
            raise ValueError(
                f"expected padding to be a single integer value or a tuple of {2 * self._n} "
                f"values, but got {padding}"
            )

    def _check(self, input: Tensor) -> None:
        if input.ndim not in (self._n + 1, self._n + 2):
            raise ValueError(
                f"expected {self._n + 1}D or {self._n + 2}D input (got {input.ndim}D input)"
            )

    def forward(self, input: Tensor) -> Tensor:
        self._check(input)
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPad(_Pad):
    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPad):
    """Pad the last dim with a constant, as ``torch.nn.ConstantPad1d``."""

    _n = 1


class ConstantPad2d(_ConstantPad):
    """Pad the last two dims with a constant, as ``torch.nn.ConstantPad2d``."""

    _n = 2


class ConstantPad3d(_ConstantPad):
    """Pad the last three dims with a constant, as ``torch.nn.ConstantPad3d``."""

    _n = 3


class _ZeroPad(_ConstantPad):
    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPad):
    """Pad the last dim with zeros, as ``torch.nn.ZeroPad1d``."""

    _n = 1


class ZeroPad2d(_ZeroPad):
    """Pad the last two dims with zeros, as ``torch.nn.ZeroPad2d``.

    Example:
        >>> import asyncgrad as ag
        >>> ag.nn.ZeroPad2d((1, 0, 0, 1))(ag.ones(1, 1, 1, 1)).tolist()
        [[[[0.0, 1.0], [0.0, 0.0]]]]
    """

    _n = 2


class ZeroPad3d(_ZeroPad):
    """Pad the last three dims with zeros, as ``torch.nn.ZeroPad3d``."""

    _n = 3


class ReflectionPad1d(_Pad):
    """Pad the last dim with its reflection, as ``torch.nn.ReflectionPad1d``."""

    _n, _mode = 1, "reflect"


class ReflectionPad2d(_Pad):
    """Pad the last two dims with their reflection, as ``torch.nn.ReflectionPad2d``."""

    _n, _mode = 2, "reflect"


class ReflectionPad3d(_Pad):
    """Pad the last three dims with their reflection, as ``torch.nn.ReflectionPad3d``."""

    _n, _mode = 3, "reflect"


class ReplicationPad1d(_Pad):
    """Pad the last dim with its edge values, as ``torch.nn.ReplicationPad1d``."""

    _n, _mode = 1, "replicate"


class ReplicationPad2d(_Pad):
    """Pad the last two dims with their edge values, as ``torch.nn.ReplicationPad2d``."""

    _n, _mode = 2, "replicate"


class ReplicationPad3d(_Pad):
    """Pad the last three dims with their edge values, as ``torch.nn.ReplicationPad3d``."""

    _n, _mode = 3, "replicate"


class CircularPad1d(_Pad):
    """Pad the last dim by wrapping around, as ``torch.nn.CircularPad1d``."""

    _n, _mode = 1, "circular"


class CircularPad2d(_Pad):
    """Pad the last two dims by wrapping around, as ``torch.nn.CircularPad2d``."""

    _n, _mode = 2, "circular"


class CircularPad3d(_Pad):
    """Pad the last three dims by wrapping around, as ``torch.nn.CircularPad3d``."""

    _n, _mode = 3, "circular"


# ----- shuffles, patches, upsampling, local response normalisation -----
class PixelShuffle(Module):
    """``F.pixel_shuffle`` as a module, as ``torch.nn.PixelShuffle``."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``F.pixel_unshuffle`` as a module, as ``torch.nn.PixelUnshuffle``."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    """``F.channel_shuffle`` as a module, as ``torch.nn.ChannelShuffle``."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, input: Tensor) -> Tensor:
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


class Unfold(Module):
    """``F.unfold`` as a module, as ``torch.nn.Unfold``."""

    def __init__(
        self, kernel_size: Any, dilation: Any = 1, padding: Any = 0, stride: Any = 1
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input: Tensor) -> Tensor:
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding},"
            f" stride={self.stride}"
        )


class Fold(Module):
    """``F.fold`` as a module, as ``torch.nn.Fold``."""

    def __init__(
        self,
        output_size: Any,
        kernel_size: Any,
        dilation: Any = 1,
        padding: Any = 0,
        stride: Any = 1,
    ) -> None:
        super().__init__()
        self.output_size = output_size
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.padding = padding
        self.stride = stride

    def forward(self, input: Tensor) -> Tensor:
        return F.fold(
            input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride
        )

    def extra_repr(self) -> str:
        return (
            f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
            f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}"
        )


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour upsampling, as ``torch.nn.UpsamplingNearest2d``."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear upsampling with align_corners=True, as ``torch.nn.UpsamplingBilinear2d``."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class LocalResponseNorm(Module):
    """``F.local_response_norm`` as a module, as ``torch.nn.LocalResponseNorm``."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input: Tensor) -> Tensor:
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class CrossMapLRN2d(Module):
    """torch's legacy cross-channel LRN over (N, C, H, W): x * (k + alpha / size * S)^-beta,
    where S sums x^2 over the window torch's running sum keeps: channels
    [c - pre, c + pre - 1] with pre = (size - 1) // 2 + 1, and channel 0 never leaving it
    (torch's recurrence subtracts from channel 1 on). Its gradient is this formula's exact
    one."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input: Tensor) -> Tensor:
        from .. import ops
        from ..backend import namespace
        from ..ops._record import wrap

        if input.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.ndim}D instead.")
        c = input.shape[1]
        pre = int((self.size - 1) / 2 + 1)
        mod = namespace(input._array)
        cs = ops.cumsum(ops.mul(input, input), 1)
        ch = mod.arange(c)
        top = mod.minimum(ch + pre - 1, c - 1)
        total = ops.index_select(cs, 1, wrap(top))
        low = ch - pre  # channels 1 .. c - pre have left the window
        gone = ops.sub(
            ops.index_select(cs, 1, wrap(mod.maximum(low, 0))),
            ops.index_select(cs, 1, wrap(ch * 0)),
        )
        keep = wrap((low >= 1).astype(input._array.dtype).reshape(1, c, 1, 1))
        s = ops.sub(total, ops.mul(gone, keep))
        scale = ops.add(ops.mul(s, self.alpha / self.size), self.k)
        return ops.mul(input, ops.pow(scale, -self.beta))

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
