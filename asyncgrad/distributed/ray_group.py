"""asyncgrad on Ray: tensors between processes, and groups whose rendezvous is a Ray actor.

NOTE [Tensors through Ray]
Ray pickles what it sends (arguments, results, ``ray.put``) and hands NumPy arrays out of its
object store read-only, without a copy. A Tensor pickles as torch's does (See NOTE [Pickling
tensors] in asyncgrad/_tensor.py), so two things would go wrong silently or obscurely:
  - a non-leaf tensor that requires grad would arrive as a leaf that requires grad, its graph
    cut: a backward on the receiving side would compute gradients that never reach the
    sender's parameters. ``init()`` (and ``register_serializers()``) install a serializer for
    Tensor and Parameter in the driver and, through Ray's ``worker_process_setup_hook``, in
    every worker of the job, which refuses such a tensor with an error naming its grad_fn
    (``detach()`` it to send the values);
  - a received tensor over the store's read-only memory: it gets a copy it can write (torch's
    tensors arrive writable too), so ``add_`` and optimizers work on it.
Ray is imported only here, on first use: ``import asyncgrad`` never loads it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Hashable
from typing import Any, Final

from .._tensor import Tensor, _rebuild_tensor, _reduce_tensor
from ..nn import Parameter
from .group import (
    DEFAULT_TIMEOUT_S,
    Group,
    Pending,
    ProcessGroup,
    ReduceOp,
    Rendezvous,
    check_group_args,
)

__all__ = ["GlooGroup", "RayGroup", "init", "new_group", "register_serializers", "setup_worker"]

SETUP_HOOK = "asyncgrad.distributed.ray_group.setup_worker"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(
            'asyncgrad.distributed on Ray needs Ray: pip install "asyncgrad[ray]"'
        ) from None
    return ray


def _collective() -> Any:
    _ray()
    import ray.util.collective as col

    return col


def _serialize(t: Tensor) -> tuple[Any, ...]:
    if t.requires_grad and t._grad_fn is not None:
        raise RuntimeError(
            f"cannot send a non-leaf tensor that requires grad (grad_fn={t._grad_fn.name()}) "
            "through Ray: it would arrive as a leaf, its graph cut, and gradients computed "
            "from it would never reach what it was computed from. Send t.detach() for its "
            "values."
        )
    fn, args = _reduce_tensor(t)
    assert fn is _rebuild_tensor
    return tuple(args)


def _deserialize(args: tuple[Any, ...]) -> Tensor:
    return _rebuild_tensor(*args)  # a writable copy of a read-only buffer


def register_serializers() -> None:
    """Install asyncgrad's Ray serializer for Tensor and Parameter in this process (See NOTE
    [Tensors through Ray]); ``init()`` does it in every process of the job."""
    ray = _ray()
    for cls in (Tensor, Parameter):
        ray.util.register_serializer(cls, serializer=_serialize, deserializer=_deserialize)


def setup_worker() -> None:
    """Ray's ``worker_process_setup_hook`` for asyncgrad (set by ``init()``)."""
    register_serializers()


def init(*args: Any, **kwargs: Any) -> Any:
    """``ray.init(*args, **kwargs)``, with asyncgrad's serializers in the driver and in every
    worker process of the job (a ``worker_process_setup_hook`` in ``runtime_env``; one the
    caller gives is refused, as Ray allows one)."""
    ray = _ray()
    runtime_env = dict(kwargs.pop("runtime_env", None) or {})
    hook = runtime_env.get("worker_process_setup_hook")
    if hook is not None and hook != SETUP_HOOK:
        raise ValueError(
            "asyncgrad.distributed.init sets runtime_env['worker_process_setup_hook']; call "
            f"{SETUP_HOOK}() from your own hook instead"
        )
    runtime_env["worker_process_setup_hook"] = SETUP_HOOK
    info = ray.init(*args, runtime_env=runtime_env, **kwargs)
    register_serializers()
    return info


class _RendezvousActor:
    """The Ray actor that holds a group's rendezvous (an asyncio actor: its calls wait on one
    event loop). A result is put in the object store once, and each rank gets its reference
    (in a list, so that Ray passes the reference rather than the value): one copy of the
    result, not one per rank."""

    def __init__(self, world_size: int, timeout_s: float) -> None:
        self.rendezvous = Rendezvous(world_size, timeout_s)
        self.results: dict[Hashable, list[Any]] = {}  # key -> [its reference, ranks to serve]

    async def contribute(
        self, key: Hashable, rank: int, value: Any, op: str, src: int
    ) -> list[Any]:
        rv = self.rendezvous
        result = await rv.wait(key, rv.contribute(key, rank, value, op, src))
        entry = self.results.get(key)
        if entry is None:
            entry = self.results[key] = [_ray().put(result), rv.world_size]
        entry[1] -= 1
        if not entry[1]:
            del self.results[key]
        return [entry[0]]

    async def pending(self) -> int:
        return self.rendezvous.pending()


