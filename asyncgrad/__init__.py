"""asyncgrad: reverse-mode automatic differentiation over NumPy with an asyncio engine.

``await ag.grad(...)`` / ``await ag.backward(...)`` in async code; ``t.backward()`` in scripts.

NOTE [Layers]
The package is built in layers, each importing only the ones below it:

    nn, optim        modules, losses, optimisers
    autograd         the public API: backward/grad and their _sync twins, Function, gradcheck
    engine           GraphTask, scheduler, device workers, reentrant backward
    ops              forward ops, each recording its backward node
    rules            the derivative table
    graph            Node, Edge, hooks, saved tensors, accumulators, grad modes
    _tensor          Tensor
    dtypes, backend  dtypes and arrays: the only modules that import NumPy (or CuPy)

The one exception is Tensor's methods delegating upward (See NOTE [Tensor delegates upward]).
The import-linter contract in pyproject.toml checks this on every CI run.
"""

from __future__ import annotations

import importlib
import sys as _sys
from typing import TYPE_CHECKING, Any, Final

# Tensor first: its module imports the ops once the class exists, and every layer above needs
# both (See NOTE [Tensor delegates upward]).
from ._tensor import Tensor  # isort: skip
from . import _build, autograd, cuda, nn, optim
from .autograd import backward, backward_sync, grad, grad_sync, run
from .backend import Device, device, get_default_device, set_default_device
from .dtypes import (
    bool_,
    dtype,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .engine.settings import configure
from .graph.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .ops import (
    Generator,
    abs,
    add,
    allclose,
    amax,
    amin,
    arange,
    argmax,
    argmin,
    as_tensor,
    bmm,
    broadcast_to,
    cat,
    chunk,
    clamp,
    clone,
    cos,
    div,
    empty,
    eq,
    equal,
    erf,
    exp,
    expand,
    expm1,
    eye,
    flatten,
    flip,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    gather,
    ge,
    gelu,
    gt,
    index_select,
    isfinite,
    isnan,
    le,
    linspace,
    log,
    log1p,
    log_softmax,
    logsumexp,
    lt,
    manual_seed,
    masked_fill,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    mm,
    mul,
    multinomial,
    narrow,
    ne,
    neg,
    ones,
    ones_like,
    permute,
    pow,
    rand,
    randint,
    randn,
    randperm,
    reciprocal,
    relu,
    remainder,
    reshape,
    roll,
    rsqrt,
    scatter_add,
    select,
    sigmoid,
    sign,
    silu,
    sin,
    softmax,
    split,
    sqrt,
    squeeze,
    stack,
    sub,
    sum,
    t,
    tan,
    tanh,
    tensor,
    tile,
    transpose,
    tril,
    triu,
    unbind,
    unflatten,
    unsqueeze,
    where,
    zeros,
    zeros_like,
)

bool = bool_
float = float32
double = float64
half = float16
long = int64
int = int32
short = int16

__version__ = "0.1.0"
# "compiled" where the engine is compiled by mypyc (a release wheel), else "pure" (See NOTE
# [Compiled modules] in asyncgrad/_build.py).
__build__: Final = _build.kind()
_build.wrap_awaits = __build__ == "compiled" and _sys.version_info >= (3, 12)


__all__ = [
    "Device",
    "Generator",
    "Tensor",
    "abs",
    "add",
    "allclose",
    "amax",
    "amin",
    "arange",
    "argmax",
    "argmin",
    "as_tensor",
    "autograd",
    "backward",
    "backward_sync",
    "bmm",
    "bool",
    "broadcast_to",
    "cat",
    "chunk",
    "clamp",
    "clone",
    "configure",
    "cos",
    "cuda",
    "device",
    "div",
    "double",
    "dtype",
    "empty",
    "enable_grad",
    "eq",
    "equal",
    "erf",
    "exp",
    "expand",
    "expm1",
    "eye",
    "flatten",
    "flip",
    "float",
    "float16",
    "float32",
    "float64",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "gather",
    "ge",
    "gelu",
    "get_default_device",
    "grad",
    "grad_sync",
    "gt",
    "half",
    "index_select",
    "inference_mode",
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "isfinite",
    "isnan",
    "le",
    "linspace",
    "log",
    "log1p",
    "log_softmax",
    "logsumexp",
    "long",
    "lt",
    "manual_seed",
    "masked_fill",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mm",
    "mul",
    "multinomial",
    "narrow",
    "ne",
    "neg",
    "nn",
    "no_grad",
    "ones",
    "ones_like",
    "optim",
    "permute",
    "pow",
    "rand",
    "randint",
    "randn",
    "randperm",
    "reciprocal",
    "relu",
    "remainder",
    "reshape",
    "roll",
    "rsqrt",
    "run",
    "scatter_add",
    "select",
    "set_default_device",
    "set_grad_enabled",
    "short",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "softmax",
    "split",
    "sqrt",
    "squeeze",
    "stack",
    "sub",
    "sum",
    "t",
    "tan",
    "tanh",
    "tensor",
    "testing",
    "tile",
    "transpose",
    "tril",
    "triu",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "unbind",
    "unflatten",
    "unsqueeze",
    "utils",
    "viz",
    "where",
    "zeros",
    "zeros_like",
]

# ----- Size, saving and loading -----
from ._tensor import Size  # noqa: E402

__all__ += ["Size", "load", "save"]

# NOTE [Lazy extras]
# ``import asyncgrad`` loads what every program needs. The tools a program may never touch
# (``ag.save``/``ag.load``, ``ag.utils``, ``ag.testing``, ``ag.viz``, ``ag.distributed``) load
# on first use, through the module's __getattr__ (PEP 562), which keeps their imports (zipfile,
# json, multiprocessing, ...) out of every start-up. ``ag.autograd`` does the same for
# ``functional`` and ``profiler``.
_LAZY_MODULES = frozenset({"distributed", "testing", "utils", "viz"})

if TYPE_CHECKING:
    from . import distributed, testing, utils, viz  # noqa: F401
    from .serialization import load, save


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")  # binds it on the package too
    if name in ("save", "load"):
        from . import serialization

        value = getattr(serialization, name)
        globals()[name] = value
        return value
    from ._torch_names import missing  # See NOTE [Names torch has]

    raise missing(__name__, name)


# ----- var, std, prod, norm, cumsum, all, any; dot, outer, einsum; sort, topk, nonzero -----
from .ops import (  # noqa: E402
    all,
    any,
    argsort,
    cumsum,
    dot,
    einsum,
    nonzero,
    norm,
    outer,
    prod,
    sort,
    std,
    topk,
    var,
)

__all__ += [
    "all",
    "any",
    "argsort",
    "cumsum",
    "dot",
    "einsum",
    "nonzero",
    "norm",
    "outer",
    "prod",
    "sort",
    "std",
    "topk",
    "var",
]

# ----- torch's other names: var_mean, *_like, diagonal, unique, clip; ag.linalg; constants -----
import builtins as _builtins  # noqa: E402  (``int``, ``bool`` and ``float`` are dtypes here)
import math as _math  # noqa: E402

from . import attribution, linalg, serving  # noqa: E402, F401
from .dtypes import get_default_dtype, set_default_dtype  # noqa: E402
from .ops import (  # noqa: E402
    clip,
    clip_,
    diagonal,
    rand_like,
    randint_like,
    randn_like,
    split_with_sizes,
    std_mean,
    unique,
    var_mean,
)

inf: Final = _math.inf
nan: Final = _math.nan
pi: Final = _math.pi
e: Final = _math.e


# NOTE [Threads and warnings settings]
# ``set_num_threads`` sets the engine's compute threads (``ag.autograd.engine.configure(
# compute_threads=n)``): the threads that run ``ag.run`` calls and large backward nodes off the
# event loop, asyncgrad's parallelism for computation. The BLAS library under NumPy keeps its own
# threads (OPENBLAS_NUM_THREADS and the like, read at start-up). ``set_warn_always`` is kept for
# torch's API: asyncgrad has no warn-once messages, each warning follows Python's ``warnings``
# filters, so the flag changes nothing but what ``is_warn_always_enabled`` returns.
_warn_always = [False]


def set_num_threads(n: _builtins.int) -> None:
    """Use ``n`` compute threads (See NOTE [Threads and warnings settings])."""
    if isinstance(n, _builtins.bool) or not isinstance(n, _builtins.int) or n < 1:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n!r}")
    autograd.engine.configure(compute_threads=n)


