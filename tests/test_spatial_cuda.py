"""The family's functions on a CUDA device (the simulated one by default, a real GPU with
ASYNCGRAD_SIM_CUDA=0): forward and backward against the CPU, in float64."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime

F = ag.nn.functional
pytestmark = pytest.mark.cuda
RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _needs_cuda() -> Iterator[None]:
    if not ag.cuda.is_available():
        pytest.skip(f"no CUDA device: {runtime.why()}")
    if not runtime.simulated():
        yield
        return
    from asyncgrad.backend import sim

    sim.configure(check_order=True)
    try:
        yield
    finally:
        sim.configure(check_order=False)


def _run(
    fn: Callable[..., ag.Tensor], arrays: list[np.ndarray[Any, Any]], device: str
) -> list[Any]:
    leaves = [ag.tensor(a, device=device, requires_grad=True) for a in arrays]
    y = fn(*leaves)
    y = y[0] if isinstance(y, tuple) else y
    weights = np.linspace(-1.0, 1.0, int(np.prod(y.shape))).reshape(y.shape)
    (y * ag.tensor(weights, device=device)).sum().backward()
    return [y.cpu().numpy(force=True)] + [t.grad.cpu().numpy() for t in leaves]  # type: ignore[union-attr]


def distinct(*shape: int) -> np.ndarray[Any, Any]:
    return RNG.permutation(np.linspace(-2.0, 2.0, int(np.prod(shape)))).reshape(shape)


SAMPLES = RNG.random((1, 2, 2))
CASES: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    "conv3d": (
        lambda x, w: F.conv3d(x, w, padding=1, groups=2),
        [(1, 2, 3, 4, 3), (4, 1, 2, 2, 2)],
    ),
    "conv_transpose2d": (
        lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1),
        [(1, 2, 3, 3), (2, 3, 2, 2)],
    ),
    "conv_transpose3d": (
        lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=1),
        [(1, 2, 2, 3, 2), (2, 1, 3, 2, 2)],
    ),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2, 1, 1, return_indices=True), [(1, 2, 3, 4, 3)]),
    "max_pool1d_minus_inf": (lambda x: F.max_pool1d(x - 1e300 * 1e300, 3, 1, 1), [(1, 2, 5)]),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 2, 2, 1, True, False), [(1, 2, 3, 4, 5)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [(1, 2, 5, 4)]),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (3, 2), True), [(1, 2, 5, 4)]),
    "fractional_max_pool2d": (
        lambda x: F.fractional_max_pool2d(
            x, 2, (3, 3), _random_samples=ag.tensor(SAMPLES, device=x.device)
        ),
        [(1, 2, 5, 6)],
    ),
    "unfold": (lambda x: F.unfold(x, 2, padding=1, stride=2), [(1, 2, 4, 5)]),
    "fold": (lambda x: F.fold(x, (3, 4), 2), [(1, 8, 6)]),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), [(1, 8, 2, 3)]),
    "grid_sample": (
        lambda x, g: F.grid_sample(x, g * 0.9, "bicubic", "reflection", False),
        [(1, 2, 3, 4), (1, 2, 2, 2)],
    ),
    "affine_grid": (lambda t: F.affine_grid(t, (1, 1, 3, 4), align_corners=False), [(1, 2, 3)]),
    "interpolate_bicubic": (
        lambda x: F.interpolate(x, scale_factor=1.7, mode="bicubic"),
        [(1, 2, 3, 4)],
    ),
    "interpolate_area": (lambda x: F.interpolate(x, size=(2, 3), mode="area"), [(1, 2, 5, 4)]),
    "local_response_norm": (lambda x: F.local_response_norm(x, 3), [(1, 4, 2, 3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_the_cpu(name: str) -> None:
    fn, shapes = CASES[name]
    arrays = [distinct(*s) for s in shapes]
    want = _run(fn, arrays, "cpu")
    got = _run(fn, arrays, "cuda")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_max_unpool_and_modules_on_the_device() -> None:
    x = ag.tensor(distinct(1, 2, 4, 4), device="cuda")
    y, i = F.max_pool2d(x, 2, return_indices=True)
    out = ag.nn.MaxUnpool2d(2)(y, i)
    assert out.device.type == "cuda"
    np.testing.assert_array_equal(out.cpu().numpy(), F.max_unpool2d(y.cpu(), i.cpu(), 2).numpy())
    conv = ag.nn.Conv3d(2, 3, 2, padding=1, padding_mode="circular", device="cuda").double()
    assert conv(ag.tensor(distinct(1, 2, 3, 3, 3), device="cuda")).device.type == "cuda"
