"""Every ModuleInfo of torch's ``module_db`` whose module asyncgrad has: built from the same
constructor inputs, loaded with torch's state_dict, run on the same forward inputs; outputs,
input gradients and parameter gradients compared (tests/conformance/harness.py)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from tests.conformance import harness
from tests.conformance.known import KNOWN_MODULES, MODULEINFO_FLOOR

torch = pytest.importorskip("torch", reason="compares with torch (pip install torch)")
pytest.importorskip("expecttest", reason="torch's module database needs expecttest")
from torch.testing._internal.common_modules import module_db  # noqa: E402

RANDOM_MODULES = ("Dropout", "RReLU", "FractionalMaxPool", "AlphaDropout")
DEVICES = ["cpu", "cuda"] if harness.FULL else ["cpu"]


def _name(m: Any) -> str:
    return m.module_cls.__name__ + (f".{m.variant_name}" if getattr(m, "variant_name", "") else "")


def ours_for(m: Any) -> Any:
    return getattr(ag.nn, m.module_cls.__name__, None)


def _state_to_ag(module: Any, device: str) -> dict[str, Any]:
    return {k: ag.tensor(v.detach().numpy(), device=device) for k, v in module.state_dict().items()}


def run_module(m: Any, device: str) -> harness.Report:
    with warnings.catch_warnings():  # deprecations and the like: values are compared
        warnings.simplefilter("ignore")
        return _run_module(m, device)


def _run_module(m: Any, device: str) -> harness.Report:
    cls = ours_for(m)
    report = harness.Report(_name(m))
    random = m.module_cls.__name__.startswith(RANDOM_MODULES)
    limit = harness.FULL_SAMPLES if harness.FULL else harness.QUICK_SAMPLES
    rng = np.random.default_rng(0)
    torch.manual_seed(0)  # a module's samples alike in every run, whatever ran before it
    dts = [torch.float64, torch.float32] if harness.FULL else [torch.float64]
    for dt in dts:
        if dt not in m.dtypes:
            continue
        dname = str(dt).removeprefix("torch.")
        inputs = m.module_inputs_func(m, device="cpu", dtype=dt, requires_grad=True, training=True)
        for k, mi in enumerate(inputs[:limit]):
            where = f"input {k} ({dname}, {device})"
            if mi.forward_input is None:
                continue
            try:
                c_args = harness.to_ag(mi.constructor_input.args, device)
                c_kwargs = harness.to_ag(mi.constructor_input.kwargs, device)
                f_args = harness.to_ag(mi.forward_input.args, device)
                f_kwargs = harness.to_ag(mi.forward_input.kwargs, device)
            except harness.Unsupported:
                report.unsupported += 1
                continue
            report.samples += 1
            c_kwargs = dict(c_kwargs)
            c_kwargs.pop("device", None)
            c_kwargs.pop("dtype", None)
            t_kwargs = dict(mi.constructor_input.kwargs)
            t_kwargs.pop("device", None)
            t_kwargs.pop("dtype", None)
            try:
                tm = m.module_cls(*mi.constructor_input.args, **t_kwargs).to(dt)
            except Exception:
                continue
            try:
                am = cls(*c_args, **c_kwargs)
                am = am.to(ag.float64 if dt == torch.float64 else ag.float32)
                if device != "cpu":
                    am = am.to(device)
            except Exception as e:
                report.fail("raises", f"{where}: constructor: {type(e).__name__}: {e}"[:240])
                continue
            try:
                t_out = tm(*mi.forward_input.args, **mi.forward_input.kwargs)
            except Exception:
                continue
            try:
                if m.is_lazy:  # materialise the parameters before loading torch's
                    am(*f_args, **f_kwargs)
                missing = am.load_state_dict(_state_to_ag(tm, device), strict=True)
                del missing
            except Exception as e:
                report.fail("state", f"{where}: load_state_dict: {type(e).__name__}: {e}"[:240])
                continue
            try:
                a_out = am(*f_args, **f_kwargs)
            except Exception as e:
                report.fail("raises", f"{where}: forward: {type(e).__name__}: {e}"[:240])
                continue
            got = harness.compare_values(t_out, a_out, dname, random, where)
            if got:
                report.fail("value", got)
                continue
            if random:
                continue
            t_outs = [
                t for t in harness.leaves(t_out) if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            a_all = list(harness.leaves(a_out))
            t_all = list(harness.leaves(t_out))
            if not t_outs or len(a_all) != len(t_all):
                continue
            a_outs = [a for a, t in zip(a_all, t_all, strict=True) if any(t is u for u in t_outs)]
            t_params = [p for p in tm.parameters() if p.requires_grad]
            a_named = dict(am.named_parameters())
            t_named = [n for n, p in tm.named_parameters() if p.requires_grad]
            if set(t_named) - set(a_named):
                report.fail("state", f"{where}: parameters {sorted(set(t_named) - set(a_named))}")
                continue
            a_params = [a_named[n] for n in t_named]
            t_ins = harness._float_leaves((mi.forward_input.args, mi.forward_input.kwargs))
            a_ins = [
                t
                for t in harness.leaves((f_args, f_kwargs))
                if isinstance(t, ag.Tensor) and t.requires_grad
            ]
            if len(t_ins) != len(a_ins):
                continue
            cots = [rng.standard_normal(tuple(t.shape)).astype(dname) for t in t_outs]
            t_grads = torch.autograd.grad(
                t_outs,
                t_ins + t_params,
                [torch.from_numpy(c) for c in cots],
                allow_unused=True,
            )
            live = [i for i, a in enumerate(a_outs) if isinstance(a, ag.Tensor) and a.requires_grad]
            if not live:
                report.fail("grad", f"{where}: no output requires grad")
                continue
            try:
                a_grads = ag.grad_sync(
                    [a_outs[i] for i in live],
                    a_ins + a_params,
                    [ag.tensor(cots[i], device=device) for i in live],
                    allow_unused=True,
                )
            except Exception as e:
                report.fail("grad", f"{where}: backward: {type(e).__name__}: {e}"[:240])
                continue
            report.compared_grads += 1
            rtol, atol = harness.GRAD_TOLERANCE[dname]
            names = [f"input {i}" for i in range(len(t_ins))] + t_named
            for what, tg, agr, ref in zip(names, t_grads, a_grads, t_ins + t_params, strict=True):
                e = np.zeros(tuple(ref.shape)) if tg is None else harness.host(tg)
                g = np.zeros(tuple(ref.shape)) if agr is None else harness.host(agr)
                if e.shape != g.shape or not harness.close(g, e, rtol, atol):
                    report.fail("grad", f"{where}: gradient of {what} differs")
                    break
    return report


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("moduleinfo", module_db, ids=_name)
def test_module_matches_torch(moduleinfo: Any, device: str) -> None:
    name = _name(moduleinfo)
    if ours_for(moduleinfo) is None:
        pytest.skip(f"asyncgrad does not provide nn.{name} (counted by test_moduleinfo_coverage)")
    report = run_module(moduleinfo, device)
    harness.check_known(name, report.failures, KNOWN_MODULES, device)


def test_moduleinfo_coverage() -> None:
    """At least the recorded number of torch's ModuleInfos maps to an asyncgrad module."""
    covered = [m for m in module_db if ours_for(m) is not None]
    assert len(covered) >= MODULEINFO_FLOOR, (
        f"{len(covered)} of {len(module_db)} ModuleInfos covered, floor {MODULEINFO_FLOOR}"
    )