def get_num_threads() -> _builtins.int:
    """The number of compute threads (See NOTE [Threads and warnings settings])."""
    n: _builtins.int = autograd.engine.compute_threads
    return n


def set_warn_always(b: _builtins.bool) -> None:
    """torch's switch for warn-once messages (See NOTE [Threads and warnings settings])."""
    _warn_always[0] = _builtins.bool(b)


def is_warn_always_enabled() -> _builtins.bool:
    return _warn_always[0]


__all__ += [
    "clip",
    "clip_",
    "diagonal",
    "e",
    "get_default_dtype",
    "get_num_threads",
    "inf",
    "is_warn_always_enabled",
    "linalg",
    "nan",
    "pi",
    "rand_like",
    "randint_like",
    "randn_like",
    "set_default_dtype",
    "set_num_threads",
    "set_warn_always",
    "split_with_sizes",
    "std_mean",
    "unique",
    "var_mean",
]

# ----- torch's wider API, by family -----
from .ops.pointwise_math import *  # noqa: E402, F403
from .ops.pointwise_math import __all__ as _pointwise_math_all  # noqa: E402

__all__ += _pointwise_math_all

from .ops.statistics import *  # noqa: E402, F403
from .ops.statistics import __all__ as _statistics_all  # noqa: E402

__all__ += _statistics_all

