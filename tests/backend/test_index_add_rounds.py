"""backend.index_add_zeros adds the slices an integer array picks in rounds of distinct positions
(See NOTE [Adding slices at repeated indices]): the same bits as np.add.at."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncgrad import backend


def _at(g: Any, index: tuple[Any, ...], shape: tuple[int, ...]) -> Any:
    z = np.zeros(shape, dtype=g.dtype)
    np.add.at(z, index, g)
    return z


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize(
    ("shape", "lead", "idx_shape", "high"),
    [
        ((300, 16), 0, (500,), 300),  # rows of an embedding, repeats
        ((40, 16), 0, (8, 50), 40),  # a 2-D index, many repeats (up to 16 rounds or more)
        ((4, 90, 9), 1, (200,), 90),  # columns after a full slice
        ((300, 8), 0, (100,), 300),  # few repeats
    ],
)
def test_same_bits_as_add_at(
    dtype: Any, shape: tuple[int, ...], lead: int, idx_shape: tuple[int, ...], high: int
) -> None:
    rng = np.random.default_rng(0)
    ia = rng.integers(-high, high, idx_shape)
    gshape = (*shape[:lead], *idx_shape, *shape[lead + 1 :])
    g = rng.standard_normal(gshape).astype(dtype)
    g.reshape(-1)[::7] = -0.0
    index = (*([slice(None)] * lead), ia)
    got = backend.index_add_zeros(g, index, shape)
    want = _at(g, index, shape)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert not np.signbit(got.real[got.real == 0]).any()  # 0 + -0 is 0, as add.at gives


def test_special_values_and_out_of_range() -> None:
    rng = np.random.default_rng(1)
    ia = rng.integers(0, 50, 400)
    g = rng.standard_normal((400, 10))
    g[::5, 0] = np.nan
    g[1::5, 1] = np.inf
    g[2::5, 1] = -np.inf
    with np.errstate(all="ignore"):  # as backward runs (NOTE [Silent floating point])
        got, want = backend.index_add_zeros(g, (ia,), (50, 10)), _at(g, (ia,), (50, 10))
    np.testing.assert_array_equal(got, want)
    ia[3] = 50
    with pytest.raises(IndexError):
        backend.index_add_zeros(g, (ia,), (50, 10))


_RUN_INDICES = [
    np.r_[2, 1, np.arange(0, 40), 38, 37],  # reflect padding
    np.r_[0, 0, np.arange(0, 40), 39, 39, 39],  # replicate padding
    np.arange(39, -1, -1),  # flip
    np.r_[np.arange(30, 40), np.arange(0, 30)],  # roll
    np.r_[5, 9, 10, 3, 3, 2, 1, 0],  # short runs and repeats
]


@pytest.mark.parametrize("ia", _RUN_INDICES, ids=range(len(_RUN_INDICES)))
@pytest.mark.parametrize("lead", [0, 1, 2])
def test_runs_same_bits_as_add_at_and_indexing(ia: Any, lead: int) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal({0: (40, 128), 1: (16, 40, 8), 2: (6, 20, 40)}[lead])
    index = (*([slice(None)] * lead), ia, Ellipsis)
    got = backend.take_runs(x, index)
    assert got is not None
    np.testing.assert_array_equal(got, x[index])
    assert not np.shares_memory(got, x)
    g = rng.standard_normal(x[index].shape)
    g.reshape(-1)[::5] = -0.0
    np.testing.assert_array_equal(
        backend.index_add_zeros(g, index, x.shape), _at(g, index, x.shape)
    )
