"""How asyncgrad fits with the tools around it: dtype checks, import cost, packaging."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Final

import pytest

import asyncgrad as ag

ROOT: Final = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------ dtype
@pytest.mark.parametrize(
    "dtype", [ag.float16, ag.float32, ag.float64, ag.int32, ag.int64, ag.bool, ag.float, ag.long]
)
def test_dtype_is_the_type_of_every_dtype(dtype: ag.dtype) -> None:
    # As `isinstance(t.dtype, torch.dtype)`.
    assert isinstance(dtype, ag.dtype)
    t = ag.zeros(2, dtype=dtype)
    assert isinstance(t.dtype, ag.dtype)
    assert t.dtype == dtype


def test_dtype_is_exported() -> None:
    assert "dtype" in ag.__all__
    assert isinstance(ag.tensor([1.0]).dtype, ag.dtype)
    assert not isinstance("float32", ag.dtype)
    assert not isinstance(ag.tensor([1.0]), ag.dtype)


# ------------------------------------------------------------------------------- import cost
# Records every attempt to import SciPy (whether or not it is installed), then imports asyncgrad.
_IMPORT_PROBE: Final = """
import sys

attempts = []


class Probe:
    def find_spec(self, name, path=None, target=None):
        if name == "scipy" or name.startswith("scipy."):
            attempts.append(name)
        return None


sys.meta_path.insert(0, Probe())
import asyncgrad

print(",".join(attempts) or "none")
"""


def test_import_does_not_import_scipy() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "none"


# --------------------------------------------------------------------------------- packaging
def test_editable_install_is_a_plain_path_entry() -> None:
    # setuptools' editable install is an import hook that mypy and IDEs cannot follow;
    # hatchling's is a .pth line with the project root, which they can.
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["build-system"]["build-backend"] == "hatchling.build"
    wheel = meta["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == ["asyncgrad"]
    assert not wheel.get("dev-mode-exact", False)  # that mode is an import hook too
    assert (ROOT / "asyncgrad" / "py.typed").is_file()
    extras = meta["project"]["optional-dependencies"]
    assert {"test", "uvloop", "cuda", "bench", "demo", "dev"} <= set(extras)


def test_the_package_says_its_license_and_ships_it() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "BSD-3-Clause"
    assert meta["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License\n")
    assert meta["authors"]
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog\n")


def test_the_readme_names_every_extra() -> None:
    """A user learns the extras from the README's list: each one in pyproject.toml is there."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    readme = (ROOT / "README.md").read_text()
    listed = readme[readme.index("Optional extras:") :].split("\n\n", 1)[0]
    missing = [name for name in extras if f"`{name}`" not in listed]
    assert not missing, f"extras not in the README's list: {missing}"
