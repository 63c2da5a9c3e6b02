"""Process groups: collectives matched by key, results equal on every rank, and ranks that
never arrive named in a timeout."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from typing import Any

import pytest

import asyncgrad as ag
import asyncgrad.distributed as agd


def run_ranks(world: int, fn: Callable[[int], Any]) -> list[Any]:
    """``fn(rank)`` on one thread per rank; their results, or the first error raised."""
    results: list[Any] = [None] * world
    errors: list[BaseException] = []

    def main(rank: int) -> None:
        try:
            results[rank] = fn(rank)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a rank did not finish"
    if errors:
        raise errors[0]
    return results


def test_all_reduce_and_broadcast_give_every_rank_the_same_result() -> None:
    group = agd.local_group(3, timeout_s=10)

    def rank(r: int) -> list[ag.Tensor]:
        pg = group.join(r)
        x = ag.tensor([0.1 * (r + 1), 1e16 if r == 0 else 1.0], dtype=ag.float64)
        return [
            pg.all_reduce("sum", x),
            pg.all_reduce("mean", x, agd.ReduceOp.MEAN),
            pg.broadcast("from 2", x, src=2),
        ]

    out = run_ranks(3, rank)
    total = (0.1 + 0.2) + 0.30000000000000004  # rank order, left to right
    assert out[0][0].tolist() == [total, (1e16 + 1.0) + 1.0]
    assert out[0][1].tolist() == [total / 3, ((1e16 + 1.0) + 1.0) / 3]
    assert out[0][2].tolist() == [0.30000000000000004, 1.0]
    for r in (1, 2):  # the same bits everywhere
        for got, want in zip(out[r], out[0], strict=True):
            assert got.tolist() == want.tolist()


def test_collectives_are_matched_by_key_not_by_order() -> None:
    group = agd.local_group(2, timeout_s=10)
    p0, p1 = group.join(0), group.join(1)
    a0 = p0.start("a", ag.tensor([1.0]))
    b0 = p0.start("b", ag.tensor([10.0]))
    b1 = p1.start("b", ag.tensor([20.0]))
    a1 = p1.start("a", ag.tensor([2.0]))
    assert a0.result().tolist() == [3.0]
    assert a1.result().tolist() == [3.0]
    assert b0.result().tolist() == [30.0]
    assert b1.result().tolist() == [30.0]


def test_results_are_new_tensors_and_contributions_are_copied() -> None:
    group = agd.local_group(1)
    pg = group.join(0)
    x = ag.ones(2, requires_grad=True)
    y = x * 2  # a non-leaf: its values are sent, not its graph
    got = pg.all_reduce("k", y)
    assert not got.requires_grad
    with ag.no_grad():
        got.add_(1.0)
    assert y.tolist() == [2.0, 2.0]


async def test_a_rank_that_never_arrives_is_named_in_a_timeout() -> None:
    group = agd.local_group(3, timeout_s=0.2)
    pg = group.join(0)
    f0 = pg.start("step", ag.ones(1))
    group.join(2).start("step", ag.ones(1))
    with pytest.raises(TimeoutError, match=r"'step': ranks \[1\] of 3 did not contribute"):
        await f0
    with pytest.raises(TimeoutError, match=r"ranks \[1\]"):  # the sync wait says the same
        f0.result()


def test_mismatched_and_repeated_contributions_raise() -> None:
    group = agd.local_group(2)
    p0, p1 = group.join(0), group.join(1)
    p0.start("k", ag.ones(1), agd.ReduceOp.SUM)
    with pytest.raises(ValueError, match=r"rank 1 asked for mean .* another rank for sum"):
        p1.start("k", ag.ones(1), agd.ReduceOp.MEAN)
    with pytest.raises(RuntimeError, match="rank 0 contributed twice"):
        p0.start("k", ag.ones(1))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: agd.local_group(0), ValueError, "world_size must be an int >= 1"),
        (lambda: agd.local_group(2, timeout_s=0), ValueError, "timeout_s must be a number > 0"),
        (lambda: agd.local_group(2).join(2), ValueError, r"rank must be an int in \[0, 2\)"),
        (lambda: agd.local_group(2).join(0).start("k", [1.0]), TypeError, "expected a Tensor"),
        (
            lambda: agd.local_group(2).join(0).start("k", ag.ones(1), "max"),
            ValueError,
            "unknown op 'max'",
        ),
        (
            lambda: agd.local_group(2).join(0).start("k", ag.ones(1), "broadcast", src=5),
            ValueError,
            "src 5 is not a rank of 2",
        ),
        (lambda: pickle.dumps(agd.local_group(2)), TypeError, "lives in one process"),
        (lambda: agd.new_group(2, backend="mpi"), ValueError, "backend must be one of"),
    ],
)
def test_bad_arguments_raise(call: Callable[[], Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()


async def test_a_started_collective_is_awaited_once_every_rank_has_contributed() -> None:
    group = agd.local_group(2, timeout_s=10)
    f = group.join(0).start("k", ag.ones(1))
    assert isinstance(f, agd.Pending)
    assert not f.done()
    group.join(1).start("k", ag.ones(1))
    assert f.done()
    assert (await f).tolist() == [2.0]
