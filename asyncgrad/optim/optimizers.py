"""Optimizers: torch's update rules, applied to the parameters' arrays.

The updates follow the algorithms documented for ``torch.optim`` (single-tensor, non-fused
versions). A step updates a parameter's array in place unless something else may still read
that array, such as a recorded graph whose backward has not run yet; then it gives the parameter
a new array instead (See NOTE [Serving while training]).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .. import backend
from .._tensor import Tensor
from ..backend import cuda
from ..graph.grad_mode import enable_grad


# NOTE [Serving while training]
# A server may run requests (forward, then `await ag.grad(...)`) while a trainer steps the same
# model in the same event loop. A request's graph saves the weights its forward read; its
# backward may run after an optimizer step. torch updates in place and that backward raises
# "modified by an inplace operation". Here the step checks each parameter first:
#
# * The rule. A step updates parameter `p` in place when nothing but `p` refers to `p`'s array
#   (the reference count says so, and the array owns its memory). Otherwise it first binds `p`
#   to a copy of its array and to a new version counter, then updates that copy in place.
#   Everything that held the old array keeps it, with its old values and at its old version:
#   a graph's saved tensors (whose backward then computes the exact gradient of the forward it
#   recorded, with the weights that forward used), views of `p` and detached tensors made
#   before the step (`p.t()`, `p[0]`, `p.detach()`, `model.state_dict()`), and arrays users
#   hold (`p.array`, `p.numpy(force=True)`). Either way the new values are bit for bit the
#   same, the arithmetic being the same, and `p`'s version goes up by one.
# * The difference from torch: torch always updates in place, so a stale graph raises and a
#   view, detached tensor or state_dict taken before the step sees the new values. Here those
#   stay as they were when the step found the parameter's array held (a snapshot), and only
#   what is made from `p` after the step shares its new array. A parameter that is itself a
#   view of another tensor (`p._base` is set) is always updated in place, so that its base
#   sees the update, as in torch.
# * Who may hold the array. A saved tensor holds the array it saved; a view's NumPy (or CuPy)
#   array holds its base array through `.base`, so views count too. A parameter's array that
#   is itself a view (`.base` set, e.g. made by `from_numpy` on a slice) has views that hold
#   the base array instead, invisible in its own count: it is treated as shared, copied once,
#   and owns its memory from then on. The optimizer's own state (momentum buffers, Adam's
#   moments) and `p.grad` are separate arrays and don't count.
# * The cost. In a plain loop (`zero_grad`, forward, `backward()`, `step()`) backward has
#   released the saved tensors before the step, so the count is 1 and the step allocates no
#   new parameter array (`p._array` stays the same object). The check is `sys.getrefcount`
#   per parameter per step, nothing on the forward or backward path. A graph kept with
#   `retain_graph=True`, a stray view, or a reference cycle not yet collected costs one copy
#   of that parameter per step while it lives, never a wrong value.
# * Saved leaves. A SavedTensor keeps the leaf tensor itself as well as its array (See
#   asyncgrad/graph/saved_tensor.py); once the step has rebound the leaf, unpacking (custom
#   Functions, create_graph) gives a tensor over the saved array that feeds the leaf's own
#   AccumulateGrad, so higher-order gradients still reach the parameter.
# * A user's own in-place op (`w.mul_(2)` under no_grad, `load_state_dict`) still modifies the
#   shared array and bumps the shared version counter, so a pending backward that saved it
#   raises, as in torch. CUDA arrays follow the same rule (CuPy views hold `.base` too; the
#   copy runs on the current stream, ahead of the update).
def _array_refs(t: Tensor) -> int:
    return sys.getrefcount(t._array)


# What _array_refs() gives for a tensor whose array nothing else refers to (measured with the
# same call, so it holds across Python versions).
_SOLE_REFS = _array_refs(Tensor([0.0]))


def _detach_if_shared(p: Tensor) -> None:
    """Before a step: bind ``p`` to a copy of its array and a new version counter when anything
    besides ``p`` may read its array (See NOTE [Serving while training])."""
    if p._base is None and (p._array.base is not None or _array_refs(p) > _SOLE_REFS):
        p._array = p._array.copy()
        p._vc = [p._vc[0]]


class Optimizer:
    """Holds parameter groups (dicts with ``params`` and hyperparameters) and per-parameter
    state. ``params`` is an iterable of tensors, or of dicts that each define a group."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or "
                f"dicts, but got {type(params).__name__}"
            )
        self.defaults = defaults
        self.state: dict[Tensor, dict[str, Any]] = {}  # keyed by the parameter itself
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        group = dict(param_group)
        params = group.get("params")
        if params is None:
            raise ValueError("a parameter group needs a 'params' entry")
        params = [params] if isinstance(params, Tensor) else list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"optimizer can only optimize Tensors, but parameter {i} is a "
                    f"{type(p).__name__}"
                )
            if not p.is_leaf:
                raise ValueError(
                    f"can't optimize a non-leaf Tensor (parameter {i}, of shape "
                    f"{tuple(p.shape)}, made by {p.grad_fn.name() if p.grad_fn else 'a view'})"
                )
            if p.dtype.kind not in "fc":
                raise ValueError(f"can't optimize parameter {i}: its dtype {p.dtype} is not float")
        ids = [id(p) for p in params]
        taken = {id(p) for g in self.param_groups for p in g["params"]}
        if len(set(ids)) != len(ids) or taken.intersection(ids):
            raise ValueError("some parameters appear more than once in the optimizer's groups")
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self._check_group(group)
        group["params"] = params
        self.param_groups.append(group)

    def _check_group(self, group: dict[str, Any]) -> None:
        lr = group["lr"]
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        wd = group.get("weight_decay", 0.0)
        if not wd >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {wd}")

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    g = p.grad
                    if g.grad_fn is not None:
                        p.grad = g = g.detach()
                    backend.assign(g._array, 0)
                    g._vc[0] += 1

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; ``closure`` (re-evaluating the loss,
        with grad enabled) is called first when given, and its result returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                # Its update's kernels run on its device (See NOTE [Ops run on their operands'
                # device] in asyncgrad/ops/device_guard.py).
                prev = cuda.use_device_of(p._array)
                try:
                    g = p.grad._array
                    if group.get("maximize", False):
                        g = -g
                    _detach_if_shared(p)
                    self._update(p, g, self.state.setdefault(p, {}), group)
                finally:
                    if prev >= 0:
                        cuda.use_device(prev)
                p._vc[0] += 1
        return loss

    def _update(self, p: Tensor, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {name: value}}, "param_groups": [...]}``, parameters numbered
        across groups in order, arrays as Tensor copies (as in torch)."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state:
                    state[index[id(p)]] = {
                        k: Tensor(v.copy()) if hasattr(v, "shape") else v
                        for k, v in self.state[p].items()
                    }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(
                f"loaded state dict has {len(groups)} parameter groups, the optimizer has "
                f"{len(self.param_groups)}"
            )
        params: list[tuple[int, Tensor]] = []
        for saved, group in zip(groups, self.param_groups, strict=True):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't match the size "
                    "of optimizer's group"
                )
            params.extend(zip(saved["params"], group["params"], strict=True))
        new_state: dict[Tensor, dict[str, Any]] = {}
        saved_state = state_dict["state"]
        for i, p in params:
            s = saved_state.get(i, saved_state.get(str(i)))
            if s is None:
                continue
            new_state[p] = {}
            for k, v in s.items():
                if isinstance(v, Tensor) or backend.is_array(v):
                    arr = v._array if isinstance(v, Tensor) else v
                    if k != "step" and tuple(arr.shape) != tuple(p.shape):
                        raise ValueError(
                            f"state {k!r} of parameter {i} has shape {tuple(arr.shape)}, "
                            f"the parameter has shape {tuple(p.shape)}"
                        )
                    v = arr.astype(p.dtype) if k != "step" else arr.item()
                new_state[p][k] = v.copy() if backend.is_array(v) else v
        for saved, group in zip(groups, self.param_groups, strict=True):
            group.update({k: v for k, v in saved.items() if k != "params"})
        self.state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        return "\n".join([*lines, ")"])


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov and weight decay (torch's)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not momentum >= 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(self, p: Tensor, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        wd, mom = group["weight_decay"], group["momentum"]
        if wd:
            g = g + wd * p._array
        if mom:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = g.copy()
            else:
                buf *= mom
                buf += (1 - group["dampening"]) * g
            g = g + mom * buf if group["nesterov"] else buf
        p._array -= group["lr"] * g


class Adam(Optimizer):
    """Adam (Kingma & Ba) with torch's defaults, bias correction and ``amsgrad`` option.
    ``weight_decay`` is L2 regularisation added to the gradient (see AdamW for decoupled)."""

    _decoupled = False

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not eps >= 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i in (0, 1):
            if not 0.0 <= betas[i] < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(self, p: Tensor, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        if not state:
            state["step"] = 0
            xp = backend.namespace(p._array)
            state["exp_avg"] = xp.zeros_like(p._array)
            state["exp_avg_sq"] = xp.zeros_like(p._array)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = xp.zeros_like(p._array)
        state["step"] += 1
        t = state["step"]
        if wd:
            if self._decoupled:
                p._array *= 1 - lr * wd
            else:
                g = g + wd * p._array
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * (g * g)
        if group["amsgrad"]:
            xp = backend.namespace(v)
            xp.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
            v = state["max_exp_avg_sq"]
        denom = backend.namespace(v).sqrt(v) / math.sqrt(1 - b2**t) + eps
        p._array -= (lr / (1 - b1**t)) * (m / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p *= 1 - lr * weight_decay``
    before the Adam step, instead of adding ``weight_decay * p`` to the gradient."""

    _decoupled = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)


def _check_nonneg(name: str, value: float) -> None:
    if not value >= 0.0:
        raise ValueError(f"Invalid {name} value: {value}")


def _check_unsupported(name: str, **flags: Any) -> None:
    """torch's implementation switches that change what a step does: refused, not ignored
    (``foreach``, which only changes how torch batches its kernels, is accepted)."""
    for flag, value in flags.items():
        if value:
            raise NotImplementedError(
                f"{name}({flag}=True) is not supported: asyncgrad's optimizers update the "
                "parameters' arrays outside the graph, one parameter at a time"
            )


class RMSprop(Optimizer):
    """RMSprop as torch's: a running mean of squared gradients (``alpha``) scales the step;
    ``centered`` subtracts the squared running mean of the gradients; optional momentum and
    L2 ``weight_decay``."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        _check_nonneg("epsilon", eps)
        _check_nonneg("momentum", momentum)
        _check_nonneg("weight_decay", weight_decay)
        _check_nonneg("alpha", alpha)
        _check_unsupported("RMSprop", capturable=capturable, differentiable=differentiable)
        defaults = {
            "lr": lr,
            "alpha": alpha,
            "eps": eps,
            "weight_decay": weight_decay,
            "momentum": momentum,
            "centered": centered,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(self, p: Tensor, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        alpha, eps, wd, mom = group["alpha"], group["eps"], group["weight_decay"], group["momentum"]
        xp = backend.namespace(p._array)
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(p._array)
            if mom > 0:
                state["momentum_buffer"] = xp.zeros_like(p._array)
            if group["centered"]:
                state["grad_avg"] = xp.zeros_like(p._array)
        state["step"] += 1
        if wd:
            g = g + wd * p._array
        sq = state["square_avg"]
        sq *= alpha
        sq += (1 - alpha) * (g * g)
        if group["centered"]:
            ga = state["grad_avg"]
            ga += (1 - alpha) * (g - ga)
            avg = xp.sqrt(sq - ga * ga) + eps
        else:
            avg = xp.sqrt(sq) + eps
        if mom > 0:
            buf = state["momentum_buffer"]
            buf *= mom
            buf += g / avg
            p._array -= group["lr"] * buf
        else:
            p._array -= group["lr"] * (g / avg)


class Adagrad(Optimizer):
    """Adagrad as torch's: each step divides by the root of the summed squared gradients,
    with the rate decayed as ``lr / (1 + (step - 1) * lr_decay)``. As torch, the state (``sum``
    from ``initial_accumulator_value``, ``step`` 0) exists from construction."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        _check_nonneg("lr_decay", lr_decay)
        _check_nonneg("weight_decay", weight_decay)
        _check_nonneg("initial_accumulator_value", initial_accumulator_value)
        _check_nonneg("epsilon", eps)
        _check_unsupported("Adagrad", differentiable=differentiable, fused=fused)
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "eps": eps,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "maximize": maximize,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p] = {
                    "step": 0,
                    "sum": backend.full_like(p._array, group["initial_accumulator_value"]),
                }

    def _update(self, p: Tensor, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        if not state:  # a group added after construction
            state["step"] = 0
            state["sum"] = backend.full_like(p._array, group["initial_accumulator_value"])
        state["step"] += 1
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p._array
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        acc = state["sum"]
        acc += g * g
        p._array -= clr * (g / (backend.namespace(acc).sqrt(acc) + group["eps"]))


class Adadelta(Optimizer):
    """Adadelta as torch's: running means of squared gradients and of squared updates
    (``rho``) set each step's size, scaled by ``lr`` (1.0 by default)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check_nonneg("epsilon", eps)
        _check_nonneg("weight_decay", weight_decay)
        _check_unsupported("Adadelta", capturable=capturable, differentiable=differentiable)
        defaults = {
            "lr": lr,
            "rho": rho,
            "eps": eps,
            "weight_decay": weight_decay,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(self, p: Tensor, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        rho, eps = group["rho"], group["eps"]
        xp = backend.namespace(p._array)
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(p._array)
            state["acc_delta"] = xp.zeros_like(p._array)
        state["step"] += 1
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p._array
        sq, acc = state["square_avg"], state["acc_delta"]
        sq *= rho
        sq += (1 - rho) * (g * g)
        delta = xp.sqrt(acc + eps) / xp.sqrt(sq + eps) * g
        acc *= rho
        acc += (1 - rho) * (delta * delta)
        p._array -= group["lr"] * delta
