"""The coverage table of torch's everyday API (tests/torch_coverage.py) against the installed
torch: no list drops below its floor, and the README's coverage section prints the table as it
is now."""

from __future__ import annotations

import pathlib

import pytest

from tests import torch_coverage

torch = pytest.importorskip("torch", reason="compares with torch (pip install torch)")

# The counts of applicable names asyncgrad provides, per list; raise them as names are added.
FLOORS = {
    "torch.nn.modules.__all__": 163,
    "torch.nn.functional": 128,
    "torch.Tensor": 516,
    "torch.__all__": 622,
    "torch.nn.init": 24,
    "torch.optim": 14,
}
README = pathlib.Path(__file__).parent.parent / "README.md"


@pytest.fixture(scope="module")
def rows() -> list[torch_coverage.ListCoverage]:
    return torch_coverage.coverage()


def test_no_list_drops_below_its_floor(rows: list[torch_coverage.ListCoverage]) -> None:
    got = {r.name: r.have for r in rows}
    assert set(got) == set(FLOORS)
    dropped = {n: (got[n], f) for n, f in FLOORS.items() if got[n] < f}
    assert not dropped, f"coverage dropped (have, floor): {dropped}"


def test_the_readme_prints_the_table(rows: list[torch_coverage.ListCoverage]) -> None:
    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"the README's table is torch 2.13's, not {torch.__version__}'s")
    assert torch_coverage.table(rows) in README.read_text(), (
        "README.md's coverage table is out of date; print it with python -m tests.torch_coverage"
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("sparse_coo_tensor", "sparse tensors"),
        ("view_as_complex", "complex tensors"),
        ("quantize_per_tensor", "quantized tensors"),
        ("nested_tensor", "nested tensors"),
        ("refine_names", "named tensors"),
        ("ScriptModule", "TorchScript, torch.compile and export"),
        ("has_torch_function", "torch's dispatch and backend internals"),
    ],
)
def test_the_exclusion_rules(name: str, reason: str) -> None:
    assert torch_coverage.excluded(name) == reason


@pytest.mark.parametrize("name", ["quantile", "conv_transpose2d", "LSTMCell", "abs_", "stft"])
def test_everyday_names_are_applicable(name: str) -> None:
    assert torch_coverage.excluded(name) is None
