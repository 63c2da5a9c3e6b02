"""Inference tensors (NOTE [Inference tensors]): which tensors are ones, and what outside
inference mode refuses on them, against torch's behaviour on the same programs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """('ok', value) or (error type, the message's first sentence)."""
    try:
        r = fn()
    except Exception as e:  # the outcome is what is compared
        return type(e).__name__, str(e).split(".")[0]
    if hasattr(r, "detach"):
        r = r.detach().cpu().numpy().tolist() if hasattr(r, "cpu") else r.numpy().tolist()
    return "ok", r


def _program(lib: Any) -> dict[str, tuple[str, Any]]:
    out: dict[str, tuple[str, Any]] = {}
    with lib.inference_mode():
        a = lib.ones(2, 3)
        v = a[0]
        b = lib.ones(2, 3, requires_grad=True)
    n = lib.ones(2, 3)
    nr = lib.ones(2, 3, requires_grad=True)
    with lib.inference_mode():
        nv = n.view(6)
        nrv = nr[0]
        nrvv = nrv[1:]
    out["flags"] = (
        "ok",
        [
            a.is_inference(),
            v.is_inference(),
            b.is_inference(),
            b.requires_grad,
            n.is_inference(),
            nv.is_inference(),
            a.detach().is_inference(),
            a.clone().is_inference(),
            (a + 1).is_inference(),
            a.sum().is_inference(),
            lib.is_inference(a),
        ],
    )
    out["add_"] = _outcome(lambda: a.add_(1))
    out["view mul_"] = _outcome(lambda: v.mul_(2))
    out["setitem"] = _outcome(lambda: a.__setitem__(0, 5.0))
    out["copy_"] = _outcome(lambda: a.copy_(lib.zeros(2, 3)))
    out["zero_"] = _outcome(lambda: a.zero_())
    out["fill_ under no_grad"] = _outcome(lambda: _no_grad(lib, lambda: a.fill_(3.0)))
    out["version"] = _outcome(lambda: a._version)
    out["requires_grad_"] = _outcome(lambda: a.requires_grad_())
    out["requires_grad_(False)"] = _outcome(lambda: a.requires_grad_(False).requires_grad)
    w = lib.ones(2, 3, requires_grad=True)
    out["saved"] = _outcome(lambda: (w * a).sum().backward())
    out["not saved"] = _outcome(lambda: (w + a).sum().backward())
    out["w.grad"] = _outcome(lambda: w.grad)
    out["normal view made inside, plain"] = _outcome(lambda: nv.add_(1))
    out["normal view made inside, of a leaf"] = _outcome(lambda: nrv.mul_(2))
    out["view of such a view"] = _outcome(lambda: nrvv.mul_(2))
    out["normal value"] = _outcome(lambda: n)
    with lib.inference_mode():
        a.fill_(1.0)  # torch's refused fill_ above wrote its value; start both again from ones
        out["add_ inside"] = _outcome(lambda: a.add_(1))
        out["normal add_ inside"] = _outcome(lambda: n.add_(1))
        out["inference out of normal"] = _outcome(lambda: (n * 2).is_inference())
        with lib.inference_mode(False):
            out["nested False"] = _outcome(lambda: lib.ones(1).is_inference())
    out["after inside"] = _outcome(lambda: a)
    with lib.inference_mode():
        c = lib.ones(3, requires_grad=True)
    out["view of inference leaf"] = _outcome(
        lambda: [c.view(-1).is_inference(), c.view(-1).requires_grad, (c * 2).requires_grad]
    )
    out["leaf error first"] = _outcome(lambda: c.add_(lib.ones(3)))
    out["Parameter of it"] = _outcome(lambda: lib.nn.Parameter(a))
    out["Parameter without grad"] = _outcome(
        lambda: lib.nn.Parameter(a, requires_grad=False).is_inference()
    )
    # Last: torch transposes and resizes before it raises (as it writes fill_'s value), where
    # asyncgrad refuses first and changes nothing (test_refused_update_changes_nothing).
    out["t_"] = _outcome(lambda: a.t_())
    out["resize_"] = _outcome(lambda: a.resize_(6))
    return out


def _no_grad(lib: Any, fn: Callable[[], Any]) -> Any:
    with lib.no_grad():
        return fn()


def test_a_view_made_inside_of_a_tensor_that_requires_grad() -> None:
    # torch marks it requires_grad but gives it no grad_fn, and no gradient reaches anything
    # through it; asyncgrad's does not require grad (the README's differences), and likewise
    # no gradient reaches the leaf.
    for lib in (ag, torch):
        leaf = lib.ones(3, requires_grad=True)
        s = leaf * 1
        with lib.inference_mode():
            sv = s.view(-1)
        assert sv.grad_fn is None
        assert not sv.is_inference()
        if sv.requires_grad:
            (sv * 2).sum().backward()
        assert leaf.grad is None
    assert not sv_requires_grad(ag)


def sv_requires_grad(lib: Any) -> bool:
    s = lib.ones(3, requires_grad=True) * 1
    with lib.inference_mode():
        return bool(s.view(-1).requires_grad)


def test_inference_tensors_as_torch() -> None:
    got = _program(ag)
    want = _program(torch)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == want[k], k


def test_refused_update_changes_nothing() -> None:
    with ag.inference_mode():
        a = ag.arange(6.0).reshape(2, 3)
    before = a.numpy().copy()
    refused = (
        lambda: a.add_(1),
        lambda: a[1].mul_(0),
        lambda: a.__setitem__(0, 9.0),
        lambda: _no_grad(ag, lambda: a.fill_(3.0)),
        lambda: a.resize_(6),
        lambda: a.t_(),
    )
    for f in refused:
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
            f()
    np.testing.assert_array_equal(a.numpy(), before)  # torch's fill_ and resize_ change it
    assert a.is_inference()
    assert not a.requires_grad


def test_the_error_names_the_tensor() -> None:
    with ag.inference_mode():
        a = ag.ones(4, 5)
    with pytest.raises(RuntimeError, match=r"inference tensor of shape \[4, 5\]"):
        a.sub_(1)
    w = ag.ones(4, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"input 1, of shape \[4, 5\], is an inference tensor"):
        w * a


def test_an_optimizer_step_on_an_inference_parameter_raises() -> None:
    # A write path that no in-place op's check sees: the counter refuses it.
    with ag.inference_mode():
        p = ag.ones(3)
    with ag.inference_mode(False):
        q = p.clone().requires_grad_()
    (q * 2).sum().backward()
    p.grad = q.grad
    opt = ag.optim.SGD([p], lr=0.1)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
        opt.step()
    with ag.inference_mode():
        opt.step()  # inside inference mode it may
    np.testing.assert_allclose(p.numpy(), [0.8, 0.8, 0.8])


async def test_inference_mode_is_per_task() -> None:
    # One task inside inference mode, the other outside, interleaved at every await: each
    # makes the kind of tensor its own mode says.
    inside_started = asyncio.Event()
    outside_done = asyncio.Event()

    async def inside() -> list[bool]:
        with ag.inference_mode():
            first = ag.ones(2) * 2
            inside_started.set()
            await asyncio.wait_for(outside_done.wait(), 10)
            second = ag.ones(2) * 2
        return [first.is_inference(), second.is_inference()]

    async def outside() -> list[bool]:
        await asyncio.wait_for(inside_started.wait(), 10)
        t = ag.ones(2) * 2
        t.add_(1)  # a normal tensor: allowed
        outside_done.set()
        return [t.is_inference()]

    a, b = await asyncio.wait_for(asyncio.gather(inside(), outside()), 10)
    assert a == [True, True]
    assert b == [False]
