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
from typing import Any, Final

from .. import backend
from .._tensor import Tensor
from ..backend import cuda
from ..graph.grad_mode import enable_grad
from ..graph.inference import check_writable

# NOTE [Serving while training]
# A server may run requests (a forward, then `await ag.grad(...)`) while a trainer steps the same
# model: in the same event loop, or with forwards on other threads (`ag.run`, a Coalescer's
# forwards off the loop, a user's thread). The rule: **a step never writes into an array that a
# reader may hold; it publishes new values in an array of their own.**
#
# * The step. For each parameter ``p`` it computes the update into an array nobody else can
#   reach (the parameter's spare, see below, or a new one), then publishes it: the pair (id of
#   the new array, a new version counter one past the old version) goes into ``p``'s
#   ``published`` pairs (its _Meta), then ``p`` is bound to the array, then to the counter. The
#   arrays readers took before keep their values and their version counters, untouched: a
#   forward running on another thread reads either the old weights or the new ones, never half
#   of each (a multi-kernel update such as Adam's releases the GIL between kernels, and its
#   partial results are never where a reader looks).
# * The readers. An op reads each input's array once, when it starts, and recording saves that
#   array (``make``'s ``arrays``, See asyncgrad/ops/_record.py), not whatever the tensor holds
#   by then: a step that publishes while a forward's matmul runs leaves that forward's saved
#   weights the ones it multiplied by. The version counter saved with the array is the one the
#   step published it with (``version_counter_of`` in graph/saved_tensor.py reads the published
#   pairs, in the order opposite to the step's writes, so that a step on another thread at any
#   moment yields a consistent pair). So every gradient is the exact gradient of the forward
#   that was computed, at the weights it used. A forward reads each parameter when its op runs:
#   a step between two layers gives it the old weights of one and the new of the other (it is
#   still the exact gradient of what it computed); a model-wide consistent version is a
#   snapshot (``copy.deepcopy``, as examples/server does).
# * What stays as it was. Everything that held the old array keeps it, with its old values and
#   at its old version: a graph's saved tensors, views of ``p`` and detached tensors made before
#   the step (``p.t()``, ``p[0]``, ``p.detach()``, ``model.state_dict()``), arrays users hold
#   (``p.array``, ``p.numpy(force=True)``). Only what is made from ``p`` after the step sees the
#   new values. The arithmetic is torch's, so the new values are bit for bit the same as an
#   in-place update's, and ``p``'s version goes up by one.
# * The difference from torch. torch always updates in place: a graph recorded before the step
#   raises "modified by an inplace operation" at its backward, a view, detached tensor or
#   state_dict taken before the step sees the new values, and a forward on another thread may
#   read half-updated weights. Here the graph backpropagates with the weights its forward used,
#   and those views stay snapshots. A parameter that is itself a view of another tensor
#   (``p._base`` is set) is updated in place, so that its base sees the update, as in torch (its
#   readers on other threads are then not protected).
# * The cost. The update reads one array and writes another, not the same one (plain SGD on a
#   784-256-256-10 MLP: the step took 77-79 µs in place, 78-107 µs this way), and about 1 µs of
#   Python per parameter; no allocation in a plain loop: on the CPU, the array a step
#   replaced becomes the parameter's spare, reused by the next step when nothing holds it any
#   more (``sys.getrefcount``), so a plain loop alternates between two arrays. That spare is one
#   more copy of the parameters in memory. A graph kept with ``retain_graph=True``, a stray view
#   or a reference cycle not yet collected makes the next step allocate instead. CUDA arrays
#   come from CuPy's pool each step (the pool keeps the freed ones): no spare is kept there.
# * Saved leaves. A SavedTensor keeps the leaf tensor itself as well as its array (See
#   asyncgrad/graph/saved_tensor.py); once the step has rebound the leaf, unpacking (custom
#   Functions, create_graph) gives a tensor over the saved array that feeds the leaf's own
#   AccumulateGrad, so higher-order gradients still reach the parameter.
# * A user's own in-place op (`w.mul_(2)` under no_grad, `load_state_dict`) still modifies the
#   shared array and bumps the shared version counter, so a pending backward that saved it
#   raises, as in torch; it is not protected from readers on other threads (torch's isn't
#   either). ``p.data = ...`` and ``module.to(...)`` rebind the array without a step: the
#   published pairs are dropped with it.
_KEEP_PUBLISHED: Final = 8  # how many (array id, counter) pairs a parameter keeps


def _refs(a: Any) -> int:
    return sys.getrefcount(a)


def _probe_refs() -> int:
    spare = Tensor([0.0])._array.copy()
    return _refs(spare)


# What _refs() gives for an array held only by the caller's local variable (measured with the
# same calls, so it holds across Python versions and builds).
_UNHELD_REFS: Final = _probe_refs()


