"""Doctest collection in a compiled build (See NOTE [Compiled modules] in asyncgrad/_build.py).

A module compiled by mypyc imports as its extension, which pytest refuses to collect from its
``.py`` file: those doctests run in the pure build, and are left out here.
"""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    if collection_path.suffix != ".py" or "asyncgrad" not in collection_path.parts:
        return None
    stem = collection_path.with_suffix("")
    if any(stem.with_name(stem.name + suffix).exists() for suffix in EXTENSION_SUFFIXES):
        return True
    return None
