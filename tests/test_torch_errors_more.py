"""Errors where torch's own OpInfo error inputs (``op_db``'s ``error_inputs``) showed asyncgrad
raising another exception type than torch, or none: each case runs the same call through both
libraries and checks that asyncgrad raises torch's type with a message matching torch's; a few
valid calls beside them check that the new checks leave results unchanged."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="compares with torch")

Call = Callable[[Any, Any], Any]  # (library, its nn.functional) -> result

# id -> (torch's exception type, a regex both messages match, the call)
CASES: dict[str, tuple[type[Exception], str, Call]] = {
    "arange_step_zero": (RuntimeError, "step must be nonzero", lambda L, F: L.arange(0, 3, 0)),
    "arange_float_step_zero": (
        RuntimeError,
        "step must be nonzero",
        lambda L, F: L.arange(0.0, 3.0, 0.0),
    ),
    "arange_up_with_negative_step": (
        RuntimeError,
        "upper bound and lower bound inconsistent with step sign",
        lambda L, F: L.arange(0, 3, -2),
    ),
    "arange_down_with_positive_step": (
        RuntimeError,
        "upper bound and lower bound inconsistent with step sign",
        lambda L, F: L.arange(0, -3, 2),
    ),
    "arange_large_start_above_end": (
        RuntimeError,
        "upper bound and lower bound inconsistent with step sign",
        lambda L, F: L.arange(1549556900, 1549556828, 1989724),
    ),
    "arange_infinite_end": (
        RuntimeError,
        r"unsupported range: 0 -> inf",
        lambda L, F: L.arange(0, float("inf"), 2),
    ),
    "arange_nan_start": (
        RuntimeError,
        "unsupported range",
        lambda L, F: L.arange(float("nan"), 3, 2),
    ),
    "linspace_negative_steps": (
        RuntimeError,
        "number of steps must be non-negative",
        lambda L, F: L.linspace(0, 3, -1),
    ),
    "logspace_negative_steps": (
        RuntimeError,
        "number of steps must be non-negative",
        lambda L, F: L.logspace(0, 3, -1),
    ),
    "linspace_float_steps": (
        TypeError,
        r"linspace\(\) received an invalid combination of arguments - got \(int, int, float\)",
        lambda L, F: L.linspace(0, 3, 1.0),
    ),
    "logspace_float_steps": (
        TypeError,
        r"logspace\(\) received an invalid combination of arguments - got \(float, int, float\)",
        lambda L, F: L.logspace(0.5, 3, 1.0),
    ),
    "eye_negative_n": (
        RuntimeError,
        "n must be greater or equal to 0, got -1",
        lambda L, F: L.eye(-1),
    ),
    "eye_negative_n_with_m": (
        RuntimeError,
        "n must be greater or equal to 0, got -7",
        lambda L, F: L.eye(-7, 42),
    ),
    "eye_negative_m": (
        RuntimeError,
        "m must be greater or equal to 0, got -3",
        lambda L, F: L.eye(0, -3),
    ),
    "isclose_negative_rtol": (
        RuntimeError,
        r"rtol must be greater than or equal to zero, but got -0\.4",
        lambda L, F: L.isclose(L.ones(2), L.ones(2), rtol=-0.4),
    ),
    "isclose_negative_atol": (
        RuntimeError,
        r"atol must be greater than or equal to zero, but got -0\.4",
        lambda L, F: L.isclose(L.ones(2), L.ones(2), atol=-0.4),
    ),
    "isclose_number_other": (
        TypeError,
        r"isclose\(\): argument 'other' \(position 2\) must be Tensor, not int",
        lambda L, F: L.isclose(L.ones(3), 2),
    ),
    "isclose_number_input": (
        TypeError,
        r"isclose\(\): argument 'input' \(position 1\) must be Tensor, not int",
        lambda L, F: L.isclose(2, L.ones(3)),
    ),
    "masked_fill_1d_value": (
        RuntimeError,
        r"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with 1 "
        r"dimension\(s\)\.",
        lambda L, F: L.ones(2, 2).masked_fill(L.tensor(False), L.ones(1)),
    ),
    "masked_fill_inplace_2d_value": (
        RuntimeError,
        "only supports a 0-dimensional value tensor, but got tensor with 2 dimension",
        lambda L, F: L.ones(2, 2).masked_fill_(L.tensor(False), L.ones(1, 2)),
    ),
    "gelu_bad_approximate": (
        RuntimeError,
        r"approximate argument must be either none or tanh\.",
        lambda L, F: F.gelu(L.ones(2), approximate="asdf"),
    ),
    "neg_bool": (
        RuntimeError,
        r"Negation, the `-` operator, on a bool tensor is not supported\. If you are trying to "
        r"invert a mask, use the `~` or `logical_not\(\)` operator instead\.",
        lambda L, F: L.neg(L.ones(2, dtype=L.bool)),
    ),
    "neg_operator_bool": (
        RuntimeError,
        "Negation, the `-` operator, on a bool tensor is not supported",
        lambda L, F: -L.ones(2, dtype=L.bool),
    ),
    "neg_inplace_bool": (
        RuntimeError,
        "Negation, the `-` operator, on a bool tensor is not supported",
        lambda L, F: L.ones(2, dtype=L.bool).neg_(),
    ),
    "negative_bool": (
        RuntimeError,
        "Negation, the `-` operator, on a bool tensor is not supported",
        lambda L, F: L.negative(L.ones(2, dtype=L.bool)),
    ),
    "narrow_start_1d_tensor": (
        RuntimeError,
        r"start must be an 0-dim integral Tensor\.",
        lambda L, F: L.ones(20, 10, 5).narrow(1, L.tensor([1, 2], dtype=L.int32), 2),
    ),
    "narrow_start_bool_tensor": (
        RuntimeError,
        r"start must be an 0-dim integral Tensor\.",
        lambda L, F: L.ones(20, 10, 5).narrow(-3, L.tensor(True), 3),
    ),
    "narrow_start_float_tensor": (
        RuntimeError,
        r"start must be an 0-dim integral Tensor\.",
        lambda L, F: L.narrow(L.ones(4, 4), 0, L.tensor(1.0), 1),
    ),
    "narrow_copy_dim_past_the_end": (
        RuntimeError,
        r"Expected dim < static_cast<int64_t>\(self_sizes\.size\(\)\) to be true, but got "
        r"false\.",
        lambda L, F: L.ones(10, 5, 20).narrow_copy(3, 0, 0),
    ),
    "narrow_copy_negative_dim_out_of_range": (
        IndexError,
        r"Dimension out of range \(expected to be in range of \[-2, 1\], but got -3\)",
        lambda L, F: L.narrow_copy(L.ones(4, 4), -3, 0, 1),
    ),
    "narrow_copy_negative_length": (
        RuntimeError,
        r"start \(0\) \+ length \(-1\) exceeds dimension size \(10\)\.",
        lambda L, F: L.ones(10).narrow_copy(0, 0, -1),
    ),
    "cat_empty_list": (
        ValueError,
        r"torch\.cat\(\): expected a non-empty list of Tensors",
        lambda L, F: L.cat([], dim=1),
    ),
    "cat_empty_tuple": (
        ValueError,
        "expected a non-empty list of Tensors",
        lambda L, F: L.cat(()),
    ),
    "cat_with_none": (
        TypeError,
        "expected Tensor as element 1 in argument 0, but got NoneType",
        lambda L, F: L.cat((L.ones(5, 1, 1), None)),
    ),
    "cat_different_ranks": (
        RuntimeError,
        "Tensors must have same number of dimensions: got 2 and 4",
        lambda L, F: L.cat([L.ones(4, 0), L.ones(5, 0, 19, 20)], dim=1),
    ),
    "unbind_dim_out_of_range": (
        IndexError,
        r"Dimension out of range \(expected to be in range of \[-1, 0\], but got 2\)",
        lambda L, F: L.unbind(L.ones(2), 2),
    ),
    "unbind_negative_dim_out_of_range": (
        IndexError,
        r"Dimension out of range \(expected to be in range of \[-1, 0\], but got -2\)",
        lambda L, F: L.ones(2).unbind(-2),
    ),
    "unbind_0d": (
        IndexError,
        "Dimension specified as 0 but tensor has no dimensions",
        lambda L, F: L.unbind(L.ones(()), 0),
    ),
    "unbind_copy_dim_out_of_range": (
        IndexError,
        "Dimension out of range",
        lambda L, F: L.unbind_copy(L.ones(2), 2),
    ),
    "unbind_copy_0d": (
        IndexError,
        "Dimension specified as 0 but tensor has no dimensions",
        lambda L, F: L.unbind_copy(L.ones(()), 0),
    ),
    "hsplit_str": (
        TypeError,
        r"hsplit\(\) received an invalid combination of arguments",
        lambda L, F: L.ones(5, 5, 5).hsplit("abc"),
    ),
    "hsplit_float": (
        TypeError,
        r"hsplit\(\) received an invalid combination of arguments",
        lambda L, F: L.hsplit(L.ones(4, 4), 2.0),
    ),
    "hsplit_float_indices": (
        TypeError,
        r"hsplit\(\) received an invalid combination of arguments",
        lambda L, F: L.hsplit(L.ones(4, 4), [1.0]),
    ),
    "vsplit_str": (
        TypeError,
        r"vsplit\(\) received an invalid combination of arguments",
        lambda L, F: L.vsplit(L.ones(5, 5, 5), "abc"),
    ),
    "embedding_0d_weight": (
        RuntimeError,
        "'weight' must be 2-D",
        lambda L, F: F.embedding(L.zeros(2, 2, dtype=L.int64), L.ones(())),
    ),
    "embedding_1d_weight": (
        RuntimeError,
        "'weight' must be 2-D",
        lambda L, F: F.embedding(L.zeros(2, 2, dtype=L.int64), L.ones(3)),
    ),
    "embedding_3d_weight": (
        RuntimeError,
        "'weight' must be 2-D",
        lambda L, F: F.embedding(L.zeros(2, 2, dtype=L.int64), L.ones(1, 1, 1)),
    ),
    "rms_norm_empty_normalized_shape": (
        RuntimeError,
        r"Expected normalized_shape to be at least 1-dimensional, i\.e\., containing at least "
        r"one element, but got normalized_shape = \[\]",
        lambda L, F: F.rms_norm(L.ones(1, 2, 3), (), None, 1e-5),
    ),
    "rms_norm_empty_list": (
        RuntimeError,
        "Expected normalized_shape to be at least 1-dimensional",
        lambda L, F: F.rms_norm(L.ones(1, 2, 3), []),
    ),
    "multi_margin_loss_0d_weight": (
        ValueError,
        "weight must be one-dimensional",
        lambda L, F: F.multi_margin_loss(
            L.ones(5, 4), L.zeros(5, dtype=L.int64), weight=L.tensor(1.0)
        ),
    ),
    "multi_margin_loss_2d_weight": (
        ValueError,
        "weight must be one-dimensional",
        lambda L, F: F.multi_margin_loss(
            L.ones(5, 4), L.zeros(5, dtype=L.int64), weight=L.ones(5, 4)
        ),
    ),
    "multi_margin_loss_weight_size": (
        RuntimeError,
        r"inconsistent weight size, expected 4 but got \[5\]",
        lambda L, F: F.multi_margin_loss(L.ones(5, 4), L.ones(5), weight=L.ones(5)),
    ),
    "multi_margin_loss_float_target": (
        RuntimeError,
        "expected scalar type Long but found Float",
        lambda L, F: F.multi_margin_loss(L.ones(5, 4), L.ones(5)),
    ),
    "multi_margin_loss_empty_classes": (
        RuntimeError,
        r"Expected non-empty vector or matrix with optional 0-dim batch size, but got: \[5, 0\]",
        lambda L, F: F.multi_margin_loss(L.ones(5, 0), L.zeros(5, dtype=L.int64)),
    ),
    "multi_margin_loss_empty_vector": (
        RuntimeError,
        r"Expected non-empty vector or matrix with optional 0-dim batch size, but got: \[0\]",
        lambda L, F: F.multi_margin_loss(L.ones(0), L.zeros(5, dtype=L.int64)),
    ),
    "multilabel_margin_loss_empty_vector": (
        RuntimeError,
        r"Expected non-empty vector or matrix with optional 0-dim batch size, but got: \[0\]",
        lambda L, F: F.multilabel_margin_loss(L.ones(0), L.ones(0, dtype=L.int64)),
    ),
    "multilabel_margin_loss_empty_classes": (
        RuntimeError,
        r"Expected non-empty vector or matrix with optional 0-dim batch size, but got: \[5, 0\]",
        lambda L, F: F.multilabel_margin_loss(L.ones(5, 0), L.ones(5, 4, dtype=L.int64)),
    ),
    "triplet_margin_loss_negative_margin": (
        ValueError,
        r"margin must be greater than 0, got -1\.0",
        lambda L, F: F.triplet_margin_loss(L.ones(3, 4), L.ones(3, 4), L.ones(3, 4), margin=-1.0),
    ),
    "triplet_margin_loss_zero_margin": (
        ValueError,
        r"margin must be greater than 0, got 0\.0",
        lambda L, F: F.triplet_margin_loss(L.ones(3, 4), L.ones(3, 4), L.ones(3, 4), margin=0.0),
    ),
    "linear_cross_entropy_3d_input": (
        RuntimeError,
        "expected input with dimensionality 1 or 2, got 3",
        lambda L, F: F.linear_cross_entropy(
            L.ones(2, 3, 3), L.ones(2, 3), L.zeros(2, dtype=L.int64)
        ),
    ),
    "linear_cross_entropy_1d_weight": (
        RuntimeError,
        "expected linear_weight with dimensionality at least 2, got 1",
        lambda L, F: F.linear_cross_entropy(L.ones(2, 3), L.ones(2), L.zeros(2, dtype=L.int64)),
    ),
    "linear_cross_entropy_in_features": (
        RuntimeError,
        r"expected equal input and linear_weight last dimensions \(in_features\), got 3 and 4, "
        "respectively",
        lambda L, F: F.linear_cross_entropy(L.ones(2, 3), L.ones(2, 4), L.zeros(2, dtype=L.int64)),
    ),
    "linear_cross_entropy_bias_shape": (
        RuntimeError,
        r"expected linear_bias shape \(2,\), got \(3,\)",
        lambda L, F: F.linear_cross_entropy(
            L.ones(2, 3), L.ones(2, 3), L.zeros(2, dtype=L.int64), linear_bias=L.ones(3)
        ),
    ),
    "linear_cross_entropy_ignore_index_with_probabilities": (
        RuntimeError,
        "ignore_index cannot be specified when target contains probabilities",
        lambda L, F: F.linear_cross_entropy(
            L.ones(2, 3), L.ones(2, 3), L.ones(2, 2), ignore_index=0
        ),
    ),
    "mean_long": (
        RuntimeError,
        r"mean\(\): could not infer output dtype\. Input dtype must be either a floating point "
        r"or complex dtype\. Got: Long",
        lambda L, F: L.ones(3, 4, dtype=L.int64).mean(),
    ),
    "mean_int_along_dim": (
        RuntimeError,
        "Input dtype must be either a floating point or complex dtype. Got: Int",
        lambda L, F: L.mean(L.ones(3, dtype=L.int32), 0),
    ),
    "mean_bool": (
        RuntimeError,
        "Input dtype must be either a floating point or complex dtype. Got: Bool",
        lambda L, F: L.ones(3, dtype=L.bool).mean(),
    ),
    "mean_long_dtype": (
        RuntimeError,
        r"mean\(\): could not infer output dtype\. Optional dtype must be either a floating "
        r"point or complex dtype\. Got: Long",
        lambda L, F: L.ones(3, 4, dtype=L.int64).mean(dtype=L.int64),
    ),
    "mean_float_to_long_dtype": (
        RuntimeError,
        "Optional dtype must be either a floating point or complex dtype. Got: Long",
        lambda L, F: L.mean(L.ones(3), dim=0, dtype=L.int64),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_error_matches_torch(case: str) -> None:
    exc, pattern, call = CASES[case]
    with pytest.raises(Exception) as theirs:  # noqa: PT011 (the type is checked below)
        call(torch, torch.nn.functional)
    assert type(theirs.value) is exc, f"torch raises {type(theirs.value).__name__}: {theirs.value}"
    assert re.search(pattern, str(theirs.value)), f"torch's message: {theirs.value}"
    with pytest.raises(Exception) as ours:  # noqa: PT011
        call(ag, ag.nn.functional)
    assert type(ours.value) is exc, f"asyncgrad raises {type(ours.value).__name__}: {ours.value}"
    assert re.search(pattern, str(ours.value)), f"asyncgrad's message: {ours.value}"


# Valid calls next to the new checks: both libraries give the same values.
VALID: dict[str, Call] = {
    "arange_empty_up": lambda L, F: L.arange(3, 3, 2),
    "arange_empty_down": lambda L, F: L.arange(0, 0, -2),
    "arange_down": lambda L, F: L.arange(3, -3, -2),
    "arange_float": lambda L, F: L.arange(0.5, 2.0, 0.25),
    "arange_one_bound": lambda L, F: L.arange(5),
    "linspace_zero_steps": lambda L, F: L.linspace(0, 3, 0),
    "logspace_zero_steps": lambda L, F: L.logspace(0, 3, 0),
    "linspace_tensor_bounds_and_steps": lambda L, F: L.linspace(L.tensor(0.0), 3, L.tensor(4)),
    "eye_zero": lambda L, F: L.eye(0),
    "eye_zero_by_three": lambda L, F: L.eye(0, 3),
    "eye_rect": lambda L, F: L.eye(2, 3),
    "isclose_zero_tolerances": lambda L, F: L.isclose(
        L.tensor([1.0, 1.5]), L.tensor([1.0, 1.0]), rtol=0.0, atol=0.0
    ),
    "masked_fill_0d_value": lambda L, F: L.ones(2, 2).masked_fill(
        L.tensor([[True, False], [False, True]]), L.tensor(3.0)
    ),
    "gelu_tanh": lambda L, F: F.gelu(L.tensor([-1.0, 0.5]), approximate="tanh"),
    "neg_int": lambda L, F: L.neg(L.tensor([1, -2])),
    "narrow_0d_long_start": lambda L, F: L.arange(10.0).narrow(0, L.tensor(2), 3),
    "narrow_0d_int_start": lambda L, F: L.arange(10.0).narrow(0, L.tensor(2, dtype=L.int32), 3),
    "narrow_copy_negative_start": lambda L, F: L.arange(10.0).narrow_copy(0, -2, 1),
    "cat_one": lambda L, F: L.cat([L.ones(2, 3), L.zeros(1, 3)]),
    "unbind_last_dim": lambda L, F: L.stack(L.unbind(L.arange(6.0).reshape(2, 3), -1)),
    "hsplit_list": lambda L, F: L.stack(L.hsplit(L.arange(16.0).reshape(4, 4), [2])),
    "vsplit_tuple": lambda L, F: L.cat(L.vsplit(L.arange(16.0).reshape(4, 4), (1, 3))),
    "hsplit_sections": lambda L, F: L.stack(L.hsplit(L.arange(16.0).reshape(4, 4), 2)),
    "embedding": lambda L, F: F.embedding(L.tensor([[0, 1]]), L.arange(6.0).reshape(3, 2)),
    "rms_norm": lambda L, F: F.rms_norm(L.arange(6.0).reshape(2, 3), (3,)),
    "multi_margin_loss_weight": lambda L, F: F.multi_margin_loss(
        L.tensor([[0.1, 0.2, 0.4], [0.3, 0.2, 0.1]]),
        L.tensor([2, 0]),
        weight=L.tensor([1.0, 2.0, 3.0]),
    ),
    "multilabel_margin_loss": lambda L, F: F.multilabel_margin_loss(
        L.tensor([[0.1, 0.2, 0.4, 0.8]]), L.tensor([[3, 0, -1, 1]])
    ),
    "multilabel_margin_loss_0d": lambda L, F: F.multilabel_margin_loss(L.tensor(0.5), L.tensor(0)),
    "triplet_margin_loss": lambda L, F: F.triplet_margin_loss(
        L.arange(6.0).reshape(2, 3), L.ones(2, 3), L.zeros(2, 3), margin=0.5
    ),
    "mean_long_to_float": lambda L, F: L.arange(6).mean(dtype=L.float32),
    "mean_float_to_double": lambda L, F: L.ones(3).mean(dtype=L.float64),
}


@pytest.mark.parametrize("case", list(VALID))
def test_valid_calls_unchanged(case: str) -> None:
    want = VALID[case](torch, torch.nn.functional)
    got = VALID[case](ag, ag.nn.functional)
    assert str(got.dtype).removeprefix("torch.") == str(want.dtype).removeprefix("torch.")
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
