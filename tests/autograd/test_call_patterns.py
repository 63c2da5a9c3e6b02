"""The ways Python code holds a gradient call (See NOTE [One rule for gradient calls] in
asyncgrad/autograd/entry.py): each one that awaits the call gets its result, with no warning, and
none that loses it passes in silence.

Inside a running loop: a direct await, a helper or lambda that returns the call,
``functools.partial``, a call stored and awaited later, ``gather``, ``wait_for``, ``create_task``,
``TaskGroup``, async generators, decorators, retry wrappers, injected callables, C code in between
(``map``), anyio's task groups and trio's nurseries. With no loop, the eager results are taken by
``asyncio.run``, ``wait_for``, ``gather``, ``create_task``, anyio and trio, and awaiting them never
runs the pass again. The async tests run on asyncio's loop and on uvloop's (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import gc
import importlib.util
import inspect
import json
import pickle
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, Final, TypeVar

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import backward
from asyncgrad.autograd import functional as F
from asyncgrad.autograd.entry import BACKWARD_DONE, FinishedTuple, NotAwaitedError

TIMEOUT_S: Final = 10.0
HAVE_TRIO: Final = importlib.util.find_spec("trio") is not None
HAVE_ANYIO: Final = importlib.util.find_spec("anyio") is not None

R = TypeVar("R")
ALIAS: Final = ag.backward


class Problem:
    """y = sum(x * x * w), with a hook on x that counts the passes that reach it."""

    def __init__(self) -> None:
        self.x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
        self.w = ag.tensor([3.0, -1.0], dtype=ag.float64, requires_grad=True)
        self.passes = 0
        self.x.register_hook(self._count)

    def _count(self, g: ag.Tensor) -> None:
        self.passes += 1

    def loss(self) -> ag.Tensor:
        return (self.x * self.x * self.w).sum()

    @property
    def inputs(self) -> list[ag.Tensor]:
        return [self.x, self.w]

    def check(self, grads: Any, passes: int = 1) -> None:
        gx, gw = grads
        np.testing.assert_allclose(gx.numpy(), [6.0, -4.0])  # d/dx = 2 x w
        np.testing.assert_allclose(gw.numpy(), [1.0, 4.0])  # d/dw = x^2
        assert self.passes == passes

    def check_accumulated(self, passes: int = 1) -> None:
        self.check((self.x.grad, self.w.grad), passes)


@pytest.fixture
def quiet() -> Iterator[None]:
    """No warning at all, "never awaited" ones included, once every wrapper has been dropped."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    assert not caught, [f"{w.filename}:{w.lineno}: {w.message}" for w in caught]


# ------------------------------------------------------------------- the patterns, in a loop
PATTERNS: Final[dict[str, Callable[[Problem], Awaitable[Any]]]] = {}


def pattern(fn: Callable[[Problem], Awaitable[Any]]) -> Callable[[Problem], Awaitable[Any]]:
    PATTERNS[fn.__name__] = fn
    return fn


@pattern
async def direct_await(p: Problem) -> Any:
    return await ag.grad(p.loss(), p.inputs)


@pattern
async def returning_helper(p: Problem) -> Any:
    def compute(y: ag.Tensor) -> Any:
        return ag.grad(y, p.inputs)

    return await compute(p.loss())


@pattern
async def lambda_returning_the_call(p: Problem) -> Any:
    f = lambda: ag.grad(p.loss(), p.inputs)  # noqa: E731
    return await f()


@pattern
async def partial_called_and_awaited(p: Problem) -> Any:
    return await functools.partial(ag.grad, p.loss(), p.inputs)()


@pattern
async def partial_stored_then_called(p: Problem) -> Any:
    call = functools.partial(ag.grad, p.loss(), p.inputs)
    pending = call()
    return await pending


@pattern
async def stored_and_awaited_later(p: Problem) -> Any:
    pending = ag.grad(p.loss(), p.inputs)
    other = ag.tensor([2.0], requires_grad=True)
    (g,) = await ag.grad((other * other).sum(), other)  # other work first
    np.testing.assert_allclose(g.numpy(), [4.0])
    return await pending


