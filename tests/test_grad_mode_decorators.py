"""Grad modes as decorators and as objects shared between blocks, tasks and threads.

torch's behaviour is the reference where it is defined: ``set_grad_enabled(mode)`` switches the
mode in its constructor, and used as a decorator gives the previous mode back at once;
``no_grad``, ``enable_grad`` and ``inference_mode`` decorate with or without parentheses;
``inference_mode(False)`` turns grad mode on. Where torch keeps per-object state (one object
entered by two threads, or by itself), asyncgrad keeps it per context instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import pytest

import asyncgrad as ag
from asyncgrad.graph.grad_mode import _grad_enabled, _inference

TIMEOUT_S: Final = 5.0


def modes() -> tuple[bool, bool]:
    return ag.is_grad_enabled(), ag.is_inference_mode_enabled()


# (name, factory, base grad mode of the test, modes inside the block)
MANAGERS: Final[list[tuple[str, Callable[[], Any], bool, tuple[bool, bool]]]] = [
    ("no_grad", ag.no_grad, True, (False, False)),
    ("enable_grad", ag.enable_grad, False, (True, False)),
    ("set_grad_enabled(False)", lambda: ag.set_grad_enabled(False), True, (False, False)),
    ("set_grad_enabled(True)", lambda: ag.set_grad_enabled(True), False, (True, False)),
    ("inference_mode", ag.inference_mode, True, (False, True)),
]
MANAGER_IDS: Final = [m[0] for m in MANAGERS]


@pytest.fixture(autouse=True)
def grad_mode_restored() -> Iterator[None]:
    """Every test must leave the default modes as it found them (they are reset regardless, so
    that one failure does not cascade)."""
    assert modes() == (True, False)
    yield
    left = modes()
    _grad_enabled.set(True)
    _inference.set(False)
    assert left == (True, False), "the test left grad modes changed"


def make(factory: Callable[[], Any], base: bool) -> Any:
    """Build a manager while ``base`` is in force (set_grad_enabled records the mode then)."""
    with ag.set_grad_enabled(base):
        return factory()


# ------------------------------------------------------------------- set_grad_enabled decorator
@pytest.mark.parametrize("mode", [False, True])
def test_set_grad_enabled_decorator_restores_mode_after_decorating(mode: bool) -> None:
    with ag.set_grad_enabled(not mode):

        @ag.set_grad_enabled(mode)
        def f() -> bool:
            return ag.is_grad_enabled()

        # torch: the decorator hands the previous mode back as soon as it has decorated.
        assert ag.is_grad_enabled() is (not mode)
        assert f() is mode
        assert ag.is_grad_enabled() is (not mode)
        assert f() is mode


async def test_set_grad_enabled_decorates_coroutine_and_generator_functions() -> None:
    @ag.set_grad_enabled(False)
    async def body() -> bool:
        await asyncio.sleep(0)
        return ag.is_grad_enabled()

    @ag.set_grad_enabled(False)
    def gen() -> Iterator[bool]:
        yield ag.is_grad_enabled()
        yield ag.is_grad_enabled()

    assert ag.is_grad_enabled()
    async with asyncio.timeout(TIMEOUT_S):
        assert await body() is False
    seen = []
    for inside in gen():
        seen.append((inside, ag.is_grad_enabled()))
    assert seen == [(False, True), (False, True)]


def test_set_grad_enabled_call_context_and_nesting() -> None:
    ag.set_grad_enabled(False)  # a plain call switches the mode and keeps it
    try:
        assert not ag.is_grad_enabled()
        with ag.set_grad_enabled(True):
            assert ag.is_grad_enabled()
            with ag.set_grad_enabled(False):
                assert not ag.is_grad_enabled()
            assert ag.is_grad_enabled()
        assert not ag.is_grad_enabled()
    finally:
        ag.set_grad_enabled(True)
    assert repr(ag.set_grad_enabled(True)) == "set_grad_enabled(mode=True)"


# ------------------------------------------------------------------------ decorators, no parens
@pytest.mark.parametrize(
    ("decorator", "inside"),
    [
        (ag.no_grad, (False, False)),
        (ag.enable_grad, (True, False)),
        (ag.inference_mode, (False, True)),
    ],
    ids=["no_grad", "enable_grad", "inference_mode"],
)
async def test_class_used_as_decorator_without_parentheses(
    decorator: Any, inside: tuple[bool, bool]
) -> None:
    @decorator
    def f() -> tuple[bool, bool]:
        """f's doc."""
        return modes()

    @decorator
    async def af() -> tuple[bool, bool]:
        await asyncio.sleep(0)
        return modes()

    @decorator
    def gen() -> Iterator[tuple[bool, bool]]:
        yield modes()

    @decorator
    async def agen() -> AsyncIterator[tuple[bool, bool]]:
        yield modes()

    base = not inside[0]  # so that entering the mode changes it
    with ag.set_grad_enabled(base):
        assert f() == inside
        assert f.__name__ == "f"
        assert f.__doc__ == "f's doc."
        async with asyncio.timeout(TIMEOUT_S):
            assert await af() == inside
            assert [m async for m in agen()] == [inside]
        assert list(gen()) == [inside]
        assert ag.is_grad_enabled() is base


