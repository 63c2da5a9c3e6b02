"""asyncgrad: reverse-mode automatic differentiation over NumPy with an asyncio engine.

``await ag.grad(...)`` / ``await ag.backward(...)`` in async code; ``t.backward()`` in scripts.
"""

from __future__ import annotations

from . import _methods  # noqa: F401  (installs Tensor methods and operators)
from . import autograd, nn, optim
from .autograd import backward, backward_sync, grad, grad_sync
from .autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .backend import Device, device
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
    from_dlpack,
    from_numpy,
    full,
    full_like,
    ge,
    gelu,
    gt,
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
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    mm,
    mul,
    ne,
    neg,
    ones,
    ones_like,
    permute,
    pow,
    rand,
    randint,
    randn,
    reciprocal,
    relu,
    reshape,
    rsqrt,
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
    transpose,
    unbind,
    unflatten,
    unsqueeze,
    where,
    zeros,
    zeros_like,
)
from .tensor import Tensor, bool_, float16, float32, float64, int32, int64

bool = bool_  # noqa: A001  (ag.bool, as torch.bool)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001

__version__ = "0.1.0"

__all__ = [
    "Device", "Generator", "Tensor", "abs", "add", "allclose", "amax", "amin", "arange",
    "argmax", "argmin", "as_tensor", "autograd", "backward", "backward_sync", "bmm", "bool",
    "broadcast_to", "cat", "chunk", "clamp", "clone", "cos", "device", "div", "double",
    "empty", "enable_grad", "eq", "equal", "erf", "exp", "expand", "expm1", "eye", "flatten",
    "float", "float16", "float32", "float64", "from_dlpack", "from_numpy", "full", "full_like",
    "ge", "gelu", "grad", "grad_sync", "gt", "half", "inference_mode", "int", "int32", "int64",
    "is_grad_enabled", "is_inference_mode_enabled", "isfinite", "isnan", "le", "linspace",
    "log", "log1p", "log_softmax", "logsumexp", "long", "lt", "manual_seed", "matmul", "max",
    "maximum", "mean", "min", "minimum", "mm", "mul", "ne", "neg", "nn", "no_grad", "ones",
    "ones_like", "optim", "permute", "pow", "rand", "randint", "randn", "reciprocal", "relu",
    "reshape", "rsqrt", "set_grad_enabled", "sigmoid", "sign", "silu", "sin", "softmax",
    "split", "sqrt", "squeeze", "stack", "sub", "sum", "t", "tan", "tanh", "tensor",
    "transpose", "unbind", "unflatten", "unsqueeze", "where", "zeros", "zeros_like",
]
