"""nn extras checked against torch: losses (functional and modules), activations, layer_norm,
embedding, attention, Module buffers/hooks/apply/casts, containers, nn.init and grad clipping."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is the reference for nn behaviour")


RNG = np.random.default_rng(0)


def _pair(torch: Any, a: Any) -> tuple[Any, Any]:
    """An asyncgrad tensor and a torch tensor of the same NumPy data (float ones require grad)."""
    if not isinstance(a, np.ndarray):
        return a, a
    rg = a.dtype.kind == "f"
    return (
        ag.tensor(a, requires_grad=rg),
        torch.tensor(a, requires_grad=rg),
    )


def check_vs_torch(
    torch: Any,
    ag_fn: Callable[..., Any],
    torch_fn: Callable[..., Any],
    *arrays: Any,
    atol: float = 1e-10,
) -> None:
    """Forward values and gradients of every float input, in float64, against torch."""
    pairs = [_pair(torch, a) for a in arrays]
    out = ag_fn(*(p[0] for p in pairs))
    ref = torch_fn(*(p[1] for p in pairs))
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-9, atol=atol)
    w = RNG.standard_normal(tuple(ref.shape))
    (out * ag.tensor(w)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    for (a_t, t_t), arr in zip(pairs, arrays, strict=True):
        if isinstance(arr, np.ndarray) and arr.dtype.kind == "f":
            if t_t.grad is None:  # the output does not depend on this input
                assert a_t.grad is None
                continue
            np.testing.assert_allclose(
                a_t.grad.numpy(), t_t.grad.numpy(), rtol=1e-8, atol=atol, err_msg="gradient"
            )


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


# ============================================================================ losses
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_indices(
    torch: Any, reduction: str, label_smoothing: float, weighted: bool
) -> None:
    x = randn(6, 4)
    y = np.array([0, 3, 1, -100, 2, 3])
    w = np.array([0.5, 1.0, 2.0, 1.5]) if weighted else None
    kw = {"ignore_index": -100, "reduction": reduction, "label_smoothing": label_smoothing}
    check_vs_torch(
        torch,
        lambda a: F.cross_entropy(a, ag.tensor(y), None if w is None else ag.tensor(w), **kw),
        lambda a: torch.nn.functional.cross_entropy(
            a, torch.tensor(y), None if w is None else torch.tensor(w), **kw
        ),
        x,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_probabilities(
    torch: Any, reduction: str, label_smoothing: float, weighted: bool
) -> None:
    x = randn(5, 3, 2)  # classes along dim 1, one extra dim
    p = np.exp(randn(5, 3, 2))
    p /= p.sum(1, keepdims=True)
    w = np.array([0.2, 1.0, 3.0]) if weighted else None
    kw = {"reduction": reduction, "label_smoothing": label_smoothing}
    check_vs_torch(
        torch,
        lambda a, t: F.cross_entropy(a, t, None if w is None else ag.tensor(w), **kw),
        lambda a, t: torch.nn.functional.cross_entropy(
            a, t, None if w is None else torch.tensor(w), **kw
        ),
        x,
        p,
    )


def test_cross_entropy_probabilities_one_sample(torch: Any) -> None:
    x, p = randn(4), np.array([0.1, 0.2, 0.3, 0.4])
    check_vs_torch(torch, F.cross_entropy, torch.nn.functional.cross_entropy, x, p)


def test_cross_entropy_spatial_indices(torch: Any) -> None:
    x = randn(2, 3, 4)
    y = RNG.integers(0, 3, (2, 4))
    check_vs_torch(
        torch,
        lambda a: F.cross_entropy(a, ag.tensor(y), label_smoothing=0.1),
        lambda a: torch.nn.functional.cross_entropy(a, torch.tensor(y), label_smoothing=0.1),
        x,
    )


@pytest.mark.parametrize(
    ("ishape", "tshape", "exc", "message"),
    [
        ((2, 5), (2, 1), RuntimeError, "0D or 1D target tensor expected, multi-target not"),
        ((2, 5), (3,), ValueError, r"Expected input batch_size \(2\) to match target batch_size"),
        ((5,), (2,), ValueError, "For 1D input, 1D target must have size 1"),
        ((2, 4, 5), (2, 4), RuntimeError, r"Expected target size \[2, 5\], got \[2, 4\]"),
    ],
)
def test_cross_entropy_target_shape_errors(
    torch: Any, ishape: tuple[int, ...], tshape: tuple[int, ...], exc: type, message: str
) -> None:
    target = np.zeros(tshape, dtype=np.int64)
    with pytest.raises(exc, match=message):
        torch.nn.functional.cross_entropy(torch.zeros(ishape), torch.tensor(target))
    with pytest.raises(exc, match=message):
        F.cross_entropy(ag.zeros(ishape), ag.tensor(target))


def test_cross_entropy_probability_target_of_wrong_shape(torch: Any) -> None:
    with pytest.raises(RuntimeError, match=r"Expected target size \[2, 3\], got \[2, 4\]"):
        F.cross_entropy(ag.zeros(2, 3), ag.zeros(2, 4))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_with_weight_and_ignore_index(torch: Any, reduction: str) -> None:
    x = randn(5, 3)
    y = np.array([2, 0, 1, 1, 0])
    w = np.array([1.0, 2.0, 0.5])
    check_vs_torch(
        torch,
        lambda a: F.nll_loss(a, ag.tensor(y), ag.tensor(w), ignore_index=1, reduction=reduction),
        lambda a: torch.nn.functional.nll_loss(
            a, torch.tensor(y), torch.tensor(w), ignore_index=1, reduction=reduction
        ),
        x,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_l1_and_mse_loss(torch: Any, reduction: str) -> None:
    x, t = randn(3, 4), randn(3, 4)
    tf = torch.nn.functional
    check_vs_torch(
        torch,
        lambda a, b: F.l1_loss(a, b, reduction),
        lambda a, b: tf.l1_loss(a, b, None, None, reduction),
        x,
        t,
    )
    check_vs_torch(
        torch,
        lambda a, b: F.mse_loss(a, b, reduction),
        lambda a, b: tf.mse_loss(a, b, None, None, reduction),
        x,
        t,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits(torch: Any, reduction: str) -> None:
    x = randn(4, 3) * 5
    t = RNG.random((4, 3))
    w = RNG.random((4, 3)) + 0.5
    pw = np.array([0.5, 2.0, 3.0])
    # weight and pos_weight are constants (torch does not differentiate with respect to them)
    check_vs_torch(
        torch,
        lambda a, b: F.binary_cross_entropy_with_logits(
            a, b, ag.tensor(w), reduction=reduction, pos_weight=ag.tensor(pw)
        ),
        lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(
            a, b, torch.tensor(w), reduction=reduction, pos_weight=torch.tensor(pw)
        ),
        x,
        t,
    )


def test_loss_modules_match_functional(torch: Any) -> None:
    x = randn(6, 4)
    y = np.array([0, 3, 1, 2, 2, 3])
    w = np.array([0.5, 1.0, 2.0, 1.5])
    tnn = torch.nn
    cases: list[tuple[Any, Any, np.ndarray, Any]] = [
        (
            nn.CrossEntropyLoss(ag.tensor(w), label_smoothing=0.1, ignore_index=3),
            tnn.CrossEntropyLoss(torch.tensor(w), label_smoothing=0.1, ignore_index=3),
            x,
            y,
        ),
        (nn.NLLLoss(reduction="sum"), tnn.NLLLoss(reduction="sum"), x, y),
        (nn.MSELoss(), tnn.MSELoss(), x, randn(6, 4)),
        (nn.L1Loss(reduction="none"), tnn.L1Loss(reduction="none"), x, randn(6, 4)),
        (
            nn.BCEWithLogitsLoss(pos_weight=ag.tensor(w)),
            tnn.BCEWithLogitsLoss(pos_weight=torch.tensor(w)),
            x,
            RNG.random((6, 4)),
        ),
    ]
    for mine, theirs, inp, target in cases:
        tgt_a, tgt_t = ag.tensor(target), torch.tensor(target)
        check_vs_torch(torch, lambda a: mine(a, tgt_a), lambda a: theirs(a, tgt_t), inp)  # noqa: B023
        assert repr(mine) == repr(theirs)


def test_loss_module_rejects_bad_reduction() -> None:
    with pytest.raises(ValueError, match="'avg' is not a valid value for reduction"):
        nn.MSELoss(reduction="avg")


def test_loss_weight_is_a_buffer() -> None:
    loss = nn.CrossEntropyLoss(weight=ag.ones(3))
    assert list(loss.state_dict()) == ["weight"]
    loss.double()
    assert loss.weight is not None
    assert loss.weight.dtype == ag.float64


# ============================================================================ activations etc.
def test_silu_softplus(torch: Any) -> None:
    x = randn(20) * 10
    tf = torch.nn.functional
    check_vs_torch(torch, F.silu, tf.silu, x)
    check_vs_torch(torch, F.softplus, tf.softplus, x)
    for beta, threshold in [(2.0, 20.0), (0.5, 3.0), (1.0, 1.0)]:
        check_vs_torch(
            torch,
            lambda a: F.softplus(a, beta, threshold),  # noqa: B023
            lambda a: tf.softplus(a, beta, threshold),  # noqa: B023
            x,
        )


def test_layer_norm(torch: Any) -> None:
    x, w, b = randn(3, 4, 5), randn(4, 5), randn(4, 5)
    check_vs_torch(
        torch,
        lambda a, c, d: F.layer_norm(a, (4, 5), c, d, eps=1e-3),
        lambda a, c, d: torch.nn.functional.layer_norm(a, (4, 5), c, d, eps=1e-3),
        x,
        w,
        b,
    )
    check_vs_torch(
        torch,
        lambda a: F.layer_norm(a, 5),
        lambda a: torch.nn.functional.layer_norm(a, (5,)),
        x,
    )


def test_embedding_with_padding_idx(torch: Any) -> None:
    idx = np.array([[0, 2, 1], [2, 2, 3]])
    w = randn(4, 3)
    check_vs_torch(
        torch,
        lambda a: F.embedding(ag.tensor(idx), a, padding_idx=2),
        lambda a: torch.nn.functional.embedding(torch.tensor(idx), a, padding_idx=2),
        w,
    )


@pytest.mark.parametrize(
    "kind", ["plain", "bool_mask", "float_mask", "causal", "scale", "causal_rectangular"]
)
def test_scaled_dot_product_attention(torch: Any, kind: str) -> None:
    n_q = 3 if kind == "causal_rectangular" else 4
    q, k, v = randn(2, 2, n_q, 5), randn(2, 2, 4, 5), randn(2, 2, 4, 3)
    kw: dict[str, Any] = {}
    kt: dict[str, Any] = {}
    if kind == "bool_mask":
        m = RNG.random((n_q, 4)) > 0.3
        m[:, 0] = True
        kw["attn_mask"], kt["attn_mask"] = ag.tensor(m), torch.tensor(m)
    elif kind == "float_mask":
        m = randn(2, 1, n_q, 4)
        kw["attn_mask"], kt["attn_mask"] = ag.tensor(m), torch.tensor(m)
    elif kind in ("causal", "causal_rectangular"):
        kw["is_causal"] = kt["is_causal"] = True
    elif kind == "scale":
        kw["scale"] = kt["scale"] = 0.3
    check_vs_torch(
        torch,
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, **kw),
        lambda a, b, c: torch.nn.functional.scaled_dot_product_attention(a, b, c, **kt),
        q,
        k,
        v,
    )


def test_scaled_dot_product_attention_errors(torch: Any) -> None:
    for lib in (ag, torch):
        q = lib.ones(1, 2, 3)
        sdpa = (F if lib is ag else torch.nn.functional).scaled_dot_product_attention
        with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when"):
            sdpa(q, q, q, attn_mask=lib.ones(2, 2, dtype=lib.bool), is_causal=True)
        with pytest.raises(RuntimeError, match="Expected attn_mask dtype to be bool or float"):
            sdpa(q, q, q, attn_mask=lib.ones(2, 2, dtype=lib.long))


def test_scaled_dot_product_attention_dropout() -> None:
    q = ag.randn(1, 4, 8, dtype=ag.float64)
    plain = F.scaled_dot_product_attention(q, q, q)
    ag.manual_seed(5)
    one = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    ag.manual_seed(5)
    two = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert ag.equal(one, two)
    assert not ag.allclose(one, plain)
    assert ag.equal(F.scaled_dot_product_attention(q, q, q, dropout_p=0.0), plain)


# ============================================================================ Module features
class WithBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("running", ag.zeros(2))
        self.register_buffer("scratch", ag.ones(2), persistent=False)
        self.register_buffer("steps", ag.tensor(0))

    def forward(self, x: ag.Tensor) -> ag.Tensor:
        return self.lin(x) + self.running


class TorchWithBuffers:  # built lazily: torch is optional
    @staticmethod
    def make(torch: Any) -> Any:
        class M(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lin = torch.nn.Linear(3, 2)
                self.register_buffer("running", torch.zeros(2))
                self.register_buffer("scratch", torch.ones(2), persistent=False)
                self.register_buffer("steps", torch.tensor(0))

        return M()


def test_buffers_in_state_dict_as_torch(torch: Any) -> None:
    m, t = WithBuffers(), TorchWithBuffers.make(torch)
    assert list(m.state_dict()) == list(t.state_dict())
    assert [n for n, _ in m.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert len(list(m.buffers())) == 3


def test_buffers_load_and_cast() -> None:
    m = WithBuffers()
    sd = m.state_dict()
    sd["running"] = ag.tensor([1.0, 2.0])
    m.load_state_dict(sd)
    assert m.running.tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="Missing key"):
        m.load_state_dict({k: v for k, v in sd.items() if k != "running"})
    m.double()
    assert m.lin.weight.dtype == ag.float64
    assert m.running.dtype == ag.float64
    assert m.scratch.dtype == ag.float64
    assert m.steps.dtype == ag.int64  # only floating-point state changes dtype
    m.half()
    assert m.running.dtype == ag.float16
    assert m.lin.bias is not None
    assert m.lin.bias.dtype == ag.float16
    m.float()
    assert m.lin.weight.dtype == ag.float32
    assert m.steps.dtype == ag.int64
    m.to(ag.float64)
    assert m.running.dtype == ag.float64


def test_buffers_move_with_to() -> None:
    m = WithBuffers()
    m.to("cuda:0")
    assert m.running.device == ag.device("cuda:0")
    assert m.lin.weight.device == ag.device("cuda:0")
    out = m(ag.randn(1, 3, device="cuda:0"))
    assert out.device == ag.device("cuda:0")
    m.to("cpu")
    assert m.running.device == ag.device("cpu")


def test_buffer_assignment_and_errors(torch: Any) -> None:
    m = WithBuffers()
    m.running = ag.ones(2)
    assert m.state_dict()["running"].tolist() == [1.0, 1.0]
    m.running = None  # type: ignore[assignment]
    assert "running" not in m.state_dict()
    t = TorchWithBuffers.make(torch)
    for obj, tensor_cls in ((m, ag.zeros), (t, torch.zeros)):
        with pytest.raises(KeyError, match="attribute 'lin' already exists"):
            obj.register_buffer("lin", tensor_cls(1))
        with pytest.raises(KeyError, match=r'buffer name can\\?\'t contain "\."'):
            obj.register_buffer("a.b", tensor_cls(1))
        with pytest.raises(TypeError, match="cannot assign 'int' as buffer 'steps'"):
            obj.steps = 3
        with pytest.raises(TypeError, match="cannot assign 'int' object to buffer 'x'"):
            obj.register_buffer("x", 3)


def test_forward_hooks(torch: Any) -> None:
    m = nn.Linear(2, 2)
    calls: list[str] = []

    def pre(mod: Any, args: tuple[Any, ...]) -> Any:
        calls.append("pre")
        return args[0] * 0  # a single value replaces the positional args

    def post(mod: Any, args: tuple[Any, ...], out: Any) -> Any:
        calls.append("post")
        assert ag.equal(args[0], ag.zeros(1, 2))
        return out + 1

    h1 = m.register_forward_pre_hook(pre)
    h2 = m.register_forward_hook(post)
    out = m(ag.ones(1, 2))
    assert calls == ["pre", "post"]
    assert m.bias is not None
    assert ag.allclose(out, m.bias + 1)
    h1.remove()
    h2.remove()
    h2.remove()  # a second remove is harmless, as in torch
    calls.clear()
    assert ag.allclose(m(ag.zeros(1, 2)), m.bias)
    assert calls == []
    order: list[int] = []
    m.register_forward_hook(lambda *a: order.append(1))
    m.register_forward_hook(lambda *a: order.append(0), prepend=True)
    with m.register_forward_hook(lambda *a: order.append(2)):
        m(ag.zeros(1, 2))
    m(ag.zeros(1, 2))
    assert order == [0, 1, 2, 0, 1]


def test_apply_visits_children_first_and_inits() -> None:
    net = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1)))
    seen: list[str] = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Linear", "Sequential", "Sequential"]

    def init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.ones_(m.weight)

    assert net.apply(init) is net
    assert ag.equal(net[0].weight, ag.ones(3, 2))


def test_modules_and_requires_grad(torch: Any) -> None:
    net = nn.Sequential(nn.Linear(2, 3), nn.Flatten(), nn.ModuleDict({"a": nn.Identity()}))
    tnet = torch.nn.Sequential(
        torch.nn.Linear(2, 3), torch.nn.Flatten(), torch.nn.ModuleDict({"a": torch.nn.Identity()})
    )
    assert [n for n, _ in net.named_modules()] == [n for n, _ in tnet.named_modules()]
    assert len(list(net.modules())) == 5
    assert repr(net) == repr(tnet)
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_reprs_match_torch(torch: Any) -> None:
    def build(n: Any) -> Any:
        blocks = [n.Linear(2, 2) for _ in range(3)]
        return n.Sequential(
            n.ModuleList([*blocks, n.ReLU(), n.ReLU(), n.Linear(2, 3)]),
            n.Sequential(n.Dropout(0.1), n.LayerNorm(4, eps=1e-6), n.Embedding(5, 2, 1)),
            n.ModuleList([]),
            n.GELU("tanh"),
            n.Flatten(0, 2),
            n.ModuleDict({"tanh": n.Tanh(), "sig": n.Sigmoid()}),
            n.CrossEntropyLoss(),
        )

    assert repr(build(nn)) == repr(build(torch.nn))

    class WithExtra(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(1, 1)

        def extra_repr(self) -> str:
            return "k=1"

    assert repr(WithExtra()) == (
        "WithExtra(\n  k=1\n  (lin): Linear(in_features=1, out_features=1, bias=True)\n)"
    )


def test_identity_flatten(torch: Any) -> None:
    x = randn(2, 3, 4, 5)
    ident = nn.Identity(54, unused="ignored")
    t = ag.tensor(x)
    assert ident(t) is t
    for args in [(), (0,), (1, 2), (2, -1), (-3, -2)]:
        mine = nn.Flatten(*args)(t)
        ref = torch.nn.Flatten(*args)(torch.tensor(x))
        assert mine.shape == tuple(ref.shape)
        np.testing.assert_array_equal(mine.numpy(), ref.numpy())
        assert repr(nn.Flatten(*args)) == repr(torch.nn.Flatten(*args))


def test_module_dict(torch: Any) -> None:
    d = nn.ModuleDict({"b": nn.Linear(1, 1), "a": nn.ReLU()})
    d["c"] = nn.Tanh()
    d.update([("b", nn.Linear(1, 2))])  # replacing keeps the position
    assert list(d) == ["b", "a", "c"] == list(d.keys())
    assert "a" in d
    assert len(d) == 3
    assert isinstance(d["b"], nn.Linear)
    assert d["b"].out_features == 2
    assert [n for n, _ in d.named_parameters()] == ["b.weight", "b.bias"]
    assert isinstance(d.pop("a"), nn.ReLU)
    del d["c"]
    assert next(iter(d.items()))[0] == "b"
    assert len(d) == 1
    with pytest.raises(TypeError, match="ModuleDict holds Modules"):
        d["x"] = 3  # type: ignore[assignment]
    d.clear()
    assert len(d) == 0
    t = torch.nn.ModuleDict({"lin": torch.nn.Linear(1, 1)})
    assert repr(nn.ModuleDict({"lin": nn.Linear(1, 1)})) == repr(t)


# ============================================================================ nn.init
def test_calculate_gain(torch: Any) -> None:
    for name, param in [
        ("linear", None),
        ("conv2d", None),
        ("sigmoid", None),
        ("tanh", None),
        ("relu", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.2),
        ("selu", None),
    ]:
        assert nn.init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param), rel=1e-15
        )
    for bad, pattern in [
        (("swish", None), "Unsupported nonlinearity swish"),
        (("leaky_relu", "x"), "negative_slope x not a valid number"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            torch.nn.init.calculate_gain(*bad)
        with pytest.raises(ValueError, match=pattern):
            nn.init.calculate_gain(*bad)


@pytest.mark.parametrize("shape", [(64, 32), (16, 8, 3, 3), (200, 1)])
def test_init_bounds_and_std(torch: Any, shape: tuple[int, ...]) -> None:
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    g = ag.Generator().manual_seed(0)
    w = nn.Parameter(ag.empty(*shape))
    n = math.prod(shape)
    tol = 4 / math.sqrt(n)  # a few standard errors of the sample's spread
    for fn, kw, bound, std in [
        (nn.init.kaiming_uniform_, {}, math.sqrt(6 / (1 + 0.01**2) / fan_in), None),
        (nn.init.kaiming_uniform_, {"a": math.sqrt(5)}, 1 / math.sqrt(fan_in), None),
        (
            nn.init.kaiming_uniform_,
            {"mode": "fan_out", "nonlinearity": "relu"},
            math.sqrt(6 / fan_out),
            None,
        ),
        (nn.init.xavier_uniform_, {"gain": 2.0}, 2 * math.sqrt(6 / (fan_in + fan_out)), None),
        (nn.init.uniform_, {"a": -0.5, "b": 0.5}, 0.5, None),
        (nn.init.kaiming_normal_, {"nonlinearity": "relu"}, None, math.sqrt(2 / fan_in)),
        (nn.init.xavier_normal_, {}, None, math.sqrt(2 / (fan_in + fan_out))),
        (nn.init.normal_, {"std": 0.02}, None, 0.02),
    ]:
        out = fn(w, generator=g, **kw)  # type: ignore[operator]
        assert out is w
        assert w.grad_fn is None
        assert w.requires_grad
        a = w.detach().numpy()
        if bound is not None:
            assert np.abs(a).max() <= bound
            assert np.abs(a).max() >= bound * 0.9
            assert a.std() == pytest.approx(bound / math.sqrt(3), rel=tol)
        else:
            assert a.std() == pytest.approx(std, rel=tol)


def test_init_reproducible_constant_and_errors(torch: Any) -> None:
    a, b = ag.empty(4, 5), ag.empty(4, 5)
    nn.init.kaiming_uniform_(a, generator=ag.Generator().manual_seed(7))
    nn.init.kaiming_uniform_(b, generator=ag.Generator().manual_seed(7))
    assert ag.equal(a, b)
    ag.manual_seed(3)
    nn.init.normal_(a)
    ag.manual_seed(3)
    nn.init.normal_(b)
    assert ag.equal(a, b)
    p = nn.Parameter(ag.empty(3))
    assert ag.equal(nn.init.constant_(p, 0.25), ag.full((3,), 0.25))
    assert ag.equal(nn.init.zeros_(p), ag.zeros(3))
    assert p.grad_fn is None
    assert ag.equal(nn.init.ones_(p), ag.ones(3))
    fans = "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
    with pytest.raises(ValueError, match=fans):
        torch.nn.init.xavier_uniform_(torch.empty(3))
    with pytest.raises(ValueError, match=fans):
        nn.init.xavier_uniform_(ag.empty(3))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        nn.init.kaiming_normal_(ag.empty(2, 2), mode="fan_avg")
    half = ag.empty(8, 8, dtype=ag.float16)
    nn.init.xavier_normal_(half)
    assert half.dtype == ag.float16


@pytest.mark.cuda
def test_init_on_cuda() -> None:
    w = nn.Parameter(ag.empty(5, 4, device="cuda:0"))
    nn.init.kaiming_uniform_(w, generator=ag.Generator().manual_seed(1))
    assert w.device == ag.device("cuda:0")
    assert float(w.abs().max().item()) <= math.sqrt(6 / (1 + 0.01**2) / 4)


# ============================================================================ clipping
def _grads_pair(torch: Any) -> tuple[list[Any], list[Any]]:
    shapes = [(3, 4), (5,), (2, 2, 2)]
    grads = [randn(*s) for s in shapes]
    mine = [nn.Parameter(ag.zeros(*s, dtype=ag.float64)) for s in shapes]
    theirs = [torch.zeros(*s, dtype=torch.float64, requires_grad=True) for s in shapes]
    for p, t, g in zip(mine, theirs, grads, strict=True):
        p.grad = ag.tensor(g)
        t.grad = torch.tensor(g)
    extra = nn.Parameter(ag.zeros(2))  # no grad: skipped
    return [*mine, extra], theirs


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm(torch: Any, norm_type: float, max_norm: float) -> None:
    mine, theirs = _grads_pair(torch)
    total = nn.utils.clip_grad_norm_(mine, max_norm, norm_type)
    ref = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert isinstance(total, ag.Tensor)
    assert total.item() == pytest.approx(ref.item(), rel=1e-12)
    for p, t in zip(mine, theirs, strict=False):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_clip_grad_norm_nonfinite_and_single_tensor(torch: Any) -> None:
    p = nn.Parameter(ag.zeros(2))
    p.grad = ag.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match=r"The total norm of order 2\.0 for gradients"):
        nn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
    q = nn.Parameter(ag.zeros(2))
    q.grad = ag.tensor([3.0, 4.0])
    assert nn.utils.clip_grad_norm_(q, 1.0, foreach=True).item() == pytest.approx(5.0)
    assert q.grad.tolist() == pytest.approx([0.6, 0.8], rel=1e-5)
    assert nn.utils.clip_grad_norm_([nn.Parameter(ag.zeros(1))], 1.0).item() == 0.0


def test_clip_grad_value(torch: Any) -> None:
    mine, theirs = _grads_pair(torch)
    assert nn.utils.clip_grad_value_(mine, 0.3) is None
    torch.nn.utils.clip_grad_value_(theirs, 0.3)
    for p, t in zip(mine, theirs, strict=False):
        np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())


# ============================================================================ MultiheadAttention
@pytest.mark.parametrize(
    "kind", ["plain", "bool_masks", "float_masks", "per_head_mask", "unbatched", "kdim_vdim"]
)
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_torch(torch: Any, kind: str, batch_first: bool) -> None:
    n, n_q, n_k, e, h = 3, 4, 5, 8, 2
    kw: dict[str, Any] = {"batch_first": batch_first}
    if kind == "kdim_vdim":
        kw.update(kdim=6, vdim=7)
    theirs = torch.nn.MultiheadAttention(e, h, dtype=torch.float64, **kw)
    mine = nn.MultiheadAttention(e, h, dtype=ag.float64, **kw)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict({k: ag.tensor(v.numpy()) for k, v in theirs.state_dict().items()})

    def layout(*shape: int) -> np.ndarray:
        if kind == "unbatched":
            return randn(*shape[1:])
        a = randn(*shape)
        return a if batch_first else a.transpose(1, 0, 2).copy()

    q = layout(n, n_q, e)
    k = layout(n, n_k, kw.get("kdim", e))
    v = layout(n, n_k, kw.get("vdim", e))
    masks_a: dict[str, Any] = {}
    masks_t: dict[str, Any] = {}
    if kind in ("bool_masks", "float_masks", "per_head_mask"):
        if kind == "bool_masks":
            am = np.triu(np.ones((n_q, n_k), bool), 2)
            kpm = np.zeros((n, n_k), bool)
            kpm[:, -1] = True
        elif kind == "float_masks":
            am, kpm = randn(n_q, n_k), randn(n, n_k)
        else:
            am, kpm = randn(n * h, n_q, n_k), None
        masks_a["attn_mask"], masks_t["attn_mask"] = ag.tensor(am), torch.tensor(am)
        if kpm is not None:
            masks_a["key_padding_mask"] = ag.tensor(kpm)
            masks_t["key_padding_mask"] = torch.tensor(kpm)
    for average in (True, False):
        check_vs_torch(
            torch,
            lambda a, b, c: mine(a, b, c, average_attn_weights=average, **masks_a)[1],  # noqa: B023
            lambda a, b, c: theirs(a, b, c, average_attn_weights=average, **masks_t)[1],  # noqa: B023
            q,
            k,
            v,
        )
    check_vs_torch(
        torch,
        lambda a, b, c: mine(a, b, c, need_weights=False, **masks_a)[0],
        lambda a, b, c: theirs(a, b, c, need_weights=False, **masks_t)[0],
        q,
        k,
        v,
    )
    assert mine(ag.tensor(q), ag.tensor(k), ag.tensor(v), need_weights=False)[1] is None
    # the parameters' gradients too
    out = mine(ag.tensor(q), ag.tensor(k), ag.tensor(v), **masks_a)[0]
    ref = theirs(torch.tensor(q), torch.tensor(k), torch.tensor(v), **masks_t)[0]
    out.sum().backward()
    ref.sum().backward()
    grads = {n: p.grad for n, p in theirs.named_parameters()}
    for name, p in mine.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[name].numpy(), rtol=1e-8, atol=1e-10)


def test_multihead_attention_errors_and_dropout() -> None:
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        nn.MultiheadAttention(6, 4)
    m = nn.MultiheadAttention(4, 2, dropout=0.5, batch_first=True)
    x = ag.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)
    m.eval()
    a, _ = m(x, x, x)
    b, _ = m(x, x, x)
    assert ag.equal(a, b)
    m.train()
    ag.manual_seed(0)
    c, _ = m(x, x, x)
    assert not ag.allclose(a, c)


@pytest.mark.cuda
def test_losses_on_cuda_match_cpu() -> None:
    x = ag.randn(4, 3, dtype=ag.float64)
    p = ag.softmax(ag.randn(4, 3, dtype=ag.float64), 1)
    y = ag.tensor([0, 2, 1, 2])
    w = ag.tensor([1.0, 2.0, 0.5], dtype=ag.float64)
    for loss in (
        nn.CrossEntropyLoss(w, label_smoothing=0.1),
        nn.NLLLoss(w),
        nn.BCEWithLogitsLoss(pos_weight=w),
    ):
        target = p if isinstance(loss, nn.BCEWithLogitsLoss) else y
        on_cpu = loss(x, target)
        loss.to("cuda:0")
        assert loss.weight is None or loss.weight.device == ag.device("cuda:0")
        on_gpu = loss(x.to("cuda:0"), target.to("cuda:0"))
        assert on_gpu.device == ag.device("cuda:0")
        assert ag.allclose(on_gpu.cpu(), on_cpu)
    soft = nn.CrossEntropyLoss(label_smoothing=0.2)
    assert ag.allclose(soft(x.to("cuda:0"), p.to("cuda:0")).cpu(), soft(x, p))
