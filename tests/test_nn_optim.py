"""ag.nn modules and functions, and ag.optim optimizers checked against torch's update rules."""

from __future__ import annotations

import asyncio
import copy
import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

# ============================================================================= helpers


def mlp(sizes: tuple[int, ...] = (3, 4, 2)) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        if i:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(fan_in, fan_out))
    return nn.Sequential(*layers)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(np.ones(1, dtype=np.float32))
        self.encoder = nn.Linear(3, 4)
        self.head = nn.Sequential(nn.Tanh(), nn.Linear(4, 2))

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        return self.head(self.encoder(x)) * self.scale


def leaf(a: Any) -> ag.Tensor:
    return ag.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


# ============================================================================= Module


def test_named_parameters_follow_registration_order() -> None:
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "encoder.weight", "encoder.bias", "head.1.weight", "head.1.bias"]
    params = list(net.parameters())
    assert all(p is q for p, (_, q) in zip(params, net.named_parameters(), strict=True))
    assert all(isinstance(p, nn.Parameter) and p.requires_grad and p.is_leaf for p in params)
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]
    assert [n for n, _ in net.named_parameters(prefix="net")][1] == "net.encoder.weight"


def test_shared_parameters_are_listed_once_but_saved_under_every_name() -> None:
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    b.weight = a.weight
    model = nn.Sequential(a, b)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.bias"]
    assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_children_and_modules() -> None:
    net = Net()
    assert list(net.children()) == [net.encoder, net.head]
    assert [n for n, _ in net.named_children()] == ["encoder", "head"]
    assert [n for n, _ in net.named_modules()] == ["", "encoder", "head", "head.0", "head.1"]
    assert next(net.modules()) is net
    assert len(list(net.modules())) == 5


def test_train_and_eval_reach_every_submodule() -> None:
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    assert net.train() is net
    assert all(m.training for m in net.modules())
    net.head.train(False)
    assert net.training
    assert not net.head[1].training


def test_zero_grad() -> None:
    net = Net()
    net(ag.randn(5, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    for p in net.parameters():
        assert p.grad is not None
        assert p.grad.shape == p.shape
        assert not p.grad.array.any()
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_requires_grad_freezes_a_module() -> None:
    net = Net()
    assert net.encoder.requires_grad_(False) is net.encoder
    out = net(ag.randn(5, 3)).sum()
    out.backward()
    assert net.encoder.weight.grad is None
    assert net.head[1].weight.grad is not None


def test_attribute_assignment_rules() -> None:
    lin = nn.Linear(2, 3)
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'bias'"):
        lin.bias = ag.zeros(3)
    lin.bias = None
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    assert lin(ag.ones(1, 2)).shape == (1, 3)
    seq = nn.Sequential(nn.ReLU())
    with pytest.raises(TypeError, match="child module '0'"):
        seq.add_module("0", 3)  # type: ignore[arg-type]

    class Early(nn.Module):
        def __init__(self) -> None:
            self.w = nn.Parameter(np.zeros(1))

    with pytest.raises(AttributeError, match=r"before Module.__init__\(\)"):
        Early()


def test_state_dict_is_detached_and_shares_memory() -> None:
    net = Net()
    sd = net.state_dict()
    assert list(sd) == [n for n, _ in net.named_parameters()]
    for name, p in net.named_parameters():
        assert not sd[name].requires_grad
        assert sd[name].grad_fn is None
        assert np.shares_memory(sd[name].array, p.array)


def test_state_dict_round_trip() -> None:
    ag.manual_seed(1)
    src = Net()
    ag.manual_seed(2)
    dst = Net()
    x = ag.randn(4, 3)
    assert not np.allclose(src(x).array, dst(x).array)
    versions = [p._version for p in dst.parameters()]
    result = dst.load_state_dict({k: v.clone() for k, v in src.state_dict().items()})
    assert result.missing_keys == []
    assert result.unexpected_keys == []
    np.testing.assert_array_equal(src(x).array, dst(x).array)
    assert [p._version for p in dst.parameters()] == [v + 1 for v in versions]
    for p, q in zip(src.parameters(), dst.parameters(), strict=True):
        assert not np.shares_memory(p.array, q.array)  # values are copied in
    # NumPy arrays are accepted too.
    dst.load_state_dict({k: v.array * 2 for k, v in src.state_dict().items()})
    np.testing.assert_array_equal(dst.encoder.weight.array, 2 * src.encoder.weight.array)


def test_load_state_dict_errors_name_the_keys_and_copy_nothing() -> None:
    net = Net()
    before = {k: v.array.copy() for k, v in net.state_dict().items()}
    sd = {k: v.clone() * 0 for k, v in net.state_dict().items()}

    missing = dict(sd)
    del missing["head.1.bias"]
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) in state_dict: 'head.1.bias'"):
        net.load_state_dict(missing)

    extra = dict(sd, **{"head.2.weight": ag.zeros(1)})
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\) in state_dict: 'head.2.weight'"):
        net.load_state_dict(extra)

    wrong = dict(sd, **{"encoder.weight": ag.zeros(3, 4)})
    msg = r"size mismatch for encoder.weight: copying a param with shape \(3, 4\).*\(4, 3\)"
    with pytest.raises(RuntimeError, match=msg):
        net.load_state_dict(wrong)

    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.array, before[k])

    result = net.load_state_dict(missing, strict=False)
    assert result == nn.IncompatibleKeys(["head.1.bias"], [])
    assert not net.encoder.weight.array.any()
    np.testing.assert_array_equal(net.head[1].bias.array, before["head.1.bias"])
    with pytest.raises(RuntimeError, match="size mismatch"):
        net.load_state_dict(wrong, strict=False)


