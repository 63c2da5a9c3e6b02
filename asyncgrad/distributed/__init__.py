"""asyncgrad across processes: process groups, data-parallel training, and Ray.

``import asyncgrad.distributed as agd``:
  - ``agd.local_group(n)`` / ``agd.new_group(n)``: a group of ``n`` ranks (threads of this
    process, or Ray actors meeting at a Ray actor); each rank calls ``group.join(rank)`` for
    its ``ProcessGroup`` (See NOTE [Process groups] in asyncgrad/distributed/group.py);
  - ``agd.DataParallel(model, pg)``: gradients averaged across the ranks during the backward,
    bucket by bucket (See NOTE [Data-parallel buckets] in data_parallel.py);
  - ``agd.init(...)``: ``ray.init`` with asyncgrad's serializers in every process (See NOTE
    [Tensors through Ray] in ray_group.py).
Ray is an extra (``pip install "asyncgrad[ray]"``), imported on first use.
"""

from __future__ import annotations

from . import serve
from .data_parallel import DataParallel
from .group import Group, Pending, ProcessGroup, ReduceOp, local_group
from .ray_group import GlooGroup, RayGroup, init, new_group, register_serializers
from .remote import Context, RemoteModule, context

__all__ = [
    "Context",
    "DataParallel",
    "GlooGroup",
    "Group",
    "Pending",
    "ProcessGroup",
    "RayGroup",
    "ReduceOp",
    "RemoteModule",
    "context",
    "init",
    "local_group",
    "new_group",
    "register_serializers",
    "serve",
]
