"""``ag.autograd``: the public API above the engine.

``backward``/``grad`` and their ``_sync`` twins (``api.py``), custom ``Function``s
(``function.py``), ``gradcheck`` (``gradcheck.py``), the graph objects as users see them
(``graph.py``), grad modes, and ``engine`` for its settings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .. import engine
from ..engine import queue_callback, run
from ..graph.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from . import graph
from .api import backward, backward_sync, grad, grad_sync
from .function import Function, once_differentiable
from .gradcheck import gradcheck, gradgradcheck
from .variable import Variable

# ----- anomaly mode (functional and profiler load on first use: See NOTE [Lazy extras]) -----
from . import anomaly_mode  # isort: skip
from .anomaly_mode import (  # isort: skip
    detect_anomaly,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_detect_anomaly,
)

__all__ = [
    "Function",
    "Variable",
    "anomaly_mode",
    "backward",
    "backward_sync",
    "detect_anomaly",
    "enable_grad",
    "engine",
    "functional",
    "grad",
    "grad_sync",
    "gradcheck",
    "gradgradcheck",
    "graph",
    "inference_mode",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "once_differentiable",
    "profiler",
    "queue_callback",
    "run",
    "set_detect_anomaly",
    "set_grad_enabled",
]


if TYPE_CHECKING:
    from . import functional, profiler


def __getattr__(name: str) -> Any:
    if name in ("functional", "profiler"):
        return importlib.import_module(f"{__name__}.{name}")
    from .._torch_names import missing  # See NOTE [Names torch has]

    raise missing(__name__, name)
