"""Serving while training: an optimizer step never changes the weights a pending backward saved.

See NOTE [Serving while training] in asyncgrad/optim/optimizers.py. A step never writes into an
array a reader may hold: it publishes the new values in an array of their own with a new version
counter, so a graph recorded before the step backpropagates with the weights its forward used.
"""

from __future__ import annotations

import asyncio
import copy
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn

F = nn.functional
TIMEOUT_S = 30.0

# Every update rule and option that touches the parameter: plain SGD, momentum (the first step
# copies the gradient into the buffer, later ones scale it), dampening, Nesterov, L2 weight decay
# (which reads the parameter), Adam with and without amsgrad and L2, AdamW (whose decoupled
# decay multiplies the parameter in place before the Adam update), and maximize.
OPTIMIZERS: dict[str, Callable[[Any], ag.optim.Optimizer]] = {
    "sgd": lambda ps: ag.optim.SGD(ps, lr=0.1),
    "sgd-momentum": lambda ps: ag.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1),
    "sgd-nesterov-wd": lambda ps: ag.optim.SGD(
        ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01
    ),
    "sgd-maximize": lambda ps: ag.optim.SGD(ps, lr=0.1, weight_decay=0.05, maximize=True),
    "adam": lambda ps: ag.optim.Adam(ps, lr=0.01),
    "adam-wd-amsgrad": lambda ps: ag.optim.Adam(ps, lr=0.01, weight_decay=0.1, amsgrad=True),
    "adamw": lambda ps: ag.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}


def make_model() -> nn.Sequential:
    ag.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).to(ag.float64)


def batch(seed: int) -> tuple[ag.Tensor, ag.Tensor]:
    rng = np.random.default_rng(seed)
    return ag.tensor(rng.standard_normal((4, 3))), ag.tensor(rng.standard_normal((4, 2)))


def snapshot(model: nn.Module) -> list[np.ndarray]:
    return [p.array.copy() for p in model.parameters()]