def test_to_dtype_keeps_parameter_identity() -> None:
    net = Net()
    params = list(net.parameters())
    opt = ag.optim.SGD(net.parameters(), lr=0.1)
    assert net.to(ag.float64) is net
    assert all(p is q for p, q in zip(params, net.parameters(), strict=True))
    assert all(p.dtype == np.float64 for p in net.parameters())
    x = ag.randn(2, 3, dtype=ag.float64)
    net(x).sum().backward()
    assert net.encoder.weight.grad.dtype == np.float64
    opt.step()
    assert net.encoder.weight.dtype == np.float64


def test_deepcopy_gives_independent_parameters() -> None:
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    b.weight = a.weight
    model = nn.Sequential(a, b)
    model(ag.randn(3, 2)).sum().backward()
    twin = copy.deepcopy(model)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert isinstance(q, nn.Parameter)
        assert q.requires_grad
        assert q is not p
        np.testing.assert_array_equal(q.array, p.array)
        assert not np.shares_memory(q.array, p.array)
        np.testing.assert_array_equal(q.grad.array, p.grad.array)
    assert twin[1].weight is twin[0].weight  # sharing survives the copy
    twin[0].weight.array[...] = 0
    assert model[0].weight.array.any()


def test_repr() -> None:
    text = repr(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2, bias=False)))
    assert text == (
        "Sequential(\n"
        "  (0): Linear(in_features=3, out_features=4, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=4, out_features=2, bias=False)\n"
        ")"
    )


# ============================================================================= layers


@pytest.mark.parametrize(
    ("shape", "expected"), [((5, 3), (5, 4)), ((3,), (4,)), ((2, 5, 3), (2, 5, 4))]
)
def test_linear_shapes(shape: tuple[int, ...], expected: tuple[int, ...]) -> None:
    lin = nn.Linear(3, 4)
    assert lin.weight.shape == (4, 3)
    assert lin.bias is not None
    assert lin.bias.shape == (4,)
    assert lin(ag.randn(*shape)).shape == expected
    assert nn.Linear(3, 4, bias=False)(ag.randn(*shape)).shape == expected


def test_linear_init_is_uniform_within_the_fan_in_bound() -> None:
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = lin.weight.array, lin.bias.array
    assert w.dtype == np.float32
    assert np.abs(w).max() <= bound
    assert np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.99 * bound  # the whole range is used
    assert abs(w.mean()) < 0.01 * bound
    assert w.std() == pytest.approx(bound / math.sqrt(3), rel=0.01)  # std of U(-a, a)
    assert nn.Linear(3, 4, bias=False).bias is None
    assert [n for n, _ in nn.Linear(3, 4, bias=False).named_parameters()] == ["weight"]
    assert nn.Linear(3, 4, dtype=ag.float64).weight.dtype == np.float64


