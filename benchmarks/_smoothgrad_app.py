"""A FastAPI app serving SmoothGrad saliency maps, for benchmarks/server_smoothgrad.py.

    python benchmarks/_smoothgrad_app.py --lib asyncgrad|torch-inline|torch-thread --port P

POST /saliency {"x": [64 floats], "seed": int} answers {"saliency": [64 floats], "classes":
[...]}: the input gradient of the predicted class's score, averaged over SAMPLES noisy copies
of x (Gaussian noise, SIGMA times the range of x), all copies in one batch through one forward
and one backward. The model is an MLP 64-1024-1024-1024-10 (ReLU, float32) whose weights
require grad, as nn.Linear parameters do.

  - asyncgrad: the noisy batch and the forward with ``await ag.run(forward, x, seed)`` (on the
    engine's compute threads), then ``await ag.grad(score, [xb])``;
  - asyncgrad-coalesced: ``await coalescer.vjp(xb, grad_output=predicted)`` with an
    ``ag.serving.Coalescer(model)`` (its defaults: batches of up to 256 rows, each forward
    on the loop or off it by its measured time): the noisy
    batches of the requests waiting at once go through one forward and one backward (the
    predicted class of each row picked from its own logits);
  - torch-inline: forward and ``torch.autograd.grad`` in the handler, blocking the loop;
  - torch-thread: the whole computation in ``await asyncio.to_thread(...)``.

For benchmarks/server_ig.py the same endpoint answers integrated gradients instead (the
``saliency`` field holds the attributions of class ``seed % 10``, from a zero baseline in
IG_STEPS Gauss-Legendre steps):

  - asyncgrad-ig: ``await explain.integrated_gradients(x, target, n_steps=50)`` through an
    ``ag.attribution.Explainer(model)`` at its defaults (the steps of the requests waiting at
    once share batched passes);
  - captum-ig: Captum's ``IntegratedGradients(model).attribute(x, target=..., n_steps=50)``
    in ``await asyncio.to_thread(...)``.

A ticker task sleeps 1 ms at a time and records how late it wakes, and how many requests the
server began (entered their handler) since its previous wake-up; GET /lag answers the lag
statistics since the last POST /lag/reset (with the number of requests begun during the longest
stall), the cyclic garbage collector's longest pause and full collections over the same time
(timed through ``gc.callbacks``), and for asyncgrad the engine's own longest stall of the loop
(``ag.autograd.engine.stats()``). GET /health answers at once (the client probes it beside the
load). No gc.collect() and no
gc.freeze(), unless ``--gc-freeze`` says so: then the app calls ``gc.collect(); gc.freeze()``
once at start-up, after the model is built (the remedy the server example documents).
``--compute-threads N`` sets asyncgrad's compute threads (default: one per core).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H

SIZES = (64, 1024, 1024, 1024, 10)
SAMPLES = 32
SIGMA = 0.15
TICK = 0.001
# asyncgrad-coalesced: the most rows (noisy copies) in one batch.
COALESCED_ROWS = 256
# Integrated gradients (benchmarks/server_ig.py): steps along the path from a zero baseline.
IG_STEPS = 50
LIBS = (
    "asyncgrad", "asyncgrad-coalesced", "torch-inline", "torch-thread", "asyncgrad-ig",
    "captum-ig",
)  # fmt: skip


class SaliencyRequest(BaseModel):
    x: list[float]
    seed: int


def weights() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for fan_in, fan_out in pairwise(SIZES):
        bound = 1.0 / np.sqrt(fan_in)
        out.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        out.append(rng.uniform(-bound, bound, (fan_out,)).astype(np.float32))
    return out


def noisy(x: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = SIGMA * float(x.max() - x.min())
    noise = rng.standard_normal((SAMPLES, x.shape[0]), dtype=np.float32)
    return x[None, :] + np.float32(scale) * noise


def one_hot(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cls = logits.argmax(axis=1)
    mask = np.zeros_like(logits)
    mask[np.arange(len(cls)), cls] = 1.0
    return mask, cls


def make_saliency(lib: str, compute_threads: int | None = None, defaults: bool = False) -> Any:
    """An ``async def saliency(x, seed) -> (saliency, classes)`` for the library."""
    w = weights()
    if lib.endswith("-ig"):
        return make_ig(lib, w, defaults)
    if lib.startswith("asyncgrad"):
        import asyncgrad as ag
        import asyncgrad.nn.functional as F

        if compute_threads is not None:
            ag.autograd.engine.configure(compute_threads=compute_threads)

        p = [ag.nn.Parameter(a) for a in w]

        def model(x: Any) -> Any:
            for i in range(0, len(p) - 2, 2):
                x = F.relu(F.linear(x, p[i], p[i + 1]))
            return F.linear(x, p[-2], p[-1])

        def forward(x: np.ndarray, seed: int) -> tuple[Any, Any]:
            xb = ag.tensor(noisy(x, seed), requires_grad=True)
            return xb, model(xb)

        async def saliency(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
            # The noise, like the forward, is array work: off the loop with it.
            xb, logits = await ag.run(forward, x, seed)
            mask, cls = one_hot(logits.detach().numpy())
            (g,) = await ag.grad((logits * ag.tensor(mask)).sum(), [xb])
            return g.numpy().mean(axis=0), cls

        if lib == "asyncgrad":
            return saliency

        def predicted(logits: Any) -> Any:
            return ag.tensor(one_hot(logits.numpy())[0])

        # Batches in flight at once: the default, one per compute thread.
        # Its defaults: the forwards' place chosen by their time (NOTE [Forwards off the loop]).
        coalescer = ag.serving.Coalescer(model, max_batch=COALESCED_ROWS)

        def noisy_rows(x: np.ndarray, seed: int) -> Any:
            return ag.tensor(noisy(x, seed))

        async def coalesced(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
            # The noise is array work: off the loop, as in the first server.
            rows = await ag.run(noisy_rows, x, seed)
            logits, g = await coalescer.vjp(rows, grad_output=predicted)
            return g.numpy().mean(axis=0), logits.numpy().argmax(axis=1)

        return coalesced

    import torch
    import torch.nn.functional as F

    if not defaults:  # the benchmarks' single-threaded PyTorch; --defaults keeps its own
        H.pin_torch_threads()
    p = [torch.nn.Parameter(torch.from_numpy(a)) for a in w]

    def compute(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        with torch.enable_grad():  # grad mode is thread-local in PyTorch
            xb = torch.from_numpy(noisy(x, seed)).requires_grad_(True)
            h = xb
            for i in range(0, len(p) - 2, 2):
                h = F.relu(F.linear(h, p[i], p[i + 1]))
            logits = F.linear(h, p[-2], p[-1])
            mask, cls = one_hot(logits.detach().numpy())
            (g,) = torch.autograd.grad((logits * torch.from_numpy(mask)).sum(), [xb])
            return g.numpy().mean(axis=0), cls

    if lib == "torch-inline":

        async def saliency(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
            return compute(x, seed)

        return saliency

    async def saliency_thread(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return await asyncio.to_thread(compute, x, seed)

    return saliency_thread


def make_ig(lib: str, w: list[np.ndarray], defaults: bool) -> Any:
    """An ``async def attribute(x, seed) -> (attributions, [target])``: the integrated
    gradients of class ``seed % 10`` from a zero baseline, IG_STEPS Gauss-Legendre steps."""
    if lib == "asyncgrad-ig":
        import asyncgrad as ag
        import asyncgrad.nn.functional as F

        p = [ag.nn.Parameter(a) for a in w]

        def model(x: Any) -> Any:
            for i in range(0, len(p) - 2, 2):
                x = F.relu(F.linear(x, p[i], p[i + 1]))
            return F.linear(x, p[-2], p[-1])

        # Library defaults: the steps of the requests waiting at once share batched passes.
        explain = ag.attribution.Explainer(model)

        async def attribute(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
            t = seed % SIZES[-1]
            a = await explain.integrated_gradients(ag.tensor(x[None]), t, n_steps=IG_STEPS)
            return a.numpy()[0], np.asarray([t])

        attribute.coalescer = explain.coalescer  # type: ignore[attr-defined]  # GET /lag
        return attribute

    import torch
    import torch.nn.functional as TF
    from captum.attr import IntegratedGradients

    if not defaults:
        H.pin_torch_threads()
    tp = [torch.nn.Parameter(torch.from_numpy(a)) for a in w]

    def torch_model(x: Any) -> Any:
        for i in range(0, len(tp) - 2, 2):
            x = TF.relu(TF.linear(x, tp[i], tp[i + 1]))
        return TF.linear(x, tp[-2], tp[-1])

    ig = IntegratedGradients(torch_model)

    def compute(x: np.ndarray, t: int) -> np.ndarray:
        a = ig.attribute(torch.from_numpy(x[None]), target=t, n_steps=IG_STEPS)
        return a.detach().numpy()[0]

    async def attribute_thread(x: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        t = seed % SIZES[-1]
        return await asyncio.to_thread(compute, x, t), np.asarray([t])

    return attribute_thread


class Ticker:
    def __init__(self) -> None:
        self.lags: list[float] = []
        self.begun: list[int] = []  # requests begun during each tick
        self.requests = 0  # requests begun since the last tick
        self.task: asyncio.Task | None = None

    async def run(self) -> None:
        clock = time.perf_counter
        while True:
            t = clock()
            await asyncio.sleep(TICK)
            self.lags.append(clock() - t - TICK)
            self.begun.append(self.requests)
            self.requests = 0

    def reset(self) -> None:
        self.lags.clear()
        self.begun.clear()
        self.requests = 0

    def stats(self) -> dict[str, Any]:
        lags = np.asarray(self.lags) * 1e3
        if len(lags) == 0:
            return {"ticks": 0}
        return {
            "ticks": len(lags),
            "p50_ms": float(np.percentile(lags, 50)),
            "p99_ms": float(np.percentile(lags, 99)),
            "max_ms": float(lags.max()),
            "begun_at_max": self.begun[int(lags.argmax())],
        }


class GcWatch:
    """The collector's pauses: the longest, and how many full (generation 2) collections."""

    def __init__(self) -> None:
        self.started = 0.0
        self.reset()
        gc.callbacks.append(self.on_gc)

    def reset(self) -> None:
        self.longest = 0.0
        self.full = 0

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        self.longest = max(self.longest, time.perf_counter() - self.started)
        if info["generation"] == 2:
            self.full += 1

    def stats(self) -> dict[str, Any]:
        return {"gc_max_ms": self.longest * 1e3, "gc_full": self.full}


