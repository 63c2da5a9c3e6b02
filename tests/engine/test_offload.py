"""Work off the loop: ``ag.run`` and large CPU nodes on compute threads (NOTE [Work off the
loop], NOTE [Large nodes]). Compute threads are held on gates the tests control, never timed."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.engine import scheduler
from asyncgrad.engine.pools import TurnPool, compute_pool
from asyncgrad.graph.node import LARGE_ELEMENTS, Node

from .helpers import (
    THREAD_TIMEOUT_S,
    TIMEOUT_S,
    assert_close,
    engine_setting,
    leaf,
    manual_clock,
    turn_recorder,
)

engine = ag.autograd.engine


class GatedPool(TurnPool):
    """A compute pool whose jobs record their thread and wait for ``gate`` before running."""

    def __init__(self, size: int = 2) -> None:
        super().__init__(size, name="asyncgrad-compute-test")
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.threads: list[str] = []
        self.nodes: list[str] = []  # the names of the backward nodes it ran

    def _enqueue(self, key: int, fut: Any, loop: Any, job: Any) -> None:
        fn, args, kwargs = job

        def gated() -> Any:
            self.threads.append(threading.current_thread().name)
            # A large node comes as ctx.run(_run_off_loop, graph_task, node, buf).
            if len(args) == 4 and isinstance(args[2], Node):
                self.nodes.append(args[2].name())
            self.entered.set()
            assert self.gate.wait(THREAD_TIMEOUT_S), "the test never opened the gate"
            return fn(*args, **(kwargs or {}))

        super()._enqueue(key, fut, loop, (gated, (), None))


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[GatedPool]:
    p = GatedPool()
    monkeypatch.setattr(compute_pool, "_pool", p)
    # Made for the current setting, so that the next job does not replace it.
    monkeypatch.setattr(compute_pool, "_made_for", engine.compute_threads)
    yield p
    p.gate.set()
    p.shutdown(wait=True)


@pytest.fixture
def threshold() -> Iterator[Callable[[float], None]]:
    with engine_setting("offload_threshold") as set_:
        yield set_


async def wait_entered(pool: GatedPool) -> None:
    ok = await asyncio.to_thread(pool.entered.wait, THREAD_TIMEOUT_S)
    assert ok, "no node reached a compute thread"


def matmul_graph() -> tuple[ag.Tensor, ag.Tensor, ag.Tensor]:
    rng = np.random.default_rng(0)
    x = leaf(rng.standard_normal((4, 3)))
    w = leaf(rng.standard_normal((3, 2)))
    return x, w, (x @ w).sum()


# ----------------------------------------------------------------------------- large nodes
async def test_a_large_matmul_runs_on_a_compute_thread(pool: GatedPool, threshold: Any) -> None:
    threshold(0)
    x, w, loss = matmul_graph()
    gx, gw = await asyncio.wait_for(ag.grad(loss, [x, w], retain_graph=True), TIMEOUT_S)
    assert_close(gx, np.ones((4, 2)) @ w.detach().numpy().T)
    assert_close(gw, x.detach().numpy().T @ np.ones((4, 2)))
    assert len(pool.threads) == 1
    assert pool.threads[0].startswith("asyncgrad-compute")
    await asyncio.wait_for(ag.backward(loss), TIMEOUT_S)  # accumulating, without exec_info
    assert_close(w.grad, gw)
    assert len(pool.threads) == 2


async def test_linear_layer_nodes_go_off_loop_and_match_inline(
    pool: GatedPool, threshold: Any
) -> None:
    ag.manual_seed(0)
    model = ag.nn.Sequential(ag.nn.Linear(5, 7), ag.nn.Tanh(), ag.nn.Linear(7, 2))
    x = leaf(np.random.default_rng(1).standard_normal((3, 5)), dtype=ag.float32)
    threshold(float("inf"))
    inline = await ag.grad(model(x).sum(), [x, *model.parameters()])
    assert pool.threads == []
    threshold(0)
    off = await asyncio.wait_for(ag.grad(model(x).sum(), [x, *model.parameters()]), TIMEOUT_S)
    assert len(pool.threads) == 2
    for a, b in zip(inline, off, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


async def test_the_loop_serves_while_a_large_node_runs(pool: GatedPool, threshold: Any) -> None:
    threshold(0)
    x, w, loss = matmul_graph()
    pool.gate.clear()
    big = asyncio.create_task(ag.grad(loss, [w]))
    try:
        await wait_entered(pool)
        # The matmul node is held on its thread; the loop and the CPU worker go on.
        z = leaf(np.array([1.0, 2.0]))
        (gz,) = await asyncio.wait_for(ag.grad((z * z).sum(), [z]), TIMEOUT_S)
        assert_close(gz, [2.0, 4.0])
        assert not big.done()
    finally:
        pool.gate.set()
    (gw,) = await asyncio.wait_for(big, TIMEOUT_S)
    assert_close(gw, x.detach().numpy().T @ np.ones((4, 2)))


async def test_cancelling_while_a_large_node_runs_leaves_grads_untouched(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    engine.reset_stats()
    x, w, loss = matmul_graph()
    pool.gate.clear()
    task = asyncio.create_task(ag.backward(loss))
    try:
        await wait_entered(pool)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, TIMEOUT_S)
    finally:
        pool.gate.set()
    await asyncio.wait_for(engine.wait_idle(), TIMEOUT_S)
    await asyncio.to_thread(pool.shutdown, True)  # the node's thread has finished
    assert x.grad is None
    assert w.grad is None
    assert engine.stats()["graph_tasks"]["cancelled"] == 1


async def test_double_backward_through_offloaded_matmuls(pool: GatedPool, threshold: Any) -> None:
    threshold(0)
    x, w, _ = matmul_graph()
    f = ((x @ w) ** 2).sum()
    (gx,) = await asyncio.wait_for(ag.grad(f, [x], create_graph=True), TIMEOUT_S)
    (gw,) = await asyncio.wait_for(ag.grad(gx.sum(), [w]), TIMEOUT_S)
    # gx = 2 (x w) w^T, so d sum(gx) / dw[m, j] = 2 colsum(x)[m] colsum(w)[j] + 2 colsum(x w)[j]
    xv, wv = x.detach().numpy(), w.detach().numpy()
    ones = np.ones_like(xv)
    expected = 2 * (xv.T @ ones @ wv) + 2 * (ones.T @ xv @ wv)
    assert_close(gw, expected)
    assert pool.threads, "no node went off the loop"


async def test_an_error_in_an_offloaded_node_names_it(pool: GatedPool, threshold: Any) -> None:
    threshold(0)
    x, w, loss = matmul_graph()
    with ag.no_grad():
        w.mul_(2.0)  # modifies a value the matmul saved
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
        await asyncio.wait_for(ag.grad(loss, [x]), TIMEOUT_S)
    assert "MmBackward0" in str(info.value) or "MatmulBackward0" in str(info.value)


def test_a_blocking_backward_keeps_every_node_on_its_thread(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    x, w, loss = matmul_graph()
    loss.backward()
    assert pool.threads == []
    assert_close(w.grad, x.detach().numpy().T @ np.ones((4, 2)))


async def test_small_matmuls_stay_on_the_loop(pool: GatedPool) -> None:
    _, _, loss = matmul_graph()  # 24 multiply-adds, far below the default threshold
    await asyncio.wait_for(ag.backward(loss), TIMEOUT_S)
    assert pool.threads == []


# A (300, 300) float64 array has more than LARGE_ELEMENTS elements: an elementwise node over it
# has a work estimate (See NOTE [Work estimates]); over an (8, 8) one it has none.
BIG = (300, 300)
assert BIG[0] * BIG[1] >= LARGE_ELEMENTS


def big_leaf(seed: int = 0) -> ag.Tensor:
    return leaf(np.random.default_rng(seed).uniform(-2.0, 2.0, BIG))


def elementwise_loss(x: ag.Tensor) -> ag.Tensor:
    return (x.tanh() * x.exp()).sum()


def elementwise_grad(x: np.ndarray) -> np.ndarray:
    t = np.tanh(x)
    return (1.0 - t * t) * np.exp(x) + t * np.exp(x)


async def test_large_elementwise_nodes_run_on_a_compute_thread_and_match_inline(
    pool: GatedPool, threshold: Any
) -> None:
    x = big_leaf()
    threshold(float("inf"))
    (inline,) = await asyncio.wait_for(ag.grad(elementwise_loss(x), [x]), TIMEOUT_S)
    assert pool.nodes == []
    threshold(0)
    small = leaf(np.linspace(-1.0, 1.0, 64).reshape(8, 8))
    loss = elementwise_loss(x) + small.tanh().sum()
    off, g_small = await asyncio.wait_for(ag.grad(loss, [x, small]), TIMEOUT_S)
    # The large ones left the loop; the sums (views of the gradient) and the small tanh did not.
    assert sorted(pool.nodes) == ["ExpBackward0", "MulBackward0", "TanhBackward0"]
    assert all(t.startswith("asyncgrad-compute") for t in pool.threads)
    np.testing.assert_array_equal(off.numpy(), inline.numpy())
    (blocking,) = ag.grad_sync(elementwise_loss(x), [x])
    np.testing.assert_array_equal(off.numpy(), blocking.numpy())
    assert_close(off, elementwise_grad(x.detach().numpy()), rtol=1e-12, atol=1e-12)
    assert_close(g_small, 1.0 - np.tanh(small.detach().numpy()) ** 2, rtol=1e-12, atol=1e-12)


async def test_offloaded_elementwise_gradients_match_torch(pool: GatedPool, threshold: Any) -> None:
    torch = pytest.importorskip("torch", reason="compares with PyTorch's gradients")
    threshold(0)
    x = big_leaf()
    (g,) = await asyncio.wait_for(ag.grad(elementwise_loss(x), [x]), TIMEOUT_S)
    assert pool.nodes
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    ((tx.tanh() * tx.exp()).sum()).backward()
    assert_close(g, tx.grad.numpy(), rtol=1e-12, atol=1e-12)


async def test_a_large_leaf_accumulates_on_a_compute_thread(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    x = big_leaf()
    # The sum's gradient is a broadcast view: AccumulateGrad copies it into x.grad.
    await asyncio.wait_for(ag.backward(x.sum()), TIMEOUT_S)
    assert pool.nodes == ["AccumulateGrad"]
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(BIG))
    # A second backward adds into x.grad, there too.
    await asyncio.wait_for(ag.backward((x * 2.0).sum()), TIMEOUT_S)
    assert pool.nodes == ["AccumulateGrad", "MulBackward0", "AccumulateGrad"]
    np.testing.assert_array_equal(x.grad.numpy(), np.full(BIG, 3.0))


async def test_a_reduction_with_a_small_gradient_runs_on_a_compute_thread(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    x = big_leaf()
    # amax's gradient has 300 elements; its backward writes 90,000.
    (g,) = await asyncio.wait_for(ag.grad(x.amax(1).sum(), [x]), TIMEOUT_S)
    assert pool.nodes == ["AmaxBackward0"]
    xv = x.detach().numpy()
    assert_close(g, (xv == xv.max(axis=1, keepdims=True)).astype(np.float64))


async def test_unbind_into_small_parts_runs_on_a_compute_thread(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    x = big_leaf()
    parts = x.unbind(0)  # 300 parts of 300 elements; the backward writes all 90,000
    (g,) = await asyncio.wait_for(ag.grad((parts[0] + 2.0 * parts[5]).sum(), [x]), TIMEOUT_S)
    assert pool.nodes == ["UnbindBackward0"]
    expected = np.zeros(BIG)
    expected[0] = 1.0
    expected[5] = 2.0
    np.testing.assert_array_equal(g.numpy(), expected)


async def test_double_backward_through_offloaded_elementwise_nodes(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    x = big_leaf()
    (gx,) = await asyncio.wait_for(ag.grad(x.tanh().sum(), [x], create_graph=True), TIMEOUT_S)
    assert "TanhBackward0" in pool.nodes
    (ggx,) = await asyncio.wait_for(ag.grad(gx.sum(), [x]), TIMEOUT_S)
    t = np.tanh(x.detach().numpy())
    assert_close(ggx, -2.0 * t * (1.0 - t * t), rtol=1e-12, atol=1e-12)
    assert pool.nodes.count("TanhBackward0") > 1, "the second backward's stayed on the loop"


async def test_custom_function_nodes_leave_the_loop_unless_their_backward_is_async(
    pool: GatedPool, threshold: Any
) -> None:
    class Double(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 2.0

        @staticmethod
        def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            return g * 2.0

    class AsyncDouble(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            return x * 2.0

        @staticmethod
        async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            await asyncio.sleep(0)
            return g * 2.0

    threshold(0)
    x = big_leaf()
    (g,) = await asyncio.wait_for(ag.grad(Double.apply(x).tanh().sum(), [x]), TIMEOUT_S)
    assert sorted(pool.nodes) == ["DoubleBackward", "TanhBackward0"]
    (ga,) = await asyncio.wait_for(ag.grad(AsyncDouble.apply(x).tanh().sum(), [x]), TIMEOUT_S)
    assert pool.nodes.count("TanhBackward0") == 2
    assert "AsyncDoubleBackward" not in pool.nodes
    expected = 2.0 * (1.0 - np.tanh(2.0 * x.detach().numpy()) ** 2)
    assert_close(g, expected, rtol=1e-12, atol=1e-12)
    assert_close(ga, expected, rtol=1e-12, atol=1e-12)


async def test_a_decomposition_of_a_small_matrix_runs_on_a_compute_thread(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    # 32 x 32 is far below LARGE_ELEMENTS, but inv's backward is cubic, like a matmul's.
    a = leaf(np.random.default_rng(0).standard_normal((32, 32)) + 10.0 * np.eye(32))
    (g,) = await asyncio.wait_for(ag.grad(ag.linalg.inv(a).sum(), [a]), TIMEOUT_S)
    assert pool.nodes == ["LinalgInvExBackward0"]
    inv = np.linalg.inv(a.detach().numpy())
    assert_close(g, -(inv.T @ np.ones((32, 32)) @ inv.T), rtol=1e-10, atol=1e-12)


async def test_an_einsum_contraction_is_estimated_as_one(pool: GatedPool, threshold: Any) -> None:
    rng = np.random.default_rng(0)
    a, b = leaf(rng.standard_normal((32, 32))), leaf(rng.standard_normal((32, 32)))
    threshold(2 * 32**3 - 1)  # its two gradients: two (32, 32) @ (32, 32) products
    ga, gb = await asyncio.wait_for(ag.grad(ag.einsum("ij,jk->ik", a, b).sum(), [a, b]), TIMEOUT_S)
    assert pool.nodes == ["EinsumBackward0"]
    ones = np.ones((32, 32))
    assert_close(ga, ones @ b.detach().numpy().T, rtol=1e-12, atol=1e-12)
    assert_close(gb, a.detach().numpy().T @ ones, rtol=1e-12, atol=1e-12)
    threshold(2 * 32**3)
    await asyncio.wait_for(ag.grad(ag.einsum("ij,jk->ik", a, b).sum(), [a, b]), TIMEOUT_S)
    assert pool.nodes == ["EinsumBackward0"]


async def test_double_backward_through_a_convolution_runs_its_nodes_off_the_loop(
    pool: GatedPool, threshold: Any
) -> None:
    rng = np.random.default_rng(0)
    x, w = leaf(rng.standard_normal((2, 3, 6, 6))), leaf(rng.standard_normal((4, 3, 3, 3)))

    async def penalty_grad() -> list[ag.Tensor]:
        loss = (ag.nn.functional.conv2d(x, w) ** 2).sum()
        (gx,) = await ag.grad(loss, [x], create_graph=True)
        return list(await ag.grad((gx**2).sum(), [x, w]))

    threshold(float("inf"))
    inline = await asyncio.wait_for(penalty_grad(), TIMEOUT_S)
    assert pool.nodes == []
    threshold(0)
    off = await asyncio.wait_for(penalty_grad(), TIMEOUT_S)
    # gx = conv_input_grad(gy, w): its backward runs convolutions, estimated like conv's.
    assert "ConvInputGradBackward0" in pool.nodes
    for a, b in zip(inline, off, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


async def test_an_inplace_op_on_a_view_of_a_large_tensor_runs_on_a_compute_thread(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    x = big_leaf()
    y = x * 1.0
    y[:10].mul_(3.0)  # CopySlices over y's 90,000 elements
    (g,) = await asyncio.wait_for(ag.grad(y.sum(), [x]), TIMEOUT_S)
    assert pool.nodes == ["CopySlices", "MulBackward0"]
    expected = np.ones(BIG)
    expected[:10] = 3.0
    np.testing.assert_array_equal(g.numpy(), expected)


def test_a_blocking_backward_keeps_large_elementwise_nodes_on_its_thread(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    x = big_leaf()
    elementwise_loss(x).backward()
    assert pool.threads == []
    assert_close(x.grad, elementwise_grad(x.detach().numpy()), rtol=1e-12, atol=1e-12)


async def test_the_loop_serves_while_a_large_elementwise_node_runs(
    pool: GatedPool, threshold: Any
) -> None:
    threshold(0)
    x = big_leaf()
    pool.gate.clear()
    big = asyncio.create_task(ag.grad(x.tanh().sum(), [x]))
    entered = asyncio.create_task(wait_entered(pool))
    try:
        done, _ = await asyncio.wait(
            {big, entered}, timeout=TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        assert entered in done, "the tanh node ran on the loop, not on a compute thread"
        # The node is held on its thread; the loop and the CPU worker go on.
        z = leaf(np.array([1.0, 2.0]))
        (gz,) = await asyncio.wait_for(ag.grad((z * z).sum(), [z]), TIMEOUT_S)
        assert_close(gz, [2.0, 4.0])
        assert not big.done()
    finally:
        pool.gate.set()
        entered.cancel()
    (g,) = await asyncio.wait_for(big, TIMEOUT_S)
    assert_close(g, 1.0 - np.tanh(x.detach().numpy()) ** 2, rtol=1e-12, atol=1e-12)


def test_configure_checks_offload_settings() -> None:
    with pytest.raises(ValueError, match="offload_threshold must be >= 0"):
        engine.configure(offload_threshold=-1)
    with pytest.raises(ValueError, match="compute_threads must be an int >= 1"):
        engine.configure(compute_threads=0)


# ----------------------------------------------------------------------------- ag.run
async def test_run_uses_a_compute_thread_and_returns_the_result() -> None:
    loop_thread = threading.current_thread().name
    name = await asyncio.wait_for(ag.run(lambda: threading.current_thread().name), TIMEOUT_S)
    assert name != loop_thread
    assert name.startswith("asyncgrad-compute")
    assert await asyncio.wait_for(ag.run(divmod, 7, 3), TIMEOUT_S) == (2, 1)
    assert await asyncio.wait_for(ag.run(sorted, [3, 1, 2], reverse=True), TIMEOUT_S) == [3, 2, 1]


async def test_run_carries_grad_mode_and_context_variables() -> None:
    model = ag.nn.Linear(3, 2)
    x = ag.ones(4, 3)
    y = await asyncio.wait_for(ag.run(model, x), TIMEOUT_S)
    assert y.requires_grad
    assert y.grad_fn is not None
    with ag.no_grad():
        y = await asyncio.wait_for(ag.run(model, x), TIMEOUT_S)
    assert not y.requires_grad
    var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")
    var.set("req-42")

    def read_and_set() -> str:
        seen = var.get()
        var.set("changed on the thread")
        return seen

    assert await asyncio.wait_for(ag.run(read_and_set), TIMEOUT_S) == "req-42"
    assert var.get() == "req-42"  # the thread ran in a copy


async def test_gradients_of_a_forward_run_off_the_loop() -> None:
    w = leaf(np.array([1.0, -2.0, 3.0]))
    x = ag.tensor(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    y = await asyncio.wait_for(ag.run(lambda: (x * w).sum()), TIMEOUT_S)
    (g,) = await asyncio.wait_for(ag.grad(y, [w]), TIMEOUT_S)
    assert_close(g, [5.0, 7.0, 9.0])


async def test_run_raises_what_the_function_raises() -> None:
    def boom() -> None:
        raise ValueError("bad input shape (3, 4)")

    with pytest.raises(ValueError, match=r"bad input shape \(3, 4\)"):
        await asyncio.wait_for(ag.run(boom), TIMEOUT_S)


async def test_run_rejects_what_it_cannot_run() -> None:
    async def forward() -> None:
        return None

    with pytest.raises(TypeError, match="forward is a coroutine function: await it directly"):
        await ag.run(forward)
    with pytest.raises(TypeError, match="needs a callable, got int"):
        await ag.run(3)  # type: ignore[arg-type]


async def test_cancelling_run_abandons_the_result() -> None:
    gate, started, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        gate.wait(THREAD_TIMEOUT_S)
        finished.set()
        return "late"

    task = asyncio.create_task(ag.run(slow))
    try:
        assert await asyncio.to_thread(started.wait, THREAD_TIMEOUT_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, TIMEOUT_S)
        assert not finished.is_set()  # the caller did not wait for the thread
    finally:
        gate.set()
    assert await asyncio.to_thread(finished.wait, THREAD_TIMEOUT_S)


def test_run_in_a_script() -> None:
    assert asyncio.run(ag.run(sum, [1, 2, 3])) == 6


async def test_run_turns_a_stopiteration_into_a_runtimeerror() -> None:
    # An asyncio future cannot hold a StopIteration (See NOTE [Answers on the loop]).
    with pytest.raises(RuntimeError, match=r"^next raised StopIteration") as info:
        await asyncio.wait_for(ag.run(next, iter([])), TIMEOUT_S)
    assert isinstance(info.value.__cause__, StopIteration)


class HeldPool(NamedTuple):
    """A one-thread compute pool whose thread runs ``blocker`` until ``gate`` opens."""

    pool: TurnPool
    gate: threading.Event
    blocker: Future[None]


@pytest.fixture
def held() -> Iterator[HeldPool]:
    pool = TurnPool(1, name="asyncgrad-compute-test")
    gate, started = threading.Event(), threading.Event()

    def blocker() -> None:
        started.set()
        assert gate.wait(THREAD_TIMEOUT_S)

    try:
        job = pool.submit_keyed(0, blocker)
        assert started.wait(THREAD_TIMEOUT_S)
        yield HeldPool(pool, gate, job)
    finally:
        gate.set()
        pool.shutdown(wait=True)


def test_a_job_cancelled_before_a_thread_takes_it_never_runs(held: HeldPool) -> None:
    ran: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        dropped = held.pool.run_keyed(10, loop, ran.append, "dropped")
        kept = held.pool.run_keyed(20, loop, ran.append, "kept")
        dropped.cancel()
        held.gate.set()
        await asyncio.wait_for(kept, TIMEOUT_S)
        assert held.blocker.result(THREAD_TIMEOUT_S) is None

    asyncio.run(main())
    assert ran == ["kept"]  # the cancelled job came first in turn order, and never ran


def test_an_answer_for_a_closed_loop_is_dropped(held: HeldPool) -> None:
    async def main() -> None:
        held.pool.run_keyed(10, asyncio.get_running_loop(), divmod, 7, 3)  # never awaited

    asyncio.run(main())  # closes its loop while the job waits behind the blocker
    held.gate.set()
    # The thread answered nobody and went on: it still runs the next job.
    assert held.pool.submit_keyed(20, divmod, 9, 4).result(THREAD_TIMEOUT_S) == (2, 1)


# ----------------------------------------------------------------------------- turns
def test_compute_threads_take_jobs_smallest_key_first(held: HeldPool) -> None:
    pool = held.pool
    order: list[int] = []
    futs = [pool.submit_keyed(k, order.append, k) for k in (50, 10, 30, 20)]
    dropped = pool.submit_keyed(15, order.append, 15)
    assert dropped.cancel()  # cancelled before it started: never runs
    held.gate.set()
    held.blocker.result(THREAD_TIMEOUT_S)
    for f in futs:
        f.result(THREAD_TIMEOUT_S)
    assert order == [10, 20, 30, 50]
    pool.shutdown(wait=True)
    with pytest.raises(RuntimeError, match="after the compute pool shut down"):
        pool.submit(order.append, 1)


async def test_a_request_keeps_its_turn(threshold: Any) -> None:
    """The graph task built after ``ag.run`` in one task starts from that call's turn, so its
    large nodes go ahead of the forwards of requests that came after it, and so does the next
    pass of the same task (See NOTE [One scheduler], 2); a pass in another task, even
    one started from this one, takes a turn of its own."""
    now_us = scheduler.of(asyncio.get_running_loop()).now_us
    turns: list[int] = []
    record = turn_recorder(turns)

    x, w, _ = matmul_graph()
    before = now_us()
    async with asyncio.timeout(TIMEOUT_S):  # not wait_for: it would run ag.run in a new task
        y = await ag.run(lambda: (x @ w).sum())
    after_forward = now_us()
    y.register_hook(record)

    async def another_request() -> None:
        y3 = (x @ w).sum()
        y3.register_hook(record)
        await ag.grad(y3, [x])

    async with asyncio.timeout(TIMEOUT_S):
        await ag.grad(y, [x])
        y2 = (x @ w).sum()
        y2.register_hook(record)
        await ag.grad(y2, [x])
        await asyncio.create_task(another_request())
    assert before <= turns[0] <= after_forward
    assert turns[1] == turns[0]
    assert turns[2] >= after_forward


async def test_a_forward_that_waited_long_for_a_thread_still_gives_its_turn(
    pool: GatedPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a burst a forward may wait in the compute queue for longer than
    FLOW_MAX_GAP_S: what counts is how long ago it returned, not when it was sent, so
    its backward still takes its turn (a new one would queue behind every later forward). A
    pass built long after the forward returned takes a turn of its own. The engine's clock is
    a fake one the test moves."""

    sched = scheduler.of(asyncio.get_running_loop())
    with manual_clock() as clock:
        await _forward_waits_long(pool, sched, clock)


