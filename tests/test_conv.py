"""conv1d, conv2d, max_pool2d, avg_pool2d and their modules, compared with torch: values,
gradients, gradients of gradients, and error messages. The rules' gradchecks are in
tests/autograd/test_rules.py (CASES), which also run them on the simulated CUDA device.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.nn.functional as F

torch = pytest.importorskip("torch", reason="torch is the reference for convolution and pooling")
TF = torch.nn.functional


def _pair(rng: np.random.Generator, *shape: int) -> tuple[ag.Tensor, Any]:
    v = rng.standard_normal(shape)
    return ag.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)


def _compare(
    fn: Callable[..., Any], tfn: Callable[..., Any], shapes: list[tuple[int, ...]], seed: int = 0
) -> None:
    """Value and every input's gradient of ``fn`` equal torch's ``tfn`` (float64)."""
    rng = np.random.default_rng(seed)
    pairs = [_pair(rng, *s) for s in shapes]
    out = fn(*(a for a, _ in pairs))
    want = tfn(*(t for _, t in pairs))
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(tuple(want.shape))
    out.backward(ag.tensor(g))
    want.backward(torch.tensor(g))
    for i, (a, t) in enumerate(pairs):
        np.testing.assert_allclose(
            a.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"input {i}"
        )


# ----- conv2d / conv1d -----
CONV2D = [
    # x shape, w shape, bias, kwargs
    ((2, 3, 7, 6), (4, 3, 3, 3), True, {}),
    ((1, 3, 7, 6), (4, 3, 3, 3), False, {}),
    ((3, 2, 9, 5), (5, 2, 2, 3), True, {"stride": 2}),
    ((2, 2, 9, 5), (5, 2, 2, 3), True, {"stride": (2, 1), "padding": (1, 2)}),
    ((2, 2, 8, 8), (3, 2, 3, 3), True, {"dilation": 2, "padding": 2}),
    ((2, 2, 8, 7), (3, 2, 3, 2), False, {"dilation": (2, 1), "stride": (1, 3)}),
    ((2, 4, 6, 6), (6, 2, 3, 3), True, {"groups": 2, "padding": 1}),
    ((2, 6, 5, 7), (6, 1, 3, 3), True, {"groups": 6}),  # depthwise
    ((2, 3, 6, 5), (4, 3, 2, 2), True, {"padding": "same"}),  # even kernel: pad after
    ((2, 4, 6, 5), (4, 2, 3, 2), True, {"padding": "same", "dilation": (2, 3), "groups": 2}),
    ((2, 3, 6, 5), (4, 3, 3, 3), True, {"padding": "valid"}),
    ((2, 3, 3, 3), (4, 3, 3, 3), True, {}),  # one output pixel
    ((2, 3, 4, 4), (4, 3, 1, 1), True, {"stride": 2}),  # 1x1 kernel
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize(("xs", "ws", "bias", "kw"), CONV2D)
def test_conv2d_matches_torch(
    xs: tuple[int, ...], ws: tuple[int, ...], bias: bool, kw: dict[str, Any]
) -> None:
    shapes = [xs, ws] + ([(ws[0],)] if bias else [])
    _compare(lambda *a: F.conv2d(*a, **kw), lambda *a: TF.conv2d(*a, **kw), shapes, seed=len(kw))


CONV1D = [
    ((2, 3, 9), (4, 3, 3), True, {}),
    ((1, 3, 9), (4, 3, 2), False, {"stride": 2, "padding": 1}),
    ((2, 4, 11), (6, 2, 3), True, {"dilation": 2, "groups": 2, "padding": 3}),
    ((2, 3, 8), (2, 3, 4), True, {"padding": "same", "dilation": 2}),
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize(("xs", "ws", "bias", "kw"), CONV1D)
def test_conv1d_matches_torch(
    xs: tuple[int, ...], ws: tuple[int, ...], bias: bool, kw: dict[str, Any]
) -> None:
    shapes = [xs, ws] + ([(ws[0],)] if bias else [])
    _compare(lambda *a: F.conv1d(*a, **kw), lambda *a: TF.conv1d(*a, **kw), shapes)


def test_unbatched_input() -> None:
    _compare(
        lambda x, w, b: F.conv2d(x, w, b, padding=1),
        lambda x, w, b: TF.conv2d(x, w, b, padding=1),
        [(3, 5, 4), (2, 3, 3, 3), (2,)],
    )
    _compare(lambda x, w: F.conv1d(x, w), lambda x, w: TF.conv1d(x, w), [(3, 5), (2, 3, 2)])


def test_conv_is_one_node() -> None:
    x = ag.randn(2, 3, 5, 5, requires_grad=True)
    w = ag.randn(4, 3, 3, 3, requires_grad=True)
    b = ag.randn(4, requires_grad=True)
    y = F.conv2d(x, w, b)
    assert y.grad_fn is not None
    assert y.grad_fn.name() == "ConvolutionBackward0"
    assert [type(n).__name__ for n, _ in y.grad_fn.next_functions] == ["AccumulateGrad"] * 3
    p = F.max_pool2d(y, 2)
    assert p.grad_fn is not None
    assert p.grad_fn.name() == "MaxPool2DWithIndicesBackward0"


def test_float32_stays_float32() -> None:
    x = ag.randn(2, 3, 6, 6, requires_grad=True)
    w = ag.randn(4, 3, 3, 3, requires_grad=True)
    y = F.max_pool2d(F.conv2d(x, w, padding=1), 2)
    y = F.avg_pool2d(y, 3, stride=1, padding=1, count_include_pad=False)
    assert y.dtype == ag.float32
    y.sum().backward()
    assert x.grad is not None
    assert w.grad is not None
    assert x.grad.dtype == ag.float32
    assert w.grad.dtype == ag.float32


def test_double_backward_matches_torch() -> None:
    """The gradient of a gradient's norm, through the conv, pool and ReLU: torch's."""
    rng = np.random.default_rng(3)
    (x, tx), (w, tw), (b, tb) = (_pair(rng, *s) for s in [(2, 2, 6, 5), (3, 2, 3, 2), (3,)])

    def loss(lib: Any, f: Any, x: Any, w: Any, b: Any) -> Any:
        h = f.conv2d(x, w, b, stride=(1, 2), padding=1, dilation=(2, 1))
        return (f.max_pool2d(lib.tanh(h), 2, stride=1) ** 2).sum()

    (gx, gw) = ag.grad_sync(loss(ag, F, x, w, b), (x, w), create_graph=True)
    (tgx, tgw) = torch.autograd.grad(loss(torch, TF, tx, tw, tb), (tx, tw), create_graph=True)
    ((gx * gx).sum() + (gw * gw).sum()).backward()
    ((tgx * tgx).sum() + (tgw * tgw).sum()).backward()
    for a, t in [(x, tx), (w, tw), (b, tb)]:
        assert a.grad is not None
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-11)


# ----- pooling -----
MAX_POOL = [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((1, 2, 7, 5), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 2, 7, 6), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)}),
    ((2, 2, 7, 6), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ((2, 2, 8, 7), {"kernel_size": 2, "stride": 1, "dilation": 2}),
    ((2, 2, 9, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((3, 6, 5), {"kernel_size": 2}),  # unbatched
]


@pytest.mark.parametrize(("xs", "kw"), MAX_POOL)
def test_max_pool2d_matches_torch(xs: tuple[int, ...], kw: dict[str, Any]) -> None:
    _compare(lambda x: F.max_pool2d(x, **kw), lambda x: TF.max_pool2d(x, **kw), [xs])
    x = ag.tensor(np.random.default_rng(1).standard_normal(xs))
    out, idx = F.max_pool2d(x, return_indices=True, **kw)
    tout, tidx = TF.max_pool2d(torch.tensor(x.numpy()), return_indices=True, **kw)
    assert idx.dtype == ag.int64
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    np.testing.assert_array_equal(out.numpy(), tout.numpy())


def test_max_pool2d_ties_and_nan_as_torch() -> None:
    """Ties (ReLU zeros, repeated values) send the gradient to the first maximum, a window with
    NaN gives NaN and picks its last NaN, as torch does."""
    v = np.array([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.5], [np.nan, 2.0, 3.0, np.nan]])
    v = np.concatenate([v, [[np.nan, 1.0, np.nan, 3.0]]])[None, None]
    kw: dict[str, Any] = {"kernel_size": 2, "stride": 1}
    x = ag.tensor(v, requires_grad=True)
    tx = torch.tensor(v, requires_grad=True)
    out, idx = F.max_pool2d(x, return_indices=True, **kw)
    tout, tidx = TF.max_pool2d(tx, return_indices=True, **kw)
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    out.sum().backward()
    tout.sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


AVG_POOL = [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((1, 2, 7, 5), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((1, 2, 7, 5), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ((2, 2, 7, 6), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)}),
    ((2, 2, 7, 6), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ((2, 2, 9, 8), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    (
        (2, 2, 9, 8),
        {
            "kernel_size": 3,
            "stride": 2,
            "padding": 1,
            "ceil_mode": True,
            "count_include_pad": False,
        },
    ),
    ((2, 2, 6, 6), {"kernel_size": 3, "padding": 1, "divisor_override": 5}),
    ((3, 6, 5), {"kernel_size": 2, "stride": 1}),  # unbatched
]


@pytest.mark.parametrize(("xs", "kw"), AVG_POOL)
def test_avg_pool2d_matches_torch(xs: tuple[int, ...], kw: dict[str, Any]) -> None:
    _compare(lambda x: F.avg_pool2d(x, **kw), lambda x: TF.avg_pool2d(x, **kw), [xs])


# ----- modules -----
def test_conv2d_module_init_and_forward() -> None:
    ag.manual_seed(0)
    conv = ag.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2)
    assert conv.weight.shape == (6, 2, 3, 2)
    assert conv.bias is not None
    assert conv.bias.shape == (6,)
    bound = 1.0 / math.sqrt(2 * 3 * 2)  # kaiming_uniform(a=sqrt(5)): 1/sqrt(fan_in)
    for p in (conv.weight, conv.bias):
        a = p.detach().numpy()
        assert a.dtype == np.float32
        assert bound / 2 < np.abs(a).max() <= bound
    assert [n for n, _ in conv.named_parameters()] == ["weight", "bias"]
    ref = torch.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(conv.weight.detach().numpy()))
        ref.bias.copy_(torch.from_numpy(conv.bias.detach().numpy()))
    x = np.random.default_rng(0).standard_normal((2, 4, 7, 5)).astype(np.float32)
    np.testing.assert_allclose(
        conv(ag.tensor(x)).detach().numpy(),
        ref(torch.from_numpy(x)).detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    assert ag.nn.Conv2d(1, 2, 3, bias=False).bias is None
    assert ag.nn.Conv1d(3, 2, 4)(ag.zeros(2, 3, 9)).shape == (2, 2, 6)
    assert ag.nn.Conv2d(1, 2, 3, padding="same")(ag.zeros(1, 1, 5, 4)).shape == (1, 2, 5, 4)


def test_pool_modules() -> None:
    x = ag.randn(2, 3, 6, 6)
    np.testing.assert_array_equal(ag.nn.MaxPool2d(2)(x).numpy(), F.max_pool2d(x, 2).numpy())
    out, idx = ag.nn.MaxPool2d(3, stride=1, padding=1, return_indices=True)(x)
    assert out.shape == idx.shape == (2, 3, 6, 6)
    np.testing.assert_array_equal(
        ag.nn.AvgPool2d(2, stride=1)(x).numpy(), F.avg_pool2d(x, 2, stride=1).numpy()
    )


def test_small_cnn_trains() -> None:
    """A CNN of the modules fits a fixed batch (the loss falls)."""
    ag.manual_seed(0)
    model = ag.nn.Sequential(
        ag.nn.Conv2d(1, 4, 3, padding=1),
        ag.nn.ReLU(),
        ag.nn.MaxPool2d(2),
        ag.nn.Conv2d(4, 8, 3),
        ag.nn.ReLU(),
        ag.nn.AvgPool2d(2),
    )
    head = ag.nn.Linear(8, 3)
    opt = ag.optim.SGD([*model.parameters(), *head.parameters()], lr=0.5)
    x = ag.randn(6, 1, 8, 8)
    y = ag.tensor([0, 1, 2, 0, 1, 2])
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = F.cross_entropy(head(model(x).flatten(1)), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5


# ----- errors: torch's type and message -----
def _x(*shape: int) -> tuple[ag.Tensor, Any]:
    v = np.zeros(shape)
    return ag.tensor(v), torch.tensor(v)


ERRORS: list[tuple[str, Callable[[Any, Any], Any], list[tuple[int, ...]]]] = [
    ("channels", lambda f, a: f.conv2d(*a), [(2, 4, 5, 5), (8, 3, 3, 3)]),
    ("input dims", lambda f, a: f.conv2d(*a), [(2, 4), (8, 3, 3, 3)]),
    ("conv1d input dims", lambda f, a: f.conv1d(*a), [(2, 3, 5, 5), (8, 3, 3)]),
    ("groups divide out", lambda f, a: f.conv2d(*a, groups=2), [(2, 6, 5, 5), (3, 3, 3, 3)]),
    ("groups channels", lambda f, a: f.conv2d(*a, groups=4), [(2, 6, 5, 5), (4, 3, 3, 3)]),
    ("groups zero", lambda f, a: f.conv2d(*a, groups=0), [(2, 6, 5, 5), (4, 3, 3, 3)]),
    ("stride zero", lambda f, a: f.conv2d(*a, stride=0), [(2, 3, 5, 5), (4, 3, 3, 3)]),
    ("padding negative", lambda f, a: f.conv2d(*a, padding=-1), [(2, 3, 5, 5), (4, 3, 3, 3)]),
    ("kernel too large", lambda f, a: f.conv2d(*a), [(2, 3, 2, 2), (4, 3, 3, 3)]),
    ("kernel too large 1d", lambda f, a: f.conv1d(*a), [(2, 3, 2), (4, 3, 3)]),
    ("bias size", lambda f, a: f.conv2d(*a), [(2, 3, 5, 5), (4, 3, 3, 3), (7,)]),
    (
        "same strided",
        lambda f, a: f.conv2d(*a, padding="same", stride=2),
        [(1, 3, 5, 5), (4, 3, 3, 3)],
    ),
    ("padding string", lambda f, a: f.conv2d(*a, padding="foo"), [(1, 3, 5, 5), (4, 3, 3, 3)]),
    ("pool pad", lambda f, a: f.max_pool2d(*a, 3, padding=2), [(2, 3, 5, 5)]),
    ("avg pool pad", lambda f, a: f.avg_pool2d(*a, 3, padding=2), [(2, 3, 5, 5)]),
    ("pool too small", lambda f, a: f.max_pool2d(*a, 3), [(2, 3, 1, 1)]),
    ("pool dims", lambda f, a: f.max_pool2d(*a, 2), [(2, 5)]),
    ("pool stride zero", lambda f, a: f.max_pool2d(*a, 2, stride=0), [(2, 3, 5, 5)]),
]


@pytest.mark.parametrize(("what", "call", "shapes"), ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_as_torch(
    what: str, call: Callable[[Any, Any], Any], shapes: list[tuple[int, ...]]
) -> None:
    pairs = [_x(*s) for s in shapes]
    with pytest.raises(RuntimeError) as want:
        call(TF, [t for _, t in pairs])
    with pytest.raises(RuntimeError, match=f"^{re.escape(str(want.value))}$"):
        call(F, [a for a, _ in pairs])


def test_dtype_mismatch_as_torch() -> None:
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        F.conv2d(ag.zeros(1, 3, 5, 5, dtype=ag.float64), ag.zeros(4, 3, 3, 3))


def test_bad_input_leaves_no_graph() -> None:
    w = ag.randn(4, 3, 3, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="channels"):
        F.conv2d(ag.randn(1, 2, 5, 5), w)
    assert w.grad is None
    assert w.grad_fn is None


def test_module_argument_errors() -> None:
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        ag.nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        ag.nn.Conv2d(4, 3, 3, groups=2)
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        ag.nn.Conv2d(4, 4, 3, stride=2, padding="same")
