"""``register_forward_hook(..., always_call=True)`` against torch: the hook runs when the forward
or an earlier hook raises, with what output, and its own error silenced into a warning."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _forward_raises(lib: Any, backward_hooks: bool) -> tuple[Any, ...]:
    class M(lib.nn.Module):
        def forward(self, x: Any) -> Any:
            raise ValueError("bad forward")

    m = M()
    calls: list[Any] = []
    if backward_hooks:
        m.register_full_backward_hook(lambda *a: None)
    m.register_forward_hook(lambda mod, a, o: calls.append(("always", o)), always_call=True)
    m.register_forward_hook(lambda mod, a, o: calls.append(("plain", o)))

    def bad(mod: Any, a: Any, o: Any) -> None:
        raise KeyError("hook boom")

    m.register_forward_hook(bad, always_call=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="bad forward"):
            m(lib.ones(1, requires_grad=True))
    return calls, [str(x.message) for x in w]


def _hook_raises(lib: Any, backward_hooks: bool) -> list[Any]:
    class N(lib.nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 2

    n = N()
    if backward_hooks:
        n.register_full_backward_hook(lambda *a: None)
    calls: list[Any] = []

    def raising(mod: Any, a: Any, o: Any) -> None:
        raise RuntimeError("first hook fails")

    n.register_forward_hook(raising)
    n.register_forward_hook(
        lambda mod, a, o: calls.append(("always", o.detach().tolist())), always_call=True
    )
    with pytest.raises(RuntimeError, match="first hook fails"):
        n(lib.ones(1, requires_grad=True))
    return calls


@pytest.mark.parametrize("backward_hooks", [False, True])
def test_a_raising_forward_runs_the_always_called_hooks_as_torch(backward_hooks: bool) -> None:
    assert _forward_raises(ag, backward_hooks) == _forward_raises(torch, backward_hooks)


@pytest.mark.parametrize("backward_hooks", [False, True])
def test_a_raising_hook_runs_the_rest_with_the_output_as_torch(backward_hooks: bool) -> None:
    assert _hook_raises(ag, backward_hooks) == _hook_raises(torch, backward_hooks)


def _in_order(lib: Any) -> list[str]:
    lin = lib.nn.Linear(2, 2)
    calls: list[str] = []
    lin.register_forward_hook(lambda *a: calls.append("a"), always_call=True)
    lin.register_forward_hook(lambda *a: calls.append("b"))
    h = lin.register_forward_hook(lambda *a: calls.append("c"), always_call=True)
    lin(lib.ones(1, 2))
    h.remove()
    lin(lib.ones(1, 2))
    return calls


def test_without_errors_they_run_once_in_order() -> None:
    assert _in_order(ag) == _in_order(torch) == ["a", "b", "c", "a", "b"]