from .ops.views import *  # noqa: E402, F403
from .ops.views import __all__ as _views_all  # noqa: E402

__all__ += _views_all

from .ops.matrix import *  # noqa: E402, F403
from .ops.matrix import __all__ as _matrix_all  # noqa: E402

__all__ += _matrix_all

from .ops.sampling import *  # noqa: E402, F403
from .ops.sampling import __all__ as _sampling_all  # noqa: E402

__all__ += _sampling_all

from . import fft, special  # noqa: E402

__all__ += ["fft", "special"]

# ----- section H5: activations and losses -----
from .ops import activations as _activations  # noqa: E402
from .ops.activations import *  # noqa: E402, F403

__all__ += _activations.__all__
# ----- end of section H5 -----

# ----- section H6: convolution, pooling, padding, upsampling -----
# torch's top-level spellings of the nn.functional convolutions, pools and shuffles.
from .nn import functional_spatial as _spatial  # noqa: E402
from .nn.functional_spatial import (  # noqa: E402
    adaptive_avg_pool1d,
    affine_grid_generator,
    channel_shuffle,
    constant_pad_nd,
    grid_sampler,
    pixel_shuffle,
    pixel_unshuffle,
)
from .ops.conv import (  # noqa: E402
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    convolution,
)

avg_pool1d = _spatial.torch_avg_pool1d
adaptive_max_pool1d = _spatial.torch_adaptive_max_pool1d
max_pool1d = _spatial.torch_max_pool(1)
max_pool1d_with_indices = _spatial.torch_max_pool1d_with_indices
max_pool2d = _spatial.torch_max_pool(2)
max_pool3d = _spatial.torch_max_pool(3)
grid_sampler_2d = grid_sampler
grid_sampler_3d = grid_sampler

