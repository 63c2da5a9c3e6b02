"""RMSprop, Adagrad and Adadelta step for step against torch.optim (float64, the same
parameters and gradients), against closed forms without torch; ReduceLROnPlateau and
OneCycleLR rate for rate against torch's."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import optim

RNG = np.random.default_rng(4)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch.optim is the reference")


def _run_both(torch: Any, name: str, kwargs: dict[str, Any], steps: int = 6) -> None:
    w0, b0 = RNG.standard_normal((3, 2)), RNG.standard_normal(3)
    pa = [ag.tensor(w0, requires_grad=True), ag.tensor(b0, requires_grad=True)]
    pt = [torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)]
    oa = getattr(optim, name)(pa, **kwargs)
    ot = getattr(torch.optim, name)(pt, **kwargs)
    for _ in range(steps):
        x = RNG.standard_normal((4, 2))
        for lib, ps, opt in ((ag, pa, oa), (torch, pt, ot)):
            opt.zero_grad()
            y = lib.tensor(x) @ ps[0].T + ps[1]
            (y * y).sum().backward()
            opt.step()
        for a, t in zip(pa, pt, strict=True):
            np.testing.assert_allclose(a.detach().numpy(), t.detach().numpy(), rtol=1e-11)
    state_a, state_t = oa.state_dict()["state"], ot.state_dict()["state"]
    assert sorted(state_a[0]) == sorted(state_t[0])
    for k, v in state_t[0].items():
        got = state_a[0][k]
        if k == "step":
            assert float(got) == float(v)
        else:
            np.testing.assert_allclose(got.numpy(), v.numpy(), rtol=1e-11, err_msg=k)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("RMSprop", {}),
        ("RMSprop", {"lr": 0.05, "alpha": 0.9, "momentum": 0.8, "weight_decay": 0.1}),
        ("RMSprop", {"centered": True, "momentum": 0.5}),
        ("RMSprop", {"maximize": True}),
        ("Adagrad", {}),
        ("Adagrad", {"lr": 0.3, "lr_decay": 0.1, "weight_decay": 0.05}),
        ("Adagrad", {"initial_accumulator_value": 0.4, "eps": 1e-6}),
        ("Adadelta", {}),
        ("Adadelta", {"lr": 0.5, "rho": 0.7, "eps": 1e-4, "weight_decay": 0.2}),
        ("Adadelta", {"maximize": True}),
    ],
)
def test_optimizers_match_torch(torch: Any, name: str, kwargs: dict[str, Any]) -> None:
    _run_both(torch, name, kwargs)


def test_optimizer_defaults_match_torch(torch: Any) -> None:
    p = [ag.zeros(1, requires_grad=True)]
    q = [torch.zeros(1, requires_grad=True)]
    for name in ("RMSprop", "Adagrad", "Adadelta"):
        ga = getattr(optim, name)(p).param_groups[0]
        gt = getattr(torch.optim, name)(q).param_groups[0]
        for k, v in ga.items():
            if k != "params":
                assert gt[k] == v, (name, k)


def test_adagrad_state_exists_from_construction(torch: Any) -> None:
    p = ag.zeros(2, requires_grad=True)
    st = optim.Adagrad([p], initial_accumulator_value=0.5).state_dict()["state"]
    ref = torch.optim.Adagrad([torch.zeros(2, requires_grad=True)], initial_accumulator_value=0.5)
    assert sorted(st[0]) == sorted(ref.state_dict()["state"][0])
    np.testing.assert_array_equal(st[0]["sum"].numpy(), [0.5, 0.5])


def test_closed_forms_of_a_first_step() -> None:
    g = np.array([0.5, -2.0])
    for name, kwargs, expected in [
        ("RMSprop", {"lr": 0.1}, -0.1 * g / (np.sqrt(0.01 * g * g) + 1e-8)),
        ("Adagrad", {"lr": 0.1}, -0.1 * g / (np.abs(g) + 1e-10)),
        ("Adadelta", {"lr": 1.0}, -np.sqrt(1e-6) / np.sqrt(0.1 * g * g + 1e-6) * g),
    ]:
        p = ag.zeros(2, dtype=ag.float64, requires_grad=True)
        opt = getattr(optim, name)([p], **kwargs)
        p.grad = ag.tensor(g)
        opt.step()
        np.testing.assert_allclose(p.detach().numpy(), expected, rtol=1e-12, err_msg=name)


def test_invalid_hyperparameters() -> None:
    p = [ag.zeros(1, requires_grad=True)]
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        optim.RMSprop(p, lr=-1)
    with pytest.raises(ValueError, match=r"Invalid alpha value: -0\.5"):
        optim.RMSprop(p, alpha=-0.5)
    with pytest.raises(ValueError, match="Invalid lr_decay value: -1"):
        optim.Adagrad(p, lr_decay=-1)
    with pytest.raises(ValueError, match=r"Invalid rho value: 1\.5"):
        optim.Adadelta(p, rho=1.5)


# ============================================================================ schedulers
def _opt_pair(torch: Any, name: str = "SGD", **kw: Any) -> tuple[Any, Any]:
    pa = [ag.zeros(1, requires_grad=True)]
    pb = [ag.zeros(1, requires_grad=True)]
    ta = [torch.zeros(1, requires_grad=True)]
    tb = [torch.zeros(1, requires_grad=True)]
    oa = getattr(optim, name)([{"params": pa}, {"params": pb, "lr": 0.5}], **kw)
    ot = getattr(torch.optim, name)([{"params": ta}, {"params": tb, "lr": 0.5}], **kw)
    return oa, ot


METRICS = [5.0, 4.0, 4.0, 4.0, 3.9999, 4.1, 4.2, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 1.0] * 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"patience": 2},
        {"patience": 1, "factor": 0.5, "cooldown": 2, "min_lr": [0.01, 0.2]},
        {"mode": "max", "patience": 0, "threshold": 0.1, "threshold_mode": "abs"},
        {"patience": 0, "min_lr": 0.05, "eps": 1e-3},
        {"mode": "min", "threshold_mode": "abs", "threshold": 0.5, "patience": 1},
    ],
)
def test_reduce_lr_on_plateau_matches_torch(torch: Any, kwargs: dict[str, Any]) -> None:
    oa, ot = _opt_pair(torch, lr=1.0)
    sa = optim.lr_scheduler.ReduceLROnPlateau(oa, **kwargs)
    st = torch.optim.lr_scheduler.ReduceLROnPlateau(ot, **kwargs)
    assert sa.get_last_lr() == st.get_last_lr()
    for m in METRICS:
        sa.step(m)
        st.step(m)
        assert [g["lr"] for g in oa.param_groups] == [g["lr"] for g in ot.param_groups]
        assert sa.get_last_lr() == st.get_last_lr()
        assert (sa.best, sa.num_bad_epochs, sa.last_epoch) == (
            st.best,
            st.num_bad_epochs,
            st.last_epoch,
        )


def test_reduce_lr_on_plateau_closed_form_and_errors() -> None:
    opt = optim.SGD([ag.zeros(1, requires_grad=True)], lr=1.0)
    sched = optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
    for m in (1.0, 1.0, 1.0, 1.0, 1.0):  # bad epochs: 1, 2 (reduce), 1, 2 (reduce)
        sched.step(ag.tensor(m))
    assert opt.param_groups[0]["lr"] == 0.25
    with pytest.raises(ValueError, match=r"Factor should be < 1\.0\."):
        optim.lr_scheduler.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode avg is unknown!"):
        optim.lr_scheduler.ReduceLROnPlateau(opt, mode="avg")
    with pytest.raises(TypeError, match=r"needs the metric"):
        sched.step()


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("SGD", {"max_lr": 1.0, "total_steps": 20}),
        ("SGD", {"max_lr": [1.0, 2.0], "epochs": 3, "steps_per_epoch": 5, "pct_start": 0.4}),
        ("SGD", {"max_lr": 0.3, "total_steps": 17, "anneal_strategy": "linear"}),
        ("SGD", {"max_lr": 0.3, "total_steps": 16, "three_phase": True}),
        ("Adam", {"max_lr": 0.01, "total_steps": 12, "base_momentum": 0.8}),
        ("SGD", {"max_lr": 0.1, "total_steps": 10, "cycle_momentum": False, "div_factor": 5}),
    ],
)
def test_one_cycle_lr_matches_torch(torch: Any, name: str, kwargs: dict[str, Any]) -> None:
    oa, ot = _opt_pair(torch, name, **({"momentum": 0.9} if name == "SGD" else {}))
    sa = optim.lr_scheduler.OneCycleLR(oa, **kwargs)
    st = torch.optim.lr_scheduler.OneCycleLR(ot, **kwargs)
    steps = kwargs.get("total_steps") or kwargs["epochs"] * kwargs["steps_per_epoch"]
    for _ in range(steps):
        for ga, gt in zip(oa.param_groups, ot.param_groups, strict=True):
            assert ga["lr"] == pytest.approx(gt["lr"], rel=1e-14, abs=1e-16)
            for k in ("momentum", "betas"):
                if k in gt:
                    assert ga[k] == pytest.approx(gt[k], rel=1e-14)
        oa.step()
        ot.step()
        sa.step()
        st.step()
    assert sa.get_last_lr() == pytest.approx(st.get_last_lr(), rel=1e-14, abs=1e-16)
    with pytest.raises(ValueError, match=r"Tried to step \d+ times\. The specified number"):
        sa.step()
    assert math.isclose(oa.param_groups[0]["initial_lr"], ot.param_groups[0]["initial_lr"])


def test_one_cycle_lr_closed_form_and_errors() -> None:
    opt = optim.SGD([ag.zeros(1, requires_grad=True)], lr=1.0, momentum=0.9)
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=12, pct_start=0.5)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(11):
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs[0] == pytest.approx(1.0 / 25)
    assert max(lrs) == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(1.0 / 25 / 1e4)
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.95)
    with pytest.raises(ValueError, match="You must define either total_steps OR"):
        optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="Expected float between 0 and 1 pct_start"):
        optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3, pct_start=2.0)


def test_switches_that_change_a_step_are_refused_and_foreach_accepted() -> None:
    p = [ag.zeros(1, requires_grad=True)]
    with pytest.raises(NotImplementedError, match=r"RMSprop\(differentiable=True\)"):
        optim.RMSprop(p, differentiable=True)
    with pytest.raises(NotImplementedError, match=r"Adadelta\(capturable=True\)"):
        optim.Adadelta(p, capturable=True)
    with pytest.raises(NotImplementedError, match=r"Adagrad\(fused=True\)"):
        optim.Adagrad(p, fused=True)
    for name in ("RMSprop", "Adagrad", "Adadelta"):
        getattr(optim, name)(p, foreach=True)