def reference_grads(
    weights: list[np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The gradients of the request's loss computed afresh, on a model holding ``weights``."""
    model = make_model()
    for p, w in zip(model.parameters(), weights, strict=True):
        p.array[...] = w
    xt = ag.tensor(x, requires_grad=True)
    loss = F.mse_loss(model(xt), ag.tensor(y))
    gx, *gps = ag.grad_sync(loss, [xt, *model.parameters()])
    return gx.array, [g.array for g in gps]


def train_step(model: nn.Module, opt: ag.optim.Optimizer, seed: int) -> None:
    x, y = batch(seed)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()


def reference_weights(name: str, steps: int) -> list[np.ndarray]:
    """The weights after ``steps`` training steps with no request in flight (all in place)."""
    model = make_model()
    opt = OPTIMIZERS[name](model.parameters())
    for s in range(steps):
        train_step(model, opt, s)
    return snapshot(model)


# ============================================================================= pending backward


@pytest.mark.parametrize("name", list(OPTIMIZERS))
async def test_a_request_recorded_before_steps_gets_the_old_weights_gradient(name: str) -> None:
    model = make_model()
    opt = OPTIMIZERS[name](model.parameters())
    train_step(model, opt, 0)  # the optimizer state exists: the next steps take its later path
    old = snapshot(model)
    x, y = (t.array for t in batch(100))
    xt = ag.tensor(x, requires_grad=True)
    loss = F.mse_loss(model(xt), ag.tensor(y))  # recorded, not yet backwarded
    arrays = [p.array for p in model.parameters()]
    versions = [p._version for p in model.parameters()]
    train_step(model, opt, 1)
    train_step(model, opt, 2)

    gx, *gps = await asyncio.wait_for(ag.grad(loss, [xt, *model.parameters()]), TIMEOUT_S)

    want_x, want_ps = reference_grads(old, x, y)
    np.testing.assert_array_equal(gx.array, want_x)
    for g, want in zip(gps, want_ps, strict=True):
        np.testing.assert_array_equal(g.array, want)
    # The arrays the request saved still hold the old weights; the parameters hold exactly the
    # weights that three steps with nothing in flight give.
    for a, w in zip(arrays, old, strict=True):
        np.testing.assert_array_equal(a, w)
    for p, w, v in zip(model.parameters(), reference_weights(name, 3), versions, strict=True):
        np.testing.assert_array_equal(p.array, w)
        assert p._version == v + 2


@pytest.mark.parametrize("name", ["sgd-nesterov-wd", "adamw"])
async def test_a_backward_suspended_mid_graph_across_a_step(name: str) -> None:
    # The request's backward is running: it has gone through the last layer and waits (in an
    # async hook) before the first layer, whose saved weights it has not read yet.
    model = make_model()
    opt = OPTIMIZERS[name](model.parameters())
    old = snapshot(model)
    x, y = (t.array for t in batch(100))
    xt = ag.tensor(x, requires_grad=True)
    hidden = model[1](model[0](xt))
    reached, resume = asyncio.Event(), asyncio.Event()

    async def pause(grad: ag.Tensor) -> None:
        reached.set()
        await resume.wait()

    hidden.register_hook(pause)
    loss = F.mse_loss(model[2](hidden), ag.tensor(y))
    request = asyncio.create_task(ag.grad(loss, [xt, *model.parameters()]))
    await asyncio.wait_for(reached.wait(), TIMEOUT_S)
    assert not request.done()

    # A training step in the same loop, awaited like the request: it runs while the request
    # waits, and the step finds the request's saved weights.
    xb, yb = batch(0)
    opt.zero_grad()
    await asyncio.wait_for(ag.backward(F.mse_loss(model(xb), yb)), TIMEOUT_S)
    opt.step()
    resume.set()

    gx, *gps = await asyncio.wait_for(request, TIMEOUT_S)
    want_x, want_ps = reference_grads(old, x, y)
    np.testing.assert_array_equal(gx.array, want_x)
    for g, want in zip(gps, want_ps, strict=True):
        np.testing.assert_array_equal(g.array, want)
    for p, w in zip(model.parameters(), reference_weights(name, 1), strict=True):
        np.testing.assert_array_equal(p.array, w)


def test_matches_torch_with_the_old_weights() -> None:
    torch = pytest.importorskip("torch")
    model = make_model()
    opt = ag.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    tmodel = torch.nn.Sequential(
        torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)
    ).double()
    with torch.no_grad():
        for tp, p in zip(tmodel.parameters(), model.parameters(), strict=True):
            tp.copy_(torch.from_numpy(p.array.copy()))
    topt = torch.optim.AdamW(tmodel.parameters(), lr=0.01, weight_decay=0.1)
    x, y = (t.array for t in batch(100))

    # torch: the request's gradients first (its backward can't run after the step), then the
    # training step.
    tx = torch.from_numpy(x).requires_grad_()
    tloss = torch.nn.functional.mse_loss(tmodel(tx), torch.from_numpy(y))
    want = torch.autograd.grad(tloss, [tx, *tmodel.parameters()])
    xb, yb = (t.array for t in batch(0))
    topt.zero_grad()
    torch.nn.functional.mse_loss(tmodel(torch.from_numpy(xb)), torch.from_numpy(yb)).backward()
    topt.step()

    # asyncgrad: the request is recorded first, the step runs, then the request's backward.
    xt = ag.tensor(x, requires_grad=True)
    loss = F.mse_loss(model(xt), ag.tensor(y))
    train_step(model, opt, 0)
    got = ag.grad_sync(loss, [xt, *model.parameters()])

    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.array, w.numpy(), rtol=1e-12, atol=1e-15)
    for p, tp in zip(model.parameters(), tmodel.parameters(), strict=True):
        np.testing.assert_allclose(p.array, tp.detach().numpy(), rtol=1e-12, atol=1e-15)


