"""``Module.register_load_state_dict_post_hook`` against torch's: the calls, their order, the
keys a hook may change in place, and the errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import asyncgrad as ag

torch = pytest.importorskip("torch", reason="torch is the reference of these tests")


def _model(lib: Any) -> Any:
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(3, 2), lib.nn.Sequential(lib.nn.Linear(2, 2)))


def _state(lib: Any, model: Any) -> dict[str, Any]:
    return {k: lib.ones(v.shape) * 0.5 for k, v in model.state_dict().items()}


def _run(lib: Any, drop: str | None, clear: bool, strict: bool) -> tuple[list[Any], Any, Any]:
    model = _model(lib)
    calls: list[Any] = []

    def hook(name: str) -> Any:
        def f(module: Any, keys: Any) -> None:
            calls.append((name, type(module).__name__, list(keys.missing_keys)))
            if clear:
                keys.missing_keys.clear()

        return f

    handles = [
        model.register_load_state_dict_post_hook(hook("outer")),
        model[1].register_load_state_dict_post_hook(hook("inner")),
        model[1][0].register_load_state_dict_post_hook(hook("leaf")),
    ]
    state = _state(lib, model)
    if drop is not None:
        del state[drop]
    try:
        result: Any = model.load_state_dict(state, strict=strict)
        result = (list(result.missing_keys), list(result.unexpected_keys))
    except RuntimeError as e:
        result = type(e)
    for h in handles:
        h.remove()
    return calls, result, model[0].weight.detach().numpy().copy()


@pytest.mark.parametrize(
    ("drop", "clear", "strict"),
    [
        (None, False, True),
        ("0.bias", False, False),
        ("0.bias", True, True),
        ("0.bias", False, True),
    ],
    ids=["all keys", "missing, not strict", "missing, cleared", "missing, strict"],
)
def test_post_hooks_as_torch(drop: str | None, clear: bool, strict: bool) -> None:
    ours = _run(ag, drop, clear, strict)
    theirs = _run(torch, drop, clear, strict)
    assert ours[0] == theirs[0]  # the calls: children's hooks first, with the missing keys
    assert ours[1] == theirs[1]  # the keys returned, or the error
    np.testing.assert_allclose(ours[2], theirs[2])  # the values were copied either way


def test_a_hook_that_returns_a_value_raises() -> None:
    model = _model(ag)
    model.register_load_state_dict_post_hook(lambda m, keys: keys)
    with pytest.raises(AssertionError, match="are not expected to return new values"):
        model.load_state_dict(_state(ag, model))


def test_a_removed_hook_is_not_called_and_a_size_mismatch_copies_nothing() -> None:
    model = _model(ag)
    calls: list[str] = []
    handle = model.register_load_state_dict_post_hook(lambda m, keys: calls.append("x"))
    handle.remove()
    model.load_state_dict(_state(ag, model))
    assert calls == []
    model.register_load_state_dict_post_hook(lambda m, keys: calls.append("y"))
    before = model[0].weight.detach().numpy().copy()
    state = _state(ag, model)
    state["0.weight"] = ag.zeros(5, 5)
    with pytest.raises(RuntimeError, match=r"size mismatch for 0\.weight"):
        model.load_state_dict(state)
    np.testing.assert_array_equal(model[0].weight.detach().numpy(), before)
    assert calls == []
