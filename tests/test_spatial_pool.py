"""The 1-D and 3-D max and average pools, the adaptive, power-average and fractional pools,
max_unpool and their modules: values, indices and gradients against torch, finite differences
(first and second order), and errors as torch raises them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(5)
Fn = Callable[..., Any]
AF = ag.nn.functional


def distinct(*shape: int) -> np.ndarray[Any, Any]:
    """Values at least 0.01 apart: no ties for the max pools (nor under finite differences)."""
    n = int(np.prod(shape))
    return RNG.permutation(np.linspace(-2.0, 2.0, n)).reshape(shape)


def positive(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.uniform(0.5, 2.0, shape)


def like(F: Any, a: np.ndarray[Any, Any]) -> Any:
    """A constant tensor of F's library."""
    return ag.tensor(a) if F is AF else torch.tensor(a)


def _ag(a: np.ndarray[Any, Any]) -> ag.Tensor:
    return ag.tensor(a, requires_grad=a.dtype.kind == "f")


def _th(a: np.ndarray[Any, Any]) -> Any:
    return torch.tensor(a, requires_grad=a.dtype.kind == "f")


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) else out


def compare(fn: Fn, arrays: list[np.ndarray[Any, Any]], atol: float = 1e-10) -> None:
    """fn(F, *tensors) under ag.nn.functional and torch.nn.functional: equal values (and
    indices), equal gradients of a random weighting of the values."""
    xs, ts = [_ag(a) for a in arrays], [_th(a) for a in arrays]
    out, want = fn(AF, *xs), fn(torch.nn.functional, *ts)
    if isinstance(want, tuple):
        assert isinstance(out, tuple)
        assert out[1].dtype == ag.int64
        np.testing.assert_array_equal(out[1].numpy(), want[1].numpy())
    out, want = _first(out), _first(want)
    assert tuple(out.shape) == tuple(want.shape)
    assert str(out.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), atol=atol, rtol=1e-7)
    if not any(x.requires_grad for x in xs) or out.numel() == 0:
        return
    ct = RNG.standard_normal(tuple(out.shape))
    grads = ag.grad_sync((out * ag.tensor(ct)).sum(), [x for x in xs if x.requires_grad])
    want_g = torch.autograd.grad(
        (want * torch.tensor(ct)).sum(), [t for t in ts if t.requires_grad]
    )
    for g, w in zip(grads, want_g, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=atol, rtol=1e-7)


SAMPLES2 = RNG.random((2, 3, 2))
SAMPLES3 = RNG.random((2, 2, 3))

