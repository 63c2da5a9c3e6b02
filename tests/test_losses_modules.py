"""torch's loss modules (family H5): constructor arguments, reprs, buffers and values against
torch; NLLLoss2d; linear_cross_entropy, LinearCrossEntropyLoss and LinearCrossEntropyOptions."""

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

from tests.test_losses_torch import _W, _classes, _multilabel, _pm1, _prob, _tensors  # noqa: E402

RNG = np.random.default_rng(19)


# ----------------------------------------------------------------------------- modules
def _w(lib: Any, n: int = 4) -> Any:
    return (torch.tensor if lib is torch else ag.tensor)(np.linspace(0.5, 1.5, n))


MODULES: list[tuple[str, Callable[[Any], dict[str, Any]], str]] = [
    ("BCELoss", lambda lib: {}, "prob"),
    ("BCELoss", lambda lib: {"weight": _w(lib), "reduction": "sum"}, "prob"),
    ("KLDivLoss", lambda lib: {"reduction": "batchmean", "log_target": True}, "pair"),
    ("SmoothL1Loss", lambda lib: {"beta": 0.5}, "pair"),
    ("HuberLoss", lambda lib: {"delta": 0.5, "reduction": "none"}, "pair"),
    ("SoftMarginLoss", lambda lib: {}, "sign"),
    ("MultiLabelSoftMarginLoss", lambda lib: {"weight": _w(lib)}, "prob"),
    ("MultiLabelMarginLoss", lambda lib: {}, "multilabel"),
    ("MultiMarginLoss", lambda lib: {"p": 2, "margin": 0.5, "weight": _w(lib)}, "class"),
    ("HingeEmbeddingLoss", lambda lib: {"margin": 0.5}, "sign"),
    ("PoissonNLLLoss", lambda lib: {"full": True}, "count"),
    ("MarginRankingLoss", lambda lib: {"margin": 0.1}, "three"),
    ("CosineEmbeddingLoss", lambda lib: {"margin": 0.1}, "three"),
    ("TripletMarginLoss", lambda lib: {"margin": 0.5, "swap": True}, "triplet"),
    ("TripletMarginWithDistanceLoss", lambda lib: {"margin": 0.5}, "triplet"),
    ("GaussianNLLLoss", lambda lib: {"full": True}, "gauss"),
]


def _module_inputs(kind: str) -> tuple[list[np.ndarray], list[np.ndarray], Callable[..., Any]]:
    x = RNG.standard_normal((3, 4))
    if kind == "prob":
        return [_prob((3, 4))], [_prob((3, 4))], lambda m, f, o: m(f[0], o[0])
    if kind == "pair":
        return [x], [RNG.standard_normal((3, 4))], lambda m, f, o: m(f[0], o[0])
    if kind == "sign":
        return [x], [_pm1((3, 4))], lambda m, f, o: m(f[0], o[0])
    if kind == "multilabel":
        return [x], [_multilabel(3, 4)], lambda m, f, o: m(f[0], o[0])
    if kind == "class":
        return [x], [_classes(3, 4)], lambda m, f, o: m(f[0], o[0])
    if kind == "count":
        return [x], [RNG.poisson(2.0, (3, 4)) * 1.0], lambda m, f, o: m(f[0], o[0])
    if kind == "three":
        return [x, RNG.standard_normal((3, 4))], [_pm1(3)], lambda m, f, o: m(f[0], f[1], o[0])
    if kind == "triplet":
        return [x, x + 0.1, RNG.standard_normal((3, 4))], [], lambda m, f, o: m(*f)
    return [x, RNG.uniform(0.1, 1, (3, 4))], [x * 0.5], lambda m, f, o: m(f[0], o[0], f[1])


@pytest.mark.parametrize(
    ("name", "kw", "kind"), MODULES, ids=[m[0] + str(i) for i, m in enumerate(MODULES)]
)
def test_loss_modules_match_torch(name: str, kw: Any, kind: str) -> None:
    am, tm = getattr(nn, name)(**kw(ag)), getattr(torch.nn, name)(**kw(torch))
    assert repr(am) == repr(tm)
    assert list(am.state_dict()) == list(tm.state_dict())
    assert am.reduction == tm.reduction
    floats, others, call = _module_inputs(kind)
    if name == "MarginRankingLoss":
        others = [_pm1((3, 4))]
    fa, oa = _tensors(ag, floats, others)
    ft, ot = _tensors(torch, floats, others)
    ya, yt = call(am, fa, oa), call(tm, ft, ot)
    np.testing.assert_allclose(ya.detach().numpy(), yt.detach().numpy(), rtol=1e-11)
    g = RNG.standard_normal(tuple(yt.shape))
    for p, q in zip(
        ag.autograd.grad(ya, fa, ag.tensor(g)),
        torch.autograd.grad(yt, ft, torch.tensor(g)),
        strict=True,
    ):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-10, atol=1e-13)


def test_loss_module_constructor_checks_as_torch() -> None:
    for lib in (ag, torch):
        with pytest.raises(ValueError, match="only p == 1 and p == 2 supported"):
            lib.nn.MultiMarginLoss(p=3)
        with pytest.raises(ValueError, match="expected margin to be greater than 0"):
            lib.nn.TripletMarginWithDistanceLoss(margin=-1.0)
        with pytest.raises(ValueError, match="expected margin to be greater than 0"):
            lib.nn.TripletMarginLoss(margin=0.0)


