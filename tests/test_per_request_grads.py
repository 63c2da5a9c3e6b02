"""Coalescer.parameter_grads: each request's own parameter gradients from one batched pass
(NOTE [Per-request parameter gradients] in asyncgrad/per_sample.py). Every result is checked
against the same gradients computed for the request alone (float64); which requests share a
batch, and whether a batch fell back to a pass per request, is read from the coalescer's own
counters, never from timing."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
import asyncgrad.nn.functional as F
from asyncgrad import per_sample
from asyncgrad.serving import Coalescer

from .engine.helpers import TIMEOUT_S
from .test_serving import Held, first_then_the_rest

RTOL = 1e-10
ATOL = 1e-12
F64 = ag.float64


def rows(n: int, seed: int, width: int = 5) -> ag.Tensor:
    return ag.tensor(np.random.default_rng(seed).standard_normal((n, width)), dtype=F64)


def mlp(seed: int = 0) -> ag.nn.Module:
    ag.manual_seed(seed)
    return ag.nn.Sequential(
        ag.nn.Linear(5, 8, dtype=F64),
        ag.nn.Tanh(),
        ag.nn.LayerNorm(8, dtype=F64),
        ag.nn.Linear(8, 3, dtype=F64),
    )


def alone(
    model: ag.nn.Module, x: ag.Tensor, *args: ag.Tensor, grad_output: Any = None
) -> dict[str, np.ndarray[Any, Any]]:
    """The request's parameter gradients, computed by itself."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    out = model(x, *args)
    if callable(grad_output):
        grad_output = grad_output(out.detach())
    go = ag.ones_like(out) if grad_output is None else grad_output
    grads = ag.grad_sync(out, [p for _, p in named], grad_outputs=go, allow_unused=True)
    return {
        n: np.zeros(p.shape) if g is None else g.numpy()
        for (n, p), g in zip(named, grads, strict=True)
    }


def check(got: dict[str, ag.Tensor], want: dict[str, np.ndarray[Any, Any]]) -> None:
    assert sorted(got) == sorted(want)
    for name, g in want.items():
        assert got[name].shape == g.shape, name
        np.testing.assert_allclose(got[name].numpy(), g, rtol=RTOL, atol=ATOL, err_msg=name)


async def test_concurrent_requests_share_one_pass_and_get_their_own_gradients() -> None:
    model = mlp()
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    # Behind the first: requests of 1, 3, 1, 3 and 2 rows, so groups of equal row counts.
    xs = [rows(n, i) for i, n in enumerate((2, 1, 3, 1, 3, 2))]
    got = await first_then_the_rest(held, [lambda x=x: c.parameter_grads(x) for x in xs])
    for x, g in zip(xs, got, strict=True):
        check({k.removeprefix("inner."): v for k, v in g.items()}, alone(model, x))
    st = c.stats()
    # The first request alone, the five that queued behind it in one batch.
    assert (st["requests"], st["batches"], st["largest_batch"]) == (6, 2, 10)
    assert st["parameter_batches_alone"] == 0
    assert not any(m._forward_hooks for m in held.modules())  # the capture hooks are gone


