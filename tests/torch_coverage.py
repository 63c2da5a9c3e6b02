"""How much of PyTorch's everyday API asyncgrad provides, computed against the installed torch.

Six lists, each read off torch itself: ``torch.nn.modules.__all__``, the public functions of
``torch.nn.functional``, the public attributes of ``torch.Tensor``, ``torch.__all__``, the public
functions of ``torch.nn.init`` and the optimizers of ``torch.optim``. A name is *applicable*
unless one of the rules of ``EXCLUDED`` matches it; each rule says why. Running this file prints
the table (``python -m tests.torch_coverage``; ``-v`` lists the missing names too), which is the
one in the README's coverage section; tests/test_torch_coverage.py fails when a list's count
drops below its floor.

The rules exclude only what needs complex, sparse, quantized, nested or named tensors,
TorchScript, ``torch.compile`` or ONNX export, and torch's dispatch and backend internals.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Each rule: (reason, regular expression matched against the whole name).
EXCLUDED: tuple[tuple[str, str], ...] = (
    (
        "complex tensors",
        r"complex.*|.*_complex(_copy)?|view_as_real(_copy)?|cfloat|cdouble|chalf|conj.*|"
        r"is_conj|resolve_conj|polar|imag|adjoint|mH|H",
    ),
    (
        "sparse tensors",
        r".*sparse.*|.*_coo|.*csr.*|.*csc.*|.*bsr.*|.*bsc.*|crow_indices(_copy)?|"
        r"ccol_indices(_copy)?|col_indices(_copy)?|row_indices(_copy)?|indices(_copy)?|"
        r"values(_copy)?|coalesce|is_coalesced|dense_dim|to_dense|smm|sspaddmm|hspmm|dsmm|hsmm|"
        r"spmm|saddmm|SparseAdam",
    ),
    (
        "quantized tensors",
        r".*quantiz.*|dequantize|q_.*|qscheme|qu?int\d+|quint\dx\d|int_repr|fake_quantize.*|"
        r"choose_qparams.*|fbgemm.*|fused_moving_avg_obs_fake_quant",
    ),
    ("nested tensors", r".*nested.*|to_padded_tensor"),
    ("named tensors", r"names|refine_names|align_as|align_to|rename_?"),
    (
        "TorchScript, torch.compile and export",
        r"[A-Z]\w*Type|Type|ScriptModule|Script\w+|LiteScriptModule|CompilationUnit|Code|Graph|"
        r"Node|Value|Block|Use|Argument|ArgumentSpec|CompleteArgumentSpec|ConcreteModuleType.*|"
        r"FunctionSchema|FileCheck|ErrorReport|ExecutionPlan|GraphExecutorState|Gradient|"
        r"IODescriptor|InferredType|JITException|TracingState|CallStack|AliasDb|OperatorInfo|"
        r"StaticModule|DeepCopyMemoTable|(De)?[sS]erializationStorageContext|"
        r"ScriptModuleSerializer|PyTorchFile(Reader|Writer)|parse_ir|parse_schema|"
        r"parse_type_comment|merge_type_from_type_comment|unify_type_list|import_ir_module.*|"
        r"compile|export|cond|fork|wait|Future|Capsule|Sym\w+|sym_\w+|cpp|LockingLogger|"
        r"NoopLogger|BenchmarkConfig|BenchmarkExecutionStats|ThroughputBenchmark|"
        r"AggregationType|AVG|SUM|Tag|ScalingType|SwizzleType|boolean_dispatch|"
        r"assert_int_or_pair|module_load|dim_order|hash_tensor",
    ),
    (
        "torch's dispatch and backend internals",
        r"DispatchKey\w*|ExcludeDispatchKeyGuard|DisableTorchFunction\w*|.*torch_function.*|"
        r"cudnn_.*|miopen_.*|mkldnn_.*|to_mkldnn|is_mkldnn|native_.*|batch_norm_\w+|"
        r"autocast_(in|de)crement_nesting|clear_autocast_cache|conv_tbc|grouped_mm|"
        r"scaled_grouped_mm|scaled_mm|reinforce|volatile|as_subclass|map2?_|apply_|"
        r"record_stream|nonzero_static|slice_inverse|thread_safe_generator|"
        r"(float8|float4)_\w+|u?int[1-7]|bits\w+|is_vulkan|is_vulkan_available|is_xla|"
        r"is_ipu|ipu|is_maia|is_mtia|mtia|is_mps|xpu|is_xpu|is_meta|unsafe_\w+",
    ),
)


@dataclass(frozen=True)
class ListCoverage:
    """One list: its applicable names and the ones asyncgrad lacks."""

    name: str
    applicable: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def have(self) -> int:
        return len(self.applicable) - len(self.missing)

    @property
    def percent(self) -> float:
        return 100.0 * self.have / len(self.applicable)


def excluded(name: str) -> str | None:
    """The reason ``name`` is not applicable, or None if it is."""
    for reason, pattern in EXCLUDED:
        if re.fullmatch(pattern, name):
            return reason
    return None


def _provided(obj: Any, name: str) -> bool:
    """Whether asyncgrad provides ``name`` on ``obj``: an attribute that exists, not a placeholder
    that raises the not-provided error."""
    try:
        inspect.getattr_static(obj, name)
    except AttributeError:
        try:
            getattr(obj, name)
        except (AttributeError, NotImplementedError):
            return False
    return True


def lists() -> dict[str, tuple[list[str], Callable[[str], bool]]]:
    """torch's six lists, with the test that asyncgrad provides a name of each."""
    import torch
    import torch.nn.functional as F

    import asyncgrad as ag

    def public(mod: Any, keep: Callable[[Any], bool]) -> list[str]:
        return [n for n in dir(mod) if not n.startswith("_") and keep(getattr(mod, n))]

    def from_module(prefix: str) -> Callable[[Any], bool]:
        return lambda v: callable(v) and str(getattr(v, "__module__", "")).startswith(prefix)

    optimizers = [
        n
        for n in dir(torch.optim)
        if isinstance(getattr(torch.optim, n), type)
        and issubclass(getattr(torch.optim, n), torch.optim.Optimizer)
        and n != "Optimizer"
    ]
    return {
        "torch.nn.modules.__all__": (
            list(torch.nn.modules.__all__),
            lambda n: _provided(ag.nn, n),
        ),
        "torch.nn.functional": (
            public(F, from_module("torch")),
            lambda n: _provided(ag.nn.functional, n),
        ),
        "torch.Tensor": (
            [n for n in dir(torch.Tensor) if not n.startswith("_")],
            lambda n: _provided(ag.Tensor, n),
        ),
        "torch.__all__": (list(torch.__all__), lambda n: _provided(ag, n)),
        "torch.nn.init": (
            public(torch.nn.init, from_module("torch.nn.init")),
            lambda n: _provided(ag.nn.init, n),
        ),
        "torch.optim": (optimizers, lambda n: _provided(ag.optim, n)),
    }


def coverage() -> list[ListCoverage]:
    out = []
    for name, (names, has) in lists().items():
        applicable = tuple(sorted({n for n in names if excluded(n) is None}))
        missing = tuple(n for n in applicable if not has(n))
        out.append(ListCoverage(name, applicable, missing))
    return out


def table(rows: list[ListCoverage]) -> str:
    """The coverage table, as the README prints it."""
    lines = ["| list | applicable | asyncgrad has | share |", "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| `{r.name}` | {len(r.applicable)} | {r.have} | {r.percent:.0f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    rows = coverage()
    print(table(rows))
    if "-v" in sys.argv:
        for r in rows:
            print(f"\n## {r.name}: missing {len(r.missing)}\n" + " ".join(r.missing))
