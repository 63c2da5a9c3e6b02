"""Data-parallel training: the same model trained in one process, then on 2 Ray actors.

Each rank trains on its half of every batch; ``agd.DataParallel`` averages the gradients
across the ranks during the backward, so the replicas stay identical and end where one process
training on the whole batches ends (the script checks both, and prints the difference).

    python examples/data_parallel.py                  # one process
    python examples/data_parallel.py --ray            # and 2 Ray actors (pip install ".[ray]")
    python examples/data_parallel.py --ray --gloo     # gloo's all-reduce (needs torch too)
"""

from __future__ import annotations

import argparse
import os
import time

import asyncgrad as ag
import asyncgrad.distributed as agd
from asyncgrad import nn

STEPS = 30
BATCH = 64
LR = 0.05


def make_model() -> nn.Module:
    ag.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 32, dtype=ag.float64), nn.Tanh(), nn.Linear(32, 1, dtype=ag.float64)
    )


def batches() -> list[tuple[ag.Tensor, ag.Tensor]]:
    """A regression task: y = sin(sum of x)."""
    g = ag.Generator().manual_seed(1)
    out = []
    for _ in range(STEPS):
        x = ag.randn(BATCH, 8, generator=g, dtype=ag.float64)
        out.append((x, x.sum(1, keepdim=True).sin()))
    return out


def train_one_process() -> tuple[list[ag.Tensor], float]:
    model = make_model()
    opt = ag.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for x, y in batches():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return [p.detach() for p in model.parameters()], loss.item()


class Rank:
    """One rank: a Ray actor with its replica, trained on its share of each batch."""

    def __init__(self, group: agd.Group, rank: int) -> None:
        self.rank = rank
        self.model = agd.DataParallel(make_model(), group.join(rank))
        self.opt = ag.optim.SGD(self.model.parameters(), lr=LR, momentum=0.9)

    async def train(self) -> tuple[list[ag.Tensor], float]:
        half = BATCH // 2
        rows = slice(self.rank * half, (self.rank + 1) * half)
        for x, y in batches():
            self.opt.zero_grad()
            loss = ((self.model(x[rows]) - y[rows]) ** 2).mean()
            await ag.backward(loss)  # returns once the gradients are averaged across ranks
            self.opt.step()
        return [p.detach() for p in self.model.module.parameters()], loss.item()


def train_on_ray(backend: str) -> list[tuple[list[ag.Tensor], float]]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster needs no token
    import ray

    agd.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        group = agd.new_group(2, backend=backend)
        ranks = [ray.remote(num_cpus=1)(Rank).remote(group, r) for r in range(2)]
        return ray.get([r.train.remote() for r in ranks], timeout=300)
    finally:
        ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ray", action="store_true", help="also train on 2 Ray actors")
    ap.add_argument("--gloo", action="store_true", help="with gloo's all-reduce")
    a = ap.parse_args()
    t = time.perf_counter()
    weights, loss = train_one_process()
    print(f"one process: {STEPS} steps of {BATCH} rows, last loss {loss:.6f}, "
          f"{time.perf_counter() - t:.2f} s")  # fmt: skip
    if not a.ray:
        return
    t = time.perf_counter()
    out = train_on_ray("gloo" if a.gloo else "object_store")
    print(f"2 Ray actors: last losses {out[0][1]:.6f} and {out[1][1]:.6f} (each its own half), "
          f"{time.perf_counter() - t:.2f} s with the cluster's start")  # fmt: skip
    same = all(ag.equal(a, b) for a, b in zip(out[0][0], out[1][0], strict=True))
    diff = max(float((a - b).abs().max()) for a, b in zip(out[0][0], weights, strict=True))
    print(f"replicas identical: {same}; largest difference from one process: {diff:.1e}")
    if not same or diff > 1e-12:
        raise SystemExit("data-parallel training did not match one process")


if __name__ == "__main__":
    main()