def test_against_finite_differences_of_the_old_weights() -> None:
    w = ag.tensor(np.array([[0.3, -1.2], [0.7, 0.5]]), requires_grad=True)
    x = ag.tensor(np.array([[1.0, 2.0], [-0.5, 0.25], [3.0, -1.0]]))
    w0 = w.array.copy()
    loss = (x @ w).tanh().sum()
    w.grad = ag.ones_like(w)
    ag.optim.SGD([w], lr=0.5).step()
    (gw,) = ag.grad_sync(loss, [w])

    def f(v: np.ndarray) -> float:
        return float(np.tanh(x.array @ v).sum())

    eps = 1e-6
    fd = np.zeros_like(w0)
    for i in np.ndindex(w0.shape):
        d = np.zeros_like(w0)
        d[i] = eps
        fd[i] = (f(w0 + d) - f(w0 - d)) / (2 * eps)
    np.testing.assert_allclose(gw.array, fd, rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(w.array, w0 - 0.5)


# ============================================================================= plain loops


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_plain_loop_alternates_between_two_arrays(name: str) -> None:
    # Each step publishes the new values in an array of their own; in a plain loop the array the
    # step before replaced is free again, so two arrays alternate and no step allocates (from the
    # second step on: an array a parameter was made with that is a view is never reused).
    model = make_model()
    opt = OPTIMIZERS[name](model.parameters())
    # Weak references: a strong one would hold the array, and the step would allocate.
    seen: list[list[weakref.ref[np.ndarray]]] = [[] for _ in model.parameters()]
    for s in range(6):
        x, y = batch(s)
        opt.zero_grad()
        out = model(x)  # still alive at the step, like a loop's locals
        loss = F.mse_loss(out, y)
        loss.backward()
        grads = [p.grad for p in model.parameters()]  # holding p.grad doesn't count
        counters = [p._vc for p in model.parameters()]
        versions = [p._version for p in model.parameters()]
        before = [weakref.ref(p.array) for p in model.parameters()]
        opt.step()
        for p, arrays, vc, v, b in zip(
            model.parameters(), seen, counters, versions, before, strict=True
        ):
            assert p.array is not b()
            assert p._vc is not vc
            assert p._version == v + 1
            if s in (1, 2):
                arrays.append(weakref.ref(p.array))
            elif s > 2:
                assert p.array is arrays[(s - 1) % 2]()
        assert all(g is p.grad for g, p in zip(grads, model.parameters(), strict=True))
    for p, w in zip(model.parameters(), reference_weights(name, 6), strict=True):
        np.testing.assert_array_equal(p.array, w)


async def test_an_awaited_loop_allocates_only_while_a_request_holds_the_weights() -> None:
    model = make_model()
    opt = ag.optim.Adam(model.parameters(), lr=0.01)
    x, y = batch(0)
    await asyncio.wait_for(ag.backward(F.mse_loss(model(x), y)), TIMEOUT_S)
    opt.step()  # the spares exist from here on
    pending = F.mse_loss(model(x), y)  # holds what it saved: the second layer's weight
    for _ in range(2):
        opt.zero_grad()
        await asyncio.wait_for(ag.backward(F.mse_loss(model(x), y)), TIMEOUT_S)
        before = [weakref.ref(p.array) for p in model.parameters()]
        spares = [weakref.ref(opt._spares[p]) for p in model.parameters()]
        opt.step()
        reused = [p.array is a() for p, a in zip(model.parameters(), spares, strict=True)]
        assert all(p.array is not a() for p, a in zip(model.parameters(), before, strict=True))
    # The pending graph saved only the second layer's weight (the hidden layer's gradient needs
    # it); the first layer's weight would be needed only for the input's gradient, which x does
    # not require, and an add needs no values for its backward: that weight alone was not free.
    assert reused == [True, True, False, True]
    del pending  # the request is gone: the following steps reuse their spares again
    for _ in range(3):
        opt.zero_grad()
        await asyncio.wait_for(ag.backward(F.mse_loss(model(x), y)), TIMEOUT_S)
        spares = [weakref.ref(opt._spares[p]) for p in model.parameters()]
        opt.step()
        assert all(p.array is a() for p, a in zip(model.parameters(), spares, strict=True))


def test_retain_graph_keeps_the_saved_weights() -> None:
    # A graph kept for a second backward holds the weights: every step copies, and the second
    # backward still differentiates the forward it recorded.
    w = ag.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True)
    x = ag.tensor(np.array([0.5, 1.5, -1.0]))
    loss = (x * w * w).sum()
    opt = ag.optim.SGD([w], lr=0.1)
    loss.backward(retain_graph=True)
    first = w.grad.array.copy()
    np.testing.assert_array_equal(first, 2 * x.array * np.array([1.0, -2.0, 0.5]))
    opt.step()
    opt.zero_grad()
    loss.backward()
    np.testing.assert_array_equal(w.grad.array, first)


# ============================================================================= what holds it


