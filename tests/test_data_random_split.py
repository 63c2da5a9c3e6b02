"""utils.data.random_split: lengths as ints or fractions (torch's rounding), a generator for
repeatable splits, and torch's errors."""

from __future__ import annotations

from typing import Any

import pytest

import asyncgrad as ag
from asyncgrad.utils.data import DataLoader, Subset, TensorDataset, random_split


def _flat(parts: list[Subset[Any]]) -> list[int]:
    return [i for p in parts for i in p.indices]


def test_random_split_with_int_lengths_covers_the_dataset_once() -> None:
    ds = list(range(10))
    parts = random_split(ds, [3, 7])
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(_flat(parts)) == ds
    assert [parts[0][i] for i in range(3)] == list(parts[0].indices)


@pytest.mark.parametrize(
    ("fractions", "sizes"),
    [
        ([0.5, 0.5], [5, 5]),
        ([0.3, 0.3, 0.4], [3, 3, 4]),
        ([0.33, 0.33, 0.34], [4, 3, 3]),
        ([0.25, 0.25, 0.5], [3, 2, 5]),
    ],
)
def test_random_split_with_fractions_rounds_as_torch(
    fractions: list[float], sizes: list[int]
) -> None:
    parts = random_split(range(10), fractions)
    assert [len(p) for p in parts] == sizes
    assert sorted(_flat(parts)) == list(range(10))


def test_random_split_fractions_match_torch_sizes() -> None:
    torch = pytest.importorskip("torch", reason="torch's random_split is the reference")
    for n, fr in ((10, [0.3, 0.3, 0.4]), (7, [0.1, 0.2, 0.7]), (13, [0.5, 0.25, 0.25])):
        ours = [len(p) for p in random_split(range(n), fr)]
        ref = [len(p) for p in torch.utils.data.random_split(range(n), fr)]
        assert ours == ref


def test_random_split_is_repeatable_with_a_generator() -> None:
    a = random_split(range(20), [5, 15], generator=ag.Generator().manual_seed(42))
    b = random_split(range(20), [5, 15], generator=ag.Generator().manual_seed(42))
    assert _flat(a) == _flat(b)
    ag.manual_seed(1)
    c = random_split(range(20), [0.5, 0.5])
    ag.manual_seed(1)
    assert _flat(random_split(range(20), [0.5, 0.5])) == _flat(c)


def test_random_split_of_a_tensor_dataset_feeds_a_loader() -> None:
    ds = TensorDataset(ag.arange(6.0), ag.arange(6))
    train, _ = random_split(ds, [4, 2])
    xs = [x for x, _ in DataLoader(train, batch_size=2)]
    assert sum(int(x.numel()) for x in xs) == 4


def test_random_split_errors_and_warnings() -> None:
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length"):
        random_split(range(10), [3, 3])
    with pytest.raises(ValueError, match="Fractions in lengths must each be between 0 and 1"):
        random_split(range(10), [1.5, -0.5])
    with pytest.raises(ValueError, match="give integer lengths"):
        random_split(range(10), [2.5, 7.5])
    with pytest.warns(UserWarning, match="Length of split at index 2 is 0"):
        random_split(range(2), [0.5, 0.5, 0.0])
