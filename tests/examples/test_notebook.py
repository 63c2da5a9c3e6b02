"""PyTorch code in a Jupyter notebook: a real kernel (ipykernel, driven by nbclient) runs cells
on its event loop's thread, and torch's spelling works there unchanged (See NOTE [Module code
cannot await] in asyncgrad/autograd/entry.py), while a cell with a top-level ``await`` awaits."""

from __future__ import annotations

import json
from typing import Any, Final

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (extra: test)")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (extra: test)")
pytest.importorskip("ipykernel", reason="ipykernel is not installed (extra: test)")

TIMEOUT_S: Final = 60

CELLS: Final = [
    "import asyncio, json\n"
    "import asyncgrad as ag\n"
    "from asyncgrad.autograd import functional as F\n"
    "x = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)\n"
    "y = (x ** 3).sum()\n"
    "out = {'loop': asyncio.get_running_loop() is not None}",
    "(g,) = ag.autograd.grad(y, x, retain_graph=True)\nout['grad'] = g.tolist()",
    "def step():\n"
    "    ag.autograd.backward(y, retain_graph=True)\n"
    "step()\n"
    "out['backward'] = x.grad.tolist()",
    "out['jacobian'] = F.jacobian(lambda t: t ** 2, x.detach()).tolist()",
    "(h,) = await ag.grad(y, x)\nout['awaited'] = h.tolist()",
    "print(json.dumps(out))",
]


def test_torch_code_runs_unchanged_in_a_notebook() -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3").execute()
    outputs: list[Any] = nb.cells[-1]["outputs"]
    got = json.loads(outputs[0]["text"])
    assert got == {
        "loop": True,  # the cells ran with the kernel's event loop running
        "grad": [3.0, 12.0],  # 3 x^2
        "backward": [3.0, 12.0],
        "jacobian": [[2.0, 0.0], [0.0, 4.0]],
        "awaited": [3.0, 12.0],
    }
