"""``ag.nn.parallel``: torch's single-process parallel wrappers, as they behave in one CPU
process. ``DataParallel`` with no GPUs wraps the module and calls it (its state dict's keys
gain the ``module.`` prefix, as torch's); ``DistributedDataParallel`` needs torch's default
process group, which asyncgrad does not have: data-parallel training across processes is
``ag.distributed.DataParallel(model, pg)``, over an explicit process group."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .modules import Module

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    """Calls ``module`` on the whole input, in this process.

    torch splits a batch across its GPUs; asyncgrad runs each forward on the device of its
    inputs, so ``DataParallel`` only wraps (``device_ids`` is kept, ``output_device`` and ``dim``
    are accepted for torch's signature). Use ``ag.distributed.DataParallel`` to train across
    processes."""

    def __init__(
        self,
        module: Module,
        device_ids: Sequence[Any] | None = None,
        output_device: Any = None,
        dim: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel wraps a Module, got {type(module).__name__}")
        self.module = module
        self.device_ids: list[Any] = [] if device_ids is None else list(device_ids)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)


class DistributedDataParallel(Module):
    """torch's ``DistributedDataParallel`` reads torch's default process group; asyncgrad has
    none, so constructing one raises torch's ValueError. Use ``ag.distributed.DataParallel(model,
    pg)`` with a group from ``ag.distributed``."""

    def __init__(self, module: Module, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        raise ValueError(
            "Default process group has not been initialized, please make sure to call "
            "init_process_group. (asyncgrad has no default process group: use "
            "ag.distributed.DataParallel(model, pg) with an explicit process group)"
        )
