"""Serving gradients: concurrent requests of one model coalesced into one forward and backward.

NOTE [Coalesced gradients]
A server computing input gradients (saliency, SmoothGrad, integrated gradients, gradients of
per-sample losses) receives many requests of the same model at once. Each alone pays the
engine's and Python's per-call overhead, which dominates small models: on a 2-core VM an
MLP 32-64-64-1 costs about 120 µs per call for 8 samples and 156 µs for 64
(benchmarks/bench_batching.py, numbers in benchmarks/RESULTS.md). ``Coalescer`` stacks the
rows of the requests waiting at once along the batch dimension, runs one forward and one
backward, and gives each caller its own rows of the input gradient:
  - exactness: when samples do not interact, the gradient of the sum over the batch of
    ``<grad_output_i, model(x)_i>`` with respect to row ``i`` of the input is that row's own
    vector-Jacobian product, as if computed alone (up to floating-point summation order in the
    kernels). That fails when the model mixes samples: batch statistics (a batch norm in
    training mode, or without running statistics) are refused with an error naming the
    module; a result whose first dimension is not the batch's is refused; other cross-sample
    operations (a sum over the batch inside the model, say) cannot be seen, and are the user's
    to avoid. Dropout in training mode draws other masks batched than alone.
  - batches: a request that finds nothing of its kind running or waiting, and no request of
    another caller in the last CONCURRENT_S, runs at once, in its caller, as a batch of one
    (the engine may then finish it without yielding, as it does a plain ``await ag.grad``).
    Otherwise it joins the queue of a runner task: requests that arrive while a batch runs wait
    for it and form the next one, up to ``max_batch`` rows in arrival order; ``max_wait_s``
    (default 0) holds such a batch that long for more requests. So under load a request waits
    at most for the batch in flight, plus ``max_wait_s``. (Running every request in its caller
    would batch nothing under load: each finishes before the next caller runs.)
    ``max_concurrent`` batches of a kind may be in flight at once. By default that is one per
    compute thread on the CPU: a batch is a chain of layers, one node after another, so one
    batch at a time keeps one core busy (SmoothGrad of an MLP 64-1024x3-10 on 2 cores over
    HTTP, benchmarks/server_smoothgrad.py: 230-240 req/s with one, 356-373 with two); and one
    on a GPU, where one batch at a time makes the largest kernels.
  - isolation: a request is checked before it joins (a tensor of at least one row, no more
    rows than ``max_batch``, a ``grad_output`` of as many rows); requests whose rows have
    other shapes, dtypes or devices go to batches of their own. A caller cancelled before its
    batch starts is dropped from it; one cancelled later has its rows discarded. When a batch
    fails (a faulty row, or a ``grad_output`` function that raises or returns another
    shape), each of its requests runs alone, so an error reaches only the callers that cause
    it.
  - outputs: ``grad_output`` may be a function of the request's own output rows (computed
    after the batch's forward, before its backward: the predicted class's one-hot, say), and
    ``vjp`` returns the request's output rows with its gradient, so a caller that needs the
    prediction too pays no second forward.
  - forward only: ``forward`` asks for the output rows alone (perturbation methods such as
    occlusion, predictions): such requests batch with each other, under ``no_grad``, and never
    with gradient requests.
  - parameter gradients: ``parameter_grads`` requests batch with each other, never with
    input-gradient requests, and each gets its own gradients of the model's parameters (See
    NOTE [Per-request parameter gradients] in asyncgrad/per_sample.py). A batch holds one
    gradient of every trainable parameter per request at once, so it takes at most as many
    requests as ``max_parameter_grad_bytes`` (256 MiB) holds of those (one at least): for an
    MLP 784-256-256-10 in float32 (1.03 MiB of parameters), 249 requests.
  - the engine: a batch is one backward pass, so ``configure(max_running=N)`` counts it once,
    and it runs at the priority given to the coalescer.
  - sizing: a batch costs the per-pass overhead once (about 120 µs on a 2-core VM) plus its
    kernels, so batching pays until the kernels dominate: for an MLP 32-64-64-1, 15.8 µs per
    sample at 8 rows, 2.6 at 64, 0.74 at 512; for an MLP 64-1024x3-10, 328 µs per sample at
    8 rows, 156 at 64, 113 at 256 (benchmarks/bench_batching.py). Choose ``max_batch`` near
    where the per-sample cost stops falling: larger batches gain little and hold their
    requests longer, and a batch's memory grows with its rows. Keep ``max_wait_s`` at 0 when
    requests overlap (under load the batch in flight is the window, and it adapts by itself:
    more requests wait, larger batches run); raise it only when requests arrive spread out and
    one pass each would cost more than the wait, since a request may then wait that long in
    addition to the batch in flight.
Batches run on every event loop: asyncio's (uvloop included) in runner tasks, any other that
anyio drives (trio) in the requests' own tasks (See NOTE [Batches on other event loops]).
Called outside any event loop, ``ag.grad``'s error.

NOTE [Batches on other event loops]
Under trio a library cannot start a task that outlives the call that starts it (tasks live in
nurseries), so there are no runner tasks: the requests lead their own batches. A request
joins the queue of its kind; if fewer than ``max_concurrent`` batches of the kind are in
flight it leads at once, otherwise it waits on its event. A leader lets the tasks of the same
turn make their requests (one checkpoint, or ``max_wait_s``), takes the next batch (which
holds its own request unless an earlier leader took it), and runs it shielded from its own
cancellation: the others' results do not depend on it staying. It then wakes the first request
still waiting to lead the next batch, and returns its result, or raises its cancellation. So,
as on asyncio, a caller cancelled before its batch starts is dropped from it, one cancelled
later has its rows discarded (a leader's cancellation waits for its batch to end), and under
load the batch in flight is the window in which the next one gathers.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from time import perf_counter
from typing import Any, TypeVar, cast

from . import backend, ops, per_sample
from ._tensor import Tensor
from .autograd.api import _grad
from .engine import settings
from .engine.foreign import require_library
from .engine.offload import run as run_off_loop
from .engine.worker import yield_to_loop
from .graph.grad_mode import enable_grad, is_grad_enabled, no_grad
from .nn.modules import Module

__all__ = ["Coalescer"]

_T = TypeVar("_T")

# Requests of other callers within this many seconds of each other count as concurrent.
CONCURRENT_S = 0.002

# NOTE [Forwards off the loop]
# A batch's forward runs on the loop unless it is long: there it would hold the loop for its
# whole duration (a batch of 256 rows of an MLP 64-1024x3-10 takes about 15 ms on one core),
# while a hand-off to a compute thread costs about 0.1 ms, more than a small batch's whole
# forward. The coalescer cannot know a forward's length before it runs, so it measures: per
# kind of row (shape, dtype, device, with or without gradient) it keeps the last forward's
# time and rows, and runs a batch on a compute thread (``ag.run``) when that time scaled to
# the batch's rows exceeds OFF_LOOP_FORWARD_S, the engine's own bound for a node on the loop
# (See NOTE [Large nodes] in asyncgrad/engine/worker.py: 2**25 multiply-adds, about 1 ms). A
# kind's first forward runs off the loop (nothing is known of it yet), and every forward
# updates the estimate wherever it ran, so a model that grows slower moves off the loop after
# one slow batch. Scaling by rows overestimates a larger batch from a small one (a forward has
# a fixed cost), which errs towards the thread. ``forward_off_loop=True`` or ``False`` fixes
# the choice instead. A parameter-gradient batch's per-sample rules are placed the same way
# (their own kind): they write every request's gradients, 64 MB for 64 requests of an MLP
# 784-256-256-10, 10-16 ms that would otherwise hold the loop.
OFF_LOOP_FORWARD_S = 1e-3


class _ForwardOnly:
    """The grad_output of a request that wants the output rows alone (``Coalescer.forward``)."""

    def __repr__(self) -> str:
        return "FORWARD_ONLY"


FORWARD_ONLY = _ForwardOnly()

# A request's grad_output: none (ones), rows, a function of its output rows, or FORWARD_ONLY.
_GradOutput = Tensor | Callable[[Tensor], Tensor] | _ForwardOnly | None


# What a request gets: its output rows (None unless asked for), and its gradient rows (None
# for a forward-only request), or its parameter gradients by name (``parameter_grads``).
_Result = tuple[Tensor | None, Any]

# The forward's capture list of the batch running in this context (See NOTE [Per-request
# parameter gradients] in asyncgrad/per_sample.py): the modules' forward hooks append to it.
_CAPTURE: ContextVar[list[per_sample.Call] | None] = ContextVar(
    "asyncgrad_serving_capture", default=None
)


class _Slot:
    """A request's result on another event loop than asyncio's (See NOTE [Batches on other
    event loops]): what a batch uses of an asyncio.Future, an event its caller waits on, and
    whether it is the request's turn to lead a batch."""

    __slots__ = ("_done", "_error", "_event", "_result", "lead")

    def __init__(self) -> None:
        import anyio

        self._event = anyio.Event()
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None
        self.lead = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Any) -> None:
        self._result, self._done = result, True
        self._event.set()

    def set_exception(self, e: BaseException) -> None:
        self._error, self._done = e, True
        self._event.set()

    def drop(self) -> None:
        """Its caller is gone: a batch that has not started leaves it out."""
        self._done = True

    def wake(self) -> None:
        """Its turn to lead a batch."""
        self.lead = True
        self._event.set()

    async def wait(self) -> None:
        import anyio

        await self._event.wait()
        if not self._done:  # woken to lead: the next wait needs a new event
            self._event = anyio.Event()

    def result(self) -> _Result:
        if self._error is not None:
            raise self._error
        return cast("_Result", self._result)


