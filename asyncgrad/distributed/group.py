"""Process groups: ranks that reduce and broadcast tensors together.

NOTE [Process groups]
A group is ``world_size`` ranks, usually one per process (a Ray actor each), that meet at a
rendezvous: every rank contributes a tensor under a key, and once all have, each gets the
result (the mean or sum of the contributions, or the source rank's). Contributions are matched
by key, not by arrival order, so ranks may start their collectives in any order (a backward
finishes its buckets in an order that depends on scheduling) and a key never meets another's
data. The sum runs in rank order, left to right, so every rank receives the same bits.

A ``Group`` (what ``new_group`` / ``local_group`` return) describes the rendezvous and is
picklable: create it once, pass it to each rank, and there call ``group.join(rank)`` for the
``ProcessGroup`` that rank uses. Two rendezvous exist:
  - ``new_group`` (Ray): an async Ray actor holds the rendezvous; tensors travel through Ray's
    object store (each rank's contribution in, the result out to each rank: a star, so the
    actor's host moves ``2 * world_size`` times the bytes of each collective).
  - ``local_group``: ranks are threads of this process, for tests and for trying a training
    script before a cluster; contributions are pickled on the way in and out, as they would be
    between processes, so nothing is shared by accident.
A collective started from any thread returns a ``Pending``: ``await pending`` (async) or
``pending.result()`` (sync) gives its result. A rank
that never contributes (it failed, or died) would leave the others waiting: after the group's
``timeout_s`` each waiting rank's collective fails with a ``TimeoutError`` naming the ranks
that did not arrive, and the key is dropped. The Ray rendezvous enforces the deadline itself
(its actor fails the call); the local one, from the waiting ranks: no timer thread is left
behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import pickle
import threading
import time
from collections.abc import Generator, Hashable
from typing import Any, Final

from .. import no_grad
from .._tensor import Tensor

__all__ = ["Group", "Pending", "ProcessGroup", "ReduceOp", "local_group"]

DEFAULT_TIMEOUT_S: Final = 300.0


class ReduceOp:
    """What a collective computes from the ranks' contributions."""

    SUM: Final = "sum"
    MEAN: Final = "mean"  # the sum, divided by world_size
    BROADCAST: Final = "broadcast"  # the contribution of one rank (``src``)


_OPS: Final = (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.BROADCAST)


def combine(parts: list[Any], op: str, src: int) -> Any:
    """The result of a collective from the contributions in rank order."""
    if op == ReduceOp.BROADCAST:
        return parts[src]
    with no_grad():
        total = parts[0].clone()
        for p in parts[1:]:
            total.add_(p)
        if op == ReduceOp.MEAN:
            total.div_(len(parts))
    return total


class _Meeting:
    __slots__ = ("deadline", "future", "op", "parts", "src", "waiting")

    def __init__(self, world_size: int, op: str, src: int, deadline: float) -> None:
        self.parts: list[Any] = [None] * world_size
        self.waiting = world_size
        self.op, self.src, self.deadline = op, src, deadline
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


class Rendezvous:
    """Matches the ranks' contributions by key (thread-safe): the state of one group, held by
    the process every rank can reach (See NOTE [Process groups])."""

    def __init__(self, world_size: int, timeout_s: float) -> None:
        self.world_size = world_size
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._meetings: dict[Hashable, _Meeting] = {}

    def contribute(
        self, key: Hashable, rank: int, value: Any, op: str, src: int
    ) -> concurrent.futures.Future[Any]:
        """Add ``rank``'s contribution to the collective ``key``; the future resolves to the
        result once every rank has contributed."""
        with self._lock:
            self._expire()
            m = self._meetings.get(key)
            if m is None:
                m = _Meeting(self.world_size, op, src, time.monotonic() + self.timeout_s)
                self._meetings[key] = m
            elif (m.op, m.src) != (op, src):
                raise ValueError(
                    f"collective {key!r}: rank {rank} asked for {op} (src {src}), another rank "
                    f"for {m.op} (src {m.src})"
                )
            if m.parts[rank] is not None:
                raise RuntimeError(f"collective {key!r}: rank {rank} contributed twice")
            m.parts[rank] = value
            m.waiting -= 1
            if m.waiting:
                return m.future
            del self._meetings[key]
        try:
            m.future.set_result(combine(m.parts, op, src))
        except Exception as e:
            m.future.set_exception(e)
        return m.future

    def expire(self, key: Hashable | None = None) -> None:
        """Fail the collective ``key`` if it still waits for ranks (with ``None``, every one
        past its deadline; each call to ``contribute`` does that too)."""
        with self._lock:
            self._expire(key)

    def _expire(self, key: Hashable | None = None) -> None:
        now = time.monotonic()
        if key is None:
            late = [k for k, m in self._meetings.items() if m.deadline <= now]
        else:
            late = [key] if key in self._meetings else []
        for k in late:
            m = self._meetings.pop(k)
            missing = [r for r, p in enumerate(m.parts) if p is None]
            m.future.set_exception(
                TimeoutError(
                    f"collective {k!r}: ranks {missing} of {self.world_size} did not contribute "
                    f"within {self.timeout_s} s (failed, died, or never reached it)"
                )
            )

    async def wait(self, key: Hashable, future: concurrent.futures.Future[Any]) -> Any:
        """The result ``future`` gives once collective ``key`` is done, failing the collective
        at its deadline if ranks are still missing then."""
        waiting = asyncio.wrap_future(future)
        _, late = await asyncio.wait({waiting}, timeout=self.timeout_s)
        if late:
            self.expire(key)
        return await waiting

    def result(self, key: Hashable, future: concurrent.futures.Future[Any]) -> Any:
        """``wait``, blocking."""
        _, late = concurrent.futures.wait({future}, timeout=self.timeout_s)
        if late:
            self.expire(key)
        return future.result()

    def pending(self) -> int:
        """How many collectives are waiting for ranks."""
        with self._lock:
            return len(self._meetings)


