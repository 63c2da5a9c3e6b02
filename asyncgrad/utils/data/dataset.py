"""``ag.utils.data.dataset``: map-style and iterable datasets, ``TensorDataset``, ``Subset``,
``ConcatDataset`` and ``random_split``, as torch's."""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from ... import ops
from ..._tensor import Tensor
from ...ops import Generator

__all__ = [
    "ChainDataset",
    "ConcatDataset",
    "Dataset",
    "IterableDataset",
    "Subset",
    "TensorDataset",
    "random_split",
]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: subclasses define ``__getitem__`` (and ``__len__`` for a loader)."""

    def __getitem__(self, index: int) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset read by iterating it: subclasses define ``__iter__``."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: Dataset[T_co]) -> ChainDataset:  # type: ignore[override]
        return ChainDataset([self, other])


class ConcatDataset(Dataset[T_co]):
    """The samples of several map-style datasets, one after another."""

    def __init__(self, datasets: Iterable[Dataset[Any]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes: list[int] = []
        total = 0
        for d in self.datasets:
            total += len(d)  # type: ignore[arg-type]
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> T_co:
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        i = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[i - 1] if i > 0 else 0
        return self.datasets[i][idx - start]  # type: ignore[no-any-return]


class ChainDataset(IterableDataset[Any]):
    """Several iterable datasets, iterated one after another."""

    def __init__(self, datasets: Iterable[Dataset[Any]]) -> None:
        self.datasets = list(datasets)

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)  # type: ignore[arg-type, misc]


class TensorDataset(Dataset[tuple[Tensor, ...]]):
    """Sample ``i`` is ``tuple(t[i] for t in tensors)``; the tensors share their first dim."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].shape[0] if tensors[0].ndim else None
        if any(t.ndim == 0 or t.shape[0] != n for t in tensors):
            sizes = [tuple(t.shape)[:1] for t in tensors]
            raise ValueError(f"Size mismatch between tensors: first dims {sizes}")
        self.tensors = tensors

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Any, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index: int) -> T_co:
        return self.dataset[self.indices[index]]  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(
    dataset: Any, lengths: Sequence[int | float], generator: Generator | None = None
) -> list[Subset[Any]]:
    """Split ``dataset`` into non-overlapping random subsets of the given ``lengths``, as
    torch's: ints that sum to ``len(dataset)``, or fractions that sum to 1 (each subset gets
    ``floor(n * fraction)`` samples and the remainder goes one by one to the first subsets).
    The permutation comes from ``generator`` or the default generator."""
    n = len(dataset)
    sizes: list[int]
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        if any(not 0 <= f <= 1 for f in lengths):
            raise ValueError("Fractions in lengths must each be between 0 and 1")
        sizes = [math.floor(n * f) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.",
                    UserWarning,
                    stacklevel=2,
                )
    else:
        if any(isinstance(k, float) and not k.is_integer() for k in lengths):
            raise ValueError(
                f"lengths {list(lengths)}: give integer lengths that sum to the dataset's "
                f"length ({n}), or fractions that sum to 1"
            )
        sizes = [int(k) for k in lengths]
        if any(k < 0 for k in sizes):
            raise ValueError(f"lengths must be non-negative, got {list(lengths)}")
    if sum(sizes) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    gen = generator or ops.default_generator
    order: list[int] = ops.randperm(n, generator=gen, device=gen.device).tolist()
    out: list[Subset[Any]] = []
    start = 0
    for size in sizes:
        out.append(Subset(dataset, order[start : start + size]))
        start += size
    return out
