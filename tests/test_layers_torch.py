"""H7's other layers against torch: Bilinear / F.bilinear, RMSNorm / F.rms_norm, EmbeddingBag /
F.embedding_bag, Embedding's max_norm and scale_grad_by_freq, the norms (InstanceNorm1d/3d,
BatchNorm3d, SyncBatchNorm, empty batches, torch-level forms), the lazy modules, Unflatten,
Container, AdaptiveLogSoftmaxWithLoss and calling a module with ``input=``; values and
gradients, finite differences (first and second order) for a sample, and torch's errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

torch = pytest.importorskip("torch", reason="compares with torch")
TF = torch.nn.functional

RNG = np.random.default_rng(23)


def _np(t: Any) -> np.ndarray:
    return np.asarray(t.detach().numpy())


def _load_from(tm: Any, am: nn.Module) -> None:
    assert list(am.state_dict()) == list(tm.state_dict())
    am.load_state_dict({k: ag.tensor(v.numpy()) for k, v in tm.state_dict().items()})


def _compare(fa: Any, ft: Any, arrays: list[Any], grad: list[bool], atol: float = 1e-12) -> None:
    """``fa``/``ft`` on the same arrays (None passes through): values, then the gradients of
    the inputs marked in ``grad`` for a random output cotangent."""
    ta = [
        None if a is None else ag.tensor(a, requires_grad=g)
        for a, g in zip(arrays, grad, strict=True)
    ]
    tt = [
        None if a is None else torch.tensor(a, requires_grad=g)
        for a, g in zip(arrays, grad, strict=True)
    ]
    oa, ot = fa(*ta), ft(*tt)
    assert tuple(oa.shape) == tuple(ot.shape)
    assert str(oa.dtype) == str(ot.dtype).replace("torch.", "")
    np.testing.assert_allclose(_np(oa), _np(ot), atol=atol)
    if not any(grad) or ot.numel() == 0:
        return
    g = RNG.standard_normal(tuple(ot.shape))
    (oa * ag.tensor(g)).sum().backward()
    (ot * torch.tensor(g)).sum().backward()
    for a, t, want in zip(ta, tt, grad, strict=True):
        if want:
            np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=atol)


# ----------------------------------------------------------------------------- bilinear
@pytest.mark.parametrize(
    ("s1", "s2", "bias"),
    [
        ((4, 3), (4, 5), True),
        ((2, 6, 3), (2, 6, 5), False),
        ((3,), (5,), True),
        ((0, 3), (0, 5), True),
    ],
)
def test_bilinear_matches_torch(s1: tuple[int, ...], s2: tuple[int, ...], bias: bool) -> None:
    arrays = [RNG.standard_normal(s1), RNG.standard_normal(s2), RNG.standard_normal((2, 3, 5))]
    arrays.append(RNG.standard_normal(2) if bias else None)
    _compare(F.bilinear, TF.bilinear, arrays, [True, True, True, bias])
    _compare(ag.bilinear, torch.bilinear, arrays, [True, True, False, False])


def test_bilinear_module_and_gradgradcheck() -> None:
    tm, am = torch.nn.Bilinear(3, 4, 2).double(), nn.Bilinear(3, 4, 2).double()
    assert repr(am) == repr(tm)
    assert np.abs(_np(am.weight)).max() <= 1 / np.sqrt(3)
    _load_from(tm, am)
    x1, x2 = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 4))
    np.testing.assert_allclose(
        _np(am(ag.tensor(x1), ag.tensor(x2))), _np(tm(torch.tensor(x1), torch.tensor(x2)))
    )
    a = ag.tensor(x1, requires_grad=True)
    b = ag.tensor(x2, requires_grad=True)
    assert ag.autograd.gradcheck(lambda u, v: am(u, v), (a, b))
    assert ag.autograd.gradgradcheck(lambda u, v: am(u, v), (a, b))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (((2, 3), (3, 4), (5, 3, 4)), "input batch dimensions do not match at dim 0: got 2 and 3"),
        (
            ((2, 3), (2, 4), (5, 3, 3)),
            "input2 size does not match weight size: got 4 but expected 3",
        ),
        (
            ((2, 4), (2, 4), (5, 3, 4)),
            "input1 size does not match weight size: got 4 but expected 3",
        ),
    ],
)
def test_bilinear_errors_as_torch(args: tuple[Any, ...], match: str) -> None:
    for lib, fn in ((ag, F.bilinear), (torch, TF.bilinear)):
        with pytest.raises(RuntimeError, match=match):
            fn(*(lib.zeros(s) for s in args))


# ----------------------------------------------------------------------------- rms_norm
@pytest.mark.parametrize(
    ("shape", "norm", "eps", "weight"),
    [
        ((2, 3, 4), (4,), None, True),
        ((2, 3, 4), (3, 4), 1e-3, False),
        ((5,), (5,), None, True),
        ((0, 4), (4,), None, True),
        ((2, 0), (0,), 1e-6, False),
    ],
)
def test_rms_norm_matches_torch(
    shape: tuple[int, ...], norm: Any, eps: float | None, weight: bool
) -> None:
    nshape = norm
    arrays = [RNG.standard_normal(shape), RNG.standard_normal(nshape) if weight else None]
    for fa, ft in ((F.rms_norm, TF.rms_norm), (ag.rms_norm, torch.rms_norm)):
        _compare(
            lambda x, w, fa=fa: fa(x, norm, w, eps),
            lambda x, w, ft=ft: ft(x, norm, w, eps),
            arrays,
            [True, weight],
        )


def test_rms_norm_float32_eps_module_and_gradgradcheck() -> None:
    x = RNG.standard_normal((3, 4)).astype(np.float32) * 1e-4
    tm, am = torch.nn.RMSNorm(4), nn.RMSNorm(4)
    assert repr(am) == repr(tm)
    np.testing.assert_allclose(_np(am(ag.tensor(x))), _np(tm(torch.tensor(x))), rtol=1e-5)
    assert repr(nn.RMSNorm([3, 4], eps=1e-3, elementwise_affine=False)) == repr(
        torch.nn.RMSNorm([3, 4], eps=1e-3, elementwise_affine=False)
    )
    xa = ag.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    w = ag.tensor(RNG.standard_normal(3), requires_grad=True)
    assert ag.autograd.gradgradcheck(lambda u, v: F.rms_norm(u, (3,), v), (xa, w))
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*4\]"):
        F.rms_norm(ag.zeros(2, 3), (4,))


# ----------------------------------------------------------------------------- embedding_bag
BAG_INPUTS = [
    ([1, 2, 4, 5, 4, 3, 2, 0], [0, 3, 3, 5]),  # with an empty bag
    ([[1, 2, 3], [2, 2, 5]], None),  # 2-D: fixed-length bags
    ([], [0, 0]),  # no indices at all
]


@pytest.mark.parametrize(
    ("indices", "offsets", "include_last_offset"),
    [(i, o, last) for i, o in BAG_INPUTS for last in (False, True) if o is not None or not last],
)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_matches_torch(
    indices: Any, offsets: Any, include_last_offset: bool, mode: str, padding_idx: int | None
) -> None:
    off = None if offsets is None else offsets + ([len(indices)] if include_last_offset else [])
    w = RNG.standard_normal((6, 3))
    kwargs = {"mode": mode, "padding_idx": padding_idx, "include_last_offset": include_last_offset}
    ia = ag.tensor(np.array(indices, dtype=np.int64))
    it = torch.tensor(np.array(indices, dtype=np.int64))
    oa_ = None if off is None else ag.tensor(off)
    ot_ = None if off is None else torch.tensor(off)
    _compare(
        lambda wt: F.embedding_bag(ia, wt, oa_, **kwargs),
        lambda wt: TF.embedding_bag(it, wt, ot_, **kwargs),
        [w],
        [True],
    )


def test_embedding_bag_per_sample_weights_and_max_ties_match_torch() -> None:
    w = RNG.standard_normal((5, 4))
    w[3] = w[1]  # equal rows: torch's max gives the gradient to the first
    idx, off = np.array([1, 3, 2, 4, 0]), np.array([0, 2])
    psw = RNG.standard_normal(5)
    _compare(
        lambda wt, p: F.embedding_bag(
            ag.tensor(idx), wt, ag.tensor(off), mode="sum", per_sample_weights=p
        ),
        lambda wt, p: TF.embedding_bag(
            torch.tensor(idx), wt, torch.tensor(off), mode="sum", per_sample_weights=p
        ),
        [w, psw],
        [True, True],
    )
    _compare(
        lambda wt: F.embedding_bag(ag.tensor(idx), wt, ag.tensor(off), mode="max"),
        lambda wt: TF.embedding_bag(torch.tensor(idx), wt, torch.tensor(off), mode="max"),
        [w],
        [True],
    )


def test_embedding_bag_module_max_norm_and_gradgradcheck() -> None:
    tm = torch.nn.EmbeddingBag(6, 3, max_norm=1.0, mode="sum", padding_idx=1).double()
    am = nn.EmbeddingBag(6, 3, max_norm=1.0, mode="sum", padding_idx=1).double()
    assert repr(am) == repr(tm)
    assert not _np(am.weight)[1].any()
    _load_from(tm, am)
    idx, off = np.array([0, 1, 2, 2, 5]), np.array([0, 1, 4])
    oa, ot = am(ag.tensor(idx), ag.tensor(off)), tm(torch.tensor(idx), torch.tensor(off))
    np.testing.assert_allclose(_np(oa), _np(ot), atol=1e-7)
    np.testing.assert_allclose(_np(am.weight), _np(tm.weight), atol=1e-7)  # renormed in place
    w = ag.tensor(RNG.standard_normal((6, 3)), requires_grad=True)
    for mode in ("sum", "mean", "max"):
        assert ag.autograd.gradgradcheck(
            lambda t, mode=mode: F.embedding_bag(ag.tensor(idx), t, ag.tensor(off), mode=mode),
            (w,),
        )


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (
            {"input": [[1, 2]], "offsets": [0]},
            ValueError,
            "if input is 2D, then offsets has to be None",
        ),
        ({"input": [1, 2]}, ValueError, "offsets has to be a 1D Tensor but got None"),
        ({"input": [1, 2], "offsets": [0], "mode": "foo"}, ValueError, "mode has to be one of sum"),
        ({"input": [1, 2], "offsets": [1]}, RuntimeError, "offsets\\[0\\] has to be 0"),
        ({"input": [1, 7], "offsets": [0]}, RuntimeError, "Index 1 of input takes value 7"),
        (
            {"input": [1, 2], "offsets": [0], "mode": "mean", "per_sample_weights": [1.0, 1.0]},
            NotImplementedError,
            "per_sample_weights is only supported for mode='sum'",
        ),
        (
            {"input": [1, 2], "offsets": [0], "per_sample_weights": [1.0, 1.0, 1.0]},
            ValueError,
            "it must have the same shape as the input",
        ),
    ],
)
def test_embedding_bag_errors_as_torch(
    kwargs: dict[str, Any], exc: type[Exception], match: str
) -> None:
    for lib, fn in ((ag, F.embedding_bag), (torch, TF.embedding_bag)):
        args = {k: lib.tensor(v) if isinstance(v, list) else v for k, v in kwargs.items()}
        with pytest.raises(exc, match=match):
            fn(weight=lib.zeros(5, 3), **args)


# ----------------------------------------------------------------------------- embedding
@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale_grad_by_freq": True},
        {"max_norm": 1.0},
        {"max_norm": 1.5, "norm_type": 1.0, "padding_idx": 0},
        {"scale_grad_by_freq": True, "padding_idx": 2},
    ],
)
def test_embedding_options_match_torch(kwargs: dict[str, Any]) -> None:
    tm, am = torch.nn.Embedding(5, 3, **kwargs).double(), nn.Embedding(5, 3, **kwargs).double()
    assert repr(am) == repr(tm)
    _load_from(tm, am)
    idx = np.array([[0, 2, 2], [4, 2, 1]])
    oa, ot = am(ag.tensor(idx)), tm(torch.tensor(idx))
    np.testing.assert_allclose(_np(oa), _np(ot), atol=1e-7)
    g = RNG.standard_normal(tuple(ot.shape))
    (oa * ag.tensor(g)).sum().backward()
    (ot * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(am.weight.grad.numpy(), tm.weight.grad.numpy(), atol=1e-7)


def test_torch_level_embedding_and_renorm_match_torch() -> None:
    w = RNG.standard_normal((5, 3)) * 3
    idx = np.array([0, 3, 3])
    _compare(
        lambda t: ag.embedding(t, ag.tensor(idx), 3, True),
        lambda t: torch.embedding(t, torch.tensor(idx), 3, True),
        [w],
        [True],
    )
    wa, wt = ag.tensor(w), torch.tensor(w)
    ra = ag.embedding_renorm_(wa, ag.tensor(idx), 1.0, 2.0)
    rt = torch.embedding_renorm_(wt, torch.tensor(idx), 1.0, 2.0)
    assert ra is wa
    np.testing.assert_allclose(wa.numpy(), wt.numpy())
    np.testing.assert_allclose(_np(ra), _np(rt))


def test_embedding_from_pretrained_as_torch() -> None:
    w = RNG.standard_normal((4, 2))
    am = nn.Embedding.from_pretrained(ag.tensor(w))
    tm = torch.nn.Embedding.from_pretrained(torch.tensor(w))
    assert am.weight.requires_grad == tm.weight.requires_grad is False
    np.testing.assert_allclose(_np(am(ag.tensor([3, 1]))), _np(tm(torch.tensor([3, 1]))))
    bag = nn.EmbeddingBag.from_pretrained(ag.tensor(w), freeze=False, mode="max")
    tbag = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(w), freeze=False, mode="max")
    assert bag.weight.requires_grad
    assert tbag.weight.requires_grad
    assert repr(bag) == repr(tbag)


# ----------------------------------------------------------------------------- norms
NORM_CASES = [
    ("InstanceNorm1d", {}, (2, 3, 5)),
    ("InstanceNorm1d", {"affine": True, "track_running_stats": True}, (3, 5)),
    ("InstanceNorm3d", {"affine": True}, (2, 3, 2, 3, 2)),
    ("InstanceNorm3d", {"track_running_stats": True}, (3, 2, 2, 3)),
    ("BatchNorm3d", {}, (2, 3, 2, 2, 2)),
    ("BatchNorm3d", {"momentum": None, "affine": False}, (3, 3, 1, 2, 2)),
    ("SyncBatchNorm", {}, (4, 3)),
    ("SyncBatchNorm", {}, (2, 3, 2, 2, 2, 2)),
]


@pytest.mark.parametrize(("name", "kwargs", "shape"), NORM_CASES)
def test_norm_modules_match_torch(
    name: str, kwargs: dict[str, Any], shape: tuple[int, ...]
) -> None:
    tm, am = getattr(torch.nn, name)(3, **kwargs).double(), getattr(nn, name)(3, **kwargs).double()
    assert repr(am) == repr(tm)
    _load_from(tm, am)
    for training in (True, True, False):
        tm.train(training)
        am.train(training)
        x = RNG.standard_normal(shape)
        _compare(am, tm, [x], [True])
        for (k, a), t in zip(am.state_dict().items(), tm.state_dict().values(), strict=True):
            np.testing.assert_allclose(_np(a), t.numpy(), atol=1e-12, err_msg=k)


def test_convert_sync_batchnorm_as_torch() -> None:
    def build(lib: Any) -> Any:
        return lib.nn.Sequential(
            lib.nn.Linear(3, 3), lib.nn.BatchNorm1d(3), lib.nn.Sequential(lib.nn.BatchNorm2d(3))
        )

    ta, tt = build(ag), build(torch)
    weight = ta[1].weight
    ca = nn.SyncBatchNorm.convert_sync_batchnorm(ta)
    ct = torch.nn.SyncBatchNorm.convert_sync_batchnorm(tt)
    assert repr(ca) == repr(ct)
    assert list(ca.state_dict()) == list(ct.state_dict())
    assert ca[1].weight is weight
    assert type(ca[2][0]) is nn.SyncBatchNorm


@pytest.mark.parametrize(
    ("fa", "ft", "shape"),
    [
        (
            lambda x: F.batch_norm(x, ag.zeros(3), ag.ones(3), training=True),
            lambda x: TF.batch_norm(x, torch.zeros(3), torch.ones(3), training=True),
            (0, 3, 4),
        ),
        (
            lambda x: F.batch_norm(x, None, None, training=True),
            lambda x: TF.batch_norm(x, None, None, training=True),
            (2, 3, 0),
        ),
        (lambda x: F.layer_norm(x, (4,)), lambda x: TF.layer_norm(x, (4,)), (0, 3, 4)),
        (lambda x: F.group_norm(x, 3), lambda x: TF.group_norm(x, 3), (0, 3, 4)),
        (lambda x: F.group_norm(x, 1), lambda x: TF.group_norm(x, 1), (2, 0, 3)),
        (lambda x: F.instance_norm(x), lambda x: TF.instance_norm(x), (0, 3, 4)),
    ],
)
def test_norms_on_empty_inputs_as_torch(fa: Any, ft: Any, shape: tuple[int, ...]) -> None:
    _compare(fa, ft, [np.zeros(shape, dtype=np.float32)], [True])


def test_empty_batch_running_statistics_as_torch() -> None:
    for name in ("BatchNorm1d", "InstanceNorm1d"):
        kwargs = {"track_running_stats": True} if name.startswith("Instance") else {}
        am, tm = getattr(nn, name)(3, **kwargs), getattr(torch.nn, name)(3, **kwargs)
        am(ag.zeros(0, 3, 4))
        tm(torch.zeros(0, 3, 4))
        for (k, a), t in zip(am.state_dict().items(), tm.state_dict().values(), strict=True):
            np.testing.assert_array_equal(_np(a), t.numpy(), err_msg=f"{name}.{k}")
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        F.batch_norm(ag.zeros(1, 3), None, None, training=True)


def test_torch_level_norms_match_torch() -> None:
    x = RNG.standard_normal((4, 3, 5))
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    rm, rv = RNG.standard_normal(3), RNG.random(3) + 0.5
    for training in (True, False):
        _compare(
            lambda *t, tr=training: ag.batch_norm(
                *t, ag.tensor(rm), ag.tensor(rv), tr, 0.1, 1e-5, True
            ),
            lambda *t, tr=training: torch.batch_norm(
                *t, torch.tensor(rm), torch.tensor(rv), tr, 0.1, 1e-5, True
            ),
            [x, w, b],
            [True, True, True],
        )
        _compare(
            lambda *t, tr=training: ag.instance_norm(
                *t, ag.tensor(rm), ag.tensor(rv), tr, 0.1, 1e-5, True
            ),
            lambda *t, tr=training: torch.instance_norm(
                *t, torch.tensor(rm), torch.tensor(rv), tr, 0.1, 1e-5, True
            ),
            [x, w, b],
            [True, True, True],
        )
    lw, lb = RNG.standard_normal(5), RNG.standard_normal(5)
    _compare(
        lambda *t: ag.layer_norm(t[0], (5,), *t[1:]),
        lambda *t: torch.layer_norm(t[0], (5,), *t[1:]),
        [x, lw, lb],
        [True, True, True],
    )
    _compare(
        lambda *t: ag.group_norm(t[0], 3, *t[1:], 1e-3),
        lambda *t: torch.group_norm(t[0], 3, *t[1:], 1e-3),
        [x, w, b],
        [True, True, True],
    )


# ----------------------------------------------------------------------------- lazy modules
LAZY_CASES = [
    ("LazyLinear", (3,), (2, 5)),
    ("LazyLinear", (4, False), (2, 6, 5)),
    ("LazyBatchNorm1d", (), (4, 3)),
    ("LazyBatchNorm2d", (), (2, 3, 2, 2)),
    ("LazyBatchNorm3d", (), (2, 3, 2, 2, 2)),
    ("LazyInstanceNorm1d", (), (2, 3, 5)),
    ("LazyInstanceNorm2d", (), (2, 3, 2, 3)),
    ("LazyInstanceNorm3d", (), (2, 3, 2, 2, 2)),
]


@pytest.mark.parametrize(("name", "args", "shape"), LAZY_CASES)
def test_lazy_modules_infer_sizes_as_torch(
    name: str, args: tuple[Any, ...], shape: tuple[int, ...]
) -> None:
    am, tm = (
        getattr(nn, name)(*args, dtype=ag.float64),
        getattr(torch.nn, name)(*args, dtype=torch.float64),
    )
    assert repr(am) == repr(tm)
    assert am.has_uninitialized_params()
    assert tm.has_uninitialized_params()
    params = list(am.parameters())
    opt = ag.optim.SGD(params, lr=0.1)
    x = RNG.standard_normal(shape)
    am(input=ag.tensor(x))  # as torch, the input may be given by keyword
    tm(input=torch.tensor(x))
    assert type(am).__name__ == type(tm).__name__
    assert repr(am) == repr(tm)
    assert [(k, tuple(v.shape)) for k, v in am.state_dict().items()] == [
        (k, tuple(v.shape)) for k, v in tm.state_dict().items()
    ]
    assert all(a is b for a, b in zip(am.parameters(), params, strict=True))
    am.load_state_dict({k: ag.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    _compare(am, tm, [x], [True])
    opt.step()  # the optimiser given the uninitialized parameters steps the materialized ones


# ----------------------------------------------------------------------------- other modules
def test_unflatten_and_container_as_torch() -> None:
    am, tm = nn.Unflatten(1, (2, 3)), torch.nn.Unflatten(1, (2, 3))
    assert repr(am) == repr(tm)
    _compare(am, tm, [RNG.standard_normal((4, 6, 2))], [True])
    _compare(
        nn.Unflatten(-1, [3, -1]),
        torch.nn.Unflatten(-1, [3, -1]),
        [RNG.standard_normal((2, 6))],
        [True],
    )
    with pytest.raises(TypeError, match="unflattened_size must be tuple of ints"):
        nn.Unflatten(1, (2, 3.0))  # type: ignore[arg-type]
    with pytest.warns(FutureWarning, match="nn.Container` is deprecated"):
        c = nn.Container(a=nn.Linear(1, 1))
    with pytest.warns(FutureWarning, match="nn.Container` is deprecated"):
        tc = torch.nn.Container(a=torch.nn.Linear(1, 1))
    assert repr(c) == repr(tc)
    assert list(c.state_dict()) == list(tc.state_dict())


@pytest.mark.parametrize("head_bias", [False, True])
@pytest.mark.parametrize("batched", [True, False])
def test_adaptive_log_softmax_matches_torch(head_bias: bool, batched: bool) -> None:
    tm = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6], div_value=2.0, head_bias=head_bias)
    am = nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6], div_value=2.0, head_bias=head_bias)
    tm.double()
    am.double()
    assert repr(am) == repr(tm)
    _load_from(tm, am)
    x = RNG.standard_normal((5, 8) if batched else (8,))
    t = np.array([0, 5, 9, 3, 2]) if batched else np.array(7)
    xa, xt = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    oa, ot = am(xa, ag.tensor(t)), tm(xt, torch.tensor(t))
    np.testing.assert_allclose(_np(oa.output), _np(ot.output), atol=1e-12)
    np.testing.assert_allclose(_np(oa.loss), _np(ot.loss), atol=1e-12)
    oa.loss.backward()
    ot.loss.backward()
    np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), atol=1e-12)
    for (n, pa), pt in zip(am.named_parameters(), tm.parameters(), strict=True):
        assert (pa.grad is None) == (pt.grad is None), n  # an unused cluster gets none
        if pt.grad is not None:
            np.testing.assert_allclose(pa.grad.numpy(), pt.grad.numpy(), atol=1e-12, err_msg=n)
    if batched:
        np.testing.assert_allclose(
            _np(am.log_prob(ag.tensor(x))), _np(tm.log_prob(torch.tensor(x))), atol=1e-12
        )
        np.testing.assert_array_equal(
            am.predict(ag.tensor(x)).numpy(), tm.predict(torch.tensor(x)).numpy()
        )
    with pytest.raises(RuntimeError, match="Target values should be in"):
        am(ag.tensor(np.zeros((2, 8))), ag.tensor([0, 10]))
    with pytest.raises(ValueError, match="cutoffs should be a sequence of unique"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [6, 3])


@pytest.mark.parametrize(
    ("make", "arg"),
    [
        (lambda lib: lib.nn.Linear(3, 2), (2, 3)),
        (lambda lib: lib.nn.LayerNorm(3), (2, 3)),
        (lambda lib: lib.nn.Sequential(lib.nn.Linear(3, 2), lib.nn.ReLU()), (2, 3)),
        (lambda lib: lib.nn.Dropout(0.0), (2, 3)),
        (lambda lib: lib.nn.BatchNorm1d(3), (2, 3)),
    ],
)
def test_modules_take_input_by_keyword_as_torch(make: Any, arg: tuple[int, ...]) -> None:
    am, tm = make(ag), make(torch)
    assert tuple(am(input=ag.zeros(arg)).shape) == tuple(tm(input=torch.zeros(arg)).shape)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize(
    ("indices", "offsets", "include_last_offset"),
    [([1, 2, 4, 5, 4, 3, 2, 0], [0, 3, 3, 5], False), ([1, 2, 4, 5], [0, 2, 2, 4], True)],
)
def test_torch_level_embedding_bag_matches_torch(
    dtype: str,
    mode: int,
    padding_idx: int | None,
    indices: Any,
    offsets: Any,
    include_last_offset: bool,
) -> None:
    w = RNG.standard_normal((6, 3)).astype(dtype)
    psw = None if mode else RNG.standard_normal(len(indices)).astype(dtype)
    res = []
    for lib in (ag, torch):
        res.append(
            lib.embedding_bag(
                lib.tensor(w),
                lib.tensor(indices),
                lib.tensor(offsets),
                False,
                mode,
                False,
                None if psw is None else lib.tensor(psw),
                include_last_offset,
                padding_idx,
            )
        )
    for a, t in zip(*res, strict=True):
        assert tuple(a.shape) == tuple(t.shape)
        assert str(a.dtype) == str(t.dtype).replace("torch.", "")
        np.testing.assert_allclose(_np(a), _np(t), rtol=1e-5, atol=1e-6)


def _cuda_cases() -> list[Any]:
    idx, off = [1, 2, 4, 5, 1], [0, 2, 2]
    return [
        lambda m, dev: m(ag.tensor(np.arange(24.0).reshape(2, 3, 4) / 7, device=dev)),
        lambda m, dev: m(ag.tensor(idx, device=dev), ag.tensor(off, device=dev)),
        lambda m, dev: m(ag.tensor(np.ones((3, 2, 4)), device=dev))[0],
        lambda m, dev: m(
            *(ag.tensor(np.linspace(0, 1, 24).reshape(3, 2, 4), device=dev),) * 3,
            key_padding_mask=ag.tensor(np.eye(2, 3, dtype=bool), device=dev),
        )[0],
    ]


@pytest.mark.cuda
@pytest.mark.parametrize(
    ("make", "case"),
    [
        (lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True), 0),
        (lambda: nn.RMSNorm(4), 0),
        (lambda: nn.LazyBatchNorm1d(), 0),
        (lambda: nn.EmbeddingBag(6, 3, mode="max", padding_idx=2, max_norm=1.0), 1),
        (lambda: nn.EmbeddingBag(6, 3, mode="mean"), 1),
        (lambda: nn.LSTM(4, 3, proj_size=2, bidirectional=True), 2),
        (lambda: nn.MultiheadAttention(4, 2, add_bias_kv=True, add_zero_attn=True), 3),
    ],
)
def test_layers_on_a_cuda_device_match_the_cpu(make: Any, case: int) -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")
    ag.manual_seed(0)
    cpu = make().double()
    dev = make().double()
    if not isinstance(dev, nn.LazyBatchNorm1d):
        dev.load_state_dict(cpu.state_dict())
    dev.to("cuda")  # a lazy module moved before its first call materializes there
    call = _cuda_cases()[case]
    out_c, out_d = call(cpu, None), call(dev, "cuda")
    assert out_d.device.type == "cuda"
    np.testing.assert_allclose(_np(out_d.cpu()), _np(out_c), atol=1e-12)
    out_c.sum().backward()
    out_d.sum().backward()
    for (n, pc), pd in zip(cpu.named_parameters(), dev.parameters(), strict=True):
        np.testing.assert_allclose(pd.grad.cpu().numpy(), pc.grad.numpy(), atol=1e-12, err_msg=n)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("group_norm", lambda lib, f: f.group_norm(lib.zeros(2, 4, 3), 2, lib.ones(3))),
        ("batch_norm", lambda lib, f: f.batch_norm(lib.zeros(2, 4, 3), lib.zeros(3), lib.ones(3))),
        (
            "batch_norm",
            lambda lib, f: f.batch_norm(lib.zeros(2, 4, 3), lib.zeros(4), lib.ones(4), lib.ones(3)),
        ),
        (
            "batch_norm",
            lambda lib, f: f.batch_norm(
                lib.zeros(2, 4, 3), lib.zeros(4), lib.ones(3), training=True
            ),
        ),
        ("layer_norm", lambda lib, f: f.layer_norm(lib.zeros(2, 3), (3,), lib.ones(4))),
        ("layer_norm", lambda lib, f: f.layer_norm(lib.zeros(2, 3), (3,), None, lib.ones(4))),
        ("instance_norm", lambda lib, f: f.instance_norm(lib.zeros(2, 4, 3), weight=lib.ones(3))),
        (
            "instance_norm",
            lambda lib, f: f.instance_norm(lib.zeros(2, 4, 3), lib.zeros(3), lib.ones(3)),
        ),
    ],
)
def test_norm_size_errors_as_torch(name: str, call: Any) -> None:
    with pytest.raises(RuntimeError) as want:
        call(torch, TF)
    with pytest.raises(RuntimeError) as got:
        call(ag, F)
    assert str(got.value) == str(want.value), name


@pytest.mark.parametrize(
    ("lazy", "full", "shape"),
    [
        ("LazyLinear", ("Linear", (4, 3)), (2, 4)),
        ("LazyBatchNorm2d", ("BatchNorm2d", (4,)), (2, 4, 2, 2)),
    ],
)
def test_lazy_modules_load_a_state_dict_before_their_first_call(
    lazy: str, full: tuple[str, tuple[int, ...]], shape: tuple[int, ...]
) -> None:
    src = getattr(torch.nn, full[0])(*full[1]).double()
    if lazy.startswith("LazyBatch"):
        src(torch.tensor(RNG.standard_normal(shape)))  # running statistics away from 0 and 1
        src.eval()
    args = (3,) if lazy == "LazyLinear" else ()
    am, tm = getattr(nn, lazy)(*args).double(), getattr(torch.nn, lazy)(*args).double()
    am.load_state_dict({k: ag.tensor(v.numpy()) for k, v in src.state_dict().items()})
    tm.load_state_dict(src.state_dict())
    am.train(src.training)
    tm.train(src.training)
    x = RNG.standard_normal(shape)
    _compare(am, tm, [x], [True])
    # torch's lazy norm keeps num_features=0 when a state_dict gave its shapes; ours reads it.
    assert repr(am) == repr(tm).replace("BatchNorm2d(0,", "BatchNorm2d(4,")
