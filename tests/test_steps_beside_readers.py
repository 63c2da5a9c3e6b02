"""Optimizer steps beside forwards on other threads: every forward reads one version of each
weight, and every gradient is the gradient at exactly the weights its forward read.

See NOTE [Serving while training] in asyncgrad/optim/optimizers.py and NOTE [Ops save what they
read] in asyncgrad/ops/_record.py. The deterministic tests put a step (on another thread) at the
exact point that used to go wrong: inside an op, after it read its weights and before it recorded
them; and inside a step's update, between its kernels. tests/test_stress_steps.py runs the same
checks with real threads and an event loop.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import backend
from asyncgrad.ops import linalg, pointwise

F = ag.nn.functional
JOIN_S = 60.0


def run_on_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a new thread and return its result (re-raising what it raised)."""
    out: list[Any] = []
    err: list[BaseException] = []

    def body() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # handed to the caller
            err.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join(JOIN_S)
    assert not t.is_alive(), "the thread did not finish"
    if err:
        raise err[0]
    return out[0]


def leaf(rng: np.random.Generator, *shape: int) -> ag.Tensor:
    return ag.tensor(rng.standard_normal(shape), requires_grad=True)


def stepper(params: list[ag.Tensor], make: Callable[..., ag.optim.Optimizer]) -> Callable[[], None]:
    opt = make(params)

    def step() -> None:
        for p in params:
            p.grad = ag.ones_like(p)
        opt.step()

    return step


OPTIMIZERS: dict[str, Callable[..., ag.optim.Optimizer]] = {
    "sgd": lambda ps: ag.optim.SGD(ps, lr=0.5),
    "adam": lambda ps: ag.optim.Adam(ps, lr=0.5),
    "adamw": lambda ps: ag.optim.AdamW(ps, lr=0.5, weight_decay=0.1),
}


# ============================================================================= a step inside an op


def then_step(fn: Callable[..., Any], pending: list[Callable[[], None]]) -> Callable[..., Any]:
    """``fn``, which once it has returned runs the pending steps, each on another thread: put
    where an op calls it, the moment between the op's read of its weights and their recording."""

    def call(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        while pending:
            run_on_thread(pending.pop())
        return out

    return call


@pytest.fixture
def step_inside_mm(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], None]]:
    """Makes the next matrix product run the steps put in the list it returns."""
    pending: list[Callable[[], None]] = []
    monkeypatch.setattr(backend, "mm", then_step(backend.mm, pending))
    return pending


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_step_inside_linear_leaves_its_gradient_at_the_weights_it_read(
    name: str, step_inside_mm: list[Callable[[], None]]
) -> None:
    rng = np.random.default_rng(0)
    x, w, b = leaf(rng, 5, 3), leaf(rng, 4, 3), leaf(rng, 4)
    w0, b0 = w.array.copy(), b.array.copy()
    step_inside_mm.append(stepper([w, b], OPTIMIZERS[name]))
    out = F.linear(x, w, b)
    assert not step_inside_mm  # the step ran, inside the op
    assert not np.array_equal(w.array, w0)
    assert not np.array_equal(b.array, b0)
    # The forward used the weights it read: the bias is read with the weight, before the product.
    np.testing.assert_allclose(out.array, x.array @ w0.T + b0, rtol=1e-14)
    r = rng.standard_normal((5, 4))
    gx, gw, gb = ag.grad_sync((out * ag.tensor(r)).sum(), [x, w, b])
    np.testing.assert_allclose(gx.array, r @ w0, rtol=1e-14)  # the old weights'
    np.testing.assert_allclose(gw.array, r.T @ x.array, rtol=1e-14)
    np.testing.assert_allclose(gb.array, r.sum(0), rtol=1e-14)
    # What is recorded after the step uses the new weights.
    (gx_new,) = ag.grad_sync((F.linear(x, w, b) * ag.tensor(r)).sum(), [x])
    np.testing.assert_allclose(gx_new.array, r @ w.array, rtol=1e-14)


def test_the_reproduction_with_a_real_thread_inside_blas() -> None:
    # A thread multiplies a large input by w; the main thread waits until that thread holds w's
    # array (its reference count rises: it is inside the product, the GIL released), steps,
    # and joins. If the product finishes first the step simply comes after it: either way the
    # gradient must be the one at the weights the forward used.
    rng = np.random.default_rng(1)
    x, w, b = leaf(rng, 1200, 600), leaf(rng, 600, 600), leaf(rng, 600)
    w0, b0 = w.array.copy(), b.array.copy()
    step = stepper([w, b], OPTIMIZERS["sgd"])
    held = sys.getrefcount(w.array)
    res: list[ag.Tensor] = []
    t = threading.Thread(target=lambda: res.append(F.linear(x, w, b)))
    t.start()
    while sys.getrefcount(w.array) <= held and t.is_alive():
        pass
    step()
    t.join(JOIN_S)
    assert not t.is_alive()
    (out,) = res
    np.testing.assert_allclose(out.array, x.array @ w0.T + b0, rtol=1e-12, atol=1e-12)
    (gx,) = ag.grad_sync(out.sum(), [x])
    np.testing.assert_allclose(gx.array, np.broadcast_to(w0.sum(0), (1200, 600)), rtol=1e-12)


