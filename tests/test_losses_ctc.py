"""ctc_loss (F.ctc_loss, torch.ctc_loss, nn.CTCLoss) against torch: padded and concatenated
targets, repeated labels, empty targets, unreachable targets (inf, zero_infinity), unbatched
input, every reduction; gradients through log_softmax (where torch's backward and the exact
one agree), finite differences and second derivatives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

torch = pytest.importorskip("torch", reason="compares with torch")
TF = torch.nn.functional

RNG = np.random.default_rng(13)


def _problem(t: int, n: int, c: int, s: int, blank: int = 0) -> tuple[np.ndarray, ...]:
    logits = RNG.standard_normal((t, n, c))
    labels = [i for i in range(c) if i != blank]
    tg_len = RNG.integers(0, s + 1, n)
    tg_len[0] = s
    targets = RNG.choice(labels, (n, s))
    if s >= 2:
        targets[0, 1] = targets[0, 0]  # a repeated label: needs a blank between
    in_len = RNG.integers(max(2 * s + 1, 1), t + 1, n)
    in_len[0] = t
    return logits, targets, in_len, tg_len


def _run(lib: Any, logits: np.ndarray, targets: Any, in_len: Any, tg_len: Any, **kw: Any) -> Any:
    x = (torch.tensor if lib is torch else ag.tensor)(logits, requires_grad=True)
    fn = TF.ctc_loss if lib is torch else F.ctc_loss
    mk = (lambda a: torch.tensor(a)) if lib is torch else ag.tensor
    lp = (TF.log_softmax if lib is torch else F.log_softmax)(x, -1)
    return x, fn(lp, mk(targets), mk(in_len), mk(tg_len), **kw)


def _check(logits: np.ndarray, targets: Any, in_len: Any, tg_len: Any, **kw: Any) -> None:
    xa, la = _run(ag, logits, targets, in_len, tg_len, **kw)
    xt, lt = _run(torch, logits, targets, in_len, tg_len, **kw)
    assert tuple(la.shape) == tuple(lt.shape)
    np.testing.assert_allclose(la.detach().numpy(), lt.detach().numpy(), rtol=1e-10, atol=1e-12)
    if not np.isfinite(lt.detach().numpy()).all():
        return
    g = RNG.standard_normal(tuple(lt.shape))
    (ga,) = ag.autograd.grad(la, xa, ag.tensor(g))
    (gt,) = torch.autograd.grad(lt, xt, torch.tensor(g))
    np.testing.assert_allclose(ga.numpy(), gt.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    ("t", "n", "c", "s"), [(12, 3, 5, 4), (6, 2, 3, 2), (9, 4, 6, 0), (5, 1, 4, 1)]
)
def test_ctc_padded_targets_match_torch(reduction: str, t: int, n: int, c: int, s: int) -> None:
    _check(*_problem(t, n, c, s), reduction=reduction)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_concatenated_targets_match_torch(reduction: str) -> None:
    logits, targets, in_len, tg_len = _problem(10, 3, 5, 3)
    flat = np.concatenate([targets[i, : tg_len[i]] for i in range(3)])
    _check(logits, flat, in_len, tg_len, reduction=reduction)
    _check(logits, flat, in_len.tolist(), tg_len.tolist(), reduction=reduction)


def test_ctc_other_blank_and_unbatched_match_torch() -> None:
    logits, targets, in_len, tg_len = _problem(8, 2, 5, 3, blank=4)
    _check(logits, targets, in_len, tg_len, blank=4)
    x1 = logits[:, 0]
    _check(x1, targets[0], np.array(8), np.array(tg_len[0]), reduction="none", blank=4)
    _check(x1, targets[0], np.array(8), np.array(tg_len[0]), reduction="mean", blank=4)


def test_ctc_unreachable_target_is_inf_or_zero_as_torch() -> None:
    # a target of 4 repeated labels needs 7 frames; 5 are given for sample 0
    logits = RNG.standard_normal((5, 2, 3))
    targets = np.array([[1, 1, 1, 1], [1, 2, 0, 0]])
    in_len, tg_len = np.array([5, 5]), np.array([4, 2])
    _check(logits, targets, in_len, tg_len, reduction="none")
    _, la = _run(ag, logits, targets, in_len, tg_len, reduction="none")
    assert np.isinf(la.detach().numpy()[0])
    _check(logits, targets, in_len, tg_len, reduction="sum", zero_infinity=True)
    _check(logits, targets, in_len, tg_len, reduction="none", zero_infinity=True)


def test_ctc_torch_level_and_module_match_torch() -> None:
    logits, targets, in_len, tg_len = _problem(7, 2, 4, 2)
    lp = F.log_softmax(ag.tensor(logits), -1)
    lpt = TF.log_softmax(torch.tensor(logits), -1)
    args = (ag.tensor(targets), ag.tensor(in_len), ag.tensor(tg_len))
    targs = (torch.tensor(targets), torch.tensor(in_len), torch.tensor(tg_len))
    np.testing.assert_allclose(
        ag.ctc_loss(lp, *args, 0, 2, False).numpy(),
        torch.ctc_loss(lpt, *targs, 0, 2, False).numpy(),
    )
    m, tm = nn.CTCLoss(reduction="sum"), torch.nn.CTCLoss(reduction="sum")
    assert repr(m) == repr(tm)
    np.testing.assert_allclose(m(lp, *args).numpy(), tm(lpt, *targs).numpy())


def test_ctc_gradcheck_and_gradgradcheck() -> None:
    logits, targets, in_len, tg_len = _problem(5, 2, 3, 2)
    tg = (ag.tensor(targets), ag.tensor(in_len), ag.tensor(tg_len))
    x = ag.tensor(logits, requires_grad=True)
    assert ag.autograd.gradcheck(lambda a: F.ctc_loss(F.log_softmax(a, -1), *tg), (x,))
    # on raw log-probabilities: the exact gradient (torch's differs there, see the module doc)
    lp = ag.tensor(np.log(RNG.uniform(0.1, 1.0, (5, 2, 3))), requires_grad=True)
    assert ag.autograd.gradcheck(lambda a: F.ctc_loss(a, *tg, reduction="sum"), (lp,))
    small = ag.tensor(RNG.standard_normal((3, 1, 3)), requires_grad=True)
    one = (ag.tensor([[1]]), ag.tensor([3]), ag.tensor([1]))
    assert ag.autograd.gradgradcheck(lambda a: F.ctc_loss(F.log_softmax(a, -1), *one), (small,))


def test_ctc_errors() -> None:
    lp = F.log_softmax(ag.zeros(4, 2, 3), -1)
    with pytest.raises(RuntimeError, match="Expected input_lengths to have value at most 4"):
        F.ctc_loss(lp, ag.ones(2, 1, dtype=ag.int64), ag.tensor([5, 4]), ag.tensor([1, 1]))
    with pytest.raises(RuntimeError, match="Expected input_lengths to have value at most 4"):
        TF.ctc_loss(
            TF.log_softmax(torch.zeros(4, 2, 3), -1), torch.ones(2, 1, dtype=torch.int64),
            torch.tensor([5, 4]), torch.tensor([1, 1]),
        )  # fmt: skip
    with pytest.raises(
        RuntimeError, match="Expected tensor to have size at least 3 at dimension 1"
    ):
        F.ctc_loss(lp, ag.ones(2, 1, dtype=ag.int64), ag.tensor([4, 4]), ag.tensor([3, 1]))
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(lp, ag.ones(2, 1, dtype=ag.int64), ag.tensor([4, 4]), ag.tensor([1, 1]), blank=3)
    with pytest.raises(RuntimeError, match="input_lengths must be of size batch_size"):
        F.ctc_loss(lp, ag.ones(2, 1, dtype=ag.int64), ag.tensor([4]), ag.tensor([1, 1]))