async def _forward_waits_long(pool: GatedPool, sched: Any, clock: Any) -> None:
    gap_s = scheduler.FLOW_MAX_GAP_S
    first = sched.now_us()
    turns: list[int] = []
    record = turn_recorder(turns)

    x, w, _ = matmul_graph()

    async def hold_the_forward() -> None:
        await wait_entered(pool)
        clock.now += 10 * gap_s  # the forward waits long...
        pool.gate.set()

    pool.gate.clear()
    async with asyncio.timeout(TIMEOUT_S):
        opener = asyncio.create_task(hold_the_forward())
        # Awaited here, not in a task: ag.run records the turn in this task's context.
        y = await ag.run(lambda: (x @ w).sum())  # ...and returns now
        await opener
        y.register_hook(record)
        await ag.grad(y, [x])
        y = await ag.run(lambda: (x @ w).sum())
        clock.now += 2 * gap_s  # a pass built long after the request's last call returned
        y.register_hook(record)
        await ag.grad(y, [x])
    assert turns == [first, sched.now_us()]


async def test_a_large_node_is_queued_in_its_graph_task_turn(
    pool: GatedPool, threshold: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    threshold(0)
    keys: list[tuple[str, int]] = []
    submit = pool.run_keyed

    submitted = asyncio.Event()

    def spy(key: int, loop: Any, fn: Any, /, *args: Any) -> Any:
        keys.append(("job", key))
        submitted.set()
        return submit(key, loop, fn, *args)

    monkeypatch.setattr(pool, "run_keyed", spy)
    x, w, _ = matmul_graph()

    async def request() -> ag.Tensor:
        y = await ag.run(lambda: (x @ w).sum())
        await started.wait()
        (g,) = await ag.grad(y, [w])
        return g

    started = asyncio.Event()
    async with asyncio.timeout(TIMEOUT_S):
        a = asyncio.create_task(request())  # request A: its forward first
        await submitted.wait()
        b_forward = await ag.run(lambda: None)  # then the forward of a later request B
        assert b_forward is None
        started.set()
        await a
    (_, a_forward), (_, b_job), (_, a_node) = keys
    assert a_forward < b_job
    assert a_node < b_job  # A's backward goes ahead of B, as its forward did


async def test_a_forward_competes_at_the_priority_of_its_requests_last_pass(
    pool: GatedPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ag.run`` of a request whose last gradient ran at priority 5 goes ahead of a new
    request's forward on the compute threads, as that request's large nodes would; a new
    request's forward competes at priority 0."""
    keys: list[int] = []
    submit = pool.run_keyed

    def spy(key: int, loop: Any, fn: Any, /, *args: Any) -> Any:
        keys.append(key)
        return submit(key, loop, fn, *args)

    monkeypatch.setattr(pool, "run_keyed", spy)
    x, w, _ = matmul_graph()

    async def new_request() -> None:
        await ag.run(lambda: None)

    async with asyncio.timeout(TIMEOUT_S):
        await ag.grad((x @ w).sum(), [x], priority=5)
        await ag.run(lambda: None)  # the same request's next forward
        await asyncio.create_task(new_request())  # a request of its own, later
    high, new = keys
    assert high < new
    assert scheduler.turn_of(high) < scheduler.turn_of(new)
    # The priority, not only the turn, orders them: a key at priority 5 sorts before any turn
    # at priority 0.
    assert high < scheduler.key_base(0, 0, 0)
