"""The tolerances of CUDA tests (NOTE [Tolerances on a GPU] in conftest.py): the test's own on
the simulator, widened on a real GPU only as far as GPU numerics need."""

from __future__ import annotations

import numpy as np
import pytest

from . import conftest as helpers


@pytest.fixture
def on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "real_gpu", lambda: True)


def test_the_tests_own_tolerances_stand_on_the_simulator() -> None:
    if helpers.real_gpu():
        pytest.skip("on a real GPU the tolerances are widened")
    assert helpers.tolerance(np.ones(3), np.ones(3), 1e-12, 0.0) == (1e-12, 0.0)
    with pytest.raises(AssertionError, match="Not equal to tolerance rtol=1e-12"):
        helpers.assert_close(np.array([1.0 + 1e-11]), np.array([1.0]))


@pytest.mark.usefixtures("on_a_gpu")
def test_float64_on_a_gpu() -> None:
    desired = np.array([3.0, -0.5, 1e-17])  # the last: a sum whose terms cancelled
    assert helpers.tolerance(desired, desired, 1e-12, 1e-14) == (1e-10, 3e-10)
    helpers.assert_close(desired * (1 + 5e-11) + 1e-11, desired)
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 3"):
        helpers.assert_close(desired + np.array([0.0, 1e-6, 0.0]), desired)


@pytest.mark.usefixtures("on_a_gpu")
def test_float32_and_exact_dtypes_on_a_gpu() -> None:
    small = np.full(2, 0.25, dtype=np.float32)
    assert helpers.tolerance(small, small, 1e-6, 0.0) == (2e-5, 2e-5)
    # A float32 result against a float64 reference: the float32 tolerance.
    assert helpers.tolerance(small, small.astype(np.float64), 1e-12, 0.0) == (2e-5, 2e-5)
    ints = np.arange(3)
    assert helpers.tolerance(ints, ints, 0.0, 0.0) == (0.0, 0.0)
    assert helpers.tolerance(ints > 0, ints > 0, 1e-7, 0.0) == (1e-7, 0.0)
    # Infinities and NaNs do not make the absolute tolerance infinite.
    odd = np.array([np.inf, np.nan, -2.0])
    assert helpers.tolerance(odd, odd, 1e-12, 0.0) == (1e-10, 2e-10)