class _Request:
    __slots__ = ("future", "grad_output", "output", "params", "rows", "x")

    def __init__(
        self,
        x: tuple[Tensor, ...],
        grad_output: _GradOutput,
        output: bool,
        fut: Any,  # an asyncio.Future, or a _Slot on another event loop
        params: bool = False,
    ) -> None:
        self.x = x  # the input, then the model's other per-row arguments
        self.grad_output = grad_output
        self.output = output
        self.params = params  # parameter gradients instead of input gradients
        self.rows = int(x[0].shape[0])
        self.future = fut


class Coalescer:
    """Coalesce concurrent input-gradient requests of ``model`` into batched passes (See NOTE
    [Coalesced gradients]).

    Args:
        model: a function (an ``nn.Module``, say) from a batch of inputs ``(N, *features)``
            (and of the other per-row arguments the requests give) to per-sample outputs
            ``(N, *out)``: scores, logits, or per-sample losses.
        max_batch: the most rows a batch holds (a request's rows are never split).
        max_wait_s: how long a batch waits for more requests before it starts (default 0:
            it starts at once, and requests that arrive while it runs form the next one).
        forward_off_loop: where each batch's forward (and a parameter-gradient batch's
            per-sample rules) runs: ``None`` (the default) chooses per batch by its measured
            time (See NOTE [Forwards off the loop]), ``True`` always on the engine's compute
            threads (``ag.run``), ``False`` always on the loop.
        priority: the engine priority of the batches' backward passes.
        max_concurrent: how many batches may run at once (each takes the requests waiting
            when it starts); default: one on a GPU, one per compute thread on the CPU
            (``ag.configure(compute_threads=...)``).
        max_parameter_grad_bytes: the most bytes of per-request parameter gradients one
            ``parameter_grads`` batch holds (each request's are the size of the trainable
            parameters; a batch holds one request at least), and the most the coalescer keeps
            of their memory for the next batches once the requests have dropped them (See
            NOTE [Reused blocks] in asyncgrad/backend/__init__.py). Default 256 MiB.

    Examples:
        >>> import asyncio, asyncgrad as ag
        >>> model = ag.nn.Linear(3, 1)
        >>> saliency = ag.serving.Coalescer(model)
        >>> async def request(x):
        ...     return await saliency.grad(x)
        >>> xs = [ag.randn(2, 3), ag.randn(1, 3)]
        >>> async def main():
        ...     return await asyncio.gather(*(request(x) for x in xs))
        >>> [g.shape for g in asyncio.run(main())]
        [asyncgrad.Size([2, 3]), asyncgrad.Size([1, 3])]
    """

    def __init__(
        self,
        model: Callable[..., Tensor],
        *,
        max_batch: int = 256,
        max_wait_s: float = 0.0,
        forward_off_loop: bool | None = None,
        priority: int = 0,
        max_concurrent: int | None = None,
        max_parameter_grad_bytes: int = 256 << 20,
    ) -> None:
        if not callable(model):
            raise TypeError(f"Coalescer(model): model must be callable, got {type(model).__name__}")
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"Coalescer: max_batch must be an int >= 1, got {max_batch!r}")
        if not max_wait_s >= 0:
            raise ValueError(f"Coalescer: max_wait_s must be >= 0, got {max_wait_s!r}")
        if forward_off_loop is not None and not isinstance(forward_off_loop, bool):
            raise TypeError(
                "Coalescer: forward_off_loop must be None (chosen per batch), True or False, "
                f"got {forward_off_loop!r}"
            )
        if (
            not isinstance(max_parameter_grad_bytes, int)
            or isinstance(max_parameter_grad_bytes, bool)
            or max_parameter_grad_bytes < 1
        ):
            raise ValueError(
                "Coalescer: max_parameter_grad_bytes must be an int >= 1, got "
                f"{max_parameter_grad_bytes!r}"
            )
        if max_concurrent is not None and (
            not isinstance(max_concurrent, int) or max_concurrent < 1
        ):
            raise ValueError(
                f"Coalescer: max_concurrent must be an int >= 1, got {max_concurrent!r}"
            )
        self.model = model
        self.max_batch = max_batch
        self.max_wait_s = float(max_wait_s)
        self.forward_off_loop = forward_off_loop
        self.priority = priority
        self.max_concurrent = max_concurrent
        self.max_parameter_grad_bytes = max_parameter_grad_bytes
        # The per-request parameter gradients' products, kept for reuse (See NOTE [Reused
        # blocks] in asyncgrad/backend/__init__.py).
        self._blocks = backend.Blocks(max_parameter_grad_bytes)
        # Waiting requests per kind of row (shape, dtype, device).
        self._pending: dict[Any, list[_Request]] = {}
        # Per kind: the runner tasks serving it and the request running alone in its caller,
        # if any (how many batches may be in flight), and the runners between two batches.
        self._runners: dict[Any, int] = {}
        self._idle: dict[Any, int] = {}
        # The task of the last request and when it came (See NOTE [Coalesced gradients]).
        self._last_task: Any = None
        self._last_at = float("-inf")
        self._stats = {
            "requests": 0, "batches": 0, "rows": 0, "largest_batch": 0, "alone": 0,
            "forwards_off_loop": 0, "parameter_batches_alone": 0, "parameter_rules_off_loop": 0,
        }  # fmt: skip
        # Per kind of row: the last forward's (seconds, rows) (See NOTE [Forwards off the loop]).
        self._forward_time: dict[Any, tuple[float, int]] = {}
        # The capturing hooks while parameter-gradient batches run, and how many run.
        self._hooks: list[Any] = []
        self._capturing = 0

    def stats(self) -> dict[str, int]:
        """Requests served, batches run, rows in them, the largest batch (rows), requests
        rerun alone after their batch failed, forwards run off the loop, parameter-gradient
        batches run a request at a time (no rule covered them) and those whose rules ran off
        the loop."""
        return dict(self._stats)

    async def grad(self, x: Any, *args: Any, grad_output: Any = None) -> Tensor:
        """The gradient of ``<grad_output, model(x, *args)>`` with respect to ``x``, row by
        row: for each row of ``x`` (a sample), the vector-Jacobian product of its own output
        row. ``args`` are the model's other per-row inputs (a per-sample loss's targets, say),
        stacked with the other requests' as ``x`` is. ``grad_output`` defaults to ones (the
        gradient of each output row's sum); it may be a function of the request's own output
        rows (detached) that returns them, for a weighting that depends on the output, such as
        the predicted class's one-hot."""
        g = (await self._submit(x, args, grad_output, False))[1]
        assert isinstance(g, Tensor)
        return g

    async def vjp(self, x: Any, *args: Any, grad_output: Any = None) -> tuple[Tensor, Tensor]:
        """``(output, gradient)``: the request's rows of ``model(x, *args)`` (detached), and
        the gradient ``grad`` returns, from the same batched pass."""
        out, g = await self._submit(x, args, grad_output, True)
        assert out is not None
        assert g is not None
        return out, g

    async def parameter_grads(
        self, x: Any, *args: Any, grad_output: Any = None
    ) -> dict[str, Tensor]:
        """The request's own gradient of ``<grad_output, model(x, *args)>`` (summed over its
        rows) with respect to each of the model's parameters that require grad, by name (as
        ``named_parameters`` gives them): what ``ag.grad(loss, model.parameters())`` would
        give for this request alone (a per-sample loss, per-user fine-tuning, influence
        scores, per-example clipping). Requests of one kind share one batched forward and
        backward; each request's part is read back by the per-sample rules of the modules
        that have one (See NOTE [Per-request parameter gradients] in asyncgrad/per_sample.py),
        and a batch whose parameters are used where no rule covers them runs each request
        alone. ``grad_output`` as in ``grad``. The model must be an ``nn.Module``."""
        if not callable(getattr(self.model, "named_parameters", None)):
            raise TypeError(
                "Coalescer.parameter_grads: the model must be an nn.Module (its parameters "
                f"are read from named_parameters()), got {type(self.model).__name__}"
            )
        grads = (await self._submit(x, args, grad_output, False, params=True))[1]
        assert isinstance(grads, dict)
        return grads

    async def forward(self, x: Any, *args: Any) -> Tensor:
        """The request's rows of ``model(x, *args)`` (detached, no gradient), from a batched
        forward shared with the other forward-only requests of its kind (perturbation methods,
        predictions)."""
        out, _ = await self._submit(x, args, FORWARD_ONLY, True)
        assert out is not None
        return out

    def _submit(
        self, x: Any, args: tuple[Any, ...], grad_output: Any, output: bool, params: bool = False
    ) -> Awaitable[_Result]:
        """The request checked, and what to await for its result: its run alone, or the
        future its batch sets. (A plain function, not a coroutine: a request that waits holds
        one object fewer, for the collector to walk, while it waits.)"""
        loop = asyncio._get_running_loop()
        xt, g = self._check(x, grad_output)
        parts = (xt, *self._check_args(args, int(xt.shape[0])))
        if loop is None:  # trio, say (See NOTE [Batches on other event loops])
            require_library()
        # What each row of grad_output is: none, its shape, or a function of the output.
        kind: Any = (
            None
            if g is None
            else tuple(g.shape[1:])
            if isinstance(g, Tensor)
            else "forward"
            if g is FORWARD_ONLY
            else "function"
        )
        key = (tuple((tuple(p.shape[1:]), p.dtype, p.device) for p in parts), kind, params)
        if loop is None:
            return self._led(key, _Request(parts, g, output, _Slot(), params))
        # See NOTE [Coalesced gradients]: alone, or concurrent with another caller's request.
        now, task = loop.time(), asyncio.current_task()
        concurrent = self._last_task is not task and now - self._last_at < CONCURRENT_S
        self._last_task, self._last_at = task, now
        if key not in self._runners and not concurrent:
            return self._alone(loop, key, parts, g, output, params)
        fut: asyncio.Future[_Result] = loop.create_future()
        self._pending.setdefault(key, []).append(_Request(parts, g, output, fut, params))
        self._start_runner(loop, key)
        return fut  # cancelling it before its batch starts drops the request

    async def _alone(
        self,
        loop: asyncio.AbstractEventLoop,
        key: Any,
        x: tuple[Tensor, ...],
        g: _GradOutput,
        output: bool,
        params: bool,
    ) -> _Result:
        """Nothing of its kind runs or waits: the request runs at once, in its caller, as a
        batch of one (no task hop); those that arrive meanwhile wait for the batch after it."""
        self._runners[key] = self._runners.get(key, 0) + 1
        try:
            return await self._one(x, g, output, params)
        finally:
            self._leave(key)
            if self._pending.get(key):
                self._start_runner(loop, key)

    async def _one(
        self, x: tuple[Tensor, ...], g: _GradOutput, output: bool, params: bool = False
    ) -> _Result:
        """One request run by itself: alone in its caller, rerun after its batch failed, or on
        another event loop than asyncio's."""
        self._check_exact()
        (result,) = await self._vjp([x], [g], [int(x[0].shape[0])], output, params)
        self._stats["requests"] += 1
        return result

    def _limit(self, key: Any) -> int:
        """How many batches of ``key`` may be in flight at once."""
        limit = self.max_concurrent
        if limit is None:  # one on a GPU; on the CPU, one per compute thread
            device = key[0][0][2]
            limit = 1 if device.type != "cpu" else int(settings.get("compute_threads"))
        return limit

    async def _led(self, key: Any, req: _Request) -> _Result:
        """A request on another event loop than asyncio's: it waits in the queue of its kind
        until its batch has run, leading batches itself when its turn comes (See NOTE
        [Batches on other event loops])."""
        from anyio.lowlevel import checkpoint_if_cancelled

        slot: _Slot = req.future
        self._pending.setdefault(key, []).append(req)
        if self._runners.get(key, 0) < self._limit(key):
            self._runners[key] = self._runners.get(key, 0) + 1
            slot.lead = True
        try:
            while not slot.done():
                if slot.lead:
                    slot.lead = False
                    await self._lead(key, req)
                    await checkpoint_if_cancelled()  # cancelled while its batch ran
                else:
                    await slot.wait()
        except BaseException:
            slot.drop()  # cancelled before its batch: dropped from it; later: rows discarded
            if slot.lead:  # woken to lead and gone before it could: the lead passes on
                slot.lead = False
                self._leave(key)
                self._hand_off(key, req)
            raise
        return slot.result()

    async def _lead(self, key: Any, req: _Request) -> None:
        """Run the next batch of ``key`` in this request's task, shielded from its
        cancellation, then hand the lead to a request still waiting."""
        import anyio
        from anyio.lowlevel import checkpoint

        try:
            # As a runner task's: requests made in the same turn join this batch.
            await (anyio.sleep(self.max_wait_s) if self.max_wait_s else checkpoint())
            batch = self._take(key)
            self._hand_off(key, req)  # more than this batch holds: another may lead at once
            if batch:
                with anyio.CancelScope(shield=True):
                    await self._run_batch(batch)
        finally:
            self._leave(key)
            self._hand_off(key, req)
            if key not in self._runners and not self._pending.get(key):
                self._pending.pop(key, None)

    def _hand_off(self, key: Any, req: _Request) -> None:
        """Wake the first waiting request of ``key`` (not ``req``) to lead a batch, if fewer
        than the limit are in flight and none is about to start."""
        if self._runners.get(key, 0) >= self._limit(key):
            return
        for r in self._pending.get(key, ()):
            if r is not req and not r.future.done():
                if r.future.lead:
                    return  # woken already
                self._runners[key] = self._runners.get(key, 0) + 1
                r.future.wake()
                return

    def _start_runner(self, loop: asyncio.AbstractEventLoop, key: Any) -> None:
        """A task that runs batches of ``key``'s waiting requests until none wait, unless a
        runner is about to take the next batch, or max_concurrent batches are in flight."""
        limit = self._limit(key)
        if self._idle.get(key, 0) or self._runners.get(key, 0) >= limit:
            return
        self._runners[key] = self._runners.get(key, 0) + 1
        self._idle[key] = self._idle.get(key, 0) + 1
        loop.create_task(self._serve(key), name="asyncgrad-coalescer")

    def _leave(self, key: Any) -> None:
        left = self._runners[key] - 1
        if left:
            self._runners[key] = left
        else:
            del self._runners[key]

    @staticmethod
    def _check_args(args: tuple[Any, ...], rows: int) -> list[Tensor]:
        out = []
        for i, a in enumerate(args):
            if not isinstance(a, Tensor):
                raise TypeError(
                    f"Coalescer.grad: argument {i + 1} after x must be a Tensor of one row per "
                    f"row of x, got {type(a).__name__}"
                )
            if a.dim() < 1 or a.shape[0] != rows:
                raise ValueError(
                    f"Coalescer.grad: argument {i + 1} after x must have one row per row of x "
                    f"({rows}), got shape {tuple(a.shape)}"
                )
            out.append(a)
        return out

    def _check(self, x: Any, grad_output: Any) -> tuple[Tensor, _GradOutput]:
        if not isinstance(x, Tensor):
            raise TypeError(f"Coalescer.grad: x must be a Tensor, got {type(x).__name__}")
        if x.dim() < 1 or x.shape[0] < 1:
            raise ValueError(
                f"Coalescer.grad: x must have a batch dimension with at least one row, got "
                f"shape {tuple(x.shape)}"
            )
        if x.shape[0] > self.max_batch:
            raise ValueError(
                f"Coalescer.grad: x has {x.shape[0]} rows, more than max_batch={self.max_batch}"
            )
        if not x.is_floating_point():
            raise TypeError(f"Coalescer.grad: x must be floating point, got {x.dtype}")
        g: _GradOutput = None
        if isinstance(grad_output, _ForwardOnly):
            return x, grad_output
        if callable(grad_output) and not isinstance(grad_output, Tensor):
            return x, cast("Callable[[Tensor], Tensor]", grad_output)
        if grad_output is not None:
            if not isinstance(grad_output, Tensor):
                raise TypeError(
                    "Coalescer.grad: grad_output must be a Tensor, a function of the output "
                    f"rows or None, got {type(grad_output).__name__}"
                )
            if grad_output.dim() < 1 or grad_output.shape[0] != x.shape[0]:
                raise ValueError(
                    f"Coalescer.grad: grad_output must have one row per row of x ({x.shape[0]}),"
                    f" got shape {tuple(grad_output.shape)}"
                )
            g = grad_output.detach()
        return x, g

    async def _serve(self, key: Any) -> None:
        """Run batches of ``key``'s requests until none wait (counted idle from its start
        until it takes a batch, and between batches)."""
        batch: list[_Request] = []
        idle = True
        try:
            while True:
                # Each batch starts in a turn of the loop of its own, behind due timers: a
                # batch the engine finishes without yielding must not run the next one in the
                # same turn (the loop would wait for all of them), and callers answered by the
                # last one join the next.
                await (asyncio.sleep(self.max_wait_s) if self.max_wait_s else yield_to_loop())
                batch = self._take(key)
                if not batch:
                    return
                self._idle[key] = self._idle.get(key, 1) - 1
                idle = False
                if self._pending.get(key):  # more than this batch holds: another may start
                    self._start_runner(asyncio.get_running_loop(), key)
                await self._run_batch(batch)
                batch = []
                self._idle[key] = self._idle.get(key, 0) + 1
                idle = True
        except asyncio.CancelledError:
            # Stopped from outside (the loop is closing): so are the requests it would serve.
            for r in batch + self._pending.get(key, []):
                r.future.cancel()
            raise
        finally:
            if idle:
                self._idle[key] = self._idle.get(key, 1) - 1
            if not self._idle.get(key, 0):
                self._idle.pop(key, None)
            self._leave(key)
            if key not in self._runners:
                self._pending.pop(key, None)

    def _take(self, key: Any) -> list[_Request]:
        """The next batch: waiting requests in arrival order, up to max_batch rows; cancelled
        ones are dropped."""
        waiting = self._pending.get(key)
        batch: list[_Request] = []
        rows = 0
        # Parameter-gradient requests: as many as their gradients' bytes allow at once.
        most = self._parameter_requests() if key[2] else None
        while waiting:
            r = waiting[0]
            if r.future.done():  # its caller was cancelled before the batch started
                waiting.pop(0)
                continue
            if batch and (rows + r.rows > self.max_batch or len(batch) == most):
                break
            batch.append(waiting.pop(0))
            rows += r.rows
        return batch

    def _parameter_requests(self) -> int:
        """How many parameter-gradient requests a batch may hold: each gets a gradient of
        every trainable parameter, so at most ``max_parameter_grad_bytes`` of them at once
        (one request at least)."""
        each = sum(
            p.numel() * p.element_size()
            for p in self.model.parameters()  # type: ignore[attr-defined]
            if p.requires_grad
        )
        return max(1, self.max_parameter_grad_bytes // max(1, each))

    async def _run_batch(self, batch: list[_Request]) -> None:
        try:
            self._check_exact()
        except RuntimeError as e:
            for r in batch:
                _deliver_error(r.future, e)
            return
        try:
            grads = await self._vjp(
                [r.x for r in batch],
                [r.grad_output for r in batch],
                [r.rows for r in batch],
                any(r.output for r in batch),
                batch[0].params,
            )
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            if len(batch) == 1:
                _deliver_error(batch[0].future, e)
                return
            del e
            # Isolate the failure: each request alone, so only the faulty ones fail.
            for r in batch:
                if r.future.done():
                    continue
                self._stats["alone"] += 1
                try:
                    one = await self._one(r.x, r.grad_output, r.output, r.params)
                except asyncio.CancelledError:
                    raise
                except BaseException as e1:
                    _deliver_error(r.future, e1)
                else:
                    _deliver(r.future, one)
            return
        self._stats["requests"] += len(batch)
        for r, result in zip(batch, grads, strict=True):
            _deliver(r.future, result)

    async def _vjp(
        self,
        xs: list[tuple[Tensor, ...]],
        gs: list[_GradOutput],
        rows: list[int],
        output: bool,
        params: bool = False,
    ) -> list[_Result]:
        """One forward and one backward over the stacked rows; each request's gradient rows
        back, with its output rows (detached) if ``output``."""
        n = sum(rows)
        if len(xs) == 1:
            parts = xs[0]
        else:
            with no_grad():  # the requests' tensors may require grad: stacking records nothing
                parts = tuple(ops.cat([p[i] for p in xs], 0) for i in range(len(xs[0])))
        if params:
            return await self._parameter_vjp(xs, parts, gs, rows)
        forward_only = gs[0] is FORWARD_ONLY
        x = parts[0].detach().requires_grad_(not forward_only)
        args = [a.detach() for a in parts[1:]]
        run = _forward_only if forward_only else _forward
        out = _checked_output(await self._run_forward(run, x, args, n, forward_only), n)
        st = self._stats
        outs: list[Tensor] | None = None
        if output or (gs[0] is not None and not isinstance(gs[0], Tensor)):
            outs = _split(out.detach(), rows)
        if forward_only:
            assert outs is not None
            _count_batch(st, n)
            return [(o, None) for o in outs]
        root, go = _root(out, gs, outs)
        (gx,) = await _grad(root, x, grad_outputs=go, priority=self.priority)
        _count_batch(st, n)
        assert gx is not None
        grads = _split(gx, rows)
        if outs is None:
            return [(None, g) for g in grads]
        return list(zip(outs, grads, strict=True))

    async def _parameter_vjp(
        self,
        xs: list[tuple[Tensor, ...]],
        parts: tuple[Tensor, ...],
        gs: list[_GradOutput],
        rows: list[int],
    ) -> list[_Result]:
        """Each request's parameter gradients from one batched pass, or from a pass per request
        where no rule covers a use of a parameter (See NOTE [Per-request parameter gradients]
        in asyncgrad/per_sample.py)."""
        n = sum(rows)
        named = [(name, p) for name, p in self.model.named_parameters() if p.requires_grad]  # type: ignore[attr-defined]
        ps = [p for _, p in named]
        if len(xs) == 1:  # a request alone needs no rule
            return [(None, await self._parameters_alone(xs[0], gs[0], ps, named))]
        x = parts[0].detach()
        args = [a.detach() for a in parts[1:]]
        captured: list[per_sample.Call] = []
        self._capture_start()
        try:
            run = functools.partial(_forward_capturing, captured)
            out = _checked_output(await self._run_forward(run, x, args, n, "params"), n)
        finally:
            self._capture_end()
        if not per_sample.covered(out, captured, ps, n):
            self._stats["parameter_batches_alone"] += 1
            return [
                (None, await self._parameters_alone(xi, g, ps, named))
                for xi, g in zip(xs, gs, strict=True)
            ]
        outs = (
            _split(out.detach(), rows)
            if gs[0] is not None and not isinstance(gs[0], Tensor)
            else None
        )
        root, go = _root(out, gs, outs)
        live = [y for call in captured for y in call.outputs if y.requires_grad]
        got = iter(
            await _grad(root, live, grad_outputs=go, allow_unused=True, priority=self.priority)
        )
        calls = [
            (call, tuple(next(got) if y.requires_grad else None for y in call.outputs))
            for call in captured
        ]
        mine = await self._placed(
            (tuple(x.shape[1:]), x.dtype, x.device, "rules"),
            n,
            "parameter_rules_off_loop",
            per_sample.per_request,
            calls,
            rows,
            self._blocks,
        )
        _count_batch(self._stats, n)
        return [(None, _by_name(named, d)) for d in mine]

    async def _parameters_alone(
        self,
        x: tuple[Tensor, ...],
        g: _GradOutput,
        ps: list[Tensor],
        named: list[tuple[str, Tensor]],
    ) -> dict[str, Tensor]:
        """One request's parameter gradients from a forward and backward of its own rows."""
        n = int(x[0].shape[0])
        _count_batch(self._stats, n)
        out = _checked_output(
            await self._run_forward(
                _forward, x[0].detach(), [a.detach() for a in x[1:]], n, "params"
            ),
            n,
        )
        outs = [out.detach()] if g is not None and not isinstance(g, Tensor) else None
        root, go = _root(out, [g], outs)
        grads = await _grad(root, ps, grad_outputs=go, allow_unused=True, priority=self.priority)
        return _by_name(
            named, {id(p): gp for p, gp in zip(ps, grads, strict=True) if gp is not None}
        )

    def _capture_start(self) -> None:
        """Hooks that capture the calls of the modules with a per-sample rule, while any
        parameter-gradient batch runs (they read the batch's capture list from its context)."""
        self._capturing += 1
        if self._capturing == 1:
            for m in self.model.modules():  # type: ignore[attr-defined]
                if per_sample.has_rule(m):
                    self._hooks.append(m.register_forward_hook(_capture_hook, with_kwargs=True))

    def _capture_end(self) -> None:
        self._capturing -= 1
        if not self._capturing:
            for h in self._hooks:
                h.remove()
            self._hooks.clear()

    async def _run_forward(
        self,
        run: Callable[[Callable[..., Tensor], Tensor, list[Tensor]], Tensor],
        x: Tensor,
        args: list[Tensor],
        n: int,
        mode: Any,
    ) -> Tensor:
        """The batch's forward, on the loop or on a compute thread (See NOTE [Forwards off the
        loop])."""
        kind = (tuple(x.shape[1:]), x.dtype, x.device, mode)
        return await self._placed(kind, n, "forwards_off_loop", run, self.model, x, args)

    async def _placed(self, kind: Any, n: int, count: str, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``, a batch's work of ``n`` rows of ``kind``, on the loop or on a compute
        thread by its last time (See NOTE [Forwards off the loop]); ``count`` names the stat
        of those run off the loop."""
        off = self.forward_off_loop
        if off is False:
            return fn(*args)
        if off is None:
            last = self._forward_time.get(kind)
            off = last is None or last[0] * n > OFF_LOOP_FORWARD_S * last[1]
        out: _T
        if off:
            self._stats[count] += 1
            out, seconds = await run_off_loop(_timed, fn, *args)
        else:
            t0 = perf_counter()
            out = fn(*args)
            seconds = perf_counter() - t0
        self._forward_time[kind] = (seconds, n)
        return out

    def _check_exact(self) -> None:
        """Refuse a model that uses batch statistics (See NOTE [Coalesced gradients])."""
        modules = getattr(self.model, "modules", None)
        if modules is None:
            return
        for m in modules():  # read each time: a module may be added, or switch modes
            if getattr(m, "_uses_batch_statistics", False):
                raise RuntimeError(
                    f"Coalescer: {type(m).__name__} normalizes with statistics of the batch "
                    "(it is in training mode, or has no running statistics), so one request's "
                    "gradient would depend on the others in its batch; call model.eval() "
                    "before serving"
                )


def _forward(model: Callable[..., Tensor], x: Tensor, args: list[Tensor]) -> Tensor:
    """``model(x, *args)`` recording a graph, whatever the caller's grad mode."""
    if is_grad_enabled():
        return model(x, *args)
    with enable_grad():
        return model(x, *args)


def _checked_output(out: Any, n: int) -> Tensor:
    """The model's output of a batch of ``n`` rows, refused unless a Tensor of ``n`` rows."""
    if not isinstance(out, Tensor):
        raise TypeError(
            f"Coalescer: the model returned {type(out).__name__}, not a Tensor of per-sample "
            "outputs"
        )
    if out.dim() < 1 or out.shape[0] != n:
        raise RuntimeError(
            f"Coalescer: the model's output has shape {tuple(out.shape)}, not one row per "
            f"input row ({n} rows): its outputs are not per-sample, so the batched "
            "gradient would not be each request's own"
        )
    return out


def _root(
    out: Tensor, gs: list[_GradOutput], outs: list[Tensor] | None
) -> tuple[Tensor, Tensor | None]:
    """What the backward starts from: the outputs with the requests' grad_outputs stacked. A
    batch's requests all give grad_output or none does (they share a key); without, the
    gradient of the outputs' sum is the same as with ones, one op cheaper."""
    if gs[0] is None:
        return out.sum(), None
    given = [_grad_output_of(g, outs, i) for i, g in enumerate(gs)]
    return out, given[0] if len(given) == 1 else ops.cat(given, 0)


def _by_name(named: list[tuple[str, Tensor]], grads: dict[int, Tensor]) -> dict[str, Tensor]:
    """Gradients by parameter name; a parameter the output does not reach gets zeros."""
    out = {}
    for name, p in named:
        g = grads.get(id(p))
        out[name] = g if g is not None else ops.zeros_like(p.detach())
    return out


def _capture_hook(
    module: Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
) -> None:
    """A per-sample module's forward hook: its call, into the batch's capture list."""
    cap = _CAPTURE.get()
    if cap is not None:
        call = per_sample.call_of(module, args, kwargs, output)
        if call is not None:
            cap.append(call)


def _forward_capturing(
    captured: list[per_sample.Call],
    model: Callable[..., Tensor],
    x: Tensor,
    args: list[Tensor],
) -> Tensor:
    """``_forward`` with the capture list of its batch set for the hooks."""
    tok = _CAPTURE.set(captured)
    try:
        return _forward(model, x, args)
    finally:
        _CAPTURE.reset(tok)


def _timed(fn: Callable[..., _T], *args: Any) -> tuple[_T, float]:
    """``fn(*args)`` and the seconds it took (on the thread that ran it)."""
    t0 = perf_counter()
    out = fn(*args)
    return out, perf_counter() - t0


def _forward_only(model: Callable[..., Tensor], x: Tensor, args: list[Tensor]) -> Tensor:
    """``model(x, *args)`` recording nothing."""
    with no_grad():
        return model(x, *args)


def _count_batch(st: dict[str, int], n: int) -> None:
    st["batches"] += 1
    st["rows"] += n
    if n > st["largest_batch"]:
        st["largest_batch"] = n


def _split(t: Tensor, rows: list[int]) -> list[Tensor]:
    """Each request's rows of ``t``."""
    if len(rows) == 1:
        return [t]
    parts: list[Tensor] = []
    start = 0
    for k in rows:
        parts.append(t[start : start + k])
        start += k
    return parts


def _grad_output_of(g: _GradOutput, outs: list[Tensor] | None, i: int) -> Tensor:
    """Request ``i``'s grad_output rows: given, or computed from its output rows."""
    if g is None or isinstance(g, Tensor):
        assert g is not None  # a batch mixes no request without one (their keys differ)
        return g
    assert outs is not None
    assert not isinstance(g, _ForwardOnly)  # forward-only batches have no backward
    out = outs[i]
    with no_grad():
        got = g(out)
    if not isinstance(got, Tensor) or tuple(got.shape) != tuple(out.shape):
        what = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
        raise RuntimeError(
            f"Coalescer: grad_output returned {what} for output rows of shape "
            f"{tuple(out.shape)}: it must return a Tensor of the output rows' shape"
        )
    return got.detach()


def _deliver(fut: asyncio.Future[_Result], result: _Result) -> None:
    if not fut.done():  # a caller cancelled meanwhile: its rows are discarded
        fut.set_result(result)


def _deliver_error(fut: asyncio.Future[_Result], e: BaseException) -> None:
    if not fut.done():
        fut.set_exception(e)
