"""Pointwise math (asyncgrad/ops/pointwise_math.py) against torch: inverse trig, hyperbolic,
rounding, logs and exponentials, special functions, binary math, bitwise and logical ops,
predicates, aliases, the Tensor methods and the in-place forms. Values, dtypes and gradients
against torch; gradients to second order against finite differences."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="compares with torch")

RNG: Final = np.random.default_rng(11)

# name -> (low, high) of the inputs where the function is smooth (values and gradients)
UNARY: Final[dict[str, tuple[float, float]]] = {
    "acos": (-0.9, 0.9),
    "arccos": (-0.9, 0.9),
    "asin": (-0.9, 0.9),
    "arcsin": (-0.9, 0.9),
    "atan": (-3, 3),
    "arctan": (-3, 3),
    "acosh": (1.2, 4),
    "arccosh": (1.2, 4),
    "asinh": (-3, 3),
    "arcsinh": (-3, 3),
    "atanh": (-0.9, 0.9),
    "arctanh": (-0.9, 0.9),
    "sinh": (-3, 3),
    "cosh": (-3, 3),
    "exp2": (-3, 3),
    "log2": (0.2, 4),
    "log10": (0.2, 4),
    "erfc": (-2, 2),
    "erfinv": (-0.9, 0.9),
    "lgamma": (0.2, 4),
    "digamma": (0.2, 4),
    "i0": (-3, 3),
    "sinc": (-2, 2),
    "logit": (0.1, 0.9),
    "deg2rad": (-3, 3),
    "rad2deg": (-3, 3),
    "square": (-3, 3),
    "frac": (-3, 3),
    "absolute": (0.2, 3),
    "negative": (-3, 3),
    "positive": (-3, 3),
    "nan_to_num": (-3, 3),
    "angle": (-3, 3),
    "sgn": (-3, 3),
    "ceil": (-3, 3),
    "floor": (-3, 3),
    "trunc": (-3, 3),
    "fix": (-3, 3),
    "round": (-3, 3),
}
# values only (no gradient)
PREDICATES: Final = ("signbit", "isinf", "isposinf", "isneginf", "isreal")
SPECIAL_VALUES: Final = [0.0, -0.0, 1.0, -1.0, 0.5, -2.0, math.inf, -math.inf, math.nan, 1e-30]


def _ag(a: Any, dtype: Any = ag.float64, requires_grad: bool = False) -> ag.Tensor:
    return ag.tensor(a, dtype=dtype, requires_grad=requires_grad)


def _th(a: Any, dtype: Any = None, requires_grad: bool = False) -> Any:
    return torch.tensor(a, dtype=dtype or torch.float64, requires_grad=requires_grad)


def _same(ours: Any, theirs: Any, rtol: float = 1e-6, atol: float = 1e-9) -> None:
    if isinstance(theirs, tuple):
        for o, t in zip(ours, theirs, strict=True):
            _same(o, t, rtol, atol)
        return
    assert isinstance(ours, ag.Tensor)
    t = theirs.detach()
    if t._is_zerotensor():  # torch's symbolic zero gradient (sgn, ...)
        t = torch.zeros(t.shape, dtype=t.dtype)
    assert ours.shape == tuple(t.shape)
    assert str(ours.dtype).replace("bool_", "bool") == str(t.dtype).replace("torch.", ""), (
        ours.dtype,
        t.dtype,
    )
    np.testing.assert_allclose(
        ours.detach().numpy(), t.numpy(), rtol=rtol, atol=atol, equal_nan=True
    )


def _smooth(lo: float, hi: float, shape: tuple[int, ...] = (3, 4)) -> Any:
    return RNG.uniform(lo, hi, shape)


# ----- unary: values, dtypes and gradients against torch -----
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_and_grads_match_torch(name: str) -> None:
    lo, hi = UNARY[name]
    a = _smooth(lo, hi)
    if name in ("ceil", "floor", "trunc", "fix", "round", "frac"):
        a = np.round(a, 1) + 0.05  # away from the jumps
    x, xt = _ag(a, requires_grad=True), _th(a, requires_grad=True)
    y, yt = getattr(ag, name)(x), getattr(torch, name)(xt)
    _same(y, yt)
    w = RNG.standard_normal(a.shape)
    (g,) = ag.grad_sync((y * _ag(w)).sum(), [x])
    (gt,) = torch.autograd.grad((yt * _th(w)).sum(), [xt])
    _same(g, gt, rtol=1e-6, atol=1e-9)
    # the Tensor method (positive, absolute, ... are methods too)
    _same(getattr(x, name)(), getattr(xt, name)())


@pytest.mark.parametrize("name", sorted(UNARY) + list(PREDICATES))
def test_unary_special_inputs_and_dtypes_match_torch(name: str) -> None:
    for dtype in ("float32", "float64", "int64", "empty", "0-d"):
        _unary_special_case(name, dtype)


def _unary_special_case(name: str, dtype: str) -> None:
    if dtype in ("float32", "float64"):
        a, dt = np.array(SPECIAL_VALUES), dtype
    elif dtype == "int64":
        a, dt = np.array([-3, -1, 0, 1, 2, 5]), "int64"
    elif dtype == "empty":
        a, dt = np.zeros((0, 3)), "float32"
    else:
        a, dt = np.array(0.25), "float32"
    ours_fn, theirs_fn = getattr(ag, name), getattr(torch, name)
    try:
        expected = theirs_fn(torch.tensor(a, dtype=getattr(torch, dt)))
    except RuntimeError as e:  # torch refuses the dtype: so do we
        with pytest.raises(RuntimeError, match=str(e).split("'")[0][:10].replace('"', "")):
            ours_fn(ag.tensor(a, dtype=getattr(ag, dt)))
        return
    ours = ours_fn(ag.tensor(a, dtype=getattr(ag, dt)))
    _same(ours, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["round", "logit", "polygamma", "mvlgamma", "nan_to_num"])
def test_unary_with_parameters_match_torch(name: str) -> None:
    a = _smooth(0.6, 3.0)
    x, xt = _ag(a, requires_grad=True), _th(a, requires_grad=True)
    calls: dict[str, list[tuple[Callable[..., Any], Callable[..., Any]]]] = {
        "round": [
            (lambda t: ag.round(t, decimals=2), lambda t: torch.round(t, decimals=2)),
            (lambda t: t.round(decimals=-1), lambda t: t.round(decimals=-1)),
        ],
        "logit": [
            (lambda t: ag.logit(t / 4, 0.2), lambda t: torch.logit(t / 4, 0.2)),
            (lambda t: t.logit(), lambda t: t.logit()),
            (lambda t: ag.logit(t - 1.5), lambda t: torch.logit(t - 1.5)),  # NaN outside [0, 1]
        ],
        "polygamma": [
            (lambda t, n=n: ag.polygamma(n, t), lambda t, n=n: torch.polygamma(n, t))
            for n in range(4)
        ]
        + [(lambda t: t.polygamma(2), lambda t: t.polygamma(2))],
        "mvlgamma": [
            (lambda t, p=p: ag.mvlgamma(t + 1.5, p), lambda t, p=p: torch.mvlgamma(t + 1.5, p))
            for p in (1, 2, 3)
        ],
        "nan_to_num": [
            (
                lambda t: ag.nan_to_num(t.log() * _ag([[math.inf], [math.nan], [-math.inf]])),
                lambda t: torch.nan_to_num(t.log() * _th([[math.inf], [math.nan], [-math.inf]])),
            ),
            (
                lambda t: ag.nan_to_num(t / 0.0 - 1.0, 1.0, 2.0, -3.0),
                lambda t: torch.nan_to_num(t / 0.0 - 1.0, 1.0, 2.0, -3.0),
            ),
        ],
    }
    for ours_fn, theirs_fn in calls[name]:
        y, yt = ours_fn(x), theirs_fn(xt)
        _same(y, yt)
        (g,) = ag.grad_sync(y.sum(), [x])
        (gt,) = torch.autograd.grad(yt.sum(), [xt])
        _same(g, gt)


# ----- binary: values, broadcasting, numbers and gradients against torch -----
# name -> (low, high) of both inputs
BINARY: Final[dict[str, tuple[float, float]]] = {
    "atan2": (-3, 3),
    "arctan2": (-3, 3),
    "hypot": (-3, 3),
    "copysign": (-3, 3),
    "logaddexp": (-3, 3),
    "logaddexp2": (-3, 3),
    "xlogy": (0.2, 3),
    "fmod": (0.5, 3),
    "fmax": (-3, 3),
    "fmin": (-3, 3),
    "nextafter": (-3, 3),
    "igamma": (0.5, 3),
    "igammac": (0.5, 3),
    "float_power": (0.5, 3),
    "multiply": (-3, 3),
    "divide": (0.5, 3),
    "true_divide": (0.5, 3),
    "subtract": (-3, 3),
}
# torch gives these no gradient for the first or second input (it raises on backward)
NO_GRAD_INPUT: Final = {"igamma": 0, "igammac": 0}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values_and_grads_match_torch(name: str) -> None:
    for shapes in (((3, 4), (3, 4)), ((3, 1), (4,)), ((), (2, 3))):
        _binary_case(name, shapes)


def _binary_case(name: str, shapes: tuple[Any, Any]) -> None:
    lo, hi = BINARY[name]
    a, b = _smooth(lo, hi, shapes[0]), _smooth(lo, hi, shapes[1])
    need = [i != NO_GRAD_INPUT.get(name) for i in range(2)]
    x, y = _ag(a, requires_grad=need[0]), _ag(b, requires_grad=need[1])
    xt, yt = _th(a, requires_grad=need[0]), _th(b, requires_grad=need[1])
    out, out_t = getattr(ag, name)(x, y), getattr(torch, name)(xt, yt)
    _same(out, out_t)
    _same(getattr(x, name)(y), getattr(xt, name)(yt))
    ins = [v for v, n in zip((x, y), need, strict=True) if n]
    ins_t = [v for v, n in zip((xt, yt), need, strict=True) if n]
    w = RNG.standard_normal(out.shape)
    gs = ag.grad_sync((out * _ag(w)).sum(), ins)
    gts = torch.autograd.grad((out_t * _th(w)).sum(), ins_t)
    for g, gt in zip(gs, gts, strict=True):
        _same(g, gt)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_a_number_gives_torchs_dtype(name: str) -> None:
    for number in (2, 0.75, -1.5):
        for dtype in ("float32", "int64"):
            _number_case(name, number, dtype)


def _number_case(name: str, number: float, dtype: str) -> None:
    if name in ("xlogy", "igamma", "igammac", "float_power", "fmod", "divide", "true_divide"):
        number = abs(number)
    a = np.array([[0.5, 1.0, 2.5], [3.0, 1.5, 0.25]])
    if dtype == "int64":
        a = np.array([[1, 2, 3], [4, 5, 6]])
    th_in = torch.tensor(a, dtype=getattr(torch, dtype))
    try:
        expected = getattr(torch, name)(th_in, number)
    except (RuntimeError, TypeError):  # torch takes no number here
        return
    _same(getattr(ag, name)(ag.tensor(a, dtype=getattr(ag, dtype)), number), expected, 1e-5)


def test_fmax_fmin_ties_and_nan_gradients_match_torch() -> None:
    a = [1.0, math.nan, 2.0, 3.0, math.nan]
    b = [1.0, 2.0, math.nan, 1.0, math.nan]
    for name in ("fmax", "fmin", "copysign", "hypot", "atan2", "xlogy"):
        x, y = _ag(a, requires_grad=True), _ag(b, requires_grad=True)
        xt, yt = _th(a, requires_grad=True), _th(b, requires_grad=True)
        out, out_t = getattr(ag, name)(x, y), getattr(torch, name)(xt, yt)
        _same(out, out_t)
        gs = ag.grad_sync(out.sum(), [x, y])
        gts = torch.autograd.grad(out_t.sum(), [xt, yt])
        for g, gt in zip(gs, gts, strict=True):
            _same(g, gt)


def test_xlogy_at_zero_and_copysign_at_zero_match_torch() -> None:
    a, b = [0.0, 0.0, 0.0, 2.0, -0.0], [0.0, -1.0, 3.0, 0.0, 2.0]
    for name in ("xlogy", "copysign"):
        x, y = _ag(a, requires_grad=True), _ag(b, requires_grad=True)
        xt, yt = _th(a, requires_grad=True), _th(b, requires_grad=True)
        out, out_t = getattr(ag, name)(x, y), getattr(torch, name)(xt, yt)
        _same(out, out_t)
        gs = ag.grad_sync(out.sum(), [x, y])
        gts = torch.autograd.grad(out_t.sum(), [xt, yt])
        for g, gt in zip(gs, gts, strict=True):
            _same(g, gt)


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x, y, w: m.lerp(x, y, w),
        lambda m, x, y, w: m.lerp(x, y, 0.3),
        lambda m, x, y, w: m.addcmul(x, y, w),
        lambda m, x, y, w: m.addcmul(x, y, w, value=-0.5),
        lambda m, x, y, w: m.addcdiv(x, y, w + 4.0),
        lambda m, x, y, w: m.addcdiv(x, y, w + 4.0, value=2),
        lambda m, x, y, w: m.clamp_min(x, y),
        lambda m, x, y, w: m.clamp_max(x, 0.1),
        lambda m, x, y, w: m.ldexp(x, (w * 3).round()),
        lambda m, x, y, w: m.heaviside(x.detach(), y.detach()),
        lambda m, x, y, w: m.float_power(x, 2),
        lambda m, x, y, w: m.where(x > 0, x, y),
        lambda m, x, y, w: x.where(x > 0, y),
    ],
)
def test_ternary_and_composites_match_torch(call: Callable[..., Any]) -> None:
    a, b, c = _smooth(-1, 1, (2, 3)), _smooth(-1, 1, (3,)), _smooth(-1, 1, (2, 1))
    ins = [_ag(v, requires_grad=True) for v in (a, b, c)]
    ins_t = [_th(v, requires_grad=True) for v in (a, b, c)]
    out, out_t = call(ag, *ins), call(torch, *ins_t)
    _same(out, out_t)
    if out_t.requires_grad:
        gs = ag.grad_sync(out.sum(), ins, allow_unused=True)
        gts = torch.autograd.grad(out_t.sum(), ins_t, allow_unused=True)
        for g, gt in zip(gs, gts, strict=True):
            if gt is None:
                assert g is None or not g.numpy().any()
            else:
                _same(g, gt)


def test_frexp_matches_torch() -> None:
    a = np.array([0.0, 1.0, -3.5, 1e-30, 1024.0, math.inf])
    m, e = ag.frexp(_ag(a))
    mt, et = torch.frexp(_th(a))
    _same(m, mt)
    _same(e, et)
    assert ag.frexp(_ag(a)).mantissa is not None
    with pytest.raises(RuntimeError, match="only supports floating-point"):
        ag.frexp(ag.tensor([1, 2]))


# ----- integers, bits and logic -----
BITWISE: Final = (
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "gcd",
    "lcm",
    "logical_xor",
)


@pytest.mark.parametrize("name", BITWISE)
def test_integer_ops_match_torch(name: str) -> None:
    for dtype in ("int64", "int32", "uint8", "bool"):
        _integer_case(name, dtype)


def _integer_case(name: str, dtype: str) -> None:
    a, b = np.array([[0, 1, 5, 12], [7, 3, 2, 9]]), np.array([1, 3, 2, 4])
    if dtype == "bool":
        a, b = a % 2, b % 2
    ta, tb = (
        torch.tensor(a, dtype=getattr(torch, dtype)),
        torch.tensor(b, dtype=getattr(torch, dtype)),
    )
    xa, xb = ag.tensor(a, dtype=getattr(ag, dtype)), ag.tensor(b, dtype=getattr(ag, dtype))
    try:
        expected = getattr(torch, name)(ta, tb)
    except RuntimeError:  # torch takes no such dtype here
        return
    _same(getattr(ag, name)(xa, xb), expected)
    _same(getattr(xa, name)(xb), getattr(ta, name)(tb))
    if dtype != "bool" and name not in ("logical_xor", "gcd", "lcm"):  # (torch: no numbers)
        _same(getattr(ag, name)(xa, 2), getattr(torch, name)(ta, 2))


@pytest.mark.parametrize("name", [*BITWISE[:5], "gcd", "lcm", "bitwise_not"])
def test_integer_ops_refuse_floats_as_torch(name: str) -> None:
    x, xt = ag.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    args, args_t = ((x,), (xt,)) if name == "bitwise_not" else ((x, x), (xt, xt))
    with pytest.raises(RuntimeError) as info:
        getattr(torch, name)(*args_t)
    with pytest.raises(RuntimeError, match="not implemented for 'Float'") as ours:
        getattr(ag, name)(*args)
    assert str(ours.value) == str(info.value)
    assert type(ours.value) is type(info.value)


def test_bitwise_not_matches_torch() -> None:
    for dt in ("int64", "bool", "uint8"):
        a = np.array([0, 1, 5]) % (2 if dt == "bool" else 256)
        _same(
            ag.bitwise_not(ag.tensor(a, dtype=getattr(ag, dt))),
            torch.bitwise_not(torch.tensor(a, dtype=getattr(torch, dt))),
        )


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical_methods_match_torch(name: str) -> None:
    a, b = [0.0, 1.0, 2.0, 0.0], [0.0, 0.0, 3.0, 1.0]
    _same(getattr(_ag(a), name)(_ag(b)), getattr(_th(a), name)(_th(b)))
    x, xt = _ag(a), _th(a)
    getattr(x, name + "_")(_ag(b))
    getattr(xt, name + "_")(_th(b))
    _same(x, xt)


# ----- comparisons and predicates -----
@pytest.mark.parametrize(
    "name", ["greater", "greater_equal", "less", "less_equal", "not_equal", "isclose"]
)
def test_comparison_aliases_match_torch(name: str) -> None:
    a, b = [1.0, 2.0, math.nan, 3.0, 1.0 + 1e-9], [1.0, 3.0, math.nan, 2.0, 1.0]
    _same(getattr(ag, name)(_ag(a), _ag(b)), getattr(torch, name)(_th(a), _th(b)))
    if name != "isclose":  # (torch's isclose takes no number)
        _same(getattr(_ag(a), name)(2.0), getattr(_th(a), name)(2.0))


def test_isclose_options_match_torch() -> None:
    a, b = [1.0, math.nan, 1.1, math.inf], [1.05, math.nan, 1.0, math.inf]
    for kw in ({}, {"equal_nan": True}, {"rtol": 0.1}, {"atol": 0.2, "rtol": 0.0}):
        _same(ag.isclose(_ag(a), _ag(b), **kw), torch.isclose(_th(a), _th(b), **kw))
    with pytest.raises(RuntimeError, match="Float did not match Double"):
        ag.isclose(ag.tensor([1.0]), _ag([1.0]))


@pytest.mark.parametrize("name", ["lt", "le", "gt", "ge", "pow", "add", "mul", "sub", "div"])
def test_non_numbers_raise_type_error_as_torch(name: str) -> None:
    for other in ("a", None, [1.0, 2.0], object()):
        with pytest.raises(TypeError):
            getattr(torch, name)(torch.tensor([1.0, 2.0]), other)
        with pytest.raises(TypeError, match=rf"{name}\(\) received an invalid combination"):
            getattr(ag, name)(ag.tensor([1.0, 2.0]), other)


@pytest.mark.parametrize("name", ["lt", "eq", "ne", "pow", "ge"])
def test_numbers_are_accepted_as_torch(name: str) -> None:
    a = [1.0, 2.0, 3.0]
    for other in (2, 2.5, True, np.float32(1.5)):
        _same(getattr(ag, name)(_ag(a), other), getattr(torch, name)(_th(a), other))


def test_real_of_a_real_tensor_is_itself() -> None:
    x = _ag([1.0, 2.0])
    assert ag.real(x) is x
    assert x.real is x
    _same(ag.isreal(x), torch.isreal(_th([1.0, 2.0])))


# ----- gradients against finite differences, to second order -----
GRADCHECK: Final[dict[str, tuple[Callable[..., Any], tuple[float, float], int]]] = {
    # name -> (function, input range, number of inputs)
    **{
        n: (getattr(ag, n), r, 1)
        for n, r in UNARY.items()
        if n not in ("ceil", "floor", "trunc", "fix", "round", "sgn", "angle", "positive")
    },
    "polygamma": (lambda x: ag.polygamma(2, x), (0.5, 3), 1),
    "mvlgamma": (lambda x: ag.mvlgamma(x, 3), (1.5, 3), 1),
    "logit_eps": (lambda x: ag.logit(x, 0.05), (0.1, 0.9), 1),
    "round_decimals": (lambda x: ag.round(x, decimals=1) + x, (-2, 2), 1),
    **{n: (getattr(ag, n), r, 2) for n, r in BINARY.items() if n not in NO_GRAD_INPUT},
    "igamma": (lambda x: ag.igamma(ag.tensor([[1.5], [2.5]], dtype=ag.float64), x), (0.5, 3), 1),
    "igammac": (lambda x: ag.igammac(ag.tensor([[1.5], [2.5]], dtype=ag.float64), x), (0.5, 3), 1),
    "lerp": (lambda x, y: ag.lerp(x, y, y * x), (-1, 1), 2),
    "addcmul": (lambda x, y: ag.addcmul(x, y, x, value=0.5), (-1, 1), 2),
    "addcdiv": (lambda x, y: ag.addcdiv(x, y, x + 3.0, value=0.5), (-1, 1), 2),
    "ldexp": (lambda x: ag.ldexp(x, ag.tensor([1, -2, 0])), (-1, 1), 1),
}


@pytest.mark.parametrize("name", sorted(GRADCHECK))
def test_gradcheck_and_gradgradcheck(name: str) -> None:
    fn, (lo, hi), n = GRADCHECK[name]
    if name in ("frac",):
        fn = lambda x: ag.frac(x * 0.3)  # noqa: E731 - away from the jumps
    inputs = tuple(_ag(_smooth(lo, hi, (2, 3)), requires_grad=True) for _ in range(n))
    assert gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)
    assert gradgradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)


def test_no_gradient_where_torch_has_none() -> None:
    x = _ag([0.5, 1.5], requires_grad=True)
    with pytest.raises(RuntimeError, match="derivative for aten::heaviside is not implemented"):
        ag.grad_sync(ag.heaviside(x, _ag([0.5])).sum(), [x])
    with pytest.raises(NotImplementedError, match="the derivative for 'igamma: input'"):
        ag.grad_sync(ag.igamma(x, _ag([2.0])).sum(), [x])
    (g,) = ag.grad_sync(ag.nextafter(x, _ag([2.0])).sum(), [x])  # torch: the identity's
    assert g.tolist() == [1.0, 1.0]


# ----- errors -----
def test_errors_match_torch() -> None:
    x = ag.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"polygamma\(n, x\) does not support negative n"):
        ag.polygamma(-1, x)
    with pytest.raises(RuntimeError, match=r"All elements must be greater than \(p-1\)/2"):
        ag.mvlgamma(x, 4)
    with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
        ag.mvlgamma(x, 0)
    with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer"):
        ag.addcdiv(x, ag.tensor([1, 2]), ag.tensor([3, 4]))
    with pytest.raises(RuntimeError, match="frac_cpu\" not implemented for 'Long'"):
        ag.frac(ag.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="bool tensor is not supported"):
        ag.positive(ag.tensor([True]))
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for tensors with"):
        ag.heaviside(x, ag.tensor([1.0], dtype=ag.float64))
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        ag.atan2(ag.ones(2), ag.ones(3))
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        ag.xlogy(ag.ones(2), ag.ones(3))


# ----- in-place forms -----
INPLACE_UNARY: Final = sorted(
    n
    for n in dir(torch.Tensor)
    if n.endswith("_")
    and not n.startswith("_")
    and n[:-1] in {*UNARY, "abs", "cos", "sin", "tan", "tanh", "exp", "expm1", "log", "log1p",
                   "sqrt", "rsqrt", "reciprocal", "sigmoid", "sign", "erf", "neg", "i0",
                   "digamma", "lgamma", "erfinv", "erfc", "sinc", "sgn", "logit", "nan_to_num"}
)  # fmt: skip
INPLACE_BINARY: Final = sorted(
    n
    for n in dir(torch.Tensor)
    if n.endswith("_")
    and n[:-1] in {*BINARY, "atan2", "hypot", "eq", "ne", "lt", "le", "gt", "ge", "greater",
                   "greater_equal", "less", "less_equal", "not_equal", "remainder", "xlogy",
                   "floor_divide", "copysign", "fmod", "nextafter", "ldexp"}
    and n[:-1] not in ("fmax", "fmin")
)  # fmt: skip


def test_every_inplace_form_exists() -> None:
    for n in INPLACE_UNARY + INPLACE_BINARY:
        assert hasattr(ag.Tensor, n), n
    torch_level = {n for n in torch.__all__ if n.endswith("_")}
    ours = {n[:-1] for n in INPLACE_UNARY + INPLACE_BINARY} | {
        "clamp_max",
        "clamp_min",
        "gcd",
        "lcm",
    }
    for n in sorted(torch_level):
        if n[:-1] in ours:
            assert hasattr(ag, n), n


@pytest.mark.parametrize("name", INPLACE_UNARY)
def test_inplace_unary_matches_torch(name: str) -> None:
    lo, hi = UNARY.get(name[:-1], (0.2, 0.8))
    a = _smooth(lo, hi, (2, 3))
    leaf, leaf_t = _ag(a, requires_grad=True), _th(a, requires_grad=True)
    x, xt = leaf * 1.0, leaf_t * 1.0
    v = x._version
    assert getattr(x, name)() is x
    getattr(xt, name)()
    assert x._version == v + 1
    _same(x, xt)
    (g,) = ag.grad_sync(x.sum(), [leaf])
    try:
        if name == "sgn_":  # 0 (torch's ZeroTensor backward takes seconds on first use)
            raise NotImplementedError
        (gt,) = torch.autograd.grad(xt.sum(), [leaf_t])
    except NotImplementedError:  # torch: "the derivative for 'inplace version of acosh'"
        gt = torch.autograd.grad(getattr(torch, name[:-1])(leaf_t * 1.0).sum(), [leaf_t])[0]
    _same(g, gt)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(_ag(a, requires_grad=True), name)()
    if hasattr(torch, name):  # the torch-level form
        y = _ag(a)
        assert getattr(ag, name)(y) is y
        _same(y, getattr(torch, name)(_th(a)))


@pytest.mark.parametrize("name", INPLACE_BINARY)
def test_inplace_binary_matches_torch(name: str) -> None:
    lo, hi = BINARY.get(name[:-1], (0.5, 3))
    a, b = _smooth(lo, hi, (2, 3)), _smooth(lo, hi, (3,))
    if name in ("ldexp_",):
        b = np.round(b)
    leaf, leaf_t = _ag(a, requires_grad=True), _th(a, requires_grad=True)
    x, xt = leaf * 1.0, leaf_t * 1.0
    getattr(x, name)(_ag(b))
    getattr(xt, name)(_th(b))
    _same(x, xt)
    try:
        (gt,) = torch.autograd.grad(xt.sum(), [leaf_t])
    except RuntimeError as e:  # no derivative in torch (floor_divide_, igamma_): none here
        with pytest.raises(type(e)):
            ag.grad_sync(x.sum(), [leaf])
        return
    (g,) = ag.grad_sync(x.sum(), [leaf])
    _same(g, gt)


def test_inplace_on_a_view_reaches_the_base() -> None:
    a = _smooth(0.2, 0.8, (2, 3))
    leaf, leaf_t = _ag(a, requires_grad=True), _th(a, requires_grad=True)
    base, base_t = leaf * 2.0, leaf_t * 2.0
    base[0].asin_().lerp_(_ag([1.0, 2.0, 3.0]), 0.25)
    base_t[0].asin_().lerp_(_th([1.0, 2.0, 3.0]), 0.25)
    other, other_t = leaf * 3.0, leaf_t * 3.0
    base[1].addcmul_(other[0], other[1], value=0.5)
    base_t[1].addcmul_(other_t[0], other_t[1], value=0.5)
    _same(base, base_t)
    (g,) = ag.grad_sync(base.sum(), [leaf])
    (gt,) = torch.autograd.grad(base_t.sum(), [leaf_t])
    _same(g, gt)


def test_inplace_dtype_errors_as_torch() -> None:
    with pytest.raises(RuntimeError, match="float_power_ has dtype Float but the operation"):
        ag.tensor([1.0, 2.0]).float_power_(2)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        ag.tensor([1, 2]).sqrt_()
    x = ag.tensor([1.0, 2.0])
    x.lt_(1.5)
    assert x.tolist() == [1.0, 0.0]
    assert x.dtype == ag.float32
    y = ag.tensor([5, 6])
    y.gcd_(ag.tensor([3, 4]))
    assert y.tolist() == [1, 2]


# ----- special values: NaN, +-inf, +-0, poles and overflow, with ones and inf gradients -----
VALUES: Final = np.array(
    [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 1.5, 3.0, 40.0, 800.0, -800.0]
)
# Where torch's value or gradient is an artefact of its algorithm, not a definition: digamma's
# derivative at its poles (torch: large finite numbers), logit's at -0 (torch: +inf),
# polygamma at +inf (torch: NaN), zeta(x, inf) (torch: NaN), igamma with a NaN argument.
SKIP_VALUES: Final[dict[str, list[float]]] = {
    "digamma": [-math.inf, -1.0, -2.0, -800.0],
    "logit": [-0.0],
    "polygamma": [math.inf],
}
SPECIAL_UNARY: Final[dict[str, tuple[Callable[..., Any], Callable[..., Any]]]] = {
    **{
        n: (getattr(ag, n), getattr(torch, n))
        for n in (
            "acos acosh asin asinh atan atanh sinh cosh exp2 log2 log10 erfc erfinv lgamma "
            "digamma i0 sinc logit deg2rad rad2deg square frac nan_to_num angle sgn ceil floor "
            "trunc round signbit isinf isposinf isneginf"
        ).split()
    },
    "polygamma": (lambda x: ag.polygamma(2, x), lambda x: torch.polygamma(2, x)),
    "logit_eps": (lambda x: ag.logit(x, 0.1), lambda x: torch.logit(x, 0.1)),
    "round_decimals": (lambda x: ag.round(x, decimals=2), lambda x: torch.round(x, decimals=2)),
}
SPECIAL_BINARY: Final = (
    "atan2 hypot copysign logaddexp logaddexp2 xlogy fmod fmax fmin nextafter float_power"
).split()


def _special_case(
    ours_fn: Callable[..., Any], theirs_fn: Callable[..., Any], ins: list[Any], need: list[bool]
) -> None:
    for grad in ("ones", "inf"):
        xs = [_ag(v, requires_grad=n) for v, n in zip(ins, need, strict=True)]
        xts = [_th(v, requires_grad=n) for v, n in zip(ins, need, strict=True)]
        y, yt = ours_fn(*xs), theirs_fn(*xts)
        _same(y, yt, rtol=1e-6, atol=1e-12)
        if not yt.requires_grad:
            assert not y.requires_grad
            return
        g = np.ones(yt.shape) if grad == "ones" else np.full(yt.shape, math.inf)
        leaves = [v for v, n in zip(xs, need, strict=True) if n]
        leaves_t = [v for v, n in zip(xts, need, strict=True) if n]
        gs = ag.grad_sync(y, leaves, grad_outputs=[_ag(g)])
        gts = torch.autograd.grad(yt, leaves_t, grad_outputs=[_th(g)])
        for ours, theirs in zip(gs, gts, strict=True):
            _same(ours, theirs, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("name", sorted(SPECIAL_UNARY))
def test_special_values_match_torch(name: str) -> None:
    ours_fn, theirs_fn = SPECIAL_UNARY[name]
    values = VALUES[~np.isin(VALUES, SKIP_VALUES.get(name, []))]  # (logit: 0 goes with -0)
    _special_case(ours_fn, theirs_fn, [values], [True])


@pytest.mark.parametrize("name", SPECIAL_BINARY)
def test_special_value_pairs_match_torch(name: str) -> None:
    n = VALUES.size
    x, y = np.repeat(VALUES, n).reshape(n, n), np.tile(VALUES, n).reshape(n, n)
    _special_case(getattr(ag, name), getattr(torch, name), [x, y], [True, True])


# ----- on a CUDA device (the simulated one unless ASYNCGRAD_SIM_CUDA=0) -----
CUDA_UNARY: Final = (
    "acos asinh atanh cosh exp2 log10 erfc erfinv lgamma digamma i0 sinc logit deg2rad square "
    "frac nan_to_num angle sgn ceil round signbit isinf isposinf isneginf isreal"
).split()
CUDA_BINARY: Final = "atan2 hypot copysign logaddexp xlogy fmod fmax nextafter igamma".split()


@pytest.mark.cuda
def test_ops_run_on_a_cuda_device_as_on_the_cpu() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")
    a, b = _smooth(0.1, 0.9, (2, 3)), _smooth(0.5, 2.0, (3,))
    for name in CUDA_UNARY + CUDA_BINARY:
        f = getattr(ag, name)
        args = (a,) if name in CUDA_UNARY else (a, b)
        cpu = [_ag(v, requires_grad=True) for v in args]
        dev = [_ag(v).to("cuda").requires_grad_() for v in args]
        y, yd = f(*cpu), f(*dev)
        assert yd.device.type == "cuda", name
        np.testing.assert_allclose(yd.detach().cpu().numpy(), y.detach().numpy(), rtol=1e-6)
        if y.requires_grad and name not in ("igamma",):
            gs = ag.grad_sync(y.sum(), cpu)
            gds = ag.grad_sync(yd.sum(), dev)
            for g, gd in zip(gs, gds, strict=True):
                np.testing.assert_allclose(gd.cpu().numpy(), g.numpy(), rtol=1e-6)
    for name in ("bessel_j0", "i1e", "ndtri", "xlog1py", "chebyshev_polynomial_t"):
        f = getattr(ag.special, name)
        extra = (3,) if "polynomial" in name else (_ag(b),) if name == "xlog1py" else ()
        on_dev = f(
            _ag(a).to("cuda"), *(e.to("cuda") if isinstance(e, ag.Tensor) else e for e in extra)
        )
        np.testing.assert_allclose(on_dev.cpu().numpy(), f(_ag(a), *extra).numpy(), rtol=1e-6)
    x = _ag(a).to("cuda")
    x.sqrt_().lerp_(_ag(b).to("cuda"), 0.5).lt_(1.0)
    assert x.device.type == "cuda"


# ----- dtypes of integer, bool and half operands, or torch's error for them -----
DTYPE_OPS: Final = (
    "atan2 hypot copysign logaddexp logaddexp2 fmod fmax fmin nextafter float_power xlogy "
    "igamma igammac heaviside ldexp lerp"
).split()


@pytest.mark.parametrize("name", DTYPE_OPS)
def test_operand_dtypes_as_torch(name: str) -> None:
    for dtype in ("int64", "int32", "bool", "float16", "uint8", "float64"):
        for other_float32 in (False, True):
            _dtype_case(name, dtype, other_float32)


def _dtype_case(name: str, dtype: str, other_float32: bool) -> None:
    a = np.array([1, 0, 3]) % 2 if dtype == "bool" else np.array([1, 2, 3])
    b = np.array([2, 1, 3])
    dt2 = "float32" if other_float32 else dtype

    def call(m: Any) -> Any:
        x, y = m.tensor(a, dtype=getattr(m, dtype)), m.tensor(b, dtype=getattr(m, dt2))
        return m.lerp(x, y, 0.5) if name == "lerp" else getattr(m, name)(x, y)

    try:
        expected = call(torch)
    except RuntimeError as e:
        error = e
    else:
        _same(call(ag), expected, rtol=1e-3)
        return
    with pytest.raises(type(error)) as info:
        call(ag)
    assert str(info.value) == str(error)


@pytest.mark.parametrize(
    "op",
    [
        lambda t: t ^ 3,
        lambda t: 3 ^ t,
        lambda t: t << 1,
        lambda t: 1 << t,
        lambda t: t >> 1,
        lambda t: 20 >> t,
        lambda t: 6 & t,
        lambda t: 1 | t,
        lambda t: +t,
    ],
)
def test_bitwise_operators_match_torch(op: Callable[[Any], Any]) -> None:
    for dt in ("int64", "uint8"):
        a = np.array([1, 2, 5])
        _same(
            op(ag.tensor(a, dtype=getattr(ag, dt))), op(torch.tensor(a, dtype=getattr(torch, dt)))
        )


def test_inplace_bitwise_operators_match_torch() -> None:
    for m in (ag, torch):
        t = m.tensor([1, 2, 12])
        ref = t
        t ^= 3
        t <<= 1
        t >>= 1
        t &= 6
        t |= 8
        assert t is ref
    x, xt = ag.tensor([1, 2, 12]), torch.tensor([1, 2, 12])
    for v in (x, xt):
        v ^= 3
        v <<= 2
        v &= 13
        v |= 16
        v >>= 1
    _same(x, xt)
    b, bt = ag.tensor([True, False]), torch.tensor([True, False])
    _same(b ^ True, bt ^ True)
