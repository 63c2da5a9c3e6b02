"""scripts/gpu_check.sh, the one call that runs the CUDA tests on a GPU, here where there is
none: it must fail at once, saying why, rather than pass a run where every test skipped. And
the test folders must not hide packages that CuPy imports, or on a GPU every CUDA test skips."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import pytest

ROOT: Final = Path(__file__).resolve().parent.parent
TESTS: Final = ROOT / "tests"


@pytest.mark.parametrize("name", ["cuda", "autograd", "backend", "engine", "examples"])
def test_no_test_folder_takes_the_name_of_an_installed_package(name: str) -> None:
    """Each test folder is a package under ``tests`` (tests/__init__.py): were ``tests`` not a
    package, pytest would put tests/ on sys.path and import tests/cuda as ``cuda``, hiding the
    ``cuda`` namespace of cuda-pathfinder; ``import cupy`` then fails with "No module named
    'cuda.pathfinder'" and every CUDA test skips on a GPU."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    places = list(spec.submodule_search_locations or []) or [spec.origin or ""]
    inside = [p for p in places if Path(p).resolve().is_relative_to(TESTS)]
    assert not inside, f"import {name} finds the test folder {inside}"


def test_cupy_finds_cuda_pathfinder() -> None:
    """What CuPy 14 imports on ``import cupy`` (to find the CUDA libraries) resolves to the
    installed package while the tests run."""
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("CuPy is not installed")
    spec = importlib.util.find_spec("cuda.pathfinder")
    assert spec is not None, "cuda.pathfinder cannot be found"
    assert spec.origin is not None
    assert not Path(spec.origin).resolve().is_relative_to(TESTS)


# ----------------------------------------------------------------------------- the script
SCRIPT: Final = ROOT / "scripts" / "gpu_check.sh"
HELPER: Final = ROOT / "scripts" / "gpu_check.py"
RUN_TIMEOUT_S: Final = 120.0


def _helper() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", HELPER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tmp_path: Path, *args: str, path: str | None = None, **env: str) -> tuple[int, str]:
    """The script, with its output folder under ``tmp_path`` and an empty wheel folder."""
    wheels = tmp_path / "no-wheels"
    wheels.mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCGRAD_", "QUICK_"))}
    environ["PATH"] = path or os.pathsep.join([str(Path(sys.executable).parent), environ["PATH"]])
    environ["OUT"] = str(tmp_path / "out")
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--wheels", str(wheels), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**environ, **env},
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _usable_gpu() -> bool:
    probe = "import cupy, sys; sys.exit(0 if cupy.cuda.runtime.getDeviceCount() > 0 else 1)"
    return (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, check=False).returncode
        == 0
    )


