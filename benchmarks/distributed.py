"""Data-parallel training on one machine: asyncgrad.distributed against PyTorch's DDP.

Two models, float32, a global batch of 256 rows split over 2 ranks, SGD with momentum, MSE
loss: an MLP 32-64-64-1 (6,337 parameters) and an MLP 512-1024-768-10 (1,32 M parameters).
Ways, each in a fresh process:

  - asyncgrad, one process, the whole batch;
  - asyncgrad, 2 Ray actors, ``DataParallel`` with its default buckets (1 MB, then 25 MB),
    ``await ag.backward`` in an async actor method; the group either ``agd.new_group(2)`` (the
    rendezvous is a third actor, tensors pass through Ray's object store) or
    ``agd.new_group(2, backend="gloo")`` (gloo's all-reduce through ``ray.util.collective``);
  - asyncgrad, 2 threads of one process (``agd.local_group``, the in-process group the tests
    use): not a way to train, shown for what the GIL does to it;
  - PyTorch, one process, and PyTorch DDP over gloo with 2 processes on 127.0.0.1.

Per rank, the median step (zero_grad, forward, backward with the averaging, optimizer step),
the same step under ``no_sync`` (no communication: the compute alone), and one all-reduce
alone of as many floats as the model has parameters. "Exposed" is step minus compute: what
the communication adds once it overlaps the backward; "overlap" is 1 - exposed / all-reduce.
Also the round trip of one call to an async Ray actor, and of a one-float all-reduce.

One machine with 2 cores cannot show scaling across hosts; RESULTS.md gives the model of how
each figure would scale.

Usage: python benchmarks/distributed.py [--rounds R] [--quick]
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

WAYS = [
    "asyncgrad-single",
    "asyncgrad-ray",
    "asyncgrad-raygloo",
    "asyncgrad-threads",
    "torch-single",
    "torch-ddp",
]
LABELS = {
    "asyncgrad-single": "asyncgrad, 1 process",
    "asyncgrad-ray": "asyncgrad, 2 Ray actors, object store",
    "asyncgrad-raygloo": "asyncgrad, 2 Ray actors, gloo",
    "asyncgrad-threads": "asyncgrad, 2 threads (local_group)",
    "torch-single": "PyTorch, 1 process",
    "torch-ddp": "PyTorch DDP, gloo, 2 processes",
}
SPLIT_WAYS = ["asyncgrad-split", "asyncgrad-split-local", "torch-rpc-split"]
SPLIT_LABELS = {
    "asyncgrad-split": "asyncgrad, 2 RemoteModules",
    "asyncgrad-split-local": "asyncgrad, both stages local",
    "torch-rpc-split": "PyTorch rpc + dist_autograd",
}
MODELS = {"small": [32, 64, 64, 1], "large": [512, 1024, 768, 10]}
BATCH = 256
WORLD = 2
STEPS = {"small": 60, "large": 20}
WARMUP = 5


def _median(xs: list[float]) -> float:
    return H.median(xs) if xs else float("nan")


# --------------------------------------------------------------------------------- asyncgrad
def _ag_model(sizes: list[int]) -> Any:
    import asyncgrad as ag
    from asyncgrad import nn

    ag.manual_seed(0)
    layers: list[Any] = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _ag_data(sizes: list[int], rows: int, rank: int) -> tuple[Any, Any]:
    import asyncgrad as ag

    g = ag.Generator().manual_seed(1 + rank)
    return ag.randn(rows, sizes[0], generator=g), ag.randn(rows, sizes[-1], generator=g)


async def _ag_rank(model: Any, pg: Any, x: Any, y: Any, steps: int) -> dict[str, float]:
    """Time one rank's steps, synced and not, and an all-reduce alone."""
    import asyncgrad as ag

    opt = ag.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    clock = time.perf_counter

    async def step() -> float:
        t = clock()
        opt.zero_grad()
        await ag.backward(((model(x) - y) ** 2).mean())
        opt.step()
        return clock() - t

    out: dict[str, float] = {}
    times = [await step() for _ in range(WARMUP + steps)][WARMUP:]
    out["step_ms"] = _median(times) * 1e3
    if pg is not None:
        with model.no_sync():
            times = [await step() for _ in range(WARMUP + steps)][WARMUP:]
        out["compute_ms"] = _median(times) * 1e3
        n = sum(p.numel() for p in model.parameters())
        flat = ag.ones(n)
        times = []
        for i in range(WARMUP + steps):
            t = clock()
            await pg.start(("bench", i), flat, "mean")
            times.append(clock() - t)
        out["allreduce_ms"] = _median(times[WARMUP:]) * 1e3
        one = ag.ones(1)
        times = []
        for i in range(WARMUP + 100):
            t = clock()
            await pg.start(("one", i), one, "sum")
            times.append(clock() - t)
        out["one_float_us"] = _median(times[WARMUP:]) * 1e6
    return out


