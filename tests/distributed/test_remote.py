"""Gradients across processes: modules on Ray actors as nodes of a local graph."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.distributed as agd
from asyncgrad import nn

F64 = ag.float64
TIMEOUT_S = 60


def stage1() -> nn.Module:
    ag.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 8, dtype=F64), nn.Tanh())


def stage2() -> nn.Module:
    ag.manual_seed(2)
    return nn.Sequential(nn.Linear(8, 3, dtype=F64), nn.Tanh(), nn.Linear(3, 1, dtype=F64))


def sgd(params: Any) -> Any:
    return ag.optim.SGD(params, lr=0.1)


def data(rows: int = 6) -> tuple[ag.Tensor, ag.Tensor]:
    rng = np.random.default_rng(0)
    return ag.tensor(rng.standard_normal((rows, 4))), ag.tensor(rng.standard_normal((rows, 1)))


class Gate(nn.Module):
    """Stage 2, whose backward waits on an event nobody sets, and records being cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = stage2()
        self.holding = asyncio.Event()
        self.cancelled = asyncio.Event()

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        h = x * 1.0
        h.register_hook(self._hold)
        return self.inner(h)

    async def _hold(self, g: ag.Tensor) -> None:
        self.holding.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def is_holding(self) -> bool:
        await asyncio.wait_for(self.holding.wait(), TIMEOUT_S)
        return True

    async def was_cancelled(self) -> bool:
        await asyncio.wait_for(self.cancelled.wait(), TIMEOUT_S)
        return True


async def _same_gradients(rm: agd.RemoteModule, local: nn.Module) -> None:
    got = await asyncio.wait_for(rm.gradients(), TIMEOUT_S)
    for name, p in local.named_parameters():
        assert p.grad is not None
        g = got[name]
        assert g is not None, name
        np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=0, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("how", ["awaited", "blocking"])
async def test_a_model_split_over_two_actors_gives_the_local_gradients(
    ray_cluster: Any, how: str
) -> None:
    a = agd.RemoteModule(stage1, optimizer=sgd, actor_options={"num_cpus": 0})
    b = agd.RemoteModule(stage2, optimizer=sgd, actor_options={"num_cpus": 0})
    x, y = data()
    local1, local2 = stage1(), stage2()
    xl = x.detach().requires_grad_(True)
    want_loss = ((local2(local1(xl)) - y) ** 2).mean()
    want_loss.backward()

    x.requires_grad_(True)
    loss = ((await b(await a(x)) - y) ** 2).mean()
    assert loss.item() == pytest.approx(want_loss.item(), rel=1e-15)
    assert await a.kept_graphs() == 1
    if how == "awaited":
        await asyncio.wait_for(ag.backward(loss), TIMEOUT_S)
    else:
        await asyncio.wait_for(asyncio.to_thread(loss.backward), TIMEOUT_S)
    assert x.grad is not None
    assert xl.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), xl.grad.numpy(), rtol=0, atol=1e-14)
    await _same_gradients(a, local1)  # each actor's parameters got the local gradients
    await _same_gradients(b, local2)
    assert await a.kept_graphs() == 0  # released by the backward
    assert await b.kept_graphs() == 0

    await asyncio.wait_for(a.step(), TIMEOUT_S)  # each owner steps its own parameters
    sgd(local1.parameters()).step()
    got = await asyncio.wait_for(a.state_dict(), TIMEOUT_S)
    for k, v in local1.state_dict().items():
        np.testing.assert_allclose(got[k].numpy(), v.numpy(), rtol=0, atol=1e-14)


async def test_a_backward_reaches_remote_parameters_from_inputs_without_grad(
    ray_cluster: Any,
) -> None:
    b = agd.RemoteModule(stage2, actor_options={"num_cpus": 0})
    x = ag.ones(2, 8, dtype=F64)  # requires no grad
    out = await b(x)
    assert out.requires_grad
    await asyncio.wait_for(ag.backward(out.sum()), TIMEOUT_S)
    local = stage2()
    local(x).sum().backward()
    await _same_gradients(b, local)
    with ag.no_grad():  # a forward that records nothing keeps no graph
        assert not (await b(x)).requires_grad
    assert await b.kept_graphs() == 0


