"""var, std, prod, norm, cumsum, all, any, dot, outer, einsum, sort, argsort, topk, nonzero and
where(cond): forward values and gradients against torch, dtypes, error messages and edge cases
(empty dims, zeros in prod, ties in sort and topk). Gradcheck and gradgradcheck of the rules are
in tests/autograd/test_rules.py, special values in tests/autograd/test_special_values.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag

from .cuda.conftest import assert_close


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for these ops")


def _leaf(m: Any, a: np.ndarray[Any, Any]) -> Any:
    return m.tensor(a, dtype=m.float64, requires_grad=a.dtype.kind == "f")


def _run(m: Any, fn: Callable[..., Any], arrays: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
    """Forward outputs (as NumPy) and the gradients of the float inputs for ones upstream."""
    xs = [_leaf(m, a) if isinstance(a, np.ndarray) else a for a in arrays]
    out = fn(m, *xs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    leaves = [x for x in xs if hasattr(x, "requires_grad") and x.requires_grad]
    diff = [o for o in outs if o.requires_grad]
    grads: list[Any] = []
    if diff and leaves:
        total = sum(
            (o * (1.0 + m.arange(o.numel(), dtype=m.float64).reshape(o.shape))).sum() for o in diff
        )
        if m is ag:
            got = ag.grad_sync(total, leaves, allow_unused=True)
        else:
            got = m.autograd.grad(total, leaves, allow_unused=True)
        grads = [None if g is None else g.detach().numpy() for g in got]
    return [o.detach().numpy() for o in outs], grads


def _same(m_fn: Callable[..., Any], torch: Any, *arrays: Any, rtol: float = 1e-10) -> None:
    """``m_fn`` gives torch's values and gradients (``rtol``: 1e-6 where float32 is involved)."""
    got_out, got_grads = _run(ag, m_fn, arrays)
    want_out, want_grads = _run(torch, m_fn, arrays)
    assert len(got_out) == len(want_out)
    for g, w in zip(got_out, want_out, strict=True):
        assert g.shape == w.shape
        assert str(g.dtype) == str(w.dtype).replace("torch.", "")
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12, equal_nan=True)
    assert len(got_grads) == len(want_grads)
    for g, w in zip(got_grads, want_grads, strict=True):
        if w is None:
            assert g is None or not np.any(g)
            continue
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12, equal_nan=True)


_RNG: Final = np.random.default_rng(7)
X23: Final = _RNG.standard_normal((2, 3))
X234: Final = _RNG.standard_normal((2, 3, 4))
V4: Final = _RNG.standard_normal(4)
W4: Final = _RNG.standard_normal(4)
TIES: Final = np.array([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0], [0.0, -0.0, 5.0, 5.0, -1.0, 0.0]])