def test_nll_loss_2d_is_a_deprecated_nll_loss() -> None:
    x = RNG.standard_normal((2, 3, 4, 5))
    y = RNG.integers(0, 3, (2, 4, 5))
    with pytest.warns(FutureWarning, match="`NLLLoss2d` has been deprecated"):
        m = nn.NLLLoss2d(reduction="sum")
    with pytest.warns(FutureWarning, match="`NLLLoss2d` has been deprecated"):
        tm = torch.nn.NLLLoss2d(reduction="sum")
    assert repr(m) == repr(tm)
    np.testing.assert_allclose(
        m(F.log_softmax(ag.tensor(x), 1), ag.tensor(y)).numpy(),
        tm(TF.log_softmax(torch.tensor(x), 1), torch.tensor(y)).numpy(),
    )


# ----------------------------------------------------------------------------- linear_cross_entropy
@pytest.mark.parametrize(
    "kw",
    [{}, {"reduction": "sum"}, {"label_smoothing": 0.1}, {"ignore_index": 1}, {"weight": "w"},
     {"reduction": "none", "bias": True}],
)  # fmt: skip
def test_linear_cross_entropy_matches_torch(kw: dict[str, Any]) -> None:
    x, w, b = RNG.standard_normal((6, 4)), RNG.standard_normal((5, 4)), RNG.standard_normal(5)
    y = RNG.integers(0, 5, 6)
    kw = dict(kw)
    bias = kw.pop("bias", False)
    weight = kw.pop("weight", None)
    a = [ag.tensor(v, requires_grad=True) for v in (x, w, b)]
    t = [torch.tensor(v, requires_grad=True) for v in (x, w, b)]
    la = F.linear_cross_entropy(
        a[0], a[1], ag.tensor(y), linear_bias=a[2] if bias else None,
        weight=ag.tensor(_W) if weight else None, **kw,
    )  # fmt: skip
    lt = TF.linear_cross_entropy(
        t[0], t[1], torch.tensor(y), linear_bias=t[2] if bias else None,
        weight=torch.tensor(_W) if weight else None, **kw,
    )  # fmt: skip
    np.testing.assert_allclose(la.detach().numpy(), lt.detach().numpy(), rtol=1e-12)
    n = 3 if bias else 2
    g = RNG.standard_normal(tuple(lt.shape))
    for p, q in zip(
        ag.autograd.grad(la, a[:n], ag.tensor(g)),
        torch.autograd.grad(lt, t[:n], torch.tensor(g)),
        strict=True,
    ):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-11, atol=1e-13)


def test_linear_cross_entropy_module_matches_torch() -> None:
    m = nn.LinearCrossEntropyLoss(4, 5, bias=True, label_smoothing=0.2)
    tm = torch.nn.LinearCrossEntropyLoss(4, 5, bias=True, label_smoothing=0.2)
    assert repr(m) == repr(tm)
    assert list(m.state_dict()) == list(tm.state_dict())
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    x, y = RNG.standard_normal((6, 4)).astype(np.float32), RNG.integers(0, 5, 6)
    np.testing.assert_allclose(
        m(ag.tensor(x), ag.tensor(y)).detach().numpy(),
        tm(torch.tensor(x), torch.tensor(y)).detach().numpy(),
        rtol=1e-5,
    )
    with pytest.raises(RuntimeError, match="expected input with dimensionality 1 or 2, got 3"):
        F.linear_cross_entropy(ag.zeros(1, 2, 3), ag.zeros(4, 3), ag.zeros(1, dtype=ag.int64))


def test_linear_cross_entropy_options_as_torch() -> None:
    o, to = nn.LinearCrossEntropyOptions(), torch.nn.LinearCrossEntropyOptions()
    assert repr(o) == repr(to)
    o = nn.LinearCrossEntropyOptions(batch_chunk_size=4, chunking_method="aspect_ratio:2")
    to = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=4, chunking_method="aspect_ratio:2")
    assert repr(o) == repr(to)
    for lib in (nn, torch.nn):
        with pytest.raises(ValueError, match="invalid acc_policy: 'bad'"):
            lib.LinearCrossEntropyOptions(acc_policy="bad")
        with pytest.raises(ValueError, match="invalid chunking_method: 'rows'"):
            lib.LinearCrossEntropyOptions(chunking_method="rows")
        with pytest.raises(ValueError, match="batch_chunk_size must be positive int or None"):
            lib.LinearCrossEntropyOptions(batch_chunk_size=0)
    o = nn.LinearCrossEntropyOptions(batch_chunk_size=4, chunking_method=None)
    to = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=4, chunking_method=None)
    m = nn.LinearCrossEntropyLoss(4, 5, options=o)
    tm = torch.nn.LinearCrossEntropyLoss(4, 5, options=to)
    assert repr(m) == repr(tm)
    x, w, y = RNG.standard_normal((6, 4)), RNG.standard_normal((5, 4)), RNG.integers(0, 5, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch may warn that its chunked path falls back
        lt = TF.linear_cross_entropy(torch.tensor(x), torch.tensor(w), torch.tensor(y), options=to)
    la = F.linear_cross_entropy(ag.tensor(x), ag.tensor(w), ag.tensor(y), options=o)
    np.testing.assert_allclose(la.numpy(), lt.numpy(), rtol=1e-10)
