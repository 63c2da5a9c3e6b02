"""Adamax, NAdam, RAdam, ASGD, Rprop, Adafactor, Muon and LBFGS against torch.optim: the same
problem from the same start, 20 steps, the parameters compared after every step; state keys,
state dicts and argument errors compared with torch's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((8, 3))
Y = RNG.standard_normal((8, 4))
W0 = RNG.standard_normal((3, 4))
B0 = RNG.standard_normal(4)
C0 = RNG.standard_normal((2, 3, 4))


@pytest.fixture(autouse=True)
def torch_float64() -> Iterator[None]:
    """torch keeps scalar state (ASGD's eta, NAdam's mu_product) in its default dtype: float64
    here, as asyncgrad's Python floats."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _loss(lib: Any, w: Any, b: Any, c: Any | None, x: Any, y: Any) -> Any:
    out = x @ w
    if b is not None:
        out = out + b
    loss = ((out - y) ** 2).mean() + (lib.sin(w) ** 2).sum() * 0.1
    if c is not None:
        loss = loss + ((c - 0.5) ** 2).sum() * 0.05
    return loss


def _run(
    name: str,
    kwargs: dict[str, Any],
    *,
    dtype: str = "float64",
    steps: int = 20,
    with_b: bool = True,
    with_c: bool = False,
) -> tuple[list[list[Any]], list[list[Any]], Any, Any]:
    def make(lib: Any) -> tuple[list[Any], Any, Any, Any]:
        dt = getattr(lib, dtype)
        ps = [lib.tensor(W0, dtype=dt, requires_grad=True)]
        if with_b:
            ps.append(lib.tensor(B0, dtype=dt, requires_grad=True))
        if with_c:
            ps.append(lib.tensor(C0, dtype=dt, requires_grad=True))
        return ps, lib.tensor(X, dtype=dt), lib.tensor(Y, dtype=dt), dt

    traj: dict[str, list[list[Any]]] = {"ag": [], "torch": []}
    opts = {}
    for lib_name, lib in (("ag", ag), ("torch", torch)):
        ps, x, y, _ = make(lib)
        opt = getattr(lib.optim, name)(ps, **kwargs)
        opts[lib_name] = opt
        w, b = ps[0], ps[1] if with_b else None
        c = ps[-1] if with_c else None
        for _ in range(steps):
            opt.zero_grad()
            _loss(lib, w, b, c, x, y).backward()
            opt.step()
            traj[lib_name].append([p.detach().numpy().copy() for p in ps])
    return traj["ag"], traj["torch"], opts["ag"], opts["torch"]