@pytest.mark.parametrize("op", ["matmul", "mul", "div", "tanh-of-weight", "conv2d"])
def test_a_step_inside_other_ops_leaves_their_saved_weights(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ops that save a weight for the input's gradient, with the step injected after the op's
    # compute (as the matrix product above, through the function every op calls once it has
    # computed: restoring the floating-point error state).
    rng = np.random.default_rng(2)
    x = leaf(rng, 2, 3, 5, 5) if op == "conv2d" else leaf(rng, 3, 3)
    w = leaf(rng, 4, 3, 2, 2) if op == "conv2d" else leaf(rng, 3, 3)
    w0 = w.array.copy()
    pending = [stepper([w], OPTIMIZERS["adam"])]
    monkeypatch.setattr(pointwise, "restore_fp", then_step(pointwise.restore_fp, pending))
    monkeypatch.setattr(backend, "mm", then_step(backend.mm, pending))
    fns: dict[str, Callable[[ag.Tensor, ag.Tensor], ag.Tensor]] = {
        "matmul": lambda a, b: linalg.matmul(a, b),
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "tanh-of-weight": lambda a, b: a * b.tanh(),
        "conv2d": lambda a, b: F.conv2d(a, b),
    }
    if op == "conv2d":
        from asyncgrad.ops import conv

        monkeypatch.setattr(
            conv.formulas, "conv_array", then_step(conv.formulas.conv_array, pending)
        )
    out = fns[op](x, w)
    assert not pending
    assert not np.array_equal(w.array, w0)
    w_new = w.array.copy()
    # The same computation, afresh, on a tensor holding the weights the forward read.
    ref_w = ag.tensor(w0, requires_grad=True)
    ref_x = ag.tensor(x.array.copy(), requires_grad=True)
    ref = fns[op](ref_x, ref_w)
    np.testing.assert_array_equal(out.array, ref.array)
    r = ag.tensor(rng.standard_normal(out.shape))
    gx, gw = ag.grad_sync((out * r).sum(), [x, w])
    rgx, rgw = ag.grad_sync((ref * r).sum(), [ref_x, ref_w])
    np.testing.assert_array_equal(gx.array, rgx.array)
    np.testing.assert_array_equal(gw.array, rgw.array)
    np.testing.assert_array_equal(w.array, w_new)


def test_a_saved_weight_stepped_many_times_during_one_op_still_finds_its_version() -> None:
    rng = np.random.default_rng(3)
    w = leaf(rng, 3, 3)
    step = stepper([w], OPTIMIZERS["sgd"])
    a = w.array
    for _ in range(5):  # a forward that read `a`, then five steps before it recorded
        step()
    from asyncgrad.graph.saved_tensor import version_counter_of

    vc = version_counter_of(w, a)
    assert vc[0] == 0
    assert vc is not w._vc
    held = []  # arrays still read elsewhere: each step then publishes a new one
    for _ in range(8):
        held.append(w.array)
        step()
    assert [version_counter_of(w, h)[0] for h in held[1:]] == list(range(6, 13))
    with pytest.raises(
        RuntimeError,
        match=r"given a new array while an operation read it \(by at least 8 optimizer steps",
    ):
        version_counter_of(w, a)


# ============================================================================= a read inside a step


class ReadingAdam(ag.optim.Adam):
    """Adam that lets a forward run on another thread between the kernels of each update, where
    a half-updated parameter would show."""

    def __init__(self, params: Any, read: Callable[[], None]) -> None:
        super().__init__(params, lr=0.1, weight_decay=0.1)
        self.read = read

    def _update(self, p: Any, old: Any, out: Any, g: Any, state: Any, group: Any) -> None:
        self.read()
        super()._update(p, old, out, g, state, group)
        self.read()  # written, not yet published


def test_a_forward_during_a_step_reads_the_old_weights_whole() -> None:
    rng = np.random.default_rng(4)
    x, w, b = leaf(rng, 6, 3), leaf(rng, 2, 3), leaf(rng, 2)
    w0, b0 = w.array.copy(), b.array.copy()
    seen: list[np.ndarray] = []

    def read() -> None:
        seen.append(run_on_thread(lambda: F.linear(x, w, b).array))

    opt = ReadingAdam([w, b], read)
    w.grad, b.grad = ag.ones_like(w), ag.ones_like(b)
    opt.step()
    # Before the weight's publication every read is the old weights'; after it, the new
    # weight with the old bias until the bias is published too: never a partial update.
    old = x.array @ w0.T + b0
    w_new_b_old = x.array @ w.array.T + b0
    assert len(seen) == 4
    np.testing.assert_array_equal(seen[0], old)
    np.testing.assert_array_equal(seen[1], old)
    np.testing.assert_array_equal(seen[2], w_new_b_old)
    np.testing.assert_array_equal(seen[3], w_new_b_old)
    np.testing.assert_array_equal(F.linear(x, w, b).array, x.array @ w.array.T + b.array)
