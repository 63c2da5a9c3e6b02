"""torch's ``nn.TransformerEncoderLayer``: self-attention and a feed-forward block, each with a
residual connection and LayerNorm (after, or with ``norm_first`` before)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import ops
from .._tensor import Tensor
from .modules import Dropout, LayerNorm, Linear, Module, MultiheadAttention

__all__ = ["TransformerEncoderLayer"]


def _activation(activation: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if activation == "relu":
        return ops.relu
    if activation == "gelu":
        return ops.gelu
    if isinstance(activation, str):
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


class TransformerEncoderLayer(Module):
    """One encoder layer, as ``torch.nn.TransformerEncoderLayer``: submodules ``self_attn``,
    ``linear1``, ``dropout``, ``linear2``, ``norm1``, ``norm2``, ``dropout1``, ``dropout2``
    under torch's names, so a torch state_dict loads as it is. ``forward(src, src_mask=None,
    src_key_padding_mask=None, is_causal=False)``; masks follow MultiheadAttention's (torch's)
    convention."""

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
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))  # type: ignore[no-any-return]

    def _sa_block(
        self, x: Tensor, mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        out, _ = self.self_attn(
            x,
            x,
            x,
            attn_mask=mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )
        return self.dropout1(out)  # type: ignore[no-any-return]

    def _ff_block(self, x: Tensor) -> Tensor:
        h = self.dropout(self.activation(self.linear1(x)))
        return self.dropout2(self.linear2(h))  # type: ignore[no-any-return]