CASES = [
    ("Adamax", {}),
    ("Adamax", {"lr": 0.05, "weight_decay": 0.1}),
    ("Adamax", {"lr": 0.01, "maximize": True}),
    ("NAdam", {}),
    ("NAdam", {"lr": 0.05, "weight_decay": 0.1}),
    ("NAdam", {"lr": 0.05, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("NAdam", {"momentum_decay": 0.01, "betas": (0.8, 0.99)}),
    ("RAdam", {}),
    ("RAdam", {"lr": 0.05, "weight_decay": 0.1}),
    ("RAdam", {"lr": 0.05, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("RAdam", {"betas": (0.9, 0.9)}),
    ("ASGD", {}),
    ("ASGD", {"lr": 0.05, "t0": 5, "lambd": 0.01, "weight_decay": 0.1}),
    ("ASGD", {"lr": 0.05, "t0": 0, "alpha": 0.5, "maximize": True}),
    ("Rprop", {}),
    ("Rprop", {"lr": 0.1, "etas": (0.3, 1.5), "step_sizes": (1e-3, 0.2)}),
    ("Rprop", {"maximize": True}),
    ("Adafactor", {}),
    ("Adafactor", {"lr": 0.05, "weight_decay": 0.1, "beta2_decay": -0.5}),
    ("Adafactor", {"eps": (1e-20, 1e-2), "d": 2.0}),
    ("Adafactor", {"maximize": True}),
]


@pytest.mark.parametrize(("name", "kwargs"), CASES)
def test_trajectory_matches_torch(name: str, kwargs: dict[str, Any]) -> None:
    ours, theirs, opt, topt = _run(name, kwargs, with_c=name == "Adafactor")
    for step, (a, t) in enumerate(zip(ours, theirs, strict=True)):
        for pa, pt in zip(a, t, strict=True):
            np.testing.assert_allclose(pa, pt, rtol=1e-9, atol=1e-11, err_msg=f"step {step}")
    assert not np.allclose(ours[-1][0], W0)  # the steps moved the parameters
    for p_ours, p_theirs in zip(opt.state.values(), topt.state.values(), strict=True):
        assert set(p_ours) == set(p_theirs)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert set(sd["param_groups"][0]) >= set(tsd["param_groups"][0]) - {
        "foreach",
        "differentiable",
        "capturable",
    }


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam", "ASGD", "Rprop", "Adafactor"])
def test_float32_trajectory_stays_close_to_torch(name: str) -> None:
    ours, theirs, _, _ = _run(name, {"lr": 0.01}, dtype="float32")
    assert ours[-1][0].dtype == np.float32
    np.testing.assert_allclose(ours[-1][0], theirs[-1][0], rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", ["NAdam", "ASGD", "Rprop", "Adafactor", "Adamax", "RAdam"])
def test_a_torch_state_dict_loads_and_the_run_continues_as_torch(name: str) -> None:
    _, _, _, topt = _run(name, {"lr": 0.02}, steps=5, with_c=name == "Adafactor")
    tsd = topt.state_dict()

    def convert(v: Any) -> Any:
        return ag.tensor(v.numpy()) if isinstance(v, torch.Tensor) else v

    sd = {
        "state": {i: {k: convert(v) for k, v in s.items()} for i, s in tsd["state"].items()},
        "param_groups": tsd["param_groups"],
    }
    ps = [p.detach().clone().requires_grad_() for p in topt.param_groups[0]["params"]]
    aps = [ag.tensor(p.detach().numpy(), requires_grad=True) for p in ps]
    topt2 = getattr(torch.optim, name)(ps, lr=0.02)
    topt2.load_state_dict(tsd)
    opt2 = getattr(ag.optim, name)(aps, lr=0.02)
    opt2.load_state_dict(sd)
    x, y = ag.tensor(X), ag.tensor(Y)
    tx, ty = torch.tensor(X), torch.tensor(Y)
    c = aps[2] if len(aps) > 2 else None
    tc = ps[2] if len(ps) > 2 else None
    for _ in range(5):
        opt2.zero_grad()
        topt2.zero_grad()
        _loss(ag, aps[0], aps[1], c, x, y).backward()
        _loss(torch, ps[0], ps[1], tc, tx, ty).backward()
        opt2.step()
        topt2.step()
    for a, t in zip(aps, ps, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), t.detach().numpy(), rtol=1e-9)


def _torch_newton_schulz_in(dtype: Any) -> Any:
    """torch's Newton-Schulz iteration computed in ``dtype`` (torch's own runs in bfloat16,
    which asyncgrad does not have)."""

    def ns(grad: Any, ns_coefficients: Any, ns_steps: int, eps: float) -> Any:
        a, b, c = ns_coefficients
        x = grad.to(dtype)
        if grad.size(0) > grad.size(1):
            x = x.T
        x = x / x.norm().clamp(min=eps)
        for _ in range(ns_steps):
            gram = x @ x.T
            x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
        return x.T if grad.size(0) > grad.size(1) else x

    return ns


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"lr": 0.02, "nesterov": False, "weight_decay": 0.0},
        {"lr": 0.02, "adjust_lr_fn": "match_rms_adamw"},
        {"lr": 0.02, "ns_steps": 3, "momentum": 0.9},
    ],
)
@pytest.mark.parametrize("shape_t", [False, True])
def test_muon_matches_torch_with_its_iteration_in_float64(
    kwargs: dict[str, Any], shape_t: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.optim._muon as muon

    monkeypatch.setattr(muon, "_zeropower_via_newtonschulz", _torch_newton_schulz_in(torch.float64))
    w0 = W0.T.copy() if shape_t else W0
    w, tw = ag.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    opt, topt = ag.optim.Muon([w], **kwargs), torch.optim.Muon([tw], **kwargs)
    xs = X if not shape_t else RNG.standard_normal((8, 4))
    for _ in range(20):
        for p, o, lib in ((w, opt, ag), (tw, topt, torch)):
            o.zero_grad()
            ((lib.tensor(xs) @ p) ** 2).mean().backward()
            o.step()
        np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), rtol=1e-9, atol=1e-12)
    assert set(opt.state[w]) == set(topt.state[tw]) == {"momentum_buffer"}


def test_muon_stays_near_torchs_bfloat16_run() -> None:
    w, tw = ag.tensor(W0, requires_grad=True), torch.tensor(W0, requires_grad=True)
    opt, topt = ag.optim.Muon([w], lr=0.01), torch.optim.Muon([tw], lr=0.01)
    for p, o, lib in ((w, opt, ag), (tw, topt, torch)):
        for _ in range(5):
            o.zero_grad()
            ((lib.tensor(X) @ p) ** 2).mean().backward()
            o.step()
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), atol=5e-3)


