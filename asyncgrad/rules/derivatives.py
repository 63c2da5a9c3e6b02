"""THE rule table: for each differentiable op, one vector-Jacobian product per input.

# NOTE [Rules are NumPy]
# Every rule is written with NumPy operators and functions on plain arrays. During an ordinary
# backward the engine passes ``numpy.ndarray`` values, so a rule costs exactly its NumPy calls.
# Under ``create_graph=True`` it passes Tensors instead; Tensor implements ``__array_ufunc__`` and
# ``__array_function__``, so the same rule then runs asyncgrad ops and records a differentiable
# graph. Broadcasting is undone once, after the rule (``FunctionNode.apply``), never inside one.

# NOTE [Special values]
# Rules give torch's gradients at NaN, +-inf, -0 and ties (tests/autograd/test_special_values.py
# compares every op with torch). Where torch selects (``where``, ``masked_fill``, scatter), a
# rule selects too, with np.where or _masked: multiplying by a 0/1 mask turns an inf or NaN
# gradient into NaN where torch gives 0. Rules run with NumPy's floating-point warnings off
# (NOTE [Silent floating point] in backend.py).
"""

from __future__ import annotations

import dis
import inspect
import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from .. import backend
from .._tensor import Tensor
from ..graph.node import Node
from ..graph.saved_tensor import FREED as _FREED
from ..graph.saved_tensor import SavedTensor, raise_freed

__all__ = ["OPS", "OpDef", "defvjp", "sum_to"]

Rule = Callable[..., Any]


class OpDef:
    """One op of the table: its rules, what they read, and its backward node class."""

    __slots__ = (
        "_save_cache",
        "multi_input",
        "name",
        "node_cls",
        "num_outputs",
        "save",
        "uses",
        "vjps",
    )

    def __init__(
        self,
        name: str,
        vjps: tuple[Rule | None, ...],
        save: tuple[int, ...],
        uses: tuple[tuple[int, ...], ...],
        num_outputs: int,
        multi_input: Rule | None,
    ) -> None:
        self.name = name
        self.vjps = vjps
        self.save = save  # positions in (ans, input0, input1, ...) that some rule reads
        self.uses = uses  # per input: the positions its rule reads
        self.num_outputs = num_outputs
        self.multi_input = multi_input
        self._save_cache: dict[int, tuple[int, ...]] = {}
        cls_name = "".join(p.capitalize() for p in name.split("_")) + "Backward0"
        self.node_cls = type(cls_name, (FunctionNode,), {"__slots__": ()})

    def saves_for(self, mask: int) -> tuple[int, ...]:
        """The positions to save when the inputs in bitmask ``mask`` need gradients: only what
        their rules read (``x * y`` keeps ``x`` only if ``y`` requires grad, as torch does)."""
        got = self._save_cache.get(mask)
        if got is None:
            if self.multi_input is not None:
                got = self.save
            else:
                pos: set[int] = set()
                for i, u in enumerate(self.uses):
                    if mask >> i & 1:
                        pos.update(u)
                got = tuple(sorted(pos))
            self._save_cache[mask] = got
        return got

    def __repr__(self) -> str:
        return f"OpDef({self.name!r})"


OPS: dict[str, OpDef] = {}


def _reads(rule: Rule, names: list[str]) -> set[str]:
    """The parameters of ``rule`` that its body reads (local loads, or captured by a closure)."""
    code = rule.__code__
    used = set(code.co_cellvars)
    for ins in dis.get_instructions(code):
        if ins.opname.startswith(("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE")):
            v = ins.argval
            used.update(v if isinstance(v, tuple) else (v,))
    return used & set(names)


