"""Backward across streams under the simulator's ordering check (NOTE [Ordering check] in
asyncgrad/backend/sim.py; conftest.py turns it on for every CUDA test on the simulator).

Each cross-stream case of NOTE [Streams in the graph] runs twice: as the engine is, where it gives
the exact gradients with every access ordered, and without the one wait or deferred free the
case depends on, where the check fails at the first unordered access, every time, whatever the
timing (a stream that must not be seen done is held by a gate). On a GPU only the first half
runs (``sim`` skips the rest): it is then an ordinary test of the gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime
from asyncgrad.engine import input_buffer, routing, streams
from asyncgrad.graph.accumulate_grad import AccumulateGrad

from .conftest import Gate, assert_close, host, leaf, side_stream

ROUNDS: Final = 20
N: Final = 64


class _Runtime:
    """``backend.cuda`` as one engine module sees it, with some of its functions replaced."""

    def __init__(self, **replaced: Callable[..., Any]) -> None:
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(runtime, name)


def _no_wait(*_: Any) -> None:
    return None


def _arrive_unordered(producer: Any, consumer: Any) -> tuple[Any, int] | None:
    """``streams.arrive`` without the consumer's wait for the producer."""
    cdev = consumer._device
    if cdev is None or cdev.type != "cuda":
        return None
    if producer._device is cdev and producer._stream is consumer._stream:
        return None
    return consumer._stream, cdev.index


def _begin_unordered(roots: Any) -> streams.Streams | None:
    """``streams.begin`` without ordering the root nodes after the caller's stream."""
    return streams.Streams() if runtime.loaded else None


# Each case's missing piece: (module, attribute, replacement).
MISSING: Final[dict[str, tuple[Any, str, Any]]] = {
    "producer_wait": (routing, "arrive", _arrive_unordered),
    "root_wait": (streams, "begin", _begin_unordered),
    "caller_wait": (streams, "cuda", _Runtime(wait_event=_no_wait)),
    "summands_kept": (input_buffer, "cuda", _Runtime(free_after=_no_wait)),
    "gradients_kept": (streams.Launch, "hold", lambda self, node, refs: None),
    "saved_kept": (streams.Launch, "hold_saved", lambda self, node: None),
}


@pytest.fixture
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """The engine as it is (False), or without one piece of MISSING (True: the test then expects
    StreamOrderError); parametrised by ``cases``."""
    piece = request.param
    if piece is None:
        yield False
        return
    if not runtime.simulated():
        pytest.skip("the ordering check is the simulator's")
    if ag.__build__ == "compiled":
        pytest.skip("pure build only: patches engine functions")
    module, name, replacement = MISSING[piece]
    monkeypatch.setattr(module, name, replacement)
    yield True


def cases(piece: str) -> pytest.MarkDecorator:
    """Run a test with the engine as it is and without ``piece``."""
    return pytest.mark.parametrize(
        "engine", [None, piece], indirect=True, ids=["engine", f"without-{piece}"]
    )


def _expect_race(mutated: bool) -> Any:
    """Nothing, for the engine as it is; StreamOrderError without a piece."""
    if not mutated:
        return contextlib.nullcontext()
    from asyncgrad.backend import sim

    return pytest.raises(sim.StreamOrderError, match="nothing orders the two")


def _two_stream_loss(w: ag.Tensor) -> tuple[ag.Tensor, ag.cuda.Stream]:
    """The issue's graph: ``w`` used on two side streams, their sums added on the default
    stream, every stream ordered after what it reads (README, CUDA); and the first stream."""
    s1, s2 = side_stream(), side_stream()
    with ag.cuda.stream(s1):
        y1 = (w @ w).sum()
    with ag.cuda.stream(s2):
        y2 = (w * 3).tanh().sum()
    ag.cuda.current_stream().wait_stream(s1)
    ag.cuda.current_stream().wait_stream(s2)
    return y1 + y2, s1


def _two_stream_grad(wv: np.ndarray) -> np.ndarray:
    ones = np.ones_like(wv)
    grad: np.ndarray = ones @ wv.T + wv.T @ ones + 3.0 * (1.0 - np.tanh(3.0 * wv) ** 2)
    return grad


# ----------------------------------------------------------------------------- the case
def test_a_leaf_used_on_two_streams_accumulates_both_gradients() -> None:
    """Its accumulator runs on the stream of the leaf's first use (s1, as torch's AccumulateGrad
    does): the gradient from s2 is ordered there before the sum."""
    rng = np.random.default_rng(3)
    for _ in range(ROUNDS):
        wv = rng.standard_normal((N, N))
        w = leaf(wv)
        loss, s1 = _two_stream_loss(w)
        assert AccumulateGrad.edge_of(w)[0]._stream is s1.native
        loss.backward()
        assert w.grad is not None
        assert_close(host(w.grad), _two_stream_grad(wv), rtol=1e-12, atol=1e-12)


def test_a_forward_that_reads_the_leaf_before_its_copy_is_ordered_fails_at_the_read(
    sim: Any,
) -> None:
    """The issue's program as written: ``ag.tensor(..., device=...)`` queues the copy on the
    current stream, and nothing orders the side streams after it (unlike torch's, asyncgrad's
    copy from the host does not wait; the README asks for ``s.wait_stream``). On a GPU the
    forward reads unwritten memory: on the simulator the gradient was NaN now and then; the check
    names the read every time."""
    w = leaf(np.random.default_rng(4).standard_normal((N, N)))
    s1 = ag.cuda.Stream()
    with ag.cuda.stream(s1), pytest.raises(sim.StreamOrderError) as info:
        (w @ w).sum()
    message = str(info.value)
    assert message.startswith("matmul on ")
    assert "_host_to_device on asyncgrad-sim-stream-0-0" in message  # the copy from the host


