"""ag.testing.assert_close: torch's tolerances, checks and mismatch messages."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.testing import assert_close


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for the messages")


def _message(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(AssertionError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def _same_message(torch: Any, a: Any, e: Any, **kwargs: Any) -> None:
    def conv(v: Any, lib: Any) -> Any:
        return lib.tensor(v) if isinstance(v, np.ndarray) else v

    mine = _message(assert_close, conv(a, ag), conv(e, ag), **kwargs)
    theirs = _message(torch.testing.assert_close, conv(a, torch), conv(e, torch), **kwargs)
    assert mine == theirs


@pytest.mark.parametrize(
    ("actual", "expected", "kwargs"),
    [
        (np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 2.5, 3.0], np.float32), {}),
        (np.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 5]]), {}),
        (np.array(1.5, np.float32), np.array(1.0, np.float32), {}),
        (1.5, 1.0, {}),
        (np.array([float("nan")]), np.array([float("nan")]), {}),
        (np.array([0.0, 1.0], np.float32), np.array([1.0, 0.0], np.float32), {}),
        (np.array([1.0, 2.0]), np.array([1.1, 2.0]), {"rtol": 0.01, "atol": 0.0}),
        (np.array([1.0, 2.0]), np.array([1.1, 2.0]), {"rtol": 0.0, "atol": 0.0}),
        (np.array([1.0, float("inf")]), np.array([1.0, -float("inf")]), {}),
        (np.array([1.0, 2.0], np.float16), np.array([1.0, 2.01], np.float16), {}),
        (np.array([1.0, 2.0]), np.array([1.0, 3.0]), {"msg": "custom"}),
    ],
)
def test_messages_match_torch(torch: Any, actual: Any, expected: Any, kwargs: Any) -> None:
    _same_message(torch, actual, expected, **kwargs)


@pytest.mark.cuda
def test_passes_within_default_tolerances() -> None:
    assert_close(ag.tensor([1.0, 2.0]), ag.tensor([1.0, 2.0 + 1e-6]))
    assert_close(ag.tensor([1.0, 2.0], dtype=ag.float64), ag.tensor([1.0, 2.0 + 1e-7]).double())
    assert_close(ag.tensor([1, 2]), ag.tensor([1, 2]))
    assert_close(ag.tensor([float("inf")]), ag.tensor([float("inf")]))
    assert_close(ag.tensor([float("nan"), 1.0]), ag.tensor([float("nan"), 1.0]), equal_nan=True)
    assert_close(ag.tensor([1.0]), ag.tensor([1.0], dtype=ag.float64), check_dtype=False)
    assert_close(ag.tensor([1.0, 2.0]), ag.tensor([1.5, 2.0]), rtol=0.0, atol=0.5)
    assert_close(ag.ones(2, device="cuda:0"), ag.ones(2, device="cuda:0"))
    assert_close(3, 3)
    assert_close(1.0, 1.0 + 1e-8)
    assert_close(ag.tensor([1.0, 2.0]), np.array([1.0, 2.0], np.float32))


def test_float64_defaults_are_tighter() -> None:
    with pytest.raises(AssertionError, match="up to 1e-07 allowed"):
        assert_close(ag.tensor([1.0]).double(), ag.tensor([1.0 + 1e-6]).double())


@pytest.mark.cuda
def test_attribute_mismatches() -> None:
    with pytest.raises(AssertionError, match=r"attribute 'shape' do not match: \(2,\) != \(3,\)"):
        assert_close(ag.ones(2), ag.ones(3))
    with pytest.raises(
        AssertionError,
        match=re.escape("'dtype' do not match: asyncgrad.float32 != asyncgrad.float64."),
    ):
        assert_close(ag.ones(2), ag.ones(2, dtype=ag.float64))
    with pytest.raises(AssertionError, match="'device' do not match: cpu != cuda:0"):
        assert_close(ag.ones(2), ag.ones(2, device="cuda:0"))
    assert_close(ag.ones(2), ag.ones(2, device="cuda:0"), check_device=False)
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol' must be either specified"):
        assert_close(ag.ones(2), ag.ones(2), rtol=1.0)


def test_callable_msg() -> None:
    with pytest.raises(AssertionError, match=r"^context: Tensor-likes are not close!"):
        assert_close(ag.ones(2), ag.zeros(2), msg=lambda m: "context: " + m)


def test_messages_for_many_elements() -> None:
    a = ag.zeros(3, 4)
    e = ag.zeros(3, 4)
    e[1, 2] = 5.0
    e[2, 3] = -0.5
    msg = _message(assert_close, a, e)
    assert "Mismatched elements: 2 / 12 (16.7%)" in msg
    assert "Greatest absolute difference: 5.0 at index (1, 2)" in msg
    assert "Greatest relative difference: 1.0 at index (1, 2)" in msg
