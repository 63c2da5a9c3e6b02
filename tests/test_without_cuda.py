"""Without CuPy (and without the simulator) asyncgrad imports and computes on the CPU, reports
no CUDA device, and says why when one is asked for; with CuPy installed on a machine without a
GPU (CI installs the wheel for tests/backend/test_sim_surface.py) too."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    if {hide_cupy}:
        sys.modules["cupy"] = None  # import cupy raises ImportError, as when it is not installed
    import asyncgrad as ag

    assert sys.modules.get("cupy") is None
    assert ag.cuda.is_available() is False
    assert ag.cuda.device_count() == 0
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]
    for make in (lambda: ag.zeros(2, device="cuda"), lambda: x.cuda(), lambda: ag.cuda.Stream()):
        try:
            make()
        except RuntimeError as e:
            assert "CuPy is not installed" in str(e), e
            assert "asyncgrad[cuda12]" in str(e), e
        else:
            raise AssertionError("no error")
    assert sys.modules.get("cupy") is None
    print("ok")
    """
)

# CuPy installed, no GPU: asyncgrad imports CuPy when CUDA is first asked about, finds no device,
# says so, and the CPU works as before.
SCRIPT_NO_GPU = textwrap.dedent(
    """
    import sys
    import asyncgrad as ag

    assert "cupy" not in sys.modules  # imported on first use of CUDA only
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]
    if ag.cuda.is_available():
        print("gpu")
        raise SystemExit
    assert "cupy" in sys.modules
    assert ag.cuda.device_count() == 0
    try:
        x.cuda()
    except RuntimeError as e:
        assert "CuPy is installed but found no" in str(e), e
    else:
        raise AssertionError("no error")
    (x * 3).sum().backward()
    assert x.grad.tolist() == [5.0, 7.0]
    print("ok")
    """
)

CUPY_INSTALLED = importlib.util.find_spec("cupy") is not None


def _run(script: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ASYNCGRAD_SIM_CUDA"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_cpu_only_install() -> None:
    """Where CuPy is installed, its import is made to fail as if it were not."""
    assert _run(SCRIPT.format(hide_cupy=CUPY_INSTALLED)) == "ok"


@pytest.mark.skipif(not CUPY_INSTALLED, reason="CuPy is not installed here")
def test_cupy_installed_without_a_gpu() -> None:
    result = _run(SCRIPT_NO_GPU)
    if result == "gpu":
        pytest.skip("this machine has a GPU")
    assert result == "ok"
