"""Views that share memory (movedim, the splits, unfold, as_strided), the in-place view ops
(t_, transpose_, squeeze_, ...), the tensor facts (stride, storage_offset, is_contiguous, ...),
the factories (empty_strided, asarray, frombuffer, logspace, range, ...) and the errors of the
H3 family, against torch."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="compares with torch")


def _grad(L: Any, loss: Any, inputs: list[Any]) -> list[Any]:
    if L is torch:
        return list(torch.autograd.grad(loss, inputs))
    return list(ag.autograd.grad_sync(loss, inputs))


def _both(make: Callable[[Any], Any]) -> tuple[Any, Any]:
    return make(ag), make(torch)


# ----- views share memory, version counter and base -----
VIEWS: dict[str, Callable[[Any, Any], Any]] = {
    "movedim": lambda L, x: L.movedim(x, 0, 1),
    "moveaxis": lambda L, x: x.moveaxis(-1, 0),
    "swapaxes": lambda L, x: L.swapaxes(x, 0, 1),
    "swapdims": lambda L, x: x.swapdims(0, 1),
    "ravel": lambda L, x: L.ravel(x),
    "tensor_split": lambda L, x: L.tensor_split(x, 2, 1)[1],
    "hsplit": lambda L, x: L.hsplit(x, 2)[0],
    "vsplit": lambda L, x: x.vsplit([1])[1],
    "unfold": lambda L, x: x.unfold(1, 2, 1),
    "as_strided": lambda L, x: L.as_strided(x, (2, 2), (1, 2), 1),
    "atleast_3d": lambda L, x: L.atleast_3d(x),
    "broadcast_tensors": lambda L, x: L.broadcast_tensors(x, L.zeros(2, 1, 4))[0],
    "meshgrid": lambda L, x: L.meshgrid(x[0], x[1], indexing="ij")[0],
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_share_memory_like_torch(name: str) -> None:
    for L in (ag, torch):
        x = L.arange(8.0).reshape(2, 4).clone()
        v = VIEWS[name](L, x)
        assert v._base is x
        before = x.clone()
        x.add_(1)  # writes through to the view
        np.testing.assert_array_equal(
            v.numpy(), VIEWS[name](L, before + 1).numpy(), err_msg=f"{L.__name__}"
        )
    a, t = _both(lambda L: VIEWS[name](L, L.arange(8.0).reshape(2, 4)))
    assert tuple(a.stride()) == tuple(t.stride())
    assert a.storage_offset() == t.storage_offset()
    assert a.is_contiguous() == t.is_contiguous()


def test_strided_view_grad_fn_rebuilt_after_inplace_on_base() -> None:
    outs = []
    for L in (ag, torch):
        a = L.tensor(np.arange(6.0), requires_grad=True)
        b = a * 1
        u = b.unfold(0, 3, 1)
        s = L.as_strided(b, (2, 2), (2, 1), 1)
        b.mul_(2)
        w = L.tensor(np.arange(12.0).reshape(4, 3))
        outs.append(_grad(L, (u * w).sum() + (s * s).sum(), [a])[0].numpy())
    np.testing.assert_allclose(outs[0], outs[1])


def test_inplace_on_strided_view_is_refused_in_backward() -> None:
    a = ag.tensor(np.arange(6.0), requires_grad=True)
    b = a * 1
    b.unfold(0, 2, 2).mul_(3)
    with pytest.raises(RuntimeError, match="in-place op on an as_strided or unfold view"):
        ag.autograd.grad_sync(b.sum(), [a])


def test_inplace_view_ops_match_torch() -> None:
    grads, shapes = [], []
    for L in (ag, torch):
        a = L.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        b = a * 1
        b.t_()
        c = b[0]
        c.unsqueeze_(0)
        b.transpose_(0, 1)
        b.squeeze_()
        b.unsqueeze_(1)
        b.swapdims_(0, 1)
        b.swapaxes_(0, 1)
        assert c._base is b
        w = L.tensor(np.arange(6.0).reshape(2, 1, 3))
        shapes.append((tuple(b.shape), tuple(c.shape), tuple(b.stride())))
        grads.append(_grad(L, (b * w).sum() + (c * c).sum(), [a])[0].numpy())
    assert shapes[0] == shapes[1]
    np.testing.assert_allclose(grads[0], grads[1])


def test_inplace_view_ops_refuse_a_leaf_that_requires_grad() -> None:
    for L in (ag, torch):
        x = L.zeros(2, 3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            x.t_()
    y = ag.zeros(2, 3)
    assert y.t_() is y
    assert y.shape == (3, 2)
    z = ag.zeros(2, 3)
    z.as_strided_((3,), (2,))
    assert z.shape == (3,)
    assert z.stride() == (2,)


# ----- tensor facts -----
LAYOUTS: dict[str, Callable[[Any], Any]] = {
    "contiguous": lambda L: L.zeros(2, 3, 4),
    "transposed": lambda L: L.zeros(2, 3, 4).transpose(0, 2),
    "sliced": lambda L: L.zeros(4, 5)[1:, 2:4],
    "stepped": lambda L: L.zeros(6, 5)[::2, 1],
    "expanded": lambda L: L.zeros(3, 1).expand(3, 4),
    "0d": lambda L: L.zeros(()),
    "unit_dims": lambda L: L.zeros(1, 3, 1)[:, 1:, :],
    "diagonal": lambda L: L.zeros(3, 4).diagonal(1),
    "empty": lambda L: L.zeros(2, 0, 3),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layout_facts_match_torch(name: str) -> None:
    a, t = _both(LAYOUTS[name])
    assert tuple(a.stride()) == tuple(t.stride())
    for d in range(-a.ndim, a.ndim):
        assert a.stride(d) == t.stride(d)
    assert a.storage_offset() == t.storage_offset()
    assert a.is_contiguous() == t.is_contiguous()
    assert (a.nelement(), a.ndimension(), a.nbytes, a.itemsize) == (
        t.nelement(),
        t.ndimension(),
        t.nbytes,
        t.itemsize,
    )


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int8", "uint8", "bool"])
def test_dtype_facts_match_torch(dtype: str) -> None:
    a = ag.zeros(3, dtype=getattr(ag, dtype))
    t = torch.zeros(3, dtype=getattr(torch, dtype))
    assert a.is_signed() == t.is_signed()
    assert a.itemsize == t.itemsize
    for conv in ("byte", "char", "short"):
        assert str(getattr(a, conv)().dtype) == str(getattr(t, conv)().dtype).replace("torch.", "")


def test_device_and_memory_facts() -> None:
    a, t = _both(lambda L: L.ones(2))
    assert a.get_device() == t.get_device() == -1
    assert a.is_cpu
    assert t.is_cpu
    assert not a.is_neg()
    assert a.resolve_neg() is a
    assert not a.is_pinned()
    assert a.pin_memory().tolist() == [1.0, 1.0]
    assert not a.is_shared()
    assert a.share_memory_() is a
    assert not a.is_distributed()
    with pytest.raises(TypeError, match="bfloat16 is not supported"):
        a.bfloat16()
    e = a.new_empty_strided((2, 3), (1, 2), dtype=ag.float64)
    assert (e.shape, e.stride(), str(e.dtype)) == ((2, 3), (1, 2), "float64")


def test_resize() -> None:
    for L in (ag, torch):
        x = L.arange(6.0)
        assert x.resize_(2, 2) is x
        assert x.tolist() == [[0.0, 1.0], [2.0, 3.0]]
        x.resize_((3, 3))
        assert x.shape == (3, 3)
        assert x.flatten()[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
        x.resize_as_(L.zeros(4))
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
        with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            L.zeros(2, requires_grad=True).resize_(3)


# ----- factories and torch-level facts -----
def test_empty_factories_match_torch() -> None:
    for make in (
        lambda L: L.empty_like(L.zeros(2, 3, dtype=L.float64)),
        lambda L: L.empty_like(L.zeros(2, 3), dtype=L.int64),
        lambda L: L.empty_strided((2, 3), (1, 2)),
        lambda L: L.empty_strided((2, 0), (1, 1), dtype=L.float64),
        lambda L: L.empty_permuted((2, 3, 4), (2, 0, 1)),
        lambda L: L.zeros(2).new_empty_strided((3, 2), (2, 1)),
    ):
        a, t = _both(make)
        assert tuple(a.shape) == tuple(t.shape)
        assert tuple(a.stride()) == tuple(t.stride())
        assert str(a.dtype) == str(t.dtype).replace("torch.", "")


def test_scalar_tensor_asarray_frombuffer() -> None:
    for v, kw in ((1, {}), (2.5, {"dtype": "float64"}), (True, {"dtype": "int32"})):
        a = ag.scalar_tensor(v, **{k: getattr(ag, d) for k, d in kw.items()})
        t = torch.scalar_tensor(v, **{k: getattr(torch, d) for k, d in kw.items()})
        assert a.shape == ()
        assert a.item() == t.item()
        assert str(a.dtype) == str(t.dtype).replace("torch.", "")
    base = np.arange(4.0)
    shared = ag.asarray(base)
    base[0] = 9.0
    assert shared[0].item() == 9.0
    assert ag.asarray(base, copy=True)._array is not base
    for data in ([1, 2], [1.0, 2.0], [[True], [False]], 3):
        a, t = ag.asarray(data), torch.asarray(data)
        assert a.tolist() == t.tolist()
        assert str(a.dtype) == str(t.dtype).replace("torch.", "")
    x = ag.ones(3)
    assert ag.asarray(x) is x
    assert ag.asarray(x, dtype=ag.float64).dtype == ag.float64
    with pytest.raises(ValueError, match="copy"):
        ag.asarray(x, dtype=ag.float64, copy=False)
    buf = bytearray(np.arange(6, dtype=np.int32).tobytes())
    a = ag.frombuffer(buf, dtype=ag.int32, count=3, offset=4)
    t = torch.frombuffer(bytearray(buf), dtype=torch.int32, count=3, offset=4)
    assert a.tolist() == t.tolist() == [1, 2, 3]
    a[0] = 7  # shares the buffer's memory
    assert np.frombuffer(buf, dtype=np.int32)[1] == 7
    for kw in ({"count": 10}, {"offset": 30}):
        with pytest.raises(ValueError, match="buffer length"):
            ag.frombuffer(buf, dtype=ag.int32, **kw)
        with pytest.raises(ValueError, match="buffer length"):
            torch.frombuffer(bytearray(buf), dtype=torch.int32, **kw)


@pytest.mark.parametrize("args", [(1, 4), (0, 1, 0.25), (5, 1, -1.5), (1.0, 1.0), (0, 3, 2)])
def test_range_is_inclusive_and_deprecated(args: tuple[Any, ...]) -> None:
    with pytest.warns(UserWarning, match="torch.range is deprecated"):
        a = ag.range(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.range(*args)
    np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-6)
    assert str(a.dtype) == str(t.dtype).replace("torch.", "")


@pytest.mark.parametrize(
    "args", [(3, 3, 0), (4, 3, 1), (3, 5, -1), (0, 3, 0), (2, 2, 5), (3, 4, -4)]
)
def test_tri_indices_match_torch(args: tuple[int, int, int]) -> None:
    for name in ("tril_indices", "triu_indices"):
        a = getattr(ag, name)(*args)
        t = getattr(torch, name)(*args)
        assert a.tolist() == t.tolist()
        assert str(a.dtype) == "int64"
    assert ag.tril_indices(3, 3, dtype=ag.int32).dtype == ag.int32


def test_torch_level_facts() -> None:
    x = ag.zeros(2, 3)
    assert ag.numel(x) == 6
    assert ag.is_tensor(x)
    assert not ag.is_tensor(np.zeros(1))
    assert not ag.is_storage(x)
    assert ag.is_floating_point(x)
    assert not ag.is_floating_point(ag.zeros(1, dtype=ag.int64))
    assert ag.is_same_size(x, ag.ones(2, 3))
    assert not x.is_same_size(ag.ones(3, 2))
    assert ag.is_nonzero(ag.tensor([2.0]))
    assert not ag.tensor(0).is_nonzero()
    for L in (ag, torch):
        with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
            L.is_nonzero(L.ones(2))
        with pytest.raises(RuntimeError, match="no values is ambiguous"):
            L.is_nonzero(L.ones(0))
    for name in ("get_device", "is_distributed", "is_neg", "is_signed"):
        assert getattr(ag, name)(x) == getattr(torch, name)(torch.zeros(2, 3))
    assert ag.resolve_neg(x) is x
    r = ag.zeros(4)
    assert ag.resize_as_(r, x) is r
    assert r.shape == (2, 3)
    y = x * 1
    d = ag.detach(y)
    assert d._array is y._array
    assert not d.requires_grad
    assert ag.detach_(y) is y


def test_meshgrid_without_indexing_warns_as_torch() -> None:
    with pytest.warns(UserWarning, match="it will be required to pass the indexing argument"):
        a = ag.meshgrid(ag.arange(2), ag.arange(3))
    assert [g.shape for g in a] == [(2, 3), (2, 3)]


# ----- errors: torch's exception type, and a message naming what is wrong -----
def _idx(L: Any, *v: Any) -> Any:
    return L.tensor(list(v), dtype=L.int64)


ERRORS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "movedim_len": (lambda L: L.movedim(L.zeros(2, 3), (0, 1), (0,)), "same number of dims"),
    "movedim_repeat": (lambda L: L.movedim(L.zeros(2, 3), (0, 0), (0, 1)), "repeated dim"),
    "movedim_range": (lambda L: L.movedim(L.zeros(2, 3), 2, 0), "Dimension out of range"),
    "hsplit_uneven": (lambda L: L.hsplit(L.zeros(2, 3), 2), "not divisible by the split_size"),
    "vsplit_1d": (lambda L: L.vsplit(L.zeros(3), 1), "at least 2 dimension"),
    "dsplit_2d": (lambda L: L.dsplit(L.zeros(3, 3), 1), "at least 3 dimension"),
    "tensor_split_0d": (lambda L: L.tensor_split(L.zeros(()), 2), "at least a 1-dimensional"),
    "tensor_split_zero": (lambda L: L.tensor_split(L.zeros(3), 0), "larger than 0"),
    "rot90_dims": (lambda L: L.rot90(L.zeros(2, 2), 1, [0]), "rotation dims == 2"),
    "rot90_same": (lambda L: L.rot90(L.zeros(2, 2), 1, [1, 1]), "rotation dims to be different"),
    "rot90_1d": (lambda L: L.rot90(L.zeros(2), 1, [0, 1]), "total dims >= 2"),
    "fliplr_1d": (lambda L: L.fliplr(L.zeros(2)), "Input must be >= 2-d"),
    "flipud_0d": (lambda L: L.flipud(L.zeros(())), "Input must be >= 1-d"),
    "diag_3d": (lambda L: L.diag(L.zeros(2, 2, 2)), "1D or 2D"),
    "diag_embed_same": (lambda L: L.diag_embed(L.zeros(2), 0, 0, 0), "cannot be identical"),
    "block_diag_3d": (lambda L: L.block_diag(L.zeros(1, 1, 1)), "2 or fewer dimensions"),
    "broadcast": (lambda L: L.broadcast_tensors(L.zeros(2), L.zeros(3)), "shape mismatch|size"),
    "meshgrid_indexing": (
        lambda L: L.meshgrid(L.zeros(2), indexing="yx"),
        "indexing must be one of",
    ),
    "meshgrid_2d": (lambda L: L.meshgrid(L.zeros(2, 2), indexing="ij"), "0D or 1D tensor"),
    "combinations_2d": (lambda L: L.combinations(L.zeros(2, 2)), "Expect a 1D vector"),
    "take_range": (lambda L: L.take(L.zeros(4), _idx(L, 4)), "out of range: tried to access"),
    "take_along_ndim": (
        lambda L: L.take_along_dim(L.zeros(2, 2), _idx(L, 0), 0),
        "same number of dimensions",
    ),
    "unfold_size": (lambda L: L.zeros(3).unfold(0, 4, 1), "maximum size for tensor"),
    "unfold_step": (lambda L: L.zeros(3).unfold(0, 2, 0), "step is 0 but must be > 0"),
    "as_strided_bounds": (lambda L: L.as_strided(L.zeros(4), (3, 3), (1, 1)), "out of bounds"),
    "repeat_interleave_negative": (
        lambda L: L.repeat_interleave(L.zeros(2), -1),
        "repeats can not be negative",
    ),
    "masked_select_float_mask": (
        lambda L: L.masked_select(L.zeros(2), L.zeros(2)),
        "expected BoolTensor for mask",
    ),
    "scatter_dtype": (
        lambda L: L.scatter(L.zeros(2), 0, _idx(L, 0), L.zeros(1, dtype=L.float64)),
        "Expected self.dtype to be equal to src.dtype",
    ),
    "scatter_bounds": (
        lambda L: L.scatter(L.zeros(2), 0, _idx(L, 5), L.zeros(1)),
        "index 5 is out of bounds",
    ),
    "scatter_index_size": (
        lambda L: L.scatter(L.zeros(2, 2), 0, L.zeros(2, 3, dtype=L.int64), L.zeros(2, 3)),
        "Expected index",
    ),
    "scatter_reduce_name": (
        lambda L: L.scatter_reduce(L.zeros(2), 0, _idx(L, 0), L.zeros(1), "foo"),
        "reduce argument must be either",
    ),
    "scatter_float_index": (
        lambda L: L.scatter(L.zeros(2), 0, L.zeros(1), L.zeros(1)),
        "Expected dtype int",
    ),
    "index_add_dtype": (
        lambda L: L.index_add(L.zeros(2), 0, _idx(L, 0), L.zeros(1, dtype=L.float64)),
        "must have the same scalar type",
    ),
    "index_add_bounds": (
        lambda L: L.index_add(L.zeros(2, 1), 0, _idx(L, 2), L.zeros(1, 1)),
        "index 2 is out of bounds for dimension 0 with size 2",
    ),
    "index_add_bounds_1d": (
        lambda L: L.index_add(L.zeros(2), 0, _idx(L, -1), L.zeros(1)),
        "index out of range in self",
    ),
    "index_copy_bounds": (
        lambda L: L.index_copy(L.zeros(2), 0, _idx(L, -1), L.zeros(1)),
        "index_copy_\\(\\): index -1 is out of bounds",
    ),
    "index_fill_bounds": (
        lambda L: L.index_fill(L.zeros(2), 0, _idx(L, 3), 1.0),
        "index 3 is out of bounds",
    ),
    "index_fill_value_dims": (
        lambda L: L.index_fill(L.zeros(2), 0, _idx(L, 0), L.zeros(2)),
        "0-dimensional value tensor",
    ),
    "index_reduce_name": (
        lambda L: L.zeros(2).index_reduce(0, _idx(L, 0), L.zeros(1), "sum"),
        "prod, mean, amax or amin",
    ),
    "index_put_dtype": (
        lambda L: L.index_put(L.zeros(2), (_idx(L, 0),), L.zeros(1, dtype=L.float64)),
        "Index put requires the source and destination dtypes match",
    ),
    "masked_scatter_short": (
        lambda L: L.masked_scatter(L.zeros(3), L.ones(3, dtype=L.bool), L.zeros(2)),
        "at least as many elements",
    ),
    "put_bounds": (lambda L: L.put(L.zeros(2), _idx(L, 2), L.zeros(1)), "out of range"),
    "put_numel": (
        lambda L: L.put(L.zeros(2), _idx(L, 0, 1), L.zeros(1)),
        "same number of elements",
    ),
    "select_scatter_size": (
        lambda L: L.select_scatter(L.zeros(2, 3), L.zeros(2), 0, 0),
        "expected src to have a size equal to the slice of self",
    ),
    "slice_scatter_size": (
        lambda L: L.slice_scatter(L.zeros(4), L.zeros(3), 0, 0, 2),
        "expected src to have a size equal to the slice of self",
    ),
    "diagonal_scatter_size": (
        lambda L: L.diagonal_scatter(L.zeros(3, 3), L.zeros(2)),
        "expected src to have a size equal to the slice of self",
    ),
    "fill_diagonal_1d": (lambda L: L.zeros(3).fill_diagonal_(1.0), "dimensions must larger than 1"),
    "fill_diagonal_unequal": (
        lambda L: L.zeros(2, 2, 3).fill_diagonal_(1.0),
        "all dimensions of input must be of equal length",
    ),
    "fill_value_dims": (lambda L: L.fill(L.zeros(2), L.zeros(2)), "0-dimension value tensor"),
    "sum_to_size": (lambda L: L.zeros(2, 3).sum_to_size(4), "is not expandable to size"),
    "linspace_1d_bound": (
        lambda L: L.linspace(L.zeros(2), 1.0, 3),
        "0-dimensional start and end tensors",
    ),
    "unravel_float": (
        lambda L: L.unravel_index(L.zeros(2), (2, 2)),
        "expected 'indices' to be integer dtype",
    ),
    "range_sign": (lambda L: L.range(0, 5, -1), "upper bound and larger bound inconsistent"),
    "detach_view": (lambda L: L.detach_(L.zeros(4)[1:]), "Can't detach views in-place"),
}


@pytest.mark.filterwarnings("ignore:torch.range is deprecated:UserWarning")
@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_torch(name: str) -> None:
    fn, match = ERRORS[name]
    with pytest.raises(Exception) as t_err:  # noqa: PT011 (torch's type is what is checked)
        fn(torch)
    with pytest.raises(t_err.type, match=match):
        fn(ag)


def test_range_index_reads_and_writes_like_a_list() -> None:
    for L in (ag, torch):
        x = L.zeros(4, 3)
        x[range(1, 3)] = L.ones(2, 3)
        x[range(0, 4, 3), 0] = 5.0
        assert x.tolist() == [[5, 0, 0], [1, 1, 1], [1, 1, 1], [5, 0, 0]]
        assert x[range(2), range(1, 3)].tolist() == [0.0, 1.0]


INPLACE_THROUGH = sorted(set(VIEWS) - {"unfold", "as_strided", "broadcast_tensors", "meshgrid"})


@pytest.mark.parametrize("name", INPLACE_THROUGH)
def test_inplace_op_on_a_view_reaches_the_base_gradient(name: str) -> None:
    grads = []
    for L in (ag, torch):
        a = L.tensor(np.arange(8.0).reshape(2, 4), requires_grad=True)
        b = a * 1
        v = VIEWS[name](L, b)
        v.mul_(v.detach() + 2)
        w = L.tensor(np.linspace(-1.0, 1.0, 8).reshape(2, 4))
        grads.append(_grad(L, (b * w).sum() + (v * v).sum(), [a])[0].numpy())
    np.testing.assert_allclose(grads[0], grads[1])