def test_linear_init_follows_manual_seed() -> None:
    ag.manual_seed(7)
    a = nn.Linear(3, 4)
    ag.manual_seed(7)
    b = nn.Linear(3, 4)
    c = nn.Linear(3, 4)
    np.testing.assert_array_equal(a.weight.array, b.weight.array)
    np.testing.assert_array_equal(a.bias.array, b.bias.array)
    assert not np.array_equal(b.weight.array, c.weight.array)


def test_linear_forward_and_gradients_match_numpy() -> None:
    lin = nn.Linear(3, 4, dtype=ag.float64)
    x = leaf(np.random.randn(5, 3))
    g = np.random.randn(5, 4)
    y = lin(x)
    w, b = lin.weight.array, lin.bias.array
    np.testing.assert_allclose(y.array, x.array @ w.T + b)
    y.backward(ag.tensor(g))
    np.testing.assert_allclose(lin.weight.grad.array, g.T @ x.array)
    np.testing.assert_allclose(lin.bias.grad.array, g.sum(0))
    np.testing.assert_allclose(x.grad.array, g @ w)


def test_sequential() -> None:
    a, relu, b = nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)
    seq = nn.Sequential(a, relu, b)
    assert len(seq) == 3
    assert seq[0] is a
    assert seq[-1] is b
    assert list(seq) == [a, relu, b]
    head = seq[1:]
    assert isinstance(head, nn.Sequential)
    assert list(head) == [relu, b]
    x = ag.randn(6, 3)
    np.testing.assert_array_equal(seq(x).array, b(ag.relu(a(x))).array)
    seq.append(nn.Tanh())
    assert len(seq) == 4
    assert [n for n, _ in seq.named_children()] == ["0", "1", "2", "3"]


def test_module_list() -> None:
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers) == 3
    assert len(list(layers.parameters())) == 6
    extra = nn.Linear(2, 2)
    layers.append(extra)
    assert layers[-1] is extra
    assert layers[3] is extra
    replacement = nn.Linear(2, 2)
    layers[0] = replacement
    assert layers[0] is replacement
    assert isinstance(layers[1:3], nn.ModuleList)
    assert len(layers[1:3]) == 2
    assert [n for n, _ in layers.named_parameters()][:2] == ["0.weight", "0.bias"]
    with pytest.raises(IndexError, match="out of range"):
        layers[4]
    with pytest.raises(TypeError, match="holds Modules"):
        layers.append(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("module", "value", "slope"),
    [
        (nn.ReLU(), lambda a: np.maximum(a, 0), lambda a: (a > 0).astype(float)),
        (nn.Tanh(), np.tanh, lambda a: 1 - np.tanh(a) ** 2),
        (
            nn.Sigmoid(),
            lambda a: 1 / (1 + np.exp(-a)),
            lambda a: np.exp(-a) / (1 + np.exp(-a)) ** 2,
        ),
        (
            nn.GELU(),
            lambda a: a * 0.5 * (1 + np.vectorize(math.erf)(a / math.sqrt(2))),
            lambda a: (
                0.5 * (1 + np.vectorize(math.erf)(a / math.sqrt(2)))
                + a * np.exp(-(a**2) / 2) / math.sqrt(2 * math.pi)
            ),
        ),
    ],
    ids=["relu", "tanh", "sigmoid", "gelu"],
)
def test_activations(
    module: nn.Module, value: Callable[..., Any], slope: Callable[..., Any]
) -> None:
    a = np.array([-2.0, -0.5, 0.25, 1.5, 3.0])
    x = leaf(a)
    y = module(x)
    np.testing.assert_allclose(y.array, value(a), rtol=1e-12)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.array, slope(a), rtol=1e-12)


def test_dropout() -> None:
    x = ag.ones(200, 50)
    drop = nn.Dropout(0.3)
    ag.manual_seed(3)
    y = drop(x).array
    ag.manual_seed(3)
    np.testing.assert_array_equal(drop(x).array, y)  # repeatable under manual_seed
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.7], rtol=1e-6)
    assert (y == 0).mean() == pytest.approx(0.3, abs=0.02)
    x = leaf(np.ones((4, 5)))
    out = drop(x)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.array, out.array)  # gradient is the scaled mask
    drop.eval()
    assert drop(x) is x
    assert F.dropout(x, 0.0) is x
    assert not F.dropout(x, 1.0).array.any()
    with pytest.raises(ValueError, match=r"between 0 and 1, but got 1\.5"):
        nn.Dropout(1.5)


