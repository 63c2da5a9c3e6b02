"""Non-reentrant checkpoint's ``determinism_check``, ``context_fn`` and ``debug``, against torch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _changing(lib: Any, check: str) -> tuple[str, str]:
    calls = [0]

    def fn(x: Any) -> Any:
        calls[0] += 1
        n = 3 if calls[0] == 1 else 2  # the recomputation saves a tensor of another shape
        return (x[:n] * x[:n]).sum()

    x = lib.arange(4.0, requires_grad=True)
    out = lib.utils.checkpoint.checkpoint(fn, x, use_reentrant=False, determinism_check=check)
    try:
        out.backward()
    except Exception as e:
        return type(e).__name__, str(e).split("\n")[0]
    return "ok", repr(x.grad.tolist())


@pytest.mark.parametrize("check", ["default", "none"])
def test_determinism_check_as_torch(check: str) -> None:
    got = _changing(ag, check)
    want = _changing(torch, check)
    assert got[0] == want[0]
    if check == "default":  # without the check both fail later, each in its own words
        assert got[1] == want[1]


def test_the_message_names_the_tensor_and_both_metadata() -> None:
    calls = [0]

    def fn(x: Any) -> Any:
        calls[0] += 1
        n = 3 if calls[0] == 1 else 2
        return (x[:n] * x[:n]).sum()

    x = ag.arange(4.0, requires_grad=True)
    out = ag.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)
    with pytest.raises(ag.utils.checkpoint.CheckpointError) as info:
        out.backward()
    msg = str(info.value)
    assert "tensor at position 0:" in msg
    assert "saved metadata: {'shape': [3]" in msg
    assert "recomputed metadata: {'shape': [2]" in msg


def _contexts(lib: Any) -> list[str]:
    seen: list[str] = []

    @contextlib.contextmanager
    def mark(name: str) -> Iterator[None]:
        seen.append(name + " in")
        yield
        seen.append(name + " out")

    x = lib.ones(3, requires_grad=True)
    out = lib.utils.checkpoint.checkpoint(
        lambda t: (t.sin() * 2).sum(),
        x,
        use_reentrant=False,
        context_fn=lambda: (mark("forward"), mark("recompute")),
    )
    out.backward()
    return seen


def test_context_fn_as_torch() -> None:
    assert _contexts(ag) == _contexts(torch)


def test_bad_arguments_as_torch() -> None:
    for lib in (ag, torch):
        x = lib.ones(2, requires_grad=True)
        with pytest.raises(ValueError, match="determinism_check should be one of"):
            lib.utils.checkpoint.checkpoint(
                lambda t: t * 2, x, use_reentrant=False, determinism_check="strict"
            )
        with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
            lib.utils.checkpoint.checkpoint(lambda t: t * 2, x, use_reentrant=True, debug=True)
        with pytest.raises(ValueError, match="debug=True is incompatible with non-default"):
            lib.utils.checkpoint.checkpoint(
                lambda t: t * 2,
                x,
                use_reentrant=False,
                debug=True,
                context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext()),
            )
        y = lib.utils.checkpoint.checkpoint(
            lambda t: (t * t).sum(), x, use_reentrant=False, debug=True
        )
        y.backward()
        assert x.grad.tolist() == [2.0, 2.0]
