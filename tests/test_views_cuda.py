"""The H3 family (views, joins, scatter, index_*) on a CUDA device (the simulated one unless
ASYNCGRAD_SIM_CUDA=0): the same values and gradients as on the CPU."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from tests.test_index_scatter import CASES as SCATTER_CASES
from tests.test_views_ops import CASES as VIEW_CASES
from tests.test_views_ops import flat_outputs

pytestmark = pytest.mark.cuda

CASES = {k: v for k, v in {**VIEW_CASES, **SCATTER_CASES}.items() if v[1]}  # with inputs


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")


def _run(name: str, device: str) -> tuple[list[Any], list[Any]]:
    fn, arrays = CASES[name]
    ins = [
        ag.tensor(a, device=device, requires_grad=a.dtype.kind == "f")
        if isinstance(a, np.ndarray)
        else a
        for a in arrays
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        outs = [o for o in flat_outputs(fn(ag, *ins)) if isinstance(o, ag.Tensor)]
    wants = [t for t in ins if isinstance(t, ag.Tensor) and t.requires_grad]
    diff = [o for o in outs if o.requires_grad]
    grads: list[Any] = []
    if wants and diff:
        loss = sum(((o * (k + 1.5)).sum() for k, o in enumerate(diff)), ag.zeros((), device=device))
        grads = list(ag.autograd.grad_sync(loss, wants, allow_unused=True))
    return outs, grads


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_matches_cpu(name: str) -> None:
    cpu_out, cpu_grad = _run(name, "cpu")
    gpu_out, gpu_grad = _run(name, "cuda")
    for a, b in zip(cpu_out, gpu_out, strict=True):
        assert b.device.type == "cuda"
        np.testing.assert_allclose(a.detach().numpy(), b.detach().cpu().numpy(), rtol=1e-6)
    for a, b in zip(cpu_grad, gpu_grad, strict=True):
        if a is None:
            assert b is None
            continue
        np.testing.assert_allclose(a.numpy(), b.cpu().numpy(), rtol=1e-6, atol=1e-12)
