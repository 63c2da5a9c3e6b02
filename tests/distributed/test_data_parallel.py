"""DataParallel on ranks that are threads: gradients averaged during the backward equal one
process's gradient of the whole batch, and the replicas stay identical."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.distributed as agd
from asyncgrad import nn

from .test_group import run_ranks

F64 = ag.float64


def make_model(seed: int) -> nn.Module:
    """The model, from the global generator: built on the main thread (ranks that are threads
    would draw from it at once)."""
    ag.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(5, 16, dtype=F64),
        nn.Tanh(),
        nn.Linear(16, 8, dtype=F64),
        nn.Tanh(),
        nn.Linear(8, 1, dtype=F64),
    )


def data(n: int = 24) -> tuple[ag.Tensor, ag.Tensor]:
    rng = np.random.default_rng(1)
    return ag.tensor(rng.standard_normal((n, 5))), ag.tensor(rng.standard_normal((n, 1)))


def loss_of(model: nn.Module, x: ag.Tensor, y: ag.Tensor) -> ag.Tensor:
    return ((model(x) - y) ** 2).mean()


def single_process(steps: int, lr: float = 0.05) -> list[np.ndarray]:
    model = make_model(0)
    opt = ag.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    x, y = data()
    for _ in range(steps):
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
    return [p.detach().numpy() for p in model.parameters()]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("awaited", [True, False], ids=["awaited", "blocking"])
def test_weights_after_training_equal_one_process_on_the_whole_batch(
    world: int, awaited: bool
) -> None:
    group = agd.local_group(world, timeout_s=20)
    x, y = data()
    share = x.shape[0] // world
    # Every rank but 0 starts elsewhere: the broadcast at construction aligns them.
    models = [make_model(r) for r in range(world)]

    def rank(r: int) -> list[np.ndarray]:
        model = agd.DataParallel(models[r], group.join(r), bucket_cap_mb=0.0005)
        assert len(model._buckets) > 1  # several buckets, started while the backward goes on
        opt = ag.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        xs, ys = x[r * share : (r + 1) * share], y[r * share : (r + 1) * share]

        async def train() -> None:
            for _ in range(6):
                opt.zero_grad()
                if awaited:
                    await ag.backward(loss_of(model, xs, ys))
                else:
                    loss_of(model, xs, ys).backward()
                opt.step()

        asyncio.run(train())
        return [p.detach().numpy() for p in model.module.parameters()]

    out = run_ranks(world, rank)
    want = single_process(6)
    for r in range(world):
        for got, ref in zip(out[r], want, strict=True):
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
        for got, first in zip(out[r], out[0], strict=True):
            assert np.array_equal(got, first)  # the replicas stay identical, bit for bit


def test_no_sync_accumulates_and_the_next_backward_averages_the_sum() -> None:
    group = agd.local_group(2, timeout_s=20)
    x, y = data()
    models = [make_model(0) for _ in range(2)]

    def rank(r: int) -> list[np.ndarray]:
        model = agd.DataParallel(models[r], group.join(r))
        xs, ys = x[r * 12 : (r + 1) * 12], y[r * 12 : (r + 1) * 12]
        with model.no_sync():
            (loss_of(model, xs[:6], ys[:6]) / 2).backward()
        (loss_of(model, xs[6:], ys[6:]) / 2).backward()
        return [p.grad.numpy() for p in model.parameters()]

    out = run_ranks(2, rank)
    ref = make_model(0)
    loss_of(ref, *data()).backward()
    for r in range(2):
        for got, p in zip(out[r], ref.parameters(), strict=True):
            np.testing.assert_allclose(got, p.grad.numpy(), rtol=0, atol=1e-12)


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        ag.manual_seed(0)
        self.a = nn.Linear(3, 1, dtype=F64)
        self.b = nn.Linear(3, 1, dtype=F64)

    def forward(self, x: ag.Tensor, use_b: bool) -> Any:
        return self.a(x) + (self.b(x) if use_b else 0.0)


def test_a_parameter_unused_on_a_rank_contributes_zeros() -> None:
    group = agd.local_group(2, timeout_s=20)
    x = ag.tensor(np.arange(6.0).reshape(2, 3))
    models = [Branchy() for _ in range(2)]

    def rank(r: int) -> tuple[np.ndarray, np.ndarray]:
        model = agd.DataParallel(models[r], group.join(r), bucket_cap_mb=1e-6)
        model(x[r : r + 1], use_b=(r == 0)).sum().backward()
        return model.module.a.weight.grad.numpy(), model.module.b.weight.grad.numpy()

    out = run_ranks(2, rank)
    for a, b in out:
        np.testing.assert_array_equal(a, [[1.5, 2.5, 3.5]])  # (x0 + x1) / 2
        np.testing.assert_array_equal(b, [[0.0, 0.5, 1.0]])  # x0 / 2: rank 1 sent zeros


def test_a_rank_that_fails_its_backward_is_named_on_the_others() -> None:
    group = agd.local_group(2, timeout_s=0.3)
    models = [make_model(0) for _ in range(2)]

    def rank(r: int) -> str:
        # No broadcast at construction: the only collective is the backward's.
        model = agd.DataParallel(models[r], group.join(r), broadcast_parameters=False)
        x, y = data(4)
        if r == 1:
            return "gave up"  # never runs its backward
        with pytest.raises(TimeoutError, match=r"ranks \[1\] of 2 did not contribute"):
            loss_of(model, x, y).backward()
        return "named"

    assert run_ranks(2, rank) == ["named", "gave up"]


def test_bad_arguments_raise() -> None:
    pg = agd.local_group(1).join(0)
    with pytest.raises(TypeError, match="wraps a Module, got Tensor"):
        agd.DataParallel(ag.ones(1), pg)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"pg must be a ProcessGroup \(group.join\(rank\)\)"):
        agd.DataParallel(make_model(0), agd.local_group(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bucket_cap_mb must be > 0"):
        agd.DataParallel(make_model(0), pg, bucket_cap_mb=0)


def test_forward_and_state_dict_are_the_modules() -> None:
    model = make_model(0)
    dp = agd.DataParallel(model, agd.local_group(1).join(0))
    x, _ = data(3)
    assert dp(x).tolist() == model(x).tolist()
    assert list(dp.state_dict()) == ["module." + k for k in model.state_dict()]
    assert "DataParallel(rank=0, world_size=1" in repr(dp)


class TwoDtypes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        ag.manual_seed(0)
        self.a = nn.Linear(2, 2, dtype=F64)
        self.b = nn.Linear(2, 1)  # float32

    def forward(self, x: ag.Tensor) -> Any:
        return self.b(self.a(x).float())


def test_a_bucket_of_two_dtypes_gives_each_parameter_its_own() -> None:
    model = TwoDtypes()
    dp = agd.DataParallel(TwoDtypes(), agd.local_group(1).join(0))
    x = ag.ones(3, 2, dtype=F64)
    dp(x).sum().backward()
    model(x).sum().backward()
    for p, q in zip(dp.parameters(), model.parameters(), strict=True):
        assert p.grad.dtype == p.dtype
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
