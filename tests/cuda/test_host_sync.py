"""An awaited backward pass on a CUDA device never blocks the event loop's thread on the device:
no rule reads device values on the host (prod's zeros are counted on the device) and anomaly
mode's NaN check is read off the loop (NOTE [Host synchronisations] in the simulator makes any
host wait on the loop's thread an error here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime
from asyncgrad.nn import functional as F

DEVICE = "cuda:0"


@pytest.fixture
def no_host_sync() -> Callable[[], Any]:
    """``with no_host_sync():`` forbids host waits on this thread (the simulator's check)."""
    if not runtime.simulated():
        pytest.skip("needs the simulated device's host-wait check (ASYNCGRAD_SIM_CUDA=N)")
    from asyncgrad.backend import sim

    return sim.forbid_host_sync


def _leaf(shape: tuple[int, ...], seed: int, zeros: int = 0) -> ag.Tensor:
    values = np.random.default_rng(seed).uniform(0.5, 1.5, shape)
    values.reshape(-1)[:zeros] = 0.0
    return ag.tensor(values, device=DEVICE, requires_grad=True)


def _prod_cases(x: ag.Tensor) -> list[ag.Tensor]:
    return [x.prod(), x.prod(dim=1), x.prod(dim=0, keepdim=True)]


def _graph(zeros: int) -> tuple[ag.Tensor, list[ag.Tensor]]:
    """A loss over many ops; ``zeros`` elements of the prod's input are 0."""
    x = _leaf((4, 6), 1)
    w = _leaf((6, 5), 2)
    p = _leaf((3, 4), 3, zeros)
    img = _leaf((2, 2, 6, 6), 4)
    k = _leaf((3, 2, 3, 3), 5)
    target = ag.tensor([0, 4, 2, 1], device=DEVICE)
    h = (x @ w).tanh()
    loss = F.cross_entropy(h, target) + h.softmax(-1).max(dim=1).values.sum()
    loss = loss + h[ag.tensor([3, 0, 0], device=DEVICE)].mean() + h[:, 1:3].var()
    loss = loss + ag.gather(h, 1, ag.tensor([[1], [0], [4], [2]], device=DEVICE)).sum()
    loss = loss + (h.sort(dim=1).values * h.relu()).sum() + h.logsumexp(1).sum()
    masked = h * 1.0
    masked[h < -0.5] = 0.0  # boolean masks: the forward reads them, the backward must not
    loss = (
        loss
        + masked[h > 0.2].sum()
        + masked[ag.tensor([[True], [False], [True], [True]], device=DEVICE).expand(4, 5)].prod()
    )
    loss = loss + sum(t.sum() for t in _prod_cases(p))
    conv = F.conv2d(img, k, padding=1)
    loss = loss + F.max_pool2d(conv, 2).sum() + F.avg_pool2d(conv, 2).pow(2).sum()
    return loss, [x, w, p, img, k]


async def _prod_grads_on_cpu(zeros: int) -> np.ndarray:
    p = ag.tensor(_leaf((3, 4), 3, zeros).detach().cpu().numpy(), requires_grad=True)
    (g,) = await ag.grad(sum(t.sum() for t in _prod_cases(p)), [p])
    return g.numpy()


@pytest.mark.parametrize("zeros", [0, 1, 2], ids=["no zero", "one zero", "two zeros"])
async def test_an_awaited_backward_does_not_synchronise(
    zeros: int, no_host_sync: Callable[[], Any]
) -> None:
    loss, inputs = _graph(zeros)
    with no_host_sync():
        grads = await ag.grad(loss, inputs)
    for g, t in zip(grads, inputs, strict=True):
        assert g.device == t.device
        assert np.isfinite(g.cpu().numpy()).all()
    np.testing.assert_allclose(grads[2].cpu().numpy(), await _prod_grads_on_cpu(zeros), rtol=1e-12)


async def test_anomaly_mode_does_not_synchronise_and_names_the_node(
    no_host_sync: Callable[[], Any],
) -> None:
    x = _leaf((3,), 1)
    with ag.autograd.detect_anomaly():
        y = (x * 2).sqrt().sum()
        with no_host_sync():
            (g,) = await ag.grad(y, [x])
        np.testing.assert_allclose(g.cpu().numpy(), 1 / np.sqrt(2 * x.detach().cpu().numpy()))
        leaf = ag.tensor([-1.0, 4.0], device=DEVICE, requires_grad=True)
        bad = (leaf * 1.0).sqrt().sum()
        with (
            no_host_sync(),
            pytest.raises(
                RuntimeError, match="Function 'SqrtBackward0' returned nan values in its 0th output"
            ) as info,
        ):
            await ag.grad(bad, [leaf])
    notes = info.value.__notes__
    assert "(raised while computing the backward of SqrtBackward0)" in notes
    assert any(n.startswith("Error detected in SqrtBackward0. Traceback of forward") for n in notes)


def test_anomaly_mode_still_raises_at_once_without_a_loop() -> None:
    with ag.autograd.detect_anomaly():
        x = ag.tensor([-1.0, 4.0], device=DEVICE, requires_grad=True)
        with (
            pytest.raises(RuntimeError, match="'SqrtBackward0' returned nan values"),
        ):
            x.sqrt().sum().backward()


PROD_INPUTS = {
    "no zero": [],
    "one zero": [(1, 2)],
    "two zeros in a row": [(1, 0), (1, 3)],
    "zeros in two rows": [(0, 1), (2, 2)],
}


@pytest.mark.parametrize("device", [DEVICE, "cpu"])
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("zeros", list(PROD_INPUTS))
def test_prod_gradients_are_torchs(zeros: str, dim: int | None, device: str) -> None:
    """The device's branch-free rule gives the CPU's and torch's gradients, first and second
    order, and the central differences of the (multilinear) product. (With dim=None and several
    zeros the rule returns 0 without a graph, as torch does without create_graph; torch's
    create_graph gives the products of the others instead, so no second order there.)"""
    xn = np.random.default_rng(0).uniform(-2.0, 2.0, (3, 4))
    for at in PROD_INPUTS[zeros]:
        xn[at] = 0.0
    cn = np.random.default_rng(1).standard_normal(12)

    def f(a: np.ndarray) -> float:
        p = a.prod() if dim is None else a.prod(axis=dim, keepdims=True)
        return float((np.broadcast_to(p, (3, 4)) * cn.reshape(3, 4)).sum())

    x = ag.tensor(xn, device=device, requires_grad=True)
    c = ag.tensor(cn.reshape(3, 4), device=device)
    p = x.prod() if dim is None else x.prod(dim, keepdim=True)
    (g,) = ag.grad((p.expand(3, 4) * c).sum(), [x], create_graph=True)
    second = dim is not None or len(PROD_INPUTS[zeros]) < 2
    gg = ag.grad((g * c).sum(), [x])[0] if second else None
    eps = 1e-6
    fd = np.zeros_like(xn)
    for i in np.ndindex(xn.shape):
        up, down = xn.copy(), xn.copy()
        up[i] += eps
        down[i] -= eps
        fd[i] = (f(up) - f(down)) / (2 * eps)
    np.testing.assert_allclose(g.detach().cpu().numpy(), fd, rtol=1e-7, atol=1e-8)
    torch = pytest.importorskip("torch")
    tx = torch.tensor(xn, requires_grad=True)
    tc = torch.tensor(cn.reshape(3, 4))
    tp = tx.prod() if dim is None else tx.prod(dim, keepdim=True)
    (tg,) = torch.autograd.grad((tp.expand(3, 4) * tc).sum(), [tx], create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tc).sum(), [tx])
    np.testing.assert_allclose(g.detach().cpu().numpy(), tg.detach().numpy(), rtol=1e-12)
    if gg is not None:
        np.testing.assert_allclose(gg.cpu().numpy(), tgg.numpy(), rtol=1e-12, atol=1e-15)
