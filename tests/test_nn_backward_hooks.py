"""Module.register_full_backward_hook / register_full_backward_pre_hook against torch: what the
hooks see, what their results replace, how often they run, and their errors."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn

RNG = np.random.default_rng(1)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for module hooks")


def _arrays(ts: Any) -> list[Any]:
    return [None if t is None else np.array(t.detach().numpy()) for t in ts]


def _same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)


class _Two(nn.Module):
    """Two positional tensors and a non-tensor; two outputs (one unused in the loss)."""

    def __init__(self, lin: nn.Module) -> None:
        super().__init__()
        self.lin = lin

    def forward(self, x: Any, k: float, y: Any) -> Any:
        h = self.lin(x) * y
        return h, h + k


def _torch_two(torch: Any) -> Any:
    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3).double()

        def forward(self, x: Any, k: float, y: Any) -> Any:
            h = self.lin(x) * y
            return h, h + k

    return Two()


def _pair_models(torch: Any) -> tuple[Any, Any]:
    tm = _torch_two(torch)
    am = _Two(nn.Linear(3, 3).double())
    am.load_state_dict({k: ag.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    return am, tm


def _run(lib: Any, m: Any, x: np.ndarray, y: np.ndarray, y_grad: bool) -> tuple[Any, Any]:
    xt = lib.tensor(x, requires_grad=True)
    yt = lib.tensor(y, requires_grad=y_grad)
    a, _ = m(xt, 2.0, yt)
    (a * lib.tensor(np.arange(6.0).reshape(2, 3))).sum().backward()
    return xt, yt


@pytest.mark.parametrize("y_grad", [False, True])
def test_full_backward_hook_sees_what_torch_sees(torch: Any, y_grad: bool) -> None:
    am, tm = _pair_models(torch)
    seen: dict[str, list[Any]] = {"ag": [], "torch": []}
    for key, m in (("ag", am), ("torch", tm)):
        m.register_full_backward_pre_hook(lambda mod, go, key=key: seen[key].append(_arrays(go)))
        m.register_full_backward_hook(
            lambda mod, gi, go, key=key: seen[key].extend([_arrays(gi), _arrays(go)])
        )
    x, y = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    xa, _ya = _run(ag, am, x, y, y_grad)
    xt, _yt = _run(torch, tm, x, y, y_grad)
    assert len(seen["ag"]) == len(seen["torch"]) == 3  # pre-hook once, hook once
    for a, t in zip(seen["ag"], seen["torch"], strict=True):
        _same(a, t)
    np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


def test_hook_result_replaces_grad_input_and_pre_hook_result_grad_output(torch: Any) -> None:
    am, tm = _pair_models(torch)
    for m in (am, tm):
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 3, go[1]))
        m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 2, None, gi[2] - 1))
    x, y = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    xa, ya = _run(ag, am, x, y, True)
    xt, yt = _run(torch, tm, x, y, True)
    np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ya.grad.numpy(), yt.grad.numpy(), rtol=1e-12)
    # The pre-hook's scaling reaches the parameters too.
    np.testing.assert_allclose(am.lin.weight.grad.numpy(), tm.lin.weight.grad.numpy(), rtol=1e-12)


def test_hooks_run_once_per_call_and_per_backward() -> None:
    lin = nn.Linear(2, 2)
    calls: list[str] = []
    lin.register_full_backward_pre_hook(lambda m, go: calls.append("pre"))
    lin.register_full_backward_hook(lambda m, gi, go: calls.append("hook"))
    x = ag.randn(4, 2, requires_grad=True)
    lin(lin(x)).sum().backward()  # two calls of the module in one forward
    assert calls == ["pre", "hook", "pre", "hook"]
    calls.clear()
    out = lin(x).sum()
    out.backward(retain_graph=True)
    out.backward()
    assert calls == ["pre", "hook", "pre", "hook"]


def test_removed_hooks_and_no_grad_calls_do_not_run() -> None:
    lin = nn.Linear(2, 2)
    calls: list[int] = []
    h = lin.register_full_backward_hook(lambda m, gi, go: calls.append(1))
    p = lin.register_full_backward_pre_hook(lambda m, go: calls.append(2))
    x = ag.randn(3, 2, requires_grad=True)
    with ag.no_grad():
        assert lin(x).grad_fn is None
    h.remove()
    p.remove()
    lin(x).sum().backward()
    assert calls == []
    assert x.grad is not None


def test_no_input_requiring_grad_runs_the_hook_at_the_outputs(torch: Any) -> None:
    for lib, mod in ((ag, nn), (torch, torch.nn)):
        lin = mod.Linear(2, 2)
        seen: list[Any] = []
        lin.register_full_backward_hook(lambda m, gi, go, seen=seen: seen.append((gi, len(go))))
        with pytest.warns(UserWarning, match="no inputs require gradients"):
            lin(lib.ones(1, 2)).sum().backward()
        assert seen == [((None,), 1)]
    lin = nn.Linear(2, 2)
    lin.register_full_backward_hook(lambda m, gi, go: (ag.ones(1, 2),))
    with (
        pytest.warns(UserWarning, match="no inputs require gradients"),
        pytest.raises(RuntimeError, match="no input requires gradient should always return None"),
    ):
        lin(ag.ones(1, 2)).sum().backward()


def test_wrong_number_of_gradients_from_a_hook_raises() -> None:
    lin = nn.Linear(2, 2)
    lin.register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but expected 1"):
        lin(ag.randn(1, 2, requires_grad=True)).sum().backward()
    lin = nn.Linear(2, 2)
    lin.register_full_backward_pre_hook(lambda m, go: ())
    with pytest.raises(RuntimeError, match="invalid number of grad_output, got 0, but expected 1"):
        lin(ag.randn(1, 2, requires_grad=True)).sum().backward()


def test_a_non_callable_hook_is_refused() -> None:
    with pytest.raises(TypeError, match="hook must be callable, got int"):
        nn.Linear(1, 1).register_full_backward_hook(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("container", [dict, list])
def test_forward_returning_a_dict_or_list_warns_and_runs_no_hook(
    container: type, torch: Any
) -> None:
    # As torch: a warning naming the type, no hook called, gradients as without hooks.
    results = []
    for lib in (ag, torch):

        class D(lib.nn.Module):
            def forward(self, x: Any) -> Any:
                y = x * 2
                return {"y": y} if container is dict else [y]

        d = D()
        calls: list[Any] = []
        d.register_full_backward_hook(lambda m, gi, go, calls=calls: calls.append(gi))
        d.register_full_backward_pre_hook(lambda m, go, calls=calls: calls.append(go))
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.warns(
            UserWarning,
            match=r"For backward hooks to be called, module output should be a Tensor or a "
            rf"tuple of Tensors but received <class '{container.__name__}'>",
        ):
            out = d(x)
        (out["y"] if container is dict else out[0]).sum().backward()
        results.append((calls, x.grad.tolist()))
    assert results[0] == results[1] == ([], [2.0, 2.0])


def test_async_hooks_in_a_script() -> None:
    lin = nn.Linear(2, 2)
    calls: list[str] = []

    async def pre(m: Any, go: Any) -> None:
        await asyncio.sleep(0)
        calls.append("pre")

    async def hook(m: Any, gi: Any, go: Any) -> Any:
        await asyncio.sleep(0)
        calls.append("hook")
        return (gi[0] * 0,)

    lin.register_full_backward_pre_hook(pre)
    lin.register_full_backward_hook(hook)
    x = ag.randn(3, 2, requires_grad=True)
    lin(x).sum().backward()
    assert calls == ["pre", "hook"]
    assert x.grad is not None
    assert not x.grad.numpy().any()


async def test_async_hooks_in_a_running_loop() -> None:
    lin = nn.Linear(2, 2)
    seen: list[Any] = []

    async def hook(m: Any, gi: Any, go: Any) -> Any:
        await asyncio.sleep(0)
        seen.append(gi[0].shape)
        return (gi[0] + 1,)

    lin.register_full_backward_hook(hook)
    x = ag.randn(3, 2, requires_grad=True)
    (g,) = await ag.grad(lin(x).sum(), [x])
    assert seen == [(3, 2)]
    expected = np.ones((3, 2)) @ lin.weight.detach().numpy() + 1
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-6)


def test_sync_hook_returning_an_awaitable_is_refused() -> None:
    lin = nn.Linear(2, 2)

    async def later() -> None:
        return None

    lin.register_full_backward_pre_hook(lambda m, go: later())
    with pytest.raises(TypeError, match="returned an awaitable, but it is not an `async def`"):
        lin(ag.randn(1, 2, requires_grad=True)).sum().backward()


def test_grad_fn_is_named_as_torch(torch: Any) -> None:
    for lib, mod in ((ag, nn), (torch, torch.nn)):
        lin = mod.Linear(2, 2)
        lin.register_full_backward_hook(lambda m, gi, go: None)
        out = lin(lib.ones(1, 2, requires_grad=True))
        assert type(out.grad_fn).__name__ == "BackwardHookFunctionBackward"


def test_grad_output_has_an_entry_per_output_as_torch(torch: Any) -> None:
    seen: dict[str, list[Any]] = {"ag": [], "torch": []}
    for key, lib, mod in (("ag", ag, nn), ("torch", torch, torch.nn)):

        class M(mod.Module):
            def forward(self, x: Any) -> Any:
                return x * 2, 3, x.detach() * 5, (x * 3).argmax()

        m = M()
        m.register_full_backward_pre_hook(lambda mod, go, key=key: seen[key].append(_arrays(go)))
        m.register_full_backward_hook(lambda mod, gi, go, key=key: seen[key].append(_arrays(go)))
        x = lib.ones(2, requires_grad=True)
        a, b, c, d = m(x)
        assert b == 3
        assert not c.requires_grad
        assert d.grad_fn is None
        a.sum().backward()
    assert len(seen["ag"]) == 2
    for a, t in zip(seen["ag"], seen["torch"], strict=True):
        _same(a, t)
