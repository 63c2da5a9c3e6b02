"""PyTorch's own operator and module databases as asyncgrad's oracle.

torch ships, for its own tests, ``op_db`` (an OpInfo per operator, with sample inputs and error
inputs) and ``module_db`` (a ModuleInfo per module, with constructor and forward inputs). This
harness runs each sample through torch and through asyncgrad and compares what comes out:
forward values (shape, dtype, elements), the error torch raises (its kind), and gradients with
random cotangents (input gradients for ops; input and parameter gradients for modules), second
derivatives where torch supports them. torch stays a test-only dependency.

``ASYNCGRAD_CONFORMANCE`` chooses how much runs: ``quick`` (the default: the first samples of
each op in float64 on the CPU, in the README's test command) or ``full`` (every sample, float64
and float32, on the CPU and the simulated CUDA device, and a finite-difference gradcheck of one
sample per op: its own step of .ci/run).
"""

from __future__ import annotations

import math
import os
import re
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import asyncgrad as ag
from tests.torch_coverage import excluded

FULL = os.environ.get("ASYNCGRAD_CONFORMANCE", "quick") == "full"
QUICK_SAMPLES = 3
FULL_SAMPLES = 40

# Outputs that are random draws, or uninitialised memory: only their shape and dtype compare.
RANDOM_OUTPUT = re.compile(
    r".*(rand|dropout|bernoulli|multinomial|normal|uniform|cauchy|exponential|geometric|"
    r"log_normal|poisson|rrelu|empty|gumbel|fractional_max_pool).*"
)

# float32 sums come out in another order than torch's kernels' (im2col products, pairwise
# reductions): its absolute tolerance allows for that on values of order 10.
TOLERANCE = {"float64": (1e-7, 1e-7), "float32": (1e-4, 5e-4)}
GRAD_TOLERANCE = {"float64": (1e-6, 1e-7), "float32": (2e-3, 5e-4)}


class Unsupported(Exception):
    """A sample asyncgrad cannot be asked about (a torch-only argument type)."""


# ----------------------------------------------------------------------------- names
def check_known(name: str, failures: list[str], table: Any, device: str) -> None:
    """A run's ``failures`` ("kind: detail") against the kinds the ``table`` of known
    differences lists for ``name`` (and, for one device, for ``name@device``): none of another
    kind; in a full run, every known kind still seen on its device (else it is stale; a plain
    entry is checked on the CPU)."""
    known = {**table.get(name, {}), **table.get(f"{name}@{device}", {})}
    kinds = {f.split(":", 1)[0] for f in failures}
    unexpected = [f for f in failures if f.split(":", 1)[0] not in known]
    assert not unexpected, f"{name}: " + "; ".join(unexpected[:5])
    if FULL:
        own = table.get(f"{name}@{device}", {}) if device != "cpu" else known
        fixed = set(own) - kinds
        assert not fixed, f"{name}: known differences no longer seen, remove them: {fixed}"


def resolve(name: str) -> Callable[..., Any] | None:
    """asyncgrad's function for OpInfo name ``name`` ("abs", "nn.functional.relu",
    "linalg.det", "__radd__"), a Tensor method where torch's is one, or None."""
    if name.startswith("__"):
        return getattr(ag.Tensor, name, None)
    obj: Any = ag
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is not None and callable(obj):
        return obj  # type: ignore[no-any-return]
    if "." not in name:
        meth = getattr(ag.Tensor, name, None)
        if callable(meth):
            return meth  # type: ignore[no-any-return]
    return None


def ours_for(opinfo: Any) -> Callable[..., Any] | None:
    """What to call on asyncgrad's side for ``opinfo``: where torch's OpInfo calls a lambda of its
    test module (``lambda self, c, other: torch.where(c, self, other)``), the same lambda with
    ``torch`` meaning asyncgrad; else asyncgrad's function of the same name."""
    if resolve(opinfo.name) is None:
        return None
    f = opinfo.op
    if isinstance(f, types.FunctionType) and f.__module__.startswith("torch.testing"):
        names = dict(f.__globals__)
        names["torch"] = ag
        if "F" in f.__code__.co_names:
            names["F"] = ag.nn.functional
        return types.FunctionType(f.__code__, names, f.__name__, f.__defaults__, f.__closure__)
    return resolve(opinfo.name)


