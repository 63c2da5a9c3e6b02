"""Argument checking of grad/backward in all their forms, with torch's behaviour as reference.

torch raises TypeError for a gradient that is not a Tensor or None (a NumPy array, a Python
number, a list of numbers), for outputs or inputs that are not Tensors, and for flags it cannot
read as bools. asyncgrad does the same, with messages that name the argument and what was
given, and checks every argument before it changes anything.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import numpy as np
import pytest

import asyncgrad as ag

TIMEOUT_S: Final = 5.0
GRAD_FORMS: Final = ["grad", "grad_sync"]
BACKWARD_FORMS: Final = ["backward", "backward_sync", "Tensor.backward", "Tensor.abackward"]
FORMS: Final = GRAD_FORMS + BACKWARD_FORMS


async def call(form: str, out: Any, x: Any, gradient: Any = None, **kw: Any) -> Any:
    """Differentiate ``out`` with respect to ``x`` through one public entry point."""
    async with asyncio.timeout(TIMEOUT_S):
        if form == "grad":
            return await ag.grad(out, x, gradient, **kw)
        if form == "grad_sync":
            return ag.grad_sync(out, x, gradient, **kw)
        kw.setdefault("inputs", x)
        if form == "backward":
            return await ag.backward(out, gradient, **kw)
        if form == "backward_sync":
            return ag.backward_sync(out, gradient, **kw)
        kw.pop("priority", None)  # Tensor.backward has no priority argument
        if form == "Tensor.backward":
            return out.backward(gradient, **kw)
        assert form == "Tensor.abackward"
        return await out.abackward(gradient, **kw)


def grad_name(form: str, single: bool = True) -> str:
    if form in GRAD_FORMS:
        return "grad_outputs"
    return "gradient" if single else "grad_tensors"


# ------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("shape", "gradient", "given"),
    [
        ((), np.array(1.0), r"numpy\.ndarray of shape \(\)"),
        # A 1-element array for a scalar output was iterated into a number and used twice.
        ((), np.array([1.0]), r"numpy\.ndarray of shape \(1,\)"),
        ((3,), np.ones(3), r"numpy\.ndarray of shape \(3,\)"),
        ((), 2.0, "float 2.0"),
        ((), np.float64(2.0), r"numpy\.float64 np\.float64\(2\.0\)|numpy\.float64 2\.0"),
    ],
    ids=["array0d", "array1", "array3", "float", "np.float64"],
)
async def test_gradient_that_is_not_a_tensor_raises_type_error(
    form: str, shape: tuple[int, ...], gradient: Any, given: str
) -> None:
    x = ag.ones(*shape, requires_grad=True) if shape else ag.tensor(1.0, requires_grad=True)
    out = x * 3
    name = grad_name(form)
    with pytest.raises(
        TypeError, match=rf"^{name} must be a Tensor, None, or a sequence .*got {given}"
    ):
        await call(form, out, x, gradient)
    assert x.grad is None


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("element", "given"),
    [(2.0, "float 2.0"), (np.array(2.0), r"numpy\.ndarray of shape \(\)"), ("g", "str")],
    ids=["float", "array", "str"],
)
async def test_gradient_list_element_that_is_not_a_tensor_raises_type_error(
    form: str, element: Any, given: str
) -> None:
    x = ag.tensor(1.0, requires_grad=True)
    out = x * 3
    name = grad_name(form)
    with pytest.raises(TypeError, match=rf"^{name}\[0\] must be a Tensor or None, got {given}"):
        await call(form, out, x, [element])
    assert x.grad is None


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "gradient",
    [None, (None,), [ag.tensor(2.0)], ag.tensor(2.0, dtype=ag.float64)],
    ids=["None", "(None,)", "[tensor]", "float64 tensor"],
)
async def test_gradients_torch_accepts_still_work(form: str, gradient: Any) -> None:
    x = ag.tensor(1.5, requires_grad=True)
    out = x * 3
    res = await call(form, out, x, gradient)
    expected = 3.0 if gradient is None or gradient in ([None], (None,)) else 6.0
    got = res[0] if form in GRAD_FORMS else x.grad
    assert got is not None
    assert got.item() == expected
    assert got.dtype == ag.float32


@pytest.mark.parametrize("form", ["grad", "backward_sync"])
async def test_gradient_count_must_match_outputs(form: str) -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    outs = [x.sum(), (x * 2).sum()]
    with pytest.raises(RuntimeError, match=r"got 1 .* for 2 outputs"):
        await call(form, outs, x, [ag.tensor(1.0)])


# ----------------------------------------------------------------------------- outputs, inputs
@pytest.mark.parametrize("form", ["grad", "grad_sync", "backward", "backward_sync"])
@pytest.mark.parametrize(
    ("value", "given"),
    [
        (np.ones(2), r"numpy\.ndarray of shape \(2,\)"),
        (1.0, "float 1.0"),
        ("y", "str"),
        ({"y": 1}, "dict"),
        (None, "None"),
    ],
    ids=["array", "float", "str", "dict", "None"],
)
async def test_outputs_that_are_not_tensors_raise_type_error(
    form: str, value: Any, given: str
) -> None:
    x = ag.ones(2, requires_grad=True)
    name = "outputs" if form in GRAD_FORMS else "tensors"
    with pytest.raises(
        TypeError, match=rf"^{name} must be a Tensor or a sequence of Tensors, got {given}"
    ):
        await call(form, value, x)
    with pytest.raises(TypeError, match=rf"^{name}\[1\] must be a Tensor, got {given}"):
        await call(form, [x.sum(), value], x)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("value", "given"),
    [(np.ones(2), r"numpy\.ndarray of shape \(2,\)"), (3, "int 3"), ({"x": 1}, "dict")],
    ids=["array", "int", "dict"],
)
async def test_inputs_that_are_not_tensors_raise_type_error(
    form: str, value: Any, given: str
) -> None:
    x = ag.ones(2, requires_grad=True)
    out = (x * x).sum()
    with pytest.raises(
        TypeError, match=rf"^inputs must be a Tensor or a sequence of Tensors, got {given}"
    ):
        await call(form, out, value)
    with pytest.raises(TypeError, match=rf"^inputs\[1\] must be a Tensor, got {given}"):
        await call(form, out, [x, value])
    assert x.grad is None


@pytest.mark.parametrize("form", FORMS)
async def test_outputs_and_inputs_may_be_any_iterable_of_tensors(form: str) -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    out = (x * x).sum()
    outs = (t for t in [out]) if form not in ("Tensor.backward", "Tensor.abackward") else out
    res = await call(form, outs, (t for t in [x]))
    got = res[0] if form in GRAD_FORMS else x.grad
    np.testing.assert_allclose(got.numpy(), [2.0, 4.0])


@pytest.mark.parametrize("form", FORMS)
async def test_empty_inputs_raise_runtime_error(form: str) -> None:
    x = ag.ones(2, requires_grad=True)
    what = "grad" if form in GRAD_FORMS else "backward"
    with pytest.raises(RuntimeError, match=rf"`inputs` argument to `{what}\(\)` cannot be empty"):
        await call(form, x.sum(), [])


# ---------------------------------------------------------------------------------- flags
FLAGS: Final = {
    # flag: (forms that take it, whether None is accepted)
    "retain_graph": (FORMS, True),
    "create_graph": (FORMS, False),
    "allow_unused": (GRAD_FORMS, True),
    "materialize_grads": (GRAD_FORMS, False),
    "is_grads_batched": (GRAD_FORMS, False),
}
FLAG_CASES: Final = [(flag, form) for flag, (forms, _) in FLAGS.items() for form in forms]


@pytest.mark.parametrize(("flag", "form"), FLAG_CASES)
async def test_flag_that_is_not_a_bool_raises_type_error(flag: str, form: str) -> None:
    x = ag.ones(2, requires_grad=True)
    out = (x * x).sum()
    none_ok = FLAGS[flag][1]
    allowed = "True, False or None" if none_ok else "True or False"
    # torch also takes 0 and 1 (its C++ argument parser reads them as bools); asyncgrad asks for
    # a bool, and like torch it refuses NumPy's bool.
    for value, given in [
        (1, "int 1"),
        ("yes", "str"),
        (np.True_, r"numpy\.bool"),
        *([] if none_ok else [(None, "None")]),
    ]:
        with pytest.raises(TypeError, match=rf"^{flag} must be {allowed}, got {given}"):
            await call(form, out, x, **{flag: value})
    assert x.grad is None


@pytest.mark.parametrize("form", FORMS)
async def test_flags_accept_bools_and_none_where_torch_does(form: str) -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    out = (x * x).sum()
    kw: dict[str, Any] = {"retain_graph": None, "create_graph": False}
    if form in GRAD_FORMS:
        kw.update(allow_unused=None, materialize_grads=False, is_grads_batched=False)
    await call(form, out, x, **kw)
    await call(form, (x * x).sum(), x, retain_graph=True, create_graph=True)


@pytest.mark.parametrize("form", ["grad", "grad_sync", "backward", "backward_sync"])
async def test_priority_must_be_an_int(form: str) -> None:
    x = ag.ones(2, requires_grad=True)
    for value, given in [(1.5, "float 1.5"), (True, "bool True"), ("1", "str"), (None, "None")]:
        with pytest.raises(TypeError, match=rf"^priority must be an int, got {given}"):
            await call(form, x.sum(), x, priority=value)
    assert x.grad is None


@pytest.mark.parametrize("form", ["grad", "grad_sync", "backward", "backward_sync"])
async def test_priority_accepts_numpy_integers(form: str) -> None:
    x = ag.ones(2, requires_grad=True)
    await call(form, x.sum(), x, priority=np.int64(3))
    await call(form, x.sum(), x, priority=-2)


async def test_grad_materialize_grads_with_allow_unused_false_is_a_value_error() -> None:
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="allow_unused=False"):
        await call("grad", x.sum(), x, allow_unused=False, materialize_grads=True)


# ------------------------------------------------------------------ nothing changed on rejection
@pytest.mark.parametrize("form", BACKWARD_FORMS)
@pytest.mark.parametrize(
    "bad",
    ["input does not require grad", "input is an array", "bad gradient", "bad flag", "bad shape"],
)
async def test_rejected_backward_changes_nothing(form: str, bad: str) -> None:
    # torch marks the first non-leaf input to retain its grad before it finds that a later
    # argument is wrong; here every argument is checked first.
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2  # a non-leaf input: backward(inputs=[h]) makes it retain its grad
    out = (h * h).sum()
    inputs: list[Any] = [h, x]
    kw: dict[str, Any] = {}
    gradient: Any = None
    if bad == "input does not require grad":
        inputs.append(ag.ones(2))
        error: type[Exception] = RuntimeError
    elif bad == "input is an array":
        inputs.append(np.ones(2))
        error = TypeError
    elif bad == "bad gradient":
        gradient = np.array(1.0)
        error = TypeError
    elif bad == "bad flag":
        kw["retain_graph"] = "yes"
        error = TypeError
    else:
        gradient = ag.ones(3)
        error = RuntimeError
    with pytest.raises(error):
        await call(form, out, inputs, gradient, **kw)
    assert not h.retains_grad
    with pytest.warns(UserWarning, match="not a leaf Tensor"):  # as torch warns
        assert h.grad is None
    assert x.grad is None
    # The graph is intact: a correct call still works, and only then h retains its grad.
    await call(form, out, [h, x])
    assert h.retains_grad
    np.testing.assert_allclose(h.grad.numpy(), [4.0, 8.0])
    np.testing.assert_allclose(x.grad.numpy(), [8.0, 16.0])
