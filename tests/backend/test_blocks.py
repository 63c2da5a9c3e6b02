"""backend.Blocks: a block is given out again only once nothing refers to it, its bytes stay
within the bound, and threads taking blocks at once never share one (See NOTE [Reused
blocks])."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import backend

LIKE = np.empty(1)
SHAPE = (3, 4, 5)
F64 = np.dtype(np.float64)


def address(a: Any) -> int:
    return int(a.__array_interface__["data"][0])


def test_a_block_nothing_holds_is_given_out_again() -> None:
    blocks = backend.Blocks(1 << 20)
    a = blocks.empty(SHAPE, F64, LIKE)
    first = address(a)
    del a
    b = blocks.empty(SHAPE, F64, LIKE)
    assert address(b) == first
    assert blocks.reused == 1
    assert blocks.nbytes == b.nbytes


@pytest.mark.parametrize(
    "hold",
    [
        lambda a: a[1:],  # a view
        lambda a: a.reshape(-1)[::2],  # a view of a view
        ag.from_numpy,  # a Tensor over it
        lambda a: ag.from_numpy(a)[0].t(),  # a view of that Tensor
        memoryview,  # an exported buffer
        lambda a: (a,),  # a plain reference
    ],
    ids=["view", "view-of-view", "tensor", "tensor-view", "memoryview", "reference"],
)
def test_a_block_anyone_holds_is_never_given_out(hold: Any) -> None:
    blocks = backend.Blocks(1 << 20)
    a = blocks.empty(SHAPE, F64, LIKE)
    a[...] = 7.0
    holder = hold(a)
    first = address(a)
    del a
    b = blocks.empty(SHAPE, F64, LIKE)
    assert address(b) != first
    b[...] = -1.0  # the next result's values do not reach what the holder sees
    seen = np.asarray(holder.numpy() if isinstance(holder, ag.Tensor) else holder)
    assert seen.size > 0
    assert (seen == 7.0).all()
    assert blocks.reused == 0
    del holder, seen
    c = blocks.empty(SHAPE, F64, LIKE)  # released now: the first block again
    assert address(c) == first


def test_shape_and_dtype_must_match() -> None:
    blocks = backend.Blocks(1 << 20)
    a = blocks.empty(SHAPE, F64, LIKE)
    first = address(a)
    del a
    for shape, dtype in (((3, 4, 6), F64), ((5, 4, 3), F64), (SHAPE, np.dtype(np.float32))):
        b = blocks.empty(shape, dtype, LIKE)
        assert (b.shape, b.dtype) == (shape, dtype)
        assert address(b) != first
        del b
    assert blocks.reused == 0


def test_the_bytes_kept_stay_within_the_bound() -> None:
    each = int(np.prod(SHAPE)) * 8
    none = backend.Blocks(0)
    a = none.empty(SHAPE, F64, LIKE)
    assert a.shape == SHAPE
    assert none.nbytes == 0  # kept nothing
    del a
    none.empty(SHAPE, F64, LIKE)
    assert none.reused == 0
    two = backend.Blocks(2 * each)
    held = [two.empty(SHAPE, F64, LIKE) for _ in range(3)]  # the third does not fit
    assert two.nbytes == 2 * each
    del held[0]
    # A shape that fits only without the unheld block: the oldest unheld one goes.
    c = two.empty((each // 8,), F64, LIKE)
    assert two.nbytes == 2 * each
    del c
    d = two.empty(SHAPE, F64, LIKE)  # the SHAPE kept is held: a new one, in c's place
    assert two.reused == 0
    assert two.nbytes == 2 * each
    d[...] = 3.0
    del d
    e = two.empty(SHAPE, F64, LIKE)  # d's block again, its values as d left them
    assert two.reused == 1
    assert (e == 3.0).all()
    big = two.empty((3 * each // 8,), F64, LIKE)  # larger than the bound: handed out unpooled
    assert big.size == 3 * each // 8
    assert two.nbytes == 2 * each
    del e, held
    two.clear()
    assert two.nbytes == 0


def test_threads_taking_blocks_at_once_never_share_one() -> None:
    """Four threads take blocks of two shapes, fill them with their own marker, compute with
    them (NumPy releases the GIL) and check the marker is still whole: a block given to two
    holders at once would show another thread's marker."""
    blocks = backend.Blocks(64 * 8 * 4096)
    errors: list[str] = []
    start = threading.Barrier(4)

    def work(k: int) -> None:
        start.wait(timeout=10.0)
        for i in range(300):
            shape = (64, 64) if i % 2 else (32, 128)
            keep = [blocks.empty(shape, F64, LIKE) for _ in range(1 + i % 3)]
            for j, b in enumerate(keep):
                b[...] = k * 1000 + j
            for j, b in enumerate(keep):
                np.sqrt(b * b, out=b)  # releases the GIL while others run
                if not (b == k * 1000 + j).all():
                    errors.append(f"thread {k}, round {i}: a block changed while held")
            del keep

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60.0)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:3]
    assert blocks.reused > 0  # the test exercised reuse


def test_device_arrays_come_from_their_device_pool() -> None:
    like = ag.zeros(1, device="cuda")._array  # the simulated device in the tests (conftest)
    blocks = backend.Blocks(1 << 20)
    a = blocks.empty(SHAPE, F64, like)
    assert type(a) is type(like)
    assert (a.shape, a.dtype) == (SHAPE, F64)
    assert blocks.nbytes == 0  # kept by the device's own pool, not here