def test_embedding() -> None:
    emb = nn.Embedding(10, 3)
    assert emb.weight.shape == (10, 3)
    idx = ag.tensor([[1, 2, 1], [0, 9, 1]])
    out = emb(idx)
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out.array, emb.weight.array[idx.array])
    out.sum().backward()
    counts = np.bincount(idx.array.ravel(), minlength=10)
    np.testing.assert_array_equal(emb.weight.grad.array, np.repeat(counts[:, None], 3, axis=1))
    with pytest.raises(TypeError, match="integer tensor"):
        emb(ag.tensor([1.0]))


def test_embedding_padding_idx_gets_no_gradient() -> None:
    emb = nn.Embedding(5, 2, padding_idx=0)
    assert not emb.weight.array[0].any()
    emb(ag.tensor([0, 1, 0, 3])).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.array[:, 0], [0, 1, 0, 1, 0])
    with pytest.raises(ValueError, match="padding_idx must be within num_embeddings"):
        nn.Embedding(5, 2, padding_idx=5)


def test_layer_norm_matches_numpy_and_gradcheck() -> None:
    ln = nn.LayerNorm(4, dtype=ag.float64)
    ln.weight.array[:] = [1.0, 2.0, 0.5, -1.0]
    ln.bias.array[:] = [0.0, 0.1, 0.2, 0.3]
    a = np.random.randn(3, 4)
    mu, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
    expected = (a - mu) / np.sqrt(var + 1e-5) * ln.weight.array + ln.bias.array
    np.testing.assert_allclose(ln(ag.tensor(a)).array, expected, rtol=1e-10)
    x = leaf(a)
    assert ag.autograd.gradcheck(lambda t: ln(t), (x,))
    assert ag.autograd.gradcheck(lambda t: F.layer_norm(t, (3, 4)), (x,))
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 5\]"):
        F.layer_norm(x, 5)


def test_softplus_is_stable_and_matches_its_definition() -> None:
    x = leaf([-50.0, -1.0, 0.0, 2.0, 19.0, 25.0, 100.0])
    y = F.softplus(x)
    a = x.array
    expected = np.where(a > 20, a, np.log1p(np.exp(np.minimum(a, 20))))
    np.testing.assert_allclose(y.array, expected, rtol=1e-12)
    y.sum().backward()
    slope = np.where(a > 20, 1.0, 1 / (1 + np.exp(-a)))
    np.testing.assert_allclose(x.grad.array, slope, rtol=1e-12)
    assert np.isfinite(x.grad.array).all()
    np.testing.assert_allclose(F.softplus(ag.tensor([1.0]), beta=2).array, np.log1p(np.e**2) / 2)


def test_l1_and_bce_with_logits_losses() -> None:
    x = leaf([-30.0, -1.0, 0.0, 2.0])
    y = np.array([1.0, 0.0, 1.0, 0.5])
    loss = F.binary_cross_entropy_with_logits(x, ag.tensor(y))
    p = 1 / (1 + np.exp(-x.array))
    expected = -(y * np.log(np.maximum(p, 1e-300)) + (1 - y) * np.log1p(-p))
    assert loss.item() == pytest.approx(expected.mean(), rel=1e-12)
    loss.backward()
    np.testing.assert_allclose(x.grad.array, (p - y) / 4, rtol=1e-12, atol=1e-15)
    pw = F.binary_cross_entropy_with_logits(x, ag.tensor(y), pos_weight=3.0, reduction="none")
    np.testing.assert_allclose(
        pw.array, -(3 * y * np.log(np.maximum(p, 1e-300)) + (1 - y) * np.log1p(-p)), rtol=1e-9
    )
    with pytest.raises(ValueError, match="Target size"):
        F.binary_cross_entropy_with_logits(x, ag.zeros(3))
    l1 = F.l1_loss(x, ag.tensor(y), reduction="sum")
    assert l1.item() == pytest.approx(np.abs(x.array - y).sum())
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.l1_loss(x, ag.tensor(y), reduction="avg")