CASES: list[tuple[str, Fn, Callable[[], list[np.ndarray[Any, Any]]]]] = [
    ("max_pool1d", lambda F, x: F.max_pool1d(x, 3), lambda: [distinct(2, 3, 10)]),
    (
        "max_pool1d_all",
        lambda F, x: F.max_pool1d(x, 3, 2, 1, 2, True, return_indices=True),
        lambda: [distinct(2, 3, 10)],
    ),
    (
        "max_pool1d_unbatched",
        lambda F, x: F.max_pool1d_with_indices(x, 2),
        lambda: [distinct(3, 7)],
    ),
    (
        "max_pool2d_with_indices",
        lambda F, x: F.max_pool2d_with_indices(x, 2, 1),
        lambda: [distinct(1, 2, 4, 5)],
    ),
    ("max_pool3d", lambda F, x: F.max_pool3d(x, 2), lambda: [distinct(2, 2, 4, 5, 4)]),
    (
        "max_pool3d_all",
        lambda F, x: F.max_pool3d(x, (2, 3, 2), (1, 2, 3), (1, 1, 0), (2, 1, 2), True, True),
        lambda: [distinct(1, 2, 4, 5, 6)],
    ),
    (
        "max_pool3d_overlap_ceil",
        lambda F, x: F.max_pool3d_with_indices(x, 3, 2, 1, ceil_mode=True),
        lambda: [distinct(1, 2, 4, 5, 4)],
    ),
    (
        "max_pool3d_unbatched",
        lambda F, x: F.max_pool3d(x, 2, return_indices=True),
        lambda: [distinct(2, 3, 4, 4)],
    ),
    ("avg_pool1d", lambda F, x: F.avg_pool1d(x, 3), lambda: [distinct(2, 3, 10)]),
    (
        "avg_pool1d_all",
        lambda F, x: F.avg_pool1d(x, 3, 2, 1, True, False),
        lambda: [distinct(2, 3, 10)],
    ),
    ("avg_pool1d_unbatched", lambda F, x: F.avg_pool1d(x, 2, padding=1), lambda: [distinct(3, 7)]),
    ("avg_pool3d", lambda F, x: F.avg_pool3d(x, 2), lambda: [distinct(2, 2, 4, 5, 4)]),
    (
        "avg_pool3d_ceil_no_pad_count",
        lambda F, x: F.avg_pool3d(x, 3, 2, 1, True, False),
        lambda: [distinct(1, 2, 4, 5, 6)],
    ),
    (
        "avg_pool3d_ceil_pad_count",
        lambda F, x: F.avg_pool3d(x, (2, 3, 2), (1, 2, 3), (1, 1, 0), True, True),
        lambda: [distinct(1, 2, 4, 5, 6)],
    ),
    (
        "avg_pool3d_divisor",
        lambda F, x: F.avg_pool3d(x, 2, 1, 1, divisor_override=3),
        lambda: [distinct(2, 3, 3, 4)],
    ),
    ("adaptive_avg_pool1d", lambda F, x: F.adaptive_avg_pool1d(x, 4), lambda: [distinct(2, 3, 10)]),
    ("adaptive_avg_pool1d_up", lambda F, x: F.adaptive_avg_pool1d(x, 7), lambda: [distinct(3, 4)]),
    (
        "adaptive_avg_pool2d",
        lambda F, x: F.adaptive_avg_pool2d(x, (3, None)),
        lambda: [distinct(2, 3, 7, 5)],
    ),
    (
        "adaptive_avg_pool2d_one",
        lambda F, x: F.adaptive_avg_pool2d(x, 1),
        lambda: [distinct(2, 3, 4, 5)],
    ),
    (
        "adaptive_avg_pool3d",
        lambda F, x: F.adaptive_avg_pool3d(x, (2, 3, 5)),
        lambda: [distinct(1, 2, 5, 4, 3)],
    ),
    (
        "adaptive_max_pool1d",
        lambda F, x: F.adaptive_max_pool1d(x, 4, return_indices=True),
        lambda: [distinct(2, 3, 10)],
    ),
    (
        "adaptive_max_pool2d",
        lambda F, x: F.adaptive_max_pool2d_with_indices(x, (3, 4)),
        lambda: [distinct(2, 2, 7, 5)],
    ),
    (
        "adaptive_max_pool2d_unbatched",
        lambda F, x: F.adaptive_max_pool2d(x, 3),
        lambda: [distinct(2, 5, 4)],
    ),
    (
        "adaptive_max_pool3d",
        lambda F, x: F.adaptive_max_pool3d(x, (2, None, 4), True),
        lambda: [distinct(1, 2, 5, 3, 6)],
    ),
    ("lp_pool1d", lambda F, x: F.lp_pool1d(x, 2.0, 3, 2), lambda: [positive(2, 3, 9)]),
    (
        "lp_pool2d",
        lambda F, x: F.lp_pool2d(x, 3.0, (2, 3), ceil_mode=True),
        lambda: [positive(2, 2, 5, 7)],
    ),
    ("lp_pool3d", lambda F, x: F.lp_pool3d(x, 1.5, 2), lambda: [positive(1, 2, 4, 4, 5)]),
    (
        "fractional_max_pool2d",
        lambda F, x: F.fractional_max_pool2d(
            x, 2, (4, 5), return_indices=True, _random_samples=like(F, SAMPLES2)
        ),
        lambda: [distinct(2, 3, 7, 9)],
    ),
    (
        "fractional_max_pool2d_ratio",
        lambda F, x: F.fractional_max_pool2d_with_indices(
            x, (3, 2), output_ratio=(0.5, 0.7), _random_samples=like(F, SAMPLES2)
        ),
        lambda: [distinct(2, 3, 8, 9)],
    ),
    (
        "fractional_max_pool3d",
        lambda F, x: F.fractional_max_pool3d(
            x, 2, (3, 4, 3), return_indices=True, _random_samples=like(F, SAMPLES3)
        ),
        lambda: [distinct(2, 2, 5, 6, 5)],
    ),
]


