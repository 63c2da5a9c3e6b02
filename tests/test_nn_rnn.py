"""nn.LSTM, nn.GRU and nn.TransformerEncoderLayer against torch with torch's weights loaded
through state_dict (same names): outputs, final states and gradients; and, without torch,
closed forms of one step and finite differences."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn

RNG = np.random.default_rng(5)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for the layers")


def _load_from(tm: Any, am: nn.Module) -> None:
    assert list(am.state_dict()) == list(tm.state_dict())
    am.load_state_dict({k: ag.tensor(v.numpy()) for k, v in tm.state_dict().items()})


def _flat(h: Any) -> list[Any]:
    return list(h) if isinstance(h, tuple) else [h]


RNN_CASES = [
    {},
    {"num_layers": 2, "batch_first": True, "bidirectional": True},
    {"bias": False, "num_layers": 3},
    {"bidirectional": True},
]


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
@pytest.mark.parametrize("kwargs", RNN_CASES)
@pytest.mark.parametrize("with_hx", [False, True])
def test_rnn_matches_torch(torch: Any, name: str, kwargs: dict[str, Any], with_hx: bool) -> None:
    tm = getattr(torch.nn, name)(4, 5, **kwargs).double()
    am = getattr(nn, name)(4, 5, **kwargs).double()
    assert repr(am) == repr(tm)
    _load_from(tm, am)
    x = RNG.standard_normal((3, 6, 4))
    xa, xt = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    lead = am.num_layers * am.num_directions
    n = 3 if kwargs.get("batch_first") else 6
    hx_a: Any = None
    hx_t: Any = None
    if with_hx:
        hs = [RNG.standard_normal((lead, n, 5)) for _ in range(2 if name == "LSTM" else 1)]
        hx_a = tuple(ag.tensor(h, requires_grad=True) for h in hs)
        hx_t = tuple(torch.tensor(h, requires_grad=True) for h in hs)
        if name == "GRU":
            hx_a, hx_t = hx_a[0], hx_t[0]
    oa, ha = am(xa, hx_a)
    ot, ht = tm(xt, hx_t)
    np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), atol=1e-12)
    for a, t in zip(_flat(ha), _flat(ht), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), t.detach().numpy(), atol=1e-12)
    g = RNG.standard_normal(tuple(ot.shape))
    gh = [RNG.standard_normal(tuple(t.shape)) for t in _flat(ht)]
    loss_a = (oa * ag.tensor(g)).sum() + sum(
        (a * ag.tensor(w)).sum() for a, w in zip(_flat(ha), gh, strict=True)
    )
    loss_t = (ot * torch.tensor(g)).sum() + sum(
        (t * torch.tensor(w)).sum() for t, w in zip(_flat(ht), gh, strict=True)
    )
    loss_a.backward()
    loss_t.backward()
    np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), atol=1e-12)
    for (pn, pa), pt in zip(am.named_parameters(), tm.parameters(), strict=True):
        np.testing.assert_allclose(pa.grad.numpy(), pt.grad.numpy(), atol=1e-11, err_msg=pn)
    if with_hx:
        for a, t in zip(_flat(hx_a), _flat(hx_t), strict=True):
            np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_rnn_unbatched_input_matches_torch(torch: Any, name: str) -> None:
    tm = getattr(torch.nn, name)(3, 2, num_layers=2).double()
    am = getattr(nn, name)(3, 2, num_layers=2).double()
    _load_from(tm, am)
    x = RNG.standard_normal((5, 3))
    oa, ha = am(ag.tensor(x))
    ot, ht = tm(torch.tensor(x))
    assert tuple(oa.shape) == tuple(ot.shape) == (5, 2)
    np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), atol=1e-12)
    for a, t in zip(_flat(ha), _flat(ht), strict=True):
        assert tuple(a.shape) == tuple(t.shape)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def test_one_lstm_and_gru_step_closed_form() -> None:
    x = RNG.standard_normal((1, 1, 2))
    lstm = nn.LSTM(2, 3).double()
    p = {k: v.numpy() for k, v in lstm.state_dict().items()}
    gates = p["weight_ih_l0"] @ x[0, 0] + p["bias_ih_l0"] + p["bias_hh_l0"]  # h0 = 0
    i, _f, g, o = np.split(gates, 4)
    c = _sigmoid(i) * np.tanh(g)
    h = _sigmoid(o) * np.tanh(c)
    out, (_hn, cn) = lstm(ag.tensor(x))
    np.testing.assert_allclose(out.detach().numpy()[0, 0], h, rtol=1e-12)
    np.testing.assert_allclose(cn.detach().numpy()[0, 0], c, rtol=1e-12)
    gru = nn.GRU(2, 3).double()
    p = {k: v.numpy() for k, v in gru.state_dict().items()}
    xr, xz, xn = np.split(p["weight_ih_l0"] @ x[0, 0] + p["bias_ih_l0"], 3)
    hr, hz, hn_ = np.split(p["bias_hh_l0"], 3)
    r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
    n = np.tanh(xn + r * hn_)
    out, _ = gru(ag.tensor(x))
    np.testing.assert_allclose(out.detach().numpy()[0, 0], (1 - z) * n, rtol=1e-12)


def test_rnn_gradients_by_finite_differences() -> None:
    for cls in (nn.LSTM, nn.GRU):
        m = cls(2, 2, bidirectional=True).double()
        x = ag.tensor(RNG.standard_normal((3, 1, 2)), requires_grad=True)
        assert ag.autograd.gradcheck(lambda t, m=m: m(t)[0], (x,))


def test_rnn_errors() -> None:
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 4D instead"):
        nn.LSTM(2, 2)(ag.zeros(1, 1, 1, 2))
    with pytest.raises(RuntimeError, match=r"input\.size\(-1\) must be equal to input_size"):
        nn.GRU(2, 2)(ag.zeros(3, 1, 4))
    with pytest.raises(
        RuntimeError, match="For batched 3-D input, hx should also be 3-D but got 2-D"
    ):
        nn.GRU(2, 2)(ag.zeros(3, 1, 2), ag.zeros(1, 2))
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(2, 4, proj_size=4)
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        nn.GRU(2, 2, dropout=1.5)


def test_rnn_dropout_between_layers_only_in_training() -> None:
    m = nn.LSTM(2, 3, num_layers=2, dropout=0.5).double()
    x = ag.tensor(RNG.standard_normal((4, 1, 2)))
    m.eval()
    a, _ = m(x)
    b, _ = m(x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    m.train()
    ag.manual_seed(0)
    c, _ = m(x)
    assert not np.allclose(c.detach().numpy(), a.detach().numpy())


# ============================================================================ transformer
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"batch_first": True, "norm_first": True, "activation": "gelu"},
        {"bias": False, "layer_norm_eps": 1e-3},
    ],
)
def test_transformer_encoder_layer_matches_torch(torch: Any, kwargs: dict[str, Any]) -> None:
    tm = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kwargs)
    am = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kwargs)
    tm.double()
    am.double()
    _load_from(tm, am)
    x = RNG.standard_normal((5, 3, 8))
    mask = np.triu(np.ones((5, 5) if not kwargs.get("batch_first") else (3, 3)), 1).astype(bool)
    kpm_shape = (3, 5) if not kwargs.get("batch_first") else (5, 3)
    kpm = np.zeros(kpm_shape, dtype=bool)
    kpm[0, -1] = True
    for use_masks in (False, True):
        xa, xt = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ka: dict[str, Any] = {}
        kt: dict[str, Any] = {}
        if use_masks:
            ka = {"src_mask": ag.tensor(mask), "src_key_padding_mask": ag.tensor(kpm)}
            kt = {"src_mask": torch.tensor(mask), "src_key_padding_mask": torch.tensor(kpm)}
        oa, ot = am(xa, **ka), tm(xt, **kt)
        np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), atol=1e-12)
        g = RNG.standard_normal(x.shape)
        oa.backward(ag.tensor(g))
        ot.backward(torch.tensor(g))
        np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), atol=1e-11)
        for (n, pa), pt in zip(am.named_parameters(), tm.parameters(), strict=True):
            np.testing.assert_allclose(pa.grad.numpy(), pt.grad.numpy(), atol=1e-11, err_msg=n)
        am.zero_grad()
        tm.zero_grad()


def test_transformer_encoder_layer_dropout_and_eval() -> None:
    layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8).double()
    x = ag.tensor(RNG.standard_normal((3, 2, 4)))
    layer.eval()
    np.testing.assert_array_equal(layer(x).detach().numpy(), layer(x).detach().numpy())
    layer.train()
    ag.manual_seed(0)
    a = layer(x).detach().numpy()
    b = layer(x).detach().numpy()
    assert not np.allclose(a, b)
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(4, 2, activation="tanh")
    custom = nn.TransformerEncoderLayer(4, 2, activation=nn.GELU())
    assert "activation" in dict(custom.named_children())


def test_flatten_parameters_is_callable_and_changes_nothing() -> None:
    m = nn.LSTM(2, 2)
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    m.flatten_parameters()
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
