"""ag.attribution.Explainer: saliency, input x gradient, SmoothGrad, integrated gradients and
occlusion (NOTE [Attributions that coalesce]), each against Captum on the same model and
inputs, and against itself run alone when many requests share passes."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad.attribution import Explainer, path_rule

from .test_serving import Held, first_then_the_rest

torch = pytest.importorskip("torch", reason="the reference model runs in PyTorch")
captum_attr = pytest.importorskip("captum.attr", reason="the reference attributions are Captum's")

TIMEOUT_S = 30.0
# Captum rounds integrated gradients' step weights to float32; every other figure is float64.
IG_RTOL = 1e-6


def models(seed: int = 0, shape: tuple[int, ...] = (6,)) -> tuple[Any, ag.nn.Module]:
    """A torch MLP (float64) over rows of ``shape``, and the same model in asyncgrad."""
    torch.manual_seed(seed)
    width = int(np.prod(shape))
    tm = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(width, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)
    ).double()
    am = ag.nn.Sequential(
        ag.nn.Flatten(), ag.nn.Linear(width, 16), ag.nn.Tanh(), ag.nn.Linear(16, 4)
    ).to(ag.float64)
    for p, q in zip(tm.parameters(), am.parameters(), strict=True):
        q.array[...] = p.detach().numpy()
    return tm, am


def inputs(n: int, seed: int, shape: tuple[int, ...] = (6,)) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal((n, *shape))


def tin(x: np.ndarray[Any, Any]) -> Any:
    """The input as Captum wants it (requiring grad, or it warns)."""
    return torch.tensor(x, requires_grad=True)


def run(coro: Any) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(TIMEOUT_S):
            return await coro

    return asyncio.run(main())


def close(got: ag.Tensor, ref: Any, rtol: float = 1e-10) -> None:
    r = ref.detach().numpy()
    np.testing.assert_allclose(got.numpy(), r, rtol=rtol, atol=rtol * max(1.0, abs(r).max()))


TARGETS = [0, [0, 2, 3], None]


@pytest.fixture
def pair() -> tuple[Any, ag.nn.Module]:
    return models()


# ============================================================================= against Captum


@pytest.mark.parametrize("abs_", [True, False])
def test_saliency_is_captums(pair: Any, abs_: bool) -> None:
    tm, am = pair
    x = inputs(3, 1)
    got = run(Explainer(am).saliency(ag.tensor(x), [1, 3, 0], abs=abs_))
    ref = captum_attr.Saliency(tm).attribute(tin(x), target=[1, 3, 0], abs=abs_)
    close(got, ref)


def test_input_x_gradient_is_captums(pair: Any) -> None:
    tm, am = pair
    x = inputs(4, 2)
    got = run(Explainer(am).input_x_gradient(ag.tensor(x), 2))
    ref = captum_attr.InputXGradient(tm).attribute(tin(x), target=2)
    close(got, ref)


def test_smoothgrad_is_captums_noise_tunnel_on_the_same_noise(
    pair: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tm, am = pair
    x = inputs(3, 3)
    drawn: list[Any] = []
    normal = torch.normal

    def recording(*args: Any, **kwargs: Any) -> Any:
        out = normal(*args, **kwargs)
        drawn.append(out)
        return out

    monkeypatch.setattr(torch, "normal", recording)
    ref = captum_attr.NoiseTunnel(captum_attr.Saliency(tm)).attribute(
        tin(x), nt_type="smoothgrad", nt_samples=4, stdevs=0.3, target=[0, 1, 2]
    )
    monkeypatch.undo()
    (noise,) = drawn
    got = run(
        Explainer(am).smoothgrad(
            ag.tensor(x), [0, 1, 2], n_samples=4, noise=ag.tensor(noise.numpy())
        )
    )
    close(got, ref)


def test_smoothgrad_draws_its_own_noise_of_the_given_spread(pair: Any) -> None:
    _, am = pair
    e = Explainer(am)
    x = ag.tensor(inputs(2, 4))
    ag.manual_seed(5)
    a = run(e.smoothgrad(x, 1, n_samples=3, stdev=0.2))
    ag.manual_seed(5)
    b = run(e.smoothgrad(x, 1, n_samples=3, stdev=0.2))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    no_noise = run(e.smoothgrad(x, 1, n_samples=3, stdev=0.0))
    close(no_noise, torch.tensor(run(e.saliency(x, 1)).numpy()))
    assert not np.allclose(a.numpy(), no_noise.numpy())


@pytest.mark.parametrize(
    "method", ["gausslegendre", "riemann_trapezoid", "riemann_left", "riemann_right"]
)
@pytest.mark.parametrize("target", TARGETS[:2])
def test_integrated_gradients_and_delta_are_captums(pair: Any, method: str, target: Any) -> None:
    tm, am = pair
    x, base = inputs(3, 5), inputs(3, 6)
    got, delta = run(
        Explainer(am).integrated_gradients(
            ag.tensor(x),
            target,
            baselines=ag.tensor(base),
            n_steps=20,
            method=method,
            return_convergence_delta=True,
        )
    )
    ref, ref_delta = captum_attr.IntegratedGradients(tm).attribute(
        tin(x),
        baselines=torch.tensor(base),
        target=target,
        n_steps=20,
        method=method,
        return_convergence_delta=True,
    )
    close(got, ref, IG_RTOL)
    close(delta, ref_delta, IG_RTOL)


def test_integrated_gradients_are_complete() -> None:
    # With enough steps a row's attributions sum to f(x) - f(baseline) at its target.
    _, am = models(2)
    x = ag.tensor(inputs(5, 7))
    attr, delta = run(
        Explainer(am).integrated_gradients(x, 3, n_steps=64, return_convergence_delta=True)
    )
    with ag.no_grad():
        want = am(x)[:, 3] - am(ag.zeros_like(x))[:, 3]
    np.testing.assert_allclose(attr.sum(1).numpy(), want.numpy(), rtol=1e-9, atol=1e-12)
    assert np.abs(delta.numpy()).max() < 1e-10


def test_gauss_legendre_rule_integrates_polynomials_exactly() -> None:
    a, w = path_rule("gausslegendre", 5)
    for k in range(10):  # exact up to degree 2n - 1
        assert sum(wi * ai**k for ai, wi in zip(a, w, strict=True)) == pytest.approx(1 / (k + 1))


@pytest.mark.parametrize(("window", "strides"), [((2, 3), (1, 2)), ((3, 3), 2), ((4, 5), 1)])
def test_occlusion_is_captums(window: tuple[int, int], strides: Any) -> None:
    tm, am = models(4, (4, 5))
    x = inputs(3, 8, (4, 5))
    got = run(Explainer(am).occlusion(ag.tensor(x), [2, 0, 1], window=window, strides=strides))
    ref = captum_attr.Occlusion(tm).attribute(
        tin(x), sliding_window_shapes=window, strides=strides, target=[2, 0, 1]
    )
    close(got, ref, 1e-7)  # Captum's mask arithmetic is partly float32


def test_occlusion_with_a_baseline_row() -> None:
    tm, am = models(5, (6,))
    x, base = inputs(2, 9), inputs(1, 10)[0]
    got = run(
        Explainer(am).occlusion(ag.tensor(x), 1, window=(2,), strides=2, baselines=ag.tensor(base))
    )
    ref = captum_attr.Occlusion(tm).attribute(
        tin(x), sliding_window_shapes=(2,), strides=2, target=1,
        baselines=torch.tensor(base).unsqueeze(0),
    )  # fmt: skip
    close(got, ref, 1e-7)


# ============================================================================= coalescing


async def test_concurrent_requests_share_passes_and_get_what_they_would_alone() -> None:
    _, am = models(6)
    xs = [ag.tensor(inputs(n, 20 + i)) for i, n in enumerate((2, 1, 3, 2, 1))]
    ts = [[0, 1], 2, [3, 1, 0], None, 3]
    alone = Explainer(am)
    want = []
    for x, t in zip(xs, ts, strict=True):
        if t is None:
            want.append(await alone.integrated_gradients(x, 0, n_steps=16))
        else:
            want.append(await alone.saliency(x, t))
    held = Held(am)
    e = Explainer(held, forward_off_loop=True)

    def call(x: ag.Tensor, t: Any) -> Any:
        if t is None:
            return functools.partial(e.integrated_gradients, x, 0, n_steps=16)
        return functools.partial(e.saliency, x, t)

    got = await first_then_the_rest(held, [call(x, t) for x, t in zip(xs, ts, strict=True)])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-14)
    st = e.coalescer.stats()
    assert st["requests"] == 5
    # The first ran alone; the four that came while it ran (saliency and integrated gradients
    # alike: rows of one shape and one kind of grad_output) shared one pass.
    assert st["batches"] == 2
    assert st["largest_batch"] == 1 + 3 + 16 * 2 + 2 * 2 + 1


async def test_occlusions_of_many_requests_share_forward_passes() -> None:
    _, am = models(7, (4, 5))
    xs = [ag.tensor(inputs(1, 30 + i, (4, 5))) for i in range(4)]
    want = [await Explainer(am).occlusion(x, 1, window=(2, 2), strides=2) for x in xs]
    held = Held(am)
    e = Explainer(held, forward_off_loop=True)
    calls = [functools.partial(e.occlusion, x, 1, window=(2, 2), strides=2) for x in xs]
    got = await first_then_the_rest(held, calls)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-14)
    assert e.coalescer.stats()["batches"] == 2


async def test_a_request_larger_than_max_batch_is_split() -> None:
    _, am = models(8)
    x = ag.tensor(inputs(4, 40))
    whole = await Explainer(am).integrated_gradients(x, [1, 2, 3, 0], n_steps=10)
    e = Explainer(am, max_batch=7)
    split = await e.integrated_gradients(x, [1, 2, 3, 0], n_steps=10)
    np.testing.assert_allclose(split.numpy(), whole.numpy(), rtol=1e-12, atol=1e-14)
    assert e.coalescer.stats()["largest_batch"] <= 7
    assert e.coalescer.stats()["rows"] == 10 * 4 + 2 * 4


def test_under_trio_the_same_results() -> None:
    trio = pytest.importorskip("trio", reason="the trio case needs trio")
    pytest.importorskip("anyio", reason="awaiting a pass under trio needs anyio")
    tm, am = models(9)
    x = inputs(2, 50)
    got: list[Any] = []

    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            e = Explainer(am)
            got.append(await e.integrated_gradients(ag.tensor(x), 1, n_steps=12))

    trio.run(main)
    ref = captum_attr.IntegratedGradients(tm).attribute(tin(x), target=1, n_steps=12)
    close(got[0], ref, IG_RTOL)


# ============================================================================= bad input


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda e, x: e.saliency(x.numpy()), TypeError, "saliency: x must be a Tensor"),
        (lambda e, x: e.saliency(x), ValueError, r"gives \(4,\) outputs per row: pass target="),
        (lambda e, x: e.saliency(x, [0, 1]), ValueError, r"one class index per row of x \(3\)"),
        (lambda e, x: e.saliency(x, 4), IndexError, "target out of range for 4 outputs"),
        (lambda e, x: e.saliency(x, True), TypeError, "got a bool"),
        (lambda e, x: e.saliency(x, ag.tensor([0.5, 1, 2])), TypeError, "class indices"),
        (lambda e, x: e.smoothgrad(x, 0, n_samples=0), ValueError, "n_samples must be"),
        (lambda e, x: e.smoothgrad(x, 0, stdev=-1.0), ValueError, "stdev must be >= 0"),
        (
            lambda e, x: e.smoothgrad(x, 0, n_samples=2, noise=ag.zeros(3, 6)),
            ValueError,
            r"noise must be a Tensor of shape \(6, 6\)",
        ),
        (lambda e, x: e.integrated_gradients(x, 0, n_steps=0), ValueError, "n_steps must be"),
        (lambda e, x: e.integrated_gradients(x, 0, method="simpson"), ValueError, "method must"),
        (
            lambda e, x: e.integrated_gradients(x, 0, baselines=ag.zeros(2, 6)),
            ValueError,
            r"baselines must be a number, a row of shape \(6,\)",
        ),
        (lambda e, x: e.occlusion(x, 0, window=(7,)), ValueError, "larger than the row shape"),
        (lambda e, x: e.occlusion(x, 0, window=(2, 2)), ValueError, "window must be 1 ints"),
        (
            lambda e, x: e.occlusion(x, 0, window=(2,), strides=3),
            ValueError,
            "must not be larger than the window",
        ),
        (lambda e, x: e.saliency(x.long(), 0), TypeError, "must be floating point"),
    ],
)
def test_bad_input_is_refused_naming_what_is_wrong(call: Any, error: type, match: str) -> None:
    _, am = models()
    e = Explainer(am)
    x = ag.tensor(inputs(3, 0))
    with pytest.raises(error, match=match):
        run(call(e, x))
    assert e.coalescer.stats()["requests"] == 0