@pattern
async def kept_in_a_dict(p: Problem) -> Any:
    calls = {"grads": ag.grad(p.loss(), p.inputs)}
    return await calls["grads"]


@pattern
async def gathered(p: Problem) -> Any:
    def compute() -> Any:
        return ag.grad(p.loss(), p.inputs)

    a, b = await asyncio.gather(ag.grad(p.loss(), p.inputs), compute())
    p.check(b, passes=2)
    p.passes = 1
    return a


@pattern
async def wait_for_a_call(p: Problem) -> Any:
    return await asyncio.wait_for(ag.grad(p.loss(), p.inputs), TIMEOUT_S)


@pattern
async def wait_for_a_helper(p: Problem) -> Any:
    def compute() -> Any:
        return ag.grad(p.loss(), p.inputs)

    return await asyncio.wait_for(compute(), TIMEOUT_S)


@pattern
async def create_task_of_a_helper(p: Problem) -> Any:
    def compute() -> Any:
        return ag.grad(p.loss(), p.inputs)

    task = asyncio.create_task(compute())
    return await task


@pattern
async def ensure_future_of_a_lambda(p: Problem) -> Any:
    f = lambda: ag.grad(p.loss(), p.inputs)  # noqa: E731
    return await asyncio.ensure_future(f())


@pattern
async def shielded(p: Problem) -> Any:
    return await asyncio.shield(ag.grad(p.loss(), p.inputs))


@pattern
async def task_group(p: Problem) -> Any:
    def compute() -> Any:
        return ag.grad(p.loss(), p.inputs)

    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(compute())
    return task.result()


@pattern
async def async_generator_yielding_calls(p: Problem) -> Any:
    async def calls() -> AsyncIterator[Any]:
        yield ag.grad(p.loss(), p.inputs)  # the consumer awaits what it is given

    async for pending in calls():
        return await pending
    raise AssertionError("the generator yielded nothing")


@pattern
async def async_generator_yielding_results(p: Problem) -> Any:
    async def results() -> AsyncIterator[Any]:
        yield await ag.grad(p.loss(), p.inputs)

    (res,) = [r async for r in results()]
    return res


def passthrough(fn: Callable[..., R]) -> Callable[..., R]:
    """A sync decorator, as logging and tracing wrappers are written."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        return fn(*args, **kwargs)

    return wrapper


@pattern
async def sync_decorator_over_a_helper(p: Problem) -> Any:
    @passthrough
    def compute(y: ag.Tensor) -> Any:
        return ag.grad(y, p.inputs)

    return await compute(p.loss())


@pattern
async def sync_decorator_over_grad(p: Problem) -> Any:
    return await passthrough(ag.grad)(p.loss(), p.inputs)


def timed(fn: Callable[..., Awaitable[R]]) -> Callable[..., Coroutine[Any, Any, R]]:
    """An async decorator that awaits what it wraps: a timing harness."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> R:
        try:
            return await fn(*args, **kwargs)
        finally:
            wrapper.calls += 1  # type: ignore[attr-defined]

    wrapper.calls = 0  # type: ignore[attr-defined]
    return wrapper


@pattern
async def async_decorator_over_grad(p: Problem) -> Any:
    return await timed(ag.grad)(p.loss(), p.inputs)


@pattern
async def wrapper_of_the_coroutine(p: Problem) -> Any:
    async def traced(aw: Awaitable[R]) -> R:
        return await aw

    return await traced(ag.grad(p.loss(), p.inputs))


@pattern
async def retry_wrapper(p: Problem) -> Any:
    async def retry(make: Callable[[], Awaitable[R]], attempts: int = 3) -> R:
        for attempt in range(attempts):
            try:
                return await make()
            except ConnectionError:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    tries = 0

    def make() -> Awaitable[Any]:
        nonlocal tries
        tries += 1
        if tries == 1:
            return _fail(ConnectionError("the first try fails"))
        return ag.grad(p.loss(), p.inputs)

    res = await retry(make)
    assert tries == 2
    return res


