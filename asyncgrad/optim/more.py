"""More of torch.optim: Adamax, NAdam, RAdam, ASGD, Rprop, Adafactor, Muon and LBFGS.

Each follows the single-tensor algorithm of its torch class and the structure of
asyncgrad/optim/optimizers.py: ``_update`` reads the parameter's current values (``old``) and
writes its new ones into ``out`` (See NOTE [Serving while training] there). State keys are
torch's; torch keeps a step count and some scalars (``eta``, ``mu``, ``mu_product``) as 0-d
tensors, asyncgrad as Python numbers (a state dict from torch loads: its 0-d tensors become
numbers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Final

from .. import backend
from .._tensor import Tensor
from ..graph.grad_mode import enable_grad
from .optimizers import (
    Optimizer,
    _check_nonneg,
    _check_unsupported,
    _publish,
    _subtract,
    _weight_decay,
)

__all__ = ["ASGD", "LBFGS", "Adafactor", "Adamax", "Muon", "NAdam", "RAdam", "Rprop"]


def _check_lr(lr: float) -> None:
    if not lr >= 0.0:
        raise ValueError(f"Invalid learning rate: {lr}")


def _check_adam(lr: float, eps: float, betas: tuple[float, float], weight_decay: float) -> None:
    """The arguments of the Adam family (Adamax, NAdam, RAdam), checked in torch's order."""
    _check_lr(lr)
    _check_nonneg("epsilon", eps)
    for i in (0, 1):
        if not 0.0 <= betas[i] < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
    _check_nonneg("weight_decay", weight_decay)


def _norm(a: Any) -> float:
    """The 2-norm of all of ``a``'s elements."""
    return float(backend.namespace(a).sqrt((a * a).sum()))


def _lerp(a: Any, b: Any, w: float) -> None:
    """``a.lerp_(b, w)`` in place: ``a += w * (b - a)``."""
    a += w * (b - a)


def _adam_moments(state: dict[str, Any], g: Any, b1: float, b2: float) -> tuple[Any, Any]:
    """Adam's moment updates in place, as torch's: ``exp_avg.lerp_(g, 1 - b1)`` and
    ``exp_avg_sq = b2 * exp_avg_sq + (1 - b2) * g * g``; returns the two."""
    m, v = state["exp_avg"], state["exp_avg_sq"]
    _lerp(m, g, 1 - b1)
    v *= b2
    v += (1 - b2) * (g * g)
    return m, v


class _ScalarState(Optimizer):
    """An optimizer whose state holds scalars that torch keeps as 0-d tensors: loading a state
    dict turns those into Python numbers first (their shape is not the parameter's)."""

    _scalar_keys: tuple[str, ...] = ()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = {}
        for i, s in state_dict["state"].items():
            state[i] = {
                k: float(v.item()) if k in self._scalar_keys and hasattr(v, "item") else v
                for k, v in s.items()
            }
        super().load_state_dict({**state_dict, "state": state})


