"""The showcase in examples/demo.py: training and gradient requests share one event loop."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("sklearn", reason="the demo needs scikit-learn (pip install '.[demo]')")
pytest.importorskip("tqdm", reason="the demo needs tqdm (pip install '.[demo]')")

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


@pytest.fixture(scope="module")
def demo() -> Iterator[ModuleType]:
    name = "asyncgrad_demo"
    spec = importlib.util.spec_from_file_location(name, DEMO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


@pytest.fixture(scope="module", autouse=True)
def compute_threads() -> None:
    """Start all of the engine's compute threads (which ``ag.run`` uses and which outlive a
    test on purpose) before the tests, so the suite's thread-leak check doesn't count them."""
    from asyncgrad.engine.pools import compute_pool

    n = compute_pool.size
    barrier = threading.Barrier(n)
    for f in [compute_pool.get().submit(barrier.wait, 10) for _ in range(n)]:
        f.result(timeout=10)


STEPS_PER_EPOCH = 22  # ceil(1347 training images / 64)


def check_sane(stats: object, way: str) -> None:
    assert stats.way == way
    assert stats.steps == STEPS_PER_EPOCH
    assert stats.served > 0
    assert stats.stalls_s, "the ticker never ran"
    assert min(stats.stalls_s) >= -0.001  # a timer doesn't fire much early
    assert 0 <= stats.p99_stall_s <= stats.max_stall_s
    assert stats.wall_s > 0
    assert stats.steps_per_s > 0
    assert stats.served_per_s > 0
    assert stats.accuracy > 0.5  # chance is 0.1; one epoch gets about 0.85


@pytest.mark.timeout(120)
async def test_run_trains_and_serves_concurrently(demo: ModuleType) -> None:
    stats = await demo.run(epochs=1, clients=2, progress=False)
    check_sane(stats, demo.AWAITED)
    # The loop it reports is the one the test runs on (asyncio's, then uvloop's).
    running = type(asyncio.get_running_loop()).__module__.split(".")[0]
    assert stats.loop == running


@pytest.mark.timeout(120)
async def test_training_does_not_depend_on_the_clients(demo: ModuleType) -> None:
    # Requests only read the live weights, and an optimizer step never changes the weights a
    # pending request saved, so they never change what the trainer computes.
    alone = await demo.run(epochs=1, clients=0, progress=False)
    busy = await demo.run(epochs=1, clients=3, progress=False)
    assert alone.served == 0
    assert busy.served > 0
    assert busy.loss == alone.loss
    assert busy.accuracy == alone.accuracy


@pytest.mark.timeout(120)
async def test_the_ways_compared_do_the_same_work(demo: ModuleType) -> None:
    rows = await demo.compare(epochs=1, clients=2, progress=False, torch=False)
    assert [r.way for r in rows] == [demo.AWAITED, demo.AWAITED_EQUAL, demo.BLOCKING]
    for r in rows:
        check_sane(r, r.way)
    # asyncgrad's ways run the same arithmetic: the same model comes out.
    awaited, equal, blocking = rows
    assert blocking.loss == awaited.loss == equal.loss
    assert blocking.accuracy == awaited.accuracy == equal.accuracy
    table = demo.report(rows, 1, 2)
    for way in (demo.AWAITED, demo.AWAITED_EQUAL, demo.BLOCKING):
        assert way in table
    assert "p99 stall" in table
    assert "PyTorch's rows: pip install torch" in table


@pytest.mark.timeout(120)
async def test_the_pytorch_ways(demo: ModuleType) -> None:
    pytest.importorskip("torch")
    for way in demo.TORCH_WAYS:
        check_sane(await demo.run(epochs=1, clients=2, progress=False, way=way), way)


def test_an_unknown_way_is_refused(demo: ModuleType) -> None:
    with pytest.raises(ValueError, match="unknown way"):
        demo.make_model("jax")


@pytest.mark.timeout(120)
def test_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(DEMO), "--epochs", "1", "--clients", "2", "--no-torch"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("way "))
    rows = {}
    for line in lines[header + 1 : header + 4]:
        way, numbers = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        rows[way] = [float(n) for n in numbers.replace("ms", "").replace("%", "").split()]
    assert set(rows) == {
        "asyncgrad, awaited",
        "asyncgrad, awaited, equal priority",
        "asyncgrad, blocking",
    }
    # The verdict is true on the numbers printed (without PyTorch: against the blocking way).
    text = " ".join(lines[lines.index(next(x for x in lines if x.startswith("Verdict"))) :])
    first, equal, blocking = (rows[w] for w in sorted(rows))
    said = re.search(r"served ([\d.]+)x its requests .*?\((\d+) vs (\d+) per second\)", text)
    assert said is not None, text
    assert float(said[1]) == pytest.approx(first[1] / blocking[1], abs=0.06)
    assert (float(said[2]), float(said[3])) == (first[1], blocking[1])
    assert ("It trains slower" in text) == (equal[0] < blocking[0])
    for steps_s, served_s, p99_ms, max_ms, accuracy in rows.values():
        assert steps_s > 0
        assert served_s > 0
        assert 0 <= p99_ms <= max_ms
        assert accuracy > 50
    assert "PyTorch," not in proc.stdout  # no PyTorch row; how to get them is said
    assert "PyTorch's rows: pip install torch" in proc.stdout
    assert "A stall is" in proc.stdout
    assert "Task was destroyed" not in proc.stderr
    assert "never awaited" not in proc.stderr
