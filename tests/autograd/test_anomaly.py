"""Anomaly mode: forward tracebacks on errors in backward, NaN checks, and its per-task scope."""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import detect_anomaly, set_detect_anomaly

FORWARD_NOTE = "Traceback of forward call that caused the error"
NO_FORWARD = "No forward pass information available"

Backward = Callable[[ag.Tensor], Awaitable[None]]


async def _sync_backward(loss: ag.Tensor) -> None:
    loss.backward()


async def _async_backward(loss: ag.Tensor) -> None:
    await ag.backward(loss)


@pytest.fixture(params=["sync", "awaited"])
def run_backward(request: pytest.FixtureRequest) -> Backward:
    return _sync_backward if request.param == "sync" else _async_backward


def _notes(e: pytest.ExceptionInfo[BaseException]) -> str:
    return "\n".join(getattr(e.value, "__notes__", []))


def _torch_nan_message(fn: Callable[[Any], Any], *inputs: Any) -> str:
    torch = pytest.importorskip("torch", reason="torch is the reference for anomaly messages")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns on entering anomaly mode and on errors
        ts = [torch.tensor(x, dtype=torch.float64, requires_grad=r) for x, r in inputs]
        with torch.autograd.detect_anomaly(), pytest.raises(RuntimeError) as e:
            fn(*ts).sum().backward()
    return str(e.value)


# ----------------------------------------------------------------------------- NaN checks
async def test_nan_names_the_node_as_torch(run_backward: Backward) -> None:
    x = ag.tensor([0.0, 1.0], dtype=ag.float64, requires_grad=True)
    with detect_anomaly():
        loss = (x.sqrt() * 0.0).sum()  # SqrtBackward0: 0 * inf = nan
        with pytest.raises(RuntimeError) as e:
            await run_backward(loss)
    want = "Function 'SqrtBackward0' returned nan values in its 0th output."
    assert str(e.value) == want
    assert FORWARD_NOTE in _notes(e)  # the failing node's forward traceback comes along
    assert x.grad is None  # it stopped before reaching the leaf
    ref = _torch_nan_message(lambda t: t.sqrt() * 0.0, ([0.0, 1.0], True))
    assert ref == want


async def test_nan_in_a_later_output(run_backward: Backward) -> None:
    # Only the second input needs a gradient: MulBackward0's output 1 is x * g = nan.
    x = ag.tensor([math.nan, 1.0], dtype=ag.float64)
    y = ag.tensor([2.0, 3.0], dtype=ag.float64, requires_grad=True)
    with detect_anomaly():
        loss = (x * y).sum()
        with pytest.raises(RuntimeError) as e:
            await run_backward(loss)
    assert str(e.value) == "Function 'MulBackward0' returned nan values in its 1th output."
    ref = _torch_nan_message(lambda a, b: a * b, ([math.nan, 1.0], False), ([2.0, 3.0], True))
    assert str(e.value) == ref


async def test_no_nan_check_without_check_nan(run_backward: Backward) -> None:
    x = ag.tensor([0.0], dtype=ag.float64, requires_grad=True)
    with detect_anomaly(check_nan=False):
        assert ag.autograd.is_anomaly_enabled()
        assert not ag.autograd.is_anomaly_check_nan_enabled()
        await run_backward((x.sqrt() * 0.0).sum())
    assert x.grad is not None
    assert np.isnan(x.grad.numpy()).all()


async def test_infinities_alone_are_not_nan(run_backward: Backward) -> None:
    # As torch: only NaN is an anomaly; sqrt's gradient at 0 is inf, and legitimately so.
    x = ag.tensor([0.0, 4.0], dtype=ag.float64, requires_grad=True)
    with detect_anomaly():
        await run_backward(x.sqrt().sum())
    assert x.grad is not None
    assert x.grad.numpy().tolist() == [math.inf, 0.25]


