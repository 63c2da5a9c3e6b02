"""The scatter and index_* family against torch: values, gradients (torch's and finite
differences), the in-place forms, and the errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from tests.test_views_ops import CASES as VIEW_CASES
from tests.test_views_ops import compare, flat_outputs, gradcheck_case

torch = pytest.importorskip("torch", reason="compares with torch")

R = np.random.default_rng(11)


def _r(*shape: int) -> Any:
    return R.standard_normal(shape)


def _i(*a: Any) -> Any:
    return np.array(a, dtype=np.int64)


IDX = _i([0, 1, 2, 0], [2, 0, 0, 1])  # rows: a permutation-free scatter along dim 0 of (3, 4)
UNIQ = _i([0, 1, 2, 0], [2, 0, 1, 1])  # unique positions per column along dim 0
TIES = np.array([[1.0, 2.0, 2.0], [2.0, 1.0, 0.0], [2.0, 3.0, 0.0]])


def _scatter_reduce(red: str, inc: bool) -> Callable[..., Any]:
    return lambda L, x, s, i: L.scatter_reduce(x, 0, i, s, red, include_self=inc)


def _index_reduce(red: str, inc: bool) -> Callable[..., Any]:
    return lambda L, x, s, i: L.index_reduce(x, 1, i, s, red, include_self=inc)


CASES: dict[str, tuple[Callable[..., Any], list[Any]]] = {
    "scatter_src": (
        lambda L, x, s, i: L.scatter(x, 0, i, s),
        [_r(3, 4), _r(2, 4), _i([0, 2, 1, 0], [1, 0, 2, 2])],
    ),
    "scatter_src_small_index": (
        lambda L, x, s, i: x.scatter(1, i, s),
        [_r(3, 4), _r(3, 5), _i([3], [0], [1])],
    ),
    "scatter_value": (lambda L, x, i: L.scatter(x, 1, i, 2.5), [_r(2, 3), _i([0, 2], [1, 1])]),
    "scatter_value_kw": (lambda L, x, i: x.scatter(1, i, value=-1.0), [_r(2, 3), _i([2], [0])]),
    "scatter_add_reduce": (
        lambda L, x, s, i: L.scatter(x, 0, i, s, reduce="add"),
        [_r(3, 4), _r(2, 4), IDX[:2]],
    ),
    "scatter_multiply": (
        lambda L, x, i: L.scatter(x, 0, i, 2.0, reduce="multiply"),
        [_r(3, 4), IDX[:2]],
    ),
    "scatter_neg_dim": (
        lambda L, x, s, i: L.scatter(x, -1, i, s),
        [_r(2, 3), _r(2, 3), _i([2, 1, 0], [0, 2, 1])],
    ),
    "scatter_0d": (
        lambda L, x, s, i: L.scatter(x, 0, i, s),
        [np.array(1.0), np.array(2.0), np.array(0)],
    ),
    **{
        f"scatter_reduce_{red}_{inc}": (
            _scatter_reduce(red, inc),
            [_r(3, 4), _r(2, 4), IDX],
        )
        for red in ("sum", "prod", "mean", "amax", "amin")
        for inc in (True, False)
    },
    "scatter_reduce_amax_ties": (
        lambda L, x, s, i: x.scatter_reduce(0, i, s, "amax"),
        [TIES, TIES[[1, 2, 0]], _i([0, 1, 2], [0, 0, 1], [1, 1, 1])],
    ),
    "scatter_reduce_amin_ties_excl": (
        lambda L, x, s, i: x.scatter_reduce(1, i, s, "amin", include_self=False),
        [TIES, TIES.T.copy(), _i([0, 0, 1], [1, 1, 1], [2, 0, 2])],
    ),
    "scatter_reduce_prod_zeros": (
        lambda L, x, s, i: L.scatter_reduce(x, 0, i, s, "prod"),
        [
            np.array([[0.0, 2.0], [1.5, 0.0]]),
            np.array([[3.0, 0.0], [0.0, 0.0], [2.0, 0.5]]),
            _i([0, 1], [1, 0], [0, 0]),
        ],
    ),
    "scatter_reduce_max_alias": (
        lambda L, x, s, i: L.scatter_reduce(x, 0, i, s, "max", include_self=False),
        [_r(3), _r(3), _i(0, 1, 1)],
    ),
    "scatter_reduce_int_mean": (
        lambda L, x, s, i: L.scatter_reduce(x, 0, i, s, "mean"),
        [_i(4, 7, 1), _i(1, 2, 9, 4), _i(0, 0, 2, 1)],
    ),
    "index_add": (lambda L, x, s, i: L.index_add(x, 0, i, s), [_r(3, 2), _r(4, 2), _i(0, 2, 0, 1)]),
    "index_add_alpha": (
        lambda L, x, s, i: x.index_add(1, i, s, alpha=-2.0),
        [_r(2, 3), _r(2, 2), _i(2, 1)],
    ),
    "index_fill_negative": (lambda L, x, i: L.index_fill(x, 0, i, 1.0), [_r(3), _i(-1)]),
    "index_copy": (lambda L, x, s, i: L.index_copy(x, 1, i, s), [_r(2, 4), _r(2, 2), _i(3, 0)]),
    "index_fill": (lambda L, x, i: L.index_fill(x, 1, i, -3.0), [_r(2, 4), _i(3, 0, 3)]),
    "index_fill_tensor": (
        lambda L, x, v, i: x.index_fill(0, i, v),
        [_r(3, 2), np.array(0.5), _i(1)],
    ),
    "index_put": (
        lambda L, x, v, i, j: L.index_put(x, (i, j), v),
        [_r(3, 4), _r(2), _i(0, 2), _i(1, 3)],
    ),
    "index_put_mask": (
        lambda L, x, v, m: L.index_put(x, (m > 0,), v, accumulate=True),
        [_r(2, 3), _r(1), _r(2, 3)],
    ),
    "index_put_mask_set": (lambda L, x, v, m: x.index_put((m > 0,), v), [_r(4), _r(1), _r(4)]),
    "index_put_accumulate": (
        lambda L, x, v, i: x.index_put((i,), v, accumulate=True),
        [_r(3, 4), _r(4), _i(0, 2, 0)],
    ),
    **{
        f"index_reduce_{red}_{inc}": (
            _index_reduce(red, inc),
            [_r(2, 3), _r(2, 4), _i(0, 2, 0, 2)],
        )
        for red in ("prod", "mean", "amax", "amin")
        for inc in (True, False)
    },
    "masked_scatter": (
        lambda L, x, m, s: L.masked_scatter(x, m > 0, s),
        [_r(2, 3), _r(3), _r(7)],
    ),
    "masked_scatter_method": (
        lambda L, x, m, s: x.masked_scatter(m > 0, s),
        [_r(2, 3), _r(2, 3), _r(2, 3)],
    ),
    "put": (lambda L, x, i, s: L.put(x, i, s), [_r(2, 3), _i(5, 0, -2), _r(3)]),
    "put_accumulate": (
        lambda L, x, i, s: x.put(i, s, accumulate=True),
        [_r(2, 3), _i([1, 1], [4, 1]), _r(2, 2)],
    ),
    "select_scatter": (lambda L, x, s: L.select_scatter(x, s, 1, -1), [_r(2, 3), _r(2)]),
    "slice_scatter": (
        lambda L, x, s: L.slice_scatter(x, s, 1, 1, None, 2),
        [_r(2, 5), _r(2, 2)],
    ),
    "slice_scatter_default": (lambda L, x, s: x.slice_scatter(s), [_r(2, 2), _r(2, 2)]),
    "diagonal_scatter": (lambda L, x, s: L.diagonal_scatter(x, s), [_r(3, 3), _r(3)]),
    "diagonal_scatter_off": (
        lambda L, x, s: x.diagonal_scatter(s, -1, 2, 0),
        [_r(3, 2, 4), _r(2, 3)],
    ),
    "as_strided_scatter": (
        lambda L, x, s: L.as_strided_scatter(x, s, (2, 2), (1, 3), 1),
        [_r(3, 3), _r(2, 2)],
    ),
    "scatter_inplace": (
        lambda L, x, s, i: (x * 1).scatter_(0, i, s),
        [_r(3, 4), _r(1, 4), _i([0, 2, 1, 0])],
    ),
    "scatter_reduce_inplace": (
        lambda L, x, s, i: (x * 1).scatter_reduce_(0, i, s, "amax", include_self=False),
        [_r(3, 4), _r(2, 4), IDX],
    ),
    "index_add_inplace": (
        lambda L, x, s, i: (x * 1).index_add_(0, i, s),
        [_r(3, 2), _r(2, 2), _i(2, 2)],
    ),
    "index_copy_inplace": (lambda L, x, s, i: (x * 1).index_copy_(0, i, s), [_r(3), _r(1), _i(1)]),
    "index_fill_inplace": (lambda L, x, i: (x * 1).index_fill_(0, i, 0.0), [_r(3), _i(1)]),
    "index_put_inplace": (lambda L, x, v, i: L.index_put_(x * 1, (i,), v), [_r(3), _r(1), _i(2)]),
    "index_reduce_inplace": (
        lambda L, x, s, i: (x * 1).index_reduce_(0, i, s, "prod"),
        [_r(3), _r(2), _i(0, 0)],
    ),
    "masked_scatter_inplace": (
        lambda L, x, m, s: (x * 1).masked_scatter_(m > 0, s),
        [_r(2, 3), _r(3), _r(6)],
    ),
    "put_inplace": (lambda L, x, i, s: (x * 1).put_(i, s), [_r(2, 2), _i(3), _r(1)]),
    "fill_diagonal": (lambda L, x: (x * 1).fill_diagonal_(2.0), [_r(3, 4)]),
    "fill_diagonal_tall": (lambda L, x: (x * 1).fill_diagonal_(2.0), [_r(7, 3)]),
    "fill_diagonal_wrap": (lambda L, x: (x * 1).fill_diagonal_(2.0, wrap=True), [_r(7, 3)]),
    "fill_diagonal_3d": (lambda L, x: (x * 1).fill_diagonal_(-1.0), [_r(2, 2, 2)]),
    "tril_": (lambda L, x: (x * 1).tril_(-1), [_r(3, 4)]),
    "triu_": (lambda L, x: (x * 1).triu_(1), [_r(2, 3, 3)]),
    "gather_0d": (lambda L, x, i: L.gather(x, 0, i), [np.array(2.0), np.array(0)]),
    "gather_0d_input": (lambda L, x, i: L.gather(x, -1, i), [np.array(2.0), _i(0, 0, 0)]),
    "gather_0d_index": (lambda L, x, i: x.gather(0, i), [_r(3), np.array(2)]),
    "index_range": (lambda L, x: x[range(1, 3)], [_r(4, 2)]),
    "index_range_2": (lambda L, x: x[range(2), 1:], [_r(3, 3)]),
    "scatter_reduce_amax_nan": (
        lambda L, x, s, i: L.scatter_reduce(x, 0, i, s, "amax"),
        [np.array([1.0, np.nan, 3.0]), np.array([np.nan, 5.0, 2.0]), _i(0, 2, 2)],
    ),
    "scatter_reduce_amin_inf": (
        lambda L, x, s, i: L.scatter_reduce(x, 0, i, s, "amin", include_self=False),
        [np.array([1.0, -np.inf, 3.0]), np.array([np.inf, -np.inf, 2.0]), _i(0, 1, 1)],
    ),
    "scatter_reduce_prod_inf": (
        lambda L, x, s, i: L.scatter_reduce(x, 0, i, s, "prod"),
        [np.array([1.0, np.inf, 3.0]), np.array([2.0, 0.5, np.nan]), _i(1, 1, 0)],
    ),
    "scatter_empty_index": (
        lambda L, x, s, i: L.scatter(x, 0, i, s),
        [_r(3, 2), _r(0, 2), np.zeros((0, 2), dtype=np.int64)],
    ),
    "index_add_empty": (
        lambda L, x, s, i: L.index_add(x, 0, i, s),
        [_r(3, 2), _r(0, 2), np.zeros(0, dtype=np.int64)],
    ),
    "index_put_nan": (
        lambda L, x, v, i: L.index_put(x, (i,), v, accumulate=True),
        [np.array([1.0, np.nan]), np.array([np.inf, 1.0]), _i(1, 0)],
    ),
    "masked_scatter_empty": (
        lambda L, x, m, s: L.masked_scatter(x, m > 0, s),
        [_r(0, 3), _r(3), _r(2)],
    ),
    "put_empty": (
        lambda L, x, i, s: L.put(x, i, s),
        [_r(2), np.zeros(0, dtype=np.int64), _r(0)],
    ),
    "linspace_0d": (lambda L: L.linspace(L.tensor(0.0), L.tensor(1.0), 5), []),
    "logspace": (lambda L: L.logspace(0, 2, 3), []),
    "logspace_base": (lambda L: L.logspace(L.tensor(-1.0), 1, 4, base=2.0), []),
    "logspace_int": (lambda L: L.logspace(0, 3, 4, dtype=L.int64), []),
}


# torch differentiates neither scatter's ``reduce=``, nor scatter_reduce's "max"/"min" spellings,
# nor an index smaller than src, and its
# as_strided_scatter gives self a wrong gradient (the scattered region's, not the rest's): these
# compare values here and gradients by finite differences (test_gradcheck). For prod at an
# infinite self torch gives NaN (its g * result / self is inf / inf); asyncgrad's product rule
# gives the product of the others.
NO_TORCH_GRAD = {
    "scatter_add_reduce",
    "scatter_multiply",
    "scatter_src_small_index",
    "as_strided_scatter",
    "scatter_reduce_max_alias",
    "scatter_reduce_prod_inf",
}


@pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta:UserWarning")
@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter:UserWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name: str) -> None:
    fn, arrays = CASES[name]
    compare(torch, fn, arrays, grad=name not in NO_TORCH_GRAD)


GRADCHECK = [
    "scatter_src",
    "scatter_value",
    "scatter_reduce_sum_False",
    "scatter_reduce_prod_True",
    "scatter_reduce_prod_False",
    "scatter_reduce_mean_False",
    "scatter_reduce_amax_True",
    "scatter_reduce_amin_False",
    "index_add_alpha",
    "index_copy",
    "index_put_accumulate",
    "index_reduce_mean_True",
    "index_reduce_prod_False",
    "masked_scatter",
    "put_accumulate",
    "diagonal_scatter_off",
    "as_strided_scatter",
    "scatter_reduce_inplace",
    "fill_diagonal",
    "scatter_add_reduce",
    "scatter_multiply",
    "scatter_src_small_index",
]
GRADGRAD = {"scatter_reduce_prod_True", "scatter_reduce_amax_True", "index_reduce_prod_False"}


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter:UserWarning")
@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck(name: str) -> None:
    gradcheck_case(*CASES[name], second_order=name in GRADGRAD or "reduce" not in name)


ALL_CASES = {**CASES, **VIEW_CASES}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("dtype", ["int64", "bool"])
@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_integer_and_bool_inputs_match_torch(name: str, dtype: str) -> None:
    """Every case with its float inputs made ``dtype``: torch's values and result dtypes, or
    torch's exception type where torch refuses the dtype."""
    fn, arrays = ALL_CASES[name]
    if any(isinstance(a, np.ndarray) and not np.isfinite(a).all() for a in arrays):
        pytest.skip("NaN and inf have no integer value")
    conv = [
        a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in arrays
    ]

    def run(L: Any) -> list[Any]:
        ins = [L.tensor(a) if isinstance(a, np.ndarray) else a for a in conv]
        return flat_outputs(fn(L, *ins))

    try:
        want = run(torch)
    except Exception as e:  # torch's type is what is checked
        with pytest.raises(type(e)):
            run(ag)
        return
    got = run(ag)
    for x, y in zip(got, want, strict=True):
        if not isinstance(y, torch.Tensor):
            assert x == y
            continue
        assert str(x.dtype) == str(y.dtype).replace("torch.", "")
        np.testing.assert_array_equal(x.numpy(), y.numpy())
