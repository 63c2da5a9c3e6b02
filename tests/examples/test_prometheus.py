"""asyncgrad.engine.prometheus: the collector reads its loop's stats(), on the loop's thread or
from another one, and says which extra to install when prometheus-client is missing."""

from __future__ import annotations

import asyncio
import sys

import pytest

import asyncgrad as ag
from asyncgrad.engine.prometheus import EngineCollector

prometheus_client = pytest.importorskip("prometheus_client")
parser = pytest.importorskip("prometheus_client.parser")


def scrape(registry: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = prometheus_client.generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parser.text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_scrape_on_the_loop_and_from_another_thread() -> None:
    ag.autograd.engine.reset_stats()
    x = ag.ones(3, requires_grad=True)
    async with asyncio.timeout(10):
        await ag.grad((x * x).sum(), [x])
    registry = prometheus_client.CollectorRegistry()
    registry.register(EngineCollector(namespace="t"))
    stats = ag.autograd.engine.stats()
    async with asyncio.timeout(10):
        # On another thread the collector asks this loop for the snapshot, while it runs.
        for samples in (scrape(registry), await asyncio.to_thread(scrape, registry)):
            assert samples[("t_graph_tasks", (("state", "running"),))] == 0
            completed = stats["graph_tasks"]["completed"]
            assert samples[("t_graph_tasks_ended_total", (("outcome", "completed"),))] == completed
            assert samples[("t_nodes_total", (("device", "cpu"),))] == stats["nodes"]["cpu"]
            assert samples[("t_longest_stall_seconds", ())] == stats["longest_stall_s"]


def test_a_closed_loop_exports_nothing() -> None:
    loop = asyncio.new_event_loop()
    collector = EngineCollector(loop)
    loop.close()
    assert list(collector.collect()) == []


def test_no_loop_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        EngineCollector()


def test_missing_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name == "prometheus_client" or name.startswith("prometheus_client."):
            monkeypatch.setitem(sys.modules, name, None)
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ImportError, match=r"asyncgrad\[server\]"):
            EngineCollector(loop)
    finally:
        loop.close()
