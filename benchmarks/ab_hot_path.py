"""The hot path's figures, this tree against another checkout, side by side in one run.

For a change on the path every training step and every request takes (recording, saving,
optimizer steps): the small-MLP input gradient of bench_small.py and the MLP training step of
bench_mlp.py, blocking and awaited, each worker a fresh process, this tree's package and the
other's (``--tree base=PATH``, a git worktree of the earlier commit) in the same interleaved
rounds. Per figure: the median over rounds of each tree with its range [min-max], and the ratio
of the medians (this tree / the other). The chain benchmark takes ``--tree`` itself
(``python benchmarks/bench_chain.py --tree base=PATH``).

Usage: python benchmarks/ab_hot_path.py --tree base=PATH [--rounds R]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

HERE = Path(__file__).resolve().parent
MLP_ARGS = ["--steps", "200", "--warmup", "20"]

# (script, worker, worker arguments, figure from its result, label)
Row = tuple[str, str, list[str], Callable[[dict[str, Any]], float], str]
ROWS: list[Row] = [
    (
        "bench_small.py",
        "asyncgrad-sync",
        [],
        lambda r: H.median(r["us"]),
        "small gradient, blocking (us)",
    ),
    (
        "bench_small.py",
        "asyncgrad-async",
        [],
        lambda r: H.median(r["us"]),
        "small gradient, awaited (us)",
    ),
    (
        "bench_mlp.py",
        "asyncgrad-sync",
        MLP_ARGS,
        lambda r: r["mean"] * 1e3,
        "MLP step, blocking (ms)",
    ),
    (
        "bench_mlp.py",
        "asyncgrad-async",
        MLP_ARGS,
        lambda r: r["mean"] * 1e3,
        "MLP step, awaited (ms)",
    ),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tree", required=True, metavar="LABEL=PATH")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    (label,) = H.parse_trees([a.tree])
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(a.rounds):
        for script, worker, args, figure, name in ROWS:
            for tree in ("this", label):
                lib = worker if tree == "this" else f"{worker}@{label}"
                res = H.run_worker(HERE / script, lib, args)
                figures.setdefault((name, tree), []).append(figure(res))
    print(f"| figure | this | {label} | ratio |")
    print("|---|---|---|---|")
    for *_, name in ROWS:
        this, other = figures[(name, "this")], figures[(name, label)]
        cells = [f"{H.median(v):.3g} [{min(v):.3g}-{max(v):.3g}]" for v in (this, other)]
        print(f"| {name} | {cells[0]} | {cells[1]} | {H.median(this) / H.median(other):.2f} |")


if __name__ == "__main__":
    main()
