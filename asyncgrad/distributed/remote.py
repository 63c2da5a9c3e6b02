"""Gradients across processes: a module on a Ray actor, as one node of a local graph.

NOTE [Remote modules]
torch's distributed autograd (``torch.distributed.rpc`` with ``dist_autograd``) records send
and receive functions on both sides of an RPC and runs the backward across workers on
threads that block. Here an awaited backward crosses processes by awaiting:
  - ``rm = agd.RemoteModule(factory)`` starts a Ray actor holding ``factory()`` (a Module)
    and, optionally, its optimizer (``optimizer=lambda params: SGD(params, lr=...)``);
  - ``y = await rm(x)`` sends ``x``'s values, runs the forward on the actor with leaves that
    require grad, and keeps that graph there under the call's number (the actor's side of the
    context). Locally ``y`` is the output of one node, ``RemoteBackward``, whose inputs are
    ``x`` (and, when the remote module has parameters that require grad, an anchor leaf, so
    that a backward reaches them even from inputs that do not require grad);
  - the backward reaches ``RemoteBackward``, whose backward is ``async def``: it sends the
    output's gradient, the actor runs ``await ag.backward`` on the graph it kept (gradients
    accumulate into its parameters' ``.grad``, as a local backward's do) and answers with the
    inputs' gradients. While it waits, the local engine runs the other nodes that are ready:
    two remote modules' backwards overlap. ``loss.backward()`` in a script works the same way;
  - ``await rm.step()`` / ``await rm.zero_grad()`` run the actor's optimizer (each owner steps
    its own parameters: a distributed optimizer is one ``step()`` per remote module);
  - contexts: inside ``async with agd.context() as ctx:`` (a ContextVar, so it follows the
    task and the tasks it starts) the remote parameters' gradients of the backwards through
    the forwards made there go to the context on each owner, not to ``.grad``: concurrent
    requests each in a context never mix their gradients. ``await ctx.gradients(rm)`` reads
    them, ``await rm.step(ctx)`` steps over them, and leaving the context releases them on
    every owner. Local leaves still accumulate into their ``.grad`` (torch keeps them in the
    context too: here they are this process's own, reachable with ``ag.grad``).
Contexts: each forward's graph lives on the actor until its backward (without
``retain_graph``), until the local node is freed (a finalizer tells the actor), or, as a
backstop, ``ttl_s`` after it was made. Faults: an actor that dies fails the backward with a
RuntimeError naming the remote module; cancelling the local backward cancels the actor's
(``ray.cancel``), so a cancelled request leaves no work running on the other side. Only
tensors cross (their values, as the Ray serializer sends them); the remote forward must
return a tensor.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

from .. import autograd, no_grad, zeros
from .._tensor import Tensor
from ..nn import Module
from .ray_group import _ray

__all__ = ["Context", "RemoteModule", "context"]

DEFAULT_TTL_S: Final = 600.0


class _Host:
    """The actor's side: the module, its optimizer and the graphs kept for backwards."""

    def __init__(
        self, factory: Callable[[], Module], optimizer: Callable[..., Any] | None, ttl_s: float
    ) -> None:
        self.module = factory()
        if not isinstance(self.module, Module):
            raise TypeError(f"the factory returned {type(self.module).__name__}, not a Module")
        self.optimizer = None if optimizer is None else optimizer(self.module.parameters())
        self.ttl_s = ttl_s
        self.graphs: dict[int, tuple[float, list[Tensor], Tensor]] = {}
        # context id -> [when it was made, the parameters' gradients in it, by name]
        self.contexts: dict[str, list[Any]] = {}

    def has_grad_params(self) -> bool:
        return any(p.requires_grad for p in self.module.parameters())

    async def forward(self, call: int, record: bool, *inputs: Tensor) -> Tensor:
        self._expire()
        if not record:
            with no_grad():
                return self._check(self.module(*inputs))
        xs = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
        y = self._check(self.module(*xs))
        if y.requires_grad:
            self.graphs[call] = (time.monotonic(), xs, y)
        return y.detach()

    @staticmethod
    def _check(y: Any) -> Tensor:
        if not isinstance(y, Tensor):
            raise TypeError(f"a remote module's forward must return a Tensor, got {type(y)}")
        return y

    async def backward(
        self, call: int, grad: Tensor, retain: bool, context: str | None = None
    ) -> list[Tensor | None]:
        entry = self.graphs.get(call) if retain else self.graphs.pop(call, None)
        if entry is None:
            raise RuntimeError(
                f"call {call}: no graph kept for it (its backward already ran without "
                f"retain_graph, or it expired after ttl_s={self.ttl_s})"
            )
        _, xs, y = entry
        if context is not None:  # the parameters' gradients go to the context
            inputs = [x for x in xs if x.requires_grad]
            named = [(k, p) for k, p in self.module.named_parameters() if p.requires_grad]
            grads = await autograd.grad(
                y,
                [*inputs, *(p for _, p in named)],
                grad_outputs=grad,
                retain_graph=retain,
                allow_unused=True,
            )
            store = self.contexts.setdefault(context, [time.monotonic(), {}])[1]
            for (k, _), g in zip(named, grads[len(inputs) :], strict=True):
                if g is not None:
                    store[k] = g if k not in store else store[k] + g
            it = iter(grads[: len(inputs)])
            return [next(it) if x.requires_grad else None for x in xs]
        for x in xs:
            x.grad = None  # a retained graph's inputs: this backward's gradient only
        # The parameters' gradients accumulate into .grad, as a local backward's do (their
        # hooks run: a DataParallel on this side averages them).
        await autograd.backward(y, grad, retain_graph=retain)
        return [x.grad if x.requires_grad else None for x in xs]

    def context_gradients(self, context: str) -> dict[str, Tensor | None]:
        store = self.contexts.get(context, [0.0, {}])[1]
        return {k: store.get(k) for k, p in self.module.named_parameters() if p.requires_grad}

    def drop_context(self, context: str) -> None:
        self.contexts.pop(context, None)

    def kept_contexts(self) -> int:
        return len(self.contexts)

    def release(self, call: int) -> None:
        self.graphs.pop(call, None)

    def kept(self) -> int:
        return len(self.graphs)

    def _expire(self) -> None:
        now = time.monotonic()
        for k in [k for k, (t, _, _) in self.graphs.items() if now - t > self.ttl_s]:
            del self.graphs[k]
        for c in [c for c, (t, _) in self.contexts.items() if now - t > self.ttl_s]:
            del self.contexts[c]

    async def step(self, context: str | None = None) -> None:
        if self.optimizer is None:
            raise RuntimeError("this remote module was made without an optimizer")
        if context is None:
            self.optimizer.step()
            return
        # A context's gradients, in place of .grad for this step only.
        store = self.contexts.get(context, [0.0, {}])[1]
        params = [(k, p) for k, p in self.module.named_parameters() if p.requires_grad]
        kept = [p.grad for _, p in params]
        for k, p in params:
            p.grad = store.get(k)
        try:
            self.optimizer.step()
        finally:
            for (_, p), g in zip(params, kept, strict=True):
                p.grad = g

    async def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad()
        else:
            for p in self.module.parameters():
                p.grad = None

    async def state_dict(self) -> dict[str, Tensor]:
        return {k: v.detach() for k, v in self.module.state_dict().items()}

    async def gradients(self) -> dict[str, Tensor | None]:
        return {k: p.grad for k, p in self.module.named_parameters()}

    async def call(self, method: str, *args: Any) -> Any:
        """Any other method of the module (for tests and tools)."""
        out = getattr(self.module, method)(*args)
        if asyncio.iscoroutine(out):
            out = await out
        return out


