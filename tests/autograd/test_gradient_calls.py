"""One rule for every gradient function (See NOTE [One rule for gradient calls] in
asyncgrad/autograd/entry.py).

With no event loop running in the calling thread (a script, a worker thread), ``ag.grad``,
``ag.backward``, ``ag.autograd.grad/backward`` and ``ag.autograd.functional.*`` run at the call
and return and raise what torch's do. Inside a running loop (asyncio, uvloop, trio) they are
awaitable, and any other use raises at once, naming ``await`` and the ``_sync`` twin.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import threading
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import functional as F
from asyncgrad.autograd.entry import BACKWARD_DONE, NotAwaitedError

TIMEOUT_S: Final = 10.0
HAVE_TORCH: Final = importlib.util.find_spec("torch") is not None
HAVE_TRIO: Final = importlib.util.find_spec("trio") is not None
HAVE_ANYIO: Final = importlib.util.find_spec("anyio") is not None


def problem() -> tuple[ag.Tensor, ag.Tensor, ag.Tensor]:
    x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    w = ag.tensor([3.0, -1.0], dtype=ag.float64, requires_grad=True)
    return x, w, (x * x * w).sum()


def check(gx: Any, gw: Any) -> None:
    np.testing.assert_allclose(gx.numpy(), [6.0, -4.0])  # d/dx = 2 x w
    np.testing.assert_allclose(gw.numpy(), [1.0, 4.0])  # d/dw = x^2


def in_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a new thread, where no event loop runs; its result or its exception."""
    out: list[Any] = []

    def body() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as e:  # handed back to the test
            out.append(("error", e))

    t = threading.Thread(target=body)
    t.start()
    t.join(timeout=TIMEOUT_S)
    assert not t.is_alive()
    kind, value = out[0]
    if kind == "error":
        raise value
    return value


@pytest.fixture
def no_warnings() -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not caught, [str(w.message) for w in caught]


# ------------------------------------------------------------------------------ no running loop
def test_grad_runs_at_the_call_and_returns_a_tuple(no_warnings: None) -> None:
    x, w, y = problem()
    seen: list[Any] = []
    x.register_hook(lambda g: seen.append(g.tolist()))
    res = ag.grad(y, [x, w], retain_graph=True)
    assert isinstance(res, tuple)  # what torch.autograd.grad returns
    assert res == tuple(res)
    assert seen == [[6.0, -4.0]]  # the pass ran at the call: its hook fired
    check(*res)
    assert x.grad is None  # grad() never touches .grad
    assert w.grad is None
    (gx,) = ag.autograd.grad(y, x)
    np.testing.assert_allclose(gx.numpy(), [6.0, -4.0])


def test_a_result_feeds_back_as_outputs_for_second_derivatives(no_warnings: None) -> None:
    x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    y = (x**3).sum()
    grads = ag.grad(y, x, create_graph=True)
    (h,) = ag.grad(grads, x, grad_outputs=ag.ones_like(x))
    np.testing.assert_allclose(h.numpy(), [6.0, 12.0])  # d2/dx2 x^3 = 6x


def test_backward_runs_at_the_call_and_returns_a_falsy_done(no_warnings: None) -> None:
    # torch returns None: asyncgrad returns BACKWARD_DONE, falsy, that also awaits to None.
    x, w, y = problem()
    assert ag.backward(y, retain_graph=True) is BACKWARD_DONE
    check(x.grad, w.grad)
    assert not ag.autograd.backward(y)  # accumulates, as torch's
    assert repr(BACKWARD_DONE) == "<ag.backward(...) done>"
    np.testing.assert_allclose(x.grad.numpy(), [12.0, -8.0])


def test_argument_errors_raise_at_the_call_and_change_nothing(no_warnings: None) -> None:
    x, _, y = problem()
    h = ag.tensor([1.0], requires_grad=True) * 2  # a non-leaf: backward(inputs=) retains its grad
    with pytest.raises(TypeError, match=r"inputs\[0\] must be a Tensor, got numpy\.ndarray"):
        ag.grad(y, [np.ones(2)])
    with pytest.raises(RuntimeError, match="does not require grad"):
        ag.grad(y, [ag.ones(2)])
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        ag.backward(x * 2, inputs=[h])
    assert not h.retains_grad
    assert x.grad is None
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        ag.grad(y, [x, h], retain_graph=True)
    res = ag.grad(y, [x, h], allow_unused=True)
    assert res[1] is None