async def test_nan_with_create_graph() -> None:
    x = ag.tensor([0.0], dtype=ag.float64, requires_grad=True)
    with detect_anomaly(), pytest.raises(RuntimeError, match="'SqrtBackward0' returned nan"):
        await ag.grad((x.sqrt() * 0.0).sum(), x, create_graph=True)


@pytest.mark.cuda
def test_nan_check_on_a_cuda_device() -> None:
    if ag.cuda.device_count() < 1:
        pytest.skip("needs a CUDA device (simulated by default)")
    x = ag.tensor([0.0], dtype=ag.float64, device="cuda", requires_grad=True)
    with detect_anomaly(), pytest.raises(RuntimeError, match="'SqrtBackward0' returned nan"):
        (x.sqrt() * 0.0).sum().backward()


# ----------------------------------------------------------------------------- forward tracebacks
def forward_that_saves_exp(x: ag.Tensor) -> ag.Tensor:
    y = x.exp()  # the line the traceback must point at
    y.add_(1.0)  # modifies what ExpBackward0 saved
    return y.sum()


async def test_error_reports_forward_traceback(run_backward: Backward) -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    with detect_anomaly():
        loss = forward_that_saves_exp(x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as e:
            await run_backward(loss)
    notes = _notes(e)
    assert "Error detected in ExpBackward0. " + FORWARD_NOTE in notes
    assert "in forward_that_saves_exp" in notes
    assert "y = x.exp()  # the line the traceback must point at" in notes
    assert "test_error_reports_forward_traceback" in notes  # the caller's frame too
    # Not the recording's own frames.
    assert "_record.py" not in notes


class Exploding(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        raise ValueError("bad backward")


def forward_with_custom_function(x: ag.Tensor) -> ag.Tensor:
    return Exploding.apply(x).sum()  # type: ignore[no-any-return]


async def test_custom_function_error_reports_forward_traceback(run_backward: Backward) -> None:
    x = ag.tensor([1.0], requires_grad=True)
    with detect_anomaly():
        loss = forward_with_custom_function(x)
        with pytest.raises(ValueError, match="bad backward") as e:
            await run_backward(loss)
    notes = _notes(e)
    assert "Error detected in ExplodingBackward. " + FORWARD_NOTE in notes
    assert "return Exploding.apply(x).sum()" in notes


async def test_metadata_holds_the_traceback() -> None:
    x = ag.tensor([1.0], requires_grad=True)
    with detect_anomaly():
        y = x.exp()
    fn = y.grad_fn
    assert fn is not None
    tb = fn.metadata["traceback_"]
    lines = list(tb)
    assert all(isinstance(s, str) for s in lines)
    assert "y = x.exp()" in lines[-1]  # innermost call last, as traceback.format_stack
    x2 = x.exp()
    assert x2.grad_fn is not None
    assert "traceback_" not in x2.grad_fn.metadata


async def test_backward_in_anomaly_mode_without_forward_information(
    run_backward: Backward,
) -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    loss = forward_that_saves_exp(x)  # outside anomaly mode
    with detect_anomaly(), pytest.raises(RuntimeError) as e:
        await run_backward(loss)
    assert "Error detected in ExpBackward0. " + NO_FORWARD in _notes(e)


async def test_forward_in_anomaly_mode_backward_outside(run_backward: Backward) -> None:
    # As torch: the backward's mode decides; outside it, no NaN check and no traceback.
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    with detect_anomaly():
        loss = forward_that_saves_exp(x)
        nan_loss = (x.sqrt() * math.nan).sum()
    with pytest.raises(RuntimeError) as e:
        await run_backward(loss)
    assert "Error detected" not in _notes(e)
    await run_backward(nan_loss)  # no check
    assert x.grad is not None
    assert np.isnan(x.grad.numpy()).all()


async def test_hook_error_reports_forward_traceback() -> None:
    x = ag.tensor([1.0], requires_grad=True)

    def bad_hook(g: ag.Tensor) -> None:
        raise KeyError("hook")

    with detect_anomaly():
        y = x.tanh()
        y.register_hook(bad_hook)
        with pytest.raises(KeyError) as e:
            await ag.backward((y * 3).sum())
    assert "Error detected in TanhBackward0. " + FORWARD_NOTE in _notes(e)


# ----------------------------------------------------------------------------- scope
def test_set_detect_anomaly_function_and_block() -> None:
    assert not ag.autograd.is_anomaly_enabled()
    with set_detect_anomaly(True, check_nan=False):
        assert ag.autograd.is_anomaly_enabled()
        assert not ag.autograd.is_anomaly_check_nan_enabled()
        with set_detect_anomaly(False):
            assert not ag.autograd.is_anomaly_enabled()
        assert ag.autograd.is_anomaly_enabled()
    assert not ag.autograd.is_anomaly_enabled()
    set_detect_anomaly(True)
    try:
        assert ag.autograd.is_anomaly_check_nan_enabled()
    finally:
        set_detect_anomaly(False)
    assert not ag.autograd.is_anomaly_enabled()


async def test_decorates_sync_and_async_functions() -> None:
    @detect_anomaly()
    def f() -> bool:
        return ag.autograd.is_anomaly_enabled()

    @detect_anomaly(check_nan=False)
    async def g() -> bool:
        await asyncio.sleep(0)
        return ag.autograd.is_anomaly_enabled() and not ag.autograd.is_anomaly_check_nan_enabled()

    @set_detect_anomaly(True)
    def h() -> bool:
        return ag.autograd.is_anomaly_enabled()

    assert f()
    assert await g()
    assert h()
    assert not ag.autograd.is_anomaly_enabled()


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="check_nan must be a bool"):
        detect_anomaly(check_nan=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="anomaly mode must be a bool"):
        set_detect_anomaly("yes")  # type: ignore[arg-type]
    assert not ag.autograd.is_anomaly_enabled()
    with pytest.raises(TypeError, match="decorates a function"):
        detect_anomaly()(3)  # type: ignore[type-var]


async def test_one_task_in_anomaly_mode_leaves_another_alone() -> None:
    inside = asyncio.Event()
    other_done = asyncio.Event()

    async def debugged() -> None:
        x = ag.tensor([0.0], requires_grad=True)
        with detect_anomaly():
            loss = (x.sqrt() * 0.0).sum()
            inside.set()
            await other_done.wait()  # the other task runs while this one is in anomaly mode
            with pytest.raises(RuntimeError, match="returned nan values"):
                await ag.backward(loss)

    async def plain() -> None:
        await inside.wait()
        assert not ag.autograd.is_anomaly_enabled()
        x = ag.tensor([0.0], requires_grad=True)
        y = x.sqrt() * 0.0
        assert y.grad_fn is not None
        assert y.grad_fn._metadata is None
        await ag.backward(y.sum())  # no NaN check
        assert x.grad is not None
        assert np.isnan(x.grad.numpy()).all()
        other_done.set()

    async with asyncio.timeout(5):
        await asyncio.gather(debugged(), plain())


async def test_a_worker_started_in_anomaly_mode_serves_others_without_it() -> None:
    # The device worker's task copies the context of whoever started it; nodes it runs for a
    # graph task take that graph task's mode instead.
    xa = ag.tensor([1.0], requires_grad=True)
    xb = ag.tensor([1.0], requires_grad=True)
    with detect_anomaly():
        first = asyncio.ensure_future(ag.backward((xa * 2).sum()))  # starts the worker
    async with asyncio.timeout(5):
        (gb,), _ = await asyncio.gather(ag.grad((xb * xb).sum(), xb, create_graph=True), first)
    assert gb.grad_fn is not None
    assert gb.grad_fn._metadata is None  # made during backward, not in anomaly mode
    assert xa.grad is not None
    assert xa.grad.item() == 2.0
