"""CPU instructions per MLP training step, counted by valgrind's callgrind.

Wall-clock ratios on a small shared machine move by tens of percent from process to process.
Instruction counts do not: for the same program and inputs they repeat exactly, whatever else
the machine is doing. This script runs the MLP step of ``bench_mlp.py`` (the same worker code)
under ``valgrind --tool=callgrind`` twice per library, with a short and a long run, and divides
the difference by the difference in steps, so start-up and imports cancel out.

Instructions are not time: they leave out cache misses, page faults and memory bandwidth,
so this table says how much work each library asks of the CPU, not how long it takes.

    python benchmarks/bench_instructions.py [--short 20] [--long 80] [--libs a,b]

Needs valgrind (skipped with a message otherwise). Takes several minutes: it is not part of
``run_all.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _harness as H

HERE = Path(__file__).resolve().parent
LIBS = ["asyncgrad-sync", "asyncgrad-async", "torch", "numpy-floor"]
LABELS = {
    "asyncgrad-sync": "asyncgrad loss.backward()",
    "asyncgrad-async": "asyncgrad await ag.backward(loss)",
    "torch": "PyTorch CPU (1 thread)",
    "numpy-floor": "NumPy floor (hand-written, no engine)",
}
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def count(lib: str, steps: int, warmup: int) -> int:
    """Instructions executed by one worker process running ``steps`` timed steps."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={tmp}/cg.out",
            sys.executable,
            str(HERE / "bench_mlp.py"),
            "--worker",
            lib,
            "--steps",
            str(steps),
            "--warmup",
            str(warmup),
        ]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=H.worker_env(), cwd=str(HERE), timeout=3600
        )
    m = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or m is None:
        raise H.WorkerError(f"callgrind run of {lib} failed:\n{proc.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", type=int, default=20, help="timed steps in the short run")
    ap.add_argument("--long", type=int, default=80, help="timed steps in the long run")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument(
        "--out",
        default=str(HERE / "instructions.md"),
        help="markdown section written here; run_all.py copies it into RESULTS.md",
    )
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed (apt-get install valgrind)")
        return
    libs = H.available_libs([x for x in a.libs.split(",") if x], LABELS)
    per_step: dict[str, float] = {}
    for lib in libs:
        short = count(lib, a.short, a.warmup)
        long = count(lib, a.long, a.warmup)
        per_step[lib] = (long - short) / (a.long - a.short)
        print(f"  {LABELS[lib]}: {per_step[lib] / 1e6:.2f} M instructions/step", flush=True)
    floor = per_step.get("numpy-floor")
    torch = per_step.get("torch")
    rows = [
        [
            LABELS[lib],
            f"{v / 1e6:.2f}",
            H.ratio(v, floor),
            H.ratio(v, torch),
        ]
        for lib, v in per_step.items()
    ]
    tab = H.table(["library", "M instructions/step", "vs NumPy floor", "vs PyTorch"], rows)
    print()
    print(tab)
    when = dt.datetime.now(dt.UTC)
    Path(a.out).write_text(
        "\n".join(
            [
                "## CPU instructions per MLP step (callgrind)",
                "",
                f"Command: `python benchmarks/bench_instructions.py --short {a.short} --long "
                f"{a.long}` ({when:%Y-%m-%d %H:%M} UTC, same machine). The MLP step of "
                "bench_mlp.py's workers run under valgrind's callgrind; instructions per step = "
                f"(count of a {a.long}-step run - count of a {a.short}-step run) / "
                f"{a.long - a.short}. Counts repeat exactly from run to run; they leave out "
                "cache misses, page faults and memory bandwidth, which the wall-clock table "
                "above includes.",
                "",
                tab,
                "",
            ]
        ),
        encoding="utf-8",
    )
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
