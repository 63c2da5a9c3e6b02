"""conv3d, the transposed convolutions (1-, 2- and 3-D), torch.convolution and the modules
Conv3d, ConvTranspose1d/2d/3d and the Lazy convolutions: values and gradients against torch,
finite differences (first and second order), errors as torch raises them."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(11)
Fn = Callable[..., Any]


def _ag(a: np.ndarray[Any, Any], grad: bool = True) -> ag.Tensor:
    return ag.tensor(a, requires_grad=grad and a.dtype.kind == "f")


def _th(a: np.ndarray[Any, Any], grad: bool = True) -> Any:
    return torch.tensor(a, requires_grad=grad and a.dtype.kind == "f")


def compare(fn: Fn, arrays: list[np.ndarray[Any, Any]], atol: float = 1e-10) -> None:
    """fn(F, *tensors) with F = ag.nn.functional and torch.nn.functional: equal values, and
    equal gradients of a random weighting of the output."""
    xs, ts = [_ag(a) for a in arrays], [_th(a) for a in arrays]
    out = fn(ag.nn.functional, *xs)
    with warnings.catch_warnings():  # torch's padding='same' may warn about a padded copy
        warnings.simplefilter("ignore", UserWarning)
        want = fn(torch.nn.functional, *ts)
    assert tuple(out.shape) == tuple(want.shape)
    assert out.dtype == getattr(ag, str(want.dtype).split(".")[1])
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


def r(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.standard_normal(shape)


# (id, fn(F, *inputs), input shapes)
CASES: list[tuple[str, Fn, list[tuple[int, ...]]]] = [
    ("conv3d", lambda F, x, w: F.conv3d(x, w), [(2, 3, 3, 4, 3), (4, 3, 2, 3, 2)]),
    (
        "conv3d_stride_pad_dil_groups_bias",
        lambda F, x, w, b: F.conv3d(x, w, b, (2, 1, 2), (1, 2, 0), (1, 2, 1), 2),
        [(1, 4, 5, 5, 4), (4, 2, 2, 3, 2), (4,)],
    ),
    (
        "conv3d_same",
        lambda F, x, w: F.conv3d(x, w, padding="same"),
        [(1, 2, 4, 5, 3), (3, 2, 2, 3, 2)],
    ),
    (
        "conv3d_unbatched",
        lambda F, x, w: F.conv3d(x, w, padding=1),
        [(2, 3, 4, 3), (3, 2, 3, 3, 1)],
    ),
    ("conv_t1d", lambda F, x, w: F.conv_transpose1d(x, w), [(2, 3, 5), (3, 4, 3)]),
    (
        "conv_t1d_all",
        lambda F, x, w, b: F.conv_transpose1d(x, w, b, 3, 1, 2, 2, 2),
        [(2, 4, 5), (4, 3, 3), (6,)],
    ),
    ("conv_t1d_unbatched", lambda F, x, w: F.conv_transpose1d(x, w, stride=2), [(3, 5), (3, 2, 2)]),
    ("conv_t2d", lambda F, x, w: F.conv_transpose2d(x, w), [(2, 3, 4, 5), (3, 2, 3, 2)]),
    (
        "conv_t2d_all",
        lambda F, x, w, b: F.conv_transpose2d(x, w, b, (2, 3), (1, 0), (1, 2), 2, (2, 1)),
        [(2, 4, 4, 5), (4, 3, 3, 2), (6,)],
    ),
    (
        "conv_t3d",
        lambda F, x, w, b: F.conv_transpose3d(x, w, b),
        [(2, 3, 3, 4, 2), (3, 2, 2, 3, 2), (2,)],
    ),
    (
        "conv_t3d_all",
        lambda F, x, w: F.conv_transpose3d(
            x, w, None, (2, 1, 3), (1, 1, 0), (1, 0, 2), 2, (2, 1, 1)
        ),
        [(1, 4, 3, 4, 2), (4, 2, 2, 3, 2)],
    ),
    (
        "conv_t3d_pad_crops_a_tap",
        lambda F, x, w: F.conv_transpose3d(x, w, padding=(1, 0, 0)),
        [(1, 2, 1, 2, 2), (2, 1, 3, 1, 1)],
    ),
    (
        "conv_t3d_unbatched",
        lambda F, x, w: F.conv_transpose3d(x, w, stride=2),
        [(2, 2, 2, 2), (2, 1, 2, 2, 2)],
    ),
]


@pytest.mark.parametrize(("fn", "shapes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_torch(fn: Fn, shapes: list[tuple[int, ...]]) -> None:
    compare(fn, [r(*s) for s in shapes])


@pytest.mark.parametrize(("fn", "shapes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gradcheck(fn: Fn, shapes: list[tuple[int, ...]]) -> None:
    xs = [_ag(r(*s)) for s in shapes]
    assert gradcheck(lambda *t: fn(ag.nn.functional, *t), xs)


# Second order on small inputs: each gradient is itself a convolution of the same size.
SECOND: list[tuple[str, Fn, list[tuple[int, ...]]]] = [
    (
        "conv3d",
        lambda F, x, w, b: F.conv3d(x, w, b, (2, 1, 1), (1, 0, 1), 1, 2),
        [(1, 2, 3, 3, 2), (2, 1, 2, 2, 1), (2,)],
    ),
    (
        "conv_t1d",
        lambda F, x, w, b: F.conv_transpose1d(x, w, b, 2, 1, 1, 2, 2),
        [(1, 2, 3), (2, 1, 2), (2,)],
    ),
    (
        "conv_t2d",
        lambda F, x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1, 2),
        [(1, 2, 2, 3), (2, 1, 2, 2), (2,)],
    ),
    (
        "conv_t3d",
        lambda F, x, w, b: F.conv_transpose3d(x, w, b, (2, 1, 1), (1, 0, 0), (1, 0, 0)),
        [(1, 1, 2, 2, 1), (1, 2, 2, 1, 2), (2,)],
    ),
]


@pytest.mark.parametrize(("fn", "shapes"), [c[1:] for c in SECOND], ids=[c[0] for c in SECOND])
def test_gradgradcheck(fn: Fn, shapes: list[tuple[int, ...]]) -> None:
    xs = [_ag(r(*s)) for s in shapes]
    compare(fn, [x.detach().numpy() for x in xs])
    assert gradgradcheck(lambda *t: fn(ag.nn.functional, *t), xs)


def test_float32_and_empty_batch() -> None:
    x, w = r(2, 3, 3, 4, 4).astype(np.float32), r(2, 3, 2, 2, 2).astype(np.float32)
    compare(lambda F, a, b: F.conv3d(a, b), [x, w], atol=1e-5)
    compare(
        lambda F, a, b: F.conv_transpose3d(a, b), [x, w.transpose(1, 0, 2, 3, 4).copy()], atol=1e-5
    )
    compare(lambda F, a, b: F.conv_transpose2d(a, b), [r(0, 3, 4, 4), r(3, 2, 2, 2)])
    compare(lambda F, a, b: F.conv3d(a, b), [r(0, 3, 4, 4, 4), r(2, 3, 2, 2, 2)])


def test_nan_and_inf_propagate_as_in_torch() -> None:
    x = r(1, 2, 3, 3, 3)
    x[0, 0, 1, 1, 1] = np.nan
    x[0, 1, 0, 0, 0] = np.inf
    compare(lambda F, a, b: F.conv3d(a, b), [x, r(2, 2, 2, 2, 2)])
    compare(lambda F, a, b: F.conv_transpose3d(a, b), [x, r(2, 2, 2, 2, 2)])


def test_torch_convolution_and_top_level_names() -> None:
    x, w = r(2, 4, 5, 6), r(4, 2, 3, 2)
    for transposed in (False, True):
        args = ((2, 1), (1, 0), (1, 2), transposed, (1, 0) if transposed else (0, 0), 2)
        got = ag.convolution(_ag(x), _ag(w), None, *args)
        want = torch.convolution(_th(x), _th(w), None, *args)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-10)
    for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d"):
        n = int(name[-2])
        xs, ws = r(1, 2, *(4,) * n), r(2, 2, *(2,) * n)
        got = getattr(ag, name)(_ag(xs), _ag(ws), None, 1, 1)
        want = getattr(torch, name)(_th(xs), _th(ws), None, 1, 1)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-10)


ERRORS: list[tuple[Fn, list[tuple[int, ...]], type[Exception], str]] = [
    (
        lambda F, x, w: F.conv3d(x, w),
        [(1, 2, 3, 3), (2, 2, 2, 2, 2)],
        RuntimeError,
        "to have 2 channels",
    ),
    (lambda F, x, w: F.conv3d(x, w), [(2, 3, 3), (2, 2, 2, 2, 2)], RuntimeError, "Expected 4D"),
    (
        lambda F, x, w: F.conv3d(x, w),
        [(1, 2, 2, 2, 2), (2, 2, 3, 3, 3)],
        RuntimeError,
        "Kernel size",
    ),
    (
        lambda F, x, w: F.conv_transpose2d(x, w),
        [(1, 2, 3, 3), (3, 2, 2, 2)],
        RuntimeError,
        r"Given transposed=1, weight of size \[3, 2, 2, 2\], expected input\[1, 2, 3, 3\] to have "
        "3 channels, but got 2 channels instead",
    ),
    (
        lambda F, x, w: F.conv_transpose2d(x, w, output_padding=1),
        [(1, 2, 3, 3), (2, 2, 2, 2)],
        RuntimeError,
        "output padding must be smaller than either stride or dilation, but got "
        "output_padding_height: 1 output_padding_width: 1 stride_height: 1 stride_width: 1 "
        "dilation_height: 1 dilation_width: 1",
    ),
    (
        lambda F, x, w: F.conv_transpose2d(x, w, padding=3),
        [(1, 2, 3, 3), (2, 2, 2, 2)],
        RuntimeError,
        r"Calculated output size per channel: \(-2 x -2\). Output size is too small",
    ),
    (
        lambda F, x, w, b: F.conv_transpose2d(x, w, b, groups=2),
        [(1, 2, 3, 3), (2, 2, 2, 2), (3,)],
        RuntimeError,
        "expected bias to be 1-dimensional with 4 elements, but got bias of size",
    ),
    (
        lambda F, x, w: F.conv_transpose3d(x, w, stride=2, output_padding=2),
        [(1, 2, 3, 3, 3), (2, 2, 2, 2, 2)],
        RuntimeError,
        "output_padding_depth: 2 output_padding_height: 2",
    ),
    (
        lambda F, x, w: F.conv_transpose1d(x, w, stride=(1, 1)),
        [(1, 2, 3), (2, 2, 2)],
        RuntimeError,
        "expected stride to be a single integer value or a list of 1 values",
    ),
]


@pytest.mark.parametrize(("fn", "shapes", "exc", "match"), ERRORS)
def test_errors_as_torch(
    fn: Fn, shapes: list[tuple[int, ...]], exc: type[Exception], match: str
) -> None:
    arrays = [r(*s) for s in shapes]
    with pytest.raises(exc, match=match):
        fn(torch.nn.functional, *[_th(a) for a in arrays])
    with pytest.raises(exc, match=match):
        fn(ag.nn.functional, *[_ag(a) for a in arrays])


# ----- modules -----
def _copy_params(mine: Any, theirs: Any) -> None:
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in mine.state_dict().items()})


MODULES: list[tuple[str, dict[str, Any], tuple[int, ...]]] = [
    (
        "Conv3d",
        {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "groups": 2},
        (2, 4, 5, 5, 4),
    ),
    (
        "Conv3d",
        {
            "in_channels": 2,
            "out_channels": 3,
            "kernel_size": (2, 3, 1),
            "padding": "same",
            "padding_mode": "reflect",
        },
        (1, 2, 4, 5, 3),
    ),
    (
        "Conv3d",
        {
            "in_channels": 2,
            "out_channels": 3,
            "kernel_size": 3,
            "padding": 1,
            "padding_mode": "circular",
            "bias": False,
        },
        (1, 2, 4, 5, 3),
    ),
    (
        "Conv3d",
        {
            "in_channels": 2,
            "out_channels": 3,
            "kernel_size": 2,
            "padding": (1, 0, 1),
            "padding_mode": "replicate",
            "stride": 2,
        },
        (1, 2, 4, 5, 3),
    ),
    (
        "ConvTranspose1d",
        {
            "in_channels": 4,
            "out_channels": 2,
            "kernel_size": 3,
            "stride": 2,
            "output_padding": 1,
            "groups": 2,
        },
        (2, 4, 5),
    ),
    (
        "ConvTranspose2d",
        {"in_channels": 3, "out_channels": 2, "kernel_size": (2, 3), "dilation": 2, "padding": 1},
        (2, 3, 4, 5),
    ),
    (
        "ConvTranspose3d",
        {"in_channels": 2, "out_channels": 4, "kernel_size": 2, "stride": 2, "bias": False},
        (1, 2, 2, 3, 2),
    ),
]


@pytest.mark.parametrize(("name", "kw", "shape"), MODULES)
def test_modules_match_torch(name: str, kw: dict[str, Any], shape: tuple[int, ...]) -> None:
    mine = getattr(ag.nn, name)(**kw).double()
    theirs = getattr(torch.nn, name)(**kw).double()
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for (_, p), (_, q) in zip(mine.named_parameters(), theirs.named_parameters(), strict=True):
        assert tuple(p.shape) == tuple(q.shape)
    _copy_params(mine, theirs)
    x = r(*shape)
    got, want = mine(_ag(x)), theirs(_th(x))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-10)
    assert repr(mine) == repr(theirs)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(mine.weight.grad.numpy(), theirs.weight.grad.numpy(), atol=1e-10)


def test_init_bounds_as_torch() -> None:
    # kaiming_uniform(a=sqrt(5)): uniform in +-1/sqrt(fan_in), fan_in = weight.shape[1] * k
    for mod, fan_in in (
        (ag.nn.Conv3d(4, 8, 3, groups=2), 2 * 27),
        (ag.nn.ConvTranspose2d(4, 6, 3, groups=2), 3 * 9),
    ):
        w = mod.weight.detach().numpy()
        b = mod.bias.detach().numpy()
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(w).max() <= bound
        assert np.abs(w).max() > 0.8 * bound
        assert np.abs(b).max() <= bound


def test_conv_transpose_output_size() -> None:
    mine, theirs = (
        ag.nn.ConvTranspose2d(2, 3, 3, stride=2).double(),
        torch.nn.ConvTranspose2d(2, 3, 3, stride=2).double(),
    )
    _copy_params(mine, theirs)
    x = r(1, 2, 4, 4)
    for size in ((9, 10), (1, 3, 10, 9)):
        got, want = mine(_ag(x), output_size=size), theirs(_th(x), output_size=size)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-10)
    with pytest.raises(ValueError, match="requested an output size of"):
        mine(_ag(x), output_size=(12, 12))
    with pytest.raises(ValueError, match="requested an output size of"):
        theirs(_th(x), output_size=(12, 12))


@pytest.mark.parametrize(
    ("name", "eager", "shape"),
    [
        ("LazyConv1d", "Conv1d", (2, 3, 6)),
        ("LazyConv2d", "Conv2d", (3, 5, 5)),
        ("LazyConv3d", "Conv3d", (1, 2, 3, 4, 4)),
        ("LazyConvTranspose1d", "ConvTranspose1d", (2, 3, 4)),
        ("LazyConvTranspose2d", "ConvTranspose2d", (1, 3, 3, 4)),
        ("LazyConvTranspose3d", "ConvTranspose3d", (1, 2, 2, 3, 2)),
    ],
)
def test_lazy_modules_infer_in_channels(name: str, eager: str, shape: tuple[int, ...]) -> None:
    lazy = getattr(ag.nn, name)(4, 3)
    assert lazy.has_uninitialized_params()
    assert list(lazy.parameters()) == []
    x = r(*shape).astype(np.float32)
    out = lazy(_ag(x, grad=False))
    want_in = shape[1] if len(shape) == lazy._n + 2 else shape[0]
    assert lazy.in_channels == want_in
    if name in ("LazyConv1d", "LazyConv2d"):  # these stay lazy classes (padding_mode)
        assert not lazy.has_uninitialized_params()
    else:  # torch's cls_to_become
        assert type(lazy) is getattr(ag.nn, eager)
    assert lazy(_ag(x, grad=False)).shape == out.shape
    theirs = getattr(torch.nn, eager)(want_in, 4, 3)
    _copy_params(lazy, theirs)
    want = theirs(_th(x, grad=False))
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), atol=1e-5)
    assert len(list(lazy.parameters())) == 2


def test_module_argument_errors() -> None:
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        ag.nn.Conv3d(2, 2, 3, padding_mode="wrap")
    with pytest.raises(
        ValueError, match='Only "zeros" padding mode is supported for ConvTranspose2d'
    ):
        ag.nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        ag.nn.Conv3d(3, 2, 3, groups=2)
    with pytest.raises(
        ValueError, match="padding='same' is not supported for strided convolutions"
    ):
        ag.nn.Conv3d(2, 2, 3, stride=2, padding="same")
