"""The derivative rules of the convolution, pooling, padding and upsampling ops.

None of their own yet: conv3d and the transposed convolutions are the ``convolution``,
``conv_input_grad`` and ``conv_weight_grad`` ops of table.py (See NOTE [Convolution is three
ops] in formulas.py), the N-d max pools record ``max_pool2d_with_indices`` (its rule reads only
the flat indices and the input's shape, so it serves any rank), and the patch functions and
max_unpool are indexing (getitem, index_add_zeros, index_put).
"""

from __future__ import annotations

__all__: list[str] = []
