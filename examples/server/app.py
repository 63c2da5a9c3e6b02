"""A FastAPI server around a digits classifier: saliency maps, online learning, engine metrics.

    python -m uvicorn app:app --app-dir examples/server [--port 8000]
    python examples/server/app.py [--port 8000] [--weights PATH]

Endpoints (see README.md next to this file):
    GET  /             a page to draw a digit on and see the prediction and its saliency map
    POST /saliency     d score / d pixels as JSON, or as a PNG heat map with ?format=png
    POST /attribution  integrated gradients, input x gradient or saliency of a class, as JSON
                       (ag.attribution: concurrent requests share batched passes)
    POST /adapt        one online SGD step from a labelled image
    GET  /weights      the current weights as an .npz file (version in X-Weights-Version)
    GET  /stats        the engine's metrics for the server's event loop, as JSON
    GET  /metrics      the same metrics in Prometheus' text format

Settings come from the environment, so that ``uvicorn app:app`` needs no arguments:
    ASYNCGRAD_SERVER_WEIGHTS   .npz file: loaded at start-up if it exists, else the model is
                               trained (seconds) and saved there; unset: trained, not saved
    ASYNCGRAD_SERVER_DEVICE    auto (default: cuda when available, else cpu), cpu or cuda
    ASYNCGRAD_SERVER_LR        /adapt's default learning rate (default 0.05)
    ASYNCGRAD_SERVER_MAX_RUNNING  most gradient computations at once (default 0: no limit)
    ASYNCGRAD_SERVER_COALESCE  1 (default): concurrent saliency requests run as one batched
                               pass (ag.serving.Coalescer); 0: one pass per request
    ASYNCGRAD_SERVER_MAX_BODY  the largest request body accepted, in bytes (default 65536);
                               a larger one gets 413 before it is read in full
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import io
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

# No thread settings here: the engine runs BLAS one thread per call once its compute threads
# start (NOTE [BLAS threads of the compute threads] in asyncgrad/backend/blas.py).
import digits
import numpy as np
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from PIL import Image
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

import asyncgrad as ag
from asyncgrad.engine.prometheus import EngineCollector

T = TypeVar("T")
log = logging.getLogger("asyncgrad.server")

STATIC: Final = Path(__file__).resolve().parent / "static"
MAX_SAMPLES: Final = 65536
MAX_STEPS: Final = 512
# The most rows one coalesced saliency pass holds (a request with more SmoothGrad samples runs
# by itself, in chunks): a pass over them takes well under a millisecond on one core.
MAX_BATCH: Final = 256
# The largest request body read (bytes): a saliency or adapt request is about 1.5 KB of JSON.
# Without a bound an 84 MB body was parsed in full (the server's memory 152 -> 886 MB) while
# the loop parsed it and every other request waited.
MAX_BODY: Final = 64 * 1024
PNG_SCALE: Final = 24  # each of the 8x8 saliency cells becomes 24x24 pixels in the PNG


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    weights: Path | None = None
    device: str = "auto"
    lr: float = 0.05
    max_running: int = 0
    coalesce: bool = True
    max_body: int = MAX_BODY

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        path = env.get("ASYNCGRAD_SERVER_WEIGHTS")
        return cls(
            weights=Path(path) if path else None,
            device=env.get("ASYNCGRAD_SERVER_DEVICE", "auto"),
            lr=float(env.get("ASYNCGRAD_SERVER_LR", "0.05")),
            max_running=int(env.get("ASYNCGRAD_SERVER_MAX_RUNNING", "0")),
            coalesce=_flag(env.get("ASYNCGRAD_SERVER_COALESCE", "1"), "ASYNCGRAD_SERVER_COALESCE"),
            max_body=int(env.get("ASYNCGRAD_SERVER_MAX_BODY", str(MAX_BODY))),
        )

    def resolve_device(self) -> str:
        if self.device == "auto":
            return "cuda" if ag.cuda.is_available() else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"ASYNCGRAD_SERVER_DEVICE must be auto, cpu or cuda: {self.device!r}")
        return self.device


def _flag(value: str, name: str) -> bool:
    if value not in ("0", "1"):
        raise ValueError(f"{name} must be 0 or 1: {value!r}")
    return value == "1"


# ----------------------------------------------------------------------------- requests

# Pixels as in the digits data scaled to [0, 1]: 0 is background, 1 full ink.
Pixel = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Row = Annotated[list[Pixel], Field(min_length=digits.SIDE, max_length=digits.SIDE)]
Image8x8 = Annotated[list[Row], Field(min_length=digits.SIDE, max_length=digits.SIDE)]
Digit = Annotated[int, Field(ge=0, le=digits.CLASSES - 1)]


class SaliencyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    image: Image8x8 = Field(description="8 rows of 8 pixels in [0, 1]")
    target: Digit | None = Field(None, description="the class to explain (default: predicted)")
    samples: int = Field(
        1, ge=1, le=MAX_SAMPLES, description="1: plain gradient; more: SmoothGrad over noisy copies"
    )
    noise: float = Field(
        0.1, ge=0.0, le=1.0, allow_inf_nan=False, description="SmoothGrad's noise std deviation"
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="SmoothGrad's noise seed")


class AttributionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    image: Image8x8 = Field(description="8 rows of 8 pixels in [0, 1]")
    target: Digit | None = Field(None, description="the class to explain (default: predicted)")
    method: Literal["integrated_gradients", "input_x_gradient", "saliency"] = Field(
        "integrated_gradients", description="Captum's method of the same name"
    )
    steps: int = Field(
        50, ge=2, le=MAX_STEPS, description="integrated gradients' steps (Gauss-Legendre)"
    )


class AdaptRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    image: Image8x8 = Field(description="8 rows of 8 pixels in [0, 1]")
    label: Digit = Field(description="the digit the image shows")
    lr: float | None = Field(
        None, gt=0.0, le=1.0, allow_inf_nan=False, description="default: the server's"
    )


# ----------------------------------------------------------------------------- state


@dataclass(frozen=True)
class Snapshot:
    """One version of the weights. Published snapshots are never modified: a request that
    started with one (its backward pass still holds its weights) is never disturbed by an
    update, which publishes a new snapshot instead."""

    version: int
    model: ag.nn.Sequential
    # Its saliency requests made at once run as one forward and one backward over their
    # stacked rows (NOTE [Coalesced gradients]); None: one pass per request.
    coalescer: ag.serving.Coalescer | None
    # Its attribution requests (NOTE [Attributions that coalesce]): they share batched passes.
    explainer: ag.attribution.Explainer
    # What the weights were at publication: each parameter's array, version and checksum.
    published: tuple[tuple[int, int, float], ...]

    @classmethod
    def of(cls, version: int, model: ag.nn.Sequential, coalesce: bool) -> Snapshot:
        coalescer = ag.serving.Coalescer(model, max_batch=MAX_BATCH) if coalesce else None
        explainer = ag.attribution.Explainer(model)
        return cls(version, model, coalescer, explainer, _weights_record(model))

    def intact(self) -> bool:
        """Whether the weights are still exactly what was published (every response says so:
        a wrong answer then tells a changed snapshot from wrong rows returned)."""
        return _weights_record(self.model) == self.published


def _weights_record(model: ag.nn.Module) -> tuple[tuple[int, int, float], ...]:
    return tuple(
        (id(p.array), p._version, float(digits.to_numpy(p.detach()).astype(np.float64).sum()))
        for p in model.parameters()
    )


@dataclass
class Server:
    settings: Settings
    device: str
    current: Snapshot
    # The weights /adapt updates in place, under ``lock``; each update publishes a copy.
    master: ag.nn.Sequential
    optimizer: ag.optim.SGD
    accuracy: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    commits: set[asyncio.Task[Snapshot]] = field(default_factory=set)
    # Requests whose work a disconnecting client cancelled, at any point (its forward on a
    # compute thread included, before any graph task exists for the engine to count).
    disconnected: int = 0


async def start(settings: Settings) -> Server:
    device = settings.resolve_device()
    path = settings.weights
    if path is not None and path.exists():
        model = digits.load(path, device)
        accuracy = digits.accuracy(model, *digits.load_data()[1::2])
        log.info("loaded weights from %s (test accuracy %.1f%%)", path, accuracy * 100)
    else:
        trained = await digits.train(device)
        model, accuracy = trained.model, trained.accuracy
        log.info("trained in %.1f s (test accuracy %.1f%%)", trained.seconds, accuracy * 100)
        if path is not None:
            digits.save(model, path)
    server = Server(
        settings=settings,
        device=device,
        current=Snapshot.of(0, digits.copy_model(model, device), settings.coalesce),
        master=model,
        optimizer=ag.optim.SGD(model.parameters(), lr=settings.lr),
        accuracy=accuracy,
    )
    # The rest wait in the engine, in priority order, and count as waiting in /stats.
    ag.configure(max_running=settings.max_running or None)
    # NOTE [Freeze the start-up heap]
    # A full collection walks every tracked object; with a large heap that takes long enough
    # to stall the loop, and the many small objects of a large backward pass make full
    # collections frequent. Everything allocated so far (modules, the model, the data) lives
    # as long as the process: gc.freeze() moves it out of the collector's sight.
    gc.collect()
    gc.freeze()
    ag.autograd.engine.reset_stats()  # count what serving does, not the training
    return server


async def stop(server: Server) -> None:
    # Updates already committed to finish on their own, their clients gone; wait for them.
    if server.commits:
        await asyncio.wait(server.commits)


# ----------------------------------------------------------------------------- the work


async def saliency(server: Server, req: SaliencyRequest) -> dict[str, Any]:
    snap = server.current
    image = np.asarray(req.image, dtype=np.float32)
    args = (snap.model, image, req.target, req.samples, req.noise, req.seed)
    if snap.coalescer is not None and req.samples <= MAX_BATCH:
        # The request's rows (the image, or its noisy copies) join those of the requests made
        # meanwhile; each gets the gradient of its own rows back.
        rows = await ag.run(digits.saliency_rows, *args)
        grad = await snap.coalescer.grad(rows.rows, grad_output=rows.grad_output)
        grad = grad.sum(dim=0)
        logits, target = rows.logits, rows.target
    else:
        # The forward pass runs on one of the engine's threads; the loop keeps serving.
        graph = await ag.run(digits.saliency_forward, *args)
        (grad,) = await ag.grad(graph.score, [graph.image])
        logits, target = graph.logits.detach(), graph.target
    probabilities = digits.to_numpy(ag.nn.functional.softmax(logits, dim=1))[0]
    return {
        "prediction": int(probabilities.argmax()),
        "target": target,
        "probabilities": probabilities.tolist(),
        "saliency": digits.to_numpy(grad).reshape(digits.SIDE, digits.SIDE).tolist(),
        "samples": req.samples,
        "version": snap.version,
        "snapshot_intact": snap.intact(),
    }


async def attribution(server: Server, req: AttributionRequest) -> dict[str, Any]:
    snap = server.current
    device = next(snap.model.parameters()).device
    x = ag.tensor(np.asarray(req.image, dtype=np.float32).reshape(1, -1), device=device)
    explain = snap.explainer
    # The prediction from a forward shared with the other requests made meanwhile.
    logits = await explain.coalescer.forward(x)
    probabilities = digits.to_numpy(ag.nn.functional.softmax(logits, dim=1))[0]
    target = int(probabilities.argmax()) if req.target is None else req.target
    delta = None
    if req.method == "integrated_gradients":
        attr, d = await explain.integrated_gradients(
            x, target, n_steps=req.steps, return_convergence_delta=True
        )
        delta = float(digits.to_numpy(d)[0])
    elif req.method == "input_x_gradient":
        attr = await explain.input_x_gradient(x, target)
    else:
        attr = await explain.saliency(x, target, abs=False)
    return {
        "method": req.method,
        "prediction": int(probabilities.argmax()),
        "target": target,
        "attribution": digits.to_numpy(attr).reshape(digits.SIDE, digits.SIDE).tolist(),
        "convergence_delta": delta,
        "version": snap.version,
        "snapshot_intact": snap.intact(),
    }


async def adapt(server: Server, req: AdaptRequest) -> dict[str, Any]:
    snap = server.current
    image = np.asarray(req.image, dtype=np.float32)
    graph = await ag.run(digits.step_forward, snap.model, image, req.label)
    # Each request gets its own gradients from ag.grad; none goes through the shared .grad.
    grads = await ag.grad(graph.loss, graph.params)
    lr = server.settings.lr if req.lr is None else req.lr
    # NOTE [Committed updates]
    # Up to here a cancelled request (its client gone) changes nothing. From here on the update
    # is committed: it runs in a task of its own, which the request awaits through a shield, so
    # a cancellation cannot interrupt it halfway, nor release the lock while it still runs.
    commit = asyncio.ensure_future(_commit(server, grads, lr))
    server.commits.add(commit)
    commit.add_done_callback(server.commits.discard)
    new = await asyncio.shield(commit)
    return {
        "loss": graph.loss.item(),
        "lr": lr,
        "base_version": snap.version,  # the weights the gradient was computed with
        "version": new.version,  # the weights this step produced
    }


async def _commit(server: Server, grads: tuple[Any, ...], lr: float) -> Snapshot:
    async with server.lock:

        def update() -> ag.nn.Sequential:
            digits.apply_step(server.master, server.optimizer, grads, lr)
            return digits.copy_model(server.master, server.device)

        model = await ag.run(update)
        version = server.current.version + 1
        server.current = Snapshot.of(version, model, server.settings.coalesce)
        return server.current


async def cancel_on_disconnect(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` until it finishes or the client disconnects, whichever comes first.

    Starlette does not cancel a handler whose client went away, so a gradient nobody will
    read would be computed to the end. Here the work runs in a task, and a second task waits
    for the server's ``http.disconnect`` message (the body has been read by then, so the next
    message can only be that one); a disconnect cancels the work, and with it its graph task.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, watcher):
            t.cancel()
        # Let the cancelled work unwind (its graph task ends as cancelled) before going on.
        await asyncio.gather(task, watcher, return_exceptions=True)
    if not task.cancelled():
        return task.result()
    request.app.state.server.disconnected += 1
    # 499 as nginx logs it; the client is gone and never sees it.
    raise HTTPException(499, "client closed the request")


async def _disconnected(receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _unparsable(cause: BaseException) -> str:
    """Why a request body could not be parsed as JSON, in a line that does not echo it."""
    if isinstance(cause, RecursionError):
        return "cannot be parsed as JSON: it is nested too deeply"
    if isinstance(cause, UnicodeDecodeError):
        return "cannot be parsed as JSON: it is not valid UTF-8"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "cannot be parsed as JSON: a number has too many digits"
    return f"cannot be parsed as JSON ({type(cause).__name__})"


# ----------------------------------------------------------------------------- PNG


def heat_map(grad: np.ndarray, scale: int = PNG_SCALE) -> bytes:
    """A PNG of an 8x8 gradient: red where a pixel raises the score, blue where it lowers it,
    white where it does not matter; the largest magnitude is full colour."""
    peak = float(np.abs(grad).max())
    g = grad / peak if peak > 0 else np.zeros_like(grad)
    fade = (1.0 - np.abs(g)) * 255.0
    rgb = np.stack(
        [
            np.where(g > 0, 255.0, fade),  # red channel: full on the positive side
            fade,
            np.where(g < 0, 255.0, fade),  # blue channel: full on the negative side
        ],
        axis=-1,
    ).astype(np.uint8)
    big = np.kron(rgb, np.ones((scale, scale, 1), dtype=np.uint8))
    out = io.BytesIO()
    Image.fromarray(big, mode="RGB").save(out, format="PNG")
    return out.getvalue()


# ----------------------------------------------------------------------------- loop lag


class LagMonitor:
    """How late the server's loop runs a timer: a task sleeps TICK_S at a time and records
    how much later than that it wakes. It sees every stall, whoever causes it (a large body
    parsed, a full garbage collection, a handler that blocks), where the engine's own
    ``longest_stall_s`` counts only the stalls its nodes cause. Cheap: one wake-up per
    TICK_S. ``/stats`` reports the p99 over the last WINDOW ticks and the largest since
    start; ``/metrics`` a histogram of every tick's lag."""

    TICK_S: Final = 0.005
    WINDOW: Final = 2000  # ticks: the last 10 s or more

    def __init__(self, registry: CollectorRegistry) -> None:
        self.lags: collections.deque[float] = collections.deque(maxlen=self.WINDOW)
        self.max_s = 0.0
        self.histogram = Histogram(
            "asyncgrad_server_loop_lag_seconds",
            "How much later than asked the server's event loop ran a timer",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
            registry=registry,
        )
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="lag-monitor")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        clock = time.perf_counter
        while True:
            t = clock()
            await asyncio.sleep(self.TICK_S)
            lag = max(0.0, clock() - t - self.TICK_S)
            self.lags.append(lag)
            self.max_s = max(self.max_s, lag)
            self.histogram.observe(lag)

    def stats(self) -> dict[str, float]:
        lags = sorted(self.lags)
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else 0.0
        return {"ticks": len(lags), "lag_p99_ms": p99 * 1e3, "lag_max_ms": self.max_s * 1e3}