FORWARD: Final[dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "var_all": (lambda m, x: x.var(), (X23,)),
    "var_dim_keepdim": (lambda m, x: m.var(x, 1, keepdim=True), (X234,)),
    "var_dims_correction0": (lambda m, x: x.var((0, 2), correction=0), (X234,)),
    "var_unbiased_positional": (lambda m, x: m.var(x, 0, False), (X23,)),
    "var_unbiased_only": (lambda m, x: x.var(False), (X23,)),
    "var_float_correction": (lambda m, x: x.var(-1, correction=2.5), (X234,)),
    "std_all": (lambda m, x: m.std(x), (X234,)),
    "std_dims": (lambda m, x: x.std(dim=(-1, 0), keepdim=True), (X234,)),
    "std_unbiased_kw": (lambda m, x: x.std(1, unbiased=False), (X23,)),
    "prod_all": (lambda m, x: x.prod(), (X23,)),
    "prod_dim": (lambda m, x: m.prod(x, -1), (X234,)),
    "prod_keepdim": (lambda m, x: x.prod(1, keepdim=True), (X234,)),
    "prod_dtype": (lambda m, x: x.prod(dtype=m.float32), (X23,)),
    "prod_one_zero_all": (lambda m, x: x.prod(), (np.array([2.0, 0.0, -3.0, 0.5]),)),
    "prod_two_zeros_all": (lambda m, x: x.prod(), (np.array([2.0, 0.0, -3.0, 0.0]),)),
    "prod_zeros_dim": (
        lambda m, x: x.prod(0),
        (np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [3.0, 4.0, 5.0]]),),
    ),
    "norm_default": (lambda m, x: x.norm(), (X234,)),
    "norm_fro_dims": (lambda m, x: m.norm(x, "fro", dim=(0, 2)), (X234,)),
    "norm_p1_dim": (lambda m, x: x.norm(1, dim=1), (X23,)),
    "norm_inf": (lambda m, x: x.norm(float("inf")), (X23,)),
    "norm_neg_inf_dim": (lambda m, x: x.norm(-float("inf"), 0, keepdim=True), (X23,)),
    "norm_p3": (lambda m, x: x.norm(3, dim=-1), (X234,)),
    "norm_p0": (lambda m, x: x.norm(0), (np.array([1.0, 0.0, -2.0]),)),
    "norm_p_half": (lambda m, x: x.norm(0.5), (X23,)),
    "norm_zero_vector": (lambda m, x: x.norm(), (np.zeros(3),)),
    "norm_zero_rows_p3": (lambda m, x: x.norm(3, dim=1), (np.array([[0.0, 0.0], [1.0, -2.0]]),)),
    "norm_dtype": (lambda m, x: x.float().norm(dtype=m.float64), (X23,)),
    "cumsum_dim0": (lambda m, x: x.cumsum(0), (X234,)),
    "cumsum_neg": (lambda m, x: m.cumsum(x, -1), (X234,)),
    "cumsum_dtype": (lambda m, x: x.cumsum(1, dtype=m.float32), (X23,)),
    "dot": (lambda m, x, y: m.dot(x, y), (V4, W4)),
    "outer": (lambda m, x, y: x.outer(y), (V4, W4[:3])),
    "einsum_matmul": (lambda m, a, b: m.einsum("ij,jk->ik", a, b), (X23, X234[0])),
    "einsum_implicit": (lambda m, a, b: m.einsum("ij,jk", a, b), (X23, X234[0])),
    "einsum_trace": (lambda m, a: m.einsum("ii", a), (X234[0, :, :3],)),
    "einsum_diag": (lambda m, a: m.einsum("ii->i", a), (X234[0, :, :3],)),
    "einsum_batch_ellipsis": (lambda m, a, b: m.einsum("...ij,...jk", a, b), (X234, X234[0].T)),
    "einsum_ellipsis_broadcast": (lambda m, a, b: m.einsum("b...,...->b", a, b), (X234, V4)),
    "einsum_list": (lambda m, a, b: m.einsum("i,i->", [a, b]), (V4, W4)),
    "einsum_spaces_upper": (lambda m, a, b: m.einsum("A b, b C -> C A", a, b), (X23, X234[0])),
    "einsum_three": (lambda m, a, b, c: m.einsum("i,ij,j->", a, b, c), (V4[:2], X23, W4[:3])),
    "einsum_broadcast_size1": (lambda m, a, b: m.einsum("ij,ij->ij", a, b), (X23[:1], X23)),
    "einsum_sum_only": (lambda m, a: m.einsum("ijk->j", a), (X234,)),
    "sort": (lambda m, x: x.sort(), (X234,)),
    "sort_dim_desc": (lambda m, x: m.sort(x, 0, descending=True), (X234,)),
    "sort_stable_ties": (lambda m, x: x.sort(stable=True), (TIES,)),
    "sort_stable_ties_desc": (lambda m, x: x.sort(dim=1, descending=True, stable=True), (TIES,)),
    "argsort_stable_ties": (lambda m, x: x.argsort(stable=True), (TIES,)),
    "argsort_desc": (lambda m, x: m.argsort(x, 1, descending=True), (X234,)),
    "topk": (lambda m, x: x.topk(2), (X234,)),
    "topk_smallest_dim0": (lambda m, x: m.topk(x, 1, 0, largest=False), (X234,)),
    "topk_all": (lambda m, x: x.topk(4, dim=-1), (X234,)),
    "topk_zero": (lambda m, x: x.topk(0), (X23,)),
    "all_any": (
        lambda m, x: (x.all(), x.any(), (x > 0).all(1), m.any(x > 0, 0, keepdim=True)),
        (X23,),
    ),
    "nonzero": (lambda m, x: (x > 0).nonzero(), (X234,)),
    "nonzero_tuple": (lambda m, x: m.nonzero(x > 0, as_tuple=True), (X234,)),
    "nonzero_0d": (lambda m, x: (m.nonzero(x), *m.nonzero(x * 0, as_tuple=True)), (np.array(2.0),)),
    "where_one_arg": (lambda m, x: m.where(x > 0), (X234,)),
}


