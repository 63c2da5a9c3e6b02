"""A name torch has and asyncgrad does not provide raises NotProvidedError naming torch's API
(NOTE [Names torch has] in asyncgrad/_torch_names.py); a name torch does not have raises Python's
usual AttributeError; either way ``hasattr`` is False and ``getattr`` with a default works."""

from __future__ import annotations

import pathlib
import runpy
from typing import Any

import pytest

import asyncgrad as ag
from asyncgrad import _torch_names
from asyncgrad._torch_names import NotProvidedError

# Names torch has that asyncgrad does not provide (each under a rule of tests/torch_coverage.py's
# EXCLUDED, so they stay missing): one per namespace with a module __getattr__.
NOT_PROVIDED = [
    (lambda: ag, "asyncgrad", "sparse_coo_tensor"),
    (lambda: ag.zeros(2), "asyncgrad.Tensor", "q_scale"),
    (lambda: ag.nn.functional, "asyncgrad.nn.functional", "has_torch_function"),
    (lambda: ag.autograd, "asyncgrad.autograd", "forward_ad"),
]


@pytest.mark.parametrize(("obj", "namespace", "name"), NOT_PROVIDED)
def test_a_name_torch_has_says_it_is_not_provided(obj: Any, namespace: str, name: str) -> None:
    target = obj()
    torch_name = "torch" + namespace[len("asyncgrad") :] + "." + name
    with pytest.raises(NotProvidedError, match=rf"asyncgrad does not provide {torch_name} "):
        getattr(target, name)
    with pytest.raises(NotImplementedError):
        getattr(target, name)
    with pytest.raises(AttributeError) as info:
        getattr(target, name)
    assert info.value.name == name
    assert not hasattr(target, name)
    assert getattr(target, name, "default") == "default"


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (lambda: ag, "module 'asyncgrad' has no attribute 'no_such_name'"),
        (lambda: ag.nn, "module 'asyncgrad.nn' has no attribute 'no_such_name'"),
        (lambda: ag.zeros(1), "'Tensor' object has no attribute 'no_such_name'"),
        (lambda: ag.optim, "module 'asyncgrad.optim' has no attribute 'no_such_name'"),
    ],
)
def test_a_name_torch_lacks_raises_the_usual_error(obj: Any, message: str) -> None:
    with pytest.raises(AttributeError, match=f"^{message}$") as info:
        obj().no_such_name  # noqa: B018
    assert not isinstance(info.value, NotProvidedError)


def test_from_import_of_a_missing_name_is_an_import_error() -> None:
    with pytest.raises(ImportError, match="cannot import name 'sparse_coo_tensor'"):
        exec("from asyncgrad import sparse_coo_tensor", {})


def test_the_names_are_torchs() -> None:
    """The generated file is the installed torch's names (regenerate with
    scripts/torch_names.py after changing the pinned torch)."""
    torch = pytest.importorskip("torch", reason="compares with torch (pip install torch)")
    if torch.__version__.split("+")[0] != _torch_names.TORCH_VERSION:
        pytest.skip(f"the names are torch {_torch_names.TORCH_VERSION}'s, not {torch.__version__}")
    script = runpy.run_path(
        str(pathlib.Path(__file__).parent.parent / "scripts" / "torch_names.py")
    )
    assert script["render"]() == pathlib.Path(_torch_names.__file__).read_text()