class Adamax(Optimizer):
    """Adamax (Kingma & Ba): Adam with the infinity norm of the gradients in place of their
    root mean square, as torch's."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        _check_adam(lr, eps, betas, weight_decay)
        _check_unsupported("Adamax", differentiable=differentiable, capturable=capturable)
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        (b1, b2), eps, wd = group["betas"], group["eps"], group["weight_decay"]
        xp = backend.namespace(old)
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(old)
            state["exp_inf"] = xp.zeros_like(old)
        state["step"] += 1
        if wd:
            g = g + wd * old
        m, u = state["exp_avg"], state["exp_inf"]
        _lerp(m, g, 1 - b1)
        u *= b2
        xp.maximum(u, xp.abs(g) + eps, out=u)
        clr = group["lr"] / (1 - b1 ** state["step"])
        _subtract(old, clr * (m / u), out)


class NAdam(_ScalarState):
    """Adam with Nesterov momentum (Dozat), with torch's momentum schedule (``momentum_decay``)
    and optional decoupled weight decay."""

    _scalar_keys = ("mu_product",)

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check_adam(lr, eps, betas, weight_decay)
        _check_nonneg("momentum_decay", momentum_decay)
        _check_unsupported("NAdam", differentiable=differentiable, capturable=capturable)
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "momentum_decay": momentum_decay,
            "decoupled_weight_decay": decoupled_weight_decay,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        xp = backend.namespace(old)
        if not state:
            state["step"] = 0
            state["mu_product"] = 1.0
            state["exp_avg"] = xp.zeros_like(old)
            state["exp_avg_sq"] = xp.zeros_like(old)
        state["step"] += 1
        t = state["step"]
        old, g = _weight_decay(old, out, g, lr, wd, group["decoupled_weight_decay"])
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * group["momentum_decay"]))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * group["momentum_decay"]))
        state["mu_product"] *= mu
        mu_product = state["mu_product"]
        m, v = _adam_moments(state, g, b1, b2)
        denom = xp.sqrt(v / (1 - b2**t)) + eps
        step = (lr * (1.0 - mu) / (1.0 - mu_product)) * (g / denom)
        step += (lr * mu_next / (1.0 - mu_product * mu_next)) * (m / denom)
        _subtract(old, step, out)


class RAdam(Optimizer):
    """Rectified Adam (Liu et al.): plain momentum steps while the variance of the adaptive
    rate is intractable (``rho_t <= 5``), rectified Adam steps after, as torch's."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check_adam(lr, eps, betas, weight_decay)
        _check_unsupported("RAdam", differentiable=differentiable, capturable=capturable)
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "decoupled_weight_decay": decoupled_weight_decay,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        xp = backend.namespace(old)
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(old)
            state["exp_avg_sq"] = xp.zeros_like(old)
        state["step"] += 1
        t = state["step"]
        old, g = _weight_decay(old, out, g, lr, wd, group["decoupled_weight_decay"])
        m, v = _adam_moments(state, g, b1, b2)
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        corrected = m / bc1
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * (b2**t) / bc2
        if rho_t > 5.0:
            rect = math.sqrt(
                (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
            )
            adaptive = math.sqrt(bc2) / (xp.sqrt(v) + eps)
            _subtract(old, corrected * lr * adaptive * rect, out)
        else:
            _subtract(old, corrected * lr, out)


class ASGD(_ScalarState):
    """Averaged SGD (Polyak & Juditsky) as torch's: a decaying rate ``eta`` and, from step
    ``t0`` on, a running average of the iterates in ``state["ax"]``."""

    _scalar_keys = ("eta", "mu")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        _check_lr(lr)
        _check_nonneg("weight_decay", weight_decay)
        _check_unsupported("ASGD", differentiable=differentiable, capturable=capturable)
        defaults = {
            "lr": lr,
            "lambd": lambd,
            "alpha": alpha,
            "t0": t0,
            "weight_decay": weight_decay,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        lr, lambd = group["lr"], group["lambd"]
        xp = backend.namespace(old)
        if not state:
            state["step"] = 0
            state["eta"] = float(lr)
            state["mu"] = 1.0
            state["ax"] = xp.zeros_like(old)
        state["step"] += 1
        if group["weight_decay"]:
            g = g + group["weight_decay"] * old
        eta = state["eta"]
        xp.multiply(old, 1 - lambd * eta, out=out)
        out -= eta * g
        ax = state["ax"]
        if state["mu"] != 1:
            ax += (out - ax) * state["mu"]
        else:
            ax[...] = out
        t = state["step"]
        state["eta"] = lr / ((1 + lambd * lr * t) ** group["alpha"])
        state["mu"] = 1 / max(1, t - group["t0"])


class Rprop(Optimizer):
    """Resilient backpropagation as torch's: each element's step size grows by ``etas[1]``
    while its gradient keeps its sign and shrinks by ``etas[0]`` when it flips (that step then
    skipped), within ``step_sizes``; the step follows the gradient's sign only."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check_lr(lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        _check_unsupported("Rprop", differentiable=differentiable, capturable=capturable)
        defaults = {
            "lr": lr,
            "etas": tuple(etas),
            "step_sizes": tuple(step_sizes),
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        (etaminus, etaplus), (smin, smax) = group["etas"], group["step_sizes"]
        xp = backend.namespace(old)
        if not state:
            state["step"] = 0
            state["prev"] = xp.zeros_like(old)
            state["step_size"] = xp.full_like(old, group["lr"])
        state["step"] += 1
        sign = xp.sign(g * state["prev"])
        factor = xp.where(sign > 0, etaplus, xp.where(sign < 0, etaminus, 1.0)).astype(old.dtype)
        size = state["step_size"]
        size *= factor
        xp.clip(size, smin, smax, out=size)
        g = xp.where(factor == etaminus, 0, g).astype(old.dtype)
        _subtract(old, xp.sign(g) * size, out)
        state["prev"][...] = g


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern) as torch's: the second moment of a matrix's gradients kept
    as row and column factors (``row_var``, ``col_var``) over its last two dims, a relative
    step size and update clipping (``d``)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple[float | None, float] = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
    ) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        defaults = {
            "lr": lr,
            "beta2_decay": beta2_decay,
            "eps": tuple(eps),
            "d": d,
            "weight_decay": weight_decay,
            "foreach": foreach,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        lr, wd = group["lr"], group["weight_decay"]
        eps1, eps2 = group["eps"]
        xp = backend.namespace(old)
        if eps1 is None:
            eps1 = float(xp.finfo(old.dtype).eps)
        if not state:
            state["step"] = 0
            if old.ndim > 1:
                state["row_var"] = xp.zeros((*old.shape[:-1], 1), old.dtype)
                state["col_var"] = xp.zeros((*old.shape[:-2], 1, old.shape[-1]), old.dtype)
            else:
                state["variance"] = xp.zeros_like(old)
        state["step"] += 1
        t = float(state["step"])
        one_minus_beta2 = t ** group["beta2_decay"]
        rho = min(lr, 1 / t**0.5)
        alpha = max(eps2, _norm(old) / old.size**0.5) * rho
        if wd:
            xp.multiply(old, 1 - lr * wd, out=out)
            old = out
        if old.ndim > 1:
            row, col = state["row_var"], state["col_var"]
            _lerp(row, (g * g).mean(axis=-1, keepdims=True), one_minus_beta2)
            _lerp(col, (g * g).mean(axis=-2, keepdims=True), one_minus_beta2)
            var = row @ col
            var /= xp.maximum(row.mean(axis=-2, keepdims=True), eps1)
        else:
            _lerp(state["variance"], g * g, one_minus_beta2)
            var = state["variance"].copy()
        update = g / xp.sqrt(xp.maximum(var, eps1 * eps1))
        denom = max(1.0, _norm(update) / (update.size**0.5 * group["d"]))
        _subtract(old, (alpha / denom) * update, out)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # row_var and col_var have the factor shapes, not the parameter's: set them aside so
        # the base class's shape check sees only what has the parameter's shape.
        factors: dict[Any, dict[str, Any]] = {}
        state: dict[Any, dict[str, Any]] = {}
        for i, s in state_dict["state"].items():
            factors[i] = {k: v for k, v in s.items() if k in ("row_var", "col_var")}
            state[i] = {
                k: (int(v.item()) if k == "step" and hasattr(v, "item") else v)
                for k, v in s.items()
                if k not in ("row_var", "col_var")
            }
        super().load_state_dict({**state_dict, "state": state})
        params = [p for g in self.param_groups for p in g["params"]]
        for i, f in factors.items():
            p = params[int(i)]
            for k, v in f.items():
                arr = v._array if isinstance(v, Tensor) else v
                self.state[p][k] = backend.namespace(p._array).asarray(arr, p.dtype).copy()


# Torch's Newton-Schulz coefficients and defaults for Muon.
_MUON_EPS: Final = 1e-7


def _newton_schulz(g: Any, coefficients: tuple[float, float, float], steps: int, eps: float) -> Any:
    """An approximately orthogonalised ``g``: torch's quintic Newton-Schulz iteration (in the
    parameter's dtype; torch iterates in bfloat16, which NumPy does not have)."""
    if steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if g.ndim != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = coefficients
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / max(_norm(x), eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if g.shape[0] > g.shape[1] else x


class Muon(Optimizer):
    """Muon (Jordan et al.) as torch's: momentum (Nesterov by default) whose update is
    orthogonalised by a Newton-Schulz iteration, for 2-D parameters, with decoupled weight
    decay and torch's learning-rate adjustments (``adjust_lr_fn``)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
        eps: float = _MUON_EPS,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
    ) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn is not None and adjust_lr_fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        defaults = {
            "lr": lr,
            "weight_decay": weight_decay,
            "momentum": momentum,
            "nesterov": nesterov,
            "ns_coefficients": tuple(ns_coefficients),
            "eps": eps,
            "ns_steps": ns_steps,
            "adjust_lr_fn": adjust_lr_fn,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(
                        "Muon only supports 2D parameters whereas we found a parameter with "
                        f"size: {p.size()}"
                    )

    def _update(
        self, p: Tensor, old: Any, out: Any, g: Any, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        lr, mom = group["lr"], group["momentum"]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = backend.namespace(old).zeros_like(old)
        buf = state["momentum_buffer"]
        _lerp(buf, g, 1 - mom)
        update = g + mom * (buf - g) if group["nesterov"] else buf
        update = _newton_schulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
        rows, cols = old.shape[:2]
        fn = group["adjust_lr_fn"]
        if fn is None or fn == "original":
            ratio = math.sqrt(max(1, rows / cols))
        elif fn == "match_rms_adamw":
            ratio = 0.2 * math.sqrt(max(rows, cols))
        else:
            ratio = 1.0
        backend.namespace(old).multiply(old, 1 - lr * group["weight_decay"], out=out)
        out -= (lr * ratio) * update.astype(old.dtype, copy=False)


# ----------------------------------------------------------------------------- L-BFGS
def _cubic_interpolate(
    x1: float,
    f1: float,
    g1: float,
    x2: float,
    f2: float,
    g2: float,
    bounds: tuple[float, float] | None = None,
) -> float:
    """The minimiser of the cubic through two points with their slopes, within ``bounds``
    (torch's port of torch7's polyinterp)."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = math.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, lo), hi)
    return (lo + hi) / 2.0


def _strong_wolfe(
    obj_func: Callable[[list[Any], float, Any], tuple[float, Any]],
    x: list[Any],
    t: float,
    d: Any,
    f: float,
    g: Any,
    gtd: float,
    c1: float = 1e-4,
    c2: float = 0.9,
    tolerance_change: float = 1e-9,
    max_ls: int = 25,
) -> tuple[float, Any, float, int]:
    """torch's strong-Wolfe line search (a port of torch7's lswolfe): bracket, then zoom."""
    xp = backend.namespace(d)
    d_norm = float(xp.abs(d).max())
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = float(xp.dot(g_new, d))
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    ls_iter = 0
    bracket: list[float] = []
    bracket_f: list[float] = []
    bracket_g: list[Any] = []
    bracket_gtd: list[float] = []
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, (min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = float(xp.dot(g_new, d))
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0.0, t], [f, f_new], [g, g_new]
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(
            bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]
        )
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = float(xp.dot(g_new, d))
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


class LBFGS(Optimizer):
    """L-BFGS as torch's (a port of torch7's optim.lbfgs): ``step(closure)`` runs up to
    ``max_iter`` iterations, each calling ``closure`` (which recomputes the loss and its
    gradients) at least once; ``line_search_fn="strong_wolfe"`` picks each step length by a
    strong-Wolfe line search. One parameter group only. Each parameter update publishes a new
    array (See NOTE [Serving while training] in asyncgrad/optim/optimizers.py)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        _check_lr(lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {
            "lr": lr,
            "max_iter": max_iter,
            "max_eval": max_eval,
            "tolerance_grad": tolerance_grad,
            "tolerance_change": tolerance_change,
            "history_size": history_size,
            "line_search_fn": line_search_fn,
        }
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params: list[Tensor] = self.param_groups[0]["params"]

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: the one state (of the first parameter), its arrays as Tensor copies,
        lists of arrays as lists of Tensors."""
        sd = super().state_dict()
        for s in sd["state"].values():
            for k, v in s.items():
                if isinstance(v, list):
                    s[k] = [Tensor(a.copy()) if hasattr(a, "shape") else a for a in v]
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self._params):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of "
                "optimizer's group"
            )
        xp = backend.namespace(self._params[0]._array)

        def array(v: Any) -> Any:
            if isinstance(v, Tensor) or backend.is_array(v):
                a = v._array if isinstance(v, Tensor) else v
                return xp.asarray(backend.to_device(a, self._params[0].device)).copy()
            return v

        saved = state_dict["state"]
        first = saved.get(groups[0]["params"][0], saved.get(str(groups[0]["params"][0])))
        self.state = {}
        if first is not None:
            self.state[self._params[0]] = {
                k: [array(a) for a in v] if isinstance(v, list) else array(v)
                for k, v in first.items()
            }
        self.param_groups[0].update({k: v for k, v in groups[0].items() if k != "params"})

    def _gather_flat_grad(self) -> Any:
        xp = backend.namespace(self._params[0]._array)
        views = [
            xp.zeros(p.numel(), p.dtype) if p.grad is None else p.grad._array.reshape(-1)
            for p in self._params
        ]
        return xp.concatenate(views)

    def _assign(self, p: Tensor, values: Any) -> None:
        values = values.astype(p.dtype, copy=False)
        if p._base is not None:  # a view: its base must see the update, in place
            p._array[...] = values
            p._vc[0] += 1
        else:
            _publish(p, values)

    def _add_grad(self, step_size: float, update: Any) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            piece = update[offset : offset + n].reshape(p._array.shape)
            self._assign(p, p._array + step_size * piece)
            offset += n

    def _clone_param(self) -> list[Any]:
        return [p._array.copy() for p in self._params]

    def _set_param(self, params_data: list[Any]) -> None:
        for p, data in zip(self._params, params_data, strict=True):
            self._assign(p, data.copy())

    def _directional_evaluate(
        self, closure: Callable[[], Any], x: list[Any], t: float, d: Any
    ) -> tuple[float, Any]:
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run up to ``max_iter`` L-BFGS iterations; ``closure`` is required."""
        if closure is None:
            raise RuntimeError("LBFGS requires a closure that reevaluates the model")
        user_closure = closure

        def closure_with_grad() -> Any:
            with enable_grad():
                return user_closure()

        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        xp = backend.namespace(self._params[0]._array)

        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = closure_with_grad()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if float(xp.abs(flat_grad).max()) <= tolerance_grad:
            return orig_loss

        d: Any = state.get("d")
        t: Any = state.get("t")
        old_dirs: Any = state.get("old_dirs")
        old_stps: Any = state.get("old_stps")
        ro: Any = state.get("ro")
        h_diag: Any = state.get("H_diag")
        prev_flat_grad: Any = state.get("prev_flat_grad")
        prev_loss: Any = state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                h_diag = 1.0
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = float(xp.dot(y, s))
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / float(xp.dot(y, y))
                num_old = len(old_dirs)
                if "al" not in state:
                    state["al"] = [None] * history_size
                al = state["al"]
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = float(xp.dot(old_stps[i], q)) * ro[i]
                    q -= al[i] * old_dirs[i]
                d = r = q * h_diag
                for i in range(num_old):
                    be_i = float(xp.dot(old_dirs[i], r)) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / float(xp.abs(flat_grad).sum())) * lr
            else:
                t = lr
            gtd = float(xp.dot(flat_grad, d))
            if gtd > -tolerance_change:
                break
            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = self._clone_param()

                def obj_func(x: list[Any], t: float, d: Any) -> tuple[float, Any]:
                    return self._directional_evaluate(closure_with_grad, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add_grad(t, d)
                opt_cond = float(xp.abs(flat_grad).max()) <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    loss = float(closure_with_grad())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = float(xp.abs(flat_grad).max()) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if float(xp.abs(d * t).max()) <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state["d"] = d
        state["t"] = t
        state["old_dirs"] = old_dirs
        state["old_stps"] = old_stps
        state["ro"] = ro
        state["H_diag"] = h_diag
        state["prev_flat_grad"] = prev_flat_grad
        state["prev_loss"] = prev_loss
        return orig_loss
