"""examples/server over real HTTP: saliency maps against gradients computed here, concurrent
online SGD steps against a replay, invalid requests, cancellation by a disconnecting client,
and the metrics endpoints. The server itself comes from conftest.py (one per module)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
import pytest_asyncio

from .conftest import SERVER_DIR, Server

httpx = pytest.importorskip("httpx")
sklearn_datasets = pytest.importorskip("sklearn.datasets")
PIL_Image = pytest.importorskip("PIL.Image")
prometheus_parser = pytest.importorskip("prometheus_client.parser")

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S: Final = 60.0  # the bound on each test's HTTP traffic as a whole
SALIENCY_REQUESTS: Final = 200
ADAPT_REQUESTS: Final = 20
SLOW_SAMPLES: Final = 65536  # noisy copies (the most a request may ask): a long backward pass
POLL_S: Final = 0.01
# Tries at a disconnect that lands while its pass runs. The pass is a few large nodes on compute
# threads, and a cancellation takes effect between nodes, so a disconnect that lands during the
# last one cannot stop it: about half the passes end first, in streaks (17 in a row on a quiet
# 2-core VM with the compiled engine, 25 in a row once on a loaded one). A try that misses costs
# one pass and a few polls (~0.1 s), so many tries stay well within TIMEOUT_S.
DISCONNECT_TRIES: Final = 100
Weights = dict[str, np.ndarray]


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    images, labels = sklearn_datasets.load_digits(return_X_y=True)
    return (images / 16.0).astype(np.float32), labels.astype(np.int64)


@pytest_asyncio.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=SALIENCY_REQUESTS + ADAPT_REQUESTS)
    async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT_S, limits=limits) as c:
        yield c


async def fetch_weights(client: httpx.AsyncClient) -> tuple[int, Weights]:
    return weights_of(await client.get("/weights"))


def weights_of(res: httpx.Response) -> tuple[int, Weights]:
    res.raise_for_status()
    with np.load(io.BytesIO(res.content)) as arrays:
        weights = {name: arrays[name].astype(np.float64) for name in arrays.files}
    return int(res.headers["x-weights-version"]), weights


async def engine_stats(client: httpx.AsyncClient) -> dict[str, Any]:
    res = await client.get("/stats")
    res.raise_for_status()
    stats: dict[str, Any] = res.json()["engine"]
    return stats


async def poll_stats(
    client: httpx.AsyncClient, until: Callable[[dict[str, int]], bool]
) -> dict[str, int]:
    """The server's graph task counts, once ``until`` holds for them; the caller's timeout
    bounds the wait (a remote process: nothing to await but its answers)."""
    while True:
        tasks: dict[str, int] = (await engine_stats(client))["graph_tasks"]
        if until(tasks):
            return tasks
        await asyncio.sleep(POLL_S)


# ----------------------------------------------------------------------------- the oracle
# The model is Linear(64, 128) -> ReLU -> Linear(128, 10); its gradients in closed form.


def hidden(w: Weights, x: np.ndarray) -> np.ndarray:
    return np.asarray(w["0.weight"] @ x + w["0.bias"])


def logits(w: Weights, x: np.ndarray) -> np.ndarray:
    return np.asarray(w["2.weight"] @ np.maximum(hidden(w, x), 0.0) + w["2.bias"])


def score_grad(w: Weights, x: np.ndarray, target: int) -> np.ndarray:
    """d logits[target] / d x."""
    return np.asarray(w["0.weight"].T @ ((hidden(w, x) > 0) * w["2.weight"][target]))


def smooth_grad(
    w: Weights, x: np.ndarray, target: int, samples: int, noise: float, seed: int
) -> np.ndarray:
    # The server's noise: NumPy's generator seeded with the request's seed, float32.
    jitter = np.random.default_rng(seed).normal(0.0, noise, size=(samples, x.size))
    jitter = jitter.astype(np.float32).astype(np.float64)
    return np.mean([score_grad(w, x + j, target) for j in jitter], axis=0)


def loss_and_grads(w: Weights, x: np.ndarray, label: int) -> tuple[float, Weights]:
    """Cross-entropy of one example and its gradient for each weight."""
    h = hidden(w, x)
    a = np.maximum(h, 0.0)
    z = logits(w, x)
    p = np.exp(z - z.max())
    p /= p.sum()
    dz = p.copy()
    dz[label] -= 1.0
    dh = (w["2.weight"].T @ dz) * (h > 0)
    grads = {"0.weight": np.outer(dh, x), "0.bias": dh, "2.weight": np.outer(dz, a), "2.bias": dz}
    return float(-np.log(p[label])), grads


def replay(start: Weights, steps: list[tuple[dict[str, Any], np.ndarray, int]]) -> list[Weights]:
    """The weights after each step, applied in the order of the versions the server reported,
    each with the gradient of its own example at the weights it reported it started from."""
    history = [start]
    for res, x, label in sorted(steps, key=lambda s: s[0]["version"]):
        assert res["version"] == len(history), "a version was skipped or given twice"
        base = history[res["base_version"]]
        loss, grads = loss_and_grads(base, x, label)
        assert res["loss"] == pytest.approx(loss, rel=1e-4, abs=1e-6)
        history.append({k: history[-1][k] - res["lr"] * grads[k] for k in start})
    return history


def assert_weights_close(actual: Weights, expected: Weights) -> None:
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- tests


@pytest_asyncio.fixture
async def uncoalesced_client(uncoalesced_server: Server) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=SALIENCY_REQUESTS + ADAPT_REQUESTS)
    async with httpx.AsyncClient(
        base_url=uncoalesced_server.url, timeout=TIMEOUT_S, limits=limits
    ) as c:
        yield c


async def test_saliency_matches_gradients_under_concurrent_adapts(
    client: httpx.AsyncClient, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    """The server as started by default: concurrent saliency requests are coalesced."""
    await check_saliency_under_concurrent_adapts(client, digits)
    # With no adapts, every request is of one version, so of one coalescer, which serves
    # them all (in batches where they overlap: with a model this small, HTTP takes most of a
    # request's time, and the requests rarely meet).
    images = digits[0]
    async with asyncio.timeout(TIMEOUT_S):
        before = (await client.get("/stats")).json()
        bodies = [{"image": images[k].reshape(8, 8).tolist()} for k in range(SALIENCY_REQUESTS)]
        answers = await asyncio.gather(*(client.post("/saliency", json=b) for b in bodies))
        after = (await client.get("/stats")).json()
    assert all(a.status_code == 200 for a in answers)
    assert after["model"]["version"] == before["model"]["version"]
    served = after["coalescer"]["requests"] - before["coalescer"]["requests"]
    batches = after["coalescer"]["batches"] - before["coalescer"]["batches"]
    assert served == SALIENCY_REQUESTS
    assert 1 <= batches <= served, after["coalescer"]


async def test_saliency_matches_gradients_one_pass_per_request(
    uncoalesced_client: httpx.AsyncClient, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    """With ASYNCGRAD_SERVER_COALESCE=0: each saliency request its own forward and backward."""
    await check_saliency_under_concurrent_adapts(uncoalesced_client, digits)
    assert (await uncoalesced_client.get("/stats")).json()["coalescer"] is None


async def test_attributions_match_the_models_gradients(
    client: httpx.AsyncClient, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    """POST /attribution (ag.attribution.Explainer): 42 concurrent requests of the three
    methods, each against its closed form computed here from the weights: integrated gradients
    by the Gauss-Legendre rule over the model's gradients (with the convergence delta), input
    x gradient, and the signed gradient."""
    images, labels = digits
    methods = ("integrated_gradients", "input_x_gradient", "saliency")
    bodies: list[dict[str, Any]] = []
    for k in range(42):
        body: dict[str, Any] = {"image": images[k].reshape(8, 8).tolist(), "method": methods[k % 3]}
        if k % 4 == 1:
            body["target"] = int(labels[k] + 1) % 10
        if k % 6 == 3:
            body["steps"] = 16
        bodies.append(body)
    async with asyncio.timeout(TIMEOUT_S):
        version, w = await fetch_weights(client)
        answers = await asyncio.gather(*(client.post("/attribution", json=b) for b in bodies))
    zero = logits(w, np.zeros(64))
    for body, res in zip(bodies, answers, strict=True):
        assert res.status_code == 200, res.text
        out = res.json()
        assert out["version"] == version
        assert out["snapshot_intact"]
        x = np.asarray(body["image"], dtype=np.float64).reshape(64)
        z = logits(w, x)
        assert out["prediction"] == int(z.argmax())
        t = body.get("target", out["prediction"])
        assert out["target"] == t
        got = np.asarray(out["attribution"]).reshape(64)
        if body["method"] == "integrated_gradients":
            nodes, weights = np.polynomial.legendre.leggauss(body.get("steps", 50))
            path = sum(
                0.5 * wk * score_grad(w, 0.5 * (1 + a) * x, t)
                for a, wk in zip(nodes, weights, strict=True)
            )
            expected = x * path
            delta = expected.sum() - (z[t] - zero[t])
            assert out["convergence_delta"] == pytest.approx(delta, abs=1e-4)
        elif body["method"] == "input_x_gradient":
            expected = x * score_grad(w, x, t)
            assert out["convergence_delta"] is None
        else:
            expected = score_grad(w, x, t)
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5, err_msg=body["method"])


async def check_saliency_under_concurrent_adapts(
    client: httpx.AsyncClient, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    images, labels = digits
    async with asyncio.timeout(TIMEOUT_S):
        v0, w0 = await fetch_weights(client)

        async def saliency(k: int) -> tuple[dict[str, Any], dict[str, Any]]:
            body: dict[str, Any] = {"image": images[k].reshape(8, 8).tolist()}
            if k % 3 == 1:
                body["target"] = int(labels[k] + 1) % 10  # explain another class than the best
            if k % 10 == 2:
                body.update(samples=8, noise=0.2, seed=k)  # SmoothGrad
            res = await client.post("/saliency", json=body)
            assert res.status_code == 200, res.text
            return body, res.json()

        async def adapt(k: int) -> tuple[dict[str, Any], np.ndarray, int]:
            k += SALIENCY_REQUESTS  # other images than the saliency requests'
            body = {"image": images[k].reshape(8, 8).tolist(), "label": int(labels[k])}
            res = await client.post("/adapt", json=body)
            assert res.status_code == 200, res.text
            return res.json(), images[k].astype(np.float64), int(labels[k])

        saliencies = [saliency(k) for k in range(SALIENCY_REQUESTS)]
        adapts = [adapt(k) for k in range(ADAPT_REQUESTS)]
        results = await asyncio.gather(*saliencies, *adapts)
        v1, w1 = await fetch_weights(client)

    # Every step was applied once, in some order, with the gradient of its own request.
    steps = [(res, x, label) for res, x, label in results[SALIENCY_REQUESTS:]]
    for res, _, _ in steps:
        assert v0 <= res["base_version"] < res["version"] <= v0 + ADAPT_REQUESTS
        res["version"] -= v0  # numbered from this test's start for replay()
        res["base_version"] -= v0
    history = replay(w0, steps)
    assert v1 == v0 + ADAPT_REQUESTS
    assert_weights_close(w1, history[-1])

    # Each saliency map is the gradient for the weights of the version it reports.
    versions = set()
    for body, out in results[:SALIENCY_REQUESTS]:
        # The server checks its snapshot at every response: a wrong map below with an intact
        # snapshot means the wrong rows were returned, not that the weights changed.
        assert out["snapshot_intact"], f"the weights of version {out['version']} changed"
        w = history[out["version"] - v0]
        versions.add(out["version"])
        x = np.asarray(body["image"], dtype=np.float64).reshape(64)
        z = logits(w, x)
        assert out["prediction"] == int(z.argmax())
        assert out["target"] == body.get("target", out["prediction"])
        p = np.exp(z - z.max())
        np.testing.assert_allclose(out["probabilities"], p / p.sum(), rtol=1e-4, atol=1e-6)
        if "samples" in body:
            expected = smooth_grad(
                w, x, out["target"], body["samples"], body["noise"], body["seed"]
            )
        else:
            expected = score_grad(w, x, out["target"])
        np.testing.assert_allclose(
            np.asarray(out["saliency"]).reshape(64),
            expected,
            rtol=1e-3,
            atol=1e-5,
            err_msg=f"the snapshot of version {out['version']} was intact: wrong rows returned",
        )


async def test_saliency_png(
    client: httpx.AsyncClient, digits: tuple[np.ndarray, np.ndarray]
) -> None:
    images, _ = digits
    body = {"image": images[7].reshape(8, 8).tolist()}
    async with asyncio.timeout(TIMEOUT_S):
        as_json = (await client.post("/saliency", json=body)).json()
        res = await client.post("/saliency", params={"format": "png"}, json=body)
    assert res.status_code == 200, res.text
    assert res.headers["content-type"] == "image/png"
    assert int(res.headers["x-prediction"]) == as_json["prediction"]
    with PIL_Image.open(io.BytesIO(res.content)) as png:
        assert png.format == "PNG"
        assert png.size == (192, 192)
        rgb = np.asarray(png.convert("RGB"))
    # The cell of the largest gradient is full red (positive) or full blue (negative).
    grad = np.asarray(as_json["saliency"])
    r, c = np.unravel_index(np.abs(grad).argmax(), grad.shape)
    cell = rgb[24 * r + 12, 24 * c + 12]
    assert tuple(cell) == ((255, 0, 0) if grad[r, c] > 0 else (0, 0, 255))


IMAGE: Final = [[0.5] * 8 for _ in range(8)]


@pytest.mark.parametrize(
    ("path", "content", "loc", "kind"),
    [
        ("/saliency", b'{"image": [[0.5', ["body", 15], "json_invalid"),
        ("/saliency", b"[1, 2]", ["body"], "model_attributes_type"),
        ("/saliency", {"image": IMAGE[:7]}, ["body", "image"], "too_short"),
        ("/saliency", {"image": [*IMAGE[:7], [0.5] * 9]}, ["body", "image", 7], "too_long"),
        ("/saliency", {"image": [[1.5] * 8] * 8}, ["body", "image", 0, 0], "less_than_equal"),
        ("/saliency", {"image": [["0.5"] * 8] * 8}, ["body", "image", 0, 0], "float_type"),
        ("/saliency", b'{"image": [[NaN, 0, 0, 0, 0, 0, 0, 0]]}', None, "finite_number"),
        ("/saliency", {"image": IMAGE, "target": 10}, ["body", "target"], "less_than_equal"),
        ("/saliency", {"image": IMAGE, "samples": 0}, ["body", "samples"], "greater_than_equal"),
        ("/saliency", {"image": IMAGE, "samples": 10**6}, ["body", "samples"], "less_than_equal"),
        ("/saliency", {"image": IMAGE, "colour": "red"}, ["body", "colour"], "extra_forbidden"),
        ("/saliency?format=gif", {"image": IMAGE}, ["query", "format"], "literal_error"),
        ("/adapt", {"image": IMAGE}, ["body", "label"], "missing"),
        ("/adapt", {"image": IMAGE, "label": True}, ["body", "label"], "int_type"),
        ("/adapt", {"image": IMAGE, "label": 3, "lr": 0}, ["body", "lr"], "greater_than"),
        # NaN is a number JSON parsers accept; a NaN noise or rate is refused as such.
        ("/saliency", b'{"image": IMAGE, "noise": NaN}', ["body", "noise"], "finite_number"),
        ("/adapt", b'{"image": IMAGE, "label": 1, "lr": NaN}', ["body", "lr"], "finite_number"),
        # Bodies the JSON parser gives up on: each its own reason, as invalid input.
        ("/saliency", b'{"image": ' + b"[" * 30000 + b"]" * 30000 + b"}", ["body"], "json_invalid"),
        ("/saliency", b'{"image": IMAGE, "seed": ' + b"9" * 5000 + b"}", ["body"], "json_invalid"),
        ("/saliency", b'{"image": "\xff\xfe"}', ["body"], "json_invalid"),
    ],
)
def test_invalid_requests_get_a_422_and_change_nothing(
    server: Server, path: str, content: Any, loc: list[Any] | None, kind: str
) -> None:
    raw = content if isinstance(content, bytes) else json.dumps(content).encode()
    raw = raw.replace(b"IMAGE", json.dumps(IMAGE).encode())
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
        version, before = weights_of(client.get("/weights"))
        stats = client.get("/stats").json()["engine"]
        res = client.post(path, content=raw, headers=headers)
        assert res.status_code == 422, res.text
        out = res.json()
        assert kind in {e["type"] for e in out["detail"]}, out
        error = next(e for e in out["detail"] if e["type"] == kind)
        if loc is not None:
            assert error["loc"] == loc
        assert error["msg"]
        where = ".".join(map(str, error["loc"]))
        assert f"{where}: {error['msg']}" in out["message"]
        # Nothing ran, nothing changed, and the next valid request is served.
        assert client.get("/stats").json()["engine"]["graph_tasks"] == stats["graph_tasks"]
        version_after, after = weights_of(client.get("/weights"))
        assert version_after == version
        for name, value in before.items():
            np.testing.assert_array_equal(after[name], value)
        ok = client.post("/saliency", json={"image": IMAGE})
        assert ok.status_code == 200, ok.text


async def test_client_disconnect_cancels_its_graph_task(server: Server) -> None:
    body = json.dumps({"image": IMAGE, "samples": SLOW_SAMPLES}).encode()
    host, port = server.url.removeprefix("http://").split(":")
    request = (
        f"POST /saliency HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    async with (
        asyncio.timeout(TIMEOUT_S),
        httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT_S) as client,
    ):
        # The disconnect must reach the server while the backward pass (~0.1 s) still runs;
        # on a loaded machine it may arrive only after the pass ended, and then the request
        # is tried again. Every try ends one graph task, cancelled or completed, never failed.
        for _ in range(DISCONNECT_TRIES):
            counted = (await client.get("/stats")).json()["requests"]["cancelled_by_disconnect"]
            before = (await engine_stats(client))["graph_tasks"]
            assert before["running"] == 0
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(request)
                await writer.drain()
                # Its backward pass is running once the engine counts a running graph task.
                await poll_stats(client, lambda tasks: tasks["running"] > 0)
            finally:
                writer.close()  # the client goes away without reading the response
                await writer.wait_closed()
            now = await poll_stats(client, lambda tasks: tasks["running"] == 0)
            assert now["failed"] == before["failed"]
            ended = (now["cancelled"] - before["cancelled"], now["completed"] - before["completed"])
            assert ended in {(1, 0), (0, 1)}, (before, now)
            if ended == (1, 0):
                assert await reader.read() == b"", "the server answered a client that had gone"
                stats = (await client.get("/stats")).json()
                assert stats["requests"]["cancelled_by_disconnect"] == counted + 1
                return
    pytest.fail(f"every one of {DISCONNECT_TRIES} backward passes ended before its disconnect")


def test_stats_and_prometheus_metrics(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
        assert client.post("/saliency", json={"image": IMAGE}).status_code == 200
        stats = client.get("/stats").json()
        res = client.get("/metrics")
    assert res.status_code == 200
    assert res.headers["content-type"].startswith("text/plain")
    engine = stats["engine"]
    assert engine["nodes"]["cpu"] > 0
    assert stats["model"]["device"] == "cpu"
    assert stats["model"]["test_accuracy"] > 0.9
    assert stats["gc"]["frozen_objects"] > 0  # See NOTE [Freeze the start-up heap] in app.py
    loop = stats["loop"]  # the lag monitor: every stall, not only the engine's
    assert loop["ticks"] > 0
    assert 0.0 <= loop["lag_p99_ms"] <= loop["lag_max_ms"]
    # The server's environment is this process's (conftest.py): one BLAS thread per call
    # unless a thread variable says otherwise (NOTE [BLAS threads of the compute threads]).
    chosen = next((v for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
                   if os.environ.get(v)), None)  # fmt: skip
    if chosen is None:
        assert stats["blas"]["limited_to"] == 1, stats["blas"]
    else:
        assert stats["blas"] == {"limited_to": None, "why": f"left alone: {chosen} is set"}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in prometheus_parser.text_string_to_metric_families(res.text)
        for s in family.samples
    }
    ticks = samples[("asyncgrad_server_loop_lag_seconds_count", ())]
    assert ticks >= 1
    assert samples[("asyncgrad_server_loop_lag_seconds_bucket", (("le", "+Inf"),))] == ticks
    ended = engine["graph_tasks"]
    # /metrics is scraped after /stats: counters can only have grown meanwhile.
    for outcome in ("completed", "failed", "cancelled"):
        key = ("asyncgrad_graph_tasks_ended_total", (("outcome", outcome),))
        assert samples[key] >= ended[outcome]
    assert samples[("asyncgrad_graph_tasks", (("state", "running"),))] == 0
    assert samples[("asyncgrad_nodes_total", (("device", "cpu"),))] >= engine["nodes"]["cpu"]
    assert samples[("asyncgrad_node_seconds_total", (("device", "cpu"),))] > 0
    assert ("asyncgrad_longest_stall_seconds", ()) in samples


def test_page_and_weights(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as client:
        page = client.get("/")
        version, weights = weights_of(client.get("/weights"))
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<canvas id="pad"' in page.text
    assert version >= 0
    assert {k: v.shape for k, v in weights.items()} == {
        "0.weight": (128, 64),
        "0.bias": (128,),
        "2.weight": (10, 128),
        "2.bias": (10,),
    }


def test_load_test_script_against_the_server(server: Server) -> None:
    """examples/server/load_test.py, run as a user runs it against a running server."""
    requests, concurrency = 48, 6
    cmd = [sys.executable, str(SERVER_DIR / "load_test.py"), "--url", server.url]
    cmd += ["--requests", str(requests), "--concurrency", str(concurrency), "--samples", "4"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    fields = dict(line.split(":", 1) for line in out.stdout.splitlines())
    assert fields["requests"].strip() == f"{requests} at concurrency {concurrency}, samples 4"
    assert int(fields["failures"]) == 0
    assert float(fields["throughput"].split()[0]) > 0
    p50, p90, p99 = map(float, re.findall(r"p\d\d ([\d.]+) ms", fields["latency"]))
    assert 0 < p50 <= p90 <= p99
    nodes = int(fields["engine"].split()[0])
    served, _, _, passes, _ = fields["coalescer"].split()
    assert int(served) == requests, out.stdout
    assert 1 <= int(passes) <= requests
    assert nodes % int(passes) == 0, out.stdout  # every pass ran the same graph


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


async def test_a_huge_body_is_refused_in_bounded_memory(server: Server) -> None:
    """An 84 MB body, declared or chunked, gets 413 without being read in full: the server's
    memory stays bounded, and a small request sent beside it is answered as usual."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads the server's memory from /proc (Linux)")
    size = 84 * 1024 * 1024
    chunk = b"1" * (1 << 20)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(size // len(chunk)):
            yield chunk

    before = _rss_bytes(server.proc.pid)
    async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT_S) as client:
        json_type = {"content-type": "application/json"}
        declared = client.post(
            "/saliency", content=body(), headers={**json_type, "content-length": str(size)}
        )
        chunked = client.post("/saliency", content=body(), headers=json_type)
        small = client.post("/saliency", json={"image": IMAGE})
        async with asyncio.timeout(TIMEOUT_S):
            got = await asyncio.gather(declared, chunked, small)
    assert [r.status_code for r in got] == [413, 413, 200], [r.text[:200] for r in got]
    assert "Content Too Large" in got[0].text
    assert len(got[2].json()["saliency"]) == 8
    grown = _rss_bytes(server.proc.pid) - before
    assert grown < 32 * 1024 * 1024, f"the server grew by {grown / 2**20:.0f} MB"
