"""ag.nn.init's trunc_normal_, eye_, dirac_, orthogonal_, sparse_, the deprecated spellings
without the underscore and the zero-element warning, against torch: exact fills compared
value by value, random ones by their defining properties and statistics."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.nn import init

torch = pytest.importorskip("torch", reason="compares with torch")


def _param(*shape: int) -> ag.Tensor:
    return ag.nn.Parameter(ag.empty(*shape, dtype=ag.float64))


@pytest.mark.parametrize(
    ("mean", "std", "a", "b"),
    [(0.0, 1.0, -2.0, 2.0), (0.5, 2.0, -1.0, 1.0), (0.0, 1.0, 1.0, 3.0), (3.0, 0.5, -1.0, 1.0)],
)
def test_trunc_normal_stays_in_range_with_the_truncated_moments(
    mean: float, std: float, a: float, b: float
) -> None:
    w = _param(200, 100)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = init.trunc_normal_(w, mean, std, a, b, generator=ag.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as tgot:
        warnings.simplefilter("always")
        t = torch.nn.init.trunc_normal_(torch.empty(200, 100, dtype=torch.float64), mean, std, a, b)
    assert [str(x.message) for x in got] == [str(x.message) for x in tgot]
    assert out is w
    assert w.requires_grad
    v = w.detach().numpy()
    assert v.min() >= a
    assert v.max() <= b
    alpha, beta = (a - mean) / std, (b - mean) / std

    def pdf(x: float) -> float:
        return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)

    def cdf(x: float) -> float:
        return 0.5 * (1 + math.erf(x / math.sqrt(2)))

    z = cdf(beta) - cdf(alpha)
    want_mean = mean + (pdf(alpha) - pdf(beta)) / z * std
    want_var = std**2 * (
        1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - ((pdf(alpha) - pdf(beta)) / z) ** 2
    )
    tol = 5 * math.sqrt(want_var / v.size)
    assert abs(v.mean() - want_mean) < tol
    assert abs(t.numpy().mean() - want_mean) < tol  # the formula is torch's distribution too
    np.testing.assert_allclose(v.var(), want_var, rtol=0.05)


def test_trunc_normal_repeats_with_a_seeded_generator() -> None:
    a = init.trunc_normal_(_param(5, 5), generator=ag.Generator().manual_seed(4))
    b = init.trunc_normal_(_param(5, 5), generator=ag.Generator().manual_seed(4))
    assert ag.equal(a, b)


@pytest.mark.parametrize("shape", [(3, 3), (2, 5), (5, 2), (0, 3)])
def test_eye_matches_torch(shape: tuple[int, int]) -> None:
    w = init.eye_(_param(*shape))
    np.testing.assert_array_equal(
        w.detach().numpy(), torch.nn.init.eye_(torch.empty(*shape)).numpy()
    )


@pytest.mark.parametrize(
    ("shape", "groups"),
    [((4, 4, 3), 1), ((6, 4, 3, 3), 2), ((4, 6, 2, 3), 1), ((6, 2, 3, 3, 3), 3), ((2, 5, 4), 2)],
)
def test_dirac_matches_torch(shape: tuple[int, ...], groups: int) -> None:
    w = init.dirac_(_param(*shape), groups)
    t = torch.nn.init.dirac_(torch.empty(*shape, dtype=torch.float64), groups)
    np.testing.assert_array_equal(w.detach().numpy(), t.numpy())


@pytest.mark.parametrize("shape", [(4, 4), (3, 7), (7, 3), (4, 2, 3), (1, 5)])
@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_orthogonal_gives_orthonormal_rows_or_columns(shape: tuple[int, ...], gain: float) -> None:
    w = init.orthogonal_(_param(*shape), gain)
    t = torch.nn.init.orthogonal_(torch.empty(*shape, dtype=torch.float64), gain)
    for m in (w.detach().numpy().reshape(shape[0], -1), t.numpy().reshape(shape[0], -1)):
        rows, cols = m.shape
        gram = m @ m.T if rows <= cols else m.T @ m
        np.testing.assert_allclose(gram, gain**2 * np.eye(min(rows, cols)), atol=1e-10)


@pytest.mark.parametrize(("shape", "sparsity"), [((10, 4), 0.3), ((5, 6), 0.0), ((7, 3), 1.0)])
def test_sparse_zeroes_the_same_count_per_column_as_torch(
    shape: tuple[int, int], sparsity: float
) -> None:
    w = init.sparse_(_param(*shape), sparsity, std=0.5)
    t = torch.nn.init.sparse_(torch.empty(*shape, dtype=torch.float64), sparsity, std=0.5)
    np.testing.assert_array_equal((w.detach().numpy() == 0).sum(0), (t.numpy() == 0).sum(0))


def test_sparse_std_of_its_nonzero_values() -> None:
    w = init.sparse_(_param(400, 100), 0.5, std=0.1).detach().numpy()
    np.testing.assert_allclose(w[w != 0].std(), 0.1, rtol=0.05)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("eye_", (ag.empty(2, 2, 2),)),
        ("dirac_", (ag.empty(3, 3),)),
        ("dirac_", (ag.empty(3, 2, 3), 2)),
        ("orthogonal_", (ag.empty(3),)),
        ("sparse_", (ag.empty(3, 3, 3), 0.1)),
    ],
)
def test_errors_match_torchs(name: str, args: tuple[Any, ...]) -> None:
    targs = tuple(torch.empty(*a.shape) if isinstance(a, ag.Tensor) else a for a in args)
    with pytest.raises(ValueError, match=r"supported|divisible") as theirs:
        getattr(torch.nn.init, name)(*targs)
    with pytest.raises(ValueError, match=str(theirs.value)):
        getattr(init, name)(*args)


_OLD = [
    ("uniform", ()),
    ("normal", ()),
    ("constant", (0.5,)),
    ("eye", ()),
    ("dirac", ()),
    ("xavier_uniform", ()),
    ("xavier_normal", ()),
    ("kaiming_uniform", ()),
    ("kaiming_normal", ()),
    ("orthogonal", ()),
    ("sparse", (0.5,)),
]


@pytest.mark.parametrize(("old", "args"), _OLD)
def test_deprecated_spellings_warn_as_torchs_and_fill(old: str, args: tuple[Any, ...]) -> None:
    shape = (3, 3, 3) if old == "dirac" else (3, 4)
    with pytest.warns(FutureWarning) as theirs:
        getattr(torch.nn.init, old)(torch.empty(*shape), *args)
    w = ag.empty(*shape)
    with pytest.warns(FutureWarning, match=f"`nn.init.{old}` is now deprecated") as ours:
        out = getattr(init, old)(w, *args)
    assert str(ours[0].message) == str(theirs[0].message)
    assert out is w
    assert getattr(init, old).__name__ == old


@pytest.mark.parametrize("name", ["kaiming_uniform_", "kaiming_normal_"])
def test_zero_element_tensors_warn_as_torchs(name: str) -> None:
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        getattr(torch.nn.init, name)(torch.empty(0, 3))
    w = ag.empty(0, 3)
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        assert getattr(init, name)(w) is w


def test_new_names_are_torchs() -> None:
    public = {n for n in dir(torch.nn.init) if not n.startswith("_") and n[0].islower()}
    public -= {"math", "torch", "warnings"}
    assert public <= set(init.__all__)


@pytest.mark.parametrize(
    ("name", "shape", "args"),
    [
        ("trunc_normal_", (40, 50), ()),
        ("eye_", (3, 4), ()),
        ("dirac_", (4, 2, 3, 3), ()),
        ("orthogonal_", (4, 6), ()),
        ("sparse_", (10, 4), (0.5,)),
    ],
)
def test_fills_on_a_cuda_device(name: str, shape: tuple[int, ...], args: tuple[Any, ...]) -> None:
    if not ag.cuda.is_available():
        pytest.skip("needs a (simulated) CUDA device")
    w = ag.empty(*shape, device="cuda", dtype=ag.float64)
    assert getattr(init, name)(w, *args) is w
    assert w.device == ag.device("cuda:0")
    v = w.cpu().numpy()
    if name == "trunc_normal_":
        assert v.min() >= -2.0
        assert v.max() <= 2.0
    elif name == "orthogonal_":
        np.testing.assert_allclose(v @ v.T, np.eye(4), atol=1e-10)
    elif name == "sparse_":
        assert ((v == 0).sum(0) == 5).all()
    else:
        want = getattr(torch.nn.init, name)(torch.empty(*shape, dtype=torch.float64)).numpy()
        np.testing.assert_array_equal(v, want)