def test_views_and_detached_tensors_taken_before_a_step_keep_the_old_values() -> None:
    lin = nn.Linear(3, 2).to(ag.float64)
    opt = ag.optim.SGD(lin.parameters(), lr=0.1)
    w = lin.weight
    old, version = w.array.copy(), w._version
    t, row, det, arr = w.t(), w[0], w.detach(), w.array
    w.grad = ag.ones_like(w)
    opt.step()
    assert w.array is not arr
    np.testing.assert_array_equal(w.array, old - 0.1)
    np.testing.assert_array_equal(t.array, old.T)
    np.testing.assert_array_equal(row.array, old[0])
    np.testing.assert_array_equal(det.array, old)
    np.testing.assert_array_equal(arr, old)
    assert det._version == version
    assert w._version == version + 1
    # What is taken after the step shares the new array, and a step with it held copies again.
    after = w.detach()
    assert np.shares_memory(after.array, w.array)
    opt.step()
    np.testing.assert_array_equal(after.array, old - 0.1)
    np.testing.assert_array_equal(w.array, (old - 0.1) - 0.1)


def test_state_dict_taken_before_a_step_is_what_the_weights_were() -> None:
    model = make_model()
    opt = ag.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_step(model, opt, 0)
    old = snapshot(model)
    sd = model.state_dict()  # detached tensors sharing memory with the parameters, as documented
    for p, v in zip(model.parameters(), sd.values(), strict=True):
        assert np.shares_memory(v.array, p.array)
    train_step(model, opt, 1)
    for v, w in zip(sd.values(), old, strict=True):
        np.testing.assert_array_equal(v.array, w)
    new = model.state_dict()
    for p, v in zip(model.parameters(), new.values(), strict=True):
        assert np.shares_memory(v.array, p.array)
    # Loading it back copies into the parameters' arrays, in place.
    arrays = [p.array for p in model.parameters()]
    model.load_state_dict(sd)
    for p, a, w in zip(model.parameters(), arrays, old, strict=True):
        assert p.array is a
        np.testing.assert_array_equal(p.array, w)


def test_a_parameter_made_from_a_numpy_view_never_writes_the_users_array() -> None:
    base = np.arange(8.0)
    p = ag.from_numpy(base[2:6]).requires_grad_()
    opt = ag.optim.SGD([p], lr=1.0)
    p.grad = ag.ones_like(p)
    for k in range(1, 4):
        opt.step()
        np.testing.assert_array_equal(base, np.arange(8.0))  # the user's array is left alone
        np.testing.assert_array_equal(p.array, np.arange(2.0, 6.0) - k)
        assert p.array.base is None
        assert not any(a is base or a.base is base for a in opt._spares.values())


def test_a_parameter_that_is_a_view_is_updated_in_place_in_its_base() -> None:
    base = ag.zeros(4, dtype=ag.float64)
    p = base[1:3].requires_grad_()
    assert p.is_leaf
    graph = (p * p).sum()  # saved, yet the view's base must see the update
    p.grad = ag.ones_like(p)
    ag.optim.SGD([p], lr=1.0).step()
    np.testing.assert_array_equal(base.array, [0.0, -1.0, -1.0, 0.0])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        graph.backward()


# ============================================================================= in-place ops


def test_a_users_own_inplace_op_on_saved_weights_still_raises() -> None:
    w = ag.tensor(np.array([1.0, 2.0]), requires_grad=True)
    loss = (w * w).sum()
    with ag.no_grad():
        w.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_after_a_copying_step_inplace_ops_act_on_the_new_array() -> None:
    w = ag.tensor(np.array([1.0, 2.0]), requires_grad=True)
    opt = ag.optim.SGD([w], lr=0.5)
    pending = (w * w).sum()  # recorded before the step
    w.grad = ag.ones_like(w)
    opt.step()
    recorded = (w * w * w).sum()  # recorded after it, with the new weights
    with ag.no_grad():
        w.mul_(2)  # modifies the new array only
    (g,) = ag.grad_sync(pending, [w])
    np.testing.assert_array_equal(g.array, [2.0, 4.0])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        recorded.backward()
    np.testing.assert_array_equal(w.array, [1.0, 3.0])


def test_load_state_dict_on_saved_weights_still_raises() -> None:
    model = make_model()
    loss = F.mse_loss(model(batch(0)[0]), batch(0)[1])
    model.load_state_dict(copy.deepcopy(model).state_dict())
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# ============================================================================= saved leaves


