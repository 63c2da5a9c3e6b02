"""Replicas on Ray Serve through ``agd.serve.deployment``: gradients equal to local ones, over
Serve's handles and over real HTTP, with the replica settings asyncgrad needs."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

TIMEOUT_S = 60


def make_model() -> ag.nn.Module:
    ag.manual_seed(0)
    return ag.nn.Sequential(ag.nn.Linear(4, 8), ag.nn.Tanh(), ag.nn.Linear(8, 1))


def local_gradient(rows: list[list[float]]) -> list[list[float]]:
    x = ag.tensor(rows, requires_grad=True)
    make_model()(x).sum().backward()
    assert x.grad is not None
    return x.grad.tolist()


class Saliency:
    """The service: the input gradient of a small model, by handle or by HTTP POST."""

    def __init__(self) -> None:
        self.model = make_model()

    async def grad(self, rows: list[list[float]]) -> list[list[float]]:
        x = ag.tensor(rows, requires_grad=True)
        (g,) = await ag.grad(self.model(x).sum(), [x])
        return g.tolist()

    async def __call__(self, request: Any) -> dict[str, Any]:
        body = await request.json()
        return {"grad": await self.grad(body["x"]), "pid": os.getpid()}

    def settings(self) -> dict[str, int]:
        from asyncgrad.engine.settings import settings

        return {"compute_threads": settings.compute_threads, "frozen": gc.get_freeze_count()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve(ray_cluster: Any) -> Iterator[tuple[Any, int]]:
    serve = pytest.importorskip(
        "ray.serve", reason='needs Ray Serve (pip install "asyncgrad[ray]")'
    )

    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield serve, port
    finally:
        serve.shutdown()


def test_replicas_answer_gradients_equal_to_local_ones(serve: tuple[Any, int]) -> None:
    import httpx

    import asyncgrad.distributed as agd

    srv, port = serve
    app = agd.serve.deployment(num_replicas=2)(Saliency)
    assert app.max_ongoing_requests == 256  # not Serve's 5: the engine interleaves passes
    handle = srv.run(app.bind(), route_prefix="/saliency")
    rows = [[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, 2.0, -1.0]]
    want = local_gradient(rows)
    np.testing.assert_allclose(handle.grad.remote(rows).result(timeout_s=TIMEOUT_S), want, 1e-6)
    info = handle.settings.remote().result(timeout_s=TIMEOUT_S)
    assert info["compute_threads"] == 1  # the replica's CPU, not the host's cores
    assert info["frozen"] > 0  # its start-up objects are out of the collector's way

    async def over_http() -> list[Any]:
        url = f"http://127.0.0.1:{port}/saliency"
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            answers = await asyncio.gather(
                *[client.post(url, json={"x": [[float(i), -2.0, 0.5, 3.0]]}) for i in range(32)]
            )
        return [(r.status_code, r.json()) for r in answers]

    answers = asyncio.run(over_http())
    for i, (status, body) in enumerate(answers):
        assert status == 200
        np.testing.assert_allclose(body["grad"], local_gradient([[float(i), -2.0, 0.5, 3.0]]), 1e-6)
    assert len({body["pid"] for _, body in answers}) == 2  # both replicas served


def test_bad_arguments_raise(serve: tuple[Any, int]) -> None:
    import asyncgrad.distributed as agd

    with pytest.raises(ValueError, match="num_cpus must be > 0"):
        agd.serve.deployment(num_cpus=0)
