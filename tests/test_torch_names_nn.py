"""torch's nn names that asyncgrad adds: activation modules and their functional forms,
ParameterList/ParameterDict, F.interpolate, parameters_to_vector/vector_to_parameters; checked
against torch where installed and against closed forms or finite differences otherwise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

RNG = np.random.default_rng(3)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for nn behaviour")


def _check(torch: Any, ag_fn: Any, torch_fn: Any, x: np.ndarray) -> None:
    a, t = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    oa, ot = ag_fn(a), torch_fn(t)
    np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), rtol=1e-12, atol=1e-13)
    g = RNG.standard_normal(tuple(ot.shape))
    oa.backward(ag.tensor(g))
    ot.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-13)


# Includes 0 (the kink), large values (exp overflow in a dropped branch) and ordinary ones.
SPECIAL = np.array([[-50.0, -3.0, -0.5, 0.0, 0.5, 3.0, 50.0, 800.0]])


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("LeakyReLU", {}),
        ("LeakyReLU", {"negative_slope": 0.2}),
        ("ELU", {}),
        ("ELU", {"alpha": 0.7}),
        ("SiLU", {}),
        ("Mish", {}),
        ("Softmax", {"dim": 1}),
        ("LogSoftmax", {"dim": 0}),
    ],
)
def test_activation_modules_match_torch(torch: Any, name: str, kwargs: dict[str, Any]) -> None:
    am, tm = getattr(nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
    assert repr(am) == repr(tm)
    _check(torch, am, tm, np.concatenate([SPECIAL, RNG.standard_normal((3, 8))]))


@pytest.mark.parametrize("name", ["leaky_relu", "elu", "mish"])
def test_functional_activations_inplace_match_torch(torch: Any, name: str) -> None:
    x = np.concatenate([SPECIAL, RNG.standard_normal((2, 8))])
    fa, ft = getattr(F, name), getattr(torch.nn.functional, name)
    _check(torch, lambda a: fa(a * 1, inplace=True), lambda t: ft(t * 1, inplace=True), x)
    _check(torch, fa, ft, x)


def test_activation_gradients_by_finite_differences() -> None:
    x = ag.tensor(RNG.standard_normal(6) * 2, requires_grad=True)
    for fn in (F.leaky_relu, F.elu, F.mish):
        assert ag.autograd.gradcheck(fn, (x,))
    np.testing.assert_allclose(
        F.elu(ag.tensor([-1.0, 2.0]), alpha=2.0).numpy(), [2.0 * (np.exp(-1.0) - 1), 2.0]
    )


def test_softmax_without_dim_warns_and_picks_torch_dim(torch: Any) -> None:
    x = RNG.standard_normal((2, 3))
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        out = nn.Softmax()(ag.tensor(x))
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        ref = torch.nn.Softmax()(torch.tensor(x))
    np.testing.assert_allclose(out.numpy(), ref.numpy())


# ============================================================================ parameter containers
def test_parameter_list_registers_and_names_as_torch(torch: Any) -> None:
    pl = nn.ParameterList([nn.Parameter(ag.randn(2)), ag.randn(3)])
    tl = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(2)), torch.randn(3)])
    assert list(pl.state_dict()) == list(tl.state_dict()) == ["0", "1"]
    assert isinstance(pl[1], nn.Parameter)
    assert pl[1].requires_grad
    pl.append(ag.zeros(4))
    assert len(pl) == 3
    assert [tuple(p.shape) for p in pl] == [(2,), (3,), (4,)]
    assert [tuple(p.shape) for p in pl[1:]] == [(3,), (4,)]
    assert len(list(pl.parameters())) == 3

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ps = nn.ParameterList([ag.ones(2), ag.ones(2)])

        def forward(self) -> Any:
            return self.ps[0] * self.ps[-1]

    m = M()
    assert list(m.state_dict()) == ["ps.0", "ps.1"]
    m().sum().backward()
    assert m.ps[0].grad is not None
    opt = ag.optim.SGD(m.parameters(), lr=1.0)
    opt.step()
    np.testing.assert_allclose(m.ps[0].detach().numpy(), [0.0, 0.0])
    with pytest.raises(IndexError, match="index 5 is out of range"):
        pl[5]
    with pytest.raises(RuntimeError, match="ParameterList should not be called"):
        pl()


def test_parameter_dict_registers_and_names_as_torch(torch: Any) -> None:
    pd = nn.ParameterDict({"b": nn.Parameter(ag.randn(2)), "a": ag.randn(3)})
    td = torch.nn.ParameterDict({"b": torch.nn.Parameter(torch.randn(2)), "a": torch.randn(3)})
    # As torch: a plain dict's entries are added sorted by key; pairs keep their order.
    assert list(pd.state_dict()) == list(td.state_dict()) == ["a", "b"]
    pd = nn.ParameterDict([("b", nn.Parameter(ag.randn(2))), ("a", ag.randn(3))])
    td = torch.nn.ParameterDict([("b", torch.nn.Parameter(torch.randn(2))), ("a", torch.randn(3))])
    assert list(pd.state_dict()) == list(td.state_dict()) == ["b", "a"]
    assert list(pd.keys()) == ["b", "a"]
    assert isinstance(pd["a"], nn.Parameter)
    assert "a" in pd
    pd["c"] = ag.zeros(1)
    assert len(pd) == 3
    assert tuple(pd.pop("b").shape) == (2,)
    assert list(pd) == ["a", "c"]
    assert pd.get("zz") is None
    assert [n for n, _ in pd.named_parameters()] == ["a", "c"]
    pd.update([("d", ag.ones(1))])
    assert list(pd.state_dict()) == ["a", "c", "d"]
    with pytest.raises(ValueError, match="element #0 should be a key-value pair"):
        pd.update([1])


# ============================================================================ interpolate
INTERP_4D = [
    {"scale_factor": 2, "mode": "nearest"},
    {"size": (3, 4), "mode": "nearest"},
    {"scale_factor": 1.7, "mode": "nearest"},
    {"scale_factor": 0.6, "mode": "nearest-exact"},
    {"size": (8, 11), "mode": "bilinear"},
    {"size": (8, 11), "mode": "bilinear", "align_corners": True},
    {"size": (2, 3), "mode": "bilinear"},
    {"scale_factor": 1.7, "mode": "bilinear"},
    {"scale_factor": (1.5, 2.5), "mode": "bilinear", "recompute_scale_factor": True},
    {"size": 1, "mode": "bilinear", "align_corners": True},
]


@pytest.mark.parametrize("kwargs", INTERP_4D)
def test_interpolate_2d_matches_torch(torch: Any, kwargs: dict[str, Any]) -> None:
    x = RNG.standard_normal((2, 3, 5, 7))
    _check(
        torch,
        lambda a: F.interpolate(a, **kwargs),
        lambda t: torch.nn.functional.interpolate(t, **kwargs),
        x,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"size": 9, "mode": "linear"},
        {"scale_factor": 3, "mode": "linear", "align_corners": True},
        {"scale_factor": 0.5, "mode": "linear"},
        {"size": 4, "mode": "nearest"},
    ],
)
def test_interpolate_1d_matches_torch(torch: Any, kwargs: dict[str, Any]) -> None:
    x = RNG.standard_normal((2, 3, 5))
    _check(
        torch,
        lambda a: F.interpolate(a, **kwargs),
        lambda t: torch.nn.functional.interpolate(t, **kwargs),
        x,
    )


def test_interpolate_closed_forms_and_gradients() -> None:
    x = ag.tensor([[[0.0, 1.0, 2.0]]])
    np.testing.assert_allclose(
        F.interpolate(x, size=5, mode="linear", align_corners=True).numpy(),
        [[[0.0, 0.5, 1.0, 1.5, 2.0]]],
    )
    np.testing.assert_allclose(
        F.interpolate(x, scale_factor=2, mode="nearest").numpy(), [[[0, 0, 1, 1, 2, 2]]]
    )
    y = ag.tensor(RNG.standard_normal((1, 2, 3, 4)), requires_grad=True)
    assert ag.autograd.gradcheck(lambda t: F.interpolate(t, size=(5, 3), mode="bilinear"), (y,))
    assert ag.autograd.gradgradcheck(
        lambda t: F.interpolate(t, scale_factor=1.5, mode="bilinear") ** 2, (y,)
    )


def test_interpolate_errors() -> None:
    x = ag.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match="align_corners option can only be set with"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(ValueError, match="only one of size or scale_factor should be defined"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="either size or scale_factor should be defined"):
        F.interpolate(x)
    with pytest.raises(NotImplementedError, match="Got 4D input, but linear mode needs 3D input"):
        F.interpolate(x, size=2, mode="linear")


# ============================================================================ nn.utils
def test_parameters_to_vector_and_back(torch: Any) -> None:
    from asyncgrad.nn.utils import parameters_to_vector, vector_to_parameters

    lin = nn.Linear(3, 2).double()
    tl = torch.nn.Linear(3, 2).double()
    tl.load_state_dict({k: torch.tensor(v.numpy()) for k, v in lin.state_dict().items()})
    va = parameters_to_vector(lin.parameters())
    vt = torch.nn.utils.parameters_to_vector(tl.parameters())
    np.testing.assert_array_equal(va.detach().numpy(), vt.detach().numpy())
    w = RNG.standard_normal(8)
    (va * ag.tensor(w)).sum().backward()  # differentiable with respect to the parameters
    np.testing.assert_array_equal(lin.weight.grad.numpy(), w[:6].reshape(2, 3))
    new = ag.tensor(np.arange(8.0))
    vector_to_parameters(new, lin.parameters())
    torch.nn.utils.vector_to_parameters(torch.arange(8.0, dtype=torch.float64), tl.parameters())
    for (n, p), q in zip(lin.named_parameters(), tl.parameters(), strict=True):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=n)
        assert p.requires_grad
    with pytest.raises(TypeError, match=r"expected torch\.Tensor, but got: ndarray"):
        vector_to_parameters(np.zeros(8), lin.parameters())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="at least 8 elements"):
        vector_to_parameters(ag.zeros(7), lin.parameters())


def test_module_to_dtype_casts_floating_buffers_only() -> None:
    m = nn.Module()
    m.register_buffer("count", ag.tensor(3))
    m.register_buffer("stat", ag.zeros(2))
    m.to(ag.float64)
    assert m.count.dtype == ag.int64
    assert m.stat.dtype == ag.float64
    m.to("cpu", ag.float16)
    assert m.count.dtype == ag.int64
    assert m.stat.dtype == ag.float16


# ============================================================================ load(weights_only=)
class _Payload:
    """Unpickling this would run a command: what a malicious checkpoint holds."""

    def __init__(self, marker: Any) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("weights_only", [True, False, None])
def test_load_accepts_weights_only_and_never_runs_code(tmp_path: Any, weights_only: Any) -> None:
    lin = nn.Linear(2, 3)
    path = tmp_path / "m.pt"
    ag.save(lin.state_dict(), path)
    sd = ag.load(path, weights_only=weights_only)
    assert list(sd) == ["weight", "bias"]
    np.testing.assert_array_equal(sd["weight"].numpy(), lin.weight.detach().numpy())
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.npz"
    with open(evil, "wb") as f:
        np.savez(f, a=np.array([_Payload(marker)], dtype=object))
    with pytest.raises(RuntimeError, match=r"object array .* never loaded"):
        ag.load(evil, weights_only=weights_only)
    assert not marker.exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale_factor": 2},
        {"size": (3, 4), "mode": "bilinear"},
        {"scale_factor": (2, 3)},
        {"scale_factor": 1.5, "mode": "bilinear", "align_corners": True},
    ],
)
def test_upsample_matches_torch(torch: Any, kwargs: dict[str, Any]) -> None:
    am, tm = nn.Upsample(**kwargs), torch.nn.Upsample(**kwargs)
    assert repr(am) == repr(tm)
    _check(torch, am, tm, RNG.standard_normal((1, 2, 3, 5)))


@pytest.mark.parametrize("name", ["leaky_relu", "elu", "mish"])
def test_activations_at_nan_and_inf_match_torch(torch: Any, name: str) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, -1e308])
    a, t = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    with np.errstate(all="ignore"):
        oa = getattr(F, name)(a)
        oa.sum().backward()
    ot = getattr(torch.nn.functional, name)(t)
    ot.sum().backward()
    np.testing.assert_array_equal(oa.detach().numpy(), ot.detach().numpy())
    np.testing.assert_array_equal(a.grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("name", ["relu", "silu"])
def test_functional_activation_inplace_matches_torch(name: str) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: it is the reference here")
    xn = np.array([-2.0, -0.5, 0.0, 0.5, 3.0])
    results = []
    for m, f in ((ag, getattr(F, name)), (torch, getattr(torch.nn.functional, name))):
        leaf = m.tensor(xn, requires_grad=True)
        h = leaf * 1.0
        out = f(h, inplace=True)
        assert out is h  # overwritten in place, as torch's
        out.sum().backward()
        results.append((h.detach().numpy().copy(), leaf.grad.numpy().copy()))
    np.testing.assert_allclose(results[0][0], results[1][0])
    np.testing.assert_allclose(results[0][1], results[1][1])


def test_modules_make_parameters_of_the_default_dtype() -> None:
    before = ag.get_default_dtype()
    ag.set_default_dtype(ag.float64)
    try:
        mods = [
            nn.Linear(3, 2),
            nn.Conv2d(1, 2, 3),
            nn.Embedding(4, 3),
            nn.LayerNorm(3),
            nn.BatchNorm1d(3),
            nn.GroupNorm(1, 3),
            nn.LSTM(3, 2),
            nn.MultiheadAttention(4, 2),
        ]
        for m in mods:
            for name, p in m.named_parameters():
                assert p.dtype == ag.float64, (type(m).__name__, name, p.dtype)
        assert nn.Parameter().dtype == ag.float64
    finally:
        ag.set_default_dtype(before)
    assert nn.Linear(3, 2).weight.dtype == ag.float32
