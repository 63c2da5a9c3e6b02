"""``register_forward_pre_hook`` and ``register_forward_hook`` with ``with_kwargs=True``, against
torch's: what the hooks see and what their results replace."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _module(lib: Any) -> Any:
    class Scale(lib.nn.Module):
        def forward(self, x: Any, *, factor: float = 1.0, shift: float = 0.0) -> Any:
            return x * factor + shift

    return Scale()


def _run(lib: Any, full_backward: bool) -> tuple[list[Any], np.ndarray, np.ndarray]:
    seen: list[Any] = []
    m = _module(lib)

    def pre(module: Any, args: Any, kwargs: Any) -> Any:
        seen.append(("pre", len(args), sorted(kwargs.items())))
        return args, {**kwargs, "factor": kwargs["factor"] * 2.0}

    def plain_pre(module: Any, args: Any) -> None:
        seen.append(("plain pre", len(args)))

    def post(module: Any, args: Any, kwargs: Any, out: Any) -> Any:
        seen.append(("post", sorted(kwargs.items())))
        return out + 1.0

    m.register_forward_pre_hook(pre, with_kwargs=True)
    m.register_forward_pre_hook(plain_pre)
    m.register_forward_hook(post, with_kwargs=True)
    m.register_forward_hook(lambda module, args, out: seen.append(("plain post",)))
    if full_backward:
        m.register_full_backward_hook(lambda module, gi, go: None)
    x = lib.tensor([1.0, 2.0], requires_grad=True)
    out = m(x, factor=3.0, shift=0.5)
    out.sum().backward()
    return seen, out.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("full_backward", [False, True], ids=["", "with a backward hook"])
def test_hooks_with_kwargs_as_torch(full_backward: bool) -> None:
    ours, theirs = _run(ag, full_backward), _run(torch, full_backward)
    assert ours[0] == theirs[0]
    np.testing.assert_allclose(ours[1], theirs[1])
    np.testing.assert_allclose(ours[2], theirs[2])


@pytest.mark.parametrize("lib", [ag, torch], ids=["asyncgrad", "torch"])
def test_a_pre_hook_with_kwargs_must_return_a_pair(lib: Any) -> None:
    m = _module(lib)
    m.register_forward_pre_hook(lambda module, args, kwargs: args, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"must return None or a tuple of \(new_args, new_kw"):
        m(lib.tensor([1.0]), factor=2.0)