def _publish(p: Tensor, new: Any) -> None:
    """Bind parameter ``p`` to array ``new`` at one version past its current one (See NOTE
    [Serving while training]): the published pair first, then the array, then the counter."""
    old_vc = p._vc
    if type(old_vc) is not list:  # See NOTE [Inference tensors] in graph/inference.py
        check_writable(p)
        old_vc[0] += 1  # inside inference mode: it stays an inference tensor
        p._array = new
        return
    m = p._get_meta()
    old = p._array
    vc = [old_vc[0] + 1]
    keep: list[tuple[int, list[int]]] = [(id(new), vc), (id(old), old_vc)]
    for pair in m.published or ():
        if pair[0] != keep[0][0] and pair[0] != keep[1][0] and len(keep) < _KEEP_PUBLISHED:
            keep.append(pair)
    m.published = tuple(keep)
    p._array = new
    p._vc = vc


def _subtract(old: Any, x: Any, out: Any) -> None:
    """``out = old - x`` (in place where ``out`` is ``old``)."""
    backend.namespace(old).subtract(old, x, out=out)


def _weight_decay(
    old: Any, out: Any, g: Any, lr: float, wd: float, decoupled: bool
) -> tuple[Any, Any]:
    """Weight decay ``wd`` before a step, returning ``(old, g)`` for the step to go on from:
    decoupled, ``out = old * (1 - lr * wd)`` and the step goes on from ``out`` (never the
    parameter's array, See NOTE [Serving while training]); else ``g + wd * old``."""
    if not wd:
        return old, g
    if decoupled:
        backend.namespace(old).multiply(old, 1 - lr * wd, out=out)
        return out, g
    return old, g + wd * old


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
        # Per parameter, the array its last step replaced (See NOTE [Serving while training]).
        self._spares: dict[Tensor, Any] = {}
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
        for group in self.param_groups:  # refused before any state changes
            for p in group["params"]:
                if type(p._vc) is not list and p.grad is not None:
                    check_writable(p)  # See NOTE [Inference tensors] in graph/inference.py
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
                    state = self.state.setdefault(p, {})
                    old = p._array
                    if p._base is not None:  # a view: its base must see the update, in place
                        self._update(p, old, old, g, state, group)
                        p._vc[0] += 1
                    else:  # See NOTE [Serving while training]
                        out = self._unheld_spare(p, old)
                        self._update(p, old, out, g, state, group)
                        _publish(p, out)
                        if type(old) is backend.ndarray and old.base is None:
                            self._spares[p] = old
                finally:
                    if prev >= 0:
                        cuda.use_device(prev)
        return loss

    def _unheld_spare(self, p: Tensor, old: Any) -> Any:
        """An array for ``p``'s next values that nothing but this step can reach: its spare when
        nothing holds that any more, else a new one (See NOTE [Serving while training])."""
        spare = self._spares.pop(p, None)
        if (
            spare is not None
            and _refs(spare) == _UNHELD_REFS
            and spare.shape == old.shape
            and spare.dtype == old.dtype
            and spare.strides == old.strides
        ):
            return spare
        return backend.namespace(old).empty_like(old)

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        """Write ``p``'s updated values into ``out``: ``old`` holds its current values, which
        the update only reads (``out`` is ``old`` for an in-place update)."""
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

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        wd, mom = group["weight_decay"], group["momentum"]
        if wd:
            g = g + wd * old
        if mom:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = g.copy()
            else:
                buf *= mom
                buf += (1 - group["dampening"]) * g
            g = g + mom * buf if group["nesterov"] else buf
        lr = group["lr"]
        if (
            out is not old
            and type(out) is type(g)
            and out.shape == g.shape
            and out.dtype == g.dtype
        ):
            # ``lr * g`` into ``out``, then ``old - out``: the same roundings, no temporary
            backend.namespace(g).multiply(g, lr, out=out)
            _subtract(old, out, out)
        else:
            _subtract(old, lr * g, out)


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

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
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
        old, g = _weight_decay(old, out, g, lr, wd, self._decoupled)
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
        _subtract(old, (lr / (1 - b1**t)) * (m / denom), out)


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

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
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
            g = g + wd * old
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
            _subtract(old, group["lr"] * buf, out)
        else:
            _subtract(old, group["lr"] * (g / avg), out)


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

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        if not state:  # a group added after construction
            state["step"] = 0
            state["sum"] = backend.full_like(p._array, group["initial_accumulator_value"])
        state["step"] += 1
        if group["weight_decay"]:
            g = g + group["weight_decay"] * old
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        acc = state["sum"]
        acc += g * g
        _subtract(old, clr * (g / (backend.namespace(acc).sqrt(acc) + group["eps"])), out)


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

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        rho, eps = group["rho"], group["eps"]
        xp = backend.namespace(p._array)
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(p._array)
            state["acc_delta"] = xp.zeros_like(p._array)
        state["step"] += 1
        if group["weight_decay"]:
            g = g + group["weight_decay"] * old
        sq, acc = state["square_avg"], state["acc_delta"]
        sq *= rho
        sq += (1 - rho) * (g * g)
        delta = xp.sqrt(acc + eps) / xp.sqrt(sq + eps) * g
        acc *= rho
        acc += (1 - rho) * (delta * delta)
        _subtract(old, group["lr"] * delta, out)