class ProcessGroup:
    """One rank's view of a group: start collectives on tensors, from any thread."""

    def __init__(self, rank: int, group: Group) -> None:
        self.rank = rank
        self.world_size = group.world_size
        self.timeout_s = group.timeout_s
        self._group = group
        self._ids = itertools.count()

    def next_id(self) -> int:
        """A number for an object that runs collectives on this group (a ``DataParallel``):
        the same on every rank that creates its objects in the same order."""
        return next(self._ids)

    def start(self, key: Hashable, tensor: Tensor, op: str = ReduceOp.SUM, src: int = 0) -> Pending:
        """Start the collective ``key`` with this rank's ``tensor``; ``await`` what it returns
        (or call its ``result()``) for the result, a new tensor (``tensor`` is left as it
        is)."""
        if not isinstance(tensor, Tensor):
            raise TypeError(f"collective {key!r}: expected a Tensor, got {type(tensor).__name__}")
        if op not in _OPS:
            raise ValueError(f"collective {key!r}: unknown op {op!r}, expected one of {_OPS}")
        if not 0 <= src < self.world_size:
            raise ValueError(f"collective {key!r}: src {src} is not a rank of {self.world_size}")
        if tensor.requires_grad:
            tensor = tensor.detach()
        return self._group._start(key, self.rank, tensor, op, src)

    def all_reduce(self, key: Hashable, tensor: Tensor, op: str = ReduceOp.SUM) -> Tensor:
        """The sum (or mean) of every rank's ``tensor``, blocking until all have contributed."""
        return self.start(key, tensor, op).result()

    def broadcast(self, key: Hashable, tensor: Tensor, src: int = 0) -> Tensor:
        """Rank ``src``'s ``tensor`` (of the same shape on every rank), blocking."""
        return self.start(key, tensor, ReduceOp.BROADCAST, src).result()


class Pending:
    """A started collective: ``await`` it, or call ``result()`` from sync code."""

    __slots__ = ("key",)

    def __init__(self, key: Hashable) -> None:
        self.key = key

    def done(self) -> bool:
        """Whether the result is in (or the collective failed)."""
        raise NotImplementedError

    def result(self) -> Tensor:
        """The result, blocking until every rank has contributed."""
        raise NotImplementedError

    def __await__(self) -> Generator[Any, None, Tensor]:
        return self._wait().__await__()

    async def _wait(self) -> Tensor:
        raise NotImplementedError


class _LocalPending(Pending):
    __slots__ = ("_future", "_group")

    def __init__(
        self, group: LocalGroup, key: Hashable, future: concurrent.futures.Future[Tensor]
    ) -> None:
        super().__init__(key)
        self._group, self._future = group, future

    def done(self) -> bool:
        return self._future.done()

    async def _wait(self) -> Tensor:
        result: Tensor = await self._group.rendezvous.wait(self.key, self._future)
        return result

    def result(self) -> Tensor:
        result: Tensor = self._group.rendezvous.result(self.key, self._future)
        return result


def check_group_args(world_size: Any, timeout_s: Any) -> None:
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a number > 0, got {timeout_s!r}")


class Group:
    """A picklable description of a group: pass it to each rank, which calls ``join(rank)``."""

    def __init__(self, world_size: int, timeout_s: float) -> None:
        check_group_args(world_size, timeout_s)
        self.world_size = world_size
        self.timeout_s = float(timeout_s)

    def join(self, rank: int) -> ProcessGroup:
        """The ``ProcessGroup`` of ``rank`` (0 <= rank < world_size)."""
        if type(rank) is not int or not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be an int in [0, {self.world_size}), got {rank!r}")
        return ProcessGroup(rank, self)

    def _start(self, key: Hashable, rank: int, tensor: Tensor, op: str, src: int) -> Pending:
        raise NotImplementedError


class LocalGroup(Group):
    """Ranks that are threads of this process (See NOTE [Process groups])."""

    def __init__(self, world_size: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(world_size, timeout_s)
        self.rendezvous = Rendezvous(world_size, timeout_s)

    def __reduce__(self) -> Any:
        raise TypeError("a local_group lives in one process: use new_group() across processes")

    def _start(self, key: Hashable, rank: int, tensor: Tensor, op: str, src: int) -> Pending:
        sent = pickle.loads(pickle.dumps(tensor))  # as a process boundary would
        inner = self.rendezvous.contribute(key, rank, sent, op, src)
        out: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def deliver(f: concurrent.futures.Future[Any]) -> None:
            e = f.exception()
            if e is not None:
                out.set_exception(e)
            else:
                out.set_result(pickle.loads(pickle.dumps(f.result())))

        inner.add_done_callback(deliver)
        return _LocalPending(self, key, out)


def local_group(world_size: int, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Group:
    """A group whose ranks are threads of this process (See NOTE [Process groups])."""
    return LocalGroup(world_size, timeout_s)
