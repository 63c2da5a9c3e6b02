"""asyncgrad on a local Ray cluster: data-parallel training over actors, tensors between
processes, and a rank that dies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.distributed as agd

from .test_data_parallel import data, loss_of, make_model, single_process

TIMEOUT_S = 60  # every ray.get: nothing here may hang


class Trainer:
    """One rank of a data-parallel job (made a Ray actor in each test)."""

    def __init__(self, group: agd.Group, rank: int) -> None:
        self.rank = rank
        self.model = agd.DataParallel(make_model(rank), group.join(rank), bucket_cap_mb=0.0005)
        self.opt = ag.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    async def train(self, x: ag.Tensor, y: ag.Tensor, steps: int) -> list[ag.Tensor]:
        for _ in range(steps):
            self.opt.zero_grad()
            await ag.backward(loss_of(self.model, x, y))
            self.opt.step()
        return [p.detach() for p in self.model.module.parameters()]

    def train_blocking(self, x: ag.Tensor, y: ag.Tensor, steps: int) -> list[ag.Tensor]:
        for _ in range(steps):
            self.opt.zero_grad()
            loss_of(self.model, x, y).backward()
            self.opt.step()
        return [p.detach() for p in self.model.module.parameters()]

    def a_graph(self) -> ag.Tensor:
        return ag.ones(2, requires_grad=True) * 2


@pytest.mark.parametrize("backend", ["object_store", "gloo"])
def test_data_parallel_over_two_actors_equals_one_process(ray_cluster: Any, backend: str) -> None:
    ray = ray_cluster
    if backend == "gloo":
        pytest.importorskip("torch", reason="ray.util.collective's gloo needs torch")
    group = agd.new_group(2, backend=backend, timeout_s=30)
    actor = ray.remote(num_cpus=1)(Trainer)
    ranks = [actor.remote(group, r) for r in range(2)]
    x, y = data()
    shares = [(x[r * 12 : (r + 1) * 12], y[r * 12 : (r + 1) * 12]) for r in range(2)]
    out = ray.get([a.train.remote(*shares[r], 3) for r, a in enumerate(ranks)], timeout=TIMEOUT_S)
    out = ray.get(
        [a.train_blocking.remote(*shares[r], 3) for r, a in enumerate(ranks)], timeout=TIMEOUT_S
    )
    want = single_process(6)
    for r in range(2):
        for got, ref in zip(out[r], want, strict=True):
            np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-12)
            assert got.dtype == ag.float64
    for a, b in zip(out[0], out[1], strict=True):
        assert np.array_equal(a.numpy(), b.numpy())
    if isinstance(group, agd.RayGroup):
        assert group.pending() == 0
    for a in ranks:
        ray.kill(a)


def test_tensors_cross_processes_writable_and_graphs_never_silently_cut(
    ray_cluster: Any,
) -> None:
    ray = ray_cluster
    p = ag.nn.Parameter(ag.arange(3.0))
    back = ray.get(ray.put({"p": p, "i": ag.tensor([1, 2], dtype=ag.int32)}), timeout=TIMEOUT_S)
    assert isinstance(back["p"], ag.nn.Parameter)
    assert back["p"].requires_grad
    assert back["i"].dtype == ag.int32
    with ag.no_grad():
        back["p"].add_(1.0)  # out of the object store, yet writable
    assert back["p"].tolist() == [1.0, 2.0, 3.0]
    assert p.tolist() == [0.0, 1.0, 2.0]

    x = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"non-leaf tensor that requires grad \(grad_fn=Mul"):
        ray.put(x * 3)
    assert ray.get(ray.put((x * 3).detach()), timeout=TIMEOUT_S).tolist() == [3.0, 3.0]

    actor = ray.remote(num_cpus=0)(Trainer).remote(agd.new_group(1), 0)
    with pytest.raises(RuntimeError, match="through Ray: it would arrive as a leaf"):
        ray.get(actor.a_graph.remote(), timeout=TIMEOUT_S)  # refused in the worker too
    ray.kill(actor)


def test_a_killed_rank_fails_the_others_backward_naming_it(ray_cluster: Any) -> None:
    ray = ray_cluster
    group = agd.new_group(2, timeout_s=2)
    actor = ray.remote(num_cpus=1)(Trainer)
    ranks = [actor.remote(group, r) for r in range(2)]
    x, y = data(8)
    ray.get([a.train.remote(x, y, 1) for a in ranks], timeout=TIMEOUT_S)  # both alive
    ray.kill(ranks[1])
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(ranks[1].train.remote(x, y, 1), timeout=TIMEOUT_S)
    with pytest.raises(TimeoutError, match=r"ranks \[1\] of 2 did not contribute within 2 s"):
        ray.get(ranks[0].train.remote(x, y, 1), timeout=TIMEOUT_S)
    ray.kill(ranks[0])
