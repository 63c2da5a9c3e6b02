"""The norm layers, recurrent layers, TransformerEncoderLayer, F.interpolate, module backward
hooks and the RMSprop/Adagrad/Adadelta optimizers on a CUDA device: the same outputs,
gradients, running statistics and updates as on the CPU (float64)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F
from tests.cuda.conftest import assert_close, host

RNG = np.random.default_rng(11)

MODULES: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), (4, 3, 2, 5)),
    "BatchNorm1d_cumulative": (lambda: nn.BatchNorm1d(3, momentum=None), (4, 3)),
    "InstanceNorm2d": (
        lambda: nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
        (2, 3, 4, 4),
    ),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), (3, 4, 5)),
    "LSTM": (lambda: nn.LSTM(4, 3, num_layers=2, bidirectional=True), (5, 2, 4)),
    "GRU": (lambda: nn.GRU(4, 3, batch_first=True), (2, 5, 4)),
    "TransformerEncoderLayer": (
        lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0),
        (5, 2, 8),
    ),
    "Upsample_bilinear": (lambda: nn.Upsample(scale_factor=1.5, mode="bilinear"), (1, 2, 3, 4)),
}


def _first(out: Any) -> ag.Tensor:
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", MODULES)
def test_module_on_cuda_matches_the_cpu(name: str) -> None:
    make, shape = MODULES[name]
    cpu = make().double()
    dev = copy.deepcopy(cpu).to("cuda:0")
    for _ in range(2):
        x = RNG.standard_normal(shape)
        xc = ag.tensor(x, requires_grad=True)
        xd = ag.tensor(x, device="cuda:0", requires_grad=True)
        oc, od = _first(cpu(xc)), _first(dev(xd))
        assert od.device == ag.device("cuda:0")
        w = RNG.standard_normal(tuple(oc.shape))
        (oc * ag.tensor(w)).sum().backward()
        (od * ag.tensor(w, device="cuda:0")).sum().backward()
        assert_close(host(od), oc.detach().numpy(), rtol=1e-10, atol=1e-12)
        assert_close(host(xd.grad), xc.grad.numpy(), rtol=1e-10, atol=1e-12)
        for (n, pc), pd in zip(cpu.named_parameters(), dev.parameters(), strict=True):
            assert_close(host(pd.grad), pc.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=n)
    for (n, bc), bd in zip(cpu.named_buffers(), dev.buffers(), strict=True):
        assert bd.device == ag.device("cuda:0")
        assert bd.dtype == bc.dtype
        assert_close(host(bd), bc.numpy(), rtol=1e-10, atol=1e-12, err_msg=n)


def test_interpolate_nearest_and_linear_on_cuda() -> None:
    x = RNG.standard_normal((2, 3, 7))
    for kw in ({"scale_factor": 2}, {"size": 11, "mode": "linear", "align_corners": True}):
        out = F.interpolate(ag.tensor(x, device="cuda:0"), **kw)
        assert_close(host(out), F.interpolate(ag.tensor(x), **kw).numpy())


def test_backward_hooks_on_cuda() -> None:
    lin = nn.Linear(3, 2).double().to("cuda:0")
    seen: list[Any] = []
    lin.register_full_backward_hook(lambda m, gi, go: (seen.append(gi[0].device), (gi[0] * 2,))[1])
    x = ag.tensor(RNG.standard_normal((4, 3)), device="cuda:0", requires_grad=True)
    lin(x).sum().backward()
    assert seen == [ag.device("cuda:0")]
    expected = 2 * np.ones((4, 2)) @ host(lin.weight)
    assert_close(host(x.grad), expected)


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad", "Adadelta"])
def test_optimizers_on_cuda_match_the_cpu(name: str) -> None:
    w0 = RNG.standard_normal((3, 2))
    pc = ag.tensor(w0, requires_grad=True)
    pd = ag.tensor(w0, device="cuda:0", requires_grad=True)
    kw = {"RMSprop": {"momentum": 0.5, "centered": True}, "Adagrad": {"lr_decay": 0.1}}
    oc = getattr(ag.optim, name)([pc], **kw.get(name, {}))
    od = getattr(ag.optim, name)([pd], **kw.get(name, {}))
    for _ in range(3):
        g = RNG.standard_normal((3, 2))
        pc.grad = ag.tensor(g)
        pd.grad = ag.tensor(g, device="cuda:0")
        oc.step()
        od.step()
    assert pd.device == ag.device("cuda:0")
    assert_close(host(pd), pc.detach().numpy(), rtol=1e-12)