def test_scaled_dot_product_attention_matches_numpy() -> None:
    q, k, v = (np.random.randn(2, 3, 5, 4) for _ in range(3))

    def reference(mask: np.ndarray | None) -> np.ndarray:
        s = q @ k.swapaxes(-1, -2) / 2.0
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        w = np.exp(s - s.max(-1, keepdims=True))
        return (w / w.sum(-1, keepdims=True)) @ v

    tq, tk, tv = leaf(q), leaf(k), leaf(v)
    out = F.scaled_dot_product_attention(tq, tk, tv)
    np.testing.assert_allclose(out.array, reference(None), rtol=1e-10)
    causal = np.tril(np.ones((5, 5), dtype=bool))
    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    np.testing.assert_allclose(out.array, reference(causal), rtol=1e-10)
    masked = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=ag.tensor(causal))
    np.testing.assert_allclose(masked.array, out.array, rtol=1e-12)
    out.sum().backward()
    assert tq.grad.shape == q.shape
    # The first query sees only the first key, so later keys get no gradient from it.
    assert ag.autograd.gradcheck(
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
        (leaf(q[0, 0]), leaf(k[0, 0]), leaf(v[0, 0])),
    )


# ============================================================================= optimizers
# Reference implementations: the algorithms documented for torch.optim, written out in NumPy
# (float64) one parameter at a time.


def sgd_reference(
    p: np.ndarray,
    grads: list[np.ndarray],
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    maximize: bool = False,
) -> list[np.ndarray]:
    p, b, out = p.copy(), None, []
    for t, g in enumerate(grads, start=1):
        g = -g if maximize else g
        if weight_decay:
            g = g + weight_decay * p
        if momentum:
            b = g.copy() if t == 1 else momentum * b + (1 - dampening) * g
            g = g + momentum * b if nesterov else b
        p = p - lr * g
        out.append(p)
    return out


