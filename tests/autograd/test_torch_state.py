"""Graph semantics as in torch: state user code leaves in a backward is undone when it ends,
retain_grad across in-place ops, hooks on unused outputs, once_differentiable under create_graph,
clear_saved_tensors_on_access, saved tensors' version counters, custom Function inputs and
outputs, and the errors torch raises on misuse of nodes and hooks.

Expected values and messages are torch 2.13's (each program was run there)."""

from __future__ import annotations

import asyncio
import gc
import re
import weakref
from typing import Any, ClassVar

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd.graph import saved_tensors_hooks
from asyncgrad.graph.grad_mode import is_grad_enabled
from asyncgrad.graph.saved_tensor import saved_hooks


def _dead_pack(t: Any) -> Any:
    raise AssertionError("a saved_tensors_hooks block opened in an earlier backward is still on")


def _enter_dead_hooks() -> None:
    # What a backward that opens a block and never closes it (an early return, an exception
    # swallowed) leaves behind.
    saved_tensors_hooks(_dead_pack, lambda p: p).__enter__()


class _LeavesHooks(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        _enter_dead_hooks()
        ag.set_grad_enabled(False)
        return g * 2


def _hook_leaves_hooks(g: Any) -> None:
    _enter_dead_hooks()
    ag.set_grad_enabled(False)


def _unrelated_pass() -> None:
    x = ag.ones(2, requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


@pytest.mark.parametrize("where", ["function", "hook"])
def test_state_left_by_a_backward_is_undone_sync(where: str) -> None:
    x = ag.ones(2, requires_grad=True)
    if where == "function":
        y = _LeavesHooks.apply(x)
    else:
        y = x * 2
        y.register_hook(_hook_leaves_hooks)
    y.sum().backward()
    assert saved_hooks.get() is None
    assert is_grad_enabled()
    _unrelated_pass()


@pytest.mark.parametrize("where", ["function", "hook"])
async def test_state_left_by_a_backward_is_undone_awaited(where: str) -> None:
    x = ag.ones(2, requires_grad=True)
    if where == "function":
        y = _LeavesHooks.apply(x)
    else:
        y = x * 2
        y.register_hook(_hook_leaves_hooks)
    await ag.backward(y.sum())
    assert saved_hooks.get() is None
    assert is_grad_enabled()
    _unrelated_pass()
    x2 = ag.ones(2, requires_grad=True)
    await ag.backward((x2 * x2).sum())
    np.testing.assert_allclose(x2.grad.numpy(), [2.0, 2.0])


class _Reentrant(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            d = x.detach().requires_grad_()
            y = d * 3
            y.register_hook(_hook_leaves_hooks)
            y.sum().backward()  # a nested pass
            assert saved_hooks.get() is None
            assert is_grad_enabled()
        return g * d.grad


@pytest.mark.parametrize("awaited", [False, True])
def test_state_left_in_a_reentrant_pass_is_undone(awaited: bool) -> None:
    x = ag.ones(2, requires_grad=True)
    y = _Reentrant.apply(x * 1)
    if awaited:

        async def run() -> None:
            await ag.backward(y.sum())

        asyncio.run(run())
    else:
        y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])
    assert saved_hooks.get() is None
    _unrelated_pass()


def test_grad_mode_switched_off_in_a_backward_does_not_reach_later_nodes() -> None:
    # Under create_graph, a backward that turns grad mode off must not stop the nodes after it
    # from recording: the second derivative stays right.
    x = ag.tensor([3.0], requires_grad=True)
    y = _LeavesHooks.apply(x * x)
    (gx,) = ag.grad_sync(y.sum(), x, create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), [12.0])  # d(2x^2)/dx = 4x
    assert gx.grad_fn is not None
    (ggx,) = ag.grad_sync(gx.sum(), x)
    np.testing.assert_allclose(ggx.numpy(), [4.0])
    assert saved_hooks.get() is None


# ----------------------------------------------------------------------------- retain_grad
class _ScaleInPlace(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g * 2


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda a: a.mul_(2), [1.0, 1.0, 1.0]),
        (lambda a: a[:2].mul_(2), [1.0, 1.0, 1.0]),
        (lambda a: a.add_(1), [1.0, 1.0, 1.0]),
        (lambda a: _ScaleInPlace.apply(a), [1.0, 1.0, 1.0]),
    ],
    ids=["mul_", "view-mul_", "add_", "mark_dirty"],
)
def test_retain_grad_follows_an_in_place_op(change: Any, expected: list[float]) -> None:
    # torch: the gradient retained is that of the tensor's value after the in-place op, once.
    a = ag.ones(3, requires_grad=True).clone()
    a.retain_grad()
    change(a)
    a.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), expected)