@pytest.mark.parametrize("decorator", [ag.no_grad, ag.enable_grad, ag.inference_mode])
def test_decorator_still_works_with_parentheses(decorator: Any) -> None:
    @decorator()
    def f() -> bool:
        return ag.is_grad_enabled()

    assert f() is (decorator is ag.enable_grad)
    assert isinstance(decorator(), decorator)


def test_bad_decorator_arguments_raise_type_error() -> None:
    with pytest.raises(TypeError, match=r"no_grad decorates a function, got 3 \(int\)"):
        ag.no_grad(3)
    with pytest.raises(TypeError, match=r"inference_mode expects a bool or a function, got 'x'"):
        ag.inference_mode("x")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="set_grad_enabled expects a bool"):
        ag.set_grad_enabled(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="decorates a function"):
        ag.no_grad()(None)  # type: ignore[type-var]


def test_inference_mode_false_turns_grad_on_as_in_torch() -> None:
    with ag.inference_mode():
        with ag.inference_mode(False):
            assert modes() == (True, False)
        assert modes() == (False, True)
    with ag.no_grad(), ag.inference_mode(False):
        assert modes() == (True, False)


# ------------------------------------------------------------------------------ restoring modes
@pytest.mark.parametrize(("name", "factory", "base", "inside"), MANAGERS, ids=MANAGER_IDS)
def test_exception_inside_block_restores_mode(
    name: str, factory: Callable[[], Any], base: bool, inside: tuple[bool, bool]
) -> None:
    with ag.set_grad_enabled(base):
        m = make(factory, base)

        def fail_inside() -> None:
            with m:
                assert modes() == inside
                raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            fail_inside()
        assert modes() == (base, False)

        @factory()
        def f() -> None:
            assert modes() == inside
            raise ValueError("boom")

        assert modes() == (base, False)
        with pytest.raises(ValueError, match="boom"):
            f()
        assert modes() == (base, False)


@pytest.mark.parametrize(("name", "factory", "base", "inside"), MANAGERS, ids=MANAGER_IDS)
def test_same_object_nested_in_itself_restores_each_level(
    name: str, factory: Callable[[], Any], base: bool, inside: tuple[bool, bool]
) -> None:
    # torch's no_grad keeps one `prev` per object, so this leaves grad off; here each block
    # restores what it found.
    with ag.set_grad_enabled(base):
        m = make(factory, base)
        with m:
            with ag.set_grad_enabled(base), m:
                assert modes() == inside
            assert modes() == inside
        assert modes() == (base, False)


def test_nesting_different_managers() -> None:
    with ag.no_grad():
        with ag.enable_grad():
            with ag.inference_mode():
                assert modes() == (False, True)
                with ag.enable_grad():
                    assert modes() == (True, True)
                assert modes() == (False, True)
            assert modes() == (True, False)
        assert modes() == (False, False)


def test_exit_in_another_context_changes_nothing_there() -> None:
    m = ag.no_grad()
    ctx = contextvars.copy_context()
    ctx.run(m.__enter__)
    assert ctx.run(ag.is_grad_enabled) is False
    m.__exit__(None, None, None)  # not entered in this context: nothing to undo, no error
    assert ag.is_grad_enabled()
    ctx.run(m.__exit__, None, None, None)
    assert ctx.run(ag.is_grad_enabled) is True


# -------------------------------------------------------------- one object, several tasks/threads
@pytest.mark.parametrize(("name", "factory", "base", "inside"), MANAGERS, ids=MANAGER_IDS)
async def test_one_object_shared_by_interleaved_tasks(
    name: str, factory: Callable[[], Any], base: bool, inside: tuple[bool, bool]
) -> None:
    m = make(factory, base)
    a_in, b_in, a_out = asyncio.Event(), asyncio.Event(), asyncio.Event()
    outside = (base, False)

    async def a() -> list[tuple[bool, bool]]:
        ag.set_grad_enabled(base)  # this task's own context
        seen = []
        with m:
            a_in.set()
            await b_in.wait()
            seen.append(modes())
        seen.append(modes())
        a_out.set()  # a leaves while b is still inside: a's exit must not touch b's state
        return seen

    async def b() -> list[tuple[bool, bool]]:
        ag.set_grad_enabled(base)
        seen = []
        await a_in.wait()
        with m:
            b_in.set()
            await a_out.wait()
            seen.append(modes())
        seen.append(modes())
        return seen

    async with asyncio.timeout(TIMEOUT_S):
        seen_a, seen_b = await asyncio.gather(a(), b())
    assert seen_a == [inside, outside]
    assert seen_b == [inside, outside]


async def test_task_created_inside_shared_block_can_use_the_object_too() -> None:
    m = ag.no_grad()

    async def child() -> list[bool]:
        seen = [ag.is_grad_enabled()]  # inherited from the parent's block
        with ag.enable_grad():
            with m:
                seen.append(ag.is_grad_enabled())
            seen.append(ag.is_grad_enabled())
        return seen

    with m:
        task = asyncio.create_task(child())
        async with asyncio.timeout(TIMEOUT_S):
            assert await task == [False, False, True]
        assert not ag.is_grad_enabled()
    assert ag.is_grad_enabled()


