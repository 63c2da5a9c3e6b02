"""``ag.special`` against ``torch.special``: every public function's values (edge cases
included), dtypes, gradients where torch defines them (to second order against finite
differences), and no gradient where torch has none."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="compares with torch")

RNG: Final = np.random.default_rng(5)
EDGES: Final = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 30.0, -30.0, math.inf, -math.inf, math.nan]

# name -> (low, high): where the function is smooth
UNARY: Final[dict[str, tuple[float, float]]] = {
    "expit": (-4, 4),
    "logit": (0.1, 0.9),
    "erf": (-2, 2),
    "erfc": (-2, 2),
    "erfcx": (-2, 4),
    "erfinv": (-0.9, 0.9),
    "gammaln": (0.2, 4),
    "digamma": (0.2, 4),
    "psi": (0.2, 4),
    "i0": (-3, 3),
    "i0e": (0.2, 3),
    "i1": (-3, 3),
    "i1e": (0.2, 3),
    "ndtr": (-3, 3),
    "ndtri": (0.05, 0.95),
    "log_ndtr": (-5, 3),
    "sinc": (-2, 2),
    "log1p": (-0.5, 3),
    "expm1": (-3, 3),
    "exp2": (-3, 3),
    "entr": (0.1, 3),
    "round": (-3, 3),
}
# not differentiable in torch: the result does not require grad
NO_GRAD: Final[dict[str, tuple[float, float]]] = {
    "bessel_j0": (-10, 10),
    "bessel_j1": (-10, 10),
    "bessel_y0": (0.1, 10),
    "bessel_y1": (0.1, 10),
    "modified_bessel_i0": (-5, 5),
    "modified_bessel_i1": (-5, 5),
    "modified_bessel_k0": (0.1, 5),
    "modified_bessel_k1": (0.1, 5),
    "scaled_modified_bessel_k0": (0.1, 5),
    "scaled_modified_bessel_k1": (0.1, 5),
    "spherical_bessel_j0": (-10, 10),
    "airy_ai": (-5, 5),
}
POLYNOMIALS: Final = sorted(n for n in torch.special.__all__ if "polynomial" in n)


def _ag(a: Any, dtype: Any = ag.float64, requires_grad: bool = False) -> ag.Tensor:
    return ag.tensor(a, dtype=dtype, requires_grad=requires_grad)


def _th(a: Any, requires_grad: bool = False) -> Any:
    return torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad)


def _same(ours: Any, theirs: Any, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    assert isinstance(ours, ag.Tensor)
    t = theirs.detach()
    assert ours.shape == tuple(t.shape)
    assert str(ours.dtype) == str(t.dtype).replace("torch.", ""), (ours.dtype, t.dtype)
    np.testing.assert_allclose(
        ours.detach().numpy(), t.numpy(), rtol=rtol, atol=atol, equal_nan=True
    )


def test_every_torch_special_function_is_here() -> None:
    missing = [n for n in torch.special.__all__ if not hasattr(ag.special, n)]
    assert not missing
    assert sorted(ag.special.__all__) == sorted(torch.special.__all__)


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(NO_GRAD))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_at_edges_match_torch(name: str, dtype: str) -> None:
    a = np.array(EDGES)
    ours = getattr(ag.special, name)(ag.tensor(a, dtype=getattr(ag, dtype)))
    theirs = getattr(torch.special, name)(torch.tensor(a, dtype=getattr(torch, dtype)))
    # (torch's Airy function is accurate to about 1e-5 away from 0, SciPy's to the last bit)
    rtol = 3e-5 if name == "airy_ai" else 2e-5 if dtype == "float32" else 1e-9
    _same(ours, theirs, rtol=rtol, atol=1e-30)


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(NO_GRAD))
@pytest.mark.parametrize("case", ["int", "empty", "0-d"])
def test_integers_empty_and_0d_match_torch(name: str, case: str) -> None:
    if case == "int":
        a, dt = np.array([[1, 2], [3, 0]]), "int64"
    elif case == "empty":
        a, dt = np.zeros((2, 0)), "float32"
    else:
        a, dt = np.array(0.75), "float64"
    ours = getattr(ag.special, name)(ag.tensor(a, dtype=getattr(ag, dt)))
    try:
        theirs = getattr(torch.special, name)(torch.tensor(a, dtype=getattr(torch, dt)))
    except NotImplementedError:  # special.round of integers: torch's round takes them
        assert name == "round"
        _same(ours, torch.round(torch.tensor(a, dtype=getattr(torch, dt))))
        return
    _same(ours, theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_gradients_match_torch(name: str) -> None:
    lo, hi = UNARY[name]
    a = RNG.uniform(lo, hi, (3, 4))
    x, xt = _ag(a, requires_grad=True), _th(a, requires_grad=True)
    y, yt = getattr(ag.special, name)(x), getattr(torch.special, name)(xt)
    _same(y, yt)
    (g,) = ag.grad_sync(y.sum(), [x])
    (gt,) = torch.autograd.grad(yt.sum(), [xt])
    if gt._is_zerotensor():
        gt = torch.zeros_like(xt)
    _same(g, gt)


@pytest.mark.parametrize("name", sorted(set(UNARY) - {"round"}))
def test_gradcheck_and_gradgradcheck(name: str) -> None:
    lo, hi = UNARY[name]
    x = _ag(RNG.uniform(lo, hi, (2, 3)), requires_grad=True)
    fn = getattr(ag.special, name)
    assert gradcheck(fn, (x,), eps=1e-6, atol=1e-5, rtol=1e-3)
    assert gradgradcheck(fn, (x,), eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("name", sorted(NO_GRAD) + POLYNOMIALS)
def test_functions_torch_does_not_differentiate_need_no_grad(name: str) -> None:
    x, xt = _ag([0.5, 1.5], requires_grad=True), _th([0.5, 1.5], requires_grad=True)
    args: tuple[Any, ...] = (3,) if "polynomial" in name else ()
    y, yt = getattr(ag.special, name)(x, *args), getattr(torch.special, name)(xt, *args)
    assert yt.requires_grad is False
    assert y.requires_grad is False


@pytest.mark.parametrize("name", POLYNOMIALS)
@pytest.mark.parametrize("n", [-2, 0, 1, 2, 3, 6, 9, 2.7])
def test_polynomials_match_torch(name: str, n: float) -> None:
    a = np.linspace(-1.2, 1.2, 13)  # (not NaN: torch's value there is the previous element's)
    if "laguerre" in name or "shifted" in name:
        a = a / 2 + 0.5
    ours = getattr(ag.special, name)(_ag(a), n)
    theirs = getattr(torch.special, name)(_th(a), n)
    _same(ours, theirs, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomials_take_tensor_degrees_and_broadcast(name: str) -> None:
    x, n = np.linspace(-0.9, 0.9, 4).reshape(4, 1), np.array([0, 1, 4, 7, -1])
    ours = getattr(ag.special, name)(_ag(x), ag.tensor(n))
    theirs = getattr(torch.special, name)(_th(x), torch.tensor(n))
    _same(ours, theirs, rtol=1e-7, atol=1e-9)
    f32 = getattr(ag.special, name)(ag.tensor(x, dtype=ag.float32), 3)
    _same(f32, getattr(torch.special, name)(torch.tensor(x, dtype=torch.float32), 3), 1e-5)
    _same(
        getattr(ag.special, name)(0.5, ag.tensor(n)),
        getattr(torch.special, name)(0.5, torch.tensor(n)),
        atol=2e-6,  # float32, near a root
    )


BINARY: Final[dict[str, tuple[Callable[..., Any], tuple[float, float], tuple[bool, bool]]]] = {
    # name -> (torch's function, input range, which inputs torch differentiates)
    "xlogy": (torch.special.xlogy, (0.2, 3), (True, True)),
    "xlog1py": (torch.special.xlog1py, (0.2, 3), (True, True)),
    "zeta": (torch.special.zeta, (1.5, 4), (False, True)),
    "gammainc": (torch.special.gammainc, (0.5, 3), (False, True)),
    "gammaincc": (torch.special.gammaincc, (0.5, 3), (False, True)),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values_and_grads_match_torch(name: str) -> None:
    theirs_fn, (lo, hi), need = BINARY[name]
    a, b = RNG.uniform(lo, hi, (3, 1)), RNG.uniform(lo, hi, (4,))
    x, y = _ag(a, requires_grad=need[0]), _ag(b, requires_grad=need[1])
    xt, yt = _th(a, requires_grad=need[0]), _th(b, requires_grad=need[1])
    out, out_t = getattr(ag.special, name)(x, y), theirs_fn(xt, yt)
    _same(out, out_t)
    ins = [v for v, n in zip((x, y), need, strict=True) if n]
    ins_t = [v for v, n in zip((xt, yt), need, strict=True) if n]
    for g, gt in zip(
        ag.grad_sync(out.sum(), ins), torch.autograd.grad(out_t.sum(), ins_t), strict=True
    ):
        _same(g, gt)
    # numbers for either operand, and torch's dtypes for float32 and integer tensors
    for args in ((x, 2.0), (2.0, y)):
        try:
            expected = theirs_fn(*(v if isinstance(v, float) else {x: xt, y: yt}[v] for v in args))
        except TypeError:  # (torch's gammainc takes no number)
            continue
        _same(getattr(ag.special, name)(*args), expected)
    ai = np.array([1, 2, 3])
    _same(
        getattr(ag.special, name)(ag.tensor(ai), ag.tensor(ai, dtype=ag.float32)),
        theirs_fn(torch.tensor(ai), torch.tensor(ai, dtype=torch.float32)),
        rtol=1e-5,
    )
    # gradients to second order where torch has them
    f = getattr(ag.special, name)
    if need[0]:
        assert gradgradcheck(f, (x, y), eps=1e-6, atol=1e-5, rtol=1e-3)
    else:
        assert gradgradcheck(lambda v: f(_ag(a), v), (y,), eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("name", ["zeta", "gammainc", "gammaincc"])
def test_first_input_has_no_derivative_as_torch(name: str) -> None:
    theirs_fn = BINARY[name][0]
    xt = _th([1.5, 2.5], requires_grad=True)
    with pytest.raises(NotImplementedError) as info:
        torch.autograd.grad(theirs_fn(xt, _th([2.0])).sum(), [xt])
    x = _ag([1.5, 2.5], requires_grad=True)
    with pytest.raises(NotImplementedError, match=str(info.value).split(":")[0].split(".")[0]):
        ag.grad_sync(getattr(ag.special, name)(x, _ag([2.0])).sum(), [x])


def test_xlogy_and_xlog1py_at_zero_match_torch() -> None:
    a, b = [0.0, 0.0, 0.0, 1.0, 0.0], [0.0, -1.0, math.nan, 0.0, 2.0]
    for name in ("xlogy", "xlog1py"):
        x, y = _ag(a, requires_grad=True), _ag(b, requires_grad=True)
        xt, yt = _th(a, requires_grad=True), _th(b, requires_grad=True)
        out, out_t = getattr(ag.special, name)(x, y), getattr(torch.special, name)(xt, yt)
        _same(out, out_t)
        for g, gt in zip(
            ag.grad_sync(out.sum(), [x, y]), torch.autograd.grad(out_t.sum(), [xt, yt]), strict=True
        ):
            _same(g, gt)


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: m.polygamma(0, x),
        lambda m, x: m.polygamma(1, x),
        lambda m, x: m.polygamma(3, x),
        lambda m, x: m.multigammaln(x + 2.0, 3),
        lambda m, x: m.logit(x / 4.0, eps=0.1),
        lambda m, x: m.round(x, decimals=1),
        lambda m, x: m.softmax(x, 1),
        lambda m, x: m.log_softmax(x, 0),
        lambda m, x: m.logsumexp(x, 1),
        lambda m, x: m.logsumexp(x, (0, 1), keepdim=True),
    ],
)
def test_functions_with_parameters_match_torch(call: Callable[..., Any]) -> None:
    a = RNG.uniform(0.5, 3.0, (3, 4))
    x, xt = _ag(a, requires_grad=True), _th(a, requires_grad=True)
    y, yt = call(ag.special, x), call(torch.special, xt)
    _same(y, yt)
    w = RNG.standard_normal(tuple(yt.shape))
    (g,) = ag.grad_sync((y * _ag(w)).sum(), [x])
    (gt,) = torch.autograd.grad((yt * _th(w)).sum(), [xt])
    if gt._is_zerotensor():
        gt = torch.zeros_like(xt)
    _same(g, gt)