# ----------------------------------------------------------------------------- unused outputs
class _TwoOutputs(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x * 2, x * 3

    @staticmethod
    def backward(ctx: Any, g1: Any, g2: Any) -> Any:
        return g1 * 2 + g2 * 3


def _record(calls: list[Any], name: str) -> Any:
    def hook(g: Any) -> None:
        calls.append((name, None if g is None else g.numpy().tolist()))

    return hook


@pytest.mark.parametrize(
    "outputs",
    [
        lambda x: x.unbind(0),
        lambda x: x.split(1),
        lambda x: _TwoOutputs.apply(x),
    ],
    ids=["unbind", "split", "function"],
)
def test_hooks_on_unused_outputs_get_none(outputs: Any) -> None:
    x = ag.ones(2, 2, requires_grad=True)
    first, second = outputs(x)[:2]
    calls: list[Any] = []
    second.register_hook(_record(calls, "second"))
    first.register_hook(_record(calls, "first"))
    second.retain_grad()
    first.sum().backward()
    # torch: every tensor hook of the node, in the order they were registered; the unused
    # output's with None (and its retain_grad keeps None).
    assert calls == [("second", None), ("first", np.ones(first.shape).tolist())]
    assert second.grad is None


def test_hook_on_an_unused_output_cannot_make_a_gradient() -> None:
    x = ag.ones(4, requires_grad=True)
    p, q = x.split(2)
    q.register_hook(lambda g: ag.ones(2))
    with pytest.raises(RuntimeError, match="can't replace a None gradient with a non-None value"):
        p.sum().backward()


def test_hook_on_an_unused_output_under_grad() -> None:
    x = ag.ones(4, requires_grad=True)
    p, q = x.split(2)
    calls: list[Any] = []
    q.register_hook(_record(calls, "q"))
    ag.grad_sync(p.sum(), x)
    assert calls == [("q", None)]


# ----------------------------------------------------------------------------- once_differentiable
class _Once(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    @ag.autograd.function.once_differentiable
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return 2 * x * g


class _OnceAsync(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    @ag.autograd.function.once_differentiable
    async def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return 2 * x * g


@pytest.mark.parametrize("fn", [_Once, _OnceAsync], ids=["sync", "async"])
def test_once_differentiable_under_create_graph_gives_a_grad_fn_that_raises(fn: Any) -> None:
    x = ag.tensor([3.0], requires_grad=True)
    y = fn.apply(x)
    (gx,) = ag.grad_sync((y * y).sum(), x, create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), [108.0])
    assert gx.requires_grad
    assert gx.grad_fn is not None
    with pytest.raises(
        RuntimeError,
        match="trying to differentiate twice a function that was marked with @once_differentiable",
    ):
        gx.sum().backward()


def test_once_differentiable_with_constant_grad_outputs_records_nothing() -> None:
    # torch: the gradients the backward gets need no grad, so its result needs none either.
    x = ag.tensor([3.0], requires_grad=True)
    (gx,) = ag.grad_sync(_Once.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(gx.numpy(), [6.0])
    assert not gx.requires_grad
    assert gx.grad_fn is None


# ----------------------------------------------------------------------------- clear on access
_ONCE_ONLY = "saved_tensors can only be accessed once when clear_saved_tensors_on_access=True"


class _ClearOnAccess(ag.autograd.Function):
    clear_saved_tensors_on_access = True
    refs: ClassVar[list[Any]] = []
    freed: ClassVar[list[bool]] = []

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        t = x.detach() * 3
        ctx.save_for_backward(x, t)
        _ClearOnAccess.refs.append(weakref.ref(t))
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        _, t = ctx.saved_tensors
        del t
        _ClearOnAccess.freed.append(_ClearOnAccess.refs[-1]() is None)
        with pytest.raises(RuntimeError, match=_ONCE_ONLY):
            _ = ctx.saved_tensors
        return g * 2


def test_clear_saved_tensors_on_access() -> None:
    x = ag.ones(2, requires_grad=True)
    y = _ClearOnAccess.apply(x)
    y.sum().backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])
    assert _ClearOnAccess.freed == [True]  # freed by reference counting once dropped
    with pytest.raises(RuntimeError, match=_ONCE_ONLY):  # as torch, a second pass too
        y.sum().backward()


# ----------------------------------------------------------------------------- custom Function
class _WithConstant(ag.autograd.Function):
    got: ClassVar[list[Any]] = []

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x * 2, 5, x * 3

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        _WithConstant.got.append([None if g is None else g.numpy().tolist() for g in grads])
        return grads[0] * 2 + grads[2] * 3


def test_non_tensor_outputs_get_a_none_gradient() -> None:
    x = ag.ones(2, requires_grad=True)
    a, n, b = _WithConstant.apply(x)
    assert n == 5
    (a + b).sum().backward()
    assert _WithConstant.got == [[[1.0, 1.0], None, [1.0, 1.0]]]
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])


