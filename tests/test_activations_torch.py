"""torch's activations (family H5): ``F.relu6`` ... ``F.glu``, their in-place forms, the
activation modules, ``torch.celu``/``selu``/``threshold``/``hardshrink``/``prelu`` and
``Tensor.hardshrink``/``prelu``: values and gradients against torch (kinks, saturations,
NaN/inf included), finite differences and second derivatives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

torch = pytest.importorskip("torch", reason="compares with torch")
TF = torch.nn.functional

RNG = np.random.default_rng(5)

# Every corner of the activations below (0, +-0.5, +-1, +-3, 6, the thresholds), saturations
# (an exp overflowing in a dropped branch) and ordinary values.
KINKS = np.array(
    [-800.0, -50.0, -6.0, -3.0, -2.5, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.5, 3.0, 6.0, 7.0]
)
NONFINITE = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])


def _inputs() -> np.ndarray:
    return np.concatenate([KINKS, RNG.standard_normal(16) * 3]).reshape(4, 8)


# (name, asyncgrad function, torch function): the same call on each library.
def _same(name: str, **kw: Any) -> tuple[str, Callable[..., Any], Callable[..., Any]]:
    return (
        f"{name}{kw or ''}",
        lambda x: getattr(F, name)(x, **kw),
        lambda x: getattr(TF, name)(x, **kw),
    )


ELEMENTWISE = [
    _same("relu6"),
    _same("hardtanh"),
    _same("hardtanh", min_val=-2.5, max_val=0.5),
    _same("hardsigmoid"),
    _same("hardswish"),
    _same("hardshrink"),
    _same("hardshrink", lambd=1.0),
    _same("softshrink"),
    _same("softshrink", lambd=0.0),
    _same("tanhshrink"),
    _same("softsign"),
    _same("selu"),
    _same("celu"),
    _same("celu", alpha=0.5),
    _same("logsigmoid"),
    _same("threshold", threshold=0.5, value=-7.0),
    _same("threshold", threshold=-1.0, value=0.0),
    _same("rrelu"),
    _same("rrelu", lower=0.2, upper=0.4),
    ("torch.celu", lambda x: ag.celu(x, 2.0), lambda x: torch.celu(x, 2.0)),
    ("torch.selu", ag.selu, torch.selu),
    ("torch.rrelu", ag.rrelu, torch.rrelu),
    ("torch.threshold", lambda x: ag.threshold(x, 1.0, 2.0), lambda x: torch.threshold(x, 1, 2)),
    ("torch.hardshrink", lambda x: ag.hardshrink(x, 0.25), lambda x: torch.hardshrink(x, 0.25)),
    ("Tensor.hardshrink", lambda x: x.hardshrink(), lambda x: x.hardshrink()),
]
IDS = [c[0] for c in ELEMENTWISE]


def _compare(
    fa: Callable[..., Any],
    ft: Callable[..., Any],
    *arrays: np.ndarray,
    grad: bool = True,
    grad_rtol: float = 1e-12,
) -> None:
    a = [ag.tensor(x, requires_grad=grad) for x in arrays]
    t = [torch.tensor(x, requires_grad=grad) for x in arrays]
    oa, ot = fa(*a), ft(*t)
    np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), rtol=1e-12, atol=1e-14)
    assert oa.dtype == ag.float64
    assert tuple(oa.shape) == tuple(ot.shape)
    if not grad:
        return
    g = RNG.standard_normal(tuple(ot.shape))
    ga = ag.autograd.grad(oa, a, ag.tensor(g))
    gt = torch.autograd.grad(ot, t, torch.tensor(g))
    for x, y in zip(ga, gt, strict=True):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=grad_rtol, atol=1e-14)


# torch's hardsigmoid backward multiplies by float32's 1/6 in every dtype, and its celu backward
# rounds 1 / alpha to float32 too; asyncgrad's gradients are exact in float64.
FLOAT32_CONSTANT_RTOL = 1e-6


def _rtol(name: str) -> float:
    return FLOAT32_CONSTANT_RTOL if "sigmoid" in name or "celu" in name.lower() else 1e-12


@pytest.mark.parametrize(("name", "fa", "ft"), ELEMENTWISE, ids=IDS)
def test_values_and_gradients_match_torch_at_kinks(name: str, fa: Any, ft: Any) -> None:
    _compare(fa, ft, _inputs(), grad_rtol=_rtol(name))


@pytest.mark.parametrize(("name", "fa", "ft"), ELEMENTWISE, ids=IDS)
def test_values_match_torch_at_nan_inf_and_empty(name: str, fa: Any, ft: Any) -> None:
    _compare(fa, ft, NONFINITE, grad=False)
    # gradients at NaN and +-inf under a unit output gradient
    a, t = ag.tensor(NONFINITE, requires_grad=True), torch.tensor(NONFINITE, requires_grad=True)
    (ga,) = ag.autograd.grad(fa(a).sum(), a)
    (gt,) = torch.autograd.grad(ft(t).sum(), t)
    np.testing.assert_allclose(ga.numpy(), gt.numpy(), rtol=_rtol(name), equal_nan=True)
    _compare(fa, ft, np.zeros((0, 3)), grad=False)
    _compare(fa, ft, np.array(-0.7), grad_rtol=_rtol(name))


@pytest.mark.parametrize(("name", "fa", "ft"), ELEMENTWISE, ids=IDS)
def test_float32_keeps_dtype(name: str, fa: Any, ft: Any) -> None:
    x = _inputs().astype(np.float32)
    oa, ot = fa(ag.tensor(x)), ft(torch.tensor(x))
    assert oa.dtype == ag.float32
    np.testing.assert_allclose(oa.numpy(), ot.numpy(), rtol=1e-6, atol=1e-6)


SMOOTH = [c for c in ELEMENTWISE if "shrink" not in c[0] or "tanh" in c[0]]


@pytest.mark.parametrize(("name", "fa", "ft"), SMOOTH, ids=[c[0] for c in SMOOTH])
def test_gradcheck_away_from_kinks(name: str, fa: Any, ft: Any) -> None:
    # values near none of the corners, where finite differences are exact to rounding
    x = np.array([-4.1, -2.2, -1.3, -0.7, -0.1, 0.2, 0.8, 1.6, 2.1, 4.4, 6.6])
    xa = ag.tensor(x, requires_grad=True)
    assert ag.autograd.gradcheck(fa, (xa,))


@pytest.mark.parametrize(
    "fa",
    [F.selu, F.celu, F.logsigmoid, F.softsign, F.tanhshrink, F.hardswish, F.hardsigmoid],
    ids=lambda f: f.__name__,
)
def test_gradgradcheck(fa: Any) -> None:
    x = ag.tensor(np.array([-4.1, -2.2, -0.7, -0.1, 0.2, 0.8, 2.1, 4.4]), requires_grad=True)
    assert ag.autograd.gradgradcheck(fa, (x,))


def test_second_derivatives_match_torch() -> None:
    # away from hardswish's corners, where torch's double backward takes the other side
    x = _inputs()[:, 4:7]
    for fa, ft in ((F.selu, TF.selu), (F.logsigmoid, TF.logsigmoid), (F.hardswish, TF.hardswish)):
        a, t = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        (ga,) = ag.autograd.grad(fa(a).sum(), a, create_graph=True)
        (gt,) = torch.autograd.grad(ft(t).sum(), t, create_graph=True)
        (gga,) = ag.autograd.grad(ga.sum(), a)
        (ggt,) = torch.autograd.grad(gt.sum(), t)
        np.testing.assert_allclose(gga.numpy(), ggt.numpy(), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- in place
INPLACE = [
    ("relu6", {}),
    ("hardtanh", {"min_val": -0.5}),
    ("hardsigmoid", {}),
    ("hardswish", {}),
    ("selu", {}),
    ("celu", {"alpha": 0.7}),
    ("threshold", {"threshold": 0.1, "value": 3.0}),
    ("rrelu", {}),
]


@pytest.mark.parametrize(("name", "kw"), INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_flag_matches_torch(name: str, kw: dict[str, Any]) -> None:
    fa, ft = getattr(F, name), getattr(TF, name)
    _compare(
        lambda a: fa(a * 1.0, **kw, inplace=True), lambda t: ft(t * 1.0, **kw, inplace=True),
        _inputs(), grad_rtol=_rtol(name),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fa", "ft"),
    [
        (lambda x: F.hardtanh_(x), lambda x: TF.hardtanh_(x)),
        (lambda x: F.selu_(x), lambda x: TF.selu_(x)),
        (lambda x: F.celu_(x, 2.0), lambda x: TF.celu_(x, 2.0)),
        (lambda x: F.elu_(x, 0.5), lambda x: TF.elu_(x, 0.5)),
        (lambda x: F.leaky_relu_(x, 0.2), lambda x: TF.leaky_relu_(x, 0.2)),
        (lambda x: F.relu_(x), lambda x: TF.relu_(x)),
        (lambda x: F.rrelu_(x), lambda x: TF.rrelu_(x)),
        (lambda x: F.threshold_(x, 0.0, 1.0), lambda x: TF.threshold_(x, 0.0, 1.0)),
        (lambda x: ag.celu_(x), lambda x: torch.celu_(x)),
        (lambda x: ag.selu_(x), lambda x: torch.selu_(x)),
        (lambda x: ag.rrelu_(x), lambda x: torch.rrelu_(x)),
        (lambda x: ag.threshold_(x, 0.5, 0.0), lambda x: torch.threshold_(x, 0.5, 0.0)),
        (lambda x: ag.relu_(x), lambda x: torch.relu_(x)),
    ],
)
def test_underscore_forms_overwrite_and_match_torch(fa: Any, ft: Any) -> None:
    x = _inputs()
    a, t = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ca, ct = a * 1.0, t * 1.0
    ra, rt = fa(ca), ft(ct)
    assert ra is ca
    np.testing.assert_allclose(ca.detach().numpy(), ct.detach().numpy(), rtol=1e-12)
    g = RNG.standard_normal(x.shape)
    ra.backward(ag.tensor(g))
    rt.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    leaf = ag.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        fa(leaf)


# ----------------------------------------------------------------------------- rrelu in training
def test_rrelu_training_draws_slopes_in_range_and_uses_them_as_gradient() -> None:
    ag.manual_seed(0)
    x = ag.tensor(-np.ones(20000), requires_grad=True)
    y = F.rrelu(x, 0.1, 0.3, training=True)
    slopes = -y.detach().numpy()
    assert slopes.min() >= 0.1
    assert slopes.max() <= 0.3
    assert abs(slopes.mean() - 0.2) < 3e-3
    assert abs(slopes.std() - 0.2 / np.sqrt(12)) < 3e-3  # uniform on [0.1, 0.3]
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), slopes)
    pos = ag.tensor([0.0, 1.0, 2.0])
    np.testing.assert_array_equal(F.rrelu(pos, training=True).numpy(), [0.0, 1.0, 2.0])
    ag.manual_seed(1)
    a = F.rrelu(ag.tensor(-np.ones(8)), training=True).numpy()
    ag.manual_seed(1)
    np.testing.assert_array_equal(a, F.rrelu(ag.tensor(-np.ones(8)), training=True).numpy())
    m = nn.RReLU(0.1, 0.3)
    m.eval()
    np.testing.assert_allclose(m(ag.tensor([-1.0])).numpy(), [-0.2])
    with pytest.raises(RuntimeError, match="Lower bound should be less than or equal"):
        F.rrelu(x, 0.5, 0.1, training=True)


# ----------------------------------------------------------------------------- softmin, glu, prelu
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmin_matches_torch(dim: int) -> None:
    _compare(lambda a: F.softmin(a, dim), lambda t: TF.softmin(t, dim), _inputs()[:, 3:])
    x = _inputs()
    out = F.softmin(ag.tensor(x), dim, dtype=ag.float32)
    assert out.dtype == ag.float32


def test_softmin_without_dim_warns() -> None:
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin"):
        out = F.softmin(ag.tensor(_inputs()))
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin"):
        ref = TF.softmin(torch.tensor(_inputs()))
    assert tuple(out.shape) == tuple(ref.shape)


@pytest.mark.parametrize(("shape", "dim"), [((4, 6), -1), ((4, 6), 0), ((2, 4, 3), 1), ((2,), 0)])
def test_glu_matches_torch(shape: tuple[int, ...], dim: int) -> None:
    _compare(lambda a: F.glu(a, dim), lambda t: TF.glu(t, dim), RNG.standard_normal(shape))
    x = ag.tensor(RNG.standard_normal(shape), requires_grad=True)
    assert ag.autograd.gradgradcheck(lambda t: F.glu(t, dim), (x,))


def test_glu_errors_match_torch() -> None:
    with pytest.raises(RuntimeError, match="glu does not support scalars"):
        F.glu(ag.tensor(1.0))
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension 1 is"):
        F.glu(ag.zeros(2, 3))
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        TF.glu(torch.zeros(2, 3))


@pytest.mark.parametrize(
    ("xshape", "wshape"),
    [((3, 4), (1,)), ((3, 4), (4,)), ((2, 3, 5), (3,)), ((5,), (1,)), ((), (1,))],
)
def test_prelu_matches_torch_for_input_and_weight(
    xshape: tuple[int, ...], wshape: tuple[int, ...]
) -> None:
    x = RNG.standard_normal(xshape)
    if x.ndim:
        x.flat[0] = 0.0  # the kink
    w = RNG.uniform(0.1, 0.5, wshape)
    _compare(F.prelu, TF.prelu, x, w)
    _compare(ag.prelu, torch.prelu, x, w)
    _compare(lambda a, b: a.prelu(b), lambda a, b: a.prelu(b), x, w)
    xa, wa = ag.tensor(x, requires_grad=True), ag.tensor(w, requires_grad=True)
    assert ag.autograd.gradcheck(F.prelu, (xa * 1.0 + 0.05, wa))


def test_prelu_weight_mismatch_raises_as_torch() -> None:
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel"):
        F.prelu(ag.zeros(2, 3), ag.ones(2))
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel"):
        TF.prelu(torch.zeros(2, 3), torch.ones(2))


def test_prelu_module_has_torch_parameter_and_learns() -> None:
    m, tm = nn.PReLU(3, init=0.1), torch.nn.PReLU(3, init=0.1)
    assert repr(m) == repr(tm)
    assert list(m.state_dict()) == list(tm.state_dict()) == ["weight"]
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    np.testing.assert_allclose(m.weight.detach().numpy(), tm.weight.detach().numpy())
    m.load_state_dict({"weight": ag.tensor([0.2, 0.3, 0.4], dtype=ag.float32)})
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    tm.load_state_dict({"weight": torch.tensor([0.2, 0.3, 0.4])})
    m(ag.tensor(x)).sum().backward()
    tm(torch.tensor(x)).sum().backward()
    np.testing.assert_allclose(m.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-6)
    assert nn.PReLU(dtype=ag.float64).weight.dtype == ag.float64


# ----------------------------------------------------------------------------- gumbel_softmax
def test_gumbel_softmax_samples_the_categorical_distribution() -> None:
    ag.manual_seed(0)
    logits = ag.tensor(np.log(np.array([[0.2, 0.5, 0.3]] * 6000)), requires_grad=True)
    soft = F.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.detach().numpy().sum(1), 1.0, rtol=1e-12)
    hard = F.gumbel_softmax(logits, hard=True)
    h = hard.detach().numpy()
    assert set(np.unique(h)) == {0.0, 1.0}
    np.testing.assert_array_equal(h.sum(1), 1.0)
    np.testing.assert_allclose(h.mean(0), [0.2, 0.5, 0.3], atol=0.02)
    # straight through: the hard sample's gradient is the soft sample's
    w = ag.tensor(RNG.standard_normal((6000, 3)))
    (g,) = ag.autograd.grad((hard * w).sum(), logits)
    assert np.isfinite(g.numpy()).all()
    assert np.abs(g.numpy()).sum() > 0
    with pytest.warns(UserWarning, match="`eps` parameter is deprecated"):
        F.gumbel_softmax(logits, eps=1e-3)
    out = F.gumbel_softmax(ag.zeros(4, 5, dtype=ag.float32), dim=0, hard=True)
    assert out.dtype == ag.float32
    np.testing.assert_array_equal(out.numpy().sum(0), 1.0)


# ----------------------------------------------------------------------------- modules
MODULES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("ReLU6", (), {}),
    ("ReLU6", (), {"inplace": True}),
    ("Hardtanh", (), {}),
    ("Hardtanh", (-2.0, 3.0), {"inplace": True}),
    ("Hardsigmoid", (), {}),
    ("Hardswish", (), {}),
    ("Hardshrink", (), {}),
    ("Hardshrink", (1.5,), {}),
    ("Softshrink", (), {"lambd": 0.25}),
    ("Tanhshrink", (), {}),
    ("Softsign", (), {}),
    ("Softmin", (), {"dim": 1}),
    ("Softmax2d", (), {}),
    ("SELU", (), {}),
    ("SELU", (), {"inplace": True}),
    ("CELU", (), {"alpha": 0.3}),
    ("RReLU", (), {}),
    ("RReLU", (0.1, 0.2), {"inplace": True}),
    ("Threshold", (0.1, 20.0), {}),
    ("Threshold", (0.1, 20.0), {"inplace": True}),
    ("GLU", (), {}),
    ("GLU", (1,), {}),
    ("LogSigmoid", (), {}),
    ("Softplus", (), {}),
    ("Softplus", (2.0, 1.0), {}),
]


@pytest.mark.parametrize(("name", "args", "kw"), MODULES, ids=[f"{n}{a}{k}" for n, a, k in MODULES])
def test_modules_match_torch(name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
    am, tm = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    assert repr(am) == repr(tm)
    am.eval()
    tm.eval()
    x = RNG.standard_normal((2, 4, 3, 2)) * 3
    x.flat[:4] = [0.0, 1.0, -3.0, 0.5]
    rtol = _rtol(name)
    _compare(lambda a: am(a * 1.0), lambda t: tm(t * 1.0), x, grad_rtol=rtol)


def test_softmax2d_checks_dims_as_torch() -> None:
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D"):
        nn.Softmax2d()(ag.zeros(2, 3))
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D"):
        torch.nn.Softmax2d()(torch.zeros(2, 3))


def test_hardtanh_module_checks_bounds_and_legacy_names() -> None:
    with pytest.raises(AssertionError, match="must be greater than min_val"):
        nn.Hardtanh(1.0, 0.0)
    with pytest.warns(FutureWarning, match="`min_value` is deprecated"):
        m = nn.Hardtanh(min_value=-2.0)
    assert m.min_val == -2.0


# ----------------------------------------------------------------------------- errors
def test_shrink_errors_match_torch() -> None:
    msg = r"lambda must be in range \[0, 3.40282e\+38\] for input dtype Float, but found -1"
    with pytest.raises(RuntimeError, match=msg):
        F.softshrink(ag.zeros(2), -1.0)
    with pytest.raises(RuntimeError, match=msg):
        TF.softshrink(torch.zeros(2), -1.0)
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(ag.zeros(2), 1.0, -1.0)
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        TF.hardtanh(torch.zeros(2), 1.0, -1.0)


INT_INPUT = [
    ("hardsigmoid", lambda m, x: m.hardsigmoid(x)),
    ("hardswish", lambda m, x: m.hardswish(x)),
    ("hardshrink", lambda m, x: m.hardshrink(x)),
    ("softshrink", lambda m, x: m.softshrink(x)),
    ("selu", lambda m, x: m.selu(x)),
    ("celu", lambda m, x: m.celu(x)),
    ("logsigmoid", lambda m, x: m.logsigmoid(x)),
    ("rrelu", lambda m, x: m.rrelu(x)),
    ("glu", lambda m, x: m.glu(x)),
    ("prelu", lambda m, x: m.prelu(x, x[:1])),
    ("softmin", lambda m, x: m.softmin(x, 0)),
]


@pytest.mark.parametrize(("name", "call"), INT_INPUT, ids=[n for n, _ in INT_INPUT])
def test_integer_input_raises_as_torch(name: str, call: Any) -> None:
    with pytest.raises(NotImplementedError) as want:
        call(TF, torch.tensor([1, -2, 3, 4]))
    with pytest.raises(NotImplementedError) as got:
        call(F, ag.tensor([1, -2, 3, 4]))
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("name", ["relu6", "hardtanh", "tanhshrink", "softsign"])
def test_integer_input_dtypes_as_torch(name: str) -> None:
    x = np.array([-4, -1, 0, 2, 7])
    oa, ot = getattr(F, name)(ag.tensor(x)), getattr(TF, name)(torch.tensor(x))
    assert str(oa.dtype) == str(ot.dtype).removeprefix("torch.")
    np.testing.assert_allclose(oa.numpy(), ot.numpy(), rtol=1e-6)
    out = F.softmin(ag.tensor(x), 0, dtype=ag.float64)
    np.testing.assert_allclose(out.numpy(), TF.softmin(torch.tensor(x), 0, dtype=torch.float64))
