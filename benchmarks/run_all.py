"""Run every benchmark in this folder and write benchmarks/RESULTS.md.

Usage (from the repository root):

    python benchmarks/run_all.py                 # full run, about 10 minutes on 2 cores
    python benchmarks/run_all.py --quick         # fewer reps, for a smoke test
    python benchmarks/run_all.py --rounds 9      # more interleaved rounds (slower)
    python benchmarks/run_all.py --only chain,loop --out /tmp/partial.md

PyTorch and HIPS autograd are optional (`pip install -e ".[bench]"`); a missing one is
skipped with the reason printed and recorded. The GPU benchmarks (bench_cuda.py) are recorded
only on a machine with an NVIDIA GPU; elsewhere they are skipped with the reason printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H
import bench_batching
import bench_chain
import bench_checkpoint
import bench_cnn
import bench_coalesce
import bench_compiled
import bench_cuda
import bench_loop
import bench_mlp
import bench_new_ops
import bench_param_grads
import bench_run_gap
import bench_small
import distributed
import serve_replicas
import server_ig
import server_load
import server_smoothgrad

BENCHES = {
    "chain": bench_chain,
    "mlp": bench_mlp,
    "cnn": bench_cnn,
    "small": bench_small,
    "loop": bench_loop,
    "run_gap": bench_run_gap,
    "cuda": bench_cuda,
    "server_load": server_load,
    "smoothgrad": server_smoothgrad,
    "ig": server_ig,
    # ----- serving: what batching buys, and concurrent requests coalesced -----
    "batching": bench_batching,
    "coalesce": bench_coalesce,
    "param_grads": bench_param_grads,
    # ----- torch's wider API: the common new ops and modules -----
    "new_ops": bench_new_ops,
    # ----- checkpointing -----
    "checkpoint": bench_checkpoint,
    # ----- across processes -----
    "distributed": distributed,
    "serve_replicas": serve_replicas,
    # ----- the two builds: pure Python and the compiled engine (builds the wheel first) -----
    "compiled": bench_compiled,
}

# What has run on real hardware (the README's CUDA section keeps the same record): update both,
# and benchmarks/gpu.md (copied below the note), when scripts/gpu_check.sh has run on a GPU.
HARDWARE_NOTE = (
    "On hardware: the CUDA tests passed on an NVIDIA H200 on 2026-11-27 (after a first run on "
    "an H100 the same day found two faults, since fixed), and on the compiled build on an H200 "
    "the same day (after a first run found one fault, since fixed); CI runs them on the "
    "simulator only. The GPU rows measured by hand follow."
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved rounds for every benchmark (default: each benchmark's own: "
        + ", ".join(f"{k} {m.ROUNDS}" for k, m in BENCHES.items())
        + ")",
    )
    ap.add_argument("--quick", action="store_true", help="fewer reps/steps per worker")
    ap.add_argument(
        "--only", default=",".join(BENCHES), help="comma-separated subset of: " + ", ".join(BENCHES)
    )
    ap.add_argument("--out", default=str(H.HERE / "RESULTS.md"))
    a = ap.parse_args()

    names = [n.strip() for n in a.only.split(",") if n.strip()]
    for n in names:
        if n not in BENCHES:
            raise SystemExit(f"unknown benchmark {n!r}; choose from {', '.join(BENCHES)}")
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    reports = []
    unmeasured = []
    for n in names:
        tb = time.perf_counter()
        mod = BENCHES[n]
        rep = mod.run(mod.ROUNDS if a.rounds is None else a.rounds, a.quick)
        if rep is not None:  # None: nothing to record here (bench_cuda without a GPU)
            reports.append(rep)
        else:
            unmeasured.append(n)
        print(f"{n}: {time.perf_counter() - tb:.0f} s\n", flush=True)
    elapsed = time.perf_counter() - t0

    cmd = (
        "python benchmarks/run_all.py"
        + (f" --rounds {a.rounds}" if a.rounds is not None else "")
        + (" --quick" if a.quick else "")
        + (f" --only {a.only}" if names != list(BENCHES) else "")
    )
    facts = H.machine_facts()
    lines = [
        "# Benchmark results",
        "",
        f"Generated {started:%Y-%m-%d %H:%M} UTC by `{cmd}` (run from the repository root; "
        f"took {elapsed / 60:.1f} min). Rerun the same command to refresh this file; each "
        "benchmark script also runs on its own and prints its table.",
        "",
        "These numbers are a snapshot of the working tree named below on one machine; the "
        "engine is under active optimisation, so treat them as provisional.",
        "",
        "## Machine and versions",
        "",
        H.table(["", ""], [[k, v] for k, v in facts.items()], align=["l", "l"]),
        "",
        "Method: every measurement runs in a fresh Python process; libraries alternate in "
        "rotated order from round to round (round 1: A, B, C; round 2: B, C, A; ...); tables "
        "show medians over rounds. " + H.THREADS_NOTE,
        "",
        "## Targets",
        "",
        H.VERDICT_NOTE,
        "",
    ]
    for rep in reports:
        for name, verdict, why in rep.targets:
            lines.append(f"- {name}: **{verdict}** ({why})")
    lines.append("")
    for rep in reports:
        lines.append(rep.text())
    if "cuda" in unmeasured:
        lines += [
            "## GPU (bench_cuda.py)",
            "",
            "Not measured in this run: this machine has no NVIDIA GPU. On one, "
            "`bash scripts/gpu_check.sh` runs the CUDA tests and these benchmarks side by side "
            "with PyTorch CUDA and hand-written CuPy.",
            "",
            HARDWARE_NOTE,
            "",
        ]
        gpu = H.HERE / "gpu.md"
        if gpu.exists():
            lines += [gpu.read_text().strip(), ""]
    # Written by bench_cuda_counts.py (--markdown benchmarks/cuda_counts.md: no GPU needed),
    # bench_instructions.py (slow), bench_offload.py (asyncgrad alone) and bench_anomaly.py
    # (asyncgrad alone, with callgrind counts): run apart; engine_design.md, the measurements
    # behind the engine's design and its A/B runs (ab_engine.py), by hand.
    extras = ("cuda_counts.md", "offload.md", "anomaly.md", "instructions.md", "engine_design.md")
    for extra in (H.HERE / name for name in extras):
        if extra.exists():
            lines.append(extra.read_text(encoding="utf-8"))
    out = Path(a.out)
    out.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    print(f"wrote {out} ({elapsed:.0f} s in all)")
    for rep in reports:
        rep.print_targets()


if __name__ == "__main__":
    main()
