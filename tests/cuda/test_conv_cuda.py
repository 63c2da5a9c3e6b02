"""conv1d, conv2d, max_pool2d and avg_pool2d on a CUDA device: forward and backward against the
CPU, in float64. Their sliding windows are a strided view of the input (``backend.windows``),
made by the device array module's ``lib.stride_tricks.as_strided``, whose signature is CuPy's
``(x, shape=None, strides=None)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.nn.functional as F

# Products and sums in another order than the CPU's (a GPU's BLAS, FMA) differ in the last bits.
RTOL = 1e-10
ATOL = 1e-12


def _run(fn: Callable[..., ag.Tensor], arrays: list[np.ndarray], device: str) -> list[np.ndarray]:
    """``fn`` of leaves made of ``arrays`` on ``device``, then the gradients of the sum of its
    output weighted by a fixed pattern: the output and each leaf's gradient, on the host."""
    leaves = [ag.tensor(a, device=device, requires_grad=True) for a in arrays]
    y = fn(*leaves)
    weights = np.linspace(-1.0, 1.0, int(np.prod(y.shape))).reshape(y.shape)
    (y * ag.tensor(weights, device=device)).sum().backward()
    return [y.cpu().numpy(force=True)] + [t.grad.cpu().numpy() for t in leaves]  # type: ignore[union-attr]


CASES: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b), [(2, 3, 7, 6), (4, 3, 3, 2), (4,)]),
    "conv2d_strided_padded_dilated": (
        lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2)),
        [(2, 2, 8, 9), (3, 2, 3, 3)],
    ),
    "conv2d_groups": (lambda x, w: F.conv2d(x, w, groups=2), [(1, 4, 5, 5), (6, 2, 2, 2)]),
    "conv1d": (
        lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
        [(2, 3, 11), (5, 3, 3), (5,)],
    ),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(2, 3, 6, 8)]),
    "max_pool2d_strided_padded": (
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=1),
        [(1, 2, 7, 7)],
    ),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), [(2, 3, 6, 8)]),
    "avg_pool2d_strided_padded": (
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
        [(1, 2, 7, 7)],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_forward_and_backward_on_cuda_match_the_cpu(name: str) -> None:
    fn, shapes = CASES[name]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(shape) for shape in shapes]
    expected = _run(fn, arrays, "cpu")
    got = _run(fn, arrays, "cuda:0")
    names = ["output", *(f"grad of input {i}" for i in range(len(arrays)))]
    for what, g, e in zip(names, got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, err_msg=f"{name}: {what}")
