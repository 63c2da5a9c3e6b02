"""The two builds side by side: pure Python against the engine compiled by mypyc, and PyTorch.

The compiled build is the release wheel of this checkout (scripts/build_wheels.sh, installed
into a folder with ``pip install --target``), unless ``--tree compiled=PATH`` names one made
already. Each figure reuses the worker of the script that owns it (the same workload and the
same code measuring it), in a fresh process per run, the three columns interleaved in the same
rounds:

  - bench_chain: the backward of a 1,000-op chain, per node (us), blocking and awaited;
  - bench_small: one small-MLP input gradient (us), blocking and awaited;
  - bench_mlp: one MLP training step (ms), blocking;
  - server_load: 64 concurrent requests x 20 gradients, on asyncio and on uvloop (gradients/s;
    the peer is PyTorch through asyncio.to_thread);
  - server_smoothgrad: the SmoothGrad HTTP server (requests/s; the peer as above).

Usage: python benchmarks/bench_compiled.py [--tree compiled=PATH] [--rounds R] [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

HERE = Path(__file__).resolve().parent
ROUNDS = 5
CHAIN_N = 1000


@dataclass(frozen=True)
class Row:
    script: str
    worker: str
    peer: str | None
    label: str
    unit: str
    better: str  # "low" or "high"
    value: Callable[[dict[str, Any]], float]
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)  # the worker's arguments for a shorter run


def _chain(r: dict[str, Any]) -> float:
    return H.median(r["sizes"][str(CHAIN_N)]["bwd"]) / CHAIN_N * 1e6


ROWS = [
    Row("bench_chain.py", "asyncgrad-sync", "torch", "chain backward per node, blocking", "us",
        "low", _chain, ("--sizes", str(CHAIN_N))),
    Row("bench_chain.py", "asyncgrad-async", "torch", "chain backward per node, awaited", "us",
        "low", _chain, ("--sizes", str(CHAIN_N))),
    Row("bench_small.py", "asyncgrad-sync", "torch", "small gradient, blocking", "us", "low",
        lambda r: H.median(r["us"])),
    Row("bench_small.py", "asyncgrad-async", "torch", "small gradient, awaited", "us", "low",
        lambda r: H.median(r["us"])),
    Row("bench_mlp.py", "asyncgrad-sync", "torch", "MLP training step, blocking", "ms", "low",
        lambda r: float(r["mean"]) * 1e3, quick=("--steps", "60", "--warmup", "10")),
    Row("server_load.py", "asyncgrad/asyncio", "torch-thread/asyncio",
        "64x20 serving on asyncio", "gradients/s", "high", lambda r: float(r["gps"])),
    Row("server_load.py", "asyncgrad/uvloop", "torch-thread/uvloop",
        "64x20 serving on uvloop", "gradients/s", "high", lambda r: float(r["gps"])),
    Row("server_smoothgrad.py", "asyncgrad", "torch-thread", "SmoothGrad HTTP server",
        "requests/s", "high", lambda r: float(r["rps"])),
]  # fmt: skip


def build_tree(into: Path) -> Path:
    """The release wheel of this checkout, installed into ``into``/tree; returns that path."""
    dist = into / "dist"
    # The recipe runs ``python`` from PATH: this interpreter's, whatever the caller's PATH.
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    subprocess.run(
        ["bash", str(H.ROOT / "scripts" / "build_wheels.sh"), str(dist)], check=True, env=env
    )
    (wheel,) = dist.glob("asyncgrad-*.whl")
    tree = into / "tree"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(tree),
         str(wheel)],
        check=True,
    )  # fmt: skip
    return tree


@dataclass
class Figures:
    pure: list[float]
    compiled: list[float]
    peer: list[float] | None


def measure(rounds: int, quick: bool, only: Sequence[str] = ()) -> dict[Row, Figures]:
    rows = [r for r in ROWS if not only or r.script in only]
    out: dict[Row, Figures] = {}
    for script in dict.fromkeys(r.script for r in rows):
        mine = [r for r in rows if r.script == script]
        libs: list[str] = []
        for r in mine:
            libs += [r.worker, f"{r.worker}@compiled"]
            if r.peer is not None and H.missing_reason(r.peer) is None:
                libs.append(r.peer)
        libs = list(dict.fromkeys(libs))
        args = mine[0].args + (mine[0].quick if quick else ())
        print(f"{script}: {len(libs)} workers x {rounds} rounds", flush=True)
        res = H.interleaved_rounds(
            HERE / script, libs, rounds, lambda lib, r, a=args: a, timeout=900.0
        )
        for r in mine:
            peer = res.get(r.peer) if r.peer is not None else None
            out[r] = Figures(
                [r.value(x) for x in res[r.worker]],
                [r.value(x) for x in res[f"{r.worker}@compiled"]],
                None if peer is None else [r.value(x) for x in peer],
            )
    return out


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"


def report(figs: dict[Row, Figures]) -> H.Report:
    head = ["figure", "pure", "compiled", "PyTorch", "compiled / pure", "pure / PyTorch",
            "compiled / PyTorch"]  # fmt: skip
    rows = []
    speedup: dict[str, float] = {}
    ratios: dict[str, float | None] = {}
    for r, f in figs.items():
        p, c = H.median(f.pure), H.median(f.compiled)
        t = None if f.peer is None else H.median(f.peer)
        cp = H.paired_ratio(f.compiled, f.pure)
        # A time: compiled / pure < 1 is faster; a rate: > 1 is faster.
        speedup[r.label] = (1 / cp if r.better == "low" else cp) if cp else float("nan")
        vs = None if f.peer is None else H.paired_ratio(f.compiled, f.peer)
        ratios[r.label] = vs
        arrow = "lower is better" if r.better == "low" else "higher is better"
        rows.append(
            [
                f"{r.label} ({r.unit}; {arrow})",
                _fmt(p),
                _fmt(c),
                "-" if t is None else _fmt(t),
                H.fmt_ratio(cp),
                H.fmt_ratio(None if f.peer is None else H.paired_ratio(f.pure, f.peer)),
                H.fmt_ratio(vs),
            ]
        )
    rep = H.Report(
        title="Two builds: pure Python and the compiled engine (bench_compiled.py)",
        command="python benchmarks/bench_compiled.py",
        sections=[
            H.table(head, rows),
            "Medians over rounds; ratios are paired per round. The compiled build is the "
            "release wheel of the same commit (scripts/build_wheels.sh); PyTorch's column is "
            "the peer of each script (PyTorch CPU, one thread; through asyncio.to_thread for "
            "the servers).",
        ],
        data={"speedup": speedup, "vs_torch": ratios},
    )
    for label, limit in (
        ("chain backward per node, blocking", 0.5),
        ("chain backward per node, awaited", 0.5),
        ("small gradient, blocking", 0.9),
        ("small gradient, awaited", 1.0),
        ("MLP training step, blocking", 1.0),
    ):
        if label not in ratios:
            continue
        r = ratios[label]
        rep.targets.append(
            (
                f"compiled build: {label} <= {limit}x PyTorch",
                "n/a" if r is None else ("MET" if r <= limit else "NOT MET"),
                "PyTorch not installed" if r is None else f"paired ratio {r:.2f}x",
            )
        )
    small = speedup.get("small gradient, awaited")
    for label in ("64x20 serving on asyncio", "64x20 serving on uvloop", "SmoothGrad HTTP server"):
        if label not in speedup or small is None:
            continue
        s = speedup[label]
        rep.targets.append(
            (
                f"compiled build: {label} gains at least the small gradient's factor",
                "MET" if s >= small else "NOT MET",
                f"{s:.2f}x against {small:.2f}x",
            )
        )
    return rep


def run(rounds: int = ROUNDS, quick: bool = False, trees: Sequence[str] = ()) -> H.Report:
    """``trees``: a registered ``compiled`` tree; without one, the wheel is built first."""
    print(f"bench_compiled: pure vs compiled vs PyTorch, {rounds} interleaved rounds", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        if "compiled" not in H.TREES:
            H.TREES["compiled"] = str(build_tree(Path(tmp)))
        rep = report(measure(rounds, quick))
    print(rep.text())
    return rep


def main() -> None:
    w = H.worker_argv()
    if w is not None:
        raise SystemExit("bench_compiled has no workers of its own")
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], help="compiled=PATH of a built tree")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    labels = H.parse_trees(a.tree)
    if labels and labels != ["compiled"]:
        raise SystemExit("--tree takes one tree, labelled compiled")
    rep = run(a.rounds, a.quick)
    rep.print_targets()


if __name__ == "__main__":
    main()
