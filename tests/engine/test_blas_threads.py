"""BLAS's threads per call once the engine's compute threads run (NOTE [BLAS threads of the
compute threads] in asyncgrad/backend/blas.py). The limit is process-wide, so each case runs in
a fresh interpreter with the environment it names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

import asyncgrad as ag
from asyncgrad.backend.blas import THREAD_VARIABLES

pytest.importorskip("threadpoolctl", reason="the limit is set through threadpoolctl")

TIMEOUT_S = 60.0

CASE = """
import asyncio, json, sys
import asyncgrad as ag
from threadpoolctl import threadpool_info

def blas_threads():
    return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

before = blas_threads()
settings = json.loads(sys.argv[1])
if settings:
    ag.configure(**settings)
async def main():
    return await ag.run(sum, [1, 2])
assert asyncio.run(main()) == 3
print(json.dumps({"before": before, "after": blas_threads(), "state": ag.autograd.engine.blas()}))
"""


def run_case(settings: dict[str, Any], **env: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    proc = subprocess.run(
        [sys.executable, "-c", CASE, json.dumps(settings)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not result["before"]:
        pytest.skip("NumPy's BLAS is not one threadpoolctl can see")
    return result


def test_compute_threads_start_with_one_blas_thread_per_call() -> None:
    r = run_case({"compute_threads": 2})
    assert r["after"] == [1]
    assert r["state"]["limited_to"] == 1


def test_a_thread_count_in_the_environment_is_left_as_it_is() -> None:
    r = run_case({"compute_threads": 2}, OPENBLAS_NUM_THREADS="2")
    assert r["after"] == r["before"]
    assert r["state"] == {"limited_to": None, "why": "left alone: OPENBLAS_NUM_THREADS is set"}


def test_blas_threads_none_leaves_blas_alone_and_an_int_sets_it() -> None:
    r = run_case({"compute_threads": 2, "blas_threads": None})
    assert r["after"] == r["before"]
    assert r["state"]["why"] == "left alone: blas_threads=None"
    r = run_case({"compute_threads": 2, "blas_threads": 3})
    assert r["after"] == [3]
    assert r["state"]["limited_to"] == 3


def test_one_compute_thread_leaves_blas_alone() -> None:
    r = run_case({"compute_threads": 1})
    assert r["after"] == r["before"]
    assert r["state"]["why"] == "left alone: one compute thread"


@pytest.mark.parametrize("bad", [0, -1, "one", 1.5, True])
def test_bad_blas_threads_are_refused(bad: Any) -> None:
    before = ag.autograd.engine.blas_threads
    with pytest.raises(ValueError, match="blas_threads must be 'auto', None or an int >= 1"):
        ag.configure(blas_threads=bad)
    assert ag.autograd.engine.blas_threads == before