@pytest.mark.parametrize(("name", "factory", "base", "inside"), MANAGERS, ids=MANAGER_IDS)
def test_one_object_shared_by_interleaved_threads(
    name: str, factory: Callable[[], Any], base: bool, inside: tuple[bool, bool]
) -> None:
    m = make(factory, base)
    step = threading.Barrier(2, timeout=TIMEOUT_S)
    seen: dict[str, list[tuple[bool, bool]]] = {}
    errors: list[BaseException] = []

    def run(name: str, first: bool) -> None:
        try:
            ag.set_grad_enabled(base)
            out = seen[name] = []
            if not first:
                step.wait()  # 1: a is inside
            with m:
                if first:
                    step.wait()  # 1
                step.wait()  # 2: both inside
                if first:
                    out.append(modes())
                else:
                    step.wait()  # 3: a has left
                    out.append(modes())
            if first:
                out.append(modes())
                step.wait()  # 3
            else:
                out.append(modes())
        except BaseException as e:
            errors.append(e)
            step.abort()

    threads = [
        threading.Thread(target=run, args=("a", True)),
        threading.Thread(target=run, args=("b", False)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=TIMEOUT_S)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert seen == {"a": [inside, (base, False)], "b": [inside, (base, False)]}


# --------------------------------------------------------------------------------- generators
def test_decorated_generator_forwards_send_throw_and_close() -> None:
    log: list[Any] = []

    @ag.no_grad()
    def gen() -> Iterator[int]:
        try:
            got = yield 1
            log.append(("sent", got, ag.is_grad_enabled()))
            try:
                yield 2
            except KeyError as e:
                log.append(("caught", e.args[0], ag.is_grad_enabled()))
            yield 3
        finally:
            log.append(("finally", ag.is_grad_enabled()))

    g = gen()
    assert next(g) == 1
    assert ag.is_grad_enabled()  # the caller's mode between steps
    assert g.send("x") == 2
    assert g.throw(KeyError("k")) == 3
    g.close()
    assert log == [("sent", "x", False), ("caught", "k", False), ("finally", False)]
    assert ag.is_grad_enabled()


def test_decorated_generator_returns_its_value_and_raises_its_errors() -> None:
    @ag.no_grad
    def gen() -> Iterator[int]:
        yield 1
        return 42

    def outer() -> Iterator[int]:
        result = yield from gen()
        yield result

    assert list(outer()) == [1, 42]

    @ag.no_grad
    def failing() -> Iterator[int]:
        yield 1
        raise ValueError("inside")

    g = failing()
    next(g)
    with pytest.raises(ValueError, match="inside"):
        next(g)
    assert ag.is_grad_enabled()


async def test_decorated_async_generator_forwards_asend_athrow_and_aclose() -> None:
    log: list[Any] = []

    @ag.no_grad()
    async def agen() -> AsyncIterator[int]:
        try:
            got = yield 1
            await asyncio.sleep(0)
            log.append(("sent", got, ag.is_grad_enabled()))
            try:
                yield 2
            except KeyError as e:
                log.append(("caught", e.args[0], ag.is_grad_enabled()))
            yield 3
        finally:
            log.append(("finally", ag.is_grad_enabled()))

    g = agen()
    async with asyncio.timeout(TIMEOUT_S):
        assert await g.asend(None) == 1
        assert ag.is_grad_enabled()
        assert await g.asend("x") == 2
        assert ag.is_grad_enabled()
        assert await g.athrow(KeyError("k")) == 3
        await g.aclose()
    assert log == [("sent", "x", False), ("caught", "k", False), ("finally", False)]
    assert ag.is_grad_enabled()


async def test_decorated_async_generators_in_two_tasks_keep_their_own_modes() -> None:
    suspended = [asyncio.Event(), asyncio.Event()]
    step = asyncio.Event()

    @ag.no_grad
    async def agen() -> AsyncIterator[bool]:
        yield ag.is_grad_enabled()
        await step.wait()
        yield ag.is_grad_enabled()

    async def consume(i: int) -> list[tuple[bool, bool]]:
        out = []
        async for inside in agen():
            out.append((inside, ag.is_grad_enabled()))
            suspended[i].set()
        return out

    async def other() -> bool:
        for e in suspended:
            await e.wait()
        grad = ag.is_grad_enabled()  # while both generators are between steps
        step.set()
        return grad

    async with asyncio.timeout(TIMEOUT_S):
        a, b, grad = await asyncio.gather(consume(0), consume(1), other())
    assert a == b == [(False, True), (False, True)]
    assert grad is True


async def test_decorated_async_generator_error_propagates_and_restores() -> None:
    @ag.inference_mode
    async def agen() -> AsyncIterator[int]:
        yield 1
        raise ValueError("inside")

    async with asyncio.timeout(TIMEOUT_S):
        g = agen()
        assert await anext(g) == 1
        with pytest.raises(ValueError, match="inside"):
            await anext(g)
    assert modes() == (True, False)