async def _fail(exc: BaseException) -> Any:
    raise exc


@pattern
async def injected_callable(p: Problem) -> Any:
    class Trainer:
        def __init__(self, grad_fn: Callable[..., Any] = ag.grad) -> None:
            self.grad_fn = grad_fn

        def start(self, y: ag.Tensor) -> Any:
            return self.grad_fn(y, p.inputs)

    return await Trainer().start(p.loss())


@pattern
async def map_builds_the_calls(p: Problem) -> Any:
    # C code calls ag.grad: the frame it sees is this one, at the call of list().
    pending = list(map(ag.grad, [p.loss()], [p.inputs]))
    return (await asyncio.gather(*pending))[0]


@pattern
async def list_extend_keeps_the_calls(p: Problem) -> Any:
    # A statement whose own value is thrown away, while the C code in it keeps the calls.
    pending: list[Any] = []
    pending.extend(map(ag.grad, [p.loss()], [p.inputs]))
    return await pending[0]


@pattern
async def context_run(p: Problem) -> Any:
    return await contextvars.copy_context().run(ag.grad, p.loss(), p.inputs)


@pytest.mark.parametrize("name", list(PATTERNS))
async def test_every_pattern_that_awaits_gets_the_result(name: str, quiet: None) -> None:
    p = Problem()
    async with asyncio.timeout(TIMEOUT_S):
        res = await PATTERNS[name](p)
    assert type(res) is tuple  # an awaited call gives torch's plain tuple
    p.check(res)


async def test_backward_and_functional_through_helpers_lambdas_and_partials(quiet: None) -> None:
    p = Problem()

    def step(y: ag.Tensor) -> Any:
        return ag.backward(y)

    run_backward = functools.partial(ag.backward, p.loss())
    jac = lambda: F.jacobian(lambda t: t**3, p.x.detach())  # noqa: E731
    async with asyncio.timeout(TIMEOUT_S):
        assert await step(p.loss()) is None
        p.check_accumulated()
        assert await (lambda: ag.backward(p.loss()))() is None
        assert await run_backward() is None
        await asyncio.gather(step(p.loss()), asyncio.wait_for(step(p.loss()), TIMEOUT_S))
        np.testing.assert_allclose(p.x.grad.numpy(), [30.0, -20.0])  # five passes of 2 x w
        np.testing.assert_allclose((await jac()).numpy(), np.diag([3.0, 12.0]))  # 3 x^2


async def test_create_task_and_task_groups_of_backward(quiet: None) -> None:
    p = Problem()
    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.create_task(ag.backward(p.loss()))
        async with asyncio.TaskGroup() as tg:
            tg.create_task((lambda: ag.backward(p.loss()))())
    np.testing.assert_allclose(p.x.grad.numpy(), [12.0, -8.0])


# ------------------------------------------------------------------ losing a call is not silent
def _drop(p: Problem) -> int:
    """Throw away a call that a helper returned; the line of the call."""

    def compute() -> Any:
        return ag.grad(p.loss(), p.inputs)

    compute()
    return compute.__code__.co_firstlineno + 1


async def test_a_returned_call_that_is_dropped_warns_at_its_line() -> None:
    p = Problem()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _drop(p)
        gc.collect()
    assert [(w.category, w.filename, w.lineno) for w in caught] == [
        (RuntimeWarning, __file__, line)
    ]
    assert "ag.grad(...) was never awaited, so nothing was computed" in str(caught[0].message)
    assert "ag.grad_sync(...)" in str(caught[0].message)
    assert p.passes == 0


