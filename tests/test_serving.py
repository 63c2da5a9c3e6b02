"""ag.serving.Coalescer: concurrent gradient requests coalesced into batched passes (NOTE
[Coalesced gradients]). Every coalesced gradient is checked against the same gradient computed
alone; order and batching are read from the coalescer's own counters, never from timing."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.serving import Coalescer

from .engine.helpers import THREAD_TIMEOUT_S, TIMEOUT_S

RTOL = 1e-12


def mlp(seed: int = 0) -> ag.nn.Module:
    ag.manual_seed(seed)
    return ag.nn.Sequential(
        ag.nn.Linear(5, 16, dtype=ag.float64),
        ag.nn.Tanh(),
        ag.nn.Linear(16, 3, dtype=ag.float64),
    )


def alone(model: Any, x: ag.Tensor, g: ag.Tensor | None = None) -> np.ndarray[Any, Any]:
    """The input gradient of one request, computed by itself."""
    xx = x.detach().requires_grad_(True)
    out = model(xx)
    (gx,) = ag.grad_sync(out, xx, grad_outputs=ag.ones_like(out) if g is None else g)
    return gx.numpy()


def rows(n: int, seed: int) -> ag.Tensor:
    rng = np.random.default_rng(seed)
    return ag.tensor(rng.standard_normal((n, 5)), dtype=ag.float64)


class Held(ag.nn.Module):
    """A model whose first call waits on its compute thread until the test opens the gate, so
    that the requests made meanwhile queue behind it: which requests share a batch is then
    fixed by construction, not by timing. A module, so that a module given as ``inner`` is its
    child (its parameters are the model's, named ``inner.*``)."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.first = True

    def forward(self, *args: Any) -> Any:
        if self.first:
            self.first = False
            self.entered.set()
            assert self.gate.wait(THREAD_TIMEOUT_S), "the test never opened the gate"
        return self.inner(*args)


async def first_then_the_rest(held: Held, calls: list[Any]) -> list[Any]:
    """Run ``calls[0]()``; once its forward is held, start the others (they queue), then let it
    go; the results in order."""
    try:
        async with asyncio.timeout(TIMEOUT_S):
            first = asyncio.create_task(calls[0]())
            assert await asyncio.to_thread(held.entered.wait, THREAD_TIMEOUT_S)
            rest = [asyncio.create_task(f()) for f in calls[1:]]
            await asyncio.sleep(0)  # each has made its request
            held.gate.set()
            return await asyncio.gather(first, *rest)
    finally:
        held.gate.set()


async def gather(*aws: Any) -> list[Any]:
    async with asyncio.timeout(TIMEOUT_S):
        return await asyncio.gather(*aws)


async def test_each_caller_gets_its_own_gradient_from_one_batch() -> None:
    model = mlp()
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, i) for i, n in enumerate((1, 3, 2, 4))]
    gs = [None, ag.tensor(np.arange(9.0).reshape(3, 3)), None, None]
    # Requests with and without grad_output go to batches of their own.
    calls = [functools.partial(c.grad, x, grad_output=g) for x, g in zip(xs, gs, strict=True)]
    got = await first_then_the_rest(held, calls)
    for x, g, r in zip(xs, gs, got, strict=True):
        assert r.shape == x.shape
        np.testing.assert_allclose(r.numpy(), alone(model, x, g), rtol=RTOL, atol=1e-14)
    st = c.stats()
    assert st["requests"] == 4
    # The first of each kind runs at once, alone; the two that came meanwhile together (those
    # without grad_output: the one with it is of another kind).
    assert st["batches"] == 3
    assert st["largest_batch"] == 2 + 4