@pytest.mark.parametrize("name", ["vjp", "jvp", "vhp", "hvp", "jacobian", "hessian"])
def test_functional_runs_at_the_call_as_its_twin(name: str, no_warnings: None) -> None:
    def f(t: ag.Tensor) -> ag.Tensor:
        return (t**3).sum() if name in ("vhp", "hvp", "hessian") else t**3

    x = ag.tensor([1.0, 2.0], dtype=ag.float64)
    args: tuple[Any, ...] = (f, x) if name in ("jacobian", "hessian") else (f, x, None)
    if name in ("jvp", "vhp", "hvp"):
        args = (f, x, ag.ones_like(x))
    if name == "vjp":
        args = (f, x, ag.ones_like(x))
    res = getattr(F, name)(*args)
    want = getattr(F, f"{name}_sync")(*args)
    flat = res if isinstance(res, tuple) else (res,)
    flat_want = want if isinstance(want, tuple) else (want,)
    assert len(flat) == len(flat_want)
    for a, b in zip(flat, flat_want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy())
    # closed forms: d x^3 = 3x^2, d2 = 6x
    if name == "jacobian":
        np.testing.assert_allclose(res.numpy(), np.diag([3.0, 12.0]))
    if name == "hessian":
        np.testing.assert_allclose(res.numpy(), np.diag([6.0, 12.0]))
    if name in ("vhp", "hvp"):
        np.testing.assert_allclose(res[1].numpy(), [6.0, 12.0])


def test_functional_with_an_async_function_needs_a_loop() -> None:
    async def f(t: ag.Tensor) -> ag.Tensor:
        return t * 2

    with pytest.raises(TypeError, match="an async function needs the awaited form"):
        F.jacobian(f, ag.tensor([1.0]))


def test_a_worker_thread_without_a_loop_runs_at_the_call(no_warnings: None) -> None:
    x, w, y = problem()
    check(*in_thread(lambda: ag.grad(y, [x, w], retain_graph=True)))
    assert in_thread(lambda: ag.backward(y)) is BACKWARD_DONE
    check(x.grad, w.grad)


