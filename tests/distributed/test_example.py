"""examples/data_parallel.py as a user runs it: one process, then 2 Ray actors whose replicas
end identical and equal to the one-process model."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import RAY_REASON

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data_parallel.py"
RUN_TIMEOUT_S = 240  # a Ray cluster of its own starts in the script


def run(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_one_process() -> None:
    out = run()
    assert re.search(r"one process: 30 steps of 64 rows, last loss 0\.\d+", out), out


@pytest.mark.distributed
@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason=RAY_REASON)
def test_two_ray_actors_match_one_process() -> None:
    out = run("--ray")
    assert "replicas identical: True" in out, out
    diff = float(re.search(r"largest difference from one process: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert diff <= 1e-12