async def test_a_dead_actor_fails_the_backward_naming_the_module(ray_cluster: Any) -> None:
    ray = ray_cluster
    b = agd.RemoteModule(stage2, name="stage two", actor_options={"num_cpus": 0})
    out = await b(ag.ones(1, 8, dtype=F64, requires_grad=True))
    ray.kill(b.actor)
    with pytest.raises(RuntimeError, match="remote module 'stage two': its actor died"):
        await asyncio.wait_for(ag.backward(out.sum()), TIMEOUT_S)


async def test_cancelling_the_backward_cancels_the_actors(ray_cluster: Any) -> None:
    gate = agd.RemoteModule(Gate, actor_options={"num_cpus": 0})
    out = await gate(ag.ones(1, 8, dtype=F64, requires_grad=True))
    task = asyncio.ensure_future(ag.backward(out.sum()))
    assert await asyncio.wait_for(gate.actor.call.remote("is_holding"), TIMEOUT_S)
    assert not task.done()  # the actor's backward holds it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.wait_for(gate.actor.call.remote("was_cancelled"), TIMEOUT_S)


async def test_graphs_without_a_backward_are_released(ray_cluster: Any) -> None:
    b = agd.RemoteModule(stage2, actor_options={"num_cpus": 0})
    x = ag.ones(1, 8, dtype=F64, requires_grad=True)
    out = await b(x)
    assert await b.kept_graphs() == 1
    del out  # the local graph goes: the actor is told, before the next call from here
    assert await b.kept_graphs() == 0
    expiring = agd.RemoteModule(stage2, ttl_s=0.05, actor_options={"num_cpus": 0})
    keep = await expiring(x)
    await asyncio.sleep(0.1)  # time passing: past the graph's ttl_s
    await expiring(x)  # each forward drops the graphs older than ttl_s
    with pytest.raises(RuntimeError, match=r"expired after ttl_s=0\.05"):
        await asyncio.wait_for(ag.backward(keep.sum()), TIMEOUT_S)