# ----------------------------------------------------------------------------- every case
@cases("producer_wait")
def test_gradients_from_two_streams_meet_in_one_leaf(engine: bool) -> None:
    rng = np.random.default_rng(5)
    for _ in range(3):
        wv = rng.standard_normal((N, N))
        w = leaf(wv)
        with _expect_race(engine):
            _two_stream_loss(w)[0].backward()
            assert w.grad is not None
            assert_close(host(w.grad), _two_stream_grad(wv), rtol=1e-12, atol=1e-12)
        if engine:
            return


@cases("root_wait")
def test_the_root_node_waits_for_the_callers_stream(engine: bool) -> None:
    """The root gradient is made on the caller's stream; the root node runs on its forward's."""
    xv = np.linspace(-1.0, 1.0, N)
    x = leaf(xv)
    s = side_stream()
    with ag.cuda.stream(s):
        loss = (x * 2.0).sin().sum()
    ag.cuda.current_stream().wait_stream(s)
    with _expect_race(engine):
        loss.backward()
        assert x.grad is not None
        assert_close(host(x.grad), 2.0 * np.cos(2.0 * xv), rtol=1e-12)


@cases("caller_wait")
def test_the_caller_reads_the_gradient_after_the_backwards_streams(engine: bool) -> None:
    xv = np.linspace(-1.0, 1.0, N)
    x = leaf(xv)
    s = side_stream()
    with ag.cuda.stream(s):
        loss = (x * x).sum()  # x's accumulator, and the gradient, are on s
    ag.cuda.current_stream().wait_stream(s)
    gate = Gate(s)  # the backward's kernels wait behind it: they cannot be seen done
    try:
        loss.backward()
        assert x.grad is not None
        if engine:  # the read waits for s on the default stream: nothing else to wait for
            with _expect_race(engine):
                host(x.grad)
            return
    finally:
        gate.open()
    assert_close(host(x.grad), 2.0 * xv, rtol=1e-12)


def _summed_on_the_default_stream(hv: np.ndarray) -> tuple[ag.Tensor, ag.Tensor, list[Any]]:
    """``h``, on the default stream, gets a gradient from a branch on each of two side streams:
    the sum on the default stream reads arrays allocated on them."""
    x = leaf(hv)
    h = x * 1.0
    s1, s2 = side_stream(), side_stream()
    with ag.cuda.stream(s1):
        a = h * 3.0
    with ag.cuda.stream(s2):
        b = h * 5.0
    ag.cuda.current_stream().wait_stream(s1)
    ag.cuda.current_stream().wait_stream(s2)
    return (a + b).sum(), x, [s1, s2]


def _allocate_on(streams_: list[Any]) -> None:
    """An allocation on each stream: CuPy's pool may carve it out of any block freed there (the
    check assumes it does, whatever the sizes)."""
    for s in streams_:
        with ag.cuda.stream(s):
            ag.zeros(3, dtype=ag.float32, device="cuda")


@cases("summands_kept")
def test_the_summands_of_the_input_buffer_outlive_the_sum(engine: bool) -> None:
    hv = np.linspace(-1.0, 1.0, N)
    loss, x, sides = _summed_on_the_default_stream(hv)
    gate = Gate(ag.cuda.current_stream())  # the sum waits behind it: it cannot be seen done
    try:
        with _expect_race(engine):
            loss.backward()
            _allocate_on(sides)
    finally:
        gate.open()
    if not engine:
        assert x.grad is not None
        assert_close(host(x.grad), np.full(N, 8.0), rtol=1e-12)


@cases("gradients_kept")
def test_a_gradient_from_another_stream_outlives_the_node_that_reads_it(engine: bool) -> None:
    """One gradient, made on a side stream, for a node on the default stream: no sum, the node
    reads it there (InputBuffer.cross)."""
    xv = np.linspace(-1.0, 1.0, N)
    x = leaf(xv)
    h = x.sin()  # on the default stream
    s = side_stream()
    with ag.cuda.stream(s):
        loss = (h * 2.0).sum()
    ag.cuda.current_stream().wait_stream(s)
    gate = Gate(ag.cuda.current_stream())  # h's node reads the gradient behind it
    try:
        with _expect_race(engine):
            loss.backward()
            _allocate_on([s])
    finally:
        gate.open()
    if not engine:
        assert x.grad is not None
        assert_close(host(x.grad), 2.0 * np.cos(xv), rtol=1e-12)


@cases("saved_kept")
def test_a_value_saved_from_another_stream_outlives_the_node(engine: bool) -> None:
    """The product on s2 saves ``c``, made on s1, where no gradient goes back (so nothing in the
    backward orders s1 after s2): the engine releases it once the product's backward has run on
    s2, not when the node has merely been launched."""
    xv = np.linspace(-1.0, 1.0, N)
    x = leaf(xv)
    s1 = side_stream()
    with ag.cuda.stream(s1):
        c = x.detach() * 2.0
    s2 = side_stream()
    s2.wait_stream(s1)
    with ag.cuda.stream(s2):
        loss = (x * c).sum()
    ag.cuda.current_stream().wait_stream(s2)
    del c
    gate = Gate(s2)  # the product's backward waits behind it
    try:
        with _expect_race(engine):
            loss.backward()
            _allocate_on([s1])
    finally:
        gate.open()
    if not engine:
        assert x.grad is not None
        assert_close(host(x.grad), 2.0 * xv, rtol=1e-12)
