"""nn.RNN/RNNBase, LSTM(proj_size=), the cells RNNCell/LSTMCell/GRUCell and torch-level
lstm/gru/rnn_tanh/rnn_relu and *_cell, against torch with torch's weights loaded through
state_dict: outputs, final states, gradients of inputs, states and every parameter; finite
differences (first and second order) for a sample; torch's errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(11)


def _load_from(tm: Any, am: nn.Module) -> None:
    assert list(am.state_dict()) == list(tm.state_dict())
    for (k, a), t in zip(am.state_dict().items(), tm.state_dict().values(), strict=True):
        assert tuple(a.shape) == tuple(t.shape), k
    am.load_state_dict({k: ag.tensor(v.numpy()) for k, v in tm.state_dict().items()})


def _flat(h: Any) -> list[Any]:
    return list(h) if isinstance(h, tuple) else [h]


def _np(t: Any) -> np.ndarray:
    return np.asarray(t.detach().numpy())


def _compare_call(
    am: Any,
    tm: Any,
    x: np.ndarray,
    hx: list[np.ndarray] | None,
    lstm: bool,
    cell: bool = False,
    grad_atol: float = 1e-11,
) -> None:
    """One call on both with the same input and state; outputs and every gradient agree. A
    ``cell`` returns its new state alone, a module ``(output, state)``."""
    xa, xt = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ha = [ag.tensor(h, requires_grad=True) for h in hx] if hx else None
    ht = [torch.tensor(h, requires_grad=True) for h in hx] if hx else None
    arg_a = (tuple(ha) if lstm else ha[0]) if ha else None
    arg_t = (tuple(ht) if lstm else ht[0]) if ht else None
    out_a, out_t = am(xa, arg_a), tm(xt, arg_t)
    outs_a = _flat(out_a) if cell else [out_a[0], *_flat(out_a[1])]
    outs_t = _flat(out_t) if cell else [out_t[0], *_flat(out_t[1])]
    assert len(outs_a) == len(outs_t)
    for a, t in zip(outs_a, outs_t, strict=True):
        assert tuple(a.shape) == tuple(t.shape)
        np.testing.assert_allclose(_np(a), _np(t), atol=1e-12)
    gs = [RNG.standard_normal(tuple(t.shape)) for t in outs_t]
    sum(
        ((a * ag.tensor(g)).sum() for a, g in zip(outs_a, gs, strict=True)), ag.tensor(0.0)
    ).backward()
    sum((t * torch.tensor(g)).sum() for t, g in zip(outs_t, gs, strict=True)).backward()
    np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), atol=grad_atol)
    for (name, pa), pt in zip(am.named_parameters(), tm.parameters(), strict=True):
        np.testing.assert_allclose(pa.grad.numpy(), pt.grad.numpy(), atol=grad_atol, err_msg=name)
    for a, t in zip(ha or [], ht or [], strict=True):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=grad_atol)


MODULE_CASES = [
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2, "bidirectional": True}),
    ("RNN", {"bias": False, "batch_first": True}),
    ("LSTM", {"proj_size": 2}),
    ("LSTM", {"proj_size": 3, "num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("LSTM", {"proj_size": 1, "bias": False}),
    ("GRU", {"num_layers": 2, "bidirectional": True}),
]


@pytest.mark.parametrize(("name", "kwargs"), MODULE_CASES)
@pytest.mark.parametrize("with_hx", [False, True])
@pytest.mark.parametrize("batched", [True, False])
def test_recurrent_modules_match_torch(
    name: str, kwargs: dict[str, Any], with_hx: bool, batched: bool
) -> None:
    tm = getattr(torch.nn, name)(3, 4, **kwargs).double()
    am = getattr(nn, name)(3, 4, **kwargs).double()
    assert repr(am) == repr(tm)
    assert am._flat_weights_names == tm._flat_weights_names
    assert [[tuple(p.shape) for p in ps] for ps in am.all_weights] == [
        [tuple(p.shape) for p in ps] for ps in tm.all_weights
    ]
    _load_from(tm, am)
    bf = kwargs.get("batch_first", False)
    x = RNG.standard_normal(((2, 5, 3) if bf else (5, 2, 3)) if batched else (5, 3))
    lead = am.num_layers * am.num_directions
    hsize = kwargs.get("proj_size", 0) or 4
    hx = None
    if with_hx:
        shape_h = (lead, 2, hsize) if batched else (lead, hsize)
        hx = [RNG.standard_normal(shape_h)]
        if name == "LSTM":
            hx.append(RNG.standard_normal((*shape_h[:-1], 4)))
    _compare_call(am, tm, x, hx, name == "LSTM")


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_recurrent_empty_batch_and_empty_sequence(name: str) -> None:
    tm, am = getattr(torch.nn, name)(3, 4).double(), getattr(nn, name)(3, 4).double()
    _load_from(tm, am)
    out_a, h_a = am(ag.tensor(np.zeros((4, 0, 3))))
    out_t, h_t = tm(torch.zeros((4, 0, 3), dtype=torch.float64))
    assert tuple(out_a.shape) == tuple(out_t.shape)
    for a, t in zip(_flat(h_a), _flat(h_t), strict=True):
        assert tuple(a.shape) == tuple(t.shape)
    for shape in ((0, 2, 3), (0, 3)):
        with pytest.raises(RuntimeError, match="Expected sequence length to be larger than 0"):
            am(ag.zeros(*shape, dtype=ag.float64))
        with pytest.raises(RuntimeError, match="Expected sequence length to be larger than 0"):
            tm(torch.zeros(shape, dtype=torch.float64))


CELL_CASES = [
    ("RNNCell", {}),
    ("RNNCell", {"nonlinearity": "relu", "bias": False}),
    ("LSTMCell", {}),
    ("LSTMCell", {"bias": False}),
    ("GRUCell", {}),
    ("GRUCell", {"bias": False}),
]


@pytest.mark.parametrize(("name", "kwargs"), CELL_CASES)
@pytest.mark.parametrize("with_hx", [False, True])
@pytest.mark.parametrize("batched", [True, False])
def test_cells_match_torch(name: str, kwargs: dict[str, Any], with_hx: bool, batched: bool) -> None:
    tm = getattr(torch.nn, name)(3, 4, **kwargs).double()
    am = getattr(nn, name)(3, 4, **kwargs).double()
    assert repr(am) == repr(tm)
    _load_from(tm, am)
    x = RNG.standard_normal((2, 3) if batched else (3,))
    hx = None
    if with_hx:
        hx = [RNG.standard_normal((2, 4) if batched else (4,))]
        if name == "LSTMCell":
            hx.append(RNG.standard_normal((2, 4) if batched else (4,)))
    _compare_call(am, tm, x, hx, name == "LSTMCell", cell=True, grad_atol=1e-12)


@pytest.mark.parametrize("name", ["rnn_tanh_cell", "rnn_relu_cell", "gru_cell", "lstm_cell"])
@pytest.mark.parametrize("bias", [True, False])
def test_torch_level_cells_match_torch(name: str, bias: bool) -> None:
    gates = {"rnn_tanh_cell": 1, "rnn_relu_cell": 1, "gru_cell": 3, "lstm_cell": 4}[name]
    arrays = [
        RNG.standard_normal((2, 3)),
        RNG.standard_normal((gates * 4, 3)),
        RNG.standard_normal((gates * 4, 4)),
    ]
    if bias:
        arrays += [RNG.standard_normal(gates * 4), RNG.standard_normal(gates * 4)]
    hs = [RNG.standard_normal((2, 4)) for _ in range(2 if name == "lstm_cell" else 1)]
    ta = [ag.tensor(a, requires_grad=True) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    ha = [ag.tensor(h, requires_grad=True) for h in hs]
    ht = [torch.tensor(h, requires_grad=True) for h in hs]
    hx_a: Any = ha if name == "lstm_cell" else ha[0]
    hx_t: Any = ht if name == "lstm_cell" else ht[0]
    oa = _flat(getattr(ag, name)(ta[0], hx_a, *ta[1:]))
    ot = _flat(getattr(torch, name)(tt[0], hx_t, *tt[1:]))
    for a, t in zip(oa, ot, strict=True):
        np.testing.assert_allclose(_np(a), _np(t), atol=1e-12)
    sum((a.sum() * (i + 1) for i, a in enumerate(oa)), ag.tensor(0.0)).backward()
    sum(t.sum() * (i + 1) for i, t in enumerate(ot)).backward()
    for a, t in zip(ta + ha, tt + ht, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize(
    ("name", "cls", "kwargs"),
    [
        ("lstm", "LSTM", {"num_layers": 2, "bidirectional": True}),
        ("lstm", "LSTM", {"proj_size": 2, "batch_first": True}),
        ("gru", "GRU", {"bias": False}),
        ("rnn_tanh", "RNN", {"num_layers": 2}),
        ("rnn_relu", "RNN", {"nonlinearity": "relu", "bidirectional": True}),
    ],
)
def test_torch_level_recurrences_match_torch(name: str, cls: str, kwargs: dict[str, Any]) -> None:
    m = getattr(torch.nn, cls)(3, 4, **kwargs).double()
    bf = kwargs.get("batch_first", False)
    x = RNG.standard_normal((2, 5, 3) if bf else (5, 2, 3))
    lead = m.num_layers * (2 if m.bidirectional else 1)
    hs = [RNG.standard_normal((lead, 2, m.proj_size or 4))]
    if name == "lstm":
        hs.append(RNG.standard_normal((lead, 2, 4)))
    pt = [p.detach().clone().requires_grad_(True) for p in m._flat_weights]
    pa = [ag.tensor(p.detach().numpy(), requires_grad=True) for p in pt]
    flags = (m.bias, m.num_layers, 0.0, False, m.bidirectional, bf)
    hx_t: Any = [torch.tensor(h) for h in hs] if name == "lstm" else torch.tensor(hs[0])
    hx_a: Any = [ag.tensor(h) for h in hs] if name == "lstm" else ag.tensor(hs[0])
    rt = getattr(torch, name)(torch.tensor(x), hx_t, pt, *flags)
    ra = getattr(ag, name)(ag.tensor(x), hx_a, pa, *flags)
    assert len(ra) == len(rt)
    for a, t in zip(ra, rt, strict=True):
        np.testing.assert_allclose(_np(a), _np(t), atol=1e-12)
    sum((a.sum() for a in ra), ag.tensor(0.0)).backward()
    sum(t.sum() for t in rt).backward()
    for a, t in zip(pa, pt, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-11)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"])
def test_recurrent_gradcheck_and_gradgradcheck(name: str) -> None:
    kwargs: dict[str, Any] = {"proj_size": 1} if name == "LSTM" else {}
    m = getattr(nn, name)(2, 2, **kwargs).double()
    cell = name.endswith("Cell")
    x = ag.tensor(RNG.standard_normal((2, 2) if cell else (3, 1, 2)), requires_grad=True)

    def f(x: ag.Tensor) -> ag.Tensor:
        out = m(x)
        return out[0] if isinstance(out, tuple) else out

    assert ag.autograd.gradcheck(f, (x,))
    assert ag.autograd.gradgradcheck(f, (x,))


def test_recurrent_weights_initialised_as_torch() -> None:
    for m in (nn.RNN(3, 16, 2), nn.LSTM(3, 16, proj_size=4), nn.GRUCell(3, 16)):
        for name, p in m.named_parameters():
            arr = p.detach().numpy()
            assert np.abs(arr).max() <= 1 / 4, name  # uniform in +-1/sqrt(hidden_size)
            assert np.abs(arr).max() > 1 / 8, name


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda: nn.RNN(2, 2, nonlinearity="gelu"), ValueError, "Unknown nonlinearity 'gelu'"),
        (lambda: nn.RNN(2, 2, proj_size=1), ValueError, "only supported for LSTM"),
        (lambda: nn.GRU(2, 2, proj_size=1), ValueError, "only supported for LSTM"),
        (lambda: nn.LSTM(2, 2, proj_size=2), ValueError, "proj_size has to be smaller"),
        (lambda: nn.LSTM(2, 2, proj_size=-1), ValueError, "proj_size should be a positive"),
        (lambda: nn.RNNBase("FOO", 2, 2), ValueError, "Unrecognized RNN mode: FOO"),
        (lambda: nn.RNN(2.0, 2), TypeError, "input_size should be of type int"),
        (lambda: nn.RNNCell(2, 0), ValueError, "hidden_size must be greater than zero"),
        (
            lambda: nn.LSTMCell(2, 3)(ag.zeros(1, 1, 2)),
            ValueError,
            "LSTMCell: Expected input to be 1D or 2D, got 3D instead",
        ),
        (
            lambda: nn.GRUCell(2, 3)(ag.zeros(1, 4)),
            RuntimeError,
            "input has inconsistent input_size: got 4 expected 2",
        ),
        (
            lambda: nn.RNNCell(2, 3)(ag.zeros(1, 2), ag.zeros(1, 4)),
            RuntimeError,
            "hidden0 has inconsistent hidden_size: got 4, expected 3",
        ),
        (
            lambda: nn.RNN(2, 3)(ag.zeros(4, 2), ag.zeros(1, 1, 3)),
            RuntimeError,
            "For unbatched 2-D input, hx should also be 2-D but got 3-D tensor",
        ),
        (
            lambda: nn.LSTM(2, 3, proj_size=1)(ag.zeros(4, 1, 2), (ag.zeros(1, 1, 3),) * 2),
            RuntimeError,
            r"Expected hidden\[0\] size \(1, 1, 1\), got \[1, 1, 3\]",
        ),
    ],
)
def test_recurrent_errors_as_torch(make: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        make()


def test_dropout_with_one_layer_warns_as_torch() -> None:
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(2, 2, dropout=0.5)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        torch.nn.GRU(2, 2, dropout=0.5)