class _Defaults(ag.autograd.Function):
    seen: ClassVar[list[Any]] = []

    @staticmethod
    def forward(x: Any, k: Any = 3, scale: Any = 2.0) -> Any:
        return x * k * scale

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        _Defaults.seen.append(inputs[1:])
        ctx.factor = inputs[1] * inputs[2]

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        _Defaults.seen.append(ctx.needs_input_grad)
        return g * ctx.factor, None, None


def test_setup_context_gets_the_default_arguments() -> None:
    x = ag.ones(2, requires_grad=True)
    _Defaults.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])
    x2 = ag.ones(2, requires_grad=True)
    _Defaults.apply(x2, k=4).sum().backward()
    np.testing.assert_allclose(x2.grad.numpy(), [8.0, 8.0])
    assert _Defaults.seen == [(3, 2.0), (True, False, False), (4, 2.0), (True, False, False)]


# ----------------------------------------------------------------------------- errors
def test_calling_a_grad_fn_with_the_wrong_number_of_gradients() -> None:
    x = ag.ones(2, requires_grad=True)
    y = x * x
    with pytest.raises(TypeError, match=r"^expected 1 arguments, got 0 instead"):
        y.grad_fn()
    with pytest.raises(TypeError, match=r"^expected 1 arguments, got 2 instead"):
        y.grad_fn(ag.ones(2), ag.ones(2))
    a, _ = x.split(1)
    with pytest.raises(TypeError, match=r"^expected 2 arguments, got 1 instead"):
        a.grad_fn(ag.ones(1))
    gx, _ = y.grad_fn(ag.ones(2))  # the right number still works
    np.testing.assert_allclose(gx.detach().numpy(), [1.0, 1.0])


def test_post_accumulate_grad_hook_must_return_none() -> None:
    w = ag.ones(2, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda t: t * 2)
    with pytest.raises(RuntimeError, match="post accumulate grad hooks should return None"):
        (w * 2).sum().backward()


async def test_async_post_accumulate_grad_hook_must_return_none() -> None:
    w = ag.ones(2, requires_grad=True)

    async def hook(t: Any) -> Any:
        return t

    w.register_post_accumulate_grad_hook(hook)
    with pytest.raises(RuntimeError, match="post accumulate grad hooks should return None"):
        await ag.backward((w * 2).sum())


class _NotCallable:
    pass


class _CallableObject:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, g: Any) -> None:
        self.calls += 1


def test_hooks_accept_what_torch_accepts() -> None:
    # torch registers any object and fails when the backward calls it; callable objects work.
    z = ag.ones(2, requires_grad=True)
    c = _CallableObject()
    z.register_hook(c)
    (z * 2).sum().backward()
    assert c.calls == 1
    for register in (
        lambda t: t.register_hook(_NotCallable()),
        lambda t: (t * 1).grad_fn.register_hook(3),
        lambda t: (t * 1).grad_fn.register_prehook(None),
        lambda t: t.register_post_accumulate_grad_hook(_NotCallable()),
    ):
        t = ag.ones(2, requires_grad=True)
        handle = register(t)
        handle.remove()
    t = ag.ones(2, requires_grad=True)
    t.register_hook(_NotCallable())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'_NotCallable' object is not callable"):
        (t * 2).sum().backward()


# ----------------------------------------------------------------------------- saved tensors
class _ChangesSaved(ag.autograd.Function):
    versions: ClassVar[list[tuple[int, int]]] = []
    original: ClassVar[list[Any]] = []

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        x.add_(0)
        _ChangesSaved.versions.append((x._version, _ChangesSaved.original[-1]._version))
        return g * 2