__all__ += [
    "adaptive_avg_pool1d",
    "adaptive_max_pool1d",
    "affine_grid_generator",
    "avg_pool1d",
    "channel_shuffle",
    "constant_pad_nd",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "convolution",
    "grid_sampler",
    "grid_sampler_2d",
    "grid_sampler_3d",
    "max_pool1d",
    "max_pool1d_with_indices",
    "max_pool2d",
    "max_pool3d",
    "pixel_shuffle",
    "pixel_unshuffle",
]
# ----- end of section H6 -----

# ----- section H7: recurrent, transformer, normalization and other layers -----
from .nn.functional_layers import (  # noqa: E402
    bilinear,
    gru_cell,
    lstm_cell,
    rms_norm,
    rnn_relu_cell,
    rnn_tanh_cell,
)
from .nn.functional_layers import torch_batch_norm as batch_norm  # noqa: E402
from .nn.functional_layers import torch_embedding as embedding  # noqa: E402
from .nn.functional_layers import torch_embedding_bag as embedding_bag  # noqa: E402
from .nn.functional_layers import torch_embedding_renorm_ as embedding_renorm_  # noqa: E402
from .nn.functional_layers import torch_group_norm as group_norm  # noqa: E402
from .nn.functional_layers import torch_instance_norm as instance_norm  # noqa: E402
from .nn.functional_layers import torch_layer_norm as layer_norm  # noqa: E402
from .nn.rnn import gru, lstm, rnn_relu, rnn_tanh  # noqa: E402

__all__ += [
    "batch_norm",
    "bilinear",
    "embedding",
    "embedding_bag",
    "embedding_renorm_",
    "group_norm",
    "gru",
    "gru_cell",
    "instance_norm",
    "layer_norm",
    "lstm",
    "lstm_cell",
    "rms_norm",
    "rnn_relu",
    "rnn_relu_cell",
    "rnn_tanh",
    "rnn_tanh_cell",
]
# ----- end of section H7 -----

# ----- section H8: start-up modules, legacy tensor types, init, optimizers, torch files -----
from . import amp  # noqa: E402
from .amp import *  # noqa: E402, F403
from .amp import __all__ as _amp_all  # noqa: E402
from .dtypes import can_cast, finfo, iinfo, promote_types, result_type  # noqa: E402
from .global_state import *  # noqa: E402, F403
from .global_state import __all__ as _global_state_all  # noqa: E402
from .legacy_types import *  # noqa: E402, F403
from .legacy_types import __all__ as _legacy_types_all  # noqa: E402

__all__ += [n for n in _amp_all if n not in ("custom_bwd", "custom_fwd", "is_autocast_available")]
__all__ += ["amp", "can_cast", "finfo", "iinfo", "promote_types", "result_type"]
__all__ += _global_state_all + _legacy_types_all
__all__ += ["accelerator", "backends", "cpu", "onnx"]

# The start-up modules load on first use, through the __getattr__ of NOTE [Lazy extras].
_LAZY_MODULES = _LAZY_MODULES | {"accelerator", "backends", "cpu", "onnx"}

if TYPE_CHECKING:
    from . import accelerator, backends, cpu, onnx
# ----- end of section H8 -----

# ----- torch-level names of ops defined before the families -----
from .ops import clamp_, fill_, floor_divide, logical_and, logical_not, logical_or, zero_  # noqa: E402

__all__ += [
    "clamp_",
    "fill_",
    "floor_divide",
    "logical_and",
    "logical_not",
    "logical_or",
    "zero_",
]


def is_inference(input: Tensor) -> _builtins.bool:
    """Whether ``input`` was made under ``inference_mode`` (``Tensor.is_inference``)."""
    return input.is_inference()


def rsub(input: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``other - alpha * input``: ``sub`` with its operands swapped."""
    return sub(other, input, alpha=alpha)


from ._torch_names import NotProvidedError  # noqa: E402

__all__ += ["NotProvidedError", "is_inference", "rsub"]

# See NOTE [Ops run on their operands' device] in asyncgrad/ops/device_guard.py.
from .ops.device_guard import guard_module as _guard_module  # noqa: E402

_guard_module(__name__)
