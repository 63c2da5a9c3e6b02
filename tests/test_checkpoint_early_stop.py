"""``set_checkpoint_early_stop`` and ``checkpoint_sequential`` against torch's
(``torch.utils.checkpoint``): how often the checkpointed function runs, and the gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.utils import checkpoint as ag_checkpoint

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _count_runs(lib: Any, ckpt: Any, early: bool | None) -> tuple[list[str], np.ndarray]:
    """A region that saves in its first op only, then logs a later step: what runs again in
    backward, with early stop on, off, or left at its default."""
    log: list[str] = []

    def region(x: Any) -> Any:
        log.append("start")
        y = x.sin()  # saves x
        log.append("after the save")
        return y + 1.0  # saves nothing

    x = lib.tensor(np.linspace(-1.0, 1.0, 5), requires_grad=True)
    if early is None:
        out = ckpt.checkpoint(region, x, use_reentrant=False)
    else:
        with ckpt.set_checkpoint_early_stop(early):
            out = ckpt.checkpoint(region, x, use_reentrant=False)
    out.sum().backward()
    return log, x.grad.detach().numpy()


@pytest.mark.parametrize("early", [None, True, False], ids=["default", "on", "off"])
def test_early_stop_runs_what_torch_runs(early: bool | None) -> None:
    ours = _count_runs(ag, ag_checkpoint, early)
    theirs = _count_runs(torch, torch.utils.checkpoint, early)
    assert ours[0] == theirs[0]
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-12)
    expected = ["start", "after the save", "start"] + (
        [] if early in (None, True) else ["after the save"]
    )
    assert ours[0] == expected


def test_early_stop_applies_where_the_forward_ran() -> None:
    log: list[str] = []

    def region(x: Any) -> Any:
        y = x.exp()
        log.append("end")
        return y

    x = ag.tensor([0.5, 1.5], requires_grad=True)
    with ag_checkpoint.set_checkpoint_early_stop(False):
        out = ag_checkpoint.checkpoint(region, x, use_reentrant=False)
    out.sum().backward()  # outside the block: still runs to the end
    assert log == ["end", "end"]


@pytest.mark.parametrize("segments", [1, 2, 3, 5])
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_sequential_matches_torch(segments: int, use_reentrant: bool) -> None:
    rng = np.random.default_rng(segments)
    weights = [rng.standard_normal((4, 4)) * 0.5 for _ in range(5)]
    xv = rng.standard_normal((3, 4))
    results = []
    for lib, ckpt in ((ag, ag_checkpoint), (torch, torch.utils.checkpoint)):
        layers = []
        for w in weights:
            lin = lib.nn.Linear(4, 4, bias=False).double()
            with lib.no_grad():
                lin.weight.copy_(lib.tensor(w))
            layers += [lin, lib.nn.Tanh()]
        model = lib.nn.Sequential(*layers)
        x = lib.tensor(xv, requires_grad=True)
        out = ckpt.checkpoint_sequential(model, segments, x, use_reentrant=use_reentrant)
        (out * out).sum().backward()
        results.append(
            [x.grad.detach().numpy()] + [m.weight.grad.detach().numpy() for m in model[::2]]
        )
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_checkpoint_sequential_takes_a_list_and_refuses_unknown_keywords() -> None:
    fns = [lambda t: t * 2.0, lambda t: t.sin(), lambda t: t + 1.0]
    x = ag.tensor([0.1, 0.2], requires_grad=True)
    out = ag_checkpoint.checkpoint_sequential(fns, 2, x, use_reentrant=False)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * np.cos(2.0 * np.array([0.1, 0.2])))
    with pytest.raises(ValueError, match="Unexpected keyword arguments: bogus"):
        ag_checkpoint.checkpoint_sequential(fns, 2, x, use_reentrant=False, bogus=1)
