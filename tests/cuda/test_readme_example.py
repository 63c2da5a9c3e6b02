"""The README's CUDA example, as written there: the forward runs on a new stream that first waits
for the stream that made its inputs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import asyncgrad as ag
from asyncgrad.backend import cuda as runtime

from .conftest import host

# A gate left closed opens by itself after this long.
GATE_TIMEOUT_S = 3.0


@contextmanager
def held_current_stream() -> Iterator[None]:
    """Hold the current stream of the current device until the block ends."""
    opened = threading.Event()
    ag.cuda.current_stream().native.launch_host_func(lambda _: opened.wait(GATE_TIMEOUT_S), None)
    try:
        yield
    finally:
        opened.set()


async def test_readme_cuda_example() -> None:
    """The README's example: the forward on a new stream first waits for the stream that made
    ``x`` and ``w`` (held here until they would be read too early), and the awaited gradient is
    computed when ``ag.grad`` returns."""
    with held_current_stream():
        x = ag.randn(16, 32, device="cuda")
        w = ag.randn(32, 8, device="cuda", requires_grad=True)
        s = ag.cuda.Stream()
        s.wait_stream(ag.cuda.current_stream())  # x and w were made on the current stream
        with ag.cuda.stream(s):
            loss = (x @ w).relu().sum()
    (gw,) = await asyncio.wait_for(ag.grad(loss, [w]), 10)
    xv, wv = host(x), host(w)
    expect = xv.T @ (xv @ wv > 0).astype(xv.dtype)
    if runtime.simulated():  # computed already: its memory holds the values
        np.testing.assert_allclose(gw._array._data, expect, rtol=1e-5)
    np.testing.assert_allclose(host(gw), expect, rtol=1e-5)