def test_the_script_parses_and_passes_shellcheck() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    proc = subprocess.run(
        ["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout


def test_without_a_usable_gpu_the_script_fails_at_the_preflight(tmp_path: Path) -> None:
    """Where CuPy cannot compute (here: no driver, or no CuPy), the script stops after the
    preflight, which says what is missing, within seconds, and exits 1: no test ran."""
    if _usable_gpu():
        pytest.skip("a usable GPU is here: the script would run everything")
    start = time.monotonic()
    rc, output = _run(tmp_path, "--quick")
    took = time.monotonic() - start
    assert rc == 1, output
    assert "preflight FAILED" in output
    assert re.search(r"FAIL (CuPy imports|a CUDA device): ", output), output
    assert re.search(r"^  preflight +FAILED \(exit status 1\)", output, re.M), output
    assert "GPU check FAILED" in output
    assert "== tests" not in output
    assert took < 60, took
    out = tmp_path / "out"
    assert (out / "gpu_check.log").read_text() in output
    assert not (out / "junit-cuda.xml").exists()


FAKE_PYTHON: Final = """#!/bin/sh
# Stands in for python3: prints its arguments and exits as FAKE_<STEP> says (default 0).
echo "fake python3 $*"
case "$1 $2" in
    "scripts/gpu_check.py preflight") exit "${FAKE_PREFLIGHT:-0}" ;;
    "scripts/gpu_check.py tests") exit "${FAKE_TESTS:-0}" ;;
    "scripts/gpu_check.py cnn") exit "${FAKE_CNN:-0}" ;;
    "scripts/gpu_check.py saliency") exit "${FAKE_SALIENCY:-0}" ;;
    "benchmarks/bench_cuda.py --markdown") exit "${FAKE_BENCH:-0}" ;;
esac
exit 99
"""


@pytest.fixture
def fake_path(tmp_path: Path) -> str:
    """A PATH whose python3 is FAKE_PYTHON, so the script's steps run instantly."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return os.pathsep.join([str(bin_dir), os.environ["PATH"]])


def _summary(output: str) -> dict[str, str]:
    lines = output.split("== summary", 1)[1].splitlines()[1:]
    return dict(line.split(maxsplit=1) for line in lines if line.startswith("  "))


def test_quick_mode_runs_every_step_and_sums_them_up(tmp_path: Path, fake_path: str) -> None:
    rc, output = _run(tmp_path, "--quick", path=fake_path, FAKE_CNN="3")
    assert rc == 0, output
    summary = _summary(output)
    assert list(summary) == ["preflight", "tests", "cnn", "saliency", "bench"]
    assert summary["cnn"].startswith("skipped (its packages are not installed")
    assert all(summary[s].startswith("passed") for s in summary if s != "cnn"), summary
    assert "GPU check passed" in output
    out = tmp_path / "out"
    assert f"fake python3 scripts/gpu_check.py tests {out}/junit-cuda.xml 120" in output
    assert f"fake python3 scripts/gpu_check.py cnn {out}/cnn 1" in output
    assert (
        f"fake python3 benchmarks/bench_cuda.py --markdown {out}/gpu_results.md --quick "
        "--rounds 1" in output
    )


def test_a_failed_step_fails_the_run_and_the_others_still_run(
    tmp_path: Path, fake_path: str
) -> None:
    rc, output = _run(tmp_path, "--quick", path=fake_path, FAKE_TESTS="1")
    assert rc == 1, output
    summary = _summary(output)
    assert summary["tests"].startswith("FAILED (exit status 1)")
    assert summary["bench"].startswith("passed")
    assert "GPU check FAILED" in output


def test_steps_runs_only_the_steps_it_names(tmp_path: Path, fake_path: str) -> None:
    rc, output = _run(tmp_path, "--quick", "--steps", "tests,bench", path=fake_path)
    assert rc == 0, output
    assert list(_summary(output)) == ["preflight", "tests", "bench"]
    assert "== cnn: not run (not in --steps)" in output
    assert "scripts/gpu_check.py saliency" not in output


def test_a_failed_preflight_runs_nothing_else(tmp_path: Path, fake_path: str) -> None:
    rc, output = _run(tmp_path, path=fake_path, FAKE_PREFLIGHT="1")
    assert rc == 1, output
    assert list(_summary(output)) == ["preflight"]


def test_quick_mode_stops_at_its_time_budget(tmp_path: Path, fake_path: str) -> None:
    rc, output = _run(tmp_path, "--quick", path=fake_path, QUICK_BUDGET_S="5")
    assert rc == 1, output
    summary = _summary(output)
    assert summary["preflight"].startswith("FAILED (not run: the --quick budget of 5s")
    assert list(summary) == ["preflight"]


# ----------------------------------------------------------------------------- the checks
def _junit(tmp_path: Path, *cases: str) -> Path:
    xml = tmp_path / "junit.xml"
    body = "".join(
        f'<testcase classname="t" name="c{i}">{c}</testcase>' for i, c in enumerate(cases)
    )
    xml.write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    return xml


TWO: Final = '<skipped type="pytest.skip" message="needs 2 CUDA devices, found 1"/>'
NONE: Final = '<skipped type="pytest.skip" message="no CUDA device: CuPy is installed but"/>'
NONE_ELSEWHERE: Final = (
    '<skipped message="no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)"/>'
)
NO_RULE_DEVICE: Final = '<skipped message="needs 1 CUDA device(s), 0 available"/>'


@pytest.mark.parametrize(
    ("cases", "status", "says"),
    [
        (["", TWO], 0, "1 ran"),
        ([TWO], 1, "no test ran"),
        (["", NONE], 1, "1 test(s) skipped because CUDA could not be used"),
        (["", NONE_ELSEWHERE], 1, "skipped because CUDA could not be used"),
        (["", NO_RULE_DEVICE], 1, "skipped because CUDA could not be used"),
        (['<failure message="boom"/>'], 0, "1 ran (0 passed, 1 failed"),
        (['<skipped type="pytest.xfail" message="known"/>', ""], 0, "1 xfailed"),
    ],
)
def test_junit_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cases: list[str], status: int, says: str
) -> None:
    """Fails when no test ran or any skipped for want of a CUDA device (a failed test fails the
    pytest step itself)."""
    assert _helper().junit(_junit(tmp_path, *cases)) == status
    assert says in capsys.readouterr().out


def test_junit_check_without_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _helper().junit(tmp_path / "absent.xml") == 1
    assert "was not written" in capsys.readouterr().out


def test_the_test_plugins_check(monkeypatch: pytest.MonkeyPatch) -> None:
    helper = _helper()
    assert helper._release("1.5.0rc1") == (1, 5, 0)
    assert helper._release("1.10") == (1, 10)
    versions = {"pytest-asyncio": "1.4.0", "pytest": "8.4.1", "pytest-timeout": "2.4.0"}
    monkeypatch.setattr(helper, "_version", versions.get)
    assert helper._test_plugins() == "pytest-asyncio 1.4.0, pytest 8.4.1, pytest-timeout 2.4.0"
    versions["pytest-asyncio"] = "1.3.0"
    with pytest.raises(helper.Missing, match=r"pytest-asyncio 1.3.0 is too old: .*>= 1.4"):
        helper._test_plugins()
    del versions["pytest-asyncio"]
    with pytest.raises(helper.Missing, match=r"pytest-asyncio is not installed.*\.whl/"):
        helper._test_plugins()
    versions["pytest-asyncio"] = "1.5.0"
    del versions["pytest-timeout"]
    with pytest.raises(helper.Missing, match="pytest-timeout is not installed"):
        helper._test_plugins()


@pytest.mark.cuda
def test_the_preflights_backward_pass_on_a_cuda_device() -> None:
    """The preflight's asyncgrad check (simulated here unless ASYNCGRAD_SIM_CUDA=0)."""
    import asyncgrad as ag

    if not ag.cuda.is_available():
        pytest.skip("no CUDA device (real, or simulated with ASYNCGRAD_SIM_CUDA=N)")
    assert _helper().asyncgrad_computes() == "backward() and await ag.grad on cuda:0"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_server_examples_saliency_on_a_simulated_device(tmp_path: Path) -> None:
    """What the saliency step runs: the app trains on cuda and its maps match the CPU's."""
    for module in ("fastapi", "sklearn", "PIL", "prometheus_client"):
        pytest.importorskip(module, reason="the server example needs pip install '.[server]'")
    env = {**os.environ, "ASYNCGRAD_SIM_CUDA": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(HELPER), "saliency", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": ok") == 2, proc.stdout
    assert (tmp_path / "server_digits.npz").exists()
