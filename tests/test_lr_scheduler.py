"""ag.optim.lr_scheduler against torch's schedules over many epochs."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import asyncgrad as ag
from asyncgrad import nn, optim
from asyncgrad.optim import lr_scheduler as sched


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for the schedules")


def _two_groups_ag() -> optim.Optimizer:
    a, b = nn.Parameter(ag.zeros(2)), nn.Parameter(ag.zeros(3))
    return optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)


def _two_groups_torch(torch: Any) -> Any:
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)
    return torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)


CASES: dict[str, tuple[Callable[[Any, Any], Any], dict[str, Any]]] = {
    "step": (lambda m, o: m.StepLR(o, step_size=7, gamma=0.5), {}),
    "multistep": (lambda m, o: m.MultiStepLR(o, milestones=[3, 10, 10, 40], gamma=0.3), {}),
    "exponential": (lambda m, o: m.ExponentialLR(o, gamma=0.95), {}),
    "lambda": (lambda m, o: m.LambdaLR(o, lambda e: 1 / (1 + e)), {}),
    "lambda_per_group": (
        lambda m, o: m.LambdaLR(o, [lambda e: 0.9**e, lambda e: math.cos(e / 10) + 1.5]),
        {},
    ),
    "cosine": (lambda m, o: m.CosineAnnealingLR(o, T_max=20), {}),
    "cosine_eta_min": (lambda m, o: m.CosineAnnealingLR(o, T_max=13, eta_min=0.01), {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_matches_torch_over_many_epochs(torch: Any, name: str) -> None:
    make, _ = CASES[name]
    mine_opt, theirs_opt = _two_groups_ag(), _two_groups_torch(torch)
    mine, theirs = make(sched, mine_opt), make(torch.optim.lr_scheduler, theirs_opt)
    for epoch in range(100):
        assert mine.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12, abs=1e-15), (
            epoch
        )
        assert [g["lr"] for g in mine_opt.param_groups] == pytest.approx(
            [g["lr"] for g in theirs_opt.param_groups], rel=1e-12, abs=1e-15
        )
        mine_opt.step()
        theirs_opt.step()
        mine.step()
        theirs.step()
    assert mine.last_epoch == theirs.last_epoch == 100


def test_chained_schedulers_match_torch(torch: Any) -> None:
    mine_opt, theirs_opt = _two_groups_ag(), _two_groups_torch(torch)
    mine = [sched.StepLR(mine_opt, 5, 0.5), sched.ExponentialLR(mine_opt, 0.9)]
    tl = torch.optim.lr_scheduler
    theirs = [tl.StepLR(theirs_opt, 5, 0.5), tl.ExponentialLR(theirs_opt, 0.9)]
    for _ in range(30):
        mine_opt.step()
        theirs_opt.step()
        for m, t in zip(mine, theirs, strict=True):
            m.step()
            t.step()
        assert mine[-1].get_last_lr() == pytest.approx(theirs[-1].get_last_lr(), rel=1e-12)


def test_state_dict_round_trip_resumes_the_schedule(torch: Any) -> None:
    opt = _two_groups_ag()
    s = sched.CosineAnnealingLR(opt, T_max=10, eta_min=0.001)
    for _ in range(4):
        s.step()
    state = s.state_dict()
    assert "optimizer" not in state
    assert state["last_epoch"] == 4
    assert set(state) >= {"base_lrs", "last_epoch", "T_max", "eta_min", "_last_lr"}
    expected = []
    for _ in range(6):
        s.step()
        expected.extend(s.get_last_lr())
    opt2 = _two_groups_ag()
    opt2.load_state_dict(opt.state_dict())
    s2 = sched.CosineAnnealingLR(opt2, T_max=99)
    s2.load_state_dict(state)
    for group, lr in zip(opt2.param_groups, state["_last_lr"], strict=True):
        group["lr"] = lr  # the optimizer's state is saved with it in a real checkpoint
    got = []
    for _ in range(6):
        s2.step()
        got.extend(s2.get_last_lr())
    assert got == pytest.approx(expected, rel=1e-12)
    t = torch.optim.lr_scheduler.CosineAnnealingLR(_two_groups_torch(torch), 10, 0.001)
    assert set(t.state_dict()) <= set(state) | {"_is_initial", "_get_lr_called_within_step"}


def test_lambda_state_dict_leaves_out_the_functions() -> None:
    s = sched.LambdaLR(_two_groups_ag(), lambda e: 0.5)
    assert "lr_lambdas" not in s.state_dict()
    assert s.get_last_lr() == pytest.approx([0.05, 0.25])


def test_step_with_epoch_uses_the_closed_form(torch: Any) -> None:
    for make in (
        lambda m, o: m.StepLR(o, 3, 0.5),
        lambda m, o: m.CosineAnnealingLR(o, 10),
        lambda m, o: m.ExponentialLR(o, 0.9),
        lambda m, o: m.MultiStepLR(o, [2, 5], 0.1),
    ):
        mine = make(sched, _two_groups_ag())
        mine.step(7)
        theirs = make(torch.optim.lr_scheduler, _two_groups_torch(torch))
        with warnings.catch_warnings():  # torch deprecates the epoch argument
            warnings.simplefilter("ignore")
            theirs.step(7)
        assert mine.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12)


def test_errors() -> None:
    with pytest.raises(TypeError, match="is not an Optimizer"):
        sched.StepLR(object(), 3)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="param 'initial_lr' is not specified in param_groups"):
        sched.StepLR(_two_groups_ag(), 3, last_epoch=5)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        sched.LambdaLR(_two_groups_ag(), [lambda e: 1.0])
