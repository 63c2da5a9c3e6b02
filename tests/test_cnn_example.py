"""examples/cnn_digits.py as a user runs it: trains past 97% test accuracy, saves weights that
load back, writes a Chrome trace and the backward graph's DOT source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import asyncgrad as ag

pytest.importorskip("sklearn", reason="the example needs scikit-learn (pip install '.[demo]')")
pytest.importorskip("tqdm", reason="the example needs tqdm (pip install '.[demo]')")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cnn_digits.py"
RUN_TIMEOUT_S = 240  # seconds on an idle 2-core machine; generous for a busy CI box


def run(out: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--out", str(out), "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_trains_saves_traces_and_draws(tmp_path: Path) -> None:
    out = run(tmp_path, "--device", "cpu")
    line = next(x for x in out.splitlines() if x.startswith("test accuracy"))
    accuracy = float(line.split()[2].rstrip("%"))
    assert accuracy > 97.0, out
    assert "reloaded model agrees: True" in out

    # The saved weights load back as the model's state dict.
    state = ag.load(tmp_path / "digits_cnn.npz")
    assert sorted(state) == [
        "conv1.bias",
        "conv1.weight",
        "conv2.bias",
        "conv2.weight",
        "head.bias",
        "head.weight",
    ]
    assert state["conv1.weight"].shape == (32, 1, 3, 3)
    assert np.isfinite(state["head.weight"].numpy()).all()

    # The trace is Chrome trace JSON with one complete event per node of the step's backward.
    trace = json.loads((tmp_path / "step_trace.json").read_text())
    names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert names.count("ConvolutionBackward0") >= 2  # one per conv, on each track it shows on
    assert "CrossEntropyBackward0" in names

    dot = (tmp_path / "backward_graph.dot").read_text()
    assert dot.startswith("digraph")
    for label in ("conv1.weight", "head.bias", "ConvolutionBackward0", "CrossEntropyBackward0"):
        assert label in dot


@pytest.mark.cuda
@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_runs_on_a_cuda_device(tmp_path: Path) -> None:
    """The same script on a CUDA device (simulated here unless ASYNCGRAD_SIM_CUDA=0)."""
    if not ag.cuda.is_available():
        pytest.skip("no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    out = run(tmp_path, "--device", "cuda", "--epochs", "1")
    assert "training on cuda" in out
    assert "reloaded model agrees: True" in out
    assert "cuda:0" in out  # the profiler's table names the device its nodes ran on