async def test_a_call_the_rule_cannot_read_stays_awaitable_and_warns_if_dropped() -> None:
    # Called through a local alias, or through partial, as a statement: whether the value is
    # kept cannot be told at the call (C code might keep it), so it is not refused; dropped, it
    # warns.
    p = Problem()
    alias = ag.backward
    later = functools.partial(ag.backward, p.loss())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        alias(p.loss())
        later()
        gc.collect()
    assert [str(w.message).split(" was")[0] for w in caught] == ["ag.backward(...)"] * 2
    assert p.x.grad is None


async def test_statements_that_throw_the_call_away_raise_at_once(quiet: None) -> None:
    p = Problem()
    flag = True
    with pytest.raises(NotAwaitedError, match=r"`await ag\.backward\(\.\.\.\)`"):
        backward(p.loss())  # imported, under any name
    with pytest.raises(NotAwaitedError, match=r"`await ag\.backward\(\.\.\.\)`"):
        ALIAS(p.loss())  # a module's alias
    with pytest.raises(NotAwaitedError, match=r"ag\.backward_sync"):
        ag.autograd.backward(
            p.loss(),
            retain_graph=True,
        )
    with pytest.raises(NotAwaitedError, match=r"`await ag\.grad\(\.\.\.\)`"):
        ag.grad(p.loss(), p.inputs) if flag else None
    with pytest.raises(NotAwaitedError, match=r"ag\.autograd\.functional\.vjp_sync"):
        F.vjp(lambda t: t.sum(), p.x.detach())
    assert p.passes == 0
    assert p.x.grad is None


def test_code_without_source_positions_leaves_statements_awaitable() -> None:
    # python -X no_debug_ranges compiles without columns: a statement cannot be told from a
    # call whose value C code keeps, so it warns when dropped instead of raising.
    script = (
        "import asyncio, json, warnings\n"
        "import asyncgrad as ag\n"
        "x = ag.tensor([1.0, 2.0], requires_grad=True)\n"
        "def compute(): return ag.grad((x * x).sum(), x)\n"
        "async def main():\n"
        "    (g,) = await compute()\n"
        "    (h,) = await ag.grad((x * x).sum(), x)\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        ag.backward((x * x).sum())\n"
        "    return [g.tolist(), h.tolist(), [str(w.message).split(' was')[0] for w in caught]]\n"
        "print(json.dumps(asyncio.run(asyncio.wait_for(main(), 10))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-X", "no_debug_ranges", "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [[2.0, 4.0], [2.0, 4.0], ["ag.backward(...)"]]


async def test_a_cell_may_hand_its_calls_to_asyncio(quiet: None) -> None:
    # Module-level code in a running loop (a notebook cell) runs its calls at once, and asyncio
    # takes what they return (See NOTE [Module code cannot await]).
    p = Problem()
    cell = (
        "task = asyncio.ensure_future(ag.grad(p.loss(), p.inputs))\n"
        "later = asyncio.wait_for(ag.backward(p.loss()), 10)\n"
        "ran = p.passes\n"
    )
    ns: dict[str, Any] = {"ag": ag, "asyncio": asyncio, "p": p}
    exec(compile(cell, "<cell>", "exec"), ns)
    assert ns["ran"] == 2
    async with asyncio.timeout(TIMEOUT_S):
        p.check(await ns["task"], passes=2)
        assert await ns["later"] is None
    p.check_accumulated(passes=2)


# ---------------------------------------------------------------------------- anyio and trio
def _run_on(backend: str, body: Callable[[], Awaitable[R]]) -> R:
    import anyio

    async def main() -> R:
        with anyio.fail_after(TIMEOUT_S):
            return await body()

    return anyio.run(main, backend=backend)


BACKENDS: Final = [
    "asyncio",
    pytest.param("trio", marks=pytest.mark.skipif(not HAVE_TRIO, reason="trio is not installed")),
]


@pytest.mark.skipif(not HAVE_ANYIO, reason="anyio is not installed")
@pytest.mark.parametrize("backend", BACKENDS)
def test_anyio_runs_calls_however_they_are_handed_over(backend: str, quiet: None) -> None:
    import anyio

    p = Problem()

    def compute() -> Any:
        return ag.grad(p.loss(), p.inputs)

    async def body() -> list[Any]:
        out: list[Any] = [await compute()]

        async def keep(aw: Awaitable[Any]) -> None:
            out.append(await aw)

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep, compute())
            tg.start_soon(lambda: ag.backward(p.loss()))
            tg.start_soon(ag.backward, p.loss())
        return out

    a, b = _run_on(backend, body)
    p.check(a, passes=4)
    p.check(b, passes=4)
    np.testing.assert_allclose(p.x.grad.numpy(), [12.0, -8.0])  # two backward passes
    res = anyio.run(functools.partial(ag.grad, p.loss(), p.inputs), backend=backend)
    p.check(res, passes=5)