async def test_gradients_of_per_sample_losses_match_torch() -> None:
    torch = pytest.importorskip("torch", reason="the reference values come from PyTorch")
    model = mlp(3)
    target = ag.tensor([0, 2, 1, 1, 0])

    def per_sample_loss(x: ag.Tensor, t: ag.Tensor) -> ag.Tensor:
        return ag.nn.functional.cross_entropy(model(x), t, reduction="none")

    held = Held(per_sample_loss)
    c = Coalescer(held, forward_off_loop=True)
    x = rows(5, 7)
    # Each request its own sample and target: the first runs at once, the four behind it as
    # one batch, each target stacked with its sample.
    calls = [functools.partial(c.grad, x[i : i + 1], target[i : i + 1]) for i in range(5)]
    got = await first_then_the_rest(held, calls)
    assert c.stats()["batches"] == 2
    assert c.stats()["largest_batch"] == 4
    tm = torch.nn.Sequential(
        torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)
    ).double()
    with torch.no_grad():
        for tl, al in zip((tm[0], tm[2]), (model[0], model[2]), strict=True):
            tl.weight.copy_(torch.from_numpy(al.weight.detach().numpy()))
            tl.bias.copy_(torch.from_numpy(al.bias.detach().numpy()))
    # Sample i pairs with target i in the batch, as in one torch call over all five.
    xt = torch.from_numpy(x.numpy()).requires_grad_(True)
    losses = torch.nn.functional.cross_entropy(
        tm(xt), torch.tensor([0, 2, 1, 1, 0]), reduction="none"
    )
    (ref,) = torch.autograd.grad(losses.sum(), xt)
    np.testing.assert_allclose(
        np.concatenate([g.numpy() for g in got]), ref.numpy(), rtol=1e-10, atol=1e-12
    )


async def test_requests_that_arrive_during_a_batch_form_the_next_one() -> None:
    model = mlp()
    c = Coalescer(model, max_batch=6)
    xs = [rows(3, i) for i in range(10)]
    got = await gather(*(c.grad(x) for x in xs))
    for x, r in zip(xs, got, strict=True):
        np.testing.assert_allclose(r.numpy(), alone(model, x), rtol=RTOL, atol=1e-14)
    st = c.stats()
    assert st["requests"] == 10
    assert st["largest_batch"] <= 6  # the cap, with requests never split
    assert st["rows"] == 30
    assert st["batches"] >= 5


async def test_one_request_alone_runs_at_once_in_one_batch() -> None:
    model = mlp()
    c = Coalescer(model)
    x = rows(2, 0)
    (r,) = await gather(c.grad(x))
    np.testing.assert_allclose(r.numpy(), alone(model, x), rtol=RTOL, atol=1e-14)
    assert c.stats()["batches"] == 1


async def test_a_request_cancelled_before_its_batch_starts_is_dropped() -> None:
    """The first batch's forward runs on a compute thread and waits there for a gate, so the
    loop goes on: two requests queue behind it, one is cancelled, then the gate opens."""
    model = mlp()
    gate = threading.Event()
    entered = threading.Event()

    def held(x: ag.Tensor) -> ag.Tensor:
        entered.set()
        assert gate.wait(THREAD_TIMEOUT_S), "the test never opened the gate"
        return model(x)

    c = Coalescer(held, forward_off_loop=True)
    x0, x1, x2 = rows(1, 0), rows(2, 1), rows(3, 2)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            first = asyncio.create_task(c.grad(x0))
            assert await asyncio.to_thread(entered.wait, THREAD_TIMEOUT_S)
            dropped = asyncio.create_task(c.grad(x1))
            kept = asyncio.create_task(c.grad(x2))
            await asyncio.sleep(0)  # both have joined the queue behind the running batch
            dropped.cancel()
            gate.set()
            g_first, g_kept = await asyncio.gather(first, kept)
            with pytest.raises(asyncio.CancelledError):
                await dropped
    finally:
        gate.set()
    np.testing.assert_allclose(g_first.numpy(), alone(model, x0), rtol=RTOL, atol=1e-14)
    np.testing.assert_allclose(g_kept.numpy(), alone(model, x2), rtol=RTOL, atol=1e-14)
    st = c.stats()
    assert st["rows"] == 1 + 3  # the cancelled request's rows never ran
    assert st["requests"] == 2


async def test_an_error_reaches_only_the_callers_whose_rows_cause_it() -> None:
    model = mlp()

    def checked(x: ag.Tensor) -> ag.Tensor:
        if (x.detach().numpy() > 100).any():
            raise ValueError("a sample is out of range")
        return model(x)

    c = Coalescer(checked)
    good = [rows(2, i) for i in range(3)]
    bad = ag.full((1, 5), 1000.0, dtype=ag.float64)
    results = await _gather_exceptions(c, [*good[:2], bad, good[2]])
    assert isinstance(results[2], ValueError)
    assert "out of range" in str(results[2])
    for x, r in zip([*good[:2], good[2]], [results[0], results[1], results[3]], strict=True):
        np.testing.assert_allclose(r.numpy(), alone(model, x), rtol=RTOL, atol=1e-14)
    assert c.stats()["alone"] >= 1


