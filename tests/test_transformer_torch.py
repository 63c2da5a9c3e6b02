"""nn.MultiheadAttention (add_bias_kv, add_zero_attn, kdim/vdim, batch_first, need_weights,
average_attn_weights, masks, is_causal), F.multi_head_attention_forward, and nn.Transformer,
TransformerEncoder, TransformerDecoder, TransformerDecoderLayer against torch with torch's
weights loaded through state_dict: outputs, attention weights and every gradient; finite
differences for a sample; torch's errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag
from asyncgrad import nn
from asyncgrad.nn import functional as F

torch = pytest.importorskip("torch", reason="compares with torch")

RNG = np.random.default_rng(7)


def _load_from(tm: Any, am: nn.Module) -> None:
    assert list(am.state_dict()) == list(tm.state_dict())
    am.load_state_dict({k: ag.tensor(v.numpy()) for k, v in tm.state_dict().items()})


def _np(t: Any) -> np.ndarray:
    return np.asarray(t.detach().numpy())


def _both(v: Any) -> tuple[Any, Any]:
    if isinstance(v, np.ndarray):
        return ag.tensor(v), torch.tensor(v)
    return v, v


def _check_grads(am: Any, tm: Any, ins_a: list[Any], ins_t: list[Any]) -> None:
    for (n, pa), pt in zip(am.named_parameters(), tm.parameters(), strict=True):
        np.testing.assert_allclose(pa.grad.numpy(), pt.grad.numpy(), atol=1e-10, err_msg=n)
    for a, t in zip(ins_a, ins_t, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-10)


L, S, N, E = 4, 5, 3, 8
CAUSAL = np.triu(np.ones((L, S)), 1).astype(bool)
KPM = np.zeros((N, S), dtype=bool)
KPM[0, 1] = True
KPM[2, -1] = True

MHA_CASES = [
    {},
    {"add_bias_kv": True},
    {"add_zero_attn": True},
    {"add_bias_kv": True, "add_zero_attn": True, "bias": False},
    {"kdim": 3, "vdim": 5},
    {"kdim": 3, "vdim": 5, "batch_first": True, "add_bias_kv": True},
]
CALLS = [
    {},
    {"key_padding_mask": KPM, "attn_mask": CAUSAL},
    {"attn_mask": np.where(CAUSAL, -1.5, 0.25), "average_attn_weights": False},
    {"attn_mask": CAUSAL, "need_weights": False},
    {"key_padding_mask": np.where(KPM, -2.0, 0.0)},
    {"attn_mask": np.tile(np.where(CAUSAL, -1.0, 0.5), (N * 2, 1, 1))},
]


@pytest.mark.parametrize(
    ("kwargs", "call"),
    [(k, c) for i, k in enumerate(MHA_CASES) for j, c in enumerate(CALLS) if (i + j) % 2 == 0],
)
def test_multihead_attention_matches_torch(kwargs: dict[str, Any], call: dict[str, Any]) -> None:
    tm = torch.nn.MultiheadAttention(E, 2, **kwargs).double()
    am = nn.MultiheadAttention(E, 2, **kwargs).double()
    assert repr(am) == repr(tm)
    _load_from(tm, am)
    bf = kwargs.get("batch_first", False)
    kd, vd = kwargs.get("kdim", E), kwargs.get("vdim", E)
    shapes = [(L, N, E), (S, N, kd), (S, N, vd)]
    arrays = [RNG.standard_normal((s[1], s[0], s[2]) if bf else s) for s in shapes]
    ins_a = [ag.tensor(a, requires_grad=True) for a in arrays]
    ins_t = [torch.tensor(a, requires_grad=True) for a in arrays]
    extra_a = {k: _both(v)[0] for k, v in call.items()}
    extra_t = {k: _both(v)[1] for k, v in call.items()}
    out_a, w_a = am(*ins_a, **extra_a)
    out_t, w_t = tm(*ins_t, **extra_t)
    np.testing.assert_allclose(_np(out_a), _np(out_t), atol=1e-12)
    assert (w_a is None) == (w_t is None)
    if w_t is not None:
        assert tuple(w_a.shape) == tuple(w_t.shape)
        np.testing.assert_allclose(_np(w_a), _np(w_t), atol=1e-12)
    g = RNG.standard_normal(tuple(out_t.shape))
    loss_a = (out_a * ag.tensor(g)).sum()
    loss_t = (out_t * torch.tensor(g)).sum()
    if w_t is not None:
        loss_a = loss_a + w_a.sum() * 0.5
        loss_t = loss_t + w_t.sum() * 0.5
    loss_a.backward()
    loss_t.backward()
    _check_grads(am, tm, ins_a, ins_t)


def test_multihead_attention_unbatched_matches_torch() -> None:
    tm = torch.nn.MultiheadAttention(E, 4, add_bias_kv=True).double()
    am = nn.MultiheadAttention(E, 4, add_bias_kv=True).double()
    _load_from(tm, am)
    q, k = RNG.standard_normal((L, E)), RNG.standard_normal((S, E))
    kpm = np.zeros(S)
    kpm[2] = -np.inf
    mask3 = np.where(np.tile(CAUSAL, (4, 1, 1)), -1.0, 0.0)
    out_a, w_a = am(
        *map(ag.tensor, (q, k, k)), key_padding_mask=ag.tensor(kpm), attn_mask=ag.tensor(mask3)
    )
    out_t, w_t = tm(
        *map(torch.tensor, (q, k, k)),
        key_padding_mask=torch.tensor(kpm),
        attn_mask=torch.tensor(mask3),
    )
    np.testing.assert_allclose(_np(out_a), _np(out_t), atol=1e-12)
    np.testing.assert_allclose(_np(w_a), _np(w_t), atol=1e-12)


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_is_causal_matches_torch(need_weights: bool) -> None:
    tm, am = torch.nn.MultiheadAttention(E, 2).double(), nn.MultiheadAttention(E, 2).double()
    _load_from(tm, am)
    x = RNG.standard_normal((L, N, E))
    mask = np.triu(np.ones((L, L)), 1).astype(bool)
    out_a, _ = am(
        *(ag.tensor(x),) * 3, attn_mask=ag.tensor(mask), is_causal=True, need_weights=need_weights
    )
    out_t, _ = tm(
        *(torch.tensor(x),) * 3,
        attn_mask=torch.tensor(mask),
        is_causal=True,
        need_weights=need_weights,
    )
    np.testing.assert_allclose(_np(out_a), _np(out_t), atol=1e-12)


def test_multi_head_attention_forward_matches_torch() -> None:
    e, h = 6, 3
    arrays = {
        "query": RNG.standard_normal((L, N, e)),
        "key": RNG.standard_normal((S, N, e)),
        "value": RNG.standard_normal((S, N, e)),
        "in_proj_weight": RNG.standard_normal((3 * e, e)),
        "in_proj_bias": RNG.standard_normal(3 * e),
        "bias_k": RNG.standard_normal((1, 1, e)),
        "bias_v": RNG.standard_normal((1, 1, e)),
        "out_proj_weight": RNG.standard_normal((e, e)),
        "out_proj_bias": RNG.standard_normal(e),
    }
    ta = {k: ag.tensor(v, requires_grad=True) for k, v in arrays.items()}
    tt = {k: torch.tensor(v, requires_grad=True) for k, v in arrays.items()}
    common = {"embed_dim_to_check": e, "num_heads": h, "add_zero_attn": True, "dropout_p": 0.0}
    out_a, w_a = F.multi_head_attention_forward(
        **ta, **common, key_padding_mask=ag.tensor(KPM), attn_mask=ag.tensor(CAUSAL)
    )
    out_t, w_t = torch.nn.functional.multi_head_attention_forward(
        **tt, **common, key_padding_mask=torch.tensor(KPM), attn_mask=torch.tensor(CAUSAL)
    )
    np.testing.assert_allclose(_np(out_a), _np(out_t), atol=1e-12)
    np.testing.assert_allclose(_np(w_a), _np(w_t), atol=1e-12)
    (out_a.sum() + w_a.sum()).backward()
    (out_t.sum() + w_t.sum()).backward()
    for k in arrays:
        np.testing.assert_allclose(ta[k].grad.numpy(), tt[k].grad.numpy(), atol=1e-10, err_msg=k)


def test_multi_head_attention_forward_static_kv_and_separate_weights() -> None:
    e, h = 4, 2
    q = RNG.standard_normal((L, N, e))
    kv = RNG.standard_normal((S, N, 3))
    ws = [RNG.standard_normal((e, e)), RNG.standard_normal((e, 3)), RNG.standard_normal((e, 3))]
    out_w = RNG.standard_normal((e, e))
    sk, sv = RNG.standard_normal((N * h, S, e // h)), RNG.standard_normal((N * h, S, e // h))
    res = []
    for lib in (ag, torch):
        fn = lib.nn.functional.multi_head_attention_forward
        t = lib.tensor
        out, _ = fn(
            t(q),
            t(kv),
            t(kv),
            e,
            h,
            None,
            None,
            None,
            None,
            False,
            0.0,
            t(out_w),
            None,
            use_separate_proj_weight=True,
            q_proj_weight=t(ws[0]),
            k_proj_weight=t(ws[1]),
            v_proj_weight=t(ws[2]),
            static_k=t(sk),
            static_v=t(sv),
            need_weights=False,
        )
        res.append(_np(out))
    np.testing.assert_allclose(res[0], res[1], atol=1e-12)


def test_mismatched_mask_types_warn_as_torch() -> None:
    x = RNG.standard_normal((L, N, E))
    for lib in (ag, torch):
        m = lib.nn.MultiheadAttention(E, 2)
        t = lib.tensor(x, dtype=lib.float32)
        with pytest.warns(UserWarning, match="Support for mismatched key_padding_mask and attn"):
            m(
                t,
                t,
                t,
                key_padding_mask=lib.tensor(np.zeros((N, L), dtype=bool)),
                attn_mask=lib.zeros(L, L),
            )


def test_multihead_attention_gradcheck() -> None:
    m = nn.MultiheadAttention(4, 2, add_bias_kv=True, add_zero_attn=True).double()
    x = ag.tensor(RNG.standard_normal((3, 2, 4)), requires_grad=True)
    mask = ag.tensor(np.triu(np.ones((3, 3)), 1).astype(bool))

    def f(t: ag.Tensor) -> ag.Tensor:
        return m(t, t, t, attn_mask=mask)[0]  # type: ignore[no-any-return]

    assert ag.autograd.gradcheck(f, (x,))
    assert ag.autograd.gradgradcheck(f, (x,))


LAYER_CASES = [
    {},
    {"batch_first": True, "norm_first": True, "activation": "gelu"},
    {"bias": False, "layer_norm_eps": 1e-3},
]


def _io(bf: bool, *lengths: int) -> list[np.ndarray]:
    return [RNG.standard_normal((N, n, E) if bf else (n, N, E)) for n in lengths]


def _check_both(am: Any, tm: Any, arrays: list[np.ndarray], extra: dict[str, Any]) -> None:
    """``am`` and ``tm`` on ``arrays`` (each a leaf) with the keyword arguments ``extra`` (masks
    as arrays, flags): the same output, then the same gradients for one output gradient."""
    ins_a = [ag.tensor(a, requires_grad=True) for a in arrays]
    ins_t = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_a = am(*ins_a, **{k: _both(v)[0] for k, v in extra.items()})
    out_t = tm(*ins_t, **{k: _both(v)[1] for k, v in extra.items()})
    np.testing.assert_allclose(_np(out_a), _np(out_t), atol=1e-12)
    g = RNG.standard_normal(tuple(out_t.shape))
    out_a.backward(ag.tensor(g))
    out_t.backward(torch.tensor(g))
    _check_grads(am, tm, ins_a, ins_t)


@pytest.mark.parametrize(
    ("kwargs", "masks"), [(LAYER_CASES[0], True), (LAYER_CASES[1], True), (LAYER_CASES[2], False)]
)
def test_transformer_decoder_layer_matches_torch(kwargs: dict[str, Any], masks: bool) -> None:
    tm = torch.nn.TransformerDecoderLayer(E, 2, 16, 0.0, **kwargs).double()
    am = nn.TransformerDecoderLayer(E, 2, 16, 0.0, **kwargs).double()
    _load_from(tm, am)
    arrays = _io(kwargs.get("batch_first", False), L, S)
    extra: dict[str, Any] = {}
    if masks:
        extra = {
            "tgt_mask": np.triu(np.ones((L, L)), 1).astype(bool),
            "memory_mask": CAUSAL,
            "tgt_key_padding_mask": np.zeros((N, L), dtype=bool),
            "memory_key_padding_mask": KPM,
        }
    _check_both(am, tm, arrays, extra)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's fast path only
@pytest.mark.parametrize(("kwargs", "masks"), [(LAYER_CASES[0], True), (LAYER_CASES[1], False)])
def test_transformer_matches_torch(kwargs: dict[str, Any], masks: bool) -> None:
    tm = torch.nn.Transformer(E, 2, 1, 1, 16, 0.0, **kwargs).double()
    am = nn.Transformer(E, 2, 1, 1, 16, 0.0, **kwargs).double()
    _load_from(tm, am)
    arrays = _io(kwargs.get("batch_first", False), S, L)
    extra: dict[str, Any] = {}
    if masks:
        extra = {
            "tgt_mask": tm.generate_square_subsequent_mask(L, dtype=torch.float64).numpy(),
            "src_key_padding_mask": KPM,
            "memory_key_padding_mask": KPM,
            "tgt_is_causal": True,
        }
    _check_both(am, tm, arrays, extra)


@pytest.mark.parametrize("with_norm", [False, True])
def test_transformer_encoder_and_decoder_stacks_match_torch(with_norm: bool) -> None:
    enc_t = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(E, 2, 16, 0.0, activation=torch.nn.GELU()),
        3,
        torch.nn.LayerNorm(E) if with_norm else None,
        enable_nested_tensor=False,
    ).double()
    enc_a = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(E, 2, 16, 0.0, activation=nn.GELU()),
        3,
        nn.LayerNorm(E) if with_norm else None,
    ).double()
    dec_t = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(E, 2, 16, 0.0), 2).double()
    dec_a = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, 2, 16, 0.0), 2).double()
    _load_from(enc_t, enc_a)
    _load_from(dec_t, dec_a)
    src, tgt = _io(False, S, L)
    causal_src = np.triu(np.ones((S, S)), 1).astype(bool)
    mem_a = enc_a(ag.tensor(src), mask=ag.tensor(causal_src), src_key_padding_mask=ag.tensor(KPM))
    mem_t = enc_t(
        torch.tensor(src), mask=torch.tensor(causal_src), src_key_padding_mask=torch.tensor(KPM)
    )
    np.testing.assert_allclose(_np(mem_a), _np(mem_t), atol=1e-12)
    out_a = dec_a(
        ag.tensor(tgt),
        mem_a,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(L, dtype=ag.float64),
    )
    out_t = dec_t(
        torch.tensor(tgt),
        mem_t,
        tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64),
    )
    np.testing.assert_allclose(_np(out_a), _np(out_t), atol=1e-12)


def test_generate_square_subsequent_mask_matches_torch() -> None:
    for sz in (0, 1, 4):
        a = nn.Transformer.generate_square_subsequent_mask(sz)
        t = torch.nn.Transformer.generate_square_subsequent_mask(sz)
        assert a.dtype == ag.float32
        np.testing.assert_array_equal(a.numpy(), t.numpy())


def test_transformer_dropout_in_training_and_eval() -> None:
    m = nn.Transformer(4, 2, 1, 1, 8, dropout=0.5).double()
    src, tgt = ag.tensor(RNG.standard_normal((3, 2, 4))), ag.tensor(RNG.standard_normal((2, 2, 4)))
    m.eval()
    np.testing.assert_array_equal(_np(m(src, tgt)), _np(m(src, tgt)))
    m.train()
    ag.manual_seed(0)
    a = m(src, tgt).detach().numpy()
    assert not np.allclose(a, m(src, tgt).detach().numpy())


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (
            lambda: nn.Transformer(8, 2, 1, 1, 16)(ag.zeros(5, 3, 8), ag.zeros(4, 2, 8)),
            RuntimeError,
            "the batch number of src and tgt must be equal",
        ),
        (
            lambda: nn.Transformer(8, 2, 1, 1, 16)(ag.zeros(5, 3, 8), ag.zeros(4, 3, 6)),
            RuntimeError,
            "the feature number of src and tgt must be equal to d_model",
        ),
        (
            lambda: nn.TransformerDecoderLayer(8, 2, activation="tanh"),
            RuntimeError,
            "activation should be relu/gelu, not tanh",
        ),
        (
            lambda: nn.MultiheadAttention(8, 2)(*(ag.zeros(4, 3, 8),) * 3, is_causal=True),
            RuntimeError,
            "Need attn_mask if specifying the is_causal hint",
        ),
        (
            lambda: nn.MultiheadAttention(8, 2)(
                *(ag.zeros(4, 3, 8),) * 3, attn_mask=ag.zeros(3, 3, dtype=ag.bool)
            ),
            RuntimeError,
            r"The shape of the 2D attn_mask is \(3, 3\), but should be \(4, 4\)",
        ),
        (
            lambda: nn.MultiheadAttention(8, 2)(ag.zeros(4, 3, 8), ag.zeros(4, 8), ag.zeros(4, 8)),
            AssertionError,
            "expected `key` and `value` to be 3-D but found 2-D and 2-D",
        ),
        (
            lambda: nn.MultiheadAttention(8, 2)(
                *(ag.zeros(4, 3, 8),) * 3, attn_mask=ag.zeros(4, 4, dtype=ag.int64)
            ),
            AssertionError,
            "only bool and floating types of attn_mask are supported",
        ),
        (lambda: nn.MultiheadAttention(8, 3), AssertionError, "embed_dim must be divisible"),
    ],
)
def test_transformer_errors_as_torch(make: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        make()


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize("is_causal", [False, True])
def test_scaled_dot_product_attention_gqa_matches_torch(kv_heads: int, is_causal: bool) -> None:
    arrays = [
        RNG.standard_normal((2, 4, 3, 5)),
        RNG.standard_normal((2, kv_heads, 6, 5)),
        RNG.standard_normal((2, kv_heads, 6, 5)),
    ]
    ins_a = [ag.tensor(a, requires_grad=True) for a in arrays]
    ins_t = [torch.tensor(a, requires_grad=True) for a in arrays]
    oa = F.scaled_dot_product_attention(*ins_a, is_causal=is_causal, enable_gqa=True)
    ot = TF_sdpa(*ins_t, is_causal=is_causal, enable_gqa=True)
    np.testing.assert_allclose(_np(oa), _np(ot), atol=1e-12)
    oa.sum().backward()
    ot.sum().backward()
    for a, t in zip(ins_a, ins_t, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-12)
    bad = ag.zeros(2, 3, 6, 5, dtype=ag.float64)
    with pytest.raises(RuntimeError, match="Number of heads in key and value must divide"):
        F.scaled_dot_product_attention(ins_a[0], bad, bad, enable_gqa=True)


TF_sdpa = torch.nn.functional.scaled_dot_product_attention