@pytest.mark.parametrize("off", [None, True, False])
async def test_the_rules_run_where_the_forwards_would(
    off: bool | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's per-sample rules write every request's gradients: they are placed as its
    forward is (NOTE [Forwards off the loop]): by default the first off the loop (nothing is
    known of them yet), and always off or always on it when forward_off_loop says so."""
    where: list[str] = []
    rules = per_sample.per_request

    def recorded(*args: Any) -> Any:
        where.append(threading.current_thread().name)
        return rules(*args)

    monkeypatch.setattr(per_sample, "per_request", recorded)
    model = mlp()
    xs = [rows(n, i) for i, n in enumerate((1, 2, 1, 3))]
    if off is False:  # on the loop, the first request runs in its caller, the rest queue
        c = Coalescer(model, forward_off_loop=False)
        got = await asyncio.wait_for(asyncio.gather(*(c.parameter_grads(x) for x in xs)), TIMEOUT_S)
        names = [n for n, _ in model.named_parameters()]
    else:
        held = Held(model)
        c = Coalescer(held, forward_off_loop=off)
        got = await first_then_the_rest(held, [lambda x=x: c.parameter_grads(x) for x in xs])
        names = [n for n, _ in held.named_parameters()]
    for x, g in zip(xs, got, strict=True):
        assert sorted(g) == sorted(names)
        check({k.removeprefix("inner."): v for k, v in g.items()}, alone(model, x))
    st = c.stats()
    assert st["batches"] < st["requests"]  # some requests shared a batch, and its rules ran
    assert len(where) == st["batches"] - 1  # the first request ran alone: no rules
    loop = threading.current_thread().name
    assert all((t == loop) is (off is False) for t in where), where
    assert st["parameter_rules_off_loop"] == (0 if off is False else len(where))


class PerSampleLoss(ag.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp(3)

    def forward(self, x: ag.Tensor, y: ag.Tensor) -> ag.Tensor:
        return F.cross_entropy(self.net(x), y, reduction="none")


async def test_per_sample_losses_with_targets_and_grad_outputs() -> None:
    """A per-sample loss with its targets as a per-row argument; grad_output as rows, and as a
    function of the request's own output rows."""
    model = PerSampleLoss()
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, 10 + i) for i, n in enumerate((3, 2, 4))]
    ys = [ag.tensor(np.arange(n) % 3) for n in (3, 2, 4)]
    weights = [ag.tensor(np.linspace(0.5, 2.0, n), dtype=F64) for n in (3, 2, 4)]

    def square(out: ag.Tensor) -> ag.Tensor:
        return 2 * out  # the gradient of the sum of squared losses

    calls = [
        lambda: c.parameter_grads(xs[0], ys[0], grad_output=weights[0]),
        lambda: c.parameter_grads(xs[1], ys[1], grad_output=weights[1]),
        lambda: c.parameter_grads(xs[2], ys[2], grad_output=weights[2]),
    ]
    got = await first_then_the_rest(held, calls)
    for x, y, w, g in zip(xs, ys, weights, got, strict=True):
        check(
            {k.removeprefix("inner."): v for k, v in g.items()}, alone(model, x, y, grad_output=w)
        )
    assert c.stats()["batches"] == 2
    c2 = Coalescer(model)
    got = await asyncio.wait_for(
        asyncio.gather(
            *(c2.parameter_grads(x, y, grad_output=square) for x, y in zip(xs, ys, strict=True))
        ),
        TIMEOUT_S,
    )
    for x, y, g in zip(xs, ys, got, strict=True):
        check(g, alone(model, x, y, grad_output=square))


class Tokens(ag.nn.Module):
    """An embedding of token rows, a linear layer over every position, mean over positions."""

    def __init__(self) -> None:
        super().__init__()
        ag.manual_seed(5)
        self.embed = ag.nn.Embedding(11, 4, padding_idx=0, dtype=F64)
        self.proj = ag.nn.Linear(4, 3, dtype=F64)

    def forward(self, tokens: ag.Tensor) -> ag.Tensor:
        return ag.tanh(self.proj(self.embed(tokens))).mean(1)


async def test_embeddings_and_linear_layers_over_positions() -> None:
    """Token rows travel as a per-row argument (the coalescer's input is a float tensor, here
    a zero offset per row); the embedding's padding row stays zero."""
    wrapped = TokensByArgument(Tokens())
    held = Held(wrapped)
    c = Coalescer(held, forward_off_loop=True)
    rng = np.random.default_rng(2)
    toks = [ag.tensor(rng.integers(0, 11, (n, 6))) for n in (2, 3, 1)]
    toks[1][0, :3] = 0  # padding
    xs = [ag.zeros(t.shape[0], 1, dtype=F64) for t in toks]
    got = await first_then_the_rest(
        held, [lambda x=x, t=t: c.parameter_grads(x, t) for x, t in zip(xs, toks, strict=True)]
    )
    for x, t, g in zip(xs, toks, got, strict=True):
        check({k.removeprefix("inner."): v for k, v in g.items()}, alone(wrapped, x, t))
        assert np.all(g["inner.model.embed.weight"].numpy()[0] == 0)
    assert c.stats()["parameter_batches_alone"] == 0
    assert c.stats()["batches"] == 2


