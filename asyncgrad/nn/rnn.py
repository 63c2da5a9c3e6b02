"""torch's ``nn.LSTM`` and ``nn.GRU``: multi-layer, optionally bidirectional recurrences over
(L, N, H_in) (``batch_first``: (N, L, H_in); unbatched: (L, H_in)).

Weights are named and laid out as torch's (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``,
``bias_hh_l0``, ``..._reverse`` for the backward direction), with torch's gate order (LSTM:
input, forget, cell, output; GRU: reset, update, new), so a torch state_dict loads as it is
and gives the same outputs. Each step is built from differentiable ops (the input projections
of all steps in one matmul per layer and direction).
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from . import functional as F
from .modules import Module, Parameter

__all__ = ["GRU", "LSTM"]


class _RNNBase(Module):
    _gates: int = 1
    _mode: str = ""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an "
                "element being zeroed"
            )
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size:
            raise NotImplementedError(f"{self._mode}: proj_size is not supported")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        dt = dtypes.to_dtype(dtype or dtypes.get_default_dtype())
        g = self._gates * hidden_size
        rng = ops.default_generator._rng
        bound = 1.0 / math.sqrt(hidden_size)
        self._names: list[list[str]] = []  # per layer * direction: its parameters' names
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else hidden_size * self.num_directions
            for suffix in ("", "_reverse")[: self.num_directions]:
                shapes: list[tuple[str, tuple[int, ...]]] = [
                    (f"weight_ih_l{layer}{suffix}", (g, in_size)),
                    (f"weight_hh_l{layer}{suffix}", (g, hidden_size)),
                ]
                if bias:
                    shapes += [
                        (f"bias_ih_l{layer}{suffix}", (g,)),
                        (f"bias_hh_l{layer}{suffix}", (g,)),
                    ]
                for name, shape in shapes:
                    setattr(self, name, Parameter(rng.uniform(-bound, bound, shape, dt)))
                self._names.append([n for n, _ in shapes])
        if device is not None:
            self.to(device)

    def flatten_parameters(self) -> None:
        """As torch's outside cuDNN: nothing to do (the weights are not packed into one
        buffer here), so code that calls it each forward runs unchanged."""

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _weights(self, k: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        names = self._names[k]
        w_ih, w_hh = getattr(self, names[0]), getattr(self, names[1])
        if not self.bias:
            return w_ih, w_hh, None, None
        return w_ih, w_hh, getattr(self, names[2]), getattr(self, names[3])

    def _cell(self, xw: Tensor, state: Any, w_hh: Tensor, b_hh: Tensor | None) -> Any:
        raise NotImplementedError

    def _initial(self, hx: Any, n: int, like: Tensor, batched: bool) -> list[Any]:
        """Each layer and direction's initial state, from ``hx`` or zeros."""
        raise NotImplementedError

    def _final(self, states: list[Any], batched: bool) -> Any:
        """The final states as the module returns them."""
        raise NotImplementedError

    def _hidden_shape(self, n: int, batched: bool) -> tuple[int, ...]:
        lead = self.num_layers * self.num_directions
        return (lead, n, self.hidden_size) if batched else (lead, self.hidden_size)

    def _check_hidden(self, h: Tensor, n: int, batched: bool, what: str) -> Tensor:
        want = self._hidden_shape(n, batched)
        if tuple(h.shape) != want:
            raise RuntimeError(f"Expected {what} size {want}, got {tuple(h.shape)}")
        return h if batched else ops.unsqueeze(h, 1)

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        if input.ndim not in (2, 3):
            raise ValueError(
                f"{self._mode}: Expected input to be 2D or 3D, got {input.ndim}D instead"
            )
        batched = input.ndim == 3
        x = input if batched else ops.unsqueeze(input, 1)
        if batched and self.batch_first:
            x = ops.transpose(x, 0, 1)  # (L, N, H_in) from here on
        if x.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                f"{x.shape[-1]}"
            )
        seq_len, n = x.shape[0], x.shape[1]
        states = self._initial(hx, n, x, batched)
        finals: list[Any] = []
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.num_directions):
                k = layer * self.num_directions + d
                w_ih, w_hh, b_ih, b_hh = self._weights(k)
                xw = ops.linear(x, w_ih, b_ih)  # every step's input projection at once
                state = states[k]
                steps: list[Tensor] = [x] * seq_len
                order = range(seq_len - 1, -1, -1) if d else range(seq_len)
                for t in order:
                    state = self._cell(xw[t], state, w_hh, b_hh)
                    steps[t] = state[0] if isinstance(state, tuple) else state
                finals.append(state)
                outs.append(ops.stack(steps, 0))
            x = outs[0] if len(outs) == 1 else ops.cat(outs, dim=2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        out = x
        if batched and self.batch_first:
            out = ops.transpose(out, 0, 1)
        if not batched:
            out = ops.squeeze(out, 1)
        return out, self._final(finals, batched)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


def _zeros_state(m: _RNNBase, n: int, like: Tensor) -> Tensor:
    return Tensor._wrap(
        backend.zeros((m.num_layers * m.num_directions, n, m.hidden_size), like.dtype, like.device)
    )


class LSTM(_RNNBase):
    """A multi-layer LSTM, as ``torch.nn.LSTM``: ``forward(input, (h_0, c_0)=None)`` returns
    ``output, (h_n, c_n)``. Gates ``i, f, g, o`` in that order in the weights; ``c' = f * c +
    i * g``, ``h' = o * tanh(c')``. ``proj_size`` is not supported."""

    _gates = 4
    _mode = "LSTM"

    def _initial(self, hx: Any, n: int, like: Tensor, batched: bool) -> list[Any]:
        if hx is None:
            h = c = _zeros_state(self, n, like)
        else:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise RuntimeError("LSTM: hx must be a tuple (h_0, c_0)")
            h = self._check_hidden(hx[0], n, batched, "hidden[0]")
            c = self._check_hidden(hx[1], n, batched, "hidden[1]")
        return [(h[k], c[k]) for k in range(h.shape[0])]

    def _cell(self, xw: Tensor, state: Any, w_hh: Tensor, b_hh: Tensor | None) -> Any:
        h, c = state
        gates = ops.add(xw, ops.linear(h, w_hh, b_hh))
        i, f, g, o = ops.chunk(gates, 4, dim=-1)
        c = ops.add(ops.mul(ops.sigmoid(f), c), ops.mul(ops.sigmoid(i), ops.tanh(g)))
        h = ops.mul(ops.sigmoid(o), ops.tanh(c))
        return h, c

    def _final(self, states: list[Any], batched: bool) -> Any:
        h = ops.stack([s[0] for s in states], 0)
        c = ops.stack([s[1] for s in states], 0)
        if not batched:
            h, c = ops.squeeze(h, 1), ops.squeeze(c, 1)
        return h, c


class GRU(_RNNBase):
    """A multi-layer GRU, as ``torch.nn.GRU``: ``forward(input, h_0=None)`` returns
    ``output, h_n``. Gates ``r, z, n`` in that order in the weights; ``n = tanh(W_in x + b_in +
    r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``."""

    _gates = 3
    _mode = "GRU"

    def _initial(self, hx: Any, n: int, like: Tensor, batched: bool) -> list[Any]:
        h = (
            _zeros_state(self, n, like)
            if hx is None
            else self._check_hidden(hx, n, batched, "hidden")
        )
        return [h[k] for k in range(h.shape[0])]

    def _cell(self, xw: Tensor, state: Any, w_hh: Tensor, b_hh: Tensor | None) -> Any:
        hw = ops.linear(state, w_hh, b_hh)
        x_r, x_z, x_n = ops.chunk(xw, 3, dim=-1)
        h_r, h_z, h_n = ops.chunk(hw, 3, dim=-1)
        r = ops.sigmoid(ops.add(x_r, h_r))
        z = ops.sigmoid(ops.add(x_z, h_z))
        new = ops.tanh(ops.add(x_n, ops.mul(r, h_n)))
        return ops.add(new, ops.mul(z, ops.sub(state, new)))  # (1 - z) * n + z * h

    def _final(self, states: list[Any], batched: bool) -> Any:
        h = ops.stack(states, 0)
        return h if batched else ops.squeeze(h, 1)