class _RayRank:
    def __init__(self, group: Any, rank: int, sizes: list[int]) -> None:
        import asyncgrad.distributed as agd

        self.pg = group.join(rank)
        self.model = agd.DataParallel(_ag_model(sizes), self.pg)
        self.x, self.y = _ag_data(sizes, BATCH // WORLD, rank)

    async def run(self, steps: int) -> dict[str, float]:
        return await _ag_rank(self.model, self.pg, self.x, self.y, steps)

    async def noop(self) -> None:
        return None


def _asyncgrad_ray(sizes: list[int], steps: int, backend: str = "object_store") -> dict[str, Any]:
    import asyncio
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    import asyncgrad.distributed as agd

    agd.init(num_cpus=WORLD, include_dashboard=False, log_to_driver=False)
    try:
        env = {"env_vars": H.THREAD_ENV}
        actor = ray.remote(num_cpus=1, runtime_env=env)(_RayRank)
        group = agd.new_group(WORLD, backend=backend)
        ranks = [actor.remote(group, r, sizes) for r in range(WORLD)]
        per_rank = ray.get([a.run.remote(steps) for a in ranks], timeout=600)

        async def round_trips() -> float:
            for _ in range(20):
                await ranks[0].noop.remote()
            times = []
            for _ in range(300):
                t = time.perf_counter()
                await ranks[0].noop.remote()
                times.append(time.perf_counter() - t)
            return _median(times) * 1e6

        rtt = asyncio.run(round_trips())
    finally:
        ray.shutdown()
    return {**_worst(per_rank), "actor_rtt_us": rtt}


def _asyncgrad_threads(sizes: list[int], steps: int) -> dict[str, Any]:
    import asyncio
    import threading

    import asyncgrad.distributed as agd

    group = agd.local_group(WORLD)
    models = [agd.DataParallel(_ag_model(sizes), group.join(r), broadcast_parameters=False)
              for r in range(WORLD)]  # fmt: skip
    per_rank: list[dict[str, float]] = [{} for _ in range(WORLD)]

    def main(r: int) -> None:
        x, y = _ag_data(sizes, BATCH // WORLD, r)
        per_rank[r] = asyncio.run(_ag_rank(models[r], models[r].process_group, x, y, steps))

    threads = [threading.Thread(target=main, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return _worst(per_rank)


def _asyncgrad_single(sizes: list[int], steps: int) -> dict[str, Any]:
    import asyncio

    x, y = _ag_data(sizes, BATCH, 0)
    return asyncio.run(_ag_rank(_ag_model(sizes), None, x, y, steps))


def _worst(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """The slowest rank's figures: a data-parallel step is as slow as its slowest rank."""
    return {k: max(r[k] for r in per_rank) for k in per_rank[0]}


# --------------------------------------------------------------------------------- PyTorch
def _torch_model(sizes: list[int]) -> Any:
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for a, b in itertools.pairwise(sizes):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _torch_rank(model: Any, x: Any, y: Any, steps: int, ddp: bool) -> dict[str, float]:
    import contextlib

    import torch
    import torch.distributed as dist

    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    clock = time.perf_counter

    def step() -> float:
        t = clock()
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        return clock() - t

    out = {"step_ms": _median([step() for _ in range(WARMUP + steps)][WARMUP:]) * 1e3}
    if ddp:
        with model.no_sync() if ddp else contextlib.nullcontext():
            out["compute_ms"] = _median([step() for _ in range(WARMUP + steps)][WARMUP:]) * 1e3
        n = sum(p.numel() for p in model.parameters())
        flat, one = torch.ones(n), torch.ones(1)
        times = []
        for _ in range(WARMUP + steps):
            t = clock()
            dist.all_reduce(flat)
            flat.div_(WORLD)
            times.append(clock() - t)
        out["allreduce_ms"] = _median(times[WARMUP:]) * 1e3
        times = []
        for _ in range(WARMUP + 100):
            t = clock()
            dist.all_reduce(one)
            times.append(clock() - t)
        out["one_float_us"] = _median(times[WARMUP:]) * 1e6
    return out


def _torch_ddp_main(rank: int, sizes: list[int], steps: int, port: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        model = torch.nn.parallel.DistributedDataParallel(_torch_model(sizes))
        g = torch.Generator().manual_seed(1 + rank)
        x = torch.randn(BATCH // WORLD, sizes[0], generator=g)
        y = torch.randn(BATCH // WORLD, sizes[-1], generator=g)
        queue.put(_torch_rank(model, x, y, steps, ddp=True))
    finally:
        dist.destroy_process_group()


def _spawn_torch(target: Any, processes: int, results: int, *args: Any) -> list[Any]:
    """``target(rank, *args, port, queue)`` in ``processes`` fresh processes meeting on a free
    port of 127.0.0.1; the first ``results`` things they put on the queue."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, *args, port, queue)) for r in range(processes)]
    for p in procs:
        p.start()
    out = [queue.get(timeout=600) for _ in range(results)]
    for p in procs:
        p.join(timeout=60)
    return out


def _torch_ddp(sizes: list[int], steps: int) -> dict[str, Any]:
    return _worst(_spawn_torch(_torch_ddp_main, WORLD, WORLD, sizes, steps))


def _torch_single(sizes: list[int], steps: int) -> dict[str, Any]:
    import torch

    H.pin_torch_threads()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(BATCH, sizes[0], generator=g), torch.randn(BATCH, sizes[-1], generator=g)
    return _torch_rank(_torch_model(sizes), x, y, steps, ddp=False)


# --------------------------------------------------------------------------------- split model
def _halves(sizes: list[int]) -> tuple[list[int], list[int]]:
    cut = len(sizes) // 2
    return sizes[: cut + 1], sizes[cut:]


def _ag_stage(sizes: list[int]) -> Any:
    return _ag_model(sizes)


def _asyncgrad_split(sizes: list[int], steps: int, remote: bool = True) -> dict[str, Any]:
    """The model cut in two, each half a RemoteModule (or both local): forward and backward
    of the batch, with the input's gradient."""
    import asyncio
    import functools
    import os

    import asyncgrad as ag

    first, second = _halves(sizes)
    x, y = _ag_data(sizes, BATCH, 0)
    x.requires_grad_(True)
    ray: Any = None
    if remote:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        import ray

        import asyncgrad.distributed as agd

        agd.init(num_cpus=WORLD, include_dashboard=False, log_to_driver=False)
        opts = {"num_cpus": 1, "runtime_env": {"env_vars": H.THREAD_ENV}}
        a = agd.RemoteModule(functools.partial(_ag_stage, first), actor_options=opts)
        b = agd.RemoteModule(functools.partial(_ag_stage, second), actor_options=opts)
    else:
        la, lb = _ag_stage(first), _ag_stage(second)

        async def call_a(t: Any) -> Any:
            return la(t)

        async def call_b(t: Any) -> Any:
            return lb(t)

        a, b = call_a, call_b

    async def main() -> list[float]:
        times = []
        for _ in range(WARMUP + steps):
            t = time.perf_counter()
            x.grad = None
            loss = ((await b(await a(x)) - y) ** 2).mean()
            await ag.backward(loss)
            times.append(time.perf_counter() - t)
        return times[WARMUP:]

    try:
        times = asyncio.run(main())
    finally:
        if ray is not None:
            ray.shutdown()
    return {"split_ms": _median(times) * 1e3}


def _torch_split_worker(rank: int, sizes: list[int], steps: int, port: int, queue: Any) -> None:
    import os

    import torch
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=3, rpc_backend_options=opts)
    try:
        if rank == 0:
            first, second = _halves(sizes)
            a = rpc.remote("w1", _torch_model, args=(first,))
            b = rpc.remote("w2", _torch_model, args=(second,))
            g = torch.Generator().manual_seed(1)
            x = torch.randn(BATCH, sizes[0], generator=g, requires_grad=True)
            y = torch.randn(BATCH, sizes[-1], generator=g)
            times = []
            for _ in range(WARMUP + steps):
                t = time.perf_counter()
                with dist_autograd.context() as ctx:
                    h = a.rpc_sync().forward(x)
                    loss = ((b.rpc_sync().forward(h) - y) ** 2).mean()
                    dist_autograd.backward(ctx, [loss])
                    dist_autograd.get_gradients(ctx)[x]
                times.append(time.perf_counter() - t)
            queue.put({"split_ms": _median(times[WARMUP:]) * 1e3})
    finally:
        rpc.shutdown()


def _torch_rpc_split(sizes: list[int], steps: int) -> dict[str, Any]:
    (out,) = _spawn_torch(_torch_split_worker, 3, 1, sizes, steps)
    result: dict[str, Any] = out
    return result


RUNNERS = {
    "asyncgrad-split": _asyncgrad_split,
    "asyncgrad-split-local": lambda sizes, steps: _asyncgrad_split(sizes, steps, remote=False),
    "torch-rpc-split": _torch_rpc_split,
    "asyncgrad-single": _asyncgrad_single,
    "asyncgrad-ray": _asyncgrad_ray,
    "asyncgrad-raygloo": lambda sizes, steps: _asyncgrad_ray(sizes, steps, "gloo"),
    "asyncgrad-threads": _asyncgrad_threads,
    "torch-single": _torch_single,
    "torch-ddp": _torch_ddp,
}


def worker_main(name: str, argv: list[str]) -> None:
    way, _, model = name.partition("/")
    if way not in RUNNERS or model not in MODELS:
        raise SystemExit(f"unknown worker {name!r}")
    steps = STEPS[model] // (4 if "--quick" in argv else 1)
    H.emit({"name": name, **RUNNERS[way](MODELS[model], steps)})


ROUNDS = 3


def _params(sizes: list[int]) -> int:
    return sum(a * b + b for a, b in itertools.pairwise(sizes))


def run(rounds: int = ROUNDS, quick: bool = False) -> H.Report:
    import importlib.util

    cmd = "python benchmarks/distributed.py" + (" --quick" if quick else "")
    print(f"distributed: {WORLD} ranks, global batch {BATCH}, {rounds} rounds")
    ways = [w for w in WAYS if H.missing_reason(w) is None]
    if importlib.util.find_spec("ray") is None:
        ways = [w for w in ways if "ray" not in w]
        print("distributed: ray is not installed, its rows are left out", file=sys.stderr)
    elif importlib.util.find_spec("torch") is None:
        ways.remove("asyncgrad-raygloo")  # ray.util.collective's gloo is torch's
    split = [w for w in SPLIT_WAYS if H.missing_reason(w) is None]
    if importlib.util.find_spec("ray") is None:
        split.remove("asyncgrad-split")
    ways += split
    names = [f"{w}/{m}" for m in MODELS for w in ways]
    results = H.interleaved_rounds(
        Path(__file__), names, rounds, lambda n, r: ["--quick"] * quick, timeout=900
    )
    rep = H.Report(title="Data-parallel training on one machine (distributed.py)", command=cmd)
    head = ["model", "way", "step ms", "vs PyTorch same way", "compute ms", "all-reduce ms",
            "exposed ms", "overlap", "one-float all-reduce µs"]  # fmt: skip
    rows = []
    for m, sizes in MODELS.items():
        for w in ways:
            rs = results.get(f"{w}/{m}")
            if not rs or w in SPLIT_WAYS:
                continue

            def med(k: str, rs: list[dict[str, Any]] = rs) -> float | None:
                vals = [r[k] for r in rs if k in r]
                return H.median(vals) if vals else None

            peer = "torch-single" if w == "asyncgrad-single" else "torch-ddp"
            vs = ""
            if w.startswith("asyncgrad") and f"{peer}/{m}" in results:
                base = [r["step_ms"] for r in results[f"{peer}/{m}"]]
                vs = H.fmt_ratio(H.paired_ratio([r["step_ms"] for r in rs], base))
            step, comp, ar = med("step_ms"), med("compute_ms"), med("allreduce_ms")
            exposed = None if comp is None or step is None else step - comp
            overlap = "" if exposed is None or not ar else f"{max(0.0, 1 - exposed / ar):.0%}"
            one = med("one_float_us")
            rows.append([f"{m} ({_params(sizes):,} params)", LABELS[w], H.fmt(step),
                         vs, H.fmt(comp), H.fmt(ar), H.fmt(exposed), overlap,
                         "" if one is None else f"{one:.0f}"])  # fmt: skip
    rep.sections.append(H.table(head, rows))
    rep.sections.append(_split_table(results, split))
    rtt = [r["actor_rtt_us"] for n, rs in results.items() for r in rs if "actor_rtt_us" in r]
    if rtt:
        rep.sections.append(
            "One call to an async Ray actor, awaited from the driver: median "
            f"{H.median(rtt):.0f} µs."
        )
    rep.sections.append(
        "\"vs PyTorch same way\": asyncgrad's step time over PyTorch's (1 process against 1 "
        "process, data-parallel against DDP); below 1.0 is faster. " + H.THREADS_NOTE
    )
    rep.sections.append(SCALING)
    print(rep.text(), flush=True)
    return rep


SCALING = (
    "How these figures would scale across hosts (one machine cannot show it): a data-parallel "
    "step is compute (per rank, falling as 1/ranks for a fixed global batch) plus what the "
    "all-reduce adds beyond the overlap. Through the object store every bucket goes to the "
    "rendezvous actor and back, so its host moves 2 x ranks x the gradient bytes per step, "
    "plus about one actor round trip per bucket (0.9 ms here, more across a network): it grows "
    "with ranks. gloo's all-reduce moves about 2 x (ranks - 1) / ranks x the gradient bytes "
    "per rank per step over the network, plus a latency per bucket: nearly flat in ranks. A "
    "split model pays per step two round trips per remote stage plus its activations' and "
    "gradients' bytes each way. Serve adds one proxy hop per request."
)


def _split_table(results: dict[str, list[dict[str, Any]]], ways: list[str]) -> str:
    head = ["model", "way", "forward + backward ms", "vs PyTorch RPC",
            "added per remote stage ms"]  # fmt: skip
    rows = []
    for m, sizes in MODELS.items():
        local = results.get(f"asyncgrad-split-local/{m}")
        for w in ways:
            rs = results.get(f"{w}/{m}")
            if not rs:
                continue
            ms = H.median([r["split_ms"] for r in rs])
            vs = ""
            if w == "asyncgrad-split" and f"torch-rpc-split/{m}" in results:
                base = [r["split_ms"] for r in results[f"torch-rpc-split/{m}"]]
                vs = H.fmt_ratio(H.paired_ratio([r["split_ms"] for r in rs], base))
            added = ""
            if local and w != "asyncgrad-split-local":
                added = f"{(ms - H.median([r['split_ms'] for r in local])) / 2:.2f}"
            rows.append([f"{m} ({_params(sizes):,} params)", SPLIT_LABELS[w], H.fmt(ms), vs,
                         added])  # fmt: skip
    return (
        "The model cut in two stages, each on its own process (asyncgrad: a RemoteModule per "
        "stage; PyTorch: rpc.remote modules, dist_autograd.backward in a context), driven from "
        "a third; the whole batch, forward and backward with the input's gradient, no "
        'optimizer step. "added per remote stage" is the time over the same two stages run '
        "locally, halved.\n\n" + H.table(head, rows)
    )


def main() -> None:
    H.bench_main(__doc__, ROUNDS, run, worker_main)


if __name__ == "__main__":
    main()
