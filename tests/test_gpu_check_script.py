"""scripts/gpu_check.sh, the one call that runs the CUDA tests on a GPU, here where there is
none: it must fail at once, saying why, rather than pass a run where every test skipped. And
the test folders must not hide packages that CuPy imports, or on a GPU every CUDA test skips."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Final

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