def defvjp(
    name: str,
    *vjps: Rule | None,
    save: str = "",
    outputs: int = 1,
    all_inputs: Rule | None = None,
) -> OpDef:
    """Register the rules of op ``name``.

    Each rule is ``rule(g, ans, *inputs, **params) -> grad`` for one input (``None``: no gradient).
    ``save`` names the values the rules read ("ans" and the input names of the rule signature);
    the others reach the rules as ``None``, and registration fails if a rule reads a value that
    ``save`` does not name. ``all_inputs`` is one rule for ops with any number of inputs (``cat``,
    ``stack``): it returns the list of all input gradients.
    """
    first = next((v for v in (*vjps, all_inputs) if v is not None), None)
    if first is None:
        raise ValueError(f"{name}: at least one rule is needed")
    params = [
        p.name
        for p in inspect.signature(first).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if all_inputs is not None:
        positions = {"ans": 0, "inputs": 1}
    else:
        if params[:2] != ["g", "ans"]:
            raise ValueError(f"{name}: rules take (g, ans, *inputs, **params), got {params}")
        positions = {n: i for i, n in enumerate(params[1:])}
    save_names = save.split()
    for n in save_names:
        if n not in positions:
            raise ValueError(f"{name}: cannot save {n!r}; rule arguments are {params}")
    uses = []
    for i, v in enumerate(vjps):
        if v is None:
            uses.append(())
            continue
        read = _reads(v, list(positions))
        missing = read - set(save_names)
        if missing:
            raise ValueError(f"{name}: the rule for input {i} reads {sorted(missing)} not in save=")
        uses.append(tuple(sorted(positions[n] for n in read)))
    save_pos = tuple(sorted(positions[n] for n in save_names))
    op = OpDef(name, tuple(vjps), save_pos, tuple(uses), outputs, all_inputs)
    OPS[name] = op
    return op


def sum_to(g: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``g`` over the axes that broadcasting added to reach ``g.shape`` from ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead:
        g = np.sum(g, axis=tuple(range(lead)))  # a fresh array, not a view
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    return g


def _fit(g: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    if g.shape != shape:
        try:
            g = sum_to(g, shape)
        except ValueError:
            raise RuntimeError(
                f"gradient of shape {tuple(g.shape)} cannot be reduced to shape {shape}"
            ) from None
    if g.dtype != dtype and dtype is not None:
        g = g.astype(dtype) if hasattr(g, "astype") else g.to(dtype)  # Tensor: create_graph
    return g


class FunctionNode(Node):
    """Backward node of a table op; ``OpDef.node_cls`` subclasses it to carry the torch name.

    ``_saved[p]`` for p in (ans, input0, input1, ...): a SavedTensor at the positions in
    ``_spos``, the value itself for non-tensor inputs (constants), else None.
    """

    __slots__ = ("_op", "_params", "_saved", "_spos")

    _op: OpDef
    _saved: Any
    _spos: tuple[int, ...]
    _params: dict[str, Any]

    def apply(self, grads: list[Any], needed: list[bool] | None, create: bool) -> list[Any]:
        saved = self._saved
        if saved is _FREED:
            raise_freed(self)
        op = self._op
        edges = self._next_edges
        if op.num_outputs == 1:
            g = grads[0]
            if g is None:
                return [None] * len(edges)
        else:  # multi-output: the rule gets the list, None where no gradient arrived
            if all(x is None for x in grads):
                return [None] * len(edges)
            g = grads
        spos = self._spos
        if spos:
            vals = saved.copy()
            for p in spos:
                sv = vals[p]
                if create or type(sv) is tuple:
                    vals[p] = _unpack(sv, self, create)
                else:
                    if sv.vc[0] != sv.version:
                        sv.check(self)
                    vals[p] = sv.array
        else:
            vals = saved
        params = self._params
        out: list[Any] = [None] * len(edges)
        if op.multi_input is not None:
            res = op.multi_input(g, vals[0], vals[1:], **params)
            i = 0
            for e in edges:
                r = res[i]
                if e is not None and r is not None and (needed is None or needed[i]):
                    shape, dtype = e[0]._input_meta[e[1]]
                    if r.shape != shape or r.dtype != dtype:
                        r = _fit(r, shape, dtype)
                    if not shape and isinstance(r, np.generic):
                        # NOTE [0-d gradients]: NumPy arithmetic on 0-d arrays returns scalars;
                        # gradients (and .grad) must stay arrays.
                        r = np.asarray(r)
                    out[i] = r
                i += 1
            return out
        vjps = op.vjps
        i = 0
        for e in edges:
            if e is not None and (needed is None or needed[i]):
                r = vjps[i](g, *vals, **params) if params else vjps[i](g, *vals)  # type: ignore[misc]
                if r is not None:
                    shape, dtype = e[0]._input_meta[e[1]]
                    if r.shape != shape or (r.dtype is not dtype and r.dtype != dtype):
                        r = _fit(r, shape, dtype)
                    if not shape and isinstance(r, np.generic):
                        r = np.asarray(r)  # See NOTE [0-d gradients]
                out[i] = r
            i += 1
        return out

    def release_variables(self) -> None:
        if self._spos:
            self._saved = _FREED

    def _saved_values(self) -> tuple[Any, ...]:
        if self._saved is _FREED:
            raise_freed(self)
        return tuple(_unpack(s, self, True) for s in self._saved)


def _unpack(s: Any, node: FunctionNode, create: bool) -> Any:
    t = type(s)
    if t is SavedTensor:
        if s.vc[0] != s.version:
            s.check(node)
        return s.unpack(node) if create else s.array
    if t is tuple:  # the outputs of a multi-output op
        for x in s:
            if x.vc[0] != x.version:
                x.check(node)
        if create:
            return tuple(x.unpack(node, i) for i, x in enumerate(s))
        return tuple(x.array for x in s)
    return s


# =====================================================================================
# The table. g: gradient of the output; ans: the output; then the op's inputs; params by name.
# =====================================================================================
SQRT_2: Final = math.sqrt(2.0)
SQRT_2_OVER_PI: Final = math.sqrt(2.0 / math.pi)
INV_SQRT_2PI: Final = 1.0 / math.sqrt(2.0 * math.pi)

# ----- Binary arithmetic -----
defvjp("add", lambda g, ans, x, y: g, lambda g, ans, x, y: g)
defvjp("sub", lambda g, ans, x, y: g, lambda g, ans, x, y: -g)
defvjp("mul", lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x, save="x y")
defvjp(
    "div",
    lambda g, ans, x, y: g / y,
    lambda g, ans, x, y: -g * (x / y / y),  # d(x/y)/dy = -x/y^2, as torch groups it
    save="x y",
)
defvjp(
    "pow",
    lambda g, ans, x, y: _pow_grad_base(g, x, y),
    lambda g, ans, x, y: _pow_grad_exp(g, ans, x, y),
    save="ans x y",
)
defvjp(
    "remainder",  # x - floor(x / y) * y
    lambda g, ans, x, y: g,
    lambda g, ans, x, y: -g * np.floor_divide(x, y),
    save="x y",
)
defvjp(
    "maximum",
    lambda g, ans, x, y: _minmax_grad(g, x, y, x < y),
    lambda g, ans, x, y: _minmax_grad(g, x, y, y < x),
    save="x y",
)
defvjp(
    "minimum",
    lambda g, ans, x, y: _minmax_grad(g, x, y, x > y),
    lambda g, ans, x, y: _minmax_grad(g, x, y, y > x),
    save="x y",
)
defvjp(
    "where",
    None,
    lambda g, ans, c, x, y: np.where(c, g, 0.0),
    lambda g, ans, c, x, y: np.where(c, 0.0, g),
    save="c",
)
defvjp(
    "matmul",
    lambda g, ans, x, y: _matmul_grad_x(g, x, y),
    lambda g, ans, x, y: _matmul_grad_y(g, x, y),
    save="x y",
)

# ----- Unary math -----
defvjp("neg", lambda g, ans, x: -g)
defvjp("exp", lambda g, ans, x: g * ans, save="ans")
defvjp("log", lambda g, ans, x: g / x, save="x")
defvjp("log1p", lambda g, ans, x: g / (x + 1.0), save="x")
defvjp("expm1", lambda g, ans, x: g * (ans + 1.0), save="ans")
defvjp("sqrt", lambda g, ans, x: g / (2.0 * ans), save="ans")
defvjp("rsqrt", lambda g, ans, x: -0.5 * g * (ans * ans * ans), save="ans")
defvjp("reciprocal", lambda g, ans, x: -g * (ans * ans), save="ans")
defvjp("sin", lambda g, ans, x: g * np.cos(x), save="x")
defvjp("cos", lambda g, ans, x: -g * np.sin(x), save="x")
defvjp("tan", lambda g, ans, x: g * (1.0 + ans * ans), save="ans")
defvjp("tanh", lambda g, ans, x: g * (1.0 - ans * ans), save="ans")
defvjp("sigmoid", lambda g, ans, x: g * (1.0 - ans) * ans, save="ans")
defvjp("relu", lambda g, ans, x: _masked(g, ans != 0), save="ans")  # ans is >= 0 or NaN
defvjp("abs", lambda g, ans, x: g * _sign(x), save="x")
defvjp("sign", lambda g, ans, x: np.zeros_like(g))
defvjp("erf", lambda g, ans, x: g * (2.0 / math.sqrt(math.pi)) * np.exp(-x * x), save="x")
defvjp("gelu", lambda g, ans, x, *, approximate: _gelu_grad(g, x, approximate), save="x")
defvjp("silu", lambda g, ans, x: _silu_grad(g, x), save="x")
defvjp(
    "clamp",
    lambda g, ans, x, *, min, max: _masked(g, _in_range(x, min, max)),
    save="x",
)

# ----- Reductions -----
defvjp("sum", lambda g, ans, x, *, dim, keepdim, in_shape: _expand(g, in_shape, dim, keepdim))
defvjp(
    "mean",
    lambda g, ans, x, *, dim, keepdim, in_shape: (
        _expand(g, in_shape, dim, keepdim) / _count(in_shape, dim)
    ),
)
defvjp(
    "amax",
    lambda g, ans, x, *, dim, keepdim, in_shape, evenly: _extreme_grad(
        g, ans, x, dim, keepdim, evenly
    ),
    save="ans x",
)
defvjp(
    "amin",
    lambda g, ans, x, *, dim, keepdim, in_shape, evenly: _extreme_grad(
        g, ans, x, dim, keepdim, evenly
    ),
    save="ans x",
)
defvjp(
    "max_dim",
    lambda g, ans, x, *, dim, keepdim, indices, in_shape: _index_grad(
        g, indices, in_shape, dim, keepdim
    ),
)
defvjp(
    "logsumexp",
    lambda g, ans, x, *, dim, keepdim, in_shape: (
        _expand(g, in_shape, dim, keepdim) * np.exp(x - _keep(ans, dim, keepdim))
    ),
    save="ans x",
)

# ----- Shapes and views -----
defvjp("reshape", lambda g, ans, x, *, shape, in_shape: np.reshape(g, in_shape))
defvjp("transpose", lambda g, ans, x, *, dim0, dim1: np.swapaxes(g, dim0, dim1))
defvjp("permute", lambda g, ans, x, *, dims: np.transpose(g, tuple(np.argsort(dims))))
defvjp("expand", lambda g, ans, x, *, shape: g)  # sum_to after the rule undoes the expansion
defvjp("getitem", lambda g, ans, x, *, index, in_shape: _getitem_grad(g, index, in_shape))
defvjp(
    "index_put",
    lambda g, ans, x, v, *, index: _index_put_self_grad(g, index),
    lambda g, ans, x, v, *, index: g[index],
)
defvjp(
    "index_add_zeros",  # the backward of getitem, itself differentiable (for double backward)
    lambda g, ans, x, *, index, shape: g[index],
)
defvjp("cat", all_inputs=lambda g, ans, inputs, *, dim, sizes: _split_grad(g, dim, sizes))
defvjp("stack", all_inputs=lambda g, ans, inputs, *, dim, n: _unstack_grad(g, dim, n))
defvjp(
    "split",
    lambda g, ans, x, *, dim, sizes, in_shape: _cat_grads(g, dim, sizes, in_shape),
    outputs=-1,
)
defvjp("unbind", lambda g, ans, x, *, dim, in_shape: _stack_grads(g, dim, in_shape), outputs=-1)
defvjp("clone", lambda g, ans, x: g)
defvjp("cast", lambda g, ans, x: g)  # the rule's result is cast back to x's dtype by _fit
defvjp("copy", lambda g, ans, x, src: np.zeros_like(g), lambda g, ans, x, src: g)
defvjp("fill", lambda g, ans, x, *, value: np.zeros_like(g))

# ----- Neural-network functions -----
defvjp(
    "linear",  # y = x @ w.T + b
    lambda g, ans, x, w, b: np.matmul(g, w),
    lambda g, ans, x, w, b: _linear_grad_w(g, x),
    lambda g, ans, x, w, b: g,
    save="x w",
)
defvjp(
    "softmax",
    lambda g, ans, x, *, dim: ans * (g - np.sum(g * ans, axis=dim, keepdims=True)),
    save="ans",
)
defvjp(
    "log_softmax",
    lambda g, ans, x, *, dim: g - np.exp(ans) * np.sum(g, axis=dim, keepdims=True),
    save="ans",
)
defvjp(
    "nll_loss",
    lambda g, ans, logp, *, target, weight, reduction, ignore_index, denom, all_valid: _nll_grad(
        g, logp, target, weight, reduction, ignore_index, denom, all_valid
    ),
    save="logp",
)


# =====================================================================================
# Longer formulas (the role of PyTorch's FunctionsManual.cpp).
# =====================================================================================
def pow_scalar(a: Any, e: Any) -> Any:
    """``a ** e`` as torch computes it: for a float ``a`` and a Python number ``e`` in 2, 3, -2,
    0.5, -0.5, -1, as products, sqrt, rsqrt and reciprocal, which differ from pow at -0 and -inf
    (``(-inf) ** 0.5`` is NaN, ``(-0.0) ** -0.5`` is -inf). Arrays or Tensors (create_graph)."""
    if type(e) in (int, float) and getattr(a, "dtype", None) is not None and a.dtype.kind == "f":
        if e == 2:
            return a * a
        if e == 3:
            return a * a * a
        if e == 0.5:
            return np.sqrt(a)
        if e == -0.5:
            return 1.0 / np.sqrt(a)
        if e == -1:
            return 1.0 / a
        if e == -2:
            return 1.0 / (a * a)
    return np.power(a, e)


def _pow_grad_base(g: Any, x: Any, y: Any) -> Any:
    # d(x^y)/dx = y * x^(y-1); 0 where y == 0 (also where x is 0, inf or NaN)
    if isinstance(y, (int, float, np.number)):
        if y == 0:
            return np.zeros_like(g)
        return g * (y * pow_scalar(x, y - 1))  # x^(y-1) as torch evaluates it
    return np.where(y == 0, 0.0, g * (y * x ** (y - 1.0)))


def _pow_grad_exp(g: Any, ans: Any, x: Any, y: Any) -> Any:
    # d(x^y)/dy = x^y log(x); torch takes 0 where x == 0 and y >= 0 (else -inf or NaN there)
    if isinstance(x, (int, float, np.number)):
        if x != 0:
            return g * (ans * np.log(x))
        zero = y >= 0
    else:
        zero = (x == 0) & (y >= 0)
    return g * np.where(zero, 0.0, ans * np.log(x))


def _minmax_grad(g: Any, x: Any, y: Any, loses: Any) -> Any:
    # torch: g, halved at ties, and 0 where the input loses. Where either is NaN (the result is
    # NaN), neither loses: both inputs get g.
    return np.where(loses, 0.0, np.where(x == y, g * 0.5, g))


def _masked(g: Any, keep: Any) -> Any:
    # g where keep, else 0, as torch's where(keep, g, 0): 0 also where g is inf or NaN. On
    # ndarrays g * keep is several times faster than np.where (12 against 50 us for 64 x 256
    # float32) and the same unless the product meets inf * 0 or NaN * 0, which the result shows.
    if type(g) is np.ndarray:
        r = g * keep
        if np.isfinite(r).all():
            return r
    return np.where(keep, g, 0.0)


def _sign(x: Any) -> Any:
    # torch's sign: 0 at NaN (NumPy's is NaN)
    return np.where(np.isnan(x), 0.0, np.sign(x))


def _matmul_grad_x(g: Any, x: Any, y: Any) -> Any:
    if y.ndim == 1:
        if x.ndim == 1:
            return g * y
        return np.expand_dims(g, -1) * y  # (..., n, 1) * (k,)  outer product per row
    if x.ndim == 1:
        # (..., m) @ (..., m, k)^T -> (..., k), summed over batch by _fit
        return np.squeeze(np.matmul(np.expand_dims(g, -2), np.swapaxes(y, -1, -2)), -2)
    return np.matmul(g, np.swapaxes(y, -1, -2))


def _matmul_grad_y(g: Any, x: Any, y: Any) -> Any:
    if x.ndim == 1:
        if y.ndim == 1:
            return g * x
        return np.expand_dims(x, -1) * np.expand_dims(g, -2)  # (k, 1) * (..., 1, m)
    if y.ndim == 1:
        # x^T @ g: (..., k, n) @ (..., n, 1) -> (..., k)
        return np.squeeze(np.matmul(np.swapaxes(x, -1, -2), np.expand_dims(g, -1)), -1)
    return np.matmul(np.swapaxes(x, -1, -2), g)


def _linear_grad_w(g: Any, x: Any) -> Any:
    # g^T x; for batched x the batch axes are summed by _fit. g.T is BLAS's fastest 2-D layout.
    if g.ndim == 2:
        return g.T @ x
    return np.matmul(np.swapaxes(g, -1, -2), x)


def _gelu_grad(g: Any, x: Any, approximate: str) -> Any:
    if approximate == "tanh":
        # y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
        u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        t = np.tanh(u)
        du = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
    # y = x Phi(x): dy/dx = Phi(x) + x phi(x)
    cdf = 0.5 * (1.0 + _erf(x / SQRT_2))
    pdf = INV_SQRT_2PI * np.exp(-0.5 * x * x)
    return g * (cdf + x * pdf)


def _silu_grad(g: Any, x: Any) -> Any:
    s = 0.5 + 0.5 * np.tanh(0.5 * x)  # sigmoid(x), without exp(-x) overflowing for x << 0
    return g * s * (1.0 + x * (1.0 - s))


def _in_range(x: Any, lo: Any, hi: Any) -> Any:
    if lo is None:
        return x <= hi
    if hi is None:
        return x >= lo
    return (x >= lo) & (x <= hi)


def _norm_dims(dim: Any, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    return tuple(d % ndim if ndim else 0 for d in dim)


def _keep(r: Any, dim: Any, keepdim: bool) -> Any:
    """Reinsert the reduced axes (size 1) of a reduction result, so it broadcasts against x."""
    if keepdim:
        return r
    nd = r.ndim + (len(dim) if dim is not None else 0)
    if dim is None:
        return r
    axes = sorted(_norm_dims(dim, nd))
    return np.expand_dims(r, tuple(axes))


def _expand(g: Any, shape: tuple[int, ...], dim: Any, keepdim: bool) -> Any:
    if dim is None:
        return np.broadcast_to(np.reshape(g, (1,) * len(shape)), shape)
    if not keepdim:
        g = np.expand_dims(g, tuple(sorted(_norm_dims(dim, len(shape)))))
    return np.broadcast_to(g, shape)


def _count(shape: tuple[int, ...], dim: Any) -> float:
    n = 1
    for d in _norm_dims(dim, len(shape)):
        n *= shape[d]
    return float(n)


def _extreme_grad(g: Any, ans: Any, x: Any, dim: Any, keepdim: bool, evenly: bool) -> Any:
    # The gradient is shared evenly among the positions that attain the max (min). Where the
    # result is NaN no position equals it, and 0 * (g / 0) makes the whole slice NaN: torch's
    # amax and amin. torch's max() and min() without a dim (``evenly``) share it among the NaNs.
    if dim is None:
        a = np.reshape(ans, (1,) * x.ndim)
        gs = np.reshape(g, (1,) * x.ndim)
        if evenly:
            mask = (x == a) | (np.isnan(x) & np.isnan(a))
            return np.where(mask, gs / np.sum(mask), 0.0)
        mask = x == a
        return mask * (gs / np.sum(mask))
    mask = x == _keep(ans, dim, keepdim)
    count = np.sum(mask, axis=dim, keepdims=True)
    return mask * (_keep(g, dim, keepdim) / count)


def _index_grad(g: Any, indices: Any, shape: tuple[int, ...], dim: int, keepdim: bool) -> Any:
    # max/min along dim with indices: the gradient goes to the selected position only.
    d = dim % len(shape)
    idx = indices if keepdim else np.expand_dims(indices, d)
    rng = np.arange(shape[d]).reshape((-1,) + (1,) * (len(shape) - d - 1))
    onehot = rng == idx
    return np.where(onehot, _keep(g, (d,), keepdim), 0.0)


def _erf(x: Any) -> Any:
    return x.erf() if isinstance(x, Tensor) else backend.erf(x)


def _getitem_grad(g: Any, index: Any, shape: tuple[int, ...]) -> Any:
    # Zeros of the input's shape with g added at index (repeated indices add up).
    if isinstance(g, Tensor):
        return g._index_add_zeros(index, shape)  # recorded, for double backward
    return backend.index_add_zeros(g, index, shape)


def _index_put_self_grad(g: Any, index: Any) -> Any:
    # g with zeros where index_put wrote.
    mask = np.ones(g.shape, dtype=bool)
    mask[index] = False
    return np.where(mask, g, 0)  # not g * mask: inf * 0 is NaN


def _split_grad(g: Any, dim: int, sizes: list[int]) -> list[Any]:
    out = []
    start = 0
    for s in sizes:
        sl = [slice(None)] * g.ndim
        sl[dim] = slice(start, start + s)
        out.append(g[tuple(sl)])
        start += s
    return out


def _unstack_grad(g: Any, dim: int, n: int) -> list[Any]:
    lead = (slice(None),) * dim
    return [g[(*lead, i)] for i in range(n)]


def _cat_grads(gs: list[Any], dim: int, sizes: list[int], shape: tuple[int, ...]) -> Any:
    parts = []
    for g, s in zip(gs, sizes, strict=False):
        if g is None:
            piece_shape = list(shape)
            piece_shape[dim] = s
            parts.append(_zeros_for(gs, tuple(piece_shape)))
        else:
            parts.append(g)
    return np.concatenate(parts, axis=dim)


def _stack_grads(gs: list[Any], dim: int, shape: tuple[int, ...]) -> Any:
    piece = shape[:dim] + shape[dim + 1 :]
    return np.stack([_zeros_for(gs, piece) if g is None else g for g in gs], axis=dim)


def _zeros_for(gs: list[Any], shape: tuple[int, ...]) -> Any:
    ref = next(g for g in gs if g is not None)
    return np.zeros_like(ref, shape=shape)


def _nll_grad(
    g: Any,
    logp: Any,
    target: Any,
    weight: Any,
    reduction: str,
    ignore_index: int,
    denom: float,
    all_valid: bool,
) -> Any:
    # loss_i = -w[t_i] * logp[i, t_i]; grad wrt logp is -w[t_i] on the target column, else 0
    # (also where g is inf or NaN, and in the rows of ignored targets).
    if all_valid and type(logp) is np.ndarray:
        out = np.zeros_like(logp)
        out[np.arange(target.shape[0]), target] = -(g / denom)
        return out
    n_cls = logp.shape[1]
    tgt = np.asarray(target)
    shape = [1] * logp.ndim
    shape[1] = n_cls
    onehot = np.arange(n_cls).reshape(shape) == np.expand_dims(tgt, 1)
    onehot &= np.expand_dims(tgt != ignore_index, 1)
    coef = np.where(tgt == ignore_index, 0.0, 1.0)
    if weight is not None:
        coef = coef * np.asarray(weight)[np.where(tgt == ignore_index, 0, tgt)]
    coef = coef.astype(logp.dtype)
    if reduction == "none":
        scale = np.expand_dims(g * coef, 1)
    else:
        gs = g if reduction == "sum" else g / denom
        scale = np.expand_dims(coef, 1) * np.reshape(gs, (1,) * logp.ndim)
    return np.where(onehot, -scale, 0.0)
