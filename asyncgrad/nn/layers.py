"""Other layers, as torch's: Bilinear, EmbeddingBag, Unflatten, the deprecated Container,
LazyLinear and AdaptiveLogSoftmaxWithLoss."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from .. import backend, dtypes, ops
from .._tensor import Tensor
from . import functional as F
from . import init
from .modules import (
    LazyModuleMixin,
    Linear,
    Module,
    ModuleList,
    Parameter,
    Sequential,
    UninitializedParameter,
    _embedding_norm_repr,
    _embedding_weight,
    _reset_embedding,
    materialize,
)

__all__ = [
    "AdaptiveLogSoftmaxWithLoss",
    "Bilinear",
    "Container",
    "EmbeddingBag",
    "LazyLinear",
    "Unflatten",
]


def _dtype(dtype: Any) -> Any:
    return dtypes.to_dtype(dtype or dtypes.get_default_dtype())


class Bilinear(Module):
    """``y = x1^T A x2 + b``, as ``torch.nn.Bilinear``: ``weight`` (out, in1, in2) and ``bias``
    (out) uniform in ``±1/sqrt(in1_features)``."""

    def __init__(
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        rng = ops.default_generator._rng
        bound = 1.0 / math.sqrt(in1_features) if in1_features else 0.0
        dt = _dtype(dtype)
        shape = (out_features, in1_features, in2_features)
        self.weight = Parameter(rng.uniform(-bound, bound, shape, dt))
        self.bias = Parameter(rng.uniform(-bound, bound, (out_features,), dt)) if bias else None
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[1]) if self.weight.shape[1] else 0.0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings, as ``torch.nn.EmbeddingBag``
    (``F.embedding_bag`` over ``weight``, which starts as N(0, 1) with the ``padding_idx`` row
    zero). ``sparse=True`` is not supported."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight: Tensor | None = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        if sparse:
            raise NotImplementedError("EmbeddingBag: sparse=True (sparse gradients) is unsupported")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.mode = mode
        self.sparse = sparse
        self.include_last_offset = include_last_offset
        self.padding_idx = padding_idx
        self.weight = _embedding_weight(num_embeddings, embedding_dim, padding_idx, _weight, dtype)
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        _reset_embedding(self.weight, self.padding_idx)

    def forward(
        self,
        input: Tensor,
        offsets: Tensor | None = None,
        per_sample_weights: Tensor | None = None,
    ) -> Tensor:
        return F.embedding_bag(
            input,
            self.weight,
            offsets,
            self.max_norm,
            self.norm_type,
            self.scale_grad_by_freq,
            self.mode,
            self.sparse,
            per_sample_weights,
            self.include_last_offset,
            self.padding_idx,
        )

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        s += _embedding_norm_repr(self.max_norm, self.norm_type, self.scale_grad_by_freq)
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Tensor,
        freeze: bool = True,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
    ) -> EmbeddingBag:
        """An EmbeddingBag holding ``embeddings`` (2-D) as its weight, frozen by default."""
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        bag = cls(
            rows,
            cols,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            mode,
            sparse,
            embeddings,
            include_last_offset,
            padding_idx,
        )
        bag.weight.requires_grad_(not freeze)
        return bag


class Unflatten(Module):
    """Splits dim ``dim`` into ``unflattened_size``, as ``torch.nn.Unflatten``."""

    def __init__(self, dim: int | str, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        if isinstance(dim, str):
            raise NotImplementedError("Unflatten: named dims are not supported")
        if not isinstance(dim, int):
            raise TypeError("invalid argument type for dim parameter")
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError(
                "unflattened_size must be tuple of ints, but found type "
                f"{type(unflattened_size).__name__}"
            )
        for i, n in enumerate(unflattened_size):
            if not isinstance(n, int):
                raise TypeError(
                    f"unflattened_size must be tuple of ints, but found element of type "
                    f"{type(n).__name__} at pos {i}"
                )
        self.dim = dim
        self.unflattened_size = unflattened_size

    def forward(self, input: Tensor) -> Tensor:
        return ops.unflatten(input, self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Container(Module):
    """torch's deprecated ``nn.Container``: a Module holding the modules given as keywords."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        warnings.warn(
            "`nn.Container` is deprecated. All of its functionality is now implemented in "
            "`nn.Module`. Subclass that instead.",
            FutureWarning,
            stacklevel=2,
        )
        for key, value in kwargs.items():
            self.add_module(key, value)


