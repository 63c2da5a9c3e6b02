"""torch's losses (family H5): the functional forms, the torch-level ones (ATen's int
``reduction``), the loss modules and the legacy ``size_average``/``reduce`` arguments: values
and gradients against torch, finite differences, second derivatives and errors."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

torch = pytest.importorskip("torch", reason="compares with torch")
TF = torch.nn.functional

RNG = np.random.default_rng(7)
REDUCTIONS = ["mean", "sum", "none"]


def _pm1(shape: Any) -> np.ndarray:
    return np.where(RNG.random(shape) < 0.5, -1.0, 1.0)


def _prob(shape: Any) -> np.ndarray:
    return RNG.uniform(0.05, 0.95, shape)


def _classes(n: int, c: int) -> np.ndarray:
    return RNG.integers(0, c, n)


def _multilabel(n: int, c: int) -> np.ndarray:
    t = np.full((n, c), -1)
    for i in range(n):
        k = RNG.integers(0, c + 1)
        t[i, :k] = RNG.permutation(c)[:k]
    return t


# name -> (makes the inputs: float ones first, then (name, array) of non-differentiable ones,
# and extra keyword arguments). Floats are differentiated on both sides.
Case = tuple[str, Callable[[], tuple[list[np.ndarray], list[np.ndarray], dict[str, Any]]]]
CASES: list[Case] = [
    ("binary_cross_entropy", lambda: ([_prob((3, 4))], [_prob((3, 4))], {})),
    ("binary_cross_entropy", lambda: ([_prob(5)], [RNG.integers(0, 2, 5) * 1.0], {"weight": "w"})),
    ("kl_div", lambda: ([np.log(_prob((3, 4)))], [_prob((3, 4))], {})),
    ("kl_div", lambda: ([np.log(_prob((3, 4)))], [np.log(_prob((3, 4)))], {"log_target": True})),
    (
        "smooth_l1_loss",
        lambda: ([RNG.standard_normal((3, 4)) * 2], [RNG.standard_normal((3, 4))], {}),
    ),
    (
        "smooth_l1_loss",
        lambda: ([RNG.standard_normal(6) * 2], [RNG.standard_normal(6)], {"beta": 0.5}),
    ),
    (
        "smooth_l1_loss",
        lambda: ([RNG.standard_normal(6) * 2], [RNG.standard_normal(6)], {"beta": 0.0}),
    ),
    ("huber_loss", lambda: ([RNG.standard_normal((3, 4)) * 2], [RNG.standard_normal((3, 4))], {})),
    (
        "huber_loss",
        lambda: ([RNG.standard_normal(6) * 2], [RNG.standard_normal(6)], {"delta": 0.3}),
    ),
    ("soft_margin_loss", lambda: ([RNG.standard_normal((3, 4))], [_pm1((3, 4))], {})),
    (
        "multilabel_soft_margin_loss",
        lambda: ([RNG.standard_normal((3, 4))], [RNG.integers(0, 2, (3, 4)) * 1.0], {}),
    ),
    (
        "multilabel_soft_margin_loss",
        lambda: (
            [RNG.standard_normal((3, 4))],
            [RNG.integers(0, 2, (3, 4)) * 1.0],
            {"weight": "w4"},
        ),
    ),
    ("multilabel_margin_loss", lambda: ([RNG.standard_normal((5, 4))], [_multilabel(5, 4)], {})),
    ("multilabel_margin_loss", lambda: ([RNG.standard_normal(4)], [np.array([3, 0, -1, 1])], {})),
    ("multi_margin_loss", lambda: ([RNG.standard_normal((5, 4))], [_classes(5, 4)], {})),
    (
        "multi_margin_loss",
        lambda: ([RNG.standard_normal((5, 4))], [_classes(5, 4)], {"p": 2, "margin": 0.7}),
    ),
    (
        "multi_margin_loss",
        lambda: ([RNG.standard_normal((5, 4))], [_classes(5, 4)], {"weight": "w4"}),
    ),
    ("multi_margin_loss", lambda: ([RNG.standard_normal(4)], [np.array(2)], {})),
    (
        "margin_ranking_loss",
        lambda: ([RNG.standard_normal(6), RNG.standard_normal(6)], [_pm1(6)], {}),
    ),
    (
        "margin_ranking_loss",
        lambda: ([RNG.standard_normal(6), RNG.standard_normal(6)], [_pm1(6)], {"margin": 0.5}),
    ),
    ("hinge_embedding_loss", lambda: ([RNG.standard_normal((3, 4))], [_pm1((3, 4))], {})),
    (
        "hinge_embedding_loss",
        lambda: ([RNG.standard_normal((3, 4))], [_pm1((3, 4))], {"margin": 0.2}),
    ),
    (
        "cosine_embedding_loss",
        lambda: ([RNG.standard_normal((5, 3)), RNG.standard_normal((5, 3))], [_pm1(5)], {}),
    ),
    (
        "cosine_embedding_loss",
        lambda: (
            [RNG.standard_normal((5, 3)), RNG.standard_normal((5, 3))],
            [_pm1(5)],
            {"margin": 0.3},
        ),
    ),
    (
        "cosine_embedding_loss",
        lambda: ([RNG.standard_normal(3), RNG.standard_normal(3)], [np.array(-1.0)], {}),
    ),
    ("triplet_margin_loss", lambda: ([RNG.standard_normal((5, 3)) for _ in range(3)], [], {})),
    (
        "triplet_margin_loss",
        lambda: (
            [RNG.standard_normal((5, 3)) for _ in range(3)],
            [],
            {"p": 1, "swap": True, "margin": 2.0},
        ),
    ),
    (
        "triplet_margin_loss",
        lambda: ([RNG.standard_normal(3) for _ in range(3)], [], {"margin": 3.0}),
    ),
    (
        "triplet_margin_with_distance_loss",
        lambda: ([RNG.standard_normal((5, 3)) for _ in range(3)], [], {"margin": 2.0}),
    ),
    (
        "triplet_margin_with_distance_loss",
        lambda: (
            [RNG.standard_normal((5, 3)) for _ in range(3)],
            [],
            {"swap": True, "margin": 3.0},
        ),
    ),
    (
        "poisson_nll_loss",
        lambda: ([RNG.standard_normal((3, 4))], [RNG.poisson(2.0, (3, 4)) * 1.0], {}),
    ),
    (
        "poisson_nll_loss",
        lambda: (
            [RNG.uniform(0.1, 3, (3, 4))],
            [RNG.poisson(2.0, (3, 4)) * 1.0],
            {"log_input": False, "full": True},
        ),
    ),
    (
        "poisson_nll_loss",
        lambda: ([RNG.standard_normal(6)], [RNG.poisson(3.0, 6) * 1.0], {"full": True}),
    ),
    (
        "gaussian_nll_loss",
        lambda: (
            [RNG.standard_normal((3, 4)), RNG.uniform(0.1, 2, (3, 4))],
            [RNG.standard_normal((3, 4))],
            {},
        ),
    ),
    (
        "gaussian_nll_loss",
        lambda: (
            [RNG.standard_normal((3, 4)), RNG.uniform(0.1, 2, (3, 1))],
            [RNG.standard_normal((3, 4))],
            {"full": True},
        ),
    ),
    (
        "gaussian_nll_loss",
        lambda: (
            [RNG.standard_normal((3, 4)), RNG.uniform(0.1, 2, 3)],
            [RNG.standard_normal((3, 4))],
            {"eps": 0.5},
        ),
    ),
]


def _call(lib: Any, name: str, floats: list[Any], others: list[Any], kw: dict[str, Any]) -> Any:
    fn = getattr(lib.nn.functional if lib is torch else F, name)
    kw = dict(kw)
    for k, v in kw.items():
        if v in ("w", "w4"):  # a class/element weight, the same on both sides
            kw[k] = WEIGHTS[v](lib)
    if name == "gaussian_nll_loss":  # (input, target, var)
        return fn(floats[0], others[0], floats[1], **kw)
    if name.startswith(("margin_ranking", "cosine_embedding")):
        return fn(floats[0], floats[1], others[0], **kw)
    if name.startswith("triplet"):
        return fn(*floats, **kw)
    return fn(floats[0], others[0], **kw)


_W = RNG.uniform(0.5, 2.0, 5)
_W4 = RNG.uniform(0.5, 2.0, 4)
WEIGHTS: dict[str, Callable[[Any], Any]] = {
    "w": lambda lib: torch.tensor(_W) if lib is torch else ag.tensor(_W),
    "w4": lambda lib: torch.tensor(_W4) if lib is torch else ag.tensor(_W4),
}


def _tensors(lib: Any, floats: list[np.ndarray], others: list[np.ndarray]) -> tuple[Any, Any]:
    mk = torch.tensor if lib is torch else ag.tensor
    return [mk(x, requires_grad=True) for x in floats], [mk(x) for x in others]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    ("name", "make"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)]
)
def test_losses_match_torch(name: str, make: Any, reduction: str) -> None:
    floats, others, kw = make()
    fa, oa = _tensors(ag, floats, others)
    ft, ot = _tensors(torch, floats, others)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # kl_div's "mean" warning, on both sides
        ya = _call(ag, name, fa, oa, {**kw, "reduction": reduction})
        yt = _call(torch, name, ft, ot, {**kw, "reduction": reduction})
    assert tuple(ya.shape) == tuple(yt.shape)
    assert ya.dtype == ag.float64
    np.testing.assert_allclose(ya.detach().numpy(), yt.detach().numpy(), rtol=1e-11, atol=1e-13)
    g = RNG.standard_normal(tuple(yt.shape))
    ga = ag.autograd.grad(ya, fa, ag.tensor(g))
    gt = torch.autograd.grad(yt, ft, torch.tensor(g))
    for x, y in zip(ga, gt, strict=True):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "make"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)]
)
def test_losses_gradcheck(name: str, make: Any) -> None:
    floats, others, kw = make()
    _, oa = _tensors(ag, [], others)
    fa = [ag.tensor(x, requires_grad=True) for x in floats]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert ag.autograd.gradcheck(lambda *xs: _call(ag, name, list(xs), oa, kw), tuple(fa))


@pytest.mark.parametrize(
    "name",
    ["binary_cross_entropy", "kl_div", "soft_margin_loss", "multilabel_soft_margin_loss",
     "cosine_embedding_loss", "poisson_nll_loss", "gaussian_nll_loss", "triplet_margin_loss"],
)  # fmt: skip
def test_losses_gradgradcheck(name: str) -> None:
    make = next(m for n, m in CASES if n == name)
    floats, others, kw = make()
    _, oa = _tensors(ag, [], others)
    fa = [ag.tensor(x, requires_grad=True) for x in floats]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert ag.autograd.gradgradcheck(
            lambda *xs: _call(ag, name, list(xs), oa, {**kw, "reduction": "none"}), tuple(fa)
        )


# ----------------------------------------------------------------------------- special values
def test_binary_cross_entropy_saturated_probabilities_as_torch() -> None:
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.5, 1e-300])
    y = np.array([0.0, 1.0, 1.0, 0.0, 0.3, 1.0])
    a, t = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    la = F.binary_cross_entropy(a, ag.tensor(y), reduction="none")
    lt = TF.binary_cross_entropy(t, torch.tensor(y), reduction="none")
    np.testing.assert_allclose(la.detach().numpy(), lt.detach().numpy())  # the -100 clamp
    (ga,) = ag.autograd.grad(la.sum(), a)
    (gt,) = torch.autograd.grad(lt.sum(), t)
    np.testing.assert_allclose(ga.numpy(), gt.numpy())  # finite: x (1 - x) clamped to 1e-12
    # the target's gradient: -logit(x)
    ya, yt = ag.tensor(y[4:], requires_grad=True), torch.tensor(y[4:], requires_grad=True)
    (gy,) = ag.autograd.grad(F.binary_cross_entropy(ag.tensor(x[4:]), ya), ya)
    (gyt,) = torch.autograd.grad(TF.binary_cross_entropy(torch.tensor(x[4:]), yt), yt)
    np.testing.assert_allclose(gy.numpy(), gyt.numpy())
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(ag.tensor([1.5]), ag.tensor([1.0]))
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        TF.binary_cross_entropy(torch.tensor([1.5]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match=r"Using a target size .* is deprecated"):
        F.binary_cross_entropy(ag.tensor([0.5, 0.5]), ag.tensor([1.0]))


def test_kl_div_zero_target_and_batchmean_as_torch() -> None:
    x = np.log(_prob((4, 3)))
    y = _prob((4, 3))
    y[0, 0] = 0.0
    for reduction in ("batchmean", "sum", "none"):
        a, t = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        la = F.kl_div(a, ag.tensor(y), reduction=reduction)
        lt = TF.kl_div(t, torch.tensor(y), reduction=reduction)
        np.testing.assert_allclose(la.detach().numpy(), lt.detach().numpy())
        g = RNG.standard_normal(tuple(lt.shape))
        np.testing.assert_allclose(
            ag.autograd.grad(la, a, ag.tensor(g))[0].numpy(),
            torch.autograd.grad(lt, t, torch.tensor(g))[0].numpy(),
        )
    with pytest.warns(UserWarning, match="'mean' divides the total loss by both the batch size"):
        F.kl_div(ag.tensor(x), ag.tensor(y))


def test_smooth_l1_and_huber_at_the_switch_points_as_torch() -> None:
    x = np.array([0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 0.25])
    y = np.zeros(7)
    for fa, ft, kw in (
        (F.smooth_l1_loss, TF.smooth_l1_loss, {"beta": 1.0}),
        (F.smooth_l1_loss, TF.smooth_l1_loss, {"beta": 0.5}),
        (F.huber_loss, TF.huber_loss, {"delta": 0.5}),
        (F.huber_loss, TF.huber_loss, {"delta": 1.0}),
    ):
        a, t = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        la, lt = (
            fa(a, ag.tensor(y), reduction="none", **kw),
            ft(t, torch.tensor(y), reduction="none", **kw),
        )
        np.testing.assert_allclose(la.detach().numpy(), lt.detach().numpy())
        np.testing.assert_allclose(
            ag.autograd.grad(la.sum(), a)[0].numpy(), torch.autograd.grad(lt.sum(), t)[0].numpy()
        )
    w = RNG.uniform(0.5, 2, 7)
    la = F.huber_loss(ag.tensor(x), ag.tensor(y), weight=ag.tensor(w))
    lt = TF.huber_loss(torch.tensor(x), torch.tensor(y), weight=torch.tensor(w))
    np.testing.assert_allclose(la.numpy(), lt.numpy())
    with pytest.warns(UserWarning, match="Using a target size .* different to the input size"):
        F.smooth_l1_loss(ag.zeros(2, 3), ag.zeros(3))
    with pytest.raises(RuntimeError, match="smooth_l1_loss does not support negative values"):
        F.smooth_l1_loss(ag.zeros(3), ag.zeros(3), beta=-1.0)


def test_hinge_margin_losses_at_the_hinge_as_torch() -> None:
    # each at exactly its hinge, where torch's clamp_min passes the gradient
    x1, x2, y = np.array([0.5, 1.0]), np.array([0.5, 0.0]), np.array([1.0, 1.0])
    for fa, ft, args in (
        (F.margin_ranking_loss, TF.margin_ranking_loss, (x1, x2, y)),
        (F.hinge_embedding_loss, TF.hinge_embedding_loss, (np.array([1.0, 0.2]), -y)),
    ):
        a = [ag.tensor(v, requires_grad=True) for v in args[:-1]]
        t = [torch.tensor(v, requires_grad=True) for v in args[:-1]]
        la, lt = fa(*a, ag.tensor(args[-1])), ft(*t, torch.tensor(args[-1]))
        np.testing.assert_allclose(la.detach().numpy(), lt.detach().numpy())
        for p, q in zip(ag.autograd.grad(la, a), torch.autograd.grad(lt, t), strict=True):
            np.testing.assert_allclose(p.numpy(), q.numpy())


# ----------------------------------------------------------------------------- torch-level names
TORCH_LEVEL = [
    (
        "binary_cross_entropy_with_logits",
        lambda lib, x, y: lib.binary_cross_entropy_with_logits(x, y, None, None, 2),
    ),
    ("kl_div", lambda lib, x, y: lib.kl_div(x, y, 1, log_target=False)),
    (
        "hinge_embedding_loss",
        lambda lib, x, y: lib.hinge_embedding_loss(x, ~(y > 0.5) * 2.0 - 1.0, 0.5, 0),
    ),
    ("poisson_nll_loss", lambda lib, x, y: lib.poisson_nll_loss(x, y, True, True, 1e-8, 1)),
    (
        "margin_ranking_loss",
        lambda lib, x, y: lib.margin_ranking_loss(x, y, (y > 0.5) * 2.0 - 1.0, 0.1, 2),
    ),
    (
        "cosine_embedding_loss",
        lambda lib, x, y: lib.cosine_embedding_loss(x, y, lib.ones(3), 0.0, 1),
    ),
    (
        "triplet_margin_loss",
        lambda lib, x, y: lib.triplet_margin_loss(x, y, x * 2.0, 1.0, 2.0, 1e-6, True, 0),
    ),
]


@pytest.mark.parametrize(("name", "fn"), TORCH_LEVEL, ids=[n for n, _ in TORCH_LEVEL])
def test_torch_level_losses_take_atens_int_reduction(name: str, fn: Any) -> None:
    x, y = RNG.standard_normal((3, 4)), _prob((3, 4))
    a, t = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    la, lt = fn(ag, a, ag.tensor(y)), fn(torch, t, torch.tensor(y))
    np.testing.assert_allclose(la.detach().numpy(), lt.detach().numpy(), rtol=1e-12)
    g = RNG.standard_normal(tuple(lt.shape))
    np.testing.assert_allclose(
        ag.autograd.grad(la, a, ag.tensor(g))[0].numpy(),
        torch.autograd.grad(lt, t, torch.tensor(g))[0].numpy(),
        rtol=1e-11,
    )


# ----------------------------------------------------------------------------- legacy arguments
@pytest.mark.parametrize(
    ("size_average", "reduce"), [(None, False), (False, None), (True, True), (False, True)]
)
def test_legacy_size_average_and_reduce_as_torch(size_average: Any, reduce: Any) -> None:
    x, y = RNG.standard_normal((3, 4)), _pm1((3, 4))
    legacy = {"size_average": size_average, "reduce": reduce}
    for fa, ft in (
        (F.soft_margin_loss, TF.soft_margin_loss),
        (F.hinge_embedding_loss, TF.hinge_embedding_loss),
        (F.smooth_l1_loss, TF.smooth_l1_loss),
    ):
        with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
            la = fa(ag.tensor(x), ag.tensor(y), **legacy)
        with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
            lt = ft(torch.tensor(x), torch.tensor(y), **legacy)
        np.testing.assert_allclose(la.numpy(), lt.numpy())
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        m = nn.SoftMarginLoss(**legacy)
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        tm = torch.nn.SoftMarginLoss(**legacy)
    assert m.reduction == tm.reduction


def test_invalid_reduction_raises_as_torch() -> None:
    for fa, ft in ((F.soft_margin_loss, TF.soft_margin_loss), (F.kl_div, TF.kl_div)):
        with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
            fa(ag.zeros(2), ag.zeros(2), reduction="bad")
        with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
            ft(torch.zeros(2), torch.zeros(2), reduction="bad")


# ----------------------------------------------------------------------------- errors
def test_loss_errors_match_torch() -> None:
    checks: list[tuple[type[Exception], str, Callable[[Any, Any], Any]]] = [
        (
            ValueError,
            "only p == 1 and p == 2 supported",
            lambda lib, m: m.multi_margin_loss(lib.zeros(2, 3), lib.zeros(2, dtype=lib.int64), p=3),
        ),
        (
            RuntimeError,
            "margin_ranking_loss : All input tensors should have same dimension",
            lambda lib, m: m.margin_ranking_loss(lib.zeros(2), lib.zeros(2, 1), lib.zeros(2)),
        ),
        (
            RuntimeError,
            "The anchor, positive, and negative tensors are expected to have the same",
            lambda lib, m: m.triplet_margin_loss(lib.zeros(2, 3), lib.zeros(3), lib.zeros(2, 3)),
        ),
        (
            ValueError,
            "margin must be greater than 0, got 0",
            lambda lib, m: m.triplet_margin_with_distance_loss(
                lib.zeros(2, 3), lib.zeros(2, 3), lib.zeros(2, 3), margin=0
            ),
        ),
        (
            ValueError,
            "var has negative entry/entries",
            lambda lib, m: m.gaussian_nll_loss(lib.zeros(2, 3), lib.zeros(2, 3), -lib.ones(2, 3)),
        ),
        (
            ValueError,
            "var is of incorrect size",
            lambda lib, m: m.gaussian_nll_loss(lib.zeros(2, 3), lib.zeros(2, 3), lib.ones(4)),
        ),
        (
            RuntimeError,
            "1D target tensor expects 2D input tensors",
            lambda lib, m: m.cosine_embedding_loss(lib.zeros(3), lib.zeros(3), lib.ones(3)),
        ),
    ]
    for exc, msg, call in checks:
        with pytest.raises(exc, match=msg):
            call(ag, F)
        with pytest.raises(exc, match=msg):
            call(torch, TF)


def _long(lib: Any, *shape: int, fill: int = 0) -> Any:
    return lib.full(shape, fill, dtype=lib.int64)


# The same call on each library must raise the same exception with the same message.
SAME_ERROR: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("huber_delta", lambda lib, m: m.huber_loss(lib.zeros(2), lib.zeros(2), delta=0.0)),
    (
        "multilabel_target_size",
        lambda lib, m: m.multilabel_margin_loss(lib.zeros(2, 3), _long(lib, 2, 2)),
    ),
    (
        "multilabel_target_range",
        lambda lib, m: m.multilabel_margin_loss(lib.zeros(2, 3), _long(lib, 2, 3, fill=5)),
    ),
    (
        "multi_margin_target_size",
        lambda lib, m: m.multi_margin_loss(lib.zeros(2, 3), _long(lib, 3)),
    ),
    (
        "multi_margin_target_range",
        lambda lib, m: m.multi_margin_loss(lib.zeros(2, 3), _long(lib, 2, fill=3)),
    ),
    ("multi_margin_3d", lambda lib, m: m.multi_margin_loss(lib.zeros(2, 3, 1), _long(lib, 2))),
    ("cdist_int", lambda lib, m: lib.cdist(_long(lib, 2, 2), _long(lib, 2, 2))),
    ("rrelu_bounds", lambda lib, m: lib.rrelu(lib.zeros(2), 0.5, 0.1, True)),
    ("celu_alpha_0", lambda lib, m: lib.celu(lib.zeros(2), 0.0)),
    ("prelu_2d_weight", lambda lib, m: lib.prelu(lib.zeros(2, 3), lib.ones(1, 3))),
    (
        "gaussian_reduction",
        lambda lib, m: m.gaussian_nll_loss(lib.zeros(2), lib.zeros(2), lib.ones(2), reduction="x"),
    ),
    (
        "ctc_target_lengths",
        lambda lib, m: m.ctc_loss(
            m.log_softmax(lib.zeros(4, 2, 3), -1),
            _long(lib, 2, 1, fill=1),
            lib.tensor([4, 4]),
            lib.tensor([1]),
        ),
    ),
    (
        "ctc_concatenated_size",
        lambda lib, m: m.ctc_loss(
            m.log_softmax(lib.zeros(4, 2, 3), -1),
            _long(lib, 1, fill=1),
            lib.tensor([4, 4]),
            lib.tensor([1, 1]),
        ),
    ),
]


@pytest.mark.parametrize(("name", "call"), SAME_ERROR, ids=[n for n, _ in SAME_ERROR])
def test_errors_are_torchs(name: str, call: Any) -> None:
    with pytest.raises(Exception) as want:  # noqa: PT011 - any type: torch's is the reference
        call(torch, TF)
    with pytest.raises(type(want.value)) as got:
        call(ag, F)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("target_shape", [(), (1,)])
def test_margin_losses_of_one_sample_keep_torchs_shapes(target_shape: tuple[int, ...]) -> None:
    x, y = RNG.standard_normal(4), np.full(target_shape, 2)
    for fa, ft in ((F.multi_margin_loss, TF.multi_margin_loss),):
        la = fa(ag.tensor(x), ag.tensor(y), reduction="none")
        lt = ft(torch.tensor(x), torch.tensor(y), reduction="none")
        assert tuple(la.shape) == tuple(lt.shape)
        np.testing.assert_allclose(la.numpy(), lt.numpy())
    la = F.multilabel_margin_loss(ag.tensor(x), ag.tensor([2, 0, -1, 1]), reduction="none")
    lt = TF.multilabel_margin_loss(torch.tensor(x), torch.tensor([2, 0, -1, 1]), reduction="none")
    assert tuple(la.shape) == tuple(lt.shape) == ()
    # an empty batch: 0 (torch's "mean" here reads uninitialised memory)
    assert F.multilabel_margin_loss(ag.zeros(0, 3), _long(ag, 0, 3)).item() == 0.0
    assert F.multi_margin_loss(ag.zeros(0, 3), _long(ag, 0)).item() == 0.0


def test_ctc_takes_float_labels_as_torch() -> None:
    lp = F.log_softmax(ag.tensor(RNG.standard_normal((5, 2, 3))), -1)
    lpt = torch.tensor(lp.numpy())
    args = ([[1.0, 2.0], [2.0, 2.0]], [5, 5], [2, 2])
    np.testing.assert_allclose(
        F.ctc_loss(lp, *(ag.tensor(a) for a in args)).numpy(),
        TF.ctc_loss(lpt, *(torch.tensor(a) for a in args)).numpy(),
    )


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("upstream", [1.0, np.inf, np.nan, -2.5])
def test_binary_cross_entropy_rule_at_special_values_as_torch(
    create_graph: bool, upstream: float
) -> None:
    # every pair of saturated, tiny and ordinary probabilities and targets; under create_graph
    # the same rule runs on Tensors
    p = np.array([0.0, 1.0, 0.5, 1e-300, 1.0 - 1e-16, 0.25, 0.999])
    x, y = np.repeat(p, p.size), np.tile(p, p.size)
    a, b = ag.tensor(x, requires_grad=True), ag.tensor(y, requires_grad=True)
    t, u = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    la = F.binary_cross_entropy(a, b, reduction="none")
    lt = TF.binary_cross_entropy(t, u, reduction="none")
    np.testing.assert_allclose(la.detach().numpy(), lt.detach().numpy())
    g = np.full(x.shape, upstream)
    got = ag.autograd.grad(la, (a, b), ag.tensor(g), create_graph=create_graph)
    want = torch.autograd.grad(lt, (t, u), torch.tensor(g))
    for p_, q in zip(got, want, strict=True):
        np.testing.assert_allclose(p_.detach().numpy(), q.numpy(), rtol=1e-12, equal_nan=True)
