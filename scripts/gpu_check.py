"""The checks of scripts/gpu_check.sh that are Python, one per subcommand:

    python3 scripts/gpu_check.py preflight      does a real GPU compute? (versions first)
    python3 scripts/gpu_check.py tests XML [TIMEOUT_S]   pytest -m cuda tests, then `junit XML`
    python3 scripts/gpu_check.py junit XML       did the tests run, not skip for want of a GPU?
    python3 scripts/gpu_check.py cnn DIR [EPOCHS]   examples/cnn_digits.py on cuda
    python3 scripts/gpu_check.py saliency DIR    examples/server's saliency on cuda, in-process

Each prints what it checked and exits 0 when it passed, 1 when it failed, and 3 (``saliency``
and ``cnn`` only) when the example's packages are not installed, naming them. The package is
used from this checkout (run from the repository root with it on PYTHONPATH, as the shell script
does); ASYNCGRAD_SIM_CUDA defaults to 0, so CUDA means the real GPU.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import platform
import re
import subprocess
import sys
import traceback
import warnings
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
MISSING: Final = 3  # the exit status of an example whose packages are not installed
# pytest-asyncio 1.4 added the pytest_asyncio_loop_factories hook that tests/conftest.py uses;
# older versions ignore the hook, so every async test would run on one loop only, or not at all.
PYTEST_ASYNCIO_MIN: Final = (1, 4)
WHEELS_HELP: Final = "bring its wheel in .whl/ (see scripts/README.md)"
# Skip reasons of CUDA tests that mean CUDA could not be used at all.
NO_DEVICE: Final = re.compile(
    r"no CUDA device|needs a CUDA device|CUDA device\(s\), 0 available|found 0\b"
)

# The real GPU (gpu_check.sh sets 0 too), unless the environment says otherwise; the preflight
# fails on simulated devices.
os.environ.setdefault("ASYNCGRAD_SIM_CUDA", "0")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: "1.5.0rc1" -> (1, 5, 0)."""
    out = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        out.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(out)


def _close(got: Any, want: Any, rtol: float, atol: float, what: str) -> None:
    import numpy as np

    got = np.asarray(got)
    if got.shape != np.shape(want) or not np.allclose(got, want, rtol=rtol, atol=atol):
        worst = float(np.max(np.abs(got - want))) if got.shape == np.shape(want) else None
        raise AssertionError(
            f"{what}: wrong numbers (shape {got.shape} vs {np.shape(want)}, largest difference "
            f"{worst}, allowed rtol {rtol} atol {atol})"
        )


# ----------------------------------------------------------------------------- preflight
class Missing(Exception):
    """A check found something missing or wrong, and its message says what (no traceback)."""


class Preflight:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def check(self, what: str, fn: Callable[[], str | None]) -> bool:
        try:
            detail = fn()
        except Exception as e:
            text = f"{type(e).__name__}: {e}".strip()
            if isinstance(e, Missing):
                text = str(e)
            self.problems.append(f"{what}: {text}")
            print(f"  FAIL {what}: {text}", flush=True)
            if not isinstance(e, (Missing, AssertionError)):
                traceback.print_exc(limit=-3)
            return False
        print(f"  ok   {what}" + (f": {detail}" if detail else ""), flush=True)
        return True

    def skip(self, what: str, why: str) -> None:
        print(f"  --   {what}: not checked ({why})", flush=True)


def versions() -> None:
    print(f"python {platform.python_version()} ({sys.executable})")
    try:
        import asyncgrad
    except Exception as exc:  # the preflight's own check reports it as a problem
        print(f"asyncgrad: import failed: {exc!r}")
    else:
        print(f"asyncgrad {asyncgrad.__version__}, {asyncgrad.__build__} build")
    for dist in (
        "numpy",
        "cupy-cuda13x",
        "cupy-cuda12x",
        "cuda-pathfinder",
        "torch",
        "pytest",
        "pytest-asyncio",
        "pytest-timeout",
        "hypothesis",
        "anyio",
        "uvloop",
        "scikit-learn",
        "tqdm",
        "fastapi",
    ):
        version = _version(dist)
        if version is not None or not dist.startswith("cupy-cuda12"):
            print(f"{dist} {version or 'not installed'}")
    sys.stdout.flush()


