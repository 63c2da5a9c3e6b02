"""Engine metrics for Prometheus: a collector that reads ``stats()`` of one event loop whenever it
is scraped.

``prometheus_client`` is an optional dependency (``pip install "asyncgrad[server]"``); it is
imported when a collector is made, not when this module is.

NOTE [Scraping from another thread]
The counters of NOTE [Engine metrics] belong to their loop and change only on its thread. A
collector called on that thread (a ``/metrics`` handler of a server on the loop) reads them
directly; one called on another thread (``prometheus_client.start_http_server`` scrapes from
its own) asks the loop for a snapshot with ``call_soon_threadsafe`` and waits for it, at most
``timeout_s``, so a loop that does not answer yields no engine samples rather than a hung
scrape. A loop that is not running is read directly: nothing changes it meanwhile.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from . import scheduler

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector, CollectorRegistry
else:
    Collector = object  # the real base class is only needed by the type checker

__all__ = ["EngineCollector", "register"]

EXTRA_HINT: Final = (
    "asyncgrad.engine.prometheus needs prometheus-client: "
    'pip install "asyncgrad[server]" (or pip install prometheus-client)'
)
# The keys of stats()["graph_tasks"] that count graph tasks that have ended (counters); every
# other key there ("running", "waiting", ...) is how many are in that state now (a gauge).
ENDED: Final = frozenset({"completed", "failed", "cancelled"})
DEFAULT_TIMEOUT_S: Final = 1.0


def _require_client() -> Any:
    try:
        import prometheus_client.core
    except ImportError as exc:
        raise ImportError(EXTRA_HINT) from exc
    return prometheus_client.core


class EngineCollector(Collector):
    """A Prometheus collector of ``ag.autograd.engine.stats()`` for one event loop.

    Exported, with ``namespace`` (default ``asyncgrad``) before each name:

    - ``graph_tasks{state}``: graph tasks running (and in any other current state) now;
    - ``graph_tasks_ended_total{outcome}``: completed, failed and cancelled graph tasks;
    - ``nodes_total{device}`` and ``node_seconds_total{device}``: nodes run and time in them;
    - ``longest_stall_seconds``: the longest the engine held the loop at once.

    ``reset_stats()`` starts the counters afresh, which Prometheus sees as a counter reset.

    Args:
        loop: the loop whose metrics to export (default: the running loop).
        namespace: the prefix of every metric name.
        timeout_s: how long a scrape from another thread waits for the loop (See NOTE
            [Scraping from another thread]).

    Raises:
        ImportError: prometheus-client is not installed.
        RuntimeError: no ``loop`` was given and none is running.

    Example:
        >>> import asyncio
        >>> from prometheus_client import CollectorRegistry, generate_latest
        >>> from asyncgrad.engine.prometheus import EngineCollector
        >>> async def scrape():
        ...     registry = CollectorRegistry()
        ...     registry.register(EngineCollector())
        ...     return generate_latest(registry).decode()
        >>> 'asyncgrad_graph_tasks{state="running"} 0.0' in asyncio.run(scrape())
        True
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        namespace: str = "asyncgrad",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._core = _require_client()
        if loop is None:
            loop = asyncio.get_running_loop()
        self._loop = weakref.ref(loop)
        self._prefix = f"{namespace}_" if namespace else ""
        self._timeout_s = timeout_s

    def describe(self) -> Iterator[Metric]:
        # The names without samples: enough for a registry to reject a duplicate.
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        loop = self._loop()
        if loop is None or loop.is_closed():
            return iter(())
        snapshot = self._snapshot(loop)
        return iter(()) if snapshot is None else self._families(snapshot)

    def _snapshot(self, loop: asyncio.AbstractEventLoop) -> dict[str, Any] | None:
        # See NOTE [Scraping from another thread].
        if not loop.is_running() or _loop_of_this_thread() is loop:
            return scheduler.stats(loop)
        result: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def take() -> None:
            if result.set_running_or_notify_cancel():
                result.set_result(scheduler.stats(loop))

        try:
            loop.call_soon_threadsafe(take)
            return result.result(timeout=self._timeout_s)
        except (RuntimeError, concurrent.futures.TimeoutError):  # closed meanwhile, or busy
            result.cancel()
            return None

    def _families(self, snapshot: dict[str, Any]) -> Iterator[Metric]:
        core, p = self._core, self._prefix
        graph_tasks: dict[str, int] = snapshot.get("graph_tasks", {})
        now = core.GaugeMetricFamily(
            f"{p}graph_tasks", "Graph tasks in each state now.", labels=["state"]
        )
        ended = core.CounterMetricFamily(
            f"{p}graph_tasks_ended", "Graph tasks that ended, by outcome.", labels=["outcome"]
        )
        for key, value in graph_tasks.items():
            (ended if key in ENDED else now).add_metric([key], value)
        yield now
        yield ended
        nodes = core.CounterMetricFamily(
            f"{p}nodes", "Backward nodes run, per device.", labels=["device"]
        )
        for device, n in snapshot.get("nodes", {}).items():
            nodes.add_metric([device], n)
        yield nodes
        seconds = core.CounterMetricFamily(
            f"{p}node_seconds", "Time spent running backward nodes, per device.", labels=["device"]
        )
        for device, s in snapshot.get("time_in_nodes_s", {}).items():
            seconds.add_metric([device], s)
        yield seconds
        stall = core.GaugeMetricFamily(
            f"{p}longest_stall_seconds", "The longest time the engine held the event loop at once."
        )
        if "longest_stall_s" in snapshot:
            stall.add_metric([], snapshot["longest_stall_s"])
        yield stall


def register(
    registry: CollectorRegistry | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    **kwargs: Any,
) -> EngineCollector:
    """Make an ``EngineCollector`` for ``loop`` (default: the running one) and register it with
    ``registry`` (default: prometheus_client's global ``REGISTRY``); returns the collector, for
    ``registry.unregister``.

    Raises:
        ImportError: prometheus-client is not installed.
    """
    collector = EngineCollector(loop, **kwargs)
    if registry is None:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    registry.register(collector)
    return collector


def _loop_of_this_thread() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
