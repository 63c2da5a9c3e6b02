"""The BLAS library NumPy calls: how many threads each of its calls uses.

NOTE [BLAS threads of the compute threads]
The engine runs ``ag.run`` calls and large nodes on its compute threads, one per core by
default, so that concurrent requests compute side by side. A BLAS built to use every core in
each call (OpenBLAS's and MKL's default) then runs, on a machine of N cores, N calls of N
threads each: OpenBLAS serialises concurrent multi-threaded calls on one lock, and a loop
thread that runs a node inline waits behind them. Measured on 2 cores, a SmoothGrad server
(benchmarks/server_smoothgrad.py, library defaults): 47-87 requests/s and engine stalls of
130-150 ms with BLAS's default threads, 263-270 requests/s with one per call.
PyTorch keeps an intra-op thread pool of its own, so its users meet no such trap.

So when the engine first starts more than one compute thread, it limits BLAS to
``blas_threads`` threads per call (``ag.configure(blas_threads=...)``, default ``"auto"``:
one, unless the environment already says how many: ``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``). The limit is process-wide: OpenBLAS has no
per-thread setting that holds (its ``openblas_set_num_threads_local`` changed every thread's
count when tried with NumPy 2.4's OpenBLAS 0.3.31), so a large matrix product a script runs on
its main thread after that is single-threaded too; ``blas_threads=None`` leaves BLAS alone.
The limit is set through threadpoolctl (the ``server`` extra installs it), which finds the
BLAS libraries loaded in the process whatever their build; without it nothing changes, and
``ag.autograd.engine.blas()`` says so.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Final

# The variables through which a user sets BLAS's threads before NumPy loads.
THREAD_VARIABLES: Final = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

_lock = threading.Lock()
_state: dict[str, Any] = {"limited_to": None, "why": "not yet: no compute thread has started"}
_limits: list[Any] = []  # threadpoolctl's limit objects, kept alive


def chosen_by_environment() -> str | None:
    """The variable that sets BLAS's threads in this process's environment, if one does."""
    return next((v for v in THREAD_VARIABLES if os.environ.get(v)), None)


def limit_threads(n: int) -> None:
    """Limit the BLAS libraries loaded in the process to ``n`` threads per call (See NOTE [BLAS
    threads of the compute threads]); records what was done for ``state()``."""
    with _lock:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            _state.update(
                limited_to=None,
                why="threadpoolctl is not installed (pip install threadpoolctl, or the "
                "asyncgrad[server] extra): BLAS keeps its own thread count",
            )
            return
        _limits.append(threadpool_limits(limits=n, user_api="blas"))
        _state.update(limited_to=n, why=f"limited to {n} per call when compute threads started")


def leave(why: str) -> None:
    """Leave BLAS at its own thread count (restoring it if an earlier pool limited it), and
    record why."""
    with _lock:
        while _limits:
            _limits.pop().restore_original_limits()
        _state.update(limited_to=None, why=why)


def state() -> dict[str, Any]:
    """``{"limited_to": int or None, "why": str}``: what the engine did to BLAS's threads."""
    with _lock:
        return dict(_state)
