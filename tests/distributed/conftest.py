"""The tests of asyncgrad.distributed: most run on ``local_group`` (ranks as threads, tensors
pickled between them); those marked ``distributed`` also need Ray, and share one local
cluster, started on first use and shut down at the end of the session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

RAY_REASON = 'needs Ray (pip install "asyncgrad[ray]")'


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.distributed)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """Ray, initialised through ``agd.init`` on a local cluster of 2 CPUs."""
    ray = pytest.importorskip("ray", reason=RAY_REASON)
    import asyncgrad.distributed as agd

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster needs no token
    agd.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()