def make_app(
    lib: str, freeze: bool = False, compute_threads: int | None = None, defaults: bool = False
) -> Any:
    from fastapi import FastAPI

    saliency = make_saliency(lib, compute_threads, defaults)
    # The coalescer's counters when the stats were last reset (servers that coalesce).
    coalescer = getattr(saliency, "coalescer", None)
    counted = {"batches": 0, "rows": 0}
    ticker = Ticker()
    engine = None
    if lib.startswith("asyncgrad"):
        import asyncgrad as ag

        engine = ag.autograd.engine
    gcw = GcWatch()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        if freeze:  # start-up is over: what is alive now lives as long as the process
            gc.collect()
            gc.freeze()
        ticker.task = asyncio.create_task(ticker.run())
        yield
        ticker.task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.post("/saliency")
    async def post_saliency(req: SaliencyRequest) -> dict[str, Any]:
        ticker.requests += 1
        x = np.asarray(req.x, dtype=np.float32)
        if x.shape != (SIZES[0],):
            from fastapi import HTTPException

            raise HTTPException(422, f"x must hold {SIZES[0]} numbers")
        sal, cls = await saliency(x, req.seed)
        return {"saliency": sal.tolist(), "classes": cls.tolist()}

    @app.get("/health")
    async def get_health() -> dict[str, Any]:
        return {"ok": True}

    @app.get("/lag")
    async def get_lag() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        out = {"lib": lib, "loop": type(loop).__module__, **ticker.stats(), **gcw.stats()}
        if engine is not None:
            out["engine_stall_ms"] = engine.stats()["longest_stall_s"] * 1e3
        if coalescer is not None:  # rows a batched pass held on average since the reset
            st = coalescer.stats()
            batches = st["batches"] - counted["batches"]
            out["rows_per_pass"] = (st["rows"] - counted["rows"]) / batches if batches else None
        return out

    @app.post("/lag/reset")
    async def reset_lag() -> dict[str, Any]:
        ticker.reset()
        gcw.reset()
        if engine is not None:
            engine.reset_stats()
        if coalescer is not None:
            counted.update({k: coalescer.stats()[k] for k in counted})
        return {"ok": True}

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", choices=LIBS, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--loop", default="auto", choices=("auto", "asyncio", "uvloop"))
    ap.add_argument("--gc-freeze", action="store_true", help="gc.collect(); gc.freeze() at start")
    ap.add_argument("--compute-threads", type=int, help="asyncgrad's compute threads")
    ap.add_argument(
        "--defaults", action="store_true", help="PyTorch's own intra-op threads (no pinning)"
    )
    a = ap.parse_args()
    import uvicorn

    uvicorn.run(
        make_app(a.lib, a.gc_freeze, a.compute_threads, a.defaults),
        host="127.0.0.1",
        port=a.port,
        loop=a.loop,
        log_level="warning",
        access_log=False,
        # Keep idle connections open: under load a request can otherwise meet a connection the
        # server is closing after the default 5 s keep-alive.
        timeout_keep_alive=300,
    )


if __name__ == "__main__":
    main()