class RemoteModule:
    """A module on a Ray actor, used as a node of local graphs (See NOTE [Remote modules]).

    Args:
        factory: builds the module on the actor (picklable: a class or a function).
        optimizer: builds its optimizer there from its parameters, for ``step()``.
        name: for errors (default: the factory's name).
        ttl_s: how long a forward's graph is kept on the actor at most, waiting for its
            backward.
        actor_options: ``ray.remote`` options of the actor (default ``{"num_cpus": 1}``).
    """

    def __init__(
        self,
        factory: Callable[[], Module],
        *,
        optimizer: Callable[..., Any] | None = None,
        name: str | None = None,
        ttl_s: float = DEFAULT_TTL_S,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        ray = _ray()
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        self.name = name or getattr(factory, "__name__", type(factory).__name__)
        host = ray.remote(**(actor_options or {"num_cpus": 1}))(_Host)
        self.actor = host.remote(factory, optimizer, ttl_s)
        self._calls = itertools.count()
        self._releases: list[Any] = []  # releases sent by finalizers, not yet seen done
        self._anchor: Tensor | None = None
        self._anchor_known = False

    async def __call__(self, *inputs: Tensor) -> Tensor:
        for i, x in enumerate(inputs):
            if not isinstance(x, Tensor):
                raise TypeError(f"{self.name}: input {i} is a {type(x).__name__}, not a Tensor")
        anchor = await self._anchor_leaf()
        record = autograd.is_grad_enabled() and (
            anchor is not None or any(x.requires_grad for x in inputs)
        )
        call = next(self._calls)
        context = _context.get()
        if context is not None:
            context._modules[id(self)] = self
        sent = [x.detach() for x in inputs]
        y: Tensor = await self._remote(self.actor.forward.remote(call, record, *sent))
        if not record:
            return y
        extra = () if anchor is None else (anchor,)
        cid = None if context is None else context.id
        out: Tensor = _RemoteCall.apply(self, (call, cid), y, anchor is not None, *extra, *inputs)
        return out

    async def _anchor_leaf(self) -> Tensor | None:
        if not self._anchor_known:
            if await self._remote(self.actor.has_grad_params.remote()):
                self._anchor = zeros((), requires_grad=True)
            self._anchor_known = True
        return self._anchor

    async def _remote(self, ref: Any) -> Any:
        ray = _ray()
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except ray.exceptions.RayActorError as e:
            raise RuntimeError(
                f"remote module {self.name!r}: its actor died ({type(e).__name__})"
            ) from e

    async def step(self, context: Context | None = None) -> None:
        """Step the actor's optimizer over the gradients accumulated in its ``.grad``, or
        over those of ``context`` (its ``.grad`` left as it was)."""
        await self._remote(self.actor.step.remote(None if context is None else context.id))

    async def zero_grad(self) -> None:
        """The actor's optimizer's ``zero_grad()`` (without one, every ``.grad`` to None)."""
        await self._remote(self.actor.zero_grad.remote())

    async def state_dict(self) -> dict[str, Tensor]:
        """The module's state dict, from the actor."""
        out: dict[str, Tensor] = await self._remote(self.actor.state_dict.remote())
        return out

    async def gradients(self) -> dict[str, Tensor | None]:
        """The ``.grad`` of each of the module's parameters, by name."""
        out: dict[str, Tensor | None] = await self._remote(self.actor.gradients.remote())
        return out

    async def kept_contexts(self) -> int:
        """How many contexts hold gradients on the actor."""
        n: int = await self._remote(self.actor.kept_contexts.remote())
        return n

    async def kept_graphs(self) -> int:
        """How many forwards' graphs the actor keeps, waiting for their backward (once the
        releases of local graphs freed before this call have reached it)."""
        sent, self._releases = self._releases, []
        for ref in sent:
            await self._remote(ref)
        n: int = await self._remote(self.actor.kept.remote())
        return n

    def _release(self, call: int) -> None:
        """A finalizer's: the local node of ``call`` is gone, so is the actor's graph."""
        try:
            sent = self._releases
            sent.append(self.actor.release.remote(call))
            if len(sent) > 256:  # keep only those not yet done
                _, self._releases = _ray().wait(sent, num_returns=len(sent), timeout=0)
        except Exception:  # Ray is shut down: nothing is kept any more
            pass

    def __repr__(self) -> str:
        return f"RemoteModule({self.name!r})"


class Context:
    """A distributed autograd context: ``async with agd.context() as ctx:`` (or ``with``). The
    forwards through remote modules made inside it (in this task and the tasks it starts:
    a ContextVar) send their parameters' gradients to the context, on each owner, instead
    of their ``.grad``; ``await ctx.gradients(rm)`` reads them, ``await rm.step(ctx)`` steps
    over them, and leaving the context releases them on every owner (``ttl_s`` after they
    were made, as a backstop)."""

    def __init__(self) -> None:
        import uuid

        self.id = uuid.uuid4().hex
        self._modules: dict[int, RemoteModule] = {}
        self._tokens: list[Any] = []

    def __enter__(self) -> Context:
        self._tokens.append(_context.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _context.reset(self._tokens.pop())
        for rm in self._modules.values():  # fire and forget: sync code cannot wait
            rm.actor.drop_context.remote(self.id)

    async def __aenter__(self) -> Context:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        _context.reset(self._tokens.pop())
        await self.release()

    async def gradients(self, rm: RemoteModule) -> dict[str, Tensor | None]:
        """The gradients of ``rm``'s parameters in this context, by name."""
        out: dict[str, Tensor | None] = await rm._remote(rm.actor.context_gradients.remote(self.id))
        return out

    async def release(self) -> None:
        """Drop this context's gradients on every owner."""
        for rm in self._modules.values():
            await rm._remote(rm.actor.drop_context.remote(self.id))


_context: ContextVar[Context | None] = ContextVar("asyncgrad_distributed_context", default=None)


def context() -> Context:
    """A new distributed autograd context (See ``Context``)."""
    return Context()


class _RemoteCall(autograd.Function):
    """The local node of a remote forward: its backward runs the actor's."""

    @staticmethod
    def forward(
        ctx: Any,
        rm: RemoteModule,
        ids: tuple[int, str | None],
        y: Tensor,
        anchored: bool,
        *inputs: Tensor,
    ) -> Tensor:
        call, ctx.context = ids
        ctx.rm, ctx.call, ctx.anchored = rm, call, anchored
        # The actor keeps this call's graph until its backward; when the local graph goes
        # first, tell the actor to drop it (fire and forget).
        ctx.finalizer = weakref.finalize(ctx, rm._release, call)
        return y.detach()

    @staticmethod
    async def backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
        rm: RemoteModule = ctx.rm
        retain = False  # See NOTE [Remote modules]: one backward per forward
        grads = await rm._remote(
            rm.actor.backward.remote(ctx.call, grad.detach(), retain, ctx.context)
        )
        ctx.finalizer.detach()  # the actor dropped the graph itself
        lead: tuple[Any, ...] = (None, None, None, None)
        if ctx.anchored:
            lead += (None,)
        return (*lead, *grads)