def _test_plugins() -> str:
    """The test tools tests/conftest.py and pyproject.toml need."""
    found = []
    pa = _version("pytest-asyncio")
    if pa is None:
        raise Missing(
            "pytest-asyncio is not installed: the tests need pytest-asyncio >= 1.4 (the "
            f"pytest_asyncio_loop_factories hook of tests/conftest.py); {WHEELS_HELP}"
        )
    if _release(pa) < PYTEST_ASYNCIO_MIN:
        raise Missing(
            f"pytest-asyncio {pa} is too old: the tests need >= 1.4 (the "
            "pytest_asyncio_loop_factories hook of tests/conftest.py); bring the 1.5.0 wheel "
            "in .whl/ (see scripts/README.md)"
        )
    found.append(f"pytest-asyncio {pa}")
    pytest_version = _version("pytest")
    if pytest_version is None or _release(pytest_version) < (8, 4):
        raise Missing(f"pytest {pytest_version} found; pytest-asyncio 1.4+ needs pytest 8.4+")
    found.append(f"pytest {pytest_version}")
    pt = _version("pytest-timeout")
    if pt is None:
        raise Missing(
            "pytest-timeout is not installed: pyproject.toml sets `timeout` and pytest runs "
            f"with --strict-config; {WHEELS_HELP}"
        )
    found.append(f"pytest-timeout {pt}")
    return ", ".join(found)


def preflight() -> int:
    """Fails (exit 1, saying what is missing) unless a real CUDA device computes: CuPy imports
    and sees a device, a kernel compiled at run time (NVRTC), a matrix product (cuBLAS) and a
    reduction give NumPy's numbers, and asyncgrad sees the real device and computes a backward
    pass on it. Also checks the test plugins. Warnings are printed (the tests make them
    errors)."""
    print("== versions", flush=True)
    versions()
    print("== preflight", flush=True)
    pf = Preflight()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pf.check("test plugins", _test_plugins)
        _device_checks(pf)
    for w in caught:
        print(f"  warning: {w.category.__name__}: {w.message} ({w.filename}:{w.lineno})")
    if caught:
        print("  (pytest runs with filterwarnings = error: a warning above fails the tests)")
    if pf.problems:
        print(f"preflight FAILED: {len(pf.problems)} problem(s); a real GPU must compute first:")
        for p in pf.problems:
            print(f"  - {p}")
        return 1
    print("preflight passed: a real CUDA device computes")
    return 0


def _device_checks(pf: Preflight) -> None:
    import numpy as np

    cp: Any = None

    def import_cupy() -> str:
        nonlocal cp
        import cupy

        cp = cupy
        return f"CuPy {cupy.__version__} from {Path(cupy.__file__).parent}"

    if not pf.check("CuPy imports", import_cupy):
        for what in ("a CUDA device", "NVRTC", "cuBLAS", "reduction", "asyncgrad on cuda"):
            pf.skip(what, "CuPy does not import")
        return

    def versions_of_cuda() -> str:
        parts = []
        for name, get in (
            ("runtime", lambda: cp.cuda.runtime.runtimeGetVersion()),
            ("driver", lambda: cp.cuda.runtime.driverGetVersion()),
        ):
            try:
                v = int(get())
                shown = f"{v // 1000}.{v % 1000 // 10}" if v else "none"
                parts.append(f"CUDA {name} {shown}")
            except Exception as e:
                parts.append(f"CUDA {name} unknown ({type(e).__name__}: {e})")
        return ", ".join(parts)

    def device() -> str:
        try:
            n = int(cp.cuda.runtime.getDeviceCount())
        except Exception as e:
            raise Missing(
                f"CuPy finds no usable CUDA device ({e}); {versions_of_cuda()} (a driver older "
                "than the runtime CuPy was built for gives cudaErrorInsufficientDriver)"
            ) from e
        if n < 1:
            raise Missing("CuPy finds no CUDA device (getDeviceCount() == 0)")
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        return (
            f"{n} device(s); cuda:0 is {name}, compute capability {props['major']}."
            f"{props['minor']}; {versions_of_cuda()}"
        )

    if not pf.check("a CUDA device", device):
        for what in ("NVRTC", "cuBLAS", "reduction", "asyncgrad on cuda"):
            pf.skip(what, "no usable CUDA device")
        return

    rng = np.random.default_rng(0)

    def nvrtc() -> str:
        kernel = cp.ElementwiseKernel(
            "float64 x, float64 y", "float64 z", "z = x * y + sin(x)", "gpu_check_preflight"
        )
        xv, yv = rng.standard_normal(1000), rng.standard_normal(1000)
        got = cp.asnumpy(kernel(cp.asarray(xv), cp.asarray(yv)))
        _close(got, xv * yv + np.sin(xv), 1e-12, 1e-12, "elementwise kernel")
        try:
            major, minor = cp.cuda.nvrtc.getVersion()
            return f"NVRTC {major}.{minor}"
        except Exception:
            return ""

    pf.check("a kernel compiled at run time (NVRTC)", nvrtc)

    def cublas() -> str:
        for dtype, tol in ((np.float64, 1e-10), (np.float32, 1e-4)):
            a = rng.standard_normal((64, 48)).astype(dtype)
            b = rng.standard_normal((48, 32)).astype(dtype)
            got = cp.asnumpy(cp.asarray(a) @ cp.asarray(b))
            _close(
                got,
                a.astype(np.float64) @ b.astype(np.float64),
                tol,
                tol,
                f"{dtype.__name__} matmul",
            )
        return "float64 and float32 matmul"

    pf.check("a matrix product (cuBLAS)", cublas)

    def reduction() -> str:
        xv = rng.standard_normal((30, 1000))
        x = cp.asarray(xv)
        _close(cp.asnumpy(x.sum(axis=1)), xv.sum(axis=1), 1e-10, 1e-10, "sum")
        _close(float(x.max()), xv.max(), 0.0, 0.0, "max")
        return "sum over an axis, max"

    pf.check("a reduction", reduction)

    def asyncgrad_on_cuda() -> str:
        import asyncgrad as ag
        from asyncgrad.backend import cuda as runtime

        if not ag.cuda.is_available():
            raise Missing(f"asyncgrad sees no CUDA device: {runtime.why()}")
        if runtime.simulated():
            raise Missing("asyncgrad's CUDA devices are simulated (ASYNCGRAD_SIM_CUDA)")
        return asyncgrad_computes()

    pf.check("asyncgrad on the real device", asyncgrad_on_cuda)


