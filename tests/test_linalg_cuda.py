"""The matrix products, linalg functions and windows on a CUDA device (simulated by default)
agree with the CPU, values and gradients, and keep their results on the device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from tests.cuda.conftest import assert_close

pytestmark = pytest.mark.cuda

RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device")


def _sq(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape) + 3 * np.eye(shape[-1])


def _lu_parts(a: Any) -> Any:
    return ag.linalg.lu(a)[1:]


FUNCTIONS: dict[str, tuple[Callable[..., Any], list[np.ndarray]]] = {
    "addmm": (
        lambda i, a, b: ag.addmm(i, a, b, beta=0.5, alpha=2.0),
        [RNG.standard_normal((2, 4)), RNG.standard_normal((2, 3)), RNG.standard_normal((3, 4))],
    ),
    "baddbmm": (ag.baddbmm, [RNG.standard_normal(s) for s in ((2, 2, 2), (2, 2, 3), (2, 3, 2))]),
    "kron": (ag.kron, [RNG.standard_normal((2, 2)), RNG.standard_normal((3,))]),
    "tensordot": (ag.tensordot, [RNG.standard_normal((2, 3, 4)), RNG.standard_normal((3, 4))]),
    "cross": (ag.linalg.cross, [RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))]),
    "matrix_exp": (ag.linalg.matrix_exp, [RNG.standard_normal((2, 3, 3))]),
    "pinv": (ag.linalg.pinv, [RNG.standard_normal((4, 3))]),
    "matrix_power": (lambda a: ag.linalg.matrix_power(a, -2), [_sq(3, 3)]),
    "lu_factor": (lambda a: ag.linalg.lu_factor(a)[0], [RNG.standard_normal((2, 3, 3))]),
    "lu": (_lu_parts, [RNG.standard_normal((4, 3))]),
    "lu_solve": (
        lambda a, b: ag.linalg.lu_solve(*ag.linalg.lu_factor(a), b),
        [_sq(3, 3), RNG.standard_normal((3, 2))],
    ),
    "solve_triangular": (
        lambda a, b: ag.linalg.solve_triangular(a, b, upper=True),
        [_sq(2, 3, 3), RNG.standard_normal((2, 3, 1))],
    ),
    "householder_product": (
        ag.linalg.householder_product,
        [RNG.standard_normal((4, 3)), RNG.uniform(1.0, 2.0, (3,))],
    ),
    "vander": (lambda x: ag.linalg.vander(x, N=4), [RNG.standard_normal((2, 3))]),
    "lstsq": (
        lambda a, b: ag.linalg.lstsq(a, b).solution,
        [RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2))],
    ),
}


def _run(fn: Callable[..., Any], arrays: list[np.ndarray], device: str) -> tuple[Any, Any]:
    xs = [ag.tensor(a, dtype=ag.float64, device=device, requires_grad=True) for a in arrays]
    outs = fn(*xs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    loss = sum((o * o).sum() for o in outs)
    grads = ag.grad_sync(loss, xs)
    return outs, grads


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_cuda_matches_cpu(name: str) -> None:
    fn, arrays = FUNCTIONS[name]
    outs, grads = _run(fn, arrays, "cuda")
    ref_outs, ref_grads = _run(fn, arrays, "cpu")
    for o, r in zip([*outs, *grads], [*ref_outs, *ref_grads], strict=True):
        assert o.device.type == "cuda"
        assert_close(o.detach().cpu().numpy(), r.detach().numpy())


def test_windows_on_cuda() -> None:
    w = ag.kaiser_window(6, device="cuda", dtype=ag.float64)
    assert w.device.type == "cuda"
    assert_close(w.cpu().numpy(), ag.kaiser_window(6, dtype=ag.float64).numpy())


def test_factorisations_without_gradients_on_cuda() -> None:
    a = RNG.standard_normal((2, 4, 3))
    s = RNG.standard_normal((3, 3))
    s = s + s.T
    for fn, x in (
        (ag.geqrf, a),
        (ag.linalg.ldl_factor_ex, s),
        (ag.linalg.lu_factor_ex, a),
        (ag.linalg.matrix_rank, a),
    ):
        out = fn(ag.tensor(x, device="cuda"))
        ref = fn(ag.tensor(x))
        for o, r in zip(_listed(out), _listed(ref), strict=True):
            assert o.device.type == "cuda"
            assert o.dtype == r.dtype
            assert_close(o.cpu().numpy(), r.numpy())


def _listed(x: Any) -> list[Any]:
    return list(x) if isinstance(x, tuple) else [x]