class RayGroup(Group):
    """A group whose rendezvous is a Ray actor (See NOTE [Process groups])."""

    def __init__(self, world_size: int, timeout_s: float, actor: Any) -> None:
        super().__init__(world_size, timeout_s)
        self.actor = actor

    def _start(self, key: Hashable, rank: int, tensor: Tensor, op: str, src: int) -> RayPending:
        return RayPending(key, self.actor.contribute.remote(key, rank, tensor, op, src))

    def pending(self) -> int:
        """How many collectives wait for ranks (a call to the actor)."""
        n: int = _ray().get(self.actor.pending.remote())
        return n


class RayPending(Pending):
    """A collective started on a Ray group. The rendezvous actor enforces the group's
    deadline."""

    __slots__ = ("_ref",)

    def __init__(self, key: Hashable, ref: Any) -> None:
        super().__init__(key)
        self._ref = ref

    def done(self) -> bool:
        ready, _ = _ray().wait([self._ref], timeout=0)
        return bool(ready)

    async def _wait(self) -> Tensor:
        (ref,) = await self._ref
        result: Tensor = await ref
        return result

    def result(self) -> Tensor:
        ray = _ray()
        (ref,) = ray.get(self._ref)
        result: Tensor = ray.get(ref)
        return result


class GlooGroup(Group):
    """A group whose ranks run gloo's collectives through ``ray.util.collective`` (See NOTE
    [Process groups]): one ordered path per rank, a thread of its own."""

    def __init__(self, world_size: int, timeout_s: float, name: str) -> None:
        super().__init__(world_size, timeout_s)
        self.name = name
        self._path: concurrent.futures.ThreadPoolExecutor | None = None

    def __reduce__(self) -> Any:
        return (GlooGroup, (self.world_size, self.timeout_s, self.name))

    def join(self, rank: int) -> ProcessGroup:
        pg = super().join(rank)  # checks the rank
        col = _collective()
        col.init_collective_group(self.world_size, rank, backend="gloo", group_name=self.name)
        self._path = concurrent.futures.ThreadPoolExecutor(1, "asyncgrad-gloo")
        return pg

    def _start(self, key: Hashable, rank: int, tensor: Tensor, op: str, src: int) -> Pending:
        if self._path is None:
            raise RuntimeError(f"collective {key!r}: this process has not joined the group")
        return _ThreadPending(key, self._path.submit(self._run, tensor, op, src), self.timeout_s)

    def _run(self, tensor: Tensor, op: str, src: int) -> Tensor:
        col = _collective()
        out = tensor.cpu().clone()
        array = out.numpy()  # the same memory: the collective writes into it
        if op == ReduceOp.BROADCAST:
            col.broadcast(array, src, group_name=self.name)
        else:
            col.allreduce(array, group_name=self.name)
            if op == ReduceOp.MEAN:
                out.div_(self.world_size)
        return out


class _ThreadPending(Pending):
    """A collective running on a rank's ordered path (a thread): no rendezvous can name the
    ranks that did not arrive, so a deadline says only that none came."""

    __slots__ = ("_future", "_timeout_s")

    def __init__(
        self, key: Hashable, future: concurrent.futures.Future[Tensor], timeout_s: float
    ) -> None:
        super().__init__(key)
        self._future, self._timeout_s = future, timeout_s

    def done(self) -> bool:
        return self._future.done()

    def _late(self) -> TimeoutError:
        return TimeoutError(
            f"collective {self.key!r}: no result within {self._timeout_s} s (a rank failed, "
            "died, or never reached it); the group's path is blocked: make a new group"
        )

    async def _wait(self) -> Tensor:
        waiting = asyncio.wrap_future(self._future)
        _, late = await asyncio.wait({waiting}, timeout=self._timeout_s)
        if late:
            raise self._late()
        return await waiting

    def result(self) -> Tensor:
        try:
            return self._future.result(self._timeout_s)
        except concurrent.futures.TimeoutError:
            raise self._late() from None


BACKENDS: Final = ("object_store", "gloo")


def new_group(
    world_size: int, *, backend: str = "object_store", timeout_s: float = DEFAULT_TIMEOUT_S
) -> Group:
    """A group of ``world_size`` Ray actors (or tasks). Pass it to each rank, which calls
    ``group.join(rank)``.

    Args:
        world_size: the number of ranks.
        backend: ``"object_store"`` (tensors through Ray's object store to a rendezvous
            actor, owned by the caller: it lives as long as the caller's process or actor), or
            ``"gloo"`` (gloo's collectives through ``ray.util.collective``, which needs torch
            in the ranks' processes; each ``join`` blocks until every rank has joined).
        timeout_s: how long a collective waits for the ranks.
    """
    check_group_args(world_size, timeout_s)  # before an actor starts
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    ray = _ray()
    if backend == "gloo":
        import uuid

        return GlooGroup(world_size, timeout_s, f"asyncgrad-{uuid.uuid4().hex[:12]}")
    actor_cls = ray.remote(num_cpus=0, max_concurrency=max(1000, 4 * world_size))(_RendezvousActor)
    return RayGroup(world_size, timeout_s, actor_cls.remote(world_size, timeout_s))
