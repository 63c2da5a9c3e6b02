"""Shared helpers of the H3 tests (shapes, views, scatter): run one function on asyncgrad and on
torch with the same float64 inputs, and compare values and gradients."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import asyncgrad as ag


def flat_outputs(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [o for x in out for o in flat_outputs(x)]
    return [out]


def gradcheck_case(
    fn: Callable[..., Any], arrays: Sequence[Any], second_order: bool = True
) -> None:
    """``fn(ag, *tensors)``'s gradients (and, with ``second_order``, its second-order ones)
    against finite differences, with respect to every float input."""
    ins = [
        ag.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
        for a in arrays
    ]

    def f(*xs: Any) -> Any:
        it = iter(xs)
        full = [next(it) if isinstance(a, ag.Tensor) and a.requires_grad else a for a in ins]
        return tuple(flat_outputs(fn(ag, *full)))

    grads = [a for a in ins if isinstance(a, ag.Tensor) and a.requires_grad]
    assert ag.autograd.gradcheck(f, grads)
    if second_order:
        assert ag.autograd.gradgradcheck(f, grads)


def compare(
    torch: Any,
    fn: Callable[..., Any],
    arrays: Sequence[Any],
    *,
    grad: bool = True,
    seed: int = 0,
) -> None:
    """``fn(lib, *tensors)`` for lib in (asyncgrad, torch): equal values and, with ``grad``, equal
    gradients of a random weighting of the outputs with respect to every float input."""
    rng = np.random.default_rng(seed)
    a_in = [
        ag.tensor(a, requires_grad=grad and a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
        for a in arrays
    ]
    t_in = [
        torch.tensor(a, requires_grad=grad and a.dtype.kind == "f")
        if isinstance(a, np.ndarray)
        else a
        for a in arrays
    ]
    a_out = flat_outputs(fn(ag, *a_in))
    t_out = flat_outputs(fn(torch, *t_in))
    assert len(a_out) == len(t_out)
    for x, y in zip(a_out, t_out, strict=True):
        if not isinstance(y, torch.Tensor):
            assert x == y
            continue
        assert tuple(x.shape) == tuple(y.shape), (x.shape, y.shape)
        assert str(x.dtype) == str(y.dtype).replace("torch.", ""), (x.dtype, y.dtype)
        np.testing.assert_allclose(x.detach().numpy(), y.detach().numpy(), rtol=1e-6, atol=1e-9)
    if not grad:
        return
    wants = [i for i, a in enumerate(a_in) if isinstance(a, ag.Tensor) and a.requires_grad]
    pairs = [
        (x, y)
        for x, y in zip(a_out, t_out, strict=True)
        if isinstance(y, torch.Tensor) and y.requires_grad
    ]
    if not wants or not pairs:
        return
    ws = [rng.standard_normal(tuple(y.shape)) for _, y in pairs]
    a_loss = sum(
        ((x * ag.tensor(w)).sum() for (x, _), w in zip(pairs, ws, strict=True)), ag.zeros(())
    )
    t_loss = sum(
        ((y * torch.tensor(w)).sum() for (_, y), w in zip(pairs, ws, strict=True)), torch.zeros(())
    )
    a_g = ag.autograd.grad_sync(a_loss, [a_in[i] for i in wants], allow_unused=True)
    t_g = torch.autograd.grad(t_loss, [t_in[i] for i in wants], allow_unused=True)
    for x, y in zip(a_g, t_g, strict=True):
        if y is None:
            assert x is None or not np.any(x.detach().numpy())
            continue
        assert x is not None
        np.testing.assert_allclose(x.detach().numpy(), y.numpy(), rtol=1e-6, atol=1e-9)


import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="compares with torch")

R = np.random.default_rng(3)


def _r(*shape: int) -> Any:
    return R.standard_normal(shape)


def _i(*a: Any) -> Any:
    return np.array(a, dtype=np.int64)


# name -> (fn(lib, *inputs), inputs)
CASES: dict[str, tuple[Callable[..., Any], list[Any]]] = {
    "movedim": (lambda L, x: L.movedim(x, 0, -1), [_r(2, 3, 4)]),
    "movedim_tuple": (lambda L, x: L.movedim(x, (0, 1), (2, 0)), [_r(2, 3, 4)]),
    "moveaxis": (lambda L, x: L.moveaxis(x, -1, 0), [_r(2, 3, 4)]),
    "movedim_method": (lambda L, x: x.movedim(1, 0), [_r(2, 3)]),
    "swapaxes": (lambda L, x: L.swapaxes(x, 0, 2), [_r(2, 3, 4)]),
    "swapdims": (lambda L, x: L.swapdims(x, 0, 1), [_r(2, 3)]),
    "swapdims_method": (lambda L, x: x.swapdims(-1, 0), [_r(2, 3)]),
    "ravel": (lambda L, x: L.ravel(x.t()), [_r(2, 3)]),
    "ravel_0d": (lambda L, x: L.ravel(x), [np.array(2.0)]),
    "reshape_as": (lambda L, x, y: x.reshape_as(y), [_r(2, 3), _r(3, 2)]),
    "atleast_1d": (lambda L, x, y: L.atleast_1d(x, y), [np.array(1.5), _r(2, 2)]),
    "atleast_2d": (lambda L, x, y, z: L.atleast_2d([x, y, z]), [np.array(1.5), _r(3), _r(2, 2)]),
    "atleast_3d": (
        lambda L, x, y, z, w: L.atleast_3d(x, y, z, w),
        [np.array(1.5), _r(3), _r(2, 2), _r(1, 2, 3, 1)],
    ),
    "atleast_3d_one": (lambda L, x: L.atleast_3d(x), [_r(3)]),
    "hstack_1d": (lambda L, x, y: L.hstack([x, y]), [_r(2), _r(3)]),
    "hstack_2d": (lambda L, x, y: L.hstack((x, y)), [_r(2, 1), _r(2, 3)]),
    "vstack": (lambda L, x, y: L.vstack([x, y]), [_r(3), _r(2, 3)]),
    "row_stack": (lambda L, x, y: L.row_stack([x, y]), [_r(3), _r(3)]),
    "dstack": (lambda L, x, y: L.dstack([x, y]), [_r(3), _r(1, 3)]),
    "column_stack": (lambda L, x, y, z: L.column_stack([x, y, z]), [_r(3), _r(3, 2), _r(3)]),
    "concat": (lambda L, x, y: L.concat([x, y], dim=1), [_r(2, 1), _r(2, 3)]),
    "concatenate": (lambda L, x, y: L.concatenate([x, y], axis=-1), [_r(2, 1), _r(2, 3)]),
    "tensor_split_int": (lambda L, x: L.tensor_split(x, 3), [_r(7, 2)]),
    "tensor_split_idx": (lambda L, x: L.tensor_split(x, [1, 4, 9], dim=1), [_r(2, 6)]),
    "tensor_split_tensor": (
        lambda L, x: L.tensor_split(x, L.tensor([1, 2]), 1),
        [_r(2, 5)],
    ),
    "tensor_split_kw_sections": (lambda L, x: L.tensor_split(x, sections=2), [_r(5)]),
    "tensor_split_kw_indices": (lambda L, x: L.tensor_split(x, indices=[1], dim=1), [_r(2, 3)]),
    "tensor_split_method": (lambda L, x: x.tensor_split(4, -1), [_r(2, 3)]),
    "hsplit": (lambda L, x: L.hsplit(x, 2), [_r(3, 4)]),
    "hsplit_1d": (lambda L, x: L.hsplit(x, [1, 3]), [_r(5)]),
    "vsplit": (lambda L, x: x.vsplit([1]), [_r(3, 4)]),
    "dsplit": (lambda L, x: L.dsplit(x, 2), [_r(2, 3, 4)]),
    "rot90": (lambda L, x: L.rot90(x), [_r(2, 3)]),
    "rot90_k2": (lambda L, x: L.rot90(x, 2, [1, 2]), [_r(2, 3, 4)]),
    "rot90_k3": (lambda L, x: x.rot90(-1, [0, 1]), [_r(2, 3)]),
    "rot90_k0": (lambda L, x: L.rot90(x, 4), [_r(2, 3)]),
    "fliplr": (lambda L, x: L.fliplr(x), [_r(2, 3, 2)]),
    "flipud": (lambda L, x: x.flipud(), [_r(3)]),
    "flip_dims_kw": (lambda L, x: L.flip(x, dims=(0, -1)), [_r(2, 3)]),
    "diag_vec": (lambda L, x: L.diag(x), [_r(3)]),
    "diag_vec_off": (lambda L, x: L.diag(x, -2), [_r(3)]),
    "diag_mat": (lambda L, x: x.diag(1), [_r(3, 4)]),
    "diag_mat_neg": (lambda L, x: L.diag(x, -1), [_r(3, 4)]),
    "diag_embed": (lambda L, x: L.diag_embed(x), [_r(2, 3)]),
    "diag_embed_dims": (lambda L, x: L.diag_embed(x, 1, 0, 2), [_r(2, 3)]),
    "diag_embed_neg": (lambda L, x: x.diag_embed(-1, -1, 0), [_r(2, 3)]),
    "diagflat": (lambda L, x: L.diagflat(x, 1), [_r(2, 2)]),
    "block_diag": (lambda L, x, y, z: L.block_diag(x, y, z), [_r(2, 3), np.array(2.0), _r(3)]),
    "broadcast_tensors": (lambda L, x, y: L.broadcast_tensors(x, y), [_r(3, 1), _r(4)]),
    "meshgrid_ij": (lambda L, x, y: L.meshgrid(x, y, indexing="ij"), [_r(3), _r(2)]),
    "meshgrid_xy": (lambda L, x, y, z: L.meshgrid([x, y, z], indexing="xy"), [_r(3), _r(2), _r(4)]),
    "cartesian_prod": (lambda L, x, y: L.cartesian_prod(x, y), [_r(3), _r(2)]),
    "cartesian_prod_one": (lambda L, x: L.cartesian_prod(x), [_r(3)]),
    "combinations": (lambda L, x: L.combinations(x), [_r(4)]),
    "combinations_r3": (lambda L, x: L.combinations(x, 3), [_r(5)]),
    "combinations_repl": (lambda L, x: L.combinations(x, 2, True), [_r(3)]),
    "take": (lambda L, x, i: L.take(x, i), [_r(2, 3), _i([0, -1], [5, 2])]),
    "take_method": (lambda L, x, i: x.take(i), [_r(4), _i(1, 1, 3)]),
    "take_along_dim": (lambda L, x, i: L.take_along_dim(x, i, 1), [_r(3, 4), _i([0], [3], [1])]),
    "take_along_dim_bcast": (
        lambda L, x, i: L.take_along_dim(x, i, dim=0),
        [_r(3, 1, 4), _i([[0, 2]]).reshape(1, 2, 1)],
    ),
    "take_along_dim_none": (lambda L, x, i: x.take_along_dim(i), [_r(2, 3), _i(5, 0)]),
    "unfold": (lambda L, x: x.unfold(1, 2, 1), [_r(2, 4)]),
    "unfold_step": (lambda L, x: x.unfold(0, 2, 3), [_r(7, 2)]),
    "unfold_of_t": (lambda L, x: x.t().unfold(0, 3, 2), [_r(2, 5)]),
    "unfold_0d": (lambda L, x: x.unfold(0, 1, 1), [np.array(2.0)]),
    "as_strided": (lambda L, x: L.as_strided(x, (3, 2), (1, 2)), [_r(2, 3)]),
    "as_strided_offset": (lambda L, x: x.as_strided((2, 2), (3, 1), 1), [_r(2, 3)]),
    "as_strided_overlap": (lambda L, x: L.as_strided(x, (4, 3), (1, 1)), [_r(6)]),
    "repeat_interleave": (lambda L, x: L.repeat_interleave(x, 2), [_r(2, 3)]),
    "repeat_interleave_dim": (lambda L, x: x.repeat_interleave(2, dim=1), [_r(2, 3)]),
    "repeat_interleave_tensor": (
        lambda L, x, r: L.repeat_interleave(x, r, dim=0),
        [_r(3, 2), _i(1, 0, 3)],
    ),
    "repeat_interleave_counts": (lambda L, r: L.repeat_interleave(r), [_i(2, 0, 1)]),
    "narrow_copy": (lambda L, x: L.narrow_copy(x, 1, 1, 2), [_r(2, 4)]),
    "argwhere": (lambda L, x: L.argwhere(x), [np.array([[0.0, 1.0], [2.0, 0.0]])]),
    "masked_select": (lambda L, x, m: L.masked_select(x, m > 0), [_r(2, 3), _r(3)]),
    "unravel_index": (lambda L, i: L.unravel_index(i, (2, 3, 4)), [_i(0, 5, 23, -1, 30)]),
    "unravel_index_int": (lambda L: L.unravel_index(L.tensor(7), (3, 4)), []),
    "fill": (lambda L, x: L.fill(x, 2.5), [_r(2, 3)]),
    "fill_tensor": (lambda L, x, v: L.fill(x, v), [_r(2, 3), np.array(1.5)]),
    "sum_to_size": (lambda L, x: x.sum_to_size(3, 1), [_r(2, 3, 4)]),
    "sum_to_size_same": (lambda L, x: x.sum_to_size((2, 3)), [_r(2, 3)]),
    "alias_copy": (lambda L, x: L.alias_copy(x), [_r(2)]),
    "as_strided_copy": (lambda L, x: L.as_strided_copy(x, (2,), (2,)), [_r(4)]),
    "detach_copy": (lambda L, x: L.detach_copy(x.detach()), [_r(2)]),
    "diagonal_copy": (lambda L, x: L.diagonal_copy(x, 1), [_r(3, 3)]),
    "expand_copy": (lambda L, x: L.expand_copy(x, (2, 3)), [_r(1, 3)]),
    "permute_copy": (lambda L, x: L.permute_copy(x, (1, 0)), [_r(2, 3)]),
    "select_copy": (lambda L, x: L.select_copy(x, 1, -1), [_r(2, 3)]),
    "slice_copy": (lambda L, x: L.slice_copy(x, 1, 0, 3, 2), [_r(2, 4)]),
    "split_copy": (lambda L, x: L.split_copy(x, 2), [_r(5)]),
    "split_with_sizes_copy": (lambda L, x: L.split_with_sizes_copy(x, [1, 2], 1), [_r(2, 3)]),
    "squeeze_copy": (lambda L, x: L.squeeze_copy(x), [_r(1, 2, 1)]),
    "t_copy": (lambda L, x: L.t_copy(x), [_r(2, 3)]),
    "transpose_copy": (lambda L, x: L.transpose_copy(x, 0, 2), [_r(2, 3, 1)]),
    "unbind_copy": (lambda L, x: L.unbind_copy(x, 1), [_r(2, 3)]),
    "unfold_copy": (lambda L, x: L.unfold_copy(x, 0, 2, 1), [_r(3)]),
    "unsqueeze_copy": (lambda L, x: L.unsqueeze_copy(x, -1), [_r(2)]),
    "view_copy": (lambda L, x: L.view_copy(x, (3, 2)), [_r(2, 3)]),
    "take_nan": (lambda L, x, i: L.take(x, i), [np.array([np.nan, np.inf, 1.0]), _i(0, 1, 0)]),
    "take_empty": (lambda L, x, i: L.take(x, i), [_r(3), np.zeros((0, 2), dtype=np.int64)]),
    "combinations_empty": (lambda L, x: L.combinations(x), [_r(0)]),
    "combinations_short": (lambda L, x: L.combinations(x, 3), [_r(2)]),
    "meshgrid_empty": (lambda L, x, y: L.meshgrid(x, y, indexing="ij"), [_r(0), _r(2)]),
    "block_diag_empty_block": (lambda L, x, y: L.block_diag(x, y), [_r(0, 3), _r(2, 1)]),
    "diag_empty": (lambda L, x: L.diag(x), [_r(0)]),
    "repeat_interleave_zero": (lambda L, x: L.repeat_interleave(x, 0, 0), [_r(2, 2)]),
    "unfold_size0": (lambda L, x: x.unfold(0, 0, 1), [_r(3)]),
    "unfold_empty": (lambda L, x: x.unfold(1, 2, 1), [_r(0, 3)]),
    "rot90_empty": (lambda L, x: L.rot90(x), [_r(0, 2)]),
    "masked_select_nan": (
        lambda L, x: L.masked_select(x, x == x),
        [np.array([np.nan, 1.0, np.inf])],
    ),
    "empty_input": (lambda L, x: L.hstack([x, x]), [_r(0)]),
    "diag_embed_empty": (lambda L, x: L.diag_embed(x), [_r(2, 0)]),
    "tensor_split_empty": (lambda L, x: L.tensor_split(x, 3), [_r(0, 2)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name: str) -> None:
    fn, arrays = CASES[name]
    compare(torch, fn, arrays)


GRADCHECK = [
    "movedim_tuple",
    "tensor_split_idx",
    "rot90",
    "diag_vec_off",
    "diag_embed_dims",
    "block_diag",
    "meshgrid_xy",
    "combinations",
    "take",
    "take_along_dim_bcast",
    "unfold_step",
    "as_strided_overlap",
    "repeat_interleave_tensor",
    "masked_select",
    "sum_to_size",
]


@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck(name: str) -> None:
    gradcheck_case(*CASES[name])


@pytest.mark.parametrize(
    "dts",
    [
        ("int64", "float32"),
        ("bool", "int64"),
        ("float16", "int64"),
        ("uint8", "int8"),
        ("float32", "float64"),
        ("bool", "bool"),
    ],
)
@pytest.mark.parametrize("fn", ["cat", "stack", "hstack", "vstack", "dstack", "column_stack"])
def test_joins_promote_as_torch(fn: str, dts: tuple[str, str]) -> None:
    """torch's joins promote by category (an int64 with a float32 is float32), not as NumPy."""
    got, want = (getattr(L, fn)([L.ones(2, dtype=getattr(L, d)) for d in dts]) for L in (ag, torch))
    assert str(got.dtype) == str(want.dtype).replace("torch.", "")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_block_diag_and_meshgrid_dtypes() -> None:
    for L in (ag, torch):
        with pytest.raises(RuntimeError, match="meshgrid expects all tensors to have the same"):
            L.meshgrid(L.ones(2), L.ones(2, dtype=L.int64), indexing="ij")
    got = ag.block_diag(ag.ones(1, dtype=ag.int64), ag.ones(1, 1))
    want = torch.block_diag(torch.ones(1, dtype=torch.int64), torch.ones(1, 1))
    assert str(got.dtype) == str(want.dtype).replace("torch.", "")