# Ops whose results are complex for real inputs.
COMPLEX_RESULTS = frozenset({"linalg.eig", "linalg.eigvals", "stft", "istft"})

REAL_DTYPES = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


def exclusion(opinfo: Any) -> str | None:
    """Why OpInfo ``opinfo`` is not applicable, or None if it is (tests/torch_coverage.py's rules,
    plus: torch's internal ops, sparse and fft (complex) namespaces, CUDA-only ops)."""
    name = opinfo.name
    last = name.split(".")[-1]
    if name.startswith("_") and not name.startswith("__"):
        return "torch's internal op"
    if name.startswith(("sparse.", "fft.")) or last.startswith("jiterator"):
        return "sparse tensors" if name.startswith("sparse.") else "complex tensors"
    reason = excluded(last)
    if reason is not None:
        return reason
    if name in COMPLEX_RESULTS:
        return "complex tensors"
    if name == "bfloat16":
        return "bfloat16 (NumPy has no bfloat16)"
    supported = {str(d).removeprefix("torch.") for d in opinfo.supported_dtypes("cpu")}
    if not supported & set(REAL_DTYPES):
        return "no real dtype on the CPU"
    return None


def full_name(opinfo: Any) -> str:
    return opinfo.name + (f".{opinfo.variant_test_name}" if opinfo.variant_test_name else "")


# ----------------------------------------------------------------------------- conversion
def dtypes_for(opinfo: Any) -> list[Any]:
    """The dtypes to run: float64 (and float32 in full mode) where the op supports them, else
    the first integer or bool dtype it supports."""
    import torch

    supported = opinfo.supported_dtypes("cpu")
    floats = [d for d in (torch.float64, torch.float32) if d in supported]
    if floats:
        return floats if FULL else floats[:1]
    for d in (torch.int64, torch.int32, torch.bool):
        if d in supported:
            return [d]
    return []