def asyncgrad_computes() -> str:
    """One ``backward()`` and one awaited ``ag.grad`` on cuda:0, against NumPy's numbers."""
    import numpy as np

    import asyncgrad as ag

    xv = np.linspace(-2.0, 2.0, 257)
    x = ag.tensor(xv, device="cuda", requires_grad=True)
    (x.sin() * x).sum().backward()
    assert x.grad is not None, "backward left x.grad None"
    assert str(x.grad.device) == "cuda:0", f"the gradient is on {x.grad.device}"
    _close(x.grad.cpu().numpy(), np.cos(xv) * xv + np.sin(xv), 1e-10, 1e-10, "backward")

    async def awaited() -> Any:
        (g,) = await asyncio.wait_for(ag.grad((x * x).exp().sum(), [x]), 60)
        return g.cpu().numpy()

    _close(asyncio.run(awaited()), 2 * xv * np.exp(xv * xv), 1e-10, 1e-10, "await ag.grad")
    return "backward() and await ag.grad on cuda:0"


# ----------------------------------------------------------------------------- junit
def junit(path: Path) -> int:
    """Exit 1 unless the JUnit XML at ``path`` shows tests that ran (not skipped), and no test
    skipped because CUDA could not be used. Prints the counts and the skip reasons."""
    if not path.exists():
        print(f"junit: {path} was not written (pytest did not finish)")
        return 1
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None:
            kind = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
            counts[kind] += 1
            if kind == "skipped":
                reasons[skipped.get("message", "")] += 1
        elif case.find("failure") is not None:
            counts["failed"] += 1
        elif case.find("error") is not None:
            counts["errors"] += 1
        else:
            counts["passed"] += 1
    ran = counts["passed"] + counts["failed"] + counts["errors"]
    print(
        f"junit: {ran} ran ({counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['errors']} errors), {counts['skipped']} skipped, {counts['xfailed']} xfailed"
    )
    for reason, n in reasons.most_common():
        print(f"  skipped {n}: {reason}")
    no_device = sum(n for reason, n in reasons.items() if NO_DEVICE.search(reason))
    status = 0
    if ran == 0:
        print("junit: FAILED: no test ran")
        status = 1
    if no_device:
        print(f"junit: FAILED: {no_device} test(s) skipped because CUDA could not be used")
        status = 1
    return status


