"""``ag.utils.data``: datasets, samplers and a single-process ``DataLoader``, with torch's
names and modules (``dataset``, ``sampler``, ``dataloader``, ``distributed``)."""

from __future__ import annotations

from . import dataloader, dataset, distributed, sampler
from .dataloader import DataLoader, default_collate, default_convert, get_worker_info
from .dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from .distributed import DistributedSampler
from .sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "dataloader",
    "dataset",
    "default_collate",
    "default_convert",
    "distributed",
    "get_worker_info",
    "random_split",
    "sampler",
]