# ----------------------------------------------------------------------------- the app


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        server = await start(settings)
        app.state.server = server
        # A registry of its own (not prometheus_client's global one), so that two apps in one
        # process each export their own loop's metrics.
        app.state.registry = CollectorRegistry()
        app.state.registry.register(EngineCollector(asyncio.get_running_loop()))
        app.state.lag = LagMonitor(app.state.registry)
        app.state.lag.start()
        try:
            yield
        finally:
            await app.state.lag.stop()
            await stop(server)

    def _message(error: dict[str, Any]) -> str:
        if error.get("type") == "json_invalid":  # its loc is (body, offset): say so
            reason = error.get("ctx", {}).get("error", "")
            return f"invalid JSON at character {error['loc'][-1]}: {reason}".rstrip(": ")
        return str(error.get("msg", ""))

    # FastAPI counts the body's bytes as they arrive and answers 413 past the bound, without
    # reading the rest (a declared Content-Length over it is refused at once).
    app = FastAPI(
        title="asyncgrad digits server", lifespan=lifespan, max_body_size=settings.max_body
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's 422 body, plus one readable line per problem, without echoing the input.
        errors = [
            {"loc": list(e.get("loc", ())), "msg": _message(e), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        message = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
        return JSONResponse({"detail": errors, "message": message}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # A body FastAPI could not parse (nested too deeply, a number of thousands of digits,
        # bytes that are not UTF-8) is invalid input like any other: 422 with a message.
        if exc.status_code == 400 and exc.__cause__ is not None:
            reason = _unparsable(exc.__cause__)
            errors = [{"loc": ["body"], "msg": reason, "type": "json_invalid"}]
            return JSONResponse({"detail": errors, "message": f"body: {reason}"}, 422)
        detail = exc.detail
        return JSONResponse(
            {"detail": detail, "message": str(detail)}, exc.status_code, headers=exc.headers
        )

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.post("/saliency", response_model=None)
    async def post_saliency(
        request: Request,
        body: SaliencyRequest,
        format: Annotated[Literal["json", "png"], Query()] = "json",
    ) -> dict[str, Any] | Response:
        """The gradient of a class score with respect to the image's pixels."""
        server: Server = request.app.state.server
        result = await cancel_on_disconnect(request, saliency(server, body))
        if format == "json":
            return result
        png = await ag.run(heat_map, np.asarray(result["saliency"]))
        headers = {
            "X-Prediction": str(result["prediction"]),
            "X-Target": str(result["target"]),
            "X-Weights-Version": str(result["version"]),
        }
        return Response(png, media_type="image/png", headers=headers)

    @app.post("/attribution")
    async def post_attribution(request: Request, body: AttributionRequest) -> dict[str, Any]:
        """Integrated gradients (with the convergence delta), input x gradient or saliency of
        a class score with respect to the image's pixels."""
        server: Server = request.app.state.server
        return await cancel_on_disconnect(request, attribution(server, body))

    @app.post("/adapt")
    async def post_adapt(request: Request, body: AdaptRequest) -> dict[str, Any]:
        """One SGD step on a labelled image; concurrent steps are applied one at a time."""
        server: Server = request.app.state.server
        return await cancel_on_disconnect(request, adapt(server, body))

    @app.get("/weights")
    async def get_weights(request: Request) -> Response:
        """The current weights as an .npz file of the state_dict's arrays."""
        snap: Snapshot = request.app.state.server.current
        out = io.BytesIO()
        np.savez(out, **digits.weights(snap.model))
        headers = {"X-Weights-Version": str(snap.version)}
        return Response(out.getvalue(), media_type="application/octet-stream", headers=headers)

    @app.get("/stats")
    async def get_stats(request: Request) -> dict[str, Any]:
        """Engine metrics of the server's event loop, and what the model is."""
        server: Server = request.app.state.server
        snap = server.current
        return {
            "engine": ag.autograd.engine.stats(),
            # Every stall of the loop, the engine's and any other's (See LagMonitor).
            "loop": request.app.state.lag.stats(),
            "requests": {"cancelled_by_disconnect": server.disconnected},
            "model": {
                "device": server.device,
                "version": server.current.version,
                "test_accuracy": server.accuracy,
                "lr": server.settings.lr,
            },
            # The current version's coalescer (None: ASYNCGRAD_SERVER_COALESCE=0).
            "coalescer": None if snap.coalescer is None else snap.coalescer.stats(),
            # See NOTE [Freeze the start-up heap]
            "gc": {"frozen_objects": gc.get_freeze_count(), "collections": gc.get_stats()},
            # What the engine did to BLAS's threads when its compute threads started.
            "blas": ag.autograd.engine.blas(),
        }

    @app.get("/metrics")
    async def get_metrics(request: Request) -> Response:
        """Prometheus' text format."""
        # Collected here, on the loop's thread: See NOTE [Scraping from another thread].
        text = generate_latest(request.app.state.registry)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    return app


app = create_app()


def main() -> None:
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--weights", type=Path, help="the .npz to load, or to train and save")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--lr", type=float, default=0.05, help="/adapt's default learning rate")
    parser.add_argument("--no-coalesce", action="store_true", help="one pass per saliency request")
    args = parser.parse_args()
    settings = Settings(
        weights=args.weights, device=args.device, lr=args.lr, coalesce=not args.no_coalesce
    )
    uvicorn.run(create_app(settings), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
