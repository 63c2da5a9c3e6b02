"""CPU instructions per unit of work, counted by valgrind's callgrind.

Wall-clock ratios on a small shared machine move by tens of percent from process to process.
Instruction counts do not: for the same program and inputs they repeat exactly, whatever else
the machine is doing. Three workloads, each the worker code of another benchmark here:

- ``mlp``: one MLP training step of ``bench_mlp.py``;
- ``chain``: one op of ``bench_chain.py``'s chain, the forward (graph building) and the backward
  counted apart;
- ``small``: one call of ``bench_small.py`` (small-MLP forward + input gradient).

Each is counted twice per library, with a short and a long run, and the difference is divided
by the difference in work, so start-up, imports and warm-up cancel out. For ``chain`` and
``small`` counting is switched on only inside the measured region (callgrind's
``--toggle-collect`` on ``itertools.starmap``'s iterator, through which the region is called).

Instructions are not time: they leave out cache misses, page faults and memory bandwidth,
so these tables say how much work each library asks of the CPU, not how long it takes.

    python benchmarks/bench_instructions.py [--only mlp,chain,small] [--libs a,b]
        [--tree LABEL=PATH ...]

``--tree`` also counts the asyncgrad workers against another checkout of the package (for
example an earlier commit in a git worktree), as an extra row. Needs valgrind (skipped with a
message otherwise). Takes several minutes: it is not part of ``run_all.py``, which copies the
section this script writes into RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

HERE = Path(__file__).resolve().parent
LIBS = ["asyncgrad-sync", "asyncgrad-async", "torch", "numpy-floor"]
LABELS = {
    "asyncgrad-sync": "asyncgrad, blocking call",
    "asyncgrad-async": "asyncgrad, awaited",
    "torch": "PyTorch CPU (1 thread)",
    "numpy-floor": "NumPy floor (hand-written, no engine)",
}
WORKLOADS = ("mlp", "chain", "small")
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
# The C function through which a measured region is entered (See count()).
TOGGLE = "starmap_next"


def count(args: Sequence[str], tree: str | None = None, toggle: bool = False) -> int:
    """Instructions executed by ``python *args`` under callgrind (only inside ``TOGGLE`` when
    ``toggle``); ``tree`` goes first on PYTHONPATH."""
    env = H.worker_env()
    if tree:
        env["PYTHONPATH"] = os.pathsep.join((tree, env["PYTHONPATH"]))
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out"]
        if toggle:
            cmd += ["--collect-atstart=no", f"--toggle-collect={TOGGLE}"]
        cmd += [sys.executable, *args]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=str(HERE), timeout=3600
        )
    m = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or m is None:
        raise H.WorkerError(f"callgrind run of {args} failed:\n{proc.stderr[-2000:]}")
    return int(m.group(1))


# ---------------------------------------------------------------------------------------------
# Measured regions (run in the counted process: python bench_instructions.py --region ...)
# ---------------------------------------------------------------------------------------------
def _in_region(fn: Any, *args: Any) -> Any:
    """Call ``fn(*args)`` through itertools.starmap: callgrind counts only inside it."""
    return next(itertools.starmap(fn, [args]))


def region_chain(lib: str, n: int, part: str) -> None:
    """Build the chain of ``n`` ops (and run its backward) with bench_chain's worker code:
    count the forward or the backward."""
    import bench_chain as C

    got: dict[str, Any] = {}

    def keep(build: Any, backward: Any, *rest: Any) -> dict[str, Any]:
        got["build"], got["backward"] = build, backward
        return {}

    C._measure = keep  # build each worker's two halves, without timing them
    if lib == "torch":
        C.worker_torch([], True)
    elif lib == "numpy-floor":
        C.worker_floor([], True)
    elif lib == "asyncgrad-sync":
        C.worker_asyncgrad("sync", [], True)
    else:  # the awaited backward, on one long-lived event loop as in bench_chain
        import asyncio

        import asyncgrad as ag

        x = ag.tensor(C.x0(), dtype=ag.float64, requires_grad=True)
        loop = asyncio.new_event_loop()
        got["build"] = lambda k: C.chain(x, k).sum()

        async def awaited(loss: Any) -> None:
            await ag.backward(loss)

        got["backward"] = lambda loss: loop.run_until_complete(awaited(loss))
    build, backward = got["build"], got["backward"]
    for _ in range(3):  # warm up (and let the interpreter specialise)
        backward(build(300))
    if part == "forward":
        loss = _in_region(build, n)
    else:
        loss = build(n)
        _in_region(backward, loss)
    del loss


def region_small(lib: str, calls: int) -> None:
    """``calls`` calls of bench_small's forward + input gradient."""
    import bench_small as S

    got: dict[str, Any] = {}

    def keep(call: Any, quick: bool) -> list[float]:
        got["call"] = call
        return []

    S._time_blocks = keep  # build each worker's call, without timing it
    if lib == "torch":
        S.worker_torch(True)
    elif lib == "numpy-floor":
        S.worker_floor(True)
    elif lib == "asyncgrad-sync":
        S.worker_asyncgrad("sync", True)
    else:
        import asyncio

        import asyncgrad as ag
        import asyncgrad.nn.functional as F

        w, xv = S.init()
        p = [ag.nn.Parameter(a) for a in w]
        x = ag.tensor(xv, requires_grad=True)

        async def one() -> Any:
            h = F.relu(F.linear(x, p[0], p[1]))
            h = F.relu(F.linear(h, p[2], p[3]))
            return (await ag.grad(F.linear(h, p[4], p[5]).sum(), x))[0]

        loop = asyncio.new_event_loop()
        got["call"] = lambda: loop.run_until_complete(one())
    call = got["call"]
    for _ in range(S.WARMUP):
        call()

    def many(k: int) -> None:
        for _ in range(k):
            call()

    _in_region(many, calls)


