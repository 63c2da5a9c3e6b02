"""torch's transformer modules: ``nn.Transformer``, ``nn.TransformerEncoder``,
``nn.TransformerDecoder`` and their layers ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (self-attention, cross-attention and a feed-forward block, each
with a residual connection and LayerNorm after it, or with ``norm_first`` before it).

Submodules carry torch's names, so a torch state_dict loads as it is. Masks follow
MultiheadAttention's (torch's) convention: a bool mask's True forbids a position; a float mask
is added to the scores. torch's fast paths (nested tensors, fused kernels) are not taken: they
compute the same values.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import dtypes, ops
from .._tensor import Tensor
from .functional_layers import _canonical_mask
from .modules import Dropout, LayerNorm, Linear, Module, ModuleList, MultiheadAttention

__all__ = [
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]


def _activation(activation: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if activation == "relu":
        return ops.relu
    if activation == "gelu":
        return ops.gelu
    if isinstance(activation, str):
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


def _generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
    """An (sz, sz) float mask: -inf above the diagonal (the future), 0 elsewhere."""
    dt = dtypes.to_dtype(dtype or dtypes.get_default_dtype())
    full = ops.full((sz, sz), float("-inf"), dtype=dt, device=device)
    return ops.triu(full, diagonal=1)


def _seq_len(src: Tensor, batch_first: bool) -> int:
    if src.ndim == 2:
        return int(src.shape[0])
    return int(src.shape[1 if batch_first else 0])


def _detect_is_causal_mask(mask: Tensor | None, is_causal: bool | None, size: int | None) -> bool:
    """torch's rule: ``is_causal=None`` with a mask means "is the mask the causal one?"."""
    make_causal = is_causal is True
    if is_causal is None and mask is not None:
        sz = size if size is not None else mask.shape[-2]
        causal = _generate_square_subsequent_mask(sz, device=mask.device, dtype=mask.dtype)
        if tuple(mask.shape) == tuple(causal.shape):
            make_causal = bool(ops.all(ops.eq(mask, causal)).item())
        else:
            make_causal = False
    return make_causal


def _attend(
    attn: Module,
    x: Tensor,
    kv: Tensor,
    mask: Tensor | None,
    key_padding_mask: Tensor | None,
    is_causal: bool,
) -> Tensor:
    """A layer's attention block before its dropout: ``attn(x, kv, kv)``'s output, without the
    weights (``kv`` is ``x`` for self-attention, the encoder's output for cross-attention)."""
    out, _ = attn(
        x,
        kv,
        kv,
        attn_mask=mask,
        key_padding_mask=key_padding_mask,
        need_weights=False,
        is_causal=is_causal,
    )
    return out  # type: ignore[no-any-return]