@pytest.mark.parametrize(("fn", "make"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_torch(fn: Fn, make: Callable[[], list[np.ndarray[Any, Any]]]) -> None:
    compare(fn, make())


@pytest.mark.parametrize(("fn", "make"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gradcheck(fn: Fn, make: Callable[[], list[np.ndarray[Any, Any]]]) -> None:
    xs = [_ag(a) for a in make()]
    assert gradcheck(lambda *t: _first(fn(AF, *t)), xs)


# Second order on small inputs (squared, so the second derivative is not zero).
SECOND: list[tuple[str, Fn, Callable[[], list[np.ndarray[Any, Any]]]]] = [
    (
        "max_pool3d",
        lambda F, x: F.max_pool3d(x, 2, 1, 1, 2, True),
        lambda: [distinct(1, 1, 3, 3, 2)],
    ),
    (
        "avg_pool3d",
        lambda F, x: F.avg_pool3d(x, 2, 1, 1, True, False),
        lambda: [distinct(1, 1, 2, 3, 2)],
    ),
    (
        "adaptive_avg_pool3d",
        lambda F, x: F.adaptive_avg_pool3d(x, (2, 1, 3)),
        lambda: [distinct(1, 1, 3, 2, 4)],
    ),
    (
        "adaptive_max_pool2d",
        lambda F, x: F.adaptive_max_pool2d(x, (2, 3)),
        lambda: [distinct(1, 2, 3, 4)],
    ),
    ("lp_pool2d", lambda F, x: F.lp_pool2d(x, 3.0, 2), lambda: [positive(1, 1, 4, 4)]),
    (
        "fractional_max_pool2d",
        lambda F, x: F.fractional_max_pool2d(
            x, 2, (2, 2), _random_samples=like(F, SAMPLES2[:1, :1])
        ),
        lambda: [distinct(1, 1, 4, 3)],
    ),
]


@pytest.mark.parametrize(("fn", "make"), [c[1:] for c in SECOND], ids=[c[0] for c in SECOND])
def test_gradgradcheck(fn: Fn, make: Callable[[], list[np.ndarray[Any, Any]]]) -> None:
    arrays = make()
    compare(fn, arrays)
    assert gradgradcheck(lambda *t: fn(AF, *t) ** 2, [_ag(a) for a in arrays])


def test_float32_stays_float32() -> None:
    x = distinct(2, 2, 4, 5, 4).astype(np.float32)
    compare(lambda F, t: F.max_pool3d(t, 2, return_indices=True), [x], atol=1e-6)
    compare(lambda F, t: F.avg_pool3d(t, 2), [x], atol=1e-6)
    compare(lambda F, t: F.adaptive_avg_pool3d(t, 3), [x], atol=1e-6)
    compare(
        lambda F, t: F.fractional_max_pool3d(
            t,
            2,
            (2, 3, 2),
            return_indices=True,
            _random_samples=like(F, SAMPLES3.astype(np.float32)),
        ),
        [x],
    )


def test_nan_wins_and_minus_inf_windows_as_torch() -> None:
    x = distinct(1, 2, 4, 4, 4)
    x[0, 0, 1, 1, 1] = np.nan
    x[0, 0, 1, 2, 1] = np.nan
    x[0, 1, :2, :2, :2] = -np.inf
    for fn in (
        lambda F, t: F.max_pool3d(t, 2, return_indices=True),
        lambda F, t: F.max_pool3d(t, 3, 2, 1, return_indices=True),
        lambda F, t: F.adaptive_max_pool3d(t, 3, return_indices=True),
        lambda F, t: F.max_pool1d(t[0, :, 1], 3, 1, 1, return_indices=True),
        lambda F, t: F.max_pool2d(t[0], 3, 1, 1, return_indices=True),
        lambda F, t: F.max_pool2d(t[0], 2, 1, 1, 2, ceil_mode=True, return_indices=True),
    ):
        got, want = fn(AF, ag.tensor(x)), fn(torch.nn.functional, torch.tensor(x))
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())


def test_fractional_default_samples_come_from_the_generator() -> None:
    x = ag.tensor(distinct(2, 3, 7, 9))
    ag.manual_seed(3)
    a = AF.fractional_max_pool2d(x, 2, (4, 5))
    ag.manual_seed(3)
    b = AF.fractional_max_pool2d(x, 2, (4, 5))
    assert a.shape == (2, 3, 4, 5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert AF.fractional_max_pool3d(
        ag.tensor(distinct(2, 5, 5, 5)), 2, output_ratio=(0.5, 0.5, 0.5)
    ).shape == (2, 2, 2, 2)


@pytest.mark.parametrize(
    ("n", "kw", "shape"),
    [
        (1, {"kernel_size": 2}, (2, 3, 8)),
        (1, {"kernel_size": 3, "stride": 1, "padding": 1}, (2, 8)),
        (2, {"kernel_size": 2}, (2, 3, 4, 6)),
        (2, {"kernel_size": 3, "stride": 1}, (1, 2, 5, 5)),  # overlapping: repeated indices
        (3, {"kernel_size": 2, "stride": 1}, (1, 2, 3, 4, 3)),
    ],
)
def test_max_unpool_inverts_max_pool(n: int, kw: dict[str, Any], shape: tuple[int, ...]) -> None:
    tf = torch.nn.functional
    y, i = getattr(tf, f"max_pool{n}d")(torch.tensor(distinct(*shape)), return_indices=True, **kw)
    yv, iv = y.numpy(), i.numpy()
    want_size = getattr(tf, f"max_unpool{n}d")(y, i, **kw).shape[-n:]
    for size in (
        None,
        tuple(want_size),
        (*shape[:-n], *want_size) if len(shape) == n + 2 else None,
    ):
        compare(
            lambda F, t, size=size: getattr(F, f"max_unpool{n}d")(
                t, like(F, iv), output_size=size, **kw
            ),
            [yv],
        )
    # With repeated indices (overlapping windows) torch's gradient is not the forward's
    # derivative (one write wins, every repeat gets the gradient): compared above only.
    if all(len(np.unique(p)) == p.size for p in iv.reshape(-1, np.prod(iv.shape[-n:]))):
        xs = [_ag(yv)]
        assert gradcheck(lambda t: getattr(AF, f"max_unpool{n}d")(t, ag.tensor(iv), **kw), xs)


def test_top_level_names() -> None:
    x = distinct(2, 3, 9)
    for name, args in (
        ("max_pool1d", (3, 2)),
        ("max_pool1d_with_indices", (3,)),
        ("avg_pool1d", (3, 2, 1)),
        ("adaptive_avg_pool1d", (4,)),
        ("adaptive_max_pool1d", (4,)),
    ):
        got, want = (
            getattr(ag, name)(ag.tensor(x), *args),
            getattr(torch, name)(torch.tensor(x), *args),
        )
        for g, w in zip(
            got if isinstance(got, tuple) else (got,),
            want if isinstance(want, tuple) else (want,),
            strict=True,
        ):
            np.testing.assert_allclose(g.numpy(), w.numpy(), atol=1e-12)
    x4, x5 = distinct(1, 2, 4, 6), distinct(1, 2, 4, 4, 6)
    np.testing.assert_array_equal(
        ag.max_pool2d(ag.tensor(x4), 2).numpy(), torch.max_pool2d(torch.tensor(x4), 2).numpy()
    )
    np.testing.assert_array_equal(
        ag.max_pool3d(ag.tensor(x5), 2, 1, 1).numpy(),
        torch.max_pool3d(torch.tensor(x5), 2, 1, 1).numpy(),
    )


ERRORS: list[tuple[Fn, tuple[int, ...], type[Exception], str]] = [
    (lambda F, x: F.max_pool3d(x, 2), (3, 3), RuntimeError, "non-empty 4D or 5D"),
    (
        lambda F, x: F.max_pool3d(x, 4),
        (1, 2, 3, 3, 3),
        RuntimeError,
        r"Given input size: \(2x3x3x3\). Calculated output size: \(2x0x0x0\). Output size is "
        "too small",
    ),
    (
        lambda F, x: F.max_pool3d(x, 2, padding=2),
        (1, 2, 3, 3, 3),
        RuntimeError,
        "pad should be at most half of effective kernel size",
    ),
    (lambda F, x: F.max_pool1d(x, 2), (3,), RuntimeError, "max_pool1d: Expected 2D or 3D"),
    (
        lambda F, x: F.avg_pool1d(x, 2),
        (3,),
        RuntimeError,
        "Expected 2 to 3 dimensions, but got 1-dimensional tensor",
    ),
    (lambda F, x: F.avg_pool3d(x, 2), (3, 3), RuntimeError, "non-empty 4D or 5D"),
    (
        lambda F, x: F.avg_pool3d(x, 2, divisor_override=0),
        (1, 1, 2, 2, 2),
        RuntimeError,
        "divisor must be not zero",
    ),
    (
        lambda F, x: F.adaptive_avg_pool1d(x, 2),
        (3,),
        RuntimeError,
        "while checking arguments for adaptive_avg_pool1d",
    ),
    (
        lambda F, x: F.adaptive_avg_pool2d(x, 2),
        (3,),
        RuntimeError,
        r"adaptive_avg_pool2d\(\): Expected 3D or 4D tensor, but got \[3\]",
    ),
    (
        lambda F, x: F.adaptive_max_pool3d(x, 2),
        (3, 3),
        RuntimeError,
        r"adaptive_max_pool3d\(\): Expected 4D or 5D tensor, but got: \[3, 3\]",
    ),
    (
        lambda F, x: F.adaptive_avg_pool2d(x, (2, 2, 2)),
        (1, 2, 3, 3),
        RuntimeError,
        "output_size must be 2",
    ),
    (
        lambda F, x: F.adaptive_avg_pool2d(x, 2),
        (1, 2, 0, 3),
        RuntimeError,
        "Expected input to have non-zero size for non-batch dimensions",
    ),
    (
        lambda F, x: F.adaptive_avg_pool2d(x.long(), 2),
        (1, 2, 3, 3),
        NotImplementedError,
        "\"adaptive_avg_pool2d\" not implemented for 'Long'",
    ),
    (
        lambda F, x: F.fractional_max_pool2d(x, 2),
        (1, 2, 3, 3),
        ValueError,
        "requires specifying either an output_size or an output_ratio",
    ),
    (
        lambda F, x: F.fractional_max_pool2d(x, 2, output_size=3),
        (1, 2, 3, 3),
        RuntimeError,
        r"fractional_max_pool2d\(\): pool height 2 too large relative to input height 3",
    ),
    (
        lambda F, x: F.max_unpool2d(x, like(F, np.full((1, 2, 3, 3), 100)), 2),
        (1, 2, 3, 3),
        RuntimeError,
        r"Found an invalid max index: 100 \(output volumes are of size 6x6",
    ),
    (
        lambda F, x: F.max_unpool2d(
            x, like(F, np.zeros((1, 2, 3, 3), np.int64)), 2, output_size=(1,)
        ),
        (1, 2, 3, 3),
        ValueError,
        "output_size should be a sequence containing 2 or 4 elements, but it has a length of '1'",
    ),
    (
        lambda F, x: F.max_unpool2d(
            x, like(F, np.zeros((1, 2, 3, 3), np.int64)), 2, output_size=(9, 6)
        ),
        (1, 2, 3, 3),
        ValueError,
        "invalid output_size",
    ),
]


@pytest.mark.parametrize(("fn", "shape", "exc", "match"), ERRORS)
def test_errors_as_torch(fn: Fn, shape: tuple[int, ...], exc: type[Exception], match: str) -> None:
    a = RNG.standard_normal(shape)
    with pytest.raises(exc, match=match):
        fn(torch.nn.functional, torch.tensor(a))
    with pytest.raises(exc, match=match):
        fn(AF, ag.tensor(a))


# ----- modules -----
MODULES: list[tuple[str, tuple[Any, ...], dict[str, Any], tuple[int, ...]]] = [
    ("MaxPool1d", (3,), {"stride": 2, "padding": 1, "return_indices": True}, (2, 3, 9)),
    ("MaxPool3d", (2,), {"ceil_mode": True}, (1, 2, 5, 4, 5)),
    ("AvgPool1d", (3,), {"stride": 2, "padding": 1, "count_include_pad": False}, (2, 3, 9)),
    ("AvgPool3d", ((2, 3, 2),), {"divisor_override": 4}, (1, 2, 5, 4, 5)),
    ("AdaptiveAvgPool1d", (4,), {}, (2, 3, 9)),
    ("AdaptiveAvgPool2d", ((3, 2),), {}, (2, 3, 7, 5)),
    ("AdaptiveAvgPool3d", (2,), {}, (1, 2, 5, 4, 5)),
    ("AdaptiveMaxPool1d", (4,), {"return_indices": True}, (2, 3, 9)),
    ("AdaptiveMaxPool2d", ((3, None),), {}, (2, 3, 7, 5)),
    ("AdaptiveMaxPool3d", (2,), {"return_indices": True}, (1, 2, 5, 4, 5)),
    ("LPPool1d", (2, 3), {"stride": 2}, (2, 3, 9)),
    ("LPPool2d", (3, 2), {}, (2, 3, 6, 4)),
    ("LPPool3d", (2, 2), {"ceil_mode": True}, (1, 2, 5, 4, 5)),
    (
        "FractionalMaxPool2d",
        (2,),
        {"output_size": (3, 4), "_random_samples": SAMPLES2},
        (2, 3, 6, 7),
    ),
    (
        "FractionalMaxPool3d",
        (2,),
        {"output_ratio": 0.5, "_random_samples": SAMPLES3, "return_indices": True},
        (2, 2, 6, 6, 6),
    ),
]


@pytest.mark.parametrize(("name", "args", "kw", "shape"), MODULES, ids=[m[0] for m in MODULES])
def test_modules_match_torch(
    name: str, args: tuple[Any, ...], kw: dict[str, Any], shape: tuple[int, ...]
) -> None:
    def build(lib: Any, tensor: Callable[..., Any]) -> Any:
        k = {n: tensor(v) if isinstance(v, np.ndarray) else v for n, v in kw.items()}
        return getattr(lib, name)(*args, **k)

    mine, theirs = build(ag.nn, ag.tensor), build(torch.nn, torch.tensor)
    if name.startswith("FractionalMaxPool3d"):  # torch's module takes the ratio as a triple
        theirs = torch.nn.FractionalMaxPool3d(
            2,
            output_ratio=(0.5, 0.5, 0.5),
            return_indices=True,
            _random_samples=torch.tensor(SAMPLES3),
        )
    x = positive(*shape) if name.startswith("LP") else distinct(*shape)
    got, want = mine(ag.tensor(x)), theirs(torch.tensor(x))
    if isinstance(want, tuple):
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        got, want = got[0], want[0]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-12)
    if not name.startswith(("Fractional", "LP")):
        assert repr(mine) == repr(theirs)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_max_unpool_modules(n: int) -> None:
    shape = (2, 2, *(4,) * n)
    x = distinct(*shape)
    pool = getattr(torch.nn, f"MaxPool{n}d")(2, return_indices=True)
    y, i = pool(torch.tensor(x))
    mine, theirs = getattr(ag.nn, f"MaxUnpool{n}d")(2), getattr(torch.nn, f"MaxUnpool{n}d")(2)
    got = mine(ag.tensor(y.numpy()), ag.tensor(i.numpy()))
    np.testing.assert_array_equal(got.numpy(), theirs(y, i).numpy())
    assert repr(mine) == repr(theirs)


@pytest.mark.parametrize(
    "fn",
    [
        lambda F, t: F.avg_pool1d(t[:, :, 0, 0], 3, 2, 1, True, False),
        lambda F, t: F.avg_pool2d(t[:, :, 0], 3, 2, 1, True, False),
        lambda F, t: F.avg_pool2d(t[:, :, 0], 2, divisor_override=3),
        lambda F, t: F.avg_pool3d(t, 2),
        lambda F, t: F.avg_pool3d(t, 3, 2, 1, True, False),
        lambda F, t: F.avg_pool3d(t, 2, 1, 1, divisor_override=3),
    ],
)
def test_integer_average_pools_truncate_as_torch(fn: Fn) -> None:
    x = (np.arange(2 * 2 * 4 * 4 * 4).reshape(2, 2, 4, 4, 4) * 7) % 23 - 11
    got, want = fn(AF, ag.tensor(x)), fn(torch.nn.functional, torch.tensor(x))
    assert got.dtype == ag.int64
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda F, t: F.max_pool1d(t, 2, return_indices=True), (0, 2, 4)),
        (lambda F, t: F.max_pool2d(t, 2, return_indices=True), (0, 2, 4, 4)),
        (lambda F, t: F.max_pool3d(t, 2, return_indices=True), (0, 2, 4, 4, 4)),
        (lambda F, t: F.avg_pool1d(t, 2), (0, 2, 4)),
        (lambda F, t: F.avg_pool2d(t, 2), (0, 2, 4, 4)),
        (lambda F, t: F.avg_pool3d(t, 2), (0, 2, 4, 4, 4)),
        (lambda F, t: F.adaptive_max_pool2d(t, 2, True), (0, 2, 4, 4)),
        (lambda F, t: F.adaptive_avg_pool3d(t, 2), (0, 2, 4, 4, 4)),
        (lambda F, t: F.fractional_max_pool2d(t, 2, 2), (0, 2, 4, 4)),
        (lambda F, t: F.lp_pool2d(t, 2, 2), (0, 4, 2, 2)),
        (lambda F, t: F.max_unpool2d(t, t.long(), 2), (0, 4, 2, 2)),
    ],
)
def test_empty_batch(fn: Fn, shape: tuple[int, ...]) -> None:
    x = np.zeros(shape)
    got, want = _first(fn(AF, _ag(x))), _first(fn(torch.nn.functional, torch.tensor(x)))
    assert tuple(got.shape) == tuple(want.shape)
