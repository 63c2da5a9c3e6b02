"""Two devices and CuPy's null stream: ``Stream.null`` is one object for every device, meaning the
default stream of whichever device is current, and kernels run on the current device (an operand
on another device is refused). Each test holds a device's default stream with a host function
(a gate), so a missing ordering reads unwritten memory, and a missing device switch fails.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime

from .conftest import host

# A gate left closed opens by itself after this long.
GATE_TIMEOUT_S: Final = 3.0
# How long a caller waiting on a held device must stay waiting.
HELD_CHECK_S: Final = 0.5
# How long a gate holds a stream that a host read must wait for.
READ_HOLD_S: Final = 0.2


@pytest.fixture(autouse=True)
def _two_devices() -> None:
    if ag.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")


@contextmanager
def held(device: int, stream: Any = None, timeout: float = GATE_TIMEOUT_S) -> Iterator[None]:
    """Hold ``stream`` of ``device`` (default: its current stream, the null stream unless another
    was made current) until the block ends (or ``timeout`` passes): work queued on it meanwhile
    runs after."""
    opened = threading.Event()
    native = runtime.current_stream(device) if stream is None else stream.native
    with runtime.rt.cuda.Device(device):
        native.launch_host_func(lambda _: opened.wait(timeout), None)
    try:
        yield
    finally:
        opened.set()


@contextmanager
def on_device(index: int) -> Iterator[None]:
    prev = ag.cuda.current_device()
    ag.cuda.set_device(index)
    try:
        yield
    finally:
        ag.cuda.set_device(prev)


# ----------------------------------------------------------------------------- copies
def test_copy_to_another_device_waits_for_the_source_device() -> None:
    """``to()`` between devices orders the copy after the source device's stream, whichever
    device is current (CuPy's copy orders nothing)."""
    for current in (0, 1):
        with on_device(current):
            x = ag.tensor([1.0, 2.0, 3.0], device="cuda:1")
            with held(1):
                y = x * 2.0  # queued on cuda:1's default stream, behind the gate
                z = y.to("cuda:0")
            np.testing.assert_array_equal(host(z), [2.0, 4.0, 6.0])
            assert z.device == ag.device("cuda:0")


def test_gradient_copied_between_devices_waits_for_its_producer() -> None:
    """The backward of a copy between devices hands its gradient across, ordered after the
    producing device's stream: every stream here is the null stream."""
    xv = np.linspace(-1.0, 1.0, 6)
    x = ag.tensor(xv, device="cuda:0", requires_grad=True)
    loss = (x.to("cuda:1").exp() * 3.0).sum()
    with held(1):
        loss.backward()  # returns with cuda:1's part queued behind the gate
    assert x.grad is not None
    np.testing.assert_allclose(host(x.grad), 3.0 * np.exp(xv), rtol=1e-12)


# ----------------------------------------------------------------------------- backward
def test_backward_switches_device_between_nodes_on_the_null_stream() -> None:
    """Consecutive nodes of two devices, all on the null stream: the worker makes each node's
    device current although the stream object is the same."""
    for _ in range(3):
        xv = np.arange(4.0)
        x = ag.tensor(xv, device="cuda:0", requires_grad=True)
        y = (x.to("cuda:1") * 2.0).to("cuda:0").sin().to("cuda:1")
        y.sum().backward()
        assert x.grad is not None
        np.testing.assert_allclose(host(x.grad), 2.0 * np.cos(2.0 * xv), rtol=1e-12)


def test_gradients_summed_on_the_consumers_device() -> None:
    """A gradient arriving from another device is summed with the one waiting, with the
    consumer's device current."""
    xv = np.arange(1.0, 5.0)
    x = ag.tensor(xv, device="cuda:1", requires_grad=True)
    y = x * 3.0  # its node gets a gradient from cuda:1 and one copied from cuda:0
    loss = (y.to("cuda:0") ** 2).sum().to("cuda:1") + y.sum()
    loss.backward()
    assert x.grad is not None
    np.testing.assert_allclose(host(x.grad), 3.0 * (2.0 * 3.0 * xv + 1.0), rtol=1e-12)
    y2 = x * 3.0
    loss2 = y2.sum() + (y2.to("cuda:0") ** 2).sum().to("cuda:1")
    x.grad = None
    loss2.backward()
    np.testing.assert_allclose(host(x.grad), 3.0 * (2.0 * 3.0 * xv + 1.0), rtol=1e-12)


def test_callers_streams_on_both_devices_wait_for_backward() -> None:
    """The caller's current stream of each device waits for the backward's work there: the null
    stream of both devices counts as two streams."""
    s1 = ag.cuda.Stream(device=1)
    for dev0_first in (True, False):
        a = ag.tensor([1.0, 2.0], device="cuda:0", requires_grad=True)
        b = ag.tensor([3.0, 4.0], device="cuda:1", requires_grad=True)
        on_0, on_1 = (a * 5.0).sum(), (b * b).sum().to("cuda:0")
        loss = on_0 + on_1 if dev0_first else on_1 + on_0
        with ag.cuda.stream(s1):  # the caller's stream on cuda:1
            with held(1, ag.cuda.default_stream(1)):
                loss.backward()  # cuda:1's part waits behind the gate on its default stream
                with on_device(1):
                    doubled = b.grad * 1.0  # type: ignore[operator]  # on s1: must wait
        s1.synchronize()
        np.testing.assert_array_equal(host(doubled), [6.0, 8.0])


async def test_awaited_backward_waits_for_both_devices() -> None:
    """An awaiting caller resumes once the work of both devices is done, though both ran on
    the null stream."""
    a = ag.tensor([1.0, 2.0], device="cuda:1", requires_grad=True)
    b = ag.tensor([3.0, 4.0], device="cuda:0", requires_grad=True)
    loss = (b * 2.0).sum() + (a * a).sum().to("cuda:0")
    opened = threading.Event()

    def hold_cuda_1(_: Any) -> None:
        # Runs when a's accumulation is launched, with its device current: holds cuda:1 after
        # everything cuda:0 needed from it.
        runtime.current_stream(1).launch_host_func(lambda _: opened.wait(GATE_TIMEOUT_S), None)

    a.register_hook(hold_cuda_1)
    task = asyncio.ensure_future(ag.grad(loss, [a, b]))
    try:
        # Long enough for every stage of the wait (polls, then a host function), far shorter
        # than the gate's timeout.
        done, _ = await asyncio.wait([task], timeout=HELD_CHECK_S)
        assert not done, "resumed while cuda:1 was still held"
    finally:
        opened.set()
    ga, gb = await asyncio.wait_for(task, 10)
    np.testing.assert_array_equal(host(ga), [2.0, 4.0])
    np.testing.assert_array_equal(host(gb), [2.0, 2.0])


# ----------------------------------------------------------------------------- forward
def test_forward_ops_run_on_their_operands_device() -> None:
    """As under torch's device guard: ops on ``cuda:1`` tensors work while ``cuda:0`` is
    current, and their results stay on ``cuda:1``; the current device is left as it was."""
    assert ag.cuda.current_device() == 0
    x = ag.tensor([[1.0, -2.0], [3.0, 4.0]], device="cuda:1", requires_grad=True)
    outs = [
        x * 2.0,
        x.exp(),
        ag.nn.functional.relu(x),
        ag.cat([x, x]),
        x @ x,
        x.sum(dim=0),
        x[ag.tensor([1, 0], device="cuda:1")],
        ag.zeros_like(x),
        x.clone(),
    ]
    for out in outs:
        assert out.device == ag.device("cuda:1")
    np.testing.assert_array_equal(host(outs[0]), [[2.0, -4.0], [6.0, 8.0]])
    assert ag.cuda.current_device() == 0
    sum(o.sum() for o in outs[:7] if o.requires_grad).backward()  # type: ignore[union-attr]
    assert x.grad is not None
    assert x.grad.device == ag.device("cuda:1")
    assert ag.cuda.current_device() == 0


def test_backward_of_an_output_on_another_device_than_the_current() -> None:
    """The implicit root gradient, and a materialised zero gradient, are made on their tensor's
    device."""
    with on_device(1):
        x = ag.tensor([1.0, 2.0], device="cuda:1", requires_grad=True)
        loss = (x * x).sum()
    loss.backward()
    assert x.grad is not None
    np.testing.assert_array_equal(host(x.grad), [2.0, 4.0])
    unused = ag.tensor([5.0], device="cuda:1", requires_grad=True)
    with on_device(1):
        loss = (x * 3.0).sum()
    _, zero = ag.grad_sync(loss, [x, unused], allow_unused=True, materialize_grads=True)
    assert zero.device == ag.device("cuda:1")
    np.testing.assert_array_equal(host(zero), [0.0])


def test_optimizer_steps_parameters_on_another_device() -> None:
    model = ag.nn.Linear(3, 2).to("cuda:1")
    opt = ag.optim.Adam(model.parameters(), lr=0.1)
    sgd = ag.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = [host(p).copy() for p in model.parameters()]
    x = ag.ones(4, 3, device="cuda:1")
    model(x).sum().backward()
    opt.step()
    sgd.step()
    opt.zero_grad(set_to_none=False)
    for p, old in zip(model.parameters(), before, strict=True):
        assert p.device == ag.device("cuda:1")
        assert not np.allclose(host(p), old)
        assert p.grad is not None
        np.testing.assert_array_equal(host(p.grad), np.zeros_like(old))
    assert ag.cuda.current_device() == 0


def test_deep_copy_keeps_the_device() -> None:
    p = ag.nn.Parameter(ag.tensor([1.0, 2.0], device="cuda:1"))
    q = copy.deepcopy(p)
    assert q.device == ag.device("cuda:1")
    assert host(q).tolist() == [1.0, 2.0]


def test_default_streams_of_two_devices_are_two_streams() -> None:
    """``ag.cuda.default_stream(i)`` wraps CuPy's one null stream with its device: the two
    devices' default streams differ, and each is queried and synchronised on its device."""
    d0, d1 = ag.cuda.default_stream(0), ag.cuda.default_stream(1)
    assert d0 != d1
    assert len({d0, d1, ag.cuda.default_stream(0)}) == 2
    assert ag.cuda.current_stream(1) == d1
    with held(1):
        ag.tensor([1.0], device="cuda:1") * 2.0  # queued behind the gate
        assert not d1.query()
        assert d0.query()
        d0.synchronize()  # returns: cuda:0 holds nothing
    d1.synchronize()
    assert d1.query()


def test_module_state_and_gradients_on_another_device() -> None:
    """``load_state_dict`` copies host values and values from another device into parameters on
    ``cuda:1``, and ``zero_grad(set_to_none=False)`` clears their gradients there, whichever
    device is current."""
    model = ag.nn.Linear(2, 2).to("cuda:1")
    cpu_state = ag.nn.Linear(2, 2).state_dict()
    model.load_state_dict(cpu_state)
    on_0 = ag.nn.Linear(2, 2).to("cuda:0")
    model.load_state_dict(on_0.state_dict())
    for p, q in zip(model.parameters(), on_0.parameters(), strict=True):
        assert p.device == ag.device("cuda:1")
        np.testing.assert_array_equal(host(p), host(q))
    model(ag.ones(3, 2, device="cuda:1")).sum().backward()
    model.zero_grad(set_to_none=False)
    for p in model.parameters():
        assert p.grad is not None
        np.testing.assert_array_equal(host(p.grad), np.zeros(tuple(p.shape)))
    assert ag.cuda.current_device() == 0


def test_host_reads_wait_for_the_tensors_device() -> None:
    """``item``, ``tolist`` and ``bool`` wait for the current stream of the tensor's device, not
    for the current device's (CuPy's reads use the current device's current stream)."""
    x = ag.tensor([3.0], device="cuda:1")
    s0 = ag.cuda.Stream(device=0)
    for read, expect in ((ag.Tensor.item, 6.0), (ag.Tensor.tolist, [6.0]), (bool, True)):
        # Held briefly: a read that waits for cuda:1 sees 6.0 once the gate opens by itself; one
        # that does not reads the unwritten result at once.
        with held(1, timeout=READ_HOLD_S):
            y = x * 2.0  # queued on cuda:1's default stream, behind the gate
            with ag.cuda.stream(s0):  # cuda:0's current stream is another stream
                assert read(y) == expect


def test_a_stream_block_makes_its_device_current() -> None:
    """As torch's ``torch.cuda.stream``: inside ``ag.cuda.stream(s)`` for a stream of ``cuda:1``,
    ``cuda:1`` is the current device and ``s`` its current stream; both are put back after the
    block."""
    assert ag.cuda.current_device() == 0
    with on_device(1):
        s = ag.cuda.Stream()
    x = ag.ones(3, device="cuda:1")
    with ag.cuda.stream(s):
        assert ag.cuda.current_device() == 1
        assert ag.cuda.current_stream() == s
        s.wait_stream(ag.cuda.default_stream(1))
        t = x * 2.0
    assert ag.cuda.current_device() == 0
    assert ag.cuda.current_stream(1) == ag.cuda.default_stream(1)
    s.synchronize()
    np.testing.assert_array_equal(host(t), [2.0, 2.0, 2.0])