class Cube(ag.autograd.Function):
    """``w ** 3`` with ``w`` saved by the Function itself (unpacked through ctx)."""

    @staticmethod
    def forward(ctx: Any, w: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(w)
        return w * w * w

    @staticmethod
    def backward(ctx: Any, grad: ag.Tensor) -> ag.Tensor:
        (w,) = ctx.saved_tensors
        return grad * 3 * w * w


def test_a_custom_function_unpacks_the_weights_it_saved() -> None:
    w = ag.tensor(np.array([1.0, -2.0]), requires_grad=True)
    y = Cube.apply(w).sum()
    w.grad = ag.ones_like(w)
    ag.optim.SGD([w], lr=0.5).step()
    (g,) = ag.grad_sync(y, [w])
    np.testing.assert_array_equal(g.array, [3.0, 12.0])
    np.testing.assert_array_equal(w.array, [0.5, -2.5])


def test_create_graph_after_a_step_differentiates_the_old_weights_into_the_parameter() -> None:
    # L = sum((x @ w) ** 3): dL/dw = 3 x^T (x w)^2, and d sum(dL/dw) / dw = 6 x^T (r * (x w))
    # with r the row sums of x.
    x = ag.tensor(np.array([[1.0, 2.0], [0.5, -1.0], [-2.0, 0.25]]), requires_grad=True)
    w = ag.tensor(np.array([[0.5, -1.0], [1.5, 0.25]]), requires_grad=True)
    xa, w0 = x.array.copy(), w.array.copy()
    loss = ((x @ w) ** 3).sum()
    w.grad = ag.ones_like(w)
    ag.optim.Adam([w], lr=0.1).step()
    w.grad = None
    (gw,) = ag.grad_sync(loss, [w], create_graph=True)
    np.testing.assert_allclose(gw.array, 3 * xa.T @ (xa @ w0) ** 2, rtol=1e-14)
    (ggw,) = ag.grad_sync(gw.sum(), [w], retain_graph=True)
    r = xa.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(ggw.array, 6 * xa.T @ (r * (xa @ w0)), rtol=1e-14)
    # The same second derivative accumulates into the parameter's own .grad.
    gw.sum().backward(inputs=[w])
    assert w.grad is not None
    np.testing.assert_allclose(w.grad.array, ggw.array, rtol=1e-14)


# ============================================================================= in one loop


async def test_requests_and_training_share_one_loop() -> None:
    # The trainer steps the live model while clients request input gradients from it; every
    # request waits (in an async hook, mid-backward) until the trainer has stepped past the
    # weights it recorded, and still gets the gradient of those weights.
    model = make_model()
    opt = ag.optim.Adam(model.parameters(), lr=0.01)
    steps, n_steps = [0], 12
    stepped = asyncio.Condition()
    checked: list[int] = []

    async def trainer() -> None:
        for s in range(n_steps):
            x, y = batch(s)
            opt.zero_grad()
            await ag.backward(F.mse_loss(model(x), y))
            opt.step()
            async with stepped:
                steps[0] += 1
                stepped.notify_all()

    async def client(k: int) -> None:
        i = 0
        while steps[0] < n_steps:
            x, y = (t.array for t in batch(1000 + 10 * k + i))
            recorded_at, weights = steps[0], snapshot(model)
            xt = ag.tensor(x, requires_grad=True)
            hidden = model[1](model[0](xt))

            async def wait_for_a_step(grad: ag.Tensor, at: int = recorded_at) -> None:
                async with stepped:
                    await stepped.wait_for(lambda: steps[0] > at)

            hidden.register_hook(wait_for_a_step)
            loss = F.mse_loss(model[2](hidden), ag.tensor(y))
            (gx,) = await ag.grad(loss, [xt], priority=1)
            assert steps[0] > recorded_at
            np.testing.assert_array_equal(gx.array, reference_grads(weights, x, y)[0])
            checked.append(k)
            i += 1

    async with asyncio.timeout(TIMEOUT_S), asyncio.TaskGroup() as tg:
        for k in range(3):
            tg.create_task(client(k))
        tg.create_task(trainer())
    assert sorted(set(checked)) == [0, 1, 2]
    assert len(checked) >= 3
    for p, w in zip(model.parameters(), reference_weights("adam", n_steps), strict=True):
        np.testing.assert_array_equal(p.array, w)