def tests(xml: Path, per_test_s: int) -> int:
    """The CUDA tests (tests/cuda and every test marked ``cuda``) with a JUnit XML report at
    ``xml``; fails if pytest failed or ``junit`` does."""
    xml.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider"]
    cmd += [f"--timeout={per_test_s}", f"--junitxml={xml}", "-o", "junit_family=xunit2", "tests"]
    print("tests: " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, check=False).returncode
    if rc != 0:
        print(f"tests: FAILED: pytest exited with {rc}")
    return 1 if junit(xml) != 0 or rc != 0 else 0


# ----------------------------------------------------------------------------- the examples
def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def cnn(out: Path, epochs: int) -> int:
    """examples/cnn_digits.py on cuda for ``epochs`` epochs; it must train on cuda, reload its
    weights to the same predictions and profile nodes on cuda:0."""
    missing = _missing("sklearn", "tqdm")
    if missing:
        print(f"cnn: the example needs {', '.join(missing)}: not installed")
        return MISSING
    cmd = [sys.executable, str(ROOT / "examples" / "cnn_digits.py"), "--device", "cuda"]
    cmd += ["--epochs", str(epochs), "--out", str(out), "--no-progress"]
    print("cnn: " + " ".join(cmd), flush=True)
    proc = subprocess.run(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        print(f"cnn: FAILED: the example exited with {proc.returncode}")
        return 1
    wanted = ("training on cuda", "reloaded model agrees: True", "cuda:0")
    absent = [w for w in wanted if w not in proc.stdout]
    if absent:
        print(f"cnn: FAILED: its output lacks {absent}")
        return 1
    return 0


def saliency(out: Path) -> int:
    """examples/server's saliency handler on cuda, in-process: the app trains its model on cuda
    (saving the weights under ``out``), then a plain and a SmoothGrad request go through
    ``app.saliency``; the same requests on a CPU server loading those weights give the same
    maps."""
    missing = _missing("fastapi", "pydantic", "PIL", "prometheus_client", "sklearn")
    if missing:
        print(f"saliency: the server example needs {', '.join(missing)}: not installed")
        return MISSING
    import numpy as np

    sys.path.insert(0, str(ROOT / "examples" / "server"))
    import app

    async def main() -> int:
        weights = out / "server_digits.npz"
        weights.unlink(missing_ok=True)
        gpu = await app.start(app.Settings(weights=weights, device="cuda"))
        cpu = await app.start(app.Settings(weights=weights, device="cpu"))
        try:
            print(f"saliency: trained on {gpu.device}, test accuracy {gpu.accuracy:.1%}")
            image = np.abs(np.sin(np.arange(64.0).reshape(8, 8) / 5.0))
            status = 0
            for samples in (1, 16):
                req = app.SaliencyRequest.model_validate(
                    {"image": image.tolist(), "samples": samples, "noise": 0.1, "seed": 3}
                )
                got = await asyncio.wait_for(app.saliency(gpu, req), 120)
                want = await asyncio.wait_for(app.saliency(cpu, req), 120)
                g, w = np.asarray(got["saliency"]), np.asarray(want["saliency"])
                scale = max(1.0, float(np.abs(w).max()))
                same = got["target"] == want["target"] and np.allclose(
                    g, w, rtol=1e-4, atol=1e-4 * scale
                )
                print(
                    f"saliency: samples={samples}: target {got['target']} (cpu "
                    f"{want['target']}), largest difference from the CPU's map "
                    f"{float(np.abs(g - w).max()):.2e}: {'ok' if same else 'DIFFERENT'}"
                )
                status |= 0 if same else 1
            return status
        finally:
            await app.stop(gpu)
            await app.stop(cpu)

    if str(app.Settings(device="cuda").resolve_device()) != "cuda":
        print("saliency: FAILED: the app does not resolve its device to cuda")
        return 1
    return asyncio.run(main())


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "preflight" and not args:
        return preflight()
    if cmd == "tests" and len(args) in (1, 2):
        return tests(Path(args[0]), int(args[1]) if len(args) == 2 else 300)
    if cmd == "junit" and len(args) == 1:
        return junit(Path(args[0]))
    if cmd == "cnn" and len(args) in (1, 2):
        return cnn(Path(args[0]), int(args[1]) if len(args) == 2 else 1)
    if cmd == "saliency" and len(args) == 1:
        return saliency(Path(args[0]))
    print(f"unknown command: {' '.join(argv)}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