def predicted_one_hot(out: ag.Tensor) -> ag.Tensor:
    """Each output row's one-hot of its largest entry: the predicted class's score."""
    return ag.nn.functional.one_hot(out.argmax(dim=1), out.shape[1]).to(out.dtype)


def alone_predicted(model: Any, x: ag.Tensor) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A request's output and the gradient of each row's predicted-class score, alone."""
    xx = x.detach().requires_grad_(True)
    out = model(xx)
    (gx,) = ag.grad_sync(out, xx, grad_outputs=predicted_one_hot(out.detach()))
    return out.detach().numpy(), gx.numpy()


async def test_a_grad_output_computed_from_each_requests_own_output_rows() -> None:
    """``grad_output`` as a function of the request's output rows (the predicted class of
    each row, as saliency and SmoothGrad use), and ``vjp``'s output rows: each request's own,
    from one batch."""
    model = mlp(2)
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, 30 + i) for i, n in enumerate((2, 3, 1, 4))]
    calls = [functools.partial(c.vjp, x, grad_output=predicted_one_hot) for x in xs]
    got = await first_then_the_rest(held, calls)
    for x, (out, g) in zip(xs, got, strict=True):
        want_out, want_g = alone_predicted(model, x)
        assert not out.requires_grad
        np.testing.assert_allclose(out.numpy(), want_out, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(g.numpy(), want_g, rtol=RTOL, atol=1e-14)
    assert c.stats()["batches"] == 2
    assert c.stats()["largest_batch"] == 3 + 1 + 4


async def test_a_failing_grad_output_function_fails_only_its_caller() -> None:
    model = mlp(4)
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)

    def wrong_shape(out: ag.Tensor) -> ag.Tensor:
        return out[:, :1]

    def raises(out: ag.Tensor) -> ag.Tensor:
        raise KeyError("no such class")

    xs = [rows(2, 40 + i) for i in range(4)]
    fns = [predicted_one_hot, wrong_shape, predicted_one_hot, raises]
    calls = [functools.partial(c.grad, x, grad_output=f) for x, f in zip(xs, fns, strict=True)]

    async def settled(call: Any) -> Any:
        try:
            return await call()
        except Exception as e:
            return e

    got = await first_then_the_rest(held, [functools.partial(settled, f) for f in calls])
    assert isinstance(got[1], RuntimeError)
    assert "grad_output returned (2, 1) for output rows of shape (2, 3)" in str(got[1])
    assert isinstance(got[3], KeyError)
    for i in (0, 2):
        np.testing.assert_allclose(
            got[i].numpy(), alone_predicted(model, xs[i])[1], rtol=RTOL, atol=1e-14
        )
    assert c.stats()["alone"] == 3  # the batch behind the first failed: each of it alone


async def _gather_exceptions(c: Coalescer, xs: list[ag.Tensor]) -> list[Any]:
    async with asyncio.timeout(TIMEOUT_S):
        return await asyncio.gather(*(c.grad(x) for x in xs), return_exceptions=True)


async def test_bad_requests_are_rejected_before_they_join_a_batch() -> None:
    c = Coalescer(mlp(), max_batch=4)
    with pytest.raises(TypeError, match="x must be a Tensor, got list"):
        await c.grad([[1.0] * 5])
    with pytest.raises(ValueError, match=r"at least one row, got shape \(\)"):
        await c.grad(ag.tensor(1.0))
    with pytest.raises(ValueError, match=r"at least one row, got shape \(0, 5\)"):
        await c.grad(ag.zeros(0, 5))
    with pytest.raises(ValueError, match="has 5 rows, more than max_batch=4"):
        await c.grad(rows(5, 0))
    with pytest.raises(TypeError, match="x must be floating point, got int64"):
        await c.grad(ag.tensor([[1, 2, 3, 4, 5]]))
    with pytest.raises(ValueError, match=r"one row per row of x \(2\), got shape \(3, 3\)"):
        await c.grad(rows(2, 0), grad_output=ag.ones(3, 3))
    with pytest.raises(ValueError, match=r"argument 1 after x must have one row per row of x"):
        await c.grad(rows(2, 0), ag.ones(3))
    with pytest.raises(TypeError, match="argument 1 after x must be a Tensor"):
        await c.grad(rows(2, 0), [1, 2])
    with pytest.raises(TypeError, match="a function of the output rows or None, got str"):
        await c.grad(rows(2, 0), grad_output="ones")
    assert c.stats() == {
        "requests": 0, "batches": 0, "rows": 0, "largest_batch": 0, "alone": 0,
        "forwards_off_loop": 0, "parameter_batches_alone": 0, "parameter_rules_off_loop": 0,
    }  # fmt: skip


def test_bad_settings_are_refused() -> None:
    with pytest.raises(TypeError, match="model must be callable, got int"):
        Coalescer(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_concurrent must be an int >= 1, got 0"):
        Coalescer(mlp(), max_concurrent=0)
    with pytest.raises(ValueError, match="max_batch must be an int >= 1, got 0"):
        Coalescer(mlp(), max_batch=0)
    with pytest.raises(ValueError, match="max_wait_s must be >= 0, got -1"):
        Coalescer(mlp(), max_wait_s=-1)
    with pytest.raises(TypeError, match=r"forward_off_loop must be None .* got 'yes'"):
        Coalescer(mlp(), forward_off_loop="yes")  # type: ignore[arg-type]


def test_a_call_outside_an_event_loop_is_refused() -> None:
    c = Coalescer(mlp())
    coro = c.grad(rows(1, 0))
    with pytest.raises(RuntimeError, match=r"no running event loop: await ag\.grad"):
        coro.send(None)


def held_under_trio(seed: int) -> tuple[Any, Any, ag.nn.Module, Held, Coalescer]:
    """trio and trio.testing (or a skip), and a held model with its coalescer of one batch in
    flight at a time: which requests share a batch is fixed by construction."""
    trio = pytest.importorskip("trio", reason="the trio case needs trio")
    pytest.importorskip("anyio", reason="awaiting a pass under trio needs anyio")
    trio_testing = pytest.importorskip("trio.testing")
    model = mlp(seed)
    held = Held(model)
    return trio, trio_testing, model, held, Coalescer(held, forward_off_loop=True, max_concurrent=1)


def run_held(trio: Any, held: Held, main: Any) -> None:
    """``trio.run(main)``, the gate opened whatever happens (no thread is left waiting)."""
    try:
        trio.run(main)
    finally:
        held.gate.set()


def test_under_trio_requests_coalesce_with_the_same_results_and_cancellation() -> None:
    """NOTE [Batches on other event loops]: under trio the requests that wait while a batch
    runs form the next one, led by one of them; a caller cancelled before its batch is dropped
    from it, and the others' results are those computed alone."""
    trio, trio_testing, model, held, c = held_under_trio(7)
    xs = [rows(n, 60 + i) for i, n in enumerate((2, 3, 1, 2))]
    got: list[Any] = [None] * 4
    gone = trio.CancelScope()

    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:

                async def one(i: int) -> None:
                    got[i] = await c.vjp(xs[i], grad_output=predicted_one_hot)

                async def cancelled() -> None:
                    with gone:
                        got[3] = await c.vjp(xs[3], grad_output=predicted_one_hot)

                nursery.start_soon(one, 0)
                assert await trio.to_thread.run_sync(held.entered.wait, THREAD_TIMEOUT_S)
                nursery.start_soon(one, 1)
                nursery.start_soon(one, 2)
                nursery.start_soon(cancelled)
                await trio_testing.wait_all_tasks_blocked()  # each has made its request
                gone.cancel()
                await trio_testing.wait_all_tasks_blocked()
                held.gate.set()
            with pytest.raises(ValueError, match="more than max_batch"):
                await c.grad(rows(300, 0))

    run_held(trio, held, main)
    for x, (out, g) in zip(xs, got[:3], strict=False):
        want_out, want_g = alone_predicted(model, x)
        np.testing.assert_allclose(out.numpy(), want_out, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(g.numpy(), want_g, rtol=RTOL, atol=1e-14)
    assert gone.cancelled_caught
    st = c.stats()
    # The first alone, then the two that waited (the cancelled one dropped) in one batch.
    assert (st["requests"], st["batches"], st["largest_batch"]) == (3, 2, 4)
    assert not c._pending
    assert not c._runners


def test_under_trio_a_request_woken_to_lead_and_cancelled_passes_the_lead_on() -> None:
    """A request woken to lead the next batch whose caller is cancelled before it runs hands
    the lead to the next waiting request: nothing waits forever."""
    trio, trio_testing, model, held, c = held_under_trio(9)
    xs = [rows(2, 80 + i) for i in range(3)]
    got: list[Any] = [None] * 3
    gone = trio.CancelScope()

    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:

                async def one(i: int) -> None:
                    got[i] = await c.grad(xs[i])

                async def cancelled() -> None:
                    with gone:
                        got[1] = await c.grad(xs[1])

                nursery.start_soon(one, 0)
                assert await trio.to_thread.run_sync(held.entered.wait, THREAD_TIMEOUT_S)
                nursery.start_soon(cancelled)
                await trio_testing.wait_all_tasks_blocked()
                nursery.start_soon(one, 2)
                await trio_testing.wait_all_tasks_blocked()
                # Its caller cancelled, and in the same turn the request woken to lead the next
                # batch (as a batch ending then would): it leaves without leading.
                (key,) = c._pending
                waiting = next(r for r in c._pending[key] if r.x[0] is xs[1])
                gone.cancel()
                c._runners[key] += 1
                waiting.future.wake()
                await trio_testing.wait_all_tasks_blocked()
                held.gate.set()

    run_held(trio, held, main)
    assert gone.cancelled_caught
    assert got[1] is None
    for i in (0, 2):
        np.testing.assert_allclose(got[i].numpy(), alone(model, xs[i]), rtol=RTOL, atol=1e-14)
    assert not c._runners
    assert not c._pending


def test_under_trio_a_leader_cancelled_mid_batch_still_answers_the_others() -> None:
    trio, trio_testing, model, held, c = held_under_trio(8)
    xs = [rows(2, 70 + i) for i in range(3)]
    got: list[Any] = [None] * 3
    leader = trio.CancelScope()

    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:

                async def lead() -> None:
                    with leader:
                        got[0] = await c.grad(xs[0])

                async def one(i: int) -> None:
                    got[i] = await c.grad(xs[i])

                # The first leads a batch of all three (requests of the same turn join it).
                nursery.start_soon(lead)
                nursery.start_soon(one, 1)
                nursery.start_soon(one, 2)
                assert await trio.to_thread.run_sync(held.entered.wait, THREAD_TIMEOUT_S)
                leader.cancel()  # while its batch runs: the batch finishes for the others
                await trio_testing.wait_all_tasks_blocked()
                held.gate.set()

    run_held(trio, held, main)
    assert leader.cancelled_caught
    assert got[0] is None
    for i in (1, 2):
        np.testing.assert_allclose(got[i].numpy(), alone(model, xs[i]), rtol=RTOL, atol=1e-14)
    assert c.stats()["batches"] == 1


async def test_batch_statistics_are_refused_with_the_module_named() -> None:
    model = ag.nn.Sequential(ag.nn.Linear(5, 4, dtype=ag.float64), ag.nn.BatchNorm1d(4))
    c = Coalescer(model)
    with pytest.raises(RuntimeError, match="BatchNorm1d normalizes with statistics of the batch"):
        await gather(c.grad(rows(2, 0)))
    model.eval()  # running statistics: each sample alone
    x = rows(2, 0)
    (g,) = await gather(c.grad(x))
    np.testing.assert_allclose(g.numpy(), alone(model, x), rtol=RTOL, atol=1e-14)


async def test_an_output_that_is_not_per_sample_is_refused() -> None:
    model = mlp()
    c = Coalescer(lambda x: model(x).sum(0, keepdim=True))
    results = await _gather_exceptions(c, [rows(2, 0), rows(3, 1)])
    for r in results:
        assert isinstance(r, RuntimeError)
        assert "not one row per input row" in str(r)


async def test_a_forward_off_the_loop_gives_the_same_gradients() -> None:
    model = mlp()
    c = Coalescer(model, forward_off_loop=True, max_wait_s=1e-4)
    xs = [rows(2, i) for i in range(4)]
    got = await gather(*(c.grad(x) for x in xs))
    for x, r in zip(xs, got, strict=True):
        np.testing.assert_allclose(r.numpy(), alone(model, x), rtol=RTOL, atol=1e-14)


class Clocked:
    """A model whose forward takes ``cost`` seconds of a fake clock (the coalescer's
    ``perf_counter``), and that records the thread each forward ran on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.model = mlp()
        self.now = 0.0
        self.cost = 1e-4
        self.threads: list[str] = []
        monkeypatch.setattr(ag.serving, "perf_counter", lambda: self.now)

    def __call__(self, x: ag.Tensor) -> ag.Tensor:
        self.threads.append(threading.current_thread().name)
        self.now += self.cost
        return self.model(x)


async def test_forwards_leave_the_loop_by_their_measured_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NOTE [Forwards off the loop]: a kind's first forward runs on a compute thread; then a
    forward stays on the loop while its last time scaled to the batch's rows is at most
    OFF_LOOP_FORWARD_S (1 ms), and leaves it once a forward was slow."""
    m = Clocked(monkeypatch)
    c = Coalescer(m)
    loop_thread = threading.current_thread().name

    async def request(n: int) -> None:
        x = rows(n, len(m.threads))
        async with asyncio.timeout(TIMEOUT_S):
            g = await c.grad(x)
        np.testing.assert_allclose(g.numpy(), alone(m.model, x), rtol=RTOL, atol=1e-14)

    await request(1)  # nothing known: off the loop; 0.1 ms for 1 row
    await request(1)  # 0.1 ms: on the loop
    await request(20)  # 20 x 0.1 ms = 2 ms: off the loop; 0.1 ms for 20 rows
    await request(100)  # 5 x 0.1 ms = 0.5 ms: on the loop
    m.cost = 5e-3
    await request(1)  # 1/100 x 0.1 ms: on the loop; 5 ms for 1 row
    await request(1)  # 5 ms: off the loop
    where = ["loop" if t == loop_thread else t.rsplit("_", 1)[0] for t in m.threads]
    assert where == [
        "asyncgrad-compute", "loop", "asyncgrad-compute", "loop", "loop", "asyncgrad-compute"
    ]  # fmt: skip
    assert c.stats()["forwards_off_loop"] == 3
    # Each kind of row is measured for itself: another width starts off the loop again.
    m.cost = 1e-4
    wide = ag.nn.Linear(7, 2, dtype=ag.float64)
    c2 = Coalescer(lambda x: m(x) if x.shape[1] == 5 else wide(x))
    for x in (rows(1, 0), rows(1, 1), ag.ones(1, 7, dtype=ag.float64)):
        await asyncio.wait_for(c2.grad(x), TIMEOUT_S)
    assert c2.stats()["forwards_off_loop"] == 2  # the first of each width


async def test_forward_off_loop_true_or_false_fixes_where_forwards_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = Clocked(monkeypatch)
    m.cost = 1.0  # a second each: would leave the loop if the coalescer chose
    on_loop = Coalescer(m, forward_off_loop=False)
    for i in range(2):
        await asyncio.wait_for(on_loop.grad(rows(1, i)), TIMEOUT_S)
    m.cost = 0.0
    off_loop = Coalescer(m, forward_off_loop=True)
    for i in range(2):
        await asyncio.wait_for(off_loop.grad(rows(1, i)), TIMEOUT_S)
    loop_thread = threading.current_thread().name
    assert [t == loop_thread for t in m.threads] == [True, True, False, False]
    assert (on_loop.stats()["forwards_off_loop"], off_loop.stats()["forwards_off_loop"]) == (0, 2)


async def test_one_callers_requests_one_after_another_each_run_in_the_caller() -> None:
    """Nothing is concurrent: every request runs at once in its caller (no runner task, no
    waiting), as a batch of its own."""
    model = mlp()
    c = Coalescer(model)
    async with asyncio.timeout(TIMEOUT_S):
        for i in range(5):
            x = rows(2, i)
            g = await c.grad(x)
            np.testing.assert_allclose(g.numpy(), alone(model, x), rtol=RTOL, atol=1e-14)
            assert not [t for t in asyncio.all_tasks() if t.get_name() == "asyncgrad-coalescer"]
    assert c.stats()["batches"] == 5


@pytest.mark.cuda
async def test_requests_on_a_cuda_device_are_coalesced_there() -> None:
    """On a GPU one batch is one larger kernel per layer: the requests on ``cuda:0`` share a
    batch (the one made while the first is held), computed on the device, and each caller's
    rows match the gradient computed alone on the CPU."""
    from .cuda.conftest import assert_close, host

    if not ag.cuda.is_available():
        pytest.skip(f"no CUDA device: {ag.backend.cuda.why()}")
    cpu_model = mlp(5)
    model = mlp(5).to("cuda:0")
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, 10 + i) for i, n in enumerate((2, 1, 3, 4, 2))]
    calls = [functools.partial(c.grad, x.to("cuda:0")) for x in xs]
    got = await first_then_the_rest(held, calls)
    for x, r in zip(xs, got, strict=True):
        assert r.device == ag.device("cuda:0")
        assert_close(host(r), alone(cpu_model, x), rtol=1e-12, atol=1e-14)
    st = c.stats()
    assert st["requests"] == 5
    # The first alone, the four behind it as one batch.
    assert st["batches"] == 2
    assert st["largest_batch"] == 1 + 3 + 4 + 2


