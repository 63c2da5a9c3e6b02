"""BatchNorm1d/2d, InstanceNorm2d and GroupNorm against torch, with torch's weights and buffers
copied in: outputs, gradients, running statistics over several steps, eval mode, state_dict
keys; and without torch, closed forms."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

RNG = np.random.default_rng(2)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for the norm layers")


def _copy_from(torch_module: Any, module: nn.Module) -> None:
    module.load_state_dict({k: ag.tensor(v.numpy()) for k, v in torch_module.state_dict().items()})


CASES = [
    ("BatchNorm1d", (3,), {}, (5, 3)),
    ("BatchNorm1d", (3,), {"momentum": None}, (4, 3, 6)),
    ("BatchNorm1d", (3,), {"affine": False, "momentum": 0.3}, (4, 3)),
    ("BatchNorm2d", (3,), {"eps": 1e-3}, (4, 3, 2, 5)),
    ("BatchNorm2d", (3,), {"track_running_stats": False}, (4, 3, 2, 5)),
    ("BatchNorm2d", (3,), {"bias": False}, (2, 3, 3, 3)),
    ("InstanceNorm2d", (3,), {}, (4, 3, 2, 5)),
    ("InstanceNorm2d", (3,), {"affine": True, "track_running_stats": True}, (4, 3, 2, 5)),
    ("InstanceNorm2d", (3,), {"affine": True}, (3, 4, 5)),  # unbatched
    ("GroupNorm", (2, 4), {}, (3, 4, 5, 2)),
    ("GroupNorm", (1, 4), {"affine": False}, (3, 4, 5)),
]


@pytest.mark.parametrize(("name", "args", "kwargs", "shape"), CASES)
def test_norm_layers_match_torch(
    torch: Any, name: str, args: tuple[int, ...], kwargs: dict[str, Any], shape: tuple[int, ...]
) -> None:
    tm = getattr(torch.nn, name)(*args, **kwargs).double()
    am = getattr(nn, name)(*args, **kwargs).double()
    assert list(am.state_dict()) == list(tm.state_dict())
    assert repr(am) == repr(tm)
    if tm.weight is not None:  # non-trivial affine parameters
        with torch.no_grad():
            tm.weight.copy_(torch.tensor(RNG.standard_normal(tuple(tm.weight.shape))))
            if tm.bias is not None:
                tm.bias.copy_(torch.tensor(RNG.standard_normal(tuple(tm.bias.shape))))
    _copy_from(tm, am)
    for _ in range(3):  # training steps: outputs, gradients and running statistics
        x = RNG.standard_normal(shape) * 2 + 1
        g = RNG.standard_normal(shape)
        xa, xt = ag.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        oa, ot = am(xa), tm(xt)
        oa.backward(ag.tensor(g))
        ot.backward(torch.tensor(g))
        np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), atol=1e-12)
        np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), atol=1e-12)
        for (n, pa), pt in zip(am.named_parameters(), tm.parameters(), strict=True):
            np.testing.assert_allclose(pa.grad.numpy(), pt.grad.numpy(), atol=1e-12, err_msg=n)
        for k, v in tm.state_dict().items():
            got = am.state_dict()[k]
            assert got.dtype == ag.tensor(v.numpy()).dtype, k
            np.testing.assert_allclose(got.numpy(), v.numpy(), atol=1e-12, err_msg=k)
    am.eval()
    tm.eval()
    x = RNG.standard_normal(shape)
    np.testing.assert_allclose(
        am(ag.tensor(x)).detach().numpy(), tm(torch.tensor(x)).detach().numpy(), atol=1e-12
    )


def test_batch_norm_closed_form_and_running_stats() -> None:
    bn = nn.BatchNorm1d(2, momentum=0.5).double()
    x = np.array([[1.0, 10.0], [3.0, 20.0], [5.0, 60.0]])
    out = bn(ag.tensor(x)).detach().numpy()
    mean, var = x.mean(0), x.var(0)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5))
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.5 * mean)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.5 + 0.5 * x.var(0, ddof=1))
    assert bn.num_batches_tracked.item() == 1
    assert bn.num_batches_tracked.dtype == ag.int64
    bn.eval()
    out = bn(ag.tensor(x)).detach().numpy()
    rm, rv = 0.5 * mean, 0.5 + 0.5 * x.var(0, ddof=1)
    np.testing.assert_allclose(out, (x - rm) / np.sqrt(rv + 1e-5))
    assert bn.num_batches_tracked.item() == 1  # eval does not count batches


def test_batch_norm_gradient_by_finite_differences() -> None:
    x = ag.tensor(RNG.standard_normal((4, 3, 2)), requires_grad=True)
    w = ag.tensor(RNG.standard_normal(3), requires_grad=True)
    b = ag.tensor(RNG.standard_normal(3), requires_grad=True)
    assert ag.autograd.gradcheck(
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), (x, w, b)
    )
    assert ag.autograd.gradcheck(lambda x, w, b: F.group_norm(x, 3, w, b), (x, w, b))


def test_to_dtype_keeps_num_batches_tracked_an_integer() -> None:
    bn = nn.BatchNorm2d(2).to(ag.float64)
    assert bn.running_mean.dtype == ag.float64
    assert bn.num_batches_tracked.dtype == ag.int64


def test_norm_errors() -> None:
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(ag.zeros(1, 3, 4, 5))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nn.BatchNorm2d(3)(ag.zeros(1, 3, 4))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        nn.BatchNorm1d(3)(ag.zeros(1, 3))
    with pytest.raises(RuntimeError, match="expected input with 3 channels"):
        nn.BatchNorm2d(3)(ag.zeros(2, 4, 2, 2))
    with pytest.raises(ValueError, match="num_channels must be divisible by num_groups"):
        nn.GroupNorm(3, 4)
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        nn.InstanceNorm2d(3)(ag.zeros(3, 4))


def test_batch_norm_eval_without_running_stats_uses_batch_stats() -> None:
    bn = nn.BatchNorm1d(2, track_running_stats=False).double().eval()
    x = np.array([[1.0, 2.0], [3.0, 6.0]])
    out = bn(ag.tensor(x)).detach().numpy()
    np.testing.assert_allclose(out, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5))
