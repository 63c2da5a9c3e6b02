"""torch's recurrent modules: ``nn.RNN``, ``nn.LSTM`` and ``nn.GRU`` (multi-layer, optionally
bidirectional recurrences over (L, N, H_in); ``batch_first``: (N, L, H_in); unbatched:
(L, H_in)), their base ``nn.RNNBase``, and the one-step cells ``nn.RNNCell``, ``nn.LSTMCell``,
``nn.GRUCell`` over ``nn.RNNCellBase``.

Weights are named and laid out as torch's (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``,
``bias_hh_l0``, ``weight_hr_l0`` with ``proj_size``, ``..._reverse`` for the backward
direction; the cells' ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``), with torch's gate
order (LSTM: input, forget, cell, output; GRU: reset, update, new), so a torch state_dict loads
as it is and gives the same outputs. Each step is built from differentiable ops (the input
projections of all steps in one matmul per layer and direction).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from .. import backend, dtypes, ops
from .._tensor import Tensor
from . import functional as F
from . import init
from .functional_layers import gru_step, lstm_step, rnn_step
from .modules import Module, Parameter

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _check_sizes(input_size: Any, hidden_size: Any) -> None:
    for name, v in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{name} should be of type int, got: {type(v).__name__}")
    if hidden_size <= 0:
        raise ValueError("hidden_size must be greater than zero")


def _dtype(dtype: Any) -> Any:
    return dtypes.to_dtype(dtype or dtypes.get_default_dtype())


class RNNBase(Module):
    """The base of RNN, LSTM and GRU, as ``torch.nn.RNNBase``: ``mode`` is ``"LSTM"``,
    ``"GRU"``, ``"RNN_TANH"`` or ``"RNN_RELU"``. Every weight starts uniform in
    ``±1/sqrt(hidden_size)``, as torch's."""

    def __init__(
        self,
        mode: str,
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
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        if (
            not isinstance(dropout, numbers.Number)
            or isinstance(dropout, bool)
            or not 0 <= dropout <= 1
        ):
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an "
                "element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero "
                f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                f"num_layers={num_layers}",
                UserWarning,
                stacklevel=2,
            )
        _check_sizes(input_size, hidden_size)
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError(
                "proj_size should be a positive integer or zero to disable projections"
            )
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        dt = _dtype(dtype)
        g = _GATES[mode] * hidden_size
        real_hidden = proj_size or hidden_size
        self._all_weights: list[list[str]] = []  # per layer * direction: its parameters' names
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else real_hidden * self.num_directions
            for suffix in ("", "_reverse")[: self.num_directions]:
                shapes: list[tuple[str, tuple[int, ...]]] = [
                    (f"weight_ih_l{layer}{suffix}", (g, in_size)),
                    (f"weight_hh_l{layer}{suffix}", (g, real_hidden)),
                ]
                if bias:
                    shapes += [
                        (f"bias_ih_l{layer}{suffix}", (g,)),
                        (f"bias_hh_l{layer}{suffix}", (g,)),
                    ]
                if proj_size:
                    shapes.append((f"weight_hr_l{layer}{suffix}", (proj_size, hidden_size)))
                for name, shape in shapes:
                    setattr(self, name, Parameter(backend.empty(shape, dt)))
                self._all_weights.append([n for n, _ in shapes])
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        """Every weight uniform in ``±1/sqrt(hidden_size)``, as torch's."""
        _reset_uniform(self, self.hidden_size)

    @property
    def _flat_weights_names(self) -> list[str]:
        return [n for names in self._all_weights for n in names]

    @property
    def _flat_weights(self) -> list[Tensor]:
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """Each layer and direction's parameters, as torch's."""
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """As torch's outside cuDNN: nothing to do (the weights are not packed into one
        buffer here), so code that calls it each forward runs unchanged."""

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _weights(self, k: int) -> dict[str, Tensor]:
        return {n.split("_l")[0]: getattr(self, n) for n in self._all_weights[k]}

    def _hidden_shape(self, n: int, batched: bool, size: int) -> tuple[int, ...]:
        lead = self.num_layers * self.num_directions
        return (lead, n, size) if batched else (lead, size)

    def _check_hidden(self, h: Any, n: int, batched: bool, what: str, size: int) -> Tensor:
        if not isinstance(h, Tensor):
            raise TypeError(f"{self.mode}: {what} must be a Tensor, got {type(h).__name__}")
        if batched and h.ndim != 3:
            raise RuntimeError(
                f"For batched 3-D input, hx should also be 3-D but got {h.ndim}-D tensor"
            )
        if not batched and h.ndim != 2:
            raise RuntimeError(
                f"For unbatched 2-D input, hx should also be 2-D but got {h.ndim}-D tensor"
            )
        want = self._hidden_shape(n, batched, size)
        if tuple(h.shape) != want:
            raise RuntimeError(f"Expected {what} size {want}, got {list(h.shape)}")
        return h if batched else ops.unsqueeze(h, 1)

    def _initial(self, hx: Any, n: int, like: Tensor, batched: bool) -> list[Any]:
        """Each layer and direction's initial state, from ``hx`` or zeros."""
        size = self.proj_size or self.hidden_size
        if self.mode != "LSTM":
            h = (
                _zeros(self, n, size, like)
                if hx is None
                else self._check_hidden(hx, n, batched, "hidden", size)
            )
            return [h[k] for k in range(h.shape[0])]
        if hx is None:
            h, c = _zeros(self, n, size, like), _zeros(self, n, self.hidden_size, like)
        else:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise RuntimeError("LSTM: hx must be a tuple (h_0, c_0)")
            h = self._check_hidden(hx[0], n, batched, "hidden[0]", size)
            c = self._check_hidden(hx[1], n, batched, "hidden[1]", self.hidden_size)
        return [(h[k], c[k]) for k in range(h.shape[0])]

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        if not isinstance(input, Tensor):
            raise TypeError(f"{type(self).__name__}: input must be a Tensor")
        if input.ndim not in (2, 3):
            raise ValueError(
                f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D instead"
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
        if x.shape[0] == 0:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        states = self._initial(hx, x.shape[1], x, batched)
        weights = [self._weights(k) for k in range(len(self._all_weights))]
        x, finals = _run(
            self.mode,
            x,
            states,
            weights,
            self.num_layers,
            self.num_directions,
            self.dropout if self.training else 0.0,
            self.proj_size or self.hidden_size,
        )
        out = x
        if batched and self.batch_first:
            out = ops.transpose(out, 0, 1)
        if not batched:
            out = ops.squeeze(out, 1)
        return out, self._final(finals, batched)

    def _final(self, states: list[Any], batched: bool) -> Any:
        """The final states as the module returns them."""
        if self.mode == "LSTM":
            h = ops.stack([s[0] for s in states], 0)
            c = ops.stack([s[1] for s in states], 0)
            if not batched:
                h, c = ops.squeeze(h, 1), ops.squeeze(c, 1)
            return h, c
        h = ops.stack(states, 0)
        return h if batched else ops.squeeze(h, 1)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
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


def _step(mode: str, xw: Tensor, state: Any, w: dict[str, Tensor]) -> Any:
    b_hh = w.get("bias_hh")
    if mode == "LSTM":
        return lstm_step(xw, state[0], state[1], w["weight_hh"], b_hh, w.get("weight_hr"))
    if mode == "GRU":
        return gru_step(xw, state, w["weight_hh"], b_hh)
    return rnn_step(xw, state, w["weight_hh"], b_hh, mode == "RNN_RELU")


def _run(
    mode: str,
    x: Tensor,
    states: list[Any],
    weights: list[dict[str, Tensor]],
    num_layers: int,
    num_directions: int,
    dropout: float,
    out_size: int,
) -> tuple[Tensor, list[Any]]:
    """The recurrence over (L, N, H_in) ``x``: each layer and direction ``k`` from
    ``states[k]`` with ``weights[k]`` (``weight_ih``, ``weight_hh``, optional ``bias_ih``,
    ``bias_hh``, ``weight_hr``); dropout between layers. Returns the last layer's output and
    every final state."""
    seq_len = x.shape[0]
    finals: list[Any] = []
    for layer in range(num_layers):
        outs = []
        for d in range(num_directions):
            k = layer * num_directions + d
            w = weights[k]
            xw = ops.linear(x, w["weight_ih"], w.get("bias_ih"))  # all steps at once
            state = states[k]
            steps: list[Tensor] = [x] * seq_len
            order = range(seq_len - 1, -1, -1) if d else range(seq_len)
            for t in order:
                state = _step(mode, xw[t], state, w)
                steps[t] = state[0] if isinstance(state, tuple) else state
            finals.append(state)
            outs.append(ops.stack(steps, 0))
        x = outs[0] if len(outs) == 1 else ops.cat(outs, dim=2)
        if dropout and layer < num_layers - 1:
            x = F.dropout(x, dropout)
    return x, finals


def _flat_rnn(
    mode: str,
    input: Tensor,
    hx: list[Tensor],
    params: Sequence[Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, list[Tensor]]:
    """torch's ``torch.lstm``/``gru``/``rnn_tanh``/``rnn_relu`` over flat ``params`` (per
    layer and direction: w_ih, w_hh, then b_ih, b_hh with ``has_biases``, then w_hr with
    projections)."""
    dirs = 2 if bidirectional else 1
    groups = num_layers * dirs
    if groups == 0 or len(params) % groups:
        raise RuntimeError(f"{mode.lower()}: got {len(params)} params for {groups} weight groups")
    per = len(params) // groups
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if has_biases else [])
    if per == len(names) + 1:
        names.append("weight_hr")
    elif per != len(names):
        raise RuntimeError(f"{mode.lower()}: expected {len(names)} params per layer, got {per}")
    weights = [
        dict(zip(names, params[k * per : (k + 1) * per], strict=True)) for k in range(groups)
    ]
    if input.ndim != 3:
        raise RuntimeError(f"{mode.lower()}: expected a 3-D input, got {input.ndim}-D")
    if input.shape[1 if batch_first else 0] == 0:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    x = ops.transpose(input, 0, 1) if batch_first else input
    if mode == "LSTM":
        states: list[Any] = [(hx[0][k], hx[1][k]) for k in range(groups)]
    else:
        states = [hx[0][k] for k in range(groups)]
    out_size = hx[0].shape[-1]
    out, finals = _run(
        mode, x, states, weights, num_layers, dirs, dropout if train else 0.0, out_size
    )
    if batch_first:
        out = ops.transpose(out, 0, 1)
    if mode == "LSTM":
        return out, [ops.stack([f[0] for f in finals], 0), ops.stack([f[1] for f in finals], 0)]
    return out, [ops.stack(finals, 0)]


def lstm(
    input: Tensor,
    hx: Sequence[Tensor],
    params: Sequence[Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``torch.lstm``: returns ``(output, h_n, c_n)``."""
    out, (h, c) = _flat_rnn(
        "LSTM",
        input,
        list(hx),
        params,
        has_biases,
        num_layers,
        dropout,
        train,
        bidirectional,
        batch_first,
    )
    return out, h, c


def _one_state(mode: str, name: str) -> Callable[..., tuple[Tensor, Tensor]]:
    """``torch.<name>`` for a recurrence whose state is one tensor (GRU, RNN_TANH, RNN_RELU):
    ``_flat_rnn`` with ``hx`` as the only state, returning ``(output, h_n)``."""

    def fn(
        input: Tensor,
        hx: Tensor,
        params: Sequence[Tensor],
        has_biases: bool,
        num_layers: int,
        dropout: float,
        train: bool,
        bidirectional: bool,
        batch_first: bool,
    ) -> tuple[Tensor, Tensor]:
        out, (h,) = _flat_rnn(
            mode,
            input,
            [hx],
            params,
            has_biases,
            num_layers,
            dropout,
            train,
            bidirectional,
            batch_first,
        )
        return out, h

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``torch.{name}``: returns ``(output, h_n)``."
    return fn


gru = _one_state("GRU", "gru")
rnn_tanh = _one_state("RNN_TANH", "rnn_tanh")
rnn_relu = _one_state("RNN_RELU", "rnn_relu")


def _reset_uniform(m: Module, hidden_size: int) -> None:
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    for p in m.parameters():
        init.uniform_(p, -bound, bound)


def _zeros(m: RNNBase, n: int, size: int, like: Tensor) -> Tensor:
    shape = (m.num_layers * m.num_directions, n, size)
    return Tensor._wrap(backend.zeros(shape, like.dtype, like.device))


class RNN(RNNBase):
    """A multi-layer Elman RNN, as ``torch.nn.RNN``: ``h' = tanh(W_ih x + b_ih + W_hh h +
    b_hh)`` (``nonlinearity="relu"``: relu). ``RNN(input_size, hidden_size, num_layers=1,
    nonlinearity="tanh", bias=True, batch_first=False, dropout=0.0, bidirectional=False)``;
    ``forward(input, h_0=None)`` returns ``output, h_n``.

    Example:
        >>> import asyncgrad as ag
        >>> out, h = ag.nn.RNN(3, 4, num_layers=2)(ag.zeros(5, 2, 3))
        >>> tuple(out.shape), tuple(h.shape)
        ((5, 2, 4), (2, 2, 4))
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(
                f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        super().__init__(mode, *args, **kwargs)


class LSTM(RNNBase):
    """A multi-layer LSTM, as ``torch.nn.LSTM``: ``forward(input, (h_0, c_0)=None)`` returns
    ``output, (h_n, c_n)``. Gates ``i, f, g, o`` in that order in the weights; ``c' = f * c +
    i * g``, ``h' = o * tanh(c')`` (with ``proj_size``: ``h' = W_hr (o * tanh(c'))``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """A multi-layer GRU, as ``torch.nn.GRU``: ``forward(input, h_0=None)`` returns
    ``output, h_n``. Gates ``r, z, n`` in that order in the weights; ``n = tanh(W_in x + b_in +
    r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


# ============================================================================ cells
class RNNCellBase(Module):
    """The base of the one-step cells, as ``torch.nn.RNNCellBase``: ``weight_ih`` (``num_chunks
    * hidden_size``, ``input_size``), ``weight_hh``, ``bias_ih``, ``bias_hh``, uniform in
    ``±1/sqrt(hidden_size)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        num_chunks: int,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        _check_sizes(input_size, hidden_size)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        dt = _dtype(dtype)
        g = num_chunks * hidden_size
        self.weight_ih = Parameter(backend.empty((g, input_size), dt))
        self.weight_hh = Parameter(backend.empty((g, hidden_size), dt))
        if bias:
            self.bias_ih: Parameter | None = Parameter(backend.empty((g,), dt))
            self.bias_hh: Parameter | None = Parameter(backend.empty((g,), dt))
        else:
            self.bias_ih = None
            self.bias_hh = None
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        _reset_uniform(self, self.hidden_size)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        nl = getattr(self, "nonlinearity", "tanh")
        if nl != "tanh":
            s += f", nonlinearity={nl}"
        return s

    def _batch(self, input: Tensor, hx: Any) -> tuple[Tensor, bool]:
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: input must be a Tensor")
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        hs = hx if isinstance(hx, (tuple, list)) else [] if hx is None else [hx]
        for i, h in enumerate(hs):
            if h.ndim not in (1, 2):
                what = f"hx[{i}]" if isinstance(hx, (tuple, list)) else "hidden"
                raise ValueError(f"{name}: Expected {what} to be 1D or 2D, got {h.ndim}D instead")
        batched = input.ndim == 2
        x = input if batched else ops.unsqueeze(input, 0)
        if x.shape[1] != self.input_size:
            raise RuntimeError(
                f"input has inconsistent input_size: got {x.shape[1]} expected {self.input_size}"
            )
        return x, batched

    def _state(self, h: Any, x: Tensor, batched: bool, i: int = 0) -> Tensor:
        if h is None:
            return Tensor._wrap(backend.zeros((x.shape[0], self.hidden_size), x.dtype, x.device))
        h = h if batched else ops.unsqueeze(h, 0)
        if h.shape[0] != x.shape[0]:
            raise RuntimeError(
                f"Input batch size {x.shape[0]} doesn't match hidden{i} batch size {h.shape[0]}"
            )
        if h.shape[1] != self.hidden_size:
            raise RuntimeError(
                f"hidden{i} has inconsistent hidden_size: got {h.shape[1]}, expected "
                f"{self.hidden_size}"
            )
        return h  # type: ignore[no-any-return]


class RNNCell(RNNCellBase):
    """One Elman RNN step, as ``torch.nn.RNNCell``: ``h' = tanh(W_ih x + b_ih + W_hh h +
    b_hh)`` (or relu); ``forward(input, hx=None)`` over (N, H_in) or unbatched (H_in)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        from .functional_layers import rnn_relu_cell, rnn_tanh_cell

        x, batched = self._batch(input, hx)
        h = self._state(hx, x, batched)
        if self.nonlinearity == "tanh":
            cell = rnn_tanh_cell
        elif self.nonlinearity == "relu":
            cell = rnn_relu_cell
        else:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        out = cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return out if batched else ops.squeeze(out, 0)


class LSTMCell(RNNCellBase):
    """One LSTM step, as ``torch.nn.LSTMCell``: ``forward(input, (h, c)=None)`` returns
    ``(h', c')``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Tensor]:
        from .functional_layers import lstm_cell

        x, batched = self._batch(input, hx)
        if hx is None:
            h = c = self._state(None, x, batched)
        else:
            h, c = self._state(hx[0], x, batched, 0), self._state(hx[1], x, batched, 1)
        h, c = lstm_cell(x, (h, c), self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        if not batched:
            h, c = ops.squeeze(h, 0), ops.squeeze(c, 0)
        return h, c


class GRUCell(RNNCellBase):
    """One GRU step, as ``torch.nn.GRUCell``: ``forward(input, hx=None)`` returns ``h'``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        from .functional_layers import gru_cell

        x, batched = self._batch(input, hx)
        h = self._state(hx, x, batched)
        out = gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return out if batched else ops.squeeze(out, 0)
