"""ag.utils.data: ``Dataset``, ``TensorDataset``, ``random_split`` and a single-process
``DataLoader`` with torch's batching, shuffling and ``default_collate``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from .. import backend, dtypes, ops
from .._tensor import Tensor
from ..ops import Generator

__all__ = [
    "DataLoader",
    "Dataset",
    "Subset",
    "TensorDataset",
    "default_collate",
    "random_split",
]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: subclasses define ``__getitem__`` (and ``__len__`` for a loader)."""

    def __getitem__(self, index: int) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")


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


_COLLATE_ERROR = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def default_collate(batch: Sequence[Any]) -> Any:
    """torch's ``default_collate``: tensors, NumPy arrays and NumPy scalars are stacked along a
    new first dim, Python floats become a float64 tensor and ints an int64 one, strings stay a
    list; dicts, tuples (which come back as lists, as in torch), lists and named tuples are
    collated field by field."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return ops.stack(list(batch), 0)
    if backend.is_array(elem) or (
        type(elem).__module__ == "numpy" and hasattr(elem, "dtype") and hasattr(elem, "shape")
    ):
        if elem.dtype.kind in "USO":
            raise TypeError(_COLLATE_ERROR.format(elem.dtype))
        return ops.stack([ops.as_tensor(backend.asarray(b)) for b in batch], 0)
    if isinstance(elem, bool):
        return ops.tensor(list(batch), dtype=dtypes.bool_)
    if isinstance(elem, int):
        return ops.tensor(list(batch), dtype=dtypes.int64)
    if isinstance(elem, float):
        return ops.tensor(list(batch), dtype=dtypes.float64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a named tuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch, strict=True)))
    if isinstance(elem, Sequence):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch, strict=True)]
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


class DataLoader(Generic[T_co]):
    """Batches of a map-style dataset, in one process.

    ``shuffle=True`` draws a new order each epoch (each ``iter()``) from ``generator`` (an
    ``ag.Generator``) or the default generator, so ``ag.manual_seed`` makes it repeatable.
    ``batch_size=None`` yields the samples one by one, uncollated."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = False,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        *,
        generator: Generator | None = None,
    ) -> None:
        if num_workers != 0:
            raise ValueError(
                f"num_workers={num_workers}: asyncgrad's DataLoader loads in the calling process "
                "only; use num_workers=0"
            )
        if sampler is not None or batch_sampler is not None:
            raise ValueError("sampler and batch_sampler are not supported; use shuffle=")
        if batch_size is not None and (isinstance(batch_size, bool) or int(batch_size) <= 0):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive with "
                "drop_last"
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = drop_last
        self.num_workers = 0
        self.generator = generator
        self.collate_fn = collate_fn or (default_collate if batch_size is not None else None)

    def _order(self) -> list[int]:
        n = len(self.dataset)
        if not self.shuffle:
            return list(range(n))
        gen = self.generator or ops.default_generator
        order: list[int] = ops.randperm(n, generator=gen, device=gen.device).tolist()
        return order

    def __iter__(self) -> Iterator[Any]:
        order = self._order()
        if self.batch_size is None:
            for i in order:
                yield self.dataset[i]
            return
        bs = self.batch_size
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            if len(idx) < bs and self.drop_last:
                return
            samples = [self.dataset[i] for i in idx]
            yield self.collate_fn(samples) if self.collate_fn is not None else samples

    def __len__(self) -> int:
        n = len(self.dataset)
        if self.batch_size is None:
            return n
        if self.drop_last:
            return n // self.batch_size
        return math.ceil(n / self.batch_size)