def _get_clones(module: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class TransformerEncoderLayer(Module):
    """One encoder layer, as ``torch.nn.TransformerEncoderLayer``: submodules ``self_attn``,
    ``linear1``, ``dropout``, ``linear2``, ``norm1``, ``norm2``, ``dropout1``, ``dropout2``
    under torch's names. ``forward(src, src_mask=None, src_key_padding_mask=None,
    is_causal=False)``."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, dtype=dtype
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.batch_first = batch_first
        # A module activation is a submodule (as in torch); a string or function is not.
        self.activation = _activation(activation)
        if device is not None:
            self.to(device)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        src_key_padding_mask = _canonical_mask(
            src_key_padding_mask, "src_key_padding_mask", src, src_mask, "src_mask"
        )
        src_mask = _canonical_mask(src_mask, "src_mask", src)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))  # type: ignore[no-any-return]

    def _sa_block(
        self, x: Tensor, mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        out = _attend(self.self_attn, x, x, mask, key_padding_mask, is_causal)
        return self.dropout1(out)  # type: ignore[no-any-return]

    def _ff_block(self, x: Tensor) -> Tensor:
        h = self.dropout(self.activation(self.linear1(x)))
        return self.dropout2(self.linear2(h))  # type: ignore[no-any-return]


class TransformerDecoderLayer(Module):
    """One decoder layer, as ``torch.nn.TransformerDecoderLayer``: self-attention
    (``self_attn``), attention over the encoder's output (``multihead_attn``) and a
    feed-forward block, with ``norm1``..``norm3`` and ``dropout1``..``dropout3``.
    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias, dtype=dtype
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias, dtype=dtype
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)
        if device is not None:
            self.to(device)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(
            x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
        )
        return self.norm3(x + self._ff_block(x))  # type: ignore[no-any-return]

    def _sa_block(
        self, x: Tensor, mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        out = _attend(self.self_attn, x, x, mask, key_padding_mask, is_causal)
        return self.dropout1(out)  # type: ignore[no-any-return]

    def _mha_block(
        self,
        x: Tensor,
        mem: Tensor,
        mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
    ) -> Tensor:
        out = _attend(self.multihead_attn, x, mem, mask, key_padding_mask, is_causal)
        return self.dropout2(out)  # type: ignore[no-any-return]

    def _ff_block(self, x: Tensor) -> Tensor:
        h = self.dropout(self.activation(self.linear1(x)))
        return self.dropout3(self.linear2(h))  # type: ignore[no-any-return]


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer`` (``layers``), then ``norm`` if given, as
    ``torch.nn.TransformerEncoder``. ``enable_nested_tensor`` and ``mask_check`` are kept for
    torch's signature; nested tensors are not used."""

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = False
        self.mask_check = mask_check

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        src_key_padding_mask = _canonical_mask(
            src_key_padding_mask, "src_key_padding_mask", src, mask, "mask"
        )
        mask = _canonical_mask(mask, "mask", src)
        first = self.layers[0]
        batch_first = bool(getattr(getattr(first, "self_attn", None), "batch_first", False))
        causal = _detect_is_causal_mask(mask, is_causal, _seq_len(src, batch_first))
        output = src
        for mod in self.layers:
            output = mod(
                output, src_mask=mask, is_causal=causal, src_key_padding_mask=src_key_padding_mask
            )
        if self.norm is not None:
            output = self.norm(output)
        return output


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer`` (``layers``), then ``norm`` if given, as
    ``torch.nn.TransformerDecoder``."""

    def __init__(
        self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None
    ) -> None:
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        first = self.layers[0]
        batch_first = bool(getattr(getattr(first, "self_attn", None), "batch_first", False))
        causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, _seq_len(tgt, batch_first))
        output = tgt
        for mod in self.layers:
            output = mod(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=causal,
                memory_is_causal=memory_is_causal,
            )
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """An encoder-decoder transformer, as ``torch.nn.Transformer``: ``encoder`` (a
    TransformerEncoder with a final LayerNorm) and ``decoder`` (likewise), or the
    ``custom_encoder``/``custom_decoder`` given; every parameter with more than one dim
    xavier-uniform initialised. ``forward(src, tgt, src_mask=None, tgt_mask=None, ...)``.

    Example:
        >>> import asyncgrad as ag
        >>> model = ag.nn.Transformer(8, 2, 1, 1, dim_feedforward=16)
        >>> model(ag.zeros(5, 3, 8), ag.zeros(4, 3, 8)).shape
        asyncgrad.Size([4, 3, 8])
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        custom_encoder: Any | None = None,
        custom_decoder: Any | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            enc = TransformerEncoderLayer(*args, batch_first, norm_first, bias, dtype=dtype)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
            self.encoder = TransformerEncoder(enc, num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            dec = TransformerDecoderLayer(*args, batch_first, norm_first, bias, dtype=dtype)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
            self.decoder = TransformerDecoder(dec, num_decoder_layers, norm)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first
        if device is not None:
            self.to(device)

    def _reset_parameters(self) -> None:
        from . import init

        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batched = src.ndim == 3
        if (
            batched
            and src.shape[0 if self.batch_first else 1] != tgt.shape[0 if self.batch_first else 1]
        ):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(  # type: ignore[no-any-return]
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """An (sz, sz) float mask with -inf above the diagonal: each position attends to
        itself and the ones before it."""
        return _generate_square_subsequent_mask(sz, device=device, dtype=dtype)