# ---------------------------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------------------------
def per_unit(lo_args: list[str], hi_args: list[str], units: int, **kw: Any) -> float:
    return (count(hi_args, **kw) - count(lo_args, **kw)) / units


def mlp_step(lib: str, short: int, long: int, warmup: int, tree: str | None) -> float:
    def args(steps: int) -> list[str]:
        return [
            str(HERE / "bench_mlp.py"),
            "--worker",
            lib,
            "--steps",
            str(steps),
            "--warmup",
            str(warmup),
        ]

    return per_unit(args(short), args(long), long - short, tree=tree)


def chain_node(lib: str, n1: int, n2: int, tree: str | None) -> tuple[float, float]:
    def args(n: int, part: str) -> list[str]:
        return [str(Path(__file__).resolve()), "--region", "chain", lib, str(n), part]

    fwd = per_unit(args(n1, "forward"), args(n2, "forward"), n2 - n1, tree=tree, toggle=True)
    bwd = per_unit(args(n1, "backward"), args(n2, "backward"), n2 - n1, tree=tree, toggle=True)
    return fwd, bwd


def small_call(lib: str, c1: int, c2: int, tree: str | None) -> float:
    def args(c: int) -> list[str]:
        return [str(Path(__file__).resolve()), "--region", "small", lib, str(c)]

    return per_unit(args(c1), args(c2), c2 - c1, tree=tree, toggle=True)


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--region":
        what, lib = sys.argv[2], sys.argv[3]
        if what == "chain":
            region_chain(lib, int(sys.argv[4]), sys.argv[5])
        else:
            region_small(lib, int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also count the asyncgrad workers with the package from PATH",
    )
    ap.add_argument("--short", type=int, default=20, help="MLP: timed steps in the short run")
    ap.add_argument("--long", type=int, default=80, help="MLP: timed steps in the long run")
    ap.add_argument("--warmup", type=int, default=5, help="MLP: warm-up steps")
    ap.add_argument("--chain", default="1000,3000", help="chain: the two chain lengths")
    ap.add_argument("--calls", default="100,300", help="small: the two numbers of calls")
    ap.add_argument(
        "--out",
        default=str(HERE / "instructions.md"),
        help="markdown section written here; run_all.py copies it into RESULTS.md",
    )
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed (apt-get install valgrind)")
        return
    only = [w for w in a.only.split(",") if w]
    libs = H.available_libs([x for x in a.libs.split(",") if x], LABELS)
    trees = [t.split("=", 1) for t in a.tree]
    # Rows: (label, lib, tree)
    rows: list[tuple[str, str, str | None]] = [(LABELS[lib], lib, None) for lib in libs]
    for label, path in trees:
        for lib in libs:
            if lib.startswith("asyncgrad"):
                rows.append((f"{LABELS[lib]}, {label}", lib, path))
    n1, n2 = (int(v) for v in a.chain.split(","))
    c1, c2 = (int(v) for v in a.calls.split(","))
    when = dt.datetime.now(dt.UTC)
    sections = [
        "## CPU instructions (callgrind)",
        "",
        "Command: `python benchmarks/bench_instructions.py"
        + (f" --only {a.only}" if only != list(WORKLOADS) else "")
        + "".join(f" --tree {label}=..." for label, _ in trees)
        + f"` ({when:%Y-%m-%d %H:%M} UTC, same machine). Each count is the difference between "
        "a long and a short run of the same worker divided by the difference in work, so "
        "start-up and imports cancel out. Counts repeat exactly from run to run; they leave "
        "out cache misses, page faults and memory bandwidth, which the wall-clock tables "
        "above include.",
        "",
    ]
    if "mlp" in only:
        res = {}
        for label, lib, tree in rows:
            res[label] = mlp_step(lib, a.short, a.long, a.warmup, tree)
            print(f"  mlp  {label}: {res[label] / 1e6:.2f} M instructions/step", flush=True)
        floor = res.get(LABELS["numpy-floor"])
        torch = res.get(LABELS["torch"])
        tab = H.table(
            ["library", "M instructions/step", "vs NumPy floor", "vs PyTorch"],
            [[k, f"{v / 1e6:.2f}", H.ratio(v, floor), H.ratio(v, torch)] for k, v in res.items()],
        )
        sections += [
            "### MLP training step (bench_mlp.py)",
            "",
            f"Instructions per step = (count of a {a.long}-step run - count of a {a.short}-step "
            f"run) / {a.long - a.short}.",
            "",
            tab,
            "",
        ]
        print(tab)
    if "chain" in only:
        cres = {}
        for label, lib, tree in rows:
            cres[label] = chain_node(lib, n1, n2, tree)
            f, b = cres[label]
            print(f"  chain {label}: forward {f:,.0f}, backward {b:,.0f} per op", flush=True)
        tf, tb = cres.get(LABELS["torch"], (None, None))
        tab = H.table(
            [
                "library",
                "forward instructions/op",
                "backward instructions/op",
                "fwd+bwd",
                "forward vs PyTorch",
                "backward vs PyTorch",
            ],
            [
                [
                    k,
                    f"{f:,.0f}",
                    f"{b:,.0f}",
                    f"{f + b:,.0f}",
                    H.ratio(f, tf),
                    H.ratio(b, tb),
                ]
                for k, (f, b) in cres.items()
            ],
        )
        sections += [
            "### Chain of small ops (bench_chain.py): per op",
            "",
            f"Counted only inside the forward (building the chain, not freeing it) or inside "
            f"the backward; per op = (count at N={n2:,} - count at N={n1:,}) / {n2 - n1:,}.",
            "",
            tab,
            "",
        ]
        print(tab)
    if "small" in only:
        sres = {}
        for label, lib, tree in rows:
            sres[label] = small_call(lib, c1, c2, tree)
            print(f"  small {label}: {sres[label]:,.0f} per call", flush=True)
        torch = sres.get(LABELS["torch"])
        floor = sres.get(LABELS["numpy-floor"])
        tab = H.table(
            ["library", "instructions/call", "vs NumPy floor", "vs PyTorch"],
            [[k, f"{v:,.0f}", H.ratio(v, floor), H.ratio(v, torch)] for k, v in sres.items()],
        )
        sections += [
            "### Small MLP input gradient (bench_small.py): per call",
            "",
            f"Counted only inside the calls; per call = (count of {c2} calls - count of {c1} "
            f"calls) / {c2 - c1}.",
            "",
            tab,
            "",
        ]
        print(tab)
    Path(a.out).write_text("\n".join(sections), encoding="utf-8")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
