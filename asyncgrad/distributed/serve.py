"""Replicas of a gradient service on Ray Serve, with the settings asyncgrad needs.

NOTE [Serve replicas]
A Ray Serve replica is an actor whose requests run on one event loop: asyncgrad's engine works
in it as in any async server. Three defaults of the two would fight each other, and
``agd.serve.deployment`` sets them:
  - ``max_ongoing_requests``: Serve's default of 5 lets a replica run only 5 requests at once,
    while the engine interleaves many passes on the loop and coalesces them
    (``ag.serving.Coalescer``); the helper's default is the engine's admission cap
    (``configure(max_running=N)``) or, without one, 256;
  - compute threads: the engine starts one per core of the host (``os.cpu_count()``), but a
    replica is granted ``num_cpus`` of them: with several replicas on a host each would start
    as many threads as the host has cores. The replica configures ``compute_threads`` from
    its ``num_cpus`` before the user's ``__init__`` runs;
  - the collector: a replica's model and modules are built once and live as long as it does;
    ``gc.freeze()`` after ``__init__`` moves them out of the collector's generations, so the
    collections that requests trigger do not walk them again and again.
Replicas pay off across hosts, not on one: each request through Serve's HTTP proxy makes an
extra hop (benchmarks/serve_replicas.py measures it).
"""

from __future__ import annotations

import gc
from typing import Any, Final

from ..engine.settings import configure, settings

__all__ = ["deployment"]

DEFAULT_MAX_ONGOING: Final = 256


def _serve() -> Any:
    try:
        from ray import serve
    except ImportError:
        raise ImportError(
            'asyncgrad.distributed.serve needs Ray Serve: pip install "asyncgrad[ray]"'
        ) from None
    return serve


def _replica_class(cls: type, num_cpus: float, freeze_gc: bool) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        configure(compute_threads=max(1, int(num_cpus)))
        cls.__init__(self, *args, **kwargs)  # type: ignore[misc]
        if freeze_gc:
            gc.collect()
            gc.freeze()

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})  # fmt: skip


def deployment(
    cls: type | None = None,
    *,
    num_cpus: float = 1,
    max_ongoing_requests: int | None = None,
    freeze_gc: bool = True,
    **options: Any,
) -> Any:
    """``ray.serve.deployment`` for a class computing gradients, with asyncgrad's settings
    (See NOTE [Serve replicas]). Use it as ``@agd.serve.deployment(num_replicas=2)`` on the
    class (above ``@serve.ingress(app)`` where there is one).

    Args:
        cls: the class (when used without arguments).
        num_cpus: the CPUs each replica is granted (``ray_actor_options["num_cpus"]``); the
            engine's compute threads follow it.
        max_ongoing_requests: requests a replica runs at once (default: the engine's
            admission cap, ``configure(max_running=N)``, else 256).
        freeze_gc: ``gc.freeze()`` once the replica's ``__init__`` has run.
        options: any other argument of ``serve.deployment`` (``num_replicas``, ...).
    """
    serve = _serve()
    if not num_cpus > 0:
        raise ValueError(f"num_cpus must be > 0, got {num_cpus!r}")
    cap = max_ongoing_requests or settings.max_running or DEFAULT_MAX_ONGOING
    actor_options = {"num_cpus": num_cpus, **options.pop("ray_actor_options", {})}

    def wrap(c: type) -> Any:
        replica = _replica_class(c, num_cpus, freeze_gc)
        return serve.deployment(
            max_ongoing_requests=cap, ray_actor_options=actor_options, **options
        )(replica)

    return wrap if cls is None else wrap(cls)