def to_ag(x: Any, device: str = "cpu") -> Any:
    """torch's sample value as asyncgrad's: tensors (same values, dtype, requires_grad), dtypes,
    sizes, containers; anything torch-only raises Unsupported."""
    import torch

    if isinstance(x, torch.Tensor):
        if x.is_complex() or x.layout != torch.strided or x.dtype == torch.bfloat16:
            raise Unsupported(f"a {x.dtype} {x.layout} tensor")
        try:
            a = x.detach().cpu().numpy()
        except (RuntimeError, ValueError) as e:  # e.g. more dims than NumPy takes
            raise Unsupported(str(e)) from None
        t = ag.tensor(a, device=device)
        if x.requires_grad:
            t.requires_grad_(True)
        return t
    if isinstance(x, torch.dtype):
        name = str(x).removeprefix("torch.")
        d = getattr(ag, name, None)
        if d is None or not isinstance(d, ag.dtype):
            raise Unsupported(f"dtype {x}")
        return d
    if isinstance(x, torch.Size):
        return tuple(x)
    if isinstance(x, torch.device):
        return device
    if isinstance(x, (torch.memory_format, torch.layout, torch.Generator)):
        raise Unsupported(type(x).__name__)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(to_ag(v, device) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(to_ag(v, device) for v in x)
    if isinstance(x, dict):
        return {k: to_ag(v, device) for k, v in x.items()}
    if isinstance(x, (bool, int, float, str, type(None), slice, type(Ellipsis), range)):
        return x
    if isinstance(x, np.ndarray | np.generic):
        return x
    if callable(x):
        raise Unsupported(f"a callable argument {x!r}")
    raise Unsupported(f"argument of type {type(x).__name__}")


def leaves(x: Any) -> Iterator[Any]:
    """The tensors of a nested output, in order."""
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from leaves(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from leaves(v)
    else:
        yield x


def host(t: Any) -> np.ndarray[Any, Any]:
    import torch

    if isinstance(t, torch.Tensor):  # a gradient may be a ZeroTensor or a negative view
        return np.asarray(t.detach().cpu().numpy(force=True))
    return np.asarray(t.detach().cpu().numpy()) if hasattr(t, "detach") else np.asarray(t)


# ----------------------------------------------------------------------------- comparison
@dataclass
class Report:
    """What one op's samples showed: failures by kind, and counts."""

    name: str
    failures: list[str] = field(default_factory=list)
    samples: int = 0
    unsupported: int = 0
    not_finite: int = 0
    permissive: int = 0
    compared_grads: int = 0

    def fail(self, kind: str, what: str) -> None:
        self.failures.append(f"{kind}: {what}")


def close(got: Any, want: Any, rtol: float, atol: float) -> bool:
    """Elementwise allclose (NaNs equal), or, in single precision, within float32's rounding of
    the largest magnitude involved: a float32 matrix function or reduction rounds each element
    relative to the whole result (a matrix exponential's small entries carry its large ones'
    absolute error), which torch's and asyncgrad's different orders of summation expose."""
    if np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        return True
    if got.dtype != np.float32 or got.shape != want.shape or not got.size:
        return False
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return False
    with np.errstate(all="ignore"):
        fin = np.isfinite(want)
        if not np.array_equal(got[~fin], want[~fin]):
            return False
        scale = float(np.max(np.abs(want[fin]), initial=0.0))
        return bool(np.max(np.abs(got[fin] - want[fin]), initial=0.0) <= 1e-5 * scale + atol)


def compare_values(t_out: Any, a_out: Any, dtype: str, random: bool, where: str) -> str | None:
    """None if asyncgrad's output matches torch's, else what differs."""
    import torch

    rtol, atol = TOLERANCE.get(dtype, (1e-7, 1e-7))
    if isinstance(t_out, torch.Tensor):
        if not isinstance(a_out, ag.Tensor):
            return f"{where}: a {type(a_out).__name__} where torch gives a tensor"
        if tuple(t_out.shape) != tuple(a_out.shape):
            return f"{where}: shape {tuple(a_out.shape)}, torch {tuple(t_out.shape)}"
        td = str(t_out.dtype).removeprefix("torch.")
        if td != str(a_out.dtype) and not (td == "bool" and str(a_out.dtype) == "bool"):
            return f"{where}: dtype {a_out.dtype}, torch {td}"
        if random or t_out.is_complex():
            return None
        e, g = host(t_out), host(a_out)
        if e.dtype.kind == "f" or g.dtype.kind == "f":
            ok = close(g, e, rtol, atol)
        else:
            ok = np.array_equal(g, e)
        if not ok:
            with np.errstate(all="ignore"):
                err = np.nanmax(np.abs(g.astype(float) - e.astype(float))) if e.size else 0.0
            return f"{where}: values differ (max abs error {err:.3g})"
        return None
    if isinstance(t_out, (tuple, list)):
        if not isinstance(a_out, (tuple, list)) or len(a_out) != len(t_out):
            return f"{where}: {type(a_out).__name__} where torch gives {len(t_out)} outputs"
        for i, (t, a) in enumerate(zip(t_out, a_out, strict=True)):
            got = compare_values(t, a, dtype, random, f"{where}[{i}]")
            if got:
                return got
        return None
    if isinstance(t_out, torch.dtype):
        return None if str(a_out) == str(t_out).removeprefix("torch.") else f"{where}: dtype"
    if isinstance(t_out, float) and not random:
        if not isinstance(a_out, (int, float)) or not (
            math.isclose(a_out, t_out, rel_tol=rtol, abs_tol=atol)
            or (math.isnan(t_out) and math.isnan(a_out))
        ):
            return f"{where}: {a_out!r}, torch {t_out!r}"
        return None
    if isinstance(t_out, (bool, int, str, type(None))) and not random:
        if isinstance(a_out, ag.Tensor) and a_out.ndim == 0:
            a_out = a_out.item()
        return None if a_out == t_out else f"{where}: {a_out!r}, torch {t_out!r}"
    return None


def _float_leaves(out: Any) -> list[Any]:
    import torch

    return [
        t
        for t in leaves(out)
        if isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point
    ]


def compare_sample(
    report: Report,
    torch_fn: Callable[..., Any],
    ours: Callable[..., Any],
    sample: Any,
    dtype: str,
    device: str,
    random: bool,
    second_order: bool,
    rng: np.random.Generator,
) -> None:
    """Run one SampleInput through both libraries; record what differs in ``report``."""
    import torch

    where = f"sample {report.samples} ({dtype}, {device})"
    if "out" in sample.kwargs:  # asyncgrad's functions take no out= (README: differences)
        report.unsupported += 1
        return
    try:
        a_input = to_ag(sample.input, device)
        a_args = to_ag(sample.args, device)
        a_kwargs = to_ag(sample.kwargs, device)
    except Unsupported:
        report.unsupported += 1
        return
    report.samples += 1
    # A sample with dropout is a random draw too.
    random = random or bool(sample.kwargs.get("dropout_p", 0))
    if sample.kwargs.get("training") and any(
        isinstance(a, float) and 0 < a < 1 for a in sample.args
    ):  # a dropout probability by position, in training
        random = True
    with warnings.catch_warnings():  # deprecations and the like: values are compared
        warnings.simplefilter("ignore")
        try:
            t_out = torch_fn(sample.input, *sample.args, **sample.kwargs)
            t_err = None
        except Exception as e:
            t_out, t_err = None, e
        try:
            a_out = ours(a_input, *a_args, **a_kwargs)
            a_err = None
        except Exception as e:
            a_out, a_err = None, e
    if t_err is not None:
        if a_err is None:
            report.fail(
                "error", f"{where}: torch raises {type(t_err).__name__}, asyncgrad does not"
            )
        return
    if a_err is not None:
        report.fail("raises", f"{where}: {type(a_err).__name__}: {str(a_err)[:160]}")
        return
    got = compare_values(t_out, a_out, dtype, random, where)
    if got:
        report.fail("value", got)
        return
    if random:
        return
    # Gradients: every floating input that requires grad, random cotangents for every
    # differentiable output (after OpInfo's output_process_fn_grad).
    t_ins = _float_leaves((sample.input, sample.args, sample.kwargs))
    a_ins = [
        t
        for t in leaves((a_input, a_args, a_kwargs))
        if isinstance(t, ag.Tensor) and t.requires_grad
    ]
    if not t_ins or len(t_ins) != len(a_ins):
        return
    fn = sample.output_process_fn_grad
    try:
        t_sel, a_sel = fn(t_out), fn(a_out)
    except Exception:
        t_sel, a_sel = t_out, a_out
    t_outs = _float_leaves(t_sel)
    a_outs = [t for t in leaves(a_sel) if isinstance(t, ag.Tensor)]
    if len(a_outs) != len(list(leaves(t_sel))):
        return
    keep = [i for i, t in enumerate(leaves(t_sel)) if any(t is u for u in t_outs)]
    a_outs = [a_outs[i] for i in keep]
    if not t_outs:
        return
    cots = [
        rng.standard_normal(tuple(t.shape)).astype(str(t.dtype).removeprefix("torch."))
        for t in t_outs
    ]
    try:
        t_grads = torch.autograd.grad(
            t_outs,
            t_ins,
            [torch.from_numpy(c) for c in cots],
            allow_unused=True,
            create_graph=second_order,
        )
    except Exception:
        return  # torch does not differentiate this sample
    # An output asyncgrad records as constant (a sign, a rounded quotient) must be one whose
    # gradient torch gives as zero: it is left out of asyncgrad's pass, and the inputs' gradients
    # still have to agree.
    live = [i for i, o in enumerate(a_outs) if o.requires_grad]
    if not live:
        a_grads: tuple[Any, ...] = (None,) * len(a_ins)
    else:
        try:
            a_grads = ag.grad_sync(
                [a_outs[i] for i in live],
                a_ins,
                [ag.tensor(cots[i], device=device) for i in live],
                allow_unused=True,
                create_graph=second_order,
            )
        except Exception as e:
            report.fail("grad", f"{where}: backward raises {type(e).__name__}: {str(e)[:160]}")
            return
    report.compared_grads += 1
    rtol, atol = GRAD_TOLERANCE.get(dtype, (1e-6, 1e-7))
    for i, (tg, agr) in enumerate(zip(t_grads, a_grads, strict=True)):
        e = np.zeros(tuple(t_ins[i].shape)) if tg is None else host(tg)
        g = np.zeros(tuple(t_ins[i].shape)) if agr is None else host(agr)
        if e.shape != g.shape or not close(g, e, rtol, atol):
            report.fail("grad", f"{where}: gradient of input {i} differs")
            return
    if not second_order:
        return
    if FULL and dtype == "float64":
        fd_check(report, ours, (a_input, a_args, a_kwargs), a_ins, where)
    # Second order: the gradient of <grads, v> with respect to the inputs (an asyncgrad gradient
    # that does not require grad is a constant: its part must be zero in torch's).
    pairs = [
        (tg, agr)
        for tg, agr in zip(t_grads, a_grads, strict=True)
        if tg is not None and tg.requires_grad
    ]
    if not pairs:
        return
    vs = [rng.standard_normal(tuple(tg.shape)) for tg, _ in pairs]
    try:
        t_gg = torch.autograd.grad(
            [tg for tg, _ in pairs],
            t_ins,
            [torch.from_numpy(v).to(tg.dtype) for v, (tg, _) in zip(vs, pairs, strict=True)],
            allow_unused=True,
        )
    except Exception:
        return
    live_pairs = [
        (v, agr)
        for v, (_, agr) in zip(vs, pairs, strict=True)
        if agr is not None and agr.requires_grad
    ]
    if not live_pairs:
        a_gg: tuple[Any, ...] = (None,) * len(a_ins)
    else:
        try:
            a_gg = ag.grad_sync(
                [agr for _, agr in live_pairs],
                a_ins,
                [ag.tensor(v.astype(str(agr.dtype)), device=device) for v, agr in live_pairs],
                allow_unused=True,
            )
        except Exception as e:
            report.fail("gradgrad", f"{where}: double backward raises {type(e).__name__}: {e}")
            return
    for i, (tg, agr) in enumerate(zip(t_gg, a_gg, strict=True)):
        e = np.zeros(tuple(t_ins[i].shape)) if tg is None else host(tg)
        g = np.zeros(tuple(t_ins[i].shape)) if agr is None else host(agr)
        if not close(g, e, rtol * 10, atol * 10):
            report.fail("gradgrad", f"{where}: second derivative of input {i} differs")
            return


def _substitute(x: Any, by_id: dict[int, Any]) -> Any:
    if isinstance(x, ag.Tensor):
        return by_id.get(id(x), x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_substitute(v, by_id) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_substitute(v, by_id) for v in x)
    if isinstance(x, dict):
        return {k: _substitute(v, by_id) for k, v in x.items()}
    return x


def fd_check(
    report: Report, ours: Callable[..., Any], call: Any, ins: list[Any], where: str
) -> None:
    """asyncgrad's gradients of one sample against finite differences (float64). A sample at
    which the function is not finite (a negative base to a fractional power) has no derivative
    to check (torch's gradcheck fails on it too); its values were compared already."""
    ids = [id(t) for t in ins]

    def f(*xs: Any) -> tuple[Any, ...]:
        a_input, a_args, a_kwargs = _substitute(call, dict(zip(ids, xs, strict=True)))
        out = ours(a_input, *a_args, **a_kwargs)
        return tuple(
            t
            for t in leaves(out)
            if isinstance(t, ag.Tensor) and t.requires_grad and t.dtype.kind == "f"
        )

    leaves_in = tuple(t.detach().requires_grad_(True) for t in ins)
    try:
        at = f(*leaves_in)
    except Exception as e:
        report.fail("gradcheck", f"{where}: the function raises {type(e).__name__}: {e}"[:240])
        return
    if not all(np.isfinite(host(t)).all() for t in at):
        report.not_finite += 1
        return
    try:
        ok = ag.autograd.gradcheck(f, leaves_in, raise_exception=False, atol=1e-5, rtol=1e-3)
    except Exception as e:
        report.fail("gradcheck", f"{where}: gradcheck raises {type(e).__name__}: {e}"[:240])
        return
    if not ok:
        report.fail("gradcheck", f"{where}: gradients differ from finite differences")


def number_for_a_tensor(error: Any, sample: Any) -> bool:
    """Whether torch's ErrorInput ``error`` is a Python number where torch's binding requires a
    tensor (its OpInfos list these as ``Exception`` with no message): asyncgrad's functions
    take numbers there, as its other elementwise ops do (the README's differences)."""
    if error.error_type is not Exception or error.error_regex:
        return False
    values = [sample.input, *sample.args, *sample.kwargs.values()]
    return any(isinstance(v, (bool, int, float)) for v in values)
