"""The backend's small-array fast paths give what the NumPy calls they replace give (See NOTE
[Small-array fast paths]), on both sides of their size switches, and the gradients that use
them stay exact at infinities and NaN."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import backend

INF = float("inf")
NAN = float("nan")


@pytest.mark.parametrize("size", [1, 7, backend.MASK_WHERE_MAX, backend.MASK_WHERE_MAX + 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_masked_is_where_keep_g_else_zero(size: int, dtype: Any) -> None:
    rng = np.random.default_rng(size)
    g = rng.standard_normal(size).astype(dtype)
    keep = rng.random(size) < 0.5
    # Infinities and NaN both where the gradient is kept and where it is dropped.
    for i, v in enumerate((INF, -INF, NAN, INF, NAN, -INF)):
        if i < size:
            g[i] = v
    keep[: min(size, 6)] = [True, True, True, False, False, False][: min(size, 6)]
    with np.errstate(all="ignore"):  # as in the engine (See NOTE [Silent floating point])
        got = backend.masked(g, keep)
    expected = np.where(keep, g, 0.0)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)  # NaN where kept; 0, never NaN, where dropped
    assert not np.isnan(got[~keep]).any()


@pytest.mark.parametrize("src_shape", [(), (1,), (1, 1)])
@pytest.mark.parametrize("shape", [(), (1,), (8, 1), (3, 4), (2, 3, 4)])
def test_broadcast_to_one_element_is_a_read_only_view(
    src_shape: tuple[int, ...], shape: tuple[int, ...]
) -> None:
    a = np.full(src_shape, 2.5, dtype=np.float32)
    if len(src_shape) > len(shape):
        with pytest.raises(ValueError, match=r"broadcast|dimensions"):  # NumPy's own error
            backend.broadcast_to(a, shape)
        return
    got = backend.broadcast_to(a, shape)
    expected = np.broadcast_to(a, shape)
    assert got.shape == expected.shape
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)
    assert not got.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        got[...] = 1.0
    assert backend.overlaps_itself(got) == backend.overlaps_itself(expected)
    a[...] = 4.0  # a view, as broadcast_to's: it follows its source
    assert (got == 4.0).all()


def test_broadcast_to_larger_arrays_falls_back_to_numpy() -> None:
    a = np.arange(4.0).reshape(4, 1)
    got = backend.broadcast_to(a, (4, 3))
    np.testing.assert_array_equal(got, np.broadcast_to(a, (4, 3)))
    assert not got.flags.writeable
    with pytest.raises(ValueError, match="could not be broadcast"):
        backend.broadcast_to(np.arange(3.0), (4, 2))


@pytest.mark.parametrize("n", [16, 64])  # 256 and 4,096 elements: both sides of MASK_WHERE_MAX
def test_relu_gradient_drops_infinite_gradients_where_the_input_was_negative(n: int) -> None:
    rng = np.random.default_rng(n)
    xv = rng.standard_normal((n, n))
    x = ag.tensor(xv, requires_grad=True)
    gv = np.where(rng.random((n, n)) < 0.5, INF, NAN)
    (gx,) = ag.grad_sync(ag.relu(x), [x], grad_outputs=[ag.tensor(gv)])
    np.testing.assert_array_equal(gx.numpy(), np.where(xv > 0, gv, 0.0))


def test_full_sum_gradient_is_ones_of_the_input_shape_and_leaves_no_alias() -> None:
    x = ag.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    (x * 2.0).sum().backward()
    (x * 3.0).sum().backward()  # accumulates into .grad: it must own its memory
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 5.0))
    x.grad.numpy()[0, 0] = 0.0  # writable, and only that element changes
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 5.0, 5.0], [5.0, 5.0, 5.0]])


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((8, 32), (32, 64)),  # 2-D: ndarray.dot
        ((8, 64), (64, 1)),
        ((1, 5), (5, 1)),
        ((0, 3), (3, 2)),
        ((2, 8, 32), (32, 4)),  # batched: @, where dot's rules differ
        ((2, 8, 32), (2, 32, 4)),
        ((32,), (32, 4)),
    ],
)
@pytest.mark.parametrize("transposed", [False, True])
def test_mm_is_the_matrix_product(
    sa: tuple[int, ...], sb: tuple[int, ...], transposed: bool
) -> None:
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    if transposed and b.ndim == 2:  # a transposed view, as linear's weight
        b = np.ascontiguousarray(b.T).T
    got = backend.mm(a, b)
    expected = np.matmul(a, b)
    assert got.shape == expected.shape
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# Both sides of each switch of NOTE [A few rows by a transposed weight]: (rows, inner, columns)
# and whether mm computes the transposed product.
SWAP_CASES = [
    ((8, 256, 256), True),
    ((32, 1024, 1024), True),
    ((2, 1024, 1024), True),
    ((backend.NT_SWAP_MAX_ROWS + 1, 1024, 1024), False),  # too many rows
    ((1, 1024, 1024), False),  # one row: a matrix-vector product
    ((32, 1024, backend.NT_SWAP_MIN_COLS - 1), False),  # too few columns
    ((8, 64, 64), False),  # too little work
]


@pytest.mark.parametrize(("shape", "swapped"), SWAP_CASES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mm_of_a_few_rows_by_a_transposed_weight(
    shape: tuple[int, int, int], swapped: bool, dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, inner, cols = shape
    rng = np.random.default_rng(rows + inner + cols)
    x = rng.standard_normal((rows, inner)).astype(dtype)
    w = rng.standard_normal((cols, inner)).astype(dtype)
    seen: list[bool] = []
    swap = backend._swap_nt
    monkeypatch.setattr(backend, "_swap_nt", lambda a, b: seen.append(swap(a, b)) or seen[-1])
    got = backend.mm(x, w.T)
    expected = x.astype(np.float64) @ w.T.astype(np.float64)
    assert got.dtype == dtype
    assert got.flags.c_contiguous  # as the plain product's is: views and reshapes stay free
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.sqrt(inner))
    # float32 only; the decision is the shape's (and dtype's) alone, so it repeats exactly.
    assert any(seen) is (swapped and dtype == np.float32)
    np.testing.assert_array_equal(backend.mm(x, w.T), got)


def test_a_linear_layer_with_a_swapped_product_has_exact_gradients() -> None:
    # A 16 x 256 -> 256 float32 layer takes the transposed product forward and backward (the
    # input gradient of a matmul is a product by a transposed operand too): its gradients are
    # those of the same layer in float64 to float32 precision.
    rng = np.random.default_rng(7)
    x64 = rng.standard_normal((16, 256))
    w64 = rng.standard_normal((256, 256)) / 16
    assert backend._swap_nt(x64.astype(np.float32), w64.astype(np.float32).T)
    grads = {}
    for dt in (np.float32, np.float64):
        x = ag.tensor(x64.astype(dt), requires_grad=True)
        w = ag.tensor(w64.astype(dt), requires_grad=True)
        y = ag.nn.functional.linear(x, w)
        assert y.detach().numpy().flags.c_contiguous
        z = (ag.tanh(y) @ w.t()).sum()  # a matmul by a transposed operand, too
        grads[dt] = [g.numpy().astype(np.float64) for g in ag.grad_sync(z, [x, w])]
    for g32, g64 in zip(grads[np.float32], grads[np.float64], strict=True):
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-4)


def _calls_dot(fn: Any) -> bool:
    """Whether ``fn()`` calls a builtin named ``dot`` (``ndarray.dot``, through the profiler's
    C-call events)."""
    names: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            names.append(getattr(arg, "__name__", ""))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return "dot" in names


@pytest.mark.parametrize(
    ("shape", "dot"),
    [
        ((8, 64, 64), True),
        ((181, 8, 181), True),  # 32,761 elements: at most DOT_MAX_OUT
        ((182, 8, 181), False),  # 32,942
        ((1500, 4, 1500), False),
        ((256, 1, 784), False),  # an outer product: a * b
    ],
    ids=str,
)
@pytest.mark.parametrize("transposed", [False, True])
def test_mm_leaves_dot_to_small_outputs(
    shape: tuple[int, int, int], dot: bool, transposed: bool
) -> None:
    """NOTE [The GIL in a product]: ``ndarray.dot`` zeroes its output holding the GIL, so only
    small outputs take it; the others take ``@``, with the same values."""
    rows, inner, cols = shape
    rng = np.random.default_rng(rows + cols)
    a = rng.standard_normal((rows, inner))
    b = rng.standard_normal((cols, inner)).T if transposed else rng.standard_normal((inner, cols))
    assert (rows * cols <= backend.DOT_MAX_OUT) is dot
    got: list[Any] = []
    assert _calls_dot(lambda: got.append(backend.mm(a, b))) is dot
    assert got[0].flags.c_contiguous
    np.testing.assert_allclose(got[0], a @ b, rtol=1e-12, atol=1e-12)
    if inner == 1:  # the same products BLAS computes
        np.testing.assert_array_equal(got[0], a.dot(b))


def test_mm_of_tensors_records_the_product() -> None:
    # Under create_graph the rules get Tensors: mm must record, as @ does.
    rng = np.random.default_rng(3)
    a = ag.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    b = ag.tensor(rng.standard_normal((4, 2)), requires_grad=True)
    out = backend.mm(a, b)
    assert isinstance(out, ag.Tensor)
    assert out.grad_fn is not None
    assert type(out.grad_fn).__name__ == "MatmulBackward0"
    (ga,) = ag.grad_sync(out.sum(), [a])
    np.testing.assert_allclose(ga.numpy(), np.ones((3, 2)) @ b.detach().numpy().T)


@pytest.mark.parametrize(
    "dtype",
    [np.float16, np.float32, np.complex64, np.complex128, np.dtype(">f4"), np.int64, np.bool_],
    ids=str,
)
def test_masked_has_wheres_dtype(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Masking hands ``where`` a cached 0-d zero of a floating gradient's dtype: the result is
    the one ``where(keep, g, 0.0)`` gives, for every dtype and byte order, call after call."""
    monkeypatch.setattr(backend, "_zeros_by_num", {})  # this dtype's zero is made here
    g = (np.arange(10) - 4).astype(dtype)
    keep = np.arange(10) % 3 == 0
    for _ in range(3):  # the first call makes the zero, the next ones take it from the cache
        got = backend.masked(g, keep)
        expected = np.where(keep, g, 0.0)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
        got[...] = 7  # a fresh array: writing to it changes no cached zero
    # The other byte order of float32 shares the zero made above (one number, two dtypes).
    for other_dtype in (np.dtype("<f4"), np.dtype(">f4")):
        other = (np.arange(10) - 4).astype(other_dtype)
        got, expected = backend.masked(other, keep), np.where(keep, other, 0.0)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