@pytest.mark.parametrize("name", list(FORWARD))
def test_matches_torch(name: str, torch: Any) -> None:
    fn, arrays = FORWARD[name]
    _same(fn, torch, *arrays, rtol=1e-6 if "dtype" in name else 1e-10)


def test_prod_second_derivative_with_zeros(torch: Any) -> None:
    """create_graph through prod's backward where the input holds one and several zeros."""
    vals = np.array([[0.0, 2.0, -1.5, 0.5], [0.0, 0.0, 3.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    for dim in (None, 1):
        if dim is None:
            vals = vals[[0, 2]]  # one zero (several give a constant 0, in torch too)
        res = []
        for m in (ag, torch):
            x = m.tensor(vals, dtype=m.float64, requires_grad=True)
            y = x.prod() if dim is None else x.prod(dim).sum()
            if m is ag:
                (g,) = ag.grad_sync(y, [x], create_graph=True)
                (h,) = ag.grad_sync((g * g).sum(), [x])
            else:
                (g,) = torch.autograd.grad(y, [x], create_graph=True)
                (h,) = torch.autograd.grad((g * g).sum(), [x])
            res.append((g.detach().numpy(), h.detach().numpy()))
        np.testing.assert_allclose(res[0][0], res[1][0], rtol=1e-12)
        np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-12)


@pytest.mark.parametrize(
    ("name", "fn", "want"),
    [
        ("prod_int", lambda: ag.tensor([1, 2, 3], dtype=ag.int32).prod(), ag.int64),
        ("prod_bool", lambda: ag.tensor([True, False]).prod(), ag.int64),
        ("cumsum_int", lambda: ag.tensor([[1, 2]], dtype=ag.int32).cumsum(1), ag.int64),
        ("cumsum_bool", lambda: ag.tensor([True, True]).cumsum(0), ag.int64),
        ("var_float32", lambda: ag.ones(3).var(), ag.float32),
        ("norm_float32", lambda: ag.ones(3).norm(), ag.float32),
        ("all_float", lambda: ag.ones(3).all(), ag.bool),
        ("any_int", lambda: ag.tensor([0, 2]).any(), ag.bool),
        ("all_uint8", lambda: ag.tensor(np.array([1, 2], dtype=np.uint8)).all(), np.uint8),
        ("topk_indices", lambda: ag.ones(3).topk(2).indices, ag.int64),
        ("sort_indices", lambda: ag.tensor([2, 1]).sort().indices, ag.int64),
        ("sort_int_values", lambda: ag.tensor([2, 1], dtype=ag.int32).sort().values, ag.int32),
        ("argsort", lambda: ag.ones(3).argsort(), ag.int64),
        ("nonzero", lambda: ag.ones(3).nonzero(), ag.int64),
        ("einsum_float32", lambda: ag.einsum("i,i", ag.ones(2), ag.ones(2)), ag.float32),
    ],
)
def test_dtypes(name: str, fn: Callable[[], ag.Tensor], want: Any) -> None:
    assert fn().dtype == want


def test_named_tuples_and_grad() -> None:
    x = ag.tensor([[1.0, 3.0, 2.0]], requires_grad=True)
    s = x.sort(descending=True)
    assert type(s).__name__ == "SortResult"
    assert s._fields == ("values", "indices")
    assert s.values.grad_fn is not None
    assert s.values.grad_fn.name() == "SortBackward0"
    assert not s.indices.requires_grad
    t = ag.topk(x, 2)
    assert t._fields == ("values", "indices")
    assert t.values.grad_fn.name() == "TopkBackward0"
    (t.values * ag.tensor([[10.0, 1.0]])).sum().backward()
    assert x.grad is not None
    assert x.grad.tolist() == [[0.0, 10.0, 1.0]]  # scattered back to the selected positions


def test_topk_ties_pick_first_positions() -> None:
    x = ag.tensor([1.0, 3.0, 3.0, 2.0, 3.0])
    assert x.topk(2).indices.tolist() == [1, 2]
    assert x.topk(2, largest=False).indices.tolist() == [0, 3]
    assert ag.tensor([float("nan"), 1.0]).topk(1).indices.tolist() == [0]  # NaN is largest


@pytest.mark.parametrize(
    ("fn", "exc", "match"),
    [
        (lambda: ag.ones(3).topk(4), RuntimeError, "selected index k out of range"),
        (lambda: ag.ones(2, 3).topk(3, dim=0), RuntimeError, "selected index k out of range"),
        (lambda: ag.ones(3).topk(-1), RuntimeError, "selected index k out of range"),
        (lambda: ag.ones(3).sort(dim=1), IndexError, "Dimension out of range"),
        (lambda: ag.tensor([1, 2]).var(), RuntimeError, "std and var only support floating"),
        (lambda: ag.tensor([1, 2]).std(), RuntimeError, "std and var only support floating"),
        (
            lambda: ag.ones(3).var(0, True, correction=1),
            RuntimeError,
            "both unbiased and correction",
        ),
        (lambda: ag.ones(2, 2).prod((0, 1)), TypeError, "argument 'dim' must be int, not tuple"),
        (lambda: ag.ones(2).prod(2), IndexError, "Dimension out of range"),
        (
            lambda: ag.tensor([1, 2]).norm(),
            RuntimeError,
            "Expected a floating point or complex tensor as input. Got Long",
        ),
        (lambda: ag.ones(2, 2).norm("foo"), RuntimeError, "Order foo not supported"),
        (lambda: ag.ones(2, 2, 2).norm("fro", (0, 1, 2)), RuntimeError, "dim must be a 2-tuple"),
        (
            lambda: ag.dot(ag.ones(2, 2), ag.ones(2)),
            RuntimeError,
            "1D tensors expected, but got 2D and 1D tensors",
        ),
        (
            lambda: ag.dot(ag.ones(3), ag.ones(2)),
            RuntimeError,
            "inconsistent tensor size, expected tensor \\[3\\] and src \\[2\\]",
        ),
        (lambda: ag.dot(ag.ones(3), ag.ones(3).double()), RuntimeError, "found Float and Double"),
        (
            lambda: ag.outer(ag.ones(2, 2), ag.ones(2)),
            RuntimeError,
            "outer: Expected 1-D argument self, but got 2-D",
        ),
        (
            lambda: ag.outer(ag.ones(2), ag.ones(())),
            RuntimeError,
            "Expected 1-D argument vec2, but got 0-D",
        ),
        (lambda: ag.einsum("ij,jk", ag.ones(2, 3)), RuntimeError, "fewer operands were provided"),
        (
            lambda: ag.einsum("ij", ag.ones(2, 3), ag.ones(2)),
            RuntimeError,
            "more operands were provided",
        ),
        (
            lambda: ag.einsum("ii", ag.ones(2, 3)),
            RuntimeError,
            "subscript i is repeated for operand 0 but the sizes don't match, 2 != 3",
        ),
        (
            lambda: ag.einsum("ij,jk->ik", ag.ones(2, 3), ag.ones(2, 3)),
            RuntimeError,
            "subscript j has size 2 for operand 1 which does not broadcast with previously seen "
            "size 3",
        ),
        (
            lambda: ag.einsum("ijk", ag.ones(2, 3)),
            RuntimeError,
            "does not match the number of dimensions \\(2\\) for operand 0",
        ),
        (
            lambda: ag.einsum("i1", ag.ones(2, 3)),
            RuntimeError,
            "subscripts must be in \\[a-zA-Z\\]",
        ),
        (
            lambda: ag.einsum("ij->k", ag.ones(2, 3)),
            RuntimeError,
            "output subscript k does not appear",
        ),
        (lambda: ag.einsum("ij->ii", ag.ones(2, 2)), RuntimeError, "appears more than once"),
        (lambda: ag.einsum("i"), RuntimeError, "at least one operand"),
        (lambda: ag.ones(2).cumsum(1), IndexError, "Dimension out of range"),
    ],
)
def test_errors(fn: Callable[[], Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        fn()


def test_empty_inputs(torch: Any) -> None:
    e = np.zeros((2, 0))
    cases: list[Callable[..., Any]] = [
        lambda m, x: x.prod(1),
        lambda m, x: x.prod(),
        lambda m, x: x.cumsum(1),
        lambda m, x: x.norm(dim=1),
        lambda m, x: x.sum(1) + x.norm(1, dim=1),
        lambda m, x: (x.all(1), x.any(1), x.all(), x.any()),
        lambda m, x: x.sort(1),
        lambda m, x: x.topk(0, dim=1),
        lambda m, x: x.nonzero(),
        lambda m, x: m.einsum("ij->i", x),
    ]
    for fn in cases:
        _same(fn, torch, e)


def test_var_std_degrees_of_freedom() -> None:
    # N - correction <= 0: NaN (0 / 0) or inf, silently, as torch's values
    assert np.isnan(ag.tensor([1.5]).var().item())
    assert ag.tensor([1.0, 2.0]).var(correction=2).item() == float("inf")
    assert np.isnan(ag.zeros(2, 0).std(1).numpy()).all()


@pytest.mark.cuda
def test_same_on_cuda() -> None:
    """The index-returning and boolean ops give the CPU's results on a CUDA device."""
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    x = ag.tensor(TIES)
    xc = x.to("cuda")
    for fn in [
        lambda t: t.argsort(descending=True),
        lambda t: t.sort(stable=True).indices,
        lambda t: t.topk(3).indices,
        lambda t: t.nonzero(),
        lambda t: ag.where(t > 1.0)[1],
        lambda t: t.all(1),
        lambda t: t.any(),
        lambda t: t.prod(1),
        lambda t: t.norm(float("inf"), 1),
    ]:
        got = fn(xc)
        assert got.device == ag.device("cuda:0")
        np.testing.assert_array_equal(got.cpu().numpy(), fn(x).numpy())


@pytest.mark.cuda
def test_large_einsum_same_on_cuda() -> None:
    """Past EINSUM_OPTIMIZE_ABOVE einsum takes NumPy's optimised path, on every device."""
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 3, 16, 16)), rng.standard_normal((2, 3, 16, 16))
    res = []
    for dev in ("cpu", "cuda"):
        a = ag.tensor(q, device=dev, requires_grad=True)
        b = ag.tensor(k, device=dev, requires_grad=True)
        y = ag.einsum("bhqd,bhkd->bhqk", a, b)
        ga, gb = ag.grad_sync((y * y).sum(), [a, b])
        res.append([t.detach().cpu().numpy() for t in (y, ga, gb)])
    want = np.einsum("bhqd,bhkd->bhqk", q, k)
    np.testing.assert_allclose(res[0][0], want, rtol=1e-12)
    for got, ref in zip(res[1], res[0], strict=True):
        assert_close(got, ref, rtol=1e-12)  # wider on a real GPU (sums in another order)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_a_long_dim_equals_the_sorted_prefix(largest: bool) -> None:
    """A small k of a long dim goes through a partition (asyncgrad/ops/sorting.py), which must
    pick what the stable sort picks: also with ties at the k-th value and with NaNs."""
    rng = np.random.default_rng(5)
    for trial in range(60):
        n = int(rng.integers(16, 80))
        k = int(rng.integers(1, n // 8 + 1))
        x = rng.standard_normal((3, n)) if trial % 2 else rng.integers(0, 4, (3, n)) * 1.0
        if trial % 3 == 0:
            x[1, rng.integers(0, n, 3)] = np.nan
        got = ag.tensor(x).topk(k, largest=largest)
        full = ag.tensor(x).sort(descending=largest)
        np.testing.assert_array_equal(got.indices.numpy(), full.indices.numpy()[:, :k])
        np.testing.assert_array_equal(got.values.numpy(), full.values.numpy()[:, :k])
