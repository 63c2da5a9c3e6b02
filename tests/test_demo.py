"""The showcase in examples/demo.py: training and gradient requests share one event loop."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
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


@pytest.mark.timeout(120)
async def test_run_trains_and_serves_concurrently(demo: ModuleType) -> None:
    stats = await demo.run(epochs=1, clients=2, progress=False)
    assert stats.accuracy > 0.5  # chance is 0.1; one epoch gets about 0.8
    assert stats.steps == 43  # ceil(1347 training images / 32)
    assert stats.served > 0
    assert stats.stalls_s, "the ticker never ran"
    # The loop it reports is the one the test runs on (asyncio's, then uvloop's).
    running = type(asyncio.get_running_loop()).__module__.split(".")[0]
    assert stats.loop == running


@pytest.mark.timeout(120)
async def test_training_does_not_depend_on_the_clients(demo: ModuleType) -> None:
    # Requests only read the weights, so they never change what the trainer computes.
    alone = await demo.run(epochs=1, clients=0, progress=False)
    busy = await demo.run(epochs=1, clients=3, progress=False)
    assert alone.served == 0
    assert busy.served > 0
    assert busy.loss == alone.loss
    assert busy.accuracy == alone.accuracy


@pytest.mark.timeout(120)
def test_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(DEMO), "--epochs", "1", "--clients", "2"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = dict(
        line.split(":", 1) for line in proc.stdout.splitlines() if line.startswith(("test", "grad"))
    )
    accuracy = float(out["test accuracy"].strip().rstrip("%")) / 100
    served = int(out["gradients served"].split()[0])
    assert accuracy > 0.5
    assert served > 0
    for label in ("training steps:", "wall time:", "longest loop stall:"):
        assert label in proc.stdout
    assert "Task was destroyed" not in proc.stderr
    assert "never awaited" not in proc.stderr