@pytest.mark.skipif(not HAVE_TRIO, reason="trio is not installed")
def test_trio_runs_calls_and_nurseries_start_them(quiet: None) -> None:
    import trio

    p = Problem()

    def compute() -> Any:
        return ag.grad(p.loss(), p.inputs)

    async def body() -> Any:
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ag.backward, p.loss())
                nursery.start_soon(lambda: ag.backward(p.loss()))
            return await compute()

    p.check(trio.run(body), passes=3)
    np.testing.assert_allclose(p.x.grad.numpy(), [12.0, -8.0])
    p.check(trio.run(ag.grad, p.loss(), p.inputs), passes=4)


# --------------------------------------------------------------------------- no running loop
def test_an_eager_grad_is_torchs_tuple(quiet: None) -> None:
    p = Problem()
    res = ag.grad(p.loss(), p.inputs)
    p.check(res)
    gx, gw = res
    assert isinstance(res, tuple)
    assert len(res) == 2
    assert res[0] is gx
    assert res == (gx, gw)
    assert type(res[:1]) is tuple
    assert repr(res) == repr((gx, gw))
    assert type(copy.copy(res)) is tuple
    back = pickle.loads(pickle.dumps(res))
    assert type(back) is tuple
    np.testing.assert_allclose(back[0].numpy(), gx.numpy())
    # torch's functional results stay plain values (a Jacobian may be a Tensor).
    assert type(F.vjp(lambda t: (t * t).sum(), p.x.detach())) is tuple


@pytest.mark.cuda
def test_an_eager_grad_feeds_ops_on_its_cuda_device() -> None:
    from tests.cuda.conftest import needs_devices

    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")
    needs_devices(2)
    x = ag.tensor([1.0, 2.0], device="cuda:1", requires_grad=True)
    grads = ag.grad((x * x).sum(), [x, x])
    assert ag.stack(grads).device == ag.device("cuda:1")  # torch.stack(torch.autograd.grad(...))


def test_eager_results_run_under_asyncio_without_running_the_pass_again(quiet: None) -> None:
    p = Problem()
    res = ag.grad(p.loss(), p.inputs, retain_graph=True)
    assert isinstance(res, FinishedTuple)
    assert asyncio.run(res) is res  # asyncio.run(ag.grad(y, [x])) as async users write it
    p.check(asyncio.run(asyncio.wait_for(ag.grad(p.loss(), p.inputs), TIMEOUT_S)), passes=2)
    assert asyncio.run(ag.backward(p.loss())) is None
    p.check_accumulated(passes=3)

    async def main() -> list[Any]:
        async with asyncio.timeout(TIMEOUT_S):
            return [
                await res,
                await res,  # as often as it is awaited
                *(await asyncio.gather(res, ag.backward(p.loss()))),
                await asyncio.create_task(res),
                await asyncio.ensure_future(res),
            ]

    got = asyncio.run(main())  # the second backward ran before main, at its call
    assert got == [res, res, res, None, res, res]
    assert p.passes == 4
    np.testing.assert_allclose(p.x.grad.numpy(), [12.0, -8.0])


