"""Optimizers: they update parameters in place, under no_grad, with NumPy."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..tensor import Tensor


class Optimizer:
    def __init__(self, params: Iterable[Tensor], defaults: dict[str, Any]) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor) or not p.is_leaf:
                raise ValueError(f"can't optimize a non-leaf Tensor (parameter {i})")
        self.defaults = defaults
        self.state: dict[int, dict[str, Any]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad._array.fill(0)

    def step(self) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {
            "defaults": dict(self.defaults),
            "state": {i: {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in s.items()}
                      for i, s in self.state.items()},
        }


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov and weight decay (torch's)."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def step(self) -> None:
        d = self.defaults
        lr, mom, damp, wd, nest = d["lr"], d["momentum"], d["dampening"], d["weight_decay"], d["nesterov"]
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad._array
            if wd:
                g = g + wd * p._array
            if mom:
                st = self.state.setdefault(i, {})
                buf = st.get("momentum_buffer")
                if buf is None:
                    buf = st["momentum_buffer"] = np.array(g, copy=True)
                else:
                    buf *= mom
                    buf += (1 - damp) * g
                g = g + mom * buf if nest else buf
            p._array -= lr * g
            p._vc[0] += 1


class Adam(Optimizer):
    """Adam (Kingma & Ba), with torch's defaults and bias correction."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def step(self) -> None:
        d = self.defaults
        lr, (b1, b2), eps, wd = d["lr"], d["betas"], d["eps"], d["weight_decay"]
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad._array
            if wd:
                g = g + wd * p._array
            st = self.state.setdefault(i, {})
            if not st:
                st["step"] = 0
                st["exp_avg"] = np.zeros_like(p._array)
                st["exp_avg_sq"] = np.zeros_like(p._array)
            st["step"] += 1
            m, v, t = st["exp_avg"], st["exp_avg_sq"], st["step"]
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * (g * g)
            denom = np.sqrt(v / (1 - b2**t)) + eps
            p._array -= (lr / (1 - b1**t)) * (m / denom)
            p._vc[0] += 1