def test_muon_refuses_what_torchs_refuses() -> None:
    for make in (lambda lib: lib.optim.Muon([lib.zeros(3, requires_grad=True)]),):
        with pytest.raises(ValueError, match="Muon only supports 2D parameters"):
            make(torch)
        with pytest.raises(ValueError, match="Muon only supports 2D parameters"):
            make(ag)
    with pytest.raises(ValueError, match="Adjust learning rate function bad is not supported"):
        ag.optim.Muon([ag.zeros(2, 2, requires_grad=True)], adjust_lr_fn="bad")


def _rosenbrock(lib: Any, p: Any) -> Any:
    return (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2 + (p[2:] ** 2).sum()


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"line_search_fn": "strong_wolfe"},
        {"lr": 0.5, "max_iter": 5, "history_size": 3},
        {"line_search_fn": "strong_wolfe", "history_size": 2, "max_iter": 7},
        {"lr": 0.1, "tolerance_change": 1e-3},
    ],
)
def test_lbfgs_matches_torch(kwargs: dict[str, Any]) -> None:
    start = np.array([-1.2, 1.0, 0.3, -0.4])
    p, tp = ag.tensor(start, requires_grad=True), torch.tensor(start, requires_grad=True)
    opt, topt = ag.optim.LBFGS([p], **kwargs), torch.optim.LBFGS([tp], **kwargs)
    calls = {"ag": 0, "torch": 0}

    def closure_for(lib: Any, param: Any, o: Any, key: str) -> Any:
        def closure() -> Any:
            calls[key] += 1
            o.zero_grad()
            loss = _rosenbrock(lib, param)
            loss.backward()
            return loss

        return closure

    for _ in range(4):
        loss = opt.step(closure_for(ag, p, opt, "ag"))
        tloss = topt.step(closure_for(torch, tp, topt, "torch"))
        # Rosenbrock's valley amplifies the last-bit differences of NumPy's and torch's dot
        # products (1e-13 after 25 iterations, more later); the evaluation counts stay equal.
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5, atol=1e-12)
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-8)
    assert calls["ag"] == calls["torch"]
    st, tst = opt.state[p], topt.state[tp]
    assert st["func_evals"] == tst["func_evals"]
    assert st["n_iter"] == tst["n_iter"]
    assert set(st) == set(tst)


def test_lbfgs_refuses_what_torchs_refuses() -> None:
    a, b = ag.zeros(2, requires_grad=True), ag.zeros(2, requires_grad=True)
    ta, tb = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    msg = "LBFGS doesn't support per-parameter options"
    with pytest.raises(ValueError, match=msg):
        torch.optim.LBFGS([{"params": [ta]}, {"params": [tb]}])
    with pytest.raises(ValueError, match=msg):
        ag.optim.LBFGS([{"params": [a]}, {"params": [b]}])
    opt = ag.optim.LBFGS([a], line_search_fn="bad")

    def closure() -> Any:
        opt.zero_grad()
        loss = ((a - 1) ** 2).sum()
        loss.backward()
        return loss

    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        opt.step(closure)
    assert ag.optim.LBFGS([b]).param_groups[0]["max_eval"] == 25


