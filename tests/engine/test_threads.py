"""Thread safety: graph tasks on several threads reaching the same leaves, retained non-leaves and
hook registries lose no update."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

import numpy as np

import asyncgrad as ag

from .helpers import THREAD_TIMEOUT_S, assert_close, leaf

N_THREADS: Final = 10
BIG: Final = 200_000


def run_threads(n: int, body: Callable[[int], None]) -> None:
    """Run ``body(i)`` on ``n`` threads released together; re-raise the first error."""
    barrier = threading.Barrier(n, timeout=THREAD_TIMEOUT_S)
    errors: list[BaseException] = []

    def target(i: int) -> None:
        try:
            barrier.wait()
            body(i)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=target, args=(i,), name=f"test-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=THREAD_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if errors:
        raise errors[0]


def test_sync_backward_from_many_threads_into_one_leaf() -> None:
    w = leaf(np.linspace(-1.0, 1.0, BIG))
    x = np.linspace(0.5, 2.0, BIG)

    def body(i: int) -> None:
        for _ in range(5):
            (w * ag.tensor(x, dtype=ag.float64)).sum().backward()

    run_threads(N_THREADS, body)
    assert_close(w.grad, N_THREADS * 5 * x, rtol=1e-12, atol=0)


def test_retain_grad_from_many_threads_over_one_retained_graph() -> None:
    # Large enough that NumPy releases the GIL inside each sum, where an unlocked
    # read-modify-write of `.grad` would lose updates.
    x = leaf(np.ones(BIG))
    h = x * 2.0
    h.retain_grad()
    out = (h * 3.0).sum()
    passes = 3

    def body(i: int) -> None:
        for _ in range(passes):
            out.backward(retain_graph=True)

    run_threads(8, body)
    # d out / d h = 3 on each pass; 8 threads x 3 passes.
    assert_close(h.grad, np.full(BIG, 72.0), rtol=0, atol=0)
    assert_close(x.grad, np.full(BIG, 144.0), rtol=0, atol=0)


def test_hook_registration_from_many_threads() -> None:
    x = leaf([1.0])
    y = x * 1.0
    calls: list[int] = []
    lock = threading.Lock()
    per_thread = 50

    def body(i: int) -> None:
        for _ in range(per_thread):

            def hook(g: Any, i: int = i) -> None:
                with lock:
                    calls.append(i)

            y.register_hook(hook)
            x.register_hook(hook)

    run_threads(8, body)
    y.sum().backward()
    assert len(calls) == 2 * 8 * per_thread
