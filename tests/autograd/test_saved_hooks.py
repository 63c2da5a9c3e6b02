"""Saved-tensor hooks (ag.autograd.graph.saved_tensors_hooks, save_on_cpu) and
register_multi_grad_hook."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd.graph import (
    register_multi_grad_hook,
    save_on_cpu,
    saved_tensors_hooks,
)
from asyncgrad.graph.saved_tensor import HookedSavedTensor, SavedTensor

from ..cuda.conftest import assert_close


def _model(x: Any, w: Any) -> Any:
    return ((x @ w).tanh() * x.sum(1, keepdim=True)).sigmoid().sum()


def _grads(hooks: Any = None, create_graph: bool = False) -> tuple[Any, ...]:
    np.random.seed(1)
    x = ag.tensor(np.random.randn(4, 3), requires_grad=True)
    w = ag.tensor(np.random.randn(3, 5), requires_grad=True)
    if hooks is None:
        y = _model(x, w)
    else:
        with hooks:
            y = _model(x, w)
    gx, gw = ag.grad_sync(y, [x, w], create_graph=create_graph)
    if not create_graph:
        return gx.numpy(), gw.numpy()
    ggx, ggw = ag.grad_sync((gx * gx).sum() + gw.sum(), [x, w])
    return gx.detach().numpy(), ggx.numpy(), ggw.numpy()


class _Counting:
    def __init__(self) -> None:
        self.packed: list[tuple[int, ...]] = []
        self.unpacked = 0

    def pack(self, t: Any) -> Any:
        self.packed.append(tuple(t.shape))
        return t.detach().clone()

    def unpack(self, p: Any) -> Any:
        self.unpacked += 1
        return p


@pytest.mark.parametrize("create_graph", [False, True])
def test_gradients_equal_and_every_save_packed(create_graph: bool) -> None:
    c = _Counting()
    want = _grads(None, create_graph)
    got = _grads(saved_tensors_hooks(c.pack, c.unpack), create_graph)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b)
    assert (3, 5) in c.packed  # matmul saved w
    assert (4, 5) in c.packed  # tanh saved its output
    assert c.unpacked >= len(c.packed)


def test_matches_torch_pack_count_for_a_chain() -> None:
    torch = pytest.importorskip("torch", reason="torch is the reference for saved-tensor hooks")
    counts = []
    for lib, hooks in ((ag, ag.autograd.graph), (torch, torch.autograd.graph)):
        n = [0]

        def pack(t: Any, n: list[int] = n) -> Any:
            n[0] += 1
            return t

        x = lib.ones(3, requires_grad=True)
        with hooks.saved_tensors_hooks(pack, lambda t: t):
            (x.exp() * x).tanh().sum().backward()
        counts.append(n[0])
    assert counts[0] == counts[1]


def test_saved_object_holds_only_the_packed_value() -> None:
    box: list[Any] = []

    def pack(t: Any) -> Any:
        b = {"data": t.detach().clone()}
        box.append(weakref.ref(t.detach()))
        return b

    x = ag.randn(3, requires_grad=True)
    with saved_tensors_hooks(pack, lambda b: b["data"]):
        y = x.exp()
    saved = y.grad_fn._saved[0]
    assert type(saved) is HookedSavedTensor
    assert saved.tensor is None
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(x.detach().numpy()), rtol=1e-6)
    # without hooks nothing changes
    z = x.exp()
    assert type(z.grad_fn._saved[0]) is SavedTensor


def test_packed_values_freed_with_the_graph() -> None:
    class Box:
        def __init__(self, t: Any) -> None:
            self.t = t

    refs: list[Any] = []

    def pack(t: Any) -> Any:
        b = Box(t.detach())
        refs.append(weakref.ref(b))
        return b

    x = ag.randn(3, requires_grad=True)
    with saved_tensors_hooks(pack, lambda b: b.t):
        y = (x.exp() * x).sum()
    assert refs
    assert all(r() is not None for r in refs)
    y.backward()
    gc.collect()
    assert all(r() is None for r in refs)


def test_unpack_called_at_each_backward_with_retain_graph() -> None:
    c = _Counting()
    x = ag.randn(3, requires_grad=True)
    with saved_tensors_hooks(c.pack, c.unpack):
        y = x.exp().sum()
    y.backward(retain_graph=True)
    y.backward()
    assert len(c.packed) == 1
    assert c.unpacked == 2


def test_innermost_hooks_apply() -> None:
    outer, inner = _Counting(), _Counting()
    x = ag.randn(3, requires_grad=True)
    with saved_tensors_hooks(outer.pack, outer.unpack):
        a = x.exp()
        with saved_tensors_hooks(inner.pack, inner.unpack):
            b = x.sin()
        c = x.cos()
    assert len(outer.packed) == 2
    assert len(inner.packed) == 1
    (a + b + c).sum().backward()
    assert x.grad is not None


def test_ops_inside_the_pack_hook_do_not_recurse() -> None:
    calls = [0]

    def pack(t: Any) -> Any:
        calls[0] += 1
        return t.exp().log()  # saves tensors itself (x requires grad)

    x = ag.randn(3, dtype=ag.float64, requires_grad=True)
    with saved_tensors_hooks(pack, lambda t: t):
        y = x.sin().sum()
    y.backward()
    assert calls[0] == 1
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x.detach().numpy()))


def test_custom_function_saves_go_through_the_hooks() -> None:
    class Square(ag.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            (x,) = ctx.saved_tensors
            return 2 * x * g

    c = _Counting()
    x = ag.tensor([3.0], requires_grad=True)
    with saved_tensors_hooks(c.pack, c.unpack):
        y = Square.apply(x)
    y.sum().backward()
    assert c.packed == [(1,)]
    assert c.unpacked == 1
    np.testing.assert_allclose(x.grad.numpy(), [6.0])


def test_in_place_change_detected_where_the_hook_kept_the_tensor() -> None:
    # The hook keeps the tensor itself: the change reaches what backward would read.
    x = ag.randn(3, requires_grad=True)
    with saved_tensors_hooks(lambda t: t, lambda t: t):
        h = x * 1.0
        y = h.exp()
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_in_place_change_of_what_the_hook_copied_is_harmless() -> None:
    # The hook keeps a copy made at save time: backward reads the value saved, as torch's
    # (which checks no version under hooks at all).
    x = ag.randn(3, dtype=ag.float64, requires_grad=True)
    with saved_tensors_hooks(lambda t: t.detach().clone(), lambda t: t):
        h = x * 1.0
        y = h.exp()
        h2 = y * 2
    y.add_(1.0)
    h2.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.detach().numpy()))
    tt = torch_or_skip()
    xt = tt.tensor(x.detach().numpy(), requires_grad=True)
    with tt.autograd.graph.saved_tensors_hooks(lambda t: t.detach().clone(), lambda t: t):
        yt = (xt * 1.0).exp()
        h2t = yt * 2
    yt.add_(1.0)
    h2t.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())


def torch_or_skip() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for this comparison")


def test_unpack_must_return_a_tensor() -> None:
    x = ag.randn(3, requires_grad=True)
    with saved_tensors_hooks(lambda t: t, lambda t: t.numpy()):
        y = x.exp().sum()
    with pytest.raises(
        TypeError,
        match=r"^Output of saved tensor unpack_hook expected to be a Tensor but got result of "
        r"type ndarray",
    ):
        y.backward()
    with pytest.raises(TypeError, match="unpack_hook must be callable"):
        saved_tensors_hooks(lambda t: t, None)  # type: ignore[arg-type]


async def test_hooks_are_per_task() -> None:
    c = _Counting()
    x = ag.randn(3, requires_grad=True)
    inside = asyncio.Event()
    release = asyncio.Event()

    async def hooked() -> Any:
        with saved_tensors_hooks(c.pack, c.unpack):
            inside.set()
            await release.wait()
            return x.exp()

    async def plain() -> Any:
        await inside.wait()
        y = x.exp()  # runs while the other task is inside its block
        release.set()
        return y

    a, b = await asyncio.gather(hooked(), plain())
    assert len(c.packed) == 1
    assert type(a.grad_fn._saved[0]) is HookedSavedTensor
    assert type(b.grad_fn._saved[0]) is SavedTensor
    await ag.backward((a + b).sum())
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.detach().numpy()), rtol=1e-6)


def _spy_on(hooks: save_on_cpu, seen: list[Any]) -> None:
    pack = hooks.pack_hook

    def spy(t: Any) -> Any:
        p = pack(t)
        seen.append(p)
        return p

    hooks.pack_hook = spy


@pytest.mark.cuda
def test_save_on_cpu_from_a_cuda_device() -> None:
    if ag.cuda.device_count() < 1:
        pytest.skip("needs a CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    xn = np.random.randn(4, 3)
    x = ag.tensor(xn, device="cuda", requires_grad=True)
    seen: list[Any] = []
    hooks = save_on_cpu()
    _spy_on(hooks, seen)
    with hooks:
        y = (x.exp() * x).sum()
    y.backward()
    assert seen
    assert all(p[0].type == "cuda" and p[1].device.type == "cpu" for p in seen)
    assert_close(x.grad.cpu().numpy(), np.exp(xn) * (1 + xn), rtol=1e-12)  # wider on a GPU


def test_save_on_cpu_keeps_cpu_copies() -> None:
    seen: list[Any] = []
    x = ag.randn(3, dtype=ag.float64, requires_grad=True)
    hooks = save_on_cpu()
    _spy_on(hooks, seen)
    with hooks:
        y = (x.exp() * x).sum()
    y.backward()
    assert seen
    assert all(p[1].device.type == "cpu" for p in seen)
    xn = x.detach().numpy()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(xn) * (1 + xn))


# ----- register_multi_grad_hook -----
def test_multi_grad_hook_all() -> None:
    a = ag.randn(3, requires_grad=True)
    b = ag.randn(3, requires_grad=True)
    c = ag.randn(3, requires_grad=True)
    got: list[Any] = []
    h = register_multi_grad_hook((a, b, c), got.append)
    (a * 2 + b * 3).sum().backward()
    assert len(got) == 1
    ga, gb, gc_ = got[0]
    np.testing.assert_allclose(ga.numpy(), [2.0] * 3)
    np.testing.assert_allclose(gb.numpy(), [3.0] * 3)
    assert gc_ is None
    # grad() with only some inputs: the others' gradients are not computed
    ag.grad_sync((a * b * c).sum(), [a])
    assert len(got) == 2
    assert got[1][0] is not None
    assert got[1][1] is None
    h.remove()
    (a * 2).sum().backward()
    assert len(got) == 2


def test_multi_grad_hook_all_on_intermediates() -> None:
    x = ag.randn(3, requires_grad=True)
    y1, y2 = x * 2, x * 3
    got: list[Any] = []
    register_multi_grad_hook((y1, y2), got.append)
    (y1 * y2).sum().backward()
    assert len(got) == 1
    np.testing.assert_allclose(got[0][0].numpy(), y2.detach().numpy())
    np.testing.assert_allclose(got[0][1].numpy(), y1.detach().numpy())


def test_multi_grad_hook_any() -> None:
    a = ag.randn(3, requires_grad=True)
    b = ag.randn(3, requires_grad=True)
    got: list[Any] = []
    register_multi_grad_hook((a, b), got.append, mode="any")
    (a * 2 + b * 3).sum().backward()
    (b * 5).sum().backward()
    assert len(got) == 2
    assert all(isinstance(g, ag.Tensor) for g in got)
    np.testing.assert_allclose(got[1].numpy(), [5.0] * 3)


async def test_multi_grad_hook_once_per_concurrent_pass() -> None:
    a = ag.randn(3, requires_grad=True)
    b = ag.randn(3, requires_grad=True)
    got: list[Any] = []
    register_multi_grad_hook((a, b), got.append)
    y = (a * b).sum()
    await asyncio.gather(*(ag.grad(y, [a, b], retain_graph=True) for _ in range(4)))
    assert len(got) == 4
    assert all(g[0] is not None and g[1] is not None for g in got)


def test_multi_grad_hook_argument_errors() -> None:
    a = ag.randn(3, requires_grad=True)
    with pytest.raises(ValueError, match=r"^Expects mode to be one of \('all', 'any'\) but got x"):
        register_multi_grad_hook((a,), print, mode="x")
    with pytest.raises(RuntimeError, match=r"tensors\[1\] does not require grad"):
        register_multi_grad_hook((a, ag.ones(2)), print)


def test_offload_example() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "saved_tensors_offload.py"
    spec = importlib.util.spec_from_file_location("saved_tensors_offload", path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.main(["--layers", "3", "--width", "64", "--batch", "32"])
    assert res["same"]
    assert res["tensors"] == 4  # the input and three ReLU outputs, each compressed once
    assert res["stored"] < res["raw"]
    assert res["held_packed"] < res["held_plain"]
