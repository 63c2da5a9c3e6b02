"""``ag.utils.data.distributed``: ``DistributedSampler``, each replica's share of a dataset's
indices, as torch's (with ``num_replicas`` and ``rank`` given: asyncgrad has no default process
group to read them from)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

from ... import ops
from ...ops import Generator
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler[int]):
    """Replica ``rank``'s indices of ``dataset``: every ``num_replicas``-th index of one order
    shared by all replicas (shuffled with ``seed + epoch`` when ``shuffle``, see
    ``set_epoch``), padded by repeating the first indices (or cut, with ``drop_last``) so each
    replica gets the same number."""

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None or rank is None:
            raise ValueError(
                "Default process group has not been initialized, please make sure to call "
                "init_process_group. (asyncgrad has no default process group: pass "
                "num_replicas= and rank=)"
            )
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            g = Generator().manual_seed(self.seed + self.epoch)
            indices: list[int] = ops.randperm(n, generator=g).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad <= len(indices):
                indices += indices[:pad]
            else:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[: self.total_size]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Shuffle differently in epoch ``epoch`` (the same on every replica)."""
        self.epoch = epoch