async def test_bad_inputs_raise(ray_cluster: Any) -> None:
    b = agd.RemoteModule(stage2, actor_options={"num_cpus": 0})
    with pytest.raises(TypeError, match="input 0 is a list, not a Tensor"):
        await b([1.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl_s must be > 0"):
        agd.RemoteModule(stage2, ttl_s=0)


async def test_micro_batches_in_flight_give_the_local_gradients(ray_cluster: Any) -> None:
    a = agd.RemoteModule(stage1, actor_options={"num_cpus": 0})
    b = agd.RemoteModule(stage2, actor_options={"num_cpus": 0})
    x, y = data(8)
    local1, local2 = stage1(), stage2()
    ((local2(local1(x)) - y) ** 2).sum().backward()

    async def micro(rows: slice) -> ag.Tensor:
        return ((await b(await a(x[rows])) - y[rows]) ** 2).sum()

    # Four micro-batches through both stages at once, then one backward of their sum, whose
    # remote parts for the four run concurrently.
    losses = await asyncio.gather(*[micro(slice(i, i + 2)) for i in range(0, 8, 2)])
    await asyncio.wait_for(ag.backward(losses[0] + losses[1] + losses[2] + losses[3]), TIMEOUT_S)
    await _same_gradients(a, local1)
    await _same_gradients(b, local2)


async def test_a_thousand_forwards_without_backward_leave_nothing_kept(ray_cluster: Any) -> None:
    b = agd.RemoteModule(stage2, actor_options={"num_cpus": 0})
    x = ag.ones(1, 8, dtype=F64, requires_grad=True)
    for _ in range(1000):
        out = await b(x)  # the previous output, and its graph, go
    del out
    assert await b.kept_graphs() == 0


async def test_an_actor_killed_mid_backward_fails_it_naming_the_module(ray_cluster: Any) -> None:
    ray = ray_cluster
    gate = agd.RemoteModule(Gate, name="gated stage", actor_options={"num_cpus": 0})
    out = await gate(ag.ones(1, 8, dtype=F64, requires_grad=True))
    task = asyncio.ensure_future(ag.backward(out.sum()))
    assert await asyncio.wait_for(gate.actor.call.remote("is_holding"), TIMEOUT_S)
    ray.kill(gate.actor)  # while its backward runs
    with pytest.raises(RuntimeError, match="remote module 'gated stage': its actor died"):
        await asyncio.wait_for(task, TIMEOUT_S)


def _local_grads(local: nn.Module) -> dict[str, np.ndarray]:
    return {k: p.grad.numpy() for k, p in local.named_parameters() if p.grad is not None}


async def test_a_context_keeps_its_own_gradients_and_steps_over_them(ray_cluster: Any) -> None:
    a = agd.RemoteModule(stage1, optimizer=sgd, actor_options={"num_cpus": 0})
    b = agd.RemoteModule(stage2, optimizer=sgd, actor_options={"num_cpus": 0})
    x, y = data(8)

    async def step_in_context(rows: slice) -> dict[str, Any]:
        async with agd.context() as ctx:
            for _ in range(2):  # two backwards accumulate in the context
                loss = ((await b(await a(x[rows])) - y[rows]) ** 2).mean()
                await ag.backward(loss)
            return {"a": await ctx.gradients(a), "b": await ctx.gradients(b)}

    # Two requests at once, each in its own context: their gradients never mix.
    first, second = await asyncio.wait_for(
        asyncio.gather(step_in_context(slice(0, 4)), step_in_context(slice(4, 8))), TIMEOUT_S
    )
    for got, rows in ((first, slice(0, 4)), (second, slice(4, 8))):
        l1, l2 = stage1(), stage2()
        for _ in range(2):
            ((l2(l1(x[rows])) - y[rows]) ** 2).mean().backward()
        for name, local in (("a", l1), ("b", l2)):
            want = _local_grads(local)
            assert set(got[name]) == set(want)
            for k, g in want.items():
                np.testing.assert_allclose(got[name][k].numpy(), g, rtol=0, atol=1e-14)
    grads = await asyncio.wait_for(a.gradients(), TIMEOUT_S)
    assert all(g is None for g in grads.values())  # .grad untouched
    assert await a.kept_contexts() == 0  # released when each context ended
    assert await b.kept_contexts() == 0

    async with agd.context() as ctx:  # a distributed optimizer's step: over the context's
        loss = ((await b(await a(x)) - y) ** 2).mean()
        await ag.backward(loss)
        await asyncio.wait_for(a.step(ctx), TIMEOUT_S)
    l1, l2 = stage1(), stage2()
    ((l2(l1(x)) - y) ** 2).mean().backward()
    sgd(l1.parameters()).step()
    got = await asyncio.wait_for(a.state_dict(), TIMEOUT_S)
    for k, v in l1.state_dict().items():
        np.testing.assert_allclose(got[k].numpy(), v.numpy(), rtol=0, atol=1e-14)
    grads = await asyncio.wait_for(a.gradients(), TIMEOUT_S)
    assert all(g is None for g in grads.values())


async def test_a_thousand_contexts_leave_nothing_on_the_owner(ray_cluster: Any) -> None:
    b = agd.RemoteModule(stage2, actor_options={"num_cpus": 0})
    x = ag.ones(1, 8, dtype=F64)
    for _ in range(1000):
        async with agd.context():
            await ag.backward((await b(x)).sum())
    assert await b.kept_contexts() == 0
    assert await b.kept_graphs() == 0
