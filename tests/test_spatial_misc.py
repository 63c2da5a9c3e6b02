"""Pixel and channel shuffles, unfold/fold, grid_sample/affine_grid, local response
normalisation, interpolate's modes, the upsample spellings, the padding modules and torch's
top-level names of the family: against torch, finite differences and torch's errors."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(23)
Fn = Callable[..., Any]
AF = ag.nn.functional


def r(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.standard_normal(shape)


def _ag(a: np.ndarray[Any, Any]) -> ag.Tensor:
    return ag.tensor(a, requires_grad=a.dtype.kind == "f")


def _th(a: np.ndarray[Any, Any]) -> Any:
    return torch.tensor(a, requires_grad=a.dtype.kind == "f")


def compare(fn: Fn, arrays: list[np.ndarray[Any, Any]], atol: float = 1e-10) -> None:
    """fn(F, *tensors) under ag.nn.functional and torch.nn.functional: equal values, equal
    gradients of a random weighting of the output."""
    xs, ts = [_ag(a) for a in arrays], [_th(a) for a in arrays]
    out, want = fn(AF, *xs), fn(torch.nn.functional, *ts)
    assert tuple(out.shape) == tuple(want.shape)
    assert str(out.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), atol=atol, rtol=1e-6)
    if not any(x.requires_grad for x in xs) or out.numel() == 0:
        return
    ct = RNG.standard_normal(tuple(out.shape))
    grads = ag.grad_sync((out * ag.tensor(ct)).sum(), [x for x in xs if x.requires_grad])
    want_g = torch.autograd.grad(
        (want * torch.tensor(ct)).sum(), [t for t in ts if t.requires_grad], allow_unused=True
    )
    for g, w in zip(grads, want_g, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=atol, rtol=1e-6)


def grid(*shape: int) -> np.ndarray[Any, Any]:
    """Sample points in and a little outside [-1, 1], clear of the cells' edges (where the
    bilinear weights, the rounding and the clipping have kinks)."""
    g = RNG.uniform(-1.15, 1.15, shape)
    return np.where(np.abs(g) > 0.98, np.sign(g) * 1.1, g)


CASES: list[tuple[str, Fn, Callable[[], list[np.ndarray[Any, Any]]]]] = [
    ("pixel_shuffle", lambda F, x: F.pixel_shuffle(x, 2), lambda: [r(2, 8, 3, 2)]),
    ("pixel_shuffle_lead", lambda F, x: F.pixel_shuffle(x, 3), lambda: [r(2, 1, 9, 2, 2)]),
    ("pixel_unshuffle", lambda F, x: F.pixel_unshuffle(x, 2), lambda: [r(2, 2, 4, 6)]),
    ("channel_shuffle", lambda F, x: F.channel_shuffle(x, 3), lambda: [r(2, 6, 2, 2)]),
    ("unfold", lambda F, x: F.unfold(x, (2, 3), 2, 1, (1, 2)), lambda: [r(1, 2, 4, 5)]),
    ("unfold_unbatched", lambda F, x: F.unfold(x, 2), lambda: [r(2, 3, 4)]),
    ("fold", lambda F, x: F.fold(x, (5, 6), (2, 3), 1, 1, (2, 2)), lambda: [r(2, 12, 9)]),
    ("fold_dilated", lambda F, x: F.fold(x, (5, 7), (2, 3), (2, 1), 0, 1), lambda: [r(1, 6, 15)]),
    ("fold_unbatched", lambda F, x: F.fold(x, 3, 2), lambda: [r(8, 4)]),
    ("local_response_norm_3d", lambda F, x: F.local_response_norm(x, 4), lambda: [r(2, 5, 6)]),
    (
        "local_response_norm_4d",
        lambda F, x: F.local_response_norm(x, 3, 0.1, 0.5, 2.0),
        lambda: [r(2, 5, 3, 2)],
    ),
    (
        "local_response_norm_5d",
        lambda F, x: F.local_response_norm(x, 2, 0.3),
        lambda: [r(1, 4, 2, 3, 2)],
    ),
    (
        "affine_grid_2d",
        lambda F, t: F.affine_grid(t, (2, 3, 4, 5), align_corners=False),
        lambda: [r(2, 2, 3)],
    ),
    (
        "affine_grid_3d",
        lambda F, t: F.affine_grid(t, (2, 1, 3, 2, 4), align_corners=True),
        lambda: [r(2, 3, 4)],
    ),
]
for _mode in ("bilinear", "nearest", "bicubic"):
    for _pad in ("zeros", "border", "reflection"):
        for _corners in (True, False):
            CASES.append(
                (
                    f"grid_sample_{_mode}_{_pad}_{_corners}",
                    lambda F, x, g, m=_mode, p=_pad, c=_corners: F.grid_sample(x, g, m, p, c),
                    lambda: [r(1, 2, 3, 4), grid(1, 2, 3, 2)],
                )
            )
            if _mode != "bicubic":
                CASES.append(
                    (
                        f"grid_sample_3d_{_mode}_{_pad}_{_corners}",
                        lambda F, x, g, m=_mode, p=_pad, c=_corners: F.grid_sample(x, g, m, p, c),
                        lambda: [r(1, 1, 2, 3, 2), grid(1, 2, 1, 2, 3)],
                    )
                )


@pytest.mark.parametrize(("fn", "make"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_torch(fn: Fn, make: Callable[[], list[np.ndarray[Any, Any]]]) -> None:
    compare(fn, make())


GRADCHECK = [c for c in CASES if "nearest" not in c[0] and "reflection_True" not in c[0]]


@pytest.mark.parametrize(("fn", "make"), [c[1:] for c in GRADCHECK], ids=[c[0] for c in GRADCHECK])
def test_gradcheck(fn: Fn, make: Callable[[], list[np.ndarray[Any, Any]]]) -> None:
    assert gradcheck(lambda *t: fn(AF, *t), [_ag(a) for a in make()])


SECOND = [
    "unfold",
    "fold",
    "local_response_norm_4d",
    "grid_sample_bilinear_zeros_False",
    "grid_sample_bicubic_border_True",
    "affine_grid_2d",
]


@pytest.mark.parametrize("cid", SECOND)
def test_gradgradcheck(cid: str) -> None:
    _, fn, make = next(c for c in CASES if c[0] == cid)
    assert gradgradcheck(lambda *t: fn(AF, *t), [_ag(a) for a in make()])


def test_shuffles_keep_integer_dtypes() -> None:
    x = np.arange(2 * 8 * 2 * 2).reshape(2, 8, 2, 2)
    for fn in (
        lambda F, t: F.pixel_shuffle(t, 2),
        lambda F, t: F.pixel_unshuffle(t, 2),
        lambda F, t: F.channel_shuffle(t, 4),
    ):
        compare(fn, [x])


def test_unfold_keeps_nan_and_inf_in_place() -> None:
    x = r(1, 2, 4, 4)
    x[0, 0, 1, 2], x[0, 1, 3, 3] = np.nan, np.inf
    compare(lambda F, t: F.unfold(t, 2, padding=1), [x])
    compare(lambda F, t: F.fold(t, (3, 3), 2), [F_cols(x)])


def F_cols(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return x.reshape(1, 8, 4)


def test_grid_sample_warns_without_align_corners() -> None:
    x, g = ag.tensor(r(1, 1, 3, 3)), ag.tensor(grid(1, 2, 2, 2))
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior"):
        AF.grid_sample(x, g)
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior"):
        AF.affine_grid(ag.tensor(r(1, 2, 3)), (1, 1, 2, 2))


def test_torch_level_names() -> None:
    x, g = r(2, 2, 4, 5), grid(2, 3, 4, 2)
    for mode in range(3):
        for pad in range(3):
            got = ag.grid_sampler(ag.tensor(x), ag.tensor(g), mode, pad, False)
            want = torch.grid_sampler(torch.tensor(x), torch.tensor(g), mode, pad, False)
            np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-10)
    th = r(2, 2, 3)
    np.testing.assert_allclose(
        ag.affine_grid_generator(ag.tensor(th), (2, 1, 3, 4), True).numpy(),
        torch.affine_grid_generator(torch.tensor(th), (2, 1, 3, 4), True).numpy(),
        atol=1e-12,
    )
    y = r(2, 3, 4)
    np.testing.assert_array_equal(
        ag.constant_pad_nd(ag.tensor(y), (1, 2, 0, 1), 3.5).numpy(),
        torch.constant_pad_nd(torch.tensor(y), (1, 2, 0, 1), 3.5).numpy(),
    )
    z = r(1, 8, 2, 2)
    for name, arg in (("pixel_shuffle", 2), ("pixel_unshuffle", 2), ("channel_shuffle", 4)):
        np.testing.assert_array_equal(
            getattr(ag, name)(ag.tensor(z), arg).numpy(),
            getattr(torch, name)(torch.tensor(z), arg).numpy(),
        )


ERRORS: list[tuple[Fn, tuple[int, ...], type[Exception], str]] = [
    (
        lambda F, x: F.pixel_shuffle(x, 2),
        (5, 3, 3),
        RuntimeError,
        r"input.size\(-3\)=5 is not divisible by 4",
    ),
    (
        lambda F, x: F.pixel_shuffle(x, 2),
        (3, 3),
        RuntimeError,
        "pixel_shuffle expects input to have at least 3 dimensions",
    ),
    (
        lambda F, x: F.pixel_unshuffle(x, 2),
        (4, 3, 3),
        RuntimeError,
        r"pixel_unshuffle expects height to be divisible by downscale_factor, but "
        r"input.size\(-2\)=3",
    ),
    (
        lambda F, x: F.channel_shuffle(x, 2),
        (1, 5, 3),
        RuntimeError,
        "Number of channels must be divisible by groups. Got 5 channels and 2 groups.",
    ),
    (
        lambda F, x: F.channel_shuffle(x, 0),
        (1, 5, 3),
        RuntimeError,
        "Number of groups to divide channels in must be positive. Value of groups:0",
    ),
    (
        lambda F, x: F.unfold(x, 4),
        (1, 2, 3, 3),
        RuntimeError,
        r"calculated shape of the array of sliding blocks as \(0, 0\)",
    ),
    (
        lambda F, x: F.unfold(x.long(), 2),
        (1, 2, 3, 3),
        NotImplementedError,
        "not implemented for 'Long'",
    ),
    (
        lambda F, x: F.fold(x, (3, 3), 2),
        (1, 8, 5),
        RuntimeError,
        "to match the calculated number of sliding blocks 2 \\* 2 = 4, but got input.size\\(2\\)=5",
    ),
    (
        lambda F, x: F.fold(x, (3, 3), 2),
        (1, 7, 4),
        RuntimeError,
        "Expected size of input's dimension 1 to be divisible by the product of kernel_size",
    ),
    (
        lambda F, x: F.grid_sample(
            x, x[..., :3].permute(0, 2, 3, 1)[:, :, :, :3], align_corners=False
        ),
        (1, 3, 2, 3),
        RuntimeError,
        "expected grid to have size 2 in last dimension",
    ),
    (
        lambda F, x: F.grid_sample(x, x[:, :2].permute(0, 2, 3, 1), "cubic", align_corners=False),
        (1, 3, 2, 3),
        ValueError,
        "expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: 'cubic'",
    ),
    (
        lambda F, x: F.grid_sample(
            x, x[:, :2].permute(0, 2, 3, 1), padding_mode="wrap", align_corners=False
        ),
        (1, 3, 2, 3),
        ValueError,
        "expected padding_mode to be 'zeros', 'border', or 'reflection'",
    ),
    (
        lambda F, x: F.affine_grid(x[0], (1, 1, 2, 2), align_corners=False),
        (1, 1, 3, 3),
        ValueError,
        "Expected a batch of 2D affine matrices of shape Nx2x3 for size",
    ),
    (
        lambda F, x: F.affine_grid(x[0, 0:1, :2], (1, 1, 2), align_corners=False),
        (1, 1, 3, 3),
        NotImplementedError,
        "affine_grid only supports 4D and 5D sizes",
    ),
    (
        lambda F, x: F.affine_grid(x.long()[0, :, :2], (1, 1, 2, 2), align_corners=False),
        (1, 1, 3, 3),
        ValueError,
        "Expected theta to have floating point type",
    ),
    (
        lambda F, x: F.local_response_norm(x, 2),
        (3, 3),
        ValueError,
        "Expected 3D or higher dimensionality",
    ),
]


@pytest.mark.parametrize(("fn", "shape", "exc", "match"), ERRORS)
def test_errors_as_torch(fn: Fn, shape: tuple[int, ...], exc: type[Exception], match: str) -> None:
    a = r(*shape)
    with pytest.raises(exc, match=match):
        fn(torch.nn.functional, torch.tensor(a))
    with pytest.raises(exc, match=match):
        fn(AF, ag.tensor(a))


# ----- interpolate -----
INTERP: list[tuple[tuple[int, ...], str]] = [
    ((2, 3, 7), "nearest"),
    ((2, 3, 7), "nearest-exact"),
    ((2, 3, 7), "linear"),
    ((2, 3, 7), "area"),
    ((1, 2, 5, 6), "nearest"),
    ((1, 2, 5, 6), "nearest-exact"),
    ((1, 2, 5, 6), "bilinear"),
    ((1, 2, 5, 6), "bicubic"),
    ((1, 2, 5, 6), "area"),
    ((1, 2, 3, 4, 3), "nearest"),
    ((1, 2, 3, 4, 3), "trilinear"),
    ((1, 2, 3, 4, 3), "area"),
]
SIZES: list[dict[str, Any]] = [
    {"size": 4},
    {"size": 11},
    {"scale_factor": 2.0},
    {"scale_factor": 0.37},
    {"scale_factor": 3.3},
    {"scale_factor": 1.7, "recompute_scale_factor": True},
]


@pytest.mark.parametrize(("shape", "mode"), INTERP)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interpolate_matches_torch(shape: tuple[int, ...], mode: str, dtype: Any) -> None:
    x = r(*shape).astype(dtype)
    corners = (None,) if mode in ("nearest", "nearest-exact", "area") else (True, False)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    for kw in SIZES:
        for c in corners:
            compare(
                lambda F, t, kw=kw, c=c: F.interpolate(t, mode=mode, align_corners=c, **kw),
                [x],
                tol,
            )


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interpolate_antialias_matches_torch(mode: str, dtype: Any) -> None:
    x = r(1, 2, 7, 9).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    for kw in ({"size": (3, 4)}, {"size": (2, 20)}, {"scale_factor": 0.37}, {"scale_factor": 2.3}):
        for c in (True, False):
            compare(
                lambda F, t, kw=kw, c=c: F.interpolate(
                    t, mode=mode, align_corners=c, antialias=True, **kw
                ),
                [x],
                tol,
            )
    t = _ag(r(1, 1, 5, 4))
    assert gradcheck(lambda u: AF.interpolate(u, size=(2, 3), mode=mode, antialias=True), [t])


@pytest.mark.parametrize("mode", ["linear", "bicubic", "area", "trilinear"])
def test_interpolate_gradcheck(mode: str) -> None:
    shape = {
        "linear": (1, 2, 5),
        "bicubic": (1, 1, 4, 3),
        "area": (1, 2, 5, 4),
        "trilinear": (1, 1, 2, 3, 2),
    }
    x = _ag(r(*shape[mode]))
    assert gradcheck(lambda t: AF.interpolate(t, scale_factor=1.6, mode=mode), [x])
    assert gradgradcheck(lambda t: AF.interpolate(t, size=3, mode=mode) ** 2, [x])


def test_interpolate_errors_as_torch() -> None:
    x = r(1, 1, 4, 4)
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        (
            {
                "size": 2,
                "mode": "bicubic",
                "antialias": False,
                "align_corners": None,
                "scale_factor": 2,
            },
            ValueError,
            "only one of size or scale_factor",
        ),
        (
            {"size": 3, "mode": "area", "align_corners": True},
            ValueError,
            "align_corners option can only be set",
        ),
        (
            {"size": 3, "mode": "trilinear"},
            NotImplementedError,
            "Got 4D input, but trilinear mode needs 5D input",
        ),
        (
            {"size": 3, "mode": "linear", "antialias": True},
            ValueError,
            "Anti-alias option is restricted to bilinear, bicubic",
        ),
        (
            {"size": (2, 2, 2)},
            ValueError,
            "Input and output must have the same number of spatial dimensions",
        ),
        (
            {"size": 3, "mode": "cubic"},
            NotImplementedError,
            "Input Error: Only 3D, 4D and 5D input Tensors supported",
        ),
        (
            {"size": 3, "recompute_scale_factor": True},
            ValueError,
            "recompute_scale_factor is not meaningful with an explicit size",
        ),
        ({"scale_factor": 0.1}, RuntimeError, "Input and output sizes should be greater than 0"),
        ({"size": (2.0, 2.0)}, TypeError, "expected size to be one of int or Tuple"),
    ]
    for kw, exc, match in cases:
        with pytest.raises(exc, match=match):
            torch.nn.functional.interpolate(torch.tensor(x), **kw)
        with pytest.raises(exc, match=match):
            AF.interpolate(ag.tensor(x), **kw)


def test_upsample_spellings_warn_and_resize() -> None:
    x = r(1, 2, 3, 4)
    for name, kw in (
        ("upsample", {"scale_factor": 2, "mode": "bilinear", "align_corners": False}),
        ("upsample_nearest", {"size": (5, 7)}),
        ("upsample_bilinear", {"scale_factor": 1.5}),
    ):
        with pytest.warns(UserWarning, match=f"nn.functional.{name}` is deprecated"):
            got = getattr(AF, name)(ag.tensor(x), **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(torch.nn.functional, name)(torch.tensor(x), **kw)
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-12)
    for name, kw in (
        ("UpsamplingNearest2d", {"scale_factor": 2}),
        ("UpsamplingBilinear2d", {"size": (4, 6)}),
    ):
        mine, theirs = getattr(ag.nn, name)(**kw), getattr(torch.nn, name)(**kw)
        np.testing.assert_allclose(
            mine(ag.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(), atol=1e-12
        )


# ----- modules -----
MODULES: list[tuple[str, tuple[Any, ...], tuple[int, ...]]] = [
    ("ConstantPad1d", ((1, 2), 3.5), (2, 3, 4)),
    ("ConstantPad2d", (1, -0.5), (2, 3, 4)),
    ("ConstantPad3d", ((1, 0, 2, 1, 0, 1), 1.0), (1, 2, 3, 2, 2)),
    ("ZeroPad1d", (2,), (3, 4)),
    ("ZeroPad2d", ((1, 0, 2, 1),), (1, 2, 3, 4)),
    ("ZeroPad3d", (1,), (2, 3, 2, 2)),
    ("ReflectionPad1d", ((2, 1),), (2, 3, 4)),
    ("ReflectionPad2d", (2,), (1, 2, 3, 4)),
    ("ReflectionPad3d", ((1, 0, 1, 1, 0, 1),), (1, 2, 3, 2, 2)),
    ("ReplicationPad1d", (3,), (2, 3, 4)),
    ("ReplicationPad2d", ((1, 2, 0, 3),), (2, 3, 4)),
    ("ReplicationPad3d", (2,), (1, 2, 3, 2, 2)),
    ("CircularPad1d", ((2, 1),), (2, 3, 4)),
    ("CircularPad2d", (1,), (1, 2, 3, 4)),
    ("CircularPad3d", ((1, 0, 1, 1, 0, 1),), (1, 2, 3, 2, 2)),
    ("PixelShuffle", (2,), (1, 8, 2, 3)),
    ("PixelUnshuffle", (2,), (1, 2, 4, 6)),
    ("ChannelShuffle", (2,), (1, 6, 2, 3)),
    ("Unfold", ((2, 3), 1, 1, 2), (2, 3, 5, 6)),
    ("Fold", ((4, 5), 2), (2, 8, 12)),
    ("LocalResponseNorm", (3, 0.1, 0.5, 1.5), (2, 5, 3, 3)),
    ("CrossMapLRN2d", (3, 0.1, 0.5, 1.5), (2, 5, 3, 3)),
    ("CrossMapLRN2d", (4, 0.2, 0.75, 1.0), (2, 7, 2, 2)),
    ("CrossMapLRN2d", (5,), (1, 3, 2, 2)),
]


@pytest.mark.parametrize(("name", "args", "shape"), MODULES, ids=[m[0] for m in MODULES])
def test_modules_match_torch(name: str, args: tuple[Any, ...], shape: tuple[int, ...]) -> None:
    mine, theirs = getattr(ag.nn, name)(*args), getattr(torch.nn, name)(*args)
    x = r(*shape)
    got, want = mine(_ag(x)), theirs(_th(x))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-12)
    assert repr(mine) == repr(theirs)
    if name != "CrossMapLRN2d":  # torch's legacy backward is not its forward's derivative
        xs, ts = _ag(x), _th(x)
        ct = r(*want.shape)
        (g,) = ag.grad_sync((mine(xs) * ag.tensor(ct)).sum(), [xs])
        (w,) = torch.autograd.grad((theirs(ts) * torch.tensor(ct)).sum(), [ts])
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=1e-12)
    if x.size <= 120:
        assert gradcheck(mine, [_ag(x)])


def test_padding_module_errors() -> None:
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        torch.nn.CircularPad1d(1)(torch.zeros(1, 1, 2, 2))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        ag.nn.CircularPad1d(1)(ag.zeros(1, 1, 2, 2))
    with pytest.raises(
        RuntimeError, match="Padding size should be less than the corresponding input dimension"
    ):
        ag.nn.ReflectionPad1d(3)(ag.zeros(1, 1, 3))
    with pytest.raises(ValueError, match="CrossMapLRN2d: Expected input to be 4D, got 3D instead"):
        ag.nn.CrossMapLRN2d(3)(ag.zeros(1, 2, 3))


def test_interpolate_uint8_images() -> None:
    x = RNG.integers(0, 256, (1, 3, 7, 9)).astype(np.uint8)
    for kw in ({"mode": "bilinear"}, {"mode": "bilinear", "antialias": True}, {"mode": "nearest"}):
        got = AF.interpolate(ag.tensor(x), scale_factor=0.6, **kw)
        want = torch.nn.functional.interpolate(torch.tensor(x), scale_factor=0.6, **kw)
        assert got.dtype == ag.uint8
        assert np.abs(got.numpy().astype(int) - want.numpy().astype(int)).max() <= 1
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        AF.interpolate(ag.tensor(x.astype(np.int64)), scale_factor=2, mode="bilinear")


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda F, t: F.unfold(t, 2), (0, 2, 4, 4)),
        (lambda F, t: F.fold(t, 3, 2), (0, 8, 4)),
        (
            lambda F, t: F.grid_sample(t, t[:, :2].permute(0, 2, 3, 1), align_corners=False),
            (0, 2, 4, 4),
        ),
        (
            lambda F, t: F.interpolate(t, scale_factor=0.5, mode="bilinear", antialias=True),
            (0, 2, 4, 4),
        ),
        (lambda F, t: F.pixel_shuffle(t, 2), (0, 4, 2, 2)),
        (lambda F, t: F.local_response_norm(t, 2), (0, 4, 2, 2)),
    ],
)
def test_empty_batch(fn: Fn, shape: tuple[int, ...]) -> None:
    x = np.zeros(shape)
    got, want = fn(AF, _ag(x)), fn(torch.nn.functional, torch.tensor(x))
    assert tuple(got.shape) == tuple(want.shape)
