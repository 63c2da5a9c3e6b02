"""Functions of ``ag.nn.functional`` behind the recurrent, transformer, normalization and
other layers, and torch-level functions of that family (``torch.lstm_cell``,
``torch.batch_norm``, ...) that ``asyncgrad/__init__.py`` exports.

All are compositions of differentiable ops, so their gradients (and gradients of gradients)
come from the ops' rules.
"""

from __future__ import annotations

from typing import Any

from .. import ops
from .._tensor import Tensor

__all__: list[str] = []


# ----------------------------------------------------------------------------- recurrent cells
def rnn_step(
    xw: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None, relu: bool = False
) -> Tensor:
    """One Elman step from the input projection ``xw = W_ih x + b_ih``."""
    pre = ops.add(xw, ops.linear(h, w_hh, b_hh))
    return ops.relu(pre) if relu else ops.tanh(pre)


def lstm_step(
    xw: Tensor,
    h: Tensor,
    c: Tensor,
    w_hh: Tensor,
    b_hh: Tensor | None,
    w_hr: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step from the input projection ``xw``: gates ``i, f, g, o``; ``w_hr``
    projects the new hidden state (torch's ``proj_size``)."""
    gates = ops.add(xw, ops.linear(h, w_hh, b_hh))
    i, f, g, o = ops.chunk(gates, 4, dim=-1)
    c = ops.add(ops.mul(ops.sigmoid(f), c), ops.mul(ops.sigmoid(i), ops.tanh(g)))
    h = ops.mul(ops.sigmoid(o), ops.tanh(c))
    if w_hr is not None:
        h = ops.linear(h, w_hr)
    return h, c


def gru_step(xw: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """One GRU step from the input projection ``xw``: gates ``r, z, n``."""
    hw = ops.linear(h, w_hh, b_hh)
    x_r, x_z, x_n = ops.chunk(xw, 3, dim=-1)
    h_r, h_z, h_n = ops.chunk(hw, 3, dim=-1)
    r = ops.sigmoid(ops.add(x_r, h_r))
    z = ops.sigmoid(ops.add(x_z, h_z))
    new = ops.tanh(ops.add(x_n, ops.mul(r, h_n)))
    return ops.add(new, ops.mul(z, ops.sub(h, new)))  # (1 - z) * n + z * h


def rnn_tanh_cell(
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> Tensor:
    """``tanh(input @ w_ih.T + b_ih + hx @ w_hh.T + b_hh)``, as ``torch.rnn_tanh_cell``."""
    return rnn_step(ops.linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def rnn_relu_cell(
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> Tensor:
    """``relu(input @ w_ih.T + b_ih + hx @ w_hh.T + b_hh)``, as ``torch.rnn_relu_cell``."""
    return rnn_step(ops.linear(input, w_ih, b_ih), hx, w_hh, b_hh, relu=True)


def lstm_cell(
    input: Tensor,
    hx: Any,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step, as ``torch.lstm_cell``: ``hx`` is ``(h, c)``; returns ``(h', c')``."""
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise RuntimeError("lstm_cell: Expected hx to be a list of two tensors (h, c)")
    return lstm_step(ops.linear(input, w_ih, b_ih), hx[0], hx[1], w_hh, b_hh)


def gru_cell(
    input: Tensor,
    hx: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None = None,
    b_hh: Tensor | None = None,
) -> Tensor:
    """One GRU step, as ``torch.gru_cell``."""
    return gru_step(ops.linear(input, w_ih, b_ih), hx, w_hh, b_hh)
