"""Shared helpers for the benchmark scripts in this folder.

Every measurement runs in a fresh Python subprocess (``python bench_x.py --worker LIB ...``)
that prints one JSON line; the parent interleaves rounds across libraries (round 1: A, B, C;
round 2: B, C, A; ...), takes medians over rounds and prints fixed-width tables.

Worker subprocesses run single-threaded: OMP/OpenBLAS/MKL thread counts are pinned to 1 in
their environment, and PyTorch workers also call ``torch.set_num_threads(1)``.
"""

from __future__ import annotations

import gc
import importlib.metadata
import importlib.util
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

RESULT_MARK = "@@RESULT "

THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}

THREADS_NOTE = (
    "All workers run single-threaded: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1 "
    "in every worker's environment, and torch.set_num_threads(1) in PyTorch workers."
)

# Optional peers (the `bench` extra): library label prefix -> importable module it needs.
OPTIONAL_MODULES = {"torch": "torch", "autograd": "autograd"}


# ---------------------------------------------------------------------------------------------
# Availability
# ---------------------------------------------------------------------------------------------
def missing_reason(lib: str) -> str | None:
    """Why ``lib`` cannot run here (a module is not installed), or None when it can."""
    for prefix, module in OPTIONAL_MODULES.items():
        if lib == prefix or lib.startswith(prefix + "-") or lib.startswith(prefix + "_"):
            if importlib.util.find_spec(module) is None:
                return f"'{module}' is not installed (optional; pip install -e \".[bench]\")"
    return None


def available_libs(libs: Sequence[str], labels: dict[str, str] | None = None) -> list[str]:
    """Libraries that can run; prints one 'skipped' line with the reason for each other one."""
    ok = []
    for lib in libs:
        why = missing_reason(lib)
        if why is None:
            ok.append(lib)
        else:
            name = labels.get(lib, lib) if labels else lib
            print(f"  skipped {name}: {why}", flush=True)
    return ok


# ---------------------------------------------------------------------------------------------
# Running workers
# ---------------------------------------------------------------------------------------------
# Other checkouts of the package to measure in the same run (``--tree LABEL=PATH``): a worker
# named ``lib@LABEL`` runs ``lib``'s code with the package imported from PATH.
TREES: dict[str, str] = {}