def test_unpacked_value_has_the_version_counter_of_what_unpack_returned() -> None:
    # torch: the tensor backward gets is the unpack hook's, with its own version counter; a
    # change to it is not a change to the tensor that was saved.
    x = ag.ones(2, requires_grad=True)
    a = x * 1
    _ChangesSaved.original.append(a)
    with saved_tensors_hooks(lambda t: t.detach().clone(), lambda p: p):
        y = _ChangesSaved.apply(a)
    y.sum().backward(retain_graph=True)
    y.sum().backward()  # the saved value was not changed in place: no error
    assert _ChangesSaved.versions == [(1, 0), (2, 0)]
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0])


class _NonDifferentiableOutput(ag.autograd.Function):
    got: ClassVar[list[Any]] = []

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        idx = (x > 0).to(ag.float32)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return x * 2, idx

    @staticmethod
    def backward(ctx: Any, g: Any, g_idx: Any) -> Any:
        _NonDifferentiableOutput.got.extend(ctx.saved_tensors)
        return g * 2


def test_saved_non_differentiable_output_keeps_its_identity() -> None:
    x = ag.ones(2, requires_grad=True)
    y, idx = _NonDifferentiableOutput.apply(x)
    y.sum().backward()
    assert _NonDifferentiableOutput.got[0] is idx


_DETACHED = "Trying to use a saved tensor that has been detached in-place, i.e. with .detach_()"


class _SavesInput(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return 2 * x * g


@pytest.mark.parametrize("create_graph", [False, True])
def test_backward_after_detach_of_a_saved_input_raises_in_a_function(create_graph: bool) -> None:
    p = ag.tensor([3.0], requires_grad=True)
    q = p * 1
    r = _SavesInput.apply(q)
    q.detach_()
    with pytest.raises(RuntimeError, match=re.escape(_DETACHED)):
        ag.grad_sync(r.sum(), p, create_graph=create_graph)


def test_double_backward_after_detach_of_a_saved_input_raises() -> None:
    # Without the error the first derivative had no graph back to p: a wrong second derivative.
    p = ag.tensor([3.0], requires_grad=True)
    q = p * 1
    r = q * q
    q.detach_()
    with pytest.raises(RuntimeError, match=re.escape(_DETACHED)):
        ag.grad_sync(r.sum(), p, create_graph=True)


def test_detach_of_a_saved_leaf_or_output_is_allowed() -> None:
    # torch: only a saved non-leaf that required grad is checked.
    p = ag.tensor([3.0], requires_grad=True)
    y = p.exp()
    z = (y * 2).sum()
    y.detach_()
    z.backward()
    np.testing.assert_allclose(p.grad.numpy(), 2 * np.exp([3.0]), rtol=1e-6)
    c = ag.tensor([2.0])
    w = ag.tensor([3.0], requires_grad=True)
    (gw,) = ag.grad_sync((w * c).sum(), w, create_graph=True)
    np.testing.assert_allclose(gw.detach().numpy(), [2.0])


# ----------------------------------------------------------------------------- anomaly mode
@pytest.fixture
def no_gc() -> Any:
    gc.collect()
    gc.disable()
    yield
    gc.enable()


class _Foo:
    pass


def test_graph_made_in_anomaly_mode_is_freed_by_reference_counting(no_gc: None) -> None:
    # torch's test_anomaly_assign_parent_cleanup: nothing anomaly mode records keeps the graph.
    def get_ref() -> tuple[Any, Any]:
        x = ag.randn(2, 2, requires_grad=True)
        t = x.exp()
        with ag.autograd.detect_anomaly():
            ag.grad_sync(t, x, ag.ones_like(t), create_graph=True)
        obj = _Foo()
        t.grad_fn.metadata[0] = obj
        return t, weakref.ref(obj)

    t, ref = get_ref()
    assert ref() is not None
    del t
    assert ref() is None


class _Identity(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return _MakesNan.apply(x)


class _MakesNan(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g + float("nan")


def test_graph_of_a_failed_anomaly_pass_is_freed_by_reference_counting(no_gc: None) -> None:
    # torch's test_nested_anomaly_printstack_cleanup.
    def get_ref() -> tuple[Any, Any]:
        inp = ag.rand(1, requires_grad=True)
        out = _Identity.apply(inp)
        (ginp,) = ag.grad_sync(out, (inp,), create_graph=True)
        with (
            pytest.raises(RuntimeError, match="Function '_MakesNanBackward' returned nan values"),
            ag.autograd.detect_anomaly(),
        ):
            ginp.backward()
        obj = _Foo()
        out.grad_fn.metadata[0] = obj
        return out, weakref.ref(obj)

    t, ref = get_ref()
    assert ref() is not None
    del t
    assert ref() is None
