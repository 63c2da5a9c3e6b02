"""Data-parallel training: each rank runs the model on its share of the batch, and the
gradients are averaged across ranks during the backward.

NOTE [Data-parallel buckets]
``DataParallel(model, pg)`` makes every rank start from rank 0's parameters and buffers
(broadcast once, at construction), then, in every backward that reaches the parameters,
averages their gradients across the ranks, as torch's ``DistributedDataParallel`` does:
  - buckets: the parameters that require grad, in reverse registration order (about the
    order a backward reaches them), are cut into buckets of about ``bucket_cap_mb``, the
    first at most FIRST_BUCKET_MB (as torch's: the gradients ready first start moving
    early, so even a model smaller than one bucket overlaps some communication); each
    parameter's post-accumulate-grad hook marks it ready, and the bucket's last one starts the
    bucket's all-reduce (its gradients flattened into one tensor) while the backward goes on
    with the layers below: communication overlaps computation;
  - the end: a final callback of the backward (``ag.autograd.queue_callback``) starts the
    buckets no gradient reached (an unused parameter contributes zeros), awaits every bucket,
    and writes each mean into its parameters' ``.grad``. The backward (``await
    ag.backward``, ``loss.backward()``) returns only then, so ``optimizer.step()`` right after
    it sees the averaged gradients on every rank;
  - matching: each collective is keyed by (this DataParallel's number in its group, the step,
    the bucket), and buckets start in their order on every rank (a bucket filled early waits
    for the ones before it), which gloo's ordered path needs. Every rank must run the same
    number of synchronised backwards, one at a time per DataParallel (one that fails leaves
    the ranks out of step: make a new group). ``with ddp.no_sync():`` skips the averaging for
    the backwards inside it (gradient accumulation); the next synchronised backward averages
    the accumulated ``.grad``;
  - exactness: the mean is summed in rank order, so every rank gets the same bits and the
    replicas stay identical; with equal shares of a batch and a loss that averages over it,
    the result equals one process's gradient of the whole batch up to floating-point
    rounding (tests/distributed: 1e-12 in float64).
Only the parameters cross: buffers (batch-norm statistics) stay each rank's own after the
initial broadcast. Gradients of CUDA tensors are sent through the host.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Final

from .. import autograd, cat, no_grad, zeros
from .._tensor import Tensor
from ..nn import Module
from .group import ProcessGroup, ReduceOp

__all__ = ["DataParallel"]

DEFAULT_BUCKET_CAP_MB: Final = 25.0
FIRST_BUCKET_MB: Final = 1.0


class _Bucket:
    __slots__ = ("index", "params", "pending", "ready")

    def __init__(self, index: int, params: list[Tensor]) -> None:
        self.index = index
        self.params = params
        self.ready = 0
        self.pending: Any = None  # the bucket's collective, once started


class DataParallel(Module):
    """``module`` replicated over the ranks of ``pg``: gradients averaged across them in each
    backward (See NOTE [Data-parallel buckets]).

    Args:
        module: the model, built the same way on every rank.
        pg: this rank's process group (``group.join(rank)``).
        bucket_cap_mb: the size of a bucket of gradients sent together.
        broadcast_parameters: start from rank 0's parameters and buffers (blocking until every
            rank has constructed its DataParallel).
    """

    def __init__(
        self,
        module: Module,
        pg: ProcessGroup,
        *,
        bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB,
        broadcast_parameters: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel wraps a Module, got {type(module).__name__}")
        if not isinstance(pg, ProcessGroup):
            raise TypeError(
                f"pg must be a ProcessGroup (group.join(rank)), got {type(pg).__name__}"
            )
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb!r}")
        self.module = module
        self._pg = pg
        self._id = pg.next_id()
        self._step = 0
        self._sync = True
        self._armed = False
        self._next = 0  # the first bucket not started in this backward
        self._lock = threading.Lock()  # hooks may run on the engine's compute threads
        params: list[Tensor] = [p for p in module.parameters() if p.requires_grad]
        first = min(bucket_cap_mb, FIRST_BUCKET_MB)
        self._buckets = _buckets(params[::-1], first * 2**20, bucket_cap_mb * 2**20)
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}
        self._handles = [
            p.register_post_accumulate_grad_hook(self._ready)
            for b in self._buckets
            for p in b.params
        ]
        if broadcast_parameters:
            self._broadcast_state()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @property
    def process_group(self) -> ProcessGroup:
        return self._pg

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backwards inside accumulate ``.grad`` locally, without averaging."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    # ------------------------------------------------------------------ internals
    def _broadcast_state(self) -> None:
        pg = self._pg
        with no_grad():
            for name, t in [*self.module.named_parameters(), *self.module.named_buffers()]:
                key = (self._id, "init", name)
                got = pg.broadcast(key, t, src=0)
                if pg.rank != 0:
                    t.copy_(got.to(t.device))

    def _ready(self, p: Tensor) -> None:
        """A parameter's post-accumulate-grad hook: its ``.grad`` is final for this backward."""
        if not self._sync:
            return
        b = self._bucket_of[id(p)]
        with self._lock:
            arm = not self._armed
            self._armed = True
            b.ready += 1
            # Buckets start in their order on every rank (gloo's path is ordered): a bucket
            # filled early waits for the ones before it.
            start = []
            while self._next < len(self._buckets):
                nb = self._buckets[self._next]
                if nb.ready < len(nb.params):
                    break
                start.append(nb)
                self._next += 1
        if arm:
            autograd.queue_callback(self._finish)
        for nb in start:
            self._start(nb)

    def _start(self, b: _Bucket) -> None:
        with no_grad():
            flat = cat([_grad_or_zeros(p).reshape(-1).cpu() for p in b.params])
        b.pending = self._pg.start((self._id, self._step, b.index), flat, ReduceOp.MEAN)

    async def _finish(self) -> None:
        """The backward's final callback: average what is left, then write every mean."""
        try:
            with self._lock:
                rest, self._next = self._buckets[self._next :], len(self._buckets)
            for b in rest:
                self._start(b)
            for b in self._buckets:
                _scatter(await b.pending, b.params)
        finally:
            for b in self._buckets:
                b.pending, b.ready = None, 0
            self._armed = False
            self._next = 0
            self._step += 1

    def __repr__(self) -> str:
        return (
            f"DataParallel(rank={self._pg.rank}, world_size={self._pg.world_size}, "
            f"buckets={len(self._buckets)}, module={self.module!r})"
        )


def _buckets(params: list[Tensor], first_bytes: float, cap_bytes: float) -> list[_Bucket]:
    out: list[_Bucket] = []
    current: list[Tensor] = []
    size = 0
    for p in params:
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= (cap_bytes if out else first_bytes):
            out.append(_Bucket(len(out), current))
            current, size = [], 0
    if current:
        out.append(_Bucket(len(out), current))
    return out


def _grad_or_zeros(p: Tensor) -> Tensor:
    g = p.grad
    return zeros(p.shape, dtype=p.dtype, device=p.device) if g is None else g


def _scatter(mean: Tensor, params: list[Tensor]) -> None:
    """Write each parameter's slice of a bucket's mean into its ``.grad``."""
    offset = 0
    for p in params:
        n = p.numel()
        g = mean[offset : offset + n].view(p.shape).to(p.device)
        if g.dtype != p.dtype:  # a bucket of several dtypes is sent in the widest
            g = g.to(p.dtype)
        offset += n
        if p.grad is None:
            p.grad = g
        else:
            with no_grad():
                p.grad.copy_(g)