def worker_env(tree: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(THREAD_ENV)
    env["PYTHONHASHSEED"] = "0"
    # Make the in-tree package importable even without an editable install (or the package of
    # another tree, ahead of it).
    paths = (tree or "", str(ROOT), env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def split_tree(lib: str) -> tuple[str, str | None]:
    """``lib@LABEL`` -> (lib, PATH of LABEL); a plain ``lib`` -> (lib, None)."""
    name, _, label = lib.partition("@")
    if not label:
        return lib, None
    if label not in TREES:
        raise WorkerError(f"unknown tree {label!r} (give it with --tree {label}=PATH)")
    return name, TREES[label]


def parse_trees(specs: Sequence[str]) -> list[str]:
    """Register ``LABEL=PATH`` specs in TREES; return the labels."""
    labels = []
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not Path(path, "asyncgrad").is_dir():
            raise SystemExit(f"--tree expects LABEL=PATH with PATH/asyncgrad, got {spec!r}")
        TREES[label] = str(Path(path).resolve())
        labels.append(label)
    return labels


class WorkerError(RuntimeError):
    pass


def run_worker(
    script: str | Path, lib: str, args: Sequence[str] = (), timeout: float = 300.0
) -> dict[str, Any]:
    """Run ``python script --worker lib *args`` in a fresh process; return its JSON result.
    ``lib@LABEL`` runs ``lib`` with the package of tree LABEL (See TREES)."""
    name, tree = split_tree(lib)
    cmd = [sys.executable, str(script), "--worker", name, *args]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=worker_env(tree), timeout=timeout, cwd=str(HERE)
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            if proc.returncode != 0:
                break
            return json.loads(line[len(RESULT_MARK) :])
    tail = (proc.stderr or proc.stdout)[-3000:]
    raise WorkerError(
        f"worker {lib!r} ({' '.join(args)}) failed with exit code {proc.returncode}:\n{tail}"
    )


def emit(result: dict[str, Any]) -> None:
    """Called in a worker: print the result line the parent reads."""
    print(RESULT_MARK + json.dumps(result), flush=True)


def rotated(libs: Sequence[str], r: int) -> list[str]:
    k = r % len(libs) if libs else 0
    return list(libs[k:]) + list(libs[:k])


def interleaved_rounds(
    script: str | Path,
    libs: Sequence[str],
    rounds: int,
    args_for: Callable[[str, int], Sequence[str]] = lambda lib, r: (),
    timeout: float = 300.0,
    progress: bool = True,
    errors: dict[str, str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Run every library once per round, in a fresh subprocess each time.

    Round r runs the libraries rotated by r, so no library always runs first or last.
    ``args_for(lib, r)`` gives the worker's extra command-line arguments.
    Returns {lib: [result of round 0, result of round 1, ...]}.
    A failing worker raises WorkerError, unless ``errors`` is given: then the library's
    message goes to ``errors[lib]``, it leaves the result and the later rounds, and the
    others go on.
    """
    out: dict[str, list[dict[str, Any]]] = {lib: [] for lib in libs}
    for r in range(rounds):
        order = [lib for lib in rotated(libs, r) if lib in out]
        t0 = time.perf_counter()
        for lib in order:
            try:
                out[lib].append(run_worker(script, lib, args_for(lib, r), timeout=timeout))
            except (WorkerError, subprocess.TimeoutExpired) as exc:
                if errors is None:
                    raise
                errors[lib] = str(exc)
                del out[lib]
                print(f"  {lib} failed: {str(exc).splitlines()[0]}", flush=True)
        if progress:
            print(
                f"  round {r + 1}/{rounds} ({', '.join(order)}): {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
    return out


# ---------------------------------------------------------------------------------------------
# Timing helpers used inside workers
# ---------------------------------------------------------------------------------------------
def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def collect() -> None:
    """Full collection before a timed region so earlier garbage is not charged to it."""
    gc.collect()


def blas_threads() -> str:
    """BLAS libraries and their thread counts as seen in this process (needs threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    info = threadpool_info()
    if not info:
        return "none found"
    return ", ".join(f"{d.get('internal_api')}={d.get('num_threads')}" for d in info)


def pin_torch_threads() -> None:
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def worker_argv() -> tuple[str, list[str]] | None:
    """(lib, rest of argv) when this process was started as a worker, else None."""
    if len(sys.argv) >= 3 and sys.argv[1] == "--worker":
        return sys.argv[2], sys.argv[3:]
    return None


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
def fmt(v: Any, spec: str = ".2f") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and v != v:
        return "n/a"
    return format(v, spec)


def ratio(v: float | None, base: float | None) -> str:
    if v is None or base is None or base == 0:
        return "n/a"
    return f"{v / base:.2f}x"


def paired_ratio(values: Sequence[float] | None, base: Sequence[float] | None) -> float | None:
    """Median over rounds of value / baseline, each pair measured in the same round.

    Rounds run close together in time, so pairing them cancels slow drift in the machine's
    speed that a ratio of two medians would keep.
    """
    if not values or not base or len(values) != len(base) or not all(base):
        return None
    return median([v / b for v, b in zip(values, base, strict=True)])


def verdict_at_most(paired: float | None, of_medians: float | None, limit: float) -> str:
    """MET / NOT MET for "ratio <= limit", judged on the paired ratio and on the ratio of the
    medians; INCONCLUSIVE when the two land on different sides of the limit (the difference
    is within the run-to-run variation)."""
    if paired is None or of_medians is None:
        return "n/a"
    a, b = paired <= limit, of_medians <= limit
    if a != b:
        return "INCONCLUSIVE"
    return "MET" if a else "NOT MET"


def verdict_at_least(paired: float | None, of_medians: float | None, limit: float) -> str:
    """verdict_at_most's twin for "value >= limit" (throughputs)."""
    if paired is None or of_medians is None:
        return "n/a"
    a, b = paired >= limit, of_medians >= limit
    if a != b:
        return "INCONCLUSIVE"
    return "MET" if a else "NOT MET"


VERDICT_NOTE = (
    "A target is MET or NOT MET when the paired ratio and the ratio of the medians agree, "
    "INCONCLUSIVE when they fall on different sides of the limit."
)


def fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


PAIRED_NOTE = (
    "Ratio columns are medians of per-round ratios (each library against the baseline run in "
    "the same round), so they can differ slightly from the ratio of the two median columns."
)


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None
) -> str:
    """Fixed-width table; ``align`` is 'l' or 'r' per column (first column left by default)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    n = len(headers)
    if align is None:
        align = ["l"] + ["r"] * (n - 1)
    widths = [max(len(r[i]) for r in cells) for i in range(n)]

    def line(r: Sequence[str]) -> str:
        cols = zip(r, widths, align, strict=True)
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in cols]
        return "| " + " | ".join(parts) + " |"

    sep = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if a == "r" else (":" + "-" * (w + 1))
            for w, a in zip(widths, align, strict=True)
        )
        + "|"
    )
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


@dataclass
class Report:
    """What a benchmark returns to run_all: its title, tables and notes, and raw numbers."""

    title: str
    command: str
    sections: list[str] = field(default_factory=list)  # markdown blocks (tables, notes)
    notes: list[str] = field(default_factory=list)  # "what limits it" lines
    targets: list[tuple[str, str, str]] = field(default_factory=list)  # name, verdict, why
    data: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        parts = [f"## {self.title}", "", f"Command: `{self.command}`", ""]
        for s in self.sections:
            parts += [s, ""]
        if self.notes:
            parts += ["What limits it (from the numbers above):", ""]
            parts += [f"- {n}" for n in self.notes] + [""]
        if self.targets:
            parts += ["Targets:", ""]
            for name, verdict, why in self.targets:
                parts.append(f"- {name}: **{verdict}** ({why})")
            parts.append("")
        return "\n".join(parts)

    def print_targets(self) -> None:
        for name, verdict, why in self.targets:
            print(f"  {name}: {verdict} ({why})")


# ---------------------------------------------------------------------------------------------
# Machine facts
# ---------------------------------------------------------------------------------------------
def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_facts() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    os_name = platform.system()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    try:
        import numpy as np

        np_ver = np.__version__
    except ImportError:  # pragma: no cover
        np_ver = "not installed"
    commit = "unknown"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "asyncgrad"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if dirty:
            commit += " + uncommitted changes in asyncgrad/"
    except (OSError, subprocess.CalledProcessError):
        pass
    return {
        "CPU": cpu,
        "Logical cores": str(os.cpu_count()),
        "OS": f"{os_name} (kernel {platform.release()}, {platform.machine()})",
        "Python": platform.python_version(),
        "NumPy": np_ver,
        "PyTorch": _version("torch"),
        "HIPS autograd": _version("autograd"),
        "Ray": _version("ray"),
        "asyncgrad": f"{_version('asyncgrad')} (git {commit})",
    }


def bench_main(
    doc: str | None,
    rounds: int,
    run: Callable[[int, bool], Any],
    worker_main: Callable[..., None],
    quick_help: str = "fewer reps per worker",
) -> None:
    """The command line shared by the bench_*.py scripts: a worker when called with --worker,
    otherwise the interleaved rounds, their table and the target verdicts."""
    import argparse

    w = worker_argv()
    if w is not None:
        worker_main(*w)
        return
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--json", help="also write the summary numbers to this file")
    takes_trees = "trees" in inspect.signature(run).parameters
    if takes_trees:
        ap.add_argument(
            "--tree",
            action="append",
            default=[],
            metavar="LABEL=PATH",
            help="also run the asyncgrad workers with the package from PATH (another checkout, "
            "e.g. a git worktree of an earlier commit), as extra rows of the same run",
        )
    a = ap.parse_args()
    if takes_trees and a.tree:
        rep = run(a.rounds, a.quick, trees=parse_trees(a.tree))
    else:
        rep = run(a.rounds, a.quick)
    rep.print_targets()
    if a.json:
        Path(a.json).write_text(json.dumps(rep.data, indent=1))


def check_first_step(
    files: dict[str, str],
    names: Sequence[str],
    labels: dict[str, str],
    bench: str,
    rtol: float,
    atol: float,
) -> str:
    """The first training step's loss and gradients (``names`` in each worker's .npz) of every
    library must match the NumPy floor's within ``rtol`` and ``atol`` times each array's largest
    magnitude; exits naming the first that does not. Returns the line the report prints."""
    import numpy as np

    ref = np.load(files["numpy-floor"])
    worst = 0.0
    for lib, path in files.items():
        d = np.load(path)
        for k in ["loss", *names]:
            a, b = d[k], ref[k]
            scale = float(np.max(np.abs(b))) or 1.0
            if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol * scale):
                diff = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("nan")
                raise SystemExit(
                    f"{bench}: {k} of {labels[lib]} does not match the NumPy floor after the "
                    f"first step (max abs diff {diff:.3g}, scale {scale:.3g}, shapes {a.shape} "
                    f"vs {b.shape})"
                )
            worst = max(worst, float(np.max(np.abs(a - b))) / scale)
    return (
        f"Gradient check passed: first-step loss and all {len(names)} parameter gradients of "
        "every library match the NumPy floor (float32; max difference "
        f"{worst:.1e} relative to each array's largest magnitude)."
    )
