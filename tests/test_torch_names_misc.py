"""torch's smaller spellings: layout= and memory_format= on the factories and conversions,
Tensor.layout, const_data_ptr, ag.rsub, ag.is_inference, ``t == None``, ``&``/``|``/``~`` on
integers, ``t.flip(dims=...)``, writes into empty tensors; against torch where installed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag


def _torch() -> Any:
    return pytest.importorskip("torch", reason="compares with torch (pip install torch)")


@pytest.mark.parametrize(
    "make",
    [
        lambda L: L.zeros(2, 3, layout=L.strided),
        lambda L: L.ones(2, layout=L.strided, pin_memory=False),
        lambda L: L.empty(2, 3, memory_format=L.contiguous_format).zero_(),
        lambda L: L.full((2,), 3.0, layout=L.strided),
        lambda L: L.zeros_like(L.ones(2, 2), memory_format=L.preserve_format),
        lambda L: L.ones_like(L.ones(2, 2), layout=L.strided),
        lambda L: L.full_like(L.ones(2), 5.0, memory_format=L.preserve_format),
        lambda L: L.ones(2, 3).contiguous(memory_format=L.contiguous_format),
        lambda L: L.ones(2, 3).clone(memory_format=L.preserve_format),
        lambda L: L.ones(2, 3).to(memory_format=L.contiguous_format),
        lambda L: L.ones(1, 2, 3, 3).contiguous(memory_format=L.channels_last),
    ],
)
def test_layout_and_memory_format_arguments_keep_the_values(make: Callable[[Any], Any]) -> None:
    torch = _torch()
    np.testing.assert_array_equal(make(ag).numpy(), make(torch).numpy())


def test_a_sparse_layout_or_a_wrong_format_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="only strided"):
        ag.zeros(2, layout=ag.sparse_coo)
    with pytest.raises(TypeError, match="memory_format must be a memory format, not str"):
        ag.ones(2).contiguous(memory_format="channels_last")


def test_tensor_facts() -> None:
    t = ag.ones(2, 3)
    assert t.layout is ag.strided
    assert t.const_data_ptr() == t.data_ptr()
    assert not ag.is_inference(t)
    with ag.inference_mode():
        assert ag.is_inference(ag.ones(1))


def test_rsub() -> None:
    torch = _torch()
    for L in (torch, ag):
        x, y = L.tensor([1.0, 2.0]), L.tensor([3.0, 5.0])
        assert L.rsub(x, y, alpha=2).tolist() == [1.0, 1.0]
        assert L.rsub(x, 3).tolist() == [2.0, 1.0]


@pytest.mark.parametrize("other", [None, "a", [1.0, 2.0], object()])
def test_comparing_with_something_not_a_tensor_is_unequal(other: Any) -> None:
    torch = _torch()
    t, tt = ag.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    assert (t == other) is (tt == other) is False
    assert (t != other) is (tt != other) is True


def test_bitwise_operators_on_integers_and_bools() -> None:
    torch = _torch()
    for op in (lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b, lambda a, b: ~a):
        for dt in ("int64", "uint8", "bool"):
            a = np.array([5, 3, 12, 0]).astype(dt)
            b = np.array([3, 6, 10, 1]).astype(dt)
            got = op(ag.tensor(a), ag.tensor(b))
            want = op(torch.tensor(a), torch.tensor(b))
            assert got.tolist() == want.tolist()
            assert str(got.dtype) == str(want.dtype).removeprefix("torch.")
    with pytest.raises((RuntimeError, NotImplementedError)):
        ag.ones(2) & ag.ones(2)


def test_flip_takes_dims_by_keyword() -> None:
    x = ag.arange(6).reshape(2, 3)
    assert x.flip(dims=(0,)).tolist() == [[3, 4, 5], [0, 1, 2]]
    assert x.flip(1).tolist() == x.flip(dims=[1]).tolist()
    with pytest.raises(TypeError, match="unexpected keyword argument 'axis'"):
        x.flip(axis=0)


def test_in_place_writes_into_empty_tensors() -> None:
    torch = _torch()
    for L in (torch, ag):
        x = L.empty(0, 3)
        x.copy_(L.zeros(0, 3))
        x.fill_(1.0)
        assert tuple(x.shape) == (0, 3)