@pytest.mark.skipif(not HAVE_ANYIO, reason="anyio is not installed")
@pytest.mark.parametrize("backend", BACKENDS)
def test_anyio_and_trio_take_eager_results(backend: str, quiet: None) -> None:
    import anyio

    p = Problem()
    res = ag.grad(p.loss(), p.inputs)
    assert anyio.run(lambda: res, backend=backend) is res
    assert anyio.run(lambda: ag.backward(p.loss()), backend=backend) is None  # ran before
    if backend == "trio":
        import trio

        assert trio.run(lambda: res) is res
    p.check(res, passes=2)


def test_a_task_of_an_eager_result_is_cancelled_as_a_coroutine_not_started(quiet: None) -> None:
    p = Problem()
    res = ag.grad(p.loss(), p.inputs)

    async def main() -> None:
        async with asyncio.timeout(TIMEOUT_S):
            task = asyncio.ensure_future(res)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    with pytest.raises(ValueError, match="thrown in"):
        res.throw(ValueError("thrown in"))
    res.close()
    p.check(res)


def test_backward_done_is_falsy_and_awaits_to_none(quiet: None) -> None:
    p = Problem()
    done = ag.backward(p.loss())
    assert done is BACKWARD_DONE
    assert not done
    assert repr(done) == "<ag.backward(...) done>"
    assert inspect.isawaitable(done)
    assert asyncio.run(done) is None
    assert asyncio.run(done) is None
    assert pickle.loads(pickle.dumps(done)) is done
    assert copy.deepcopy(done) is done
    p.check_accumulated()


# ------------------------------------------------------------- user code that a pass calls
class CubeByReturnedGrad(ag.autograd.Function):
    """x**3 whose backward returns ag.grad's tuple as its own gradients, as torch code may."""

    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> Any:
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            inner = x.detach().requires_grad_()
            res = ag.grad(inner**3, inner, grad_outputs=g)
        assert type(res) is tuple  # torch's plain tuple here
        return res


def test_a_custom_backward_may_return_grads_tuple_in_a_script(quiet: None) -> None:
    x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    (gx,) = ag.grad(CubeByReturnedGrad.apply(x).sum(), x)
    np.testing.assert_allclose(gx.numpy(), [3.0, 12.0])


async def test_a_custom_backward_may_return_grads_tuple_in_an_awaited_pass(quiet: None) -> None:
    x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    async with asyncio.timeout(TIMEOUT_S):
        (gx,) = await ag.grad(CubeByReturnedGrad.apply(x).sum(), x)
    np.testing.assert_allclose(gx.numpy(), [3.0, 12.0])


def test_a_sync_hook_gets_plain_values(quiet: None) -> None:
    p = Problem()
    z = ag.tensor([3.0], dtype=ag.float64, requires_grad=True)
    seen: list[Any] = []

    def hook(g: ag.Tensor) -> None:
        with ag.enable_grad():
            seen.append(ag.grad((z * z).sum(), z))
            seen.append(ag.backward((z * z).sum()))

    p.w.register_hook(hook)
    p.loss().backward()
    assert type(seen[0]) is tuple
    assert seen[1] is None
    np.testing.assert_allclose(z.grad.numpy(), [6.0])


def test_a_functional_func_may_return_grads_tuple_in_a_script(quiet: None) -> None:
    # The Hessian as the Jacobian of a gradient: d2/dx2 sum(x^3) = diag(6x).
    x = ag.tensor([1.0, 2.0], dtype=ag.float64)
    (h,) = F.jacobian(lambda t: ag.grad((t**3).sum(), t, create_graph=True), x)
    np.testing.assert_allclose(h.numpy(), np.diag([6.0, 12.0]))


async def test_a_functional_func_may_return_grads_call_in_a_loop(quiet: None) -> None:
    x = ag.tensor([1.0, 2.0], dtype=ag.float64)
    async with asyncio.timeout(TIMEOUT_S):
        (h,) = await F.jacobian(lambda t: ag.grad((t**3).sum(), t, create_graph=True), x)
    np.testing.assert_allclose(h.numpy(), np.diag([6.0, 12.0]))
