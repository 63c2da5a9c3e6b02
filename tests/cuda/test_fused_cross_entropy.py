"""F.cross_entropy of class indices on a CUDA device: three kernels (NOTE [One cross entropy in
three kernels] in asyncgrad/backend/kernels.py), the same loss and gradients as the composition
``nll_loss(log_softmax(x, 1), t)`` on the CPU, nothing read on the host."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.nn import functional as F
from tests.cuda.conftest import assert_close, host

DEVICE = "cuda:0"


def _close(actual: Any, desired: Any, dt: str) -> None:
    a = host(actual) if isinstance(actual, ag.Tensor) else np.asarray(actual)
    if dt == "float32":
        assert_close(a, desired, rtol=2e-5, atol=2e-6)
    else:
        assert_close(a, desired, rtol=1e-10, atol=1e-13)


def _reference(z: np.ndarray, t: np.ndarray, w: Any, **kw: Any) -> tuple[float, np.ndarray]:
    """The composition on the CPU (checked against torch elsewhere)."""
    x = ag.tensor(z, requires_grad=True)
    weight = None if w is None else ag.tensor(w)
    loss = F.nll_loss(F.log_softmax(x, 1), ag.tensor(t), weight=weight, **kw)
    loss.backward()
    assert x.grad is not None
    return loss.item(), x.grad.numpy()


def _fused(z: np.ndarray, t: np.ndarray, w: Any, **kw: Any) -> tuple[ag.Tensor, ag.Tensor]:
    x = ag.tensor(z, device=DEVICE, requires_grad=True)
    weight = None if w is None else ag.tensor(w, device=DEVICE)
    loss = F.cross_entropy(x, ag.tensor(t, device=DEVICE), weight=weight, **kw)
    assert type(loss.grad_fn).__name__ == "CrossEntropyBackward0"
    loss.backward()
    assert x.grad is not None
    return loss, x.grad


CASES = {
    "small": (6, 5, "float64", "int64"),
    "wide rows (c > a block)": (300, 1000, "float64", "int64"),
    "one class": (4, 1, "float64", "int64"),
    "float32, int32 targets": (64, 10, "float32", "int32"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True], ids=["", "weighted"])
@pytest.mark.parametrize("ignored", [False, True], ids=["", "ignored"])
def test_matches_the_composition(case: str, reduction: str, weighted: bool, ignored: bool) -> None:
    n, c, dt, it = CASES[case]
    rng = np.random.default_rng(n * c)
    z = (3 * rng.standard_normal((n, c))).astype(dt)
    t = rng.integers(0, c, n).astype(it)
    w = rng.uniform(0.5, 2.0, c).astype(dt) if weighted else None
    kw: dict[str, Any] = {"reduction": reduction}
    if ignored:
        kw["ignore_index"] = int(t[0])  # every row of that class is ignored
    want_loss, want_grad = _reference(z, t, w, **kw)
    loss, grad = _fused(z, t, w, **kw)
    _close(loss, want_loss, dt)
    _close(grad, want_grad, dt)


@pytest.mark.parametrize("bad", [5, -1, 2**40])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_a_target_out_of_range_makes_loss_and_every_gradient_nan(bad: int, reduction: str) -> None:
    z = np.arange(15.0).reshape(3, 5) / 7
    t = np.array([1, bad, 0])
    loss, grad = _fused(z, t, None, reduction=reduction)
    assert np.isnan(loss.item())
    assert np.isnan(host(grad)).all()


def test_every_target_ignored() -> None:
    z = np.arange(6.0).reshape(2, 3)
    t = np.array([2, 2])
    loss, grad = _fused(z, t, None, ignore_index=2)
    assert np.isnan(loss.item())  # 0 / 0, as torch's mean
    np.testing.assert_array_equal(host(grad), np.zeros((2, 3)))  # ignored rows send 0
    loss, grad = _fused(z, t, None, ignore_index=2, reduction="sum")
    assert loss.item() == 0.0
    np.testing.assert_array_equal(host(grad), np.zeros((2, 3)))


def test_an_empty_batch() -> None:
    loss, grad = _fused(np.zeros((0, 4)), np.zeros(0, np.int64), None)
    assert np.isnan(loss.item())
    assert grad.shape == (0, 4)


def test_special_values_as_the_composition() -> None:
    nan, inf = float("nan"), float("inf")
    z = np.array([[nan, 0.0, -1.0], [-inf, -0.5, 1.0], [0.5, inf, -2.0], [-1.0, -inf, -inf]])
    t = np.array([1, 0, 1, 2])
    want_loss, want_grad = _reference(z, t, None)
    loss, grad = _fused(z, t, None)
    np.testing.assert_array_equal(np.isnan(loss.item()), np.isnan(want_loss))
    np.testing.assert_allclose(host(grad), want_grad, equal_nan=True)


def test_second_order_matches_the_composition() -> None:
    rng = np.random.default_rng(7)
    z = rng.standard_normal((5, 4))
    t = np.array([0, 3, 1, 1, 2])
    w = rng.uniform(0.5, 2.0, 4)
    results = []
    for device, fn in (
        ("cpu", lambda x, tt, ww: F.nll_loss(F.log_softmax(x, 1), tt, weight=ww)),
        (DEVICE, lambda x, tt, ww: F.cross_entropy(x, tt, weight=ww)),
    ):
        x = ag.tensor(z, device=device, requires_grad=True)
        loss = fn(x, ag.tensor(t, device=device), ag.tensor(w, device=device))
        (g,) = ag.autograd.grad(loss, x, create_graph=True)
        (g * g).sum().backward()
        assert x.grad is not None
        results.append(host(x.grad))
    _close(results[1], results[0], "float64")


def test_changing_the_logits_in_place_before_backward_raises() -> None:
    x = ag.tensor(np.ones((2, 3)), device=DEVICE, requires_grad=True)
    z = x * 2
    loss = F.cross_entropy(z, ag.tensor([0, 2], device=DEVICE))
    z.add_(1.0)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation"):
        loss.backward()


def test_a_strided_batch_takes_the_composition() -> None:
    rng = np.random.default_rng(3)
    z = rng.standard_normal((5, 4))
    x = ag.tensor(z.T.copy(), device=DEVICE, requires_grad=True)
    loss = F.cross_entropy(x.t(), ag.tensor([0, 3, 1, 1, 2], device=DEVICE))
    assert type(loss.grad_fn).__name__ == "NllLossBackward0"
    loss.backward()
    want_loss, want_grad = _reference(z, np.array([0, 3, 1, 1, 2]), None)
    _close(loss, want_loss, "float64")
    assert x.grad is not None
    _close(x.grad.t(), want_grad, "float64")


def test_three_kernels_and_no_host_sync() -> None:
    from asyncgrad.backend import cuda as runtime

    if not runtime.simulated():
        pytest.skip("counts are the simulated device's")
    from asyncgrad.backend import sim

    x = ag.tensor(np.ones((8, 3), np.float32), device=DEVICE, requires_grad=True)
    t = ag.tensor(np.array([0, 1, 2, 0, 1, 2, 0, 1]), device=DEVICE)
    F.cross_entropy(x, t).backward()  # compiles (on a GPU) and warms up
    ag.cuda.synchronize()
    x.grad = None
    with sim.count_device_work() as counts:
        F.cross_entropy(x, t).backward()
        ag.cuda.synchronize()
    kernels = {k: v for k, v in counts.launches.items() if k.startswith("ce_")}
    assert kernels == {"ce_rows": 1, "ce_total": 1, "ce_grad": 1}
    assert counts.kernels <= 4, dict(counts.launches)  # and the seed's fill
    assert [site for site in counts.host_syncs if "synchronize" not in site[0]] == []