async def test_max_concurrent_batches_run_side_by_side() -> None:
    """With ``max_concurrent=2``, the requests queued behind a batch in flight form a second
    one that runs meanwhile (on another compute thread), instead of waiting for the first."""
    from asyncgrad.engine import settings

    before = settings.get("compute_threads")
    ag.configure(compute_threads=max(2, before))
    model = mlp(6)
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True, max_concurrent=2)
    xs = [rows(n, 50 + i) for i, n in enumerate((1, 2, 3))]
    try:
        async with asyncio.timeout(TIMEOUT_S):
            first = asyncio.create_task(c.grad(xs[0]))
            assert await asyncio.to_thread(held.entered.wait, THREAD_TIMEOUT_S)
            # The first is held in its forward: the others finish without it.
            rest = await asyncio.gather(*(c.grad(x) for x in xs[1:]))
            assert not first.done()
            held.gate.set()
            got = [await first, *rest]
    finally:
        held.gate.set()
        ag.configure(compute_threads=before)
    for x, r in zip(xs, got, strict=True):
        np.testing.assert_allclose(r.numpy(), alone(model, x), rtol=RTOL, atol=1e-14)
    assert c.stats()["batches"] == 2
    assert c.stats()["largest_batch"] == 2 + 3


@pytest.mark.cuda
async def test_output_dependent_grad_output_on_a_cuda_device() -> None:
    """``vjp`` with the predicted class's one-hot computed from each request's own output rows,
    on ``cuda:0``: outputs and gradients match the CPU's, computed alone."""
    from .cuda.conftest import assert_close, host

    if not ag.cuda.is_available():
        pytest.skip(f"no CUDA device: {ag.backend.cuda.why()}")
    cpu_model = mlp(8)
    model = mlp(8).to("cuda:0")
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, 70 + i) for i, n in enumerate((3, 2, 4))]
    calls = [functools.partial(c.vjp, x.to("cuda:0"), grad_output=predicted_one_hot) for x in xs]
    got = await first_then_the_rest(held, calls)
    for x, (out, g) in zip(xs, got, strict=True):
        want_out, want_g = alone_predicted(cpu_model, x)
        assert out.device == ag.device("cuda:0")
        assert_close(host(out), want_out, rtol=1e-12, atol=1e-14)
        assert_close(host(g), want_g, rtol=1e-12, atol=1e-14)
    assert c.stats()["batches"] == 2


async def test_forward_only_requests_batch_with_each_other_and_record_nothing() -> None:
    model = mlp(11)
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, 70 + i) for i, n in enumerate((2, 1, 3, 2))]
    # A gradient request first (it runs alone, holding its kind's place), then one of its kind
    # (which queues behind it), then two forward-only ones (which queue, concurrent with that).
    calls = [
        functools.partial(c.grad, xs[0]),
        functools.partial(c.grad, xs[3]),
        functools.partial(c.forward, xs[1]),
        functools.partial(c.forward, xs[2]),
    ]
    got = await first_then_the_rest(held, calls)
    got = [got[0], got[2], got[3], got[1]]
    for i in (1, 2):
        assert not got[i].requires_grad
        assert got[i].grad_fn is None
        with ag.no_grad():
            np.testing.assert_allclose(got[i].numpy(), model(xs[i]).numpy(), rtol=RTOL)
    for i in (0, 3):
        np.testing.assert_allclose(got[i].numpy(), alone(model, xs[i]), rtol=RTOL, atol=1e-14)
    st = c.stats()
    # The first alone; the second gradient request by itself; the two forward-only together.
    assert st["batches"] == 3
    assert st["largest_batch"] == 1 + 3
