"""Module, Parameter and the basic layers."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from .. import backend, dtypes, ops
from .._tensor import Tensor
from ..graph.grad_mode import no_grad
from . import functional as F


class Parameter(Tensor):
    """A leaf tensor that a Module registers as a parameter (requires grad by default)."""

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:
        if data is None:
            data = backend.empty((0,), dtypes.float32)
        arr = data._array if isinstance(data, Tensor) else ops.as_array(data)
        super().__init__(arr, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo: dict[int, Any]) -> Parameter:
        # Tensor's deepcopy would give a plain Tensor; a copied module needs Parameters.
        p = Parameter(self._array.copy(), requires_grad=self.requires_grad)
        if self._grad is not None:
            p._grad = Tensor._wrap(self._grad._array.copy())
        memo[id(self)] = p
        return p


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict(..., strict=False)`` could not match."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of layers: holds parameters and submodules as attributes."""

    training: bool
    _parameters: OrderedDict[str, Parameter]
    _modules: OrderedDict[str, Module]

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        modules = self.__dict__.get("_modules")
        if isinstance(value, (Parameter, Module)):
            if params is None or modules is None:
                raise AttributeError(
                    f"cannot assign {type(value).__name__} {name!r} before Module.__init__() call"
                )
            own, other = (params, modules) if isinstance(value, Parameter) else (modules, params)
            other.pop(name, None)
            own[name] = value  # a replaced entry keeps its place in the order
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__!r} as parameter {name!r} "
                    "(ag.nn.Parameter or None expected)"
                )
            del params[name]
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__!r} as child module {name!r} "
                    "(ag.nn.Module or None expected)"
                )
            del modules[name]
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        setattr(self, name, param)

    def add_module(self, name: str, module: Module | None) -> None:
        setattr(self, name, module)

    # ------------------------------------------------------------------ calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ traversal
    def _named_params(self, prefix: str, recurse: bool, dedup: bool) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        if recurse:
            mods = self.named_modules(prefix=prefix, remove_duplicate=dedup)
        else:
            mods = iter([(prefix, self)])
        for mprefix, m in mods:
            for name, p in m._parameters.items():
                if dedup:
                    if id(p) in seen:
                        continue
                    seen.add(id(p))
                yield (mprefix + "." if mprefix else "") + name, p

    def named_parameters(
        self, prefix: str = "", recurse: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """``(name, parameter)`` pairs, each parameter once, in registration order."""
        yield from self._named_params(prefix, recurse, dedup=True)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from self._modules.items()

    def children(self) -> Iterator[Module]:
        yield from self._modules.values()

    def named_modules(
        self, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """``(name, module)`` for this module and every submodule below it (depth first)."""
        seen: set[int] = set()
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if remove_duplicate:
                if id(m) in seen:
                    continue
                seen.add(id(m))
            yield name, m
            subs = [((name + "." if name else "") + n, s) for n, s in m._modules.items()]
            stack.extend(reversed(subs))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    # ------------------------------------------------------------------ modes and state
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` of every parameter (to freeze or unfreeze the module)."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            _zero_grad(p, set_to_none)

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move or cast every parameter in place (``to(device)``, ``to(dtype)``, or both)."""
        with no_grad():
            for p in self.parameters():
                new = p.detach().to(*args, **kwargs)
                if new._array is p._array:
                    continue
                p._array = new._array
                p._vc[0] += 1
                if p._meta is not None:
                    p._meta.grad_accumulator = None  # it recorded the old shape/dtype/device
                if p.grad is not None:
                    g = p.grad.to(*args, **kwargs)
                    p._grad = None
                    p.grad = g
        return self

    def state_dict(self) -> OrderedDict[str, Tensor]:
        """Every parameter by name, detached (it shares memory with the parameter)."""
        return OrderedDict((n, p.detach()) for n, p in self._named_params("", True, dedup=False))

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values into the parameters. Shapes must match; with ``strict`` (the default),
        so must the keys. Nothing is copied when an error is raised."""
        own = dict(self._named_params("", True, dedup=False))
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict and (missing or unexpected):
            if unexpected:
                names = ", ".join(map(repr, unexpected))
                errors.append(f"Unexpected key(s) in state_dict: {names}")
            if missing:
                errors.append(f"Missing key(s) in state_dict: {', '.join(map(repr, missing))}")
        values = {}
        for n, p in own.items():
            if n not in state_dict:
                continue
            v = state_dict[n]
            arr = v._array if isinstance(v, Tensor) else backend.asarray(v)
            if tuple(arr.shape) != tuple(p.shape):
                errors.append(
                    f"size mismatch for {n}: copying a param with shape {tuple(arr.shape)} from "
                    f"checkpoint, the shape in current model is {tuple(p.shape)}"
                )
            values[n] = arr
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                + "\n\t".join(errors)
            )
        for n, arr in values.items():
            p = own[n]
            if arr is not p._array:
                p._array[...] = arr
                p._vc[0] += 1
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ printing
    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {sub}")
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")

    def extra_repr(self) -> str:
        return ""


def _zero_grad(p: Tensor, set_to_none: bool) -> None:
    if set_to_none:
        p.grad = None
    elif p.grad is not None:
        g = p.grad
        if g.grad_fn is not None:
            p.grad = g = g.detach()
        g._array[...] = 0
        g._vc[0] += 1


def _uniform(bound: float, shape: tuple[int, ...], dtype: Any) -> Any:
    rng = ops.default_generator._rng
    return rng.uniform(-bound, bound, shape, dtypes.to_dtype(dtype or dtypes.float32))


# ============================================================================ containers
class Sequential(Module):
    """Calls its modules in order, each on the previous one's output."""

    def __init__(self, *mods: Module) -> None:
        super().__init__()
        for i, m in enumerate(mods):
            setattr(self, str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i: int | slice) -> Any:
        mods = list(self._modules.values())
        return Sequential(*mods[i]) if isinstance(i, slice) else mods[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        setattr(self, str(len(self)), module)
        return self


class ModuleList(Module):
    """A list of modules whose parameters are registered (it has no forward of its own)."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _key(self, i: int) -> str:
        n = len(self._modules)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for a ModuleList of length {n}")
        return str(i % n)

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        return self._modules[self._key(i)]

    def __setitem__(self, i: int, module: Module) -> None:
        setattr(self, self._key(i), module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> ModuleList:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList holds Modules, got {type(module).__name__}")
        setattr(self, str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self


# ============================================================================ layers
class Linear(Module):
    """``y = x @ weight.T + bias``, initialised as torch does (uniform in ±1/sqrt(in))."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.weight = Parameter(_uniform(bound, (out_features, in_features), dtype))
        self.bias = Parameter(_uniform(bound, (out_features,), dtype)) if bias else None
        if device is not None:
            self.to(device)

    def forward(self, x: Tensor) -> Tensor:
        return ops.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Embedding(Module):
    """A lookup table: ``weight[indices]``; weights start as N(0, 1), as in torch."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"padding_idx must be within num_embeddings ({num_embeddings}), "
                    f"got {padding_idx}"
                )
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        rng = ops.default_generator._rng
        w = rng.normal((num_embeddings, embedding_dim), dtypes.float64)
        if padding_idx is not None:
            w[padding_idx] = 0
        self.weight = Parameter(w.astype(dtypes.to_dtype(dtype or dtypes.float32)))
        if device is not None:
            self.to(device)

    def forward(self, indices: Any) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class LayerNorm(Module):
    """Normalise over the last ``len(normalized_shape)`` dims, then scale and shift."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        dt = dtypes.to_dtype(dtype or dtypes.float32)
        shape = self.normalized_shape
        self.weight = Parameter(backend.ones(shape, dt)) if elementwise_affine else None
        use_bias = elementwise_affine and bias
        self.bias = Parameter(backend.zeros(shape, dt)) if use_bias else None
        if device is not None:
            self.to(device)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class Dropout(Module):
    """Zero each element with probability ``p`` while training, scaling the rest by 1/(1-p).

    The mask comes from the default generator, so ``ag.manual_seed`` makes it repeatable."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return ops.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.sigmoid(x)


# ============================================================================ convolution, pooling
class _ConvNd(Module):
    """Shared by Conv1d and Conv2d: weights initialised as torch does (kaiming_uniform with
    a = sqrt(5), which is uniform in +-1/sqrt(fan_in); the bias likewise)."""

    _n: int = 2

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
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise NotImplementedError(f"padding_mode={padding_mode!r}: only 'zeros' is supported")
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(
                f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}"
            )
        n = self._n
        k = (kernel_size,) * n if isinstance(kernel_size, int) else tuple(kernel_size)
        if isinstance(padding, str) and padding == "same" and stride not in (1, (1,) * n):
            raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = k
        self.stride = (stride,) * n if isinstance(stride, int) else tuple(stride)
        self.padding = (
            padding
            if isinstance(padding, str)
            else ((padding,) * n if isinstance(padding, int) else tuple(padding))
        )
        self.dilation = (dilation,) * n if isinstance(dilation, int) else tuple(dilation)
        self.groups = groups
        self.padding_mode = padding_mode
        fan_in = in_channels // groups * math.prod(k)
        bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
        shape = (out_channels, in_channels // groups, *k)
        self.weight = Parameter(_uniform(bound, shape, dtype))
        self.bias = Parameter(_uniform(bound, (out_channels,), dtype)) if bias else None
        if device is not None:
            self.to(device)

    def forward(self, x: Tensor) -> Tensor:
        conv = F.conv1d if self._n == 1 else F.conv2d
        return conv(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding!r}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv1d(_ConvNd):
    """1-D convolution over (N, C, L), as ``torch.nn.Conv1d``."""

    _n = 1


class Conv2d(_ConvNd):
    """2-D convolution over (N, C, H, W), as ``torch.nn.Conv2d``.

    Example:
        >>> import asyncgrad as ag
        >>> conv = ag.nn.Conv2d(1, 8, 3, padding=1)
        >>> conv(ag.zeros(2, 1, 5, 5)).shape
        (2, 8, 5, 5)
    """

    _n = 2


class MaxPool2d(Module):
    """``F.max_pool2d`` as a module, as ``torch.nn.MaxPool2d``."""

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

    def forward(self, x: Tensor) -> Any:
        return F.max_pool2d(
            x,
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


class AvgPool2d(Module):
    """``F.avg_pool2d`` as a module, as ``torch.nn.AvgPool2d``."""

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

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