def test_lbfgs_publishes_new_arrays_for_readers() -> None:
    p = ag.tensor([3.0, -1.0], requires_grad=True)
    held = p.detach()
    opt = ag.optim.LBFGS([p], max_iter=3)

    def closure() -> Any:
        opt.zero_grad()
        loss = (p**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    assert held.tolist() == [3.0, -1.0]  # a tensor taken before the step keeps its values
    assert abs(p.detach().numpy()).max() < 3.0


ERRORS = [
    ("Adamax", {"lr": -1.0}, "Invalid learning rate"),
    ("Adamax", {"eps": -1.0}, "Invalid epsilon value"),
    ("Adamax", {"betas": (1.0, 0.9)}, "Invalid beta parameter at index 0"),
    ("Adamax", {"weight_decay": -1.0}, "Invalid weight_decay value"),
    ("NAdam", {"momentum_decay": -1.0}, "Invalid momentum_decay value"),
    ("NAdam", {"betas": (0.9, 1.5)}, "Invalid beta parameter at index 1"),
    ("RAdam", {"eps": -1.0}, "Invalid epsilon value"),
    ("ASGD", {"lr": -0.1}, "Invalid learning rate"),
    ("ASGD", {"weight_decay": -0.1}, "Invalid weight_decay value"),
    ("Rprop", {"etas": (1.5, 1.2)}, "Invalid eta values: 1.5, 1.2"),
    ("Rprop", {"lr": -1.0}, "Invalid learning rate"),
    ("Adafactor", {"beta2_decay": 0.5}, "beta2_decay should be <= 0"),
    ("Adafactor", {"d": 0.5}, "Clipping threshold d should be >= 1"),
    ("Adafactor", {"eps": (-1.0, 1e-3)}, "epsilon1 should be >= 0"),
    ("Muon", {"momentum": -1.0}, "momentum should be >= 0"),
    ("Muon", {"lr": -1.0}, "Learning rate should be >= 0"),
]


@pytest.mark.parametrize(("name", "kwargs", "match"), ERRORS)
def test_argument_errors_as_torchs(name: str, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        getattr(torch.optim, name)([torch.zeros(2, 2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError, match=match):
        getattr(ag.optim, name)([ag.zeros(2, 2, requires_grad=True)], **kwargs)


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam", "ASGD", "Rprop"])
def test_implementation_switches_are_refused(name: str) -> None:
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        getattr(ag.optim, name)([ag.zeros(2, requires_grad=True)], differentiable=True)


def test_an_update_leaves_arrays_readers_hold_unchanged() -> None:
    for name in ("Adamax", "NAdam", "RAdam", "ASGD", "Rprop", "Adafactor", "Muon"):
        p = ag.tensor(W0, requires_grad=True)
        held = p.detach()
        opt = getattr(ag.optim, name)([p], lr=0.1)
        (p**2).sum().backward()
        opt.step()
        np.testing.assert_array_equal(held.numpy(), W0)
        assert not np.allclose(p.detach().numpy(), W0), name


def test_names_are_torch_optims() -> None:
    for name in ("Adamax", "NAdam", "RAdam", "ASGD", "Rprop", "LBFGS", "Adafactor", "Muon"):
        assert issubclass(getattr(ag.optim, name), ag.optim.Optimizer)
        assert hasattr(torch.optim, name)
    with contextlib.suppress(ImportError):
        from asyncgrad.optim import Adamax  # noqa: F401


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam", "ASGD", "Rprop", "Adafactor", "Muon"])
def test_a_cuda_parameter_steps_as_on_the_cpu(name: str) -> None:
    if not ag.cuda.is_available():
        pytest.skip("needs a (simulated) CUDA device")
    got = []
    for dev in ("cpu", "cuda"):
        w = ag.tensor(W0, device=dev, requires_grad=True)
        opt = getattr(ag.optim, name)([w], lr=0.05)
        for _ in range(3):
            opt.zero_grad()
            (ag.sin(w) ** 2).sum().backward()
            opt.step()
        assert w.device.type == dev
        got.append(w.detach().cpu().numpy())
    np.testing.assert_allclose(got[1], got[0], rtol=1e-12)


def test_lbfgs_on_a_cuda_parameter() -> None:
    if not ag.cuda.is_available():
        pytest.skip("needs a (simulated) CUDA device")
    got = []
    for dev in ("cpu", "cuda"):
        p = ag.tensor([-1.2, 1.0, 0.3, -0.4], device=dev, requires_grad=True)
        opt = ag.optim.LBFGS([p], line_search_fn="strong_wolfe")

        def closure(p: ag.Tensor = p, opt: Any = opt) -> Any:
            opt.zero_grad()
            loss = _rosenbrock(ag, p)
            loss.backward()
            return loss

        opt.step(closure)
        got.append(p.detach().cpu().numpy())
    np.testing.assert_allclose(got[1], got[0], rtol=1e-12)


def test_lbfgs_state_dict_round_trips() -> None:
    p = ag.tensor([-1.2, 1.0, 0.3, -0.4], requires_grad=True)
    tp = torch.tensor([-1.2, 1.0, 0.3, -0.4], requires_grad=True)
    opt, topt = ag.optim.LBFGS([p], max_iter=3), torch.optim.LBFGS([tp], max_iter=3)

    def closure_for(lib: Any, param: Any, o: Any) -> Any:
        def closure() -> Any:
            o.zero_grad()
            loss = _rosenbrock(lib, param)
            loss.backward()
            return loss

        return closure

    opt.step(closure_for(ag, p, opt))
    topt.step(closure_for(torch, tp, topt))
    sd = opt.state_dict()
    assert set(sd["state"][0]) == set(topt.state_dict()["state"][0])
    q = ag.tensor(p.detach().numpy(), requires_grad=True)
    opt2 = ag.optim.LBFGS([q], max_iter=3)
    opt2.load_state_dict(sd)
    opt.step(closure_for(ag, p, opt))
    opt2.step(closure_for(ag, q, opt2))
    topt.step(closure_for(torch, tp, topt))
    np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(q.detach().numpy(), tp.detach().numpy(), rtol=1e-6)


def _signature(f: Any) -> list[tuple[Any, ...]]:
    import inspect

    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


@pytest.mark.parametrize(
    "name", ["Adamax", "NAdam", "RAdam", "ASGD", "Rprop", "LBFGS", "Adafactor", "Muon"]
)
def test_signatures_are_torchs(name: str) -> None:
    ours, theirs = getattr(ag.optim, name).__init__, getattr(torch.optim, name).__init__
    assert _signature(ours) == _signature(theirs)