def adam_reference(
    p: np.ndarray,
    grads: list[np.ndarray],
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    amsgrad: bool = False,
    maximize: bool = False,
    decoupled: bool = False,
) -> list[np.ndarray]:
    b1, b2 = betas
    p, out = p.copy(), []
    m = v = v_max = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = -g if maximize else g
        if decoupled:
            p = p * (1 - lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        if amsgrad:
            v_max = np.maximum(v_max, v)
            v_hat = v_max / (1 - b2**t)
        else:
            v_hat = v / (1 - b2**t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
        out.append(p)
    return out


def run_steps(
    make: Callable[[list[ag.Tensor]], ag.optim.Optimizer], n_steps: int = 3
) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Step an optimizer with fixed random gradients; return start value, gradients, and the
    parameter after each step."""
    start = np.random.randn(3, 4)
    p = leaf(start)
    opt = make([p])
    grads = [np.random.randn(3, 4) for _ in range(n_steps)]
    seen = []
    for g in grads:
        p.grad = ag.tensor(g)
        opt.step()
        seen.append(p.array.copy())
    return start, grads, seen


def case_id(kwargs: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in kwargs.items()) or "defaults"


SGD_CASES = [
    {"lr": 0.1},
    {"lr": 0.1, "momentum": 0.9},
    {"lr": 0.05, "momentum": 0.8, "dampening": 0.3},
    {"lr": 0.1, "momentum": 0.9, "nesterov": True},
    {"lr": 0.1, "weight_decay": 0.01},
    {"lr": 0.1, "momentum": 0.5, "weight_decay": 0.1, "nesterov": True},
    {"lr": 0.1, "momentum": 0.9, "maximize": True},
]


@pytest.mark.parametrize("kwargs", SGD_CASES, ids=case_id)
def test_sgd_matches_torch_update_rule(kwargs: dict[str, Any]) -> None:
    start, grads, seen = run_steps(lambda ps: ag.optim.SGD(ps, **kwargs))
    for got, want in zip(seen, sgd_reference(start, grads, **kwargs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


ADAM_CASES = [
    {},
    {"lr": 0.1},
    {"lr": 0.01, "betas": (0.5, 0.9), "eps": 1e-3},
    {"lr": 0.01, "weight_decay": 0.1},
    {"lr": 0.01, "amsgrad": True},
    {"lr": 0.01, "maximize": True},
]


@pytest.mark.parametrize("kwargs", ADAM_CASES, ids=case_id)
def test_adam_matches_torch_update_rule(kwargs: dict[str, Any]) -> None:
    start, grads, seen = run_steps(lambda ps: ag.optim.Adam(ps, **kwargs))
    for got, want in zip(seen, adam_reference(start, grads, **kwargs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    "kwargs", [{}, {"lr": 0.1, "weight_decay": 0.5}, {"lr": 0.01, "amsgrad": True}], ids=case_id
)
def test_adamw_matches_torch_update_rule(kwargs: dict[str, Any]) -> None:
    start, grads, seen = run_steps(lambda ps: ag.optim.AdamW(ps, **kwargs))
    ref_kwargs = {"weight_decay": 1e-2, **kwargs, "decoupled": True}
    for got, want in zip(seen, adam_reference(start, grads, **ref_kwargs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_adam_update_in_float32() -> None:
    p = ag.tensor(np.random.randn(5).astype(np.float32), requires_grad=True)
    start = p.array.astype(np.float64)
    g = np.random.randn(5).astype(np.float32)
    p.grad = ag.tensor(g)
    ag.optim.Adam([p], lr=0.1).step()
    assert p.dtype == np.float32
    want = adam_reference(start, [g.astype(np.float64)], lr=0.1)[0]
    np.testing.assert_allclose(p.array, want, rtol=1e-6)


def test_parameters_without_grad_are_skipped() -> None:
    a, b = leaf(np.ones(2)), leaf(np.ones(2))
    for opt in (ag.optim.SGD([a, b], lr=0.1, momentum=0.9), ag.optim.Adam([a, b], lr=0.1)):
        a.grad = ag.ones(2, dtype=ag.float64)
        opt.step()
        np.testing.assert_array_equal(b.array, [1.0, 1.0])
        assert b not in opt.state
        assert a in opt.state


def test_optimizer_zero_grad() -> None:
    p = leaf(np.ones(3))
    opt = ag.optim.SGD([p], lr=0.1)
    p.grad = ag.ones(3, dtype=ag.float64)
    g = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is g
    assert not p.grad.array.any()
    opt.zero_grad()
    assert p.grad is None


def test_param_groups_have_their_own_hyperparameters() -> None:
    a, b = leaf(np.zeros(2)), leaf(np.zeros(2))
    opt = ag.optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1, momentum=0.5)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 1.0]
    assert opt.param_groups[1]["momentum"] == 0.5
    a.grad = ag.ones(2, dtype=ag.float64)
    b.grad = ag.ones(2, dtype=ag.float64)
    opt.step()
    np.testing.assert_allclose(a.array, [-0.1, -0.1])
    np.testing.assert_allclose(b.array, [-1.0, -1.0])
    opt.param_groups[0]["lr"] = 0.0  # what a learning-rate schedule does
    opt.step()
    np.testing.assert_allclose(a.array, [-0.1, -0.1])
    c = leaf(np.zeros(1))
    opt.add_param_group({"params": c, "lr": 0.5})
    assert opt.param_groups[2]["params"] == [c]
    with pytest.raises(ValueError, match="more than once"):
        opt.add_param_group({"params": [a]})


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: ag.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
        lambda ps: ag.optim.Adam(ps, lr=0.1, amsgrad=True),
        lambda ps: ag.optim.AdamW(ps, lr=0.1),
    ],
    ids=["sgd", "adam", "adamw"],
)
def test_optimizer_state_dict_round_trip(make: Callable[[list[ag.Tensor]], Any]) -> None:
    start = np.random.randn(2, 3)
    grads = [np.random.randn(2, 3) for _ in range(3)]
    p, q = leaf(start), leaf(start)
    opt_p = make([p])
    for g in grads[:2]:
        p.grad = ag.tensor(g)
        opt_p.step()
    sd = opt_p.state_dict()
    assert sd["param_groups"][0]["params"] == [0]
    assert set(sd["state"]) == {0}
    q.array[:] = p.array
    opt_q = make([q])
    opt_q.load_state_dict(sd)
    for opt, t in ((opt_p, p), (opt_q, q)):
        t.grad = ag.tensor(grads[2])
        opt.step()
    np.testing.assert_array_equal(p.array, q.array)
    # The saved state is a copy: stepping on did not change it.
    assert opt_p.state_dict()["state"][0].keys() == sd["state"][0].keys()
    for k, v in sd["state"][0].items():
        if isinstance(v, ag.Tensor):
            assert not np.shares_memory(v.array, next(iter(opt_p.state.values()))[k])


def test_step_bumps_the_version_and_stale_graphs_keep_their_weights() -> None:
    # See NOTE [Serving while training] (tests/test_serve_while_training.py has the details).
    lin = nn.Linear(3, 2)
    opt = ag.optim.SGD(lin.parameters(), lr=0.1)
    x = ag.randn(4, 3, requires_grad=True)
    weight = lin.weight.array.copy()
    stale = lin(x).sum()
    lin(ag.randn(4, 3)).sum().backward()
    version = lin.weight._version
    opt.step()
    assert lin.weight._version == version + 1
    stale.backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.array, np.broadcast_to(weight.sum(0), (4, 3)))


def test_step_with_closure_returns_the_loss() -> None:
    w = leaf([1.0, -2.0])
    opt = ag.optim.SGD([w], lr=0.25)

    def closure() -> ag.Tensor:
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with ag.no_grad():
        loss = opt.step(closure)  # the closure runs with grad enabled
    assert loss.item() == pytest.approx(5.0)
    np.testing.assert_allclose(w.array, [0.5, -1.0])


def test_optimizer_argument_errors() -> None:
    w = leaf([1.0])
    with pytest.raises(ValueError, match=r"Invalid learning rate: -0\.1"):
        ag.optim.SGD([w], lr=-0.1)
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        ag.optim.Adam([w], lr=-1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        ag.optim.AdamW([w], lr=-1e-3)
    with pytest.raises(ValueError, match="empty parameter list"):
        ag.optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        ag.optim.Adam(nn.ReLU().parameters())
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        ag.optim.SGD([w * 2], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        ag.optim.SGD(w, lr=0.1)
    with pytest.raises(TypeError, match="can only optimize Tensors"):
        ag.optim.SGD([np.ones(1)], lr=0.1)
    with pytest.raises(ValueError, match="more than once"):
        ag.optim.SGD([w, w], lr=0.1)
    with pytest.raises(ValueError, match="Invalid momentum value"):
        ag.optim.SGD([w], lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        ag.optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid weight_decay value"):
        ag.optim.SGD([w], lr=0.1, weight_decay=-1)
    with pytest.raises(ValueError, match=r"Invalid beta parameter at index 1: 1\.0"):
        ag.optim.Adam([w], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Invalid epsilon value"):
        ag.optim.Adam([w], eps=-1e-8)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        ag.optim.SGD([{"params": [w], "lr": -1.0}], lr=0.1)


# ============================================================================= training


def blobs(n: int = 64) -> tuple[ag.Tensor, ag.Tensor]:
    """Two classes in 2-D that a line cannot separate (XOR of the coordinates' signs)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(np.int64)
    return ag.from_numpy(x), ag.from_numpy(y)


def make_setup(optimizer: str) -> tuple[nn.Module, ag.optim.Optimizer]:
    ag.manual_seed(0)
    model = mlp((2, 16, 16, 2))
    if optimizer == "sgd":
        return model, ag.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, ag.optim.Adam(model.parameters(), lr=0.02)


N_STEPS = 60


def train_sync(optimizer: str) -> tuple[list[float], nn.Module]:
    model, opt = make_setup(optimizer)
    x, y = blobs()
    losses = []
    for _ in range(N_STEPS):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


async def train_async(optimizer: str) -> tuple[list[float], nn.Module]:
    model, opt = make_setup(optimizer)
    x, y = blobs()
    losses = []
    for _ in range(N_STEPS):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        await ag.backward(loss)
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mlp_trains_with_sync_backward(optimizer: str) -> None:
    losses, model = train_sync(optimizer)
    assert losses[-1] < 0.5 * losses[0]
    x, y = blobs()
    with ag.no_grad():
        accuracy = (model(x).argmax(dim=1).array == y.array).mean()
    assert accuracy > 0.9


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
async def test_mlp_trains_with_async_backward_exactly_as_sync(optimizer: str) -> None:
    losses, model = await train_async(optimizer)
    assert losses[-1] < 0.5 * losses[0]
    sync_losses, sync_model = train_sync(optimizer)
    assert losses == sync_losses
    for p, q in zip(model.parameters(), sync_model.parameters(), strict=True):
        np.testing.assert_array_equal(p.array, q.array)


async def test_concurrent_training_runs_do_not_interfere() -> None:
    (l1, m1), (l2, m2) = await asyncio.gather(train_async("sgd"), train_async("adam"))
    s1, sm1 = train_sync("sgd")
    s2, sm2 = train_sync("adam")
    assert l1 == s1
    assert l2 == s2
    for model, alone in ((m1, sm1), (m2, sm2)):
        for p, q in zip(model.parameters(), alone.parameters(), strict=True):
            np.testing.assert_array_equal(p.array, q.array)
