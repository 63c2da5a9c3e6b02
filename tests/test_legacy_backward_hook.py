"""``Module.register_backward_hook``, torch's deprecated module hook, against torch: what the hook
sees, what its result replaces, the FutureWarnings and the refusal to mix it with full hooks."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _modules(lib: Any) -> dict[str, tuple[Any, Callable[..., Any], Callable[[Any], Any]]]:
    class Mul(lib.nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 2

    class Two(lib.nn.Module):
        def forward(self, x: Any, y: Any) -> Any:
            return x * y

    class Chain(lib.nn.Module):
        def forward(self, x: Any) -> Any:
            return (x * 2).exp()

    class Pair(lib.nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 2, x * 3

    class Named(lib.nn.Module):
        def forward(self, x: Any) -> Any:
            return {"a": x * 2}

    x = lib.tensor([1.0, 2.0], requires_grad=True)
    y = lib.tensor([3.0, 4.0], requires_grad=True)
    return {
        "one op": (Mul(), lambda: (x,), lambda o: o.sum()),
        "two inputs": (Two(), lambda: (x * 1, y * 1), lambda o: o.sum()),
        "two ops": (Chain(), lambda: (x * 1,), lambda o: o.sum()),
        "two outputs": (Pair(), lambda: (x * 1,), lambda o: o[0].sum() + o[1].sum()),
        "a dict": (Named(), lambda: (x * 1,), lambda o: o["a"].sum()),
    }


def _seen(lib: Any, case: str) -> tuple[Any, ...]:
    m, inputs, loss = _modules(lib)[case]
    seen: list[Any] = []

    def hook(mod: Any, gi: Any, go: Any) -> None:
        assert mod is m
        seen.append(
            (
                [None if g is None else g.detach().numpy().round(6).tolist() for g in gi],
                [None if g is None else tuple(g.shape) for g in go],
            )
        )

    m.register_backward_hook(hook)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = m(*inputs())
    loss(out).backward()
    return seen, [(x.category, str(x.message)) for x in w]


@pytest.mark.parametrize("case", ["one op", "two inputs", "two ops", "two outputs", "a dict"])
def test_what_the_hook_sees_and_the_warnings_as_torch(case: str) -> None:
    assert _seen(ag, case) == _seen(torch, case)


def test_the_result_replaces_the_node_s_grad_input() -> None:
    grads = []
    for lib in (ag, torch):
        m = _modules(lib)["one op"][0]
        m.register_backward_hook(
            lambda mod, gi, go: tuple(None if g is None else g * 10 for g in gi)
        )
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            m(x).sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1] == [20.0, 20.0]


def test_removed_hook_does_not_run() -> None:
    m = _modules(ag)["two inputs"][0]
    calls: list[int] = []
    h = m.register_backward_hook(lambda mod, gi, go: calls.append(1))
    h.remove()
    a = ag.ones(2, requires_grad=True)
    m(a * 1, a * 1).sum().backward()
    assert calls == []


def test_mixing_with_full_hooks_raises_as_torch() -> None:
    for lib in (ag, torch):
        m = lib.nn.Linear(2, 2)
        m.register_backward_hook(lambda *a: None)
        with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full"):
            m.register_full_backward_hook(lambda *a: None)
        m = lib.nn.Linear(2, 2)
        m.register_full_backward_hook(lambda *a: None)
        with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full"):
            m.register_backward_hook(lambda *a: None)