class TokensByArgument(ag.nn.Module):
    def __init__(self, model: Tokens) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: ag.Tensor, tokens: ag.Tensor) -> ag.Tensor:
        return self.model(tokens) + x


class Tied(ag.nn.Module):
    """A linear layer whose weight is used again outside it: no rule covers the second use."""

    def __init__(self) -> None:
        super().__init__()
        ag.manual_seed(9)
        self.lin = ag.nn.Linear(5, 5, dtype=F64)

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        return ag.tanh(self.lin(x)) @ self.lin.weight


class WithPReLU(ag.nn.Module):
    """A module without a rule (PReLU's slope) between linear layers."""

    def __init__(self) -> None:
        super().__init__()
        ag.manual_seed(4)
        self.a = ag.nn.Linear(5, 4, dtype=F64)
        self.act = ag.nn.PReLU(dtype=F64)
        self.b = ag.nn.Linear(4, 2, dtype=F64)

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        return self.b(self.act(self.a(x)))


class SmallCNN(ag.nn.Module):
    """Conv2d (strided, padded), GroupNorm, Conv1d (dilated) and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        ag.manual_seed(11)
        self.conv = ag.nn.Conv2d(2, 4, 3, stride=2, padding=1, dtype=F64)
        self.norm = ag.nn.GroupNorm(2, 4, dtype=F64)
        self.conv1 = ag.nn.Conv1d(4, 3, 2, dilation=2, dtype=F64)
        self.head = ag.nn.Linear(3 * 7, 2, dtype=F64)

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        h = ag.tanh(self.norm(self.conv(x.reshape(-1, 2, 5, 5))))  # (n, 4, 3, 3)
        h = ag.tanh(self.conv1(h.flatten(2)))  # (n, 3, 7)
        return self.head(h.flatten(1))


async def test_convolutions_and_group_norm_have_rules() -> None:
    model = SmallCNN()
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    # Behind the first: 1, 2, 1 and 3 rows, so a group of equal row counts beside others.
    xs = [rows(n, 80 + i, width=50) for i, n in enumerate((2, 1, 2, 1, 3))]
    got = await first_then_the_rest(held, [lambda x=x: c.parameter_grads(x) for x in xs])
    for x, g in zip(xs, got, strict=True):
        check({k.removeprefix("inner."): v for k, v in g.items()}, alone(model, x))
    assert c.stats()["parameter_batches_alone"] == 0
    assert c.stats()["batches"] == 2


class WithLSTM(ag.nn.Module):
    """A whole nn.LSTM (no rule: its layers run their own steps) before a linear head."""

    def __init__(self) -> None:
        super().__init__()
        ag.manual_seed(14)
        self.lstm = ag.nn.LSTM(5, 3, batch_first=True, dtype=F64)
        self.head = ag.nn.Linear(3, 2, dtype=F64)

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        out, _ = self.lstm(x.unsqueeze(1))
        return self.head(out[:, -1])


@pytest.mark.parametrize(
    "make", [Tied, WithPReLU, WithLSTM], ids=["tied-weight", "prelu", "lstm-module"]
)
async def test_uses_no_rule_covers_run_each_request_alone(make: Any) -> None:
    model = make()
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, 20 + i) for i, n in enumerate((2, 3, 1))]
    got = await first_then_the_rest(held, [lambda x=x: c.parameter_grads(x) for x in xs])
    for x, g in zip(xs, got, strict=True):
        check({k.removeprefix("inner."): v for k, v in g.items()}, alone(model, x))
    st = c.stats()
    assert st["parameter_batches_alone"] == 1  # the batch of the two that queued
    assert st["batches"] == 3  # a pass each: the first, then the two of that batch


async def test_frozen_and_unused_parameters() -> None:
    model = mlp(1)
    model[0].weight.requires_grad_(False)
    spare = ag.nn.Linear(2, 2, dtype=F64)
    model.add_module("spare", spare)  # registered, never called
    held = Held(ag.nn.Sequential(*list(model.children())[:4]))
    held.add_module("spare", spare)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, 30 + i) for i, n in enumerate((1, 2, 2))]
    got = await first_then_the_rest(held, [lambda x=x: c.parameter_grads(x) for x in xs])
    for x, g in zip(xs, got, strict=True):
        assert "inner.0.weight" not in g  # frozen: not asked for
        assert np.all(g["spare.weight"].numpy() == 0)
        assert np.all(g["spare.bias"].numpy() == 0)
        check(g, alone(held, x))
    assert c.stats()["parameter_batches_alone"] == 0


async def test_batches_in_flight_at_once_capture_their_own_calls() -> None:
    """Two batches on two compute threads at once: each reads only its own captured calls."""
    model = mlp(2)
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True, max_concurrent=2, max_batch=4)
    xs = [rows(2, 40 + i) for i in range(7)]
    got = await first_then_the_rest(held, [lambda x=x: c.parameter_grads(x) for x in xs])
    for x, g in zip(xs, got, strict=True):
        check({k.removeprefix("inner."): v for k, v in g.items()}, alone(model, x))
    assert c.stats()["requests"] == 7


async def test_parameter_requests_batch_apart_from_input_gradient_requests() -> None:
    model = mlp(6)
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(2, 50 + i) for i in range(4)]
    calls = [
        lambda: c.grad(xs[0]),
        lambda: c.grad(xs[2]),
        lambda: c.parameter_grads(xs[1]),
        lambda: c.parameter_grads(xs[3]),
    ]
    got = await first_then_the_rest(held, calls)
    for i, j in ((2, 1), (3, 3)):
        check({k.removeprefix("inner."): v for k, v in got[i].items()}, alone(model, xs[j]))
    for i, j in ((0, 0), (1, 2)):
        xx = xs[j].detach().requires_grad_(True)
        (want,) = ag.grad_sync(model(xx).sum(), xx)
        np.testing.assert_allclose(got[i].numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    assert c.stats()["batches"] == 3  # the first; then the input and the parameter requests


class Recurrent(ag.nn.Module):
    """A cell unrolled over 3 steps of 3 features each, then a linear head; the state goes in
    by position, or (``keyword``) as ``hx=``, and starts as None (zeros)."""

    def __init__(self, kind: str, keyword: bool) -> None:
        super().__init__()
        ag.manual_seed(13)
        if kind == "lstm":
            self.cell: ag.nn.Module = ag.nn.LSTMCell(3, 4, dtype=F64)
        elif kind == "gru":
            self.cell = ag.nn.GRUCell(3, 4, dtype=F64)
        else:
            self.cell = ag.nn.RNNCell(3, 4, nonlinearity=kind, dtype=F64)
        self.kind, self.keyword = kind, keyword
        self.head = ag.nn.Linear(4, 2, dtype=F64)

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        steps = x.reshape(x.shape[0], 3, 3)
        state: Any = None
        for t in range(3):
            xt = steps[:, t]
            state = self.cell(xt, hx=state) if self.keyword else self.cell(xt, state)
        h = state[0] if self.kind == "lstm" else state
        return self.head(ag.tanh(h))


@pytest.mark.parametrize(
    ("kind", "keyword"),
    [("tanh", False), ("relu", True), ("gru", False), ("gru", True), ("lstm", False),
     ("lstm", True)],
)  # fmt: skip
async def test_recurrent_cells_have_rules(kind: str, keyword: bool) -> None:
    model = Recurrent(kind, keyword)
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True)
    xs = [rows(n, 100 + i, width=9) for i, n in enumerate((1, 2, 1, 3))]
    got = await first_then_the_rest(held, [lambda x=x: c.parameter_grads(x) for x in xs])
    for x, g in zip(xs, got, strict=True):
        check({k.removeprefix("inner."): v for k, v in g.items()}, alone(model, x))
    assert c.stats()["parameter_batches_alone"] == 0
    assert c.stats()["batches"] == 2


async def test_a_batch_holds_as_many_requests_as_their_gradients_bytes_allow() -> None:
    model = mlp(12)
    each = sum(p.numel() * p.element_size() for p in model.parameters())
    held = Held(model)
    c = Coalescer(held, forward_off_loop=True, max_parameter_grad_bytes=2 * each + 1)
    xs = [rows(1, 90 + i) for i in range(6)]
    got = await first_then_the_rest(held, [lambda x=x: c.parameter_grads(x) for x in xs])
    for x, g in zip(xs, got, strict=True):
        check({k.removeprefix("inner."): v for k, v in g.items()}, alone(model, x))
    st = c.stats()
    # The first alone; the five behind it two at a time: 2, 2, 1.
    assert (st["batches"], st["largest_batch"]) == (4, 2)
    with pytest.raises(ValueError, match="max_parameter_grad_bytes must be an int >= 1, got 0"):
        Coalescer(model, max_parameter_grad_bytes=0)


async def test_bad_models_are_refused_with_a_clear_error() -> None:
    c = Coalescer(lambda x: x * 2)
    with pytest.raises(TypeError, match=r"must be an nn\.Module .* got function"):
        await c.parameter_grads(rows(1, 0))
    bn = ag.nn.Sequential(ag.nn.Linear(5, 3, dtype=F64), ag.nn.BatchNorm1d(3, dtype=F64))
    with pytest.raises(RuntimeError, match="BatchNorm1d normalizes with statistics of the batch"):
        await asyncio.wait_for(Coalescer(bn).parameter_grads(rows(2, 0)), TIMEOUT_S)


def test_under_trio_requests_share_a_pass_with_the_same_results() -> None:
    trio = pytest.importorskip("trio", reason="the trio case needs trio")
    pytest.importorskip("anyio", reason="awaiting a pass under trio needs anyio")
    model = mlp(8)
    c = Coalescer(model)
    xs = [rows(n, 60 + i) for i, n in enumerate((2, 3))]
    got: list[Any] = [None, None]

    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for i, x in enumerate(xs):

                    async def one(i: int = i, x: ag.Tensor = x) -> None:
                        got[i] = await c.parameter_grads(x)

                    nursery.start_soon(one)

    trio.run(main)
    for x, g in zip(xs, got, strict=True):
        check(g, alone(model, x))
    assert c.stats()["batches"] == 1  # started in one turn: one batch


# A bounded stress run (NOTE [Per-request parameter gradients]); .ci/run runs a longer one.
STRESS_REQUESTS = int(os.environ.get("ASYNCGRAD_STRESS_PARAM_REQUESTS", "120"))


async def test_stress_concurrent_parameter_and_input_requests_are_each_exact() -> None:
    """Waves of concurrent requests of 1-3 rows, parameter and input gradients mixed, two
    batches in flight at once on two compute threads, some callers cancelled while they wait:
    every answer is exactly the request's own, computed alone; nothing is left behind. Some
    answers are kept across later waves and checked again after each: the memory of a kept
    gradient is never given to a later batch (See NOTE [Reused blocks])."""
    model = mlp(21)
    c = Coalescer(model, max_concurrent=2, max_batch=8)
    rng = random.Random(0)
    done = 0
    kept: list[tuple[dict[str, ag.Tensor], dict[str, np.ndarray[Any, Any]]]] = []
    async with asyncio.timeout(30.0 + STRESS_REQUESTS * 0.05):
        while done < STRESS_REQUESTS:
            wave = []
            for _ in range(rng.randint(1, 12)):
                x = rows(rng.randint(1, 3), done + len(wave))
                params = rng.random() < 0.6
                task = asyncio.ensure_future(c.parameter_grads(x) if params else c.grad(x))
                wave.append((x, params, task, rng.random() < 0.1))
            await asyncio.sleep(0)  # every request made
            for _, _, task, cancel in wave:
                if cancel:
                    task.cancel()
            await asyncio.gather(*(t for _, _, t, _ in wave), return_exceptions=True)
            for x, params, task, cancel in wave:
                if task.cancelled():
                    assert cancel
                    continue
                if params:
                    want = alone(model, x)
                    check(task.result(), want)
                    if rng.random() < 0.3:
                        kept.append((task.result(), want))
                        if len(kept) > 40:
                            kept.pop(rng.randrange(len(kept)))
                else:
                    xx = x.detach().requires_grad_(True)
                    (want,) = ag.grad_sync(model(xx).sum(), xx)
                    np.testing.assert_allclose(
                        task.result().numpy(), want.numpy(), rtol=RTOL, atol=ATOL
                    )
            done += len(wave)
            del wave, task
            for got, want in kept:
                check(got, want)
    assert not c._pending
    assert not c._runners
    assert c.stats()["parameter_batches_alone"] == 0
    assert c._blocks.reused > 0  # memory was reused beside the answers kept