class LazyLinear(LazyModuleMixin, Linear):
    """A Linear whose ``in_features`` is inferred from the first input's last dim, as
    ``torch.nn.LazyLinear``; then it becomes a Linear."""

    cls_to_become = Linear

    def __init__(
        self, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None
    ) -> None:
        Linear.__init__(self, 0, out_features, False, None, dtype)
        self._lazy_device = device
        self.weight = UninitializedParameter(dtype=_dtype(dtype))
        self.bias = UninitializedParameter(dtype=_dtype(dtype)) if bias else None

    def initialize_parameters(self, input: Tensor, *args: Any, **kwargs: Any) -> None:
        if not self.has_uninitialized_params():
            self.in_features = self.weight.shape[1]  # given by a loaded state_dict
            return
        self.in_features = input.shape[-1]
        materialize(self.weight, (self.out_features, self.in_features), self._lazy_device)
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features else 0.0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            materialize(self.bias, (self.out_features,), self._lazy_device)
            init.uniform_(self.bias, -bound, bound)


class _ASMoutput(NamedTuple):
    output: Tensor
    loss: Tensor


class AdaptiveLogSoftmaxWithLoss(Module):
    """The adaptive softmax of Grave et al., as ``torch.nn.AdaptiveLogSoftmaxWithLoss``:
    ``head`` (a Linear to the shortlist and one logit per cluster) and ``tail`` (per cluster a
    Sequential of two bias-free Linears). ``forward(input, target)`` returns ``(output,
    loss)``: each target's log-probability and the mean negative log-likelihood."""

    def __init__(
        self,
        in_features: int,
        n_classes: int,
        cutoffs: Sequence[int],
        div_value: float = 4.0,
        head_bias: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (
            cutoffs != sorted(cutoffs)
            or min(cutoffs) <= 0
            or max(cutoffs) > n_classes - 1
            or len(set(cutoffs)) != len(cutoffs)
            or any(int(c) != c for c in cutoffs)
        ):
            raise ValueError(
                "cutoffs should be a sequence of unique, positive integers sorted in an "
                "increasing order, where each value is between 1 and n_classes-1"
            )
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = [*cutoffs, n_classes]
        self.div_value = div_value
        self.head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(
                Sequential(
                    Linear(in_features, hsz, bias=False, device=device, dtype=dtype),
                    Linear(hsz, osz, bias=False, device=device, dtype=dtype),
                )
            )

    def forward(self, input_: Tensor, target_: Tensor) -> _ASMoutput:
        input = input_
        t = target_ if isinstance(target_, Tensor) else ops.tensor(target_)
        if t.ndim == 1:
            if input.shape[0] != t.shape[0]:
                raise RuntimeError(
                    "Input and target should have the same size in the batch dimension."
                )
            if input.ndim != 2:
                raise RuntimeError(
                    "1D target tensor expects 2D input tensors, but found inputs with size "
                    f"{input.shape}"
                )
        elif t.ndim == 0:
            if input.ndim != 1:
                raise RuntimeError(
                    "0D target tensor expects 1D input tensors, but found inputs with size "
                    f"{input.shape}"
                )
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = t.ndim > 0
        x = input if batched else ops.unsqueeze(input, 0)
        ta = t._array.reshape(-1)
        xp = backend.namespace(ta)
        n = ta.shape[0]
        if n and (int(ta.min()) < 0 or int(ta.max()) >= self.n_classes):
            raise RuntimeError(
                f"Target values should be in [0, {self.n_classes - 1}], but values in range "
                f"[{int(ta.min())}, {int(ta.max())}] were found. "
            )
        # The head's column for each row: its class in the shortlist, else its cluster's.
        cluster = xp.searchsorted(xp.asarray(self.cutoffs), ta, side="right")
        gather = xp.where(cluster == 0, ta, self.shortlist_size + cluster - 1)
        head_logp = F.log_softmax(self.head(x), dim=1)
        output = ops.squeeze(ops.gather(head_logp, 1, ops.wrap(gather[:, None])), 1)
        for i in range(self.n_clusters):
            rows = xp.nonzero(cluster == i + 1)[0]
            if rows.size == 0:
                continue
            rel = ta[rows] - self.cutoffs[i]
            logp = F.log_softmax(self.tail[i](ops.index_select(x, 0, ops.wrap(rows))), dim=1)
            local = ops.squeeze(ops.gather(logp, 1, ops.wrap(rel[:, None])), 1)
            output = ops.scatter_add(output, 0, ops.wrap(rows), local)
        loss = ops.mean(ops.neg(output))
        if not batched:
            output = ops.squeeze(output, 0)
        return _ASMoutput(output, loss)

    def log_prob(self, input: Tensor) -> Tensor:
        """The log-probabilities of all ``n_classes`` classes, (N, n_classes)."""
        head_logp = F.log_softmax(self.head(input), dim=1)
        parts = [head_logp[:, : self.shortlist_size]]
        for i in range(self.n_clusters):
            logp = F.log_softmax(self.tail[i](input), dim=1)
            j = self.shortlist_size + i
            parts.append(ops.add(logp, head_logp[:, j : j + 1]))
        return ops.cat(parts, dim=1)

    def predict(self, input: Tensor) -> Tensor:
        """The most probable class of each row of ``input``."""
        return ops.argmax(self.log_prob(input), dim=1)
