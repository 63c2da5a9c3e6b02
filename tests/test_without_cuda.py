"""Without CuPy (and without the simulator) asyncgrad imports and computes on the CPU, reports
no CUDA device, and says why when one is asked for."""

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
    import asyncgrad as ag

    assert "cupy" not in sys.modules
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
    assert "cupy" not in sys.modules
    print("ok")
    """
)


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
def test_cpu_only_install() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ASYNCGRAD_SIM_CUDA"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