def test_asyncio_run_of_a_call_made_without_a_loop_gives_its_value(no_warnings: None) -> None:
    # The call ran (no loop yet); what it returned is torch's value, and a finished coroutine:
    # asyncio takes it, and the pass does not run again (tests/autograd/test_call_patterns.py).
    x, w, y = problem()
    assert asyncio.run(ag.backward(y)) is None
    check(x.grad, w.grad)


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed: it is the reference here")
def test_a_script_ported_from_torch_computes_what_torch_computes() -> None:
    body = (
        "x = M.tensor([1.0, 2.0, 3.0], requires_grad=True)\n"
        "w = M.tensor([0.5, -1.0, 2.0], requires_grad=True)\n"
        "y = (x * x * w).sum()\n"
        "gx, gw = M.autograd.grad(y, (x, w), retain_graph=True)\n"
        "M.autograd.backward(y)\n"
        "J = F.jacobian(lambda t: t * t * w.detach(), x.detach())\n"
        "out, v = F.vjp(lambda t: (t * t).sum(), x.detach())\n"
        "print([gx.tolist(), gw.tolist(), x.grad.tolist(), J.tolist(), v.tolist()])\n"
    )
    outs = []
    for head in (
        "import torch as M\nimport torch.autograd.functional as F\n",
        "import asyncgrad as M\nimport asyncgrad.autograd.functional as F\n",
    ):
        proc = subprocess.run(
            [sys.executable, "-W", "error", "-c", head + body],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        outs.append(proc.stdout)
    assert outs[0] == outs[1]


# ------------------------------------------------------------------------------- running loop
async def test_awaited_calls_give_their_results(no_warnings: None) -> None:
    x, w, y = problem()
    async with asyncio.timeout(TIMEOUT_S):
        check(*await ag.grad(y, [x, w], retain_graph=True))
        check(*await ag.autograd.grad(y, inputs=[x, w], retain_graph=True))
        args = (y, [x, w])
        check(*await ag.grad(*args, retain_graph=True))  # the *args form of the call
        assert await ag.backward(y) is None
        check(x.grad, w.grad)
        jac = await F.jacobian(lambda t: t**3, x.detach())
        np.testing.assert_allclose(jac.numpy(), np.diag([3.0, 12.0]))


async def test_tasks_gather_and_wait_for_run_them(no_warnings: None) -> None:
    x, w, y = problem()
    async with asyncio.timeout(TIMEOUT_S):
        task = asyncio.create_task(ag.grad(y, [x, w], retain_graph=True))
        check(*await task)
        a, b = await asyncio.gather(
            ag.grad(y, [x, w], retain_graph=True), F.vjp(lambda t: (t * t).sum(), x.detach())
        )
        check(*a)
        np.testing.assert_allclose(b[1].numpy(), [2.0, 4.0])
        pending = ag.backward(y)
        await asyncio.wait_for(pending, TIMEOUT_S)
        check(x.grad, w.grad)


CALLS: Final[dict[str, Callable[[ag.Tensor, ag.Tensor], Any]]] = {
    "ag.grad": lambda y, x: ag.grad(y, x),
    "ag.autograd.grad": lambda y, x: ag.autograd.grad(y, x),
    "ag.backward": lambda y, x: ag.backward(y),
    "ag.autograd.backward": lambda y, x: ag.autograd.backward(y),
    "ag.autograd.functional.jacobian": lambda y, x: F.jacobian(lambda t: t * 2, x),
    "ag.autograd.functional.vjp": lambda y, x: F.vjp(lambda t: t.sum(), x),
}
TWINS: Final = {
    "ag.grad": "ag.grad_sync",
    "ag.autograd.grad": "ag.grad_sync",
    "ag.backward": "ag.backward_sync",
    "ag.autograd.backward": "ag.backward_sync",
}


def discard(name: str, y: ag.Tensor, x: ag.Tensor) -> None:
    """Call ``name`` as a statement, throwing its value away (as ported torch code does)."""
    if name == "ag.grad":
        ag.grad(y, x)
    elif name == "ag.autograd.grad":
        ag.autograd.grad(y, x, retain_graph=True)  # the keyword form of the call
    elif name == "ag.backward":
        ag.backward(y)
    elif name == "ag.autograd.backward":
        ag.autograd.backward(y, retain_graph=True)
    elif name == "ag.autograd.functional.jacobian":
        F.jacobian(lambda t: t * 2, x)
    else:
        F.vjp(lambda t: t.sum(), x)


def _names(name: str) -> tuple[str, str]:
    """The name the message uses for a call, and its twin."""
    short = name.replace("ag.autograd.grad", "ag.grad").replace(
        "ag.autograd.backward", "ag.backward"
    )
    return short, TWINS.get(name, f"{name}_sync")


@pytest.mark.parametrize("name", list(CALLS))
async def test_a_discarded_call_raises_at_once_and_computes_nothing(
    name: str, no_warnings: None
) -> None:
    x, _, y = problem()
    call, twin = _names(name)
    seen: list[Any] = []
    x.register_hook(seen.append)
    with pytest.raises(NotAwaitedError, match=rf"`await {call}\(\.\.\.\)`.*{twin}\(\.\.\.\)"):
        discard(name, y, x)
    assert seen == []
    assert x.grad is None
    assert isinstance(NotAwaitedError("m"), TypeError)


@pytest.mark.parametrize("name", list(CALLS))
async def test_using_a_call_without_await_raises_at_once(name: str, no_warnings: None) -> None:
    x, _, y = problem()
    call, twin = _names(name)
    message = rf"without awaiting it.*`await {call}\(\.\.\.\)`.*{twin}\(\.\.\.\)"
    pending = CALLS[name](y, x)
    with pytest.raises(NotAwaitedError, match="cannot unpack.*" + message):
        (_,) = pending
    with pytest.raises(NotAwaitedError, match="cannot index.*" + message):
        pending[0]
    with pytest.raises(NotAwaitedError, match=r"cannot take len\(\).*" + message):
        len(pending)
    with pytest.raises(NotAwaitedError, match="cannot test the truth.*" + message):
        bool(pending)
    with pytest.raises(AttributeError, match=r"cannot read \.shape.*" + message):
        pending.shape  # noqa: B018
    assert "not awaited yet" in repr(pending)
    del pending  # refused already: no further warning
    assert x.grad is None


async def test_a_call_dropped_without_await_warns_naming_the_twin() -> None:
    x, _, y = problem()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pending = ag.grad(y, x)
        del pending
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages  # ours only, not also "coroutine ... was never awaited"
    assert "ag.grad(...) was never awaited" in messages[0]
    assert "ag.grad_sync(...)" in messages[0]


async def test_the_sync_twins_still_block_inside_a_loop(no_warnings: None) -> None:
    x, w, y = problem()
    check(*ag.grad_sync(y, [x, w], retain_graph=True))
    ag.backward_sync(y)
    check(x.grad, w.grad)
    np.testing.assert_allclose(
        F.jacobian_sync(lambda t: t**3, x.detach()).numpy(), np.diag([3.0, 12.0])
    )


async def test_a_worker_thread_of_a_loop_runs_at_the_call(no_warnings: None) -> None:
    x, w, y = problem()
    async with asyncio.timeout(TIMEOUT_S):
        res = await asyncio.to_thread(ag.grad, y, [x, w], retain_graph=True)
        assert isinstance(res, tuple)
        check(*res)
        assert await asyncio.to_thread(ag.backward, y) is BACKWARD_DONE
    check(x.grad, w.grad)


async def test_cancelling_a_task_of_a_call_stops_it(no_warnings: None) -> None:
    x, _, y = problem()
    entered, release = asyncio.Event(), asyncio.Event()

    async def hook(g: ag.Tensor) -> None:
        entered.set()
        await release.wait()  # never set: the task is cancelled while here

    h = x.register_hook(hook)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            task = asyncio.create_task(ag.grad(y, x))
            await entered.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await ag.autograd.engine.wait_idle()
    finally:
        h.remove()


# -------------------------------------------------------------------------------- other loops
def _run_on(backend: str, body: Callable[[], Awaitable[Any]]) -> Any:
    import anyio

    async def main() -> Any:
        with anyio.fail_after(TIMEOUT_S):
            return await body()

    return anyio.run(main, backend=backend)


@pytest.mark.skipif(not (HAVE_TRIO and HAVE_ANYIO), reason="trio and anyio are not installed")
def test_inside_trio_calls_are_awaitable_and_threads_run_at_the_call() -> None:
    import anyio.to_thread

    x, w, y = problem()

    async def body() -> None:
        check(*await ag.grad(y, [x, w], retain_graph=True))
        with pytest.raises(NotAwaitedError, match=r"`await ag\.backward\(\.\.\.\)`"):
            ag.backward(y)
        # anyio's worker threads inherit trio's context but run no loop: torch's behaviour.
        res = await anyio.to_thread.run_sync(lambda: ag.grad(y, [x, w], retain_graph=True))
        assert isinstance(res, tuple)
        check(*res)

    _run_on("trio", body)
    assert x.grad is None


@pytest.mark.skipif(not HAVE_ANYIO, reason="anyio is not installed")
@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed")
def test_inside_uvloop_calls_are_awaitable() -> None:
    x, w, y = problem()

    async def body() -> None:
        check(*await ag.grad(y, [x, w], retain_graph=True))
        with pytest.raises(NotAwaitedError, match=r"`await ag\.grad\(\.\.\.\)`"):
            (_,) = ag.grad(y, [x])

    import anyio

    anyio.run(body, backend="asyncio", backend_options={"use_uvloop": True})


# ------------------------------------------------------------- user code called by a backward
class CubeByInnerGrad(ag.autograd.Function):
    """x**3 whose backward takes the inner derivative with a gradient call, as ported torch
    code does (torch.autograd.grad inside a custom backward: reentrant backward)."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            inner = x.detach().requires_grad_()
            (d,) = ag.grad((inner**3).sum(), inner)
            other = x.detach().requires_grad_()
            ag.backward((other * other).sum())  # a statement, as in torch
        np.testing.assert_allclose(other.grad.numpy(), 2 * x.numpy())
        return g * d


def test_a_sync_custom_backward_may_call_gradient_functions_in_a_script() -> None:
    x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    CubeByInnerGrad.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])


async def test_a_sync_custom_backward_may_call_gradient_functions_in_an_awaited_pass(
    no_warnings: None,
) -> None:
    # The backward runs on the loop's thread but cannot await: its calls run at once.
    x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    async with asyncio.timeout(TIMEOUT_S):
        (gx,) = await ag.grad(CubeByInnerGrad.apply(x).sum(), x)
    np.testing.assert_allclose(gx.numpy(), [3.0, 12.0])


async def test_a_sync_hook_may_call_grad_in_an_awaited_pass(no_warnings: None) -> None:
    x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    z = ag.tensor([3.0], dtype=ag.float64, requires_grad=True)
    seen: list[Any] = []

    def hook(g: ag.Tensor) -> None:
        with ag.enable_grad():  # a pass runs its nodes with grad mode off, as torch's
            seen.append(ag.grad((z * z).sum(), z))

    x.register_hook(hook)
    async with asyncio.timeout(TIMEOUT_S):
        await ag.backward((x * x).sum())
    assert type(seen[0]) is tuple  # user code that a pass calls gets torch's plain values
    np.testing.assert_allclose(seen[0][0].numpy(), [6.0])


async def test_an_async_custom_backward_awaits_and_may_not_discard(no_warnings: None) -> None:
    class Twice(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
            (x,) = ctx.saved_tensors
            with ag.enable_grad():
                inner = x.detach().requires_grad_()
                (d,) = await ag.grad((inner * 2).sum(), inner)
                ag.backward((inner * 3).sum())  # thrown away: raises at once
            return g * d

    x = ag.tensor([1.0], dtype=ag.float64, requires_grad=True)
    async with asyncio.timeout(TIMEOUT_S):
        with pytest.raises(NotAwaitedError, match=r"`await ag\.backward\(\.\.\.\)`"):
            await ag.backward(Twice.apply(x).sum())
    assert x.grad is None


@pytest.mark.skipif(not HAVE_ANYIO, reason="anyio is not installed")
@pytest.mark.parametrize(
    "backend",
    [
        "asyncio",
        pytest.param(
            "trio", marks=pytest.mark.skipif(not HAVE_TRIO, reason="trio is not installed")
        ),
    ],
)
def test_task_groups_start_gradient_calls(backend: str) -> None:
    # start_soon(fn, *args) calls fn itself and runs what it returns as a task.
    import anyio

    x, w, y = problem()

    async def body() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ag.backward, y)

    _run_on(backend, body)
    check(x.grad, w.grad)


# --------------------------------------------------------- module code in a running loop
CELL: Final = """
(gx, gw) = ag.grad(y, [x, w], retain_graph=True)

def step():
    ag.backward(y, retain_graph=True)  # a statement, in a function the cell calls

step()
jac = F.jacobian(lambda t: t**3, x.detach())
"""


async def test_module_level_code_in_a_running_loop_runs_at_once(no_warnings: None) -> None:
    # What a notebook cell or an interactive line does: module-level code run on the loop's
    # thread, which cannot await (See NOTE [Module code cannot await]).
    x, w, y = problem()
    ns: dict[str, Any] = {"ag": ag, "F": F, "x": x, "w": w, "y": y}
    exec(compile(CELL, "<cell>", "exec"), ns)
    check(ns["gx"], ns["gw"])
    check(x.grad, w.grad)
    np.testing.assert_allclose(ns["jac"].numpy(), np.diag([3.0, 12.0]))


async def test_a_cell_with_top_level_await_awaits(no_warnings: None) -> None:
    # A cell with a top-level await compiles to a coroutine: there the calls are awaitable.
    import ast

    x, w, y = problem()
    ns: dict[str, Any] = {"ag": ag, "x": x, "w": w, "y": y}
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    good = compile(
        "(gx, gw) = await ag.grad(y, [x, w], retain_graph=True)", "<cell>", "exec", flags
    )
    async with asyncio.timeout(TIMEOUT_S):
        await eval(good, ns)
    check(ns["gx"], ns["gw"])
    bad = compile("await asyncio.sleep(0)\n(g,) = ag.grad(y, x)", "<cell>", "exec", flags)
    ns["asyncio"] = asyncio
    with pytest.raises(NotAwaitedError, match=r"cannot unpack.*`await ag\.grad\(\.\.\.\)`"):
        await eval(bad, ns)


async def test_a_loop_callback_gets_an_awaitable(no_warnings: None) -> None:
    # A sync callback the loop runs may hand the call to a task: it is not module code.
    x, w, y = problem()
    loop = asyncio.get_running_loop()
    made: asyncio.Future[Any] = loop.create_future()
    loop.call_soon(lambda: made.set_result(asyncio.ensure_future(ag.backward(y))))
    async with asyncio.timeout(TIMEOUT_S):
        await (await made)
    check(x.grad, w.grad)
