"""Fixtures of the backend tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import simtools


@pytest.fixture
def two_devices() -> Iterator[None]:
    """Two simulated devices without delays (``simtools.two_devices``)."""
    with simtools.two_devices():
        yield
