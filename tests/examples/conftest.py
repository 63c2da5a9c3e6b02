"""A real server of examples/server for the tests here: uvicorn in a subprocess, on a socket
this process opened (so there is no race for a free port), stopped with SIGINT at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

for _module, _extra in (("fastapi", "server"), ("uvicorn", "server"), ("sklearn", "server")):
    pytest.importorskip(_module, reason=f"the server example needs pip install '.[{_extra}]'")
httpx = pytest.importorskip("httpx", reason="the server tests need pip install '.[server]'")

ROOT: Final = Path(__file__).resolve().parents[2]
SERVER_DIR: Final = ROOT / "examples" / "server"
START_TIMEOUT_S: Final = 60.0  # the first start trains the model: seconds, more on a busy CI box
STOP_TIMEOUT_S: Final = 20.0


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="session")
def weights_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the first server saves the weights it trained; later ones load them."""
    return tmp_path_factory.mktemp("server") / "digits.npz"


@pytest.fixture(scope="module")
def server(weights_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The server as ``uvicorn app:app`` starts it (saliency requests coalesced)."""
    yield from _serve(weights_path, tmp_path_factory, {})


@pytest.fixture(scope="module")
def uncoalesced_server(
    weights_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The server with one pass per saliency request (ASYNCGRAD_SERVER_COALESCE=0)."""
    yield from _serve(weights_path, tmp_path_factory, {"ASYNCGRAD_SERVER_COALESCE": "0"})


def _serve(
    weights_path: Path, tmp_path_factory: pytest.TempPathFactory, settings: dict[str, str]
) -> Iterator[Server]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    host, port = sock.getsockname()
    env = dict(os.environ)
    env.pop("ASYNCGRAD_SIM_CUDA", None)  # the suite's simulated GPUs: the server runs on the CPU
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["ASYNCGRAD_SERVER_WEIGHTS"] = str(weights_path)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings)
    log = tmp_path_factory.mktemp("server-log") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "app:app",
                "--app-dir",
                str(SERVER_DIR),
                "--fd",
                str(sock.fileno()),
                "--no-access-log",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=[sock.fileno()],
        )
    sock.close()  # the server has its own copy
    srv = Server(f"http://{host}:{port}", proc, log)
    try:
        _wait_until_ready(srv)
        yield srv
    finally:
        stopped_cleanly = _stop(srv)
    assert stopped_cleanly, "the server did not stop within the timeout:\n" + srv.output()
    assert proc.returncode == 0, f"server exited with {proc.returncode}:\n{srv.output()}"
    output = srv.output()
    assert "Application shutdown complete" in output, output
    assert "Traceback" not in output, output


def _wait_until_ready(srv: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    with httpx.Client(base_url=srv.url, timeout=5.0) as client:
        while True:
            if srv.proc.poll() is not None:
                pytest.fail(f"the server exited with {srv.proc.returncode}:\n{srv.output()}")
            try:
                if client.get("/stats").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server was not ready in {START_TIMEOUT_S} s:\n{srv.output()}")
            time.sleep(0.05)  # a polling interval, bounded by the deadline above


def _stop(srv: Server) -> bool:
    """SIGINT (Ctrl+C), as a person stops it; kill it only if it does not stop in time."""
    if srv.proc.poll() is None:
        srv.proc.send_signal(signal.SIGINT)
    try:
        srv.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        srv.proc.wait(timeout=STOP_TIMEOUT_S)
        return False
    return True
