"""``ag.utils.data.dataloader``: a single-process ``DataLoader`` with torch's batching,
samplers and ``default_collate``; ``get_worker_info()`` is None (every sample loads in the
calling process, as in torch's main process)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ... import backend, dtypes, ops
from ..._tensor import Tensor
from ...ops import Generator
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]

T_co = TypeVar("T_co", covariant=True)


def get_worker_info() -> None:
    """None: asyncgrad's DataLoader has no worker processes (torch's answer in the main
    process)."""
    return None


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


def default_convert(data: Any) -> Any:
    """torch's ``default_convert``, the loader's collate function without batching: NumPy
    arrays and scalars become tensors (string arrays stay), containers are converted element by
    element (tuples come back as lists, as in torch), anything else is left as it is."""
    if isinstance(data, Tensor):
        return data
    if type(data).__module__ == "numpy" and type(data).__name__ not in ("str_", "bytes_"):
        if getattr(data, "dtype", None) is not None and data.dtype.kind in "USO":
            return data
        return ops.as_tensor(backend.asarray(data))
    if isinstance(data, Mapping):
        return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        return [default_convert(d) for d in data]
    return data


class DataLoader(Generic[T_co]):
    """Batches of a dataset, in one process.

    ``shuffle=True`` draws a new order each epoch (each ``iter()``) from ``generator`` (an
    ``ag.Generator``) or the default generator, so ``ag.manual_seed`` makes it repeatable;
    ``sampler`` gives the order of the indices, ``batch_sampler`` the batches themselves.
    ``batch_size=None`` yields the samples one by one, through ``default_convert``. An
    ``IterableDataset`` is read in its own order, batched as it comes."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler[Any] | Iterable[Any] | None = None,
        batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if num_workers != 0:
            raise ValueError(
                f"num_workers={num_workers}: asyncgrad's DataLoader loads in the calling process "
                "only; use num_workers=0"
            )
        if batch_size is not None and (isinstance(batch_size, bool) or int(batch_size) <= 0):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        iterable = isinstance(dataset, IterableDataset)
        if iterable and (shuffle not in (None, False) or sampler is not None):
            what = "shuffle" if sampler is None else "sampler"
            raise ValueError(
                f"DataLoader with IterableDataset: expected unspecified {what} option, but got "
                f"{what}={shuffle if sampler is None else sampler}"
            )
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive with "
                "drop_last"
            )
        if sampler is None and not iterable:
            if shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)  # type: ignore[arg-type]
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = 0
        self.generator = generator
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        auto = batch_size is not None or batch_sampler is not None
        self.collate_fn = collate_fn or (default_collate if auto else default_convert)

    @property
    def shuffle(self) -> bool:
        return isinstance(self.sampler, RandomSampler)

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self.dataset, IterableDataset):
            yield from self._iter_iterable()
            return
        if self.batch_sampler is None:
            for i in self.sampler:  # type: ignore[union-attr]
                s = self.dataset[i]
                yield s if self.collate_fn is None else self.collate_fn(s)
            return
        for idx in self.batch_sampler:
            samples = [self.dataset[i] for i in idx]
            yield self.collate_fn(samples) if self.collate_fn is not None else samples

    def _iter_iterable(self) -> Iterator[Any]:
        it = iter(self.dataset)
        if self.batch_size is None:
            for s in it:
                yield s if self.collate_fn is None else self.collate_fn(s)
            return
        batch: list[Any] = []
        for s in it:
            batch.append(s)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch) if self.collate_fn is not None else batch
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch) if self.collate_fn is not None else batch

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)  # type: ignore[arg-type]
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)  # type: ignore[arg-type]
        return len(self.sampler)  # type: ignore[arg-type]
