"""Every applicable OpInfo of torch's ``op_db`` that maps to an asyncgrad name: its sample inputs
through both libraries, forward values, gradients (and second derivatives where torch supports
them) and torch's error inputs compared (tests/conformance/harness.py)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from tests.conformance import harness
from tests.conformance.known import KNOWN_OPS, OPINFO_FLOOR

torch = pytest.importorskip("torch", reason="compares with torch (pip install torch)")
pytest.importorskip("expecttest", reason="torch's op database needs expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

APPLICABLE = [o for o in op_db if harness.exclusion(o) is None]
DEVICES = ["cpu", "cuda"] if harness.FULL else ["cpu"]


def _id(o: Any) -> str:
    return harness.full_name(o)


def run_op(opinfo: Any, device: str) -> harness.Report:
    with warnings.catch_warnings():  # deprecations and the like: values are compared
        warnings.simplefilter("ignore")
        return _run_op(opinfo, device)


def _run_op(opinfo: Any, device: str) -> harness.Report:
    name = harness.full_name(opinfo)
    ours = harness.ours_for(opinfo)
    assert ours is not None
    report = harness.Report(name)
    random = harness.RANDOM_OUTPUT.fullmatch(opinfo.name) is not None
    limit = harness.FULL_SAMPLES if harness.FULL else harness.QUICK_SAMPLES
    rng = np.random.default_rng(0)
    torch.manual_seed(0)  # an op's samples alike in every run, whatever ran before it
    for dt in harness.dtypes_for(opinfo):
        grads = opinfo.supports_autograd and dt.is_floating_point
        samples = opinfo.sample_inputs("cpu", dt, requires_grad=grads)
        for k, sample in enumerate(samples):
            if k >= limit:
                break
            second = grads and opinfo.supports_gradgrad and k == 0 and dt == torch.float64
            harness.compare_sample(
                report,
                opinfo.op,
                ours,
                sample,
                str(dt).removeprefix("torch."),
                device,
                random,
                second,
                rng,
            )
    if opinfo.error_inputs_func is not None and device == "cpu":
        try:
            errors = list(opinfo.error_inputs("cpu"))
        except Exception:
            errors = []
        for e in errors[: limit * 3]:
            s = e.sample_input
            if "out" in s.kwargs:  # asyncgrad's functions take no out= (README: differences)
                continue
            if harness.number_for_a_tensor(e, s):
                report.permissive += 1  # asyncgrad takes a number where torch wants a tensor
                continue
            try:
                a = harness.to_ag(s.input), harness.to_ag(s.args), harness.to_ag(s.kwargs)
            except harness.Unsupported:
                continue
            try:
                ours(a[0], *a[1], **a[2])
            except Exception as got:
                if not isinstance(got, e.error_type):
                    report.fail(
                        "error",
                        f"raises {type(got).__name__} where torch raises "
                        f"{e.error_type.__name__} ({e.error_regex!r})",
                    )
            else:
                report.fail(
                    "error",
                    f"no error where torch raises {e.error_type.__name__} ({e.error_regex!r})",
                )
    return report


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opinfo", APPLICABLE, ids=_id)
def test_op_matches_torch(opinfo: Any, device: str) -> None:
    name = harness.full_name(opinfo)
    if harness.resolve(opinfo.name) is None:
        pytest.skip(f"asyncgrad does not provide {opinfo.name} (counted by test_opinfo_coverage)")
    report = run_op(opinfo, device)
    harness.check_known(name, report.failures, KNOWN_OPS, device)


def test_opinfo_coverage() -> None:
    """At least the recorded share of the applicable OpInfos maps to an asyncgrad name."""
    covered = [o for o in APPLICABLE if harness.resolve(o.name) is not None]
    assert len(covered) >= OPINFO_FLOOR, (
        f"{len(covered)} of {len(APPLICABLE)} applicable OpInfos covered, floor {OPINFO_FLOOR}"
    )
