"""PyTorch programs (tests/examples/torch_programs, in the style of pytorch/examples) run with
only their imports changed: each is built by both libraries, asyncgrad's copy gets torch's
initial weights, both train on the same batches, and the losses (or the attributions) and the
final weights agree."""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="compares with torch (pip install torch)")

HERE = Path(__file__).parent / "torch_programs"


def as_asyncgrad(source: str) -> str:
    """The program with its imports of torch changed to asyncgrad's, and nothing else."""

    def change(m: re.Match[str]) -> str:
        line = m.group(0)
        if re.fullmatch(r"import torch", line):
            return "import asyncgrad as torch"
        return re.sub(r"\btorch\b", "asyncgrad", line)

    return re.sub(
        r"^(import torch\S*( as \w+)?|from torch\S* import .*)$", change, source, flags=re.M
    )


def load(name: str, library: str) -> types.ModuleType:
    source = (HERE / f"{name}.py").read_text()
    if library == "asyncgrad":
        source = as_asyncgrad(source)
    module = types.ModuleType(f"{name}_{library}")
    module.__file__ = str(HERE / f"{name}.py")
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def _int(rng: np.random.Generator, high: int, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    return rng.integers(0, high, shape).astype(np.int64)


def _f32(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    return rng.standard_normal(shape).astype(np.float32)


# Per program: its batches as NumPy arrays, how many steps, and the tolerance of the comparison.
DATA: dict[str, tuple[Callable[[np.random.Generator], list[tuple[Any, ...]]], int, float]] = {
    "mnist_cnn": (
        lambda r: [(_f32(r, (16, 1, 16, 16)), _int(r, 10, (16,))) for _ in range(2)],
        4,
        1e-4,
    ),
    "vae": (
        lambda r: [(r.random((16, 64)).astype(np.float32), _f32(r, (16, 8))) for _ in range(2)],
        5,
        1e-4,
    ),
    "word_lm": (lambda r: [(_int(r, 50, (10, 4)), _int(r, 50, (40,))) for _ in range(2)], 4, 1e-4),
    "transformer_lm": (
        lambda r: [(_int(r, 40, (12, 3)), _int(r, 40, (36,))) for _ in range(2)],
        3,
        2e-4,
    ),
    "dcgan": (
        lambda r: [(np.tanh(_f32(r, (8, 1, 16, 16))), _f32(r, (8, 8, 1, 1))) for _ in range(2)],
        3,
        2e-4,
    ),
    "saliency": (lambda r: [(_f32(r, (2, 3, 8, 8)), _int(r, 5, (2,))) for _ in range(2)], 2, 1e-4),
}


@pytest.mark.parametrize("name", sorted(DATA))
def test_program_runs_unchanged_and_matches_torch(name: str) -> None:
    import asyncgrad as ag

    make, steps, tol = DATA[name]
    batches = make(np.random.default_rng(0))
    theirs, ours = load(name, "torch"), load(name, "asyncgrad")
    torch.manual_seed(0)
    t_model = theirs.build()
    a_model = ours.build()
    state = {k: ag.tensor(v.detach().numpy().copy()) for k, v in t_model.state_dict().items()}
    a_model.load_state_dict(state)
    t_losses = theirs.train(
        t_model, [tuple(torch.from_numpy(a) for a in b) for b in batches], steps
    )
    a_losses = ours.train(a_model, [tuple(ag.tensor(a) for a in b) for b in batches], steps)
    np.testing.assert_allclose(a_losses, t_losses, rtol=tol, atol=tol)
    t_state = t_model.state_dict()
    for k, v in a_model.state_dict().items():
        np.testing.assert_allclose(
            v.numpy(), t_state[k].detach().numpy(), rtol=tol * 10, atol=tol * 10, err_msg=k
        )


def test_only_the_imports_change() -> None:
    src = "import torch\nimport torch.nn as nn\nfrom torch import nn, optim\nx = torch.zeros(1)\n"
    assert as_asyncgrad(src) == (
        "import asyncgrad as torch\nimport asyncgrad.nn as nn\nfrom asyncgrad import nn, optim\n"
        "x = torch.zeros(1)\n"
    )
