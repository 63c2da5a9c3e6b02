"""ag.autograd.functional: values against finite differences (float64) and torch, return shapes
(tuple or Tensor as torch), create_graph, strict mode's errors, and the awaited versions running
their backward passes concurrently."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.autograd import functional as F


def _np(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(_np(e) for e in x)
    return x.detach().numpy()


def _close(a: Any, b: Any) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _close(x, y)
        return
    assert not isinstance(b, tuple)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-9)


def _fd_jacobian(f: Callable[[Any], Any], x: Any, eps: float = 1e-6) -> Any:
    """Central differences of a NumPy function of one array."""
    y = f(x)
    jac = np.zeros(y.shape + x.shape)
    for idx in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        jac[(..., *idx)] = (f(x + d) - f(x - d)) / (2 * eps)
    return jac


def _run(name: str, awaited: bool, *args: Any, **kwargs: Any) -> Any:
    """``F.<name>`` awaited in a loop, or called as in a torch script (it runs at once)."""
    if awaited:

        async def main() -> Any:
            return await getattr(F, name)(*args, **kwargs)

        return asyncio.run(main())
    return getattr(F, name)(*args, **kwargs)


def _f_ag(x: Any) -> Any:
    return (x.sin() * x.exp()).sum(1)


def _f_np(x: Any) -> Any:
    return (np.sin(x) * np.exp(x)).sum(1)


@pytest.mark.parametrize("awaited", [False, True])
def test_jacobian_matches_finite_differences(awaited: bool) -> None:
    xn = np.random.randn(3, 4)
    jac = _run("jacobian", awaited, _f_ag, ag.tensor(xn))
    assert isinstance(jac, ag.Tensor)
    assert jac.shape == (3, 3, 4)
    np.testing.assert_allclose(jac.numpy(), _fd_jacobian(_f_np, xn), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("awaited", [False, True])
def test_hessian_matches_finite_differences(awaited: bool) -> None:
    xn = np.random.randn(4)

    def grad_np(x: Any) -> Any:  # d/dx sum(x^3 * exp(x)) = (3x^2 + x^3) exp(x)
        return (3 * x**2 + x**3) * np.exp(x)

    hess = _run("hessian", awaited, lambda x: (x.pow(3) * x.exp()).sum(), ag.tensor(xn))
    assert isinstance(hess, ag.Tensor)
    assert hess.shape == (4, 4)
    np.testing.assert_allclose(hess.numpy(), _fd_jacobian(grad_np, xn), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("awaited", [False, True])
def test_jvp_matches_finite_differences(awaited: bool) -> None:
    xn, vn = np.random.randn(3, 4), np.random.randn(3, 4)
    out, jvp = _run("jvp", awaited, _f_ag, ag.tensor(xn), ag.tensor(vn))
    eps = 1e-6
    fd = (_f_np(xn + eps * vn) - _f_np(xn - eps * vn)) / (2 * eps)
    np.testing.assert_allclose(jvp.numpy(), fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(out.numpy(), _f_np(xn))


# ----- against torch: every function, single and tuple inputs/outputs, sync and awaited -----
def _two_in_two_out(lib: Any) -> Callable[..., Any]:
    def f(x: Any, y: Any) -> Any:
        return (x.exp() * y).sum(1), x * y.sin()

    return f


def _two_in_scalar(lib: Any) -> Callable[..., Any]:
    def f(x: Any, y: Any) -> Any:
        return (x.pow(3) * y.exp()).sum() + (x * y).sum()

    return f


def _one_in_one_out(lib: Any) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        return x.tanh() * x.sum()

    return f


def _one_in_scalar(lib: Any) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        return (x.sin() * x).sum()

    return f


def _inputs(lib: Any, arrays: tuple[Any, ...], as_tuple: bool) -> Any:
    ts = tuple(lib.tensor(a) for a in arrays)
    return ts if as_tuple else ts[0]


CASES = [
    # (function name, function builder, input arrays, inputs as a tuple, v arrays or None)
    ("vjp", _two_in_two_out, (2, 3), True, "out"),
    ("vjp", _one_in_one_out, (1, 3), False, "out"),
    ("vjp", _one_in_scalar, (1, 3), False, None),
    ("jvp", _two_in_two_out, (2, 3), True, "in"),
    ("jvp", _one_in_one_out, (1, 3), False, "in"),
    ("jacobian", _two_in_two_out, (2, 3), True, None),
    ("jacobian", _one_in_one_out, (1, 3), False, None),
    ("jacobian", _one_in_scalar, (1, 3), False, None),
    ("hessian", _two_in_scalar, (2, 3), True, None),
    ("hessian", _one_in_scalar, (1, 3), False, None),
    ("vhp", _two_in_scalar, (2, 3), True, "in"),
    ("vhp", _one_in_scalar, (1, 3), False, "in"),
    ("hvp", _two_in_scalar, (2, 3), True, "in"),
    ("hvp", _one_in_scalar, (1, 3), False, "in"),
]


def _case_id(c: Any) -> str:
    return f"{c[0]}-{c[1].__name__.strip('_')}"


@pytest.mark.parametrize("awaited", [False, True], ids=["sync", "awaited"])
@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_same_as_torch(case: Any, create_graph: bool, awaited: bool) -> None:
    torch = pytest.importorskip("torch", reason="torch is the reference for functional")
    import torch.autograd.functional as TF

    name, build, (n_in, m), as_tuple, v_kind = case
    arrays = tuple(np.random.randn(m, 2) for _ in range(n_in))
    x_ag = _inputs(ag, arrays, as_tuple)
    x_t = _inputs(torch, arrays, as_tuple)
    args_ag: list[Any] = [build(ag), x_ag]
    args_t: list[Any] = [build(torch), x_t]
    if v_kind is not None:
        ref = build(torch)(*(x_t if as_tuple else (x_t,)))
        shapes = [a.shape for a in arrays] if v_kind == "in" else None
        if shapes is None:
            outs = ref if isinstance(ref, tuple) else (ref,)
            shapes = [tuple(o.shape) for o in outs]
        vs = tuple(np.random.randn(*s) for s in shapes)
        is_tuple = len(vs) > 1 or (v_kind == "out" and isinstance(ref, tuple))
        args_ag.append(_inputs(ag, vs, is_tuple))
        args_t.append(_inputs(torch, vs, is_tuple))
    got = _run(name, awaited, *args_ag, create_graph=create_graph)
    want = getattr(TF, name)(*args_t, create_graph=create_graph)
    _close(_np(got), _np(want))
    if create_graph:
        flat = _flatten(got)
        assert any(t.requires_grad for t in flat)


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, tuple):
        return [t for e in x for t in _flatten(e)]
    return [x]


def test_create_graph_result_is_differentiable() -> None:
    torch = pytest.importorskip("torch", reason="torch is the reference for functional")
    import torch.autograd.functional as TF

    xn = np.random.randn(3)
    x = ag.tensor(xn, requires_grad=True)
    xt = torch.tensor(xn, requires_grad=True)
    _, g = F.vjp_sync(lambda t: (t.sin() * t).sum(), x, create_graph=True)
    _, gt = TF.vjp(lambda t: (t.sin() * t).sum(), xt, create_graph=True)
    (g.pow(2).sum()).backward()
    (gt.pow(2).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())
    # without create_graph the results are detached from the caller's graph
    out, g2 = F.vjp_sync(lambda t: (t.sin() * t).sum(), x)
    assert not out.requires_grad
    assert not g2.requires_grad


def test_single_and_tuple_return_types() -> None:
    x = ag.randn(3, dtype=ag.float64)
    out, g = F.vjp_sync(lambda t: t.sum(), x)
    assert isinstance(out, ag.Tensor)
    assert isinstance(g, ag.Tensor)
    out, g = F.vjp_sync(lambda t: t.sum(), (x,))
    assert isinstance(out, ag.Tensor)
    assert isinstance(g, tuple)
    assert len(g) == 1
    out, g = F.vjp_sync(lambda t: (t.sum(),), x, v=(ag.tensor(1.0, dtype=ag.float64),))
    assert isinstance(out, tuple)
    assert isinstance(g, ag.Tensor)
    jac = F.jacobian_sync(lambda t: (t * 2, t.sum()), x)
    assert isinstance(jac, tuple)
    assert jac[0].shape == (3, 3)
    assert jac[1].shape == (3,)
    jac = F.jacobian_sync(lambda a, b: a * b, (x, x))
    assert isinstance(jac, tuple)
    assert isinstance(jac[0], ag.Tensor)
    assert len(jac) == 2
    hess = F.hessian_sync(lambda a, b: (a * b).sum(), (x, x))
    assert isinstance(hess[0], tuple)
    assert hess[0][1].shape == (3, 3)


def test_unused_input_gives_zeros_or_strict_error() -> None:
    x, y = ag.randn(3, dtype=ag.float64), ag.randn(2, dtype=ag.float64)
    _, (_gx, gy) = F.vjp_sync(lambda a, b: a.sum(), (x, y))
    assert gy.shape == (2,)
    assert not gy.numpy().any()
    with pytest.raises(
        RuntimeError,
        match=r"^The output of the user-provided function is independent of input 1\. This is "
        r"not allowed in strict mode\.$",
    ):
        F.vjp_sync(lambda a, b: a.sum(), (x, y), strict=True)
    jac = F.jacobian_sync(lambda a, b: a * 2, (x, y))
    assert jac[1].shape == (3, 2)
    assert not jac[1].numpy().any()
    with pytest.raises(
        RuntimeError,
        match=r"^Output 0 of the user-provided function is independent of input 1\. This is not "
        r"allowed in strict mode\.$",
    ):
        F.jacobian_sync(lambda a, b: a * 2, (x, y), strict=True)
    with pytest.raises(
        RuntimeError, match=r"^Output 0 of the user-provided function does not require gradients"
    ):
        F.vjp_sync(lambda a: ag.ones(()), x, strict=True)
    with pytest.raises(RuntimeError, match=r"^While computing the hessian, found that the jac"):
        F.hessian_sync(lambda a: (a * 2).sum(), x, strict=True)


def test_argument_errors_as_torch() -> None:
    x = ag.randn(3, dtype=ag.float64)
    with pytest.raises(
        TypeError,
        match=r"^The inputs given to vjp must be either a Tensor or a tuple of Tensors but the "
        r"given inputs has type <class 'list'>\.$",
    ):
        F.vjp_sync(lambda t: t.sum(), [x])
    with pytest.raises(TypeError, match=r"but the value at index 1 has type <class 'int'>\.$"):
        F.jacobian_sync(lambda a, b: a, (x, 1))
    with pytest.raises(
        RuntimeError,
        match=r"^The vector v can only be None if the user-provided function returns a single "
        r"Tensor with a single element\.$",
    ):
        F.vjp_sync(lambda t: t * 2, x)
    with pytest.raises(
        RuntimeError,
        match=rf"^v has invalid size: should be {re.escape(str(x.shape))} but got "
        rf"{re.escape(str(ag.ones(2).shape))}\.$",
    ):
        F.vjp_sync(lambda t: t * 2, x, v=ag.ones(2, dtype=ag.float64))
    with pytest.raises(RuntimeError, match=r"^v is a tuple of invalid length: should be 2 but got"):
        F.jvp_sync(lambda a, b: a * b, (x, x), v=(x,))
    with pytest.raises(RuntimeError, match=r"^The function given to hessian should return a sin"):
        F.hessian_sync(lambda t: (t.sum(), t.sum()), x)
    with pytest.raises(RuntimeError, match=r"should contain a single element$"):
        F.hvp_sync(lambda t: t * 2, x, v=x)
    with pytest.raises(ValueError, match=r"^Expected strategy to be either"):
        F.jacobian_sync(lambda t: t, x, strategy="sideways")
    with pytest.raises(NotImplementedError, match=r"`create_graph=True` and"):
        F.jacobian_sync(lambda t: t, x, create_graph=True, strategy="forward-mode")
    # accepted and ignored: the same values
    _close(
        _np(F.jacobian_sync(lambda t: t.sin(), x, vectorize=True, strategy="forward-mode")),
        _np(F.jacobian_sync(lambda t: t.sin(), x)),
    )


class _Track(ag.autograd.Function):
    """Identity whose async backward records how many of its backwards overlap."""

    active = 0
    most = 0

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x.clone()

    @staticmethod
    async def backward(ctx: Any, g: Any) -> Any:
        _Track.active += 1
        _Track.most = max(_Track.most, _Track.active)
        await asyncio.sleep(0)
        _Track.active -= 1
        return g


async def test_jacobian_rows_run_concurrently_and_the_loop_runs() -> None:
    _Track.active = _Track.most = 0
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    x = ag.randn(8, dtype=ag.float64)
    jac = await F.jacobian(lambda a: _Track.apply(a).sin(), x)
    stop = True
    await t
    np.testing.assert_allclose(jac.numpy(), np.diag(np.cos(x.numpy())))
    assert _Track.most > 1  # several rows were inside backward at once
    assert ticks > 0
    # the sync twin runs the rows one after another
    _Track.most = 0
    F.jacobian_sync(lambda a: _Track.apply(a).sin(), x)
    assert _Track.most == 1


async def test_async_function_and_sync_twin_refuses_it() -> None:
    async def f(x: Any) -> Any:
        await asyncio.sleep(0)
        return (x * x).sum()

    x = ag.tensor([1.0, 2.0], dtype=ag.float64)
    _out, g = await F.vjp(f, x)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    hess = await F.hessian(f, x)
    np.testing.assert_allclose(hess.numpy(), 2 * np.eye(2))
    with pytest.raises(TypeError, match="an async function needs the awaited form"):
        F.vjp_sync(f, x)


def test_inputs_left_untouched() -> None:
    x = ag.randn(3, dtype=ag.float64, requires_grad=True)
    F.jacobian_sync(lambda t: t.sin(), x)
    F.hvp_sync(lambda t: t.pow(3).sum(), x, v=ag.ones(3, dtype=ag.float64))
    assert x.grad is None
    assert x.is_leaf


@pytest.mark.cuda
def test_on_a_cuda_device() -> None:
    if ag.cuda.device_count() < 1:
        pytest.skip("needs a CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    xn = np.random.randn(3, 4)
    jac = F.jacobian_sync(_f_ag, ag.tensor(xn, device="cuda"))
    assert jac.device.type == "cuda"
    np.testing.assert_allclose(jac.cpu().numpy(), _fd_jacobian(_f_np, xn), rtol=1e-6, atol=1e-8)
    _, hv = F.hvp_sync(
        lambda t: t.pow(3).sum(), ag.tensor(xn, device="cuda"), ag.tensor(xn, device="cuda")
    )
    np.testing.assert_allclose(hv.cpu().numpy(), 6 * xn * xn)


@pytest.mark.parametrize("awaited", [False, True])
def test_jacobian_rows_over_several_steps(awaited: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(F, "ROWS_PER_STEP", 3)
    xn = np.random.randn(2, 4)
    jac = _run("jacobian", awaited, lambda t: (t.sin(), t.sum(0)), ag.tensor(xn))
    np.testing.assert_allclose(jac[0].numpy(), _fd_jacobian(np.sin, xn), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(
        jac[1].numpy(), _fd_jacobian(lambda a: a.sum(0), xn), rtol=1e-6, atol=1e-8
    )
